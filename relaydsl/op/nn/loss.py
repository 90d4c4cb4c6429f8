"""Losses: softmax_cross_entropy (built on log_softmax, activation.py)."""
from __future__ import annotations

import math

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import TensorType, Type
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.nn.activation import log_softmax, log_softmax_te, log_softmax_xp, softmax
from relaydsl.op.nn.common import Array, ArrayModule, Inputs
from relaydsl.op.registry import OpDef, OpPattern, ops, register
from relaydsl.te import tensor as T
from relaydsl.te.expr import PrimExpr
from relaydsl.te.tensor import Tensor, compute, reduce_axis
from relaydsl.typing.relations import RelationContext


def _cross_entropy_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "softmax_cross_entropy", args, ("logits", "labels"))
    logits, labels = c.shape(0, min_rank=1), c.shape(1)
    if len(labels) != len(logits):
        c.fail(f"{c.arg(1)} must have the shape of {c.arg(0)}")
    for i, (a, b) in enumerate(zip(logits, labels)):
        c.same(a, b, f"{c.arg(1)} must have the shape of {c.arg(0)} (axis {i})")
    return c.tensor(())


def _cross_entropy(xp: ArrayModule, logits: Array, labels: Array) -> Array:
    per_example = -xp.sum(labels * log_softmax_xp(xp, logits, -1), axis=-1)
    return xp.asarray(xp.mean(per_example))


def _cross_entropy_np(logits: Array, labels: Array) -> Array:
    return _cross_entropy(np, logits, labels)


def _cross_entropy_jax(logits: Array, labels: Array) -> Array:
    return _cross_entropy(jnp, logits, labels)


def _cross_entropy_grad(call: Call, g: Expr) -> list[Expr]:
    """d sce(z, t) = (g/n * (softmax(z) * sum(t) - t), -g/n * log_softmax(z)), n rows."""
    logits, labels = call.args
    per_row = gu.div(g, gu.count(logits, range(gu.tensor_type(logits).ndim - 1)))
    mass = gu.sum_(labels, -1, keepdims=True)
    d_logits = gu.mul(per_row, gu.sub(gu.mul(softmax(logits, axis=-1), mass), labels))
    d_labels = gu.mul(ops.negative(per_row), log_softmax(logits, axis=-1))
    return [d_logits, d_labels]


def _cross_entropy_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    logits, labels = inputs
    logp = log_softmax_te(logits, -1)
    lead, classes = logits.shape[:-1], logits.shape[-1]

    def per_example(*p: PrimExpr) -> PrimExpr:
        k = reduce_axis(classes, "k")
        return -T.sum(labels[(*p, k)] * logp[(*p, k)], k)

    losses = compute(lead, per_example, "T_cross_entropy_per_example")
    if not lead:
        return losses

    def mean() -> PrimExpr:
        r = [reduce_axis(d, f"r{i}") for i, d in enumerate(lead)]
        return T.sum(losses[tuple(r)], r) / float(math.prod(lead))

    return compute((), mean, "T_softmax_cross_entropy")


softmax_cross_entropy = register(OpDef(
    "softmax_cross_entropy", ("logits", "labels"), _cross_entropy_rel, OpPattern.OPAQUE,
    numpy_ref=_cross_entropy_np, jax_lower=_cross_entropy_jax, compute=_cross_entropy_compute,
    gradient=_cross_entropy_grad,
    doc="mean over leading dims of -sum(labels * log_softmax(logits), axis=-1); a scalar",
))
