"""Gradient rules: the adjoints of every differentiable op, written as Relay (DESIGN.md §3).

A rule is ``rule(call, g) -> [one expression per input]``: given a call of the op and an
expression ``g`` for the adjoint of the call's output (tuple-typed for split and
batch_norm), it returns the adjoint of each input, of exactly that input's type.
transform/gradient.py calls the rules; each is registered here on its op's definition
(``lookup(name).gradient``) when the op families load. As in TVM's ``_tensor_grad.py``:

* broadcasting is undone in one place, ``collapse_sum_like(d, x)``;
* an input that gets no gradient (take's indices, where's condition, the shape source of
  a ``*_like`` op, an integer or bool tensor) gets ``zeros_like(x)``;
* a rule may use ``call`` itself (the op's output, recomputed) and reuse the call's
  arguments: the transform binds them to variables.

Rules read the types of the call's arguments -- ``checked_type``, or a Var's annotation --
to normalise axes and size reshapes, never the type of ``g``. Sizes a rule bakes into
attributes must be static: concatenate's axis, the weight and the non-batch dims of conv2d
and the pools, dense's weight for data of rank > 2 (and a strided conv2d's data adjoint
has an ``Any`` batch dim: spreading g reshapes it). Everything else works on symbolic dims
too (``reshape_like``, ``collapse_sum_like``, counts from ``shape_of``).

The adjoint ops the rules build on -- collapse_sum_like, reshape_like, take_grad,
strided_slice_grad, max_pool2d_grad -- have rules here too, so gradients of gradients work.

Each rule's docstring states its math in one line; ``g`` is the output adjoint and
``sum_b(d, x)`` means ``collapse_sum_like(d, x)``.
"""
from __future__ import annotations

import functools
import math
from typing import Any as AnyValue, Callable, Sequence

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem, Var, const
from relaydsl.ir.types import TensorType, TupleType, Type, is_float, type_to_str
from relaydsl.op.nn import _avg_divisor, _out_size, _pair, _padding, _pool_window, _Window
from relaydsl.op.registry import lookup

Rule = Callable[[Call, Expr], list[Expr]]

# ---- building Relay ---------------------------------------------------------------------------


def _call(name: str, *args: Expr, **attrs: AnyValue) -> Call:
    return Call(Op.get(name), args, attrs)


_add = functools.partial(_call, "add")
_sub = functools.partial(_call, "subtract")
_mul = functools.partial(_call, "multiply")
_div = functools.partial(_call, "divide")
_where = functools.partial(_call, "where")
_END = 2**31 - 1  # a strided_slice end past any axis


def _sum(x: Expr, axis: AnyValue, keepdims: bool = False) -> Expr:
    return _call("sum", x, axis=axis, keepdims=keepdims)


def _mean(x: Expr, axis: AnyValue) -> Expr:
    return _call("mean", x, axis=axis, keepdims=True)


def _collapse(d: Expr, x: Expr) -> Expr:
    """d summed down to x's shape: undoes the broadcasting of x into d."""
    return _call("collapse_sum_like", d, x)


def _broadcast_like(d: Expr, x: Expr) -> Expr:
    """d broadcast to x's shape (d's dims are 1 or x's), as d + zeros_like(x)."""
    return _add(d, _call("zeros_like", x))


# ---- reading the inputs' types ------------------------------------------------------------------


def _type(e: Expr) -> Type:
    if e.has_type:
        return e.checked_type
    if isinstance(e, Var) and e.type_annotation is not None:
        return e.type_annotation
    if isinstance(e, Constant):
        return TensorType(e.data.shape, e.data.dtype.name)
    if isinstance(e, Tuple):
        return TupleType(tuple(_type(f) for f in e.fields))
    if isinstance(e, TupleGetItem):
        t = _type(e.tuple_value)
        if isinstance(t, TupleType):
            return t.fields[e.index]
    raise IRError(f"a gradient rule needs the type of the operator input {e!r:.80}: give the "
                  "call's arguments a checked_type (or Var annotations) before applying it")


def _tensor(e: Expr) -> TensorType:
    t = _type(e)
    if not isinstance(t, TensorType):
        raise IRError(f"a gradient rule expected a tensor input, got {type_to_str(t)}")
    return t


def _image_hw(x: Expr, what: str) -> tuple[int, int]:
    """The static (H, W) of NCHW or CHW x; the batch may be symbolic."""
    t = _tensor(x)
    h, w = t.shape[-2:]
    if not (isinstance(h, int) and isinstance(w, int)):
        raise IRError(f"the gradient of {what} needs static H and W, got {type_to_str(t)}")
    return h, w


def _dims(e: Expr, what: str) -> tuple[int, ...]:
    """e's static shape; `what` names the rule that needs it."""
    t = _tensor(e)
    if not t.is_static:
        raise IRError(f"the gradient of {what} needs static dims, got {type_to_str(t)}")
    return t.concrete_shape()


def _scalar(value: float, like: Expr) -> Constant:
    return const(value, _tensor(like).dtype)


