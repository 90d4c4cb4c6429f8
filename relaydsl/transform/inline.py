"""Inlining of calls to non-recursive global functions.

``inline_globals(mod)`` replaces every call ``@f(a, b)`` of a global that is not
part of a recursive cycle and is not polymorphic (no type parameters) by
``let %x' = a; let %y' = b; <body of f, with fresh variables>``. In the
copy, annotations that mention the callee's shape variables (``("n", 784)``)
are dropped: they would tie the caller to the callee's variables; inference
gives the inlined body its types at this call. A function literal applied on
the spot, ``(fn (%x) {...})(a)`` (what a grad of a lambda becomes), is inlined
the same way. A whole
program then becomes one function, which lets the first-order gradient, fusion
and the static execution plan see through calls between decorated functions
(a loss calling its model, Figure 4). Callees are inlined bottom-up, so a chain
of calls disappears in one pass.

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @sq(%x: Tensor[(2), float32]) { multiply(%x, %x) }
... def @main(%y: Tensor[(2), float32]) { add(@sq(%y), %y) }'''))
>>> print(inline_globals(mod)["main"].body)
%0 = (
  let %x: Tensor[(2,), float32] = %y: Tensor[(2,), float32];
  multiply(%x, %x)
);
add(%0, %y)
"""
from __future__ import annotations

from relaydsl.ir.adt import PatternVar
from relaydsl.ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator, post_order, type_vars_of
from relaydsl.transform._util import is_primitive, retyped
from relaydsl.typing.infer import call_graph_sccs


def inline_globals(mod: IRModule) -> IRModule:
    """A copy of `mod` where calls of non-recursive, monomorphic globals are inlined."""
    out = mod.copy()
    user = list(out.user_functions())
    inlinable: dict[GlobalVar, Function] = {}
    changed = False
    for scc in call_graph_sccs(out, user):  # callees first
        gv = scc[0]
        fn = _Inline(inlinable).visit(out[gv])
        assert isinstance(fn, Function)
        if fn is not out[gv]:
            out.add(gv, fn)
            changed = True
        if len(scc) == 1 and not fn.type_params and not _calls(fn, gv):
            inlinable[gv] = fn
    return retyped(out, types_kept=not changed)


def _calls(fn: Function, gv: GlobalVar) -> bool:
    found = [False]

    def note(e: Expr) -> None:
        found[0] = found[0] or e is gv

    post_order(fn.body, note)
    return found[0]


class _Inline(ExprMutator):
    def __init__(self, inlinable: dict[GlobalVar, Function]):
        super().__init__()
        self.inlinable = inlinable

    def visit_call(self, call: Call) -> Expr:
        if isinstance(call.op, GlobalVar):
            callee = self.inlinable.get(call.op)
        elif isinstance(call.op, Function) and not is_primitive(call.op):
            callee = self.visit(call.op)  # a literal applied on the spot: (fn (x) ...)(a)
        else:
            callee = None
        if callee is None:
            return super().visit_call(call)
        args = [self.visit(a) for a in call.args]
        assert isinstance(callee, Function)  # a function's rewrite is a function
        copy = fresh_copy(callee)
        body = copy.body
        for param, arg in reversed(list(zip(copy.params, args))):
            body = Let(param, arg, body, span=call.span)
        return body


def fresh_copy(fn: Function) -> Function:
    """`fn` with every variable it binds replaced by a new one (same name and annotation)."""
    out = _Fresh().visit_function(fn)
    assert isinstance(out, Function)
    return out


class _Fresh(ExprMutator):
    """Copies a function, binding a new variable wherever the original binds one."""

    def __init__(self) -> None:
        super().__init__()
        self.renamed: dict[Var, Var] = {}

    def bind(self, v: Var) -> Var:
        annotation = v.type_annotation
        if annotation is not None and type_vars_of(annotation):
            annotation = None
        new = Var(v.name_hint, annotation, span=v.span)
        self.renamed[v] = new
        return new

    def visit_var(self, v: Var) -> Expr:
        return self.renamed.get(v, v)

    def visit_let_var(self, v: Var) -> Var:
        return self.bind(v) if v not in self.renamed else self.renamed[v]

    def visit_function(self, f: Function) -> Expr:
        for p in f.params:
            self.bind(p)
        return super().visit_function(f)

    def visit_pattern(self, p):
        if isinstance(p, PatternVar):
            self.bind(p.var)
        return super().visit_pattern(p)
