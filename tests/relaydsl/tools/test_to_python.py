"""relay.to_python: the typed program as Python/NumPy source that runs and gives the
compiled function's values (issue 13, item 6)."""
from __future__ import annotations

import ast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.target import get_target
from relaydsl.ir import IRModule
from relaydsl.testing import to_jax
from relaydsl.testing.random_programs import random_programs
from relaydsl.tools.to_python import python_source
from relaydsl.typing import infer_types

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run_source(fn, *args):
    """Exec relay.to_python(fn) in a fresh namespace and call the entry with `args`."""
    source = relay.to_python(fn)
    namespace: dict = {}
    exec(compile(source, f"<to_python {fn.__name__}>", "exec"), namespace)
    return namespace[fn.__name__](*args), source


def assert_same(rendered, compiled, jax_value, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(rendered, compiled, rtol=rtol, atol=atol)
    np.testing.assert_allclose(rendered, np.asarray(jax_value), rtol=rtol, atol=atol)


@relay
def mlp(x: Tensor[Float, (4, 8)], w1: Tensor[Float, (16, 8)], b1: Tensor[Float, (16,)],
        w2: Tensor[Float, (3, 16)], b2: Tensor[Float, (3,)]) -> Tensor[Float, (4, 3)]:
    hidden = relay.relu(relay.dense(x, w1) + b1)
    return relay.softmax(relay.dense(hidden, w2) + b2)


def test_an_mlp_forward_renders_one_statement_per_let_and_runs_to_the_same_values():
    args = (rand(4, 8), rand(16, 8), rand(16), rand(3, 16), rand(3))
    rendered, source = run_source(mlp, *args)
    x, w1, b1, w2, b2 = args
    expected = jax.nn.softmax(jax.nn.relu(x @ w1.T + b1) @ w2.T + b2, axis=-1)
    assert_same(rendered, mlp(*args), expected)
    # readable: the def is annotated with its Relay types; each let is one statement
    (entry,) = [s for s in ast.parse(source).body
                if isinstance(s, ast.FunctionDef) and s.name == "mlp"]
    assert [a.arg for a in entry.args.args] == ["x", "w1", "b1", "w2", "b2"]
    assert ast.literal_eval(entry.args.args[0].annotation) == "Tensor[(4, 8), float32]"
    assert "dense = numpy_op('dense')" in source
    assert "dense(x, w1)" in source  # attributes at their defaults are left out
    lets = mlp.astext().count("let %")
    assigns = sum(isinstance(s, ast.Assign) for s in entry.body)
    assert assigns == lets and isinstance(entry.body[-1], ast.Return)


@relay
def factorial(n: Int) -> Int:
    if n <= 1:
        return 1
    return n * factorial(n - 1)


@relay
def collatz_steps(n: Int) -> Int:
    steps = 0
    while n > 1:
        if n - n / 2 * 2 == 0:
            n = n / 2
        else:
            n = 3 * n + 1
        steps = steps + 1
    return steps


@pytest.mark.parametrize("n", [0, 1, 5, 7])
def test_recursion_and_loops_run_as_python_functions(n):
    rendered, source = run_source(factorial, np.array(n, "int32"))
    assert int(rendered) == int(factorial(n)) == [1, 1, 2, 6, 24, 120, 720, 5040][n]
    assert "return multiply(n, factorial(subtract(n, " in source  # by its name
    steps, _ = run_source(collatz_steps, np.array(n, "int32"))
    assert int(steps) == int(collatz_steps(n))


@relay
def closures_and_tuples(x: Tensor[Float, (3,)]) -> tuple[Tensor[Float, (3,)], Tensor[Float, (3,)]]:
    def adder(k):
        return lambda y: y + k

    add_x = adder(x)
    pair = (relay.tanh(x), add_x(x))
    if relay.sum(x) > 0.0:
        result = (pair[1], pair[0])
    else:
        result = pair
    return result


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_closures_tuples_and_ifs(sign):
    x = sign * np.abs(rand(3))
    (a, b), source = run_source(closures_and_tuples, x)
    ca, cb = closures_and_tuples(x)
    first, second = jnp.tanh(x), x + x
    expected = (second, first) if sign > 0 else (first, second)
    assert_same(a, ca, expected[0])
    assert_same(b, cb, expected[1])
    assert "lambda" in source  # the returned closure is a lambda
    assert "if " in source


@relay
def list_sum(x: Tensor[Float, (3,)], y: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
    xs = relay.Cons(x, relay.Cons(y, relay.Cons(x * y, relay.Nil())))
    total = x * 0.0
    for v in relay.map(relay.tanh, xs):
        total = total + v
    match xs:
        case relay.Cons(h, _):
            total = total + h
        case _:
            total = total * 2.0
    return total


def test_prelude_lists_and_match():
    x, y = rand(3), rand(3)
    rendered, source = run_source(list_sum, x, y)
    expected = jnp.tanh(x) + jnp.tanh(y) + jnp.tanh(x * y) + x
    assert_same(rendered, list_sum(x, y), expected)
    assert "class Cons(NamedTuple):" in source and "isinstance(" in source
    assert "def map(" in source  # the prelude's map, reached from the entry


@relay
def square_grad(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
    return relay.grad(lambda v: relay.sum(v * v))(x)[1][0]


def test_a_gradient_renders_as_its_ad_program():
    x = rand(3)
    rendered, _ = run_source(square_grad, x)
    expected = jax.grad(lambda v: jnp.sum(v * v))(x)
    assert_same(rendered, square_grad(x), expected)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_random_programs_rendered_as_python_match_jax_and_the_interpreter(program_and_inputs):
    fn, inputs = program_and_inputs
    mod = infer_types(IRModule.from_expr(fn))
    namespace: dict = {}
    exec(python_source(mod), namespace)
    ours = namespace["main"](*inputs)
    interpreted = get_target("interp").build(mod, "main", {})(*inputs)
    expected = to_jax(mod, "main")(*inputs)
    leaves = [jax.tree_util.tree_leaves(v) for v in (ours, interpreted, expected)]
    assert len(leaves[0]) == len(leaves[1]) == len(leaves[2])
    for a, b, c in zip(*leaves):
        a = np.asarray(a)
        assert a.dtype == np.asarray(c).dtype and a.shape == np.asarray(c).shape
        np.testing.assert_array_equal(a, b)  # the same NumPy references, in the same order
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)
