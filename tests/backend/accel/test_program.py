"""The accel target end to end: values against JAX on single ops, fused chains, residual
and inception blocks and a small network, under every schedule and buffer size; the
report's invariants; the host for what the accelerator cannot run; the errors."""
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay, relay_model
from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from relaydsl.backend.accel.program import AccelProgram
from relaydsl.backend.accel.schedule import SCHEDULES
from relaydsl.ir import Constant, Function, IRModule, TensorType, TupleGetItem, Var
from relaydsl.op import ops
from relaydsl.testing.oracle import to_jax
from relaydsl.typing import infer_types

RTOL, ATOL = 1e-4, 1e-5
SMALL = AcceleratorConfig.deep_fusion(onchip_bytes=24 * KIB)  # tiles and channel blocks
CONFIGS = [AcceleratorConfig.deep_fusion(), SMALL,
           AcceleratorConfig.deep_fusion(onchip_bytes=24 * KIB, double_buffering=False)]


@relay
def chain(x: Tensor[Float, (1, 3, 20, 20)], w1: Tensor[Float, (8, 3, 3, 3)],
          b1: Tensor[Float, (8,)], w2: Tensor[Float, (6, 8, 1, 1)]
          ) -> Tensor[Float, (1, 6, 10, 10)]:
    h = relay.relu(relay.bias_add(relay.conv2d(x, w1, padding=1), b1))
    h = relay.max_pool2d(h, pool_size=3, strides=2, padding=1)
    return relay.sigmoid(relay.conv2d(h, w2))


@relay
def residual(x: Tensor[Float, (1, 8, 16, 16)], w1: Tensor[Float, (8, 8, 3, 3)],
             w2: Tensor[Float, (8, 8, 3, 3)]) -> Tensor[Float, (1, 8, 16, 16)]:
    h = relay.relu(relay.conv2d(x, w1, padding=1))
    t = relay.conv2d(h, w2, padding=1)
    return relay.relu(t + x)


@relay
def inception(x: Tensor[Float, (1, 8, 12, 12)], a: Tensor[Float, (4, 8, 1, 1)],
              b: Tensor[Float, (6, 8, 3, 3)], c: Tensor[Float, (2, 8, 5, 5)]
              ) -> Tensor[Float, (1, 20, 12, 12)]:
    pooled = relay.max_pool2d(x, pool_size=3, strides=1, padding=1)
    return relay.concatenate((relay.conv2d(x, a), relay.conv2d(x, b, padding=1),
                              relay.conv2d(x, c, padding=2), pooled), axis=1)


@relay
def classifier(x: Tensor[Float, (1, 4, 16, 16)], w: Tensor[Float, (16, 4, 3, 3)],
               d: Tensor[Float, (10, 16)]) -> Tensor[Float, (1, 10)]:
    h = relay.relu(relay.conv2d(x, w, strides=2, padding=1))
    h = relay.avg_pool2d(h, pool_size=2, strides=2)
    return relay.softmax(relay.dense(relay.flatten(relay.global_avg_pool2d(h)), d))


PROGRAMS = [chain, residual, inception, classifier]


def _args(fn, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.checked_type.shape).astype(np.float32) * 0.5
            for p in fn.function.params]


