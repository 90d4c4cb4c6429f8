"""Control flow in native code (backend/llvm/native/functions.py): loops as jumps (an LSTM
over a sequence, nested loops, a loop swapping its parameters, a data-dependent while), an
``if`` as the result; values against JAX."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.llvm.native import NativeProgram

RNG = np.random.default_rng(1)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def build(fn):
    exe = relay.build(fn, target="llvm")
    assert exe.program.path == "native", exe.program.path
    return exe


@relay
def lstm(xs: Tensor[Float, (6, 1, 8)], w: Tensor[Float, (32, 8)], u: Tensor[Float, (32, 8)],
         b: Tensor[Float, 32]) -> Tensor[Float, (1, 8)]:
    h = relay.zeros(shape=(1, 8))
    c = relay.zeros(shape=(1, 8))
    for xt in xs:
        gates = relay.dense(xt, w) + relay.dense(h, u) + b
        parts = relay.split(gates, indices_or_sections=4, axis=1)
        c = relay.sigmoid(parts[1]) * c + relay.sigmoid(parts[0]) * relay.tanh(parts[2])
        h = relay.sigmoid(parts[3]) * relay.tanh(c)
    return h


def lstm_jax(xs, w, u, b):
    def step(carry, xt):
        h, c = carry
        i, f, g, o = jnp.split(xt @ w.T + h @ u.T + b, 4, axis=1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return (jax.nn.sigmoid(o) * jnp.tanh(c), c), None
    zeros = jnp.zeros((1, 8), jnp.float32)
    return jax.lax.scan(step, (zeros, zeros), xs)[0][0]


def test_an_lstm_over_a_sequence_matches_lax_scan_and_calls_are_independent():
    exe = build(lstm)
    first = (rand(6, 1, 8), rand(32, 8), rand(32, 8), rand(32))
    second = (rand(6, 1, 8), rand(32, 8), rand(32, 8), rand(32))
    out1 = exe(*first)
    out2 = exe(*second)  # the arena is reused: results must be fresh arrays
    np.testing.assert_allclose(out1, lstm_jax(*first), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out2, lstm_jax(*second), rtol=1e-5, atol=1e-6)


@relay
def nested(x: Tensor[Float, (3, 3)], n: Int, m: Int) -> Tensor[Float, (3, 3)]:
    acc = x
    for _ in range(n):
        for _ in range(m):
            acc = relay.tanh(relay.matmul(acc, x)) + 0.1
        acc = acc * 0.5
    return acc


def test_nested_loops_with_runtime_trip_counts():
    exe = build(nested)
    x = rand(3, 3)
    for n, m in [(0, 0), (1, 0), (0, 4), (3, 2)]:
        want = jnp.asarray(x)
        for _ in range(n):
            for _ in range(m):
                want = jnp.tanh(want @ x) + 0.1
            want = want * 0.5
        np.testing.assert_allclose(exe(x, np.int32(n), np.int32(m)), want, rtol=1e-5, atol=1e-6)


@relay
def fibonacci_pair(a: Tensor[Float, 4], b: Tensor[Float, 4], n: Int) -> Tensor[Float, 4]:
    i = 0
    while i < n:
        a, b = b, a + b   # the tail call swaps its parameters
        i = i + 1
    return a


def test_a_loop_that_swaps_its_parameters():
    exe = build(fibonacci_pair)
    a, b = rand(4), rand(4)
    for n in (0, 1, 2, 7):
        x, y = a, b
        for _ in range(n):
            x, y = y, x + y
        np.testing.assert_allclose(exe(a, b, np.int32(n)), x, rtol=1e-6)


@relay
def halve_until_small(x: Tensor[Float, 5]) -> tuple[Tensor[Float, 5], Int]:
    steps = 0
    while relay.max(relay.abs(x)) > 1.0:
        x = x * 0.5
        steps = steps + 1
    return x, steps


def test_a_data_dependent_while_loop():
    exe = build(halve_until_small)
    for scale in (0.5, 3.0, 1000.0):
        x = rand(5) * scale
        want, steps = np.asarray(x), 0
        while np.abs(want).max() > 1.0:
            want, steps = want * np.float32(0.5), steps + 1
        got, got_steps = exe(x)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert int(got_steps) == steps


@relay
def pick(x: Tensor[Float, 4], flag: Tensor[Float, ()]) -> Tensor[Float, 4]:
    if flag > 0.0:
        y = relay.exp(x)
    else:
        y = relay.tanh(x) * 2.0
    return y


def test_an_if_as_the_result():
    exe = build(pick)
    x = rand(4)
    np.testing.assert_allclose(exe(x, np.float32(1.0)), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(exe(x, np.float32(-1.0)), np.tanh(x) * 2, rtol=1e-6)


@relay
def running_sum(xs: Tensor[Float, ("n", 4)]) -> Tensor[Float, 4]:
    total = relay.zeros(shape=(4,))
    for row in xs:
        total = total + relay.sigmoid(row)
    return total


def test_a_shape_polymorphic_loop_runs_natively_at_every_size():
    exe = relay.build(running_sum, target="llvm")
    for n in (1, 5, 2, 5, 0):
        xs = rand(n, 4)
        np.testing.assert_allclose(exe(xs), np.asarray(jax.nn.sigmoid(xs)).sum(0),
                                   rtol=1e-5, atol=1e-6)
    compiled = exe.program._compiled  # the first signature; the others on generic code
    assert [k[0][0][0] for k in compiled] == [1]
    assert all(isinstance(p, NativeProgram) for p in [*compiled.values(),
                                                      exe.program._generic_native])
