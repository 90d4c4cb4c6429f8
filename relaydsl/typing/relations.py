"""Type relations shared by the operator families, and the context they run in.

A relation is ``rel(arg_types, attrs, ctx) -> Type | None``. The solver calls
it once every argument type is known to be a tensor (or tuple) type -- dims
may still be symbolic -- with the argument types resolved as far as they go.
It returns the output type, or None to be asked again later. It states
equalities between dims and dtypes through ``ctx`` (which unifies symbolic
dims) and reports mismatches with ``ctx.fail``.

>>> from relaydsl.ir.types import TensorType
>>> check_relation(broadcast_rel, [TensorType((3, 1)), TensorType((4,))])
Tensor[(3, 4), float32]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any as AnyValue, Callable, NoReturn, Protocol, Sequence

from relaydsl.errors import RelayTypeError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import (
    AnyDim, Dim, DType, TensorType, TupleType, Type, TypeVar, is_float, is_int, shape_to_str,
    type_to_str,
)


class RelationContext(Protocol):
    def unify_dims(self, a: Dim, b: Dim, what: str) -> Dim:
        """State a == b (binding symbolic dims); returns the representative; fails on conflict."""
        ...

    def unify_dtypes(self, a: DType, b: DType, what: str) -> DType:
        """State a == b for dtypes."""
        ...

    def unify_types(self, a: Type, b: Type, what: str) -> Type:
        """State a == b for whole types (assigns an input the relation infers)."""
        ...

    def resolve_dim(self, d: Dim) -> Dim:
        """The current value of a dim (follows symbolic bindings)."""
        ...

    def fail(self, message: str) -> NoReturn:
        """Raise a RelayTypeError located at the call being checked."""
        ...


class ConcreteContext:
    """A context for checking relations outside inference: dims equal only if identical."""

    def unify_dims(self, a: Dim, b: Dim, what: str) -> Dim:
        if isinstance(a, AnyDim):
            return b
        if isinstance(b, AnyDim) or a is b or a == b:
            return a
        self.fail(f"{what}: {type_to_str(a)} vs {type_to_str(b)}")

    def unify_dtypes(self, a: DType, b: DType, what: str) -> DType:
        if a is b or a == b:
            return a
        self.fail(f"{what}: {type_to_str(a)} vs {type_to_str(b)}")

    def unify_types(self, a: Type, b: Type, what: str) -> Type:
        if isinstance(a, TypeVar):
            return b
        if a == b:
            return a
        self.fail(f"{what}: {type_to_str(a)} vs {type_to_str(b)}")

    def resolve_dim(self, d: Dim) -> Dim:
        return d

    def fail(self, message: str) -> NoReturn:
        raise RelayTypeError(message)


def check_relation(rel: Callable[[list[Type], Attrs, RelationContext], Type | None],
                   arg_types: Sequence[Type],
                   attrs: dict[str, AnyValue] | Attrs | None = None) -> Type | None:
    """Run a relation on concrete argument types (for tests and docs)."""
    attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs or {})
    return rel(list(arg_types), attrs, ConcreteContext())


# ---- helpers for writing relations -----------------------------------------

def is_unknown(t: Type) -> bool:
    """An argument whose type is not known yet (only inputs an op `infers_inputs` can be)."""
    return isinstance(t, TypeVar)


def tensor_arg(ctx: RelationContext, t: Type, what: str) -> TensorType:
    """The argument as a TensorType, or a located failure naming what was expected."""
    if not isinstance(t, TensorType):
        ctx.fail(f"{what} must be a tensor, got {type_to_str(t)}")
    return t


def tensor_tuple_arg(ctx: RelationContext, t: Type, what: str) -> list[TensorType]:
    if not isinstance(t, TupleType):
        ctx.fail(f"{what} must be a tuple of tensors, got {type_to_str(t)}")
    return [tensor_arg(ctx, f, f"{what}[{i}]") for i, f in enumerate(t.fields)]


def normalize_axis(ctx: RelationContext, axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        ctx.fail(f"{what} {axis} is out of range for a tensor of rank {ndim}")
    return axis + ndim if axis < 0 else axis


def broadcast_dims(ctx: RelationContext, a: Dim, b: Dim, what: str = "broadcast") -> Dim:
    """The broadcast of two dims: equal, or one of them 1; symbolic dims are unified."""
    a, b = ctx.resolve_dim(a), ctx.resolve_dim(b)
    if a is b or (isinstance(a, int) and isinstance(b, int) and a == b):
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, AnyDim):
        return b
    if isinstance(b, AnyDim):
        return a
    if isinstance(a, int) and isinstance(b, int):
        ctx.fail(f"{what}: {a} vs {b}")
    # At least one symbolic size: broadcasting needs them equal.
    return ctx.unify_dims(a, b, what)


def broadcast_shapes(ctx: RelationContext, *shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """NumPy broadcasting over (possibly symbolic) shapes."""
    what = ("shapes cannot be broadcast together: "
            + " and ".join(shape_to_str(tuple(s)) for s in shapes))
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(rank):
        dim: Dim = 1
        for s in shapes:
            j = len(s) - rank + i
            if j >= 0:
                dim = broadcast_dims(ctx, dim, s[j], what)
        out.append(dim)
    return tuple(out)


def same_dtype(ctx: RelationContext, tensors: Sequence[TensorType], what: str) -> DType:
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        if dtype != t.dtype:
            ctx.unify_dtypes(
                dtype, t.dtype,
                f"{what}: argument types differ in dtype: "
                + " and ".join(type_to_str(x) for x in tensors),
            )
    return dtype


def identity_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    """Output type = input type (elementwise unary ops)."""
    return tensor_arg(ctx, args[0], "the input")


def broadcast_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    """NumPy broadcasting; all dtypes equal; output has that dtype."""
    ts = [tensor_arg(ctx, a, f"argument {i}") for i, a in enumerate(args)]
    dtype = same_dtype(ctx, ts, "broadcast")
    return TensorType(broadcast_shapes(ctx, *(t.shape for t in ts)), dtype)


def broadcast_to_bool_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    """Comparisons: broadcast, equal dtypes, bool output."""
    out = broadcast_rel(args, attrs, ctx)
    assert isinstance(out, TensorType)
    return TensorType(out.shape, "bool")


def is_known(d: AnyValue) -> bool:
    return isinstance(d, int)



# ---- helpers for dtype classes and rank-dependent attributes -----------------

@dataclass(frozen=True)
class DTypeClass:
    """A set of dtypes an op accepts, named for messages ("a floating-point")."""

    name: str
    test: Callable[[str], bool]


FLOAT = DTypeClass("a floating-point", is_float)
INTEGER = DTypeClass("an integer", is_int)
NUMERIC = DTypeClass("a numeric (non-bool)", lambda d: d != "bool")
BOOL = DTypeClass("a bool", lambda d: d == "bool")
ANY_DTYPE = DTypeClass("any", lambda d: True)


def require_dtype(
    ctx: RelationContext, op: str, what: str, t: TensorType, allowed: DTypeClass
) -> None:
    """Fail unless t's dtype is in `allowed`; a symbolic dtype passes (it cannot be checked yet)."""
    if isinstance(t.dtype, str) and not allowed.test(t.dtype):
        ctx.fail(f"{op}: {what} must have {allowed.name} dtype, got {type_to_str(t)}")


