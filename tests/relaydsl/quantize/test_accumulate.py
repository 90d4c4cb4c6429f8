"""Accumulators that never overflow silently (relaydsl/quantize/accumulate.py): the worst-case
bound against NumPy, an input crafted to overflow an 8/16 layer's int16 sums detected and
saturated on every target (values against a NumPy transcription), normal data untouched, and
the "widen" fallback."""
import numpy as np
import pytest

from relaydsl.ir import Constant, TensorType, Var
from relaydsl.ir.types import Kind, TypeVar
from relaydsl.op import ops
from relaydsl.quantize import QConfig
from relaydsl.quantize.accumulate import accumulators_of, fits, worst_case
from relaydsl.quantize.calibrate import calibrate, simqs
from relaydsl.quantize.flow import annotate_module, realize_module
from tests.relaydsl.quantize import helpers
from tests.relaydsl.quantize.helpers import data, module, runner

CFG = QConfig(skip_conv_layers=(), skip_dense_layer=False, calibrate_mode="percentile",
              nbit_activation=16)
TARGETS = ["interp", "llvm", "accel"]
N = TypeVar("n", Kind.Shape)  # a symbolic batch


def test_the_bound_of_dense_is_128_times_the_largest_row_l1_norm():
    w = helpers.rng.integers(-127, 128, (5, 40)).astype(np.int8)
    bound = worst_case([TensorType((3, 40), "int8"), Constant(w)], weight_axis=0)
    assert bound == 128 * np.abs(w.astype(np.int64)).sum(axis=1).max()


def test_the_bound_of_conv2d_is_reached_at_an_interior_position():
    """128 times the largest filter's L1 norm, and an input of ±128 (the signs of that filter)
    gives exactly that at a position whose window is inside the image."""
    w = helpers.rng.integers(-127, 128, (6, 3, 3, 3)).astype(np.int8)
    bound = worst_case([TensorType((N, 3, 7, 7), "int8"), Constant(w)], weight_axis=0)
    l1 = np.abs(w.astype(np.int64)).reshape(6, -1).sum(axis=1)
    assert bound == 128 * l1.max()
    c = int(l1.argmax())
    x = np.zeros((1, 3, 7, 7), np.int64)
    x[0, :, 2:5, 2:5] = 128 * np.sign(w[c].astype(np.int64))
    y = ops.conv2d.numpy_ref(x, w.astype(np.int64), **ops.conv2d(
        Var("x", TensorType((1, 3, 7, 7), "int8")), Constant(w), padding=1).attrs)
    assert np.abs(y).max() == bound


def test_bounds_without_the_output_channel_law_are_whole_norms():
    a, b = TensorType((4, 8), "int8"), TensorType((8, 8), "int8")
    assert worst_case([a, b], weight_axis=-1) == 32 * 128 * 128  # the smaller one's size
    assert worst_case([a, TensorType((N, 8), "int8")], weight_axis=-1) == float("inf")
    w = Constant(np.array([[1, -2], [3, 4]], np.int8))
    assert worst_case([w, a], weight_axis=-1) == 128 * 10  # a first operand: whole
    assert worst_case([a, TensorType((N, 8), "int8")], -1, elementwise=True) == 128 * 128
    assert worst_case([a, w], None, elementwise=True) == 128 * 4
    assert not fits(8 * 128 * 128, "int16") and fits(32767, "int16") and not fits(32768, "int16")


def _dense_program(k=64, units=4):
    w = helpers.weights(units, k)
    return module(lambda x: ops.dense(x, w), (2, k)), w.data


def _realized(mod, config, batches):
    calibrated = calibrate(annotate_module(mod, config), "main", batches, config, runner())
    sx, sw = (s.args[1].data for s in simqs(calibrated.mod["main"].body))
    return realize_module(calibrated.mod, config), np.float32(sx), np.float32(sw)


def _crafted(w, sx):
    """Each row the signs of one weight row at the largest input: every product positive, the
    int8 sum 127 · |Wq[j]|_1 (far past int16 for 64 terms)."""
    return (np.sign(w[:2]) * np.float32(sx * 127)).astype(np.float32)


