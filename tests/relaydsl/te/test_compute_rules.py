"""Every op's compute rule, evaluated in te, against the op's NumPy reference."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from relaydsl import te
from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType, TupleType
from relaydsl.op import all_ops, lookup
from relaydsl.te.rules import broadcast_read

RNG = np.random.default_rng(1)
BINARY_SHAPES = [((3, 1), (4,)), ((2, 3, 4), (3, 1)), ((5,), (5,)), ((), (2, 2))]


def floats(shape: tuple[int, ...], low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype("float32")


def ints(shape: tuple[int, ...], nonzero: bool = False) -> np.ndarray:
    a = RNG.integers(-9, 10, shape).astype("int32")
    return np.where(a == 0, 3, a).astype("int32") if nonzero else a


def check(op: str, arrays: list, tol: float = 1e-6, **attrs: object) -> None:
    """The op's rule, evaluated in te, against its NumPy reference; a tuple argument (a
    Python tuple of arrays) reaches the rule as its fields, flattened, and a tuple result
    (a TupleType) is a tuple of tensors, compared field by field."""
    opdef = lookup(op)
    full = opdef.check_call(tuple(arrays), Attrs(attrs))
    ref = opdef.numpy_ref(*arrays, **full)
    expected = [np.asarray(r) for r in ref] if isinstance(ref, tuple) else [np.asarray(ref)]
    types = [TensorType(e.shape, e.dtype.name) for e in expected]
    flat = [a for arg in arrays for a in (arg if isinstance(arg, tuple) else (arg,))]
    holders = [te.placeholder(a.shape, a.dtype.name, f"in{n}") for n, a in enumerate(flat)]
    assert opdef.compute is not None
    out = opdef.compute(full, holders, TupleType(tuple(types)) if isinstance(ref, tuple)
                        else types[0])
    outs = out if isinstance(ref, tuple) else (out,)
    assert isinstance(outs, tuple) and len(outs) == len(expected), op
    for field, (t, want) in enumerate(zip(outs, expected)):
        actual = te.evaluate(t, dict(zip(holders, flat)))
        assert actual.dtype == want.dtype, (op, field)
        assert actual.shape == want.shape, (op, field)
        np.testing.assert_allclose(actual, want, rtol=tol, atol=tol,
                                   err_msg=f"{op} {attrs} result {field}")


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
    "trunc": [floats((3, 4))], "sin": [floats((3, 4))], "cos": [floats((3, 4))],
    "tan": [floats((3, 4), -1.4, 1.4)], "atan": [floats((3, 4), -9, 9)], "erf": [floats((3, 4))],
}


@pytest.mark.parametrize("op", sorted(UNARY_INPUTS))
def test_unary_rules(op: str) -> None:
    for x in UNARY_INPUTS[op]:
        check(op, [x])


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "maximum", "minimum",
                                "floor_divide", "floor_mod"])
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


@pytest.mark.parametrize("op", ["left_shift", "right_shift"])
def test_shift_rules(op: str) -> None:
    for dtype, bits in (("int32", 32), ("uint8", 8), ("int64", 64)):
        x = RNG.integers(0 if dtype == "uint8" else -99, 100, (3, 1)).astype(dtype)
        counts = np.array([0, 1, bits - 1, bits, bits + 5], dtype)  # the last two: out
        check(op, [x, counts])


def test_power_logic_and_where() -> None:
    check("power", [floats((3, 1), 0.1, 3), floats((4,))])
    check("logical_and", [RNG.random((3, 1)) < 0.5, RNG.random((4,)) < 0.5])
    check("logical_or", [RNG.random((3, 1)) < 0.5, RNG.random((4,)) < 0.5])
    check("where", [RNG.random((3, 1)) < 0.5, floats((1, 4)), floats((4,))])
    check("where", [RNG.random((2, 3)) < 0.5, ints((3,)), ints(())])


def test_psum_is_this_ranks_part_in_one_process() -> None:
    # the compute rule makes this rank's part; the sum over ranks is the backends' (one rank)
    check("psum", [floats((2, 3))])
    check("psum", [ints((4,))])


def test_attribute_ops_cast_and_clip() -> None:
    check("cast", [floats((3, 4), -50, 50)], dtype="int32")
    check("cast", [ints((5,))], dtype="float64")
    check("clip", [floats((3, 4))], a_min=-0.5, a_max=0.7)
    check("clip", [ints((12,))], a_min=-1.5, a_max=2.5)
    check("cast_like", [floats((3, 4), -50, 50), ints(())])
    check("cast_like", [ints((5,)), floats((2,))])
    check("cast_like", [floats((2, 2)), np.zeros(1, bool)])


def test_broadcast_read_and_dtype_checks() -> None:
    x = te.placeholder((2, 3), "float32", "x")
    i = te.Var("i")
    with pytest.raises(IRError, match=r"x\[2, 3\] has more dimensions than the output"):
        broadcast_read(x, [i])
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


@pytest.mark.parametrize("axis", REDUCE_AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_bool_reduction_and_variance_rules(axis: object, keepdims: bool) -> None:
    for op, p in (("all", 0.8), ("any", 0.2)):
        check(op, [RNG.random((2, 3, 4)) < p], axis=axis, keepdims=keepdims)
    for unbiased in (False, True):  # over no axis and unbiased: 0 / 0, NaN
        check("variance", [floats((2, 3, 4))], tol=1e-5, axis=axis, keepdims=keepdims,
              unbiased=unbiased)


def test_bool_reduction_and_variance_edge_cases() -> None:
    check("all", [np.ones((2, 0), bool)], axis=1)  # True over no element
    check("any", [np.ones((0, 3), bool)], axis=0)  # False over no element
    check("variance", [floats((5,)).astype("float16")], tol=1e-3)
    check("variance", [floats((4, 3), 999, 1001)], tol=1e-3, axis=0)  # two passes


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
    check("ndarray_size", [floats((2, 3, 4))])
    check("ndarray_size", [floats((2, 0))], dtype="int64")
    check("one_hot", [ints((2, 3)), np.array(1.5, "float32"), np.array(-1, "int32")],
          depth=5, axis=1, dtype="float64")  # ints in -9 .. 9: some out of range
    check("one_hot", [np.array([3, 0, 200], "uint8"), np.array(True), np.array(False)],
          depth=201, dtype="bool")
    check("one_hot", [np.array(2, "int64"), np.array(1.0, "float32"), np.array(0.0, "float32")],
          depth=3)


def test_gather_nd_rule() -> None:
    check("gather_nd", [floats((2, 3, 4)), np.array([[1, 0, -1], [2, 9, -5]], "int32")])
    check("gather_nd", [ints((3, 4)), np.array([[[2, 0]], [[3, -1]]], "int8")])
    check("gather_nd", [floats((2, 3, 4)), np.array([[[2, 0], [1, 1]]], "uint8")], batch_dims=1)
    check("gather_nd", [floats((2, 3)), np.array([[0, -1]], "int64")], batch_dims=1)


def test_topk_rule() -> None:
    check("topk", [floats((3, 6))], k=2)
    check("topk", [floats((4, 3, 2))], k=3, axis=1, ret_type="values", is_ascend=True)
    check("topk", [RNG.integers(0, 3, (3, 5)).astype("int32")], k=0, dtype="int64")  # ties
    check("topk", [np.array([1.0, np.nan, -np.inf, np.inf, np.nan], "float32")], k=4)
    check("topk", [np.array([1.0, np.nan, -np.inf, np.nan])], k=0, is_ascend=True,
          ret_type="indices")
    check("topk", [floats((2, 0))], k=0)


def test_tile_rule() -> None:
    check("tile", [floats((2, 3))], reps=(2, 3))
    check("tile", [ints((2, 1, 3))], reps=(2,))
    check("tile", [floats((3,))], reps=(2, 1, 2))
    check("tile", [floats((1, 2))], reps=(3, 0))
    check("tile", [floats(())], reps=(4,))


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
    check("matmul", [ints((2, 3, 4)), ints((4, 5))])
    check("dense", [ints((3, 4)), ints((5, 4))])
    int8 = RNG.integers(-128, 128, (3, 64)).astype("int8")
    check("dense", [int8, int8[:2]], out_dtype="int32")  # int8 would overflow
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
    int8 = [RNG.integers(-128, 128, s).astype("int8") for s in (data, weight)]
    check("conv2d", int8, out_dtype="int32", **attrs)


def test_conv2d_nchwc_and_layout_transform_rules() -> None:
    check("conv2d_nchwc", [floats((1, 2, 6, 7, 4)), floats((3, 2, 3, 3, 4, 2))], tol=1e-5)
    check("conv2d_nchwc", [floats((2, 3, 8, 9, 1)), floats((2, 3, 3, 2, 1, 4))], tol=1e-5,
          strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2))
    check("layout_transform", [floats((2, 8, 3, 3))], src_layout="NCHW", dst_layout="NCHW4c")
    check("layout_transform", [floats((2, 2, 3, 3, 4))], src_layout="NCHW4c",
          dst_layout="NCHW")
    check("layout_transform", [ints((1, 2, 3, 3, 4))], src_layout="NCHW4c", dst_layout="NHWC2c")
    check("layout_transform", [floats((8, 12, 3, 3))], src_layout="OIHW", dst_layout="OIHW4i2o")


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


def test_global_max_pool2d_rule() -> None:
    check("global_max_pool2d", [floats((2, 3, 4, 5))])
    check("global_max_pool2d", [floats((1, 1, 1, 1))])


@pytest.mark.parametrize("attrs", [
    {"pool_size": 2},
    {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True},
    {"pool_size": 3, "strides": 2, "padding": (2, 0)},
])
def test_pool1d_rules(attrs: dict) -> None:
    x = floats((2, 3, 7))
    check("max_pool1d", [x], **attrs)
    check("avg_pool1d", [x], tol=1e-5, **attrs)
    check("avg_pool1d", [x], tol=1e-5, count_include_pad=True, **attrs)


@pytest.mark.parametrize("data,weight,attrs", [
    ((2, 3, 9), (4, 3, 3), {}),
    ((1, 4, 10), (6, 2, 3), {"strides": 2, "padding": (1, 2), "dilation": 2, "groups": 2}),
])
def test_conv1d_rule(data: tuple, weight: tuple, attrs: dict) -> None:
    check("conv1d", [floats(data), floats(weight)], tol=1e-5, **attrs)


@pytest.mark.parametrize("attrs", [
    {"pool_size": 2, "strides": 2},
    {"pool_size": (2, 3, 2), "strides": (1, 2, 2), "padding": (1, 1, 0, 0, 1, 1),
     "ceil_mode": True},
])
def test_pool3d_rules(attrs: dict) -> None:
    x = floats((1, 2, 5, 6, 7))
    check("max_pool3d", [x], **attrs)
    check("avg_pool3d", [x], tol=1e-5, **attrs)
    check("avg_pool3d", [x], tol=1e-5, count_include_pad=True, **attrs)


@pytest.mark.parametrize("data,weight,attrs", [
    ((2, 4, 5, 6), (4, 3, 3, 3), {}),
    ((1, 4, 4, 5), (4, 2, 3, 2), {"strides": (2, 3), "padding": (1, 0, 2, 1),
                                  "output_padding": (1, 2), "dilation": (2, 1), "groups": 2}),
])
def test_conv2d_transpose_rule(data: tuple, weight: tuple, attrs: dict) -> None:
    check("conv2d_transpose", [floats(data), floats(weight)], tol=1e-5, **attrs)


@pytest.mark.parametrize("attrs", [
    {"scale_h": 2.0, "scale_w": 3.0},
    {"scale_h": 1.5, "scale_w": 2.5, "align_corners": True},
    {"scale_h": 2.0, "scale_w": 1.5, "method": "bilinear"},
    {"scale_h": 2.5, "scale_w": 2.0, "method": "bilinear", "align_corners": True},
])
def test_upsampling_rule(attrs: dict) -> None:
    check("upsampling", [floats((2, 3, 4, 5))], tol=1e-5, **attrs)


def test_leaky_relu_and_prelu_rules() -> None:
    check("leaky_relu", [floats((3, 4))])
    check("leaky_relu", [floats((2, 5))], alpha=0.1)
    check("prelu", [floats((2, 3, 4)), floats((3,))])
    check("prelu", [floats((2, 3, 4)), floats((4,))], axis=-1)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_rules(op: str) -> None:
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


def test_dilate_rule() -> None:
    check("dilate", [floats((2, 3, 4))], strides=(1, 2, 3))
    check("dilate", [floats((3, 2))], strides=(2, 2), dilation_value=-1.5)
    check("dilate", [floats((3,))], strides=(1,))


def test_max_pool2d_grad_rule() -> None:
    for data, attrs in POOL_CASES:
        x = floats(data)
        g = lookup("max_pool2d").numpy_ref(x, **lookup("max_pool2d").check_call((x,), Attrs(
            attrs)))
        check("max_pool2d_grad", [floats(g.shape), x], **attrs)


@pytest.mark.parametrize("data,attrs", [
    ((1, 1, 6, 6), {"pool_size": 3, "strides": 1}),  # overlapping windows share a maximum
    ((1, 2, 5, 7), {"pool_size": (2, 3), "strides": (1, 2), "padding": 1}),
    ((2, 1, 7, 7), {"pool_size": 2, "strides": 3}),  # gaps between windows
    ((1, 1, 3, 3), {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True}),
    ((1, 1, 4, 4), {"pool_size": 1, "strides": 2}),
    ((1, 1, 2, 2), {"pool_size": 2, "strides": 1, "padding": 2}),  # windows in the padding
])
def test_max_pool2d_grad_ties_and_windows(data: tuple, attrs: dict) -> None:
    x = np.round(floats(data))  # rounded: ties, broken toward the first in row-major order
    x.flat[::5] = np.nan if data[-1] == 7 else x.flat[::5]  # a NaN is the maximum
    x.flat[1::7] = -np.inf  # a window of -inf only picks its first element
    full = lookup("max_pool2d").check_call((x,), Attrs(attrs))
    g = np.round(floats(lookup("max_pool2d").numpy_ref(x, **full).shape) * 4)  # exact sums
    check("max_pool2d_grad", [g, x], tol=0, **attrs)
    check("max_pool2d_grad", [g, np.full(data, -np.inf, "float32")], tol=0, **attrs)


def test_batch_norm_rule() -> None:
    for shape, axis in [((2, 3, 4, 5), 1), ((6, 4), 1), ((3, 4, 2), -1), ((5,), 0),
                        ((4, 3), 0)]:
        c = shape[axis]
        x, mm, mv = floats(shape, -3, 3), floats((c,)), floats((c,), 0.5, 2)
        gamma, beta = floats((c,)), floats((c,))
        for training in (False, True):
            for center, scale in [(True, True), (False, True), (True, False), (False, False)]:
                check("batch_norm", [x, gamma, beta, mm, mv], tol=1e-5, axis=axis,
                      training=training, center=center, scale=scale, epsilon=1e-3,
                      momentum=0.25)
    x64 = RNG.normal(size=(4, 2, 3))
    c64 = [RNG.normal(size=2), RNG.normal(size=2), RNG.normal(size=2), RNG.uniform(1, 2, 2)]
    check("batch_norm", [x64, *c64], tol=1e-12, training=True)
    check("batch_norm", [x64, *c64], tol=1e-12)


def test_layer_norm_rule() -> None:
    for shape, axis in [((3, 5), -1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((6,), 0)]:
        c = shape[axis]
        for center, scale in [(True, True), (False, True), (True, False), (False, False)]:
            check("layer_norm", [floats(shape, -3, 3), floats((c,)), floats((c,))], tol=1e-5,
                  axis=axis, center=center, scale=scale)
    check("layer_norm", [floats((4, 3), -3, 3).astype("float16"), floats((3,)).astype("float16"),
                         floats((3,)).astype("float16")], tol=1e-2)


def test_dropout_rule_is_bit_exact() -> None:
    x = floats((3, 4, 5))

    def key(k0: int, k1: int, dtype: str = "int64") -> np.ndarray:
        return np.array([k0, k1], dtype)

    check("dropout", [x, key(1, 2)], tol=0)  # inference: the identity
    check("dropout", [x, key(3, 0)], tol=0, rate=0.9)
    for rate, k in [(0.5, key(0, 0)), (0.1, key(7, 1)), (0.9, key(-1, -5)),
                    (0.0, key(12345, 2)), (0.3, key(2**40 + 5, 2**33 - 1)),
                    (0.5, key(-3, 4, "int32")), (0.5, key(200, 6, "uint8"))]:
        check("dropout", [x, k], tol=0, rate=rate, training=True)
    check("dropout", [RNG.normal(size=(1000,)), key(99, 1)], tol=0, rate=0.5, training=True)
    check("dropout", [floats(()), key(1, 0)], tol=0, rate=0.5, training=True)
    check("dropout", [floats((2, 3)).astype("float16"), key(0, 0)], tol=0, rate=0.3,
          training=True)


def test_dropout_hash_matches_the_reference_mix() -> None:
    from relaydsl.op.nn.dropout import U32, mix32, mix32_te

    values = np.array([0, 1, 2, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 123456789],
                      "uint32")
    v = te.placeholder(values.shape, U32, "v")
    out = te.compute(values.shape, lambda i: mix32_te(v[i]), "mixed")
    got = te.evaluate(out, {v: values.astype(U32)})
    np.testing.assert_array_equal(got, mix32(values).astype(U32))


def test_collapse_sum_like_rule() -> None:
    for data, like in [((2, 3, 4), (3, 1)), ((2, 3, 4), (4,)), ((2, 3), (2, 3)),
                       ((2, 3), ()), ((3, 1, 4), (1, 1, 1)), ((5, 2), (1, 2))]:
        check("collapse_sum_like", [floats(data), floats(like)], tol=1e-5)
        check("collapse_sum_like", [ints(data), floats(like)])


def test_stack_rule() -> None:
    a, b, c = floats((2, 3)), floats((2, 3)), floats((2, 3))
    for axis in (0, 1, 2, -1, -3):
        check("stack", [(a, b, c)], axis=axis)
    check("stack", [(ints((4,)),)])
    check("stack", [(floats(()), floats(()))])
    check("stack", [(floats((0, 2)), floats((0, 2)))], axis=1)


def test_split_rule() -> None:
    x = floats((6, 4, 3))
    for how, axis in [(1, 0), (3, 0), (2, 1), (3, -1), (6, 0)]:
        check("split", [x], indices_or_sections=how, axis=axis)
    for cuts, axis in [((2,), 0), ((1, 4), 0), ((1, 3), 1), ((-1,), 2), ((2, 2, 5), 0),
                       ((4, 2), 0), ((0, 10), 0)]:  # empty and clamped pieces too
        check("split", [x], indices_or_sections=cuts, axis=axis)
    check("split", [ints((5,))], indices_or_sections=(3,))


def test_take_grad_rule() -> None:
    like = floats((3, 4, 5))
    repeated = np.array([[1, 1, 2], [0, 1, 1]], "int32")
    wild = np.array([[-7, 0, 2], [3, 11, -1]], "int32")
    for mode in ("clip", "wrap"):
        for indices in (repeated, wild, wild.astype("int64"), np.array(2, "int8"),
                        np.array([200, 3, 1], "uint8")):
            take = lookup("take")
            for axis in (None, 0, 1, -1):
                full = take.check_call((like, indices), Attrs({"axis": axis, "mode": mode}))
                g = floats(take.numpy_ref(like, indices, **full).shape)
                check("take_grad", [g, indices, like], tol=1e-6, axis=axis, mode=mode)
    g = np.round(floats((2, 3, 4, 5)) * 4)
    check("take_grad", [g, repeated, like], tol=0, axis=0)  # exact: sums in the same order
    check("take_grad", [ints((2, 3)), repeated, ints((6,))], tol=0)
    check("take_grad", [floats((3, 0, 5)), np.zeros((0,), "int32"), like], axis=1)


def test_strided_slice_grad_rule() -> None:
    like = floats((5, 6, 4))
    for attrs in [dict(begin=(1,), end=(4,)), dict(begin=(0, 5), end=(5, 0), strides=(2, -2)),
                  dict(begin=(-1, -100), end=(-4, 100), strides=(-1, 3), axes=(2, 1)),
                  dict(begin=(4, 1), end=(-100, 5), strides=(-3, 2)),
                  dict(begin=(3,), end=(3,)),  # empty
                  dict(begin=(0, 0, 0), end=(5, 6, 4)),
                  dict(begin=(1, 1), end=(5, 6), strides=(4, 5), axes=(0, -2))]:
        full = lookup("strided_slice").check_call((like,), Attrs(attrs))
        g = floats(lookup("strided_slice").numpy_ref(like, **full).shape)
        check("strided_slice_grad", [g, like], tol=0, **attrs)
    check("strided_slice_grad", [ints((3,)), ints((7,))], tol=0, begin=(10,), end=(-10,),
          strides=(-3,))


def test_shape_of_rule() -> None:
    for shape in [(2, 3, 4), (5,), (), (1, 0, 7)]:
        check("shape_of", [floats(shape)], tol=0)


def test_tuple_results_are_checked() -> None:
    x = te.placeholder((4, 2), "float32", "x")
    split = lookup("split")
    attrs = split.check_call((x,), Attrs({"indices_or_sections": 2}))
    pieces = TupleType((TensorType((2, 2), "float32"), TensorType((2, 2), "float32")))
    assert len(split.compute(attrs, [x], pieces)) == 2
    with pytest.raises(IRError, match=r"split: compute rule gave 2 tensors, the op's type "
                       r"says a tuple of 3"):
        split.compute(attrs, [x], TupleType((*pieces.fields, pieces.fields[0])))
    with pytest.raises(IRError, match=r"split \(result 1\): compute rule gave float32\[2, 2\], "
                       r"the op's type says float32\[3, 2\]"):
        split.compute(attrs, [x], TupleType((pieces.fields[0], TensorType((3, 2), "float32"))))
    with pytest.raises(IRError, match="split: compute rule gave a tuple of 2 tensors, the op's "
                       "type says one tensor"):
        split.compute(attrs, [x], TensorType((2, 2), "float32"))


def test_simulated_quantize_rule() -> None:
    check("simulated_quantize", [floats((3, 4), -5, 5), np.float32(1 / 32)], nbit=8)
    check("simulated_quantize", [floats((2, 3, 4), -5, 5), np.float32([0.1, 0.02, 0.5])],
          nbit=4, rounding="floor")
    check("simulated_quantize", [floats((3, 4), -5, 5), np.float32(1 / 32)], nbit=8,
          signed=False, rounding="ceil")


def test_empty_computes() -> None:
    A = te.placeholder((0, 3), "float32", "A")
    k = te.reduce_axis(3, "k")
    B = te.compute((0,), lambda i: te.sum(A[i, k], k), "B")
    assert te.evaluate(B, {A: np.zeros((0, 3), "float32")}).shape == (0,)
    with pytest.raises(IRError, match="extent must be a positive int, got 0"):
        te.reduce_axis(0)


def test_every_op_rule_is_checked_here() -> None:
    """Every registered op appears in a ``check`` call of this file (directly, or through a
    parametrized ``op``), so no rule goes untested against its reference."""
    tree = ast.parse(Path(__file__).read_text())
    checked: set[str] = set(UNARY_INPUTS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check" and \
                node.args and isinstance(node.args[0], ast.Constant):
            checked.add(node.args[0].value)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "parametrize" \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "op":
            values = node.args[1]  # a list of names (or sorted(UNARY_INPUTS), counted above)
            if isinstance(values, (ast.List, ast.Tuple)):
                checked.update(e.value for e in values.elts if isinstance(e, ast.Constant))
    missing = sorted(set(all_ops()) - checked)
    assert not missing, f"ops whose compute rule no test checks: {missing}"
