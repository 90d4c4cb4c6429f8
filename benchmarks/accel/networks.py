"""The five ImageNet networks of the Deep Fusion paper's experiment (its Figures 8 and 9), as
``@relay_model`` functions: VGG-19, GoogLeNet, InceptionV3, ResNet-18 and ResNet-50.

All take one NCHW float32 image (batch 1) and end in 1000 ImageNet classes; batch norm is a
layer of the program in inference mode, as in benchmarks/workloads/vision.py, whose ResNet-18
this module reuses and whose conventions it follows: the networks are templates over the
image size ``S`` (and ``CLASSES``), specialised by :func:`model`, and a layer's attributes are
constants of the program.

A block that a network repeats is a ``@relay_model`` of its own, called once per use: each
call site gets its own parameters (``inception_3.conv2d_0.weight``), and the relay pipeline
inlines the calls, so the program an accelerator sees is the flat network. The blocks are
polymorphic in the image's height and width (``"h"``, ``"w"``), so one block serves every
stage of a network at every image size; a block's channel counts are constants, bound by
``specialize`` (one function per configuration, made when this module is imported). The
blocks that stride (ResNet-50's first block of a stage, InceptionV3's grid reductions) are
written flat in their network: their output size depends on the input's, which a polymorphic
block cannot state.

The variants, and the parameter counts they give (weights, biases and batch norm's scale and
shift; the running statistics are state, not counted):

- VGG-19 (Simonyan and Zisserman 2015, configuration E): sixteen 3x3 convolutions with biases
  and relu, five 2x2 max pools, three dense layers (dropout, the identity in inference, left
  out). No batch norm, as published: 143,667,240 parameters.
- GoogLeNet (Szegedy et al. 2015, Inception v1): its nine inception modules with the paper's
  Table 1 channel counts and 5x5 convolutions, without the auxiliary classifiers. The local
  response normalisations are left out and every convolution is bias-free and followed by
  batch norm, as in torchvision's GoogLeNet (after Ioffe and Szegedy 2015). The max pools pad
  by one where Caffe rounds the output size up: the same sizes at 224x224 (112, 56, 28, 14,
  7).
  7,005,832 parameters: torchvision's 6,624,904 plus the 380,928 its "5x5" branches lack
  (torchvision keeps a 3x3 kernel there for compatibility with its weights).
- InceptionV3 (Szegedy et al. 2016), torchvision's layout without the auxiliary head: 299x299
  natively (`image` takes 75 and up), bias-free convolutions with batch norm and relu, the
  factorised 7x7 and 3x3 convolutions, average-pool branches that count the padding (as
  PyTorch's default). 23,834,568 parameters: torchvision's 27,161,264 less its auxiliary
  head's 3,326,696.
- ResNet-18: vision.py's (He et al. 2016, basic blocks): 11,689,512 parameters.
- ResNet-50 (He et al. 2016): bottleneck blocks 3-4-6-3 with batch norm and bias-free
  convolutions, projection shortcuts in each stage's first block. The stride is the
  original's, the authors' Caffe model's (the paper's BatchNorm and Scale layers are Caffe's):
  on the first 1x1 convolution of a stage's first block (torchvision's v1.5 strides the 3x3
  one; the parameters are the same): 25,557,032 parameters.

Each network has a JAX forward pass over the same parameters (:data:`JAX_FORWARD`), the
reference of the tests.
"""
# ruff: noqa: F821  (the templates' constants, S, CLASSES and the blocks' channel counts, are
# bound by specialize)
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

from benchmarks.workloads.common import specialize
from benchmarks.workloads.vision import jax_layers, resnet18, resnet18_jax, vgg_jax
from relaydsl import Float, Tensor, relay, relay_model
from relaydsl.frontend.decorators import RelayModelFunction

# ============================================================================================
# VGG-19
# ============================================================================================