def _zeros(x: Expr) -> Expr:
    """The zero adjoint of x: zeros_like, field by field for a tuple."""
    t = _type(x)
    if isinstance(t, TupleType):
        return Tuple([_zeros(TupleGetItem(x, i)) for i in range(len(t.fields))])
    return _call("zeros_like", x)


def _has_float(t: Type) -> bool:
    if isinstance(t, TupleType):
        return any(_has_float(f) for f in t.fields)
    return isinstance(t, TensorType) and is_float(t.dtype)


def _axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """An axis attribute normalised to non-negative axes; None is every axis."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in ((axis,) if isinstance(axis, int) else axis))


def _others(axis: int, ndim: int) -> tuple[int, ...]:
    return tuple(i for i in range(ndim) if i != axis % ndim)


def _count(x: Expr, axes: Sequence[int]) -> Expr:
    """How many elements of x a reduction over `axes` combines, a scalar of x's dtype."""
    dims = [_tensor(x).shape[a] for a in axes]
    if all(isinstance(d, int) for d in dims):
        return _scalar(math.prod(dims), x)  # type: ignore[arg-type]
    sizes = _call("take", _call("shape_of", x), const(np.array(axes, np.int32)), axis=0)
    return _call("cast_like", _call("prod", sizes), x)


def _unreduce(g: Expr, x: Expr, axis: int | Sequence[int] | None, keepdims: bool) -> Expr:
    """g, the adjoint of a reduction of x over `axis`, with the reduced axes back as size 1."""
    if keepdims or axis is None:  # without keepdims, a full reduction's g is a scalar
        return g
    for a in sorted(_axes(axis, _tensor(x).ndim)):
        g = _call("expand_dims", g, axis=a)
    return g


def _along(v: Expr, axis: int, ndim: int) -> Expr:
    """A 1-D v broadcastable along `axis` of a rank-ndim tensor: (n, 1, ..., 1)."""
    trailing = ndim - 1 - axis % ndim
    return _call("expand_dims", v, axis=1, num_newaxis=trailing) if trailing else v


def _through_cast(d: Expr, x: Expr, out_dtype: str) -> Expr:
    """d carried back through a cast of x to out_dtype: zero unless both dtypes are float."""
    if is_float(out_dtype) and is_float(_tensor(x).dtype):
        return _call("cast_like", d, x)
    return _call("zeros_like", x)


# ---- registration -------------------------------------------------------------------------------


def _rule(*names: str) -> Callable[[Rule], Rule]:
    """Registers the decorated rule for the ops `names`.

    A call without a float input gets zeros for every input (nothing flows through it)."""

    def register(rule: Rule) -> Rule:
        @functools.wraps(rule)
        def guarded(call: Call, g: Expr) -> list[Expr]:
            if not any(_has_float(_type(a)) for a in call.args):
                return [_zeros(a) for a in call.args]
            return rule(call, g)

        for name in names:
            lookup(name).gradient = guarded
        return rule

    return register


def _elementwise(name: str, math_: str, adjoint: Callable[[Expr, Expr, Expr], Expr]) -> None:
    """Registers d name(x) = adjoint(g, x, y), y = name(x); `math_` is the rule's docstring."""

    def rule(call: Call, g: Expr) -> list[Expr]:
        return [adjoint(g, call.args[0], call)]

    rule.__doc__ = math_
    rule.__name__ = rule.__qualname__ = f"_{name}_grad"
    _rule(name)(rule)


# ---- elementwise --------------------------------------------------------------------------------

_elementwise("negative", "d(-x) = -g.", lambda g, x, y: _call("negative", g))
_elementwise("exp", "d exp(x) = g * exp(x).", lambda g, x, y: _mul(g, y))
_elementwise("log", "d log(x) = g / x.", lambda g, x, y: _div(g, x))
_elementwise("sqrt", "d sqrt(x) = g * 0.5 / sqrt(x).",
             lambda g, x, y: _div(_mul(g, _scalar(0.5, x)), y))
_elementwise("rsqrt", "d rsqrt(x) = g * -0.5 * rsqrt(x) / x.",
             lambda g, x, y: _mul(_mul(g, _scalar(-0.5, x)), _div(y, x)))
_elementwise("tanh", "d tanh(x) = g * (1 - tanh(x)**2).",
             lambda g, x, y: _mul(g, _sub(_scalar(1, x), _mul(y, y))))
_elementwise("sigmoid", "d sigmoid(x) = g * s * (1 - s), s = sigmoid(x).",
             lambda g, x, y: _mul(_mul(g, y), _sub(_scalar(1, x), y)))
_elementwise("relu", "d relu(x) = g where x > 0, else 0.",
             lambda g, x, y: _where(_call("greater", x, _scalar(0, x)), g, _scalar(0, x)))
_elementwise("abs", "d|x| = g where x >= 0, else -g (JAX's choice at 0).",
             lambda g, x, y: _where(_call("greater_equal", x, _scalar(0, x)), g,
                                    _call("negative", g)))


