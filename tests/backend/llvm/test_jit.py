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
