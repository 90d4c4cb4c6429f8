"""Random well-typed programs: every target and the JAX oracle agree on every one."""
from hypothesis import HealthCheck, given, settings

from relaydsl.ir import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.structural import structural_equal
from relaydsl.testing import assert_matches_jax
from relaydsl.testing.random_programs import random_programs
from relaydsl.typing import infer_types

EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@EXAMPLES
@given(random_programs())
def test_interpreter_matches_jax_on_random_programs(program_and_inputs):
    fn, inputs = program_and_inputs
    assert_matches_jax(fn, inputs, rtol=1e-5, atol=1e-5)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_llvm_matches_jax_on_random_programs(program_and_inputs):
    fn, inputs = program_and_inputs
    assert_matches_jax(fn, inputs, rtol=1e-5, atol=1e-5, target="llvm")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(control_flow=False))
def test_llvm_plans_match_jax_on_random_straight_line_programs(program_and_inputs):
    fn, inputs = program_and_inputs
    assert_matches_jax(fn, inputs, rtol=1e-5, atol=1e-5, target="llvm")


@settings(max_examples=50, deadline=None)
@given(random_programs())
def test_random_programs_round_trip_through_the_text_format(program_and_inputs):
    fn, _ = program_and_inputs
    mod = infer_types(IRModule.from_expr(fn))
    assert structural_equal(parse(mod.astext()), mod)
