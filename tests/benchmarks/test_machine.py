"""The machine a benchmark run describes (benchmarks/machine.py), and RESULTS.md's sections per
machine kind (benchmarks/run.py): a run replaces its own machine's section only."""
import pytest

from benchmarks import machine, run
from benchmarks.fma_peak import FmaPeak
from benchmarks.harness import Case, Cell, Result, sections
from relaydsl.backend.llvm import jit

HOST = jit.host_target()
ON_X86 = HOST.triple.startswith("x86_64")
AMD = "AMD EPYC (znver4, AVX-512)"
INTEL = "Intel(R) Xeon(R) Processor (rocketlake, AVX-512)"
FIGURE5 = "## Figure 5: speedup of layered passes\n\nfigure 5's table\n"
# RESULTS.md as run.py wrote it before it kept a section per machine kind
LEGACY = """# Benchmark results

Written by `python benchmarks/run.py` in 53 s. Medians in milliseconds per call.

## Machine

- **CPU**: AMD EPYC (LLVM host CPU: znver4)
- **cores**: 2 logical, 2 usable by this process

## Results

| row | relaydsl |
|---|---|
| GEMM 512 | 1.35 (199 GF/s) |

""" + FIGURE5


def test_the_cpu_model_comes_with_its_vendor():
    intel = ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) "
             "Processor\n\nprocessor\t: 1\nmodel name\t: another\n")
    assert machine.cpu_model(intel) == "Intel(R) Xeon(R) Processor"
    qemu = "vendor_id\t: AuthenticAMD\nmodel name\t: QEMU Virtual CPU version 2.5+\n"
    assert machine.cpu_model(qemu) == "AMD QEMU Virtual CPU version 2.5+"


def test_this_machine_s_kind_names_its_cpu_and_widest_vectors():
    kind = machine.machine_kind()
    widest = jit.register_bits(HOST.features)
    assert kind.startswith(machine.cpu_model() + f" ({HOST.cpu}, ")
    if ON_X86:
        assert kind.endswith({512: "AVX-512)", 256: "AVX2)", 128: "SSE)"}[widest])


@pytest.mark.skipif(not ON_X86, reason="LLVM's x86 CPU names")
def test_the_widest_vectors_of_a_cpu_known_by_name():
    assert machine.widest_vectors_of("znver4") == 512
    assert machine.widest_vectors_of("sapphirerapids") == 512  # tuned to prefer 256 bits
    assert machine.widest_vectors_of("znver3") == 256
    assert machine.widest_vectors_of("x86-64") == 128


def test_the_description_gives_the_vector_widths_and_the_measured_peak():
    peak = FmaPeak(lanes=16, chains=12, threads=2, one_thread=231.4, all_cores=452.6)
    rows = dict(machine.description(peak, ["OMP_WAIT_POLICY"], "0.10 (1 min)"))
    assert rows["machine kind"] == machine.machine_kind()
    assert rows["CPU"] == f"{machine.cpu_model()} (LLVM host CPU: {HOST.cpu})"
    width = rows["vector width"]
    assert width.startswith(f"{HOST.vector_bits}-bit vectors in relaydsl's compiled code")
    assert width.endswith(f"the CPU's widest: {jit.register_bits(HOST.features)} bits")
    assert rows["fp32 FMA peak (measured)"].startswith(
        "231 GFLOP/s on one thread, 453 GFLOP/s on 2 threads (12 independent chains of "
        "<16 x float>")
    assert "OMP_WAIT_POLICY=" in rows["BLAS"]
    assert rows["load average at the start"] == "0.10 (1 min)"


def test_gemm_cells_give_their_share_of_the_peak():
    case = Case("GEMM 1000", "gemm", {}, flops=2e9)
    result = Result(case, {"relaydsl": Cell(seconds=0.01)})
    peak = FmaPeak(lanes=16, chains=12, threads=2, one_thread=210.0, all_cores=400.0)
    notes = run.Footnotes()
    assert run.cell_text(result, "relaydsl", notes, peak) == "10.0 (200 GF/s, 50% of peak)"
    assert run.cell_text(result, "relaydsl", notes) == "10.0 (200 GF/s)"
    assert "fp32 FMA peak measured on all 2 cores, 400 GFLOP/s" in run.row_notes([result], peak)[0]


def headings(text):
    return [h for h, _ in sections(text)]


def section(text, heading):
    (body,) = [t for h, t in sections(text) if h == heading]
    return body


@pytest.mark.skipif(not ON_X86, reason="the legacy file names an x86 CPU")
def test_a_run_on_another_machine_keeps_the_first_machine_s_table():
    on_intel = run.merge_results(LEGACY, INTEL, "Intel's table")
    assert on_intel.startswith(f"{run.TITLE}\n\n{run.PREAMBLE}\n\n")
    # the legacy sections became the section of the machine they describe, named from its
    # description; the new machine's comes after it, Figure 5's stays last and unchanged
    assert headings(on_intel) == [run.MACHINE_HEADING + AMD, run.MACHINE_HEADING + INTEL,
                                  FIGURE5.splitlines()[0]]
    amd = section(on_intel, run.MACHINE_HEADING + AMD)
    for kept in ("Written by `python benchmarks/run.py` in 53 s.", "### Machine",
                 "- **CPU**: AMD EPYC (LLVM host CPU: znver4)", "### Results",
                 "| GEMM 512 | 1.35 (199 GF/s) |"):
        assert kept in amd
    assert section(on_intel, run.MACHINE_HEADING + INTEL).strip().endswith("Intel's table")
    assert on_intel.endswith(FIGURE5)

    # a rerun on the first machine replaces its section, in its place, and only it
    again = run.merge_results(on_intel, AMD, "AMD's new table")
    assert headings(again) == headings(on_intel)
    assert section(again, run.MACHINE_HEADING + AMD).strip().endswith("AMD's new table")
    assert "1.35 (199 GF/s)" not in again
    assert section(again, run.MACHINE_HEADING + INTEL) == section(on_intel,
                                                                  run.MACHINE_HEADING + INTEL)
    assert again.endswith(FIGURE5)
    # the same run written twice gives the same file
    assert run.merge_results(again, AMD, "AMD's new table") == again


def test_the_first_run_writes_the_title_and_its_own_section(tmp_path):
    path = tmp_path / "RESULTS.md"
    run.write_results(path, "first")
    text = path.read_text()
    assert headings(text) == [run.MACHINE_HEADING + machine.machine_kind()]
    assert text == f"{run.TITLE}\n\n{run.PREAMBLE}\n\n{headings(text)[0]}\n\nfirst\n"
    # another machine's section and figure 5's stay when this machine runs again
    path.write_text(run.merge_results(text, "Other CPU (other, AVX2)", "other") + "\n" + FIGURE5)
    run.write_results(path, "second")
    after = path.read_text()
    assert headings(after) == [run.MACHINE_HEADING + machine.machine_kind(),
                               run.MACHINE_HEADING + "Other CPU (other, AVX2)",
                               FIGURE5.splitlines()[0]]
    assert "second" in after and "first" not in after and "other\n" in after
