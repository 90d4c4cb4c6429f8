"""Compute rules of the elementwise ops, evaluated in te, against each op's NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

import relaydsl.te.compute_rules as rules
from relaydsl import te
from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType
from relaydsl.op import lookup

RNG = np.random.default_rng(1)
BINARY_SHAPES = [((3, 1), (4,)), ((2, 3, 4), (3, 1)), ((5,), (5,)), ((), (2, 2))]


def floats(shape: tuple[int, ...], low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype("float32")


def ints(shape: tuple[int, ...], nonzero: bool = False) -> np.ndarray:
    a = RNG.integers(-9, 10, shape).astype("int32")
    return np.where(a == 0, 3, a).astype("int32") if nonzero else a


def check(op: str, arrays: list[np.ndarray], **attrs: object) -> None:
    opdef = lookup(op)
    full = opdef.check_call(tuple(arrays), Attrs(attrs))
    expected = np.asarray(opdef.numpy_ref(*arrays, **full))
    holders = [te.placeholder(a.shape, a.dtype.name, f"in{n}") for n, a in enumerate(arrays)]
    assert opdef.compute is not None
    out = opdef.compute(full, holders, TensorType(expected.shape, expected.dtype.name))
    actual = te.evaluate(out, dict(zip(holders, arrays)))
    assert actual.dtype == expected.dtype, op
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6, err_msg=op)


UNARY_INPUTS = {
    "negative": [floats((3, 4)), ints((6,))],
    "relu": [floats((3, 4)), ints((6,))],
    "abs": [floats((3, 4)), ints((6,))],
    "sign": [np.array([-2.0, 0.0, 3.0], "float32"), ints((6,))],
    "exp": [floats((3, 4))], "tanh": [floats((3, 4))], "sigmoid": [floats((3, 4), -9, 9)],
    "log": [floats((3, 4), 0.1, 5)], "sqrt": [floats((3, 4), 0, 5)],
    "rsqrt": [floats((3, 4), 0.1, 5)], "floor": [floats((3, 4))], "ceil": [floats((3, 4))],
    "round": [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.4, 2.6], "float32")],
    "logical_not": [np.array([True, False, True])],
}


@pytest.mark.parametrize("op", sorted(UNARY_INPUTS))
def test_unary_rules(op: str) -> None:
    for x in UNARY_INPUTS[op]:
        check(op, [x])


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "maximum", "minimum"])
@pytest.mark.parametrize("shapes", BINARY_SHAPES)
def test_arithmetic_rules_broadcast(op: str, shapes: tuple[tuple[int, ...], ...]) -> None:
    a, b = shapes
    check(op, [floats(a), floats(b, 0.5, 2)])
    check(op, [ints(a), ints(b, nonzero=True)])  # integer divide is floor division


@pytest.mark.parametrize("op", ["equal", "not_equal", "less", "less_equal", "greater",
                                "greater_equal"])
def test_comparison_rules(op: str) -> None:
    for a, b in BINARY_SHAPES:
        check(op, [np.round(floats(a)), np.round(floats(b))])  # rounded: some ties
        check(op, [ints(a), ints(b)])


def test_power_logic_and_where() -> None:
    check("power", [floats((3, 1), 0.1, 3), floats((4,))])
    check("logical_and", [RNG.random((3, 1)) < 0.5, RNG.random((4,)) < 0.5])
    check("logical_or", [RNG.random((3, 1)) < 0.5, RNG.random((4,)) < 0.5])
    check("where", [RNG.random((3, 1)) < 0.5, floats((1, 4)), floats((4,))])
    check("where", [RNG.random((2, 3)) < 0.5, ints((3,)), ints(())])


def test_attribute_ops_cast_and_clip() -> None:
    check("cast", [floats((3, 4), -50, 50)], dtype="int32")
    check("cast", [ints((5,))], dtype="float64")
    check("clip", [floats((3, 4))], a_min=-0.5, a_max=0.7)
    check("clip", [ints((12,))], a_min=-1.5, a_max=2.5)


def test_every_rule_is_installed_once() -> None:
    for name in rules.SCALAR_RULES:
        assert lookup(name).compute is not None, name
    with pytest.raises(IRError, match="already has a compute rule"):
        rules._install()


def test_broadcast_read_and_dtype_checks() -> None:
    x = te.placeholder((2, 3), "float32", "x")
    i = te.Var("i")
    with pytest.raises(IRError, match=r"x\[2, 3\] has more dimensions than the output"):
        rules.broadcast_read(x, [i])
    with pytest.raises(IRError, match="add: compute rule gave float32, the op's type says int32"):
        lookup("add").compute(Attrs(), [x, x], TensorType((2, 3), "int32"))