# Configuration E: 3x3 convolutions with relu in five groups (2, 2, 4, 4, 4), each group
# ending in a 2x2 max pool, then three dense layers.
def vgg19(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:
    h = relay.relu(relay.conv2d(x, num_filter=64, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=64, ksize=3, padding=1))
    h = relay.max_pool(h, ksize=2, strides=2)
    h = relay.relu(relay.conv2d(h, num_filter=128, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=128, ksize=3, padding=1))
    h = relay.max_pool(h, ksize=2, strides=2)
    h = relay.relu(relay.conv2d(h, num_filter=256, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=256, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=256, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=256, ksize=3, padding=1))
    h = relay.max_pool(h, ksize=2, strides=2)
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.max_pool(h, ksize=2, strides=2)
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.relu(relay.conv2d(h, num_filter=512, ksize=3, padding=1))
    h = relay.flatten_layer(relay.max_pool(h, ksize=2, strides=2))
    h = relay.relu(relay.linear(h, num_hidden=4096))
    h = relay.relu(relay.linear(h, num_hidden=4096))
    return relay.linear(h, num_hidden=CLASSES)


# ============================================================================================
# GoogLeNet
# ============================================================================================


# An inception module: four branches concatenated along the channels (a 1x1 convolution; a
# 1x1 reduction then a 3x3; a 1x1 reduction then a 5x5; a 3x3 max pool then a 1x1 projection),
# each convolution followed by batch norm and relu. C1, R3, C3, R5, C5 and POOL are the
# columns of the paper's Table 1.
def inception(x: Tensor[Float, (1, "c", "h", "w")]
              ) -> Tensor[Float, (1, C1 + C3 + C5 + POOL, "h", "w")]:
    b1 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=C1, ksize=1, no_bias=True)))
    b3 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=R3, ksize=1, no_bias=True)))
    b3 = relay.relu(relay.batch_norm(relay.conv2d(b3, num_filter=C3, ksize=3, padding=1,
                                                  no_bias=True)))
    b5 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=R5, ksize=1, no_bias=True)))
    b5 = relay.relu(relay.batch_norm(relay.conv2d(b5, num_filter=C5, ksize=5, padding=2,
                                                  no_bias=True)))
    bp = relay.max_pool(x, ksize=3, strides=1, padding=1)
    bp = relay.relu(relay.batch_norm(relay.conv2d(bp, num_filter=POOL, ksize=1, no_bias=True)))
    return relay.concatenate((b1, b3, b5, bp), axis=1)


def _inception_module(c1: int, r3: int, c3: int, r5: int, c5: int, pool: int
                      ) -> RelayModelFunction:
    return specialize(inception, decorator=relay_model, C1=c1, R3=r3, C3=c3, R5=r5, C5=c5,
                      POOL=pool)


# Table 1: #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj
inception_3a = _inception_module(64, 96, 128, 16, 32, 32)
inception_3b = _inception_module(128, 128, 192, 32, 96, 64)
inception_4a = _inception_module(192, 96, 208, 16, 48, 64)
inception_4b = _inception_module(160, 112, 224, 24, 64, 64)
inception_4c = _inception_module(128, 128, 256, 24, 64, 64)
inception_4d = _inception_module(112, 144, 288, 32, 64, 64)
inception_4e = _inception_module(256, 160, 320, 32, 128, 128)
inception_5a = _inception_module(256, 160, 320, 32, 128, 128)
inception_5b = _inception_module(384, 192, 384, 48, 128, 128)


# A 7x7 stride-2 stem, a 3x3 stride-2 max pool, a 1x1 and a 3x3 convolution, another max pool,
# then inception modules 3a-3b, 4a-4e and 5a-5b with a max pool between the groups, global
# average pooling (the paper's 7x7 average pool at 224x224) and a dense layer.
def googlenet(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:
    h = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=64, ksize=7, strides=2,
                                                 padding=3, no_bias=True)))
    h = relay.max_pool(h, ksize=3, strides=2, padding=1)
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=64, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=192, ksize=3, padding=1,
                                                 no_bias=True)))
    h = relay.max_pool(h, ksize=3, strides=2, padding=1)
    h = inception_3a(h)
    h = inception_3b(h)
    h = relay.max_pool(h, ksize=3, strides=2, padding=1)
    h = inception_4a(h)
    h = inception_4b(h)
    h = inception_4c(h)
    h = inception_4d(h)
    h = inception_4e(h)
    h = relay.max_pool(h, ksize=3, strides=2, padding=1)
    h = inception_5a(h)
    h = inception_5b(h)
    h = relay.flatten_layer(relay.global_avg_pool2d(h))
    return relay.linear(h, num_hidden=CLASSES)


