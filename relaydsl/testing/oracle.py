"""The JAX oracle: a typed first-order Relay program translated into a JAX function.

Every op's ``jax_lower`` gives its meaning in jax.numpy; ``let``, tuples,
projections, ``if`` (on the concrete condition), constants and calls of
first-order globals translate directly. The result is an ordinary Python
function of JAX arrays: compare it with any of our backends through
``assert_matches_jax``.

>>> import numpy as np
>>> from relaydsl.ir import Var, Function, Call, Op, TensorType
>>> x = Var("x", TensorType((3,)))
>>> f = Function([x], Call(Op.get("exp"), [x]))
>>> assert_matches_jax(f, [np.zeros(3, np.float32)])    # checked against JAX; ours returned
array([1., 1., 1.], dtype=float32)
"""
from __future__ import annotations

from typing import Any as AnyValue, Callable, Sequence

import numpy as np

from relaydsl.backend.interpreter import to_value
from relaydsl.backend.target import get_target
from relaydsl.errors import RelayError
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprFunctorWithArgs
from relaydsl.op.lazy_jax import jax, jnp  # JAX loads on first use: it is the oracle, not a runtime
from relaydsl.typing import infer_types


class OracleError(RelayError):
    """The program uses a construct the JAX oracle does not translate."""


def to_jax(program: IRModule | Function, entry: str = "main") -> Callable[..., AnyValue]:
    """A Python function over JAX arrays computing `program` (its `entry` global for a module).

    It runs as one ``jax.jit``-compiled function where the program traces, and op by op where
    it branches on a computed value (an ``if``, recursion): eager JAX compiles each op for each
    new shape, ~0.15 s a time, which made the oracle most of a random-program test's time."""
    mod = program if isinstance(program, IRModule) else IRModule.from_expr(program)
    fn = mod[entry]

    def translate(*args: AnyValue) -> AnyValue:
        return _Translator(mod).call(fn, list(args))

    compiled = jax.jit(translate)
    traces = True  # until one call has shown that the program needs concrete values

    def run(*args: AnyValue) -> AnyValue:
        nonlocal traces
        with jax.enable_x64(True):  # float64/int64 programs stay 64-bit, as in NumPy
            if traces:
                try:
                    return compiled(*args)
                except _needs_concrete_values():
                    traces = False
            return translate(*args)

    return run


def _needs_concrete_values() -> tuple[type[Exception], ...]:
    """What tracing raises where the program reads a value to choose what to compute."""
    e = jax.errors
    return (e.ConcretizationTypeError, e.TracerArrayConversionError,
            e.TracerIntegerConversionError, e.NonConcreteBooleanIndexError)


class _Translator(ExprFunctorWithArgs[[dict[Var, AnyValue]], AnyValue]):
    """``visit(e, env)``: the JAX value of `e`, its variables' values in `env`."""

    def __init__(self, mod: IRModule):
        self.mod = mod

    def call(self, fn: Function, args: list[AnyValue]) -> AnyValue:
        if len(args) != len(fn.params):
            raise OracleError(f"the function takes {len(fn.params)} arguments, got {len(args)}")
        env: dict[Var, AnyValue] = {}
        for p, a in zip(fn.params, args):
            env[p] = jnp.asarray(a) if not isinstance(a, tuple) else a
        return self.visit(fn.body, env)

    def unsupported(self, expr: Expr) -> Exception:
        return OracleError(
            f"the JAX oracle translates first-order programs (ops, let, tuples, if, calls of "
            f"globals); got {type(expr).__name__}",
            expr.span,
        )

    def visit_let(self, let: Let, env: dict[Var, AnyValue]) -> AnyValue:
        expr: Expr = let
        while isinstance(expr, Let):  # iterative over let chains
            env[expr.var] = self.visit(expr.value, env)
            expr = expr.body
        return self.visit(expr, env)

    def visit_var(self, var: Var, env: dict[Var, AnyValue]) -> AnyValue:
        return env[var]

    def visit_constant(self, c: Constant, env: dict[Var, AnyValue]) -> AnyValue:
        return jnp.asarray(c.data)

    def visit_tuple(self, t: Tuple, env: dict[Var, AnyValue]) -> AnyValue:
        return tuple(self.visit(f, env) for f in t.fields)

    def visit_tuple_getitem(self, t: TupleGetItem, env: dict[Var, AnyValue]) -> AnyValue:
        return self.visit(t.tuple_value, env)[t.index]

    def visit_if(self, i: If, env: dict[Var, AnyValue]) -> AnyValue:
        cond = self.visit(i.cond, env)
        return self.visit(i.true_branch if bool(cond) else i.false_branch, env)

    def visit_call(self, call: Call, env: dict[Var, AnyValue]) -> AnyValue:
        if isinstance(call.op, Op):
            args = [self.visit(a, env) for a in call.args]
            return call.op.definition.jax_lower(*args, **call.attrs)
        if isinstance(call.op, GlobalVar):
            args = [self.visit(a, env) for a in call.args]
            return self.call(self.mod[call.op], args)
        raise self.unsupported(call)


def _leaves(x: AnyValue) -> list[AnyValue]:
    if isinstance(x, (tuple, list)):
        return [leaf for item in x for leaf in _leaves(item)]
    return [x]


def assert_matches_jax(program: IRModule | Function, args: Sequence[AnyValue], *,
                       rtol: float = 1e-5, atol: float = 1e-6, target: str = "interp",
                       entry: str = "main") -> AnyValue:
    """Run `program` on `target` and through the JAX oracle; assert equal shapes, dtypes and values.

    Returns our result.
    """
    mod = program if isinstance(program, IRModule) else IRModule.from_expr(program)
    infer_types(mod)
    try:
        compiled = get_target(target).build(mod, entry, {})
    except ValueError as e:
        raise OracleError(str(e)) from None
    params = mod[entry].params
    ours = compiled(*[to_value(a, p.checked_type) for a, p in zip(args, params)])
    expected = to_jax(mod, entry)(*args)
    ours_leaves, expected_leaves = _leaves(ours), _leaves(expected)
    assert len(ours_leaves) == len(expected_leaves), (
        f"{len(ours_leaves)} outputs, JAX gives {len(expected_leaves)}")
    for i, (a, e) in enumerate(zip(ours_leaves, expected_leaves)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, f"output {i}: shape {a.shape}, JAX gives {e.shape}"
        assert a.dtype == e.dtype, f"output {i}: dtype {a.dtype}, JAX gives {e.dtype}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"output {i}")
    return ours
