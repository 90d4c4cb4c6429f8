"""Reductions: sum, mean, max, min, prod, all, any, variance over a set of axes; argmax, argmin
along one axis; collapse_sum_like, which sums a tensor down to a shape that broadcasts to it.

``axis=None`` reduces every axis (argmax/argmin: the flattened tensor);
negative axes count from the end; ``keepdims`` keeps reduced axes with size 1.
A reduction keeps its input dtype (an int32 sum is int32, accumulating in
int32); ``mean`` and ``variance`` accept only floating-point tensors, ``all`` and ``any``
only bool ones; argmax/argmin give int32.

Every op is one block: its gradient rule and te compute rule written out just above
one ``name = _reduce(...)`` row (or ``register(OpDef(...))``) that holds the rest.
In te, sum, prod, max and min fold their reducer over the reduced axes in the input
dtype (bool max/min, NumPy's any/all, fold int8 0/1 values); mean divides the sum
by the count (float16 through float32, as NumPy does); argmax/argmin take two passes:
the extreme value, then the least flat position (over the reduced axes, row-major)
holding it, or holding a NaN, as NumPy's first NaN.
"""
from __future__ import annotations

import math
from typing import Any as AnyValue, Callable, Sequence

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import Dim, TensorType, Type, type_to_str
from relaydsl.op.grad_util import (
    broadcast_like, count, norm_axes, scalar, tensor_type, unreduce, zeros_for,
)
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.registry import (
    Array, Attr, BinaryArrayFn, OpDef, OpPattern, Relation, Traits, ops, register,
)
from relaydsl.te import indexing
from relaydsl.te import tensor as T
from relaydsl.te.expr import IterVar, PrimExpr, cast, const, equal, not_equal, select
from relaydsl.te.indexing import over_axes, ravel
from relaydsl.te.rules import ComputeRule
from relaydsl.te.tensor import Reducer, Tensor, compute, reduce_axis
from relaydsl.typing.relations import (
    ANY_DTYPE, BOOL, FLOAT, NUMERIC, DTypeClass, RelationContext, attr_axes, attr_axis,
    require_dtype, shape_of, tensor_arg,
)

Index = tuple[PrimExpr, ...]
Axes = int | tuple[int, ...] | None  # the axis attribute: one, several, or every axis
# A reduction's NumPy reference or JAX lowering: (x, axis, keepdims) -> the result.
ReduceArrayFn = Callable[[Array, Axes, bool], Array]

_KEEPDIMS = Attr("keepdims", "bool", False, doc="keep reduced axes with size 1")