# ============================================================================================
# InceptionV3 (torchvision's module names in the comments)
# ============================================================================================


# Mixed_5b-5d, at 35x35: a 1x1 convolution; a 1x1 then a 5x5; a 1x1 then two 3x3; a 3x3
# average pool then a 1x1 of POOL channels.
def inception_a(x: Tensor[Float, (1, "c", "h", "w")]
                ) -> Tensor[Float, (1, 224 + POOL, "h", "w")]:
    b1 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=64, ksize=1, no_bias=True)))
    b5 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=48, ksize=1, no_bias=True)))
    b5 = relay.relu(relay.batch_norm(relay.conv2d(b5, num_filter=64, ksize=5, padding=2,
                                                  no_bias=True)))
    b3 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=64, ksize=1, no_bias=True)))
    b3 = relay.relu(relay.batch_norm(relay.conv2d(b3, num_filter=96, ksize=3, padding=1,
                                                  no_bias=True)))
    b3 = relay.relu(relay.batch_norm(relay.conv2d(b3, num_filter=96, ksize=3, padding=1,
                                                  no_bias=True)))
    bp = relay.avg_pool2d(x, pool_size=3, strides=1, padding=1, count_include_pad=True)
    bp = relay.relu(relay.batch_norm(relay.conv2d(bp, num_filter=POOL, ksize=1, no_bias=True)))
    return relay.concatenate((b1, b5, b3, bp), axis=1)


# Mixed_6b-6e, at 17x17: a 1x1 convolution; a 1x1 then 1x7 and 7x1 (C7 channels, then 192);
# a 1x1 then 7x1, 1x7, 7x1 and 1x7; a 3x3 average pool then a 1x1. 768 channels out.
def inception_c(x: Tensor[Float, (1, 768, "h", "w")]) -> Tensor[Float, (1, 768, "h", "w")]:
    b1 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=192, ksize=1, no_bias=True)))
    b7 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=C7, ksize=1, no_bias=True)))
    b7 = relay.relu(relay.batch_norm(relay.conv2d(b7, num_filter=C7, ksize=(1, 7),
                                                  padding=(0, 3), no_bias=True)))
    b7 = relay.relu(relay.batch_norm(relay.conv2d(b7, num_filter=192, ksize=(7, 1),
                                                  padding=(3, 0), no_bias=True)))
    bd = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=C7, ksize=1, no_bias=True)))
    bd = relay.relu(relay.batch_norm(relay.conv2d(bd, num_filter=C7, ksize=(7, 1),
                                                  padding=(3, 0), no_bias=True)))
    bd = relay.relu(relay.batch_norm(relay.conv2d(bd, num_filter=C7, ksize=(1, 7),
                                                  padding=(0, 3), no_bias=True)))
    bd = relay.relu(relay.batch_norm(relay.conv2d(bd, num_filter=C7, ksize=(7, 1),
                                                  padding=(3, 0), no_bias=True)))
    bd = relay.relu(relay.batch_norm(relay.conv2d(bd, num_filter=192, ksize=(1, 7),
                                                  padding=(0, 3), no_bias=True)))
    bp = relay.avg_pool2d(x, pool_size=3, strides=1, padding=1, count_include_pad=True)
    bp = relay.relu(relay.batch_norm(relay.conv2d(bp, num_filter=192, ksize=1, no_bias=True)))
    return relay.concatenate((b1, b7, bd, bp), axis=1)