def shape_of(ctx: RelationContext, t: TensorType) -> tuple[Dim, ...]:
    """t's dims, each resolved through ctx (symbolic dims stay symbolic if unbound)."""
    return tuple(ctx.resolve_dim(d) for d in t.shape)


def attr_axis(
    ctx: RelationContext, op: str, attr: str, axis: int, t: Type, ndim: int | None = None
) -> int:
    """An axis attribute normalised into 0..ndim-1 (ndim defaults to t's rank).

    A failure names the op, the attribute and the input type.
    """
    if ndim is None:
        assert isinstance(t, TensorType)
        ndim = t.ndim
    if not -ndim <= axis < ndim:
        ctx.fail(
            f"{op}: attribute {attr!r} = {axis} is out of range for the input {type_to_str(t)} "
            f"(expected {-ndim} <= {attr} < {ndim})"
        )
    return axis + ndim if axis < 0 else axis


def attr_axes(
    ctx: RelationContext, op: str, attr: str, axes: AnyValue, t: Type, ndim: int | None = None
) -> tuple[int, ...]:
    """An ``optional_ints`` axes attribute normalised: None is every axis, an int is one axis.

    Order is kept; a repeated axis fails.
    """
    if ndim is None:
        assert isinstance(t, TensorType)
        ndim = t.ndim
    if axes is None:
        return tuple(range(ndim))
    given = (axes,) if isinstance(axes, int) else tuple(axes)
    out = tuple(attr_axis(ctx, op, attr, a, t, ndim) for a in given)
    if len(set(out)) != len(out):
        ctx.fail(f"{op}: attribute {attr!r} = {axes} repeats an axis of the input {type_to_str(t)}")
    return out


def known_product(dims: Sequence[Dim]) -> Dim:
    """The product of dims if every one is a known int, else Any."""
    total = 1
    for d in dims:
        if not isinstance(d, int):
            return AnyDim()
        total *= d
    return total


def known_sum(dims: Sequence[Dim]) -> Dim:
    """The sum of dims if every one is a known int, else Any."""
    if all(isinstance(d, int) for d in dims):
        return sum(d for d in dims if isinstance(d, int))
    return AnyDim()


def slice_dim(n: Dim, begin: int | None, end: int | None, step: int | None = None) -> Dim:
    """The length of ``range(n)[begin:end:step]`` (Python slice semantics); Any if n is unknown."""
    return len(range(n)[begin:end:step]) if isinstance(n, int) else AnyDim()


__all__ = [
    "RelationContext", "ConcreteContext", "check_relation", "is_unknown", "tensor_arg",
    "tensor_tuple_arg", "normalize_axis", "broadcast_dims", "broadcast_shapes", "same_dtype",
    "identity_rel", "broadcast_rel", "broadcast_to_bool_rel", "is_known", "DTypeClass", "FLOAT",
    "INTEGER", "NUMERIC", "BOOL", "ANY_DTYPE", "require_dtype", "shape_of", "attr_axis",
    "attr_axes", "known_product", "known_sum", "slice_dim",
]
