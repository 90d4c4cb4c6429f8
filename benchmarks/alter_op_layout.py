"""Is AlterOpLayout faster on this CPU? A ResNet-style conv chain, NCHW against blocked.

Four 3x3 convolutions, 64 channels, 56x56, batch 1, relu between them, the weights constants
(so FoldConstant folds their layout transforms), compiled for llvm at opt_level 3 without and
with ``required_pass=["AlterOpLayout"]``, timed interleaved (medians of many runs). Not a test
and not part of run.py: the figures decide the pass's opt_level (pipeline.py).

    .venv/bin/python benchmarks/alter_op_layout.py [--block 16] [--repeats 50]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from relaydsl.backend.interpreter import to_value
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Constant, Function, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.op import ops
from relaydsl.transform import PassContext
from relaydsl.transform.alter_op_layout import alter_op_layout
from relaydsl.typing import infer_types

C, HW, DEPTH = 64, 56, 4
FLOPS = DEPTH * 2 * C * C * 9 * HW * HW


def chain(rng: np.random.Generator) -> IRModule:
    x = Var("x", TensorType((1, C, HW, HW)))
    h = x
    for i in range(DEPTH):
        w = Constant((rng.standard_normal((C, C, 3, 3)) * 0.05).astype(np.float32))
        h = ops.conv2d(h, w, padding=1)
        if i < DEPTH - 1:
            h = ops.relu(h)
    mod = IRModule()
    mod.add("main", Function([x], h))
    return infer_types(mod)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    mod = chain(rng)
    x = to_value(rng.standard_normal((1, C, HW, HW)).astype(np.float32),
                 mod["main"].params[0].checked_type)
    llvm = get_target("llvm")
    with PassContext(opt_level=3):
        nchw = llvm.build(mod, "main", {})
    with PassContext(opt_level=3):  # the pass applied first, at the requested block size
        blocked = llvm.build(alter_op_layout(mod, block=args.block), "main", {})
    np.testing.assert_allclose(np.asarray(blocked(x)), np.asarray(nchw(x)), rtol=1e-3, atol=1e-3)
    times: dict[str, list[float]] = {"NCHW conv2d": [], f"NCHW{args.block}c conv2d_nchwc": []}
    for _ in range(3):
        nchw(x), blocked(x)
    for _ in range(args.repeats):  # interleaved: both see the same machine load
        for name, program in zip(times, (nchw, blocked)):
            start = time.perf_counter()
            program(x)
            times[name].append(time.perf_counter() - start)
    for name, ts in times.items():
        ms = float(np.median(ts)) * 1e3
        print(f"{name:28s} median {ms:7.2f} ms  min {min(ts) * 1e3:7.2f} ms  "
              f"{FLOPS / ms / 1e6:6.1f} GFLOP/s")


if __name__ == "__main__":
    main()
