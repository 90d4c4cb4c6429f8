"""Realize: the structure of realized programs, their values against a NumPy transcription of
the formulas, and bit-exact results between the interpreter and llvm."""
import numpy as np
import pytest

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir.printer import astext
from relaydsl.quantize import QConfig
from relaydsl.quantize.accumulate import accumulators_of
from relaydsl.quantize.calibrate import calibrate, simqs
from relaydsl.quantize.flow import annotate_module, realize_module
from tests.relaydsl.quantize.helpers import convnet, data, mlp, mlp_and_weights, runner

ALL = QConfig(skip_conv_layers=(), skip_dense_layer=False, calibrate_mode="percentile")


def realized(mod, config, batches):
    calibrated = calibrate(annotate_module(mod, config), "main", batches, config, runner())
    return calibrated.mod, realize_module(calibrated.mod, config)


def q(x, step, lo=-127, hi=127, dtype=np.int8):
    """Q(x) = cast(clip(round(x * (1/s)), qmin, qmax)), as float32 computes it."""
    return np.clip(np.round(x * (np.float32(1) / step)), lo, hi).astype(dtype)


def test_realized_mlp_is_the_formulas():
    mod, w1, b1, w2 = mlp_and_weights()
    batches = data(4, 8)
    calibrated, out = realized(mod, ALL, batches)
    text = astext(out)
    assert "simulated_quantize" not in text and 'out_dtype="int32"' in text
    assert 'dtype="int8"' in text and "right_shift" not in text
    sx1, sw1, sx2, sw2 = (s.args[1].data for s in simqs(calibrated["main"].body))
    x = batches[0][0]
    acc1 = q(x, sx1).astype(np.int32) @ q(w1, sw1).astype(np.int32).T
    s1 = np.float32(sx1 * sw1)
    h = np.maximum(acc1 + np.round(b1.astype(np.float64) / np.float64(s1)).astype(np.int32), 0)
    ratio = np.float32(np.float64(s1) / np.float64(sx2))
    qh = np.clip(np.round(h.astype(np.float32) * ratio), -127, 127).astype(np.int8)
    acc2 = qh.astype(np.int32) @ q(w2, sw2).astype(np.int32).T
    expected = acc2.astype(np.float32) * np.float32(sx2 * sw2)
    np.testing.assert_array_equal(evaluate(out, x), expected)
    # and close to the float program
    np.testing.assert_allclose(evaluate(out, x), evaluate(mod, x), atol=0.1)


def test_power_of_two_steps_requantize_with_a_rounding_shift():
    cfg = ALL.replace(calibrate_mode="global_scale", weight_scale="power2", global_scale=1.0)
    mod, w1, b1, w2 = mlp_and_weights()
    batches = data(4, 8)
    calibrated, out = realized(mod, cfg, batches)
    assert "right_shift" in astext(out) and "round" in astext(out)  # the input's Q still rounds
    sx1, sw1, sx2, sw2 = (float(s.args[1].data) for s in simqs(calibrated["main"].body))
    x = batches[1][0]
    s1 = np.float32(sx1 * sw1)
    acc1 = q(x, np.float32(sx1)).astype(np.int32) @ q(w1, np.float32(sw1)).astype(np.int32).T
    h = np.maximum(acc1 + np.round(b1.astype(np.float64) / float(s1)).astype(np.int32), 0)
    k = round(float(np.log2(sx2 / s1)))
    qh = np.clip((h + (1 << (k - 1))) >> k, -127, 127).astype(np.int32)
    acc2 = qh @ q(w2, np.float32(sw2)).astype(np.int32).T
    expected = acc2.astype(np.float32) * np.float32(sx2 * sw2)
    np.testing.assert_array_equal(evaluate(out, x), expected)


@pytest.mark.parametrize("bits, acc, text", [(8, 16, ('dtype="int16"', 'dtype="int8"')),
                                             (16, 32, ('out_dtype="int32"', 'dtype="int16"'))])
def test_schemes_choose_the_dtypes(bits, acc, text):
    cfg = ALL.replace(nbit_input=bits, nbit_weight=bits, nbit_activation=acc)
    _, out = realized(mlp(), cfg, data(4, 8))
    for t in text:
        assert t in astext(out)
    assert {a.dtype for a in accumulators_of(out["main"])} == {f"int{acc}"}


