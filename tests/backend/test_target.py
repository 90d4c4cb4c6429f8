"""The target registry: names, options, and the same program on every target."""
import re

import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.target import available_targets, get_target


@relay
def scaled_tanh(x: Tensor[Float, 4], s: Float) -> Tensor[Float, 4]:
    return relay.tanh(x) * s


def test_registered_targets_and_their_options():
    assert {"accel", "interp", "llvm"} <= set(available_targets())
    assert get_target("llvm").options == {"opt_level": 3}
    assert get_target("accel").options == {"opt_level": 3, "config": None,
                                           "schedule": "fusion+reuse"}
    with pytest.raises(ValueError,
                       match="unknown target 'tpu'; available: 'accel', 'interp', 'llvm'"):
        get_target("tpu")


@pytest.mark.parametrize("target", ["interp", "llvm", "accel"])
def test_every_target_runs_the_same_program(target):
    x = np.array([-2.0, -0.5, 0.5, 2.0], np.float32)
    out = relay.build(scaled_tanh, target=target)(x, np.float32(3.0))
    np.testing.assert_allclose(out, np.tanh(x) * 3.0, rtol=1e-6)


def test_build_is_cached_per_target_and_options():
    assert relay.build(scaled_tanh, target="llvm") is relay.build(scaled_tanh, target="llvm")
    assert relay.build(scaled_tanh, target="llvm", opt_level=0) is not \
        relay.build(scaled_tanh, target="llvm")


@relay
def views(x: Tensor[Float, (2, 3)]) -> tuple[Tensor[Float, (2, 3)], Tensor[Float, (3, 2)]]:
    return x, relay.reshape(x, newshape=(3, 2))


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_results_never_share_memory_with_the_arguments(target):
    # issue 11: interp returned the caller's array for an identity (and a view for a reshape)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    same, reshaped = relay.build(views, target=target)(x)
    assert not np.shares_memory(same, x) and not np.shares_memory(reshaped, x)
    same[0, 0] = reshaped[0, 0] = 100.0
    np.testing.assert_array_equal(x, np.arange(6, dtype=np.float32).reshape(2, 3))


POLYMORPHIC = """
def @main(%c: bool, %y: float32) -> (float32, float32, int32) {
  let %apply = fn (%f: fn(float32) -> float32, %v: float32) -> float32 { %f(%v) };
  let %g = if (%c) { fn<a>(%x: a) -> a { %x } } else { fn (%x: float32) -> float32 { exp(%x) } };
  (%apply(fn<a>(%x: a) -> a { %x }, %y), %g(%y), @length(Nil()))
}
"""


@pytest.mark.parametrize("target", ["interp", "llvm"])
@pytest.mark.parametrize("c", [True, False])
def test_polymorphic_function_literals_and_an_empty_list_of_any_type_run(target, c):
    # issue 11, item 15: type checking rejected both (as TVM does not)
    from relaydsl.ir.parser import parse
    from relaydsl.typing import infer_types

    program = get_target(target).build(infer_types(parse(POLYMORPHIC)), "main", {})
    applied, joined, length = program(np.bool_(c), np.float32(0.5))
    assert applied == np.float32(0.5) and length == 0
    np.testing.assert_allclose(joined, 0.5 if c else np.exp(np.float32(0.5)), rtol=1e-6)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_bias_add_on_unknown_dims_follows_the_relation_on_every_target(target):
    # issue 11, item 15: interp broadcast a 1-element bias over 3 channels, llvm rejected it
    from relaydsl.errors import RelayError
    from relaydsl.ir.parser import parse
    from relaydsl.typing import infer_types

    text = """def @main(%x: Tensor[(?, ?, ?), float32], %b: Tensor[(?,), float32]) {
      bias_add(%x, %b, axis=1)
    }"""
    program = get_target(target).build(infer_types(parse(text)), "main", {})
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(program(x, b), x + b[:, None])
    with pytest.raises(RelayError, match=re.escape("data.shape[1] = 3 elements")):
        program(x, np.ones(1, np.float32))
