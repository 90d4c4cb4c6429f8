"""dropout: the identity, or in training a mask hashed from a key, as JAX's random keys.

``dropout(data, key, rate=, training=)``: with ``training=True`` dropout keeps an element
when a 32-bit hash of the key and its flat index is at least ``rate * 2**32`` and scales
kept elements by ``1 / (1 - rate)``. The key is a runtime operand, two integers ``(k0, k1)``
(of any integer dtype, each taken mod 2**32): a new key gives a new mask, the same key the
same mask. A ``@relay_model``'s dropout layer keeps its key in the model state and advances
``k1`` by one each training step (a counter-based generator, as Random123 and JAX's
threefry keys)::

    seed    = mix32(mix32(k0) ^ k1)
    keep[i] = mix32(mix32(i) ^ seed) >= floor(rate * 2**32)
    mix32(x) = lowbias32: x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15; x *= 0x846CA68B;
               x ^= x >> 16   (uint32, wrapping)

The mask is a function of the key and the index, not hidden state, so dropout is a pure
function of its operands (constant folding and CSE may treat it as any op) and its gradient
is dropout of the output adjoint with the same key.

te has no uint32 and no bitwise operators, so the compute rule carries the uint32 values in
int64 (always in 0 .. 2**32 - 1) and writes the operations as arithmetic: ``x >> s`` is
``x // 2**s``; ``a ^ b`` is ``a + b - 2 * (a & b)``, with ``a & b`` summed bit by bit;
``x * c mod 2**32`` multiplies by halves so that no product exceeds 2**49. A backend that
folds ``// 2**k`` and ``% 2**k`` into shifts and masks gets back the bit operations.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import TensorType, Type, type_to_str
from relaydsl.op.grad_util import zeros_for
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.nn.common import Array, ArrayModule, Inputs, in_range
from relaydsl.op.registry import Attr, OpDef, OpPattern, register
from relaydsl.te.expr import PrimExpr, cast, const, select
from relaydsl.te.indexing import ravel
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import INTEGER, RelationContext, require_dtype, tensor_arg

# ---- the hash, on arrays (numpy or jax.numpy uint32) --------------------------------------------


def mix32(x: Array) -> Array:
    """lowbias32 (C. Wellons): a bijective, avalanching hash of uint32 values (wrapping)."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _keep(xp: ArrayModule, shape: Sequence[int], rate: float, key: Array) -> Array:
    """keep[i] = mix32(mix32(i) ^ seed) >= floor(rate * 2**32), i the flat index (mod 2**32),
    seed = mix32(mix32(k0) ^ k1)."""
    # 1-D arrays throughout: NumPy warns of the (intended) wrap-around in scalar arithmetic
    k = xp.asarray(key).astype(xp.uint32)  # the low 32 bits of each integer
    seed = mix32(mix32(k[:1]) ^ k[1:])
    index = xp.arange(math.prod(shape), dtype=xp.uint32)
    keep = mix32(mix32(index) ^ seed) >= xp.uint32(min(int(rate * 2**32), 2**32 - 1))
    return keep.reshape(shape)


# ---- the hash, in te (uint32 carried in int64) --------------------------------------------------

U32 = "int64"  # the carrier of uint32 values
_MASK = 2**32


def _bits(x: PrimExpr, n: int) -> list[PrimExpr]:
    """The low ``n`` bits of x (0 or 1 each), least significant first."""
    return [x % 2 if k == 0 else (x // 2**k) % 2 for k in range(n)]


def _and_sum(pairs: list[tuple[PrimExpr, PrimExpr]]) -> PrimExpr:
    """``sum(a_k * b_k * 2**k)``: the bits set in both of two numbers, from their bit lists."""
    total = None
    for k, (a, b) in enumerate(pairs):
        term = a * b if k == 0 else a * b * 2**k
        total = term if total is None else total + term
    assert total is not None, "at least one bit"
    return total


def _xor_shift(x: PrimExpr, shift: int) -> PrimExpr:
    """``x ^ (x >> shift)`` for a uint32 x: bit k of ``x >> shift`` is bit k + shift of x."""
    bits = _bits(x, 32)
    return x + x // 2**shift - _and_sum(list(zip(bits, bits[shift:]))) * 2


def _xor(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a ^ b`` for uint32 a and b."""
    return a + b - _and_sum(list(zip(_bits(a, 32), _bits(b, 32)))) * 2


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
    c = Inputs(ctx, "dropout", args[:1], ("data",))
    key = tensor_arg(ctx, args[1], "dropout: key")
    require_dtype(ctx, "dropout", "the key", key, INTEGER)
    pair = "the key must be a pair of integers, shape (2,)"
    if key.ndim != 1:
        c.fail(f"{pair}, got key {type_to_str(key)}")
    ctx.unify_dims(key.shape[0], 2, f"dropout: {pair}")
    return c.tensor(c.shape(0))


def _dropout(xp: ArrayModule, data: Array, key: Array, rate: float, training: bool) -> Array:
    if not training:
        return data
    keep = _keep(xp, data.shape, rate, key)
    return xp.where(keep, data * xp.asarray(1 / (1 - rate), data.dtype), xp.zeros((), data.dtype))


def _dropout_np(data: Array, key: Array, *, rate: float, training: bool) -> Array:
    return _dropout(np, data, key, rate, training)


def _dropout_jax(data: Array, key: Array, *, rate: float, training: bool) -> Array:
    return _dropout(jnp, data, key, rate, training)


def _dropout_grad(call: Call, g: Expr) -> list[Expr]:
    """d dropout(x, key) = (dropout(g, key): the same mask and scale, or the identity; 0)."""
    key = call.args[1]
    return [dropout(g, key, **call.attrs), zeros_for(key)]


def _dropout_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, key = inputs
    if not attrs.training:
        return compute(x.shape, lambda *o: x[o], "T_dropout")
    threshold = min(int(attrs.rate * 2**32), 2**32 - 1)
    scale = const(1 / (1 - attrs.rate), x.dtype)  # rounded to x's dtype, as the reference

    def word(i: int) -> PrimExpr:
        return cast(U32, key[i]) % _MASK  # the low 32 bits (floor mod: -1 is 2**32 - 1)

    # once per call, not per element
    seed = compute((), lambda: mix32_te(_xor(mix32_te(word(0)), word(1))), "T_dropout_seed")

    def f(*o: PrimExpr) -> PrimExpr:
        flat = ravel([cast(U32, i) for i in o], x.shape) if o else const(0, U32)
        keep = mix32_te(_xor(mix32_te(flat), seed[()])) >= threshold
        return select(keep, x[o] * scale, const(0, x.dtype))

    return compute(x.shape, f, "T_dropout")


dropout = register(OpDef(
    "dropout", ("data", "key"), _dropout_rel, OpPattern.OPAQUE,
    numpy_ref=_dropout_np, jax_lower=_dropout_jax, compute=_dropout_compute,
    gradient=_dropout_grad,
    attrs=(Attr("rate", "float", 0.5, in_range(0.0, 1.0, hi_open=True), "drop probability"),
           Attr("training", "bool", False, doc="drop (otherwise the identity)")),
    doc="identity; in training zero each element with probability rate (a hash of the key, "
        "a pair of integers, and the index) and scale the rest by 1 / (1 - rate)",
))
