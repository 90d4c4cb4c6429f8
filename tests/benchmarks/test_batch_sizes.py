"""The batch-sizes row (benchmarks/workloads/batch_sizes.py): each system's sweep of new
batch sizes checks every output against NumPy's (a wrong one is reported, not timed), and
relaydsl's sweep runs on its code of run-time shapes after the first call."""
import numpy as np
import pytest

from benchmarks.workloads import batch_sizes


@pytest.mark.parametrize("system", ["relaydsl", "jax", "numpy"])
def test_a_sweep_checks_every_size_and_times_it(system):
    got = batch_sizes.child(system, "llvm")
    assert set(got) == {"first", "again"}, got
    assert got["first"] > 0 and got["again"] > 0


def test_a_wrong_result_is_reported_not_timed(monkeypatch):
    real = batch_sizes._forward

    def off_by_one(system, target):
        f = real(system, target)
        return lambda x, *p: np.asarray(f(x, *p)) + (1.0 if x.shape[0] == 17 else 0.0)

    monkeypatch.setattr(batch_sizes, "_forward", off_by_one)
    got = batch_sizes.child("numpy", "llvm")
    assert got.keys() == {"wrong"} and got["wrong"].startswith("batch 17: max error 1.00e+00")
