"""Elementwise and broadcasting ops: unary math, binary arithmetic, comparisons, logic.

Binary ops broadcast as NumPy does and require equal dtypes (there is no
implicit promotion; use ``cast``). Each op states which dtypes it accepts:
float-only math (exp, log, ...) rejects integer and bool tensors, arithmetic
rejects bool, logic requires bool. Integer ``divide`` is floor division
(Python ``//``); float ``divide`` is true division. NumPy references keep the
input dtype (float32 stays float32).

Every op is one block: the same-shaped ones (unary math, binary arithmetic,
comparisons, logic) one row each of a table, as JAX's lax.py writes them::

    exp = _unary("exp", FLOAT, "e**x",
                 te=E.exp, numpy=np.exp, jax=lambda x: jnp.exp(x),
                 grad=("d exp(x) = g * exp(x).", lambda g, x, y: multiply(g, y)))

``te`` is the op's element in ``relaydsl.te`` (a function of the input elements),
``numpy`` its reference, ``jax`` its lowering (JAX is read only inside function bodies),
``grad`` its gradient: a unary op's ``(math, adjoint(g, x, y))`` with ``y`` the op's
output, a binary op's ``(math, adjoints(g, x, y, z))`` with ``z`` the output, whose two
adjoints are summed down to the inputs' shapes (``collapse_sum_like``, the adjoint of
broadcasting). The rest (clip, cast, cast_like, where) are written out in full.
"""
from __future__ import annotations

import math
from typing import Any as AnyValue, Callable, Sequence

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Constant, Expr
from relaydsl.ir.types import TensorType, Type
from relaydsl.op.grad_util import collapse, scalar, tensor_type, through_cast, zeros_for
from relaydsl.op import quantize_rule as Q
from relaydsl.op.lazy_jax import jax, jnp, lax
from relaydsl.op.quantize_rule import QuantizeRule
from relaydsl.op.registry import (
    Array, Attr, BinaryArrayFn, OpDef, OpPattern, Traits, UnaryArrayFn, register,
)
from relaydsl.te import expr as E
from relaydsl.te.intrinsics import erf as te_erf
from relaydsl.te.expr import INT_DTYPES, PrimExpr
from relaydsl.te.rules import broadcast_read, elementwise
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import (
    BOOL, FLOAT, INTEGER, NUMERIC, DTypeClass, RelationContext, broadcast_shapes, require_dtype,
    same_dtype, tensor_arg,
)

Relation = Callable[[list[Type], Attrs, RelationContext], Type]
UnaryAdjoint = Callable[[Expr, Expr, Expr], Expr]  # (g, x, y = op(x)) -> the adjoint of x
# (g, x, y, z = op(x, y)) -> the adjoints of x and y before summing them down to x's and y's shapes
BinaryAdjoints = Callable[[Expr, Expr, Expr, Expr], tuple[Expr, Expr]]


def elementwise_rel(op: str, accepts: DTypeClass | None, out_dtype: str | None = None) -> Relation:
    """The relation of an elementwise op: broadcast shapes, equal dtypes from `accepts`.

    The output has the common dtype, or `out_dtype` if given (comparisons give bool).
    """

    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        ts = [tensor_arg(ctx, a, f"{op}: argument {i}") for i, a in enumerate(args)]
        dtype = same_dtype(ctx, ts, op)
        if accepts is not None:
            for t in ts:
                require_dtype(ctx, op, "the input" if len(ts) == 1 else "each input", t, accepts)
        return TensorType(broadcast_shapes(ctx, *(t.shape for t in ts)), out_dtype or dtype)

    return rel


def _named(rule: Callable[[Call, Expr], list[Expr]], name: str, math: str
           ) -> Callable[[Call, Expr], list[Expr]]:
    rule.__doc__ = math
    rule.__name__ = rule.__qualname__ = f"{name}_grad"
    return rule


