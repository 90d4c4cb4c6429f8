"""Dead-code elimination: drop ``let`` bindings whose variable is unused and whose value is pure;
with ``inline_once``, also inline a pure value bound once and used once (TVM's
``DeadCodeElimination(inline_once=True)``).

A value is pure when evaluating it can have no effect other than its result:
variables, constants, ops and constructors applied to pure arguments, tuples,
projections, function literals (making a closure runs nothing). Calls of
closures or globals may write references, so their lets stay.

Besides saving work, this keeps the adjoint of dead code out of gradients: a
dead ``sqrt(abs(x - x))`` would otherwise send ``0 * inf = nan`` back to ``x``,
where jax.grad (and the first-order transform) give 0.

Inlining a value used once moves it to its use: being pure, it cannot change the order of
effects, and it runs at most as often as before -- once, or not at all when its use is in
a branch not taken. It is never moved into a function literal (a loop body, a closure),
which may run many times; a let whose annotation ascribes a type stays::

    let %x = add(1f, 1f);                          let %x = add(1f, 1f);
    let %f = fn (%y) {                             let %f = fn (%y) {
      let %z = add(%y, %y);        inline_once       add(%x, add(%y, %y))
      add(%x, %z)                      =>          };
    };                                             (%f(2f), %f(3f))
    (%f(2f), %f(3f))

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

from dataclasses import dataclass

from relaydsl.ir.expr import Expr, Function, Let, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator, ExprVisitor, FreeVarSets, free_vars, let_chain
from relaydsl.transform._util import ascribes, is_pure, rewrite_functions
from relaydsl.transform.pass_infra import ON_DEMAND, Pass


@dataclass(frozen=True)
class DeadCodeElimination(Pass, opt_level=2,
                          description="drop let bindings of pure values that are never used"):
    """Every function without its dead pure lets (nested functions included)."""

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_functions(mod, remove_dead_lets)


@dataclass(frozen=True)
class InlineOnce(Pass, opt_level=ON_DEMAND,
                 description="dead-code elimination that also inlines a pure let used once "
                             "(never into a function)"):
    """TVM's ``DeadCodeElimination(inline_once=True)``: dead pure lets dropped, and pure lets
    used once inlined at their use."""

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_functions(mod, lambda fn: remove_dead_lets(fn, inline_once=True))


def eliminate_dead_code(mod: IRModule, *, inline_once: bool = False) -> IRModule:
    """``DeadCodeElimination()(mod)``, or ``InlineOnce()(mod)`` with `inline_once`."""
    return (InlineOnce() if inline_once else DeadCodeElimination())(mod)


def remove_dead_lets(expr: Expr, *, inline_once: bool = False) -> Expr:
    """`expr` without dead pure lets; with `inline_once`, pure lets used once inlined."""
    uses = _Uses()
    if inline_once:
        uses.visit(expr)
    return _DeadLets(uses).visit(expr)


class _Uses(ExprVisitor):
    """How often each variable occurs, and which let-bound ones occur in a function literal
    inside the scope of their let (where inlining could make their value run more often)."""

    def __init__(self) -> None:
        super().__init__()
        self.count: dict[Var, int] = {}
        self.in_nested_function: set[Var] = set()
        self._let_depth: dict[Var, int] = {}
        self._depth = 0  # how many function literals enclose the node visited

    def visit(self, expr: Expr) -> None:
        if isinstance(expr, Var):  # every occurrence counts, so no memo
            self.count[expr] = self.count.get(expr, 0) + 1
            if self._depth > self._let_depth.get(expr, self._depth):
                self.in_nested_function.add(expr)
            return
        super().visit(expr)

    def visit_let(self, let: Let) -> None:
        node: Expr = let
        while isinstance(node, Let):  # the bound variable is no occurrence
            self._let_depth[node.var] = self._depth
            self.visit(node.value)
            node = node.body
        self.visit(node)

    def visit_function(self, fn: Function) -> None:
        self._depth += 1
        self.visit(fn.body)
        self._depth -= 1

    def inlinable(self, var: Var) -> bool:
        return self.count.get(var, 0) == 1 and var not in self.in_nested_function


def _types_others(var: Var, value: Expr) -> bool:
    """Whether a dead let of `value` to `var` may still type other variables: its
    annotation may be the only type of a variable `value` reads (a parameter left to
    inference). Not when each of them has its own annotation."""
    return ascribes(var, value) and \
        any(v.type_annotation is None for v in free_vars(value))


class _DeadLets(ExprMutator):
    def __init__(self, uses: _Uses):
        super().__init__()
        self.uses = uses
        self.inlined: dict[Var, Expr] = {}
        self.free = FreeVarSets()

    def visit(self, expr: Expr) -> Expr:
        if isinstance(expr, Var):  # not memoised: an inlined variable is replaced wherever
            return self.inlined.get(expr, expr)
        return super().visit(expr)

    def visit_let(self, let: Let) -> Expr:
        chain, node = let_chain(let)
        bindings: list[tuple[Let, Expr]] = []
        for binding in chain:  # in order: an inlined value is in place before its use
            value = self.visit(binding.value)
            if self.uses.inlinable(binding.var) and is_pure(value) and \
                    not ascribes(binding.var, value):
                self.inlined[binding.var] = value
            else:
                bindings.append((binding, value))
        body = self.visit(node)
        used = set(self.free(body))
        kept: list[tuple[Let, Expr]] = []
        for binding, value in reversed(bindings):
            if binding.var not in used and is_pure(value) and \
                    not _types_others(binding.var, value):
                continue
            used.update(self.free(value))
            kept.append((binding, value))
        for binding, value in kept:  # innermost first
            if value is binding.value and body is binding.body:
                body = binding
            else:
                body = Let(binding.var, value, body, span=binding.span)
        return body