# Mixed_7b-7c, at 8x8: a 1x1 convolution; a 1x1 then 1x3 and 3x1 side by side; a 1x1 and a
# 3x3 then 1x3 and 3x1 side by side; a 3x3 average pool then a 1x1. 2048 channels out.
@relay_model
def inception_e(x: Tensor[Float, (1, "c", "h", "w")]) -> Tensor[Float, (1, 2048, "h", "w")]:
    b1 = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=320, ksize=1, no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=384, ksize=1, no_bias=True)))
    b3a = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=384, ksize=(1, 3),
                                                   padding=(0, 1), no_bias=True)))
    b3b = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=384, ksize=(3, 1),
                                                   padding=(1, 0), no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=448, ksize=1, no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=384, ksize=3, padding=1,
                                                 no_bias=True)))
    bda = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=384, ksize=(1, 3),
                                                   padding=(0, 1), no_bias=True)))
    bdb = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=384, ksize=(3, 1),
                                                   padding=(1, 0), no_bias=True)))
    bp = relay.avg_pool2d(x, pool_size=3, strides=1, padding=1, count_include_pad=True)
    bp = relay.relu(relay.batch_norm(relay.conv2d(bp, num_filter=192, ksize=1, no_bias=True)))
    return relay.concatenate((b1, b3a, b3b, bda, bdb, bp), axis=1)


inception_a_32 = specialize(inception_a, decorator=relay_model, POOL=32)
inception_a_64 = specialize(inception_a, decorator=relay_model, POOL=64)
inception_c_128 = specialize(inception_c, decorator=relay_model, C7=128)
inception_c_160 = specialize(inception_c, decorator=relay_model, C7=160)
inception_c_192 = specialize(inception_c, decorator=relay_model, C7=192)


# The stem (three 3x3 convolutions, a max pool, a 1x1 and a 3x3 convolution, a max pool), three
# A modules, a grid reduction to 17x17, four C modules, a grid reduction to 8x8, two E modules,
# global average pooling and a dense layer.
def inception_v3(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:
    h = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=32, ksize=3, strides=2,
                                                 no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=32, ksize=3, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=64, ksize=3, padding=1,
                                                 no_bias=True)))
    h = relay.max_pool(h, ksize=3, strides=2)
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=80, ksize=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=192, ksize=3, no_bias=True)))
    h = relay.max_pool(h, ksize=3, strides=2)
    h = inception_a_32(h)
    h = inception_a_64(h)
    h = inception_a_64(h)
    # Mixed_6a: a strided 3x3; a 1x1 and two 3x3, the second strided; a strided max pool
    b3 = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=384, ksize=3, strides=2,
                                                  no_bias=True)))
    bd = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=64, ksize=1, no_bias=True)))
    bd = relay.relu(relay.batch_norm(relay.conv2d(bd, num_filter=96, ksize=3, padding=1,
                                                  no_bias=True)))
    bd = relay.relu(relay.batch_norm(relay.conv2d(bd, num_filter=96, ksize=3, strides=2,
                                                  no_bias=True)))
    h = relay.concatenate((b3, bd, relay.max_pool(h, ksize=3, strides=2)), axis=1)
    h = inception_c_128(h)
    h = inception_c_160(h)
    h = inception_c_160(h)
    h = inception_c_192(h)
    # Mixed_7a: a 1x1 then a strided 3x3; a 1x1, 1x7, 7x1 then a strided 3x3; a max pool
    b3 = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=192, ksize=1, no_bias=True)))
    b3 = relay.relu(relay.batch_norm(relay.conv2d(b3, num_filter=320, ksize=3, strides=2,
                                                  no_bias=True)))
    b7 = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=192, ksize=1, no_bias=True)))
    b7 = relay.relu(relay.batch_norm(relay.conv2d(b7, num_filter=192, ksize=(1, 7),
                                                  padding=(0, 3), no_bias=True)))
    b7 = relay.relu(relay.batch_norm(relay.conv2d(b7, num_filter=192, ksize=(7, 1),
                                                  padding=(3, 0), no_bias=True)))
    b7 = relay.relu(relay.batch_norm(relay.conv2d(b7, num_filter=192, ksize=3, strides=2,
                                                  no_bias=True)))
    h = relay.concatenate((b3, b7, relay.max_pool(h, ksize=3, strides=2)), axis=1)
    h = inception_e(h)
    h = inception_e(h)
    h = relay.flatten_layer(relay.global_avg_pool2d(h))
    return relay.linear(h, num_hidden=CLASSES)


# ============================================================================================
# ResNet-50
# ============================================================================================


