"""The native runtime: the thread pool covers every iteration exactly once, however it is called."""
from __future__ import annotations

import ctypes
import os
import threading
import time

import numpy as np
import pytest

from relaydsl import settings
from relaydsl.backend.llvm import jit, runtime

# count(ctx, begin, end): ctx[i] += 1 for i in [begin, end).
# nested(ctx, begin, end): for each i, a parallel loop of count over the 8 counters at ctx + 8i.
# record(ctx): appends its id to a log: ctx = {i64* log, i64* length, i64 id}.
_IR = """
declare void @relaydsl_parallel_for(ptr, ptr, i64)

define void @count(ptr %ctx, i64 %b, i64 %e) {
entry:
  br label %loop
loop:
  %i = phi i64 [%b, %entry], [%n, %body]
  %more = icmp slt i64 %i, %e
  br i1 %more, label %body, label %done
body:
  %p = getelementptr i64, ptr %ctx, i64 %i
  %v = load i64, ptr %p
  %v1 = add i64 %v, 1
  store i64 %v1, ptr %p
  %n = add i64 %i, 1
  br label %loop
done:
  ret void
}

define void @nested(ptr %ctx, i64 %b, i64 %e) {
entry:
  br label %loop
loop:
  %i = phi i64 [%b, %entry], [%n, %body]
  %more = icmp slt i64 %i, %e
  br i1 %more, label %body, label %done
body:
  %off = mul i64 %i, 8
  %row = getelementptr i64, ptr %ctx, i64 %off
  call void @relaydsl_parallel_for(ptr @count, ptr %row, i64 8)
  %n = add i64 %i, 1
  br label %loop
done:
  ret void
}

define void @record(ptr %ctx) {
  %logp = load ptr, ptr %ctx
  %lenslot = getelementptr ptr, ptr %ctx, i64 1
  %lenp = load ptr, ptr %lenslot
  %idslot = getelementptr ptr, ptr %ctx, i64 2
  %id = load i64, ptr %idslot
  %len = load i64, ptr %lenp
  %at = getelementptr i64, ptr %logp, i64 %len
  store i64 %id, ptr %at
  %len1 = add i64 %len, 1
  store i64 %len1, ptr %lenp
  ret void
}
"""

_PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


@pytest.fixture(scope="module")
def lib():
    return jit.compile_ir(_IR, key="test-runtime-v1", use_disk_cache=False)


@pytest.fixture(scope="module")
def parallel_for():
    return _PARALLEL_FOR(jit.runtime_function("relaydsl_parallel_for"))


def test_the_pool_uses_every_usable_core():
    assert jit.runtime_threads() == settings.num_threads()


@pytest.mark.parametrize("extent", [0, 1, 2, 3, 7, 1000, 100_003])
def test_every_iteration_runs_exactly_once(lib, parallel_for, extent):
    counts = np.zeros(max(extent, 1), np.int64)
    for _ in range(50):
        parallel_for(lib.address("count"), counts.ctypes.data, extent)
    assert (counts[:extent] == 50).all()
    if extent == 0:
        assert counts[0] == 0


def test_after_the_workers_fall_asleep(lib, parallel_for):
    counts = np.zeros(64, np.int64)
    for _ in range(5):
        time.sleep(0.01)  # far past the spin phase: the workers wait on the condition
        parallel_for(lib.address("count"), counts.ctypes.data, 64)
    assert (counts == 5).all()


def test_a_parallel_loop_inside_a_parallel_loop_runs_inline(lib, parallel_for):
    counts = np.zeros((16, 8), np.int64)
    for _ in range(20):
        parallel_for(lib.address("nested"), counts.ctypes.data, 16)
    assert (counts == 20).all()


def test_calls_from_two_python_threads_at_once(lib, parallel_for):
    a, b = np.zeros(5000, np.int64), np.zeros(5000, np.int64)

    def hammer(counts):
        for _ in range(200):
            parallel_for(lib.address("count"), counts.ctypes.data, len(counts))

    threads = [threading.Thread(target=hammer, args=(c,)) for c in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (a == 200).all() and (b == 200).all()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:os.fork")  # JAX warns of its threads; the child never uses JAX
def test_a_forked_child_runs_parallel_loops_on_its_own_thread(lib, parallel_for):
    parallel_for(lib.address("count"), np.zeros(8, np.int64).ctypes.data, 8)  # pool started
    pid = os.fork()
    if pid == 0:  # the child has no workers: the loop must still cover everything
        counts = np.zeros(1000, np.int64)
        parallel_for(lib.address("count"), counts.ctypes.data, 1000)
        os._exit(0 if (counts == 1).all() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_the_runtime_source_parses_and_verifies_for_the_host():
    import llvmlite.binding as llvm

    llvm.parse_assembly(runtime.SOURCE.read_text())  # on its own: the hint only declared
    module = llvm.parse_assembly(runtime.runtime_ir())
    module.verify()
    defined = {f.name for f in module.functions if not f.is_declaration}
    assert set(runtime.EXPORTS) | {"relaydsl_spin_hint"} <= defined


def test_python_parallel_for_covers_the_range_and_reports_errors():
    seen = []
    runtime.parallel_for(lambda b, e: seen.append((b, e)), 10)
    assert sorted(i for b, e in seen for i in range(b, e)) == list(range(10))

    def fail(b, e):
        raise ValueError("chunk failed")

    with pytest.raises(ValueError, match="chunk failed"):
        runtime.parallel_for(fail, 10)
