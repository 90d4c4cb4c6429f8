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

import numpy as np

from relaydsl.ir.expr import Call, Constant, Expr


class QKind(enum.Enum):
    """What an operand annotation quantizes is: an activation (calibrated on data) or a
    weight (a constant, scaled from its own values)."""

    INPUT = "input"
    WEIGHT = "weight"


class Realization(enum.Enum):
    """How realization runs an op's call whose operands are integers.

    - ``PRODUCT``: the op on the integers, accumulated in the accumulator dtype; the result's
      step is the product of the operands' (conv2d, dense, matmul, multiply).
    - ``SAME_SCALE``: the op on the integers keeps their step (relu, max pools, reshapes).
    - ``SUM``: integers of one step added; a constant operand is quantized at the other's
      step into the accumulator dtype (add, bias_add).
    - ``COMMON_SCALE``: the integers of a tuple operand requantized to one step, the
      coarsest of theirs, then the op on them (concatenate).
    - ``RESCALE``: the rule's ``integer`` function gives the op's integer form and the factor
      its result's step is the operand's times (an average pool: the window's integer sum,
      at the step over the window's size; clip: its bounds in steps).
    """

    PRODUCT = "product"
    SAME_SCALE = "same_scale"
    SUM = "sum"
    COMMON_SCALE = "common_scale"
    RESCALE = "rescale"


AnnotateRule = Callable[[Call, AnyValue], Sequence["QKind | None"] | None]
"""(call, config) -> for each operand, how annotation quantizes it (None: left float); or
None to leave the call float."""


@dataclass(frozen=True)
class IntegerForm:
    """What a ``RESCALE`` rule's ``integer`` function returns: the op's call on the integer
    operand as `expr`, of `dtype`, standing for ``expr · step · factor`` (step the operand's)."""

    expr: Expr
    factor: float
    dtype: str


IntegerRule = Callable[[Call, Expr, np.ndarray, str], "IntegerForm | None"]
"""(call, the integer operand, its step, its dtype) -> the call's integer form, or None to
run the call in float. The step is a scalar, or per channel along axis 1 where the rule's
``channel_axes`` allow it."""


def quantize_operands(call: Call, config: AnyValue) -> tuple[QKind, ...]:
    """Every operand: constants as weights, the rest as activations (a product's rule)."""
    return tuple(QKind.WEIGHT if isinstance(a, Constant) else QKind.INPUT for a in call.args)


def quantize_none(call: Call, config: AnyValue) -> tuple[None, ...]:
    """No operand: the op runs on integers that reach it, floats otherwise (relu, pools)."""
    return (None,) * len(call.args)


def accumulates(e: Expr) -> bool:
    """Whether `e` is a call whose op's facet realizes it as integers summed in the
    accumulator (a product, or a sum such as a bias added to one)."""
    op = getattr(e, "op", None)
    rule = getattr(getattr(op, "definition", None), "traits", None)
    rule = getattr(rule, "quantize", None)
    return isinstance(e, Call) and isinstance(rule, QuantizeRule) and \
        rule.realization in (Realization.PRODUCT, Realization.SUM)


def quantize_skip_operand(call: Call, config: AnyValue) -> tuple[QKind | None, ...]:
    """A residual join, an accumulator plus another activation (the skip path): that
    activation quantized as an input. It is usually the input of the block's first layer too,
    whose simQ annotation shares, so its integers are made once, where it is computed, and
    the sum reads them instead of keeping the wide accumulator alive (as TVM's and PyTorch's
    quantized ResNets do). Constants (a bias) and other sums are left as they are."""
    acc = [accumulates(a) for a in call.args]
    return tuple(QKind.INPUT if len(acc) == 2 and acc[1 - i] and not acc[i]
                 and not isinstance(a, Constant) else None for i, a in enumerate(call.args))


@dataclass(frozen=True)
class QuantizeRule:
    """An op's quantization facet: `annotate` (see AnnotateRule), `realization`, and for a
    product the weight's output-channel axis (per-channel steps) and the result's channel axis;
    ``per_channel_safe``: an op keeping the step that also keeps the channel axis where it is
    (relu, pools), so a per-channel step passes through it, along any axis (an elementwise
    op) or along one of ``channel_axes`` (a pool: 1, NCHW's channels); `integer`: a
    ``RESCALE`` op's integer form."""

    annotate: AnnotateRule
    realization: Realization
    weight_axis: int | None = None
    out_axis: int | None = None
    per_channel_safe: bool = False
    channel_axes: tuple[int, ...] | None = None
    integer: IntegerRule | None = None

    def keeps_channels(self, axis: int, ndim: int) -> bool:
        """Whether a per-channel step along `axis` of a rank-`ndim` operand passes through.

        >>> SAME_SCALE_POOL.keeps_channels(1, 4), SAME_SCALE_POOL.keeps_channels(-1, 4)
        (True, False)
        """
        if not self.per_channel_safe:
            return False
        return self.channel_axes is None or axis % max(ndim, 1) in self.channel_axes


SAME_SCALE_ELEMENTWISE = QuantizeRule(quantize_none, Realization.SAME_SCALE,
                                      per_channel_safe=True)
SAME_SCALE_RESHAPE = QuantizeRule(quantize_none, Realization.SAME_SCALE)
SAME_SCALE_POOL = QuantizeRule(quantize_none, Realization.SAME_SCALE, per_channel_safe=True,
                               channel_axes=(1,))
"""A max pool's: the maximum of integers of one step is the integer of the maximum (Q is
monotone); a per-channel step along NC(D)HW's channel axis passes through."""
COMMON_SCALE = QuantizeRule(quantize_none, Realization.COMMON_SCALE)


def rescale_rule(integer: IntegerRule, channel_axes: tuple[int, ...] | None = None
                 ) -> QuantizeRule:
    """The rule of an op whose integer form is `integer`'s (see Realization.RESCALE); a
    per-channel step passes along `channel_axes` (None: only a per-tensor one)."""
    return QuantizeRule(quantize_none, Realization.RESCALE, per_channel_safe=bool(channel_axes),
                        channel_axes=channel_axes, integer=integer)
SUM = QuantizeRule(quantize_none, Realization.SUM, per_channel_safe=True)
RESIDUAL_SUM = QuantizeRule(quantize_skip_operand, Realization.SUM, per_channel_safe=True)
"""add's: a SUM whose annotation quantizes a residual connection's skip path."""
ELEMENTWISE_PRODUCT = QuantizeRule(quantize_none, Realization.PRODUCT)


def product_rule(weight_axis: int, out_axis: int) -> QuantizeRule:
    """The rule of a product whose weight's output channels run along `weight_axis` and whose
    result's along `out_axis`."""
    return QuantizeRule(quantize_operands, Realization.PRODUCT, weight_axis, out_axis)
