"""The int8 accelerator (VTA's element type): realized quantized programs bit-exact with llvm
and the interpreter, one byte an int8 element in the traffic, the MAC array's batch dimension
in the cycles and in the weight traffic per input, and the errors."""
import numpy as np
import pytest

from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from relaydsl.backend.accel.program import AccelProgram
from relaydsl.backend.interpreter import evaluate
from relaydsl.ir import Constant, Function, IRModule, TensorType, Var
from relaydsl.op import ops
from relaydsl.quantize import QConfig
from relaydsl.quantize.calibrate import calibrate
from relaydsl.quantize.flow import annotate_module, realize_module
from relaydsl.typing import infer_types
from tests.relaydsl.quantize.helpers import data, mlp, module, runner, weights

ALL = QConfig(skip_conv_layers=(), skip_dense_layer=False, calibrate_mode="percentile")
SINGLE, MULTI = AcceleratorConfig.vta(), AcceleratorConfig.vta(batch=4, block_in=8, block_out=8)
# buffers small enough that the 16x16 network runs in bands of rows
TINY = AcceleratorConfig.vta(input_buffer_bytes=4 * KIB, weight_buffer_bytes=4 * KIB,
                             acc_buffer_bytes=16 * KIB, onchip_bytes=24 * KIB)


def cnn(n: int) -> IRModule:
    """conv2d -> add bias -> relu -> conv2d -> relu on n 2x16x16 images, constant weights."""
    c1, b1, c2 = weights(8, 2, 3, 3), weights(8, 1, 1, scale=0.1), weights(8, 8, 3, 3)

    def body(x):
        h = ops.relu(ops.add(ops.conv2d(x, c1, padding=1), b1))
        return ops.relu(ops.conv2d(h, c2, padding=1))

    return module(body, (n, 2, 16, 16))


def realized(mod: IRModule, shape: tuple[int, ...]) -> IRModule:
    calibrated = calibrate(annotate_module(mod, ALL), "main", data(*shape), ALL, runner())
    return realize_module(calibrated.mod, ALL)


@pytest.mark.parametrize("config", [SINGLE, MULTI, TINY], ids=["vta", "vta4", "tiny"])
@pytest.mark.parametrize("kind", ["none", "fusion+reuse"])
@pytest.mark.parametrize("n", [1, 4])
def test_a_quantized_cnn_is_bit_exact_with_llvm_and_the_interpreter(config, kind, n):
    out = realized(cnn(n), (n, 2, 16, 16))
    exe = AccelProgram(out, "main", config, kind)
    assert exe.hybrid is None, exe.report.host  # the whole network on the accelerator
    assert any(g.macs for g in exe.report.groups)
    llvm = runner("llvm")(out, "main")
    for (x,) in data(n, 2, 16, 16, n=2):
        expected = evaluate(out, x)
        np.testing.assert_array_equal(llvm(x), expected)
        np.testing.assert_array_equal(exe(x), expected)
    if config is TINY:
        assert max(g.tiles for g in exe.report.groups) > 1


@pytest.mark.parametrize("config", [SINGLE, MULTI], ids=["vta", "vta4"])
def test_a_quantized_dense_network_is_bit_exact_with_llvm(config):
    out = realized(mlp(), (4, 8))
    exe = AccelProgram(out, "main", config, "fusion+reuse")
    assert exe.hybrid is None, exe.report.host
    for (x,) in data(4, 8, n=2):
        np.testing.assert_array_equal(exe(x), runner("llvm")(out, "main")(x))


def conv_int8(n: int, channels: int = 16, size: int = 8) -> tuple[IRModule, np.ndarray]:
    """One int8 x int8 -> int32 convolution of n images, its weight a constant."""
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, (channels, channels, 3, 3)).astype(np.int8)
    x = Var("x", TensorType((n, channels, size, size), "int8"))
    conv = ops.conv2d(x, Constant(w), padding=1, out_dtype="int32")
    return infer_types(IRModule.from_expr(Function([x], conv))), w


