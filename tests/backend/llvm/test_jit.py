"""The JIT across fork(): children forked while other threads run and compile code."""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest

from relaydsl import Float, Tensor, relay

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
    pytest.mark.filterwarnings("ignore:os.fork"),  # JAX warns of its threads; children skip JAX
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded"),
]

X = np.linspace(-1, 1, 32 * 32, dtype=np.float32).reshape(32, 32)


@relay
def step(x: Tensor[Float, (32, 32)]) -> Tensor[Float, (32, 32)]:
    return relay.tanh(x @ x) + relay.exp(x)


def expected_step(x: np.ndarray) -> np.ndarray:
    return np.tanh(x.astype(np.float64) @ x) + np.exp(x.astype(np.float64))


def scaled(c: float):
    """A function not compiled yet (a new constant, a new kernel)."""
    @relay
    def f(x: Tensor[Float, (32, 32)]) -> Tensor[Float, (32, 32)]:
        return relay.sigmoid(x @ x) * c
    return f


def child_work(n: int) -> bool:
    """What a forked child does: run a compiled function and compile and run a new one."""
    ok = np.allclose(step(X), expected_step(X), rtol=1e-4, atol=1e-5)
    c = 1000.0 + n
    out = scaled(c)(X)
    return ok and np.allclose(out, c / (1 + np.exp(-(X.astype(np.float64) @ X))), rtol=1e-4)


class Busy:
    """Threads that keep the JIT busy: one calls a compiled function, one compiles."""

    def __init__(self):
        self.stop = threading.Event()
        self.calls = self.compiles = 0
        self.threads = [threading.Thread(target=self.call, daemon=True),
                        threading.Thread(target=self.compile, daemon=True)]

    def call(self) -> None:
        while not self.stop.is_set():
            step(X)
            self.calls += 1

    def compile(self) -> None:
        while not self.stop.is_set():
            scaled(float(self.compiles) + 0.5)(X)
            self.compiles += 1

    def __enter__(self) -> "Busy":
        for t in self.threads:
            t.start()
        while not (self.calls and self.compiles):
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


@pytest.fixture
def busy(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))  # compiled, not read from disk
    step(X)
    with Busy() as b:
        yield b


def test_children_forked_while_threads_run_and_compile_code_do_not_hang(busy):
    # issue 11, item 8: a lock held at the fork (the kernel cache's, llvmlite's)
    # deadlocked the child
    statuses = []
    for n in range(6):
        time.sleep(0.05)  # forks land at different points of the threads' work
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a hung child ends with SIGALRM
            os._exit(0 if child_work(n) else 1)
        statuses.append(wait(pid, timeout=60))
    assert statuses == [0] * 6


def test_a_fork_pool_started_while_threads_run_and_compile_code_works(busy):
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map_async(child_work, range(10, 14)).get(timeout=60) == [True] * 4


