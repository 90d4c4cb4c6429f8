"""Random well-typed programs: every target and the JAX oracle agree on every one."""
import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaydsl.backend.target import get_target
from relaydsl.ir import Call, Function, Grad, IRModule, TensorType, Var
from relaydsl.ir.parser import parse
from relaydsl.ir.structural import structural_equal
from relaydsl.testing import assert_matches_jax, to_jax
from relaydsl.backend.interpreter import to_value
from relaydsl.backend.llvm.native import NativeProgram
from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from relaydsl.testing.random_programs import (
    in_a_loop, random_programs, through_data_and_closures,
)
from relaydsl.typing import infer_types

EXAMPLES = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@EXAMPLES
@given(random_programs())
def test_interpreter_matches_jax_on_random_programs(program_and_inputs):
    fn, inputs = program_and_inputs
    assert_matches_jax(fn, inputs, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_llvm_matches_jax_on_random_programs(program_and_inputs):
    fn, inputs = program_and_inputs
    assert_matches_jax(fn, inputs, rtol=1e-5, atol=1e-5, target="llvm")


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(control_flow=False))
def test_llvm_matches_jax_on_random_straight_line_programs(program_and_inputs):
    fn, inputs = program_and_inputs
    assert_matches_jax(fn, inputs, rtol=1e-5, atol=1e-5, target="llvm")


@settings(max_examples=50, deadline=None)
@given(random_programs())
def test_random_programs_round_trip_through_the_text_format(program_and_inputs):
    fn, _ = program_and_inputs
    mod = infer_types(IRModule.from_expr(fn))
    assert structural_equal(parse(mod.astext()), mod)


def polymorphic_module(fn: Function, inputs: list[np.ndarray]) -> IRModule:
    """@f: the random program, generic in its shape parameters; @forward and @gradient: f and
    grad(f) at the inputs' shapes, so each is one instance of @f (issue 11, item 1)."""
    mod = IRModule()
    f = mod.add("f", fn)
    for name, callee in (("forward", f), ("gradient", Grad(f))):
        params = [Var(p.name_hint, TensorType(a.shape, a.dtype.name))
                  for p, a in zip(fn.params, inputs)]
        mod.add(name, Function(params, Call(callee, params)))
    return infer_types(mod)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=6, scalar_result=True, symbolic=True))
def test_grad_of_random_shape_polymorphic_programs_matches_jax_on_both_targets(
        program_and_inputs):
    assert_grad_matches_jax_on_both_targets(*program_and_inputs)


def assert_grad_matches_jax_on_both_targets(fn: Function, inputs: list[np.ndarray]) -> None:
    """@f's value and gradient at `inputs` (through `polymorphic_module`) equal JAX's on the
    interpreter and on llvm."""
    mod = polymorphic_module(fn, inputs)
    with jax.enable_x64(True):  # float64 programs are differentiated in float64
        value, grads = jax.value_and_grad(to_jax(mod, "forward"),
                                          argnums=tuple(range(len(inputs))))(*inputs)
    tol = 1e-4 if inputs[0].dtype == np.float32 else 1e-9
    for target in ("interp", "llvm"):
        forward = get_target(target).build(mod, "forward", {})(*inputs)
        ours, our_grads = get_target(target).build(mod, "gradient", {})(*inputs)
        np.testing.assert_allclose(forward, value, rtol=tol, atol=tol, err_msg=target)
        np.testing.assert_allclose(ours, value, rtol=tol, atol=tol, err_msg=target)
        for i, (a, e) in enumerate(zip(our_grads, grads)):
            assert a.shape == e.shape, f"{target}: gradient {i} has shape {a.shape}"
            np.testing.assert_allclose(a, e, rtol=tol, atol=tol,
                                       err_msg=f"{target}: gradient {i}")


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(annotate=True))
def test_random_programs_with_annotated_lets_match_jax_on_both_targets(program_and_inputs):
    # Lets annotated with their value's type, some dims relay.Any, and parameters typed only
    # by such a let: graph normal form dropped them, and Any-typed kernels failed on llvm
    # (issue 11, item 3).
    fn, inputs = program_and_inputs
    for target in ("interp", "llvm"):
        assert_matches_jax(fn, inputs, rtol=1e-5, atol=1e-5, target=target)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=6, scalar_result=True, symbolic=True, annotate=True))
def test_grad_of_random_annotated_shape_polymorphic_programs_matches_jax(program_and_inputs):
    assert_grad_matches_jax_on_both_targets(*program_and_inputs)