@_rule("clip")
def _clip_grad(call: Call, g: Expr) -> list[Expr]:
    """d clip(x, lo, hi) = g where lo <= x <= hi, else 0."""
    x, a = call.args[0], call.attrs
    inside = _call("logical_and", _call("greater_equal", x, _scalar(a.a_min, x)),
                   _call("less_equal", x, _scalar(a.a_max, x)))
    return [_where(inside, g, _scalar(0, x))]


@_rule("cast")
def _cast_grad(call: Call, g: Expr) -> list[Expr]:
    """d cast(x) = cast_like(g, x), or 0 unless x and the result are float."""
    return [_through_cast(g, call.args[0], call.attrs.dtype)]


@_rule("cast_like")
def _cast_like_grad(call: Call, g: Expr) -> list[Expr]:
    """d cast_like(x, t) = (cast_like(g, x), 0), or 0 for x unless x and t are float."""
    x, like = call.args
    return [_through_cast(g, x, _tensor(like).dtype), _zeros(like)]


# ---- broadcasting binary ops --------------------------------------------------------------------

@_rule("add")
def _add_grad(call: Call, g: Expr) -> list[Expr]:
    """d(x + y) = (sum_b(g, x), sum_b(g, y))."""
    x, y = call.args
    return [_collapse(g, x), _collapse(g, y)]


@_rule("subtract")
def _subtract_grad(call: Call, g: Expr) -> list[Expr]:
    """d(x - y) = (sum_b(g, x), sum_b(-g, y))."""
    x, y = call.args
    return [_collapse(g, x), _collapse(_call("negative", g), y)]


@_rule("multiply")
def _multiply_grad(call: Call, g: Expr) -> list[Expr]:
    """d(x * y) = (sum_b(g * y, x), sum_b(g * x, y))."""
    x, y = call.args
    return [_collapse(_mul(g, y), x), _collapse(_mul(g, x), y)]


@_rule("divide")
def _divide_grad(call: Call, g: Expr) -> list[Expr]:
    """d(x / y) = (sum_b(g / y, x), sum_b(-g * (x / y) / y, y))."""
    x, y = call.args
    return [_collapse(_div(g, y), x),
            _collapse(_div(_mul(_call("negative", g), call), y), y)]


@_rule("power")
def _power_grad(call: Call, g: Expr) -> list[Expr]:
    """d x**y = (sum_b(g * y * x**(y-1), x), sum_b(g * x**y * log x, y)); 0 at y == 0 / x == 0."""
    x, y = call.args
    zero, one = _scalar(0, x), _scalar(1, x)
    dx = _where(_call("equal", y, zero), zero,
                _mul(y, _call("power", x, _sub(y, one))))
    log_x = _call("log", _where(_call("equal", x, zero), one, x))
    return [_collapse(_mul(g, dx), x), _collapse(_mul(g, _mul(call, log_x)), y)]


def _chooser_grad(call: Call, g: Expr, wins: str) -> list[Expr]:
    """Each input of maximum/minimum gets g where it wins (`wins` compares), half of g at ties."""
    x, y = call.args
    half = _mul(g, _scalar(0.5, x))
    tie = _call("equal", x, y)

    def share(a: Expr, b: Expr) -> Expr:
        return _collapse(_where(_call(wins, a, b), g, _where(tie, half, _scalar(0, x))), a)

    return [share(x, y), share(y, x)]


@_rule("maximum")
def _maximum_grad(call: Call, g: Expr) -> list[Expr]:
    """d max(x, y) = (sum_b(g * [x > y] + g/2 * [x == y], x), likewise for y)."""
    return _chooser_grad(call, g, "greater")


@_rule("minimum")
def _minimum_grad(call: Call, g: Expr) -> list[Expr]:
    """d min(x, y) = (sum_b(g * [x < y] + g/2 * [x == y], x), likewise for y)."""
    return _chooser_grad(call, g, "less")


@_rule("where")
def _where_grad(call: Call, g: Expr) -> list[Expr]:
    """d where(c, x, y) = (0, sum_b(where(c, g, 0), x), sum_b(where(c, 0, g), y))."""
    cond, x, y = call.args
    zero = _scalar(0, x)
    return [_zeros(cond), _collapse(_where(cond, g, zero), x), _collapse(_where(cond, zero, g), y)]


# ---- reductions ---------------------------------------------------------------------------------

@_rule("sum")
def _sum_grad(call: Call, g: Expr) -> list[Expr]:
    """d sum(x, axes) = g broadcast back over the reduced axes."""
    x, a = call.args[0], call.attrs
    return [_broadcast_like(_unreduce(g, x, a.axis, a.keepdims), x)]


@_rule("mean")
def _mean_grad(call: Call, g: Expr) -> list[Expr]:
    """d mean(x, axes) = g / n broadcast back over the reduced axes, n elements per mean."""
    x, a = call.args[0], call.attrs
    n = _count(x, _axes(a.axis, _tensor(x).ndim))
    return [_div(_broadcast_like(_unreduce(g, x, a.axis, a.keepdims), x), n)]


