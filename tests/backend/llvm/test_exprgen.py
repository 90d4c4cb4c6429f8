"""te expressions as LLVM values (backend/llvm/exprgen.py): one expression emitted on
scalars (a stage's loop body) and on <16 x T> vectors (a template's epilogue in
registers, epilogue.py's emitter over the same arithmetic) gives the same bits, and NumPy's
values: float to int casts saturating at int32 then wrapping, floor division by zero, shifts
past the width, NaN through max/min, selects and logic. (The scalar path's every op is
checked against JAX in test_codegen.py and test_registry_walk.py.)"""
from __future__ import annotations

import ctypes

import llvmlite.ir as ir
import numpy as np
import pytest

from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.epilogue import EpilogueEmitter, register_epilogue
from relaydsl.backend.llvm.exprgen import Ctx, ExprEmitter, memory_type
from relaydsl.te import expr as E
from relaydsl.te.tensor import Tensor, compute, placeholder

LANES = 16
SPECIAL = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 127.5, -128.5, 2.5, -2.5, 0.0, -0.0,
                    3e9, -3e9, 255.49, 0.5, 1e-3], np.float32)


def _to_int(x: np.ndarray, dtype: str) -> np.ndarray:
    """The backend's float to int cast: saturated at the int32 bounds (NaN 0), wrapped."""
    wide = np.nan_to_num(np.clip(x.astype(np.float64), -2.0**31, 2.0**31 - 1), nan=0)
    return wide.astype(np.int32).astype(dtype)


FLOAT_CASES = {  # name -> (te body of a[i], b[i], NumPy of a, b)
    "float32 to int8": (lambda x, y: E.cast("int8", x), lambda x, y: _to_int(x, "int8")),
    "float32 to int32": (lambda x, y: E.cast("int32", x), lambda x, y: _to_int(x, "int32")),
    "max and min keep NaN": (
        lambda x, y: E.minimum(E.maximum(x, y), 7.0),
        lambda x, y: np.minimum(np.maximum(x, y), np.float32(7))),
    "select on a compare": (
        lambda x, y: E.select(x < y, x * 2.0, y - x),
        lambda x, y: np.where(x < y, x * np.float32(2), y - x)),
    "round half to even, then int16": (
        lambda x, y: E.cast("int16", E.call("round", x * 0.25)),
        lambda x, y: _to_int(np.round(x * np.float32(0.25)), "int16")),
}


INT_CASES = {
    "floor division and modulo, by zero 0": (
        lambda x, y: x // y + x % (y + 1),
        lambda x, y: np.where(y == 0, 0, x // np.where(y == 0, 1, y))
        + np.where(y + 1 == 0, 0, x % np.where(y + 1 == 0, 1, y + 1))),
    "shifts past the width": (
        lambda x, y: E.call("right_shift", x, y) + E.call("left_shift", x, y),
        lambda x, y: np.where((y >= 0) & (y < 32), x >> np.clip(y, 0, 31), np.where(x < 0, -1, 0))
        + np.where((y >= 0) & (y < 32), x << np.clip(y, 0, 31), 0)),
    "not, and, to bool then int8": (
        lambda x, y: E.cast("int8", E.cast("bool", x) & ~(y > 3)),
        lambda x, y: ((x != 0) & ~(y > 3)).astype(np.int8)),
    "int32 to int8 wraps, abs and sign": (
        lambda x, y: E.cast("int8", E.call("abs", x) + E.call("sign", y)),
        lambda x, y: (np.abs(x) + np.sign(y)).astype(np.int8)),
}


def _function(module: ir.Module, name: str, t: Tensor, a: Tensor, b: Tensor, vector: bool
              ) -> None:
    """``void @name(T* out, A* a, B* b)``: t's body on 16 elements: as 16 scalars by the
    ExprEmitter (a stage's loop body), or as one vector of 16 lanes by the epilogue's
    emitter (its constants splat), a the template's result and b a lane read."""
    types = [memory_type(x.dtype) for x in (t, a, b)]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [x.as_pointer() for x in types]),
                     name)
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    i64 = ir.IntType(64)

    def load(k: int, start: int, lanes: int) -> ir.Value:
        ptr = bld.gep(fn.args[k], [ir.Constant(i64, start)])
        if lanes > 1:
            ptr = bld.bitcast(ptr, ir.VectorType(types[k], lanes).as_pointer())
        return bld.load(ptr, align=1)

    assert t.body is not None
    if vector:
        epilogue = register_epilogue(t, a, set(), 0)
        assert epilogue is not None
        emitter = EpilogueEmitter(module, bld, {}, epilogue)
        emitter.begin_row([])
        values = [(0, emitter.apply(load(1, 0, LANES), lambda x: load(2, 0, LANES)))]
    else:
        emitter = ExprEmitter(module, bld, bld, {}, set())
        reads = [n for n in E.post_order(t.body) if isinstance(n, E.TensorRead)]
        values = []
        for start in range(LANES):
            ctx = Ctx({}, {})
            for read in reads:
                ctx.memo[(read, "v")] = load(1 if read.tensor is a else 2, start, 1)
            values.append((start, emitter.value(t.body, ctx)))
    for start, v in values:
        ptr = bld.gep(fn.args[0], [ir.Constant(i64, start)])
        bld.store(v, bld.bitcast(ptr, v.type.as_pointer()), align=1)
    bld.ret_void()


def _run(dtype_a: str, dtype_b: str, body, x: np.ndarray, y: np.ndarray, key: str):
    a, b = placeholder((LANES,), dtype_a, "a"), placeholder((LANES,), dtype_b, "b")
    t = compute((LANES,), lambda i: body(a[i], b[i]))
    module = ir.Module(name="exprgen_test")
    module.triple = jit.host_target().triple
    _function(module, "vector", t, a, b, True)
    _function(module, "scalar", t, a, b, False)
    lib = jit.compile_ir(str(module), key=f"exprgen-test-{key}", use_disk_cache=False)
    outs = []
    for name in ("vector", "scalar"):
        out = np.zeros(LANES, t.dtype)
        lib.function(name, None, [ctypes.c_void_p] * 3)(out.ctypes.data, x.ctypes.data,
                                                        y.ctypes.data)
        outs.append(out)
    return outs


@pytest.mark.parametrize("name", list(FLOAT_CASES))
def test_float_expressions_on_vectors_as_on_scalars_and_numpy(name):
    body, numpy = FLOAT_CASES[name]
    x = SPECIAL
    y = np.roll(SPECIAL, 5)
    vector, scalar = _run("float32", "float32", body, x, y, name)
    np.testing.assert_array_equal(vector.view(np.uint8), scalar.view(np.uint8))
    with np.errstate(invalid="ignore", over="ignore"):
        want = numpy(x, y)
    np.testing.assert_array_equal(vector, want)


@pytest.mark.parametrize("name", list(INT_CASES))
def test_integer_expressions_on_vectors_as_on_scalars_and_numpy(name):
    body, numpy = INT_CASES[name]
    rng = np.random.default_rng(0)
    x = np.concatenate([[-2**31, -2**31, 7, -7], rng.integers(-1000, 1000, LANES - 4)])
    y = np.array([-1, 0, 0, 0, 33, 32, 31, -3, 1, 2, 3, 4, 5, -1, 6, 7])
    x, y = x.astype(np.int32), y.astype(np.int32)
    vector, scalar = _run("int32", "int32", body, x, y, name)
    np.testing.assert_array_equal(vector, scalar)
    with np.errstate(all="ignore"):
        want = numpy(x.astype(np.int64), y.astype(np.int64)).astype(vector.dtype)
    np.testing.assert_array_equal(vector, want)
