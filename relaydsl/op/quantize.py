"""Quantization ops: simQ, the simulated quantization of §4.2 of the 2019 Relay paper
(relaydsl/quantize runs the flow; relaydsl/op/quantize_rule.py is the facet ops declare).

``simulated_quantize(x, s)`` is the paper's simQ with ``β = nbit``, ``σ = 1`` for a signed
type (0 for unsigned) and the step ``s = rho · 2^(σ-β)`` (rho the calibrated range)::

    simQ(x) = clip(round(x · (1/s)), qmin, qmax) · s,   qmax = 2^(β-σ) - 1,
    qmin = -qmax (signed, symmetric as TVM's) or 0 (unsigned)

computed on the float type, so calibration can tune ``s`` and training can run through it.
``1/s`` is taken in float32 first, as the realized program multiplies by it. ``s`` is a
scalar or one step per channel along ``axis``. ``rounding`` is "round" (to nearest, ties to
even), "floor" or "ceil". The gradient is the straight-through estimator (Bengio et al.
2013): the output adjoint passes where x is inside the representable range, zero outside
(as clip's), and none reaches the scale.

>>> import numpy as np
>>> x = np.array([0.26, -1.0, 0.74, 9.0], np.float32)
>>> simulated_quantize.numpy_ref(x, np.float32(0.5), nbit=4, signed=True, rounding="round",
...                              axis=-1)
array([ 0.5, -1. ,  0.5,  3.5], dtype=float32)
"""
from __future__ import annotations

from typing import Any as AnyValue

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import TensorType, Type
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jnp, lax
from relaydsl.op.nn.common import Array, ArrayModule, Inputs, along, axis_attr
from relaydsl.op.registry import Attr, OpDef, OpPattern, ops, register
from relaydsl.op.tensor import ceil, floor, round_
from relaydsl.te import expr as E
from relaydsl.te.expr import PrimExpr
from relaydsl.te.tensor import Tensor, compute

ROUNDINGS = ("round", "floor", "ceil")
NEAREST = ROUNDINGS[0]  # to nearest, ties to even
ROUNDING_OPS = {"round": round_, "floor": floor, "ceil": ceil}
"""The op each rounding mode is (what realization emits)."""


def qrange(nbit: int, signed: bool) -> tuple[int, int]:
    """(qmin, qmax) of a `nbit` integer: symmetric when signed, from 0 when unsigned.

    >>> qrange(8, True), qrange(8, False)
    ((-127, 127), (0, 255))
    """
    qmax = 2 ** (nbit - int(signed)) - 1
    return (-qmax if signed else 0), qmax


def _check_nbit(v: int) -> str | None:
    return None if 2 <= v <= 32 else f"must be in [2, 32], got {v}"


def _check_kind(v: str) -> str | None:
    return None if v in ("input", "weight") else f"must be 'input' or 'weight', got {v!r}"


def _check_rounding(v: str) -> str | None:
    return None if v in ROUNDINGS else f"must be one of {', '.join(ROUNDINGS)}, got {v!r}"


# ---- simulated_quantize -------------------------------------------------------------------------


def _simq_rel(args: list[Type], attrs: Attrs, ctx: AnyValue) -> Type:
    c = Inputs(ctx, "simulated_quantize", args, ("data", "scale"))
    data = c.shape(0)
    scale = c.shape(1)
    if len(scale) == 1 and data:
        c.same(scale[0], data[c.axis(attrs.axis)], f"{c.arg(1)} must be a scalar or have "
               f"one step per channel along axis {attrs.axis}")
    elif scale:
        c.fail(f"{c.arg(1)} must be a scalar or 1-D (one step per channel)")
    return c.tensor(data)


def _simq(xp: ArrayModule, data: Array, scale: Array, nbit: int, signed: bool, rounding: str,
          axis: int, kind: str = "input") -> Array:
    if scale.ndim == 1:
        scale = along(xp, scale, axis, data.ndim)
    inv = xp.asarray(1, data.dtype) / scale
    lo, hi = qrange(nbit, signed)
    q = xp.clip(getattr(xp, rounding)(data * inv), lo, hi)
    return (q * scale).astype(data.dtype)


def _simq_np(data: Array, scale: Array, **attrs: AnyValue) -> Array:
    return _simq(np, data, scale, **attrs)


def _simq_jax(data: Array, scale: Array, **attrs: AnyValue) -> Array:
    # the straight-through estimator as JAX writes it: the values of simQ, the gradient of
    # clip(x, qmin·s, qmax·s) with the step held constant
    s = lax.stop_gradient(scale)
    step = along(jnp, s, attrs["axis"], data.ndim) if s.ndim == 1 else s
    lo, hi = qrange(attrs["nbit"], attrs["signed"])
    inside = jnp.clip(data, lo * step, hi * step)
    return inside + lax.stop_gradient(_simq(jnp, data, s, **attrs) - inside)


def _simq_grad(call: Call, g: Expr) -> list[Expr]:
    """Straight-through: d simQ(x, s) = (g where qmin·s <= x <= qmax·s else 0, 0)."""
    x, s = call.args
    a = call.attrs
    lo, hi = qrange(a.nbit, a.signed)
    step = gu.along(s, a.axis, gu.tensor_type(x).ndim) if gu.tensor_type(s).ndim else s
    inside = ops.logical_and(ops.greater_equal(x, gu.mul(step, gu.scalar(lo, x))),
                             ops.less_equal(x, gu.mul(step, gu.scalar(hi, x))))
    return [gu.where(inside, g, gu.zeros_for(x)), gu.zeros_for(s)]


def _simq_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, s = inputs
    axis = attrs.axis % x.ndim if x.ndim else 0
    lo, hi = qrange(attrs.nbit, attrs.signed)

    def f(*o: PrimExpr) -> PrimExpr:
        step = s[o[axis]] if s.ndim else s[()]
        inv = E.const(1.0, x.dtype) / step
        q = E.call(attrs.rounding, x[o] * inv)
        return E.minimum(E.maximum(q, E.const(float(lo), x.dtype)),
                         E.const(float(hi), x.dtype)) * step

    return compute(x.shape, f, "T_simulated_quantize")


simulated_quantize = register(OpDef(
    "simulated_quantize", ("data", "scale"), _simq_rel, OpPattern.BROADCAST,
    numpy_ref=_simq_np, jax_lower=_simq_jax, compute=_simq_compute, gradient=_simq_grad,
    attrs=(Attr("nbit", "int", 8, _check_nbit, doc="bits of the integer type"),
           Attr("signed", "bool", True, doc="a signed integer type (else unsigned)"),
           Attr("rounding", "str", "round", _check_rounding, doc="round, floor or ceil"),
           axis_attr(1, "the channel axis a 1-D scale runs along"),
           Attr("kind", "str", "input", _check_kind,
                doc="what is quantized: an activation (input) or a weight")),
    doc="simQ: clip(round(x * (1/s)), qmin, qmax) * s, s a scalar or per channel along axis; "
        "a straight-through gradient",
))

__all__ = ["NEAREST", "ROUNDINGS", "ROUNDING_OPS", "qrange", "simulated_quantize"]
