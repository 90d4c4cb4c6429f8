"""The quantization facet of an op (``Traits.quantize``, DESIGN.md §3): a ``QuantizeRule``.

It says which of the op's operands annotation quantizes (its ``annotate`` function, which a
user may override with ``relaydsl.quantize.register_rule`` without touching the pass) and how
realization runs the op's call on integers (``Realization``). An op without one runs in float:
realization turns integers reaching it back into floats.

>>> from relaydsl.op import ops
>>> ops.conv2d.traits.quantize.realization
<Realization.PRODUCT: 'product'>
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any as AnyValue, Callable, Sequence

from relaydsl.ir.expr import Call, Constant


class QKind(enum.Enum):
    """What an operand annotation quantizes is: an activation (calibrated on data) or a
    weight (a constant, scaled from its own values)."""

    INPUT = "input"
    WEIGHT = "weight"


class Realization(enum.Enum):
    """How realization runs an op's call whose operands are integers.

    - ``PRODUCT``: the op on the integers, accumulated in the accumulator dtype; the result's
      step is the product of the operands' (conv2d, dense, matmul, multiply).
    - ``SAME_SCALE``: the op on the integers keeps their step (relu, max pools, reshapes,
      concatenate when every operand has the same step).
    - ``SUM``: integers of one step added; a constant operand is quantized at the other's
      step into the accumulator dtype (add, bias_add).
    """

    PRODUCT = "product"
    SAME_SCALE = "same_scale"
    SUM = "sum"


AnnotateRule = Callable[[Call, AnyValue], Sequence["QKind | None"] | None]
"""(call, config) -> for each operand, how annotation quantizes it (None: left float); or
None to leave the call float."""


def quantize_operands(call: Call, config: AnyValue) -> tuple[QKind, ...]:
    """Every operand: constants as weights, the rest as activations (a product's rule)."""
    return tuple(QKind.WEIGHT if isinstance(a, Constant) else QKind.INPUT for a in call.args)


def quantize_none(call: Call, config: AnyValue) -> tuple[None, ...]:
    """No operand: the op runs on integers that reach it, floats otherwise (relu, pools)."""
    return (None,) * len(call.args)


@dataclass(frozen=True)
class QuantizeRule:
    """An op's quantization facet: `annotate` (see AnnotateRule), `realization`, and for a
    product the weight's output-channel axis (per-channel steps) and the result's channel axis;
    ``per_channel_safe``: an op keeping the step that also keeps the channel axis where it is
    (relu, pools), so a per-channel step passes through it."""

    annotate: AnnotateRule
    realization: Realization
    weight_axis: int | None = None
    out_axis: int | None = None
    per_channel_safe: bool = False


SAME_SCALE_ELEMENTWISE = QuantizeRule(quantize_none, Realization.SAME_SCALE,
                                      per_channel_safe=True)
SAME_SCALE_RESHAPE = QuantizeRule(quantize_none, Realization.SAME_SCALE)
SUM = QuantizeRule(quantize_none, Realization.SUM, per_channel_safe=True)
ELEMENTWISE_PRODUCT = QuantizeRule(quantize_none, Realization.PRODUCT)


def product_rule(weight_axis: int, out_axis: int) -> QuantizeRule:
    """The rule of a product whose weight's output channels run along `weight_axis` and whose
    result's along `out_axis`."""
    return QuantizeRule(quantize_operands, Realization.PRODUCT, weight_axis, out_axis)