# A bottleneck block with an identity shortcut: 1x1 (MID channels), 3x3 (MID) and 1x1 (OUT)
# convolutions, each with batch norm, relu after the first two and after the sum.
def bottleneck(x: Tensor[Float, (1, OUT, "h", "w")]) -> Tensor[Float, (1, OUT, "h", "w")]:
    t = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=MID, ksize=1, no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=MID, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=OUT, ksize=1, no_bias=True))
    return relay.relu(t + x)


bottleneck_64 = specialize(bottleneck, decorator=relay_model, MID=64, OUT=256)
bottleneck_128 = specialize(bottleneck, decorator=relay_model, MID=128, OUT=512)
bottleneck_256 = specialize(bottleneck, decorator=relay_model, MID=256, OUT=1024)
bottleneck_512 = specialize(bottleneck, decorator=relay_model, MID=512, OUT=2048)


# ResNet-50: ResNet-18's stem, four stages of 3, 4, 6 and 3 bottleneck blocks (the first of
# each projects its shortcut with a 1x1 convolution and, in stages 2-4, strides by 2 in its
# first 1x1 convolution and its projection), global average pooling and a dense layer.
def resnet50(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:
    h = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=64, ksize=7, strides=2,
                                                 padding=3, no_bias=True)))
    h = relay.max_pool(h, ksize=3, strides=2, padding=1)
    # stage 1: 64 -> 256 channels
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=64, ksize=1, no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=64, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=256, ksize=1, no_bias=True))
    s = relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=1, no_bias=True))
    h = relay.relu(t + s)
    h = bottleneck_64(h)
    h = bottleneck_64(h)
    # stage 2: 128 -> 512 channels, half the size
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=1, strides=2,
                                                 no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=128, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=512, ksize=1, no_bias=True))
    s = relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, strides=2, no_bias=True))
    h = relay.relu(t + s)
    h = bottleneck_128(h)
    h = bottleneck_128(h)
    h = bottleneck_128(h)
    # stage 3: 256 -> 1024 channels
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=1, strides=2,
                                                 no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=256, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=1024, ksize=1, no_bias=True))
    s = relay.batch_norm(relay.conv2d(h, num_filter=1024, ksize=1, strides=2, no_bias=True))
    h = relay.relu(t + s)
    h = bottleneck_256(h)
    h = bottleneck_256(h)
    h = bottleneck_256(h)
    h = bottleneck_256(h)
    h = bottleneck_256(h)
    # stage 4: 512 -> 2048 channels
    t = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, strides=2,
                                                 no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=512, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=2048, ksize=1, no_bias=True))
    s = relay.batch_norm(relay.conv2d(h, num_filter=2048, ksize=1, strides=2, no_bias=True))
    h = relay.relu(t + s)
    h = bottleneck_512(h)
    h = bottleneck_512(h)
    h = relay.flatten_layer(relay.global_avg_pool2d(h))
    return relay.linear(h, num_hidden=CLASSES)



# ============================================================================================
# ResNet-34 and ResNet-101 (the 2019 Relay paper's Figure 3, right, with -18 and -50)
# ============================================================================================


# A basic block with an identity shortcut: two 3x3 convolutions of C channels with batch norm,
# relu after the first and after the sum (ResNet-18's, vision.py, written flat there).
def basic(x: Tensor[Float, (1, C, "h", "w")]) -> Tensor[Float, (1, C, "h", "w")]:
    t = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=C, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=C, ksize=3, padding=1, no_bias=True))
    return relay.relu(t + x)


basic_64 = specialize(basic, decorator=relay_model, C=64)
basic_128 = specialize(basic, decorator=relay_model, C=128)
basic_256 = specialize(basic, decorator=relay_model, C=256)
basic_512 = specialize(basic, decorator=relay_model, C=512)