def wait(pid: int, timeout: float) -> int | str:
    """The child's exit status; a hang is killed and reported."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


# ---- compiling on two cores, here and in a forked child (jit.compile_parallel) -------------------

needs_two_cores = pytest.mark.skipif(
    __import__("relaydsl").settings.usable_cores() < 2, reason="a child compiles only with 2 cores")


def add_ir(tag: str, k: int) -> str:
    """A module defining ``i64 @add_<tag>_<k>(i64)``: x + k (fresh symbols per test)."""
    from relaydsl.backend.llvm import jit

    return (f'target triple = "{jit.host_target().triple}"\n'
            f"define i64 @add_{tag}_{k}(i64 %x) {{\n  %y = add i64 %x, {k}\n  ret i64 %y\n}}\n")


def add_job(tag: str, k: int):
    from relaydsl.backend.llvm import jit

    return jit.Job(f"parallel-test|{tag}|{k}", lambda: add_ir(tag, k))


def call_add(tag: str, k: int) -> int:
    import ctypes

    from relaydsl.backend.llvm import jit

    lib = jit.compile_ir(add_ir(tag, k), f"parallel-test|{tag}|{k}")
    return lib.function(f"add_{tag}_{k}", ctypes.c_int64, [ctypes.c_int64])(41)


def count_compilations_here(monkeypatch) -> list[int]:
    """A list growing by one each time this process (not a child) compiles a module."""
    from relaydsl.backend.llvm import jit

    parent, here = os.getpid(), []
    real = jit._compile_object
    monkeypatch.setattr(jit, "_compile_object", lambda *a: (
        here.append(1) if os.getpid() == parent else None, real(*a))[1])
    return here


@needs_two_cores
def test_modules_compiled_by_two_processes_are_all_loaded_without_compiling_again(
        tmp_path, monkeypatch):
    from relaydsl.backend.llvm import jit

    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    jit.runtime_threads()  # the engine and its runtime module exist before we count
    tag = f"shared{os.getpid()}"
    here = count_compilations_here(monkeypatch)
    assert jit.compile_parallel([add_job(tag, k) for k in range(1, 5)])
    compiled_in_parallel = len(here)
    assert compiled_in_parallel <= 4 and not jit._READY.keys() - {
        jit.object_path(add_job(tag, k).key) for k in range(1, 5)}
    assert [call_add(tag, k) for k in range(1, 5)] == [42, 43, 44, 45]
    assert len(here) == compiled_in_parallel  # loaded: what this process or the child compiled
    assert not jit._AHEAD and not jit._READY  # the child was reaped; every object was loaded
    # entries on disk are not compiled again, in a child or here
    assert not jit.compile_parallel([add_job(tag, k) for k in range(1, 5)])



@needs_two_cores
def test_jobs_compiled_ahead_by_a_child_alone_are_loaded_and_a_finished_child_is_reaped(
        tmp_path, monkeypatch):
    from relaydsl.backend.llvm import jit

    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    jit.runtime_threads()
    tag = f"ahead{os.getpid()}"
    here = count_compilations_here(monkeypatch)
    # one job is enough: this process goes on with other work meanwhile
    assert jit.compile_parallel([add_job(tag, 1)], share=False)
    assert jit.compile_parallel([add_job(tag, k) for k in (2, 3)], share=False)
    assert not here and not jit._READY
    paths = [jit.object_path(add_job(tag, k).key) for k in (1, 2, 3)]
    pids = {jit._AHEAD[path] for path in paths}
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    # a later call reaps the finished children: no zombie is left
    while not jit.compile_parallel([]) and time.monotonic() < deadline and not all(
            jit._AHEAD[path] == jit._FINISHED for path in paths):
        time.sleep(0.01)
    assert all(jit._AHEAD[path] == jit._FINISHED for path in paths)
    assert all(path.exists() for path in paths)
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    before = dict(jit.stats)
    assert [call_add(tag, k) for k in (1, 2, 3)] == [42, 43, 44]
    assert not here and not jit._AHEAD  # loaded, counted as compiled by this build
    assert jit.stats["compiled"] == before["compiled"] + 3


def jobs_ahead_with_a_slow_child(monkeypatch, tmp_path, tag: str) -> list[int]:
    """Jobs 1-3 of `tag` given to a child compiling ahead alone, which takes job 1 and
    sleeps 2 s before compiling it (later children and this process compile at once);
    returns once it has taken it, the list ``count_compilations_here`` grows."""
    from relaydsl.backend.llvm import jit

    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    jit.runtime_threads()
    here = count_compilations_here(monkeypatch)
    parent, real, started = os.getpid(), jit._compile_object, tmp_path / "started"

    def compile_object(*args):
        if os.getpid() != parent and not started.exists():
            started.touch()
            time.sleep(2)
        return real(*args)

    monkeypatch.setattr(jit, "_compile_object", compile_object)
    assert jit.compile_parallel([add_job(tag, k) for k in (1, 2, 3)], share=False)
    deadline = time.monotonic() + 10
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return here


@needs_two_cores
def test_a_load_compiles_the_jobs_a_child_compiling_ahead_has_not_taken_instead_of_waiting(
        tmp_path, monkeypatch):
    from relaydsl.backend.llvm import jit

    tag = f"help{os.getpid()}"
    here = jobs_ahead_with_a_slow_child(monkeypatch, tmp_path, tag)
    start = time.monotonic()
    assert call_add(tag, 3) == 44  # jobs 2 and 3 compiled here, not waited for
    assert time.monotonic() - start < 1.5 and len(here) == 2
    assert [call_add(tag, k) for k in (1, 2)] == [42, 43]  # 1 from the child, 2 kept here
    assert len(here) == 2 and not jit._AHEAD and not jit._READY and not jit._QUEUES


@needs_two_cores
def test_a_shared_queue_takes_over_the_jobs_a_child_compiling_ahead_has_not_started(
        tmp_path, monkeypatch):
    from relaydsl.backend.llvm import jit

    tag = f"takeover{os.getpid()}"
    here = jobs_ahead_with_a_slow_child(monkeypatch, tmp_path, tag)
    start = time.monotonic()
    # jobs 2 and 3 join 4 and 5 in the queue this process shares with a second child
    assert jit.compile_parallel([add_job(tag, k) for k in (4, 5)])
    assert not jit._QUEUES and time.monotonic() - start < 1.5
    assert [call_add(tag, k) for k in (2, 3, 4, 5)] == [43, 44, 45, 46]
    assert time.monotonic() - start < 1.5 and 1 <= len(here) <= 4
    assert call_add(tag, 1) == 42  # the first child's, once it has slept
    assert not jit._AHEAD and not jit._READY


def test_fewer_than_two_jobs_start_no_child(tmp_path, monkeypatch):
    from relaydsl.backend.llvm import jit

    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    tag = f"single{os.getpid()}"
    assert not jit.compile_parallel([add_job(tag, 1)]) and not jit._AHEAD and not jit._READY
    assert call_add(tag, 1) == 42


@needs_two_cores
@pytest.mark.parametrize("failure", ["raises", "hangs"])
def test_the_parent_compiles_what_a_failed_or_stuck_child_did_not(tmp_path, monkeypatch, failure):
    from relaydsl.backend.llvm import jit

    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "AHEAD_TIMEOUT", 0.5)
    tag, parent = f"{failure}{os.getpid()}", os.getpid()
    real = jit._compile_object

    def in_the_child_only(*args):
        if os.getpid() != parent:
            if failure == "raises":
                raise RuntimeError("the child fails")
            time.sleep(30)
        return real(*args)

    monkeypatch.setattr(jit, "_compile_object", in_the_child_only)
    assert jit.compile_parallel([add_job(tag, k) for k in (2, 3, 4)])
    start = time.monotonic()
    assert [call_add(tag, k) for k in (2, 3, 4)] == [43, 44, 45]
    assert time.monotonic() - start < 10 and not jit._AHEAD and not jit._READY


def test_a_job_failing_here_raises_where_it_is_loaded(tmp_path, monkeypatch):
    from relaydsl.backend.llvm import jit

    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit.settings, "usable_cores", lambda: 2)
    tag = f"broken{os.getpid()}"
    broken = jit.Job(f"parallel-test|{tag}|0", lambda: "define i64 @broken( {")
    jit.compile_parallel([broken, add_job(tag, 1)])
    assert call_add(tag, 1) == 42
    with pytest.raises(RuntimeError, match="LLVM IR parsing error"):
        jit.load_or_compile(broken.key, ["broken"], broken.build_ir)
    assert not jit._AHEAD and not jit._READY
