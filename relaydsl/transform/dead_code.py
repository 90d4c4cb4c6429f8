"""Dead-code elimination: drop ``let`` bindings whose variable is unused and whose value is pure.

A value is pure when evaluating it can have no effect other than its result:
variables, constants, ops and constructors applied to pure arguments, tuples,
projections, function literals (making a closure runs nothing). Calls of
closures or globals may write references, so their lets stay.

Besides saving work, this keeps the adjoint of dead code out of gradients: a
dead ``sqrt(abs(x - x))`` would otherwise send ``0 * inf = nan`` back to ``x``,
where jax.grad (and the first-order transform) give 0.

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(2), float32]) {
...   let %unused = exp(%x);
...   let %y = tanh(%x);
...   %y
... }'''))
>>> print(eliminate_dead_code(mod)["main"].body)
let %y = tanh(%x: Tensor[(2,), float32]);
%y
"""
from __future__ import annotations

from relaydsl.ir.expr import Expr, Let
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator, free_vars
from relaydsl.transform._util import ascribes, is_pure, rewrite_functions


def eliminate_dead_code(mod: IRModule) -> IRModule:
    """A copy of `mod` without dead pure lets (in every function, nested ones included)."""
    return rewrite_functions(mod, remove_dead_lets)


def remove_dead_lets(expr: Expr) -> Expr:
    return _DeadLets().visit(expr)


class _DeadLets(ExprMutator):
    def visit_let(self, let: Let) -> Expr:
        chain: list[Let] = []
        node: Expr = let
        while isinstance(node, Let):
            chain.append(node)
            node = node.body
        body = self.visit(node)
        used = set(free_vars(body))
        kept: list[tuple[Let, Expr]] = []
        for binding in reversed(chain):
            value = self.visit(binding.value)
            if binding.var not in used and is_pure(value) and \
                    not ascribes(binding.var, value):  # it may type a parameter: keep it
                continue
            used.update(free_vars(value))
            kept.append((binding, value))
        for binding, value in kept:  # innermost first
            if value is binding.value and body is binding.body:
                body = binding
            else:
                body = Let(binding.var, value, body, span=binding.span)
        return body
