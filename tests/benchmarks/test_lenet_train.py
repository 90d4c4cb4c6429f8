"""The LeNet training-step row (benchmarks/workloads/lenet_train.py): after one step from the
same parameters, relaydsl's, PyTorch's and JAX's parameters agree, as the benchmark checks
before timing; and a second step moves on from the first (the systems keep their state)."""
import numpy as np

from benchmarks.workloads import lenet_train
from tests.benchmarks.helpers import assert_systems_agree


def test_one_step_of_every_system_gives_jax_s_parameters():
    runners = assert_systems_agree(lenet_train.case())
    params = lenet_train.data()[2]
    second = [p.copy() for p in runners["relaydsl"]()]
    third = runners["relaydsl"]()
    assert not np.allclose(second[0], params[0]) and not np.allclose(third[0], second[0])
