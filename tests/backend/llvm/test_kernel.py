"""The Kernel API: argument checks, run / bind, the in-memory and on-disk caches, parallel
stages."""
from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

from relaydsl.backend.llvm import jit, kernel as K
from relaydsl.backend.llvm.kernel import address, compile_primitive, compile_primitives
from relaydsl.ir import Tuple
from relaydsl.ir.expr import const
from tests.backend.llvm.helpers import call, primitive, randn

F = "float32"
ROOT = pathlib.Path(__file__).resolve().parents[3]


def _fn(n=4):
    return primitive([((3, n), F), ((n,), F)],
                     lambda x, y: Tuple([call("add", x, y), call("sum", call("exp", x), axis=1)]))


@pytest.fixture(scope="module")
def kern():
    return compile_primitive(_fn())


def test_types_and_call(kern):
    assert [str(t) for t in kern.input_types] == ["Tensor[(3, 4), float32]",
                                                  "Tensor[(4,), float32]"]
    assert len(kern.output_types) == 2 and kern.returns_tuple
    x, y = randn(3, 4), randn(4)
    s, t = kern(x, y)
    np.testing.assert_allclose(s, x + y)
    np.testing.assert_allclose(t, np.exp(x).sum(1), rtol=1e-6)


@pytest.mark.parametrize("bad, message", [
    (lambda x, y: (x.astype("float64"), y),
     r"input 0: expected .*Tensor\[\(3, 4\), float32\], got .*float64"),
    (lambda x, y: (x[:, :3], y), r"input 0: expected .*\(3, 4\).*got Tensor\[\(3, 3\)"),
    (lambda x, y: (np.asfortranarray(np.ones((3, 4), F)), y), r"input 0: .*C-contiguous"),
    (lambda x, y: (x, np.ones(8, F)[::2]), r"input 1: .*C-contiguous"),
    (lambda x, y: (x.tolist(), y), r"input 0: expected .*got list"),
    (lambda x, y: (x,), r"takes 2 input\(s\), got 1"),
    (lambda x, y: (x, y.astype(">f4")), r"input 1: expected"),
])
def test_wrong_inputs_raise_type_error(kern, bad, message):
    with pytest.raises(TypeError, match=message):
        kern(*bad(randn(3, 4), randn(4)))


def test_wrong_outputs_raise_type_error(kern):
    x, y = randn(3, 4), randn(4)
    good = [np.empty((3, 4), F), np.empty(3, F)]
    ro = np.empty(3, F)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="output 1: expected a writeable"):
        kern.run([x, y], [good[0], ro])
    with pytest.raises(TypeError, match=r"output 0: expected .*\(3, 4\), float32"):
        kern.run([x, y], [np.empty((4, 3), F), good[1]])
    with pytest.raises(TypeError, match="output 0 overlaps input 0"):
        kern.run([x, y], [x, good[1]])


def test_bind_runs_with_current_contents_and_is_cheap(kern):
    x, y = randn(3, 4), randn(4)
    outs = [np.empty((3, 4), F), np.empty(3, F)]
    run = kern.bind([x, y], outs)
    run()
    np.testing.assert_allclose(outs[0], x + y)
    x += 1  # in place: the binding sees the new contents
    run()
    np.testing.assert_allclose(outs[0], x + y)
    for _ in range(100):
        run()
    n = 20000
    t = time.perf_counter()
    for _ in range(n):
        run()
    per_call = (time.perf_counter() - t) / n * 1e6
    print(f"\nbound call of a small 2-stage kernel: {per_call:.2f} us")
    assert per_call < 50


def test_equal_function_is_an_in_memory_hit():
    f1, f2 = _fn(), _fn()  # structurally equal, different objects
    k1 = compile_primitive(f1)
    before = dict(K.stats)
    k2, k3 = compile_primitives([f2, _fn()])
    assert k1 is k2 is k3
    assert K.stats["modules"] == before["modules"] and K.stats["hits"] == before["hits"] + 2


def test_equal_functions_in_one_batch_compile_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    before = dict(K.stats)
    a, b = compile_primitives([_fn(11), _fn(11)])
    assert a is b and K.stats["functions"] == before["functions"] + 1


def test_a_batch_larger_than_a_module_is_compiled_in_several_and_agrees(tmp_path, monkeypatch):
    import jax.numpy as jnp

    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(K, "_GROUP_INSTRUCTIONS", 1)  # a module per kernel
    before = dict(K.stats)
    sizes = (21, 22, 23)  # sizes no other test compiles (the damaged-cache ones use 13, 17)
    kernels = compile_primitives([_fn(n) for n in sizes])
    assert K.stats["modules"] == before["modules"] + 3
    assert not jit._AHEAD and not jit._READY  # every module compiled (here or by a child) loaded
    for n, k in zip(sizes, kernels):
        x, y = randn(3, n), randn(n, seed=1)
        s, t = k(x, y)
        np.testing.assert_allclose(s, jnp.add(x, y), rtol=1e-6)
        np.testing.assert_allclose(t, jnp.sum(jnp.exp(x), axis=1), rtol=1e-5)


