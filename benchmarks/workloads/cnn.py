"""Convolutional networks, forward only: the MAPL paper's LeNet and ResNet-18 for CIFAR.

Every system computes in NCHW with OIHW weights, except JAX, which also runs NHWC with HWIO
weights (XLA's CPU convolutions are 2-3.6x faster in NHWC, docs/performance.md): both
layouts are timed and the JAX column reports the better one, naming it. Layout conversion of
inputs and weights happens once, outside the timed call.

ResNet-18 for CIFAR: a 3x3 stem (64 channels), four stages of two basic blocks (64, 128, 256,
512 channels; the first block of stages 2-4 has stride 2 and a 1x1 stride-2 projection
shortcut), global average pooling and a dense layer to 10 classes. Batch norm is folded into
each convolution's weights and bias (inference), once, in NumPy, and every system receives the
same folded weights.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from benchmarks.harness import Case
from benchmarks.workloads.common import (
    jax_modules,
    normal,
    relaydsl_runner,
    rng,
    specialize,
    torch_compiled_inference,
    torch_module,
)
from relaydsl import Float, Tensor, relay


# ============================================================================================
# LeNet (Figure 4 of the MAPL paper, as in examples/lenet_mnist.py)
# ============================================================================================
def lenet(x: Tensor[Float, (B, 1, 28, 28)],  # noqa: F821  (B bound by specialize)
          c1w: Tensor[Float, (20, 1, 5, 5)], c1b: Tensor[Float, 20],
          c2w: Tensor[Float, (50, 20, 5, 5)], c2b: Tensor[Float, 50],
          f1w: Tensor[Float, (500, 800)], f1b: Tensor[Float, 500],
          f2w: Tensor[Float, (10, 500)], f2b: Tensor[Float, 10]
          ) -> Tensor[Float, (B, 10)]:  # noqa: F821
    h = relay.tanh(relay.bias_add(relay.conv2d(x, c1w), c1b))
    h = relay.max_pool2d(h, pool_size=2, strides=2)
    h = relay.tanh(relay.bias_add(relay.conv2d(h, c2w), c2b))
    h = relay.max_pool2d(h, pool_size=2, strides=2)
    h = relay.tanh(relay.dense(relay.flatten(h), f1w) + f1b)
    return relay.dense(h, f2w) + f2b


def lenet_data(batch: int, seed: int = 0):
    r = rng(seed)
    x = normal(r, (batch, 1, 28, 28))
    shapes = [(20, 1, 5, 5), (20,), (50, 20, 5, 5), (50,), (500, 800), (500,), (10, 500), (10,)]
    params = []
    for s in shapes:
        fan_in = int(np.prod(s[1:])) if len(s) > 1 else 0
        params.append(normal(r, s, np.sqrt(1.0 / fan_in)) if fan_in else normal(r, s, 0.1))
    return x, tuple(params)


def lenet_jax(layout: str):
    jax, jnp = jax_modules()

    def f(x, c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b):
        h = jnp.tanh(jax_conv(x, c1w, c1b, layout))
        h = jax_maxpool2(h, layout)
        h = jnp.tanh(jax_conv(h, c2w, c2b, layout))
        h = jax_maxpool2(h, layout)
        h = jnp.tanh(h.reshape(h.shape[0], -1) @ f1w.T + f1b)
        return h @ f2w.T + f2b
    return jax.jit(f)


def lenet_numpy(x, c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b):
    h = maxpool2_nchw(np.tanh(conv2d_nchw(x, c1w, c1b)))
    h = maxpool2_nchw(np.tanh(conv2d_nchw(h, c2w, c2b)))
    h = np.tanh(h.reshape(h.shape[0], -1) @ f1w.T + f1b)
    return h @ f2w.T + f2b


def lenet_torch(torch, x, c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b):
    F = torch.nn.functional
    h = F.max_pool2d(torch.tanh(F.conv2d(x, c1w, c1b)), 2)
    h = F.max_pool2d(torch.tanh(F.conv2d(h, c2w, c2b)), 2)
    h = torch.tanh(F.linear(h.flatten(1), f1w, f1b))
    return F.linear(h, f2w, f2b)


def lenet_case(batch: int) -> Case:
    x, params = lenet_data(batch)

    def relaydsl_setup():
        return relaydsl_runner(specialize(lenet, B=batch), x, *params)

    def jax_setup(layout: str):
        def setup():
            _, jnp = jax_modules()
            f = lenet_jax(layout)
            c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b = params
            if layout == "NHWC":
                # the dense layer reads the flattened (h, w, c) features: permute its columns
                f1w = f1w.reshape(500, 50, 4, 4).transpose(0, 2, 3, 1).reshape(500, 800)
                c1w, c2w = to_hwio(c1w), to_hwio(c2w)
            args = [jnp.asarray(a) for a in (to_layout(x, layout), c1w, c1b, c2w, c2b, f1w, f1b,
                                             f2w, f2b)]
            return lambda: f(*args)
        return setup

    def torch_setup():
        torch = torch_module()
        args = [torch.from_numpy(a) for a in (x, *params)]

        def run():
            with torch.no_grad():
                return lenet_torch(torch, *args)
        return run

    def torch_compile_setup():
        torch = torch_module()
        return torch_compiled_inference(lambda v, *p: lenet_torch(torch, v, *p), params, x)

    return Case(f"LeNet fwd (b{batch})", "lenet",
                {"relaydsl": relaydsl_setup, "jax:NCHW": jax_setup("NCHW"),
                 "jax:NHWC": jax_setup("NHWC"),
                 "numpy": lambda: (lambda: lenet_numpy(x, *params)), "torch": torch_setup,
                 "torch_compile": torch_compile_setup},
                reference="jax:NCHW")


# ============================================================================================
# ResNet-18 for CIFAR, batch norm folded
# ============================================================================================
STAGES = (64, 128, 256, 512)


def resnet_layers() -> list[tuple[str, int, int, int, int]]:
    """(name, in channels, out channels, kernel, stride) of every conv, in parameter order.

    The parameters are a flat tuple: for each conv its weight then its bias (the stem, then
    per block conv1, conv2 and, when present, the shortcut), then the dense weight and bias.
    """
    layers = [("stem", 3, 64, 3, 1)]
    cin = 64
    for s, cout in enumerate(STAGES):
        for b in range(2):
            stride = 2 if (s > 0 and b == 0) else 1
            layers.append((f"s{s}b{b}.conv1", cin, cout, 3, stride))
            layers.append((f"s{s}b{b}.conv2", cout, cout, 3, 1))
            if stride != 1 or cin != cout:
                layers.append((f"s{s}b{b}.shortcut", cin, cout, 1, stride))
            cin = cout
    return layers


def _resnet_params_type():
    types = []
    for _, cin, cout, k, _ in resnet_layers():
        types += [Tensor[Float, (cout, cin, k, k)], Tensor[Float, cout]]
    types += [Tensor[Float, (10, 512)], Tensor[Float, 10]]
    return tuple[tuple(types)]


RESNET_PARAMS = _resnet_params_type()


# Written out flat, one line per convolution, with the parameters as one tuple argument
# (p[0] .. p[41], in the order of resnet_layers()). A basic block could be a nested `def`
# (a closure) or a @relay helper with symbolic shapes, but the flat first-order program is
# the form every backend is sure to compile as one plan.
def resnet18(x: Tensor[Float, (1, 3, 32, 32)], p: RESNET_PARAMS) -> Tensor[Float, (1, 10)]:
    h = relay.relu(relay.bias_add(relay.conv2d(x, p[0], padding=1), p[1]))
    # stage 1: 64 channels, 32x32
    t = relay.relu(relay.bias_add(relay.conv2d(h, p[2], padding=1), p[3]))
    h = relay.relu(relay.bias_add(relay.conv2d(t, p[4], padding=1), p[5]) + h)
    t = relay.relu(relay.bias_add(relay.conv2d(h, p[6], padding=1), p[7]))
    h = relay.relu(relay.bias_add(relay.conv2d(t, p[8], padding=1), p[9]) + h)
    # stage 2: 128 channels, 16x16; projection shortcut
    t = relay.relu(relay.bias_add(relay.conv2d(h, p[10], strides=2, padding=1), p[11]))
    s = relay.bias_add(relay.conv2d(h, p[14], strides=2), p[15])
    h = relay.relu(relay.bias_add(relay.conv2d(t, p[12], padding=1), p[13]) + s)
    t = relay.relu(relay.bias_add(relay.conv2d(h, p[16], padding=1), p[17]))
    h = relay.relu(relay.bias_add(relay.conv2d(t, p[18], padding=1), p[19]) + h)
    # stage 3: 256 channels, 8x8
    t = relay.relu(relay.bias_add(relay.conv2d(h, p[20], strides=2, padding=1), p[21]))
    s = relay.bias_add(relay.conv2d(h, p[24], strides=2), p[25])
    h = relay.relu(relay.bias_add(relay.conv2d(t, p[22], padding=1), p[23]) + s)
    t = relay.relu(relay.bias_add(relay.conv2d(h, p[26], padding=1), p[27]))
    h = relay.relu(relay.bias_add(relay.conv2d(t, p[28], padding=1), p[29]) + h)
    # stage 4: 512 channels, 4x4
    t = relay.relu(relay.bias_add(relay.conv2d(h, p[30], strides=2, padding=1), p[31]))
    s = relay.bias_add(relay.conv2d(h, p[34], strides=2), p[35])
    h = relay.relu(relay.bias_add(relay.conv2d(t, p[32], padding=1), p[33]) + s)
    t = relay.relu(relay.bias_add(relay.conv2d(h, p[36], padding=1), p[37]))
    h = relay.relu(relay.bias_add(relay.conv2d(t, p[38], padding=1), p[39]) + h)
    h = relay.flatten(relay.global_avg_pool2d(h))
    return relay.dense(h, p[40]) + p[41]


def resnet_data(seed: int = 0, eps: float = 1e-5):
    """Input and folded parameters: w' = w * gamma / sqrt(var + eps), b' = beta - mean * that."""
    r = rng(seed)
    x = normal(r, (1, 3, 32, 32))
    params = []
    for name, cin, cout, k, _ in resnet_layers():
        w = normal(r, (cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
        # the second BN of a block starts small, as in common ResNet initialisations, so that
        # activations stay O(1) through the eight residual additions
        gamma = (0.5 if name.endswith("conv2") else 1.0) * (1 + 0.1 * r.standard_normal(cout))
        beta, mean = 0.1 * r.standard_normal(cout), 0.1 * r.standard_normal(cout)
        var = r.uniform(0.5, 1.5, cout)
        scale = gamma / np.sqrt(var + eps)
        params += [(w * scale[:, None, None, None]).astype(np.float32),
                   (beta - mean * scale).astype(np.float32)]
    params += [normal(r, (10, 512), np.sqrt(1.0 / 512)), normal(r, (10,), 0.1)]
    return x, tuple(params)


def _resnet_blocks():
    """Per block: (index of conv1 weight, stride, index of shortcut weight or None)."""
    layers = resnet_layers()
    index = {name: 2 * i for i, (name, *_) in enumerate(layers)}
    return [(index[f"s{s}b{b}.conv1"], 2 if (s > 0 and b == 0) else 1,
             index.get(f"s{s}b{b}.shortcut"))
            for s in range(len(STAGES)) for b in range(2)]


def resnet_generic(p, x, conv, relu, global_pool, dense):
    """ResNet-18 over one system's primitives: conv(x, w, b, stride, pad), relu, ..."""
    h = relu(conv(x, p[0], p[1], 1, 1))
    for i, stride, sc in _resnet_blocks():
        t = relu(conv(h, p[i], p[i + 1], stride, 1))
        shortcut = h if sc is None else conv(h, p[sc], p[sc + 1], stride, 0)
        h = relu(conv(t, p[i + 2], p[i + 3], 1, 1) + shortcut)
    return dense(global_pool(h), p[-2], p[-1])


