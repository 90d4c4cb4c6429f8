"""Realize through the rules of pools, concatenate, clip and reshapes (their ops' quantize
facets): the structure (the op runs on integers), the values against a JAX transcription of
the formulas, bit-exact results between the interpreter and llvm, and closeness to float."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir import Call, Tuple
from relaydsl.ir.visitor import post_order
from relaydsl.op import ops
from relaydsl.quantize.calibrate import simqs
from tests.relaydsl.quantize.helpers import data, module, pooled, runner, weights
from tests.relaydsl.quantize.test_realize import ALL, q, realized

POOLS = {
    "max_pool2d": (lambda h: ops.max_pool2d(h, pool_size=(2, 2), strides=(2, 2)), 36),
    "avg_pool2d": (lambda h: ops.avg_pool2d(h, pool_size=(2, 2), strides=(2, 2)), 36),
    "avg_pool2d-padded": (lambda h: ops.avg_pool2d(h, pool_size=(3, 3), padding=(1, 1),
                                                   count_include_pad=True), 144),
    "global_avg_pool2d": (ops.global_avg_pool2d, 4),
    "global_max_pool2d": (ops.global_max_pool2d, 4),
}


def op_calls(mod, name):
    found = []
    post_order(mod["main"].body, lambda e: found.append(e) if isinstance(e, Call) and
               getattr(e.op, "name", None) == name else None)
    return found


def dtype_of(e):
    return e.checked_type.dtype


@pytest.mark.parametrize("name", POOLS)
def test_pools_run_on_the_integers(name):
    pool, features = POOLS[name]
    _, out = realized(pooled(pool, features), ALL, data(2, 2, 6, 6))
    if "max" in name:  # the maximum of the int32 accumulators, in place
        (call,) = op_calls(out, name)
        assert dtype_of(call) == "int32"
    elif name.startswith("avg"):  # the window sums: a depthwise conv2d with ones
        assert not op_calls(out, "avg_pool2d")
        (conv,) = [c for c in op_calls(out, "conv2d") if c.attrs.groups == 4]
        assert dtype_of(conv) == "int32" and np.all(conv.args[1].data == 1)
    else:
        assert not op_calls(out, name) and dtype_of(op_calls(out, "sum")[0]) == "int32"


def conv_int(x, w, padding):
    """The integer conv2d, exact in float32 (the sums stay below 2^24)."""
    return jax.lax.conv_general_dilated(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32),
                                        (1, 1), [(padding, padding)] * 2)


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d", "global_avg_pool2d"])
def test_pooled_values_are_the_formulas(name):
    """Q(x), the integer conv and bias, relu, the pool on the integers (an average: the
    window sum at the step over the window's size), requantized for the dense: as JAX."""
    pool, features = POOLS[name]
    mod = pooled(pool, features)
    batches = data(2, 2, 6, 6)
    calibrated, out = realized(mod, ALL, batches)
    (conv,) = op_calls(mod, "conv2d")
    (dense,) = op_calls(mod, "dense")
    c1, b1, w = conv.args[1].data, op_calls(mod, "add")[0].args[1].data, dense.args[1].data
    sx, sw, sx2, sw2 = (s.args[1].data for s in simqs(calibrated["main"].body))
    x = batches[0][0]
    s1 = np.float32(sx * sw)
    acc = conv_int(q(x, sx), q(c1, sw), 1) + jnp.round(b1.astype(np.float64) / np.float64(s1))
    h = jnp.maximum(acc, 0)
    if name == "max_pool2d":
        p, step = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                        "VALID"), s1
    elif name == "avg_pool2d":
        p = jax.lax.reduce_window(h, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        step = np.float32(np.float64(s1) * 0.25)
    else:
        p, step = jnp.sum(h, axis=(2, 3)), np.float32(np.float64(s1) / 36)
    ratio = np.float32(np.float64(step) / np.float64(sx2))
    qp = jnp.clip(jnp.round(jnp.asarray(p, jnp.float32).reshape(2, -1) * ratio), -127, 127)
    expected = (qp @ q(w, sw2).astype(np.float32).T) * np.float32(sx2 * sw2)
    np.testing.assert_array_equal(evaluate(out, x), np.asarray(expected, np.float32))


def branches():
    """Two conv branches of different ranges, concatenated along channels; then relu6 (a
    clip), a padded max pool and a dense."""
    c1, c2, w = weights(3, 2, 3, 3), weights(2, 2, 3, 3, scale=3.0), weights(4, 5 * 16)

    def body(x):
        joined = ops.concatenate(Tuple((ops.conv2d(x, c1), ops.conv2d(x, c2))), axis=1)
        h = ops.clip(joined, a_min=0.0, a_max=6.0)
        h = ops.max_pool2d(h, pool_size=(2, 2), strides=(2, 2), padding=(1, 1))
        return ops.dense(ops.flatten(h), w)

    return module(body, (2, 2, 8, 8))


def test_concatenate_requantizes_to_the_coarsest_step_and_clip_bounds_are_in_steps():
    mod, batches = branches(), data(2, 2, 8, 8)
    calibrated, out = realized(mod, ALL, batches)
    (cat,) = op_calls(out, "concatenate")
    assert dtype_of(cat) == "int32"
    (clip,) = [c for c in op_calls(out, "clip") if dtype_of(c) == "int32"]
    sx, sw1, sw2, _, _ = (s.args[1].data for s in simqs(calibrated["main"].body))
    step = max(np.float32(sx * sw1), np.float32(sx * sw2))
    assert clip.attrs.a_min == 0 and clip.attrs.a_max == np.round(6.0 / np.float64(step))
    assert dtype_of(op_calls(out, "max_pool2d")[0]) == "int32"
    # the coarser branch as it is, the finer one's integers times the ratio of the steps
    coarse, fine = cat.args[0].fields if step == np.float32(sx * sw1) else \
        cat.args[0].fields[::-1]
    assert coarse.op.name == "conv2d" and fine.op.name == "cast"
    scale = fine.args[0].args[0].args[0]  # cast(clip(round(multiply(cast(conv), ratio))))
    assert scale.op.name == "multiply" and scale.args[0].args[0].op.name == "conv2d"
    ratio = np.float32(np.float64(min(np.float32(sx * sw1), np.float32(sx * sw2)))
                       / np.float64(step))
    assert scale.args[1].data == ratio
    x = batches[0][0]
    np.testing.assert_allclose(evaluate(out, x), evaluate(mod, x),
                               atol=0.05 * np.abs(evaluate(mod, x)).max())


PROGRAMS = {**{k: (lambda p=p, f=f: pooled(p, f), (2, 6, 6)) for k, (p, f) in POOLS.items()},
            "concatenate-clip": (branches, (2, 8, 8))}


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_realized_programs_are_bit_exact_between_interp_and_llvm(name, per_channel):
    make, shape = PROGRAMS[name]
    mod, batches = make(), data(2, *shape)
    _, out = realized(mod, ALL.replace(per_channel=per_channel), batches)
    llvm = runner("llvm")(out, "main")
    for (x,) in batches:
        expected = evaluate(out, x)
        np.testing.assert_array_equal(llvm(x), expected)
        # and close to the float program: a few steps of the 8-bit output range
        np.testing.assert_allclose(expected, evaluate(mod, x),
                                   atol=0.05 * np.abs(evaluate(mod, x)).max())


def test_a_per_channel_step_passes_a_max_pool_and_floats_before_a_clip():
    pool, features = POOLS["max_pool2d"]
    _, out = realized(pooled(pool, features), ALL.replace(per_channel=True), data(2, 2, 6, 6))
    assert dtype_of(op_calls(out, "max_pool2d")[0]) == "int32"
    _, out = realized(branches(), ALL.replace(per_channel=True), data(2, 2, 8, 8))
    assert all(dtype_of(c) == "float32" for c in op_calls(out, "concatenate"))