@_rule("max", "min")
def _extreme_grad(call: Call, g: Expr) -> list[Expr]:
    """d max(x, axes) = g * [x == max] / (number of ties), broadcast back (min alike)."""
    x, a = call.args[0], call.attrs
    assert isinstance(call.op, Op)
    extreme = _call(call.op.name, x, axis=a.axis, keepdims=True)
    hit = _call("cast_like", _call("equal", x, extreme), x)
    ties = _sum(hit, a.axis, keepdims=True)
    return [_mul(hit, _div(_unreduce(g, x, a.axis, a.keepdims), ties))]


@_rule("prod")
def _prod_grad(call: Call, g: Expr) -> list[Expr]:
    """d prod(x) = g * prod(x) / x; where a group has one zero, the others' product there."""
    x, a = call.args[0], call.attrs
    zero, one = _scalar(0, x), _scalar(1, x)
    is_zero = _call("equal", x, zero)
    nonzero = _where(is_zero, one, x)
    rest = _call("prod", nonzero, axis=a.axis, keepdims=True)  # the product of the non-zeros
    zeros = _sum(_call("cast_like", is_zero, x), a.axis, keepdims=True)
    lone_zero = _call("logical_and", is_zero, _call("equal", zeros, one))
    dx = _where(_call("equal", zeros, zero), _div(rest, nonzero), _where(lone_zero, rest, zero))
    return [_mul(_unreduce(g, x, a.axis, a.keepdims), dx)]


@_rule("collapse_sum_like")
def _collapse_sum_like_grad(call: Call, g: Expr) -> list[Expr]:
    """d collapse_sum_like(x, t) = (g broadcast to x's shape, 0)."""
    x, like = call.args
    return [_broadcast_like(g, x), _zeros(like)]


# ---- shape transformations ----------------------------------------------------------------------

@_rule("reshape", "squeeze", "flatten")
def _reshape_grad(call: Call, g: Expr) -> list[Expr]:
    """d reshape(x) = reshape_like(g, x) (squeeze and flatten are reshapes too)."""
    return [_call("reshape_like", g, call.args[0])]


@_rule("reshape_like")
def _reshape_like_grad(call: Call, g: Expr) -> list[Expr]:
    """d reshape_like(x, t) = (reshape_like(g, x), 0)."""
    x, like = call.args
    return [_call("reshape_like", g, x), _zeros(like)]


@_rule("transpose")
def _transpose_grad(call: Call, g: Expr) -> list[Expr]:
    """d transpose(x, axes) = transpose(g, inverse permutation of axes)."""
    x, axes = call.args[0], call.attrs.axes
    if axes is None:
        return [_call("transpose", g)]
    ndim = _tensor(x).ndim
    inverse = np.argsort(_axes(axes, ndim))
    return [_call("transpose", g, axes=tuple(int(i) for i in inverse))]


@_rule("expand_dims")
def _expand_dims_grad(call: Call, g: Expr) -> list[Expr]:
    """d expand_dims(x) = squeeze(g) on the inserted axes."""
    x, a = call.args[0], call.attrs
    if a.num_newaxis == 0:
        return [g]
    at = a.axis % (_tensor(x).ndim + 1)
    return [_call("squeeze", g, axis=tuple(range(at, at + a.num_newaxis)))]


@_rule("concatenate")
def _concatenate_grad(call: Call, g: Expr) -> list[Expr]:
    """d concatenate(xs) = (the pieces of split(g) where the inputs meet,)."""
    xs, axis = call.args[0], call.attrs.axis
    t = _type(xs)
    assert isinstance(t, TupleType)
    axis %= _tensor(TupleGetItem(xs, 0)).ndim
    sizes = [_dims(TupleGetItem(xs, i), "concatenate")[axis] for i in range(len(t.fields))]
    pieces = _call("split", g, indices_or_sections=tuple(np.cumsum(sizes[:-1]).tolist()),
                   axis=axis)
    return [Tuple([TupleGetItem(pieces, i) for i in range(len(sizes))])]


@_rule("split")
def _split_grad(call: Call, g: Expr) -> list[Expr]:
    """d split(x) = concatenate(g); if pieces overlap, the sum of each g[i] put in its place."""
    x, how, axis = call.args[0], call.attrs.indices_or_sections, call.attrs.axis
    if isinstance(how, int) or (min(how, default=0) >= 0 and list(how) == sorted(how)):
        return [_call("concatenate", g, axis=axis)]
    cuts = (0, *how, _END)  # cuts out of order (or from the end): pieces may overlap
    placed = [_call("strided_slice_grad", TupleGetItem(g, i), x, begin=(lo,), end=(hi,),
                    axes=(axis,)) for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:]))]
    return [functools.reduce(_add, placed)]


@_rule("stack")
def _stack_grad(call: Call, g: Expr) -> list[Expr]:
    """d stack(xs) = (the slices of g along the new axis, each squeezed,)."""
    xs, axis = call.args[0], call.attrs.axis
    t = _type(xs)
    assert isinstance(t, TupleType)
    n = len(t.fields)
    pieces = _call("split", g, indices_or_sections=n, axis=axis)
    return [Tuple([_call("squeeze", TupleGetItem(pieces, i), axis=(axis,)) for i in range(n)])]


