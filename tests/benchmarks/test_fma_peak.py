"""benchmarks/fma_peak.py: the kernel computes what it says, as one FMA instruction per chain
in the loop, and the probe gives a figure this CPU can reach."""
import re

import numpy as np
import pytest

from benchmarks import fma_peak
from benchmarks.fma_peak import CHAINS, A, B
from relaydsl.backend.llvm import jit

HOST = jit.host_target()
X86_FMA = HOST.triple.startswith("x86_64") and "+fma" in HOST.features.split(",")


def expected_sum(lanes: int, iterations: int) -> float:
    """What the kernel returns: chain k starts at B + k + 1 and is multiplied by A and added
    B to `iterations` times; every lane of every chain is summed."""
    total = 0.0
    for k in range(CHAINS):
        acc = np.float32(B + k + 1)
        for _ in range(iterations):
            acc = np.float32(np.float64(acc) * np.float32(A) + np.float32(B))  # fused: one rounding
        total += lanes * float(acc)
    return total


@pytest.mark.parametrize("iterations", [1, 7, 300])
def test_the_kernel_runs_every_chain_for_every_iteration(iterations):
    lanes = fma_peak.host_lanes()
    got = fma_peak.kernel(lanes)(iterations, A, B)
    assert got == pytest.approx(expected_sum(lanes, iterations), rel=1e-5)


@pytest.mark.skipif(not X86_FMA, reason="reads x86 FMA instructions")
def test_the_loop_is_one_fma_per_chain_on_the_widest_registers():
    lanes = fma_peak.host_lanes()
    assert lanes == jit.register_bits(HOST.features) // 32
    code = jit.assembly(fma_peak.kernel_ir(lanes), HOST)
    register = {16: "zmm", 8: "ymm", 4: "xmm"}[lanes]
    assert len(re.findall(rf"vfmadd\w+\s+%{register}", code)) == CHAINS
    assert len(re.findall(r"vfmadd", code)) == CHAINS
    # a CPU tuned to prefer 256-bit vectors still gets the 512-bit FMAs it has
    narrow = jit.HostTarget.of(HOST.triple, HOST.cpu, HOST.features, 256)
    if lanes == 16:
        assert len(re.findall(r"vfmadd\w+\s+%zmm", jit.assembly(fma_peak.kernel_ir(16),
                                                              narrow))) == CHAINS


def test_the_probe_gives_a_peak_this_cpu_can_reach():
    peak = fma_peak.measure(seconds=0.02, repeats=3)
    assert (peak.lanes, peak.chains) == (fma_peak.host_lanes(), CHAINS)
    assert peak.threads == fma_peak.usable_cores()
    # at least one vector FMA every 2 ns, even sharing the core with another process; at most
    # four FMA units at 6 GHz: a figure above that would mean the loop did not run
    per_cycle = 2 * peak.lanes
    assert per_cycle * 0.5 <= peak.one_thread <= per_cycle * 4 * 6.0
    assert peak.one_thread * 0.5 <= peak.all_cores <= peak.threads * per_cycle * 4 * 6.0
    text = str(peak)
    assert f"{peak.one_thread:.0f} GFLOP/s on one thread" in text
    assert f"on {peak.threads} threads" in text
