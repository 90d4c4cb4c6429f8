"""The machine a benchmark run measures: its kind, which names its section of RESULTS.md, and
its description (CPU, vector widths, the measured fp32 FMA peak, software, load).

Figures from different CPUs do not compare, and a run on one kind of machine must not
overwrite the table measured on another: RESULTS.md keeps one section per machine kind,
named by ``machine_kind()``: the CPU's model string (with its vendor), LLVM's name for the
CPU and its widest vectors, e.g. "Intel(R) Xeon(R) Processor (rocketlake, AVX-512)". VMs
often hide the real model behind a generic string ("AMD EPYC", "Intel(R) Xeon(R) Processor"):
LLVM's name, which it derives from the CPU's features, tells the generation apart, and the
vector ISA says what the VM lets code use.
"""
from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Iterable
from pathlib import Path

from benchmarks.fma_peak import FmaPeak, usable_cores
from relaydsl.backend.llvm import jit

VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}


# ---- what kind of machine --------------------------------------------------------------------
def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model string from /proc/cpuinfo (or `cpuinfo`), its vendor's name in front
    where the string lacks it."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block describes them all
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    model = fields.get("model name") or platform.processor() or "unknown CPU"
    vendor = VENDORS.get(fields.get("vendor_id", ""), fields.get("vendor_id", ""))
    if vendor and vendor.lower() not in model.lower():
        model = f"{vendor} {model}"
    return model


def vector_isa(bits: int, triple: str) -> str:
    """A name for vectors `bits` wide on `triple`'s architecture. 256 bits are named AVX2, as
    on every x86 CPU since 2013 (LLVM's CPU name in the kind tells an older one apart)."""
    if triple.startswith(("x86_64", "i386", "i686")):
        return {512: "AVX-512", 256: "AVX2"}.get(bits, "SSE")
    return f"{bits}-bit vectors"


def kind(model: str, llvm_cpu: str, widest_bits: int, triple: str) -> str:
    return f"{model} ({llvm_cpu}, {vector_isa(widest_bits, triple)})"


def machine_kind() -> str:
    """This machine's kind: the heading of its section of RESULTS.md."""
    host = jit.host_target()
    return kind(cpu_model(), host.cpu, jit.register_bits(host.features), host.triple)


def widest_vectors_of(llvm_cpu: str) -> int:
    """The widest vector registers (bits) of the CPU LLVM calls `llvm_cpu`, which need not be
    this one: the registers a 512-bit add becomes in the code LLVM makes for it. For a
    machine known only by name (a description written before RESULTS.md had the widths)."""
    add = ("define void @add(ptr %p) #0 {\n  %v = load <16 x float>, ptr %p\n"
           "  %w = fadd <16 x float> %v, %v\n  store <16 x float> %w, ptr %p\n  ret void\n}\n"
           # without it, a CPU whose tuning prefers 256-bit vectors would split the add
           'attributes #0 = { "min-legal-vector-width"="512" }\n')
    # no features: the target machine takes the named CPU's own
    code = jit.assembly(add, jit.HostTarget(jit.host_target().triple, llvm_cpu, "", 512))
    return 512 if "zmm" in code else 256 if "ymm" in code else 128


# ---- its description ---------------------------------------------------------------------------
def description(peak: FmaPeak | None, variables: Iterable[str], load_at_start: str
                ) -> list[tuple[str, str]]:
    """(what, value) lines describing the machine and the software; `variables`: environment
    variables of the libraries' threads to report besides the BLAS's own."""
    host = jit.host_target()
    setting = os.environ.get("RELAYDSL_VECTOR_WIDTH", "unset")
    rows = [("machine kind", machine_kind()),
            ("CPU", f"{cpu_model()} (LLVM host CPU: {host.cpu})"),
            ("cores", f"{os.cpu_count()} logical, {usable_cores()} usable by this process"),
            ("vector width", f"{host.vector_bits}-bit vectors in relaydsl's compiled code "
                             f"(RELAYDSL_VECTOR_WIDTH={setting}); the CPU's widest: "
                             f"{jit.register_bits(host.features)} bits"),
            ("fp32 FMA peak (measured)", str(peak) if peak else "not measured"),
            ("Python", platform.python_version())]
    try:
        import llvmlite
        import llvmlite.binding as llvm

        version = ".".join(map(str, llvm.llvm_version_info))
        rows.append(("llvmlite / LLVM", f"{llvmlite.__version__} / {version}"))
    except Exception as e:
        rows.append(("llvmlite / LLVM", f"not available ({type(e).__name__})"))
    import numpy as np

    rows.append(("NumPy", np.__version__))
    rows.append(("BLAS", blas_description(variables)))
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
    rows.append(("load average at the start", load_at_start))
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
    if one < 0.5:
        return None
    return (f"the load average is {one:.2f} on {usable_cores()} cores before the run: other "
            "processes compete for the cores and distort every figure (multi-threaded BLAS, "
            "XLA and OpenMP suffer most); ratios within the run are the least affected")


def blas_description(variables: Iterable[str]) -> str:
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
                             *variables))
    return "; ".join(parts)
