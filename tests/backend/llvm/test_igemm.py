"""The integer GEMM (templates/igemm.py): dense, matmul, batch_matmul and conv2d on int8,
uint8 and int16, every instruction set.

Integer arithmetic is exact, so every result must equal NumPy's (the ops' references,
computed in int64 and wrapped to the output type) bit for bit. Each ISA's kernels are run
where the host CPU has its instructions (``HOST_RUNS``, from LLVM's view of the host) and
otherwise only compiled for a CPU that has them, their assembly checked for the
instructions: whichever vendor runs the suite, every path is exercised.
"""
from __future__ import annotations

import ctypes
import dataclasses
import itertools

import llvmlite.ir as ir
import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from relaydsl.backend.llvm import jit, runtime
from relaydsl.errors import SettingError
from relaydsl.backend.llvm.templates import Template, template_for
from relaydsl.backend.llvm.templates.conv2d import int_im2col_rows
from relaydsl.backend.llvm.templates.igemm import (
    IntBlocking, Isa, amx_permitted, emit_int_gemm, host_isa, int_types, select_isa,
)
from relaydsl.ir.types import TensorType
from relaydsl.op.registry import lookup
from tests.backend.llvm.test_templates import full_attrs

ARGTYPES = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2
# LLVM features of CPUs with each ISA (for the assembly checks) and of one with none
FEATURES = {
    "amx": ("sapphirerapids", "+avx512f,+avx512vl,+avx512bw,+avx512vnni,+avx2,+fma,+amx-tile,"
                              "+amx-int8"),
    "avx512vnni": ("icelake-server", "+avx512f,+avx512vl,+avx512bw,+avx512vnni,+avx2,+fma"),
    "avxvnni": ("alderlake", "+avx2,+fma,+avxvnni,-avx512f"),
    "generic": ("haswell", "+avx2,+fma,-avx512f,-avxvnni"),
}
# each ISA as selected for such a CPU (tests force it on this one where it can run)
ISAS = {name: select_isa(features, 512 if "+avx512f" in features else 256, amx=name == "amx")
        for name, (_, features) in FEATURES.items()}
_host = jit.host_target()
_flags = set(_host.features.split(","))
HOST_RUNS = {
    "amx": {"+amx-tile", "+amx-int8"} <= _flags and amx_permitted(),
    "avx512vnni": {"+avx512f", "+avx512vnni"} <= _flags,
    "avxvnni": "+avxvnni" in _flags or {"+avx512vnni", "+avx512vl"} <= _flags,
    "generic": True,
}
_count = [0]


def _ref(op: str, attrs: dict, a: np.ndarray, b: np.ndarray, out_dtype: str) -> np.ndarray:
    """The op's NumPy reference in int64, wrapped to `out_dtype` (as the op sums there)."""
    full = dict(full_attrs(op, attrs))
    if "out_dtype" in full:
        full["out_dtype"] = "int64"
    want = lookup(op).numpy_ref(a.astype(np.int64), b.astype(np.int64), **full)
    return np.asarray(want).astype(out_dtype)


def _out_shape(op: str, attrs: dict, sa: tuple, sb: tuple) -> tuple:
    full = dict(full_attrs(op, attrs))
    if "out_dtype" in full:
        full["out_dtype"] = None
    return np.shape(lookup(op).numpy_ref(np.zeros(sa), np.zeros(sb), **full))


class Kernel:
    def __init__(self, case: tuple, fn, extent: int, out: tuple):
        self.case, self.fn, self.extent, self.out_shape = case, fn, extent, out

    def __call__(self, a: np.ndarray, b: np.ndarray, splits=None) -> np.ndarray:
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        out = np.full(self.out_shape, 0x5A, self.case[5])  # garbage the kernel must overwrite
        args = (out.ctypes.data, a.ctypes.data, b.ctypes.data)
        if splits is None:
            runtime.parallel_for(lambda s, e: self.fn(*args, s, e), self.extent)
        else:
            for s, e in splits:
                self.fn(*args, s, e)
        return out


