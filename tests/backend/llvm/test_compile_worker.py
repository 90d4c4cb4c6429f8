"""backend/llvm/compile_worker.py and jit.compile_ir_async: LLVM in a helper process."""
from __future__ import annotations

import ctypes
import time

import pytest

from relaydsl.backend.llvm import compile_worker, jit

I64 = ctypes.c_int64


def _twice(name: str) -> str:
    return f"define i64 @{name}(i64 %x) {{\n  %y = add i64 %x, %x\n  ret i64 %y\n}}\n"


def _worker() -> compile_worker.Worker:
    host = jit.host_target()
    return compile_worker.Worker(host.triple, host.cpu, host.features)


def _wait_started(worker: compile_worker.Worker, job: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while job not in worker._started and job not in worker._results:
        assert worker.alive and time.monotonic() < deadline, "the helper never took the job"
        time.sleep(0.01)


def test_the_helper_compiles_what_the_process_would():
    worker = _worker()
    try:
        job = worker.submit(_twice("cw_twice"), 3, True, False)
        _wait_started(worker, job)
        obj = worker.take(job)
        assert obj is not None and obj[:4] == b"\x7fELF"
        bad = worker.submit("define i64 @broken(", 3, True, False)
        _wait_started(worker, bad)
        assert worker.take(bad) is None  # a failure: the caller compiles (and reports) it
        assert worker.alive
    finally:
        worker.close()
    assert not worker.alive


def test_a_helper_for_another_target_gives_every_job_back():
    worker = compile_worker.Worker("no-such-triple", "none", "")
    try:
        job = worker.submit(_twice("cw_never"), 3, True, False)
        deadline = time.monotonic() + 60
        while worker.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not worker.alive and worker.take(job) is None
    finally:
        worker.close()


@pytest.mark.parametrize("use_worker", ["1", "0"])
def test_async_modules_load_in_request_order(tmp_path, monkeypatch, use_worker):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RELAYDSL_COMPILE_WORKER", use_worker)
    tag = f"order{use_worker}"
    before = jit.stats["compiled"]
    first = jit.compile_ir_async(_twice(f"{tag}_twice"), key=f"test-{tag}-a")
    second = jit.compile_ir_async(  # calls the first
        f"declare i64 @{tag}_twice(i64)\n"
        f"define i64 @{tag}_quad(i64 %x) {{\n  %y = call i64 @{tag}_twice(i64 %x)\n"
        f"  %z = call i64 @{tag}_twice(i64 %y)\n  ret i64 %z\n}}\n", key=f"test-{tag}-b")
    # a synchronous module loads only after both (it may call them)
    third = jit.compile_ir(
        f"declare i64 @{tag}_quad(i64)\n"
        f"define i64 @{tag}_octo(i64 %x) {{\n  %y = call i64 @{tag}_quad(i64 %x)\n"
        f"  %z = add i64 %y, %y\n  ret i64 %z\n}}\n", key=f"test-{tag}-c")
    assert first.library is not None and second.library is not None
    assert third.function(f"{tag}_octo", I64, [I64])(3) == 24
    assert second.result().function(f"{tag}_quad", I64, [I64])(5) == 20
    assert jit.stats["compiled"] == before + 3
    assert {jit.object_path(f"test-{tag}-{k}") for k in "abc"} == \
        set((tmp_path / "kernels").glob("*.o"))  # all cached, the helper's objects too


def test_the_setting_decides_and_otherwise_an_idle_core(monkeypatch):
    monkeypatch.setenv("RELAYDSL_COMPILE_WORKER", "0")
    assert not compile_worker.wanted()
    monkeypatch.setenv("RELAYDSL_COMPILE_WORKER", "1")
    assert compile_worker.wanted()
    monkeypatch.delenv("RELAYDSL_COMPILE_WORKER")
    monkeypatch.setattr(compile_worker.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not compile_worker.wanted()  # one core: the helper would only compete with us


def test_switched_off_the_process_compiles_everything_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RELAYDSL_COMPILE_WORKER", "0")
    monkeypatch.setattr(jit, "_worker", None)
    pending = jit.compile_ir_async(_twice("off_twice"), key="test-off")
    assert pending.worker is None and jit._worker is None
    assert pending.result().function("off_twice", I64, [I64])(4) == 8


def test_the_helper_builds_the_ir_itself_from_a_builder(tmp_path, monkeypatch):
    import functools

    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RELAYDSL_COMPILE_WORKER", "1")
    worker = jit._compile_worker()
    assert worker is not None
    build = functools.partial(_twice, "built_twice")
    pending = jit.compile_ir_async(build, key="test-builder", names=["built_twice"])
    assert pending.worker is worker
    _wait_started(worker, pending.job)
    assert pending.result().function("built_twice", I64, [I64])(21) == 42
    assert pending.ir is build  # the text was built in the helper only
    with pytest.raises(TypeError, match="names"):
        jit.compile_ir_async(build, key="test-builder-2")
