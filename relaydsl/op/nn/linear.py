"""Matrix products and the bias that follows them: matmul, dense, batch_matmul, bias_add.

The three products are contractions (``Traits.contraction``): the llvm backend runs them as
GEMMs, and fusion lets a 2-D transpose feeding one join its group (the GEMM reads that operand
through strides). Their compute rules reduce over the contraction axis ``k``.

matmul and dense also take integer tensors (the llvm GEMMs are float32 only: integer calls run
the compute rules). dense's ``out_dtype`` is the dtype its products are summed in and its
result's (int8 inputs accumulated in int32, as quantized models need); the references and the
compute rule convert the inputs to it first.
"""
from __future__ import annotations

import numpy as np

from relaydsl.errors import RelayTypeError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import TensorType, Type
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.nn.common import (
    Array, Inputs, along, axis_attr, out_dtype_attr, per_channel_inputs,
)
from relaydsl.op.quantize_rule import SUM, product_rule
from relaydsl.op.registry import Attr, OpDef, OpPattern, Traits, ops, register
from relaydsl.te import tensor as T
from relaydsl.te.expr import PrimExpr, cast, const
from relaydsl.te.indexing import right_aligned
from relaydsl.te.tensor import Tensor, compute, reduce_axis
from relaydsl.typing.relations import (
    NUMERIC, RelationContext, broadcast_shapes, is_unknown, tensor_arg,
)

_CONTRACTION = Traits(contraction=True)

# ---- matmul -------------------------------------------------------------------------------------


def _matmul_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "matmul", args, ("a", "b"), NUMERIC)
    a, b = c.shape(0, min_rank=1), c.shape(1, min_rank=1)
    b_rows = b[-2] if len(b) > 1 else b[0]
    c.same(a[-1], b_rows, f"the contraction dimensions of {c.arg(0)} and {c.arg(1)} differ")
    try:
        batch = broadcast_shapes(ctx, a[:-2], b[:-2])
    except RelayTypeError:
        c.fail(f"the batch dimensions of {c.arg(0)} and {c.arg(1)} cannot be broadcast")
    rows = a[-2:-1]  # empty for a 1-D `a`
    cols = b[-1:] if len(b) > 1 else []
    return c.tensor((*batch, *rows, *cols))


def _matmul_jax(a: Array, b: Array) -> Array:
    return jnp.matmul(a, b)


def _swap_last(x: Expr, ndim: int) -> Expr:
    """x with its last two axes swapped."""
    return ops.transpose(x, axes=(*range(ndim - 2), ndim - 1, ndim - 2))


def _matmul_grad(call: Call, g: Expr) -> list[Expr]:
    """d(a @ b) = (sum_b(g @ bᵀ, a), sum_b(aᵀ @ g, b)), 1-D operands promoted to matrices."""
    a, b = call.args
    ra, rb = gu.tensor_type(a).ndim, gu.tensor_type(b).ndim
    a2 = a if ra > 1 else ops.expand_dims(a, axis=0)  # (k,) -> (1, k)
    b2 = b if rb > 1 else ops.expand_dims(b, axis=-1)  # (k,) -> (k, 1)
    g2 = g if rb > 1 else ops.expand_dims(g, axis=-1)  # the n axis b's promotion added
    g2 = g2 if ra > 1 else ops.expand_dims(g2, axis=-2)  # the m axis a's promotion added
    da = gu.collapse(matmul(g2, _swap_last(b2, max(rb, 2))), a2)
    db = gu.collapse(matmul(_swap_last(a2, max(ra, 2)), g2), b2)
    return [da if ra > 1 else ops.reshape_like(da, a),
            db if rb > 1 else ops.reshape_like(db, b)]


def _matmul_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    a, b = inputs
    shape = out_type.concrete_shape()
    nbatch = len(shape) - (a.ndim >= 2) - (b.ndim >= 2)

    def f(*o: PrimExpr) -> PrimExpr:
        batch, rest = o[:nbatch], list(o[nbatch:])
        k = reduce_axis(a.shape[-1], "k")
        ai = (k,) if a.ndim == 1 else (*right_aligned(a.shape[:-2], batch), rest.pop(0), k)
        bi = (k,) if b.ndim == 1 else (*right_aligned(b.shape[:-2], batch), k, rest.pop(0))
        return T.sum(a[ai] * b[bi], k)

    return compute(shape, f, "T_matmul")


