"""The compute rule of dropout (relaydsl/op/nn.py), bit-exact with its reference.

Outside training dropout is the identity. In training its mask is not random
state but a pure function of the element's row-major flat index ``i`` and the
``seed`` attribute (see ``_dropout_keep`` in relaydsl/op/nn.py)::

    keep[i] = mix32(mix32(i) ^ seed) >= floor(rate * 2**32)
    mix32(x) = lowbias32: x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15; x *= 0x846CA68B;
               x ^= x >> 16   (uint32, wrapping)

so the rule computes the same bits. te has no uint32 and no bitwise operators,
so the uint32 values live in int64 (always in 0 .. 2**32 - 1) and the
operations are arithmetic: ``x >> s`` is ``x // 2**s``; ``a ^ b`` is
``a + b - 2 * (a & b)``, with ``a & b`` summed bit by bit (only over the bits
``b`` can have); ``x * c mod 2**32`` multiplies by halves so that no product
exceeds 2**49. A backend that folds ``// 2**k`` and ``% 2**k`` into shifts and
masks gets back the bit operations.

The kept elements are ``x * dtype(1 / (1 - rate))``, the dropped ones 0.
"""
from __future__ import annotations

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType
from relaydsl.te.rules import ComputeRule
from relaydsl.te.indexing import ravel
from relaydsl.te.expr import PrimExpr, cast, const, select
from relaydsl.te.tensor import Tensor, compute

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


def _mul(x: PrimExpr, c: int) -> PrimExpr:
    """``x * c mod 2**32``: x = hi * 2**16 + lo, and hi * c only matters mod 2**16."""
    lo, hi = x % 2**16, x // 2**16
    return (lo * c + (hi * (c % 2**16)) % 2**16 * 2**16) % _MASK


def mix32(x: PrimExpr) -> PrimExpr:
    """lowbias32 (C. Wellons), as ``_mix32`` in relaydsl/op/nn.py, on an int64-carried uint32."""
    x = _xor_shift(x, 16)
    x = _mul(x, 0x7FEB352D)
    x = _xor_shift(x, 15)
    x = _mul(x, 0x846CA68B)
    return _xor_shift(x, 16)


def _dropout(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    if not attrs.training:
        return compute(x.shape, lambda *o: x[o], "T_dropout")
    threshold = min(int(attrs.rate * 2**32), 2**32 - 1)
    scale = const(1 / (1 - attrs.rate), x.dtype)  # rounded to x's dtype, as the reference
    seed = attrs.seed % _MASK

    def f(*o: PrimExpr) -> PrimExpr:
        flat = ravel([cast(U32, i) for i in o], x.shape) if o else const(0, U32)
        keep = mix32(_xor_const(mix32(flat), seed)) >= threshold
        return select(keep, x[o] * scale, const(0, x.dtype))

    return compute(x.shape, f, "T_dropout")


RULES: dict[str, ComputeRule] = {"dropout": _dropout}