def _jax(fn, args):
    return np.asarray(to_jax(fn.mod, fn.global_var.name_hint)(*args))


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("config", CONFIGS, ids=["768KiB", "24KiB", "24KiB-single-buffer"])
def test_every_schedule_computes_what_jax_computes(fn, config):
    args = _args(fn)
    expected = _jax(fn, args)
    for schedule in SCHEDULES:
        exe = relay.build(fn, target="accel", config=config, schedule=schedule)
        np.testing.assert_allclose(exe(*args), expected, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{fn.__name__}, {schedule}")


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_the_report_keeps_its_invariants(fn):
    args = _args(fn)
    traffic = {}
    for schedule in SCHEDULES:
        exe = relay.build(fn, target="accel", config=SMALL, schedule=schedule)
        static = exe.report
        exe(*args)
        ran = exe.report
        # the simulator's own counts are the schedule's
        assert (ran.read_bytes, ran.write_bytes, ran.macs) == \
            (static.read_bytes, static.write_bytes, static.macs)
        assert ran.seconds == pytest.approx(static.seconds)
        assert ran.dram_bytes >= ran.compulsory_bytes
        assert ran.seconds >= ran.roofline_seconds * (1 - 1e-9)
        assert ran.onchip_peak_bytes <= SMALL.onchip_bytes
        traffic[schedule] = ran.dram_bytes
    assert traffic["none"] >= traffic["fusion"] >= traffic["fusion+reuse"]
    assert traffic["fusion"] < traffic["none"]


def test_more_on_chip_memory_never_adds_traffic():
    for schedule in ("fusion", "fusion+reuse"):
        bytes_moved = [relay.build(residual, target="accel", schedule=schedule,
                                   config=AcceleratorConfig.deep_fusion(onchip_bytes=k * KIB)
                                   ).report.dram_bytes for k in (12, 16, 24, 48, 96, 768)]
        assert bytes_moved == sorted(bytes_moved, reverse=True)


def test_a_model_runs_with_its_parameters_as_constants():
    @relay_model
    def net(x: Tensor[Float, (1, 3, 16, 16)]) -> Tensor[Float, (1, 5)]:
        h = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=8, ksize=3, padding=1,
                                                     no_bias=True)))
        h = relay.max_pool(h, ksize=2, strides=2)
        return relay.linear(relay.flatten_layer(h), num_hidden=5)

    model = relay.create_model(net, seed=0)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    exe = relay.build(model, target="accel", config=SMALL)
    # batch norm folded into the weights: no layer of it is left on the accelerator
    layers = [name for g in exe.report.groups for name in g.layers]
    assert not any(name.startswith("batch_norm") for name in layers)
    np.testing.assert_allclose(exe(x), model(x), rtol=RTOL, atol=ATOL)
    text = str(exe.report)
    assert "fusion+reuse on deep_fusion" in text and "DRAM read MB" in text
    assert exe.report.to_markdown().count("\n|") == len(exe.report.groups) + 2  # + header


