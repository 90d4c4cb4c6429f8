"""Where annotation finds an op's quantization rule: a user's, registered with
``register_rule``, else the op's own facet (``Traits.quantize``, relaydsl/op/quantize_rule.py).

A user changes how an op is quantized without touching the pass, as with TVM's
``register_annotate_function``:

>>> from relaydsl.op import ops
>>> from relaydsl.op.quantize_rule import QKind
>>> @register_rule(ops.add)
... def quantize_residual_adds(call, config):
...     return (QKind.INPUT, QKind.INPUT)
>>> rule_of(ops.add).annotate is quantize_residual_adds
True
>>> reset_rule(ops.add)
>>> rule_of(ops.add).annotate.__name__
'quantize_skip_operand'
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from relaydsl.ir.node import conforms
from relaydsl.op.quantize_rule import AnnotateRule, QuantizeRule, Realization
from relaydsl.op.registry import OpDef

_USER_RULES: dict[OpDef, QuantizeRule] = {}


def rule_of(op: OpDef) -> QuantizeRule | None:
    """The rule annotation and realization apply to calls of `op` (None: it runs in float)."""
    return _USER_RULES.get(op, op.traits.quantize)


def register_rule(op: OpDef, realization: Realization | None = None, *,
                  weight_axis: int | None = None, out_axis: int | None = None
                  ) -> Callable[[AnnotateRule], AnnotateRule]:
    """A decorator making the function ``(call, config) -> kinds`` the annotation rule of
    `op` (``relay.conv2d`` or ``ops.conv2d``), overriding its facet's. `realization` and
    the axes default to the op's facet's (an op with none: ``Realization.SAME_SCALE``)."""
    op = getattr(op, "relay_op", op)  # relay.<op> functions carry their OpDef
    if not conforms(op, OpDef):  # a user's argument
        raise TypeError(f"register_rule takes an op (relay.conv2d), got {type(op).__name__}")

    def decorate(fn: AnnotateRule) -> AnnotateRule:
        base = op.traits.quantize or QuantizeRule(fn, Realization.SAME_SCALE)
        _USER_RULES[op] = replace(
            base, annotate=fn, realization=realization or base.realization,
            weight_axis=base.weight_axis if weight_axis is None else weight_axis,
            out_axis=base.out_axis if out_axis is None else out_axis)
        return fn

    return decorate


def reset_rule(op: OpDef) -> None:
    """Drop a user's rule for `op`: its own facet applies again."""
    _USER_RULES.pop(getattr(op, "relay_op", op), None)
