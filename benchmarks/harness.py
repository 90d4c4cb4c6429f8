"""The timing harness: one benchmark row, its systems, checked against JAX, timed round-robin.

A workload module describes a row as a :class:`Case`: for each system a *setup* function that
prepares inputs, builds/compiles, and returns a zero-argument *runner* whose value is the
row's result (an array, or a tuple of arrays for gradients). The harness then

1. sets every system up and calls each runner once (a failure becomes "—" with a footnote);
2. compares every system's result with the JAX reference (``np.testing.assert_allclose``,
   rtol 1e-3, atol 1e-4); a mismatch is reported as "WRONG" and that system is not timed;
3. warms each runner up, then takes samples round-robin (one sample of each system per round,
   the order rotating each round), so that the drift and the bimodal two-core timings of these
   VMs (see docs/performance.md) hit every system alike; the figure is the median.

A sample is the mean of ``inner`` back-to-back calls, ``inner`` chosen so that one sample
lasts at least ``min_sample_s`` (calls far shorter than a millisecond are otherwise dominated
by timer and loop noise, and the first call after a switch pays for the previous system's
still-spinning worker threads). Times use ``time.perf_counter``; JAX runners block until ready.
A runner may process several items (``Case.items``: the trees of a data set): the time
reported is then per item.
"""
from __future__ import annotations

import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Runner = Callable[[], Any]
Setup = Callable[[], Runner]

RTOL, ATOL = 1e-3, 1e-4

# the columns of the table, in order; a Case may offer several variants of one column
# (e.g. JAX in NCHW and NHWC layouts) as "jax:NCHW", "jax:NHWC": the best variant is reported
SYSTEMS = ("relaydsl", "jax", "numpy", "torch", "torch_compile")
# shown only when a row of the run offers them
OPTIONAL_SYSTEMS = ("torch_compile",)


@dataclass
class Case:
    """One row of the table."""

    name: str                    # "GEMM 512"
    group: str                   # what --rows selects: "gemm", "mlp", ...
    setups: dict[str, Setup]     # "relaydsl", "jax" (or "jax:<variant>"), "numpy", "torch",
    #                              "torch_compile"
    reference: str = "jax"       # the system (or variant) every other result is compared with
    flops: float | None = None   # floating-point operations per call: report GFLOP/s
    target: tuple[str, float] = ("jax", 2.0)   # ("jax", r): relaydsl <= r x JAX time;
    #                                            ("torch", r): <= r x PyTorch eager's time;
    #                                            ("numpy_gflops", f): >= f x NumPy GFLOP/s
    items: int = 1               # a runner call processes this many items (trees): the
    #                              table reports the time per item
    notes: list[str] = field(default_factory=list)  # printed under the table
    # a Case may instead measure itself (first-call compile times), giving one or more rows
    measure: Callable[["Settings"], list["Result"]] | None = None


@dataclass
class Settings:
    target: str = "llvm"
    quick: bool = False
    min_sample_s: float = 10e-3     # one sample lasts at least this long (this amortises the
    #                                 switch between systems: spinning BLAS/XLA/OpenMP threads)
    warmup_s: float = 0.3           # per system, after the first (checked) call
    max_rounds: int = 60
    min_rounds: int = 7
    budget_s: float = 6.0           # per row: stop adding rounds past this much sampling

    @classmethod
    def for_mode(cls, target: str, quick: bool) -> "Settings":
        if quick:
            return cls(target=target, quick=True, min_sample_s=2e-3, warmup_s=0.05,
                       max_rounds=7, min_rounds=3, budget_s=1.5)
        return cls(target=target)


@dataclass
class Cell:
    """One system's outcome in one row."""

    seconds: float | None = None    # median time per call
    samples: int = 0
    variant: str | None = None      # e.g. "NHWC" for the best of several JAX layouts
    status: str = "ok"              # ok | failed | wrong | n/a
    footnote: str | None = None


@dataclass
class Result:
    case: Case
    cells: dict[str, Cell]


def flatten(value: Any) -> list[np.ndarray]:
    """A result as a list of NumPy arrays (tuples and lists of tensors are flattened)."""
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in flatten(v)]
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return [np.asarray(value)]


def block(value: Any) -> Any:
    """Waits for asynchronous (JAX) results."""
    if isinstance(value, (tuple, list)):
        for v in value:
            block(v)
    elif hasattr(value, "block_until_ready"):
        value.block_until_ready()
    return value


def short_error(e: BaseException) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= 300 else text[:297] + "..."


