"""relaydsl against jax.jit, NumPy and PyTorch, side by side, measured in one run.

    python benchmarks/run.py                          # every row, relaydsl on --target llvm
    python benchmarks/run.py --quick --target interp  # few repetitions, the reference interpreter
    python benchmarks/run.py --rows gemm,mlp          # a subset (see --help for the names)

Each row checks first that every system computes what JAX computes (rtol 1e-3, atol 1e-4),
then times them round-robin and reports medians (benchmarks/harness.py). The table is printed
and written, with a description of the machine, to benchmarks/RESULTS.md (or --output).
A system that fails shows "—" with its error in a footnote; the run always completes.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

# Idle worker threads of one system must not keep spinning on the cores while the next system
# is timed (the rows interleave the systems). Measured here: PyTorch's OpenMP threads slowed
# the following system by 19-45%, OpenBLAS's (which spin for ~2^28 cycles) by up to 2x.
# Both settings must be in place before NumPy or PyTorch loads its thread pool.
WAIT_POLICIES = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}
for _name, _value in WAIT_POLICIES.items():
    os.environ.setdefault(_name, _value)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/run.py` from anywhere
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import (  # noqa: E402
    OPTIONAL_SYSTEMS, SYSTEMS, Result, Settings, best_of, run_case, sections,
)
from benchmarks.workloads import GROUPS  # noqa: E402
from benchmarks.workloads.common import RELAY_TARGET  # noqa: E402

COLUMNS = {"relaydsl": "relaydsl", "jax": "jax.jit", "numpy": "NumPy", "torch": "PyTorch",
           "torch_compile": "torch.compile"}


# ---- the machine -----------------------------------------------------------------------------
def machine_description() -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor() or "unknown"
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        model += f" (LLVM host CPU: {llvm.get_host_cpu_name()})"
    except Exception:
        pass
    rows.append(("CPU", model))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rows.append(("cores", f"{os.cpu_count()} logical, {usable} usable by this process"))
    rows.append(("Python", platform.python_version()))
    try:
        import llvmlite
        import llvmlite.binding as llvm

        version = ".".join(map(str, llvm.llvm_version_info))
        rows.append(("llvmlite / LLVM", f"{llvmlite.__version__} / {version}"))
    except Exception as e:
        rows.append(("llvmlite / LLVM", f"not available ({type(e).__name__})"))
    import numpy as np

    rows.append(("NumPy", np.__version__))
    rows.append(("BLAS", blas_description()))
    try:
        import jax
        import jaxlib

        rows.append(("JAX", f"{jax.__version__} (jaxlib {jaxlib.__version__}, "
                            f"{jax.default_backend()})"))
    except Exception as e:
        rows.append(("JAX", f"not available ({type(e).__name__})"))
    try:
        import torch

        rows.append(("PyTorch", f"{torch.__version__} (threads set to 2)"))
    except Exception as e:
        rows.append(("PyTorch", f"not importable ({type(e).__name__}: {e})"))
    rows.append(("load average at the start", load_average()))
    rows.append(("date", datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")))
    return rows


def load_average() -> str:
    """Other processes on the machine distort every figure: say how busy it was."""
    try:
        one, five, _ = os.getloadavg()
        return f"{one:.2f} (1 min), {five:.2f} (5 min)"
    except OSError:
        return "unknown"


def busy_warning() -> str | None:
    try:
        one = os.getloadavg()[0]
    except OSError:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if one < 0.5:
        return None
    return (f"the load average is {one:.2f} on {cores} cores before the run: other processes "
            "compete for the cores and distort every figure (multi-threaded BLAS, XLA and "
            "OpenMP suffer most); ratios within the run are the least affected")


def blas_description() -> str:
    import numpy as np

    parts = []
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        parts.append(f"{blas.get('name', '?')} {blas.get('version', '')}".strip())
    except Exception:
        parts.append("unknown")
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") == "blas":
                parts.append(f"{info.get('internal_api')} {info.get('version')}, kernels for "
                             f"{info.get('architecture')}, {info.get('num_threads')} threads")
                break
    except Exception:
        pass
    parts.extend(f"{var}={os.environ.get(var, 'unset')}"
                 for var in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                             *WAIT_POLICIES))
    return "; ".join(parts)


# ---- the table -------------------------------------------------------------------------------
class Footnotes:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def cell_text(result: Result, column: str, notes: Footnotes) -> str:
    cell = best_of(result, column)
    if cell is None:
        return "—"
    if cell.seconds is not None:
        text = fmt_ms(cell.seconds)
        if result.case.flops:
            text += f" ({result.case.flops / cell.seconds / 1e9:.0f} GF/s)"
        if cell.variant:
            text += f" {cell.variant}"
        if cell.footnote:
            text += " " + notes.mark(f"{COLUMNS[column]}: {cell.footnote}")
        return text
    label = {"wrong": "WRONG", "n/a": "n/a"}.get(cell.status, "—")
    if cell.footnote:
        label += " " + notes.mark(f"{COLUMNS[column]}: {cell.footnote}")
    return label


def target_check(result: Result) -> tuple[str, str, str]:
    """(ratio relaydsl/JAX, the target, ok/miss/—)."""
    ours, jax = best_of(result, "relaydsl"), best_of(result, "jax")
    have = ours is not None and ours.seconds is not None
    ratio = ours.seconds / jax.seconds if have and jax and jax.seconds else None
    ratio_text = f"{ratio:.2f}x" if ratio is not None else "—"
    kind, limit = result.case.target
    if kind == "numpy_gflops":
        numpy = best_of(result, "numpy")
        goal = f">= {limit:.0%} of NumPy GF/s"
        if not have or numpy is None or numpy.seconds is None:
            return ratio_text, goal, "—"
        share = numpy.seconds / ours.seconds  # GF/s ratio is the inverse time ratio
        return ratio_text, goal, f"{'ok' if share >= limit else 'miss'} ({share:.0%})"
    if kind == "torch":
        torch = best_of(result, "torch")
        goal = f"<= {limit:.1f}x PyTorch"
        if not have or torch is None or torch.seconds is None:
            return ratio_text, goal, "—"
        share = ours.seconds / torch.seconds
        return ratio_text, goal, f"{'ok' if share <= limit else 'miss'} ({share:.2f}x)"
    goal = f"<= {limit:.1f}x JAX"
    if ratio is None:
        return ratio_text, goal, "—"
    return ratio_text, goal, "ok" if ratio <= limit else "miss"


def columns(results: list[Result]) -> list[str]:
    """The systems shown: every one, but an optional one (torch.compile) only when a row of
    the run offers it."""
    offered = {k.partition(":")[0] for r in results for k in r.cells}
    return [c for c in SYSTEMS if c not in OPTIONAL_SYSTEMS or c in offered]


def header(results: list[Result]) -> list[str]:
    return ["row", *(COLUMNS[c] for c in columns(results)), "relaydsl/JAX", "target", "status"]


def table_rows(results: list[Result], notes: Footnotes) -> list[list[str]]:
    shown = columns(results)
    return [[r.case.name, *(cell_text(r, c, notes) for c in shown), *target_check(r)]
            for r in results]


def row_notes(results: list[Result]) -> list[str]:
    """What each row measured beyond its name, and the time of each JAX layout."""
    out = []
    for r in results:
        out += [f"{r.case.name}: {n}" for n in r.case.notes]
        for column in SYSTEMS:
            variants = [(k.partition(":")[2], c) for k, c in r.cells.items()
                        if k.partition(":")[0] == column and ":" in k]
            if variants:
                parts = [f"{v} {fmt_ms(c.seconds)} ms" if c.seconds is not None else f"{v} —"
                         for v, c in variants]
                out.append(f"{r.case.name}: {COLUMNS[column]} {', '.join(parts)} (the table "
                           "shows the better)")
    return out


def plain_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


TARGETS_TEXT = (
    "Targets (from the issue): the elementwise chain and the MLP forward + backward at most "
    "1.0x JAX's time; GEMM at least 50% of NumPy's GFLOP/s; the TreeLSTM rows at most 0.5x "
    "PyTorch eager's time (issue 14: the Relay paper's 2x); every other row (compile times "
    "included) at most 2.0x JAX's time. \"ok\"/\"miss\" compares relaydsl with that column "
    "of the same run (the better variant where there are two); \"—\" when relaydsl did not "
    "run.")


def write_results(path: Path, args: argparse.Namespace, machine: list[tuple[str, str]],
                  rows: list[list[str]], notes: Footnotes, results: list[Result],
                  settings: Settings, elapsed: float, busy: str | None) -> None:
    lines = ["# Benchmark results", "",
             f"Written by `python benchmarks/run.py {' '.join(sys.argv[1:])}`".rstrip() +
             f" in {elapsed:.0f} s. Medians in milliseconds per call (GEMM also in GFLOP/s); "
             "lower is better. See benchmarks/README.md for the method.", "",
             "## Machine", ""]
    lines += [f"- **{k}**: {v}" for k, v in machine]
    lines += [f"- **relaydsl target**: `{args.target}` (opt_level 3 where the target takes it)"
              + ("; `--quick` (few repetitions: indicative only)" if args.quick else ""),
              f"- **load average at the end**: {load_average()}",
              f"- **sampling**: warm-up {settings.warmup_s} s per system, samples of at least "
              f"{settings.min_sample_s * 1e3:.0f} ms, {settings.min_rounds}-{settings.max_rounds} "
              "round-robin rounds per row", "",
              "## Results", ""]
    if busy:
        lines += [f"**Warning**: {busy}.", ""]
    lines += [markdown_table(header(results), rows), "", TARGETS_TEXT, ""]
    lines += [f"- {n}" for n in row_notes(results)] + [""]
    if notes.texts:
        lines += ["Notes:", ""]
        lines += [f"{i}. {t}" for i, t in enumerate(notes.texts, 1)] + [""]
    # sections other scripts wrote into the file (benchmarks/figure5.py's) stay
    old = path.read_text() if path.exists() else ""
    kept = [text.rstrip() + "\n" for heading, text in sections(old)
            if heading not in ("## Machine", "## Results")]
    path.write_text("\n".join(lines + kept))


# ---- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="llvm", help="relaydsl target: llvm (default), interp")
    parser.add_argument("--quick", action="store_true",
                        help="few repetitions and short warm-ups (indicative figures only)")
    parser.add_argument("--rows", default=",".join(GROUPS),
                        help=f"comma-separated subset of: {', '.join(GROUPS)} (default: all)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "RESULTS.md"),
                        help="where to write the Markdown results ('' to skip)")
    args = parser.parse_args(argv)

    wanted = [g.strip() for g in args.rows.split(",") if g.strip()]
    unknown = [g for g in wanted if g not in GROUPS]
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    RELAY_TARGET["target"] = args.target
    # the default target of the calls that take none (a model's forward pass, relay.grad)
    os.environ["RELAYDSL_TARGET"] = args.target
    settings = Settings.for_mode(args.target, args.quick)
    machine = machine_description()
    for k, v in machine:
        print(f"{k:>16}: {v}")
    print(f"{'relaydsl target':>16}: {args.target}{'  (--quick)' if args.quick else ''}\n")

    busy = busy_warning()
    if busy:
        print(f"WARNING: {busy}\n", file=sys.stderr)
    started = time.perf_counter()
    results: list[Result] = []
    for group in GROUPS:
        if group not in wanted:
            continue
        try:
            cases = GROUPS[group]()
        except Exception as e:  # a workload that cannot even be defined: say so, go on
            print(f"[{group}] could not be set up: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        for case in cases:
            print(f"  running {case.name} ...", file=sys.stderr, flush=True)
            row_start = time.perf_counter()
            try:
                results += run_case(case, settings)
            except Exception as e:  # the harness catches per system; this is a last resort
                print(f"  {case.name} failed: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            print(f"    done in {time.perf_counter() - row_start:.1f} s", file=sys.stderr,
                  flush=True)
    elapsed = time.perf_counter() - started

    notes = Footnotes()
    rows = table_rows(results, notes)
    print("\nmedian ms per call (GEMM also GFLOP/s); relaydsl/JAX is the time ratio\n")
    print(plain_table(header(results), rows))
    print("\n" + TARGETS_TEXT)
    for n in row_notes(results):
        print(f"- {n}")
    for i, t in enumerate(notes.texts, 1):
        print(f"[{i}] {t}")
    if args.output:
        write_results(Path(args.output), args, machine, rows, notes, results, settings, elapsed,
                      busy)
        print(f"\nwritten to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
