"""The conv2d template (backend/llvm/templates/conv2d.py): implicit-im2col GEMM against the op's
references (NumPy in float64, and jax.lax.conv_general_dilated), every attribute form.

Run as a script for timings of the LeNet and ResNet-18 (CIFAR) shapes against jax.jit
(NCHW and NHWC): ``python -m tests.backend.llvm.test_conv2d``.
"""
from __future__ import annotations

import numpy as np

from tests.backend.llvm.test_templates import build, check, full_attrs

CASES = [  # (attrs, data shape, weight shape)
    ({}, (1, 1, 28, 28), (20, 1, 5, 5)),                         # LeNet conv1
    ({}, (2, 20, 12, 12), (50, 20, 5, 5)),                       # LeNet conv2
    ({"padding": 1}, (1, 3, 32, 32), (64, 3, 3, 3)),             # ResNet stem
    ({"padding": 1, "strides": 2}, (1, 64, 16, 16), (128, 64, 3, 3)),
    ({"strides": 2}, (1, 64, 16, 16), (128, 64, 1, 1)),          # projection shortcut
    ({"padding": 1}, (1, 256, 4, 4), (256, 256, 3, 3)),
    ({"padding": (2, 1)}, (2, 3, 9, 7), (5, 3, 3, 3)),
    ({"padding": (0, 1, 2, 3)}, (1, 2, 6, 5), (3, 2, 2, 4)),
    ({"strides": (2, 3), "padding": (1, 2, 0, 1)}, (2, 3, 11, 13), (4, 3, 3, 2)),
    ({"dilation": 2, "padding": 2}, (1, 3, 10, 10), (4, 3, 3, 3)),
    ({"dilation": (1, 3), "strides": (3, 1)}, (1, 2, 12, 12), (3, 2, 2, 3)),
    ({"groups": 2, "padding": 1}, (2, 4, 7, 7), (6, 2, 3, 3)),
    ({"groups": 8, "padding": 1}, (1, 8, 6, 6), (8, 1, 3, 3)),   # depthwise
    ({"groups": 3, "strides": 2}, (1, 6, 9, 9), (9, 2, 1, 1)),
    ({}, (3, 5, 5), (7, 3, 3, 3)),                               # one CHW example
    ({"padding": 1, "groups": 2}, (4, 6, 6), (2, 2, 3, 3)),      # CHW with groups
    ({"padding": 4}, (1, 1, 2, 2), (1, 1, 3, 3)),                # mostly padding
    ({}, (1, 1, 1, 1), (1, 1, 1, 1)),
    ({"channels": 5, "kernel_size": 3}, (1, 2, 5, 5), (5, 2, 3, 3)),
]


def test_conv2d_against_numpy():
    check(build([("conv2d", attrs, sa, sb) for attrs, sa, sb in CASES]))


def test_conv2d_against_jax():
    import jax

    from relaydsl.op.registry import lookup

    cases = [CASES[i] for i in (2, 8, 9, 11, 14)]
    kernels = build([("conv2d", attrs, sa, sb) for attrs, sa, sb in cases])
    rng = np.random.default_rng(3)
    for kern in kernels:
        a = rng.standard_normal(kern.sa).astype(np.float32)
        b = rng.standard_normal(kern.sb).astype(np.float32)
        with jax.default_device(jax.devices("cpu")[0]):
            want = np.asarray(lookup("conv2d").jax_lower(a, b, **full_attrs("conv2d", kern.attrs)))
        np.testing.assert_allclose(kern(a, b), want, rtol=1e-4, atol=1e-4)


# ---- timings --------------------------------------------------------------------------------


def main() -> None:
    shapes = [
        ("lenet conv1 N=1", {}, (1, 1, 28, 28), (20, 1, 5, 5)),
        ("lenet conv2 N=1", {}, (1, 20, 12, 12), (50, 20, 5, 5)),
        ("lenet conv1 N=64", {}, (64, 1, 28, 28), (20, 1, 5, 5)),
        ("lenet conv2 N=64", {}, (64, 20, 12, 12), (50, 20, 5, 5)),
        ("resnet stem 3->64 32x32", {"padding": 1}, (1, 3, 32, 32), (64, 3, 3, 3)),
        ("resnet 64->64 32x32", {"padding": 1}, (1, 64, 32, 32), (64, 64, 3, 3)),
        ("resnet 64->128 s2 32x32", {"padding": 1, "strides": 2}, (1, 64, 32, 32), (128, 64, 3, 3)),
        ("resnet 128->128 16x16", {"padding": 1}, (1, 128, 16, 16), (128, 128, 3, 3)),
        ("resnet 256->256 8x8", {"padding": 1}, (1, 256, 8, 8), (256, 256, 3, 3)),
        ("resnet 512->512 4x4", {"padding": 1}, (1, 512, 4, 4), (512, 512, 3, 3)),
        ("resnet 1x1 s2 256->512", {"strides": 2}, (1, 256, 8, 8), (512, 256, 1, 1)),
    ]
    kernels = build([("conv2d", attrs, sa, sb) for _, attrs, sa, sb in shapes])
    rng = np.random.default_rng(0)
    print(f"{'shape':28} {'ours ms':>8} {'GF/s':>6} {'jax NCHW':>9} {'jax NHWC':>9}")
    for (label, attrs, sa, sb), kern in zip(shapes, kernels):
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float32)
        _time_row(label, kern, attrs, a, b)


def _time_row(label: str, kern, attrs: dict, a: np.ndarray, b: np.ndarray) -> None:
    """One row of the table: our kernel, and JAX's convolution in NCHW and in NHWC."""
    import jax
    import jax.numpy as jnp

    from relaydsl.backend.llvm import runtime
    from relaydsl.op.registry import lookup
    from tests.backend.llvm.test_gemm import _bench

    out = np.empty(kern.out_shape, np.float32)
    args = (out.ctypes.data, a.ctypes.data, b.ctypes.data)
    ext = kern.info.parallel_extent
    full = full_attrs("conv2d", attrs)
    nchw = jax.jit(lambda x, w: lookup("conv2d").jax_lower(x, w, **full))
    pad = [(p, p) for p in (attrs.get("padding", 0),) * 2]
    st = attrs.get("strides", 1)
    nhwc = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
        x, w, (st, st), pad, dimension_numbers=("NHWC", "HWIO", "NHWC")))
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    ja2, jb2 = jnp.asarray(a.transpose(0, 2, 3, 1)), jnp.asarray(b.transpose(2, 3, 1, 0))
    fs = {
        "ours": lambda: runtime.parallel_for(lambda s, e: kern.fn(*args, s, e), ext),
        "nchw": lambda: nchw(ja, jb).block_until_ready(),
        "nhwc": lambda: nhwc(ja2, jb2).block_until_ready(),
    }
    t = {k: [] for k in fs}
    for _ in range(3):
        for k, f in fs.items():
            t[k].append(_bench(f, 20))
    t = {k: min(v) for k, v in t.items()}
    print(f"{label:28} {t['ours'] * 1e3:8.3f} {kern.info.flops / t['ours'] / 1e9:6.1f} "
          f"{t['nchw'] * 1e3:9.3f} {t['nhwc'] * 1e3:9.3f}")


if __name__ == "__main__":
    main()