def _unary(name: str, accepts: DTypeClass | None, doc: str, *, te: Callable[[PrimExpr], PrimExpr],
           numpy: UnaryArrayFn, jax: UnaryArrayFn, grad: tuple[str, UnaryAdjoint] | None = None,
           quantize: QuantizeRule | None = None) -> OpDef:
    """Registers the unary elementwise op of one table row; no `grad`: not differentiable."""
    gradient = None
    if grad is not None:
        math, adjoint = grad

        def rule(call: Call, g: Expr) -> list[Expr]:
            return [adjoint(g, call.args[0], call)]

        gradient = _named(rule, name, math)
    return register(OpDef(
        name, ("data",), elementwise_rel(name, accepts), OpPattern.ELEMWISE,
        numpy_ref=numpy, jax_lower=jax, compute=elementwise(name, lambda attrs, x: te(x)),
        gradient=gradient, differentiable=gradient is not None, doc=doc,
        traits=Traits(quantize=quantize),
    ))


def _binary(name: str, accepts: DTypeClass | None, doc: str, *,
            te: Callable[[PrimExpr, PrimExpr], PrimExpr], numpy: BinaryArrayFn, jax: BinaryArrayFn,
            grad: tuple[str, BinaryAdjoints] | None = None, out_dtype: str | None = None,
            arithmetic: bool = False, quantize: QuantizeRule | None = None) -> OpDef:
    """Registers the broadcasting binary op of one table row; no `grad`: not differentiable."""
    gradient = None
    if grad is not None:
        math, adjoints = grad

        def rule(call: Call, g: Expr) -> list[Expr]:
            x, y = call.args
            dx, dy = adjoints(g, x, y, call)
            return [collapse(dx, x), collapse(dy, y)]

        gradient = _named(rule, name, math)
    return register(OpDef(
        name, ("lhs", "rhs"), elementwise_rel(name, accepts, out_dtype), OpPattern.BROADCAST,
        numpy_ref=numpy, jax_lower=jax, compute=elementwise(name, lambda attrs, x, y: te(x, y)),
        gradient=gradient, differentiable=gradient is not None, doc=doc,
        traits=Traits(arithmetic=arithmetic, quantize=quantize),
    ))


def _compare(name: str, doc: str, *, te: Callable[[PrimExpr, PrimExpr], PrimExpr],
             numpy: BinaryArrayFn, jax: BinaryArrayFn) -> OpDef:
    """Registers a comparison: any dtype, a bool result, no gradient."""
    return _binary(name, None, doc, te=te, numpy=numpy, jax=jax, out_dtype="bool")


# ---- unary math ---------------------------------------------------------------

negative = _unary(
    "negative", NUMERIC, "-x",
    te=lambda x: -x, numpy=np.negative, jax=lambda x: jnp.negative(x),
    grad=("d(-x) = -g.", lambda g, x, y: negative(g)))
exp = _unary(
    "exp", FLOAT, "e**x",
    te=E.exp, numpy=np.exp, jax=lambda x: jnp.exp(x),
    grad=("d exp(x) = g * exp(x).", lambda g, x, y: multiply(g, y)))
log = _unary(
    "log", FLOAT, "natural logarithm of x",
    te=E.log, numpy=np.log, jax=lambda x: jnp.log(x),
    grad=("d log(x) = g / x.", lambda g, x, y: divide(g, x)))
sqrt = _unary(
    "sqrt", FLOAT, "square root of x",
    te=E.sqrt, numpy=np.sqrt, jax=lambda x: jnp.sqrt(x),
    grad=("d sqrt(x) = g * 0.5 / sqrt(x).",
          lambda g, x, y: divide(multiply(g, scalar(0.5, x)), y)))
rsqrt = _unary(
    "rsqrt", FLOAT, "1 / sqrt(x)",
    te=lambda x: E.call("rsqrt", x), numpy=lambda x: np.reciprocal(np.sqrt(x)),
    jax=lambda x: lax.rsqrt(x),
    grad=("d rsqrt(x) = g * -0.5 * rsqrt(x) / x.",
          lambda g, x, y: multiply(multiply(g, scalar(-0.5, x)), divide(y, x))))