def resnet_jax(layout: str):
    jax, jnp = jax_modules()
    spatial = (2, 3) if layout == "NCHW" else (1, 2)

    def f(x, p):
        return resnet_generic(
            p, x, lambda h, w, b, s, pad: jax_conv(h, w, b, layout, s, pad), jax.nn.relu,
            lambda h: jnp.mean(h, axis=spatial), lambda h, w, b: h @ w.T + b)
    return jax.jit(f)


def resnet_numpy(x, p):
    return resnet_generic(p, x, conv2d_nchw, lambda h: np.maximum(h, 0),
                          lambda h: h.mean(axis=(2, 3)), lambda h, w, b: h @ w.T + b)


def resnet_torch(torch, x, p):
    F = torch.nn.functional
    return resnet_generic(p, x, lambda h, w, b, s, pad: F.conv2d(h, w, b, s, pad), F.relu,
                          lambda h: h.mean(dim=(2, 3)), F.linear)


def resnet_case() -> Case:
    x, params = resnet_data()

    def relaydsl_setup():
        return relaydsl_runner(specialize(resnet18), x, params)

    def jax_setup(layout: str):
        def setup():
            _, jnp = jax_modules()
            f = resnet_jax(layout)
            p = [to_hwio(a) if (layout == "NHWC" and a.ndim == 4) else a for a in params]
            jx, jp = jnp.asarray(to_layout(x, layout)), tuple(jnp.asarray(a) for a in p)
            return lambda: f(jx, jp)
        return setup

    def torch_setup():
        torch = torch_module()
        tx, tp = torch.from_numpy(x), tuple(torch.from_numpy(a) for a in params)

        def run():
            with torch.no_grad():
                return resnet_torch(torch, tx, tp)
        return run

    def torch_compile_setup():
        torch = torch_module()
        return torch_compiled_inference(lambda v, *p: resnet_torch(torch, v, p), params, x)

    return Case("ResNet-18 fwd (b1)", "resnet",
                {"relaydsl": relaydsl_setup, "jax:NCHW": jax_setup("NCHW"),
                 "jax:NHWC": jax_setup("NHWC"),
                 "numpy": lambda: (lambda: resnet_numpy(x, params)), "torch": torch_setup,
                 "torch_compile": torch_compile_setup},
                reference="jax:NCHW",
                notes=["batch norm folded into each conv's weights and bias, the same folded "
                       "weights in every system; NumPy: im2col + GEMM"])


# ============================================================================================
# shared helpers
# ============================================================================================
def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout == "NHWC" else x


def to_hwio(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w.transpose(2, 3, 1, 0))


def jax_conv(x, w, b, layout: str, stride: int = 1, pad: int = 0):
    jax, _ = jax_modules()
    dims = ("NCHW", "OIHW", "NCHW") if layout == "NCHW" else ("NHWC", "HWIO", "NHWC")
    out = jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                       dimension_numbers=dims)
    return out + (b[:, None, None] if layout == "NCHW" else b)


def jax_maxpool2(x, layout: str):
    jax, jnp = jax_modules()
    window = (1, 1, 2, 2) if layout == "NCHW" else (1, 2, 2, 1)
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, window, "VALID")


def conv2d_nchw(x, w, b, stride: int = 1, pad: int = 0):
    """im2col: the (kh, kw) windows become rows of a matrix multiplied by the filters."""
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    oh, ow = win.shape[2:4]
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    out = cols @ w.reshape(o, -1).T + b
    return out.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)


def maxpool2_nchw(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def cases() -> list[Case]:
    return [lenet_case(1), lenet_case(64), resnet_case()]