def run_all(fn: Function, inputs: list[np.ndarray], entry: str = "main"):
    """`fn` wrapped by through_data_and_closures, on llvm (which must run it as native
    code), as native code treating every shape as known only at run time (tensors with
    shape headers, kernels made per shape as it runs), and on the interpreter."""
    mod = infer_types(IRModule.from_expr(through_data_and_closures(fn)))
    program = get_target("llvm").build(mod, entry, {})
    assert program.path == "native"
    args = [to_value(a, p.checked_type) for a, p in zip(inputs, mod[entry].params)]
    at_run_time = NativeProgram(program.mod, entry, shapes_at_run_time=True)
    assert at_run_time.boxed
    return (program(*args), at_run_time(*args),
            get_target("interp").build(mod, entry, {})(*args))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_native_code_matches_jax_on_random_programs_through_data_and_closures(
        program_and_inputs):
    fn, inputs = program_and_inputs
    expected = to_jax(IRModule.from_expr(fn), "main")(*inputs)
    for ours in run_all(fn, inputs):
        ours_leaves = ours if isinstance(ours, tuple) else (ours,)
        expected_leaves = expected if isinstance(expected, tuple) else (expected,)
        for a, e in zip(ours_leaves, expected_leaves, strict=True):
            assert a.shape == np.shape(e) and a.dtype == np.asarray(e).dtype
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=6, scalar_result=True))
def test_native_gradients_match_jax_through_data_and_closures(program_and_inputs):
    fn, inputs = program_and_inputs
    mod = IRModule()
    f = mod.add("f", through_data_and_closures(fn, mod))
    params = [Var(p.name_hint, TensorType(a.shape, a.dtype.name))
              for p, a in zip(fn.params, inputs)]
    mod.add("main", Function(params, Call(Grad(f), params)))
    mod = infer_types(mod)
    with jax.enable_x64(True):
        value, grads = jax.value_and_grad(to_jax(IRModule.from_expr(fn), "main"),
                                          argnums=tuple(range(len(inputs))))(*inputs)
    tol = 1e-4 if inputs[0].dtype == np.float32 else 1e-9
    program = get_target("llvm").build(mod, "main", {})
    assert program.path == "native"
    runs = (("llvm", program),
            ("shapes at run time", NativeProgram(program.mod, "main", shapes_at_run_time=True)),
            ("interp", get_target("interp").build(mod, "main", {})))
    for target, run in runs:
        ours, our_grads = run(*inputs)
        np.testing.assert_allclose(ours, value, rtol=tol, atol=tol, err_msg=target)
        for a, e in zip(our_grads, grads, strict=True):
            np.testing.assert_allclose(a, e, rtol=tol, atol=tol, err_msg=target)


# small buffers, so the accelerator's groups run in tiles
ACCEL = {"config": AcceleratorConfig.deep_fusion(onchip_bytes=8 * KIB), "schedule": "fusion+reuse"}


def assert_accel_matches(fn: Function, inputs: list, reference: Function):
    """`fn` on target="accel" (its control on the host, its op groups on the accelerator)
    equals JAX's value of the first-order `reference` at `inputs`."""
    mod = infer_types(IRModule.from_expr(fn))
    program = get_target("accel").build(mod, "main", ACCEL)
    ours = program(*[to_value(a, p.checked_type) for a, p in zip(inputs, mod["main"].params)])
    expected = to_jax(IRModule.from_expr(reference), "main")(*inputs[:len(reference.params)])
    ours_leaves = ours if isinstance(ours, tuple) else (ours,)
    expected_leaves = expected if isinstance(expected, tuple) else (expected,)
    for a, e in zip(ours_leaves, expected_leaves, strict=True):
        assert a.shape == np.shape(e) and a.dtype == np.asarray(e).dtype
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    return program.report


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_accel_matches_jax_on_random_programs_with_ifs(program_and_inputs):
    fn, inputs = program_and_inputs
    assert_accel_matches(fn, inputs, fn)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_accel_matches_jax_on_random_programs_through_data_and_closures(program_and_inputs):
    fn, inputs = program_and_inputs
    assert_accel_matches(through_data_and_closures(fn), inputs, fn)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(control_flow=False), st.integers(0, 3), st.integers(0, 2**32 - 1))
def test_accel_matches_jax_on_random_programs_with_a_dense_layer_in_a_loop(
        program_and_inputs, turns, seed):
    fn, inputs = program_and_inputs
    looped, reference = in_a_loop(fn, turns, seed)
    report = assert_accel_matches(looped, [*inputs, np.int32(turns)], reference)
    assert report.host is not None  # the loop's control ran on the host
    if inputs[0].dtype == np.float32:  # the accelerator computes in float32 only
        assert report.offloaded_calls >= turns  # each turn's dense layer at least
