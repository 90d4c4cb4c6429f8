"""Integer kernels: int8 dense and conv2d on the llvm backend against float32 on it, PyTorch and
NumPy, with ratios (issue 24: at least 2.5x our float32 on the int8 GEMM; 4x is VNNI's limit).

    python benchmarks/quantized_kernels.py [--quick]

Each row's systems get the same int8 values (the float32 systems as float32: with K <= 1024
every partial sum of int8 products stays below 2^24, so float32 computes the same integers)
and are checked against jax.lax's int32 result, then timed round-robin by the harness
(benchmarks/harness.py). PyTorch's int8 GEMM is ``torch._int_mm`` (oneDNN's VNNI/AMX kernel)
where it exists; it has no plain int8 convolution on the CPU, so conv2d's PyTorch column is
float32. The integer kernels' instruction set (igemm.py's ``host_isa``) is printed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import Case, Settings, run_case
from benchmarks.workloads.common import jax_modules, specialize, torch_module
from relaydsl import Float, Int8, Int32, Tensor, relay


def dense_int8(x: Tensor[Int8, (M, K)], w: Tensor[Int8, (N, K)]  # noqa: F821
               ) -> Tensor[Int32, (M, N)]:  # noqa: F821
    return relay.dense(x, w, out_dtype="int32")


def dense_fp32(x: Tensor[Float, (M, K)], w: Tensor[Float, (N, K)]  # noqa: F821
               ) -> Tensor[Float, (M, N)]:  # noqa: F821
    return relay.dense(x, w)


def conv_int8(x: Tensor[Int8, (B, C, H, H)], w: Tensor[Int8, (O, C, 3, 3)]  # noqa: F821
              ) -> Tensor[Int32, (B, O, H, H)]:  # noqa: F821
    return relay.conv2d(x, w, padding=1, out_dtype="int32")


def conv_fp32(x: Tensor[Float, (B, C, H, H)], w: Tensor[Float, (O, C, 3, 3)]  # noqa: F821
              ) -> Tensor[Float, (B, O, H, H)]:  # noqa: F821
    return relay.conv2d(x, w, padding=1)


def conv_int8_const(x: Tensor[Int8, (B, C, H, H)]  # noqa: F821
                    ) -> Tensor[Int32, (B, O, H, H)]:  # noqa: F821
    return relay.conv2d(x, W, padding=1, out_dtype="int32")  # noqa: F821  (W: a constant)


def conv_fp32_const(x: Tensor[Float, (B, C, H, H)]  # noqa: F821
                    ) -> Tensor[Float, (B, O, H, H)]:  # noqa: F821
    return relay.conv2d(x, W, padding=1)  # noqa: F821  (W: a constant)


def _ints(r: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return r.integers(-128, 128, shape, dtype=np.int8)


def ours(fn, consts: dict[str, int], *args):
    """The setup of relaydsl's row: `fn` specialised to `consts`, built for llvm."""
    def setup():
        exe = relay.build(specialize(fn, **consts), target="llvm")
        return lambda: exe(*args)
    return setup


def dense_case(m: int, n: int, k: int) -> Case:
    r = np.random.default_rng(0)
    x, w = _ints(r, (m, k)), _ints(r, (n, k))
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    consts = {"M": m, "N": n, "K": k}

    def jax_int8():
        jax, jnp = jax_modules()
        f = jax.jit(lambda a, b: jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())),
                                                     preferred_element_type=jnp.int32))
        ja, jb = jnp.asarray(x), jnp.asarray(w)
        return lambda: f(ja, jb)

    def torch_int8():
        torch = torch_module()
        ta, tb = torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(w.T))
        return lambda: torch._int_mm(ta, tb)

    def torch_fp32():
        torch = torch_module()
        ta, tb = torch.from_numpy(xf), torch.from_numpy(wf)

        def run():
            with torch.no_grad():
                return ta @ tb.T
        return run

    return Case(f"int8 dense {m}x{n}x{k}", "dense",
                {"relaydsl:int8": ours(dense_int8, consts, x, w),
                 "relaydsl:fp32": ours(dense_fp32, consts, xf, wf),
                 "jax:int8": jax_int8, "torch:int8": torch_int8, "torch:fp32": torch_fp32,
                 "numpy:fp32": lambda: (lambda: xf @ wf.T)},
                reference="jax:int8", flops=2.0 * m * n * k)


def conv_case(batch: int, channels: int, size: int) -> Case:
    """A 3x3 convolution, its weight an argument (the implicit GEMM on both types) and a
    constant as in inference (int8: the direct VNNI convolution, conv2d_int8.py; float32:
    NCHW{c}c after AlterOpLayout, the weight's layout folded)."""
    r = np.random.default_rng(1)
    x, w = _ints(r, (batch, channels, size, size)), _ints(r, (channels, channels, 3, 3))
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    consts = {"B": batch, "C": channels, "O": channels, "H": size}

    def jax_int8():
        jax, jnp = jax_modules()
        f = jax.jit(lambda a, b: jax.lax.conv_general_dilated(
            a, b, (1, 1), ((1, 1), (1, 1)), preferred_element_type=jnp.int32))
        ja, jb = jnp.asarray(x), jnp.asarray(w)
        return lambda: f(ja, jb)

    def torch_fp32():
        torch = torch_module()
        ta, tb = torch.from_numpy(xf), torch.from_numpy(wf)

        def run():
            with torch.no_grad():
                return torch.nn.functional.conv2d(ta, tb, padding=1)
        return run

    k = channels * 9
    return Case(f"int8 conv2d {channels}ch {size}x{size} 3x3 b{batch}", "conv2d",
                {"relaydsl:int8": ours(conv_int8, consts, x, w),
                 "relaydsl:fp32": ours(conv_fp32, consts, xf, wf),
                 "relaydsl:int8 const w": ours(conv_int8_const, {**consts, "W": w}, x),
                 "relaydsl:fp32 const w": ours(conv_fp32_const, {**consts, "W": wf}, xf),
                 "jax:int8": jax_int8, "torch:fp32": torch_fp32},
                reference="jax:int8", flops=2.0 * batch * channels * size * size * k)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few repetitions (indicative)")
    args = parser.parse_args(argv)
    from benchmarks import machine
    from relaydsl.backend.llvm.templates.igemm import host_isa

    print(f"CPU: {machine.cpu_model()}; integer kernels: {host_isa().name}; "
          f"load average {machine.load_average()}")
    settings = Settings.for_mode("llvm", args.quick)
    cases = [dense_case(1024, 1024, 1024), dense_case(256, 1024, 1024), conv_case(1, 64, 56),
             conv_case(100, 16, 28)]  # the last: a layer of ResNet-8 (quantized_inference.py)
    print("\n| row | system | ms | GOP/s | vs relaydsl int8 |\n|---|---|---|---|---|")
    for case in cases:
        (result,) = run_case(case, settings)
        ours = result.cells["relaydsl:int8"].seconds
        for key, cell in result.cells.items():
            if cell.seconds is None:
                print(f"| {case.name} | {key} | {cell.status}: {cell.footnote} | | |")
                continue
            ratio = f"{cell.seconds / ours:.2f}x" if ours else "—"
            print(f"| {case.name} | {key} | {cell.seconds * 1e3:.3f} | "
                  f"{(case.flops or 0) / cell.seconds / 1e9:.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
