"""Neural-network ops against JAX; their relations on symbolic dims; their errors.

Each JAX truth is written with jax.lax / jax.numpy / jax.nn independently of the ops'
``jax_lower``. The pooling geometry is also checked against a brute-force transcription of
PyTorch's pooling loops (output size, ceil_mode, count_include_pad).
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaydsl.errors import IRError, RelayTypeError
from relaydsl.ir import Call, Op, TensorType, TupleGetItem, TupleType, Var
from relaydsl.ir.types import Any, Kind, TypeVar
from relaydsl.op import OpPattern, lookup
from relaydsl.typing import infer_type
from relaydsl.typing.relations import check_relation
from tests.relaydsl.op.harness import OpCase, check_case

lax = jax.lax
HIGHEST = lax.Precision.HIGHEST
rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def f64(*shape):
    return rng.standard_normal(shape)


def i8(*shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def u8(*shape):
    return rng.integers(0, 256, shape).astype(np.uint8)


def i32(*shape):
    return rng.integers(-100, 101, shape).astype(np.int32)


def pos(x):
    """Positive values (variances)."""
    return np.abs(x) + np.asarray(0.5, x.dtype)


def one_hot(n, k, dtype=np.float32):
    return np.eye(k, dtype=dtype)[rng.integers(0, k, n)]


def probabilities(*shape):
    p = rng.random(shape).astype(np.float32)
    return p / p.sum(-1, keepdims=True)


# ---- JAX truths ---------------------------------------------------------------------------------

def conv_truth(strides=(1, 1), pads=((0, 0), (0, 0)), dilation=(1, 1), groups=1,
               out_dtype=None):
    def truth(x, w):
        return lax.conv_general_dilated(
            x, w, strides, pads, rhs_dilation=dilation, feature_group_count=groups,
            dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=HIGHEST,
            preferred_element_type=out_dtype)

    return truth


def conv_nchwc_truth(strides=(1, 1), pads=((0, 0), (0, 0)), dilation=(1, 1)):
    """conv2d_nchwc as NCHW conv2d on the unblocked data and weight, the result blocked."""
    nchw = conv_truth(strides, pads, dilation)

    def truth(x, w):
        n, cb, h, wd, ib = x.shape
        ob_count, _, kh, kw, _, ob = w.shape
        out = nchw(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * ib, h, wd),
                   w.transpose(0, 5, 1, 4, 2, 3).reshape(ob_count * ob, cb * ib, kh, kw))
        _, _, oh, ow = out.shape
        return out.reshape(n, ob_count, ob, oh, ow).transpose(0, 1, 3, 4, 2)

    return truth


def _window_sum(x, k, s, pads):
    return lax.reduce_window(x, jnp.zeros((), x.dtype), lax.add, (1, 1, *k), (1, 1, *s),
                             ((0, 0), (0, 0), *pads))


def max_pool_truth(k, s, pads):
    """pads: ((top, bottom), (left, right)) including any padding ceil_mode adds."""
    def truth(x):
        least = jnp.iinfo(x.dtype).min if jnp.issubdtype(x.dtype, jnp.integer) else -jnp.inf
        return lax.reduce_window(x, jnp.array(least, x.dtype), lax.max, (1, 1, *k),
                                 (1, 1, *s), ((0, 0), (0, 0), *pads))

    return truth


def pool_adjoint(k, s, pads):
    """max_pool2d_grad as JAX's vjp of max_pool_truth(k, s, pads)."""
    return lambda g, x: jax.vjp(max_pool_truth(k, s, pads), x)[1](g)[0]


def avg_pool_truth(k, s, pads, counted=((0, 0), (0, 0))):
    """Window sums over `pads` divided by how many ones each window holds of an all-ones input
    padded by `counted` (the part of the padding the mean counts)."""
    def truth(x):
        ones = jnp.pad(jnp.ones_like(x), ((0, 0), (0, 0), *counted), constant_values=1)
        rest = [(p[0] - c[0], p[1] - c[1]) for p, c in zip(pads, counted)]
        return _window_sum(x, k, s, pads) / _window_sum(ones, k, s, rest)

    return truth


def conv1d_truth(strides=1, pads=(0, 0), dilation=1, groups=1, out_dtype=None):
    def truth(x, w):
        return lax.conv_general_dilated(
            x, w, (strides,), (pads,), rhs_dilation=(dilation,), feature_group_count=groups,
            dimension_numbers=("NCH", "OIH", "NCH"), precision=HIGHEST,
            preferred_element_type=out_dtype)

    return truth


def max_pool1d_truth(k, s, pads):
    """pads: (left, right) including any padding ceil_mode adds."""
    return lambda x: lax.reduce_window(x, jnp.array(-jnp.inf, x.dtype), lax.max, (1, 1, k),
                                       (1, 1, s), ((0, 0), (0, 0), pads))


def avg_pool1d_truth(k, s, pads, counted=(0, 0)):
    """Window sums over `pads` divided by the window's count of an all-ones input padded with
    ones by `counted` (the part of the padding the mean counts)."""
    def window_sum(x, pads):
        return lax.reduce_window(x, jnp.zeros((), x.dtype), lax.add, (1, 1, k), (1, 1, s),
                                 ((0, 0), (0, 0), pads))

    def truth(x):
        ones = jnp.pad(jnp.ones_like(x), ((0, 0), (0, 0), counted), constant_values=1)
        return window_sum(x, pads) / window_sum(ones, (pads[0] - counted[0],
                                                       pads[1] - counted[1]))

    return truth


def max_pool3d_truth(k, s, pads):
    """pads: ((front, back), (top, bottom), (left, right)) including ceil_mode's padding."""
    return lambda x: lax.reduce_window(x, jnp.array(-jnp.inf, x.dtype), lax.max, (1, 1, *k),
                                       (1, 1, *s), ((0, 0), (0, 0), *pads))


def avg_pool3d_truth(k, s, pads, counted=((0, 0),) * 3):
    """Window sums over `pads` divided by the window's count of an all-ones input padded with
    ones by `counted` (the part of the padding the mean counts)."""
    def window_sum(x, pads):
        return lax.reduce_window(x, jnp.zeros((), x.dtype), lax.add, (1, 1, *k), (1, 1, *s),
                                 ((0, 0), (0, 0), *pads))

    def truth(x):
        ones = jnp.pad(jnp.ones_like(x), ((0, 0), (0, 0), *counted), constant_values=1)
        rest = [(p[0] - c[0], p[1] - c[1]) for p, c in zip(pads, counted)]
        return window_sum(x, pads) / window_sum(ones, rest)

    return truth


def conv_transpose_truth(strides=(1, 1), pads=((0, 0), (0, 0)), output_padding=(0, 0),
                         dilation=(1, 1), groups=1):
    """conv2d_transpose as JAX's vjp of conv2d (its IOHW weight read as OIHW) with respect to
    the data, the data of the size the transposed convolution gives."""
    def truth(x, w):
        def conv(y):
            return lax.conv_general_dilated(
                y, w, strides, pads, rhs_dilation=dilation, feature_group_count=groups,
                dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=HIGHEST)

        size = [(x.shape[2 + i] - 1) * strides[i] - sum(pads[i])
                + dilation[i] * (w.shape[2 + i] - 1) + 1 + output_padding[i] for i in (0, 1)]
        y = jnp.zeros((x.shape[0], w.shape[1] * groups, *size), x.dtype)
        return jax.vjp(conv, y)[1](x)[0]

    return truth


def upsampling_truth(scale_h, scale_w, method="nearest_neighbor", align_corners=False):
    """TVM's upsampling (topi.image.resize2d): output row y reads input row y * H / OH, or
    y * (H - 1) / (OH - 1) with align_corners, floored (asymmetric) or rounded to even (align
    corners) for nearest_neighbor, interpolated with clamped neighbours for bilinear
    (map_coordinates, order 1, mode "nearest"); likewise along W."""
    def coords(size, out):
        if align_corners:
            return jnp.arange(out) * ((size - 1) / (out - 1) if out > 1 else 0.0)
        return jnp.arange(out) * (size / out)

    def truth(x):
        n, c, h, w = x.shape
        ys, xs = coords(h, round(h * scale_h)), coords(w, round(w * scale_w))
        if method == "nearest_neighbor":
            pick = jnp.round if align_corners else (lambda v: jnp.floor(v + 1e-5))
            iy, ix = pick(ys).astype(int), pick(xs).astype(int)
            return x[:, :, iy][:, :, :, ix]
        grid = jnp.meshgrid(jnp.arange(n), jnp.arange(c), ys, xs, indexing="ij")
        return jax.scipy.ndimage.map_coordinates(x, grid, order=1, mode="nearest")

    return truth


def global_max_truth(x):
    return lax.reduce_window(x, jnp.array(-jnp.inf, x.dtype), lax.max, (1, 1, *x.shape[2:]),
                             (1, 1, 1, 1), "VALID")


