"""Results written in place: the kernels computing an entry's result write into the arrays
Python returns.

When the entry's result is tensors (and tuples of them) of static shapes and the entry
computes them with kernel calls of its own body, Python makes the result's arrays before
the call and hands their addresses to native code (``Word.RESULTS``); those kernel calls
write their outputs there instead of into the arena, and the result needs no copy out
(1.9 MB of gradients for an MLP's backward pass: 0.2 ms a call). A result leaf computed
elsewhere (in a loop, a branch, another function; an argument or a constant) is copied as
before: Python sees that its address is not the array's.
"""
from __future__ import annotations

from relaydsl.ir.expr import Call, Expr, Function, Let, Op, Tuple, TupleGetItem, Var
from relaydsl.ir.types import TupleType, Type
from relaydsl.transform.fuse_ops import is_primitive

# For a kernel call (by id): the result leaf each of its outputs is, or None.
Destinations = dict[Call, list[int | None]]


def leaf_count(t: Type) -> int:
    return sum(leaf_count(f) for f in t.fields) if isinstance(t, TupleType) else 1


def destinations(fn: Function) -> Destinations:
    """Which outputs of which kernel calls in `fn`'s body are leaves of its result.

    Only lets of the body's straight-line spine are looked at (tuples and projections
    followed through them): a value made in a branch or a loop may not be the one returned.
    """
    bound: dict[Var, Expr] = {}
    e: Expr = fn.body
    while isinstance(e, Let):
        bound[e.var] = e.value
        e = e.body
    found: Destinations = {}
    taken: set[tuple[Call, int]] = set()
    leaf = 0

    def visit(x: Expr, t: Type) -> None:
        nonlocal leaf
        source = _resolve(x, bound)
        if isinstance(source, Tuple):
            for f, ft in zip(source.fields, t.fields):  # type: ignore[attr-defined]
                visit(f, ft)
            return
        n = leaf_count(t)
        if source is not None:
            call, first = source
            outputs = found.setdefault(call, [None] * leaf_count(call.checked_type))
            for k in range(n):
                if (call, first + k) not in taken:  # a leaf returned twice: one copy
                    taken.add((call, first + k))
                    outputs[first + k] = leaf + k
        leaf += n

    visit(e, fn.body.checked_type)
    return found


def _resolve(x: Expr, bound: dict[Var, Expr]) -> Tuple | tuple[Call, int] | None:
    """What `x` is on the spine: a tuple expression, or the kernel call whose outputs from
    the returned index on are its leaves; None for anything else."""
    while isinstance(x, Var) and isinstance(bound.get(x), (Var, Tuple, TupleGetItem)):
        x = bound[x]
    if isinstance(x, Tuple):
        return x
    if isinstance(x, Var):
        value = bound.get(x)
        return (value, 0) if is_kernel_call(value, bound) else None  # type: ignore[return-value]
    if isinstance(x, TupleGetItem):
        inner = _resolve(x.tuple_value, bound)
        if isinstance(inner, Tuple):
            return _resolve(inner.fields[x.index], bound)
        t = x.tuple_value.checked_type
        if inner is None or not isinstance(t, TupleType):
            return None
        call, first = inner
        return call, first + sum(leaf_count(f) for f in t.fields[:x.index])
    return None


def is_kernel_call(e: Expr | None, bound: dict[Var, Expr]) -> bool:
    """Whether `e` calls a kernel: a primitive function's (let-bound or not) or an op's."""
    if not isinstance(e, Call):
        return False
    op = bound.get(e.op, e.op) if isinstance(e.op, Var) else e.op
    return isinstance(op, Op) or (isinstance(op, Function) and is_primitive(op))
