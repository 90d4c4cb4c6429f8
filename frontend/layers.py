"""Layers: calls inside ``@relay_model`` functions that own hidden parameters.

Each layer call makes its own parameters (``conv2d_0.weight``,
``conv2d_0.bias``; a second conv2d call makes ``conv2d_1.*``). Parameters are
left unannotated wherever their shape depends on the layer's input, so type
inference solves them (the ops' relations infer a weight from ``units`` or
``channels``/``kernel_size``, a bias or a norm's scale from the data); only
``embedding``, whose table is fixed by its attributes, is annotated.

The layer forms (Figure 4 of the MAPL paper, with TensorFlow-style window
sizes accepted as written there):

- ``relay.conv2d(x, num_filter=, ksize=, strides=1, padding=0, groups=1, no_bias=False)``
  (``groups`` channel groups; groups = in-channels = num_filter is a depthwise convolution)
- ``relay.linear(x, num_hidden=, no_bias=False)``
- ``relay.batch_norm(x, axis=1, epsilon=1e-5, momentum=0.1, sync=False)`` (learned scale and
  shift; in training the batch statistics, folded into the running ones, with ``sync=True``
  those of the global batch of a distributed job; in inference the running ones)
- ``relay.dropout(x, rate=0.5)`` (in training a new mask each step, drawn from the layer's
  key; in inference the identity)
- ``relay.embedding(ids, vocab=, dim=)``
- ``relay.lstm_cell(x, (h, c), num_hidden=)`` -> ``(h, c)``
- ``relay.gru_cell(x, h, num_hidden=)`` -> h
- ``relay.max_pool(x, ksize=, strides=)`` and ``relay.flatten_layer(x)`` (no parameters)

A layer whose behaviour depends on the mode (batch_norm, dropout) builds its inference form,
which the model function holds, and registers its training form with ``LayerContext.modal``;
the frontend derives the model's training variant from them (modes.py). Model state that
training updates (batch_norm's running statistics, dropout's key) is a hidden parameter with
``ParamSpec.state``: a tensor in the inference and training variants, a reference in the
update variant, which the training form then reads and writes; it never has a gradient.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any as AnyValue, Callable

from relaydsl.errors import DSLSyntaxError
import numpy as np

from relaydsl.ir.expr import (
    Call, Constant, Expr, Let, RefRead, RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.span import Span
from relaydsl.ir.types import TensorType
from relaydsl.op.nn.conv import conv2d as conv2d_op
from relaydsl.op.nn.dropout import dropout as dropout_op
from relaydsl.op.nn.linear import bias_add, dense
from relaydsl.op.nn.norm import batch_norm as batch_norm_op
from relaydsl.op.nn.pool import max_pool2d
from relaydsl.op.nn.shape import flatten
from relaydsl.op.registry import OpDef, ops


@dataclass
class ParamSpec:
    """How create_model initialises a parameter: a learned weight, or a constant start; and
    whether it is state (updated by training steps, not by gradients: running statistics)."""

    kind: str  # "weight" (random), "zeros", "ones" or "key" (a dropout key, from the seed)
    state: bool = False

    def after_step(self, state: Expr) -> Expr:
        """This state's value for the next training step, from its value at the end of the
        update variant: a dropout key advances by one step, however often its layer ran."""
        return ops.add(state, Constant(_NEXT_STEP)) if self.kind == "key" else state


# A layer's training form: the rewritten arguments of its inference call and whether to update
# the state (whose parameters are then references) in, an expression of the call's type out.
TrainingForm = Callable[[list[Expr], bool], Expr]


class LayerContext:
    """What a layer needs from the function being translated: new parameters, mode-dependent
    calls, and errors."""

    def __init__(self, new_param: Callable[[str, str, TensorType | None, ParamSpec], Var],
                 modal: Callable[[Call, TrainingForm], None], span: Span | None,
                 unbatched: bool):
        self._new_param = new_param
        self._modal = modal
        self.span = span
        self.unbatched = unbatched  # the model's input is one example (CHW or a vector)

    def param(self, layer: str, name: str, spec: str = "weight",
              annotation: TensorType | None = None, state: bool = False) -> Var:
        return self._new_param(layer, name, annotation, ParamSpec(spec, state))

    def modal(self, call: Call, training: TrainingForm) -> Call:
        """`call` is the inference form; `training` builds the training form in its place."""
        self._modal(call, training)
        return call

    def op(self, op: OpDef, *args: Expr, **attrs: AnyValue) -> Expr:
        """A call of `op` at the layer's source location."""
        return op(*args, span=self.span, **attrs)

    def error(self, message: str) -> DSLSyntaxError:
        return DSLSyntaxError(message, self.span)


