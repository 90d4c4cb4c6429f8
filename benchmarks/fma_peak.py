"""The CPU's fp32 multiply-add peak, measured: a JIT-compiled loop of independent vector FMA
chains, timed on one thread and on every core at once.

    python benchmarks/fma_peak.py [--seconds S]

The peak on paper (cores x FMA units x lanes x 2 flops x clock) is unknown on a VM: the clock
under a vector load, how many FMA units the CPU has, whether two logical CPUs are one core's
hyperthreads, what the hypervisor lets through. Measured, it is the figure a GEMM can be
compared with (benchmarks/run.py reports its GEMM rows also as a share of it).

The kernel keeps CHAINS accumulators of <L x float> (L lanes fill the CPU's widest vector
registers: 16 with AVX-512, 8 with AVX, 4 otherwise), each updated ``acc = acc * a + b`` once
per iteration by ``llvm.fmuladd`` (one FMA instruction where the CPU has them). Independent
chains hide the FMA's latency: a recent x86 core starts two FMAs a cycle, each done after
4 cycles, so at least 8 must be in flight. ``a`` and ``b`` are arguments, so LLVM cannot fold
the loop, and the sum of the accumulators is returned, so it cannot drop it. A ctypes call
releases the GIL, so Python threads run the kernel on every core at once.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if not __package__ and str(ROOT) not in sys.path:  # `python benchmarks/fma_peak.py`
    sys.path.insert(0, str(ROOT))

from relaydsl.backend.llvm import jit  # noqa: E402

CHAINS = 12
# acc -> acc * A + B stays near B / (1 - A) = 1 from any start: no overflow, no denormals
A, B = 0.999, 0.001


@dataclass(frozen=True)
class FmaPeak:
    """GFLOP/s (a multiply-add counts as two) of the kernel on one thread and on `threads`."""

    lanes: int
    chains: int
    threads: int
    one_thread: float
    all_cores: float

    def __str__(self) -> str:
        return (f"{self.one_thread:.0f} GFLOP/s on one thread, {self.all_cores:.0f} GFLOP/s "
                f"on {self.threads} threads ({self.chains} independent chains of "
                f"<{self.lanes} x float> multiply-adds, benchmarks/fma_peak.py)")


def host_lanes() -> int:
    """fp32 lanes of the CPU's widest vector registers (not of the width the compiled code
    is tuned to: the peak is the CPU's)."""
    return jit.register_bits(jit.host_target().features) // 32


def kernel_name(lanes: int, chains: int) -> str:
    return f"fma_peak_{lanes}x{chains}"


def kernel_ir(lanes: int, chains: int = CHAINS) -> str:
    """``float fma_peak_<lanes>x<chains>(i64 iterations, float a, float b)``: `iterations`
    rounds of `chains` multiply-adds on <lanes x float>; the sum of every lane of every
    accumulator (so that all of them are needed)."""
    vec = f"<{lanes} x float>"
    fmuladd = f"llvm.fmuladd.v{lanes}f32"
    lines = [
        # without this attribute an Intel CPU tuned to prefer 256-bit vectors
        # (RELAYDSL_VECTOR_WIDTH=256) would split each 512-bit FMA in two
        f"define float @{kernel_name(lanes, chains)}(i64 %iterations, float %a, float %b) #0 {{",
        "entry:",
        f"  %a0 = insertelement {vec} poison, float %a, i64 0",
        f"  %va = shufflevector {vec} %a0, {vec} poison, <{lanes} x i32> zeroinitializer",
        f"  %b0 = insertelement {vec} poison, float %b, i64 0",
        f"  %vb = shufflevector {vec} %b0, {vec} poison, <{lanes} x i32> zeroinitializer",
    ]
    # different starting values: chains that start equal would be merged into one by LLVM
    lines += [f"  %init{k} = fadd {vec} %vb, <{', '.join([f'float {k + 1}.0'] * lanes)}>"
              for k in range(chains)]
    lines += ["  br label %loop", "loop:",
              "  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]"]
    lines += [f"  %acc{k} = phi {vec} [ %init{k}, %entry ], [ %next{k}, %loop ]"
              for k in range(chains)]
    lines += [f"  %next{k} = call {vec} @{fmuladd}({vec} %acc{k}, {vec} %va, {vec} %vb)"
              for k in range(chains)]
    lines += ["  %i.next = add i64 %i, 1",
              "  %done = icmp uge i64 %i.next, %iterations",
              "  br i1 %done, label %exit, label %loop", "exit:",
              f"  %sum0 = fadd {vec} %next0, zeroinitializer"]
    lines += [f"  %sum{k} = fadd {vec} %sum{k - 1}, %next{k}" for k in range(1, chains)]
    lines += [f"  %total = call float @llvm.vector.reduce.fadd.v{lanes}f32(float 0.0, "
              f"{vec} %sum{chains - 1})",
              "  ret float %total", "}",
              f"declare {vec} @{fmuladd}({vec}, {vec}, {vec})",
              f"declare float @llvm.vector.reduce.fadd.v{lanes}f32(float, {vec})",
              f'attributes #0 = {{ "min-legal-vector-width"="{lanes * 32}" }}', ""]
    return "\n".join(lines)


@functools.cache  # one compilation per process: the JIT engine keeps every symbol it loads
def kernel(lanes: int, chains: int = CHAINS):
    """The compiled kernel as a ctypes function (iterations, a, b) -> float."""
    # explicit vectors: LLVM's vectorisers have nothing to add; the key is the IR's hash (a
    # change to the IR is a new kernel, never a stale cached object)
    ir_text = kernel_ir(lanes, chains)
    key = f"benchmarks.fma_peak:{hashlib.sha256(ir_text.encode()).hexdigest()[:16]}"
    library = jit.compile_ir(ir_text, key=key, vectorize=False)
    return library.function(kernel_name(lanes, chains), ctypes.c_float,
                            [ctypes.c_int64, ctypes.c_float, ctypes.c_float])


def wall_time(call, iterations: int, threads: int) -> float:
    """Seconds from the first of `threads` threads starting `call(iterations, A, B)` to the
    last one finishing; they start together at a barrier."""
    barrier = threading.Barrier(threads)
    spans: list[tuple[float, float]] = []

    def work() -> None:
        barrier.wait()
        start = time.perf_counter()
        call(iterations, A, B)
        spans.append((start, time.perf_counter()))  # list.append is atomic under the GIL

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def measure(seconds: float = 0.1, repeats: int = 5, threads: int | None = None,
            lanes: int | None = None) -> FmaPeak:
    """The kernel's GFLOP/s on one thread and on `threads` (default: every core this process
    may use), each the best of `repeats` runs of about `seconds` per thread: a peak is the
    best the CPU does, and other processes only ever slow a run down."""
    lanes = lanes or host_lanes()
    threads = threads or usable_cores()
    call = kernel(lanes)
    flops_per_iteration = 2 * lanes * CHAINS
    # size the runs on one thread (this first call also warms the code and the clock up)
    probe = 100_000
    iterations = max(probe, int(probe * seconds / wall_time(call, probe, 1)))
    figures = []
    for count in (1, threads):
        best = min(wall_time(call, iterations, count) for _ in range(repeats))
        figures.append(count * iterations * flops_per_iteration / best / 1e9)
    return FmaPeak(lanes, CHAINS, threads, *figures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0.1,
                        help="length of one timed run per thread (default 0.1)")
    args = parser.parse_args(argv)
    print(f"fp32 FMA peak: {measure(args.seconds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