def leaky_relu_truth(alpha):
    return lambda x: jax.nn.leaky_relu(x, negative_slope=alpha)


def prelu_truth(axis=1):
    def truth(x, alpha):
        slope = lax.broadcast_in_dim(alpha, x.shape, (axis % x.ndim,))
        return jnp.where(x >= 0, x, slope * x)

    return truth


def global_avg_truth(x):
    h, w = x.shape[2:]
    return _window_sum(x, (h, w), (1, 1), ((0, 0), (0, 0))) / (h * w)


def batch_norm_truth(axis=1, eps=1e-5, training=False, momentum=0.1, center=True, scale=True):
    def truth(x, gamma, beta, mean, var):
        axis_ = axis % x.ndim
        others = tuple(i for i in range(x.ndim) if i != axis_)

        def spread(v):
            return lax.broadcast_in_dim(v, x.shape, (axis_,))

        if training:
            batch_mean, batch_var = jnp.mean(x, others), jnp.var(x, others)
            use_mean, use_var = batch_mean, batch_var
            mean = momentum * batch_mean + (1 - momentum) * mean
            n = x.size // x.shape[axis_]  # the moving variance takes the unbiased estimate
            var = momentum * batch_var * n / max(n - 1, 1) + (1 - momentum) * var
        else:
            use_mean, use_var = mean, var
        out = jax.nn.standardize(x, others, mean=spread(use_mean), variance=spread(use_var),
                                 epsilon=eps)
        out = out * spread(gamma) if scale else out
        out = out + spread(beta) if center else out
        return out, mean, var

    return truth


def layer_norm_truth(axis=-1, eps=1e-5, center=True, scale=True):
    def truth(x, gamma, beta):
        axis_ = axis % x.ndim
        out = jax.nn.standardize(x, axis_, epsilon=eps)
        out = out * lax.broadcast_in_dim(gamma, x.shape, (axis_,)) if scale else out
        return out + lax.broadcast_in_dim(beta, x.shape, (axis_,)) if center else out

    return truth


def lowbias32(x):
    """The documented dropout hash, in Python integers."""
    m = 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & m
    x ^= x >> 15
    x = (x * 0x846CA68B) & m
    return x ^ (x >> 16)


def dropout_keep(size, rate, key):
    """The documented mask of a key (k0, k1), each taken mod 2**32."""
    k0, k1 = (int(k) % 2**32 for k in key)
    seed = lowbias32(lowbias32(k0) ^ k1)
    threshold = int(rate * 2**32)
    return np.array([lowbias32(lowbias32(i) ^ seed) >= threshold for i in range(size)])


def key(k0, k1, dtype=np.int64):
    return np.array([k0, k1], dtype)


def dropout_truth(rate):
    def truth(x, k):
        keep = dropout_keep(x.size, rate, k).reshape(x.shape)
        return jnp.where(keep, x / (1 - rate), jnp.zeros((), x.dtype))

    return truth


def pad_truth(widths, value=0.0):
    def truth(x):
        pairs = [(widths[2 * i], widths[2 * i + 1], 0) for i in range(x.ndim)]
        return lax.pad(x, jnp.array(value, x.dtype), pairs)

    return truth


def dilate_truth(strides, value=0.0):
    def truth(x):
        shape = [(d - 1) * s + 1 for d, s in zip(x.shape, strides)]
        grid = tuple(slice(None, None, s) for s in strides)
        return jnp.full(shape, value, x.dtype).at[grid].set(x)

    return truth


def bias_add_truth(axis):
    return lambda x, b: x + lax.broadcast_in_dim(b, x.shape, (axis % x.ndim,))


def cross_entropy_truth(logits, labels):
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1))


def bmm_truth(transpose_a=False, transpose_b=False):
    spec = f"{'bkm' if transpose_a else 'bmk'},{'bnk' if transpose_b else 'bkn'}->bmn"

    def truth(x, y):
        b = max(x.shape[0], y.shape[0])
        x, y = jnp.broadcast_to(x, (b, *x.shape[1:])), jnp.broadcast_to(y, (b, *y.shape[1:]))
        return jnp.einsum(spec, x, y, precision=HIGHEST)

    return truth


def einsum(spec, out_dtype=None):
    return lambda a, b: jnp.einsum(spec, a, b, precision=HIGHEST,
                                   preferred_element_type=out_dtype)


CONV = dict(rtol=1e-4, atol=1e-4)

