"""The direct int8 conv2d (templates/conv2d_int8.py): bit for bit NumPy's int64 convolution
wrapped to int32, in kernels alone and in realized programs against the interpreter, on
this CPU's AVX-512 VNNI and with the other ISAs forced (which keep the implicit GEMM); the
quantized ResNet-8 of the benchmarks in tests/benchmarks/test_quantized_inference.py."""
from __future__ import annotations

import ctypes
import dataclasses

import llvmlite.ir as ir
import numpy as np
import pytest

from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.templates import Template, template_for
from relaydsl.backend.llvm.templates.contraction import IntConvTemplate
from relaydsl.backend.llvm.templates.conv2d_int8 import MAX_IMAGE_BYTES, emit_int_conv, int_conv
from relaydsl.ir.types import TensorType
from relaydsl.op.nn.window import Window
from relaydsl.op.registry import lookup
from tests.backend.llvm.test_igemm import FEATURES, HOST_RUNS
from tests.backend.llvm.test_templates import full_attrs

needs_vnni = pytest.mark.skipif(not HOST_RUNS["avx512vnni"],
                                reason="this CPU lacks AVX-512 VNNI (the assembly test covers it)")

# (batch, channels, height, width, out channels, kernel, strides, pads (t, l, b, r), dtype)
CASES = [
    (2, 16, 28, 28, 16, (3, 3), (1, 1), (1, 1, 1, 1), "int8"),  # ResNet-8's body
    (2, 1, 28, 28, 16, (3, 3), (1, 1), (1, 1, 1, 1), "int8"),  # its stem: 3 padded channels
    (2, 16, 28, 28, 32, (3, 3), (2, 2), (1, 1, 1, 1), "int8"),  # stride 2: 4 phases
    (2, 16, 28, 28, 32, (1, 1), (2, 2), (0, 0, 0, 0), "int8"),  # 1x1 projection, no wide lanes
    (2, 64, 7, 7, 64, (3, 3), (1, 1), (1, 1, 1, 1), "uint8"),
    (3, 5, 9, 11, 13, (3, 2), (2, 1), (0, 1, 2, 0), "int8"),  # odd channels, asymmetric
    (1, 7, 5, 6, 9, (1, 3), (1, 3), (1, 0, 0, 2), "uint8"),
    (1, 3, 40, 3, 5, (5, 1), (3, 1), (2, 0, 2, 0), "int8"),  # rows narrower than a vector
    # kernel columns folded into the channels (a stem): 1x5 of 1 channel is 2 groups, not 5
    (2, 1, 28, 28, 20, (5, 5), (1, 1), (0, 0, 0, 0), "int8"),  # LeNet's first layer
    (2, 2, 13, 15, 8, (3, 3), (2, 2), (1, 2, 0, 1), "int8"),
    (1, 1, 9, 9, 3, (3, 4), (1, 3), (2, 1, 1, 3), "uint8"),
]


def _reference(x: np.ndarray, w: np.ndarray, strides, pads) -> np.ndarray:
    attrs = full_attrs("conv2d", dict(strides=strides, padding=pads, out_dtype="int64"))
    want = lookup("conv2d").numpy_ref(x.astype(np.int64), w.astype(np.int64), **attrs)
    return np.asarray(want).astype(np.int32)


def _module(convs: list) -> ir.Module:
    module = ir.Module(name="conv2d_int8_test")
    module.triple = jit.host_target().triple
    for i, conv in enumerate(convs):
        emit_int_conv(module, f"conv{i}", conv)
    return module


def _geometry(case: tuple, weight: np.ndarray):
    n, c, h, w, _, (kh, kw), strides, pads, dtype = case
    oh, ow = Window((kh, kw), strides, (1, 1), pads).out_hw((h, w))
    conv = int_conv(n, c, h, w, weight, oh, ow, strides, pads, dtype)
    assert conv is not None
    return conv


def _inputs(rng: np.random.Generator, case: tuple, extreme: bool):
    n, c, h, w, o, (kh, kw), *_, dtype = case
    info = np.iinfo(dtype)
    if extreme:  # the largest sums: every product at its most negative or positive
        x = np.full((n, c, h, w), info.min if dtype == "int8" else info.max, dtype)
        weight = np.full((o, c, kh, kw), -128, np.int8)
    else:
        x = rng.integers(info.min, info.max, (n, c, h, w), endpoint=True, dtype=dtype)
        weight = rng.integers(-128, 127, (o, c, kh, kw), endpoint=True, dtype=np.int8)
    return x, weight


