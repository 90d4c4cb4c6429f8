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


def check(op: str, arrays: list, tol: float = 1e-6, **attrs: object) -> None:
    """The op's rule, evaluated in te, against its NumPy reference; a tuple argument (a
    Python tuple of arrays) reaches the rule as its fields, flattened."""
    opdef = lookup(op)
    full = opdef.check_call(tuple(arrays), Attrs(attrs))
    expected = np.asarray(opdef.numpy_ref(*arrays, **full))
    flat = [a for arg in arrays for a in (arg if isinstance(arg, tuple) else (arg,))]
    holders = [te.placeholder(a.shape, a.dtype.name, f"in{n}") for n, a in enumerate(flat)]
    assert opdef.compute is not None
    out = opdef.compute(full, holders, TensorType(expected.shape, expected.dtype.name))
    actual = te.evaluate(out, dict(zip(holders, flat)))
    assert actual.dtype == expected.dtype, op
    assert actual.shape == expected.shape, op
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol, err_msg=f"{op} {attrs}")


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
    check("cast_like", [floats((3, 4), -50, 50), ints(())])
    check("cast_like", [ints((5,)), floats((2,))])
    check("cast_like", [floats((2, 2)), np.zeros(1, bool)])


def test_every_rule_is_installed_once() -> None:
    for name in [*rules.SCALAR_RULES, *rules.RULES]:
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
    attrs = lookup("sum").check_call((x,), Attrs({"axis": 1}))
    with pytest.raises(IRError, match=r"sum: compute rule gave float32\[2\], the op's type "
                       r"says int32\[2\]"):
        lookup("sum").compute(attrs, [x], TensorType((2,), "int32"))


def test_evaluate_keeps_scalar_shape() -> None:
    x = te.placeholder((3,), "float32", "x")
    s = lookup("sum").compute(lookup("sum").check_call((x,), Attrs()), [x],
                              TensorType((), "float32"))
    assert te.evaluate(s, {x: np.ones(3, "float32")}).shape == ()


# ---- reductions -------------------------------------------------------------------------

REDUCE_AXES = [None, 0, 1, -1, (0, 2), (), (2, 1, 0)]


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis", REDUCE_AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_rules(op: str, axis: object, keepdims: bool) -> None:
    check(op, [floats((2, 3, 4))], tol=1e-5, axis=axis, keepdims=keepdims)
    if op != "mean":
        check(op, [ints((2, 3, 4))], axis=axis, keepdims=keepdims)


def test_reduction_rules_edge_cases() -> None:
    check("sum", [floats(())])
    check("mean", [floats((5,)).astype("float16")], tol=1e-3)
    check("max", [RNG.random((3, 4)) < 0.3], axis=1)  # any
    check("min", [RNG.random((3, 4)) < 0.7], axis=0, keepdims=True)  # all
    check("prod", [ints((7,))], axis=0)  # wraps in int32 as NumPy does


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_arg_reduction_rules(op: str, axis: object, keepdims: bool) -> None:
    check(op, [floats((3, 4, 2))], axis=axis, keepdims=keepdims)
    check(op, [RNG.integers(0, 3, (3, 4, 2)).astype("int32")], axis=axis,  # ties: the first
          keepdims=keepdims)


def test_arg_reduction_edge_cases() -> None:
    x = floats((2, 5))
    x[0, 3], x[1, 1], x[1, 4] = np.nan, np.nan, np.nan
    check("argmax", [x], axis=1)  # the first NaN
    check("argmin", [x])
    check("argmax", [RNG.random((3, 4)) < 0.5], axis=0)
    check("argmin", [floats(())])


# ---- transformations and constructors ----------------------------------------------------