CASES = [
    # matmul: numpy.matmul semantics
    OpCase("matmul", [f32(3, 4), f32(4, 5)], einsum("mk,kn->mn")),
    OpCase("matmul", [f32(4), f32(4, 5)], einsum("k,kn->n")),
    OpCase("matmul", [f32(3, 4), f32(4)], einsum("mk,k->m")),
    OpCase("matmul", [f64(4), f64(4)], einsum("k,k->")),
    OpCase("matmul", [f32(2, 1, 3, 4), f32(5, 4, 2)], einsum("...mk,...kn->...mn")),
    # dense: data @ weight.T
    OpCase("dense", [f32(4, 6), f32(3, 6)], einsum("nk,uk->nu")),
    OpCase("dense", [f64(2, 5, 6), f64(3, 6)], einsum("bnk,uk->bnu")),
    OpCase("dense", [f32(6), f32(3, 6)], einsum("k,uk->u")),
    # integer products; out_dtype: int8 inputs summed in int32 (quantized models)
    OpCase("matmul", [i32(3, 4), i32(4, 5)], einsum("mk,kn->mn")),
    OpCase("matmul", [i32(2, 3, 4), i32(4)], einsum("bmk,k->bm")),
    OpCase("dense", [i32(4, 6), i32(3, 6)], einsum("nk,uk->nu")),
    OpCase("dense", [i8(4, 16), i8(3, 16)], einsum("nk,uk->nu", jnp.int32),
           {"out_dtype": "int32"}, name="int8 summed in int32"),
    OpCase("dense", [i8(2, 5, 64), i8(7, 64)], einsum("bnk,uk->bnu", jnp.int32),
           {"out_dtype": "int32", "units": 7}, name="int8 summed in int32, 3-D"),
    OpCase("dense", [f32(4, 6), f32(3, 6)], einsum("nk,uk->nu", jnp.float64),
           {"out_dtype": "float64"}, name="float32 summed in float64"),
    OpCase("conv2d", [i32(2, 3, 7, 7), i32(4, 3, 3, 3)], conv_truth(), name="int32"),
    OpCase("conv2d", [i8(2, 4, 8, 8), i8(6, 2, 3, 3)],
           conv_truth((2, 2), ((1, 1), (1, 1)), groups=2, out_dtype=jnp.int32),
           {"strides": 2, "padding": 1, "groups": 2, "out_dtype": "int32"},
           name="int8 summed in int32"),
    OpCase("conv2d", [f32(1, 2, 6, 6), f32(3, 2, 3, 3)], conv_truth(out_dtype=jnp.float64),
           {"out_dtype": "float64"}, name="float32 summed in float64"),
    # unsigned activations times signed weights (VNNI's own form), summed in int32
    OpCase("dense", [u8(4, 70), i8(5, 70)], einsum("nk,uk->nu", jnp.int32),
           {"out_dtype": "int32"}, name="uint8 x int8 summed in int32"),
    OpCase("conv2d", [u8(1, 4, 6, 6), i8(5, 4, 3, 3)],
           lambda x, w: conv_truth(pads=((1, 1), (1, 1)))(x.astype(jnp.int32),
                                                          w.astype(jnp.int32)),
           {"padding": 1, "out_dtype": "int32"}, name="uint8 x int8 summed in int32"),
    OpCase("conv1d", [i8(2, 3, 9), i8(4, 3, 3)], conv1d_truth(1, (1, 1), out_dtype=jnp.int32),
           {"padding": 1, "out_dtype": "int32"}, name="int8 summed in int32"),
    # batch_matmul
    OpCase("batch_matmul", [f32(2, 3, 4), f32(2, 4, 5)], bmm_truth()),
    OpCase("batch_matmul", [f32(2, 4, 3), f32(2, 4, 5)], bmm_truth(True),
           {"transpose_a": True}),
    OpCase("batch_matmul", [f64(2, 3, 4), f64(2, 5, 4)], bmm_truth(False, True),
           {"transpose_b": True}),
    OpCase("batch_matmul", [f32(2, 4, 3), f32(2, 5, 4)], bmm_truth(True, True),
           {"transpose_a": True, "transpose_b": True}),
    OpCase("batch_matmul", [f32(1, 3, 4), f32(3, 4, 2)], bmm_truth(), name="batch 1 broadcasts"),
    # conv2d
    OpCase("conv2d", [f32(2, 3, 7, 7), f32(4, 3, 3, 3)], conv_truth(), **CONV),
    OpCase("conv2d", [f32(2, 3, 8, 8), f32(4, 3, 3, 3)],
           conv_truth((2, 2), ((1, 1), (1, 1))), {"strides": 2, "padding": 1}, **CONV,
           name="stride 2, padding int"),
    OpCase("conv2d", [f32(1, 2, 6, 7), f32(3, 2, 3, 3)], conv_truth(pads=((1, 1), (2, 2))),
           {"padding": (1, 2)}, **CONV, name="padding (h, w)"),
    OpCase("conv2d", [f32(1, 2, 6, 7), f32(3, 2, 3, 2)], conv_truth(pads=((0, 2), (1, 1))),
           {"padding": (0, 1, 2, 1)}, **CONV, name="padding (top, left, bottom, right)"),
    OpCase("conv2d", [f32(2, 2, 9, 9), f32(3, 2, 3, 3)], conv_truth(dilation=(2, 2)),
           {"dilation": 2}, **CONV, name="dilation 2"),
    OpCase("conv2d", [f32(2, 4, 6, 6), f32(6, 2, 3, 3)], conv_truth(groups=2),
           {"groups": 2}, **CONV, name="groups 2"),
    OpCase("conv2d", [f32(1, 4, 5, 5), f32(4, 1, 3, 3)],
           conv_truth(pads=((1, 1), (1, 1)), groups=4), {"groups": 4, "padding": 1}, **CONV,
           name="depthwise"),
    OpCase("conv2d", [f32(1, 3, 5, 5), f32(6, 1, 3, 3)], conv_truth(groups=3),
           {"groups": 3}, **CONV, name="depthwise, multiplier 2"),
    OpCase("conv2d", [f64(2, 2, 9, 8), f64(4, 2, 3, 2)],
           conv_truth((2, 1), ((1, 0), (0, 1)), (1, 2)),
           {"strides": (2, 1), "padding": (1, 0, 0, 1), "dilation": (1, 2)},
           name="float64 strides (2, 1) dilation (1, 2)"),
    OpCase("conv2d", [f32(2, 5, 4, 4), f32(3, 5, 1, 1)], conv_truth(), **CONV, name="1x1"),
    OpCase("conv2d", [f32(64, 1, 28, 28), f32(20, 1, 5, 5)], conv_truth(), **CONV,
           name="LeNet's first layer, batch 64"),
    # conv2d_nchwc: data NCHW{i}c, weight OIHW{i}i{o}o, result NCHW{o}c
    OpCase("conv2d_nchwc", [f32(2, 2, 6, 6, 4), f32(3, 2, 3, 3, 4, 8)], conv_nchwc_truth(),
           **CONV),
    OpCase("conv2d_nchwc", [f32(1, 3, 7, 8, 2), f32(2, 3, 3, 2, 2, 4)],
           conv_nchwc_truth((2, 1), ((1, 2), (0, 1)), (1, 2)),
           {"strides": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2)}, **CONV,
           name="strides, padding, dilation"),
    OpCase("conv2d_nchwc", [f64(1, 1, 5, 5, 8), f64(2, 1, 1, 1, 8, 4)], conv_nchwc_truth(),
           name="float64 1x1"),
    # max_pool2d
    OpCase("max_pool2d", [f32(2, 3, 6, 6)], max_pool_truth((2, 2), (2, 2), ((0, 0), (0, 0))),
           {"pool_size": 2, "strides": 2}),
    OpCase("max_pool2d", [f32(2, 3, 6, 6)], max_pool_truth((3, 3), (1, 1), ((1, 1), (1, 1))),
           {"pool_size": 3, "padding": 1}, name="3x3, padding 1"),
    # integers (quantized feature maps): padding is the dtype's least value, never a maximum
    OpCase("max_pool2d", [i8(2, 3, 6, 6)], max_pool_truth((3, 3), (1, 1), ((1, 1), (1, 1))),
           {"pool_size": 3, "padding": 1}, name="int8 3x3, padding 1"),
    OpCase("max_pool2d", [i32(1, 2, 7, 7)], max_pool_truth((2, 2), (2, 2), ((0, 1), (0, 1))),
           {"pool_size": 2, "strides": 2, "ceil_mode": True}, name="int32, ceil_mode"),
    OpCase("max_pool2d", [f32(1, 2, 7, 5)], max_pool_truth((3, 2), (2, 1), ((1, 0), (0, 1))),
           {"pool_size": (3, 2), "strides": (2, 1), "padding": (1, 0, 0, 1)},
           name="(3, 2) window, 4-value padding"),
    OpCase("max_pool2d", [f32(1, 2, 7, 7)], max_pool_truth((2, 2), (2, 2), ((0, 1), (0, 1))),
           {"pool_size": 2, "strides": 2, "ceil_mode": True}, name="ceil_mode"),
    OpCase("max_pool2d", [f32(1, 1, 5, 5)], max_pool_truth((2, 2), (3, 3), ((1, 1), (1, 1))),
           {"pool_size": 2, "strides": 3, "padding": 1, "ceil_mode": True},
           name="ceil_mode drops a window starting in the padding"),
    OpCase("max_pool2d", [f64(2, 2, 5, 6)], max_pool_truth((2, 3), (1, 2), ((0, 0), (0, 0))),
           {"pool_size": (2, 3), "strides": (1, 2)}),
    # avg_pool2d
    OpCase("avg_pool2d", [f32(2, 3, 6, 6)], avg_pool_truth((2, 2), (2, 2), ((0, 0), (0, 0))),
           {"pool_size": 2, "strides": 2}),
    OpCase("avg_pool2d", [f32(1, 2, 5, 6)], avg_pool_truth((3, 3), (1, 1), ((1, 1), (1, 1))),
           {"pool_size": 3, "padding": 1}, name="padding not counted"),
    OpCase("avg_pool2d", [f32(1, 2, 5, 6)],
           avg_pool_truth((3, 3), (1, 1), ((1, 1), (1, 1)), counted=((1, 1), (1, 1))),
           {"pool_size": 3, "padding": 1, "count_include_pad": True}, name="padding counted"),
    OpCase("avg_pool2d", [f32(1, 2, 6, 6)], avg_pool_truth((3, 3), (2, 2), ((1, 2), (1, 2))),
           {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True},
           name="ceil_mode, padding not counted"),
    OpCase("avg_pool2d", [f32(1, 2, 6, 6)],
           avg_pool_truth((3, 3), (2, 2), ((1, 2), (1, 2)), counted=((1, 1), (1, 1))),
           {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True,
            "count_include_pad": True}, name="ceil_mode, padding counted but not ceil's"),
    OpCase("avg_pool2d", [f64(2, 1, 7, 5)], avg_pool_truth((2, 3), (2, 1), ((0, 1), (1, 1))),
           {"pool_size": (2, 3), "strides": (2, 1), "padding": (0, 1, 1, 1)}),
    # global_avg_pool2d
    OpCase("global_avg_pool2d", [f32(2, 3, 4, 5)], global_avg_truth),
    OpCase("global_avg_pool2d", [f64(1, 2, 3, 3)], global_avg_truth),
    # global_max_pool2d
    OpCase("global_max_pool2d", [f32(2, 3, 4, 5)], global_max_truth),
    OpCase("global_max_pool2d", [f64(1, 2, 3, 3)], global_max_truth),
    # max_pool1d, avg_pool1d: NCW
    OpCase("max_pool1d", [f32(2, 3, 8)], max_pool1d_truth(2, 2, (0, 0)),
           {"pool_size": 2, "strides": 2}),
    OpCase("max_pool1d", [f64(1, 2, 7)], max_pool1d_truth(3, 2, (1, 2)),
           {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True},
           name="padding, ceil_mode"),
    OpCase("max_pool1d", [f32(2, 2, 9)], max_pool1d_truth(3, 1, (2, 0)),
           {"pool_size": (3,), "padding": (2, 0)}, name="padding (left, right)"),
    OpCase("avg_pool1d", [f32(2, 3, 8)], avg_pool1d_truth(2, 2, (0, 0)),
           {"pool_size": 2, "strides": 2}),
    OpCase("avg_pool1d", [f64(1, 2, 7)], avg_pool1d_truth(3, 1, (1, 1)),
           {"pool_size": 3, "padding": 1}, name="padding not counted"),
    OpCase("avg_pool1d", [f32(1, 2, 7)], avg_pool1d_truth(3, 2, (1, 2), counted=(1, 1)),
           {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True,
            "count_include_pad": True}, name="ceil_mode, padding counted but not ceil's"),
    # conv1d: NCW, OIW
    OpCase("conv1d", [f32(2, 3, 9), f32(4, 3, 3)], conv1d_truth(), **CONV),
    OpCase("conv1d", [f32(2, 3, 10), f32(4, 3, 3)], conv1d_truth(2, (1, 2)),
           {"strides": 2, "padding": (1, 2)}, **CONV, name="stride 2, padding (left, right)"),
    OpCase("conv1d", [f64(1, 4, 11), f64(6, 2, 3)], conv1d_truth(1, (2, 2), 2, 2),
           {"padding": 2, "dilation": 2, "groups": 2}, name="dilation 2, groups 2"),
    OpCase("conv1d", [f32(1, 3, 6), f32(3, 1, 2)], conv1d_truth(groups=3), {"groups": 3},
           **CONV, name="depthwise"),
    # max_pool3d, avg_pool3d: NCDHW
    OpCase("max_pool3d", [f32(2, 3, 4, 6, 6)],
           max_pool3d_truth((2, 2, 2), (2, 2, 2), ((0, 0),) * 3),
           {"pool_size": 2, "strides": 2}),
    OpCase("max_pool3d", [f64(1, 2, 5, 7, 6)],
           max_pool3d_truth((2, 3, 2), (2, 1, 3), ((1, 1), (0, 1), (1, 2))),
           {"pool_size": (2, 3, 2), "strides": (2, 1, 3), "padding": (1, 0, 1, 1, 1, 0),
            "ceil_mode": True}, name="padding (front, top, left, back, bottom, right), ceil_mode"),
    OpCase("avg_pool3d", [f32(2, 3, 4, 6, 6)],
           avg_pool3d_truth((2, 2, 2), (2, 2, 2), ((0, 0),) * 3),
           {"pool_size": 2, "strides": 2}),
    OpCase("avg_pool3d", [f64(1, 2, 5, 5, 6)],
           avg_pool3d_truth((3, 3, 2), (1, 2, 2), ((1, 1), (1, 1), (1, 1))),
           {"pool_size": (3, 3, 2), "strides": (1, 2, 2), "padding": 1},
           name="padding not counted"),
    OpCase("avg_pool3d", [f32(1, 2, 6, 7, 6)],
           avg_pool3d_truth((2, 3, 3), (2, 2, 2), ((1, 1), (1, 1), (0, 1)),
                            counted=((1, 0), (1, 1), (0, 0))),
           {"pool_size": (2, 3, 3), "strides": 2, "padding": (1, 1, 0, 0, 1, 0),
            "ceil_mode": True,
            "count_include_pad": True}, name="ceil_mode, padding counted but not ceil's"),
    # conv2d_transpose: NCHW, IOHW
    OpCase("conv2d_transpose", [f32(2, 4, 5, 6), f32(4, 3, 3, 3)], conv_transpose_truth(), **CONV),
    OpCase("conv2d_transpose", [f64(1, 3, 4, 5), f64(3, 2, 3, 2)],
           conv_transpose_truth((2, 3), ((1, 0), (2, 1)), (1, 2)),
           {"strides": (2, 3), "padding": (1, 2, 0, 1), "output_padding": (1, 2)},
           name="strides, padding, output_padding"),
    OpCase("conv2d_transpose", [f64(2, 4, 4, 4), f64(4, 3, 2, 3)],
           conv_transpose_truth((2, 2), ((1, 1), (1, 1)), (1, 0), (2, 1), 2),
           {"strides": 2, "padding": 1, "output_padding": (1, 0), "dilation": (2, 1),
            "groups": 2, "channels": 6, "kernel_size": (2, 3)}, name="dilation, groups 2"),
    # upsampling: NCHW
    OpCase("upsampling", [f32(2, 3, 4, 5)], upsampling_truth(2, 3),
           {"scale_h": 2.0, "scale_w": 3.0}, name="nearest"),
    OpCase("upsampling", [f32(1, 2, 5, 4)], upsampling_truth(1.5, 2.5),
           {"scale_h": 1.5, "scale_w": 2.5}, name="nearest, fractional scales"),
    OpCase("upsampling", [f32(1, 2, 3, 5)], upsampling_truth(2, 1.5, align_corners=True),
           {"scale_h": 2.0, "scale_w": 1.5, "align_corners": True},
           name="nearest, align_corners (ties to even)"),
    OpCase("upsampling", [f64(2, 3, 4, 5)], upsampling_truth(2, 3, "bilinear"),
           {"scale_h": 2.0, "scale_w": 3.0, "method": "bilinear"}, name="bilinear"),
    OpCase("upsampling", [f32(1, 2, 4, 3)], upsampling_truth(2.5, 1.5, "bilinear", True),
           {"scale_h": 2.5, "scale_w": 1.5, "method": "bilinear", "align_corners": True},
           name="bilinear, align_corners"),
    # leaky_relu, prelu
    OpCase("leaky_relu", [f32(3, 4)], leaky_relu_truth(0.25)),
    OpCase("leaky_relu", [f64(2, 3, 4)], leaky_relu_truth(0.1), {"alpha": 0.1}),
    OpCase("prelu", [f32(2, 3, 4, 4), f32(3)], prelu_truth()),
    OpCase("prelu", [f64(5, 3), f64(3)], prelu_truth(-1), {"axis": -1}),
    # softmax, log_softmax
    *[OpCase(op, [x], lambda x, f=f, axis=axis: f(x, axis=axis), {"axis": axis})
      for op, f in (("softmax", jax.nn.softmax), ("log_softmax", jax.nn.log_softmax))
      for x, axis in ((f32(3, 5), -1), (f32(4, 3), 0), (f64(2, 3, 4), 1),
                      (1000 * f32(2, 6), -1))],
    # batch_norm -> (out, mean, var)
    OpCase("batch_norm", [f32(2, 3, 4, 4), f32(3), f32(3), f32(3), pos(f32(3))],
           batch_norm_truth(), name="inference"),
    OpCase("batch_norm", [f32(4, 3, 2, 2), f32(3), f32(3), f32(3), pos(f32(3))],
           batch_norm_truth(training=True), {"training": True}, name="training"),
    OpCase("batch_norm", [f64(5, 3), f64(3), f64(3), f64(3), pos(f64(3))],
           batch_norm_truth(training=True, momentum=0.3, eps=1e-3),
           {"training": True, "momentum": 0.3, "epsilon": 1e-3}, name="training 2-D float64"),
    OpCase("batch_norm", [f32(2, 4, 4, 3), f32(3), f32(3), f32(3), pos(f32(3))],
           batch_norm_truth(axis=-1, center=False, scale=False),
           {"axis": -1, "center": False, "scale": False}, name="NHWC, no center/scale"),
    # layer_norm
    OpCase("layer_norm", [f32(4, 6), f32(6), f32(6)], layer_norm_truth()),
    OpCase("layer_norm", [f64(2, 3, 4), f64(3), f64(3)], layer_norm_truth(axis=1),
           {"axis": 1}),
    OpCase("layer_norm", [f32(2, 5), f32(5), f32(5)],
           layer_norm_truth(eps=1e-3, center=False, scale=False),
           {"center": False, "scale": False, "epsilon": 1e-3}, name="no center/scale"),
    # dropout
    OpCase("dropout", [f32(3, 4), key(1, 2)], lambda x, k: x, name="inference is the identity"),
    OpCase("dropout", [f32(4, 5), key(0, 0)], dropout_truth(0.5), {"training": True}),
    OpCase("dropout", [f64(2, 3, 7), key(7, 1, np.int32)], dropout_truth(0.2),
           {"training": True, "rate": 0.2}),
    OpCase("dropout", [f32(6), key(3, 9)], dropout_truth(0.0), {"training": True, "rate": 0.0}),
    OpCase("dropout", [f32(3, 5), key(-1, 2**40 + 3)], dropout_truth(0.7),
           {"training": True, "rate": 0.7}, name="each key word taken mod 2**32"),
    OpCase("dropout", [f32(), key(5, 6, np.uint8)], dropout_truth(0.5), {"training": True},
           name="a scalar, a uint8 key"),
    # pad
    OpCase("pad", [f32(2, 3)], pad_truth((1, 2, 0, 3)), {"pad_width": (1, 2, 0, 3)}),
    OpCase("pad", [f64(1, 2, 3)], pad_truth((0, 0, 1, 1, 2, 0), -1.5),
           {"pad_width": (0, 0, 1, 1, 2, 0), "pad_value": -1.5}),
    OpCase("pad", [f32(4)], pad_truth((0, 0)), {"pad_width": (0, 0)}),
    # dilate
    OpCase("dilate", [f32(2, 3, 3, 4)], dilate_truth((1, 1, 2, 3)), {"strides": (1, 1, 2, 3)}),
    OpCase("dilate", [f64(3, 2)], dilate_truth((2, 1), -1.5),
           {"strides": (2, 1), "dilation_value": -1.5}),
    OpCase("dilate", [f32(4)], dilate_truth((1,)), {"strides": (1,)}, name="stride 1"),
    # flatten
    *[OpCase("flatten", [x], lambda x: jnp.reshape(x, (x.shape[0], -1)))
      for x in (f32(2, 3, 4), f32(5), f64(3, 2, 2))],
    # bias_add
    OpCase("bias_add", [f32(2, 3, 4, 4), f32(3)], bias_add_truth(1)),
    OpCase("bias_add", [f32(5, 3), f32(3)], bias_add_truth(-1), {"axis": -1}),
    OpCase("bias_add", [f64(2, 3, 4), f64(4)], bias_add_truth(2), {"axis": 2}),
    OpCase("bias_add", [i32(2, 3, 4), i32(3)], bias_add_truth(1), name="int32 (quantized sums)"),
    # softmax_cross_entropy
    OpCase("softmax_cross_entropy", [f32(4, 10), one_hot(4, 10)], cross_entropy_truth),
    OpCase("softmax_cross_entropy", [f32(10), one_hot(1, 10)[0]], cross_entropy_truth,
           name="1-D logits"),
    OpCase("softmax_cross_entropy", [f32(2, 3, 5), probabilities(2, 3, 5)], cross_entropy_truth),
    OpCase("softmax_cross_entropy", [f64(3, 4), one_hot(3, 4, np.float64)], cross_entropy_truth),
    # One CHW example (Figure 4's LeNet): the same as a batch of one.
    OpCase("conv2d", [f32(1, 12, 12), f32(4, 1, 5, 5)],
           lambda x, w: lax.conv_general_dilated(x[None], w, (1, 1), "VALID",
                                                 precision=lax.Precision.HIGHEST)[0],
           rtol=1e-4, atol=1e-5, name="single-CHW-example"),
    OpCase("max_pool2d", [f32(3, 6, 6)],
           lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2), (1, 2, 2), "VALID"),
           {"pool_size": 2, "strides": 2}, name="single-CHW-example"),
    # max_pool2d_grad: the adjoint of max pooling, against JAX's vjp of reduce_window
    OpCase("max_pool2d_grad", [f32(2, 3, 3, 3), f32(2, 3, 6, 6)],
           pool_adjoint((2, 2), (2, 2), ((0, 0), (0, 0))), {"pool_size": 2, "strides": 2}),
    OpCase("max_pool2d_grad", [f64(1, 2, 4, 4), f64(1, 2, 7, 7)],
           pool_adjoint((3, 3), (2, 2), ((1, 2), (1, 2))),
           {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True},
           name="padding, ceil_mode"),
    OpCase("max_pool2d_grad", [f64(1, 1, 4, 4), np.round(f64(1, 1, 5, 5))],
           pool_adjoint((2, 2), (1, 1), ((0, 0), (0, 0))), {"pool_size": 2, "strides": 1},
           name="ties go to the first maximum"),
    OpCase("max_pool2d_grad", [f32(3, 3, 3), f32(3, 6, 6)],
           lambda g, x: pool_adjoint((2, 2), (2, 2), ((0, 0), (0, 0)))(g[None], x[None])[0],
           {"pool_size": 2, "strides": 2}, name="single-CHW-example"),
    OpCase("avg_pool2d", [f32(3, 6, 6)],
           lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 3, 3), (1, 1, 1), "VALID") / 9,
           {"pool_size": 3}, name="single-CHW-example"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_matches_jax(case):
    check_case(case)