matmul = register(OpDef(
    "matmul", ("a", "b"), _matmul_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=np.matmul, jax_lower=_matmul_jax, compute=_matmul_compute, gradient=_matmul_grad,
    doc="numpy.matmul: (..., m, k) @ (..., k, n), batch dims broadcast, 1-D operands promoted; "
        "any numeric dtype",
    traits=Traits(contraction=True, quantize=product_rule(weight_axis=-1, out_axis=-1)),
))

# ---- dense --------------------------------------------------------------------------------------


def _dense_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type | None:
    if is_unknown(args[1]):  # a hidden parameter: (units, k) from the attribute and the data
        data = tensor_arg(ctx, args[0], "dense: data")
        if attrs.units is None or not data.shape:
            return None
        args[1] = ctx.unify_types(args[1], TensorType((attrs.units, data.shape[-1]), data.dtype),
                                  "dense: the weight")
    c = Inputs(ctx, "dense", args, ("data", "weight"), NUMERIC, out_dtype=attrs.out_dtype)
    data, (units, k) = c.shape(0, min_rank=1), c.shape(1, rank=2)
    c.same(data[-1], k, f"the reduction dimensions of {c.arg(0)} and {c.arg(1)} differ")
    if attrs.units is not None:
        c.same(units, attrs.units, f"{c.arg(1)} does not have units={attrs.units} rows")
    return c.tensor((*data[:-1], units), attrs.out_dtype)


def _dense_ref(data: Array, weight: Array, *, units: int | None, out_dtype: str | None) -> Array:
    # units only guides type inference
    if out_dtype is not None:
        data, weight = data.astype(out_dtype), weight.astype(out_dtype)
    return data @ weight.T


def _dense_grad(call: Call, g: Expr) -> list[Expr]:
    """d dense(x, w) = (g @ w, gᵀ @ x), the leading dims of x and g flattened, g in x's dtype."""
    x, w = call.args
    if call.attrs.out_dtype not in (None, gu.tensor_type(x).dtype):
        g = ops.cast_like(g, x)
    rank = gu.tensor_type(x).ndim
    if rank == 1:
        dw = gu.mul(ops.expand_dims(g, axis=1), ops.expand_dims(x, axis=0))
    elif rank == 2:
        dw = matmul(ops.transpose(g), x)
    else:
        units, k = gu.static_dims(w, "dense")
        rows = ops.reshape(g, newshape=(-1, units))
        dw = matmul(ops.transpose(rows), ops.reshape(x, newshape=(-1, k)))
    return [matmul(g, w), dw]


def _dense_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    data, weight = inputs
    dtype = str(out_type.dtype)  # a compute rule sees concrete types

    def f(*o: PrimExpr) -> PrimExpr:
        k = reduce_axis(weight.shape[1], "k")
        a, b = data[(*o[:-1], k)], weight[o[-1], k]
        if data.dtype != dtype:
            a, b = cast(dtype, a), cast(dtype, b)
        return T.sum(a * b, k)

    return compute(out_type.concrete_shape(), f, "T_dense")


dense = register(OpDef(
    "dense", ("data", "weight"), _dense_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_dense_ref, jax_lower=_dense_ref, compute=_dense_compute, gradient=_dense_grad,
    attrs=(Attr("units", "optional_int", None,
                doc="rows of weight; lets inference infer the weight"), out_dtype_attr()),
    doc="data (..., k) @ weight (units, k).T -> (..., units), summed in out_dtype",
    traits=Traits(contraction=True, infers_inputs=(1,),
                  quantize=product_rule(weight_axis=0, out_axis=-1)),
))

# ---- batch_matmul -------------------------------------------------------------------------------


def _batch_matmul_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "batch_matmul", args, ("x", "y"))
    (bx, *x), (by, *y) = c.shape(0, rank=3), c.shape(1, rank=3)
    m, kx = reversed(x) if attrs.transpose_a else x
    ky, n = reversed(y) if attrs.transpose_b else y
    c.same(kx, ky, f"the reduction dimensions of {c.arg(0)} and {c.arg(1)} differ")
    try:
        (batch,) = broadcast_shapes(ctx, [bx], [by])
    except RelayTypeError:
        c.fail(f"the batch dimensions of {c.arg(0)} and {c.arg(1)} must match or be 1")
    return c.tensor((batch, m, n))


