"""relaydsl against jax.jit, NumPy and PyTorch, side by side, measured in one run.

    python benchmarks/run.py                          # every row, relaydsl on --target llvm
    python benchmarks/run.py --quick --target interp  # few repetitions, the reference interpreter
    python benchmarks/run.py --rows gemm,mlp          # a subset (see --help for the names)

Each row checks first that every system computes what JAX computes (rtol 1e-3, atol 1e-4),
then times them round-robin and reports medians (benchmarks/harness.py). The table is printed
and written, with a description of the machine (benchmarks/machine.py) and its fp32 FMA peak
measured first (benchmarks/fma_peak.py), into the section of benchmarks/RESULTS.md (or
--output) for this kind of machine; other machines' sections stay.
A system that fails shows "—" with its error in a footnote; the run always completes.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

# Idle worker threads of one system must not keep spinning on the cores while the next system
# is timed (the rows interleave the systems). Measured here: PyTorch's OpenMP threads slowed
# the following system by 19-45%, OpenBLAS's (which spin for ~2^28 cycles) by up to 2x.
# Both settings must be in place before NumPy or PyTorch loads its thread pool.
WAIT_POLICIES = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}
if __name__ == "__main__":  # the script's settings; imported (by the tests) it changes nothing
    for _name, _value in WAIT_POLICIES.items():
        os.environ.setdefault(_name, _value)

ROOT = Path(__file__).resolve().parents[1]
# run as a script (`python benchmarks/run.py`, from anywhere): the benchmarks package is found
# from the repository root; imported as benchmarks.run, it already is
if not __package__ and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import fma_peak, machine  # noqa: E402
from benchmarks.fma_peak import FmaPeak  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    OPTIONAL_SYSTEMS, SYSTEMS, Result, Settings, best_of, run_case, sections,
)
from benchmarks.workloads import GROUPS  # noqa: E402
from benchmarks.workloads.common import RELAY_TARGET  # noqa: E402
from relaydsl.backend.llvm import jit  # noqa: E402

COLUMNS = {"relaydsl": "relaydsl", "jax": "jax.jit", "numpy": "NumPy", "torch": "PyTorch",
           "torch_compile": "torch.compile"}


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


def cell_text(result: Result, column: str, notes: Footnotes, peak: FmaPeak | None = None
              ) -> str:
    """A system's time in a row; for a row that counts its flops also GFLOP/s and, with
    `peak`, their share of the machine's measured fp32 FMA peak on all cores (every system
    computes a GEMM on all of them)."""
    cell = best_of(result, column)
    if cell is None:
        return "—"
    if cell.seconds is not None:
        text = fmt_ms(cell.seconds)
        if result.case.flops:
            gflops = result.case.flops / cell.seconds / 1e9
            share = f", {gflops / peak.all_cores:.0%} of peak" if peak else ""
            text += f" ({gflops:.0f} GF/s{share})"
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
        goal = f"<= {limit:.3g}x PyTorch"
        if not have or torch is None or torch.seconds is None:
            return ratio_text, goal, "—"
        share = ours.seconds / torch.seconds
        return ratio_text, goal, f"{'ok' if share <= limit else 'miss'} ({share:.2f}x)"
    goal = f"<= {limit:.3g}x JAX"
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


def table_rows(results: list[Result], notes: Footnotes, peak: FmaPeak | None = None
               ) -> list[list[str]]:
    shown = columns(results)
    return [[r.case.name, *(cell_text(r, c, notes, peak) for c in shown), *target_check(r)]
            for r in results]


def row_notes(results: list[Result], peak: FmaPeak | None = None) -> list[str]:
    """What each row measured beyond its name, and the time of each JAX layout."""
    out = []
    if peak and any(r.case.flops for r in results):
        out.append(f"GF/s: GFLOP/s; \"of peak\": their share of the fp32 FMA peak measured "
                   f"on all {peak.threads} cores, {peak.all_cores:.0f} GFLOP/s (see the machine)")
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


# ---- RESULTS.md: a section per machine kind ---------------------------------------------------
TITLE = "# Benchmark results"
PREAMBLE = (
    "One section per kind of machine measured: `python benchmarks/run.py` replaces the section "
    "of the machine it runs on and keeps the others, and the sections other scripts write "
    "(benchmarks/figure5.py's). Figures from different machines do not compare; within one "
    "section, compare ratios more than absolute times. See benchmarks/README.md for the method.")
MACHINE_HEADING = "## Measured on "  # followed by the machine kind (benchmarks/machine.py)
# the two sections of a RESULTS.md written before there was a section per machine kind
LEGACY = ("## Machine", "## Results")


def section_body(args: argparse.Namespace, description: list[tuple[str, str]],
                 rows: list[list[str]], notes: Footnotes, results: list[Result],
                 settings: Settings, elapsed: float, busy: str | None,
                 peak: FmaPeak | None) -> str:
    """The Markdown of one machine's section, below its heading."""
    lines = [f"Written by `python benchmarks/run.py {' '.join(sys.argv[1:])}`".rstrip() +
             f" in {elapsed:.0f} s. Medians in milliseconds per call (GEMM also in GFLOP/s and "
             "as a share of the measured FMA peak); lower is better.", "",
             "### Machine", ""]
    lines += [f"- **{k}**: {v}" for k, v in description]
    lines += [f"- **relaydsl target**: `{args.target}` (opt_level 3 where the target takes it)"
              + ("; `--quick` (few repetitions: indicative only)" if args.quick else ""),
              f"- **load average at the end**: {machine.load_average()}",
              f"- **sampling**: warm-up {settings.warmup_s} s per system, samples of at least "
              f"{settings.min_sample_s * 1e3:.0f} ms, {settings.min_rounds}-{settings.max_rounds} "
              "round-robin rounds per row", "",
              "### Results", ""]
    if busy:
        lines += [f"**Warning**: {busy}.", ""]
    lines += [markdown_table(header(results), rows), "", TARGETS_TEXT, ""]
    lines += [f"- {n}" for n in row_notes(results, peak)] + [""]
    if notes.texts:
        lines += ["Notes:", ""]
        lines += [f"{i}. {t}" for i, t in enumerate(notes.texts, 1)] + [""]
    return "\n".join(lines)


