"""CombineParallelConv2D: conv2d calls of one input become one wider conv2d plus slices, with
the element-wise ops every branch applies next; values before and after are compared with
JAX on both targets. The cases follow TVM's
tests/python/relay/test_pass_combine_parallel_conv2d.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.ir.expr import Tuple
from relaydsl.op.registry import ops
from relaydsl.transform import PassContext, pipeline
from relaydsl.transform.combine_parallel_conv2d import combine_parallel_conv2d
from tests.relaydsl.transform.module_helpers import module, op_names, run

RNG = np.random.default_rng(1)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv(x, w, stride=1, padding=0):
    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), [(padding, padding)] * 2,
        dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=jax.lax.Precision.HIGHEST)


def assert_same_values(mod, combined, want, args):
    for target in ("interp", "llvm"):
        for program in (mod, combined):
            got = run(program, target, *args)
            for g, w in zip(got if isinstance(got, tuple) else [got],
                            want if isinstance(want, tuple) else [want]):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_convolutions_of_one_input_become_one_and_slices():
    # TVM's simple case: the 3x3 convolution does not combine with the 1x1 ones
    x_shape, channels = (1, 4, 8, 8), (4, 8, 5, 7)
    shapes = [x_shape, *[(c, 4, k, k) for c, k in zip(channels, (1, 1, 3, 1))]]
    mod = module(shapes, lambda x, w1, w2, w3, w4: Tuple((
        ops.conv2d(x, w1), ops.conv2d(x, w2), ops.conv2d(x, w3), ops.conv2d(x, w4),
        ops.max_pool2d(x, pool_size=(2, 2)))))
    combined = combine_parallel_conv2d(mod, min_num_branches=2)
    assert op_names(combined) == ["concatenate", "conv2d", "conv2d", "max_pool2d",
                                  "strided_slice", "strided_slice", "strided_slice"]
    args = [normal(*s) for s in shapes]
    x, w1, w2, w3, w4 = args
    pool = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 1, 1), "VALID")
    want = (conv(x, w1), conv(x, w2), conv(x, w3), conv(x, w4), pool)
    assert_same_values(mod, combined, want, args)


def test_the_scale_and_relu_every_branch_applies_combine_too():
    # TVM's scale_relu: multiply and relu combine; the second branch's add stays after its slice
    c1, c2 = 4, 8
    shapes = [(1, 4, 6, 6), (c1, 4, 1, 1), (c2, 4, 1, 1), (c1, 1, 1), (c2, 1, 1), (c2, 1, 1)]

    def body(x, w1, w2, s1, s2, b):
        y1 = ops.relu(ops.multiply(ops.conv2d(x, w1), s1))
        y2 = ops.add(ops.relu(ops.multiply(ops.conv2d(x, w2), s2)), b)
        return Tuple((y1, y2))

    mod = module(shapes, body)
    combined = combine_parallel_conv2d(mod, min_num_branches=2)
    assert op_names(combined) == ["add", "concatenate", "concatenate", "conv2d", "multiply",
                                  "relu", "strided_slice", "strided_slice"]
    args = [normal(*s) for s in shapes]
    x, w1, w2, s1, s2, b = args
    want = (jnp.maximum(conv(x, w1) * s1, 0), jnp.maximum(conv(x, w2) * s2, 0) + b)
    assert_same_values(mod, combined, want, args)


def test_fewer_branches_than_the_threshold_stay():
    shapes = [(1, 4, 6, 6), (3, 4, 1, 1), (5, 4, 1, 1)]
    mod = module(shapes, lambda x, w1, w2: Tuple((ops.conv2d(x, w1), ops.conv2d(x, w2))))
    assert combine_parallel_conv2d(mod) is mod  # TVM's default: 3 branches
    with pytest.raises(ValueError, match="at least 2"):
        combine_parallel_conv2d(mod, min_num_branches=1)


@pytest.mark.parametrize("attrs", [
    [{"groups": 2}, {"groups": 2}],  # grouped: left alone, as TVM
    [{"strides": (2, 2)}, {}],  # attributes differ
])
def test_convolutions_that_differ_or_are_grouped_stay(attrs):
    shapes = [(1, 4, 6, 6), (4, 2 if "groups" in attrs[0] else 4, 1, 1),
              (6, 2 if "groups" in attrs[1] else 4, 1, 1)]
    mod = module(shapes, lambda x, w1, w2: Tuple((ops.conv2d(x, w1, **attrs[0]),
                                                  ops.conv2d(x, w2, **attrs[1]))))
    assert combine_parallel_conv2d(mod, min_num_branches=2) is mod


def test_branch_ops_that_disagree_end_the_combined_chain():
    # relu on one branch, tanh on the other: only the convolutions combine
    shapes = [(1, 4, 6, 6), (3, 4, 1, 1), (5, 4, 1, 1)]
    mod = module(shapes, lambda x, w1, w2: Tuple((ops.relu(ops.conv2d(x, w1)),
                                                  ops.tanh(ops.conv2d(x, w2)))))
    combined = combine_parallel_conv2d(mod, min_num_branches=2)
    assert op_names(combined) == ["concatenate", "conv2d", "relu", "strided_slice",
                                  "strided_slice", "tanh"]
    args = [normal(*s) for s in shapes]
    x, w1, w2 = args
    assert_same_values(mod, combined, (jnp.maximum(conv(x, w1), 0), jnp.tanh(conv(x, w2))),
                       args)


def test_an_operand_computed_from_another_branch_ends_the_chain():
    # branch 1 scales by a value computed from branch 2's convolution: combining that multiply
    # would make the combined convolution's result depend on itself
    shapes = [(1, 4, 6, 6), (3, 4, 1, 1), (3, 4, 1, 1), (3, 1, 1), (3, 1, 1)]

    def body(x, w1, w2, s1, s2):
        y2 = ops.multiply(ops.conv2d(x, w2), s2)
        scale = ops.expand_dims(ops.sum(y2, axis=(0, 2, 3)), axis=1, num_newaxis=2)
        return Tuple((ops.multiply(ops.conv2d(x, w1), ops.multiply(scale, s1)), y2))

    mod = module(shapes, body)
    combined = combine_parallel_conv2d(mod, min_num_branches=2)
    assert op_names(combined).count("conv2d") == 1
    args = [normal(*s) for s in shapes]
    x, w1, w2, s1, s2 = args
    y2 = conv(x, w2) * s2
    want = (conv(x, w1) * y2.sum(axis=(0, 2, 3))[:, None, None] * s1, y2)
    assert_same_values(mod, combined, want, args)


# ---- an Inception block, written in the frontend (its assignments are let bindings) -----------

C = 8
W1, W2, W2B, W3, W3B, W4 = (normal(4, C, 1, 1), normal(3, C, 1, 1), normal(4, 3, 3, 3),
                            normal(2, C, 1, 1), normal(3, 2, 5, 5), normal(3, C, 1, 1))
B1, B2, B3 = normal(4), normal(3), normal(2)


@relay
def inception(x: Tensor[Float, (1, C, 8, 8)]) -> Tensor[Float, (1, 14, 8, 8)]:
    a = relay.relu(relay.bias_add(relay.conv2d(x, W1), B1))
    b = relay.relu(relay.bias_add(relay.conv2d(x, W2), B2))
    b = relay.conv2d(b, W2B, padding=(1, 1))
    c = relay.relu(relay.bias_add(relay.conv2d(x, W3), B3))
    c = relay.conv2d(c, W3B, padding=(2, 2))
    d = relay.conv2d(relay.max_pool2d(x, pool_size=(3, 3), strides=(1, 1), padding=(1, 1)), W4)
    return relay.concatenate((a, b, c, d), axis=1)


def inception_reference(x):
    def branch(w, b):
        return jnp.maximum(conv(x, w) + b[:, None, None], 0)
    pool = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 1, 1),
                                 [(0, 0), (0, 0), (1, 1), (1, 1)])
    return jnp.concatenate([branch(W1, B1), conv(branch(W2, B2), W2B, padding=1),
                            conv(branch(W3, B3), W3B, padding=2), conv(pool, W4)], axis=1)


def test_an_inception_blocks_three_1x1_convolutions_combine_with_their_bias_and_relu():
    context = PassContext(opt_level=3, required_pass=["CombineParallelConv2D"])
    out = pipeline.run(inception.mod, "interp", context)
    # its global's name: "inception", or "inception_<k>" where the process made one before
    entry = inception.global_var.name_hint
    names = op_names(out, entry)
    # one 1x1 conv of x (weights and biases folded into constants), the 3x3, 5x5 and pool's
    assert names.count("conv2d") == 4 and names.count("strided_slice") == 3
    assert names.count("bias_add") == 1 and names.count("relu") == 1
    before = pipeline.run(inception.mod, "interp", PassContext(opt_level=3))
    assert op_names(before, entry).count("conv2d") == 6
    x = normal(1, C, 8, 8)
    want = inception_reference(x)
    for target in ("interp", "llvm"):
        with PassContext(required_pass=["CombineParallelConv2D"]):
            got = relay.build(inception, target=target, opt_level=3)(x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(relay.build(inception, target=target, opt_level=3)(x), want,
                                   rtol=1e-4, atol=1e-4)


def test_combine_parallel_conv2d_runs_on_demand_after_fold_scale_axis():
    assert "CombineParallelConv2D" not in pipeline.pass_names("llvm", 3)
    names = pipeline.pass_names("llvm", 3, required_pass=["CombineParallelConv2D"])
    assert names.index("FoldScaleAxis") < names.index("CombineParallelConv2D")
