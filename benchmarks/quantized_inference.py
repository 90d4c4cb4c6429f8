"""Quantized inference against float32, end to end (issue 24 item 3's speed part).

    python benchmarks/quantized_inference.py [--batch 100] [--repeats 20]

The two networks of benchmarks/quantization.py (LeNet on MNIST, ResNet-8 on Fashion-MNIST),
with the weights they are created with (speed does not depend on training), run on the llvm
target in float32 (``relay.build(model)``) and quantized by ``relay.quantize`` at 8/32
(percentile calibration on 8 batches of real images, every layer quantized) and built the
same way; both are timed on one batch of test images, best of `repeats` calls, in one run, and
the quantized result is checked to classify like the float one. benchmarks/quantized_kernels.py
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


def best_seconds(run: Callable[[np.ndarray], Any], x: np.ndarray, repeats: int) -> float:
    run(x)  # compiles what the first call needs
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(x)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100, help="images per call")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"CPU: {machine.cpu_model()}; integer kernels: {host_isa().name}; "
          f"load average {machine.load_average()}")
    print("\n| network | batch | float32 ms | int8 (8/32) ms | float32 / int8 | same class |")
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
        t_fp32 = best_seconds(fp32, x, args.repeats)
        t_int8 = best_seconds(int8, x, args.repeats)
        print(f"| {name} | {args.batch} | {t_fp32 * 1e3:.2f} | {t_int8 * 1e3:.2f} | "
              f"{t_fp32 / t_int8:.2f}x | {agree:.0%} |", flush=True)


if __name__ == "__main__":
    main()