def _window(value: AnyValue, what: str, ctx: LayerContext) -> tuple[int, int]:
    """An int, (h, w), or TensorFlow's [1, h, w, 1]."""
    if isinstance(value, int):
        return value, value
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return int(value[0]), int(value[1])
    if isinstance(value, (tuple, list)) and len(value) == 4 and value[0] == value[3] == 1:
        return int(value[1]), int(value[2])
    raise ctx.error(f"{what} must be an int, (h, w) or [1, h, w, 1], got {value!r}")


# TVM's spellings of the layers' arguments (relay.nn.conv2d(channels=, kernel_size=),
# relay.nn.dense(units=)), accepted beside the paper's (Figure 4: num_filter=, ksize=)
_TVM_NAMES = {"num_filter": "channels", "ksize": "kernel_size", "num_hidden": "units"}


def _required(kwargs: dict, name: str, layer: str, ctx: LayerContext) -> AnyValue:
    alias = _TVM_NAMES.get(name)
    if name in kwargs and alias in kwargs:
        raise ctx.error(f"relay.{layer}: give {name}= or {alias}=, not both")
    if alias in kwargs:
        return kwargs.pop(alias)
    if name not in kwargs:
        raise ctx.error(f"relay.{layer} as a layer needs {name}="
                        + (f" (or TVM's {alias}=)" if alias else ""))
    return kwargs.pop(name)


def _no_extra(kwargs: dict, layer: str, ctx: LayerContext) -> None:
    if kwargs:
        raise ctx.error(f"relay.{layer}: unknown argument(s) {', '.join(kwargs)}")


