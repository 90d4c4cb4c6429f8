"""The four vision networks of the Relay paper's Figure 5, as ``@relay_model`` functions.

ResNet-18 (He et al. 2016), MobileNet v1 (Howard et al. 2017, width 1.0: its depthwise
convolutions are conv2d layers with ``groups`` = channels), VGG-16 (Simonyan & Zisserman 2015,
configuration D) and Nature-DQN (Mnih et al. 2015). All take one NCHW float32 example (batch 1)
and are written with the frontend's layers, flat, one line per layer, as the MAPL paper's
LeNet is: the DSL does not unroll Python loops, and a layer's attributes (``num_filter=``,
``ksize=``) are constants of the program. Batch norm is a layer of the program (inference mode:
the running statistics), so that the passes folding it (SimplifyInference, FoldScaleAxis,
FoldConstant) have their work to do.

The functions are templates over the image size ``S`` (and the class count ``CLASSES``):
:func:`model` specialises one, so the benchmark runs them at ImageNet's 224x224 (Nature-DQN at
its 84x84 Atari frames) and the tests at 32x32 in a fraction of the time. Each network also
has a JAX forward pass over the same parameters (:data:`JAX_FORWARD`), the tests' and the
benchmark's reference.

>>> fn = model("dqn", image=36)
>>> params = random_params(relay.create_model(fn))
>>> sorted(params)[:3], params["conv2d_0.weight"].shape
(['conv2d_0.bias', 'conv2d_0.weight', 'conv2d_1.bias'], (32, 4, 8, 8))
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks.workloads.common import jax_modules, specialize
from relaydsl import Float, Tensor, relay, relay_model
from relaydsl.frontend import frozen
from relaydsl.frontend.model import Model
from relaydsl.ir.module import IRModule

# ============================================================================================
# the networks (S, CLASSES and CHANNELS are bound by specialize)
# ============================================================================================


# ResNet-18 for ImageNet: a 7x7 stride-2 stem and a 3x3 stride-2 max pool, four stages of two
# basic blocks (the first block of stages 2-4 strides by 2 and projects its shortcut with a
# strided 1x1 convolution), global average pooling and a dense layer.
def resnet18(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:  # noqa: F821
    h = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=64, ksize=7, strides=2,
                                                 padding=3, no_bias=True)))
    h = relay.max_pool(h, ksize=3, strides=2, padding=1)
    # stage 1: 64 channels
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=64, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=64, ksize=3, padding=1, no_bias=True))
    h = relay.relu(t + h)
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=64, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=64, ksize=3, padding=1, no_bias=True))
    h = relay.relu(t + h)
    # stage 2: 128 channels, half the size
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=3, strides=2,
                                                 padding=1, no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=128, ksize=3, padding=1, no_bias=True))
    s = relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=1, strides=2, no_bias=True))
    h = relay.relu(t + s)
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=128, ksize=3, padding=1, no_bias=True))
    h = relay.relu(t + h)
    # stage 3: 256 channels
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=3, strides=2,
                                                 padding=1, no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=256, ksize=3, padding=1, no_bias=True))
    s = relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=1, strides=2, no_bias=True))
    h = relay.relu(t + s)
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=256, ksize=3, padding=1, no_bias=True))
    h = relay.relu(t + h)
    # stage 4: 512 channels
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, strides=2,
                                                 padding=1, no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=512, ksize=3, padding=1, no_bias=True))
    s = relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, strides=2, no_bias=True))
    h = relay.relu(t + s)
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=512, ksize=3, padding=1, no_bias=True))
    h = relay.relu(t + h)
    h = relay.flatten_layer(relay.global_avg_pool2d(h))
    return relay.linear(h, num_hidden=CLASSES)  # noqa: F821


# MobileNet v1: a strided 3x3 stem, then 13 depthwise-separable blocks (a 3x3 depthwise
# convolution, one filter per channel, then a 1x1 pointwise one; each followed by batch norm
# and relu), global average pooling and a dense layer.
def mobilenet_v1(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:  # noqa: F821
    h = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=32, ksize=3, strides=2,
                                                 padding=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=32, ksize=3, padding=1,
                                                 groups=32, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=64, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=64, ksize=3, strides=2,
                                                 padding=1, groups=64, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=3, padding=1,
                                                 groups=128, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=3, strides=2,
                                                 padding=1, groups=128, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=3, padding=1,
                                                 groups=256, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=3, strides=2,
                                                 padding=1, groups=256, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, no_bias=True)))
    # five blocks of 512 channels at one size
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, padding=1,
                                                 groups=512, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, padding=1,
                                                 groups=512, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, padding=1,
                                                 groups=512, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, padding=1,
                                                 groups=512, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, padding=1,
                                                 groups=512, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, no_bias=True)))
    # two blocks of 1024 channels
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, strides=2,
                                                 padding=1, groups=512, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=1024, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=1024, ksize=3, padding=1,
                                                 groups=1024, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=1024, ksize=1, no_bias=True)))
    h = relay.flatten_layer(relay.global_avg_pool2d(h))
    return relay.linear(h, num_hidden=CLASSES)  # noqa: F821


# VGG-16 (configuration D): thirteen 3x3 convolutions with relu in five groups, each group
# ending in a 2x2 max pool, then three dense layers (dropout, the identity at inference, left
# out).
def vgg16(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:  # noqa: F821
    h = relay.relu(relay.conv2d(x, num_filter=64, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=64, ksize=3, padding=1))
    h = relay.max_pool(h, ksize=2, strides=2)
    h = relay.relu(relay.conv2d(h, num_filter=128, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=128, ksize=3, padding=1))
    h = relay.max_pool(h, ksize=2, strides=2)
    h = relay.relu(relay.conv2d(h, num_filter=256, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=256, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=256, ksize=3, padding=1))
    h = relay.max_pool(h, ksize=2, strides=2)
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.max_pool(h, ksize=2, strides=2)
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.flatten_layer(relay.max_pool(h, ksize=2, strides=2))
    h = relay.relu(relay.linear(h, num_hidden=4096))
    h = relay.relu(relay.linear(h, num_hidden=4096))
    return relay.linear(h, num_hidden=CLASSES)  # noqa: F821


# Nature-DQN: four stacked 84x84 frames, three convolutions with relu (32 8x8 stride 4,
# 64 4x4 stride 2, 64 3x3), a dense layer of 512 with relu, one Q-value per action.
def nature_dqn(x: Tensor[Float, (1, 4, S, S)]) -> Tensor[Float, (1, CLASSES)]:  # noqa: F821
    h = relay.relu(relay.conv2d(x, num_filter=32, ksize=8, strides=4))
    h = relay.relu(relay.conv2d(h, num_filter=64, ksize=4, strides=2))
    h = relay.relu(relay.conv2d(h, num_filter=64, ksize=3))
    h = relay.relu(relay.linear(relay.flatten_layer(h), num_hidden=512))
    return relay.linear(h, num_hidden=CLASSES)  # noqa: F821


# name: (template, input channels, the paper's image size, classes: ImageNet's 1000, or
# Atari's 18 actions, the largest action set)
MODELS: dict[str, tuple[Callable, int, int, int]] = {
    "resnet18": (resnet18, 3, 224, 1000),
    "mobilenet": (mobilenet_v1, 3, 224, 1000),
    "vgg16": (vgg16, 3, 224, 1000),
    "dqn": (nature_dqn, 4, 84, 18),
}
TITLES = {"resnet18": "ResNet-18", "mobilenet": "MobileNet v1", "vgg16": "VGG-16",
          "dqn": "Nature-DQN"}


def model(name: str, image: int | None = None):
    """The ``@relay_model`` function of network `name` (a key of MODELS) on one
    ``image`` x ``image`` example (default: the paper's size)."""
    template, _, size, classes = MODELS[name]
    return specialize(template, decorator=relay_model, S=image or size, CLASSES=classes)


def input_shape(name: str, image: int | None = None) -> tuple[int, int, int, int]:
    _, channels, size, _ = MODELS[name]
    return (1, channels, image or size, image or size)


# ============================================================================================
# parameters: random from a seed, and bound into the program as constants
# ============================================================================================
def random_params(m: Model, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for every parameter of `m`, set in ``m.params`` and returned.

    Weights are He-normal (standard deviation sqrt(2 / fan-in)) so that activations stay of
    order one through 13-27 layers at batch 1, where create_model's small default would make
    the outputs vanish (and a comparison with JAX meaningless); batch norm gets a scale near
    1 and a shift, mean and variance near their neutral values, biases small values.
    """
    r = np.random.default_rng(seed)
    for name, value in m.params.items():
        kind = name.rpartition(".")[2]
        shape = value.shape
        if kind == "weight":
            new = r.standard_normal(shape) * math.sqrt(2.0 / np.prod(shape[1:]))
        elif kind == "gamma":
            new = 1 + 0.1 * r.standard_normal(shape)
        elif kind == "moving_var":
            new = r.uniform(0.5, 1.5, shape)
        else:  # bias, beta, moving_mean
            new = 0.1 * r.standard_normal(shape)
        m.params[name] = new.astype(value.dtype)
    return m.params


def bind_params(m: Model) -> tuple[IRModule, str]:
    """The typed module of `m`'s forward pass with its parameters bound as constants (what
    TVM's ``relay.build(mod, params=...)`` does, and ``relay.build(model)``) and the name of
    its entry function: the setting of Figure 5, where constant folding, fold-scale-axis and
    layout alteration of the weights have their work to do."""
    return frozen.bind_params(m)


# ============================================================================================
# the JAX references, over the same parameters (by the layers' names)
# ============================================================================================
class _Layers:
    """The parameters of one model by layer, in the order its layer calls made them: each
    ``next("conv2d")`` is the following conv2d layer's prefix (``conv2d_0``, ``conv2d_1``...)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.counts: dict[str, Iterator[int]] = {}

    def next(self, layer: str) -> str:
        return f"{layer}_{next(self.counts.setdefault(layer, iter(range(10 ** 6))))}"

    def __getitem__(self, name: str) -> Any:
        return self.params[name]


def jax_layers(params: dict[str, Any]):
    """jax, jax.numpy and conv, bn, dense, max_pool over one model's parameters, in JAX,
    NCHW; each layer function takes the next parameters of its kind. A conv's `pad` is an
    int or (h, w)."""
    jax, jnp = jax_modules()
    p = _Layers(params)
    highest = jax.lax.Precision.HIGHEST

    def conv(x, stride=1, pad: int | tuple[int, int] = 0, groups=1, bias=True):
        name = p.next("conv2d")
        pad_h, pad_w = (pad, pad) if isinstance(pad, int) else pad
        y = jax.lax.conv_general_dilated(
            x, p[f"{name}.weight"], (stride, stride), [(pad_h, pad_h), (pad_w, pad_w)],
            feature_group_count=groups, dimension_numbers=("NCHW", "OIHW", "NCHW"),
            precision=highest)
        return y + p[f"{name}.bias"][:, None, None] if bias else y

    def bn(x, eps=1e-5):
        name = p.next("batch_norm")
        scale = p[f"{name}.gamma"] / jnp.sqrt(p[f"{name}.moving_var"] + eps)
        shift = p[f"{name}.beta"] - p[f"{name}.moving_mean"] * scale
        return x * scale[:, None, None] + shift[:, None, None]

    def dense(x):
        name = p.next("linear")
        return jnp.dot(x, p[f"{name}.weight"].T, precision=highest) + p[f"{name}.bias"]

    def max_pool(x, k, stride, pad=0):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, k, k),
                                     (1, 1, stride, stride),
                                     [(0, 0), (0, 0), (pad, pad), (pad, pad)])

    return jax, jnp, conv, bn, dense, max_pool


