"""backend/llvm/templates/contraction.py: which op calls get a template; running templates.

The helpers here (``build``, ``run``, ``reference``) are shared by test_gemm.py and
test_conv2d.py: several templates go into one module (as the code generator puts them)
and are compiled together, which also checks that their helpers and intrinsic
declarations coexist.
"""
from __future__ import annotations

import ctypes

import llvmlite.ir as ir
import numpy as np
import pytest

from relaydsl.backend.llvm import jit, runtime
from relaydsl.backend.llvm.templates import StageInfo, gemm_library, template_for
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType
from relaydsl.op.registry import lookup

ARGTYPES = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2
_count = [0]


def full_attrs(op: str, attrs: dict) -> Attrs:
    opdef = lookup(op)
    return opdef.check_call((None,) * opdef.num_inputs, Attrs(attrs))


def reference(op: str, attrs: dict, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The op's NumPy reference, computed in float64 for a tight comparison."""
    out = lookup(op).numpy_ref(a.astype(np.float64), b.astype(np.float64),
                               **full_attrs(op, attrs))
    return np.asarray(out)


def out_shape(op: str, attrs: dict, sa: tuple, sb: tuple) -> tuple:
    a = np.zeros(sa, np.float32)
    b = np.zeros(sb, np.float32)
    return np.shape(lookup(op).numpy_ref(a, b, **full_attrs(op, attrs)))


class Compiled:
    def __init__(self, op: str, attrs: dict, sa: tuple, sb: tuple, fn, info: StageInfo,
                 out: tuple):
        self.op, self.attrs, self.sa, self.sb = op, attrs, sa, sb
        self.fn, self.info, self.out_shape = fn, info, out

    def __call__(self, a: np.ndarray, b: np.ndarray, splits=None, parallel=True) -> np.ndarray:
        a = np.ascontiguousarray(a, np.float32)
        b = np.ascontiguousarray(b, np.float32)
        out = np.full(self.out_shape, np.nan, np.float32)
        args = (out.ctypes.data, a.ctypes.data, b.ctypes.data)
        if splits is None:
            runtime.parallel_for(lambda s, e: self.fn(*args, s, e), self.info.parallel_extent,
                                 parallel=parallel)
        else:
            for s, e in splits:
                self.fn(*args, s, e)
        return out


def build(cases: list[tuple[str, dict, tuple, tuple]], blocking=None) -> list[Compiled]:
    """Emits one template per (op, attrs, shape a, shape b) into one module and compiles it."""
    module = ir.Module(name="templates_test")
    pending = []
    for op, attrs, sa, sb in cases:
        out = out_shape(op, attrs, sa, sb)
        tmpl = template_for(lookup(op), full_attrs(op, attrs), [TensorType(sa), TensorType(sb)],
                            TensorType(out))
        assert tmpl is not None, (op, attrs, sa, sb)
        if blocking is not None:
            import dataclasses
            tmpl = dataclasses.replace(tmpl, blocking=blocking)
        _count[0] += 1
        name = f"tmpl{_count[0]}"
        info = tmpl.emit(module, name)
        assert info.name == name and info.parallel_extent >= 1
        pending.append((op, attrs, sa, sb, name, info, out))
    gemm_library.load(gemm_library.declared_parts(module))
    lib = jit.compile_ir(str(module), key=f"templates-test-{_count[0]}", use_disk_cache=False)
    return [Compiled(op, attrs, sa, sb, lib.function(name, None, ARGTYPES), info, out)
            for op, attrs, sa, sb, name, info, out in pending]


def check(kernels: list[Compiled], rtol: float = 1e-4, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for kern in kernels:
        a = rng.standard_normal(kern.sa).astype(np.float32)
        b = rng.standard_normal(kern.sb).astype(np.float32)
        want = reference(kern.op, kern.attrs, a, b)
        got = kern(a, b)
        assert got.shape == want.shape
        # Scale by the magnitude of the terms: long contractions cancel.
        scale = np.sqrt(reference(kern.op, kern.attrs, a * a, b * b)) + 1e-3
        err = np.max(np.abs(got - want) / scale) if want.size else 0.0
        assert err < rtol, (kern.op, kern.attrs, kern.sa, kern.sb, err)


# ---- template_for -----------------------------------------------------------------------------


def T(shape, dtype="float32"):
    return TensorType(tuple(shape), dtype)


def test_template_for_accepts_the_contraction_ops():
    assert template_for(lookup("dense"), full_attrs("dense", {}), [T((4, 3)), T((5, 3))], T((4, 5)))
    assert template_for(lookup("matmul"), full_attrs("matmul", {}), [T((4, 3)), T((3, 5))],
                        T((4, 5)))
    assert template_for(lookup("batch_matmul"), full_attrs("batch_matmul", {"transpose_b": True}),
                        [T((2, 4, 3)), T((2, 5, 3))], T((2, 4, 5)))
    assert template_for(lookup("conv2d"), full_attrs("conv2d", {"padding": 1}),
                        [T((1, 3, 8, 8)), T((4, 3, 3, 3))], T((1, 4, 8, 8)))


@pytest.mark.parametrize("dtype", ["float64", "int32", "float16"])
def test_template_for_rejects_other_dtypes(dtype):
    assert template_for(lookup("dense"), full_attrs("dense", {}),
                        [T((4, 3), dtype), T((5, 3), dtype)], T((4, 5), dtype)) is None
    assert template_for(lookup("conv2d"), full_attrs("conv2d", {}),
                        [T((1, 3, 8, 8), dtype), T((4, 3, 3, 3), dtype)],
                        T((1, 4, 6, 6), dtype)) is None


def test_template_for_rejects_other_ops_and_odd_shapes():
    from relaydsl.ir.types import Any as AnyDim
    assert template_for(lookup("add"), Attrs({}), [T((4,)), T((4,))], T((4,))) is None
    assert template_for(lookup("max_pool2d"), full_attrs("max_pool2d", {"pool_size": 2}),
                        [T((1, 1, 4, 4))], T((1, 1, 2, 2))) is None
    # symbolic, empty, mismatched
    assert template_for(lookup("dense"), full_attrs("dense", {}), [T((AnyDim, 3)), T((5, 3))],
                        T((AnyDim, 5))) is None
    assert template_for(lookup("dense"), full_attrs("dense", {}), [T((0, 3)), T((5, 3))],
                        T((0, 5))) is None
    assert template_for(lookup("matmul"), full_attrs("matmul", {}), [T((4, 3)), T((4, 5))],
                        T((4, 5))) is None
    assert template_for(lookup("batch_matmul"), full_attrs("batch_matmul", {}),
                        [T((2, 4, 3)), T((3, 3, 5))], T((3, 4, 5))) is None
    assert template_for(lookup("conv2d"), full_attrs("conv2d", {"groups": 2}),
                        [T((1, 3, 8, 8)), T((4, 3, 3, 3))], T((1, 4, 6, 6))) is None


def test_stage_info_and_helper_names():
    module = ir.Module()
    tmpl = template_for(lookup("matmul"), full_attrs("matmul", {}), [T((100, 30)), T((30, 20))],
                        T((100, 20)))
    info = tmpl.emit(module, "mm0")
    assert info == StageInfo("mm0", info.parallel_extent, 2.0 * 100 * 20 * 30)
    assert info.parallel_extent >= 2
    tmpl.emit(module, "mm1")  # a second template in the same module
    for fn in module.functions:
        if fn.is_declaration:  # intrinsics, and the shared GEMM library (compiled apart)
            assert fn.name.startswith(("llvm.", "relaydsl_gemm_"))
        elif fn.name not in ("mm0", "mm1"):
            assert fn.name.split(".")[0] in ("mm0", "mm1") and fn.linkage == "internal"


def test_chunks_in_any_split_give_identical_results():
    kernels = build([
        ("matmul", {}, (67, 45), (45, 70)),
        ("dense", {}, (9, 40), (150, 40)),
        ("batch_matmul", {"transpose_a": True}, (3, 20, 33), (3, 20, 17)),
        ("conv2d", {"padding": 1, "strides": 2}, (3, 4, 11, 9), (6, 4, 3, 3)),
    ])
    rng = np.random.default_rng(1)
    for kern in kernels:
        a = rng.standard_normal(kern.sa).astype(np.float32)
        b = rng.standard_normal(kern.sb).astype(np.float32)
        extent = kern.info.parallel_extent
        whole = kern(a, b, splits=[(0, extent)])
        assert not np.isnan(whole).any()
        for parts in (2, 3, 5, extent):
            bounds = runtime.split(extent, parts)
            np.testing.assert_array_equal(kern(a, b, splits=bounds[::-1]), whole)
        np.testing.assert_array_equal(kern(a, b, splits=[(0, 0), (extent, extent)] +
                                           [(i, i + 1) for i in range(extent)]), whole)
        np.testing.assert_array_equal(kern(a, b), whole)  # the thread pool


# ---- the GEMM core compiled ahead (contraction.compile_core_ahead) ------------------------------

@pytest.mark.parametrize("text, expected", [
    # a float32 dense of static shapes, in a global the entry calls: the core
    ('def @f(%x: Tensor[(64, 784), float32], %w: Tensor[(512, 784), float32]) {\n'
     '  dense(%x, %w)\n}\n'
     'def @main(%x: Tensor[(64, 784), float32], %w: Tensor[(512, 784), float32]) {\n'
     '  relu(@f(%x, %w))\n}', True),
    # no contraction; an int8 one (igemm.py's, not the core); symbolic shapes (generic kernels)
    ('def @main(%x: Tensor[(4, 4), float32]) { exp(%x) }', False),
    ('def @main(%x: Tensor[(4, 4), int8], %w: Tensor[(4, 4), int8]) {\n'
     '  dense(%x, %w, out_dtype="int32")\n}', False),
    ('def @main(%x: Tensor[(?, 4), float32], %w: Tensor[(4, 4), float32]) {\n'
     '  dense(%x, %w)\n}', False),
])
def test_the_core_is_compiled_ahead_for_a_float_gemm_only(monkeypatch, text, expected):
    from relaydsl.backend.llvm.templates import contraction
    from relaydsl.ir.parser import parse
    from relaydsl.typing import infer_types

    started = []
    monkeypatch.setattr(jit, "compile_parallel", lambda jobs, share=True: started.append(
        ([job.key for job in jobs], share)) or True)
    monkeypatch.setattr(gemm_library, "_LOADED", {})  # (not loaded by an earlier test)
    assert contraction.compile_core_ahead(infer_types(parse(text)), "main") is expected
    if expected:
        vl = contraction.default_blocking().vl
        (keys, share), = started
        assert not share and keys[-1] == gemm_library._key(gemm_library.core_parts(vl)[1])
        # what the dense's kernel calls is what the child compiles: the core, its micro-kernels
        # (a batch of 64: AlterOpLayout computes it as matmul(w, x^T), transposed)
        module = ir.Module("dense")
        shapes = [(512, 784), (784, 64), (512, 64)]
        *inputs, out = [TensorType(s, "float32") for s in shapes]
        template = contraction._template_for(lookup("matmul"), full_attrs("matmul", {}), inputs,
                                             out)
        assert isinstance(template, contraction.Template)
        template.emit(module, "dense_kernel")
        declared = {gemm_library._key(part) for part in gemm_library.declared_parts(module)}
        assert declared == set(keys)
    else:
        assert not started