tanh = _unary(
    "tanh", FLOAT, "hyperbolic tangent of x",
    te=E.tanh, numpy=np.tanh, jax=lambda x: jnp.tanh(x),
    grad=("d tanh(x) = g * (1 - tanh(x)**2).",
          lambda g, x, y: multiply(g, subtract(scalar(1, x), multiply(y, y)))))
sigmoid = _unary(
    "sigmoid", FLOAT, "1 / (1 + e**-x)",
    te=E.sigmoid, numpy=lambda x: 0.5 * (np.tanh(0.5 * x) + 1), jax=lambda x: jax.nn.sigmoid(x),
    grad=("d sigmoid(x) = g * s * (1 - s), s = sigmoid(x).",
          lambda g, x, y: multiply(multiply(g, y), subtract(scalar(1, x), y))))
relu = _unary(
    "relu", NUMERIC, "max(x, 0)",
    te=lambda x: E.maximum(x, 0), numpy=lambda x: np.maximum(x, np.zeros((), x.dtype)),
    jax=lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)),
    # tested on the output, which is > 0 exactly where x is: the backward pass then reads
    # relu's result, not its input, and a forward kernel computing x need not keep it
    # (dense + bias + relu fuse into one kernel in a network's gradient too)
    grad=("d relu(x) = g where relu(x) > 0, else 0.",
          lambda g, x, y: where(greater(y, scalar(0, x)), g, scalar(0, x))),
    quantize=Q.SAME_SCALE_ELEMENTWISE)
abs_ = _unary(
    "abs", NUMERIC, "|x|",
    te=E.abs_, numpy=np.abs, jax=lambda x: jnp.abs(x),
    grad=("d|x| = g where x >= 0, else -g (JAX's choice at 0).",
          lambda g, x, y: where(greater_equal(x, scalar(0, x)), g, negative(g))))
sign = _unary(
    "sign", NUMERIC, "-1, 0 or 1 by the sign of x",
    te=lambda x: E.call("sign", x), numpy=np.sign, jax=lambda x: jnp.sign(x))
floor = _unary(
    "floor", FLOAT, "largest integer <= x",
    te=lambda x: E.call("floor", x), numpy=np.floor, jax=lambda x: jnp.floor(x))
ceil = _unary(
    "ceil", FLOAT, "smallest integer >= x",
    te=lambda x: E.call("ceil", x), numpy=np.ceil, jax=lambda x: jnp.ceil(x))
round_ = _unary(
    "round", FLOAT, "nearest integer, ties to even",
    te=lambda x: E.call("round", x), numpy=np.round, jax=lambda x: jnp.round(x))
trunc = _unary(
    "trunc", FLOAT, "x rounded toward zero",
    te=lambda x: E.call("trunc", x), numpy=np.trunc, jax=lambda x: jnp.trunc(x))
sin = _unary(
    "sin", FLOAT, "sine of x (radians)",
    te=lambda x: E.call("sin", x), numpy=np.sin, jax=lambda x: jnp.sin(x),
    grad=("d sin(x) = g * cos(x).", lambda g, x, y: multiply(g, cos(x))))
cos = _unary(
    "cos", FLOAT, "cosine of x (radians)",
    te=lambda x: E.call("cos", x), numpy=np.cos, jax=lambda x: jnp.cos(x),
    grad=("d cos(x) = -g * sin(x).", lambda g, x, y: multiply(negative(g), sin(x))))
tan = _unary(
    "tan", FLOAT, "tangent of x (radians)",
    te=lambda x: E.call("tan", x), numpy=np.tan, jax=lambda x: jnp.tan(x),
    grad=("d tan(x) = g * (1 + tan(x)**2).",
          lambda g, x, y: multiply(g, add(scalar(1, x), multiply(y, y)))))
atan = _unary(
    "atan", FLOAT, "arctangent of x, in (-pi/2, pi/2)",
    te=lambda x: E.call("atan", x), numpy=np.arctan, jax=lambda x: jnp.arctan(x),
    grad=("d atan(x) = g / (1 + x**2).",
          lambda g, x, y: divide(g, add(scalar(1, x), multiply(x, x)))))
