"""Kernels generic in every symbolic dimension (backend/llvm/generic.py), checked with JAX.

A function whose dimensions are symbolic anywhere (``("n", "m")``), or that takes a mean
over a symbolic axis (its 1/n), compiles its kernels once: every later size runs on
them, the sizes read at run time. The tests count LLVM modules built over new sizes, check
every value against jax.numpy (and gradients against jax.grad), and check the proof that
decides which kernels are generic on tensor expressions written by hand.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay, te
from relaydsl.backend.llvm import generic, kernel
from relaydsl.backend.llvm.generic import LARGE, SMALL, pattern, prove
from relaydsl.backend.llvm.lower import Lowered
from relaydsl.ir.types import TensorType

RNG = np.random.default_rng(26)
# after two signatures (the first gets code of its own, the second builds the generic
# code), six new (n, m), none with n = m (a coincidence that gets a kernel of its own)
WARM = ((3, 5), (4, 7))
SIZES = ((9, 2), (17, 33), (5, 8), (64, 3), (2, 100), (31, 6))


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@relay
def centred(x: Tensor[Float, ("n", "m")], w: Tensor[Float, ("m",)]) -> Float:
    h = relay.tanh(x * w)
    return relay.mean(h - relay.mean(h, axis=0, keepdims=True)) + relay.mean(h * h, axis=1)[0]


def jax_centred(x, w):
    h = jnp.tanh(x * w)
    return jnp.mean(h - jnp.mean(h, axis=0, keepdims=True)) + jnp.mean(h * h, axis=1)[0]


def generic_sites(program) -> list[bool]:
    """Per call site of the native code of run-time shapes: whether it has a kernel
    generic in its sizes."""
    return [any(k is not None for k in s._generic.values())
            for s in program._generic_native._sites]


def test_two_symbolic_dims_and_means_over_them_compile_once_for_every_size():
    exe = relay.build(centred, target="llvm")
    for n, m in WARM:
        x, w = rand(n, m), rand(m)
        np.testing.assert_allclose(exe(x, w), jax_centred(x, w), rtol=1e-5, atol=1e-6)
    built = kernel.stats["modules"]
    for n, m in SIZES:
        x, w = rand(n, m), rand(m)
        np.testing.assert_allclose(exe(x, w), jax_centred(x, w), rtol=1e-5, atol=1e-6)
    assert kernel.stats["modules"] == built
    assert all(generic_sites(exe.program))


def test_the_gradient_of_means_over_symbolic_dims_compiles_once_for_every_size():
    df = relay.grad(centred)
    want = jax.value_and_grad(jax_centred, argnums=(0, 1))

    def check(n: int, m: int) -> None:
        x, w = rand(n, m), rand(m)
        value, grads = df(x, w)
        value_j, grads_j = want(x, w)
        np.testing.assert_allclose(value, value_j, rtol=1e-5, atol=1e-6)
        for g, gj in zip(grads, grads_j):
            np.testing.assert_allclose(g, gj, rtol=1e-4, atol=1e-6)

    for n, m in WARM:
        check(n, m)
    built = kernel.stats["modules"]
    for n, m in SIZES:
        check(n, m)
    assert kernel.stats["modules"] == built


@relay
def batch_centred(x: Tensor[Float, (relay.Any, 6)]) -> Tensor[Float, (relay.Any, 6)]:
    return x - relay.mean(x, axis=0, keepdims=True)


def test_a_mean_over_the_batch_runs_on_a_kernel_generic_in_it():
    exe = relay.build(batch_centred, target="llvm")
    for n in (2, 9, 70, 5, 33):
        x = rand(n, 6)
        np.testing.assert_allclose(exe(x), x - jnp.mean(x, 0, keepdims=True),
                                   rtol=1e-5, atol=1e-6)
    assert any(generic_sites(exe.program))


def test_sizes_of_zero_and_one_run_on_kernels_of_their_own():
    exe = relay.build(centred, target="llvm")
    for n, m in (*WARM, (1, 5), (6, 1), (1, 1), (4, 4)):
        x, w = rand(n, m), rand(m)
        np.testing.assert_allclose(exe(x, w), jax_centred(x, w), rtol=1e-5, atol=1e-6)
    mean = relay.build(whole_mean, target="llvm")
    for n, m in (*WARM, (0, 3), (3, 0)):
        x, w = rand(n, m), rand(m)
        with np.errstate(invalid="ignore"):  # a mean over nothing is NaN, as JAX's
            np.testing.assert_allclose(mean(x, w), jnp.mean(x * w), rtol=1e-5, atol=1e-6)


@relay
def whole_mean(x: Tensor[Float, ("n", "m")], w: Tensor[Float, ("m",)]) -> Float:
    return relay.mean(x * w)


def test_a_mismatched_size_is_a_type_error_naming_the_parameter():
    exe = relay.build(centred, target="llvm")
    for n, m in WARM:
        exe(rand(n, m), rand(m))
    with pytest.raises(TypeError, match="w"):
        exe(rand(6, 5), rand(4))


@relay
def static_mean(x: Tensor[Float, (8, 6)]) -> Tensor[Float, (6,)]:
    return relay.mean(relay.tanh(x), axis=0)


def test_static_shapes_keep_kernels_of_their_sizes():
    known = dict(generic._BY_DIGEST)
    exe = relay.build(static_mean, target="llvm")
    x = rand(8, 6)
    np.testing.assert_allclose(exe(x), jnp.mean(jnp.tanh(x), 0), rtol=1e-5, atol=1e-6)
    assert exe.program.path == "native"
    assert known == generic._BY_DIGEST


# ---- which sizes are variables ---------------------------------------------------------------

def test_one_variable_per_distinct_size_and_sizes_below_two_stay_constants():
    flags = [[True, True], [True]]
    key, positions = pattern([TensorType((5, 7), "float32"), TensorType((7,), "float32")],
                             flags)
    assert key == ("v0", "v1", "v1") and positions == [(0, 0, 0), (0, 1, 1)]
    key, positions = pattern([TensorType((7, 7), "float32"), TensorType((7,), "float32")],
                             flags)
    assert key == ("v0", "v0", "v0") and positions == [(0, 0, 0)]
    key, _ = pattern([TensorType((1, 7), "float32"), TensorType((7,), "float32")], flags)
    assert key == (1, "v0", "v0")


# ---- the proof, on tensor expressions written by hand ----------------------------------------

def lowered(n: int, body) -> Lowered:
    """A kernel of x (n, 4) and w (4,) computing `body(x, w, n, i, j)` of shape (n, 4)."""
    x, w = te.placeholder((n, 4), "float32", "x"), te.placeholder((4,), "float32", "w")
    out = te.compute((n, 4), lambda i, j: body(x, w, n, i, j), "out")
    return Lowered([x, w], [], [out], False)


def mean_over_rows(x, w, n, i, j):
    r = te.reduce_axis(n, "r")
    return te.sum(x[r, j], r) / float(n) * w[j]


@pytest.mark.parametrize("body, expected", [
    (lambda x, w, n, i, j: x[i, j] * w[j], True),
    (mean_over_rows, True),                                          # 1/n, its extent n
    (lambda x, w, n, i, j: x[i, j] * (1.0 / n), True),               # 1/n as an inverse
    (lambda x, w, n, i, j: x[n - 1 - i, j], True),                   # n - 1
    (lambda x, w, n, i, j: x[i, j] * float(n - 1), True),            # a sample variance's
    (lambda x, w, n, i, j: x[i, j] * float(2 * n + 7), False),       # not a product
    (lambda x, w, n, i, j: x[i, j] * float(max(n, 500)), False),     # n only when large
    (lambda x, w, n, i, j: x[i // 2, j] if n > 300 else x[i, j], False),  # other code
], ids=["elementwise", "mean", "inverse", "reversed", "n - 1", "2n + 7", "max(n, 500)",
        "branch on n"])
def test_the_proof_accepts_products_of_the_sizes_only(body, expected):
    found = prove(lowered(LARGE[0], body), lowered(SMALL[0], body), 1)
    assert (found is not None) is expected


def test_the_proof_records_what_is_read_at_run_time():
    large = lowered(LARGE[0], mean_over_rows)
    found = prove(large, lowered(SMALL[0], mean_over_rows), 1)
    assert found is not None
    x, _ = large.params
    assert found.shape(x) == (((0,), 0), 4)
    assert found.concrete(large.outputs[0], [11]) == (11, 4)
    assert list(found.floats.values()) == [(((0,), 0), False)]
    assert list(found.extents.values()) == [((0,), 0)] * 2  # the output's axis i and r
