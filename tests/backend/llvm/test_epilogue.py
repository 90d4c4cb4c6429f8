"""Epilogues in registers (backend/llvm/epilogue.py): a direct int8 conv2d (constant weight)
and the elementwise stage after it run as one stage, the int32 sums never stored; values
bit for bit those of JAX's convolution followed by NumPy's float32 arithmetic, on wide lanes
(padding: a vector's valid pixels compressed), contiguous ones (1x1), strided and partial
channel tiles; what cannot run on vectors keeps a stage of its own."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.backend.llvm.epilogue import register_epilogue
from relaydsl.backend.llvm.kernel import compile_primitives
from relaydsl.backend.llvm.lower import lower
from relaydsl.backend.llvm.schedule import schedule
from relaydsl.ir.expr import const
from relaydsl.te.tensor import compute, placeholder
from tests.backend.llvm.helpers import call, primitive
from tests.backend.llvm.test_igemm import HOST_RUNS

pytestmark = pytest.mark.skipif(not HOST_RUNS["avx512vnni"],
                                reason="the direct int8 conv2d needs AVX-512 VNNI")

RNG = np.random.default_rng(0)
S1, S2, S3 = np.float32(0.0123), np.float32(0.071), np.float32(0.37)


def _conv(x: np.ndarray, w: np.ndarray, strides: tuple[int, int], pad: int) -> np.ndarray:
    """JAX's convolution of the integers, exact in float32 (sums below 2^24), as int32."""
    out = jax.lax.conv_general_dilated(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32),
                                       strides, [(pad, pad), (pad, pad)])
    return np.asarray(out).astype(np.int32)


def _requantize(v: np.ndarray, dtype: str = "int8") -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.round(v), info.min, info.max).astype(dtype)


def _q(e, dtype: str = "int8"):
    info = np.iinfo(dtype)
    return call("cast", call("clip", call("round", e), a_min=float(info.min),
                             a_max=float(info.max)), dtype=dtype)


def _f(e, scale):
    return call("multiply", call("cast", e, dtype="float32"), const(scale))


# name: (batch, cin, hw, cout, kernel, strides, pad, residual dtype or None,
#        relay body (conv result, bias, residual) -> expr, NumPy (int32 sums, bias, residual))
CASES = {
    "bias relu requantize (wide lanes, 5 of 8 channels)": (
        3, 16, 9, 5, 3, (1, 1), 1, None,
        lambda c, b, r: _q(_f(call("relu", call("add", c, b)), S1)),
        lambda c, b, r: _requantize(np.maximum(c + b, 0).astype(np.float32) * S1)),
    "residual int8 add, stride 2": (
        2, 16, 13, 16, 3, (2, 2), 1, "int8",
        lambda c, b, r: _q(call("multiply", call("relu", call("add", _f(call("add", c, b), S1),
                                                              _f(r, S2))), const(S3))),
        lambda c, b, r: _requantize(np.maximum((c + b).astype(np.float32) * S1
                                               + r.astype(np.float32) * S2, 0) * S3)),
    "float32 result and residual, contiguous lanes (1x1)": (
        2, 8, 7, 12, 1, (1, 1), 0, "float32",
        lambda c, b, r: call("add", _f(call("add", c, b), S1), r),
        lambda c, b, r: (c + b).astype(np.float32) * S1 + r),
    "integer shift, clip, uint8": (
        2, 4, 10, 9, 3, (1, 1), 1, None,
        lambda c, b, r: call("cast", call("clip", call("right_shift", call("add", c, b),
                                                       const(np.int32(7))),
                                          a_min=0.0, a_max=255.0), dtype="uint8"),
        lambda c, b, r: np.clip((c + b) >> 7, 0, 255).astype(np.uint8)),
    "compare and select to int16, 5x5 stem": (
        2, 1, 12, 8, 5, (1, 1), 2, "int16",
        lambda c, b, r: call("where", call("greater", call("add", c, b), const(np.int32(0))),
                             call("cast", call("add", c, b), dtype="int16"), r),
        lambda c, b, r: np.where(c + b > 0, (c + b).astype(np.int16), r)),
}


