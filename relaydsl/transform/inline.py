"""Inlining of global functions: InlineGlobals, and TVM's Inline with its inline-all mode.

All three replace a call ``@f(a, b)`` of a global that is not part of a recursive cycle and
is not polymorphic (no type parameters) by the body of ``f`` with fresh variables: an
argument that is a variable, constant or global (no computation, TVM's substitution) takes
its parameter's place, any other is bound by a ``let`` (evaluated once, where the call
was). In the copy, annotations that mention the callee's shape variables (``("n", 784)``)
are dropped: they would tie the caller to the callee's variables; inference gives the
inlined body its types at this call. Callees are inlined bottom-up, so a chain of calls
disappears in one pass. A recursive function is never inlined (calls in its body are).

- ``inline_globals(mod)`` inlines the calls of every such global, and a function literal
  applied on the spot, ``(fn (%x) {...})(a)`` (what a grad of a lambda becomes). The
  globals stay. A whole program then becomes one function, which lets the first-order
  gradient, fusion and native code see through calls between decorated
  functions (a loss calling its model, Figure 4).
- ``inline(mod)``, TVM's Inline: only the globals marked ``Inline=1`` are substituted, at
  their calls and where they are mentioned as values (``if (%p) { @f } else { @g }``
  becomes a choice of function literals), then removed from the module. A global nothing
  else mentions (an entry, such as ``@main``) stays, marked or not.
- ``inline_all(mod)``: the same for every non-recursive monomorphic global, so that a
  whole network is one function (one call function for an accelerator's code generator):
  only entries and recursive functions remain.

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @sq(%x: Tensor[(2), float32], Inline=1) { multiply(%x, %x) }
... def @main(%y: Tensor[(2), float32]) { add(@sq(exp(%y)), @sq(%y)) }'''))
>>> print(inline(mod).astext())
#[version = "0.0.5"]
def @main(%y: Tensor[(2,), float32]) {
  %0 = (
    let %x: Tensor[(2,), float32] = exp(%y);
    multiply(%x, %x)
  );
  %1 = multiply(%y, %y);
  add(%0, %1)
}
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from relaydsl.ir.adt import Pattern, PatternVar
from relaydsl.ir.expr import Call, Constant, Expr, Function, GlobalVar, Let, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.span import Span
from relaydsl.ir.types import Type, TypeVar
from relaydsl.ir.visitor import ExprMutator, type_vars_of
from relaydsl.transform._util import ascribes, is_primitive, only_reached
from relaydsl.transform.pass_infra import ON_DEMAND, Pass
from relaydsl.typing.infer import call_graph_sccs, mentioned_globals


@dataclass(frozen=True)
class InlineGlobals(Pass, opt_level=2,
                    description="inline calls of non-recursive monomorphic globals and applied "
                                "function literals"):
    """Calls of non-recursive, monomorphic globals and applied function literals inlined;
    the globals stay, unless `entries` names the globals a build runs: then those no entry
    reaches any more go (each later pass would rewrite and re-type them: a third
    derivative's entry had nine such globals inlined into it)."""

    entries: tuple[str, ...] = ()

    def transform(self, mod: IRModule) -> IRModule:
        out = _inline(mod, lambda fn: True, remove=False)
        return only_reached(out, self.entries) if self.entries else out


@dataclass(frozen=True)
class Inline(Pass, opt_level=2,
             description="substitute the globals marked Inline=1 and remove them (TVM's "
                         "Inline)"):
    """TVM's Inline: the non-recursive globals marked ``Inline=1`` substituted wherever they
    are mentioned and removed, unless they are entries."""

    def transform(self, mod: IRModule) -> IRModule:
        return _inline(mod, lambda fn: fn.attrs.get("Inline", 0) == 1, remove=True)


@dataclass(frozen=True)
class InlineAll(Pass, opt_level=ON_DEMAND,
                description="substitute every non-recursive global and remove it: one "
                            "function per entry"):
    """Every non-recursive monomorphic global substituted wherever it is mentioned and
    removed: what remains are the entries (``@main``) and recursive functions."""

    def transform(self, mod: IRModule) -> IRModule:
        return _inline(mod, lambda fn: True, remove=True)


def inline_globals(mod: IRModule) -> IRModule:
    """``InlineGlobals()(mod)``."""
    return InlineGlobals()(mod)


def inline(mod: IRModule) -> IRModule:
    """``Inline()(mod)``."""
    return Inline()(mod)


def inline_all(mod: IRModule) -> IRModule:
    """``InlineAll()(mod)``."""
    return InlineAll()(mod)


def _inline(mod: IRModule, chosen: Callable[[Function], bool], *, remove: bool) -> IRModule:
    """Inline the non-recursive monomorphic `chosen` globals, callees first; with `remove`,
    also where they are mentioned as values, then drop those that are no entries."""
    out = mod.copy()
    user = list(out.user_functions())
    mentions = {gv: mentioned_globals(out[gv]) for gv in user}
    entries = {gv for gv in user if not any(gv in mentions[f] for f in user if f is not gv)}
    inlinable: dict[GlobalVar, Function] = {}
    for scc in call_graph_sccs(out, user):  # callees first
        for gv in scc:
            fn = _Inline(inlinable, applied_literals=not remove, values=remove).visit(out[gv])
            assert isinstance(fn, Function)  # a function's rewrite is a function
            if fn is not out[gv]:
                out.add(gv, fn)
        fn = out[scc[0]]
        if len(scc) == 1 and not fn.type_params and scc[0] not in mentioned_globals(fn) \
                and chosen(fn):
            inlinable[scc[0]] = fn
    if remove:
        for gv in inlinable:
            if gv not in entries:
                out.remove(gv)
    return out


class _Inline(ExprMutator):
    """Inlines the calls of the `inlinable` globals; with `applied_literals`, calls of
    function literals too; with `values`, a mention of an inlinable global that is not called
    becomes a copy of its function."""

    def __init__(self, inlinable: dict[GlobalVar, Function], *, applied_literals: bool,
                 values: bool):
        super().__init__()
        self.inlinable = inlinable
        self.applied_literals = applied_literals
        self.values = values

    def visit_call(self, call: Call) -> Expr:
        if isinstance(call.op, GlobalVar):
            callee = self.inlinable.get(call.op)
        elif isinstance(call.op, Function) and self.applied_literals \
                and not is_primitive(call.op):
            callee = self.visit(call.op)  # a literal applied on the spot: (fn (x) ...)(a)
        else:
            callee = None
        if callee is None:
            return super().visit_call(call)
        assert isinstance(callee, Function)  # a function's rewrite is a function
        return inlined_call(callee, [self.visit(a) for a in call.args], call.span)

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        fn = self.inlinable.get(gv) if self.values else None
        return gv if fn is None else fresh_copy(fn)


def inlined_call(fn: Function, args: Sequence[Expr], span: Span | None = None) -> Expr:
    """The body of `fn` applied to `args`, with fresh variables: an atomic argument (variable,
    constant, global) in place of its parameter, unless the parameter's annotation ascribes
    it a type; any other argument let-bound, in order, so it is evaluated once, as the call
    would."""
    fresh = _Fresh()
    bindings: list[tuple[Var, Expr]] = []
    for param, arg in zip(fn.params, args):
        if isinstance(arg, (Var, Constant, GlobalVar)) and not ascribes(param, arg):
            fresh.renamed[param] = arg
        else:
            bindings.append((fresh.bind(param), arg))
    body = fresh.visit(fn.body)
    for var, arg in reversed(bindings):
        body = Let(var, arg, body, span=span)
    return body


def fresh_copy(fn: Function) -> Function:
    """`fn` with every variable it binds replaced by a new one (same name and annotation)."""
    out = _Fresh().visit_function(fn)
    assert isinstance(out, Function)
    return out


class _Fresh(ExprMutator):
    """Copies a function, binding a new variable wherever the original binds one. Annotations
    (of variables, and the result types of nested functions) that mention the callee's shape
    variables are dropped; those of a polymorphic function literal in it, ``fn<n>(%x:
    Tensor[(n, 6)]) -> Tensor[(n, 3)]``, that mention only its own type parameters stay:
    they are its type, the same at every call."""

    def __init__(self) -> None:
        super().__init__()
        self.renamed: dict[Var, Expr] = {}
        self.own: frozenset[TypeVar] = frozenset()  # type params of the literals copied now

    def _kept(self, t: Type | None) -> Type | None:
        return t if t is None or self.own.issuperset(type_vars_of(t)) else None

    def bind(self, v: Var) -> Var:
        new = Var(v.name_hint, self._kept(v.type_annotation), span=v.span)
        self.renamed[v] = new
        return new

    def visit_var(self, var: Var) -> Expr:
        return self.renamed.get(var, var)

    def visit_let_var(self, var: Var) -> Var:
        new = self.renamed.get(var)
        return new if isinstance(new, Var) else self.bind(var)

    def visit_function(self, fn: Function) -> Expr:
        outer = self.own
        self.own = outer | frozenset(fn.type_params)
        try:
            params = tuple(self.bind(p) for p in fn.params)
            return Function(params, self.visit(fn.body), self._kept(fn.ret_type), fn.type_params,
                            fn.attrs, span=fn.span)
        finally:
            self.own = outer

    def visit_pattern(self, p: Pattern) -> Pattern:
        if isinstance(p, PatternVar):
            self.bind(p.var)
        return super().visit_pattern(p)