def module_ir(cases: list[tuple], isa: Isa | None = None, blocking: IntBlocking | None = None
              ) -> tuple[str, list[tuple]]:
    """One template per (op, attrs, shape a, shape b, (dtype a, dtype b), out dtype) emitted into
    one module for `isa`: its IR, and (case, symbol, parallel extent, out shape) per case."""
    module = ir.Module(name="igemm_test")
    module.triple = _host.triple
    pending = []
    for case in cases:
        op, attrs, sa, sb, (da, db), dc = case
        out = _out_shape(op, attrs, sa, sb)
        tmpl = template_for(lookup(op), full_attrs(op, attrs), [TensorType(sa, da),
                            TensorType(sb, db)], TensorType(out, dc))
        assert isinstance(tmpl, Template) and tmpl.ints is not None, case
        _count[0] += 1
        name = f"igemm{_count[0]}"
        rows_b = int_im2col_rows(tmpl.conv) if tmpl.conv is not None else None
        kernel = emit_int_gemm(module, name, tmpl.spec, tmpl.ints, isa, blocking, rows_b)
        pending.append((case, name, kernel.parallel_extent, out))
    return str(module), pending


def build(cases: list[tuple], isa: Isa | None = None, blocking: IntBlocking | None = None
          ) -> list[Kernel]:
    """The kernels of `cases` (as ``module_ir``), compiled for the host."""
    text, pending = module_ir(cases, isa, blocking)
    lib = jit.compile_ir(text, key=f"igemm-test-{_count[0]}", use_disk_cache=False)
    return [Kernel(case, lib.function(name, None, ARGTYPES), extent, out)
            for case, name, extent, out in pending]


def _random(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)


