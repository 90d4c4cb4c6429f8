"""relay.quantize end to end: models and functions, relay.qconfig, relay.build, a user's rule,
errors naming the argument, and quantization-aware fine-tuning through simQ."""
import re
import warnings

import numpy as np
import pytest

from relaydsl import Float, Tensor, relay, relay_model

rng = np.random.default_rng(0)
ALL = relay.QConfig(skip_conv_layers=(), skip_dense_layer=False, calibrate_mode="percentile")


@relay_model
def small_cnn(x: Tensor[Float, (2, 1, 8, 8)]) -> Tensor[Float, (2, 4)]:
    h = relay.relu(relay.conv2d(x, num_filter=4, ksize=3))
    h = relay.max_pool(h, ksize=2, strides=2)
    return relay.linear(relay.flatten_layer(h), num_hidden=4)


@pytest.fixture(scope="module")
def model():
    return relay.create_model(small_cnn, seed=1)


def batches(n=4):
    return [rng.uniform(0, 1, (2, 1, 8, 8)).astype(np.float32) for _ in range(n)]


DATA = batches()


def test_a_quantized_model_is_close_to_the_float_one(model):
    qf = relay.quantize(model, dataset=DATA, config=ALL)
    x = DATA[0]
    out = qf(x)
    assert out.dtype == np.float32 and out.shape == (2, 4)
    np.testing.assert_allclose(out, model(x), atol=0.03 * np.abs(model(x)).max())
    text = qf.astext()
    assert 'dtype="int8"' in text and 'out_dtype="int32"' in text
    assert "simulated_quantize" in str(qf.simulated[qf.entry].body)  # the calibrated program


def test_qconfig_is_the_default_config(model):
    with relay.qconfig(calibrate_mode="global_scale", skip_conv_layers=(),
                       skip_dense_layer=False, nbit_activation=16):
        qf = relay.quantize(model, dataset=DATA)
    assert qf.config.scheme == "8/16" and 'out_dtype="int16"' in qf.astext()


def test_relay_build_of_a_quantized_function_is_bit_exact_across_targets(model):
    qf = relay.quantize(model, dataset=DATA, config=ALL.replace(per_channel=True))
    interp, llvm = relay.build(qf, target="interp"), relay.build(qf, target="llvm")
    for x in DATA[:2]:
        np.testing.assert_array_equal(interp(x), llvm(x))


def test_the_accelerator_runs_a_quantized_model_bit_exactly(model):
    qf = relay.quantize(model, dataset=DATA, config=ALL)
    accel = relay.build(qf, target="accel")
    np.testing.assert_array_equal(accel(DATA[0]), relay.build(qf, target="llvm")(DATA[0]))


def test_a_function_with_constant_weights_quantizes():
    w = rng.standard_normal((3, 5)).astype(np.float32)

    @relay
    def f(x: Tensor[Float, (4, 5)]) -> Tensor[Float, (4, 3)]:
        return relay.dense(x, w)

    data = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(3)]
    qf = relay.quantize(f, dataset=data, config=ALL)
    np.testing.assert_allclose(qf(data[0]), data[0] @ w.T, atol=0.05)


def test_a_user_rule_changes_the_result(model):
    """Overriding conv2d's rule to quantize nothing leaves the convolution in float: the
    result is that of skipping the layer, not the default's."""
    x = DATA[1]
    default = relay.quantize(model, dataset=DATA, config=ALL)
    skipped = relay.quantize(model, dataset=DATA, config=ALL.replace(skip_conv_layers=(0,)))

    @relay.quantize.register_rule(relay.conv2d)
    def keep_conv_float(call, config):
        return (None, None)

    try:
        custom = relay.quantize(model, dataset=DATA, config=ALL)
    finally:
        relay.quantize.reset_rule(relay.conv2d)
    assert custom.astext().count('out_dtype="int32"') == 1  # the dense only
    np.testing.assert_array_equal(custom(x), skipped(x))
    assert not np.array_equal(custom(x), default(x))


