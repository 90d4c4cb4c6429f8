"""Reductions against JAX, their attribute checks, and their relations on symbolic dims."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.errors import IRError, RelayTypeError
from relaydsl.ir import Call, Op, TensorType, Var
from relaydsl.ir.types import Any, Kind, TypeVar
from relaydsl.op import lookup
from relaydsl.typing.relations import check_relation
from tests.relaydsl.op.harness import OpCase, check_case
from tests.relaydsl.op.test_tensor import bools, f32, f64, i32

lax = jax.lax


def reduce_with(monoid, init):
    """A reduction written with lax.reduce over normalised axes, as the JAX truth."""

    def truth(axis=None, keepdims=False):
        def run(x):
            axes = tuple(range(x.ndim)) if axis is None else tuple(
                a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis))
            out = lax.reduce(x, jnp.array(init(x.dtype), x.dtype), monoid, axes)
            if keepdims:
                out = out.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
            return out

        return run

    return truth


SUM = reduce_with(lax.add, lambda d: 0)
PROD = reduce_with(lax.mul, lambda d: 1)
MAX = reduce_with(lax.max, lambda d: jnp.finfo(d).min if jnp.issubdtype(d, jnp.floating)
                  else jnp.iinfo(d).min)
MIN = reduce_with(lax.min, lambda d: jnp.finfo(d).max if jnp.issubdtype(d, jnp.floating)
                  else jnp.iinfo(d).max)


def mean(axis=None, keepdims=False):
    def run(x):
        count = x.size // SUM(axis, keepdims)(x).size
        return SUM(axis, keepdims)(x) / jnp.array(count, x.dtype)

    return run


def reduce_cases(op, truth, makers=(f32, f64, i32), count=4):
    """Full, one-axis, negative-axis+keepdims and two-axis reductions; dtypes cycle."""
    configs = [{}, {"axis": 1}, {"axis": -1, "keepdims": True}, {"axis": (0, 2)}][:count]
    shapes = [(3, 4), (2, 3, 4), (2, 3), (2, 3, 2)]
    return [OpCase(op, [makers[i % len(makers)](*shape)], truth(**attrs), attrs)
            for i, (attrs, shape) in enumerate(zip(configs, shapes))]


def arg_truth(extreme):
    """argmax/argmin as the smallest index at which x equals its extreme along the axis."""

    def truth(axis=None, keepdims=False):
        def run(x):
            data = x.reshape(-1) if axis is None else x
            ax = 0 if axis is None else axis % x.ndim
            index = lax.broadcasted_iota(jnp.int32, data.shape, ax)
            hit = data == extreme(data, axis=ax, keepdims=True)
            out = jnp.min(jnp.where(hit, index, data.shape[ax]), axis=ax)
            if keepdims:
                out = out.reshape([1] * x.ndim if axis is None else
                                  [1 if i == ax else d for i, d in enumerate(x.shape)])
            return out

        return run

    return truth


def collapsed(x, like):
    """collapse_sum_like as the adjoint of broadcasting `like` to x's shape."""
    _, pullback = jax.vjp(lambda v: jnp.broadcast_to(v, x.shape), like.astype(x.dtype))
    return pullback(x)[0]


TIES = np.array([[1, 5, 5, 0], [7, 7, 2, 7], [3, 3, 3, 3]], np.int32)


def variance(axis=None, keepdims=False, unbiased=False):
    """The mean squared deviation from the mean, divided by n - 1 when unbiased."""

    def run(x):
        centred = x - mean(axis, True)(x)
        total = SUM(axis, keepdims)(centred * centred)
        n = x.size // total.size
        return total / jnp.array(n - unbiased, x.dtype)

    return run


def logical(monoid, init):
    """all/any as lax.reduce of and/or over the axes."""
    return reduce_with(monoid, lambda d: init)


ALL, ANY = logical(lax.bitwise_and, True), logical(lax.bitwise_or, False)

