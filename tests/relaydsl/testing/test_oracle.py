"""The JAX oracle: translations checked on known programs; unsupported constructs are refused."""
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.ir import (
    Call,
    Function,
    If,
    IRModule,
    Let,
    Op,
    RefCreate,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    const,
)
from relaydsl.testing import OracleError, assert_matches_jax, to_jax
from relaydsl.testing.patching import patch_op


def op(name, *args, **attrs):
    return Call(Op.get(name), args, attrs)


def test_translation_of_lets_tuples_and_if_matches_handwritten_jax():
    x, y = Var("x", TensorType((3,))), Var("y", TensorType((3,)))
    s, t = Var("s"), Var("t")
    body = Let(s, op("add", x, y),
               Let(t, Tuple([s, op("tanh", s)]),
                   If(op("greater", op("sum", x), const(0.0)),
                      TupleGetItem(t, 1), op("negative", s))))
    fn = Function([x, y], body)
    for a in ([1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]):
        a = np.array(a, np.float32)
        b = np.array([0.5, 0.25, 0.125], np.float32)
        expected = jnp.tanh(a + b) if a.sum() > 0 else -(a + b)
        np.testing.assert_allclose(to_jax(fn)(a, b), expected, rtol=1e-6)
        assert_matches_jax(fn, [a, b])


def test_calls_of_globals_translate():
    mod = IRModule()
    p = Var("p", TensorType((2,)))
    sq = mod.add("sq", Function([p], op("multiply", p, p)))
    x = Var("x", TensorType((2,)))
    mod["main"] = Function([x], Call(sq, [Call(sq, [x])]))
    v = np.array([2.0, 3.0], np.float32)
    np.testing.assert_allclose(to_jax(mod)(v), v ** 4)
    assert_matches_jax(mod, [v])


def test_float64_programs_stay_float64():
    x = Var("x", TensorType((2,), "float64"))
    out = to_jax(Function([x], op("exp", x)))(np.ones(2))
    assert out.dtype == jnp.float64


def test_a_wrong_reference_implementation_is_caught(monkeypatch):

    x = Var("x", TensorType((2,)))
    fn = Function([x], op("exp", x))
    patch_op(monkeypatch, "exp", numpy_ref=lambda a: np.exp(a) * np.float32(1.001))
    with pytest.raises(AssertionError, match="output 0"):
        assert_matches_jax(fn, [np.ones(2, np.float32)])


def test_higher_order_constructs_are_refused_with_a_clear_error():
    x = Var("x", TensorType(()))
    fn = Function([x], RefCreate(x))
    with pytest.raises(OracleError, match="first-order"):
        to_jax(fn)(np.float32(1))
