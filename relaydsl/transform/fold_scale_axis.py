"""FoldScaleAxis, as TVM's: a per-channel scaling next to a conv2d or dense moves into its
weight, where constant folding computes it away (§4.4 of the Relay paper).

A convolution is linear in each channel: scaling its output channel ``o`` by ``s[o]`` is
scaling filter ``o`` of the weight (axis 0, OIHW), and scaling its input channel ``c`` is
scaling the weight's in-channel ``c`` (axis 1, within the channel's group). The same holds for
dense, whose units are the weight's rows and whose reduction axis its columns.

- Backward (the scale after the convolution): ``multiply(y, s)``, where ``s`` is a constant
  per-channel scale (a tensor that varies only along the output-channel axis of ``y``), is
  pushed into ``y``: through ``relu`` when ``s > 0`` (``relu(v) * s = relu(v * s)``),
  through ``add``/``subtract``/``bias_add`` of a per-channel bias (the bias is scaled too,
  or the other operand folds the scale as well), through another per-channel constant
  multiply (the scales combine), down to conv2d or dense, whose weight is scaled along its
  out-channels. Every node on the way must have no consumer other than the next.
- Forward (the scale before the convolution): a conv2d or dense whose data is
  ``multiply(x, s)`` -- possibly followed by ``relu`` (``s > 0``) and the addition of a
  per-channel bias (``x * s + b = (x + b / s) * s``, ``s`` non-zero) -- reads the unscaled
  data and scales its weight's in-channels. The data may feed several convolutions (all are
  scaled); any other consumer keeps the scaling.

Only constant scales fold (FoldConstant, earlier in the pipeline, makes a parameter-free
expression one); a negative or zero scale passes no relu. Grouped and depthwise conv2d fold
both ways (each output channel's filter reads in-channels of one group). Integer
convolutions are left alone (scaling their weights changes the rounding). After both
directions, constant folding turns each scaled weight of a constant into a constant, so an
inference ``conv2d -> batch_norm -> relu`` (SimplifyInference makes the batch_norm a
multiply-add) becomes ``relu(add(conv2d(x, W'), b'))``: no multiply left.

Before and after (``%w`` a parameter, so its scaling stays a multiply; the result is in
A-normal form, see _dataflow.py)::

    multiply(relu(add(conv2d(%x, %w), %b)), 2f)
    relu(add(conv2d(%x, multiply(%w, 2f)), multiply(%b, 2f)))

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(1, 3), float32], %w: Tensor[(2, 3), float32]) {
...   multiply(relu(dense(%x, %w)), 2f)
... }'''))
>>> print(fold_scale_axis(mod)["main"].body)
let %t1 = multiply(%w: Tensor[(2, 3), float32], meta[Constant][0]);
let %t2 = dense(%x: Tensor[(1, 3), float32], %t1);
let %t3 = relu(%t2);
%t3
#[metadata]
{"Constant": [
  {"dtype": "float32", "shape": [2, 1], "data": [2.0, 2.0]}
]}
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaydsl.ir.expr import Call, Constant, Expr, Function
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType, is_float
from relaydsl.ir.visitor import ExprMutator
from relaydsl.op.nn.conv import conv2d
from relaydsl.op.nn.linear import bias_add, dense
from relaydsl.op.registry import OpDef, ops
from relaydsl.op.tensor import add, multiply, relu, subtract
from relaydsl.transform._dataflow import op_consumers, rewrite_dataflow, use_counts
from relaydsl.transform._util import rewrite_functions
from relaydsl.transform.pass_infra import Pass
from relaydsl.typing.infer import infer_types

# Not Traits.contraction (the GEMMs): the ops this pass knows how to rescale, each in its
# own way (_channel_axis, _in_scaled_weight).
_CONTRACTIONS = (conv2d, dense)
_BIAS_OPS = (add, subtract)


@dataclass(frozen=True)
class FoldScaleAxis(Pass, opt_level=3,
                    description="fold per-channel scales (inference batch_norm) into "
                                "conv2d/dense weights"):
    """Per-channel scalings folded into conv2d/dense weights, backward then forward (as
    TVM's FoldScaleAxis sequence), and the scaled constant weights folded (_dataflow.py)."""

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_dataflow(mod, _backward_then_forward, anchors=_CONTRACTIONS)


def fold_scale_axis(mod: IRModule) -> IRModule:
    """``FoldScaleAxis()(mod)``."""
    return FoldScaleAxis()(mod)


def _backward_then_forward(graph: IRModule) -> IRModule:
    backward = backward_fold(graph)
    infer_types(backward)  # the forward fold reads the types of what the backward one built
    return forward_fold(backward)


def backward_fold(mod: IRModule) -> IRModule:
    """`mod` (in graph form) with each per-channel multiply after a conv2d/dense folded into
    its weight's out-channels (TVM's BackwardFoldScaleAxis, without the constant folding)."""
    return rewrite_functions(mod, lambda fn: _Backward(fn).visit(fn))


def forward_fold(mod: IRModule) -> IRModule:
    """`mod` (in graph form) with each per-channel multiply before a conv2d/dense folded into
    its weight's in-channels (TVM's ForwardFoldScaleAxis, without the constant folding)."""
    return rewrite_functions(mod, lambda fn: _Forward(fn).visit(fn))


# ---- what folds ---------------------------------------------------------------------------


def _is(e: Expr, *opdefs: OpDef) -> bool:
    """Whether `e` is a call of one of `opdefs`."""
    return isinstance(e, Call) and any(e.op == d.op for d in opdefs)


def _static_type(e: Expr) -> TensorType | None:
    """`e`'s tensor type when its shape is static."""
    t = e.checked_type if e.has_type else None
    if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
        return t
    return None


def _channel_axis(call: Call, data_type: TensorType) -> int:
    """The channel axis of `call`'s data and of its result, along which a per-channel scale
    varies: C of NCHW (or of one CHW example) for conv2d, the last axis for dense."""
    if _is(call, conv2d):
        return data_type.ndim - 3
    return data_type.ndim - 1


def _foldable(call: Expr) -> bool:
    """A float conv2d or dense with a statically shaped weight: linear in each channel."""
    if not _is(call, *_CONTRACTIONS):
        return False
    assert isinstance(call, Call)
    data, weight = (_static_type(a) for a in call.args)
    return data is not None and weight is not None and is_float(data.dtype) and \
        call.attrs.out_dtype in (None, data.dtype)


def _per_channel(t: TensorType, like: TensorType, axis: int) -> bool:
    """Whether a tensor of type `t`, broadcast against `like`, varies along `axis` only and
    leaves `like`'s shape as it is."""
    if t.ndim > like.ndim or t.dtype != like.dtype:
        return False
    full = (1,) * (like.ndim - t.ndim) + tuple(t.shape)
    return all(d == 1 for i, d in enumerate(full) if i != axis) and \
        full[axis] in (1, like.shape[axis])


def _scale_vector(c: Expr, like: TensorType, axis: int) -> np.ndarray | None:
    """The per-channel scale a constant `c` multiplies `like` with, one entry per channel
    along `axis`; None when `c` is no constant or varies along another axis."""
    if not isinstance(c, Constant):
        return None
    t = TensorType(c.data.shape, c.data.dtype.name)
    if not _per_channel(t, like, axis):
        return None
    along = c.data.reshape(((1,) * (like.ndim - c.data.ndim) + c.data.shape)[axis])
    return np.broadcast_to(along, (like.concrete_shape()[axis],))


def _candidate_axes(t: TensorType) -> list[int]:
    """The channel axes a tensor of type `t` may have: conv2d's (NCHW, CHW) and dense's."""
    return list(dict.fromkeys(a for a in (t.ndim - 3, t.ndim - 1) if a >= 0))


def _along(vec: np.ndarray, axis: int, ndim: int, dtype: str) -> Constant:
    """`vec` as a constant broadcasting along `axis` of a rank-`ndim` tensor: (C, 1, ..., 1)."""
    return Constant(np.ascontiguousarray(vec.reshape((-1,) + (1,) * (ndim - 1 - axis)),
                                         dtype=dtype))


def _out_scaled_weight(call: Call, weight: Expr, vec: np.ndarray) -> Expr:
    """`weight` with its out-channel (row) `o` scaled by ``vec[o]``."""
    w = _static_type(call.args[1])
    assert w is not None
    return ops.multiply(weight, _along(vec, 0, w.ndim, w.concrete_dtype()))


def _in_scaled_weight(call: Call, weight: Expr, vec: np.ndarray) -> Expr:
    """`weight` with the entries reading in-channel ``c`` of the data scaled by ``vec[c]``:
    conv2d's filter ``o`` reads channel ``o // (O / groups) * I + i`` at its index ``i``
    (OIHW, I in-channels per group)."""
    w = _static_type(call.args[1])
    assert w is not None
    if _is(call, dense):
        scale = vec.reshape(1, -1)
    else:
        out_channels, per_group_in = w.concrete_shape()[:2]
        per_group_out = out_channels // call.attrs.groups
        channel = (np.arange(out_channels) // per_group_out)[:, None] * per_group_in + \
            np.arange(per_group_in)[None, :]
        scale = vec[channel][:, :, None, None]
    return ops.multiply(weight, Constant(np.ascontiguousarray(scale, dtype=w.concrete_dtype())))


def _rebuild(call: Call, args: list[Expr]) -> Call:
    """`call` on new arguments."""
    return Call(call.op, tuple(args), call.attrs, span=call.span)


# ---- backward: the scale after the convolution ----------------------------------------------


class _Backward(ExprMutator):
    """Rewrites each ``multiply(y, s)`` whose scale pushes down into convolutions."""

    def __init__(self, fn: Function) -> None:
        super().__init__()
        self.uses = use_counts(fn)

    def visit_call(self, call: Call) -> Expr:
        if _is(call, multiply) and (t := _static_type(call)) is not None:
            for y, s in (call.args, reversed(call.args)):
                if _static_type(y) != t:
                    continue  # the scale broadcasts y to a larger shape
                for axis in _candidate_axes(t):
                    vec = _scale_vector(s, t, axis)
                    pushed = None if vec is None else self.push(y, vec, axis)
                    if pushed is not None:
                        return pushed
        return super().visit_call(call)

    def push(self, e: Expr, vec: np.ndarray, axis: int) -> Expr | None:
        """``e * vec`` (along `axis`) with the scale folded into the convolutions computing
        `e`, or None when it does not fold all the way. `e` must have no other consumer."""
        t = _static_type(e)
        if self.uses.get(e, 0) != 1 or t is None or not isinstance(e, Call):
            return None
        if _foldable(e):
            data_type = _static_type(e.args[0])
            assert data_type is not None
            if _channel_axis(e, data_type) != axis or data_type.ndim != t.ndim:
                return None
            return _rebuild(e, [self.visit(e.args[0]),
                                _out_scaled_weight(e, self.visit(e.args[1]), vec)])
        if _is(e, relu):
            inner = self.push(e.args[0], vec, axis) if np.all(vec > 0) else None
            return None if inner is None else _rebuild(e, [inner])
        if _is(e, multiply):  # a second per-channel scale: the two combine
            for y, s in (e.args, reversed(e.args)):
                other = _scale_vector(s, t, axis)
                if other is not None and _static_type(y) == t:
                    return self.push(y, vec * other, axis)
            return None
        if _is(e, bias_add):
            if e.attrs.axis % t.ndim != axis:
                return None
            inner = self.push(e.args[0], vec, axis)
            if inner is None:
                return None
            bias_type = _static_type(e.args[1])
            assert bias_type is not None
            return _rebuild(e, [inner, ops.multiply(self.visit(e.args[1]),
                                                    _along(vec, 0, 1, bias_type.concrete_dtype()))])
        if _is(e, *_BIAS_OPS):
            pushed = [self.push(a, vec, axis) if _static_type(a) == t else None for a in e.args]
            if all(p is None for p in pushed):
                return None
            args: list[Expr] = []
            for a, p in zip(e.args, pushed):
                if p is None:  # a per-channel bias: scaled with the other operand
                    a_type = _static_type(a)
                    if a_type is None or not _per_channel(a_type, t, axis):
                        return None
                    p = ops.multiply(self.visit(a), _along(vec, axis, t.ndim, t.concrete_dtype()))
                args.append(p)
            return _rebuild(e, args)
        return None


# ---- forward: the scale before the convolution ----------------------------------------------


class _Forward(ExprMutator):
    """Rewrites each conv2d/dense whose data is a per-channel scaling (its every consumer a
    convolution), to read the unscaled data with a scaled weight."""

    def __init__(self, fn: Function) -> None:
        super().__init__()
        self.uses = use_counts(fn)
        self.consumers = op_consumers(fn)
        self.pulled: dict[Expr, tuple[Expr, np.ndarray] | None] = {}

    def visit_call(self, call: Call) -> Expr:
        if _foldable(call):
            data_type = _static_type(call.args[0])
            assert data_type is not None
            pulled = self.pull_input(call.args[0], data_type, _channel_axis(call, data_type))
            if pulled is not None:
                data, vec = pulled
                return _rebuild(call, [data, _in_scaled_weight(call, self.visit(call.args[1]),
                                                               vec)])
        return super().visit_call(call)

    def pull_input(self, x: Expr, x_type: TensorType, axis: int
                   ) -> tuple[Expr, np.ndarray] | None:
        """(x', vec) with ``x = x' * vec`` along `axis`, when every consumer of `x` is a
        convolution reading it as data along that channel axis (memoised: one x' for all)."""
        if x not in self.pulled:
            readers = self.consumers.get(x, [])
            fold = len(readers) == self.uses.get(x, 0) and all(
                i == 0 and _foldable(c) and _channel_axis(c, x_type) == axis for c, i in readers)
            self.pulled[x] = self.pull(x, axis) if fold else None
        return self.pulled[x]

    def pull(self, x: Expr, axis: int) -> tuple[Expr, np.ndarray] | None:
        """(x', vec) with ``x = x' * vec`` along `axis`, or None."""
        t = _static_type(x)
        if t is None or not isinstance(x, Call):
            return None
        if _is(x, multiply):
            for a, s in (x.args, reversed(x.args)):
                vec = _scale_vector(s, t, axis)
                if vec is not None and _static_type(a) == t:
                    return self.visit(a), vec
            return None
        if _is(x, relu):
            inner = self.pull_inner(x.args[0], axis)
            if inner is None or not np.all(inner[1] > 0):
                return None
            return _rebuild(x, [inner[0]]), inner[1]
        if _is(x, bias_add):  # the bias (C,) runs along attrs.axis
            return self.pull_through_bias(x, 0, axis, 1) if x.attrs.axis % t.ndim == axis else None
        if _is(x, *_BIAS_OPS):
            for i in (0, 1) if _is(x, add) else (0,):  # b - x * s is no x' * s
                bias_type = _static_type(x.args[1 - i])
                if _static_type(x.args[i]) == t and bias_type is not None and \
                        _per_channel(bias_type, t, axis):
                    return self.pull_through_bias(x, i, axis, t.ndim - axis)
        return None

    def pull_through_bias(self, x: Call, i: int, axis: int, bias_ndim: int
                          ) -> tuple[Expr, np.ndarray] | None:
        """For ``x = data + bias`` (data the argument `i`, the bias of rank `bias_ndim`,
        channels first): ``data = d * s`` gives ``x = (d + bias / s) * s``, for a non-zero s."""
        inner = self.pull_inner(x.args[i], axis)
        if inner is None or not np.all(inner[1] != 0):
            return None
        data, vec = inner
        t = _static_type(x)
        assert t is not None  # pull() checked it
        bias = ops.divide(self.visit(x.args[1 - i]),
                          _along(vec, 0, bias_ndim, t.concrete_dtype()))
        return _rebuild(x, [data, bias] if i == 0 else [bias, data]), vec

    def pull_inner(self, x: Expr, axis: int) -> tuple[Expr, np.ndarray] | None:
        """pull() of a node inside the scaling chain, whose one consumer is the chain."""
        return self.pull(x, axis) if self.uses.get(x, 0) == 1 else None


__all__ = ["FoldScaleAxis", "fold_scale_axis", "backward_fold", "forward_fold"]
