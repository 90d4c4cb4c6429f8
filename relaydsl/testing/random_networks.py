"""Random vision networks and random accelerators, as hypothesis strategies.

``random_networks()`` draws a (Function, inputs, reference) triple: a small NCHW network of
the layers the accelerator lowers -- conv2d with random kernel, strides, asymmetric padding,
dilation and groups (depthwise too), max and average pooling (padding, ceil mode,
count_include_pad), pad, elementwise activations, batch norm, bias add, residual adds,
channel concatenation, and a head of global pooling or flatten, dense and softmax --
whose weights are constants (a model's, so batch norm folds into them) or, now and then,
parameters. Shapes are tracked while generating, so every network type-checks; weights are
scaled by their fan-in, so values stay of order one.

With ``loop=True`` the network also runs one of its convolutions in a loop whose count is
a parameter -- a recursive local function the accelerator target runs on the host, each
turn's layer on the accelerator -- and ``reference`` is the same network with the loop
unrolled for the drawn count, first order, for the JAX oracle (which has no recursion).
Without a loop ``reference`` is the network itself.

``accelerator_configs()`` draws float32 accelerators with small on-chip buffers, so that
layers run in bands of rows and blocks of channels and fused groups split: the Deep Fusion
prototype with one buffer, or VTA's core with three, double buffering on or off.

>>> from hypothesis import given
>>> @given(random_networks(), accelerator_configs())
... def check(network, config):
...     fn, inputs, reference = network
...     assert len(fn.params) == len(inputs) == len(reference.params)
...     assert config.dtype == "float32"
>>> check()
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from relaydsl.ir.expr import Constant, Expr, Function, Let, Tuple, TupleGetItem, Var
from relaydsl.ir.types import TensorType
from relaydsl.op.registry import ops
from relaydsl.testing.random_programs import repeat

Shape = tuple[int, int, int, int]  # N, C, H, W


@dataclass
class _Map:
    """A feature map of the network: its expression and NCHW shape."""

    expr: Expr
    shape: Shape


def _window_out(size: int, kernel: int, stride: int, dilation: int, before: int, after: int,
                ceil: bool = False) -> int:
    span = size + before + after - dilation * (kernel - 1) - 1
    return (-(-span // stride) if ceil else span // stride) + 1


class _NetworkBuilder:
    def __init__(self, rng: np.random.Generator, weights_as_params: bool,
                 integer: bool = False):
        self.rng = rng
        self.integer = integer
        self.weights_as_params = weights_as_params
        self.params: list[Var] = []
        self.inputs: list[np.ndarray] = []
        self.maps: list[_Map] = []
        self.bindings: list[tuple[Var, Expr]] = []

    def weight(self, shape: tuple[int, ...], scale: float) -> Expr:
        """A weight of `shape`, uniform in ±`scale`: a constant, or sometimes a parameter."""
        value = self.rng.uniform(-scale, scale, size=shape).astype(np.float32)
        if self.weights_as_params and self.rng.integers(3) == 0:
            var = Var(f"w{len(self.params)}", TensorType(shape, "float32"))
            self.params.append(var)
            self.inputs.append(value)
            return var
        return Constant(value)

    def bind(self, expr: Expr, shape: Shape) -> _Map:
        var = Var(f"h{len(self.bindings)}")
        self.bindings.append((var, expr))
        m = _Map(var, shape)
        self.maps.append(m)
        return m

    def choice(self, options: list) -> object:
        return options[int(self.rng.integers(len(options)))]

    def conv(self, x: _Map, same: bool = False) -> tuple[Expr, Shape]:
        """A random conv2d of `x` (with `same`: 3x3, stride 1, padding 1, its shape kept)."""
        n, c, h, w = x.shape
        rng = self.rng
        if same:
            kernel, strides, dilation, padding, groups, cout = (3, 3), (1, 1), (1, 1), \
                (1, 1, 1, 1), 1, c
        else:
            for _ in range(20):
                kernel = tuple(int(k) for k in rng.integers(1, 4, size=2))
                strides = tuple(int(s) for s in rng.integers(1, 3, size=2))
                dilation = tuple(int(d) for d in rng.integers(1, 3, size=2)) \
                    if rng.integers(3) == 0 else (1, 1)
                padding = tuple(int(rng.integers(0, kernel[i % 2])) for i in range(4))
                outs = [_window_out((h, w)[a], kernel[a], strides[a], dilation[a],
                                    padding[a], padding[a + 2]) for a in (0, 1)]
                if min(outs) >= 1:
                    break
            else:
                kernel, strides, dilation, padding = (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)
            groups = int(self.choice([1, 1, 1, c, 2 if c % 2 == 0 else 1]))
            cout = groups * int(rng.integers(1, 3)) if groups > 1 else int(rng.integers(1, 7))
        fan_in = c // groups * kernel[0] * kernel[1]
        wt = self.weight((cout, c // groups, *kernel), 1.5 / np.sqrt(fan_in))
        out = ops.conv2d(x.expr, wt, strides=strides, padding=padding, dilation=dilation,
                         groups=groups)
        size = [_window_out((h, w)[a], kernel[a], strides[a], dilation[a], padding[a],
                            padding[a + 2]) for a in (0, 1)]
        return out, (n, cout, size[0], size[1])

    def pool(self, x: _Map) -> tuple[Expr, Shape] | None:
        n, c, h, w = x.shape
        rng = self.rng
        size = tuple(int(k) for k in rng.integers(1, 4, size=2))
        strides = tuple(int(s) for s in rng.integers(1, 3, size=2))
        # every window holds an element of the image: no -inf maximum, no mean of nothing
        padding = tuple(int(rng.integers(0, size[i % 2] // 2 + 1)) for i in range(4))
        ceil = bool(rng.integers(2))

        def outs_of(ceil: bool) -> list[int]:
            return [_window_out((h, w)[a], size[a], strides[a], 1, padding[a], padding[a + 2],
                                ceil) for a in (0, 1)]

        outs = outs_of(ceil)
        if ceil and any((o - 1) * strides[a] >= (h, w)[a] + padding[a]
                        for a, o in enumerate(outs)):
            ceil, outs = False, outs_of(False)  # a last window all in the padding: no ceil
        if min(outs) < 1:
            return None
        if rng.integers(2):
            out = ops.max_pool2d(x.expr, pool_size=size, strides=strides, padding=padding,
                                 ceil_mode=ceil)
        else:
            out = ops.avg_pool2d(x.expr, pool_size=size, strides=strides, padding=padding,
                                 ceil_mode=ceil, count_include_pad=bool(rng.integers(2)))
        return out, (n, c, outs[0], outs[1])

    def activation(self, x: Expr) -> Expr:
        # with `integer`, the activations relay.quantize realizes in integers only
        kind = int(self.choice([0, 4, 5])) if self.integer else int(self.rng.integers(7))
        if kind == 0:
            return ops.relu(x)
        if kind == 1:
            return ops.tanh(x)
        if kind == 2:
            return ops.sigmoid(x)
        if kind == 3:
            return ops.leaky_relu(x, alpha=0.1)
        if kind == 4:
            return ops.clip(x, a_min=-1.0, a_max=1.5)
        if kind == 5:
            return ops.multiply(x, Constant(np.array(0.5, np.float32)))
        return ops.negative(x)

    def step(self) -> None:
        x = self.maps[-1] if self.rng.integers(3) else self.choice(self.maps)
        assert isinstance(x, _Map)
        n, c, h, w = x.shape
        kind = self.choice(["conv", "conv", "conv", "pool", "pad", "act", "bias", "residual",
                            "concat"] + ([] if self.integer else ["bn"]))
        if self.integer and len(self.maps) == 1:
            kind = "conv"  # quantized from the first layer on: no float sum before it
        if kind == "conv":
            self.bind(*self.conv(x))
        elif kind == "pool":
            pooled = self.pool(x)
            if pooled is not None:
                self.bind(*pooled)
        elif kind == "pad":
            top, left, bottom, right = (int(p) for p in self.rng.integers(0, 3, size=4))
            value = 0.0 if self.integer else float(self.choice([0.0, 0.0, 0.5]))
            self.bind(ops.pad(x.expr, pad_width=(0, 0, 0, 0, top, bottom, left, right),
                              pad_value=value), (n, c, h + top + bottom, w + left + right))
        elif kind == "act":
            self.bind(self.activation(x.expr), x.shape)
        elif kind == "bn":
            gamma, beta, mean = (self.weight((c,), 1.0) for _ in range(3))
            var = Constant(self.rng.uniform(0.5, 2.0, size=c).astype(np.float32))
            self.bind(TupleGetItem(ops.batch_norm(x.expr, gamma, beta, mean, var), 0), x.shape)
        elif kind == "bias":
            self.bind(ops.bias_add(x.expr, self.weight((c,), 0.5), axis=1), x.shape)
        elif kind == "residual":
            out, _ = self.conv(x, same=True)
            partners = [m for m in self.maps if m.shape == x.shape]
            y = self.choice(partners)
            assert isinstance(y, _Map)
            self.bind(self.activation(ops.add(out, y.expr)), x.shape)
        else:
            partners = [m for m in self.maps if (m.shape[0], *m.shape[2:]) == (n, h, w)]
            y = self.choice(partners)
            assert isinstance(y, _Map)
            self.bind(ops.concatenate(Tuple([x.expr, y.expr]), axis=1),
                      (n, c + y.shape[1], h, w))

    def head(self) -> Expr:
        """The last map, or a classifier over it: pooling or flatten, dense, softmax."""
        x = self.maps[-1]
        _, c, h, w = x.shape
        kind = int(self.rng.integers(4))
        if kind == 0:
            return x.expr
        if kind == 1:
            pool = ops.global_avg_pool2d if self.rng.integers(2) else ops.global_max_pool2d
            features, flat = c, ops.flatten(pool(x.expr))
        else:
            features, flat = c * h * w, ops.flatten(x.expr)
        units = int(self.rng.integers(1, 9))
        out = ops.dense(flat, self.weight((units, features), 1.5 / np.sqrt(features)))
        if self.rng.integers(2):
            out = ops.bias_add(out, self.weight((units,), 0.5), axis=1)
        if not self.integer and self.rng.integers(2):
            out = ops.softmax(out)
        return out


def _let_all(lets: list[tuple[Var, Expr]], body: Expr) -> Expr:
    for var, value in reversed(lets):
        body = Let(var, value, body)
    return body


@st.composite
def random_networks(draw, max_layers: int = 6, loop: bool = False,
                    constant_weights: bool = False, integer: bool = False
                    ) -> tuple[Function, list[np.ndarray], Function]:
    """A (network, inputs, reference) triple (see the module docstring): up to `max_layers`
    layers before the head; with `loop`, a convolution repeated by a loop whose count is the
    last parameter; with `constant_weights`, the image is the one parameter (but the
    count); with `integer`, only layers that relay.quantize realizes in integers (no
    tanh, sigmoid, batch norm or softmax: their float results differ by an ulp between
    libraries), so that quantized networks compare bit for bit."""
    seed = draw(st.integers(0, 2**32 - 1))
    n_layers = draw(st.integers(1, max_layers))
    rng = np.random.default_rng(seed)
    builder = _NetworkBuilder(rng, not constant_weights and bool(rng.integers(2)), integer)
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 7)), int(rng.integers(4, 13)),
             int(rng.integers(4, 13)))
    x = Var("x", TensorType(shape, "float32"))
    builder.params.append(x)
    builder.inputs.append(rng.uniform(-2, 2, size=shape).astype(np.float32))
    builder.maps.append(_Map(x, shape))
    loop_at = int(rng.integers(n_layers)) if loop else -1
    count = Var("count", TensorType((), "int32"))
    turns = int(rng.integers(0, 4))
    reference_bindings: list[tuple[Var, Expr]] = []
    for k in range(n_layers):
        if k == loop_at:
            m = builder.maps[-1]
            wt = builder.weight((m.shape[1], m.shape[1], 3, 3), 1.0 / np.sqrt(9 * m.shape[1]))

            def layer(h: Expr, wt: Expr = wt) -> Expr:
                return ops.tanh(ops.conv2d(h, wt, padding=1))

            var = Var(f"h{len(builder.bindings)}")
            unrolled: Expr = m.expr
            for _ in range(turns):
                unrolled = layer(unrolled)
            reference_bindings.append((var, unrolled))
            builder.bindings.append((var, repeat(layer, m.expr, count)))
            builder.maps.append(_Map(var, m.shape))
            continue
        builder.step()
        reference_bindings.extend(builder.bindings[len(reference_bindings):])
    result = builder.head()
    params = list(builder.params)
    fn = Function(params, _let_all(builder.bindings, result))
    if not loop:
        return fn, builder.inputs, fn
    reference = Function(params, _let_all(reference_bindings, result))
    return (Function([*params, count], fn.body), [*builder.inputs, np.int32(turns)],
            reference)


@st.composite
def accelerator_configs(draw) -> AcceleratorConfig:
    """A float32 accelerator with small buffers (see the module docstring)."""
    double = draw(st.booleans())
    if draw(st.integers(0, 2)):
        kib = draw(st.sampled_from([2, 3, 4, 6, 8, 16, 768]))
        return AcceleratorConfig.deep_fusion(onchip_bytes=kib * KIB, double_buffering=double)
    block = draw(st.sampled_from([4, 8, 16]))
    inp, wgt, acc = (draw(st.sampled_from([2, 4, 8, 32])) * KIB for _ in range(3))
    return AcceleratorConfig.vta(batch=draw(st.sampled_from([1, 2])), block_in=block,
                                 block_out=block, dtype="float32", double_buffering=double,
                                 input_buffer_bytes=inp, weight_buffer_bytes=wgt,
                                 acc_buffer_bytes=acc, onchip_bytes=inp + wgt + acc)
