"""The fused elementwise chain tanh(a*x + b) * sigmoid(x) on 10^6 float32 values.

a and b are Python scalars (0.7 and 0.1), constants of the program in every system. NumPy
uses preallocated ``out=`` buffers and tanh(a*x+b) / (1 + exp(-x)) (two fewer passes than
a literal translation); the others are written literally.
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

SIZE = 10 ** 6
A, B = 0.7, 0.1


def chain(x: Tensor[Float, SIZE]) -> Tensor[Float, SIZE]:
    return relay.tanh(A * x + B) * relay.sigmoid(x)


def numpy_chain(x: np.ndarray, t: np.ndarray, s: np.ndarray) -> np.ndarray:
    np.multiply(x, np.float32(A), out=t)
    t += np.float32(B)
    np.tanh(t, out=t)
    np.negative(x, out=s)
    np.exp(s, out=s)
    s += np.float32(1)
    return np.divide(t, s, out=t)


def case() -> Case:
    x = normal(rng(0), (SIZE,), 2.0)

    def relaydsl_setup():
        return relaydsl_runner(specialize(chain), x)

    def jax_setup():
        jax, jnp = jax_modules()
        f = jax.jit(lambda v: jnp.tanh(A * v + B) * jax.nn.sigmoid(v))
        jx = jnp.asarray(x)
        return lambda: f(jx)

    def numpy_setup():
        t, s = np.empty_like(x), np.empty_like(x)
        return lambda: numpy_chain(x, t, s)

    def torch_setup():
        torch = torch_module()
        tx = torch.from_numpy(x)

        def run():
            with torch.no_grad():
                return torch.tanh(A * tx + B) * torch.sigmoid(tx)
        return run

    def torch_compile_setup():
        torch = torch_module()
        return torch_compiled_inference(lambda v: torch.tanh(A * v + B) * torch.sigmoid(v),
                                        (), x)

    return Case("tanh(a*x+b)*sigmoid(x), 1e6", "elementwise",
                {"relaydsl": relaydsl_setup, "jax": jax_setup, "numpy": numpy_setup,
                 "torch": torch_setup, "torch_compile": torch_compile_setup},
                target=("jax", 1.0),
                notes=[f"a = {A}, b = {B} are Python scalars (program constants) in every "
                       "system; NumPy computes in place with out= buffers"])


def cases() -> list[Case]:
    return [case()]
