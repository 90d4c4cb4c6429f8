"""First-call time of the MLP forward + backward (the gradients of mlp.py), compilation included.

Each trial runs in fresh child processes, so that nothing compiled by earlier rows (in memory
or on disk) is reused:

- relaydsl: decorating the three functions (mlp_forward, mlp_loss, mlp_gradients), then
  ``relay.build(..., opt_level=3)`` and the first ``exe(*args)``, with ``RELAYDSL_CACHE_DIR``
  pointing at a new empty directory ("cold"); then the same in a second process that finds the
  kernels the first one wrote to that directory ("warm disk cache");
- JAX: ``jax.jit(jax.grad(loss))`` of a new function, first call until ready (trace, lowering,
  XLA compilation and the run), in both processes.

Before measuring, each child runs one unrelated tiny program on each system (in a scratch
cache directory for relaydsl), so process-wide start-up (JAX's CPU client, LLVM's target
initialisation) is not counted. NumPy and PyTorch (eager) compile nothing: "n/a".

    python -m benchmarks.workloads.compile_time --child --target llvm --cache DIR   # one trial
"""
from __future__ import annotations

import argparse
import contextlib
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

from benchmarks.harness import Case, Cell, Result, Settings
from relaydsl import Float, Tensor

ROOT = Path(__file__).resolve().parents[2]


def warmup(v: Tensor[Float, 3]) -> Tensor[Float, 3]:
    """An unrelated tiny program run first, so that process start-up is not counted."""
    return v * 2.0 + 1.0


def child(target: str, cache: str) -> dict:
    import numpy as np

    from benchmarks.workloads import mlp
    from benchmarks.workloads.common import build, jax_modules, specialize

    out: dict = {}
    x, y, params = mlp.data()
    jax, jnp = jax_modules()
    jax.jit(lambda v: v * 2 + 1)(jnp.ones(3)).block_until_ready()
    jp, jx, jy = tuple(jnp.asarray(p) for p in params), jnp.asarray(x), jnp.asarray(y)

    with tempfile.TemporaryDirectory() as scratch:
        os.environ["RELAYDSL_CACHE_DIR"] = scratch
        with contextlib.suppress(Exception):  # reported by the measurement below
            build(specialize(warmup), target)(np.ones(3, np.float32))

    os.environ["RELAYDSL_CACHE_DIR"] = cache
    try:
        start = time.perf_counter()
        _, gradients = mlp.relaydsl_functions()
        exe = build(gradients, target)
        exe(x, y, *params)
        out["relaydsl"] = time.perf_counter() - start
    except Exception as e:
        out["relaydsl_error"] = f"{type(e).__name__}: {e}"[:300]

    start = time.perf_counter()
    f = mlp.jax_gradients_fn()
    jax.block_until_ready(f(jp, jx, jy))
    out["jax"] = time.perf_counter() - start
    return out


def _run_child(target: str, cache: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.workloads.compile_time", "--child", "--target", target,
         "--cache", cache], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["no output"]
        errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception)\b", ln)]
        raise RuntimeError(f"child process failed: {(errors or lines)[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(settings: Settings) -> list[Result]:
    trials = 1 if settings.quick else 3
    cold, warm, jax_times, errors = [], [], [], []
    for _ in range(trials):
        cache = tempfile.mkdtemp(prefix="relaydsl-bench-cache-")
        try:
            for bucket in (cold, warm):
                try:
                    got = _run_child(settings.target, cache)
                except Exception as e:  # the whole child failed: both systems are "—"
                    errors.append(f"{type(e).__name__}: {e}"[:300])
                    continue
                jax_times.append(got["jax"])
                if "relaydsl" in got:
                    bucket.append(got["relaydsl"])
                else:
                    errors.append(got["relaydsl_error"])
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    def relaydsl_cell(values: list[float]) -> Cell:
        if values:
            return Cell(seconds=statistics.median(values), samples=len(values))
        return Cell(status="failed", footnote=errors[0] if errors else "no measurement")

    jax_cell = relaydsl_cell(jax_times) if jax_times else Cell(
        status="failed", footnote=errors[0] if errors else "no measurement")
    results = []
    for label, values in (("cold cache", cold), ("warm disk cache", warm)):
        note = (f"first call {'with an empty' if label == 'cold cache' else 'with a filled'} "
                "RELAYDSL_CACHE_DIR, in a fresh process, including decoration and build; JAX: "
                "first call of a new jax.jit (trace + compile + run); NumPy and PyTorch (eager) "
                f"compile nothing; median of {trials} trial(s)")
        case = Case(f"MLP fwd+bwd 1st call, {label}", "compile", {}, notes=[note])
        results.append(Result(case, {"relaydsl": relaydsl_cell(values), "jax": jax_cell,
                                     "numpy": Cell(status="n/a"), "torch": Cell(status="n/a")}))
    return results


def cases() -> list[Case]:
    return [Case("MLP fwd+bwd first call", "compile", {}, measure=measure)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--cache", required=True)
    args = parser.parse_args()
    print(json.dumps(child(args.target, args.cache)))
