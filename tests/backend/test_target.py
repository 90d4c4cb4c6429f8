"""The target registry: names, options, and the same program on every target."""
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.target import available_targets, get_target


@relay
def scaled_tanh(x: Tensor[Float, 4], s: Float) -> Tensor[Float, 4]:
    return relay.tanh(x) * s


def test_registered_targets_and_their_options():
    assert {"interp", "llvm"} <= set(available_targets())
    assert get_target("llvm").options == {"opt_level": 3}
    with pytest.raises(ValueError, match="unknown target 'tpu'; available: 'interp', 'llvm'"):
        get_target("tpu")


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_every_target_runs_the_same_program(target):
    x = np.array([-2.0, -0.5, 0.5, 2.0], np.float32)
    out = relay.build(scaled_tanh, target=target)(x, np.float32(3.0))
    np.testing.assert_allclose(out, np.tanh(x) * 3.0, rtol=1e-6)


def test_build_is_cached_per_target_and_options():
    assert relay.build(scaled_tanh, target="llvm") is relay.build(scaled_tanh, target="llvm")
    assert relay.build(scaled_tanh, target="llvm", opt_level=0) is not \
        relay.build(scaled_tanh, target="llvm")