def test_patterns():
    fusable = ["matmul", "dense", "batch_matmul", "conv2d", "conv1d", "max_pool2d",
               "avg_pool2d", "max_pool1d", "avg_pool1d", "global_avg_pool2d", "global_max_pool2d",
               "max_pool3d", "avg_pool3d", "conv2d_transpose"]
    opaque = ["softmax", "log_softmax", "batch_norm", "layer_norm", "dropout",
              "softmax_cross_entropy"]
    expected = {**dict.fromkeys(fusable, OpPattern.OUT_ELEMWISE_FUSABLE),
                **dict.fromkeys(opaque, OpPattern.OPAQUE),
                "pad": OpPattern.INJECTIVE, "dilate": OpPattern.INJECTIVE,
                "flatten": OpPattern.INJECTIVE,
                "bias_add": OpPattern.BROADCAST, "prelu": OpPattern.BROADCAST,
                "leaky_relu": OpPattern.ELEMWISE}
    assert {op: lookup(op).pattern for op in expected} == expected


# ---- pooling geometry against PyTorch's loops --------------------------------------------------

def torch_out_size(size, k, s, before, after, ceil_mode):
    out = (size + before + after - k + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + before:
        out -= 1
    return out


def torch_pool(x, k, s, pads, ceil_mode, kind, count_include_pad=False):
    """Transcribes PyTorch's max/avg pool loops (aten/src/ATen/native/cpu), one window at a time."""
    (kh, kw), (sh, sw), (top, left, bottom, right) = k, s, pads
    h, w = x.shape[2:]
    oh = torch_out_size(h, kh, sh, top, bottom, ceil_mode)
    ow = torch_out_size(w, kw, sw, left, right, ceil_mode)
    out = np.zeros((*x.shape[:2], oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - top, j * sw - left
            h1, w1 = min(h0 + kh, h + bottom), min(w0 + kw, w + right)
            padded_count = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
            window = x[:, :, h0:h1, w0:w1]
            if kind == "max":
                out[:, :, i, j] = window.max(axis=(2, 3), initial=-np.inf)
            else:
                count = padded_count if count_include_pad else (h1 - h0) * (w1 - w0)
                out[:, :, i, j] = window.sum(axis=(2, 3)) / count
    return out


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 7), w=st.integers(1, 7), kh=st.integers(1, 3), kw=st.integers(1, 3),
       sh=st.integers(1, 3), sw=st.integers(1, 3), data=st.data())
def test_pools_match_pytorch_geometry(h, w, kh, kw, sh, sw, data):
    """The NumPy references and the relations (jax_lower shares the geometry code with them)."""
    # PyTorch requires padding <= half the window and a window that fits the padded input.
    pads = tuple(data.draw(st.integers(0, k // 2)) for k in (kh, kw, kh, kw))
    ceil_mode, count_include_pad = data.draw(st.booleans()), data.draw(st.booleans())
    if h + pads[0] + pads[2] < kh or w + pads[1] + pads[3] < kw:
        return
    x = f32(1, 2, h, w)
    attrs = dict(pool_size=(kh, kw), strides=(sh, sw), padding=pads, ceil_mode=ceil_mode)
    for op, kind, extra in (("max_pool2d", "max", {}),
                            ("avg_pool2d", "avg", {"count_include_pad": count_include_pad})):
        expected = torch_pool(x, (kh, kw), (sh, sw), pads, ceil_mode, kind, count_include_pad)
        call_attrs = Call(Op.get(op), [Var("x")], {**attrs, **extra}).attrs
        d = lookup(op)
        np.testing.assert_allclose(d.numpy_ref(x, **call_attrs), expected, rtol=1e-5, atol=1e-6)
        out_type = check_relation(d.type_relation, [TensorType(x.shape)], call_attrs)
        assert out_type == TensorType(expected.shape)


# ---- dropout ------------------------------------------------------------------------------------

def dropout(x, k=(0, 0), xp=np, **attrs):
    d = lookup("dropout")
    full = Call(Op.get("dropout"), [Var("x"), Var("k")], attrs).attrs
    k = np.asarray(k)
    return np.asarray(d.numpy_ref(x, k, **full) if xp is np else
                      d.jax_lower(jnp.asarray(x), jnp.asarray(k), **full))


def test_dropout_numpy_and_jax_agree_bit_for_bit():
    x = f32(64, 65)
    for rate, k in ((0.5, key(0, 0)), (0.1, key(12345, 3)), (0.9, key(2**32 + 5, 1)),
                    (0.3, key(-1, -2, np.int32))):
        a = dropout(x, k, training=True, rate=rate)
        b = dropout(x, k, jnp, training=True, rate=rate)
        assert a.dtype == b.dtype == np.float32 and np.array_equal(a, b)


def test_dropout_keeps_about_one_minus_rate_and_depends_on_both_key_words():
    x = np.ones((100, 100), np.float32)
    for rate in (0.1, 0.5, 0.8):
        kept = dropout(x, training=True, rate=rate) != 0
        assert abs(kept.mean() - (1 - rate)) < 0.02
        assert np.allclose(dropout(x, training=True, rate=rate)[kept], 1 / (1 - rate))
    base = dropout(x, key(0, 0), training=True) != 0
    assert np.array_equal(base, dropout(x, key(0, 0), training=True) != 0)
    for other in (key(1, 0), key(0, 1), key(2**32, 0)):
        mask = dropout(x, other, training=True) != 0
        if other[0] == 2**32:  # the same low 32 bits: the same key
            assert np.array_equal(mask, base)
        else:  # independent masks disagree half the time
            assert 0.4 < (mask != base).mean() < 0.6


# ---- type relations: symbolic dims --------------------------------------------------------------

n, m, k = (TypeVar(name, Kind.Shape) for name in "nmk")


def T(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def relation(op, *types, **attrs):
    call = Call(Op.get(op), [Var(f"x{i}", t) for i, t in enumerate(types)], attrs)
    return check_relation(lookup(op).type_relation, list(types), call.attrs)


@pytest.mark.parametrize("op, types, attrs, expected", [
    ("dense", [T(n, 784), T(10, 784)], {}, T(n, 10)),
    ("dense", [T(Any, 784), T(10, 784)], {}, T(Any, 10)),
    ("dense", [T(n, k), T(10, k)], {}, T(n, 10)),
    ("matmul", [T(n, 3, 4), T(4, 5)], {}, T(n, 3, 5)),
    ("matmul", [T(n, 4), T(4)], {}, T(n)),
    ("matmul", [T(1, m, k), T(n, k, 2)], {}, T(n, m, 2)),
    ("matmul", [T(m, k), T(k, n)], {}, T(m, n)),
    ("batch_matmul", [T(n, 3, 4), T(n, 4, 5)], {}, T(n, 3, 5)),
    ("batch_matmul", [T(n, 3, 4), T(1, 4, 5)], {}, T(n, 3, 5)),
    ("conv2d", [T(n, 1, 28, 28), T(20, 1, 5, 5)], {}, T(n, 20, 24, 24)),
    ("conv2d", [T(n, 1, m, 28), T(20, 1, 5, 5)], {"padding": 2}, T(n, 20, Any, 28)),
    ("conv2d", [T(n, k, 8, 8), T(4, k, 3, 3)], {}, T(n, 4, 6, 6)),
    ("conv2d", [T(n, 4, 8, 8), T(6, 2, 3, 3)], {"groups": 2, "strides": 2}, T(n, 6, 3, 3)),
    ("max_pool2d", [T(n, 3, 8, 8)], {"pool_size": 2, "strides": 2}, T(n, 3, 4, 4)),
    ("avg_pool2d", [T(n, 3, 8, Any)], {"pool_size": 3}, T(n, 3, 6, Any)),
    ("global_avg_pool2d", [T(n, 3, m, m)], {}, T(n, 3, 1, 1)),
    ("softmax", [T(n, 10)], {}, T(n, 10)),
    ("batch_norm", [T(n, 3, m, m), T(3), T(3), T(3), T(3)], {},
     TupleType((T(n, 3, m, m), T(3), T(3)))),
    ("layer_norm", [T(n, 8), T(8), T(8)], {}, T(n, 8)),
    ("dropout", [T(n, m), T(2, dtype="int64")], {"training": True}, T(n, m)),
    ("pad", [T(n, 3)], {"pad_width": (0, 0, 1, 1)}, T(n, 5)),
    ("pad", [T(n, 3)], {"pad_width": (1, 0, 0, 0)}, T(Any, 3)),
    ("dilate", [T(n, 3, 4)], {"strides": (1, 2, 3)}, T(n, 5, 10)),
    ("dilate", [T(n, 3)], {"strides": (2, 1)}, T(Any, 3)),
    ("flatten", [T(n, 3, 4)], {}, T(n, 12)),
    ("flatten", [T(n, m)], {}, T(n, m)),
    ("flatten", [T(n, m, 2)], {}, T(n, Any)),
    ("bias_add", [T(n, 3, m), T(3)], {}, T(n, 3, m)),
    ("softmax_cross_entropy", [T(n, 10), T(n, 10)], {}, T()),
    ("conv1d", [T(n, 3, 10), T(4, 3, 3)], {"padding": 1}, T(n, 4, 10)),
    ("conv1d", [T(n, 4, m), T(6, 2, 3)], {"groups": 2}, T(n, 6, Any)),
    ("max_pool3d", [T(n, 3, 8, m, 6)], {"pool_size": 2, "strides": 2}, T(n, 3, 4, Any, 3)),
    ("avg_pool3d", [T(n, 3, 5, 5, 5)], {"pool_size": 3, "padding": 1}, T(n, 3, 5, 5, 5)),
    ("conv2d_transpose", [T(n, 4, m, 5), T(4, 3, 3, 3)], {"strides": 2, "groups": 2},
     T(n, 6, Any, 11)),
    ("upsampling", [T(n, 3, m, 5)], {"scale_h": 2.0, "scale_w": 1.5}, T(n, 3, Any, 8)),
    ("max_pool1d", [T(n, 3, 8)], {"pool_size": 2, "strides": 2}, T(n, 3, 4)),
    ("avg_pool1d", [T(n, 3, Any)], {"pool_size": 3}, T(n, 3, Any)),
    ("global_max_pool2d", [T(n, 3, m, m)], {}, T(n, 3, 1, 1)),
    ("leaky_relu", [T(n, m)], {}, T(n, m)),
    ("prelu", [T(n, 3, m), T(3)], {}, T(n, 3, m)),
    ("dense", [T(n, 16, dtype="int8"), T(4, 16, dtype="int8")], {"out_dtype": "int32"},
     T(n, 4, dtype="int32")),
    ("conv2d", [T(n, 2, 5, 5, dtype="int8"), T(3, 2, 3, 3, dtype="int8")],
     {"out_dtype": "int32"}, T(n, 3, 3, 3, dtype="int32")),
    ("matmul", [T(n, 4, dtype="int32"), T(4, 2, dtype="int32")], {}, T(n, 2, dtype="int32")),
], ids=lambda v: v if isinstance(v, str) else None)
def test_relation_on_symbolic_dims(op, types, attrs, expected):
    assert relation(op, *types, **attrs) == expected


def test_inference_keeps_a_symbolic_batch_through_dense_and_conv2d():
    x, w = Var("x", T(n, 784)), Var("w", T(10, 784))
    assert infer_type(Call(Op.get("dense"), [x, w])).checked_type == T(n, 10)
    img, filt = Var("img", T(n, 1, 28, 28)), Var("filt", T(20, 1, 5, 5))
    conv = Call(Op.get("conv2d"), [img, filt], {"padding": 2})
    assert infer_type(conv).checked_type == T(n, 20, 28, 28)


def test_inference_rejects_a_shape_parameter_as_a_contraction_size():
    x, w = Var("x", T(n, k)), Var("w", T(10, 784))
    with pytest.raises(RelayTypeError, match=r"dense: the reduction dimensions .*: k vs 784"):
        infer_type(Call(Op.get("dense"), [x, w]))


# ---- type relations: errors ---------------------------------------------------------------------

def ty(text):
    return re.escape(text)


@pytest.mark.parametrize("op, types, attrs, message", [
    ("dense", [T(2, 3), T(4, 5)], {},
     ty("dense: the reduction dimensions of data Tensor[(2, 3), float32] and weight "
        "Tensor[(4, 5), float32] differ: 3 vs 5")),
    ("dense", [T(2, 3, dtype="bool"), T(4, 3, dtype="bool")], {},
     ty("dense: the inputs must have a numeric (non-bool) dtype, got Tensor[(2, 3), bool]")),
    ("dense", [T(2, 3, dtype="int8"), T(4, 3, dtype="int32")], {"out_dtype": "int32"},
     r"dense.*int8 vs int32"),  # integers of different widths do not mix
    ("dense", [T(2, 3), T(4, 3, dtype="float64")], {}, r"dense.*float32 vs float64"),
    ("dense", [T(2, 3), T(3)], {}, ty("dense: weight Tensor[(3,), float32] must have rank 2")),
    ("dense", [T(n, k), T(10, 784)], {}, r"dense: the reduction dimensions .*: k vs 784"),
    ("matmul", [T(), T(3)], {}, ty("matmul: a Tensor[(), float32] must have rank >= 1")),
    ("matmul", [T(2, 3), T(4, 2)], {}, r"matmul: the contraction dimensions .*: 3 vs 4"),
    ("matmul", [T(2, 2, 3), T(3, 3, 4)], {},
     ty("matmul: the batch dimensions of a Tensor[(2, 2, 3), float32] and b "
        "Tensor[(3, 3, 4), float32] cannot be broadcast")),
    ("batch_matmul", [T(2, 3, 4), T(2, 5, 6)], {}, r"batch_matmul: the reduction .*: 4 vs 5"),
    ("batch_matmul", [T(2, 3, 4), T(2, 4, 5)], {"transpose_b": True},
     r"batch_matmul: the reduction .*: 4 vs 5"),
    ("batch_matmul", [T(3, 4), T(2, 4, 5)], {},
     ty("batch_matmul: x Tensor[(3, 4), float32] must have rank 3")),
    ("batch_matmul", [T(2, 3, 4), T(3, 4, 5)], {}, r"batch_matmul: the batch .* match or be 1"),
    ("conv2d", [T(1, 3, 8, 8), T(4, 2, 3, 3)], {},
     ty("conv2d: the in-channels of data Tensor[(1, 3, 8, 8), float32] and weight "
        "Tensor[(4, 2, 3, 3), float32] differ: 3 vs 2")),
    ("conv2d", [T(1, 6, 8, 8), T(4, 2, 3, 3)], {"groups": 2},
     r"conv2d: the in-channels .* differ \(with groups=2\): 6 vs 4"),
    ("conv2d", [T(1, 4, 8, 8), T(3, 2, 3, 3)], {"groups": 2},
     ty("conv2d: the out-channels of weight Tensor[(3, 2, 3, 3), float32] are not divisible "
        "by groups=2")),
    ("conv2d", [T(8, 8), T(4, 3, 3, 3)], {},
     ty("conv2d: data Tensor[(8, 8), float32] must have rank 4 (NCHW) or 3 (one CHW example)")),
    ("conv2d", [T(1, 1, 2, 5), T(1, 1, 3, 3)], {},
     ty("conv2d: the window (size 3, dilation 1) is larger than the padded input (2 + 0 + 0) "
        "along axis 2 of data Tensor[(1, 1, 2, 5), float32]")),
    ("conv2d", [T(1, 1, 5, 5), T(1, 1, 3, 3)], {"dilation": 3},
     r"conv2d: the window .* dilation 3"),
    ("conv2d", [T(1, 1, 5, 5, dtype="bool"), T(1, 1, 3, 3, dtype="bool")], {},
     r"conv2d: the inputs must have a numeric \(non-bool\) dtype"),
    ("conv1d", [T(1, 3, 8), T(4, 2, 3)], {},
     ty("conv1d: the in-channels of data Tensor[(1, 3, 8), float32] and weight "
        "Tensor[(4, 2, 3), float32] differ: 3 vs 2")),
    ("conv1d", [T(1, 3, 8, 8), T(4, 3, 3)], {},
     ty("conv1d: data Tensor[(1, 3, 8, 8), float32] must have rank 3")),
    ("conv1d", [T(1, 4, 8), T(3, 2, 3)], {"groups": 2},
     r"conv1d: the out-channels of weight .* are not divisible by groups=2"),
    ("max_pool1d", [T(1, 1, 2)], {"pool_size": 3},
     ty("max_pool1d: the window (size 3, dilation 1) is larger than the padded input "
        "(2 + 0 + 0) along axis 2 of data Tensor[(1, 1, 2), float32]")),
    ("avg_pool1d", [T(1, 4, 4, 4)], {"pool_size": 2}, r"avg_pool1d: data .* must have rank 3"),
    ("global_max_pool2d", [T(2, 3)], {}, r"global_max_pool2d: data .* must have rank 4"),
    ("max_pool3d", [T(1, 2, 8, 8)], {"pool_size": 2},
     ty("max_pool3d: data Tensor[(1, 2, 8, 8), float32] must have rank 5")),
    ("avg_pool3d", [T(1, 1, 2, 4, 4)], {"pool_size": 3, "padding": (0, 1, 1)},
     ty("avg_pool3d: the window (size 3, dilation 1) is larger than the padded input "
        "(2 + 0 + 0) along axis 2 of data Tensor[(1, 1, 2, 4, 4), float32]")),
    ("conv2d_transpose", [T(1, 3, 5, 5), T(4, 2, 3, 3)], {},
     ty("conv2d_transpose: the in-channels of data Tensor[(1, 3, 5, 5), float32] and weight "
        "Tensor[(4, 2, 3, 3), float32] (its first axis) differ: 3 vs 4")),
    ("conv2d_transpose", [T(1, 3, 5, 5), T(3, 2, 3, 3)], {"groups": 2},
     r"conv2d_transpose: the in-channels of data .* are not divisible by groups=2"),
    ("conv2d_transpose", [T(1, 4, 5, 5), T(4, 2, 3, 3)], {"channels": 3},
     r"conv2d_transpose: weight .* does not give channels=3 \(weight.shape\[1\] \* groups\)"),
    ("conv2d_transpose", [T(1, 4, 5, 5), T(4, 2, 3, 3)], {"strides": 2, "output_padding": 2},
     ty("conv2d_transpose: output_padding (2, 2) must be smaller than the strides (2, 2)")),
    ("conv2d_transpose", [T(1, 4, 5, 5), T(4, 2, 3, 3)], {"padding": 4},
     r"conv2d_transpose: the padding \(4, 4, 4, 4\) leaves no output"),
    ("conv2d_transpose", [T(1, 4, 5, 5, dtype="int32"), T(4, 2, 3, 3, dtype="int32")], {},
     r"conv2d_transpose: the inputs must have a floating-point dtype"),
    ("upsampling", [T(1, 2, 3)], {}, ty("upsampling: data Tensor[(1, 2, 3), float32] must have "
                                       "rank 4")),
    ("upsampling", [T(1, 2, 3, 3)], {"scale_h": 0.1},
     r"upsampling: scale_h=0.1, scale_w=1.0 leave no output of data"),
    ("leaky_relu", [T(3, dtype="int32")], {},
     r"leaky_relu: the inputs must have a floating-point"),
    ("prelu", [T(2, 3, 4), T(4)], {},
     ty("prelu: alpha Tensor[(4,), float32] must have data.shape[1] = 3 elements: 4 vs 3")),
    ("max_pool2d", [T(3, 8)], {"pool_size": 2}, r"max_pool2d: data .* must have rank 4"),
    ("max_pool2d", [T(1, 1, 8, 2)], {"pool_size": 3, "padding": (0, 0, 0, 0)},
     r"max_pool2d: the window \(size 3, dilation 1\) is larger .* \(2 \+ 0 \+ 0\) along axis 3"),
    ("avg_pool2d", [T(1, 1, 4, 4, dtype="int32")], {"pool_size": 2},
     r"avg_pool2d: the inputs must have a floating-point dtype"),
    ("global_avg_pool2d", [T(2, 3)], {}, r"global_avg_pool2d: data .* must have rank 4"),
    ("softmax", [T(3, dtype="int32")], {}, r"softmax: the inputs must have a floating-point"),
    ("softmax", [T(2, 3)], {"axis": 2},
     ty("softmax: attribute 'axis' = 2 is out of range for the input Tensor[(2, 3), float32]")),
    ("log_softmax", [T()], {}, r"log_softmax: data Tensor\[\(\), float32\] must have rank >= 1"),
    ("batch_norm", [T(2, 3, 4, 4), T(4), T(3), T(3), T(3)], {},
     ty("batch_norm: gamma Tensor[(4,), float32] must have data.shape[1] = 3 elements: 4 vs 3")),
    ("batch_norm", [T(2, 3, 4, 4), T(3), T(3), T(3), T(3, 1)], {},
     ty("batch_norm: moving_var Tensor[(3, 1), float32] must have rank 1")),
    ("batch_norm", [T(2, 3), T(3), T(3), T(3), T(3)], {"axis": 2},
     r"batch_norm: attribute 'axis' = 2 is out of range"),
    ("layer_norm", [T(2, 5), T(5), T(4)], {},
     ty("layer_norm: beta Tensor[(4,), float32] must have data.shape[1] = 5 elements: 4 vs 5")),
    ("bias_add", [T(2, 3, 4), T(4)], {},
     ty("bias_add: bias Tensor[(4,), float32] must have data.shape[1] = 3 elements: 4 vs 3")),
    # integer inputs may differ only when summed in an integer out_dtype
    ("dense", [T(2, 8, dtype="uint8"), T(3, 8, dtype="int8")], {},
     r"dense: argument types differ in dtype"),
    ("dense", [T(2, 8, dtype="uint8"), T(3, 8, dtype="int8")], {"out_dtype": "float32"},
     r"dense: argument types differ in dtype"),
    ("dense", [T(2, 8), T(3, 8, dtype="float64")], {"out_dtype": "float64"},
     r"dense: argument types differ in dtype"),
    ("dropout", [T(3, dtype="int32"), T(2, dtype="int32")], {},
     r"dropout: the inputs must have a floating-point"),
    ("dropout", [T(3), T(2)], {}, ty("dropout: the key must have an integer dtype, got "
                                      "Tensor[(2,), float32]")),
    ("dropout", [T(3), T(3, dtype="int32")], {},
     ty("dropout: the key must be a pair of integers, shape (2,): 3 vs 2")),
    ("dropout", [T(3), T(dtype="int32")], {},
     ty("dropout: the key must be a pair of integers, shape (2,), got key Tensor[(), int32]")),
    ("pad", [T(2, 3)], {"pad_width": (1, 1)},
     ty("pad: pad_width has 2 values; data Tensor[(2, 3), float32] needs 2 per axis")),
    ("dilate", [T(2, 3)], {"strides": (2,)},
     ty("dilate: strides has 1 values; data Tensor[(2, 3), float32] needs one per axis")),
    ("flatten", [T()], {}, r"flatten: data Tensor\[\(\), float32\] must have rank >= 1"),
    ("softmax_cross_entropy", [T(4, 10), T(4, 9)], {},
     ty("softmax_cross_entropy: labels Tensor[(4, 9), float32] must have the shape of logits "
        "Tensor[(4, 10), float32] (axis 1): 10 vs 9")),
    ("softmax_cross_entropy", [T(4, 10), T(10)], {},
     r"softmax_cross_entropy: labels .* must have the shape of logits"),
])
def test_relation_errors(op, types, attrs, message):
    with pytest.raises(RelayTypeError, match=message):
        relation(op, *types, **attrs)


def test_inference_error_names_the_op_and_the_types():
    x, w = Var("x", T(2, 3, 8, 8)), Var("w", T(4, 2, 3, 3))
    with pytest.raises(RelayTypeError) as e:
        infer_type(Call(Op.get("conv2d"), [x, w]))
    assert "conv2d: the in-channels of data Tensor[(2, 3, 8, 8), float32]" in str(e.value)
    assert "3 vs 2" in str(e.value)


# ---- attributes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op, attrs, message", [
    ("conv2d", {"padding": (1, 2, 3)},
     r"conv2d: attribute 'padding': expected an int, 2 ints \(h, w\) or 4 ints"),
    ("conv2d", {"padding": (1, -1)}, r"'padding': values must be non-negative"),
    ("conv2d", {"strides": "2"}, r"conv2d: attribute 'strides' must be an int or a tuple of ints"),
    ("conv2d", {"strides": (0, 1)}, r"'strides': values must be positive"),
    ("conv2d", {"dilation": (1, 1, 1)}, r"'dilation': expected an int or 2 ints \(h, w\)"),
    ("conv2d", {"groups": 0}, r"'groups': must be positive"),
    ("conv2d", {"kernel_layout": "OIHW"}, r"conv2d: unknown attribute\(s\) kernel_layout"),
    ("conv2d", {"kernel_size": 1.5}, r"conv2d: attribute .kernel_size. must be None, an int"),
    ("dense", {"units": "ten"}, r"dense: attribute .units. must be an int or None"),
    ("max_pool2d", {}, r"max_pool2d: attribute 'pool_size' is required"),
    ("max_pool2d", {"pool_size": 2, "ceil_mode": 1}, r"'ceil_mode' must be a bool"),
    ("avg_pool2d", {"pool_size": (2, 2, 2)}, r"'pool_size': expected an int or 2 ints"),
    ("dropout", {"rate": 1.0}, r"'rate': must be in \[0.0, 1.0\), got 1.0"),
    ("dropout", {"rate": -0.1}, r"'rate': must be in \[0.0, 1.0\)"),
    ("dropout", {"seed": 1}, r"dropout: unknown attribute\(s\) seed"),
    ("batch_norm", {"momentum": 1.5}, r"'momentum': must be in \[0.0, 1.0\]"),
    ("batch_norm", {"training": "yes"}, r"'training' must be a bool"),
    ("layer_norm", {"epsilon": -1.0}, r"'epsilon': must be in \[0.0, inf\]"),
    ("softmax", {"axis": 1.0}, r"'axis' must be an int"),
    ("pad", {"pad_width": (1, -1)}, r"'pad_width': values must be non-negative"),
    ("pad", {}, r"pad: attribute 'pad_width' is required"),
    ("dilate", {"strides": (1, 0)}, r"'strides': values must be positive"),
    ("max_pool1d", {"pool_size": (2, 2)}, r"'pool_size': expected an int or 1 int \(w\)"),
    ("conv1d", {"padding": (1, 2, 3)},
     r"conv1d: attribute 'padding': expected an int, 1 int or 2 ints \(left, right\)"),
    ("conv1d", {"strides": (0,)}, r"'strides': values must be positive"),
    ("dense", {"out_dtype": "int4"}, r"dense: attribute 'out_dtype' must be None or a dtype"),
    ("leaky_relu", {"alpha": "0.1"}, r"'alpha' must be a number"),
    ("max_pool3d", {"pool_size": (2, 2)}, r"'pool_size': expected an int or 3 ints \(d, h, w\)"),
    ("avg_pool3d", {"pool_size": 2, "padding": (1, 1, 1, 1)},
     r"avg_pool3d: attribute 'padding': expected an int, 3 ints \(d, h, w\) or 6 ints"),
    ("conv2d_transpose", {"output_padding": -1}, r"'output_padding': values must be non-negative"),
    ("upsampling", {"method": "bicubic"},
     r"upsampling: attribute 'method': must be one of nearest_neighbor, bilinear, got 'bicubic'"),
    ("upsampling", {"layout": "NHWC"}, r"'layout': only NCHW is supported, got 'NHWC'"),
    ("upsampling", {"scale_h": 0}, r"'scale_h': must be positive, got 0.0"),
])
def test_bad_attributes(op, attrs, message):
    args = [Var(f"x{i}") for i in range(lookup(op).num_inputs)]
    with pytest.raises(IRError, match=message):
        Call(Op.get(op), args, attrs)


def test_window_attributes_are_canonical_with_defaults_filled_in():
    conv, args = Op.get("conv2d"), [Var("x"), Var("w")]
    assert dict(Call(conv, args).attrs) == {
        "strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
        "channels": None, "kernel_size": None, "out_dtype": None}
    attrs = Call(conv, args, {"padding": [1, 2], "strides": 2, "kernel_size": 3}).attrs
    assert (attrs.padding, attrs.strides, attrs.kernel_size) == ((1, 2, 1, 2), (2, 2), (3, 3))
    assert Call(conv, args, {"padding": 3}).attrs.padding == (3, 3, 3, 3)
    assert Call(conv, args, {"padding": (0, 1, 2, 3)}).attrs.padding == (0, 1, 2, 3)
    pool = Call(Op.get("max_pool2d"), [Var("x")], {"pool_size": 2}).attrs
    assert (pool.pool_size, pool.strides, pool.padding) == ((2, 2), (1, 1), (0, 0, 0, 0))
    pool1d = Call(Op.get("max_pool1d"), [Var("x")], {"pool_size": 2, "padding": 1}).attrs
    assert (pool1d.pool_size, pool1d.strides, pool1d.padding) == ((2,), (1,), (1, 1))
    conv1d = Call(Op.get("conv1d"), args, {"padding": (3,), "dilation": (2,)}).attrs
    assert (conv1d.padding, conv1d.dilation) == ((3, 3), (2,))


def test_unannotated_weights_and_per_channel_parameters_are_inferred():
    """A model's hidden parameters are left unannotated; inference gives them their shapes."""
    from relaydsl.ir import Function, IRModule
    from relaydsl.typing import infer_types

    x = Var("x", TensorType((8, 3, 12, 12)))
    w1, b1, gamma, beta, mean, var, w2 = (Var(n) for n in ("w1", "b1", "g", "b", "m", "v", "w2"))
    h = Call(Op.get("conv2d"), [x, w1], {"channels": 6, "kernel_size": 3, "groups": 3})
    h = Call(Op.get("bias_add"), [h, b1])
    h = TupleGetItem(Call(Op.get("batch_norm"), [h, gamma, beta, mean, var]), 0)
    out = Call(Op.get("dense"), [Call(Op.get("flatten"), [h]), w2], {"units": 4})
    mod = IRModule()
    mod["main"] = Function([x, w1, b1, gamma, beta, mean, var, w2], out)
    infer_types(mod)
    assert w1.checked_type == TensorType((6, 1, 3, 3))
    for v in (b1, gamma, beta, mean, var):
        assert v.checked_type == TensorType((6,))
    assert w2.checked_type == TensorType((4, 6 * 10 * 10))
    assert out.checked_type == TensorType((8, 4))


def test_unannotated_conv1d_weight_and_prelu_slopes_are_inferred():
    from relaydsl.ir import Function, IRModule
    from relaydsl.typing import infer_types

    x, w, alpha = Var("x", TensorType((2, 4, 10))), Var("w"), Var("alpha")
    h = Call(Op.get("conv1d"), [x, w], {"channels": 6, "kernel_size": 3, "groups": 2})
    mod = IRModule()
    mod["main"] = Function([x, w, alpha], Call(Op.get("prelu"), [h, alpha]))
    infer_types(mod)
    assert w.checked_type == TensorType((6, 2, 3))
    assert alpha.checked_type == TensorType((6,))


def test_a_weight_without_units_is_underconstrained():
    from relaydsl.ir import Function, IRModule
    from relaydsl.typing import infer_types

    x, w = Var("x", TensorType((2, 3))), Var("w")
    mod = IRModule()
    mod["main"] = Function([x, w], Call(Op.get("dense"), [x, w]))
    with pytest.raises(RelayTypeError, match="underconstrained"):
        infer_types(mod)
