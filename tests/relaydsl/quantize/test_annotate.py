"""Annotate: simQ where the op rules ask; skipped layers; per-channel steps; a user's rule."""
import numpy as np
import pytest

from relaydsl.backend.interpreter import evaluate

from relaydsl.ir import Call, Constant
from relaydsl.ir.visitor import post_order
from relaydsl.op import ops
from relaydsl.op.quantize_rule import QKind
from relaydsl.quantize import QConfig, register_rule, reset_rule
from relaydsl.quantize.calibrate import calibrate, is_simq, simqs
from relaydsl.quantize.flow import annotate_module, realize_module
from tests.relaydsl.quantize.helpers import convnet, data, mlp, module, runner, weights

ALL = QConfig(skip_conv_layers=(), skip_dense_layer=False)


def calls(mod, name):
    found = []
    post_order(mod["main"].body, lambda e: found.append(e) if isinstance(e, Call) and
               getattr(e.op, "name", None) == name else None)
    return found


def test_products_get_their_operands_quantized():
    mod = annotate_module(mlp(), ALL)
    for d in calls(mod, "dense"):
        x, w = d.args
        assert x.op.name == w.op.name == "simulated_quantize"
        assert x.attrs.kind == "input" and w.attrs.kind == "weight"
        assert isinstance(w.args[0], Constant)
        assert x.attrs.nbit == w.attrs.nbit == 8
    # relu and bias_add take no simQ of their own: they run on what reaches them
    assert len(calls(mod, "simulated_quantize")) == 4
    assert calls(mod, "relu")[0].args[0].op.name == "bias_add"


def test_skipped_layers_stay_float():
    mod = annotate_module(convnet(), QConfig(skip_conv_layers=(0,), skip_dense_layer=True))
    convs = calls(mod, "conv2d")
    first, second = sorted(convs, key=lambda c: c.args[1].checked_type.shape[0])
    assert not is_simq(first.args[0]) and not is_simq(first.args[1])  # conv2d 0: skipped
    assert is_simq(second.args[0]) and is_simq(second.args[1])
    assert not is_simq(calls(mod, "dense")[0].args[1])


def test_per_channel_weights_get_one_step_per_output_channel():
    mod = annotate_module(convnet(), ALL.replace(per_channel=True))
    for conv in calls(mod, "conv2d"):
        w = conv.args[1]
        assert w.attrs.axis == 0
        assert w.args[1].data.shape == (conv.args[1].checked_type.shape[0],)
    (dense,) = calls(mod, "dense")
    assert dense.args[1].args[1].data.shape == (5,) and dense.args[1].attrs.axis == 0
    assert dense.args[0].args[1].data.shape == ()  # activations: one step


def test_the_config_sets_bits_and_rounding():
    mod = annotate_module(mlp(), ALL.replace(nbit_input=16, nbit_weight=16, rounding="floor"))
    assert {(q.attrs.nbit, q.attrs.rounding) for q in calls(mod, "simulated_quantize")} == \
        {(16, "floor")}


def test_a_user_rule_overrides_the_ops_own():
    """A rule quantizing relu's input: simQ appears before each relu, the pass untouched."""
    register_rule(ops.relu)(lambda call, config: (QKind.INPUT,))
    try:
        mod = annotate_module(mlp(), ALL)
        (relu,) = calls(mod, "relu")
        assert relu.args[0].op.name == "simulated_quantize"
    finally:
        reset_rule(ops.relu)
    assert calls(annotate_module(mlp(), ALL), "relu")[0].args[0].op.name == "bias_add"


def test_a_rule_can_leave_a_call_float():
    @register_rule(ops.dense)
    def float_dense(call, config):
        return None
    try:
        assert not calls(annotate_module(mlp(), ALL), "simulated_quantize")
    finally:
        reset_rule(ops.dense)


def test_a_rule_giving_the_wrong_arity_is_an_error():
    register_rule(ops.dense)(lambda call, config: (QKind.INPUT,))
    try:
        with pytest.raises(ValueError, match="rule of dense gave 1 kinds for 2 operands"):
            annotate_module(mlp(), ALL)
    finally:
        reset_rule(ops.dense)


def test_register_rule_takes_an_op():
    with pytest.raises(TypeError, match="register_rule takes an op"):
        register_rule("dense")


def test_an_operand_of_several_products_gets_one_simq():
    """h feeds two convs: one simQ, one step, so realization quantizes h once."""
    c1, c2, c3 = weights(4, 2, 3, 3), weights(3, 4, 1, 1), weights(3, 4, 1, 1)

    def body(x):
        h = ops.relu(ops.conv2d(x, c1, padding=1))
        return ops.add(ops.conv2d(h, c2), ops.conv2d(h, c3))

    mod = annotate_module(module(body, (1, 2, 5, 5)), ALL)
    second, third = calls(mod, "conv2d")[1:]
    assert is_simq(second.args[0]) and second.args[0] is third.args[0]
    assert len([q for q in calls(mod, "simulated_quantize") if q.attrs.kind == "input"]) == 2


def test_a_residual_join_quantizes_its_skip_path_with_the_next_layer_s_simq():
    """add(conv(h) + bias, h): h is quantized once, for the conv and for the sum; a sum of
    two accumulators, or of an accumulator and a constant (a bias), is left as it is."""
    c1, c2, c3 = weights(4, 2, 3, 3), weights(4, 4, 3, 3), weights(4, 4, 1, 1)
    bias = weights(1, 4, 1, 1)

    def body(x):
        h = ops.relu(ops.conv2d(x, c1, padding=1))
        r = ops.add(ops.add(ops.conv2d(h, c2, padding=1), bias), h)
        return ops.add(ops.conv2d(r, c3), ops.conv2d(r, c3))

    mod = annotate_module(module(body, (1, 2, 5, 5)), ALL)
    joins = [a for a in calls(mod, "add") if not isinstance(a.args[1], Constant)]
    skip, both_products = joins
    assert is_simq(skip.args[1]) and not is_simq(skip.args[0])
    assert skip.args[1] is calls(mod, "conv2d")[1].args[0]  # the second conv's simQ
    assert not any(is_simq(a) for a in both_products.args)
    bias_add = [a for a in calls(mod, "add") if isinstance(a.args[1], Constant)]
    assert bias_add and not is_simq(bias_add[0].args[1])


def test_a_constant_first_operand_is_quantized_per_tensor():
    """matmul(W, x): the rule's weight_axis is its last operand's output channels; W's are
    its rows, so per_channel gives W one step (it used to take one per column, the summed
    axis, and calibration failed), and the result is the float one up to quantization."""
    w = weights(3, 8)
    mod = module(lambda x: ops.matmul(w, x), (8, 5))
    cfg = QConfig(skip_dense_layer=False, calibrate_mode="percentile", per_channel=True)
    batches = data(8, 5)
    calibrated = calibrate(annotate_module(mod, cfg), "main", batches, cfg, runner())
    sw = [q.args[1].data for q in simqs(calibrated.mod["main"].body) if q.attrs.kind == "weight"]
    assert [s.shape for s in sw] == [()]
    out = realize_module(calibrated.mod, cfg)
    (x,) = batches[0]
    expected = w.data @ x
    np.testing.assert_allclose(evaluate(out, x), expected, atol=0.02 * np.abs(expected).max())
