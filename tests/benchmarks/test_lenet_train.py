"""The LeNet training-step row (benchmarks/workloads/lenet_train.py): after one step from the
same parameters, relaydsl's, PyTorch's and JAX's parameters agree, as the benchmark checks
before timing; and a second step moves on from the first (the systems keep their state)."""
import importlib.util

import numpy as np

from benchmarks import harness
from benchmarks.workloads import lenet_train


def test_one_step_of_every_system_gives_jax_s_parameters():
    case = lenet_train.case()
    case.setups.pop("torch_compile")  # its first compilation alone takes tens of seconds
    if importlib.util.find_spec("torch") is None:
        case.setups.pop("torch")
    cells, runners = harness.check(case)
    problems = {k: c.footnote for k, c in cells.items() if c.status != "ok"}
    assert not problems, problems
    params = lenet_train.data()[2]
    second = [p.copy() for p in runners["relaydsl"]()]
    third = runners["relaydsl"]()
    assert not np.allclose(second[0], params[0]) and not np.allclose(third[0], second[0])