def test_the_report_plots(tmp_path):
    pytest.importorskip("matplotlib")
    exe = relay.build(residual, target="accel", config=SMALL)
    exe.report.plot(str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


@relay
def repeated(x: Tensor[Float, (1, 4, 8, 8)], w: Tensor[Float, (4, 4, 3, 3)], n: Int
             ) -> Tensor[Float, (1, 4, 8, 8)]:
    h = x
    for _ in range(n):
        h = relay.tanh(relay.conv2d(h, w, padding=1))
    return h


def test_a_loop_runs_on_the_host_and_its_layer_on_the_accelerator_each_turn():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    w = (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32)
    exe = relay.build(repeated, target="accel", config=SMALL)
    assert exe.report.host is not None  # known from the build: not one network

    def jax_repeated(n):
        h = x
        for _ in range(n):
            h = np.tanh(_jax(conv_only, [h, w]))
        return h

    for n in (0, 1, 3):
        np.testing.assert_allclose(exe(x, w, np.int32(n)), jax_repeated(n), rtol=RTOL,
                                   atol=ATOL)
        r = exe.report
        assert r.offloaded_calls == n  # the loop's counter and test are int ops: the host's
        assert r.macs == n * 4 * 8 * 8 * 4 * 9
        assert r.transfer_bytes == n * (x.nbytes + w.nbytes + x.nbytes)
        assert r.dram_bytes >= r.transfer_bytes
    assert "the control ran on the host, 3 calls of fused op groups on the accelerator" in \
        str(exe.report)


@relay
def conv_only(x: Tensor[Float, (1, 4, 8, 8)], w: Tensor[Float, (4, 4, 3, 3)]
              ) -> Tensor[Float, (1, 4, 8, 8)]:
    return relay.conv2d(x, w, padding=1)


def test_a_tree_lstm_runs_its_cells_on_the_accelerator_and_its_recursion_on_the_host():
    from relaydsl.datasets.sst import Leaf, Node, Vocabulary
    from relaydsl.frontend.zoo import tree_lstm as zoo

    tree = zoo.tree_lstm(vocab=20, hidden=8, dim=6)
    model = relay.create_model(tree.model, seed=0)
    sentence = Node(4, Leaf(1, "a"), Node(2, Leaf(3, "b"), Leaf(0, "c")))
    value = zoo.to_adt(sentence, Vocabulary(("<unk>", "a", "b", "c")))
    want_scores, want_loss = model(value)
    exe = relay.build(model, target="accel", config=SMALL)
    # the recursion as native code, the host's op calls compiled llvm kernels in it
    hybrid = exe.program.hybrid
    assert hybrid.path == "native"
    scores, loss = exe(value)
    np.testing.assert_allclose(scores, want_scores, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(loss, want_loss, rtol=RTOL, atol=ATOL)
    r = exe.report
    assert r.host == "the parameter %tree is a ParseTree, not a tensor"
    assert r.offloaded_calls > 0 and r.macs > 0  # the cells' dense layers
    assert r.host_calls > 0  # the splits and losses, which have no accelerator rule
    assert 0 < hybrid.native.kernels <= r.host_calls  # each compiled once


def test_errors_name_what_is_wrong():
    with pytest.raises(TypeError, match=r"config must be a relay\.AcceleratorConfig"):
        relay.build(chain, target="accel", config={"onchip_bytes": 1})
    with pytest.raises(ValueError, match=r"unknown schedule 'fuse'"):
        relay.build(chain, target="accel", schedule="fuse")
    tiny = AcceleratorConfig.deep_fusion(onchip_bytes=64)
    with pytest.raises(ValueError, match=r"AcceleratorConfig\.onchip_bytes: 64 bytes hold no "
                                         r"tile of layer conv2d_0"):
        relay.build(chain, target="accel", config=tiny)
    with pytest.raises(AttributeError, match="target 'llvm' keeps no report"):
        relay.build(chain, target="llvm").report


def test_a_global_pool_too_big_for_the_buffer_runs_in_blocks_of_channels():
    @relay
    def pool(x: Tensor[Float, (1, 64, 8, 8)]) -> Tensor[Float, (1, 64, 1, 1)]:
        return relay.global_avg_pool2d(relay.relu(x))

    x = np.random.default_rng(0).standard_normal((1, 64, 8, 8)).astype(np.float32)
    exe = relay.build(pool, target="accel", schedule="none",
                      config=AcceleratorConfig.deep_fusion(onchip_bytes=12 * KIB))
    np.testing.assert_allclose(exe(x), _jax(pool, [x]), rtol=RTOL, atol=ATOL)
    assert exe.report.groups[-1].channel_blocks > 1


def test_a_line_buffer_loads_each_input_row_once():
    @relay
    def conv(x: Tensor[Float, (1, 8, 40, 40)], w: Tensor[Float, (8, 8, 3, 3)]
             ) -> Tensor[Float, (1, 8, 40, 40)]:
        return relay.conv2d(x, w, padding=1)

    args = _args(conv)
    exe = relay.build(conv, target="accel", schedule="none", config=SMALL)
    group = exe.report.groups[0]
    assert group.tiles > 1  # bands of rows, each reading its neighbours' rows too
    np.testing.assert_allclose(exe(*args), _jax(conv, args), rtol=RTOL, atol=ATOL)
    assert exe.report.read_bytes["x"] == args[0].nbytes
    assert any(ins.opcode.name == "SHIFT" for ins in exe.program.code)


@relay
def strided(x: Tensor[Float, (1, 1, 1, 4)], w: Tensor[Float, (1, 1, 1, 1)]
            ) -> Tensor[Float, (1, 1, 1, 2)]:
    return relay.conv2d(x, w, strides=2)


@relay
def strided_twice(x: Tensor[Float, (1, 1, 1, 8)], w: Tensor[Float, (1, 1, 1, 1)]
                  ) -> Tensor[Float, (1, 1, 1, 2)]:
    return relay.conv2d(relay.conv2d(x, w, strides=2), w, strides=2)


@relay
def strided_rows(x: Tensor[Float, (1, 1, 4, 2)], w: Tensor[Float, (1, 1, 1, 1)]
                 ) -> Tensor[Float, (1, 1, 2, 2)]:
    return relay.conv2d(x, w, strides=(2, 1))


@pytest.mark.parametrize("fn, floats", [(strided, 2 + 1 + 2), (strided_twice, 2 + 1 + 2),
                                        (strided_rows, 4 + 1 + 4)],
                         ids=["strided", "strided_twice", "strided_rows"])
def test_the_compulsory_traffic_leaves_out_what_strided_windows_never_read(fn, floats):
    # a 1x1 convolution of stride 2 over 4 columns reads columns 0 and 2, two of them over
    # 8 columns columns 0 and 4, and one of a stride of 2 rows over 4 rows rows 0 and 2: the
    # rest is never needed, and bands of rows or strips of columns skip it, so it is not
    # compulsory either (random networks found schedules moving less than the compulsory
    # traffic counted as every input's whole size)
    args = _args(fn)
    for schedule in SCHEDULES:
        exe = relay.build(fn, target="accel", config=SMALL, schedule=schedule)
        np.testing.assert_allclose(exe(*args), _jax(fn, args), rtol=RTOL, atol=ATOL)
        r = exe.report
        assert r.compulsory_bytes == 4 * floats  # what x is read of, w, the result
        assert r.dram_bytes >= r.compulsory_bytes


def test_fusion_and_reuse_never_moves_more_than_fusion_alone():
    # random networks found it: with reuse one tile fitted and loaded columns 0-4 of x,
    # without it two strips loaded only the columns 0, 1, 3 and 4 the stride-2 pools read;
    # the search now weighs a group's plans without deep reuse too
    rng = np.random.default_rng(0)
    x = Var("x", TensorType((2, 4, 5, 5)))
    h = ops.conv2d(x, Constant(rng.standard_normal((4, 4, 2, 1)).astype(np.float32)),
                   padding=(1, 0, 0, 0))
    h = ops.avg_pool2d(h, pool_size=(2, 3), strides=(2, 2), padding=(1, 1, 0, 1))
    h = ops.avg_pool2d(h, pool_size=(3, 1), strides=(2, 2), ceil_mode=True)
    mod = infer_types(IRModule.from_expr(Function([x], h)))
    config = AcceleratorConfig.deep_fusion(onchip_bytes=2 * KIB)
    traffic = {kind: AccelProgram(mod, "main", config, kind).report.dram_bytes
               for kind in ("none", "fusion", "fusion+reuse")}
    assert traffic["none"] >= traffic["fusion"] >= traffic["fusion+reuse"], traffic


def test_fusion_and_reuse_keeps_the_values_of_a_batch_norm_of_inputs():
    # A group stores its outputs after its last layer: the scaled activation, computed
    # before the batch norm's shift in the same group, and relu(x), read again by the last
    # residual add, must keep their on-chip space until then (lifetime-based sharing once
    # gave it to a later layer of their group; random networks found it).
    rng = np.random.default_rng(0)

    def weight(*shape):
        return Constant((rng.standard_normal(shape) * 0.3).astype(np.float32))

    x = Var("x", TensorType((1, 2, 11, 12)))
    gamma, beta, mean = (Var(name, TensorType((2,))) for name in ("gamma", "beta", "mean"))
    h0 = ops.relu(x)
    h1 = ops.sigmoid(ops.add(ops.conv2d(h0, weight(2, 2, 3, 3), padding=1), h0))
    h2 = TupleGetItem(ops.batch_norm(h1, gamma, beta, mean,
                                     Constant(np.ones(2, np.float32))), 0)
    out = ops.leaky_relu(ops.add(ops.conv2d(h2, weight(2, 2, 3, 3), padding=1), h0),
                         alpha=0.1)
    mod = infer_types(IRModule.from_expr(Function([x, gamma, beta, mean], out)))
    args = [rng.uniform(-2, 2, p.checked_type.shape).astype(np.float32)
            for p in mod["main"].params]
    want = np.asarray(to_jax(mod, "main")(*args))
    config = AcceleratorConfig.vta(block_in=4, block_out=4, dtype="float32",
                                   double_buffering=False, input_buffer_bytes=2 * KIB,
                                   weight_buffer_bytes=2 * KIB, acc_buffer_bytes=2 * KIB,
                                   onchip_bytes=6 * KIB)
    for kind in ("none", "fusion", "fusion+reuse"):
        got = AccelProgram(mod, "main", config, kind)(*args)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=kind)