erf = _unary(
    "erf", FLOAT, "the error function, 2/sqrt(pi) * integral of e**-t**2 from 0 to x",
    te=lambda x: E.call("erf", x), numpy=te_erf, jax=lambda x: lax.erf(x),
    grad=("d erf(x) = g * 2/sqrt(pi) * e**(-x**2).",
          lambda g, x, y: multiply(multiply(g, scalar(2 / math.sqrt(math.pi), x)),
                                   exp(negative(multiply(x, x))))))


# ---- clip ----------------------------------------------------------------------

_clip_elementwise = elementwise_rel("clip", NUMERIC)


def _clip_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    if attrs.a_min > attrs.a_max:
        ctx.fail(f"clip: attribute 'a_min' = {attrs.a_min} is greater than 'a_max' = {attrs.a_max}")
    return _clip_elementwise(args, attrs, ctx)


def _clip_numpy(x: AnyValue, a_min: float, a_max: float) -> AnyValue:
    return np.clip(x, np.asarray(a_min, x.dtype), np.asarray(a_max, x.dtype))


def _clip_jax(x: AnyValue, a_min: float, a_max: float) -> AnyValue:
    return jnp.clip(x, jnp.asarray(a_min, x.dtype), jnp.asarray(a_max, x.dtype))


def _clip_element(attrs: Attrs, x: PrimExpr) -> PrimExpr:
    # the bounds become x's dtype as np.asarray(bound, dtype) makes them: ints truncate
    lo, hi = ((int(attrs.a_min), int(attrs.a_max)) if x.dtype in INT_DTYPES
              else (attrs.a_min, attrs.a_max))
    return E.minimum(E.maximum(x, lo), hi)


def _clip_grad(call: Call, g: Expr) -> list[Expr]:
    """d clip(x, lo, hi) = g where lo <= x <= hi, else 0."""
    x, a = call.args[0], call.attrs
    inside = logical_and(greater_equal(x, scalar(a.a_min, x)), less_equal(x, scalar(a.a_max, x)))
    return [where(inside, g, scalar(0, x))]


def _clip_integer(call: Call, q: Expr, step: AnyValue, dtype: str) -> Q.IntegerForm | None:
    """On integers of step s (one step: a per-channel one would need bounds per channel):
    clip(q, round(a_min / s), round(a_max / s)), the bounds held to the dtype's range."""
    if np.ndim(step):
        return None
    info = np.iinfo(dtype)
    lo, hi = (float(np.clip(np.round(np.float64(b) / np.float64(step)), info.min, info.max))
              for b in (call.attrs.a_min, call.attrs.a_max))
    return Q.IntegerForm(clip(q, a_min=lo, a_max=hi), 1.0, dtype)


clip = register(OpDef(
    "clip", ("data",), _clip_rel, OpPattern.ELEMWISE, _clip_numpy, _clip_jax,
    compute=elementwise("clip", _clip_element), gradient=_clip_grad,
    attrs=(Attr("a_min", "float", doc="lower bound, converted to the input dtype"),
           Attr("a_max", "float", doc="upper bound, converted to the input dtype")),
    doc="min(max(x, a_min), a_max); the bounds are converted to x's dtype",
    traits=Traits(quantize=Q.rescale_rule(_clip_integer)),
))


# ---- cast ----------------------------------------------------------------------


def _cast_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "cast: the input")
    return TensorType(t.shape, attrs.dtype)


def _cast_grad(call: Call, g: Expr) -> list[Expr]:
    """d cast(x) = cast_like(g, x), or 0 unless x and the result are float."""
    return [through_cast(g, call.args[0], call.attrs.dtype)]


def _cast_numpy(x: Array, dtype: str) -> Array:
    return np.asarray(x).astype(dtype)


def _cast_jax(x: Array, dtype: str) -> Array:
    return x.astype(dtype)


cast = register(OpDef(
    "cast", ("data",), _cast_rel, OpPattern.ELEMWISE,
    numpy_ref=_cast_numpy, jax_lower=_cast_jax,
    compute=elementwise("cast", lambda attrs, x: E.cast(attrs.dtype, x)),
    gradient=_cast_grad,
    attrs=(Attr("dtype", "dtype", doc="the result dtype"),),
    doc="x converted to `dtype` (float to int truncates toward zero)",
))


