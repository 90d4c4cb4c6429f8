"""simulated_quantize (simQ) against JAX and an independent NumPy transcription of the paper's
formula; its straight-through gradient against jax.grad."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.op.quantize import qrange
from tests.relaydsl.op.harness import OpCase, check_case

rng = np.random.default_rng(0)


def f32(*shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def paper_simq(x, rho, beta, sigma, rnd=np.round, axis=1):
    """simQ(x, β, σ, rho) = clip(round(x/rho · 2^(β-σ))) · rho / 2^(β-σ), clipped symmetric to
    ±(2^(β-σ) - 1) (or [0, 2^β - 1] unsigned), with s = rho / 2^(β-σ)."""
    x = np.asarray(x, np.float64)
    levels = 2.0 ** (beta - sigma)
    rho = np.asarray(rho, np.float64)
    if rho.ndim == 1:
        rho = rho.reshape([-1 if i == axis else 1 for i in range(x.ndim)])
    hi = levels - 1
    lo = -hi if sigma else 0
    return np.clip(rnd(x / rho * levels), lo, hi) * rho / levels


def truth(rho, beta, sigma, rnd=jnp.round, axis=1):
    def f(x, s):
        levels = 2.0 ** (beta - sigma)
        r = jnp.asarray(rho, jnp.float32)
        if r.ndim == 1:
            r = r.reshape([-1 if i == axis else 1 for i in range(x.ndim)])
        hi = levels - 1
        lo = -hi if sigma else 0
        step = r / levels
        return (jnp.clip(rnd(x * (1 / step)), lo, hi) * step).astype(x.dtype)
    return f


RHO_C = np.array([1.0, 4.0, 0.5], np.float32)
CASES = [
    OpCase("simulated_quantize", [f32(4, 5), np.float32(4 / 128)], truth(4.0, 8, 1),
           {"nbit": 8}, name="int8"),
    OpCase("simulated_quantize", [f32(4, 5), np.float32(4 / 64)], truth(4.0, 7, 1, jnp.floor),
           {"nbit": 7, "rounding": "floor"}, name="int7 floor"),
    OpCase("simulated_quantize", [f32(4, 5), np.float32(2 / 256)], truth(2.0, 8, 0, jnp.ceil),
           {"signed": False, "rounding": "ceil"}, name="uint8 ceil"),
    OpCase("simulated_quantize", [f32(2, 3, 4), RHO_C / 128], truth(RHO_C, 8, 1),
           name="per channel"),
    OpCase("simulated_quantize", [f32(2, 4, 3), RHO_C / 2 ** 15], truth(RHO_C, 16, 1, axis=2),
           {"nbit": 16, "axis": -1}, name="int16 per channel, last axis"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_simq_matches_jax(case):
    check_case(case)


@pytest.mark.parametrize("beta, signed, rounding", [
    (8, True, "round"), (4, True, "floor"), (8, False, "ceil"), (16, True, "round")])
def test_simq_is_the_papers_formula(beta, signed, rounding):
    x = f32(1000)
    rho = 2.5
    s = np.float32(rho / 2 ** (beta - int(signed)))
    ours = relay.simulated_quantize(x, s, nbit=beta, signed=signed, rounding=rounding)
    ref = paper_simq(x, rho, beta, int(signed), getattr(np, rounding))
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)
    # every output is an integer number of steps inside the type's range
    q = ours / s
    lo, hi = qrange(beta, signed)
    assert np.allclose(q, np.round(q), atol=1e-3) and q.min() >= lo and q.max() <= hi


def test_simq_gradient_is_straight_through():
    """relay.grad through simQ against jax.grad of the straight-through estimator (the
    gradient passes where x is representable, is 0 outside, and none reaches the step)."""
    x = np.linspace(-6, 6, 25).astype(np.float32)
    s = np.float32(4 / 128)

    @relay
    def q_loss(x: Tensor[Float, 25], s: Tensor[Float, ()]) -> Float:
        return relay.sum(relay.simulated_quantize(x, s, nbit=8) * x)

    lo, hi = qrange(8, True)

    def ste_loss(v):
        inside = jnp.clip(v, lo * s, hi * s)
        q = jnp.clip(jnp.round(v / s), lo, hi) * s
        return jnp.sum((inside + jax.lax.stop_gradient(q - inside)) * v)

    _, (dx, ds) = relay.grad(q_loss)(x, s)
    np.testing.assert_allclose(dx, jax.grad(ste_loss)(x), rtol=1e-5, atol=1e-5)
    assert ds == 0
    # outside the range only the "* x" term's adjoint is left: simQ(x), clipped
    assert dx[0] == np.float32(lo * s) and dx[-1] == np.float32(hi * s)
