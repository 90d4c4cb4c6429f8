"""SimplifyInference: inference-mode batch_norm becomes a per-channel multiply-add, dropout
goes; values are unchanged (checked against NumPy), training-mode calls stay."""
import numpy as np
import pytest

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir.expr import Call, Constant, Function, Op, TupleGetItem, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import post_order
from relaydsl.op.registry import ops
from relaydsl.transform.fold_constant import fold_constants
from relaydsl.transform.simplify_inference import simplify_inference
from relaydsl.typing import infer_types

RNG = np.random.default_rng(0)


def op_names(mod):
    names = []
    post_order(mod["main"].body, lambda e: names.append(e.op.name)
               if isinstance(e, Call) and isinstance(e.op, Op) else None)
    return sorted(set(names))


def batch_norm_reference(x, gamma, beta, mean, var, axis, epsilon, center=True, scale=True):
    shape = [1] * x.ndim
    shape[axis] = -1
    out = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon)
    out = out * gamma.reshape(shape) if scale else out
    return out + beta.reshape(shape) if center else out


def main_module(x_shape, body):
    x = Var("x", TensorType(x_shape))
    mod = IRModule()
    mod.add("main", Function([x], body(x)))
    return infer_types(mod)


def channel_params(c):
    return [RNG.standard_normal(c).astype(np.float32), RNG.standard_normal(c).astype(np.float32),
            RNG.standard_normal(c).astype(np.float32),
            RNG.uniform(0.5, 2, c).astype(np.float32)]


@pytest.mark.parametrize("shape, axis, attrs", [
    ((2, 3, 4, 4), 1, {}),
    ((5, 3), 1, {"epsilon": 1e-3}),
    ((2, 4, 4, 3), -1, {"center": False}),
    ((2, 3, 5), 1, {"scale": False}),
])
def test_inference_batch_norm_becomes_a_multiply_add_of_the_same_values(shape, axis, attrs):
    params = channel_params(shape[axis])
    mod = main_module(shape, lambda x: TupleGetItem(ops.batch_norm(
        x, *map(Constant, params), axis=axis, **attrs), 0))
    simplified = simplify_inference(mod)
    assert "batch_norm" not in op_names(simplified)
    x = RNG.standard_normal(shape).astype(np.float32)
    want = batch_norm_reference(x, *params, axis=axis % len(shape),
                                epsilon=attrs.get("epsilon", 1e-5),
                                center=attrs.get("center", True), scale=attrs.get("scale", True))
    np.testing.assert_allclose(evaluate(mod, x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(evaluate(simplified, x), want, rtol=1e-5, atol=1e-5)
    # with constant parameters, scale and shift fold into two constant vectors
    folded = fold_constants(simplified)
    assert op_names(folded) == ["add", "multiply"]
    np.testing.assert_allclose(evaluate(folded, x), want, rtol=1e-5, atol=1e-5)


def test_the_moving_statistics_still_come_out():
    params = channel_params(3)
    mod = main_module((4, 3), lambda x: ops.batch_norm(x, *map(Constant, params)))
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    out, mean, var = evaluate(simplify_inference(mod), x)
    np.testing.assert_array_equal(mean, params[2])
    np.testing.assert_array_equal(var, params[3])
    np.testing.assert_allclose(out, batch_norm_reference(x, *params, axis=1, epsilon=1e-5),
                               rtol=1e-5, atol=1e-5)


def test_inference_dropout_goes_and_training_calls_stay():
    params = channel_params(3)
    mod = main_module((4, 3), lambda x: ops.add(
        ops.dropout(x, Constant(np.array([1, 2])), rate=0.5),
        ops.add(ops.dropout(x, Constant(np.array([3, 0])), rate=0.5, training=True),
                TupleGetItem(ops.batch_norm(x, *map(Constant, params), training=True), 0))))
    simplified = simplify_inference(mod)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(simplified, x), evaluate(mod, x))
    calls = []
    post_order(simplified["main"].body, lambda e: calls.append(e)
               if isinstance(e, Call) and isinstance(e.op, Op) and
               e.op.name in ("dropout", "batch_norm") else None)
    assert sorted((c.op.name, c.attrs.training) for c in calls) == [
        ("batch_norm", True), ("dropout", True)]