def test_reshape_flatten_rules() -> None:
    check("reshape", [floats((2, 3, 4))], newshape=(4, -1))
    check("reshape", [ints((6,))], newshape=(3, 1, 2))
    check("reshape", [floats((2, 3))], newshape=(2, 3))
    check("reshape", [floats((1,))], newshape=())
    check("reshape_like", [floats((2, 6)), floats((3, 4))])
    check("flatten", [floats((2, 3, 4))])
    check("flatten", [floats((3, 2, 1, 2))])
    check("flatten", [floats((5,))])


def test_transpose_expand_squeeze_broadcast_rules() -> None:
    check("transpose", [floats((2, 3, 4))])
    check("transpose", [ints((2, 3, 4))], axes=(1, 2, 0))
    check("transpose", [floats((2, 3))], axes=(-1, 0))
    check("expand_dims", [floats((2, 3))], axis=1)
    check("expand_dims", [floats((2, 3))], axis=-1, num_newaxis=2)
    check("expand_dims", [floats(())], axis=0, num_newaxis=3)
    check("squeeze", [floats((1, 3, 1, 2))])
    check("squeeze", [floats((1, 3, 1, 2))], axis=(2,))
    check("squeeze", [ints((1, 3, 1))], axis=(0, -1))
    check("broadcast_to", [floats((3, 1))], shape=(2, 3, 4))
    check("broadcast_to", [ints(())], shape=(2, 2))
    check("broadcast_to", [floats((4,))], shape=(4,))


def test_concatenate_rule() -> None:
    check("concatenate", [(floats((2, 3)), floats((1, 3)), floats((4, 3)))])
    check("concatenate", [(ints((2, 1)), ints((2, 3)))], axis=-1)
    check("concatenate", [(floats((2, 2, 2)),)], axis=1)
    check("concatenate", [(floats((2, 0)), floats((2, 3)), floats((2, 1)))], axis=1)


def test_strided_slice_rule() -> None:
    x = floats((5, 6, 4))
    check("strided_slice", [x], begin=(1,), end=(4,))
    check("strided_slice", [x], begin=(0, 5), end=(5, 0), strides=(2, -2))
    check("strided_slice", [x], begin=(-1, -100), end=(-4, 100), strides=(-1, 3), axes=(2, 1))
    check("strided_slice", [ints((7,))], begin=(10,), end=(-10,), strides=(-3,))


def test_take_rule() -> None:
    x = floats((3, 4, 5))
    wild = np.array([[-7, 0, 2], [3, 11, -1]], "int32")
    for mode in ("clip", "wrap"):
        check("take", [x, wild], mode=mode)
        check("take", [x, wild], axis=1, mode=mode)
        check("take", [x, wild.astype("int64")], axis=-1, mode=mode)
        check("take", [x, np.array(5, "int8")], axis=0, mode=mode)
        check("take", [ints((4,)), np.array([200, 1, 0], "uint8")], axis=0, mode=mode)


def test_constructor_rules() -> None:
    check("zeros", [], shape=(2, 3))
    check("ones", [], shape=(4,), dtype="int32")
    check("ones", [], shape=(), dtype="bool")
    check("zeros_like", [ints((2, 2))])
    check("ones_like", [floats((3,))])
    check("full", [np.array(2.7, "float32")], shape=(2, 3))
    check("full", [np.array(-2.7, "float32")], shape=(3,), dtype="int32")
    check("full", [np.array(7, "int32")], shape=(1, 2), dtype="float64")


# ---- nn ---------------------------------------------------------------------------------


def test_product_rules() -> None:
    for a, b in [((3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)),
                 ((2, 1, 3, 4), (5, 4, 2)), ((2, 3, 4), (4, 2))]:
        check("matmul", [floats(a), floats(b)], tol=1e-5)
    check("dense", [floats((3, 4)), floats((5, 4))], tol=1e-5)
    check("dense", [floats((2, 3, 4)), floats((5, 4))], tol=1e-5, units=5)
    check("dense", [floats((4,)), floats((2, 4))], tol=1e-5)
    for ta in (False, True):
        for tb in (False, True):
            x = floats((2, 4, 3) if ta else (2, 3, 4))
            y = floats((1, 5, 4) if tb else (1, 4, 5))
            check("batch_matmul", [x, y], tol=1e-5, transpose_a=ta, transpose_b=tb)
    check("bias_add", [floats((2, 3, 4)), floats((3,))])
    check("bias_add", [floats((2, 3, 4)), floats((4,))], axis=-1)
    check("bias_add", [floats((5,)), floats((5,))], axis=0)