def _batch_matmul_ref(x: Array, y: Array, *, transpose_a: bool, transpose_b: bool) -> Array:
    x = x.transpose(0, 2, 1) if transpose_a else x
    y = y.transpose(0, 2, 1) if transpose_b else y
    return x @ y


def _batch_matmul_grad(call: Call, g: Expr) -> list[Expr]:
    """d(X @ Y) = (g @ Yᵀ, Xᵀ @ g) with X, Y the optionally transposed x, y; batch-1 summed."""
    x, y = call.args
    ta, tb = call.attrs.transpose_a, call.attrs.transpose_b

    def bmm(p: Expr, q: Expr, tp: bool, tq: bool) -> Expr:
        return batch_matmul(p, q, transpose_a=tp, transpose_b=tq)

    dx = bmm(y, g, tb, True) if ta else bmm(g, y, False, not tb)
    dy = bmm(g, x, True, ta) if tb else bmm(x, g, not ta, False)
    return [gu.collapse(dx, x), gu.collapse(dy, y)]


def _batch_matmul_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, y = inputs

    def f(b: PrimExpr, i: PrimExpr, j: PrimExpr) -> PrimExpr:
        k = reduce_axis(x.shape[1 if attrs.transpose_a else 2], "k")
        bx = const(0) if x.shape[0] == 1 else b
        by = const(0) if y.shape[0] == 1 else b
        xv = x[bx, k, i] if attrs.transpose_a else x[bx, i, k]
        yv = y[by, j, k] if attrs.transpose_b else y[by, k, j]
        return T.sum(xv * yv, k)

    return compute(out_type.concrete_shape(), f, "T_batch_matmul")


batch_matmul = register(OpDef(
    "batch_matmul", ("x", "y"), _batch_matmul_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_batch_matmul_ref, jax_lower=_batch_matmul_ref, compute=_batch_matmul_compute,
    gradient=_batch_matmul_grad,
    attrs=(Attr("transpose_a", "bool", False, doc="x is (b, k, m)", keyword_only=True),
           Attr("transpose_b", "bool", False, doc="y is (b, n, k)")),
    doc="x (b, m, k) @ y (b, k, n) -> (b, m, n), each optionally transposed; a batch of 1 "
        "broadcasts",
    traits=_CONTRACTION,
))

# ---- bias_add -----------------------------------------------------------------------------------


def _bias_add_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    # any numeric dtype: a quantized layer adds its int32 bias to its int32 sums
    c, data, _ = per_channel_inputs("bias_add", ("bias",), args, attrs, ctx, NUMERIC)
    return c.tensor(data)


def _bias_add_np(data: Array, bias: Array, *, axis: int) -> Array:
    # The relation's rule, checked again at run time for data with `?` dimensions: a bias of
    # one element must not broadcast where llvm (which types the call's concrete shapes) and
    # TVM reject it.
    if bias.shape != (data.shape[axis],):
        raise ValueError(f"bias of shape {bias.shape} for data of shape {data.shape}: the bias "
                         f"must have data.shape[{axis}] = {data.shape[axis]} elements")
    return data + along(np, bias, axis, data.ndim)


def _bias_add_jax(data: Array, bias: Array, *, axis: int) -> Array:
    return data + along(jnp, bias, axis, data.ndim)


def _bias_add_grad(call: Call, g: Expr) -> list[Expr]:
    """d bias_add(x, b) = (g, sum of g over every axis but `axis`)."""
    x = call.args[0]
    return [g, gu.sum_(g, gu.other_axes(call.attrs.axis, gu.tensor_type(x).ndim))]


def _bias_add_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    data, bias = inputs
    axis = attrs.axis % data.ndim
    return compute(data.shape, lambda *o: data[o] + bias[o[axis]], "T_bias_add")


bias_add = register(OpDef(
    "bias_add", ("data", "bias"), _bias_add_rel, OpPattern.BROADCAST,
    numpy_ref=_bias_add_np, jax_lower=_bias_add_jax, compute=_bias_add_compute,
    gradient=_bias_add_grad, attrs=(axis_attr(1, "the axis bias runs along"),),
    doc="data + bias, the 1-D bias broadcast along axis",
    traits=Traits(infers_inputs=(1,), quantize=SUM),
))