# ResNet-34 (He et al. 2016): ResNet-18's stem and basic blocks, 3-4-6-3 to a stage. A stage's
# first block strides (a 3x3 stride-2 convolution and a 1x1 stride-2 projection of the
# shortcut) and is written flat, as in ResNet-18.
def resnet34(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:
    h = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=64, ksize=7, strides=2,
                                                 padding=3, no_bias=True)))
    h = relay.max_pool(h, ksize=3, strides=2, padding=1)
    h = basic_64(basic_64(basic_64(h)))
    for_128 = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=3, strides=2,
                                                       padding=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(for_128, num_filter=128, ksize=3, padding=1,
                                                 no_bias=True)) +
                   relay.batch_norm(relay.conv2d(h, num_filter=128, ksize=1, strides=2,
                                                 no_bias=True)))
    h = basic_128(basic_128(basic_128(h)))
    for_256 = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=3, strides=2,
                                                       padding=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(for_256, num_filter=256, ksize=3, padding=1,
                                                 no_bias=True)) +
                   relay.batch_norm(relay.conv2d(h, num_filter=256, ksize=1, strides=2,
                                                 no_bias=True)))
    h = basic_256(basic_256(basic_256(basic_256(basic_256(h)))))
    for_512 = relay.relu(relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=3, strides=2,
                                                       padding=1, no_bias=True)))
    h = relay.relu(relay.batch_norm(relay.conv2d(for_512, num_filter=512, ksize=3, padding=1,
                                                 no_bias=True)) +
                   relay.batch_norm(relay.conv2d(h, num_filter=512, ksize=1, strides=2,
                                                 no_bias=True)))
    h = basic_512(basic_512(h))
    h = relay.flatten_layer(relay.global_avg_pool2d(h))
    return relay.linear(h, num_hidden=CLASSES)


# A stage's first bottleneck block (ResNet-101), as ResNet-50's: the stride on the first 1x1
# convolution and on the projection; MID and OUT channels from IN at H x H to HO x HO.
def bottleneck_head(x: Tensor[Float, (1, IN, H, H)]) -> Tensor[Float, (1, OUT, HO, HO)]:
    t = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=MID, ksize=1, strides=STRIDE,
                                                 no_bias=True)))
    t = relay.relu(relay.batch_norm(relay.conv2d(t, num_filter=MID, ksize=3, padding=1,
                                                 no_bias=True)))
    t = relay.batch_norm(relay.conv2d(t, num_filter=OUT, ksize=1, no_bias=True))
    s = relay.batch_norm(relay.conv2d(x, num_filter=OUT, ksize=1, strides=STRIDE,
                                      no_bias=True))
    return relay.relu(t + s)


# ResNet-101 (He et al. 2016): ResNet-50 with 23 blocks in its third stage. The stage heads
# are blocks specialised at the image size (HEAD1 .. HEAD4, bound by resnet101_model).
def resnet101(x: Tensor[Float, (1, 3, S, S)]) -> Tensor[Float, (1, CLASSES)]:
    h = relay.relu(relay.batch_norm(relay.conv2d(x, num_filter=64, ksize=7, strides=2,
                                                 padding=3, no_bias=True)))
    h = relay.max_pool(h, ksize=3, strides=2, padding=1)
    h = bottleneck_64(bottleneck_64(HEAD1(h)))
    h = bottleneck_128(bottleneck_128(bottleneck_128(HEAD2(h))))
    h = HEAD3(h)
    h = bottleneck_256(bottleneck_256(bottleneck_256(bottleneck_256(h))))
    h = bottleneck_256(bottleneck_256(bottleneck_256(bottleneck_256(h))))
    h = bottleneck_256(bottleneck_256(bottleneck_256(bottleneck_256(h))))
    h = bottleneck_256(bottleneck_256(bottleneck_256(bottleneck_256(h))))
    h = bottleneck_256(bottleneck_256(bottleneck_256(bottleneck_256(h))))
    h = bottleneck_256(bottleneck_256(h))  # 22
    h = bottleneck_512(bottleneck_512(HEAD4(h)))
    h = relay.flatten_layer(relay.global_avg_pool2d(h))
    return relay.linear(h, num_hidden=CLASSES)