# ---- cast_like -----------------------------------------------------------------


def _cast_like_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "cast_like: the input")
    like = tensor_arg(ctx, args[1], "cast_like: the dtype source")
    return TensorType(t.shape, like.dtype)


def _cast_like_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """x in like's dtype; like (any shape) gives only the dtype, so it is never read."""
    x, like = inputs
    shape = out_type.concrete_shape()
    return compute(shape, lambda *i: E.cast(like.dtype, broadcast_read(x, i)), "T_cast_like")


def _cast_like_grad(call: Call, g: Expr) -> list[Expr]:
    """d cast_like(x, t) = (cast_like(g, x), 0), or 0 for x unless x and t are float."""
    x, like = call.args
    return [through_cast(g, x, tensor_type(like).dtype), zeros_for(like)]


def _cast_like_fold(call: Call, arg_types: Sequence[Type]) -> Expr | None:
    """cast_like(c, t) of a constant c is c in t's dtype, whatever t's value.

    What a Python literal meeting a tensor (``x + 1.0``) becomes: left as a call it would
    read the tensor, keeping ``+`` out of x's fusion group.
    """
    data, t = call.args[0], arg_types[1]
    if not (isinstance(data, Constant) and isinstance(t, TensorType)
            and isinstance(t.dtype, str)):
        return None
    return Constant(np.asarray(data.data).astype(t.dtype), span=call.span)


def _cast_like_numpy(x: Array, like: Array) -> Array:
    return _cast_numpy(x, like.dtype)


def _cast_like_jax(x: Array, like: Array) -> Array:
    return _cast_jax(x, like.dtype)


cast_like = register(OpDef(
    "cast_like", ("data", "dtype_like"), _cast_like_rel, OpPattern.ELEMWISE,
    numpy_ref=_cast_like_numpy, jax_lower=_cast_like_jax,
    compute=_cast_like_compute, gradient=_cast_like_grad,
    doc="x converted to the dtype of `dtype_like` (how Python literals take their operand's dtype)",
    traits=Traits(fold_from_types=_cast_like_fold),
))


# ---- binary arithmetic -------------------------------------------------------


def _divide_numpy(x: AnyValue, y: AnyValue) -> AnyValue:
    return np.floor_divide(x, y) if np.issubdtype(x.dtype, np.integer) else np.true_divide(x, y)


def _divide_jax(x: AnyValue, y: AnyValue) -> AnyValue:
    return jnp.floor_divide(x, y) if jnp.issubdtype(x.dtype, jnp.integer) else jnp.true_divide(x, y)


def _power_adjoints(g: Expr, x: Expr, y: Expr, z: Expr) -> tuple[Expr, Expr]:
    """g * y * x**(y-1) (0 where y == 0) and g * x**y * log x (log 1 where x == 0)."""
    zero, one = scalar(0, x), scalar(1, x)
    dx = where(equal(y, zero), zero, multiply(y, power(x, subtract(y, one))))
    log_x = log(where(equal(x, zero), one, x))
    return multiply(g, dx), multiply(g, multiply(z, log_x))


def _chooser(wins: Callable[[Expr, Expr], Expr]) -> BinaryAdjoints:
    """The adjoints of maximum/minimum: g where an input wins (`wins` compares), g/2 at ties."""

    def adjoints(g: Expr, x: Expr, y: Expr, z: Expr) -> tuple[Expr, Expr]:
        half, tie = multiply(g, scalar(0.5, x)), equal(x, y)

        def share(a: Expr, b: Expr) -> Expr:
            return where(wins(a, b), g, where(tie, half, scalar(0, x)))

        return share(x, y), share(y, x)

    return adjoints


add = _binary(
    "add", NUMERIC, "x + y, broadcasting",
    te=E.Add, numpy=np.add, jax=lambda x, y: jnp.add(x, y),
    grad=("d(x + y) = (sum_b(g, x), sum_b(g, y)).", lambda g, x, y, z: (g, g)),
    arithmetic=True, quantize=Q.RESIDUAL_SUM)
