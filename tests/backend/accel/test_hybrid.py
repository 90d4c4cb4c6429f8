"""A program that is not one network (backend/accel/hybrid.py): its control as native code,
its layers simulated on the accelerator through external kernels; the same values as JAX
and the same report as with the control on the interpreter; a fault in the simulator is
the call's exception (issue 23, item 4); a deep residual chain's shared nodes lowered once
each (issue 24)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from relaydsl import relay
from relaydsl.backend.accel import hybrid
from relaydsl.backend.accel.config import AcceleratorConfig
from relaydsl.backend.accel.hybrid import HybridProgram
from relaydsl.backend.target import get_target
from tests.backend.llvm.helpers import ROOT, residual_chain
from tests.backend.accel.test_program import SMALL, repeated

RTOL, ATOL = 1e-4, 1e-5
RNG = np.random.default_rng(234)


def jax_repeated(x, w, n):
    h = x
    for _ in range(n):
        h = np.tanh(jax.lax.conv_general_dilated(h, w, (1, 1), ((1, 1), (1, 1))))
    return h


def _args():
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    w = (RNG.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32)
    return x, w


def _interpreted(program) -> HybridProgram:
    """The same program with its control on the interpreter."""
    h = program.hybrid
    return HybridProgram(program.mod, program.entry, h.config, h.schedule_kind, h.reason,
                         native=False)


def _counts(r):
    return (r.offloaded_calls, r.host_calls, r.transfer_bytes, r.dram_read_bytes,
            r.dram_write_bytes, r.macs, len(r.groups))


def test_the_control_runs_as_native_code_with_the_interpreters_values_and_report():
    exe = relay.build(repeated, target="accel", config=SMALL)
    program = exe.program
    assert program.hybrid is not None and program.hybrid.path == "native"
    interpreted = _interpreted(program)
    assert interpreted.path == "interpreter"
    x, w = _args()
    for n in (0, 2, 5):
        got = exe(x, w, np.int32(n))
        np.testing.assert_allclose(got, jax_repeated(x, w, n), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(interpreted(x, w, np.int32(n)), got, rtol=1e-6)
        r = exe.report
        assert r.offloaded_calls == n
        assert r.host_calls == 2 * n + 1  # each turn's test and counter, the last test
        assert r.transfer_bytes == n * (2 * x.nbytes + w.nbytes)
        assert _counts(r) == _counts(interpreted.report)


def test_a_tree_lstm_reports_the_same_calls_and_bytes_either_way():
    from relaydsl.datasets.sst import Leaf, Node, Vocabulary
    from relaydsl.frontend.zoo import tree_lstm as zoo

    tree = zoo.tree_lstm(vocab=20, hidden=8, dim=6)
    model = relay.create_model(tree.model, seed=0)
    sentence = Node(4, Node(1, Leaf(1, "a"), Leaf(2, "b")), Node(2, Leaf(3, "b"), Leaf(0, "c")))
    value = zoo.to_adt(sentence, Vocabulary(("<unk>", "a", "b", "c")))
    exe = relay.build(model, target="accel", config=SMALL)
    assert exe.program.hybrid.path == "native"
    interpreted = _interpreted(exe.program)
    scores, loss = exe(value)
    want_scores, want_loss = interpreted(value)
    np.testing.assert_allclose(scores, want_scores, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(loss, want_loss, rtol=RTOL, atol=ATOL)
    assert exe.report.offloaded_calls > 0 and exe.report.host_calls > 0
    assert _counts(exe.report) == _counts(interpreted.report)


def test_a_fault_in_the_simulator_is_the_calls_exception(monkeypatch):
    exe = relay.build(repeated, target="accel", config=SMALL)
    x, w = _args()
    run = hybrid.Simulator.run
    turns = []

    def faulty(self, code, dram):
        turns.append(1)
        if len(turns) == 2:
            raise FloatingPointError("the simulated accelerator faulted")
        return run(self, code, dram)

    monkeypatch.setattr(hybrid.Simulator, "run", faulty)
    with pytest.raises(FloatingPointError, match="simulated accelerator faulted"):
        exe(x, w, np.int32(4))
    assert len(turns) == 2  # the run stopped at the fault
    monkeypatch.setattr(hybrid.Simulator, "run", run)
    np.testing.assert_allclose(exe(x, w, np.int32(1)), jax_repeated(x, w, 1), rtol=RTOL,
                               atol=ATOL)
    assert exe.report.offloaded_calls == 1


def _residual_on_the_host(blocks: int, negations: int = 0):
    """The residual chain built for the accelerator: it computes no float64, so its control
    and that round trip run on the host as native code (the hybrid fallback)."""
    mod, x, want = residual_chain(blocks, negations)
    exe = get_target("accel").build(mod, "main", {"config": AcceleratorConfig.deep_fusion()})
    assert exe.hybrid is not None and exe.hybrid.native is not None
    assert "float64" in exe.hybrid.reason
    return exe, x, want


def test_a_residual_chain_on_the_host_lowers_each_shared_node_once(monkeypatch):
    # each block's input feeds two primitive functions (the first convolution; the second
    # with the sums and tanh): in graph form one node; lowered once per use it took
    # 2^(blocks+1) - 2 kernel calls (issue 24: quantized ResNet-101's fallback)
    blocks = 30
    scheduled = []
    schedule = hybrid.schedule
    monkeypatch.setattr(hybrid, "schedule", lambda *a: scheduled.append(1) or schedule(*a))
    exe, x, want = _residual_on_the_host(blocks)
    np.testing.assert_allclose(exe(x), want, rtol=RTOL, atol=ATOL)
    native = exe.hybrid.native
    assert 2 * blocks <= native.kernel_calls <= 2 * blocks + 2  # + the round trip
    r = exe.report
    assert r.offloaded_calls == 2 * blocks - 1  # the last block's sum fused with the casts
    assert r.offloaded_calls + r.host_calls == native.kernel_calls
    # the blocks' equal primitive functions share their schedules: a handful, not 2 * 30
    assert 1 <= len(scheduled) <= 4


@pytest.mark.slow
def test_a_residual_chain_deeper_than_graph_form_inlines_runs_on_the_host(tmp_path):
    # 340 blocks: 1020 nodes deep, past graph normal form's MAX_DEPTH (a let survives, as in
    # ResNet-101); a crash would take the process, so it runs in a child
    script = textwrap.dedent("""
        import numpy as np
        from tests.backend.accel.test_hybrid import _residual_on_the_host
        exe, x, want = _residual_on_the_host(340)
        print(np.abs(exe(x) - want).max(), np.abs(want).max(), exe.hybrid.native.kernel_calls)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    error, scale, calls = done.stdout.split()
    assert float(scale) > 0.5 and float(error) < ATOL + RTOL * float(scale)
    assert 680 <= int(calls) <= 682