def _resnet101_heads(size: int) -> dict[str, RelayModelFunction]:
    """ResNet-101's four stage heads at a `size` x `size` image: stage k from the stem's
    size / 4 (64 channels in) to 256 * 2^k channels."""
    heads, h, channels = {}, -(-size // 4), 64
    for k, mid in enumerate((64, 128, 256, 512)):
        stride = 1 if k == 0 else 2
        out = -(-h // stride)
        heads[f"HEAD{k + 1}"] = specialize(bottleneck_head, decorator=relay_model, IN=channels,
                                           MID=mid, OUT=4 * mid, H=h, HO=out, STRIDE=stride)
        h, channels = out, 4 * mid
    return heads

# ============================================================================================
# the networks by name
# ============================================================================================

# name: (template, the published image size)
TEMPLATES: dict[str, tuple[Callable, int]] = {
    "vgg19": (vgg19, 224),
    "googlenet": (googlenet, 224),
    "inception_v3": (inception_v3, 299),
    "resnet18": (resnet18, 224),
    "resnet50": (resnet50, 224),
    "resnet34": (resnet34, 224),
    "resnet101": (resnet101, 224),
}
NETWORKS = ("vgg19", "googlenet", "inception_v3", "resnet18", "resnet50")  # Deep Fusion's
RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101")  # the Relay paper's Figure 3
CLASSES = 1000  # ImageNet's


def model(name: str, image: int | None = None) -> RelayModelFunction:
    """The ``@relay_model`` function of network `name` (one of NETWORKS) on one
    ``image`` x ``image`` RGB image (default: its published size, 224; InceptionV3's 299)."""
    template, size = TEMPLATES[name]
    heads = _resnet101_heads(image or size) if name == "resnet101" else {}
    return specialize(template, decorator=relay_model, S=image or size, CLASSES=CLASSES,
                      **heads)


def input_shape(name: str, image: int | None = None) -> tuple[int, int, int, int]:
    size = image or TEMPLATES[name][1]
    return (1, 3, size, size)


# ============================================================================================
# the JAX references, over the same parameters (by the layers' names)
# ============================================================================================


def _jax_nn(params: dict[str, Any]) -> SimpleNamespace:
    """vision.jax_layers over `params` (conv, bn, dense, max_pool, jnp), relu, and what these
    networks add: ``unit`` (a bias-free convolution, batch norm and relu), a 3x3 average pool
    that counts the padding, and concatenation along the channels."""
    jax, jnp, conv, bn, dense, max_pool = jax_layers(params)

    def unit(x: Any, stride: int = 1, pad: int | tuple[int, int] = 0) -> Any:
        return jax.nn.relu(bn(conv(x, stride, pad, bias=False)))

    def avg_pool(x: Any) -> Any:
        total = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 1, 3, 3), (1, 1, 1, 1),
                                      [(0, 0), (0, 0), (1, 1), (1, 1)])
        return total / 9

    def concat(*xs: Any) -> Any:
        return jnp.concatenate(xs, axis=1)

    return SimpleNamespace(jnp=jnp, relu=jax.nn.relu, conv=conv, bn=bn, dense=dense,
                           max_pool=max_pool, unit=unit, avg_pool=avg_pool, concat=concat)


def _call_sites(params: dict[str, Any], block: str) -> Iterator[dict[str, Any]]:
    """The parameters of each call of the block `block`, in the program's order, by the
    block's own names (``inception_3.conv2d_0.weight`` as ``conv2d_0.weight``)."""
    for site in itertools.count():
        prefix = f"{block}_{site}."
        own = {k.removeprefix(prefix): v for k, v in params.items() if k.startswith(prefix)}
        if not own:
            return
        yield own


def vgg19_jax(params: dict[str, Any], x: Any) -> Any:
    return vgg_jax(params, x, (2, 2, 4, 4, 4))


def _inception_jax(params: dict[str, Any], x: Any) -> Any:
    nn = _jax_nn(params)
    b1 = nn.unit(x)
    b3 = nn.unit(nn.unit(x), 1, 1)
    b5 = nn.unit(nn.unit(x), 1, 2)
    return nn.concat(b1, b3, b5, nn.unit(nn.max_pool(x, 3, 1, 1)))


def googlenet_jax(params: dict[str, Any], x: Any) -> Any:
    nn = _jax_nn(params)
    modules = _call_sites(params, "inception")
    h = nn.max_pool(nn.unit(x, 2, 3), 3, 2, 1)
    h = nn.unit(nn.unit(h), 1, 1)
    for count in (2, 5, 2):  # modules 3a-3b, 4a-4e, 5a-5b, each group after a max pool
        h = nn.max_pool(h, 3, 2, 1)
        for _ in range(count):
            h = _inception_jax(next(modules), h)
    return nn.dense(nn.jnp.mean(h, axis=(2, 3)))