subtract = _binary(
    "subtract", NUMERIC, "x - y, broadcasting",
    te=E.Sub, numpy=np.subtract, jax=lambda x, y: jnp.subtract(x, y),
    grad=("d(x - y) = (sum_b(g, x), sum_b(-g, y)).", lambda g, x, y, z: (g, negative(g))),
    arithmetic=True)
multiply = _binary(
    "multiply", NUMERIC, "x * y, broadcasting",
    te=E.Mul, numpy=np.multiply, jax=lambda x, y: jnp.multiply(x, y),
    grad=("d(x * y) = (sum_b(g * y, x), sum_b(g * x, y)).",
          lambda g, x, y, z: (multiply(g, y), multiply(g, x))),
    arithmetic=True, quantize=Q.ELEMENTWISE_PRODUCT)
divide = _binary(
    "divide", NUMERIC, "x / y for floats, x // y (floor division) for integers, broadcasting",
    te=E.Div, numpy=_divide_numpy, jax=_divide_jax,
    grad=("d(x / y) = (sum_b(g / y, x), sum_b(-g * (x / y) / y, y)).",
          lambda g, x, y, z: (divide(g, y), divide(multiply(negative(g), z), y))),
    arithmetic=True)
power = _binary(
    "power", FLOAT, "x ** y, broadcasting",
    te=E.power, numpy=np.power, jax=lambda x, y: jnp.power(x, y),
    grad=("d x**y = (sum_b(g * y * x**(y-1), x), sum_b(g * x**y * log x, y)); "
          "0 at y == 0 / x == 0.", _power_adjoints))
maximum = _binary(
    "maximum", NUMERIC, "elementwise max(x, y), broadcasting",
    te=E.Max, numpy=np.maximum, jax=lambda x, y: jnp.maximum(x, y),
    grad=("d max(x, y) = (sum_b(g * [x > y] + g/2 * [x == y], x), likewise for y).",
          _chooser(lambda a, b: greater(a, b))))
minimum = _binary(
    "minimum", NUMERIC, "elementwise min(x, y), broadcasting",
    te=E.Min, numpy=np.minimum, jax=lambda x, y: jnp.minimum(x, y),
    grad=("d min(x, y) = (sum_b(g * [x < y] + g/2 * [x == y], x), likewise for y).",
          _chooser(lambda a, b: less(a, b))))

# ---- floor division and modulo (TVM's floor_divide, floor_mod) -----------------


def _floor_divide_reference(xp: AnyValue) -> BinaryArrayFn:
    """floor(x / y): NumPy's // for integers, TVM's floor(x / y) for floats (where NumPy's
    fmod-based // can differ by one when x / y rounds up to an integer)."""

    def ref(x: AnyValue, y: AnyValue) -> AnyValue:
        if xp.issubdtype(x.dtype, xp.integer):
            return xp.floor_divide(x, y)
        return xp.floor(x / y)

    return ref


def _floor_mod_reference(xp: AnyValue) -> BinaryArrayFn:
    """x - floor(x / y) * y, with the sign of y: NumPy's % for integers, TVM's for floats."""

    def ref(x: AnyValue, y: AnyValue) -> AnyValue:
        if xp.issubdtype(x.dtype, xp.integer):
            return xp.mod(x, y)
        return x - xp.floor(x / y) * y

    return ref


floor_divide = _binary(
    "floor_divide", NUMERIC, "floor(x / y), broadcasting; integers: 0 for a zero divisor",
    te=E.FloorDiv, numpy=_floor_divide_reference(np),
    jax=lambda x, y: _floor_divide_reference(jnp)(x, y))
floor_mod = _binary(
    "floor_mod", NUMERIC, "x - floor(x / y) * y (the sign of y), broadcasting; integers: 0 for "
    "a zero divisor",
    te=E.FloorMod, numpy=_floor_mod_reference(np), jax=lambda x, y: _floor_mod_reference(jnp)(x, y),
    grad=("d(x mod y) = (sum_b(g, x), sum_b(-g * floor(x / y), y)).",
          lambda g, x, y, z: (g, multiply(negative(g), floor(divide(x, y))))))

