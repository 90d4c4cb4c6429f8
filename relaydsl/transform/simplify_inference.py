"""SimplifyInference: inference-mode batch_norm and dropout become plain arithmetic.

In inference, ``batch_norm`` normalises with constants per channel, so it is an affine map
of x, ``x * scale + shift`` with ``scale = gamma / sqrt(moving_var + epsilon)`` and
``shift = beta - moving_mean * scale`` along the channel axis; and ``dropout`` is the
identity. Both ops are opaque (never fused); written as multiply and add they fuse with
their neighbours, and when the parameters are constants (a model's parameters bound into
the program) FoldConstant, which runs after this pass, folds scale and shift into two
constant vectors. Calls in training mode are left alone.

Before and after (the moving statistics still come out of the call, unchanged)::

    %0 = batch_norm(%x, %gamma, %beta, %mean, %var, epsilon=1e-3);  %0.0
    %s = multiply(%gamma, rsqrt(add(%var, 1e-3f)));
    (add(multiply(%x, expand_dims(%s, axis=1, num_newaxis=2)),
         expand_dims(add(%beta, multiply(negative(%mean), %s)), ...)), %mean, %var).0

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(4, 3), float32], %key: Tensor[(2,), int64]) {
...   add(dropout(%x, %key, rate=0.3), %x)
... }'''))
>>> print(simplify_inference(mod)["main"].body)
add(%x: Tensor[(4, 3), float32], %x)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaydsl.ir.expr import Call, Constant, Expr, Function, Op, Tuple
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprMutator
from relaydsl.op.grad_util import along
from relaydsl.op.nn.dropout import dropout
from relaydsl.op.nn.norm import batch_norm
from relaydsl.op.registry import ops
from relaydsl.transform._util import rewrite_functions, with_parameter_types
from relaydsl.transform.pass_infra import Pass


@dataclass(frozen=True)
class SimplifyInference(Pass, opt_level=2,
                        description="inference-mode batch_norm becomes a per-channel "
                                    "multiply-add; dropout goes"):
    """Inference-mode batch_norm and dropout calls rewritten (see the module doc)."""

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_functions(mod, _simplify)


def simplify_inference(mod: IRModule) -> IRModule:
    """``SimplifyInference()(mod)``."""
    return SimplifyInference()(mod)


def _simplify(fn: Function) -> Expr:
    new = _Simplify().visit(fn)
    assert isinstance(new, Function)  # a function's rewrite is a function
    # batch_norm's relation inferred the shapes of a model's running statistics
    return fn if new is fn else with_parameter_types(new)


class _Simplify(ExprMutator):
    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if not isinstance(new, Call) or not isinstance(new.op, Op) or new.attrs.get(
                "training", True):
            return new
        if new.op == dropout.op:
            return new.args[0]
        if new.op == batch_norm.op:
            x_type = call.args[0].checked_type
            assert isinstance(x_type, TensorType)
            return _affine_batch_norm(new, x_type)
        return new


def _affine_batch_norm(call: Call, x_type: TensorType) -> Expr:
    """(x * scale + shift, mean, var) for an inference-mode batch_norm call."""
    x, gamma, beta, mean, var = call.args
    a = call.attrs
    epsilon = Constant(np.array(a.epsilon, x_type.concrete_dtype()))
    scale = ops.rsqrt(ops.add(var, epsilon))
    if a.scale:
        scale = ops.multiply(gamma, scale)
    shift = ops.multiply(ops.negative(mean), scale)
    if a.center:
        shift = ops.add(beta, shift)
    out = ops.add(ops.multiply(x, along(scale, a.axis, x_type.ndim)),
                  along(shift, a.axis, x_type.ndim))
    return Tuple((out, mean, var), span=call.span)


__all__ = ["SimplifyInference", "simplify_inference"]