def compare(ref: list[np.ndarray], got: list[np.ndarray]) -> str | None:
    """None when `got` matches `ref`; otherwise what differs."""
    if len(ref) != len(got):
        return f"{len(got)} outputs instead of {len(ref)}"
    for i, (r, g) in enumerate(zip(ref, got)):
        if r.shape != g.shape:
            # a batch-1 result may legitimately drop or keep a leading 1
            if r.size == g.size:
                g = g.reshape(r.shape)
            else:
                return f"output {i}: shape {g.shape} instead of {r.shape}"
        try:
            np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64),
                                       rtol=RTOL, atol=ATOL)
        except AssertionError:
            err = np.abs(g.astype(np.float64) - r.astype(np.float64))
            return (f"output {i}: max abs error {err.max():.3g} "
                    f"(rtol {RTOL}, atol {ATOL})")
    return None


def _timed_once(runner: Runner) -> float:
    start = time.perf_counter()
    block(runner())
    return time.perf_counter() - start


def _sample(runner: Runner, inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        out = runner()
    block(out)
    return (time.perf_counter() - start) / inner


def check(case: Case) -> tuple[dict[str, Cell], dict[str, Runner]]:
    """Steps 1 and 2 of a row (see the module docstring): every system set up, called once
    and compared with the reference. The cells, and the runners of the systems that agree."""
    cells: dict[str, Cell] = {}
    runners: dict[str, Runner] = {}
    outputs: dict[str, list[np.ndarray]] = {}

    # 1. set up and call each system once
    for key, setup in case.setups.items():
        cell = Cell(variant=key.partition(":")[2] or None)
        cells[key] = cell
        try:
            runner = setup()
            outputs[key] = flatten(block(runner()))
            runners[key] = runner
        except Exception as e:  # any failure of one system is a footnote, never the whole run
            cell.status, cell.footnote = "failed", short_error(e)
            if _debug():
                traceback.print_exc()

    # 2. compare with the reference
    ref = outputs.get(case.reference)
    for key in list(runners):
        if key == case.reference:
            continue
        if ref is None:
            cells[key].footnote = f"not checked: the reference ({case.reference}) failed"
            continue
        problem = compare(ref, outputs[key])
        if problem:
            cells[key].status, cells[key].footnote = "wrong", problem
            del runners[key]
    return cells, runners


def run_case(case: Case, settings: Settings) -> list[Result]:
    """Checks and times one row (see the module docstring); a self-measuring Case may give
    several."""
    if case.measure is not None:
        return case.measure(settings)
    cells, runners = check(case)
    # 3. warm up, size the samples, then round-robin
    inner: dict[str, int] = {}
    for key, runner in runners.items():
        deadline = time.perf_counter() + settings.warmup_s
        once = _timed_once(runner)
        while time.perf_counter() < deadline:
            once = min(once, _timed_once(runner))
        inner[key] = max(1, int(settings.min_sample_s / max(once, 1e-9)))
    samples: dict[str, list[float]] = {k: [] for k in runners}
    order = list(runners)
    spent, rounds = 0.0, 0
    while order and rounds < settings.max_rounds and (
            rounds < settings.min_rounds or spent < settings.budget_s):
        start = time.perf_counter()
        shift = rounds % len(order)
        for key in order[shift:] + order[:shift]:
            samples[key].append(_sample(runners[key], inner[key]))
        spent += time.perf_counter() - start
        rounds += 1
    for key, values in samples.items():
        cells[key].seconds = statistics.median(values) / case.items
        cells[key].samples = len(values) * inner[key] * case.items
    return [Result(case, cells)]


def best_of(result: Result, column: str) -> Cell | None:
    """The column's cell; with several variants (jax:NCHW, jax:NHWC) the fastest one that ran."""
    keys = [k for k in result.cells if k.partition(":")[0] == column]
    if not keys:
        return None
    timed = [result.cells[k] for k in keys if result.cells[k].seconds is not None]
    if timed:
        return min(timed, key=lambda c: c.seconds)
    return result.cells[keys[0]]


def _debug() -> bool:
    import os

    return bool(os.environ.get("RELAYDSL_BENCH_DEBUG"))


# ---- RESULTS.md: one file, sections written by different scripts ----------------------------
def sections(text: str) -> list[tuple[str, str]]:
    """The ``## `` sections of a Markdown text, in order: (heading line, whole section text,
    heading included, up to the next ``## `` heading). What precedes the first is left out."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            out.append((line.rstrip("\n"), line))
        elif out:
            heading, body = out[-1]
            out[-1] = (heading, body + line)
    return out


def replace_section(text: str, heading: str, body: str) -> str:
    """`text` with the section under `heading` (a ``## `` line) replaced by `body`, or with
    the section appended when there is none; the rest of the text is unchanged."""
    new = f"{heading}\n\n{body.rstrip()}\n"
    for old_heading, old in sections(text):
        if old_heading == heading:
            start = text.index(old)  # sections are found in order: the first match is it
            rest = text[start + len(old):]
            return text[:start] + new + ("\n" + rest if rest else "")
    return text.rstrip("\n") + "\n\n" + new