@needs_vnni
@pytest.mark.parametrize("extreme", [False, True], ids=["random", "extreme"])
def test_kernel_matches_numpy_bit_for_bit(extreme):
    rng = np.random.default_rng(0)
    data = [_inputs(rng, case, extreme) for case in CASES]
    convs = [_geometry(case, weight) for case, (_, weight) in zip(CASES, data)]
    lib = jit.compile_ir(str(_module(convs)), key=f"conv2d-int8-test-{extreme}",
                         use_disk_cache=False)
    for i, (case, conv, (x, weight)) in enumerate(zip(CASES, convs, data)):
        fn = lib.function(f"conv{i}", None, [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2)
        want = _reference(x, weight, case[6], case[7])
        # any split of the units: whole, amid an image's channels, one at a time
        for splits in ([(0, conv.units)], [(0, 1), (1, conv.units)],
                       [(u, u + 1) for u in range(conv.units)]):
            out = np.full(want.shape, 0x5A5A5A5A, np.int32)  # garbage it must overwrite
            for begin, end in splits:
                fn(out.ctypes.data, x.ctypes.data, weight.ctypes.data, begin, end)
            np.testing.assert_array_equal(out, want, err_msg=f"{case} {splits}")


def test_assembly_uses_vnni_and_compresses_the_wide_lanes():
    """For a CPU with AVX-512 VNNI (whichever CPU runs the suite): vpdpbusd on zmm with the
    weight word broadcast from memory, vpcompressd in registers, never the saturating
    vpmaddubsw."""
    weight = np.random.default_rng(0).integers(-128, 127, (16, 16, 3, 3), dtype=np.int8)
    conv = _geometry(CASES[0], weight)
    cpu, features = FEATURES["avx512vnni"]
    target = dataclasses.replace(jit.host_target(), cpu=cpu, features=features, vector_bits=512)
    asm = jit.assembly(str(_module([conv])), target)
    dots = [line for line in asm.splitlines() if "vpdpbusd" in line]
    assert len(dots) >= 9 * 8 and all("zmm" in line for line in dots)
    assert any("{1to16}" in line for line in dots)
    assert "vpcompressd" in asm and "vpmaddubsw" not in asm


def _types(case: tuple, out: str = "int32"):
    n, c, h, w, o, (kh, kw), strides, pads, dtype = case
    oh, ow = Window((kh, kw), strides, (1, 1), pads).out_hw((h, w))
    attrs = full_attrs("conv2d", dict(strides=strides, padding=pads, out_dtype=out))
    return attrs, [TensorType((n, c, h, w), dtype), TensorType((o, c, kh, kw), "int8")], \
        TensorType((n, o, oh, ow), out)


def test_template_choice(monkeypatch):
    """Direct where the weight is a constant, the result int32 and the ISA AVX-512 VNNI or
    AMX; else the implicit GEMM (a forced ISA without VNNI on zmm, a weight argument, an
    int16 result, groups) or nothing direct (an image too large for the stack)."""
    conv2d = lookup("conv2d")
    attrs, ins, out = _types(CASES[0])
    weight = {1: np.ones(ins[1].concrete_shape(), np.int8)}
    if HOST_RUNS["avx512vnni"]:
        assert isinstance(template_for(conv2d, attrs, ins, out, constants=weight),
                          IntConvTemplate)
    for isa in ("generic", "avxvnni"):
        if HOST_RUNS[isa]:
            monkeypatch.setenv("RELAYDSL_INT_ISA", isa)
            t = template_for(conv2d, attrs, ins, out, constants=weight)
            assert isinstance(t, Template) and t.ints is not None
    monkeypatch.delenv("RELAYDSL_INT_ISA", raising=False)
    assert isinstance(template_for(conv2d, attrs, ins, out), Template)  # weight an argument
    attrs16, ins16, out16 = _types(CASES[0], "int16")
    assert isinstance(template_for(conv2d, attrs16, ins16, out16, constants=weight), Template)
    assert MAX_IMAGE_BYTES < 64 * 130 * 130  # 64 channels of 128x128, padded
    assert int_conv(1, 64, 128, 128, np.ones((16, 64, 3, 3), np.int8), 128, 128, (1, 1),
                    (1, 1, 1, 1), "int8") is None
    folds = [int_conv(1, c, 8, 8, np.ones((8, c, 3, k), np.int8), 6, 8 - k + 1, (1, 1),
                      (0, 0, 0, 0), "int8") for c, k in ((1, 3), (3, 3), (5, 2))]
    assert [(f.folded, f.groups4) for f in folds if f is not None] == [(3, 1), (1, 1), (2, 3)]