def check(kernels: list[Kernel], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for kern in kernels:
        op, attrs, sa, sb, (da, db), dc = kern.case
        a, b = _random(rng, sa, da), _random(rng, sb, db)
        np.testing.assert_array_equal(kern(a, b), _ref(op, attrs, a, b, dc), err_msg=str(kern.case))


def _runnable(isa: str) -> Isa:
    if not HOST_RUNS[isa]:
        pytest.skip(f"this CPU lacks {isa} (its code is checked by test_assembly_selects_*)")
    return ISAS[isa]


I8, U8, I16 = ("int8", "int8"), ("uint8", "int8"), ("int16", "int16")
DENSE_SHAPES = [(1, 1, 1), (2, 3, 5), (7, 13, 3), (15, 33, 17), (29, 31, 37), (64, 48, 64),
                (97, 89, 83), (130, 70, 600)]  # (m, n, k): odd K, remainders, > one K block


@pytest.mark.parametrize("isa", list(ISAS))
@pytest.mark.parametrize("dtypes", [I8, U8, I16], ids=["s8s8", "u8s8", "s16s16"])
def test_dense(isa, dtypes):
    cases = [("dense", {"out_dtype": "int32"}, (m, k), (n, k), dtypes, "int32")
             for m, n, k in DENSE_SHAPES]
    check(build(cases, _runnable(isa)))


@pytest.mark.parametrize("isa", list(ISAS))
def test_matmul_and_batch_matmul(isa):
    cases = [("matmul", {}, (33, 70), (70, 19), I8, "int8"),  # no out_dtype: wraps in int8
             ("matmul", {}, (3, 5, 9), (9, 7), I8, "int8"),
             ("matmul", {}, (2, 1, 6, 9), (3, 9, 5), I16, "int16"),
             ("matmul", {}, (9,), (9, 4), I8, "int8")]
    for ta in (False, True):
        for tb in (False, True):
            sa, sb = ((2, 37, 17) if ta else (2, 17, 37)), ((1, 21, 37) if tb else (1, 37, 21))
            cases.append(("batch_matmul", {"transpose_a": ta, "transpose_b": tb}, sa, sb, I8,
                          "int8"))
    check(build(cases, _runnable(isa)))


CONV_CASES = [  # (data shape, weight shape, attrs)
    ((1, 3, 8, 8), (4, 3, 3, 3), {"padding": 1}),
    ((2, 5, 9, 7), (6, 5, 3, 3), {"strides": 2, "padding": (1, 0)}),
    ((1, 8, 10, 10), (8, 2, 3, 3), {"groups": 4, "padding": 1, "dilation": 2}),
    ((3, 7, 7), (5, 3, 1, 1), {}),
    ((1, 16, 12, 12), (32, 16, 3, 3), {"padding": 1}),
    ((2, 4, 9, 11), (6, 4, 3, 3), {"padding": 2, "dilation": 2}),  # contiguous rows, dilated
    ((1, 3, 5, 40), (4, 3, 1, 5), {"padding": (0, 2)}),  # rows of 40 > NR pixels
    ((1, 2, 40, 6), (3, 2, 3, 3), {"strides": 2}),  # outputs 2 wide: too many rows, a gather
]


@pytest.mark.parametrize("isa", list(ISAS))
@pytest.mark.parametrize("dtypes", [I8, ("uint8", "int8"), ("int8", "uint8"), I16],
                         ids=["s8s8", "u8-data", "u8-weight", "s16s16"])
def test_conv2d(isa, dtypes):
    cases = [("conv2d", {**attrs, "out_dtype": "int32"}, sd, sw, dtypes, "int32")
             for sd, sw, attrs in CONV_CASES]
    check(build(cases, _runnable(isa)))


@pytest.mark.parametrize("isa", list(ISAS))
def test_small_blocks_and_any_split(isa):
    """K blocks, M and N blocks smaller than the problem; the units split into chunks."""
    cases = [("dense", {"out_dtype": "int32"}, (45, 70), (50, 70), I8, "int32"),
             ("dense", {"out_dtype": "int16"}, (45, 70), (50, 70), I16, "int16")]
    kernels = build(cases, _runnable(isa), IntBlocking(kc=8, mc=2 * ISAS[isa].mr, nc=32))
    check(kernels)
    rng = np.random.default_rng(1)
    for kern in kernels:
        (da, db) = kern.case[4]
        a, b = _random(rng, kern.case[2], da), _random(rng, kern.case[3], db)
        cuts = sorted({0, kern.extent, *rng.integers(0, kern.extent, 3).tolist()})
        np.testing.assert_array_equal(kern(a, b, splits=list(itertools.pairwise(cuts))),
                                      _ref(*kern.case[:2], a, b, kern.case[5]))


@pytest.mark.parametrize("isa", list(ISAS))
def test_accumulators_never_saturate(isa):
    """Adversarial values: every product at its extreme, long K. The 8/16 scheme (int8 summed
    into int16) wraps exactly as the reference does (a saturating vpmaddubsw would give
    32767s); int16 x int16 with -32768 * -32768 pairs wraps in int32 as NumPy does."""
    k = 1030
    cases = [("dense", {"out_dtype": "int16"}, (20, k), (18, k), I8, "int16"),
             ("dense", {"out_dtype": "int32"}, (20, k), (18, k), I8, "int32"),
             ("dense", {"out_dtype": "int32"}, (20, k), (18, k), U8, "int32"),
             ("dense", {"out_dtype": "int32"}, (20, k), (18, k), I16, "int32")]
    kernels = build(cases, _runnable(isa))
    for kern in kernels:
        _, attrs, sa, sb, (da, db), dc = kern.case
        lo_a, hi_a = np.iinfo(da).min, np.iinfo(da).max
        lo_b = np.iinfo(db).min
        for a_val, b_val in ((lo_a, lo_b), (hi_a, lo_b), (lo_a, np.iinfo(db).max)):
            a = np.full(sa, a_val, da)
            b = np.full(sb, b_val, db)
            a[::3, ::7] = hi_a  # not all equal: rows differ
            want = _ref("dense", attrs, a, b, dc)
            np.testing.assert_array_equal(kern(a, b), want, err_msg=str((kern.case, a_val)))
        if dc == "int16" and da == "int8":  # the case saturation would break
            assert np.any(_ref("dense", attrs, np.full(sa, -128, da), np.full(sb, -128, db),
                               "int64") > 32767)


@hsettings(max_examples=12, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 70),
       batch=st.integers(1, 3), dtypes=st.sampled_from([I8, U8, I16]),
       out=st.sampled_from(["int32", "int16"]))