@_rule("take")
def _take_grad(call: Call, g: Expr) -> list[Expr]:
    """d take(x, i) = (take_grad(g, i, x): g added at the positions read, 0)."""
    x, indices = call.args
    return [_call("take_grad", g, indices, x, **call.attrs), _zeros(indices)]


@_rule("take_grad")
def _take_grad_grad(call: Call, g: Expr) -> list[Expr]:
    """d take_grad(d, i, t) = (take(g, i), 0, 0): take_grad is linear in d, the adjoint of take."""
    _, indices, like = call.args
    return [_call("take", g, indices, **call.attrs), _zeros(indices), _zeros(like)]


@_rule("strided_slice")
def _strided_slice_grad(call: Call, g: Expr) -> list[Expr]:
    """d x[begin:end:strides] = zeros like x holding g at the sliced positions."""
    return [_call("strided_slice_grad", g, call.args[0], **call.attrs)]


@_rule("strided_slice_grad")
def _strided_slice_grad_grad(call: Call, g: Expr) -> list[Expr]:
    """d strided_slice_grad(d, t) = (g[begin:end:strides], 0)."""
    return [_call("strided_slice", g, **call.attrs), _zeros(call.args[1])]


@_rule("broadcast_to")
def _broadcast_to_grad(call: Call, g: Expr) -> list[Expr]:
    """d broadcast_to(x) = sum_b(g, x)."""
    return [_collapse(g, call.args[0])]


@_rule("full")
def _full_grad(call: Call, g: Expr) -> list[Expr]:
    """d full(v) = sum(g) cast to v's dtype (0 if the result is not float)."""
    v, dtype = call.args[0], call.attrs.dtype
    return [_through_cast(_sum(g, None), v, dtype or _tensor(v).dtype)]


@_rule("pad")
def _pad_grad(call: Call, g: Expr) -> list[Expr]:
    """d pad(x) = g[before:-after] on every axis."""
    widths = call.attrs.pad_width
    ends = tuple(-after if after else _END for after in widths[1::2])
    return [_call("strided_slice", g, begin=widths[0::2], end=ends)]


# ---- products -----------------------------------------------------------------------------------

def _swap_last(x: Expr, ndim: int) -> Expr:
    """x with its last two axes swapped."""
    return _call("transpose", x, axes=(*range(ndim - 2), ndim - 1, ndim - 2))


@_rule("matmul")
def _matmul_grad(call: Call, g: Expr) -> list[Expr]:
    """d(a @ b) = (sum_b(g @ bᵀ, a), sum_b(aᵀ @ g, b)), 1-D operands promoted to matrices."""
    a, b = call.args
    ra, rb = _tensor(a).ndim, _tensor(b).ndim
    a2 = a if ra > 1 else _call("expand_dims", a, axis=0)  # (k,) -> (1, k)
    b2 = b if rb > 1 else _call("expand_dims", b, axis=-1)  # (k,) -> (k, 1)
    g2 = g if rb > 1 else _call("expand_dims", g, axis=-1)  # the n axis b's promotion added
    g2 = g2 if ra > 1 else _call("expand_dims", g2, axis=-2)  # the m axis a's promotion added
    da = _collapse(_call("matmul", g2, _swap_last(b2, max(rb, 2))), a2)
    db = _collapse(_call("matmul", _swap_last(a2, max(ra, 2)), g2), b2)
    return [da if ra > 1 else _call("reshape_like", da, a),
            db if rb > 1 else _call("reshape_like", db, b)]


@_rule("dense")
def _dense_grad(call: Call, g: Expr) -> list[Expr]:
    """d dense(x, w) = (g @ w, gᵀ @ x), the leading dims of x and g flattened."""
    x, w = call.args
    rank = _tensor(x).ndim
    if rank == 1:
        dw = _mul(_call("expand_dims", g, axis=1), _call("expand_dims", x, axis=0))
    elif rank == 2:
        dw = _call("matmul", _call("transpose", g), x)
    else:
        units, k = _dims(w, "dense")
        rows = _call("reshape", g, newshape=(-1, units))
        dw = _call("matmul", _call("transpose", rows), _call("reshape", x, newshape=(-1, k)))
    return [_call("matmul", g, w), dw]


@_rule("batch_matmul")
def _batch_matmul_grad(call: Call, g: Expr) -> list[Expr]:
    """d(X @ Y) = (g @ Yᵀ, Xᵀ @ g) with X, Y the optionally transposed x, y; batch-1 summed."""
    x, y = call.args
    ta, tb = call.attrs.transpose_a, call.attrs.transpose_b

    def bmm(p: Expr, q: Expr, tp: bool, tq: bool) -> Expr:
        return _call("batch_matmul", p, q, transpose_a=tp, transpose_b=tq)

    dx = bmm(y, g, tb, True) if ta else bmm(g, y, False, not tb)
    dy = bmm(g, x, True, ta) if tb else bmm(x, g, not ta, False)
    return [_collapse(dx, x), _collapse(dy, y)]