def _program(case):
    n, cin, hw, cout, k, strides, pad, residual, body, _ = case
    w = RNG.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
    x = RNG.integers(-127, 128, (n, cin, hw, hw)).astype(np.int8)
    bias = RNG.integers(-3000, 3000, (1, cout, 1, 1)).astype(np.int32)
    sums = _conv(x, w, strides, pad)
    r = None
    types = [(x.shape, "int8")]
    if residual is not None:
        r = (RNG.standard_normal(sums.shape) * 50).astype(residual)
        types.append((sums.shape, residual))

    def relay_body(px, *rest):
        conv = call("conv2d", px, const(w), strides=strides, padding=pad, out_dtype="int32")
        return body(conv, const(bias), *(rest or (None,)))

    fn = primitive(types, relay_body)
    return fn, [x] + ([r] if r is not None else []), sums, bias, r


@pytest.mark.parametrize("name", list(CASES))
def test_conv_and_epilogue_are_one_stage_bit_for_bit(name):
    fn, args, sums, bias, r = _program(CASES[name])
    (k,) = compile_primitives([fn])
    assert len(k.stages) == 1 and k.scratch == []  # the int32 sums never stored
    want = CASES[name][-1](sums, bias, r)
    got = k(*args)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


UNARY = {  # float32 intrinsics on the lanes, against NumPy's
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
    "abs": np.abs, "sign": np.sign,
    "sqrt": lambda v: np.sqrt(np.abs(v)), "rsqrt": lambda v: 1 / np.sqrt(np.abs(v) + 1),
}


@pytest.mark.parametrize("op", list(UNARY))
def test_vector_intrinsics_give_numpys_bits(op):
    x = RNG.integers(-127, 128, (2, 4, 6, 6)).astype(np.int8)
    w = RNG.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)

    def body(px):
        v = _f(call("conv2d", px, const(w), padding=1, out_dtype="int32"), S1)
        if op == "sqrt":
            v = call("abs", v)
        if op == "rsqrt":
            v = call("add", call("abs", v), const(np.float32(1)))
        return call(op, v)

    (k,) = compile_primitives([primitive([(x.shape, "int8")], body)])
    assert len(k.stages) == 1
    np.testing.assert_array_equal(k(x), UNARY[op](_conv(x, w, (1, 1), 1).astype(np.float32)
                                                  * S1).astype(np.float32))


def test_what_cannot_run_on_vectors_keeps_its_stage():
    """exp (its float32 polynomial is scalar code) and a reduction keep a stage; the
    values are still NumPy's."""
    x = RNG.integers(-127, 128, (2, 4, 6, 6)).astype(np.int8)
    w = RNG.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    fn = primitive([(x.shape, "int8")], lambda px: call("exp", _f(call(
        "conv2d", px, const(w), padding=1, out_dtype="int32"), np.float32(1e-4))))
    (k,) = compile_primitives([fn])
    assert len(k.stages) == 2
    want = np.exp(_conv(x, w, (1, 1), 1).astype(np.float32) * np.float32(1e-4))
    np.testing.assert_allclose(k(x), want, rtol=2e-6)
    lowered = lower(fn)
    (template, stage) = schedule(lowered, "k").stages
    assert register_epilogue(stage.tensor, template.tensor, set(), 2) is None
    summed = primitive([(x.shape, "int8")], lambda px: call("sum", call(
        "conv2d", px, const(w), padding=1, out_dtype="int32"), axis=3, keepdims=True))
    stages = schedule(lower(summed), "k").stages
    assert len(stages) == 2 and stages[0].template is not None


def test_register_epilogue_sorts_reads_into_lanes_and_uniform():
    """The residual is a lane read, the bias a uniform one; a pixel axis used as a value
    makes no epilogue."""
    fn, *_ = _program(CASES["residual int8 add, stride 2"])
    lowered = lower(fn)
    sched = schedule(lowered, "k")
    (stage,) = sched.stages
    epi = stage.template.epilogue
    residual = lowered.params[1]
    (bias,) = [c for c, data in lowered.constants if data.dtype == np.int32]
    assert epi.lane_reads == (residual,) and epi.uniform_reads == (bias,)
    assert stage.reads[-2:] == [residual, bias]
    source = placeholder((2, 8, 4, 4), "int32", "sums")
    by_row = compute(source.shape, lambda n, c, y, x: source[n, c, y, x] + y)
    assert register_epilogue(by_row, source, set(), 2) is None
    assert register_epilogue(by_row, source, set(), 3) is not None  # y one value per vector
    shifted = compute(source.shape, lambda n, c, y, x: source[n, c, y, x] + source[n, c, x, y])
    assert register_epilogue(shifted, source, set(), 2) is None