def test_random_shapes_on_the_host(m, n, k, batch, dtypes, out):
    if out == "int16" or batch == 1:
        case = ("dense", {"out_dtype": out}, (batch, m, k), (n, k), dtypes, out)
    else:
        same = I8 if dtypes == U8 else dtypes  # batch_matmul takes one dtype
        case = ("batch_matmul", {}, (batch, m, k), (batch, k, n), same, same[0])
    check(build([case], host_isa()))


# ---- selection --------------------------------------------------------------------------------


def test_int_types():
    assert int_types("int8", "int8", "int32").offset_a
    assert not int_types("uint8", "int8", "int32").offset_a
    assert int_types("int16", "int16", "int32").group == 2
    assert int_types("int8", "int8", "int32").group == 4
    assert int_types("uint8", "uint8", "int32") is None
    assert int_types("int8", "int16", "int32") is None
    assert int_types("int8", "int8", "float32") is None


def test_template_for_int_and_mixed_dtypes():
    def dense(da, db, dc):
        return template_for(lookup("dense"), full_attrs("dense", {"out_dtype": dc}),
                            [TensorType((4, 3), da), TensorType((5, 3), db)],
                            TensorType((4, 5), dc))
    assert dense("int8", "int8", "int32").ints is not None
    assert dense("float32", "float32", "float32").ints is None
    assert dense("int32", "int32", "int32") is None
    assert dense("int8", "int8", "int64") is None
    conv = template_for(lookup("conv2d"), full_attrs("conv2d", {"out_dtype": "int32"}),
                        [TensorType((1, 3, 8, 8), "uint8"), TensorType((4, 3, 3, 3), "int8")],
                        TensorType((1, 4, 6, 6), "int32"))
    assert conv is not None and (conv.ints.a, conv.ints.b) == ("int8", "uint8")  # A: weight


def test_host_isa_follows_the_host_features():
    """The ISA is what the host's own feature list allows (no vendor's defaults assumed)."""
    best = next(name for name in ISAS if HOST_RUNS[name]
                and (name != "avx512vnni" or _host.vector_bits >= 512))
    assert host_isa().name == best
    assert {name: isa.name for name, isa in ISAS.items()} == {name: name for name in FEATURES}
    assert select_isa(FEATURES["amx"][1], 512, amx=False).name == "avx512vnni"  # not granted


def test_the_setting_forces_an_isa_the_cpu_runs(monkeypatch):
    monkeypatch.setenv("RELAYDSL_INT_ISA", "generic")
    assert host_isa().name == "generic"
    monkeypatch.setenv("RELAYDSL_INT_ISA", "sse")
    with pytest.raises(SettingError, match="RELAYDSL_INT_ISA='sse': expected one of amx"):
        host_isa()
    with pytest.raises(SettingError, match=r"RELAYDSL_INT_ISA='avx512vnni': this CPU .* runs "
                                           r"generic"):
        select_isa(FEATURES["generic"][1], 256, forced="avx512vnni")
    assert select_isa(FEATURES["amx"][1], 512, forced="avxvnni").name == "avxvnni"