def resnet18_jax(params: dict[str, Any], x: Any) -> Any:
    jax, jnp, conv, bn, dense, max_pool = jax_layers(params)
    relu = jax.nn.relu
    h = max_pool(relu(bn(conv(x, 2, 3, bias=False))), 3, 2, 1)
    for stage in range(4):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            t = relu(bn(conv(h, stride, 1, bias=False)))
            t = bn(conv(t, 1, 1, bias=False))
            # the projection's conv and batch norm come after the block's in the program
            s = bn(conv(h, stride, 0, bias=False)) if stride == 2 else h
            h = relu(t + s)
    return dense(jnp.mean(h, axis=(2, 3)))


MOBILENET_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5,
                    (1024, 2), (1024, 1))  # (pointwise channels, depthwise stride)


def mobilenet_v1_jax(params: dict[str, Any], x: Any) -> Any:
    jax, jnp, conv, bn, dense, _ = jax_layers(params)
    relu = jax.nn.relu
    h = relu(bn(conv(x, 2, 1, bias=False)))
    channels = 32
    for out, stride in MOBILENET_BLOCKS:
        h = relu(bn(conv(h, stride, 1, groups=channels, bias=False)))
        h = relu(bn(conv(h, bias=False)))
        channels = out
    return dense(jnp.mean(h, axis=(2, 3)))


