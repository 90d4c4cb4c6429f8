"""Common-subexpression elimination: a pure computation done twice is done once.

Two op calls are the same computation when they call the same op with the same attributes
on the same arguments: the same nodes after rewriting (a variable is itself; constants of up
to 64 elements compare by value). Tuples of the same fields, and projections ``t.i`` of the
same ``t``, likewise. The second is replaced by the first:

- in dataflow (graph form), the later node becomes a reference to the earlier one, so
  the two uses share one node, computed once where both can see it (as TVM's
  EliminateCommonSubexpr);
- a ``let``-bound call whose value an earlier ``let`` in scope already computed is dropped,
  its variable replaced by the earlier one; so is a ``let`` that only renames a variable
  (unless its annotation ascribes a type, ``_util.ascribes``).
  Bindings made inside a function body, an ``if`` branch or a ``match`` clause are
  forgotten at its end: the variable is out of scope there. (Sibling let blocks -- two
  inlined calls of one function -- therefore share only their dataflow; in graph normal
  form, where let-bound dataflow is inlined, everything merges.)

Only op calls are merged: every op is a pure function of its arguments and attributes
(dropout's mask is a function of its key operand), but a collective (psum: two calls are two
exchanges with the other ranks, ``_util.communicates``). Calls of closures and globals may write
references, and constructing a data value allocates it, so those are never merged; nor is
anything `skip(expr)` says to keep (TVM's ``fskip``).

Before / after (tanh(%x) once; the second exp merged into the first)::

    let %a = tanh(%x);                      let %a = tanh(%x);
    let %b = tanh(%x);                      add(%a, add(exp(%a), exp(%a)))
    add(%a, add(exp(%b), exp(%a)))           ^ the two exp are one node

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(2), float32]) {
...   let %a = tanh(%x);
...   let %b = tanh(%x);
...   add(%a, %b)
... }'''))
>>> print(eliminate_common_subexpr(mod)["main"].body)
let %a = tanh(%x: Tensor[(2,), float32]);
add(%a, %a)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any as AnyValue, Callable, Hashable

from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, If, Let, Match, Op, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator
from relaydsl.transform._util import ascribes, communicates, rewrite_functions
from relaydsl.transform.pass_infra import Pass

# Constants this small compare by value (two literal 1.0s are one); larger ones by identity.
_VALUE_KEYED_CONSTANT = 64


@dataclass(frozen=True)
class EliminateCommonSubexpr(Pass, opt_level=3,
                             description="compute each pure op call once: equal calls share "
                                         "one node"):
    """Every function computes each pure op call once. `skip(expr)` True keeps that op call
    or projection as it is (neither merged into an earlier one nor reused by a later one)."""

    skip: Callable[[Expr], bool] | None = None

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_functions(mod, lambda fn: _Eliminator(self.skip).visit(fn))


def eliminate_common_subexpr(mod: IRModule, skip: Callable[[Expr], bool] | None = None
                             ) -> IRModule:
    """``EliminateCommonSubexpr(skip)(mod)``."""
    return EliminateCommonSubexpr(skip)(mod)


class _Eliminator(ExprMutator):
    def __init__(self, skip: Callable[[Expr], bool] | None) -> None:
        super().__init__()
        self.skip: Callable[[Expr], bool] = skip or (lambda e: False)
        self.nodes: dict[Hashable, Expr] = {}    # computation -> its first node (anywhere)
        self.held: dict[Hashable, Var] = {}     # computation -> the let variable holding it
        self.scopes: list[list[Hashable]] = [[]]  # the keys of `held` each open scope added

    # -- what a computation is --------------------------------------------------------------
    def key(self, e: Expr) -> Hashable | None:
        """The identity of the computation `e`, or None where `e` must stay itself."""
        if isinstance(e, Call) and isinstance(e.op, Op) and not self.skip(e) \
                and not communicates(e):
            return ("call", e.op, tuple(self.operand(a) for a in e.args), e.attrs,
                    tuple(e.type_args))
        if isinstance(e, TupleGetItem) and not self.skip(e):
            return ("item", self.operand(e.tuple_value), e.index)
        if isinstance(e, Tuple) and not self.skip(e):
            return ("tuple", *(self.operand(f) for f in e.fields))
        return None

    def operand(self, e: Expr) -> AnyValue:
        if isinstance(e, Constant) and e.data.size <= _VALUE_KEYED_CONSTANT:
            return ("const", e.data.dtype.str, e.data.shape, e.data.tobytes())
        return e  # (nodes hash by identity)

    def reuse(self, e: Expr) -> Expr:
        """`e` (rewritten) or the earlier node or variable computing the same thing."""
        key = self.key(e)
        if key is None:
            return e
        found = self.held.get(key)
        if found is not None:
            return found
        return self.nodes.setdefault(key, e)

    # -- dataflow ---------------------------------------------------------------------------
    def visit(self, expr: Expr) -> Expr:
        result = super().visit(expr)
        if result is not expr and isinstance(result, Var) and not isinstance(expr, Var):
            # a let variable stands for `expr` only inside its scope: the same node met
            # elsewhere (a DAG shared across branches) is rewritten again there
            self.memo.pop(expr, None)
        return result

    def visit_call(self, call: Call) -> Expr:
        return self.reuse(super().visit_call(call))

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        return self.reuse(super().visit_tuple_getitem(t))

    def visit_tuple(self, t: Tuple) -> Expr:
        return self.reuse(super().visit_tuple(t))

    # -- bindings and their scopes ----------------------------------------------------------
    def visit_let(self, let: Let) -> Expr:
        chain: list[tuple[Let, Var, Expr]] = []
        node: Expr = let
        self.scopes.append([])
        try:
            while isinstance(node, Let):
                value = self.visit(node.value)
                if isinstance(value, Var) and not ascribes(node.var, value):
                    # an earlier let computes the same, or this one only renames a variable
                    # (inlining binds parameters so): use that variable, drop this binding
                    self.memo[node.var] = value
                else:
                    var = self.visit_let_var(node.var)
                    chain.append((node, var, value))
                    key = self.key(value)
                    if key is not None and key not in self.held:
                        self.held[key] = var
                        self.scopes[-1].append(key)
                node = node.body
            body = self.visit(node)
        finally:
            self._close_scope()
        for link, var, value in reversed(chain):
            if var is link.var and value is link.value and body is link.body:
                body = link
            else:
                body = self.rebuild_let(link, var, value, body)
        return body

    def _close_scope(self) -> None:
        for key in self.scopes.pop():
            del self.held[key]

    def _scoped(self, expr: Expr) -> Expr:
        self.scopes.append([])
        try:
            return self.visit(expr)
        finally:
            self._close_scope()

    def visit_function(self, fn: Function) -> Expr:
        params = [self._visit_bound_var(p) for p in fn.params]
        body = self._scoped(fn.body)
        if body is fn.body and all(a is b for a, b in zip(params, fn.params)):
            return fn
        return Function(tuple(params), body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    def visit_if(self, i: If) -> Expr:
        c = self.visit(i.cond)
        a, b = self._scoped(i.true_branch), self._scoped(i.false_branch)
        if c is i.cond and a is i.true_branch and b is i.false_branch:
            return i
        return If(c, a, b, span=i.span)

    def visit_match(self, m: Match) -> Expr:
        data = self.visit(m.data)
        clauses = [Clause(self.visit_pattern(c.lhs), self._scoped(c.rhs)) for c in m.clauses]
        if data is m.data and all(a.lhs is b.lhs and a.rhs is b.rhs
                                  for a, b in zip(clauses, m.clauses)):
            return m
        return Match(data, tuple(clauses), m.complete, span=m.span)
