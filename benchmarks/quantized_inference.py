"""Quantized inference against float32, end to end (issue 24 item 3's speed part).

    python benchmarks/quantized_inference.py [--batch 100] [--repeats 20]

The two networks of benchmarks/quantization.py (LeNet on MNIST, ResNet-8 on Fashion-MNIST),
with the weights they are created with (speed does not depend on training), run on the llvm
target in float32 (``relay.build(model)``) and quantized by ``relay.quantize`` at 8/32
(percentile calibration on 8 batches of real images, every layer quantized) and built the
same way; both are timed on one batch of test images, called in turn `repeats` times (round
robin), the median wall and CPU time (every thread's) of a call, and the quantized result is
checked to classify like the float one. benchmarks/quantized_kernels.py
times dense and conv2d alone. The figures depend on the CPU (its int8 instructions: AMX,
AVX-512 VNNI, AVX-VNNI or none), which the output names.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if not __package__ and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks import machine  # noqa: E402
from benchmarks.quantization import DATA, NETWORKS, mnist, specialize  # noqa: E402
from relaydsl import relay, relay_model  # noqa: E402
from relaydsl.backend.llvm.templates.igemm import host_isa  # noqa: E402


def interleaved(runs: list[Callable[[np.ndarray], Any]], x: np.ndarray, repeats: int
                ) -> list[tuple[float, float]]:
    """Per run, the median (wall, CPU) seconds of a call, the runs called in turn (round
    robin, so a change of the machine's load falls on all of them alike); CPU time is the
    process's, every thread's."""
    for run in runs:
        run(x)  # compiles what the first call needs
    samples: list[list[tuple[float, float]]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, times in zip(runs, samples):
            wall, cpu = time.perf_counter(), time.process_time()
            run(x)
            times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return [(float(np.median([w for w, _ in t])), float(np.median([c for _, c in t])))
            for t in samples]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100, help="images per call")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"CPU: {machine.cpu_model()}; integer kernels: {host_isa().name}; "
          f"load average {machine.load_average()}")
    print("\n| network | batch | float32 ms (wall / CPU) | int8 8/32 ms (wall / CPU) | "
          "float32 / int8 (wall / CPU) | same class |")
    print("|---|---|---|---|---|---|")
    for name, (template, folder, _) in NETWORKS.items():
        (train_x, _), (test_x, _) = mnist(DATA / folder)
        model = relay.create_model(specialize(template, relay_model), seed=0)
        x = np.ascontiguousarray(test_x[:args.batch])
        fp32 = relay.build(model, target="llvm")
        cfg = relay.QConfig(calibrate_mode="percentile", skip_conv_layers=(),
                            skip_dense_layer=False)
        calibration = [train_x[i * 100:(i + 1) * 100] for i in range(8)]
        int8 = relay.build(relay.quantize(model, dataset=calibration, config=cfg),
                           target="llvm")
        agree = np.mean(np.argmax(fp32(x), 1) == np.argmax(int8(x), 1))
        (w_fp32, c_fp32), (w_int8, c_int8) = interleaved([fp32, int8], x, args.repeats)
        print(f"| {name} | {args.batch} | {w_fp32 * 1e3:.2f} / {c_fp32 * 1e3:.2f} | "
              f"{w_int8 * 1e3:.2f} / {c_int8 * 1e3:.2f} | {w_fp32 / w_int8:.2f}x / "
              f"{c_fp32 / c_int8:.2f}x | {agree:.0%} |", flush=True)
    print(f"load average after: {machine.load_average()}")


if __name__ == "__main__":
    main()