def vgg_jax(params: dict[str, Any], x: Any, groups: tuple[int, ...]) -> Any:
    """A VGG network with `groups` 3x3 convolutions before each of its five max pools."""
    jax, _, conv, _, dense, max_pool = jax_layers(params)
    relu = jax.nn.relu
    h = x
    for convs in groups:
        for _ in range(convs):
            h = relu(conv(h, 1, 1))
        h = max_pool(h, 2, 2)
    h = relu(dense(h.reshape(1, -1)))
    h = relu(dense(h))
    return dense(h)


def vgg16_jax(params: dict[str, Any], x: Any) -> Any:
    return vgg_jax(params, x, (2, 2, 3, 3, 3))


def nature_dqn_jax(params: dict[str, Any], x: Any) -> Any:
    jax, _, conv, _, dense, _ = jax_layers(params)
    relu = jax.nn.relu
    h = relu(conv(relu(conv(relu(conv(x, 4)), 2)), 1))
    return dense(relu(dense(h.reshape(1, -1))))


JAX_FORWARD: dict[str, Callable[[dict[str, Any], Any], Any]] = {
    "resnet18": resnet18_jax, "mobilenet": mobilenet_v1_jax, "vgg16": vgg16_jax,
    "dqn": nature_dqn_jax,
}
