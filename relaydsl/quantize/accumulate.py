"""Accumulators that never overflow silently: what realization sums each product in.

An m/n scheme sums m-bit products in n bits. Calibration (calibrate.py) coarsens steps until the
sums fit n bits *on the calibration data*; other data can still go further. Each product is
therefore realized by the first of these that applies (its ``status``):

- ``proven``: no input can overflow the n-bit accumulator (``worst_case``: an int8 activation
  is at most 128 whatever the data, so a dense's sums are at most ``128 · max_j |Wq[j]|_1``).
  The product sums in n bits, as the scheme says.
- ``checked`` (8/16, ``QConfig.overflow`` "warn" or "raise"): the product sums in int32, as
  VNNI hardware does, and the narrowing to int16 is checked: it saturates (clips to int16),
  and the program counts the elements that saturated. ``relay.quantize``'s callable warns (or
  raises) naming the layer when a count is not zero. Where nothing saturates the result is
  the int16 accumulator's to the bit (summing mod 2^16 is exact when the true sum fits).
- ``widened`` (``overflow="widen"``): the product sums in int32, not narrowed: never
  overflows, and the layer is no longer 8/16.
- ``unchecked``: a 32-bit accumulator that some input could overflow (16/32, whose int16
  products reach 2^30; calibration keeps a quarter of int32's range free on its data).

The realized function lists every product's accumulator in its attribute
``quantize_accumulators`` (``accumulators_of``), and, when some are checked, returns
``(result, (count, ...))``, one int32 count per checked layer, in that list's order.

>>> import numpy as np
>>> from relaydsl.ir import Constant, TensorType
>>> w = Constant(np.array([[100, -100, 27], [1, 2, 3]], np.int8))   # dense's (units, k)
>>> worst_case([TensorType((4, 3), "int8"), w], weight_axis=0)   # 128 * (100 + 100 + 27)
29056.0
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Constant, Expr, Function
from relaydsl.ir.types import TensorType
from relaydsl.op import ops

ATTR = "quantize_accumulators"
STATUSES = ("proven", "checked", "widened", "unchecked")


class Accumulator(NamedTuple):
    """How one product layer sums: `layer` names it (``conv2d #2 at model.py:14:9``), `dtype`
    is what its sums are held in, `status` one of STATUSES, `bound` the largest magnitude any
    input can give its sums."""

    layer: str
    dtype: str
    status: str
    bound: float


def worst_case(operands: Sequence[TensorType | Constant], weight_axis: int | None,
               elementwise: bool = False) -> float:
    """An upper bound of the ``|sum|`` a product (dense, conv2d, matmul, multiply) can give on
    integer operands: a constant's own magnitudes, a tensor type's dtype's largest magnitude
    everywhere.

    It rests on the law realization already relies on for per-channel steps: each output
    element sums products of distinct operand elements, the weight's (the last operand's) all
    from one slice along `weight_axis` (its output channel). With a constant weight the bound
    is the activation's largest magnitude times the largest L1 norm of a slice (exact for
    dense, and for conv2d's interior positions); with two activations, the product of their
    largest magnitudes times the smaller one's size (``inf`` where that is not known). An
    `elementwise` product (multiply) sums nothing: one product per output element.
    """
    weights = [o for o in operands if isinstance(o, Constant)]
    types = [o for o in operands if isinstance(o, TensorType)]
    if not isinstance(operands[-1], Constant):  # weight_axis is the last operand's (a rule's
        weight_axis = None                      # weight): a first one's norm is taken whole
    largest = [_largest(t.concrete_dtype()) for t in types]
    if elementwise:
        return float(np.prod([*largest, *(np.abs(w.data.astype(np.float64)).max(initial=0.0)
                                           for w in weights)]))
    if len(weights) == 1 and len(types) == 1:
        w = np.abs(weights[0].data.astype(np.float64))
        if weight_axis is not None and w.ndim:
            w = np.moveaxis(w, weight_axis % w.ndim, 0).reshape(w.shape[weight_axis], -1)
            return largest[0] * float(w.sum(axis=1).max(initial=0.0))
        return largest[0] * float(w.sum())
    if len(types) == 2 and all(t.is_static for t in types):
        terms = min(int(np.prod(t.concrete_shape())) for t in types)
        return largest[0] * largest[1] * terms
    return float("inf")


def _largest(dtype: str) -> float:
    """The largest magnitude of an integer `dtype` (128 for int8)."""
    info = np.iinfo(dtype)
    return float(max(-int(info.min), int(info.max)))


def fits(bound: float, dtype: str) -> bool:
    """Whether every integer of magnitude at most `bound` is a `dtype`."""
    info = np.iinfo(dtype)
    return bound <= min(-int(info.min), int(info.max))


def checked_narrowing(wide: Expr, dtype: str) -> tuple[Expr, Expr]:
    """(`wide`, an int32 sum, saturated into `dtype`; how many of its elements saturated, an
    int32 scalar)."""
    info = np.iinfo(dtype)
    clipped = ops.clip(wide, a_min=float(info.min), a_max=float(info.max))
    count = ops.sum(ops.cast(ops.not_equal(wide, clipped), dtype="int32"))
    return ops.cast(clipped, dtype=dtype), count


def with_accumulators(fn: Function, body: Expr, accumulators: Sequence[Accumulator]
                      ) -> Function:
    """`fn` with `body`, listing `accumulators` in its attributes."""
    attrs = fn.attrs
    if accumulators:
        attrs = Attrs({**fn.attrs, ATTR: tuple(tuple(a) for a in accumulators)})
    return Function(fn.params, body, None, fn.type_params, attrs, span=fn.span)


def accumulators_of(fn: Expr) -> tuple[Accumulator, ...]:
    """The accumulators a realized function lists (none for any other)."""
    if not isinstance(fn, Function):
        return ()
    return tuple(Accumulator(*a) for a in fn.attrs.get(ATTR, ()))
