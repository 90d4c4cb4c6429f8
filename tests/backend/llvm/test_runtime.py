"""The native runtime: the thread pool covers every iteration exactly once, however it is called."""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

import numpy as np
import pytest

from relaydsl import settings
from relaydsl.backend.llvm import jit, runtime
from tests.backend.llvm.helpers import run_with_sigints

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


# ---- Ctrl-C: relaydsl_call_interruptible ----------------------------------------------------

SIGINT_SCRIPT = '''
import signal, sys, time
import numpy as np
from relaydsl import Float, Tensor, relay

@relay
def endless(x: Tensor[Float, (4,)]) -> Tensor[Float, (4,)]:
    while relay.sum(x) > -1.0:
        x = x * 0.5 + 1.0
    return x

@relay
def halve(x: Tensor[Float, (4,)]) -> Tensor[Float, (4,)]:
    while relay.sum(x) > 1.0:
        x = x * 0.5
    return x

x = np.ones(4, np.float32)
assert endless.build().program.path == "native"  # the loop runs natively
np.testing.assert_array_equal(halve(x), np.full(4, 0.25, np.float32))

def wait_for_sigint(what):
    print("ready", what, flush=True)
    try:
        if what == "loop":
            endless(x)
        else:
            time.sleep(30)
    except KeyboardInterrupt:
        print("stopped", what, flush=True)
'''


def test_ctrl_c_stops_an_endless_loop_on_llvm(tmp_path):
    # issue 11, item 9: SIGINT was ignored while a loop ran natively
    start = time.monotonic()
    lines, stderr, code = run_with_sigints(SIGINT_SCRIPT + "print('ready', flush=True)\n"
                                                           "endless(x)\n", tmp_path)
    assert lines == ["ready"]
    assert code == -signal.SIGINT and stderr.rstrip().endswith("KeyboardInterrupt"), stderr
    assert time.monotonic() - start < 30


def test_after_ctrl_c_pythons_sigint_handling_is_back(tmp_path):
    lines, stderr, code = run_with_sigints(SIGINT_SCRIPT + '''
wait_for_sigint("loop")
np.testing.assert_array_equal(halve(x), np.full(4, 0.25, np.float32))  # runs on
wait_for_sigint("sleep")  # Python's own handler is installed again: the sleep is stopped
seen = []
signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
wait_for_sigint("loop")  # a Python handler is called; the loop cut short still raises
print("handled", seen == [signal.SIGINT], flush=True)
''', tmp_path)
    assert code == 0, stderr
    assert lines == ["ready loop", "stopped loop", "ready sleep", "stopped sleep",
                     "ready loop", "stopped loop", "handled True"]


def test_a_child_forked_during_an_interruptible_run_gets_pythons_sigint_handling(tmp_path):
    # the native handler is installed while the main thread runs a loop; a child forked then
    # by another thread must not inherit it (Ctrl-C would never reach its Python)
    lines, stderr, code = run_with_sigints(SIGINT_SCRIPT + '''
import os, threading

def fork_child():
    time.sleep(0.5)  # the main thread is inside the loop
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)
            os._exit(1)
        except KeyboardInterrupt:
            os._exit(0)
    print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)

threading.Thread(target=fork_child).start()
wait_for_sigint("loop")
''', tmp_path)
    assert code == 0, stderr
    assert lines == ["ready loop", "child 0", "stopped loop"]