def _reduced(shape: tuple[Dim, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _copy(x: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    """NumPy's reduction over no axis: x itself (reshaped to the output shape)."""
    return compute(shape, lambda *o: x[tuple(o[-x.ndim:]) if x.ndim else ()], name)


def _over_nothing(x: Tensor, axes: tuple[int, ...]) -> bool:
    """Whether a reduction of x over `axes` combines no element (an empty last batch)."""
    return any(x.shape[a] == 0 for a in axes)


def _no_identity(op: str, x: Tensor, axes: tuple[int, ...]) -> IRError:
    return IRError(f"{op} over an empty axis (of {x.dtype}{list(x.shape)}, axes {list(axes)}) "
                   "has no value: it has no identity (NumPy and JAX raise too)")


# ---- sum, mean, max, min, prod: one row each -----------------------------------------


def _reduce_rel(op: str, accepts: DTypeClass) -> Relation:
    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        t = tensor_arg(ctx, args[0], f"{op}: the input")
        require_dtype(ctx, op, "the input", t, accepts)
        axes = attr_axes(ctx, op, "axis", attrs.axis, t)
        return TensorType(_reduced(shape_of(ctx, t), axes, attrs.keepdims), t.dtype)

    return rel


_AXIS = Attr("axis", "optional_ints", None, doc="axes to reduce; None reduces all")


def _reduce(name: str, accepts: DTypeClass, doc: str, *, te: ComputeRule, numpy: ReduceArrayFn,
            jax: ReduceArrayFn, grad: Callable[[Call, Expr], list[Expr]] | None) -> OpDef:
    """Registers the reduction of one row: attributes ``axis`` (None: all) and ``keepdims``;
    ``grad=None``: not differentiable."""
    return register(OpDef(
        name, ("data",), _reduce_rel(name, accepts), OpPattern.COMM_REDUCE,
        numpy_ref=numpy, jax_lower=jax, compute=te, gradient=grad,
        differentiable=grad is not None, attrs=(_AXIS, _KEEPDIMS), doc=doc,
    ))


def _fold(reducer: Reducer) -> ComputeRule:
    """The te rule of a reduction that folds ``reducer`` over the axes (bool: through int8)."""

    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (x,) = inputs
        axes, shape = indexing.norm_axes(attrs.axis, x.ndim), out_type.concrete_shape()
        name = f"T_{reducer.name}"
        if not axes:
            return _copy(x, shape, name)
        if _over_nothing(x, axes):  # sum: 0, prod: 1; max and min have no such value
            if reducer.name in ("max", "min"):
                raise _no_identity(reducer.name, x, axes)
            return compute(shape, lambda *o: reducer.identity(x.dtype), name)
        if x.dtype == "bool":  # max is any, min is all
            return over_axes(x, axes, attrs.keepdims, shape, lambda idx, r, o: not_equal(
                reducer(cast("int8", x[idx]), r), 0), name)
        return over_axes(x, axes, attrs.keepdims, shape, lambda idx, r, o: reducer(x[idx], r),
                         name)

    return rule


def _sum_grad(call: Call, g: Expr) -> list[Expr]:
    """d sum(x, axes) = g broadcast back over the reduced axes."""
    x, a = call.args[0], call.attrs
    return [broadcast_like(unreduce(g, x, a.axis, a.keepdims), x)]


sum_ = _reduce(
    "sum", NUMERIC, "sum over the axes", te=_fold(T.sum),
    numpy=lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    jax=lambda x, axis, keepdims: jnp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    grad=_sum_grad)


def _mean_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    axes, shape = indexing.norm_axes(attrs.axis, x.ndim), out_type.concrete_shape()
    if not axes:
        return _copy(x, shape, "T_mean")
    n = math.prod(x.shape[a] for a in axes)
    if n == 0:  # 0 / 0, as NumPy and JAX give
        return compute(shape, lambda *o: const(float("nan"), x.dtype), "T_mean")
    acc = "float32" if x.dtype == "float16" else x.dtype

    def body(idx: Index, r: list[IterVar], o: Index) -> PrimExpr:
        v = x[idx] if acc == x.dtype else cast(acc, x[idx])
        m = T.sum(v, r) / float(n)
        return m if acc == x.dtype else cast(x.dtype, m)

    return over_axes(x, axes, attrs.keepdims, shape, body, "T_mean")


def _numpy_mean(x: np.ndarray, axis: AnyValue, keepdims: bool) -> np.ndarray:
    # np.mean's own arithmetic (a sum, then a division), without its warning over an empty
    # axis: NaN there, as JAX and the llvm target give, silently
    total = np.sum(x, axis=axis, keepdims=keepdims)
    count = x.size // total.size if total.size else 1
    with np.errstate(invalid="ignore"):
        return np.divide(total, count, dtype=total.dtype)


def _mean_grad(call: Call, g: Expr) -> list[Expr]:
    """d mean(x, axes) = g / n broadcast back over the reduced axes, n elements per mean."""
    x, a = call.args[0], call.attrs
    n = count(x, norm_axes(a.axis, tensor_type(x).ndim))
    return [ops.divide(broadcast_like(unreduce(g, x, a.axis, a.keepdims), x), n)]


mean = _reduce(
    "mean", FLOAT, "mean over the axes", te=_mean_compute,
    numpy=lambda x, axis, keepdims: _numpy_mean(x, axis, keepdims),
    jax=lambda x, axis, keepdims: jnp.mean(x, axis=axis, keepdims=keepdims),
    grad=_mean_grad)


def _extreme_adjoint(reduction: OpDef, call: Call, g: Expr) -> list[Expr]:
    """g shared among the elements equal to the extreme, broadcast back (max and min)."""
    x, a = call.args[0], call.attrs
    extreme = reduction(x, axis=a.axis, keepdims=True)
    hit = ops.cast_like(ops.equal(x, extreme), x)
    ties = sum_(hit, axis=a.axis, keepdims=True)
    return [ops.multiply(hit, ops.divide(unreduce(g, x, a.axis, a.keepdims), ties))]


def _max_grad(call: Call, g: Expr) -> list[Expr]:
    """d max(x, axes) = g * [x == max] / (number of ties), broadcast back."""
    return _extreme_adjoint(max_, call, g)


# On bool tensors max is "any" and min is "all" (Figure 2 of the Relay paper uses min so).
max_ = _reduce(
    "max", ANY_DTYPE, "maximum over the axes", te=_fold(T.max),
    numpy=lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims),
    jax=lambda x, axis, keepdims: jnp.max(x, axis=axis, keepdims=keepdims),
    grad=_max_grad)


def _min_grad(call: Call, g: Expr) -> list[Expr]:
    """d min(x, axes) = g * [x == min] / (number of ties), broadcast back."""
    return _extreme_adjoint(min_, call, g)


min_ = _reduce(
    "min", ANY_DTYPE, "minimum over the axes", te=_fold(T.min),
    numpy=lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims),
    jax=lambda x, axis, keepdims: jnp.min(x, axis=axis, keepdims=keepdims),
    grad=_min_grad)


def _prod_grad(call: Call, g: Expr) -> list[Expr]:
    """d prod(x) = g * prod(x) / x; where a group has one zero, the others' product there."""
    x, a = call.args[0], call.attrs
    zero, one = scalar(0, x), scalar(1, x)
    is_zero = ops.equal(x, zero)
    nonzero = ops.where(is_zero, one, x)
    rest = prod(nonzero, axis=a.axis, keepdims=True)  # the product of the non-zeros
    zeros = sum_(ops.cast_like(is_zero, x), axis=a.axis, keepdims=True)
    lone_zero = ops.logical_and(is_zero, ops.equal(zeros, one))
    dx = ops.where(ops.equal(zeros, zero), ops.divide(rest, nonzero),
                   ops.where(lone_zero, rest, zero))
    return [ops.multiply(unreduce(g, x, a.axis, a.keepdims), dx)]


prod = _reduce(
    "prod", NUMERIC, "product over the axes", te=_fold(T.prod),
    numpy=lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    jax=lambda x, axis, keepdims: jnp.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    grad=_prod_grad)


# ---- all, any: bool reductions ------------------------------------------------------------


def _logical_fold(reducer: Reducer, empty: bool) -> ComputeRule:
    """The te rule of all (min) / any (max) over bools, folded as int8 0/1; `empty` over no
    element (all: True, any: False, as NumPy)."""

    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (x,) = inputs
        axes, shape = indexing.norm_axes(attrs.axis, x.ndim), out_type.concrete_shape()
        name = "T_all" if empty else "T_any"
        if not axes:
            return _copy(x, shape, name)
        if _over_nothing(x, axes):
            return compute(shape, lambda *o: const(empty, "bool"), name)
        return over_axes(x, axes, attrs.keepdims, shape, lambda idx, r, o: not_equal(
            reducer(cast("int8", x[idx]), r), 0), name)

    return rule


all_ = _reduce(
    "all", BOOL, "whether every element over the axes is true (True over no element)",
    te=_logical_fold(T.min, True),
    numpy=lambda x, axis, keepdims: np.all(x, axis=axis, keepdims=keepdims),
    jax=lambda x, axis, keepdims: jnp.all(x, axis=axis, keepdims=keepdims), grad=None)
any_ = _reduce(
    "any", BOOL, "whether some element over the axes is true (False over no element)",
    te=_logical_fold(T.max, False),
    numpy=lambda x, axis, keepdims: np.any(x, axis=axis, keepdims=keepdims),
    jax=lambda x, axis, keepdims: jnp.any(x, axis=axis, keepdims=keepdims), grad=None)


# ---- variance ------------------------------------------------------------------------------


def _variance_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """Two passes: the mean m (keeping the axes), then sum((x - m)**2) / (n - unbiased);
    float16 through float32, as mean."""
    (x,) = inputs
    axes, shape = indexing.norm_axes(attrs.axis, x.ndim), out_type.concrete_shape()
    n, ddof = math.prod(x.shape[a] for a in axes), int(attrs.unbiased)
    if n == 0:  # 0 / 0, as NumPy and JAX give
        return compute(shape, lambda *o: const(float("nan"), x.dtype), "T_variance")
    if not axes:  # each element its own mean: (x - x)**2 / (1 - unbiased), NaN for x = inf
        return compute(shape, lambda *o: (x[o] - x[o]) * (x[o] - x[o]) / float(1 - ddof),
                       "T_variance")
    acc = "float32" if x.dtype == "float16" else x.dtype

    def value(idx: Index) -> PrimExpr:
        return x[idx] if acc == x.dtype else cast(acc, x[idx])

    kept = tuple(1 if d in axes else e for d, e in enumerate(x.shape))
    m = over_axes(x, axes, True, kept, lambda idx, r, o: T.sum(value(idx), r) / float(n),
                  "T_variance_mean")

    def body(idx: Index, r: list[IterVar], o: Index) -> PrimExpr:
        d = value(idx) - m[tuple(const(0) if a in axes else i for a, i in enumerate(idx))]
        v = T.sum(d * d, r) / float(n - ddof)
        return v if acc == x.dtype else cast(x.dtype, v)

    return over_axes(x, axes, attrs.keepdims, shape, body, "T_variance")


def _numpy_variance(x: np.ndarray, axis: AnyValue, keepdims: bool,
                    unbiased: bool) -> np.ndarray:
    # np.var's arithmetic without its warnings: NaN over no element, and for one element when
    # unbiased (0 / 0), silently, as JAX and the llvm target give
    centred = x - _numpy_mean(x, axis, keepdims=True)
    total = np.sum(centred * centred, axis=axis, keepdims=keepdims)
    count = x.size // total.size if total.size else 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.divide(total, count - int(unbiased), dtype=total.dtype)


def _variance_grad(call: Call, g: Expr) -> list[Expr]:
    """d var(x, axes) = g * 2 * (x - mean(x)) / (n - unbiased), broadcast back."""
    x, a = call.args[0], call.attrs
    n = count(x, norm_axes(a.axis, tensor_type(x).ndim))
    if a.unbiased:
        n = ops.subtract(n, scalar(1, x))
    centred = ops.subtract(x, ops.mean(x, axis=a.axis, keepdims=True))
    scale = ops.divide(ops.multiply(unreduce(g, x, a.axis, a.keepdims), scalar(2, x)), n)
    return [ops.multiply(centred, scale)]


def _jax_variance(x: Array, axis: Axes, keepdims: bool, unbiased: bool) -> Array:
    return jnp.var(x, axis=axis, ddof=int(unbiased), keepdims=keepdims)


variance = register(OpDef(
    "variance", ("data",), _reduce_rel("variance", FLOAT), OpPattern.COMM_REDUCE,
    numpy_ref=_numpy_variance,
    jax_lower=_jax_variance,
    compute=_variance_compute, gradient=_variance_grad,
    attrs=(_AXIS, _KEEPDIMS,
           Attr("unbiased", "bool", False, doc="divide by n - 1 (Bessel's correction), not n",
                keyword_only=True)),
    doc="the mean squared deviation from the mean over the axes (TVM's variance)",
))


# ---- argmax, argmin: one row each ------------------------------------------------------


def _arg_rel(op: str) -> Relation:
    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        t = tensor_arg(ctx, args[0], f"{op}: the input")
        shape = shape_of(ctx, t)
        if attrs.axis is None:
            return TensorType((1,) * len(shape) if attrs.keepdims else (), "int32")
        axis = attr_axis(ctx, op, "axis", attrs.axis, t)
        return TensorType(_reduced(shape, (axis,), attrs.keepdims), "int32")

    return rel


def _arg_compute(op: str, extreme: Reducer) -> ComputeRule:
    """The te rule of argmax/argmin: the extreme value, then its first flat position."""

    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (x,) = inputs
        shape = out_type.concrete_shape()
        axes = indexing.norm_axes(attrs.axis, x.ndim)
        if not axes:  # a scalar input
            return compute(shape, lambda *o: const(0), f"T_{op}")
        if _over_nothing(x, axes):
            raise _no_identity(op, x, axes)

        def value(idx: Index) -> PrimExpr:
            return cast("int8", x[idx]) if x.dtype == "bool" else x[idx]

        best = over_axes(x, axes, attrs.keepdims, shape,
                         lambda idx, r, o: extreme(value(idx), r), f"T_{op}_value")
        extents = [x.shape[a] for a in axes]
        past_end = math.prod(extents)

        def first(idx: Index, r: list[IterVar], o: Index) -> PrimExpr:
            v = value(idx)
            hit = equal(v, best[o]) | not_equal(v, v)  # v != v: a NaN, which NumPy picks first
            return T.min(select(hit, ravel(r, extents), past_end), r)

        return over_axes(x, axes, attrs.keepdims, shape, first, f"T_{op}")

    return rule


def _arg_reduce(name: str, extreme: Reducer, doc: str, *,
                numpy: Callable[[Array, int | None, bool], Array],
                jax: Callable[[Array, int | None, bool], Array]) -> OpDef:
    """Registers argmax/argmin (no gradient: an index); the references' results become int32."""

    def numpy_ref(x: Array, axis: int | None, keepdims: bool) -> Array:
        return np.asarray(numpy(x, axis, keepdims)).astype(np.int32)

    def jax_lower(x: Array, axis: int | None, keepdims: bool) -> Array:
        return jax(x, axis, keepdims).astype(jnp.int32)

    return register(OpDef(
        name, ("data",), _arg_rel(name), OpPattern.COMM_REDUCE,
        numpy_ref=numpy_ref, jax_lower=jax_lower,
        compute=_arg_compute(name, extreme), differentiable=False,
        attrs=(Attr("axis", "optional_int", None,
                    doc="the axis; None searches the flattened input"),
               _KEEPDIMS),
        doc=doc,
    ))


argmax = _arg_reduce("argmax", T.max, "int32 index of the first maximum along the axis",
                     numpy=lambda x, axis, keepdims: np.argmax(x, axis=axis, keepdims=keepdims),
                     jax=lambda x, axis, keepdims: jnp.argmax(x, axis=axis, keepdims=keepdims))
argmin = _arg_reduce("argmin", T.min, "int32 index of the first minimum along the axis",
                     numpy=lambda x, axis, keepdims: np.argmin(x, axis=axis, keepdims=keepdims),
                     jax=lambda x, axis, keepdims: jnp.argmin(x, axis=axis, keepdims=keepdims))


# ---- collapse_sum_like: the adjoint of broadcasting ------------------------------


def _collapse_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    data = tensor_arg(ctx, args[0], "collapse_sum_like: the data")
    like = tensor_arg(ctx, args[1], "collapse_sum_like: the shape source")
    require_dtype(ctx, "collapse_sum_like", "the data", data, NUMERIC)
    shape, target = shape_of(ctx, data), shape_of(ctx, like)
    fits = len(target) <= len(shape) and all(
        not (isinstance(t, int) and isinstance(d, int)) or t in (1, d)
        for t, d in zip(target[::-1], shape[::-1])
    )
    if not fits:
        ctx.fail(f"collapse_sum_like: {type_to_str(like)} does not broadcast to the data "
                 f"{type_to_str(data)}, so the data cannot be summed down to it")
    return TensorType(target, data.dtype)


def collapsed_axes(shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
    """The axes of `shape` that broadcasting `target` to it added or expanded from 1.

    >>> collapsed_axes((2, 3, 4), (3, 1))
    (0, 2)
    """
    lead = len(shape) - len(target)
    return tuple(range(lead)) + tuple(
        lead + i for i, t in enumerate(target) if t == 1 and shape[lead + i] != 1)


def _collapse_sum_like_ref(xp: AnyValue) -> BinaryArrayFn:
    """The NumPy reference (xp = numpy) or the JAX lowering (xp = jax.numpy)."""

    def ref(data: AnyValue, like: AnyValue) -> AnyValue:
        axes = collapsed_axes(data.shape, like.shape)
        out = xp.sum(data, axis=axes, keepdims=True, dtype=data.dtype)
        return xp.reshape(out, like.shape)

    return ref


def _collapse_sum_like_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """data summed over the axes broadcasting like's shape to data's adds (the leading ones)
    or expands (like has 1, data more), in data's dtype; like gives only the shape."""
    data, like = inputs
    target, lead = like.shape, data.ndim - like.ndim
    axes = collapsed_axes(data.shape, target)
    if not axes:  # like has data's shape
        return _copy(data, target, "T_collapse_sum_like")
    if math.prod(data.shape[a] for a in axes) == 0:  # an empty sum
        return compute(target, lambda *o: const(0, data.dtype), "T_collapse_sum_like")

    def f(*o: PrimExpr) -> PrimExpr:
        r = [reduce_axis(data.shape[a], f"r{a}") for a in axes]
        index = [r[axes.index(d)] if d in axes else o[d - lead] for d in range(data.ndim)]
        return T.sum(data[tuple(index)], r)

    return compute(target, f, "T_collapse_sum_like")


def _collapse_sum_like_grad(call: Call, g: Expr) -> list[Expr]:
    """d collapse_sum_like(x, t) = (g broadcast to x's shape, 0)."""
    x, like = call.args
    return [broadcast_like(g, x), zeros_for(like)]


def _collapse_sum_like_fold(call: Call, arg_types: Sequence[Type]) -> Expr | None:
    """collapse_sum_like(x, t) where t has x's static shape is x (nothing to sum): the
    adjoint of an add of equal shapes, which would otherwise be a copy (a kernel)."""
    data, like = arg_types
    if isinstance(data, TensorType) and isinstance(like, TensorType) and data.is_static \
            and like.is_static and data.shape == like.shape:
        return call.args[0]
    return None


collapse_sum_like = register(OpDef(
    "collapse_sum_like", ("data", "like"), _collapse_rel, OpPattern.COMM_REDUCE,
    numpy_ref=_collapse_sum_like_ref(np),
    jax_lower=_collapse_sum_like_ref(jnp),
    compute=_collapse_sum_like_compute, gradient=_collapse_sum_like_grad,
    traits=Traits(fold_from_types=_collapse_sum_like_fold),
    doc="data summed over the axes that broadcasting `like` to data's shape adds or expands, "
        "so the result has like's shape (and data's dtype): the adjoint of broadcasting",
))