@pytest.mark.parametrize("isa", list(ISAS))
def test_assembly_selects_the_instructions(isa):
    """The kernel for each ISA, compiled for a CPU that has it (not necessarily this one)."""
    cases = [("dense", {"out_dtype": "int32"}, (30, 40), (20, 40), I8, "int32"),
             ("dense", {"out_dtype": "int32"}, (30, 40), (20, 40), I16, "int32")]
    text, _ = module_ir(cases, ISAS[isa])
    cpu, features = FEATURES[isa]
    target = dataclasses.replace(_host, cpu=cpu, features=features,
                                 vector_bits=512 if "+avx512f" in features else 256)
    asm = jit.assembly(text, target)
    if isa == "generic":
        assert "vpdpbusd" not in asm and "vpdpwssd" not in asm
        assert "vpmaddubsw" not in asm  # the saturating int16 path is never taken
    elif isa == "amx":  # int8 on tiles; int16 (no AMX instruction) falls back to VNNI
        assert "tdpbssd" in asm and "ldtilecfg" in asm and "tilerelease" in asm
        assert "vpdpwssd" in asm and "vpdpbusd" not in asm
    else:
        register = ISAS[isa].register
        dots = [line for line in asm.splitlines() if "vpdpbusd" in line or "vpdpwssd" in line]
        assert any("vpdpbusd" in line for line in dots)
        assert any("vpdpwssd" in line for line in dots)
        assert all(register in line for line in dots), dots[:3]
        if isa == "avxvnni":
            assert "{vex}" in asm or "zmm" not in asm


# ---- in programs: the realized requantisation fuses into the integer kernel's group -----------

REQUANTIZED = """def @main(%x: Tensor[{x}, {dx}], %w: Tensor[{w}, int8], %b: Tensor[{b}, int32]) {{
  %0 = {op}(%x, %w, {attrs}out_dtype="int32");
  %1 = add(%0, %b);
  %2 = cast(%1, dtype="float32");
  %3 = multiply(%2, 0.0173f);
  %4 = round(%3);
  %5 = clip(%4, a_min=-127.0, a_max=127.0);
  %6 = cast(%5, dtype="int8");
  %7 = cast(%6, dtype="int32");
  %8 = right_shift(%1, 9);
  add(%7, %8)
}}"""
PROGRAMS = [
    ("dense", dict(x=(37, 70), w=(45, 70), b=(45,), attrs="")),
    ("conv2d", dict(x=(2, 8, 9, 9), w=(16, 8, 3, 3), b=(16, 1, 1),
                    attrs="strides=[2, 2], padding=[1, 1, 1, 1], ")),
]


@pytest.mark.parametrize("dx", ["int8"])  # mixed dtypes: the relations refuse them
@pytest.mark.parametrize("op, shapes", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_requantisation_fuses_and_runs_bit_exactly(op, shapes, dx):
    from relaydsl.backend.interpreter import evaluate
    from relaydsl.backend.llvm.executor import compile_program
    from relaydsl.backend.llvm.lower import lower
    from relaydsl.backend.llvm.schedule import schedule
    from relaydsl.ir.parser import parse
    from relaydsl.transform.fuse_ops import primitive_functions
    from relaydsl.typing import infer_types

    text = REQUANTIZED.format(op=op, dx=dx, **shapes)
    program = compile_program(infer_types(parse(text)), "main")
    # one kernel: the contraction and its whole epilogue (cast, multiply, round, clip, shift)
    (group,) = primitive_functions(program.mod["main"])
    (gemm,) = [s for s in schedule(lower(group), "t").stages if s.template is not None]
    assert isinstance(gemm.template, Template) and gemm.template.ints is not None
    rng = np.random.default_rng(3)
    x, w = _random(rng, shapes["x"], dx), _random(rng, shapes["w"], "int8")
    bias = rng.integers(-5000, 5000, shapes["b"], dtype=np.int32)
    got = program(x, w, bias)
    want = evaluate(infer_types(parse(text)), x, w, bias)
    np.testing.assert_array_equal(got, want)
    acc = _ref(op, dict(full_attrs(op, {"out_dtype": "int32", **_attrs_of(shapes)})), x, w,
               "int32")
    acc = acc + bias
    requant = np.clip(np.round(acc.astype(np.float32) * np.float32(0.0173)), -127, 127)
    np.testing.assert_array_equal(got, requant.astype(np.int8).astype(np.int32) + (acc >> 9))


def _attrs_of(shapes: dict) -> dict:
    return {"strides": 2, "padding": 1} if "strides" in shapes["attrs"] else {}