def merge_results(old: str, kind: str, body: str) -> str:
    """RESULTS.md's text `old` with `body` as the section of machine `kind`: in place of that
    machine's earlier section, else after the other machines' sections. Every other section
    stays, in its place."""
    parts = sections(upgrade_legacy(old))
    heading = MACHINE_HEADING + kind
    new = f"{heading}\n\n{body.strip()}\n"
    texts = [new if h == heading else text for h, text in parts]
    if heading not in [h for h, _ in parts]:
        machines = [i for i, (h, _) in enumerate(parts) if h.startswith(MACHINE_HEADING)]
        texts.insert(machines[-1] + 1 if machines else 0, new)
    return "\n".join([TITLE, "", PREAMBLE, "", *(t.rstrip() + "\n" for t in texts)])


def upgrade_legacy(text: str) -> str:
    """A RESULTS.md of the time before sections per machine kind (one "## Machine" and one
    "## Results" section, "Written by ..." above them) with those as the section of the
    machine its description names; any other text unchanged."""
    parts = dict(sections(text))
    if not all(h in parts for h in LEGACY):
        return text
    described, results = (parts[h].partition("\n")[2].strip() for h in LEGACY)
    # its CPU line: "- **CPU**: AMD EPYC (LLVM host CPU: znver4)"
    found = re.search(r"^- \*\*CPU\*\*: (.*) \(LLVM host CPU: (\S+)\)$", described, re.M)
    if found:
        model, llvm_cpu = found.groups()
        kind = machine.kind(model, llvm_cpu, machine.widest_vectors_of(llvm_cpu),
                            jit.host_target().triple)
    else:
        line = re.search(r"^- \*\*CPU\*\*: (.*)$", described, re.M)
        kind = line.group(1) if line else "an unknown machine"
    written = [p for p in text[:text.index(parts[LEGACY[0]])].split("\n\n")
               if p.startswith("Written by")]
    body = "\n\n".join([*written, "### Machine", described, "### Results", results])
    section = f"{MACHINE_HEADING}{kind}\n\n{body}\n"
    kept = [section if h == LEGACY[0] else t for h, t in sections(text) if h != LEGACY[1]]
    return "\n".join(t.rstrip() + "\n" for t in kept)


def write_results(path: Path, body: str) -> None:
    old = path.read_text() if path.exists() else ""
    path.write_text(merge_results(old, machine.machine_kind(), body))


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
    # how busy the machine is before the probe adds its own load
    busy, load_at_start = machine.busy_warning(), machine.load_average()
    try:
        peak = (fma_peak.measure(seconds=0.02, repeats=3) if args.quick
                else fma_peak.measure())
    except Exception as e:  # the rows do not need it
        print(f"the FMA peak probe failed: {type(e).__name__}: {e}", file=sys.stderr)
        peak = None
    description = machine.description(peak, WAIT_POLICIES, load_at_start)
    for k, v in description:
        print(f"{k:>24}: {v}")
    print(f"{'relaydsl target':>24}: {args.target}{'  (--quick)' if args.quick else ''}\n")
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
    rows = table_rows(results, notes, peak)
    print("\nmedian ms per call (GEMM also GFLOP/s); relaydsl/JAX is the time ratio\n")
    print(plain_table(header(results), rows))
    print("\n" + TARGETS_TEXT)
    for n in row_notes(results, peak):
        print(f"- {n}")
    for i, t in enumerate(notes.texts, 1):
        print(f"[{i}] {t}")
    if args.output:
        write_results(Path(args.output), section_body(args, description, rows, notes, results,
                                                      settings, elapsed, busy, peak))
        print(f"\nwritten to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
