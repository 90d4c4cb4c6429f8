"""Weights streamed through a fused group (activations-stationary): values against JAX at
buffers too small for the weights, the traffic against a count by hand, and VTA's three
separate buffers."""
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from relaydsl.backend.accel.isa import generate
from relaydsl.backend.accel.program import AccelProgram
from relaydsl.backend.accel.schedule import (
    ACTIVATIONS_STATIONARY, _GroupContext, plan_group, schedule,
)
from relaydsl.backend.accel.simulator import Simulator, dram_of
from relaydsl.ir import Constant, Function, Let
from relaydsl.ir.module import IRModule
from relaydsl.testing.oracle import to_jax
from relaydsl.typing import infer_types

RTOL, ATOL = 1e-4, 1e-5


@relay
def wide(x: Tensor[Float, (1, 16, 10, 10)], w1: Tensor[Float, (64, 16, 3, 3)],
         w2: Tensor[Float, (64, 64, 3, 3)], w3: Tensor[Float, (16, 64, 1, 1)]
         ) -> Tensor[Float, (1, 16, 10, 10)]:
    h = relay.relu(relay.conv2d(x, w1, padding=1))
    h = relay.relu(relay.conv2d(h, w2, padding=1))
    return relay.conv2d(h, w3) + x


@relay
def head(x: Tensor[Float, (1, 32, 4, 4)], w: Tensor[Float, (64, 32, 3, 3)],
         d: Tensor[Float, (100, 64)]) -> Tensor[Float, (1, 100)]:
    h = relay.relu(relay.conv2d(x, w, padding=1))
    return relay.softmax(relay.dense(relay.flatten(relay.global_avg_pool2d(h)), d))


def _args(fn, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.checked_type.shape).astype(np.float32) * 0.3
            for p in fn.function.params]


def _jax(fn, args):
    return np.asarray(to_jax(fn.mod, fn.global_var.name_hint)(*args))


def _build(fn, args, config, kind):
    """`fn` on the accelerator with its weights (all arguments after the first) bound as
    constants, as a model's are: what the accelerator streams is constant weights."""
    main = fn.mod[fn.global_var]
    body = main.body
    for param, value in reversed(list(zip(main.params[1:], args[1:]))):
        body = Let(param, Constant(value), body)
    mod = infer_types(IRModule.from_expr(Function(main.params[:1], body)))
    return AccelProgram(mod, "main", config, kind)


# w2 alone is 144 KiB: none of these buffers holds it, so a fused group streams it
SMALL = [AcceleratorConfig.deep_fusion(onchip_bytes=k * KIB, double_buffering=db)
         for k, db in ((64, True), (96, True), (64, False))]


@pytest.mark.parametrize("fn", [wide, head], ids=lambda f: f.__name__)
@pytest.mark.parametrize("config", SMALL, ids=["64KiB", "96KiB", "64KiB-single-buffer"])
def test_streamed_weights_compute_what_jax_computes(fn, config):
    args = _args(fn)
    expected = _jax(fn, args)
    streamed_any = False
    for kind in ("fusion", "fusion+reuse"):
        exe = _build(fn, args, config, kind)
        np.testing.assert_allclose(exe(args[0]), expected, rtol=RTOL, atol=ATOL, err_msg=kind)
        report = exe.report
        streamed_any |= any(len(g.layers) > 1 and g.streamed for g in report.groups)
        assert report.dram_bytes >= report.compulsory_bytes
        assert report.seconds >= report.roofline_seconds * (1 - 1e-9)
        assert report.onchip_peak_bytes <= config.onchip_bytes
    assert streamed_any  # the case this test is for


def test_streaming_moves_less_than_running_the_layers_alone():
    moved = {kind: _build(wide, _args(wide), SMALL[0], kind).report
             for kind in ("none", "fusion", "fusion+reuse")}
    assert moved["none"].dram_bytes > moved["fusion"].dram_bytes >= \
        moved["fusion+reuse"].dram_bytes


def test_streamed_traffic_is_the_count_by_hand():
    """conv(w1) -> relu -> conv(w2) -> relu -> conv(w3) -> add x in 2 bands of rows, w2
    streamed: x read once (line buffers keep the halo rows), w1 and w3 once (on chip all
    along), w2 once per band, the result written once; the simulator counts the same and
    computes JAX's values."""
    config = AcceleratorConfig.deep_fusion(onchip_bytes=256 * KIB)
    args = _args(wide)
    graph = _build(wide, args, config, "none").graph
    ctx = _GroupContext(graph, graph.consumers(), graph.layers)
    conv2 = [layer for layer in graph.layers if layer.inputs[1:] and
             layer.inputs[1].shape == (64, 64, 3, 3)]
    plan = plan_group(ctx, config, reuse=False, tiles=2, streamed=tuple(conv2))
    assert plan is not None and plan.loop_order == ACTIVATIONS_STATIONARY
    x, w1, w2, w3 = (a.nbytes for a in args)
    names = {t.shape: t.name for t in graph.constants}
    assert plan.read_bytes == {"x": x, names[(64, 16, 3, 3)]: w1,
                               names[(64, 64, 3, 3)]: 2 * w2, names[(16, 64, 1, 1)]: w3}
    assert plan.write_bytes == {graph.output.name: x}
    # one step per band for the layers before w2's, one per block of w2, one to finish
    blocks = (plan.steps - 2 * 2) // 2
    assert blocks > 1 and plan.steps == 2 * (2 + blocks)
    dram = dram_of(graph, args[:1])
    counters = Simulator(config).run(generate([plan.build()]), dram)
    assert (counters.read_bytes, counters.write_bytes) == (plan.read_bytes, plan.write_bytes)
    np.testing.assert_allclose(dram[graph.output], _jax(wide, args), rtol=RTOL, atol=ATOL)


def test_vta_keeps_inputs_weights_and_outputs_in_their_own_buffers():
    config = AcceleratorConfig.vta(dtype="float32")  # a float program on VTA's buffers
    bounds = {"input": (0, 32 * KIB), "weight": (32 * KIB, 288 * KIB),
              "output": (288 * KIB, 416 * KIB)}
    args = _args(wide)
    exe = _build(wide, args, config, "fusion+reuse")
    np.testing.assert_allclose(exe(args[0]), _jax(wide, args), rtol=RTOL, atol=ATOL)
    graph = exe.graph
    for group in schedule(graph, config, "fusion+reuse"):
        produced = {layer.output for layer in group.layers}
        for t, (address, size) in group.addresses.items():
            kind = "weight" if t.is_constant else "output" if t in produced else "input"
            lo, hi = bounds[kind]
            assert lo <= address and address + size <= hi, (t.name, kind, address, size)


def test_a_buffer_too_small_is_named():
    config = AcceleratorConfig.vta(dtype="float32", input_buffer_bytes=256,
                                   weight_buffer_bytes=256 * KIB,
                                   acc_buffer_bytes=128 * KIB,
                                   onchip_bytes=256 + 384 * KIB)
    with pytest.raises(ValueError, match=r"AcceleratorConfig\.input_buffer_bytes: 256 bytes "
                                         r"hold no tile of layer conv2d_0"):
        _build(wide, _args(wide), config, "fusion+reuse")