@pytest.mark.parametrize("kwargs, error, message", [
    ({"dataset": None, "config": ALL}, ValueError, "calibrate_mode 'percentile' needs "
                                                    "calibration data and no dataset was given"),
    ({"dataset": [], "config": ALL}, ValueError, "needs calibration data and dataset has no "
                                                 "batch: pass dataset="),
    ({"dataset": [np.zeros((2, 1, 9, 9), np.float32)]}, ValueError,
     r"dataset batch 0: argument 'x': expected Tensor\[\(2, 1, 8, 8\), float32\], got a "
     r"float32 array of shape \(2, 1, 9, 9\)"),
    ({"dataset": [DATA[0], DATA[1][0]]}, ValueError, r"dataset batch 1: argument 'x'.* shape "
                                                      r"\(1, 8, 8\)"),
    ({"dataset": [[["a"]]]}, ValueError, "dataset batch 0: argument 'x'"),
    ({"dataset": [(DATA[0], DATA[0])]}, ValueError, r"dataset batch 0 has 2 value\(s\), the "
                                                     r"function takes 1 argument\(s\) \(x\)"),
    ({"dataset": [{"x": DATA[0], "y": DATA[0]}]}, ValueError,
     "dataset batch 0 has no parameter 'y'; the function takes x"),
    ({"dataset": [{"input": DATA[0]}]}, ValueError,
     "dataset batch 0 has no parameter 'input' and lacks 'x'"),
    ({"dataset": DATA[0]}, TypeError, "dataset must be an iterable of batches"),
    ({"dataset": 4}, TypeError, "dataset must be an iterable of batches .* got int"),
    ({"dataset": DATA, "config": {"calibrate_mode": "mse"}}, TypeError,
     "config must be a relay.QConfig"),
])
def test_bad_arguments_are_named(model, kwargs, error, message):
    with pytest.raises(error, match=message):
        relay.quantize(model, **kwargs)


def test_what_cannot_be_quantized_is_named():
    with pytest.raises(TypeError, match="model_or_fn must be a model"):
        relay.quantize(lambda x: x, dataset=DATA)
    with pytest.raises(TypeError, match="has model parameters: pass the model"):
        relay.quantize(small_cnn, dataset=DATA)
    with pytest.raises(ValueError, match="QConfig calibrate_mode must be one of"):
        relay.QConfig(calibrate_mode="minmax")


@pytest.mark.parametrize("settings, error, message", [
    ({"nbit_activation": 24}, ValueError, "scheme .* must be one of 8/32, 8/16, 16/32, got '8/24'"),
    ({"calibrate_mode": "minmax"}, ValueError, "calibrate_mode must be one of global_scale, "
                                               "kl_divergence, percentile, mse, got 'minmax'"),
    ({"overflow": "wrap"}, ValueError, "overflow must be one of warn, raise, widen"),
    ({"calibrate_mod": "mse"}, TypeError, "no setting 'calibrate_mod'; did you mean "
                                          "calibrate_mode"),
    ({"dtype_activation": "float16"}, ValueError, "dtype_activation must be int8, int16 or int32"),
    ({"dtype_activation": "int32", "nbit_activation": 16}, ValueError,
     "dtype_activation='int32' and nbit_activation=16 disagree"),
])
def test_bad_settings_are_named(settings, error, message):
    with pytest.raises(error, match=message), relay.qconfig(**settings):
        pass


def test_tvm_spellings(model):
    """TVM's relay.quantize.qconfig with its dtype names, current_qconfig, and a dataset of
    dicts by input name: the same program as relay.qconfig with nbit_* and tuple batches."""
    with relay.quantize.qconfig(calibrate_mode="percentile", skip_conv_layers=[],
                                skip_dense_layer=False, dtype_input="int8",
                                dtype_weight="int8", dtype_activation="int16"):
        assert relay.quantize.current_qconfig().scheme == "8/16"
        tvm = relay.quantize(model, dataset=[{"x": x} for x in DATA])
    assert tvm.config == ALL.replace(nbit_activation=16)
    ours = relay.quantize(model, dataset=[(x,) for x in DATA], config=ALL.replace(
        nbit_activation=16))
    assert tvm.astext() == ours.astext()
    assert relay.quantize.current_qconfig() == relay.QConfig()  # the with block is over