def test_fresh_process_loads_from_disk_without_llvm(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    before = jit.stats["compiled"]
    compile_primitive(_fn(7))
    assert jit.stats["compiled"] == before + 1
    assert list((tmp_path / "kernels").glob("*.o"))
    script = (
        "import numpy as np\n"
        "from relaydsl.backend.llvm import jit\n"
        "from relaydsl.backend.llvm.kernel import compile_primitive\n"
        "from tests.backend.llvm.test_kernel import _fn\n"
        "k = compile_primitive(_fn(7))\n"
        "x, y = np.ones((3, 7), 'float32'), np.arange(7, dtype='float32')\n"
        "s, t = k(x, y)\n"
        "assert np.allclose(s, x + y) and np.allclose(t, 7 * np.e)\n"
        "print(jit.stats['compiled'], jit.stats['disk_hits'])\n"
    )
    env = {**os.environ, "RELAYDSL_CACHE_DIR": str(tmp_path), "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"]


def test_large_stages_run_in_parallel_and_agree():
    fn = primitive([((512, 1024), F), ((1024,), F)],
                   lambda x, b: Tuple([call("tanh", call("add", x, b)),
                                       call("sum", call("exp", x), axis=0),
                                       call("max", x, axis=1)]))
    k = compile_primitive(fn)
    assert any(parallel for _, _, parallel, _ in k.stages)
    x, b = randn(512, 1024) * 0.5, randn(1024)
    t, s, m = k(x, b)
    np.testing.assert_allclose(t, np.tanh(x + b), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(s, np.exp(x.astype(np.float64)).sum(0), rtol=1e-5)
    np.testing.assert_array_equal(m, x.max(1))


def test_empty_and_scalar_kernels():
    fn = primitive([((0, 3), F), ((), F)],
                   lambda x, s: Tuple([call("add", x, s), call("multiply", s, const(2.0))]))
    k = compile_primitive(fn)
    e, d = k(np.empty((0, 3), F), np.array(1.5, F))
    assert e.shape == (0, 3) and d.shape == () and d == 3.0


def test_non_primitive_parameters_are_rejected():
    from relaydsl.errors import IRError
    from relaydsl.ir import Function, Kind, TensorType, TypeVar, Var
    from relaydsl.typing import infer_type

    x = Var("x", TensorType((TypeVar("n", Kind.Shape),), F))
    fn = infer_type(Function([x], call("exp", x), attrs={"Primitive": 1}))
    with pytest.raises(IRError, match="static tensor type"):
        compile_primitive(fn)


@pytest.mark.parametrize("damage, n", [("truncate", 13), ("flip", 17)])
def test_a_damaged_cache_entry_is_recompiled_not_loaded(tmp_path, monkeypatch, damage, n):
    # issue 11: one truncated object (ELF magic intact) made every later process segfault
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    compile_primitive(_fn(n))  # a function this process has not compiled yet
    entries = list((tmp_path / "kernels").glob("*.o"))
    assert entries
    for path in entries:
        data = bytearray(path.read_bytes())
        if damage == "truncate":
            data = data[:len(data) // 2]
        else:
            data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    script = (
        "import numpy as np\n"
        "from relaydsl.backend.llvm import jit\n"
        "from relaydsl.backend.llvm.kernel import compile_primitive\n"
        "from tests.backend.llvm.test_kernel import _fn\n"
        f"k = compile_primitive(_fn({n}))\n"
        f"x, y = np.ones((3, {n}), 'float32'), np.arange({n}, dtype='float32')\n"
        "s, t = k(x, y)\n"
        f"assert np.allclose(s, x + y) and np.allclose(t, {n} * np.e)\n"
        "print(jit.stats['compiled'], jit.stats['disk_hits'])\n"
    )
    env = {**os.environ, "RELAYDSL_CACHE_DIR": str(tmp_path), "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split() == ["1", "0"]  # recompiled, nothing loaded from the damage


def test_a_cache_entry_that_does_not_load_is_recompiled(tmp_path, monkeypatch):
    # issue 11, item 7: an entry whose checksum holds but whose object is not the one
    # expected (here: it lacks the symbol) raised instead of being compiled again
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    key = "test-entry-that-does-not-load"
    wrong = jit._compile_object("define i64 @test_not_triple(i64 %x) {\n  ret i64 %x\n}", 1)
    jit._write_cached(jit.object_path(key), wrong)
    assert jit._read_cached(jit.object_path(key)) == wrong  # the checksum holds
    before = jit.stats["compiled"]
    lib = jit.compile_ir("define i64 @test_triple(i64 %x) {\n  %y = mul i64 %x, 3\n"
                         "  ret i64 %y\n}", key)
    assert lib.function("test_triple", ctypes.c_int64, [ctypes.c_int64])(14) == 42
    assert jit.stats["compiled"] == before + 1
    assert b"test_triple\0" in jit._read_cached(jit.object_path(key))  # the entry replaced


def test_address_is_the_first_elements_for_every_kind_of_array():
    """``address`` reads NumPy's data field directly (the fast way, found on this CPython and
    NumPy): it must agree with the array interface for views, offsets, empty, 0-d and
    read-only arrays."""
    assert K._DATA_OFFSET is not None
    base = np.arange(64, dtype=np.float64).reshape(8, 8)
    readonly = np.ones(3, np.float32)
    readonly.flags.writeable = False
    arrays = [base, base[2:], base[:, 3], base[1:, 1:], base.T, np.empty(0, np.int8),
              np.array(3.0), readonly, np.frombuffer(b"abcdefgh", np.uint8)[1:]]
    for a in arrays:
        assert address(a) == a.__array_interface__["data"][0]
