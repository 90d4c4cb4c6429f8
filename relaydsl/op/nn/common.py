"""What the nn ops' definitions share: checking a call's inputs in a relation, attribute checks.

Every nn op takes tensors of one dtype, floating point but for the products (matmul, dense,
conv2d, conv1d: any numeric dtype); ``Inputs`` checks that and names the op and the offending
input types in its failures.
"""
from __future__ import annotations

from typing import Callable, NoReturn, Sequence

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import Dim, DType, TensorType, Type, type_to_str
from relaydsl.op.registry import Array, ArrayModule, Attr
from relaydsl.typing.relations import (
    FLOAT, INTEGER, DTypeClass, RelationContext, attr_axis, is_unknown, require_dtype, same_dtype,
    tensor_arg,
)



def int_bits(dtype: str) -> int:
    """The width of an integer dtype's name: 8 for int8 and uint8."""
    return int(dtype.lstrip("uint"))


class Inputs:
    """The arguments of one call of an nn op: tensors of one dtype of the class `dtypes`.

    A product summed in an integer `out_dtype` (its attribute) may take integer inputs of one
    width and different signs, as TVM's and the CPUs' dot products do: uint8 data with int8
    weights.
    """

    def __init__(self, ctx: RelationContext, op: str, args: list[Type], names: Sequence[str],
                 dtypes: DTypeClass = FLOAT, *, out_dtype: DType | None = None):
        self.ctx, self.op, self.names = ctx, op, names
        self.ts = [tensor_arg(ctx, a, f"{op}: {n}") for a, n in zip(args, names)]
        given = {t.dtype for t in self.ts}
        ints = [d for d in given if isinstance(d, str) and INTEGER.test(d)]
        if isinstance(out_dtype, str) and INTEGER.test(out_dtype) and len(ints) == len(given) \
                and len({int_bits(d) for d in ints}) == 1:
            self.dtype: DType = out_dtype
        else:
            self.dtype = same_dtype(ctx, self.ts, op)
        require_dtype(ctx, op, "the inputs", self.ts[0], dtypes)

    def arg(self, i: int) -> str:
        """``data Tensor[(1, 3), float32]``: an argument's name and type, for messages."""
        return f"{self.names[i]} {type_to_str(self.ts[i])}"

    def fail(self, problem: str) -> NoReturn:
        self.ctx.fail(f"{self.op}: {problem}")

    def same(self, a: Dim, b: Dim, problem: str) -> Dim:
        return self.ctx.unify_dims(a, b, f"{self.op}: {problem}")

    def shape(self, i: int, rank: int | None = None, min_rank: int = 0) -> list[Dim]:
        """Argument i's dims (resolved), after checking its rank."""
        t = self.ts[i]
        if rank is not None and t.ndim != rank:
            self.fail(f"{self.arg(i)} must have rank {rank}")
        if t.ndim < min_rank:
            self.fail(f"{self.arg(i)} must have rank >= {min_rank}")
        return [self.ctx.resolve_dim(d) for d in t.shape]

    def axis(self, axis: int) -> int:
        """The `axis` attribute normalised for the first argument (data)."""
        return attr_axis(self.ctx, self.op, "axis", axis, self.ts[0])

    def vector(self, i: int, size: Dim, what: str) -> None:
        """Argument i must be 1-D with `size` elements."""
        (n,) = self.shape(i, rank=1)
        self.same(n, size, f"{self.arg(i)} must have {what} elements")

    def tensor(self, shape: Sequence[Dim], dtype: DType | None = None) -> TensorType:
        """The result type: `shape`, of `dtype` (an out_dtype attribute) or the inputs'."""
        return TensorType(tuple(shape), dtype or self.dtype)


def per_channel_inputs(op: str, params: tuple[str, ...], args: list[Type], attrs: Attrs,
                       ctx: RelationContext, dtypes: DTypeClass = FLOAT
                       ) -> tuple[Inputs, list[Dim], int]:
    """data of rank >= 1 and parameters each 1-D of size data.shape[axis]: (inputs, shape, axis).

    A parameter whose type is unknown (a model's hidden parameter) is given that type."""
    data_t = tensor_arg(ctx, args[0], f"{op}: data")
    for i in range(1, len(params) + 1):
        if is_unknown(args[i]) and data_t.ndim:
            size = data_t.shape[attr_axis(ctx, op, "axis", attrs.axis, data_t)]
            args[i] = ctx.unify_types(args[i], TensorType((size,), data_t.dtype),
                                      f"{op}: {params[i - 1]}")
    c = Inputs(ctx, op, args, ("data", *params), dtypes)
    data = c.shape(0, min_rank=1)
    axis = c.axis(attrs.axis)
    for i in range(1, len(params) + 1):
        c.vector(i, data[axis], f"data.shape[{axis}] = {type_to_str(data[axis])}")
    return c, data, axis


def along(xp: ArrayModule, v: Array, axis: int, ndim: int) -> Array:
    """A 1-D v reshaped to broadcast along `axis` of a rank-ndim tensor (numpy or jax.numpy)."""
    return xp.reshape(v, [-1 if i == axis % ndim else 1 for i in range(ndim)])


# ---- attributes ---------------------------------------------------------------------------------

def in_range(lo: float, hi: float, hi_open: bool = False) -> Callable[[float], str | None]:
    def check(v: float) -> str | None:
        if lo <= v and (v < hi if hi_open else v <= hi):
            return None
        return f"must be in [{lo}, {hi}{')' if hi_open else ']'}, got {v}"

    return check


def positive(v: int) -> str | None:
    return None if v >= 1 else f"must be positive, got {v}"


def all_positive(v: tuple[int, ...] | None) -> str | None:
    return None if v is None or min(v) >= 1 else f"values must be positive, got {v}"


def non_negative(v: tuple[int, ...]) -> str | None:
    return None if min(v, default=0) >= 0 else f"values must be non-negative, got {v}"


def axis_attr(default: int, doc: str) -> Attr:
    return Attr("axis", "int", default, doc=doc)


def out_dtype_attr(keyword_only: bool = False) -> Attr:
    """A product's ``out_dtype``: the result's (and the accumulation's) dtype, as TVM's."""
    return Attr("out_dtype", "optional_dtype", None,
                doc="the result dtype, accumulated in (int8 inputs to int32); None: the inputs'",
                keyword_only=keyword_only)
