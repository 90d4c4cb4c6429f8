"""FoldScaleAxis: a per-channel scaling before or after conv2d/dense moves into the weight and
folds away; what cannot fold stays. Values before and after are compared with JAX on both
targets. The cases follow TVM's tests/python/relay/test_pass_fold_scale_axis.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.ir.expr import Constant, TupleGetItem, Var
from relaydsl.op.registry import ops
from relaydsl.transform import PassContext, pipeline
from relaydsl.transform.fold_scale_axis import fold_scale_axis
from tests.relaydsl.transform.module_helpers import module, op_calls, op_names, run

RNG = np.random.default_rng(0)
C_IN, C_OUT = 4, 6
X_SHAPE = (2, C_IN, 6, 6)


def positive(*shape):
    return RNG.uniform(0.5, 2.0, shape).astype(np.float32)


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv(x, w, groups=1, padding=(1, 1)):
    """The JAX reference of conv2d on NCHW / OIHW."""
    return jax.lax.conv_general_dilated(
        x, w, (1, 1), [(padding[0], padding[0]), (padding[1], padding[1])],
        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups,
        precision=jax.lax.Precision.HIGHEST)


def assert_folds_to(mod, want, args, names, rtol=1e-4, atol=1e-4):
    """`mod` folded has the op calls `names`, and both compute `want` on both targets."""
    folded = fold_scale_axis(mod)
    assert op_names(folded) == sorted(names)
    for target in ("interp", "llvm"):
        np.testing.assert_allclose(run(mod, target, *args), want, rtol=rtol, atol=atol)
        np.testing.assert_allclose(run(folded, target, *args), want, rtol=rtol, atol=atol)
    return folded


def conv_weights(mod):
    return [c.args[1] for c in op_calls(mod) if c.op.name in ("conv2d", "dense")]


# ---- backward: the scale after the convolution ------------------------------------------------

def test_bwd_simple_scale_after_bias_and_relu_folds_into_the_constant_weight():
    w, b, s = normal(C_OUT, C_IN, 3, 3), normal(C_OUT), positive(C_OUT, 1, 1)
    mod = module([X_SHAPE], lambda x: ops.multiply(
        ops.relu(ops.add(ops.conv2d(x, Constant(w), padding=(1, 1)),
                         ops.expand_dims(Constant(b), axis=1, num_newaxis=2))), Constant(s)))
    x = normal(*X_SHAPE)
    want = jnp.maximum(conv(x, w) + b[:, None, None], 0) * s
    folded = assert_folds_to(mod, want, [x], ["conv2d", "add", "relu"])
    assert all(isinstance(w, Constant) for w in conv_weights(folded))


def test_bwd_a_parameter_weight_and_bias_are_scaled_by_multiplies_of_them():
    # TVM's expected program: conv2d(x, w * s) + b * s, then relu
    s = positive(C_OUT, 1, 1)
    mod = module([X_SHAPE, (C_OUT, C_IN, 3, 3), (C_OUT, 1, 1)], lambda x, w, b: ops.multiply(
        ops.relu(ops.add(ops.conv2d(x, w, padding=(1, 1)), b)), Constant(s)))
    x, w, b = normal(*X_SHAPE), normal(C_OUT, C_IN, 3, 3), normal(C_OUT, 1, 1)
    want = jnp.maximum(conv(x, w) + b, 0) * s
    folded = assert_folds_to(mod, want, [x, w, b],
                             ["conv2d", "add", "relu", "multiply", "multiply"])
    (weight,) = conv_weights(folded)
    assert isinstance(weight, Var)  # A-normal form: the multiply of w is let-bound


def test_bwd_dual_path_scales_both_convolutions():
    s = positive(C_OUT, 1, 1)
    w1, w2 = normal(C_OUT, C_IN, 3, 3), normal(C_OUT, C_IN, 3, 3)
    mod = module([X_SHAPE], lambda x: ops.multiply(ops.add(
        ops.relu(ops.conv2d(x, Constant(w1), padding=(1, 1))),
        ops.relu(ops.conv2d(x, Constant(w2), padding=(1, 1)))), Constant(s)))
    x = normal(*X_SHAPE)
    want = (jnp.maximum(conv(x, w1), 0) + jnp.maximum(conv(x, w2), 0)) * s
    assert_folds_to(mod, want, [x], ["conv2d", "conv2d", "relu", "relu", "add"])


def test_bwd_a_convolution_with_another_consumer_is_left_alone():
    # TVM's fail2: the conv's output is also read unscaled
    s = positive(C_OUT, 1, 1)
    w = normal(C_OUT, C_IN, 3, 3)
    mod = module([X_SHAPE], lambda x: (lambda y: ops.add(ops.multiply(y, Constant(s)),
                                                         ops.relu(y)))(
        ops.conv2d(x, Constant(w), padding=(1, 1))))
    assert fold_scale_axis(mod) is mod


def test_bwd_a_negative_scale_passes_no_relu_but_folds_without_one():
    s = normal(C_OUT, 1, 1)
    s[0] = -1.0
    w = normal(C_OUT, C_IN, 3, 3)
    through_relu = module([X_SHAPE], lambda x: ops.multiply(
        ops.relu(ops.conv2d(x, Constant(w), padding=(1, 1))), Constant(s)))
    assert fold_scale_axis(through_relu) is through_relu
    mod = module([X_SHAPE], lambda x: ops.multiply(
        ops.conv2d(x, Constant(w), padding=(1, 1)), Constant(s)))
    x = normal(*X_SHAPE)
    assert_folds_to(mod, conv(x, w) * s, [x], ["conv2d"])


def test_bwd_a_scale_varying_along_another_axis_is_left_alone():
    s = positive(1, 6, 1)  # along H, not the channels
    mod = module([X_SHAPE], lambda x: ops.multiply(
        ops.conv2d(x, Constant(normal(C_OUT, C_IN, 3, 3)), padding=(1, 1)), Constant(s)))
    assert fold_scale_axis(mod) is mod


def test_bwd_dense_and_bias_add():
    w, b, s = normal(5, 8), normal(5), positive(5)
    mod = module([(3, 8)], lambda x: ops.multiply(
        ops.relu(ops.bias_add(ops.dense(x, Constant(w)), Constant(b), axis=-1)), Constant(s)))
    x = normal(3, 8)
    want = jnp.maximum(x @ w.T + b, 0) * s
    assert_folds_to(mod, want, [x], ["dense", "bias_add", "relu"])


def test_bwd_a_grouped_convolution_folds_along_its_filters():
    w, s = normal(C_OUT, C_IN // 2, 3, 3), positive(C_OUT, 1, 1)
    mod = module([X_SHAPE], lambda x: ops.multiply(
        ops.conv2d(x, Constant(w), padding=(1, 1), groups=2), Constant(s)))
    x = normal(*X_SHAPE)
    assert_folds_to(mod, conv(x, w, groups=2) * s, [x], ["conv2d"])


def test_bwd_one_example_chw_and_two_scales_in_a_row():
    w, s1, s2 = normal(C_OUT, C_IN, 3, 3), positive(C_OUT, 1, 1), positive(C_OUT, 1, 1)
    mod = module([X_SHAPE[1:]], lambda x: ops.multiply(ops.multiply(
        ops.conv2d(x, Constant(w), padding=(1, 1)), Constant(s1)), Constant(s2)))
    x = normal(*X_SHAPE[1:])
    want = conv(x[None], w)[0] * s1 * s2
    assert_folds_to(mod, want, [x], ["conv2d"])


# ---- forward: the scale before the convolution ------------------------------------------------

def test_fwd_simple_scale_relu_bias_fold_into_the_in_channels():
    # TVM: conv2d(relu(x * s) + b, w) = conv2d(relu(x) + b / s, w * s), for s > 0
    s, b, w = positive(C_IN, 1, 1), normal(C_IN, 1, 1), normal(C_OUT, C_IN, 3, 3)
    mod = module([X_SHAPE], lambda x: ops.conv2d(
        ops.add(ops.relu(ops.multiply(x, Constant(s))), Constant(b)), Constant(w),
        padding=(1, 1)))
    x = normal(*X_SHAPE)
    want = conv(jnp.maximum(x * s, 0) + b, w)
    folded = assert_folds_to(mod, want, [x], ["relu", "add", "conv2d"])
    assert all(isinstance(w, Constant) for w in conv_weights(folded))


def test_fwd_dual_path_depthwise_scales_both_convolutions():
    s = positive(C_IN, 1, 1)
    w1, w2 = normal(C_IN, 1, 3, 3), normal(C_IN, 1, 3, 3)

    def body(x):
        y = ops.relu(ops.multiply(Constant(s), x))
        return ops.add(ops.conv2d(y, Constant(w1), padding=(1, 1), groups=C_IN),
                       ops.conv2d(y, Constant(w2), padding=(1, 1), groups=C_IN))

    mod = module([X_SHAPE], body)
    x = normal(*X_SHAPE)
    y = jnp.maximum(x * s, 0)
    want = conv(y, w1, groups=C_IN) + conv(y, w2, groups=C_IN)
    assert_folds_to(mod, want, [x], ["relu", "conv2d", "conv2d", "add"])


def test_fwd_a_grouped_convolution_scales_each_groups_in_channels():
    s, w = normal(C_IN, 1, 1), normal(C_OUT, C_IN // 2, 3, 3)  # signs mixed: no relu
    mod = module([X_SHAPE], lambda x: ops.conv2d(
        ops.multiply(x, Constant(s)), Constant(w), padding=(1, 1), groups=2))
    x = normal(*X_SHAPE)
    assert_folds_to(mod, conv(x * s, w, groups=2), [x], ["conv2d"])


def test_fwd_a_scaling_read_by_something_else_stays():
    # TVM's fwd_fail / fwd_relu_fail: the scaled value is also added to the result
    s, w = positive(C_IN, 1, 1), normal(C_IN, C_IN, 3, 3)

    def body(x):
        y = ops.multiply(x, Constant(s))
        return ops.add(ops.conv2d(ops.relu(y), Constant(w), padding=(1, 1)), y)

    mod = module([X_SHAPE], body)
    x = normal(*X_SHAPE)
    y = x * s
    folded = assert_folds_to(mod, conv(jnp.maximum(y, 0), w) + y, [x],
                             ["multiply", "relu", "conv2d", "add"])
    assert isinstance(conv_weights(folded)[0], Constant)


def test_fwd_a_negative_scale_passes_no_relu():
    s = normal(C_IN, 1, 1)
    s[0] = -2.0
    mod = module([X_SHAPE], lambda x: ops.conv2d(
        ops.relu(ops.multiply(x, Constant(s))), Constant(normal(C_OUT, C_IN, 3, 3))))
    assert fold_scale_axis(mod) is mod


def test_fwd_dense():
    s, b, w = positive(8), normal(8), normal(5, 8)
    mod = module([(3, 8)], lambda x: ops.dense(
        ops.add(ops.relu(ops.multiply(x, Constant(s))), Constant(b)), Constant(w)))
    x = normal(3, 8)
    assert_folds_to(mod, (jnp.maximum(x * s, 0) + b) @ w.T, [x], ["relu", "add", "dense"])


# ---- batch_norm after a convolution, through the pipeline -------------------------------------

def bn_params(c):
    return [normal(c), normal(c), normal(c), positive(c)]


def bn_reference(y, gamma, beta, mean, var, epsilon=1e-5):
    def per_channel(v):
        return v.reshape(-1, 1, 1)
    return (y - per_channel(mean)) / jnp.sqrt(per_channel(var) + epsilon) * \
        per_channel(gamma) + per_channel(beta)


def optimized(mod, target="interp", **options):
    return pipeline.run(mod, target, PassContext(opt_level=3, **options))


def test_inference_conv_batch_norm_relu_becomes_conv_bias_relu():
    w, params = normal(C_OUT, C_IN, 3, 3), bn_params(C_OUT)
    mod = module([X_SHAPE], lambda x: ops.relu(TupleGetItem(ops.batch_norm(
        ops.conv2d(x, Constant(w), padding=(1, 1)), *map(Constant, params)), 0)))
    out = optimized(mod)
    assert op_names(out) == ["add", "conv2d", "relu"]  # no multiply left
    assert all(isinstance(w, Constant) for w in conv_weights(out))
    without = optimized(mod, disabled_pass=["FoldScaleAxis"])
    assert "multiply" in op_names(without)
    x = normal(*X_SHAPE)
    want = jnp.maximum(bn_reference(conv(x, w), *params), 0)
    for target in ("interp", "llvm"):
        np.testing.assert_allclose(run(out, target, x), want, rtol=1e-4, atol=1e-4)


def test_inference_dense_batch_norm_becomes_dense_bias():
    w, params = normal(5, 8), bn_params(5)
    mod = module([(3, 8)], lambda x: TupleGetItem(ops.batch_norm(
        ops.dense(x, Constant(w)), *map(Constant, params)), 0))
    out = optimized(mod)
    assert op_names(out) == ["add", "dense"]
    x = normal(3, 8)
    gamma, beta, mean, var = params
    want = (x @ w.T - mean) / jnp.sqrt(var + 1e-5) * gamma + beta
    for target in ("interp", "llvm"):
        np.testing.assert_allclose(run(out, target, x), want, rtol=1e-4, atol=1e-4)


W_FRONTEND = normal(C_OUT, C_IN, 3, 3)
BN_FRONTEND = GAMMA, BETA, MEAN, VAR = bn_params(C_OUT)


@relay
def conv_bn_relu(x: Tensor[Float, X_SHAPE]) -> Tensor[Float, (2, C_OUT, 6, 6)]:
    y = relay.conv2d(x, W_FRONTEND, padding=(1, 1))
    z = relay.batch_norm(y, GAMMA, BETA, MEAN, VAR)[0]
    return relay.relu(z)


def test_a_decorated_function_folds_through_its_let_bindings():
    out = optimized(conv_bn_relu.mod)
    assert op_names(out, "conv_bn_relu") == ["add", "conv2d", "relu"]
    x = normal(*X_SHAPE)
    want = jnp.maximum(bn_reference(conv(x, W_FRONTEND), *BN_FRONTEND), 0)
    for target in ("interp", "llvm"):
        np.testing.assert_allclose(relay.build(conv_bn_relu, target=target, opt_level=3)(x),
                                   want, rtol=1e-4, atol=1e-4)


def test_fold_scale_axis_runs_at_level_3_after_constant_folding():
    names = pipeline.pass_names("interp", 3)
    assert names.index("FoldConstant") < names.index("FoldScaleAxis")
    assert "FoldScaleAxis" not in pipeline.pass_names("interp", 2)


@pytest.mark.parametrize("scale_shape", [(C_OUT, 1, 1), (1, C_OUT, 1, 1), ()])
def test_scales_of_any_per_channel_shape_fold(scale_shape):
    w, s = normal(C_OUT, C_IN, 3, 3), positive(*scale_shape)
    mod = module([X_SHAPE], lambda x: ops.multiply(
        ops.conv2d(x, Constant(w), padding=(1, 1)), Constant(s)))
    x = normal(*X_SHAPE)
    assert_folds_to(mod, conv(x, w) * s, [x], ["conv2d"])