def test_int8_traffic_counts_a_byte_an_element_and_four_for_int32():
    mod, w = conv_int8(1)
    exe = AccelProgram(mod, "main", SINGLE, "none")
    x = np.random.default_rng(2).integers(-127, 128, (1, 16, 8, 8)).astype(np.int8)
    out = exe(x)
    np.testing.assert_array_equal(out, evaluate(mod, x))
    assert out.dtype == np.int32
    r = exe.report
    assert r.read_bytes == {"x": x.size, "const_0": w.size}
    assert r.write_bytes == {"conv2d_0": out.size * 4}
    assert r.compulsory_bytes == x.size + w.size + out.size * 4


def test_a_batch_shares_its_weights_and_the_multi_batch_core_wastes_a_single_input():
    def build(n, config):
        return AccelProgram(conv_int8(n)[0], "main", config, "fusion+reuse")

    def compute_cycles(exe):
        return sum(t.cycles for g in exe.groups for t in g.tiles)

    one, four = build(1, MULTI), build(4, MULTI)
    # the weights are read once a call: a quarter of them per input at batch 4
    assert four.report.read_bytes["const_0"] == one.report.read_bytes["const_0"] == 16 * 16 * 9
    assert four.report.macs == 4 * one.report.macs
    # one image fills a quarter of the multi-batch array: it takes a batch of four's cycles
    assert compute_cycles(one) == compute_cycles(four)
    # the single-batch core does the same MACs in a quarter of the cycles
    single = build(1, SINGLE)
    assert single.report.macs == one.report.macs
    assert 4 * compute_cycles(single) == compute_cycles(one)


def test_cycles_pad_a_partial_batch():
    assert [MULTI.cycles("mac", 256 * k, rows=k) for k in (1, 2, 3, 4, 5)] == [4, 4, 4, 4, 8]
    assert [SINGLE.cycles("mac", 256 * k, rows=k) for k in (1, 4, 5)] == [1, 4, 5]
    assert MULTI.cycles("alu", 32, rows=4) == 1 and MULTI.cycles("alu", 8, rows=1) == 1


def test_vta_is_int8_and_float32_on_request():
    assert SINGLE.dtype == "int8" and SINGLE.element_bytes == 1 and MULTI.batch == 4
    assert AcceleratorConfig.vta(dtype="float32").element_bytes == 4
    assert AcceleratorConfig.deep_fusion().dtype == "float32"


def test_a_batch_that_does_not_divide_the_array_is_named():
    with pytest.raises(ValueError, match=r"AcceleratorConfig.batch must be a positive int "
                                         r"dividing the MAC array's rows \(10\)"):
        AcceleratorConfig.deep_fusion(batch=3)
    with pytest.raises(ValueError, match=r"AcceleratorConfig\.batch"):
        AcceleratorConfig.deep_fusion(batch=0)


def test_a_float_network_on_the_int8_core_runs_on_the_host_saying_why():
    mod = infer_types(IRModule.from_expr(Function(
        [x := Var("x", TensorType((1, 2, 6, 6)))],
        ops.conv2d(x, weights(4, 2, 3, 3)))))
    exe = AccelProgram(mod, "main", SINGLE, "none")
    x = np.ones((1, 2, 6, 6), np.float32)
    np.testing.assert_allclose(exe(x), evaluate(mod, x), rtol=1e-5)
    assert exe.report.host == ("conv2d_0 multiplies float32 by float32 into float32: the "
                               "accelerator's MAC array takes int8 operands summed in int32")


def test_an_int8_network_on_the_float_core_runs_on_the_host():
    mod, _ = conv_int8(1)
    exe = AccelProgram(mod, "main", AcceleratorConfig.deep_fusion(), "none")
    x = np.ones((1, 16, 8, 8), np.int8)
    np.testing.assert_array_equal(exe(x), evaluate(mod, x))
    assert exe.report.host == "conv2d_0 computes in int32: the accelerator runs float32"