def conv2d(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    (x,) = args
    channels = int(_required(kwargs, "num_filter", "conv2d", ctx))
    kernel = _window(_required(kwargs, "ksize", "conv2d", ctx), "ksize", ctx)
    strides = _window(kwargs.pop("strides", 1), "strides", ctx)
    padding = kwargs.pop("padding", 0)
    groups = int(kwargs.pop("groups", 1))
    no_bias = bool(kwargs.pop("no_bias", False))
    _no_extra(kwargs, "conv2d", ctx)
    w = ctx.param("conv2d", "weight")
    out = ctx.op(conv2d_op, x, w, channels=channels, kernel_size=kernel, strides=strides,
                 padding=padding, groups=groups)
    if no_bias:
        return out
    # The channel axis: 0 for one CHW example, 1 for an NCHW batch.
    return ctx.op(bias_add, out, ctx.param("conv2d", "bias", "zeros"), axis=-3)


def linear(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    (x,) = args
    units = int(_required(kwargs, "num_hidden", "linear", ctx))
    no_bias = bool(kwargs.pop("no_bias", False))
    _no_extra(kwargs, "linear", ctx)
    out = ctx.op(dense, x, ctx.param("linear", "weight"), units=units)
    if no_bias:
        return out
    return ctx.op(bias_add, out, ctx.param("linear", "bias", "zeros"), axis=-1)


def batch_norm(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    """Inference: normalise with the running statistics. Training: with the batch's, and
    running = (1 - momentum) * running + momentum * batch (the unbiased batch variance).

    ``sync=True``: in a distributed job, the batch is the global one, the slices of every
    rank together (PyTorch's SyncBatchNorm, flax's ``BatchNorm(axis_name=...)``); in one
    process it changes nothing. See `synced_batch_norm`."""
    (x,) = args
    attrs = {"axis": int(kwargs.pop("axis", 1)), "epsilon": float(kwargs.pop("epsilon", 1e-5)),
             "momentum": float(kwargs.pop("momentum", 0.1))}
    sync = kwargs.pop("sync", False)
    if not isinstance(sync, bool):
        raise ctx.error(f"relay.batch_norm: sync must be True or False, got {sync!r}")
    _no_extra(kwargs, "batch_norm", ctx)
    gamma = ctx.param("batch_norm", "gamma", "ones")
    beta = ctx.param("batch_norm", "beta", "zeros")
    mean = ctx.param("batch_norm", "moving_mean", "zeros", state=True)
    var = ctx.param("batch_norm", "moving_var", "ones", state=True)

    def batch_statistics(data: Expr, g: Expr, b: Expr, moving_mean: Expr,
                         moving_var: Expr) -> Expr:
        if sync:
            return synced_batch_norm(ctx, data, g, b, moving_mean, moving_var, **attrs)
        return ctx.op(batch_norm_op, data, g, b, moving_mean, moving_var, training=True,
                      **attrs)

    def training(args: list[Expr], update: bool) -> Expr:
        """Normalise with the batch statistics; to update, write the new running ones back."""
        if not update:
            return batch_statistics(*args)
        data, g, b, mean_ref, var_ref = args
        out = Var("batch_norm")
        call = batch_statistics(data, g, b, RefRead(mean_ref), RefRead(var_ref))
        updates = Let(Var("_"), RefWrite(mean_ref, TupleGetItem(out, 1)),
                      Let(Var("_"), RefWrite(var_ref, TupleGetItem(out, 2)), out))
        return Let(out, call, updates, span=ctx.span)

    call = ctx.modal(ctx.op(batch_norm_op, x, gamma, beta, mean, var, training=False, **attrs),
                     training)
    return TupleGetItem(call, 0, span=ctx.span)


def synced_batch_norm(ctx: LayerContext, x: Expr, gamma: Expr, beta: Expr, moving_mean: Expr,
                      moving_var: Expr, *, axis: int, epsilon: float, momentum: float) -> Expr:
    """batch_norm in training over the global batch, every rank's slice of it: what
    ``batch_norm(..., training=True)`` gives on the concatenated slices, ``(out, new moving
    mean, new moving var)``.

    Each rank's statistics per channel (its count n, mean m, biased variance v) are combined
    exactly, as Chan et al.'s parallel variance: ``N = psum(n)``, ``M = psum(n m) / N``,
    ``V = psum(n v + n (m - M)^2) / N``; two exchanges forward (the first carries n and n m
    stacked), and psum's gradient makes two backward. The local statistics come from a
    training batch_norm whose momentum 1 makes its moving outputs the batch's (so the
    channel axis needs no rank here: the op's relation finds the others); an inference
    batch_norm then normalises with M and V.
    """
    def op(opdef: OpDef, *operands: Expr, **attrs: AnyValue) -> Expr:
        return ctx.op(opdef, *operands, **attrs)

    local = op(batch_norm_op, x, gamma, beta, moving_mean, moving_var, axis=axis,
               epsilon=epsilon, momentum=1.0, training=True)
    m, unbiased_v = TupleGetItem(local, 1), TupleGetItem(local, 2)
    # n per channel, as a tensor of m's shape and dtype (the size of x over that of gamma)
    per_channel = op(ops.floor_divide, op(ops.ndarray_size, x), op(ops.ndarray_size, gamma))
    n = op(ops.multiply, op(ops.ones_like, m), op(ops.cast_like, per_channel, m))
    one = op(ops.ones_like, n)
    # n v, from the unbiased variance the op gives: v n / max(n - 1, 1)
    n_v = op(ops.multiply, unbiased_v, op(ops.maximum, op(ops.subtract, n, one), one))
    sums = op(ops.psum, op(ops.stack, Tuple((op(ops.multiply, n, m), n)), axis=0))
    total = op(ops.take, sums, Constant(np.array(1, "int32")), axis=0)
    mean_ = op(ops.divide, op(ops.take, sums, Constant(np.array(0, "int32")), axis=0), total)
    spread = op(ops.subtract, m, mean_)
    squares = op(ops.add, n_v, op(ops.multiply, n, op(ops.multiply, spread, spread)))
    var_ = op(ops.divide, op(ops.psum, squares), total)
    out = op(batch_norm_op, x, gamma, beta, mean_, var_, axis=axis, epsilon=epsilon,
             training=False)
    keep, new = Constant(np.array(1 - momentum, "float32")), Constant(
        np.array(momentum, "float32"))
    unbiased = op(ops.divide, total, op(ops.maximum, op(ops.subtract, total, one), one))

    def blend(moving: Expr, batch: Expr) -> Expr:
        return op(ops.add, op(ops.multiply, op(ops.cast_like, keep, moving), moving),
                  op(ops.multiply, op(ops.cast_like, new, moving), batch))

    return Tuple((TupleGetItem(out, 0), blend(moving_mean, mean_),
                  blend(moving_var, op(ops.multiply, var_, unbiased))), span=ctx.span)


# A dropout layer's key, model state: (k0, step). create_model draws k0 from its seed and the
# parameter's name (ParamSpec kind "key"); each training step adds one to the step
# (`ParamSpec.after_step`), so every step draws a new mask, and a model created with the same
# seed draws the same sequence.
KEY_TYPE = TensorType((2,), "int64")
_NEXT_STEP = np.array([0, 1], "int64")


def dropout(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    """Inference: the identity. Training: zero each element with probability `rate` and scale
    the rest by 1 / (1 - rate), the mask a hash of the layer's key, which each step advances.

    A layer that runs several times in one step (in a loop) draws the same mask each time,
    in the gradient pass and the update pass alike: variational dropout (Gal and Ghahramani,
    2016), what recurrent models use. For a mask per run, use the op with a key of your own:
    ``relay.dropout(x, key, rate=, training=True)``."""
    (x,) = args
    rate = float(kwargs.pop("rate", 0.5))
    _no_extra(kwargs, "dropout", ctx)
    key = ctx.param("dropout", "key", "key", annotation=KEY_TYPE, state=True)

    def training(args: list[Expr], update: bool) -> Expr:
        """Drop with the step's key (in the update variant read from its reference, which
        `ParamSpec.after_step` advances once the step is over)."""
        data, key = args
        return ctx.op(dropout_op, data, RefRead(key) if update else key,
                      rate=rate, training=True)

    return ctx.modal(ctx.op(dropout_op, x, key, rate=rate, training=False), training)



def embedding(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    (ids,) = args
    vocab = int(_required(kwargs, "vocab", "embedding", ctx))
    dim = int(_required(kwargs, "dim", "embedding", ctx))
    _no_extra(kwargs, "embedding", ctx)
    table = ctx.param("embedding", "weight", annotation=TensorType((vocab, dim)))
    return ctx.op(ops.take, table, ids, axis=0)


def _gates(ctx: LayerContext, layer: str, x: Expr, h: Expr, units: int, prefix: str) -> Expr:
    """x @ W_x.T + h @ W_h.T + b, with `units` outputs."""
    wx = ctx.param(layer, f"{prefix}weight_ih")
    wh = ctx.param(layer, f"{prefix}weight_hh")
    b = ctx.param(layer, f"{prefix}bias", "zeros")
    total = ctx.op(ops.add, ctx.op(dense, x, wx, units=units), ctx.op(dense, h, wh, units=units))
    return ctx.op(bias_add, total, b, axis=-1)


def lstm_cell(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    """(h', c') with i, f, g, o = split(x W_x + h W_h + b, 4);
    c' = σf·c + σi·tanh g; h' = σo·tanh c'."""
    x, state = args
    hidden = int(_required(kwargs, "num_hidden", "lstm_cell", ctx))
    _no_extra(kwargs, "lstm_cell", ctx)
    h, c = TupleGetItem(state, 0), TupleGetItem(state, 1)
    parts = ctx.op(ops.split, _gates(ctx, "lstm_cell", x, h, 4 * hidden, ""),
                   indices_or_sections=4, axis=-1)
    i, f, g, o = (TupleGetItem(parts, k) for k in range(4))
    sig = lambda e: ctx.op(ops.sigmoid, e)  # noqa: E731
    c_new = ctx.op(ops.add, ctx.op(ops.multiply, sig(f), c),
                   ctx.op(ops.multiply, sig(i), ctx.op(ops.tanh, g)))
    h_new = ctx.op(ops.multiply, sig(o), ctx.op(ops.tanh, c_new))
    return Tuple([h_new, c_new], span=ctx.span)


def gru_cell(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    """h' = (1 - z)·n + z·h with r, z = σ(split(x W + h U + b, 2)),
    n = tanh(x W_n + r·(h U_n) + b_n)."""
    x, h = args
    hidden = int(_required(kwargs, "num_hidden", "gru_cell", ctx))
    _no_extra(kwargs, "gru_cell", ctx)
    rz = ctx.op(ops.sigmoid, _gates(ctx, "gru_cell", x, h, 2 * hidden, "rz_"))
    parts = ctx.op(ops.split, rz, indices_or_sections=2, axis=-1)
    r, z = TupleGetItem(parts, 0), TupleGetItem(parts, 1)
    wn = ctx.param("gru_cell", "n_weight_ih")
    un = ctx.param("gru_cell", "n_weight_hh")
    bn = ctx.param("gru_cell", "n_bias", "zeros")
    n = ctx.op(ops.tanh, ctx.op(bias_add, ctx.op(ops.add, ctx.op(dense, x, wn, units=hidden),
                                                 ctx.op(ops.multiply, r,
                                                        ctx.op(dense, h, un, units=hidden))),
                              bn, axis=-1))
    one = ctx.op(ops.ones_like, z)
    return ctx.op(ops.add, ctx.op(ops.multiply, ctx.op(ops.subtract, one, z), n),
                  ctx.op(ops.multiply, z, h))


def max_pool(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    (x,) = args
    pool = _window(_required(kwargs, "ksize", "max_pool", ctx), "ksize", ctx)
    strides = _window(kwargs.pop("strides", pool), "strides", ctx)
    padding = kwargs.pop("padding", 0)
    _no_extra(kwargs, "max_pool", ctx)
    return ctx.op(max_pool2d, x, pool_size=pool, strides=strides, padding=padding)


def flatten_layer(ctx: LayerContext, args: list[Expr], kwargs: dict) -> Expr:
    """All dims into one for a model of single examples; all but the batch dim otherwise."""
    (x,) = args
    _no_extra(kwargs, "flatten_layer", ctx)
    if ctx.unbatched:
        return ctx.op(ops.reshape, x, newshape=(-1,))
    return ctx.op(flatten, x)


# What help(relay.<layer>) shows: the layer form's signature, what it computes, the parameters
# it makes and a runnable example (tests/frontend/test_layers.py runs every example).
LAYER_HELP: dict[str, str] = {
    "conv2d": """relay.conv2d(x, num_filter, ksize, strides=1, padding=0, groups=1, no_bias=False)

A convolution layer: conv2d of NCHW data (or one CHW example) with a weight it makes,
(num_filter, in_channels / groups, kh, kw), plus a bias (num_filter,) unless no_bias.
ksize and strides are an int, (h, w) or TensorFlow's [1, h, w, 1]; padding as the op's.
groups = in_channels = num_filter is a depthwise convolution. Parameters: conv2d_<k>.weight,
conv2d_<k>.bias (k counts the model's conv2d layers from 0).

Example::

    @relay_model
    def net(x: Tensor[Float, (2, 1, 8, 8)]) -> Tensor[Float, (2, 4, 4, 4)]:
        return relay.conv2d(x, num_filter=4, ksize=5)
""",
    "linear": """relay.linear(x, num_hidden, no_bias=False)

A fully connected layer: dense(x, weight) + bias, weight (num_hidden, in_features) and bias
(num_hidden,) made by the layer (no bias with no_bias=True); x is (..., in_features).
Parameters: linear_<k>.weight, linear_<k>.bias.

Example::

    @relay_model
    def net(x: Tensor[Float, (2, 6)]) -> Tensor[Float, (2, 3)]:
        return relay.linear(x, num_hidden=3)
""",
    "batch_norm": """relay.batch_norm(x, axis=1, epsilon=1e-5, momentum=0.1, sync=False)

A batch normalisation layer with a learned scale and shift over channel axis `axis`. In
inference it normalises with the running statistics; in training (relay.grad, relay.train)
with the batch's, and folds them into the running ones:
running = (1 - momentum) * running + momentum * batch (the unbiased batch variance).
sync=True: in a job of several ranks (relaydsl.distributed) the batch is the global one,
every rank's slice together (PyTorch's SyncBatchNorm), at the cost of two small exchanges
forward and two backward per layer and step; in one process it changes nothing.
Parameters: batch_norm_<k>.gamma, .beta (learned); .moving_mean, .moving_var (state,
updated by training steps, no gradient).

Example::

    @relay_model
    def net(x: Tensor[Float, (4, 3, 2, 2)]) -> Tensor[Float, (4, 3, 2, 2)]:
        return relay.batch_norm(x)
""",
    "dropout": """relay.dropout(x, rate=0.5)

A dropout layer: in inference the identity; in training each element is zeroed with
probability `rate` and the rest scaled by 1 / (1 - rate). The mask is a hash of the layer's
key, which every training step advances (a model created with the same seed draws the same
masks). A layer run several times in one step draws one mask (variational dropout); for a
mask per run use the op with a key of your own: relay.dropout(x, key, rate=, training=True).
Parameters: dropout_<k>.key (state).

Example::

    @relay_model
    def net(x: Tensor[Float, (2, 6)]) -> Tensor[Float, (2, 6)]:
        return relay.dropout(x, rate=0.25)
""",
    "embedding": """relay.embedding(ids, vocab, dim)

An embedding layer: rows of a (vocab, dim) table it makes, taken at the integer `ids`
(any shape; the result has a trailing dim). Parameters: embedding_<k>.weight.

Example::

    @relay_model
    def net(ids: Tensor[Int, (5,)]) -> Tensor[Float, (5, 8)]:
        return relay.embedding(ids, vocab=10, dim=8)
""",
    "lstm_cell": """relay.lstm_cell(x, (h, c), num_hidden) -> (h', c')

One LSTM step: i, f, g, o = split(x W_ihᵀ + h W_hhᵀ + b, 4);
c' = σ(f)·c + σ(i)·tanh(g); h' = σ(o)·tanh(c'). Parameters: lstm_cell_<k>.weight_ih
(4 num_hidden, in_features), .weight_hh (4 num_hidden, num_hidden), .bias (4 num_hidden,).

Example::

    @relay_model
    def net(x: Tensor[Float, (1, 6)], h: Tensor[Float, (1, 4)],
            c: Tensor[Float, (1, 4)]) -> tuple[Tensor[Float, (1, 4)], Tensor[Float, (1, 4)]]:
        return relay.lstm_cell(x, (h, c), num_hidden=4)
""",
    "gru_cell": """relay.gru_cell(x, h, num_hidden) -> h'

One GRU step: r, z = σ(split(x W_rzᵀ + h U_rzᵀ + b_rz, 2)); n = tanh(x W_nᵀ + r·(h U_nᵀ) +
b_n); h' = (1 - z)·n + z·h. Parameters: gru_cell_<k>.rz_weight_ih, .rz_weight_hh, .rz_bias,
.n_weight_ih, .n_weight_hh, .n_bias.

Example::

    @relay_model
    def net(x: Tensor[Float, (1, 6)], h: Tensor[Float, (1, 4)]) -> Tensor[Float, (1, 4)]:
        return relay.gru_cell(x, h, num_hidden=4)
""",
    "max_pool": """relay.max_pool(x, ksize, strides=ksize, padding=0)

Max pooling over NCHW data (or one CHW example), with TensorFlow-style window sizes: ksize and
strides an int, (h, w) or [1, h, w, 1]. No parameters (the op is relay.max_pool2d).

Example::

    @relay_model
    def net(x: Tensor[Float, (2, 3, 8, 8)]) -> Tensor[Float, (2, 3, 4, 4)]:
        return relay.max_pool(x, ksize=2, strides=2)
""",
    "flatten_layer": """relay.flatten_layer(x)

All dims but the batch dim into one ((N, C, H, W) -> (N, C·H·W)); for a model of single
examples, all dims into one. No parameters.

Example::

    @relay_model
    def net(x: Tensor[Float, (2, 3, 4, 4)]) -> Tensor[Float, (2, 48)]:
        return relay.flatten_layer(x)
""",
}


# The layer functions by name; PARAMETER_FREE ones own no parameters.
LAYERS: dict[str, Callable[[LayerContext, list[Expr], dict], Expr]] = {
    "conv2d": conv2d, "linear": linear, "batch_norm": batch_norm, "dropout": dropout,
    "embedding": embedding,
    "lstm_cell": lstm_cell, "gru_cell": gru_cell, "max_pool": max_pool,
    "flatten_layer": flatten_layer,
}
PARAMETER_FREE = frozenset({"max_pool", "flatten_layer"})


def is_layer_call(name: str, args: list, kwargs: dict) -> bool:
    """conv2d, batch_norm and dropout are ops too: the layer form has one input (and layer
    keywords)."""
    if name not in LAYERS:
        return False
    if name == "conv2d":
        return "num_filter" in kwargs or (len(args) == 1 and "weight" not in kwargs)
    if name in ("batch_norm", "dropout"):
        op_inputs = (batch_norm_op if name == "batch_norm" else dropout_op).inputs
        return len(args) == 1 and not set(op_inputs).intersection(kwargs)
    return True


__all__ = ["LAYERS", "LAYER_HELP", "LayerContext", "ParamSpec", "PARAMETER_FREE", "TrainingForm",
           "is_layer_call"]
