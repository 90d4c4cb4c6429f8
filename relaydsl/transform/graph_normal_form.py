"""To graph normal form: inline let-bound pure dataflow so that it forms a DAG.

A let whose value is pure dataflow -- operator calls, tuples, projections, constants,
variables and calls of primitive functions, built only from such -- is removed, and its
uses refer to the value's node itself: a value used twice becomes one shared node, not two
copies of a tree. This is the form operator fusion (fuse_ops.py) reads: producers and
consumers are linked directly.

Example input::

    fn (%x) {
      let %a = exp(%x);
      let %b = add(%a, %a);
      let %f = fn (%y) { multiply(%y, %a) };
      %f(%b)
    }

Output (``%a`` is used inside the closure, so it stays bound; ``%f`` is a closure, so it
stays bound; ``%b`` is inlined into its one use)::

    fn (%x) {
      let %a = exp(%x);
      let %f = fn (%y) { multiply(%y, %a) };
      %f(add(%a, %a))
    }

and ``let %a = exp(%x); add(%a, %a)`` becomes ``add(%0, %0)`` where both arguments are
the one node ``%0 = exp(%x)``.

Contract. Lets whose value has effects (references, collectives), builds a closure, a
constructor value or calls a non-primitive function stay, in order; so does a let whose
annotation ascribes a type its value does not have of its own (see ``_util.ascribes``):
re-typing needs it. A computation is only inlined into uses in the same scope as its let
(not inside a nested function, an ``if`` branch or a ``match`` clause), so it is never moved
into a loop body, a branch or a closure it was not in; a let of a variable, constant, global
or operator (no computation) is inlined everywhere. A pure
let with no use disappears. The result is re-typed. In graph form a node shared by two uses
means one value: the interpreter evaluates such a pure node once per frame, and
to_a_normal_form (a_normal_form.py) binds each node once for the evaluators that do not.
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.ir.adt import Constructor
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, Let, Op, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator, scoped_children
from relaydsl.ir.visitor import deep_recursion
from relaydsl.transform._util import ascribes, communicates, is_primitive
from relaydsl.transform.pass_infra import Pass

ATOMS = (Var, Constant, GlobalVar, Op, Constructor)


def is_dataflow(expr: Expr, memo: dict[Expr, bool] | None = None) -> bool:
    """Whether `expr` is pure dataflow: atoms, op calls, primitive calls, tuples, projections."""
    memo = {} if memo is None else memo
    key = expr
    if key in memo:
        return memo[key]
    if isinstance(expr, ATOMS):
        result = True
    elif isinstance(expr, Call):
        callee_ok = (isinstance(expr.op, Op) and not communicates(expr)) or \
            is_primitive(expr.op)
        result = callee_ok and all(is_dataflow(a, memo) for a in expr.args)
    elif isinstance(expr, Tuple):
        result = all(is_dataflow(f, memo) for f in expr.fields)
    elif isinstance(expr, TupleGetItem):
        result = is_dataflow(expr.tuple_value, memo)
    else:
        result = False
    memo[key] = result
    return result


def _same_scope_lets(body: Expr) -> set[Var]:
    """The let-bound variables all of whose uses are in the scope of their let.

    A scope is a function body, an if branch or a match clause; everything else (let values
    and bodies, call arguments, an if's condition) is in its parent's scope.
    """
    let_scope: dict[Var, int] = {}
    use_scopes: dict[Var, set[int]] = {}
    seen: set[tuple[Expr, int]] = set()
    counter = [0]

    def new_scope() -> int:
        counter[0] += 1
        return counter[0]

    stack: list[tuple[Expr, int]] = [(body, 0)]
    while stack:
        expr, scope = stack.pop()
        if (expr, scope) in seen:
            continue
        seen.add((expr, scope))
        if isinstance(expr, Var):
            use_scopes.setdefault(expr, set()).add(scope)  # a let's own variable is in its scope
        elif not is_primitive(expr):
            if isinstance(expr, Let):
                let_scope[expr.var] = scope
            stack += [(child, scope if opens is None else new_scope())
                      for child, opens in scoped_children(expr)]
    return {v for v, s in let_scope.items() if use_scopes.get(v, set()) <= {s}}


# The deepest expression inlining builds: a longer chain of lets (20,000 statements of
# ``x = x + 1.0``) keeps every MAX_DEPTH-th let, so that the passes and type inference, which
# recurse a few frames per level, stay within Python's recursion limit. Fusion groups are
# shallower still (fuse_ops.MAX_FUSE_DEPTH).
MAX_DEPTH = 1000


class _ToGraph(ExprMutator):
    def __init__(self, inlinable: set[Var]):
        super().__init__()
        self.inlinable = inlinable
        self.subst: dict[Var, Expr] = {}
        self.pure_memo: dict[Expr, bool] = {}
        self.depths: dict[Expr, int] = {}  # nodes hash by identity

    def depth(self, e: Expr) -> int:
        """How deeply `e`'s dataflow nests (the nodes under it were measured before it)."""
        found = self.depths.get(e)
        if found is None:
            children = e.args if isinstance(e, Call) else e.fields if isinstance(e, Tuple) \
                else (e.tuple_value,) if isinstance(e, TupleGetItem) else ()
            found = self.depths[e] = 1 + max(map(self.depth, children), default=-1)
        return found

    def visit_var(self, var: Var) -> Expr:
        return self.subst.get(var, var)

    def visit_let(self, let: Let) -> Expr:
        kept: list[tuple[Let, Expr]] = []
        node: Expr = let
        while isinstance(node, Let):
            value = self.visit(node.value)
            if not ascribes(node.var, value) and (isinstance(value, ATOMS) or (
                    node.var in self.inlinable and is_dataflow(value, self.pure_memo)
                    and self.depth(value) < MAX_DEPTH)):
                self.subst[node.var] = value
            else:
                kept.append((node, value))
            node = node.body
        body = self.visit(node)
        for old, value in reversed(kept):
            if value is old.value and body is old.body:
                body = old
            else:
                body = Let(old.var, value, body, span=old.span)
        return body


def graph_normal_form_function(fn: Function) -> Function:
    """The graph normal form of one function (nested functions included)."""
    with deep_recursion():
        result = _ToGraph(_same_scope_lets(fn)).visit(fn)
    assert isinstance(result, Function)
    return result


@dataclass(frozen=True)
class ToGraphNormalForm(Pass, opt_level=0,
                        description="inline let-bound pure dataflow into a DAG of shared nodes"):
    """Every global function in graph normal form (see the module doc)."""

    def transform(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        for gv, fn in mod.functions.items():
            new = graph_normal_form_function(fn)
            if new is not fn:
                out.add(gv, new)
        return out


def to_graph_normal_form(mod: IRModule) -> IRModule:
    """``ToGraphNormalForm()(mod)``: every global function of `mod` in graph normal form."""
    return ToGraphNormalForm()(mod)


__all__ = ["ToGraphNormalForm", "to_graph_normal_form", "graph_normal_form_function",
           "is_dataflow"]