# ---- convolution and pooling --------------------------------------------------------------------
#
# Along one spatial axis, conv2d computes y[o] = sum_k xpad[o*s + k*d] w[k] (stride s, dilation d,
# xpad padded by p before). Its adjoints are again convolutions:
#   dx[i] = sum_k gs[i + p - k*d] w[k], with gs = g spread out by s (s - 1 zeros between
#           elements): a stride-1 conv of gs, padded by d*(k-1) - p before, with the flipped w;
#   dw[k] = sum_o xpad[k*d + o*s] g[o]: a conv of xpad with g as the kernel, stride d and
#           dilation s, contracting over the batch (so batch and channels trade places).


def _as_batch(x: Expr) -> tuple[Expr, bool]:
    """NCHW x as is, or one CHW example as a batch of one; and whether it was one example."""
    if _tensor(x).ndim == 3:
        return _call("expand_dims", x, axis=0), True
    return x, False


def _spread(g: Expr, channels: int, out_hw: tuple[int, int], strides: tuple[int, int]) -> Expr:
    """NCHW g with s - 1 zeros after each element along H and W: (n, c, oh*sh, ow*sw)."""
    (oh, ow), (sh, sw) = out_hw, strides
    cells = _call("expand_dims", _call("expand_dims", g, axis=3), axis=5)  # (n, c, oh, 1, ow, 1)
    cells = _call("pad", cells, pad_width=(0, 0, 0, 0, 0, 0, 0, sh - 1, 0, 0, 0, sw - 1))
    return _call("reshape", cells, newshape=(-1, channels, oh * sh, ow * sw))


def _conv_data_grad(g: Expr, flipped: Expr, channels: int, hw: tuple[int, int], win: _Window,
                    groups: int) -> Expr:
    """The adjoint of a conv2d's NCHW data: a stride-1 conv2d of g spread by the strides,
    padded (or cropped) to give back hw, with the flipped transposed weight `flipped`."""
    out_hw = win.out_hw(hw)
    before = [win.dilation[i] * (win.kernel[i] - 1) - win.pads[i] for i in (0, 1)]
    reach = [(out_hw[i] - 1) * win.strides[i] + 1 for i in (0, 1)]  # the spread g's extent
    after = [hw[i] - reach[i] + win.pads[i] for i in (0, 1)]
    size = list(out_hw)
    if max(win.strides) > 1:
        g = _spread(g, channels, out_hw, win.strides)
        size = [out_hw[i] * win.strides[i] for i in (0, 1)]
    begin = tuple(max(-b, 0) for b in before)  # negative padding crops
    end = tuple(reach[i] - max(-after[i], 0) for i in (0, 1))
    if begin != (0, 0) or list(end) != size:
        g = _call("strided_slice", g, begin=begin, end=end, axes=(2, 3))
    padding = tuple(max(p, 0) for p in (*before, *after))
    return _call("conv2d", g, flipped, padding=padding, dilation=win.dilation, groups=groups)


