"""The first-order adjoint program agrees with the higher-order transform and with JAX."""
import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir import Call, Function, Grad, IRModule, Var
from relaydsl.ir.expr import RefCreate
from relaydsl.ir.visitor import post_order
from relaydsl.testing import to_jax
from relaydsl.testing.random_programs import random_programs
from relaydsl.transform.first_order_gradient import supports
from relaydsl.typing import infer_types
from tests.relaydsl.transform.module_helpers import grads_lowered


def grad_module(fn: Function) -> IRModule:
    mod = IRModule()
    gv = mod.add("f", fn)
    params = [Var(p.name_hint, p.type_annotation) for p in fn.params]
    mod["main"] = Function(params, Call(Grad(gv), params))
    return infer_types(mod)


def uses_references(mod: IRModule) -> bool:
    found = []
    post_order(mod["main"], lambda e: found.append(e) if isinstance(e, RefCreate) else None)
    return bool(found)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(control_flow=False, scalar_result=True))
def test_both_transforms_and_jax_agree_on_random_straight_line_programs(program_and_inputs):
    fn, inputs = program_and_inputs
    mod = grad_module(fn)
    assert supports(mod["f"])
    first = grads_lowered(mod, first_order=True)
    higher = grads_lowered(mod)
    assert not uses_references(first) and uses_references(higher)
    value_1, grads_1 = evaluate(first, *inputs)
    value_h, grads_h = evaluate(higher, *inputs)
    with jax.enable_x64(True):  # float64 programs are differentiated in float64
        expected = jax.grad(to_jax(IRModule.from_expr(fn)),
                            argnums=tuple(range(len(inputs))))(*inputs)
    np.testing.assert_allclose(value_1, value_h, rtol=1e-5)
    tol = 1e-4 if inputs[0].dtype == np.float32 else 1e-9
    for a, b, e in zip(grads_1, grads_h, expected):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)
