"""Small helpers shared by the passes."""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Callable

from relaydsl.ir.adt import Constructor
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprMutator, post_order, type_vars_of
from relaydsl.op.registry import OpDef
from relaydsl.typing.infer import mentioned_globals

if TYPE_CHECKING:
    from relaydsl.op.collective import Collective

PRIMITIVE = Attrs({"Primitive": 1})


def is_primitive(expr: Expr) -> bool:
    """Whether `expr` is a primitive function (``attrs.Primitive == 1``, made by fuse_ops)."""
    return isinstance(expr, Function) and expr.attrs.get("Primitive", 0) == 1


def rewrite_functions(mod: IRModule, rewrite: Callable[[Function], Expr]) -> IRModule:
    """A copy of `mod` with every user function replaced by ``rewrite(fn)``: the frame of a
    pass that rewrites each function on its own (the pass infrastructure re-types them)."""
    out = mod.copy()
    for gv, fn in list(out.user_functions().items()):
        new = rewrite(fn)
        assert isinstance(new, Function)  # a function's rewrite is a function
        if new is not fn:
            out.add(gv, new)
    return out


def calls_any(e: Expr, opdefs: Collection[OpDef]) -> bool:
    """Whether `e` calls one of `opdefs` (a pass with nothing to rewrite returns at once)."""
    targets = {d.op for d in opdefs}
    found = False

    def visit(n: Expr) -> None:
        nonlocal found
        found = found or (isinstance(n, Call) and n.op in targets)

    post_order(e, visit)
    return found


def is_pure(e: Expr) -> bool:
    """Whether evaluating `e` can have no effect other than its result: variables, constants,
    ops (but collectives) and constructors applied to pure arguments, tuples, projections,
    function literals (making a closure runs nothing). Calls of closures or globals may write
    references."""
    if isinstance(e, (Var, Constant, Op, GlobalVar, Constructor, Function)):
        return True
    if isinstance(e, Tuple):
        return all(is_pure(f) for f in e.fields)
    if isinstance(e, TupleGetItem):
        return is_pure(e.tuple_value)
    if isinstance(e, Call):
        return isinstance(e.op, (Op, Constructor)) and not communicates(e) and \
            all(is_pure(a) for a in e.args)
    return False


def collective_of(fn: Function) -> Collective | None:
    """The collective of a primitive function that calls a collective op (OPAQUE, a call
    FuseOps puts in a function of its own), which backends run after its kernel; else
    None."""
    found: list[Collective] = []

    def visit(n: Expr) -> None:
        if isinstance(n, Call) and isinstance(n.op, Op):
            collective = n.op.definition.traits.collective
            if collective is not None:
                found.append(collective)

    post_order(fn.body, visit)
    return found[0] if found else None


def communicates(e: Expr) -> bool:
    """Whether `e` is a call of a collective op (``Traits.collective``: psum): every rank
    runs it where and as often as the program says, and waits for the others there, so it is
    not pure: folding, merging, moving or dropping it on one rank would leave the others
    waiting, or change what they receive."""
    return isinstance(e, Call) and isinstance(e.op, Op) and \
        e.op.definition.traits.collective is not None


def ascribes(var: Var, value: Expr) -> bool:
    """Whether the annotation of the let-bound `var` may tell inference more than `value`
    does: a type ascription, which the re-typing after a pass would lose with the let.

    It may be the only type of a parameter left to inference (a model's weight in the loss
    that calls it, after inlining: ``let %w1: Tensor[(10, 4)] = %w``), or make a type less
    static (``relay.Any`` dims). A variable, constant or global with that same type of its own
    needs no ascription.
    """
    t = var.type_annotation
    if t is None:
        return False
    if isinstance(value, Var):
        return value.type_annotation != t
    if isinstance(value, Constant):
        return TensorType(value.data.shape, value.data.dtype.name) != t
    if isinstance(value, GlobalVar):
        return value.checked_type != t
    return True


def substitute(expr: Expr, mapping: Mapping[Var, Expr]) -> Expr:
    """`expr` with every occurrence of a variable of `mapping` replaced by its expression
    (the variables are free in `expr`: variables are unique, so no capture can occur)."""
    return _Substitute(mapping).visit(expr)


class _Substitute(ExprMutator):
    def __init__(self, mapping: Mapping[Var, Expr]):
        super().__init__()
        self.mapping = mapping

    def visit_var(self, var: Var) -> Expr:
        return self.mapping.get(var, var)


def with_parameter_types(fn: Function) -> Function:
    """`fn` with its unannotated parameters annotated with their inferred (concrete) types.

    For a pass that replaces the op calls whose type relations inferred a parameter's type
    (a model's weights, whose shapes conv2d or batch_norm infer from their attributes):
    re-inference of the rewritten function needs those types written down.
    """
    renamed: dict[Var, Expr] = {
        p: Var(p.name_hint, p.checked_type, span=p.span) for p in fn.params
        if p.type_annotation is None and p.has_type and not type_vars_of(p.checked_type)}
    if not renamed:
        return fn
    out = substitute(fn, renamed)
    assert isinstance(out, Function)
    return out


def reached_globals(mod: IRModule, entries: Iterable[GlobalVar]) -> set[GlobalVar]:
    """`entries` and every global function of `mod` a reached function mentions (calls, or
    passes as a value), transitively."""
    reached = set(entries)
    todo = list(reached)
    while todo:
        for gv in mentioned_globals(mod.functions[todo.pop()]):
            if gv not in reached and gv in mod.functions:
                reached.add(gv)
                todo.append(gv)
    return reached


def only_reached(mod: IRModule, entries: Iterable[str]) -> IRModule:
    """`mod` without the global functions the `entries` (names of globals in it) do not
    reach: `mod` itself when they reach them all, else a copy."""
    reached = reached_globals(mod, [mod.get_global_var(name) for name in entries])
    if len(reached) == len(mod.functions):
        return mod
    out = mod.copy()
    for gv in list(out.functions):
        if gv not in reached:
            out.remove(gv)
    return out
