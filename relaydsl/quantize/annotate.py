"""Annotate: simQ inserted where each op's rule asks (the first step of §4.2's flow).

Each call of an op with a rule (rules.py: the user's, else the op's facet) has the operands its
rule names wrapped in ``simulated_quantize`` with the config's bits (``nbit_input`` for an
activation, ``nbit_weight`` for a weight) and a placeholder step of 1, which calibration sets.
A weight with ``per_channel`` gets one step per output channel (the rule's ``weight_axis``).
The conv2d calls of ``skip_conv_layers`` (by index in program order) and, with
``skip_dense_layer``, every dense are left alone. The function must be dataflow (graph normal
form: the quantize pipeline in transform/pipeline.py runs ToGraphNormalForm first). An operand
quantized for several calls gets one simQ (one step), so its integers are made once.

Before and after (``%w`` a constant weight)::

    dense(%x, %w)
    dense(simulated_quantize(%x, 1f, nbit=8), simulated_quantize(%w, 1f, nbit=8))
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from relaydsl.ir.expr import Call, Constant, Expr, Op
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator
from relaydsl.op.nn.conv import conv2d
from relaydsl.op.nn.linear import dense
from relaydsl.op.quantize import simulated_quantize
from relaydsl.op.quantize_rule import QKind
from relaydsl.op.registry import OpDef
from relaydsl.quantize.config import QConfig
from relaydsl.quantize.rules import rule_of
from relaydsl.transform._util import rewrite_functions
from relaydsl.transform.pass_infra import Pass


@dataclass(frozen=True)
class Annotate(Pass, opt_level=4, description="insert simQ where each op's quantization rule "
                                              "asks (relay.quantize)"):
    """simQ around the operands op rules name; see the module docstring."""

    config: QConfig = field(default_factory=QConfig)

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_functions(mod, lambda fn: _Annotate(self.config).visit(fn))


class _Annotate(ExprMutator):
    def __init__(self, config: QConfig) -> None:
        super().__init__()
        self.config = config
        self.convs = 0
        # one simQ per operand and kind, whatever the number of calls quantizing it: one step
        # for the value, so realization makes one integer tensor that every consumer reads
        self.quantized: dict[tuple[Expr, QKind, int | None], Expr] = {}

    def _skipped(self, op: OpDef) -> bool:
        if op is conv2d:
            self.convs += 1
            return self.convs - 1 in self.config.skip_conv_layers
        return op is dense and self.config.skip_dense_layer

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if not isinstance(call.op, Op) or not isinstance(new, Call):
            return new
        opdef = call.op.definition
        rule = rule_of(opdef)
        if rule is None or self._skipped(opdef):
            return new
        kinds = rule.annotate(call, self.config)
        if kinds is None or all(k is None for k in kinds):
            return new
        if len(kinds) != len(call.args):
            raise ValueError(f"the quantization rule of {opdef.name} gave {len(kinds)} kinds "
                             f"for {len(call.args)} operands")
        # weight_axis is the output channels of a rule's weight, its last operand: a constant
        # first operand (matmul(W, x)) has its output channels elsewhere, so one step
        last = len(new.args) - 1
        args = tuple(a if k is None else
                     self._quantize(a, k, rule.weight_axis if i == last else None)
                     for i, (a, k) in enumerate(zip(new.args, kinds)))
        return Call(new.op, args, new.attrs, new.type_args, span=new.span)

    def _quantize(self, arg: Expr, kind: QKind, weight_axis: int | None) -> Expr:
        key = (arg, kind, weight_axis if kind is QKind.WEIGHT else None)
        done = self.quantized.get(key)
        if done is None:
            done = self.quantized[key] = self._simq(arg, kind, weight_axis)
        return done

    def _simq(self, arg: Expr, kind: QKind, weight_axis: int | None) -> Expr:
        cfg = self.config
        weight = kind is QKind.WEIGHT
        step = np.ones((), np.float32)
        axis = 1
        if weight and cfg.per_channel and weight_axis is not None and isinstance(arg, Constant):
            axis = weight_axis % arg.data.ndim
            step = np.ones((arg.data.shape[axis],), np.float32)
        nbit = cfg.nbit_weight if weight else cfg.nbit_input
        # unsigned applies to activations only: a weight has both signs
        signed = cfg.signed or weight
        rounding = cfg.rounding if cfg.rounding != "stochastic" else "round"
        return simulated_quantize(arg, Constant(np.asarray(step, np.float32)), nbit=nbit,
                                  signed=signed, rounding=rounding, axis=axis,
                                  kind=kind.value)
