"""A program that is not one network (backend/accel/hybrid.py): its control as native code,
its layers simulated on the accelerator through external kernels; the same values as JAX
and the same report as with the control on the interpreter; a fault in the simulator is
the call's exception (issue 23, item 4)."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from relaydsl import relay
from relaydsl.backend.accel import hybrid
from relaydsl.backend.accel.hybrid import HybridProgram
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
