"""Elementwise/broadcast ops against JAX."""
import jax.numpy as jnp
import numpy as np
import pytest

from tests.relaydsl.op.harness import OpCase, check_case

rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


CASES = [
    OpCase("negative", [f32(3, 4)], jnp.negative),
    OpCase("exp", [f32(5)], jnp.exp),
    OpCase("add", [f32(3, 1), f32(4)], jnp.add),
    OpCase("subtract", [f32(2, 3), f32(2, 3)], jnp.subtract),
    OpCase("equal", [np.array([1, 2, 3], np.int32), np.array([1, 0, 3], np.int32)], jnp.equal),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_matches_jax(case):
    check_case(case)