def test_global_scale_needs_no_data(model):
    qf = relay.quantize(model, config=ALL.replace(calibrate_mode="global_scale",
                                                  global_scale=4.0))
    assert all(r == 4.0 for kind, r in qf.ranges if kind == "input")


def test_fine_tuning_through_simq_lowers_the_loss():
    """Quantization-aware training: a dense layer whose weight and input go through simQ
    (4 bits), trained with relay.grad (straight-through): the quantized loss goes down."""
    x = rng.standard_normal((32, 6)).astype(np.float32)
    target = x @ rng.standard_normal((6, 2)).astype(np.float32)
    s = np.float32(0.25)

    @relay
    def qat_loss(w: Tensor[Float, (2, 6)], x: Tensor[Float, (32, 6)],
                 y: Tensor[Float, (32, 2)]) -> Float:
        qw = relay.simulated_quantize(w, s, nbit=4)
        qx = relay.simulated_quantize(x, s, nbit=8)
        d = relay.dense(qx, qw) - y
        return relay.mean(d * d)

    step = relay.grad(qat_loss)
    w = (rng.standard_normal((2, 6)) * 0.1).astype(np.float32)
    first, _ = step(w, x, target)
    for _ in range(60):
        loss, (dw, _, _) = step(w, x, target)
        w = w - np.float32(0.05) * dw
    assert loss < 0.3 * first


W64 = np.random.default_rng(64).standard_normal((3, 64)).astype(np.float32)


@relay
def wide_dense(x: Tensor[Float, (2, 64)]) -> Tensor[Float, (2, 3)]:
    return relay.dense(x, W64)


def _overflowing(qf):
    """An input whose int8 products all add up: each row the signs of a weight row at the
    calibrated input range, far past int16 over 64 terms."""
    ((kind, r), *_) = qf.ranges
    assert kind == "input"
    return (np.sign(W64[:2]) * np.float32(r)).astype(np.float32)


@pytest.mark.parametrize("target", ["interp", "llvm", "accel"])
def test_an_int16_accumulator_overflow_warns_naming_the_layer(target):
    data = [np.random.default_rng(i).standard_normal((2, 64)).astype(np.float32)
            for i in range(3)]
    qf = relay.quantize(wide_dense, dataset=data, config=ALL.replace(nbit_activation=16))
    (acc,) = qf.accumulators
    assert acc.status == "checked" and acc.layer.startswith("dense #1 at ")
    assert re.search(r"test_quantize.py:\d+:12$", acc.layer)  # where relay.dense is called
    built = relay.build(qf, target=target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the calibration data: silent
        normal = built(data[0])
    np.testing.assert_allclose(normal, data[0] @ W64.T, atol=0.05 * np.abs(normal).max())
    x = _overflowing(qf)
    with pytest.warns(relay.QuantizationOverflowWarning,
                      match=r"wide_dense \(8/16\): the int16 accumulator overflowed .* in "
                            r"dense #1 at .*test_quantize.py:\d+:12: \d+ element"):
        out = built(x)
    assert qf.overflow_count == built.overflow_count > 0
    # row i aligns with weight row i: out[i, i] saturates at int16's bound (one value, below
    # the exact sum, never wrapped to the other sign); the rest are the usual int8 results
    exact = x @ W64.T
    assert out[0, 0] == out[1, 1] == np.abs(out).max() and out[0, 0] < exact.diagonal().min()
    off = ~np.eye(2, 3, dtype=bool)
    np.testing.assert_allclose(out[off], exact[off], rtol=0.1)


def test_overflow_raise_and_widen():
    data = [np.random.default_rng(i).standard_normal((2, 64)).astype(np.float32)
            for i in range(3)]
    strict = relay.quantize(wide_dense, dataset=data,
                            config=ALL.replace(nbit_activation=16, overflow="raise"))
    x = _overflowing(strict)
    with pytest.raises(OverflowError, match="dense #1 at"):
        strict(x)
    wide = relay.quantize(wide_dense, dataset=data,
                          config=ALL.replace(nbit_activation=16, overflow="widen"))
    assert [(a.status, a.dtype) for a in wide.accumulators] == [("widened", "int32")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(wide(x), x @ W64.T, atol=0.01 * np.abs(x @ W64.T).max())
