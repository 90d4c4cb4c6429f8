"""The MLP forward pass of mlp.py with a symbolic batch size, called at batch sizes it has not
seen: the cost of a new shape.

Each system runs in a fresh child process (relaydsl with an empty RELAYDSL_CACHE_DIR): the
function is built and called once at batch 64 (its first shape, not counted), then called at
each of SIZES in turn. Two rows: the sum of the first calls at the new sizes (relaydsl: one
build of native code of run-time shapes, kernels generic in the batch size; jax.jit: a trace
and an XLA compilation per shape; torch.compile: a recompilation with dynamic shapes at the
second shape, then none; NumPy and PyTorch eager compile nothing), and the sum of the same
calls made again (the median of three). Every output is checked against NumPy's.

    python -m benchmarks.workloads.batch_sizes --child relaydsl --cache DIR   # one system
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import ATOL, RTOL, Case, Cell, Result, Settings

ROOT = Path(__file__).resolve().parents[2]
FIRST = 64
SIZES = (1, 3, 17, 33, 100, 250, 500, 1000)
SYSTEMS = ("relaydsl", "jax", "numpy", "torch", "torch_compile")


def _forward(system: str, target: str):
    """The forward pass of `system` as a function of (x, *params), built."""
    from benchmarks.workloads import mlp
    from benchmarks.workloads.common import build, jax_modules, specialize, torch_module

    if system == "relaydsl":
        exe = build(specialize(mlp.mlp_forward, B="n", I=mlp.IN, H=mlp.HIDDEN, O=mlp.OUT),
                    target)
        return exe
    if system == "jax":
        jax, jnp = jax_modules()
        f = jax.jit(mlp.jax_forward)
        return lambda x, *p: np.asarray(f(jnp.asarray(x), *map(jnp.asarray, p)))
    if system == "numpy":
        return mlp.numpy_forward
    torch = torch_module()

    def forward(*a):
        return mlp.torch_forward(torch, *a)
    if system == "torch_compile":
        forward = torch.compile(forward)

    def run(x, *p):
        with torch.no_grad():
            return forward(torch.from_numpy(x), *map(torch.from_numpy, p)).numpy()
    return run


def child(system: str, target: str) -> dict:
    from benchmarks.workloads import mlp

    x, _, params = mlp.data(batch=max(SIZES))
    f = _forward(system, target)
    f(x[:FIRST], *params)
    first, again = [], []
    for n in SIZES:
        start = time.perf_counter()
        out = f(x[:n], *params)
        first.append(time.perf_counter() - start)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            f(x[:n], *params)
            times.append(time.perf_counter() - start)
        again.append(statistics.median(times))
        want = mlp.numpy_forward(x[:n], *params)
        if not np.allclose(out, want, rtol=RTOL, atol=ATOL):
            return {"wrong": f"batch {n}: max error {np.abs(out - want).max():.2e}"}
    return {"first": sum(first), "again": sum(again)}


def _run_child(system: str, target: str) -> dict:
    cache = tempfile.mkdtemp(prefix="relaydsl-bench-cache-")
    env = dict(os.environ, RELAYDSL_CACHE_DIR=cache)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.workloads.batch_sizes", "--child", system,
             "--target", target], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=900)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["no output"]
        errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception)\b", ln)]
        return {"error": (errors or lines)[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(settings: Settings) -> list[Result]:
    trials = 1 if settings.quick else 3
    runs = {s: [_run_child(s, settings.target) for _ in range(trials)] for s in SYSTEMS}

    def cell(system: str, what: str) -> Cell:
        got = runs[system]
        for r in got:
            if "error" in r:
                return Cell(status="failed", footnote=r["error"])
            if "wrong" in r:
                return Cell(status="wrong", footnote=r["wrong"])
        return Cell(seconds=statistics.median(r[what] for r in got), samples=len(got))

    sizes = ", ".join(map(str, SIZES))
    results = []
    for what, label, note in (
            ("first", "1st calls", f"the sum of the first calls at batch {sizes}, after one "
             f"at {FIRST}, in a fresh process (relaydsl: empty kernel cache); median of "
             f"{trials} process(es)"),
            ("again", "again", "the same calls made again (the median of three each), "
             "summed")):
        case = Case(f"MLP fwd, 8 new batch sizes, {label}", "batch-sizes", {}, notes=[note],
                    target=("jax", 1.0))
        results.append(Result(case, {s: cell(s, what) for s in SYSTEMS}))
    return results


def cases() -> list[Case]:
    return [Case("MLP fwd at new batch sizes", "batch-sizes", {}, measure=measure)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=SYSTEMS, required=True)
    parser.add_argument("--target", default="llvm")
    args = parser.parse_args()
    print(json.dumps(child(args.child, args.target)))