# ---- shifts (integers) ---------------------------------------------------------
# As NumPy's: a count outside 0 .. bits-1 shifts every bit out (right: the sign bit fills).

left_shift = _binary(
    "left_shift", INTEGER, "x << y, broadcasting; 0 for a count outside 0 .. bits-1",
    te=lambda x, y: E.call("left_shift", x, y), numpy=np.left_shift,
    jax=lambda x, y: jnp.left_shift(x, y))
right_shift = _binary(
    "right_shift", INTEGER, "x >> y (arithmetic for signed x), broadcasting; a count outside "
    "0 .. bits-1 leaves only the sign (0 or -1)",
    te=lambda x, y: E.call("right_shift", x, y), numpy=np.right_shift,
    jax=lambda x, y: jnp.right_shift(x, y))

# ---- comparisons (any dtype, bool result) --------------------------------------

equal = _compare("equal", "x == y, broadcasting; bool result",
                 te=E.EQ, numpy=np.equal, jax=lambda x, y: jnp.equal(x, y))
not_equal = _compare("not_equal", "x != y, broadcasting; bool result",
                     te=E.NE, numpy=np.not_equal, jax=lambda x, y: jnp.not_equal(x, y))
less = _compare("less", "x < y, broadcasting; bool result",
                te=E.LT, numpy=np.less, jax=lambda x, y: jnp.less(x, y))
less_equal = _compare("less_equal", "x <= y, broadcasting; bool result",
                      te=E.LE, numpy=np.less_equal, jax=lambda x, y: jnp.less_equal(x, y))
greater = _compare("greater", "x > y, broadcasting; bool result",
                   te=E.GT, numpy=np.greater, jax=lambda x, y: jnp.greater(x, y))
greater_equal = _compare("greater_equal", "x >= y, broadcasting; bool result",
                         te=E.GE, numpy=np.greater_equal,
                         jax=lambda x, y: jnp.greater_equal(x, y))

# ---- logic (bool only) ---------------------------------------------------------

logical_and = _binary("logical_and", BOOL, "x and y, broadcasting",
                      te=E.And, numpy=np.logical_and, jax=lambda x, y: jnp.logical_and(x, y))
logical_or = _binary("logical_or", BOOL, "x or y, broadcasting",
                     te=E.Or, numpy=np.logical_or, jax=lambda x, y: jnp.logical_or(x, y))
logical_not = _unary("logical_not", BOOL, "not x",
                     te=lambda x: ~x, numpy=np.logical_not, jax=lambda x: jnp.logical_not(x))

# ---- selection -------------------------------------------------------------------


def _where_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    cond, x, y = (tensor_arg(ctx, a, f"where: argument {n}")
                  for a, n in zip(args, ("condition", "x", "y")))
    require_dtype(ctx, "where", "the condition", cond, BOOL)
    dtype = same_dtype(ctx, [x, y], "where")
    return TensorType(broadcast_shapes(ctx, cond.shape, x.shape, y.shape), dtype)


def _where_grad(call: Call, g: Expr) -> list[Expr]:
    """d where(c, x, y) = (0, sum_b(where(c, g, 0), x), sum_b(where(c, 0, g), y))."""
    cond, x, y = call.args
    zero = scalar(0, x)
    return [zeros_for(cond), collapse(where(cond, g, zero), x), collapse(where(cond, zero, g), y)]


def _where_jax(condition: Array, x: Array, y: Array) -> Array:
    return jnp.where(condition, x, y)


where = register(OpDef(
    "where", ("condition", "x", "y"), _where_rel, OpPattern.BROADCAST,
    numpy_ref=np.where, jax_lower=_where_jax,
    compute=elementwise("where", lambda attrs, c, x, y: E.select(c, x, y)),
    gradient=_where_grad,
    doc="x where condition else y, all three broadcasting",
))
