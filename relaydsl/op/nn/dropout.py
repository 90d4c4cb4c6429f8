"""dropout: the identity, or in training a hashed mask that NumPy, JAX and te compute bit for bit.

With ``training=True`` dropout keeps an element when a 32-bit hash of ``(seed, flat index)``
is at least ``rate * 2**32`` and scales kept elements by ``1 / (1 - rate)``::

    keep[i] = mix32(mix32(i) ^ seed) >= floor(rate * 2**32)
    mix32(x) = lowbias32: x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15; x *= 0x846CA68B;
               x ^= x >> 16   (uint32, wrapping)

The mask is not random state but a function of the index and the seed, so the gradient is
dropout of the output adjoint with the same seed. Calls are not constant-folded
(``Traits.foldable``): a program's dropout stays a dropout.

te has no uint32 and no bitwise operators, so the compute rule carries the uint32 values in
int64 (always in 0 .. 2**32 - 1) and writes the operations as arithmetic: ``x >> s`` is
``x // 2**s``; ``a ^ b`` is ``a + b - 2 * (a & b)``, with ``a & b`` summed bit by bit (only
over the bits ``b`` can have); ``x * c mod 2**32`` multiplies by halves so that no product
exceeds 2**49. A backend that folds ``// 2**k`` and ``% 2**k`` into shifts and masks gets back
the bit operations.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import TensorType, Type
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.nn.common import Array, ArrayModule, Inputs, in_range
from relaydsl.op.registry import Attr, OpDef, OpPattern, Traits, register
from relaydsl.te.expr import PrimExpr, cast, const, select
from relaydsl.te.indexing import ravel
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import RelationContext

# ---- the hash, on arrays (numpy or jax.numpy uint32) --------------------------------------------


def mix32(x: Array) -> Array:
    """lowbias32 (C. Wellons): a bijective, avalanching hash of uint32 values (wrapping)."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _keep(xp: ArrayModule, shape: Sequence[int], rate: float, seed: int) -> Array:
    """keep[i] = mix32(mix32(i) ^ seed) >= floor(rate * 2**32), i the flat index (mod 2**32)."""
    index = xp.arange(math.prod(shape), dtype=xp.uint32).reshape(shape)
    bits = mix32(mix32(index) ^ xp.uint32(seed % 2**32))
    return bits >= xp.uint32(min(int(rate * 2**32), 2**32 - 1))


# ---- the hash, in te (uint32 carried in int64) --------------------------------------------------

U32 = "int64"  # the carrier of uint32 values
_MASK = 2**32


def _bits(x: PrimExpr, n: int) -> list[PrimExpr]:
    """The low ``n`` bits of x (0 or 1 each), least significant first."""
    return [x % 2 if k == 0 else (x // 2**k) % 2 for k in range(n)]


def _xor_shift(x: PrimExpr, shift: int) -> PrimExpr:
    """``x ^ (x >> shift)`` for a uint32 x: bit k of ``x >> shift`` is bit k + shift of x."""
    bits = _bits(x, 32)
    both = None
    for k in range(32 - shift):
        term = bits[k] * bits[k + shift]
        term = term if k == 0 else term * 2**k
        both = term if both is None else both + term
    assert both is not None, "shift < 32"
    return x + x // 2**shift - both * 2


def _xor_const(x: PrimExpr, c: int) -> PrimExpr:
    """``x ^ c`` for a uint32 x and a constant c in 0 .. 2**32 - 1."""
    bits = _bits(x, 32)
    both = None
    for k in range(32):
        if c >> k & 1:
            term = bits[k] if k == 0 else bits[k] * 2**k
            both = term if both is None else both + term
    return x if both is None else x + c - both * 2


def _mul_const(x: PrimExpr, c: int) -> PrimExpr:
    """``x * c mod 2**32``: x = hi * 2**16 + lo, and hi * c only matters mod 2**16."""
    lo, hi = x % 2**16, x // 2**16
    return (lo * c + (hi * (c % 2**16)) % 2**16 * 2**16) % _MASK


def mix32_te(x: PrimExpr) -> PrimExpr:
    """mix32 on an int64-carried uint32 te expression."""
    x = _xor_shift(x, 16)
    x = _mul_const(x, 0x7FEB352D)
    x = _xor_shift(x, 15)
    x = _mul_const(x, 0x846CA68B)
    return _xor_shift(x, 16)


# ---- dropout ------------------------------------------------------------------------------------


def _dropout_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "dropout", args, ("data",))
    return c.tensor(c.shape(0))


def _dropout(xp: ArrayModule, data: Array, rate: float, training: bool, seed: int) -> Array:
    if not training:
        return data
    keep = _keep(xp, data.shape, rate, seed)
    return xp.where(keep, data * xp.asarray(1 / (1 - rate), data.dtype), xp.zeros((), data.dtype))


def _dropout_np(data: Array, *, rate: float, training: bool, seed: int) -> Array:
    return _dropout(np, data, rate, training, seed)


def _dropout_jax(data: Array, *, rate: float, training: bool, seed: int) -> Array:
    return _dropout(jnp, data, rate, training, seed)


def _dropout_grad(call: Call, g: Expr) -> list[Expr]:
    """d dropout(x) = dropout(g) with the same seed: the same mask and scale (or the identity)."""
    return [dropout(g, **call.attrs)]


def _dropout_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    if not attrs.training:
        return compute(x.shape, lambda *o: x[o], "T_dropout")
    threshold = min(int(attrs.rate * 2**32), 2**32 - 1)
    scale = const(1 / (1 - attrs.rate), x.dtype)  # rounded to x's dtype, as the reference
    seed = attrs.seed % _MASK

    def f(*o: PrimExpr) -> PrimExpr:
        flat = ravel([cast(U32, i) for i in o], x.shape) if o else const(0, U32)
        keep = mix32_te(_xor_const(mix32_te(flat), seed)) >= threshold
        return select(keep, x[o] * scale, const(0, x.dtype))

    return compute(x.shape, f, "T_dropout")


dropout = register(OpDef(
    "dropout", ("data",), _dropout_rel, OpPattern.OPAQUE,
    numpy_ref=_dropout_np, jax_lower=_dropout_jax, compute=_dropout_compute,
    gradient=_dropout_grad,
    attrs=(Attr("rate", "float", 0.5, in_range(0.0, 1.0, hi_open=True), "drop probability"),
           Attr("training", "bool", False, doc="drop (otherwise the identity)"),
           Attr("seed", "int", 0, doc="selects the mask; the same seed gives the same mask")),
    doc="identity; in training zero each element with probability rate (a hash of seed and "
        "index) and scale the rest by 1 / (1 - rate)",
    traits=Traits(foldable=False),
))