def result(out):
    """A realized program's result, its overflow counts (all zero) dropped."""
    if isinstance(out, tuple):
        value, counts = out
        assert all(int(c) == 0 for c in counts)
        return value
    return out


def test_unsigned_activations_are_uint8():
    cfg = ALL.replace(signed=False)
    batches = [(np.abs(x),) for (x,) in data(4, 8)]
    mod = mlp()
    _, out = realized(mod, cfg, batches)
    assert 'dtype="uint8"' in astext(out)
    np.testing.assert_allclose(evaluate(out, batches[0][0]), evaluate(mod, batches[0][0]),
                               atol=0.1)


CONFIGS = [ALL, ALL.replace(per_channel=True, calibrate_mode="mse"),
           ALL.replace(nbit_activation=16, calibrate_mode="kl_divergence"),
           ALL.replace(nbit_input=16, nbit_weight=16, per_channel=True),
           ALL.replace(calibrate_mode="global_scale", weight_scale="power2", global_scale=2.0),
           ALL.replace(rounding="floor"), ALL.replace(rounding="stochastic")]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.scheme}-{c.calibrate_mode}-"
                         f"{c.rounding}{'-pc' if c.per_channel else ''}")
def test_realized_programs_are_bit_exact_between_interp_and_llvm(config):
    mod = convnet()
    batches = data(2, 2, 6, 6)
    _, out = realized(mod, config, batches)
    llvm = runner("llvm")(out, "main")
    for (x,) in batches[:2]:
        expected = result(evaluate(out, x))
        np.testing.assert_array_equal(result(llvm(x)), expected)
        if config.nbit_activation == 32:  # 8/16 trades precision for its int16 sums
            np.testing.assert_allclose(expected, evaluate(mod, x), atol=0.15 * np.abs(
                evaluate(mod, x)).max())


@pytest.mark.parametrize("mode", ["percentile", "kl_divergence", "global_scale"])
def test_int16_accumulators_do_not_overflow_on_the_calibration_data(mode):
    """8/16: with the steps calibration chose, int16 sums equal int32 ones on the data (no
    checked accumulator saturates)."""
    mod, batches = convnet(), data(2, 2, 6, 6, scale=3.0)
    cfg = ALL.replace(nbit_activation=16, calibrate_mode=mode)
    calibrated, out16 = realized(mod, cfg, batches)
    out32 = realize_module(calibrated, cfg.replace(nbit_activation=32))
    assert 'dtype="int16"' in astext(out16)
    for (x,) in batches:
        np.testing.assert_array_equal(result(evaluate(out16, x)), evaluate(out32, x))


def test_a_network_deeper_than_graph_form_inlines_is_realized_past_its_let():
    """Graph normal form keeps a let every MAX_DEPTH nodes (ResNet-101 has one); realization
    went no further than that let, leaving every simQ under it and the whole network float (its
    accelerator build then fell back to the host). Both dense layers now take int8, one under
    the let and one past it, nothing simulated is left, interp and llvm agree bit for bit, and
    the values are JAX's float network within quantization error."""
    import jax.numpy as jnp

    from relaydsl.ir import Call, Let, Op
    from relaydsl.ir.visitor import deep_recursion, post_order
    from tests.relaydsl.quantize.helpers import past_a_let

    mod, w1, w2 = past_a_let()
    batches = data(4, 8, n=1)
    assert isinstance(annotate_module(mod, ALL)["main"].body, Let)  # the case: a let kept
    _, out = realized(mod, ALL, batches)
    dense_inputs: list[str] = []
    with deep_recursion():
        post_order(out["main"], lambda e: dense_inputs.append(e.args[0].checked_type.dtype)
                   if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "dense"
                   else None)
    assert dense_inputs == ["int8", "int8"]
    assert "simulated_quantize" not in astext(out)
    x = batches[0][0]
    got = np.asarray(evaluate(out, x))
    np.testing.assert_array_equal(got, np.asarray(runner("llvm")(out, "main")(x)))
    want = jnp.maximum(jnp.asarray(x) @ w1.T, 0) @ w2.T
    np.testing.assert_allclose(got, want, atol=0.05 * float(jnp.max(jnp.abs(want))))
