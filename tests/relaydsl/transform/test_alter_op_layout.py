"""AlterOpLayout: NCHW conv2d becomes conv2d_nchwc with layout_transform ops around it; the
ops between two blocked convolutions stay blocked and inverse transform pairs cancel, so a
chain has one transform in and one out (structure, as TVM's test_pass_alter_op_layout.py
expects); values are unchanged on both targets (checked against jax.lax.conv_general_dilated).
By default only the convolutions it makes faster are rewritten (``_pays``); the structural
tests use ``everywhere=True`` to rewrite small ones too.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.backend.interpreter import to_value
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Call, Constant, Function, Op, Var, const
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.structural import structural_equal
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import post_order
from relaydsl.op import ops
from relaydsl.transform import PassContext, PassTimingInstrument, pipeline
from relaydsl.transform.alter_op_layout import alter_op_layout, channel_block, op_calls
from relaydsl.transform.dead_code import eliminate_dead_code
from relaydsl.transform.fold_constant import fold_constants
from relaydsl.typing import infer_types

RNG = np.random.default_rng(0)
HIGHEST = jax.lax.Precision.HIGHEST


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_jax(x, w, padding=1):
    return jax.lax.conv_general_dilated(x, w, (1, 1), [(padding, padding)] * 2,
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                        precision=HIGHEST)


def module(params, body) -> IRModule:
    mod = IRModule()
    mod.add("main", Function(params, body))
    return infer_types(mod)


def run(mod: IRModule, target: str, *args, **context):
    with PassContext(**context):
        program = get_target(target).build(mod, "main", {})
    return np.asarray(program(*[to_value(a, p.checked_type)
                                for a, p in zip(args, mod["main"].params)]))


def transforms(mod: IRModule) -> list[tuple[str, str]]:
    out = []

    def note(e):
        if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "layout_transform":
            out.append((e.attrs.src_layout, e.attrs.dst_layout))

    post_order(mod["main"], note)
    return out


# A ResNet-style block on 32 channels: conv, bias, relu, conv, scale, residual add, relu, conv.
C, HW = 32, 8
WEIGHTS = [f32(C, C, 3, 3, scale=0.1) for _ in range(3)]
BIAS, SCALE = f32(C), f32(C, 1, 1)


def block_body(x, w1, w2, w3, b, s):
    h = ops.relu(ops.bias_add(ops.conv2d(x, w1, padding=1), b))
    y = ops.relu(ops.add(ops.multiply(ops.conv2d(h, w2, padding=1), s), h))
    return ops.conv2d(y, w3, padding=1)


def block_jax(x, w1, w2, w3, b=BIAS, s=SCALE):
    h = jax.nn.relu(conv_jax(x, w1) + b[None, :, None, None])
    y = jax.nn.relu(conv_jax(h, w2) * s + h)
    return conv_jax(y, w3)


def constant_block() -> IRModule:
    x = Var("x", TensorType((1, C, HW, HW)))
    return module([x], block_body(x, *map(Constant, [*WEIGHTS, BIAS, SCALE])))


def param_block() -> IRModule:
    x = Var("x", TensorType((1, C, HW, HW)))
    ws = [Var(f"w{i}", TensorType((C, C, 3, 3))) for i in (1, 2, 3)]
    b, s = Var("b", TensorType((C,))), Var("s", TensorType((C, 1, 1)))
    return module([x, *ws, b, s], block_body(x, *ws, b, s))


def test_a_chain_has_one_transform_in_and_one_out():
    altered = fold_constants(eliminate_dead_code(alter_op_layout(constant_block())))
    calls = op_calls(altered["main"])
    assert "conv2d" not in calls and calls.count("conv2d_nchwc") == 3
    # the weight, bias and scale transforms are folded; relu, the bias add, the scale and
    # the residual add run blocked
    assert transforms(altered) == [("NCHW", "NCHW32c"), ("NCHW32c", "NCHW")]
    assert altered["main"].body.op.name == "layout_transform"
    # the same in the llvm pipeline at opt_level 3, inside the fused functions
    lowered = pipeline.run(constant_block(), "llvm", PassContext(opt_level=3))
    assert sorted(transforms(lowered)) == sorted(transforms(altered))


def test_parameter_weights_get_their_own_transforms():
    altered = alter_op_layout(param_block(), everywhere=True)
    # one transform of the data in, one out, one per weight, and the per-channel scale
    # (32, 1, 1) taken to (1, 1, 1, 1, 32); the bias is reshaped to (1, 1, 1, 32)
    assert sorted(transforms(altered)) == sorted(
        [("NCHW", "NCHW32c")] * 2 + [("NCHW32c", "NCHW")] + [("OIHW", "OIHW32i32o")] * 3)
    assert op_calls(altered["main"]).count("reshape") == 2
    # by default these small convolutions are not worth transforming parameter weights for
    assert "conv2d_nchwc" not in op_calls(alter_op_layout(param_block())["main"])


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_values_are_unchanged(target):
    mod = param_block()
    x = f32(1, C, HW, HW)
    args = [x, *WEIGHTS, BIAS, SCALE]
    want = block_jax(*map(jnp.asarray, args[:4]))
    before = run(mod, target, *args)
    after = run(alter_op_layout(mod, everywhere=True), target, *args)
    np.testing.assert_allclose(before, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(after, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, level, runs", [
    ("llvm", 2, False), ("llvm", 3, True), ("interp", 3, False)])
def test_the_pass_runs_at_opt_level_3_on_llvm(target, level, runs):
    x = f32(1, C, HW, HW)
    timing = PassTimingInstrument()
    got = run(constant_block(), target, x, opt_level=level, instruments=[timing])
    assert ("AlterOpLayout" in [name for name, _ in timing.timings]) == runs
    np.testing.assert_allclose(got, block_jax(x, *WEIGHTS), rtol=1e-4, atol=1e-4)


def rewritten(mod: IRModule) -> int:
    return op_calls(alter_op_layout(mod)["main"]).count("conv2d_nchwc")


@pytest.mark.parametrize("data, weight, attrs, constant, count", [
    ((1, 32, 8, 8), (32, 32, 3, 3), {"padding": 1}, True, 1),     # a constant weight
    ((1, 32, 8, 8), (8, 32, 3, 3), {"padding": 1}, True, 0),      # 8 out-channels
    ((1, 32, 8, 8), (32, 32, 3, 3), {"dilation": 2}, True, 0),    # dilated
    ((1, 32, 8, 8), (32, 32, 1, 1), {}, True, 0),                 # 1x1 on NCHW data
    ((1, 32, 8, 8), (32, 32, 3, 3), {"padding": 1}, False, 0),    # a parameter, 64 pixels
    ((1, 3, 32, 32), (32, 3, 3, 3), {"padding": 1}, False, 1),    # a parameter, 1024 pixels
])
def test_only_convolutions_it_makes_faster_are_rewritten(data, weight, attrs, constant, count):
    x = Var("x", TensorType(data))
    w = Constant(f32(*weight)) if constant else Var("w", TensorType(weight))
    mod = module([x] if constant else [x, w], ops.conv2d(x, w, **attrs))
    assert rewritten(mod) == count


def test_a_1x1_convolution_of_blocked_data_is_rewritten():
    x = Var("x", TensorType((1, 32, 8, 8)))
    w3, w1 = Constant(f32(32, 32, 3, 3, scale=0.1)), Constant(f32(64, 32, 1, 1, scale=0.1))
    mod = module([x], ops.conv2d(ops.relu(ops.conv2d(x, w3, padding=1)), w1))
    assert rewritten(mod) == 2
    xv = f32(1, 32, 8, 8)
    want = conv_jax(jax.nn.relu(conv_jax(xv, np.asarray(w3.data))), np.asarray(w1.data), 0)
    np.testing.assert_allclose(run(mod, "llvm", xv), want, rtol=1e-4, atol=1e-4)


def test_an_inverse_pair_cancels():
    mod = infer_types(parse('''
    def @main(%x: Tensor[(1, 16, 4, 4), float32]) {
      %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW8c");
      %1 = layout_transform(%0, src_layout="NCHW8c", dst_layout="NCHW");
      conv2d(%1, ones(shape=[8, 16, 1, 1], dtype="float32"))
    }'''))
    altered = eliminate_dead_code(alter_op_layout(mod, everywhere=True))
    # the user's pair is gone; the conv's data transform reads %x
    data = altered["main"].body.args[0].args[0]
    assert isinstance(data, Call) and data.op.name == "layout_transform"
    assert data.args[0] is altered["main"].params[0]


def test_a_non_inverse_pair_stays():
    text = '''
    def @main(%x: Tensor[(1, 16, 4, 4), float32]) {
      layout_transform(layout_transform(%x, src_layout="NCHW", dst_layout="NCHW8c"),
                       src_layout="NCHW8c", dst_layout="NCHW4c")
    }'''
    mod = infer_types(parse(text))
    assert structural_equal(alter_op_layout(mod)["main"], mod["main"])


def test_let_bound_results_are_seen_through():
    mod = infer_types(parse('''
    def @main(%x: Tensor[(1, 8, 6, 6), float32], %w: Tensor[(8, 8, 3, 3), float32]) {
      let %a = conv2d(%x, %w, padding=1);
      let %b = relu(%a);
      let %c = conv2d(%b, %w, padding=1);
      add(%c, %b)
    }'''))
    altered = eliminate_dead_code(alter_op_layout(mod, everywhere=True))
    assert sorted(transforms(altered)) == sorted(
        [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW"), ("OIHW", "OIHW8i8o"), ("OIHW", "OIHW8i8o")])
    x, w = f32(1, 8, 6, 6), f32(8, 8, 3, 3)
    h = jax.nn.relu(conv_jax(x, w))
    want = conv_jax(h, w) + h
    for target in ("interp", "llvm"):
        np.testing.assert_allclose(run(altered, target, x, w), want, rtol=1e-4, atol=1e-4)


def test_few_in_channels_are_one_block_and_grouped_convs_stay():
    assert [channel_block(c, 16) for c in (3, 64, 24, 10)] == [1, 16, 8, 2]
    x = Var("x", TensorType((1, 3, 7, 7)))
    w1, w2 = Var("w1", TensorType((8, 3, 3, 3))), Var("w2", TensorType((8, 4, 3, 3)))
    mod = module([x, w1, w2], ops.conv2d(ops.conv2d(x, w1), w2, groups=2))
    altered = eliminate_dead_code(alter_op_layout(mod, everywhere=True))
    calls = op_calls(altered["main"])
    assert calls.count("conv2d_nchwc") == 1 and calls.count("conv2d") == 1
    # the 3 in-channels are one block (NCHW3c, which is NHWC), not three of one
    assert sorted(transforms(altered)) == [("NCHW", "NCHW3c"), ("NCHW8c", "NCHW"),
                                           ("OIHW", "OIHW3i8o")]
    args = [f32(1, 3, 7, 7), f32(8, 3, 3, 3), f32(8, 4, 3, 3)]
    want = jax.lax.conv_general_dilated(
        conv_jax(args[0], args[1], padding=0), args[2], (1, 1), [(0, 0)] * 2,
        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=2, precision=HIGHEST)
    for target in ("interp", "llvm"):
        np.testing.assert_allclose(run(altered, target, *args), want, rtol=1e-4, atol=1e-4)


def test_a_program_without_conv2d_is_returned_as_is():
    mod = infer_types(parse('''
    def @main(%x: Tensor[(1, 16, 4, 4), float32]) { relu(%x) }'''))
    assert alter_op_layout(mod)["main"] is mod["main"]


def test_strided_and_dilated_convs_keep_their_values():
    x = Var("x", TensorType((2, 16, 9, 9)))
    w1, w2 = Var("w1", TensorType((32, 16, 3, 3))), Var("w2", TensorType((16, 32, 3, 3)))
    body = ops.conv2d(ops.relu(ops.conv2d(x, w1, strides=2, padding=(1, 0, 1, 1))), w2,
                      dilation=2, padding=2)
    mod = module([x, w1, w2], body)
    args = [f32(2, 16, 9, 9), f32(32, 16, 3, 3, scale=0.2), f32(16, 32, 3, 3, scale=0.2)]
    h = jax.nn.relu(jax.lax.conv_general_dilated(
        args[0], args[1], (2, 2), [(1, 1), (0, 1)], dimension_numbers=("NCHW", "OIHW", "NCHW"),
        precision=HIGHEST))
    want = jax.lax.conv_general_dilated(h, args[2], (1, 1), [(2, 2), (2, 2)], rhs_dilation=(2, 2),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                        precision=HIGHEST)
    altered = alter_op_layout(mod, everywhere=True)
    assert transforms(altered).count(("NCHW", "NCHW16c")) == 1
    for target in ("interp", "llvm"):
        np.testing.assert_allclose(run(altered, target, *args), want, rtol=1e-4, atol=1e-4)


def test_ops_with_an_axis_or_a_shape_stay_nchw():
    x, w = Var("x", TensorType((1, 8, 5, 5))), Var("w", TensorType((8, 8, 1, 1)))
    alpha = Var("alpha", TensorType((8,)))
    h = ops.prelu(ops.conv2d(x, w), alpha, axis=1)
    body = ops.add(ops.broadcast_to(ops.conv2d(h, w), shape=(1, 8, 5, 5)), const(1.0))
    altered = eliminate_dead_code(alter_op_layout(module([x, w, alpha], body), everywhere=True))
    prelu = _calls(altered, "prelu")
    assert len(prelu) == 1 and prelu[0].args[0].attrs.dst_layout == "NCHW"
    args = [f32(1, 8, 5, 5), f32(8, 8, 1, 1), f32(8)]
    c = conv_jax(args[0], args[1], padding=0)
    h = jnp.where(c > 0, c, c * args[2][None, :, None, None])
    want = conv_jax(h, args[1], padding=0) + 1.0
    for target in ("interp", "llvm"):
        np.testing.assert_allclose(run(altered, target, *args), want, rtol=1e-4, atol=1e-4)


def _calls(mod: IRModule, name: str) -> list[Call]:
    found: list[Call] = []
    post_order(mod["main"], lambda e: found.append(e) if isinstance(e, Call) and
               isinstance(e.op, Op) and e.op.name == name else None)
    return found


# ---- dense of a small batch, computed transposed ------------------------------------------------

def dense_module(batch: int, units: int, dtype: str = "float32") -> IRModule:
    return infer_types(parse(
        f"def @main(%x: Tensor[({batch}, 96), {dtype}], %w: Tensor[({units}, 96), {dtype}], "
        f"%b: Tensor[({units},), {dtype}]) {{\n  relu(add(dense(%x, %w), %b))\n}}"))


@pytest.mark.parametrize("batch, units, dtype, transposed", [
    (16, 128, "float32", True), (64, 512, "float32", True),
    (8, 512, "float32", False), (65, 512, "float32", False),  # batches outside DENSE_ROWS
    (64, 10, "float32", False),  # too few units
    (64, 512, "float16", False)])
def test_a_small_batch_s_dense_is_computed_transposed(batch, units, dtype, transposed):
    calls = op_calls(alter_op_layout(dense_module(batch, units, dtype))["main"])
    if transposed:
        assert calls == ["transpose", "matmul", "transpose", "add", "relu"]
    else:
        assert calls == ["dense", "add", "relu"]


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_the_transposed_dense_computes_what_the_dense_does(target):
    mod = dense_module(32, 160)
    x, w, b = f32(32, 96), f32(160, 96, scale=0.1), f32(160)
    want = jax.nn.relu(jnp.matmul(x, w.T, precision=HIGHEST) + b)
    np.testing.assert_allclose(run(mod, target, x, w, b), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run(alter_op_layout(mod), target, x, w, b), want,
                               rtol=1e-5, atol=1e-5)