def _flip_transpose(w: Expr, groups: int) -> Expr:
    """OIHW weight (o, c/G, kh, kw) as the transposed convolution's: (c, o/G, kh, kw) flipped."""
    o, cg, kh, kw = _dims(w, "conv2d")
    w = _call("reshape", w, newshape=(groups, o // groups, cg, kh, kw))
    w = _call("reshape", _call("transpose", w, axes=(0, 2, 1, 3, 4)),
              newshape=(groups * cg, o // groups, kh, kw))
    return _call("strided_slice", w, begin=(kh - 1, kw - 1), end=(-kh - 1, -kw - 1),
                 strides=(-1, -1), axes=(2, 3))


def _conv_weight_grad(x: Expr, g: Expr, weight: tuple[int, ...], hw: tuple[int, int],
                      win: _Window, groups: int) -> Expr:
    """dw[o, c] = sum over the batch of x[:, c] correlated with g[:, o] (within a group)."""
    o, cg, kh, kw = weight
    (h, w), (oh, ow) = hw, win.out_hw(hw)
    data = _call("reshape", x, newshape=(-1, groups, cg, h, w))
    data = _call("reshape", _call("transpose", data, axes=(2, 1, 0, 3, 4)),
                 newshape=(cg, -1, h, w))  # (c/G, G * n, h, w): batch and channels traded
    kernel = _call("reshape", g, newshape=(-1, groups, o // groups, oh, ow))
    kernel = _call("reshape", _call("transpose", kernel, axes=(1, 2, 0, 3, 4)),
                   newshape=(o, -1, oh, ow))  # (o, n, oh, ow)
    dw = _call("conv2d", data, kernel, strides=win.dilation, padding=win.pads,
               dilation=win.strides, groups=groups)  # (c/G, o, kh', kw') with kh' >= kh
    dw = _call("transpose", dw, axes=(1, 0, 2, 3))
    full = [_out_size(hw[i], (oh, ow)[i], win.dilation[i], win.strides[i], win.pads[i],
                      win.pads[i + 2], False) for i in (0, 1)]
    if full != [kh, kw]:
        dw = _call("strided_slice", dw, begin=(0, 0), end=(kh, kw), axes=(2, 3))
    return dw


def _unbatch(dx: Expr, single: bool) -> Expr:
    return _call("squeeze", dx, axis=(0,)) if single else dx


@_rule("conv2d")
def _conv2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d conv2d(x, w) = (conv2d(spread(g), flip(w)ᵀ), conv2d(xᵀ, gᵀ)): see the comment above."""
    (x, single), w, a = _as_batch(call.args[0]), call.args[1], call.attrs
    g = _call("expand_dims", g, axis=0) if single else g
    weight, (h, wd) = _dims(w, "conv2d"), _image_hw(call.args[0], "conv2d")
    win = _Window((weight[2], weight[3]), _pair(a.strides), _pair(a.dilation), _padding(a.padding))
    dx = _conv_data_grad(g, _flip_transpose(w, a.groups), weight[0], (h, wd), win, a.groups)
    return [_unbatch(dx, single), _conv_weight_grad(x, g, weight, (h, wd), win, a.groups)]


@_rule("max_pool2d")
def _max_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d max_pool2d(x) = max_pool2d_grad(g, x): each window's g at the window's first maximum."""
    return [_call("max_pool2d_grad", g, call.args[0], **call.attrs)]


@_rule("max_pool2d_grad")
def _max_pool2d_grad_grad(call: Call, g: Expr) -> list[Expr]:
    """d max_pool2d_grad(d, x) = (g at each window's first maximum of x, 0): linear in d."""
    (x, single), a = _as_batch(call.args[1]), call.attrs
    g = _call("expand_dims", g, axis=0) if single else g
    win = _pool_window(a.pool_size, a.strides, a.padding, a.ceil_mode)
    hw = _image_hw(call.args[1], "max_pool2d_grad")
    (top, bottom), (left, right) = win.pad_pairs(hw)
    widths = (0, 0, 0, 0, top, bottom, left, right)
    x_pad = _call("pad", x, pad_width=widths, pad_value=-math.inf)
    g_pad = _call("pad", g, pad_width=widths)
    peak = _call("max_pool2d", x, **a)
    (oh, ow), (sh, sw) = win.out_hw(hw), win.strides
    gathered: Expr | None = None
    found: Expr | None = None  # whether an earlier offset of the window holds its maximum
    for i, j in np.ndindex(*win.kernel):  # each offset in the windows, in row-major order
        at = dict(begin=(i, j), end=(i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1),
                  strides=(sh, sw), axes=(2, 3))
        hit = _call("equal", _call("strided_slice", x_pad, **at), peak)
        first = hit if found is None else _call("logical_and", hit, _call("logical_not", found))
        found = hit if found is None else _call("logical_or", found, hit)
        picked = _where(first, _call("strided_slice", g_pad, **at), _scalar(0, call.args[1]))
        gathered = picked if gathered is None else _add(gathered, picked)
    assert gathered is not None
    return [_unbatch(gathered, single), _zeros(call.args[1])]


@_rule("avg_pool2d")
def _avg_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d avg_pool2d(x) = the data adjoint of a depthwise all-ones conv2d, of g / window counts."""
    (x, single), a = _as_batch(call.args[0]), call.attrs
    g = _call("expand_dims", g, axis=0) if single else g
    t, hw = _tensor(call.args[0]), _image_hw(call.args[0], "avg_pool2d")
    channels = t.shape[-3]
    if not isinstance(channels, int):
        raise IRError(f"the gradient of avg_pool2d needs static channels, got {type_to_str(t)}")
    win = _pool_window(a.pool_size, a.strides, a.padding, a.ceil_mode)
    counts = const(_avg_divisor(win, hw, a.count_include_pad), t.dtype)
    ones = _call("ones", shape=(channels, 1, *win.kernel), dtype=t.dtype)
    dx = _conv_data_grad(_div(g, counts), ones, channels, hw, win, groups=channels)
    return [_unbatch(dx, single)]


@_rule("global_avg_pool2d")
def _global_avg_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d global_avg_pool2d(x) = g / (H * W) broadcast over H and W."""
    x = call.args[0]
    return [_div(_broadcast_like(g, x), _count(x, (2, 3)))]


# ---- normalisation, dropout, losses -------------------------------------------------------------

@_rule("softmax")
def _softmax_grad(call: Call, g: Expr) -> list[Expr]:
    """d softmax(x) = y * (g - sum(g * y)), y = softmax(x), summing along the axis."""
    y, axis = call, call.attrs.axis
    return [_mul(y, _sub(g, _sum(_mul(g, y), axis, keepdims=True)))]


@_rule("log_softmax")
def _log_softmax_grad(call: Call, g: Expr) -> list[Expr]:
    """d log_softmax(x) = g - softmax(x) * sum(g), summing along the axis."""
    x, axis = call.args[0], call.attrs.axis
    return [_sub(g, _mul(_call("softmax", x, axis=axis), _sum(g, axis, keepdims=True)))]


def _standardized_grad(dy: Expr, xhat: Expr, rstd: Expr, axes: tuple[int, ...]) -> Expr:
    """d of xhat = (x - mean(x)) * rstd: rstd * (dy - mean(dy) - xhat * mean(dy * xhat))."""
    centred = _sub(dy, _mean(dy, axes))
    return _mul(rstd, _sub(centred, _mul(xhat, _mean(_mul(dy, xhat), axes))))


def _affine_grads(call: Call, g: Expr, xhat: Expr, others: tuple[int, ...]) -> list[Expr]:
    """The adjoints of gamma and beta in xhat * gamma + beta (zero if scale/center is off)."""
    _, gamma, beta = call.args[:3]
    d_gamma = _sum(_mul(g, xhat), others) if call.attrs.scale else _zeros(gamma)
    d_beta = _sum(g, others) if call.attrs.center else _zeros(beta)
    return [d_gamma, d_beta]


@_rule("batch_norm")
def _batch_norm_grad(call: Call, g: Expr) -> list[Expr]:
    """d batch_norm: g.0 through (x - mean) * rstd * gamma + beta; g.1, g.2 via the statistics."""
    x, gamma, _, moving_mean, moving_var = call.args
    a = call.attrs
    ndim = _tensor(x).ndim
    axis, others = a.axis % ndim, _others(a.axis, ndim)
    g_out, g_mean, g_var = (TupleGetItem(g, i) for i in range(3))

    def spread(v: Expr) -> Expr:
        return _along(v, axis, ndim)

    mean = _call("mean", x, axis=others) if a.training else moving_mean
    centred = _sub(x, spread(mean))
    var = _call("mean", _mul(centred, centred), axis=others) if a.training else moving_var
    rstd = spread(_call("rsqrt", _add(var, _scalar(a.epsilon, x))))
    xhat = _mul(centred, rstd)
    dy = _mul(g_out, spread(gamma)) if a.scale else g_out
    if a.training:  # the batch statistics depend on x; the moving ones blend them in
        m, n = _scalar(a.momentum, x), _count(x, others)
        via_stats = _add(spread(g_mean), _mul(_mul(spread(g_var), _scalar(2, x)), centred))
        dx = _add(_standardized_grad(dy, xhat, rstd, others), _div(_mul(m, via_stats), n))
        keep = _scalar(1 - a.momentum, x)
        d_moving = [_mul(keep, g_mean), _mul(keep, g_var)]
    else:
        dx = _mul(dy, rstd)
        d_mean = _sub(g_mean, _sum(_mul(dy, rstd), others))
        rstd3 = _mul(_mul(rstd, rstd), rstd)
        d_var = _sub(g_var, _sum(_mul(_mul(dy, centred), _mul(rstd3, _scalar(0.5, x))), others))
        d_moving = [d_mean, d_var]
    return [dx, *_affine_grads(call, g_out, xhat, others), *d_moving]


@_rule("layer_norm")
def _layer_norm_grad(call: Call, g: Expr) -> list[Expr]:
    """d layer_norm(x) = rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), dy = g * gamma."""
    x, gamma, _ = call.args
    a = call.attrs
    ndim = _tensor(x).ndim
    axis = (a.axis % ndim,)
    centred = _sub(x, _mean(x, axis))
    rstd = _call("rsqrt", _add(_mean(_mul(centred, centred), axis), _scalar(a.epsilon, x)))
    xhat = _mul(centred, rstd)
    dy = _mul(g, _along(gamma, a.axis, ndim)) if a.scale else g
    dx = _standardized_grad(dy, xhat, rstd, axis)
    return [dx, *_affine_grads(call, g, xhat, _others(a.axis, ndim))]


@_rule("dropout")
def _dropout_grad(call: Call, g: Expr) -> list[Expr]:
    """d dropout(x) = dropout(g) with the same seed: the same mask and scale (or the identity)."""
    return [_call("dropout", g, **call.attrs)]


@_rule("bias_add")
def _bias_add_grad(call: Call, g: Expr) -> list[Expr]:
    """d bias_add(x, b) = (g, sum of g over every axis but `axis`)."""
    x = call.args[0]
    return [g, _sum(g, _others(call.attrs.axis, _tensor(x).ndim))]


@_rule("softmax_cross_entropy")
def _softmax_cross_entropy_grad(call: Call, g: Expr) -> list[Expr]:
    """d sce(z, t) = (g/n * (softmax(z) * sum(t) - t), -g/n * log_softmax(z)), n rows."""
    logits, labels = call.args
    per_row = _div(g, _count(logits, range(_tensor(logits).ndim - 1)))
    mass = _sum(labels, -1, keepdims=True)
    d_logits = _mul(per_row, _sub(_mul(_call("softmax", logits, axis=-1), mass), labels))
    d_labels = _mul(_call("negative", per_row), _call("log_softmax", logits, axis=-1))
    return [d_logits, d_labels]
