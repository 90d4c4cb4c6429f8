"""Elementwise/broadcast ops against JAX, their dtype rules, and their symbolic-dim relations."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.errors import IRError, RelayTypeError
from relaydsl.ir import Call, Op, TensorType, Var
from relaydsl.ir.types import Any, Kind, TypeVar
from relaydsl.op import all_ops, lookup
from relaydsl.typing.relations import check_relation
from tests.relaydsl.op.harness import OpCase, check_case

lax = jax.lax
rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def f64(*shape):
    return rng.standard_normal(shape)


def pos32(*shape):
    return rng.uniform(0.5, 3.0, shape).astype(np.float32)


def pos64(*shape):
    return rng.uniform(0.5, 3.0, shape)


def i32(*shape, low=-5, high=6):
    return rng.integers(low, high, shape).astype(np.int32)


def nonzero_i32(*shape):
    return (rng.integers(1, 5, shape) * rng.choice([-1, 1], shape)).astype(np.int32)


def bools(*shape):
    return rng.random(shape) < 0.5


def halves32(*shape):
    """float32 values with many exact halves (to check rounding ties)."""
    return (rng.integers(-6, 7, shape) / 2 + rng.choice([0, 0.2], shape)).astype(np.float32)


def halves64(*shape):
    return halves32(*shape).astype(np.float64)


def unary_cases(op, expected, dtypes=("float32", "float64"), make=None):
    """Cases of a unary op: a matrix of the first dtype, a scalar of the second, vectors after."""
    makers = {"float32": f32, "float64": f64, "int32": i32}
    gens = [make[d] if make else makers[d] for d in dtypes]
    return [OpCase(op, [gens[0](3, 4)], expected), OpCase(op, [gens[1]()], expected)] + [
        OpCase(op, [gen(5)], expected) for gen in gens[2:]
    ]


def binary_cases(op, expected, gens=(f32, f64, i32), count=3):
    """Broadcasting cases: (3,1) x (4,), equal shapes, scalar x vector; the dtypes cycle."""
    shapes = [((3, 1), (4,)), ((2, 3), (2, 3)), ((), (5,))][:count]
    return [OpCase(op, [gens[i % len(gens)](*a), gens[i % len(gens)](*b)], expected)
            for i, (a, b) in enumerate(shapes)]


POSITIVE = {"float32": pos32, "float64": pos64}
HALVES = {"float32": halves32, "float64": halves64}
SMALL = {"float32": lambda *s: rng.uniform(-1.4, 1.4, s).astype(np.float32),
         "float64": lambda *s: rng.uniform(-1.4, 1.4, s)}  # inside tan's (-pi/2, pi/2)

CASES = [
    *unary_cases("negative", lambda x: lax.neg(x), ("float32", "float64", "int32")),
    *unary_cases("exp", lambda x: lax.exp(x)),
    *unary_cases("log", lambda x: lax.log(x), make=POSITIVE),
    *unary_cases("sqrt", lambda x: lax.sqrt(x), make=POSITIVE),
    *unary_cases("rsqrt", lambda x: 1 / jnp.sqrt(x), make=POSITIVE),
    *unary_cases("tanh", lambda x: lax.tanh(x)),
    *unary_cases("sigmoid", lambda x: 1 / (1 + jnp.exp(-x))),
    *unary_cases("relu", lambda x: jnp.where(x > 0, x, 0), ("float32", "float64", "int32")),
    *unary_cases("abs", lambda x: lax.abs(x), ("float32", "float64", "int32")),
    *unary_cases("sign", lambda x: lax.sign(x), ("float32", "int32")),
    *unary_cases("floor", lambda x: lax.floor(x), make=HALVES),
    *unary_cases("ceil", lambda x: lax.ceil(x), make=HALVES),
    *unary_cases("round", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), make=HALVES),
    *unary_cases("trunc", lambda x: jnp.sign(x) * jnp.floor(jnp.abs(x)), make=HALVES),
    *unary_cases("sin", lambda x: lax.sin(x)),
    *unary_cases("cos", lambda x: lax.cos(x)),
    *unary_cases("tan", lambda x: lax.sin(x) / lax.cos(x), make=SMALL),
    *unary_cases("atan", lambda x: lax.atan2(x, jnp.ones_like(x))),
    *unary_cases("erf", lambda x: jax.scipy.special.erf(x)),
    OpCase("erf", [np.array([-np.inf, -6.0, -1e-3, 0.0, 3e-8, 2.5, np.inf], np.float32)],
           lambda x: lax.erf(x), name="tails, tiny, infinities"),
    OpCase("clip", [f32(3, 4)], lambda x: jnp.minimum(jnp.maximum(x, -0.5), 0.5),
           {"a_min": -0.5, "a_max": 0.5}),
    OpCase("clip", [f64(5)], lambda x: jnp.minimum(jnp.maximum(x, 0.0), 1.0),
           {"a_min": 0, "a_max": 1}),
    OpCase("clip", [i32(3, 4)], lambda x: jnp.minimum(jnp.maximum(x, -1), 1),
           {"a_min": -1.5, "a_max": 1.5}, name="int32 bounds truncated"),
    OpCase("cast_like", [f32(2, 3), np.zeros((), np.float64)],
           lambda x, like: x.astype(like.dtype)),
    OpCase("cast_like", [np.array([1.9, -1.9], np.float32), i32(1)],
           lambda x, like: lax.convert_element_type(x, like.dtype)),
    OpCase("cast", [np.array([-1.7, -0.2, 0.0, 0.9, 2.5], np.float32)],
           lambda x: lax.convert_element_type(x, jnp.int32), {"dtype": "int32"},
           name="float32 to int32 truncates"),
    OpCase("cast", [i32(2, 3)], lambda x: lax.convert_element_type(x, jnp.float32),
           {"dtype": "float32"}),
    OpCase("cast", [np.array([0.0, -1.5, 2.0], np.float32)], lambda x: x != 0, {"dtype": "bool"}),
    OpCase("cast", [bools(3)], lambda x: lax.convert_element_type(x, jnp.float64),
           {"dtype": "float64"}),
    *binary_cases("add", lambda x, y: x + y),
    *binary_cases("subtract", lambda x, y: x - y),
    *binary_cases("multiply", lambda x, y: x * y),
    *binary_cases("divide", lambda x, y: x / y, (f32, f64)),
    OpCase("divide", [i32(2, 3), nonzero_i32(3)],
           lambda x, y: jnp.floor(x.astype(jnp.float64) / y).astype(jnp.int32),
           name="int32 floor division"),
    OpCase("divide", [np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)],
           lambda x, y: jnp.array([3, -4, -4, 3], jnp.int32), name="int32 signs"),
    *binary_cases("power", lambda x, y: jnp.exp(y * jnp.log(x)), (pos32, pos64)),
    *binary_cases("floor_divide", lambda x, y: jnp.floor(x / y), (f32, f64)),
    OpCase("floor_divide", [np.array([7, -7, 7, -7, 0], np.int32),
                            np.array([2, 2, -2, -2, 3], np.int32)],
           lambda x, y: jnp.array([3, -4, -4, 3, 0], jnp.int32), name="int32 signs"),
    OpCase("floor_divide", [i32(2, 3), nonzero_i32(3)],
           lambda x, y: jnp.floor(x.astype(jnp.float64) / y).astype(jnp.int32)),
    *binary_cases("floor_mod", lambda x, y: x - jnp.floor(x / y) * y, (f32, f64)),
    OpCase("floor_mod", [np.array([7, -7, 7, -7, 0], np.int32),
                         np.array([3, 3, -3, -3, 3], np.int32)],
           lambda x, y: jnp.array([1, 2, -2, -1, 0], jnp.int32), name="int32 signs"),
    OpCase("floor_mod", [np.array([5.5, -5.5, 5.5, -5.5], np.float32),
                         np.array([2.0, 2.0, -2.0, -2.0], np.float32)],
           lambda x, y: jnp.array([1.5, 0.5, -0.5, -1.5], jnp.float32), name="float32 signs"),
    OpCase("left_shift", [i32(3, 1, low=-9, high=10), i32(4, low=0, high=8)],
           lambda x, y: x * (2 ** y)),
    OpCase("left_shift", [np.array([1, -1, 3, 5, 5], np.int32),
                          np.array([31, 31, 32, 40, -1], np.int32)],
           lambda x, y: jnp.array([-2**31, -2**31, 0, 0, 0], jnp.int32),
           name="int32 counts at and past the width"),
    OpCase("left_shift", [np.array([200, 3, 1], np.uint8), np.array([1, 9, 7], np.uint8)],
           lambda x, y: jnp.array([144, 0, 128], jnp.uint8), name="uint8 wraps"),
    OpCase("right_shift", [i32(3, 1, low=-99, high=100), i32(4, low=0, high=8)],
           lambda x, y: jnp.floor(x / (2.0 ** y)).astype(jnp.int32)),
    OpCase("right_shift", [np.array([-8, 8, -1, -5, 5], np.int64),
                           np.array([63, 63, 64, 100, -3], np.int64)],
           lambda x, y: jnp.array([-1, 0, -1, -1, 0], jnp.int64),
           name="int64 counts at and past the width: the sign fills"),
    OpCase("right_shift", [np.array([200, 255, 7], np.uint8), np.array([1, 8, 2], np.uint8)],
           lambda x, y: jnp.array([100, 0, 1], jnp.uint8), name="uint8 logical"),
    *binary_cases("maximum", lambda x, y: jnp.where(x >= y, x, y)),
    *binary_cases("minimum", lambda x, y: jnp.where(x <= y, x, y)),
    *binary_cases("equal", lambda x, y: x == y, (i32, f32), count=2),
    OpCase("equal", [bools(3, 1), bools(2)], lambda x, y: x == y),
    *binary_cases("not_equal", lambda x, y: x != y, (i32, f32), count=2),
    OpCase("not_equal", [bools(4), bools(4)], lambda x, y: x != y),
    *binary_cases("less", lambda x, y: x < y, (i32, f64), count=2),
    *binary_cases("less_equal", lambda x, y: x <= y, (i32, f32), count=2),
    *binary_cases("greater", lambda x, y: x > y, (i32, f32), count=2),
    *binary_cases("greater_equal", lambda x, y: x >= y, (i32, f64), count=2),
    *binary_cases("logical_and", lambda x, y: x & y, (bools,)),
    *binary_cases("logical_or", lambda x, y: x | y, (bools,), count=2),
    OpCase("logical_not", [bools(3, 4)], lambda x: ~x),
    OpCase("logical_not", [bools()], lambda x: ~x),
    OpCase("where", [bools(3, 1), f32(1, 4), f32(4)], lambda c, x, y: lax.select(
        jnp.broadcast_to(c, (3, 4)), jnp.broadcast_to(x, (3, 4)), jnp.broadcast_to(y, (3, 4)))),
    OpCase("where", [bools(2, 3), i32(2, 3), i32(2, 3)], lambda c, x, y: lax.select(c, x, y)),
    OpCase("where", [bools(), f64(5), f64()],
           lambda c, x, y: lax.select(jnp.broadcast_to(c, (5,)), x, jnp.broadcast_to(y, (5,)))),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_matches_jax(case):
    check_case(case)


def T(shape, dtype="float32"):
    return TensorType(shape, dtype)


def rel(op, *arg_types, **attrs):
    opdef = lookup(op)
    args = [Var(f"x{i}", t) for i, t in enumerate(arg_types)]
    return check_relation(opdef.type_relation, arg_types, Call(Op.get(op), args, attrs).attrs)


@pytest.mark.parametrize("op, arg_types, attrs, message", [
    ("add", [T((3,)), T((3,), "int32")], {}, r"add: argument types differ in dtype"),
    ("less", [T((3,), "int32"), T((3,), "int64")], {}, r"less: .*differ in dtype"),
    ("add", [T((3,)), T((4,))], {}, r"cannot be broadcast"),
    ("subtract", [T((3,), "bool"), T((3,), "bool")], {}, r"subtract: .*numeric \(non-bool\)"),
    ("exp", [T((3,), "int32")], {}, r"exp: the input must have a floating-point dtype, got "
                                    r"Tensor\[\(3,\), int32\]"),
    ("rsqrt", [T((3,), "bool")], {}, r"rsqrt: .*floating-point"),
    ("power", [T((3,), "int32"), T((3,), "int32")], {}, r"power: .*floating-point"),
    ("round", [T((2,), "int32")], {}, r"round: .*floating-point"),
    ("negative", [T((2,), "bool")], {}, r"negative: .*numeric"),
    ("logical_and", [T((3,)), T((3,))], {}, r"logical_and: .*bool dtype"),
    ("logical_not", [T((3,), "int32")], {}, r"logical_not: .*bool dtype"),
    ("where", [T((3,)), T((3,)), T((3,))], {}, r"where: the condition must have a bool dtype"),
    ("where", [T((3,), "bool"), T((3,)), T((3,), "float64")], {}, r"where: .*differ in dtype"),
    ("clip", [T((3,))], {"a_min": 2.0, "a_max": 1.0}, r"clip: attribute 'a_min' = 2.0 is greater"),
    ("sin", [T((3,), "int32")], {}, r"sin: .*floating-point"),
    ("erf", [T((3,), "int32")], {}, r"erf: .*floating-point"),
    ("trunc", [T((3,), "int32")], {}, r"trunc: .*floating-point"),
    ("left_shift", [T((3,)), T((3,))], {}, r"left_shift: .*integer"),
    ("right_shift", [T((3,), "int32"), T((3,), "int64")], {}, r"right_shift: .*differ in dtype"),
    ("floor_mod", [T((3,), "bool"), T((3,), "bool")], {}, r"floor_mod: .*numeric"),
])
def test_type_errors(op, arg_types, attrs, message):
    with pytest.raises(RelayTypeError, match=message):
        rel(op, *arg_types, **attrs)


@pytest.mark.parametrize("op, attrs, message", [
    ("clip", {"a_min": "x", "a_max": 1.0}, r"clip: attribute 'a_min' must be a number"),
    ("clip", {"a_min": 0.0}, r"clip: attribute 'a_max' is required"),
    ("cast", {"dtype": "float128"}, r"cast: attribute 'dtype' must be a dtype"),
    ("exp", {"axis": 0}, r"exp: unknown attribute"),
])
def test_bad_attributes(op, attrs, message):
    with pytest.raises(IRError, match=message):
        Call(Op.get(op), [Var("x", T((3,)))], attrs)


def test_symbolic_dims_pass_through():
    n, m = TypeVar("n", Kind.Shape), TypeVar("m", Kind.Shape)
    assert rel("exp", T((n, 3))) == T((n, 3))
    assert rel("add", T((n, 1)), T((4,))) == T((n, 4))
    assert rel("multiply", T((n, m)), T((n, 1))) == T((n, m))
    assert rel("less", T((Any, 3)), T((3,))) == T((Any, 3), "bool")
    assert rel("where", T((n, 1), "bool"), T((1, m)), T(())) == T((n, m))
    assert rel("cast", T((n,)), dtype="int32") == T((n,), "int32")


def test_symbolic_dims_must_agree():
    n, m = TypeVar("n", Kind.Shape), TypeVar("m", Kind.Shape)
    with pytest.raises(RelayTypeError, match="cannot be broadcast"):
        rel("add", T((n,)), T((m,)))


def test_the_four_arithmetic_ops_have_the_arithmetic_trait():
    arithmetic = {name for name, d in all_ops().items() if d.traits.arithmetic}
    assert arithmetic == {"add", "subtract", "multiply", "divide"}