def _inception_a_jax(params: dict[str, Any], x: Any) -> Any:
    nn = _jax_nn(params)
    b1 = nn.unit(x)
    b5 = nn.unit(nn.unit(x), 1, 2)
    b3 = nn.unit(nn.unit(nn.unit(x), 1, 1), 1, 1)
    return nn.concat(b1, b5, b3, nn.unit(nn.avg_pool(x)))


def _inception_c_jax(params: dict[str, Any], x: Any) -> Any:
    nn = _jax_nn(params)
    wide, tall = (0, 3), (3, 0)  # the paddings of the 1x7 and 7x1 convolutions
    b1 = nn.unit(x)
    b7 = nn.unit(nn.unit(nn.unit(x), 1, wide), 1, tall)
    bd = nn.unit(nn.unit(nn.unit(nn.unit(nn.unit(x), 1, tall), 1, wide), 1, tall), 1, wide)
    return nn.concat(b1, b7, bd, nn.unit(nn.avg_pool(x)))


def _inception_e_jax(params: dict[str, Any], x: Any) -> Any:
    nn = _jax_nn(params)
    wide, tall = (0, 1), (1, 0)  # the paddings of the 1x3 and 3x1 convolutions
    b1 = nn.unit(x)
    t = nn.unit(x)
    b3a, b3b = nn.unit(t, 1, wide), nn.unit(t, 1, tall)
    t = nn.unit(nn.unit(x), 1, 1)
    bda, bdb = nn.unit(t, 1, wide), nn.unit(t, 1, tall)
    return nn.concat(b1, b3a, b3b, bda, bdb, nn.unit(nn.avg_pool(x)))


def inception_v3_jax(params: dict[str, Any], x: Any) -> Any:
    nn = _jax_nn(params)
    h = nn.unit(nn.unit(nn.unit(x, 2)), 1, 1)
    h = nn.max_pool(nn.unit(nn.unit(nn.max_pool(h, 3, 2))), 3, 2)
    for block in _call_sites(params, "inception_a"):
        h = _inception_a_jax(block, h)
    b3 = nn.unit(h, 2)
    bd = nn.unit(nn.unit(nn.unit(h), 1, 1), 2)
    h = nn.concat(b3, bd, nn.max_pool(h, 3, 2))
    for block in _call_sites(params, "inception_c"):
        h = _inception_c_jax(block, h)
    b3 = nn.unit(nn.unit(h), 2)
    b7 = nn.unit(nn.unit(nn.unit(nn.unit(h), 1, (0, 3)), 1, (3, 0)), 2)
    h = nn.concat(b3, b7, nn.max_pool(h, 3, 2))
    for block in _call_sites(params, "inception_e"):
        h = _inception_e_jax(block, h)
    return nn.dense(nn.jnp.mean(h, axis=(2, 3)))


def _bottleneck_jax(params: dict[str, Any], x: Any) -> Any:
    nn = _jax_nn(params)
    t = nn.bn(nn.conv(nn.unit(nn.unit(x), 1, 1), bias=False))
    return nn.relu(t + x)


def resnet50_jax(params: dict[str, Any], x: Any) -> Any:
    nn = _jax_nn(params)
    blocks = _call_sites(params, "bottleneck")
    h = nn.max_pool(nn.unit(x, 2, 3), 3, 2, 1)
    for stage, identity_blocks in enumerate((2, 3, 5, 2)):
        stride = 1 if stage == 0 else 2
        t = nn.bn(nn.conv(nn.unit(nn.unit(h, stride), 1, 1), bias=False))
        h = nn.relu(t + nn.bn(nn.conv(h, stride, bias=False)))  # the projection
        for _ in range(identity_blocks):
            h = _bottleneck_jax(next(blocks), h)
    return nn.dense(nn.jnp.mean(h, axis=(2, 3)))


JAX_FORWARD: dict[str, Callable[[dict[str, Any], Any], Any]] = {
    "vgg19": vgg19_jax, "googlenet": googlenet_jax, "inception_v3": inception_v3_jax,
    "resnet18": resnet18_jax, "resnet50": resnet50_jax,
}