CASES = [
    *reduce_cases("sum", SUM),
    OpCase("sum", [f32(3)], SUM(axis=()), {"axis": ()}, name="empty axes"),
    *reduce_cases("mean", mean, (f32, f64)),
    *reduce_cases("max", MAX),
    *reduce_cases("min", MIN),
    # On bools min is "all" and max is "any" (the paper's Figure 2 relies on it).
    OpCase("min", [bools(3, 4)], lambda x: jnp.all(x), name="all-of-bool"),
    OpCase("max", [bools(3, 4)], lambda x: jnp.any(x, axis=1), {"axis": 1}, name="any-of-bool"),
    *reduce_cases("prod", PROD),
    OpCase("prod", [np.full((2, 40), 3, np.int32)], PROD(axis=1), {"axis": 1},
           name="int32 wraps around"),
    *reduce_cases("all", ALL, (bools,)),
    OpCase("all", [np.ones((2, 3), bool)], ALL(axis=1), {"axis": 1}, name="all true"),
    OpCase("all", [np.ones((2, 0), bool)], ALL(axis=1), {"axis": 1}, name="over no element"),
    *reduce_cases("any", ANY, (bools,)),
    OpCase("any", [np.zeros((2, 3), bool)], ANY(axis=0, keepdims=True),
           {"axis": 0, "keepdims": True}, name="all false"),
    OpCase("any", [np.zeros((0, 3), bool)], ANY(axis=0), {"axis": 0}, name="over no element"),
    *reduce_cases("variance", variance, (f32, f64)),
    OpCase("variance", [f64(3, 5)], variance(axis=1, unbiased=True),
           {"axis": 1, "unbiased": True}, name="unbiased"),
    OpCase("variance", [f32(2, 3, 4)], variance(axis=(0, 2), keepdims=True, unbiased=True),
           {"axis": (0, 2), "keepdims": True, "unbiased": True}, name="unbiased keepdims"),
    OpCase("variance", [(f32(4, 6) * 10 + 1000).astype(np.float32)], variance(axis=1),
           {"axis": 1}, rtol=1e-3, name="large mean: two passes"),
    *reduce_cases("argmax", arg_truth(jnp.max), (f32, i32), count=3),
    OpCase("argmin", [f64(3, 4)], arg_truth(jnp.min)(axis=0), {"axis": 0}),
    OpCase("argmax", [TIES], arg_truth(jnp.max)(axis=1), {"axis": 1}, name="ties"),
    OpCase("argmin", [TIES], arg_truth(jnp.min)(axis=-1, keepdims=True),
           {"axis": -1, "keepdims": True}, name="ties keepdims"),
    OpCase("argmin", [f32(2, 3)], arg_truth(jnp.min)(keepdims=True),
           {"keepdims": True}, name="flattened keepdims"),
    OpCase("collapse_sum_like", [f32(2, 3, 4), f32(3, 1)], collapsed),
    OpCase("collapse_sum_like", [f64(3, 4), f64(3, 4)], collapsed, name="same shape"),
    OpCase("collapse_sum_like", [f64(2, 3), f64()], collapsed, name="to a scalar"),
    OpCase("collapse_sum_like", [f64(4, 1, 3), f32(1, 1, 3)], collapsed,
           name="like of another dtype"),
    OpCase("collapse_sum_like", [i32(2, 3), i32(3)], lambda x, like: SUM(axis=0)(x)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_matches_jax(case):
    check_case(case)


def T(shape, dtype="float32"):
    return TensorType(shape, dtype)


def rel(op, arg_type, **attrs):
    call = Call(Op.get(op), [Var("x", arg_type)], attrs)
    return check_relation(lookup(op).type_relation, [arg_type], call.attrs)


@pytest.mark.parametrize("op, arg_type, attrs, message", [
    ("sum", T((2, 3)), {"axis": 2}, r"sum: attribute 'axis' = 2 is out of range for the input "
                                    r"Tensor\[\(2, 3\), float32\]"),
    ("max", T((2, 3)), {"axis": (0, -3)}, r"max: attribute 'axis' = -3 is out of range"),
    ("prod", T((2, 3)), {"axis": (1, -1)}, r"prod: attribute 'axis' = \(1, -1\) repeats an axis"),
    ("mean", T((2, 3), "int32"), {}, r"mean: the input must have a floating-point dtype, "
                                      r"got Tensor\[\(2, 3\), int32\]"),
    ("sum", T((2,), "bool"), {}, r"sum: the input must have a numeric \(non-bool\) dtype"),
    ("argmax", T((2, 3)), {"axis": 5}, r"argmax: attribute 'axis' = 5 is out of range"),
    ("all", T((2, 3)), {}, r"all: the input must have a bool dtype"),
    ("any", T((2, 3), "int32"), {"axis": 0}, r"any: the input must have a bool dtype"),
    ("variance", T((2, 3), "int32"), {}, r"variance: the input must have a floating-point"),
    ("variance", T((2, 3)), {"axis": 2}, r"variance: attribute 'axis' = 2 is out of range"),
    ("argmin", T(()), {"axis": 0}, r"argmin: attribute 'axis' = 0 is out of range"),
])
def test_type_errors(op, arg_type, attrs, message):
    with pytest.raises(RelayTypeError, match=message):
        rel(op, arg_type, **attrs)


@pytest.mark.parametrize("op, attrs, message", [
    ("sum", {"axis": "x"}, r"sum: attribute 'axis' must be None, an int or a tuple of ints"),
    ("mean", {"keepdims": 1}, r"mean: attribute 'keepdims' must be a bool"),
    ("argmax", {"axis": (0, 1)}, r"argmax: attribute 'axis' must be an int or None"),
])
def test_bad_attributes(op, attrs, message):
    with pytest.raises(IRError, match=message):
        Call(Op.get(op), [Var("x", T((3,)))], attrs)


def test_symbolic_dims():
    n, m = TypeVar("n", Kind.Shape), TypeVar("m", Kind.Shape)
    assert rel("sum", T((n, m, 3)), axis=1) == T((n, 3))
    assert rel("mean", T((n, Any)), axis=-1, keepdims=True) == T((n, 1))
    assert rel("max", T((n, m))) == T(())
    assert rel("argmax", T((n, m)), axis=0) == T((m,), "int32")
    assert rel("argmin", T((n, m)), keepdims=True) == T((1, 1), "int32")
