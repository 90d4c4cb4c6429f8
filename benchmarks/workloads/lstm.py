"""An LSTM of 50 steps, input 128, hidden 128, batch 1; the result is the last hidden state.

Gates in the order i, f, g, o (PyTorch's): gates = x_t W_ih^T + h W_hh^T + b,
c = sigmoid(f) * c + sigmoid(i) * tanh(g), h = sigmoid(o) * tanh(c); h and c start at zero.

relaydsl: the DSL has no scan operator; the recurrence is a Python ``for xt in xs`` inside the
@relay function, which the frontend translates to a tail-recursive local function carrying
(h, c) (a Relay loop, not unrolled). JAX: ``lax.scan``. NumPy: a Python loop.
PyTorch: ``torch.nn.LSTM`` with the same weights (bias_hh zero).
"""
from __future__ import annotations

import numpy as np

from benchmarks.harness import Case
from benchmarks.workloads.common import (
    jax_modules,
    normal,
    relaydsl_runner,
    rng,
    specialize,
    torch_compiled_inference,
    torch_module,
)
from relaydsl import Float, Tensor, relay

STEPS, INPUT, HIDDEN = 50, 128, 128


def lstm(xs: Tensor[Float, (T, 1, I)],  # noqa: F821  (T, I, H bound by specialize)
         w_ih: Tensor[Float, (4 * H, I)], w_hh: Tensor[Float, (4 * H, H)],  # noqa: F821
         b: Tensor[Float, 4 * H]) -> Tensor[Float, (1, H)]:  # noqa: F821
    h = relay.zeros(shape=(1, H))  # noqa: F821
    c = relay.zeros(shape=(1, H))  # noqa: F821
    for xt in xs:
        gates = relay.dense(xt, w_ih) + relay.dense(h, w_hh) + b
        parts = relay.split(gates, indices_or_sections=4, axis=1)
        i = relay.sigmoid(parts[0])
        f = relay.sigmoid(parts[1])
        g = relay.tanh(parts[2])
        o = relay.sigmoid(parts[3])
        c = f * c + i * g
        h = o * relay.tanh(c)
    return h


def data(seed: int = 0):
    r = rng(seed)
    scale = 1.0 / np.sqrt(HIDDEN)
    return (normal(r, (STEPS, 1, INPUT)), normal(r, (4 * HIDDEN, INPUT), scale),
            normal(r, (4 * HIDDEN, HIDDEN), scale), normal(r, (4 * HIDDEN,), 0.1))


def lstm_jax():
    jax, jnp = jax_modules()

    def f(xs, w_ih, w_hh, b):
        def step(carry, xt):
            h, c = carry
            i, f, g, o = jnp.split(xt @ w_ih.T + h @ w_hh.T + b, 4, axis=1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), None
        zeros = jnp.zeros((1, HIDDEN), xs.dtype)
        (h, _), _ = jax.lax.scan(step, (zeros, zeros), xs)
        return h
    return jax.jit(f)


def lstm_numpy(xs, w_ih, w_hh, b):
    def sigmoid(v):
        return 1.0 / (1.0 + np.exp(-v))
    h = np.zeros((1, HIDDEN), np.float32)
    c = np.zeros((1, HIDDEN), np.float32)
    w_iht, w_hht = w_ih.T, w_hh.T
    for xt in xs:
        i, f, g, o = np.split(xt @ w_iht + h @ w_hht + b, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
    return h


def lstm_torch_loop(torch, xs, w_ih, w_hh, b):
    """The LSTM written out for torch.compile, which runs an ``nn.LSTM`` as one opaque call
    (dynamo leaves RNN modules alone): this loop it unrolls into one graph of all the steps."""
    F = torch.nn.functional
    h = xs.new_zeros((1, HIDDEN))
    c = xs.new_zeros((1, HIDDEN))
    for t in range(xs.shape[0]):
        i, f, g, o = (F.linear(xs[t], w_ih, b) + F.linear(h, w_hh)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return h


def case() -> Case:
    xs, w_ih, w_hh, b = data()

    def relaydsl_setup():
        fn = specialize(lstm, T=STEPS, I=INPUT, H=HIDDEN)
        return relaydsl_runner(fn, xs, w_ih, w_hh, b)

    def jax_setup():
        _, jnp = jax_modules()
        f = lstm_jax()
        args = [jnp.asarray(a) for a in (xs, w_ih, w_hh, b)]
        return lambda: f(*args)

    def torch_setup():
        torch = torch_module()
        net = torch.nn.LSTM(INPUT, HIDDEN)
        with torch.no_grad():
            net.weight_ih_l0.copy_(torch.from_numpy(w_ih))
            net.weight_hh_l0.copy_(torch.from_numpy(w_hh))
            net.bias_ih_l0.copy_(torch.from_numpy(b))
            net.bias_hh_l0.zero_()
        tx = torch.from_numpy(xs)

        def run():
            with torch.no_grad():
                return net(tx)[1][0][0]  # h_n of the one layer: (1, HIDDEN)
        return run

    def torch_compile_setup():
        torch = torch_module()
        return torch_compiled_inference(lambda v, *p: lstm_torch_loop(torch, v, *p),
                                        (w_ih, w_hh, b), xs)

    return Case(f"LSTM {STEPS} steps h{HIDDEN} (b1)", "lstm",
                {"relaydsl": relaydsl_setup, "jax": jax_setup,
                 "numpy": lambda: (lambda: lstm_numpy(xs, w_ih, w_hh, b)),
                 "torch": torch_setup, "torch_compile": torch_compile_setup},
                notes=["relaydsl: a Python `for xt in xs` inside @relay (a Relay tail-recursive "
                       "loop; the DSL has no scan); JAX: lax.scan; NumPy: a Python loop; "
                       "PyTorch: torch.nn.LSTM; torch.compile: the steps as a Python loop "
                       "(unrolled by dynamo)"])


def cases() -> list[Case]:
    return [case()]
