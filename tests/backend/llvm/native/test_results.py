"""Results written in place (backend/llvm/native/results.py): the kernels computing the
entry's result write into the arrays Python returns; every other leaf is copied. Values
against JAX; no two leaves, and no two calls, share memory."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.llvm.native import NativeProgram
from relaydsl.backend.llvm.native import values as native_values

RNG = np.random.default_rng(12)
W = RNG.standard_normal((8, 8)).astype(np.float32)


def native_of(fn) -> NativeProgram:
    """Native code of `fn` as the llvm target prepares it (a fresh one: patched constants
    apply)."""
    program = relay.build(fn, target="llvm").program
    return NativeProgram(program.mod, program.entry)


@pytest.fixture
def copies(monkeypatch):
    """Counts the result tensors copied out of native code's memory."""
    count = [0]
    tensor = native_values.Codec.tensor

    def counting(self, pointer, t):
        count[0] += 1
        return tensor(self, pointer, t)
    monkeypatch.setattr(native_values.Codec, "tensor", counting)
    return count


@relay
def mixed(x: Tensor[Float, (8, 8)], s: Tensor[Float, ()]):
    h = relay.tanh(x @ W)
    parts = relay.split(h * s, 2, axis=1)  # one kernel, two outputs
    return (h, parts[1], h, x, relay.sum(h, axis=0), parts[0])


def test_every_leaf_has_its_value_and_its_own_memory(copies):
    native = native_of(mixed)
    x, s = RNG.standard_normal((8, 8)).astype(np.float32), np.float32(0.5)
    got = native(x, s)
    h = jnp.tanh(x @ W)
    expected = (h, (h * s)[:, 4:], h, x, jnp.sum(h, axis=0), (h * s)[:, :4])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert copies[0] == 2  # h's second occurrence and the argument; the rest in place
    assert len({g.__array_interface__["data"][0] for g in got}) == len(got)
    assert got[3] is not x
    first = [g.copy() for g in got]
    native(-x, s)  # a later call writes other arrays
    for g, f in zip(got, first):
        np.testing.assert_array_equal(g, f)


@relay
def mlp_like(x: Tensor[Float, (8, 8)]):
    a = relay.relu(x @ W)
    b = relay.tanh(a @ W)
    return (a, b)


def test_results_computed_by_the_entry_are_not_copied(copies):
    native = native_of(mlp_like)
    x = RNG.standard_normal((8, 8)).astype(np.float32)
    a, b = native(x)
    assert copies[0] == 0
    np.testing.assert_allclose(a, jnp.maximum(x @ W, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, jnp.tanh(jnp.maximum(x @ W, 0) @ W), rtol=1e-5, atol=1e-6)


@relay
def power(x: Tensor[Float, (4,)], n: Int) -> Tensor[Float, (4,)]:
    if n == 0:
        return x * 0.0 + 1.0
    return relay.tanh(power(x, n - 1) * x)  # not a tail call: the inner calls are the entry's


def test_the_entry_calling_itself_writes_only_the_outer_result():
    native = native_of(power)
    x = RNG.standard_normal(4).astype(np.float32)
    expected = jnp.ones(4)
    for _ in range(5):
        expected = jnp.tanh(expected * x)
    np.testing.assert_allclose(native(x, np.int32(5)), expected, rtol=1e-5, atol=1e-6)