def _reference(x, w, sx, sw, lo=-32768, hi=32767):
    xq = np.clip(np.round(x * (np.float32(1) / sx)), -127, 127).astype(np.int64)
    wq = np.clip(np.round(w * (np.float32(1) / sw)), -127, 127).astype(np.int64)
    acc = xq @ wq.T
    return (np.clip(acc, lo, hi).astype(np.float32) * np.float32(sx * sw),
            int(((acc < lo) | (acc > hi)).sum()))


@pytest.mark.parametrize("target", TARGETS)
def test_an_overflowing_int16_accumulator_saturates_and_is_counted(target):
    mod, w = _dense_program()
    batches = data(2, 64)
    out, sx, sw = _realized(mod, CFG, batches)
    (acc,) = accumulators_of(out["main"])
    assert acc.status == "checked" and acc.dtype == "int16" and acc.layer == "dense #1"
    run = runner(target)(out, "main")
    x = _crafted(w, sx)
    value, (count,) = run(x)
    expected, saturated = _reference(x, w, sx, sw)
    assert saturated > 0 and int(count) == saturated
    np.testing.assert_array_equal(value, expected)
    # the calibration data: nothing saturates, the int16 sums are the exact ones
    for (xb,) in batches:
        value, (count,) = run(xb)
        assert int(count) == 0
        np.testing.assert_array_equal(value, _reference(xb, w, sx, sw, -2 ** 40, 2 ** 40)[0])


def test_widen_sums_an_unprovable_layer_in_int32():
    mod, w = _dense_program()
    out, sx, sw = _realized(mod, CFG.replace(overflow="widen"), data(2, 64))
    (acc,) = accumulators_of(out["main"])
    assert (acc.status, acc.dtype) == ("widened", "int32")
    x = _crafted(w, sx)
    for target in ("interp", "llvm"):
        value = runner(target)(out, "main")(x)  # no counts: nothing is narrowed
        np.testing.assert_array_equal(value, _reference(x, w, sx, sw, -2 ** 40, 2 ** 40)[0])


def test_a_layer_that_cannot_overflow_keeps_its_int16_sums_unchecked():
    """4 terms of at most 127 · 127 fit int16: proven, no count, no int32."""
    mod, w = _dense_program(k=2)
    out, sx, sw = _realized(mod, CFG, data(2, 2))
    (acc,) = accumulators_of(out["main"])
    assert (acc.status, acc.dtype) == ("proven", "int16") and acc.bound <= 2 * 128 * 127
    assert 'out_dtype="int16"' in str(out["main"].body)
    x = _crafted(w, sx)
    np.testing.assert_array_equal(runner("llvm")(out, "main")(x), _reference(x, w, sx, sw)[0])


def test_8_32_accumulators_are_proven_and_16_32_ones_are_said_to_be_unchecked():
    mod, _ = _dense_program()
    for scheme, status in (((8, 32), "proven"), ((16, 32), "unchecked")):
        m, n = scheme
        cfg = CFG.replace(nbit_input=m, nbit_weight=m, nbit_activation=n)
        out, _, _ = _realized(mod, cfg, data(2, 64))
        assert [a.status for a in accumulators_of(out["main"])] == [status]


def test_two_int8_operands_of_an_add_sum_in_int32():
    """A user's rule quantizing both operands of an add: 120 + 120 steps must not wrap."""
    from relaydsl.quantize import register_rule, reset_rule
    from relaydsl.op.quantize_rule import QKind

    @register_rule(ops.add)
    def both(call, config):
        return (QKind.INPUT, QKind.INPUT)

    try:
        mod = module(lambda a, b: ops.add(a, b), (3,), (3,))
        cfg = CFG.replace(calibrate_mode="global_scale", global_scale=1.0)
        out = realize_module(calibrate(annotate_module(mod, cfg), "main", [], cfg,
                                       runner()).mod, cfg)
    finally:
        reset_rule(ops.add)
    text = str(out["main"].body)
    assert text.count('dtype="int8"') == 2 and text.count('dtype="int32"') == 2  # int8s, widened
    a = np.array([0.95, -0.95, 0.5], np.float32)
    got = runner("llvm")(out, "main")(a, a)
    np.testing.assert_allclose(got, 2 * a, atol=2 / 127)
