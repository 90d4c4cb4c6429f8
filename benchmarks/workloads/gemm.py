"""GEMM: C = A @ B on square float32 matrices; GFLOP/s = 2 n^3 / time. Also ``dense``,
C = X @ W^T (the weight stored [units, in], as relay.dense and torch's Linear keep it), at
1024: its GFLOP/s beside the GEMM's of the same run show what reading B transposed costs."""
from __future__ import annotations

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


def gemm(a: Tensor[Float, (N, N)], b: Tensor[Float, (N, N)]) -> Tensor[Float, (N, N)]:  # noqa: F821
    return relay.matmul(a, b)


def dense(x: Tensor[Float, (N, N)], w: Tensor[Float, (N, N)]) -> Tensor[Float, (N, N)]:  # noqa: F821
    return relay.dense(x, w)


def case(n: int, transposed: bool = False) -> Case:
    """GEMM n, or with `transposed` dense n: x @ w.T in every system."""
    r = rng(n)
    a, b = normal(r, (n, n)), normal(r, (n, n))

    def product(x, y):
        return x @ (y.T if transposed else y)

    def relaydsl_setup():
        return relaydsl_runner(specialize(dense if transposed else gemm, N=n), a, b)

    def jax_setup():
        jax, jnp = jax_modules()
        f = jax.jit(product)
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        return lambda: f(ja, jb)

    def numpy_setup():
        return lambda: product(a, b)

    def torch_setup():
        torch = torch_module()
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)

        def run():
            with torch.no_grad():
                return product(ta, tb)
        return run

    def torch_compile_setup():
        return torch_compiled_inference(product, (), a, b)

    return Case(f"dense {n} (x @ W^T)" if transposed else f"GEMM {n}", "gemm",
                {"relaydsl": relaydsl_setup, "jax": jax_setup, "numpy": numpy_setup,
                 "torch": torch_setup, "torch_compile": torch_compile_setup},
                flops=2.0 * n ** 3, target=("numpy_gflops", 0.5))


def cases() -> list[Case]:
    return [case(512), case(1024), case(1024, transposed=True)]