CONV_CASES = [
    ((2, 3, 7, 7), (4, 3, 3, 3), {}),
    ((1, 3, 8, 9), (2, 3, 3, 2), {"strides": 2, "padding": 1}),
    ((1, 2, 9, 9), (3, 2, 3, 3), {"strides": (2, 1), "padding": (1, 0, 2, 1), "dilation": 2}),
    ((2, 4, 6, 6), (6, 2, 3, 3), {"groups": 2, "padding": (1, 2)}),
    ((1, 4, 5, 5), (4, 1, 3, 3), {"groups": 4, "padding": 1, "dilation": (1, 2)}),
    ((3, 6, 6), (2, 3, 2, 2), {"strides": 2}),  # one CHW example
    ((2, 5, 5), (4, 1, 3, 3), {"groups": 2, "padding": 2, "channels": 4,
                              "kernel_size": (3, 3)}),
]


@pytest.mark.parametrize("data,weight,attrs", CONV_CASES)
def test_conv2d_rule(data: tuple, weight: tuple, attrs: dict) -> None:
    check("conv2d", [floats(data), floats(weight)], tol=1e-5, **attrs)


POOL_CASES = [
    ((2, 3, 6, 6), {"pool_size": 2}),
    ((1, 2, 7, 8), {"pool_size": 3, "strides": 2, "padding": 1}),
    ((1, 2, 7, 6), {"pool_size": (3, 2), "strides": (2, 3), "padding": (1, 0, 2, 1)}),
    ((1, 1, 7, 7), {"pool_size": 2, "strides": 2, "ceil_mode": True}),
    ((1, 2, 6, 7), {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True}),
    ((2, 5, 5), {"pool_size": 2, "strides": 1}),  # one CHW example
]


@pytest.mark.parametrize("data,attrs", POOL_CASES)
def test_pool_rules(data: tuple, attrs: dict) -> None:
    x = floats(data)
    check("max_pool2d", [x], **attrs)
    check("avg_pool2d", [x], tol=1e-5, **attrs)
    check("avg_pool2d", [x], tol=1e-5, count_include_pad=True, **attrs)


def test_global_avg_pool2d_rule() -> None:
    check("global_avg_pool2d", [floats((2, 3, 4, 5))], tol=1e-5)
    check("global_avg_pool2d", [floats((1, 1, 1, 1))])


def test_softmax_rules() -> None:
    for op in ("softmax", "log_softmax"):
        check(op, [floats((3, 5), -9, 9)], tol=1e-5)
        check(op, [floats((2, 3, 4), -9, 9)], tol=1e-5, axis=1)
        check(op, [floats((2, 3, 4), -9, 9)], tol=1e-5, axis=0)
        check(op, [floats((6,), -50, 50)], tol=1e-5)


def test_softmax_cross_entropy_rule() -> None:
    for shape in [(4, 5), (2, 3, 4), (6,)]:
        labels = RNG.random(shape).astype("float32")
        labels /= labels.sum(axis=-1, keepdims=True)
        check("softmax_cross_entropy", [floats(shape, -5, 5), labels], tol=1e-5)


def test_pad_rule() -> None:
    check("pad", [floats((2, 3))], pad_width=(1, 2, 0, 3))
    check("pad", [floats((2, 3, 2))], pad_width=(0, 0, 2, 0, 1, 1), pad_value=-1.5)
    check("pad", [floats((4,))], pad_width=(0, 0))
