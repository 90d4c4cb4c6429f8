"""Random vision networks on random accelerators: the accel target under every schedule
computes what JAX computes and its report keeps its invariants; a loop over a layer runs on
the host with the layer on the accelerator; quantized networks are bit-exact on the
interpreter, llvm and the int8 accelerator."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from relaydsl.backend.accel.program import AccelProgram
from relaydsl.backend.accel.schedule import ScheduleError
from relaydsl.backend.interpreter import evaluate
from relaydsl.backend.target import get_target
from relaydsl.ir import Function, IRModule
from relaydsl.quantize import QConfig
from relaydsl.quantize.flow import quantize_module
from relaydsl.testing import to_jax
from relaydsl.testing.random_networks import accelerator_configs, random_networks
from relaydsl.typing import infer_types

# float32 sums of at most a few hundred products of order one, in another order than XLA's
RTOL, ATOL = 1e-4, 1e-4
SCHEDULES = ("none", "fusion", "fusion+reuse")


def build(mod: IRModule, config: AcceleratorConfig, kind: str) -> AccelProgram:
    """`mod` on `config`, the example rejected where the buffer holds no tile of a layer
    (a build-time error naming the field, as it should be)."""
    try:
        return AccelProgram(mod, "main", config, kind)
    except ScheduleError as e:
        assert "bytes hold no tile of layer" in str(e)
        reject()


def expected(reference: Function, inputs: list[np.ndarray]) -> np.ndarray:
    mod = infer_types(IRModule.from_expr(reference))
    return np.asarray(to_jax(mod, "main")(*inputs[:len(reference.params)]))


@pytest.mark.slow
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(random_networks(), accelerator_configs())
def test_random_networks_on_random_accelerators_match_jax_and_keep_the_report_invariants(
        network, config):
    fn, inputs, reference = network
    mod = infer_types(IRModule.from_expr(fn))
    want = expected(reference, inputs)
    traffic = {}
    for kind in SCHEDULES:
        exe = build(mod, config, kind)
        assert exe.hybrid is None, exe.report.host  # every layer has an accelerator rule
        static = exe.report
        np.testing.assert_allclose(exe(*inputs), want, rtol=RTOL, atol=ATOL, err_msg=kind)
        r = exe.report
        # the simulator's counts are the schedule's, known from the build
        assert (r.read_bytes, r.write_bytes, r.macs) == \
            (static.read_bytes, static.write_bytes, static.macs), kind
        assert r.seconds == pytest.approx(static.seconds), kind
        assert r.dram_bytes >= r.compulsory_bytes, kind
        assert r.seconds >= r.roofline_seconds * (1 - 1e-9), kind
        assert r.onchip_peak_bytes <= config.onchip_bytes, kind
        traffic[kind] = r.dram_bytes
    if reads_every_input_whole(exe):
        assert traffic["none"] >= traffic["fusion"] >= traffic["fusion+reuse"], traffic
    # else strips of columns may move less than a schedule's bands: see
    # test_fusion_and_reuse_never_moves_more_than_fusion_alone in tests/backend/accel


def reads_every_input_whole(exe: AccelProgram) -> bool:
    """Whether the result depends on every element of the inputs and weights: else a
    strided window skips some, and bands of rows or strips of columns skip them too, so
    that more tiles may move less."""
    graph = exe.graph
    used = {t for layer in graph.layers for t in layer.inputs if t.is_constant or
            t in graph.params}
    return exe.report.compulsory_bytes == sum(t.nbytes for t in used) + graph.output.nbytes


@pytest.mark.slow
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(random_networks(max_layers=4, loop=True), accelerator_configs(),
       st.sampled_from(SCHEDULES))
def test_random_networks_with_a_loop_over_a_convolution_match_jax(network, config, kind):
    # the loop's control on the host, its convolution on the accelerator each turn
    fn, inputs, reference = network
    exe = build(infer_types(IRModule.from_expr(fn)), config, kind)
    assert exe.hybrid is not None
    np.testing.assert_allclose(exe(*inputs), expected(reference, inputs), rtol=RTOL,
                               atol=ATOL)
    assert exe.report.offloaded_calls >= int(inputs[-1])


# every layer quantized: the integer layers run on the accelerator's MAC array
QUANTIZE_ALL = QConfig(skip_conv_layers=(), skip_dense_layer=False,
                       calibrate_mode="percentile")
INT8_CONFIGS = [AcceleratorConfig.vta(), AcceleratorConfig.vta(batch=2, block_in=8, block_out=8),
                AcceleratorConfig.vta(input_buffer_bytes=2 * KIB, weight_buffer_bytes=4 * KIB,
                                      acc_buffer_bytes=8 * KIB, onchip_bytes=14 * KIB)]


def _llvm(mod: IRModule, entry: str):
    return get_target("llvm").build(mod, entry, {})


@pytest.mark.slow
@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(random_networks(max_layers=4, constant_weights=True, integer=True),
       st.sampled_from(INT8_CONFIGS), st.sampled_from(SCHEDULES))
def test_quantized_random_networks_are_bit_exact_on_interp_llvm_and_the_int8_accelerator(
        network, config, kind):
    fn, inputs, _ = network
    mod = infer_types(IRModule.from_expr(fn))
    rng = np.random.default_rng(0)
    shape = inputs[0].shape
    calibration = [(rng.uniform(-2, 2, size=shape).astype(np.float32),) for _ in range(3)]
    realized, _ = quantize_module(mod, "main", calibration, QUANTIZE_ALL, _llvm)
    exe = build(realized, config, kind)
    llvm = _llvm(realized, "main")
    for image in (inputs[0], calibration[0][0]):
        want = evaluate(realized, image)
        np.testing.assert_array_equal(llvm(image), want)
        np.testing.assert_array_equal(exe(image), want)

