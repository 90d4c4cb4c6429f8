"""The parallel runtime: a small thread pool that runs compiled kernels on every core.

Kernels are called through ctypes, which releases the GIL for the length of the
call, so the chunks of one parallel loop really run at the same time. The pool
is created on first use, with one worker per extra core (``RELAYDSL_NUM_THREADS``
overrides the count); the calling thread runs the first chunk itself.

>>> seen = []
>>> parallel_for(lambda begin, end: seen.append((begin, end)), 10)
>>> sorted(seen) == [(0, 10)] or sum(e - b for b, e in seen) == 10
True
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Callable

Chunk = Callable[[int, int], None]


def num_threads() -> int:
    configured = os.environ.get("RELAYDSL_NUM_THREADS")
    if configured:
        return max(1, int(configured))
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


class _Pool:
    def __init__(self, workers: int):
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.workers = workers
        for i in range(workers):
            threading.Thread(target=self._work, name=f"relaydsl-worker-{i}", daemon=True).start()

    def _work(self) -> None:
        _IN_WORKER.active = True
        while True:
            fn, begin, end, done = self._tasks.get()
            try:
                fn(begin, end)
                done.put(None)
            except BaseException as e:  # reported to the caller, never lost in the worker
                done.put(e)

    def run(self, fn: Chunk, bounds: list[tuple[int, int]]) -> None:
        done: queue.SimpleQueue = queue.SimpleQueue()
        for begin, end in bounds[1:]:
            self._tasks.put((fn, begin, end, done))
        error: BaseException | None = None
        try:
            fn(*bounds[0])
        except BaseException as e:
            error = e
        for _ in bounds[1:]:
            outcome = done.get()
            error = error or outcome
        if error is not None:
            raise error


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()
_IN_WORKER = threading.local()


def _pool() -> _Pool | None:
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None and num_threads() > 1:
                _POOL = _Pool(num_threads() - 1)
    return _POOL


def split(extent: int, parts: int) -> list[tuple[int, int]]:
    """`extent` iterations in at most `parts` contiguous, nearly equal chunks."""
    parts = max(1, min(parts, extent))
    step, extra = divmod(extent, parts)
    bounds, begin = [], 0
    for p in range(parts):
        end = begin + step + (p < extra)
        bounds.append((begin, end))
        begin = end
    return bounds


def parallel_for(fn: Chunk, extent: int, parallel: bool = True) -> None:
    """Runs ``fn(begin, end)`` over chunks covering ``range(extent)``, on all cores.

    With `parallel` false, or a single core, or when called from a worker (no
    nesting), it is one call ``fn(0, extent)``.
    """
    pool = _pool() if parallel and extent > 1 else None
    if pool is None or getattr(_IN_WORKER, "active", False):
        fn(0, extent)
        return
    pool.run(fn, split(extent, pool.workers + 1))
