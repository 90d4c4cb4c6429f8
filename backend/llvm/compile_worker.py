"""A helper process that turns LLVM IR into object code while this process does other work.

llvmlite serialises every call into LLVM behind one process-wide lock, so two threads
cannot compile two modules at once; two processes can. ``Worker`` starts
``python -m relaydsl.backend.llvm.compile_worker`` on first use (~70 ms, in the background) and
sends it the modules whose code is not needed at once: ``jit.compile_ir_async``, which
the GEMM library (gemm_library.py) uses while the kernels that call it are still being
emitted and compiled here. The protocol, over the helper's stdin and stdout:

    request   b"Q" job:u64 speed:u8 vectorize:u8 unroll:u8 length:u64 pickle(IR text or a
              function building it, which the helper then calls)
    started   b"S" job:u64                        the helper took the job
    result    b"R" job:u64 ok:u8 length:u64 the object file (ok) or the error text

The helper only saves time if it gets a core of its own: with the MLP's gradients on two
idle cores it cuts the cold first call from ~0.42 s to ~0.31 s, but with the other core
busy it costs ~0.1 s. So it is started only when a core is idle (``spare_core``: fewer
runnable tasks than usable cores, read from /proc/loadavg), and ``Worker.take(job)`` hands
a job the helper has not started yet back to the caller, who compiles it itself (nobody
waits for a helper that is still starting or busy); so does any failure (the helper
cannot start, dies, or fails a compilation). ``RELAYDSL_COMPILE_WORKER=0`` switches the
helper off, ``=1`` uses it whatever the load.
"""
from __future__ import annotations

import os
import pathlib
import pickle
import queue
import struct
import subprocess
import sys
import threading
from typing import BinaryIO, Callable

import relaydsl

_REQUEST = struct.Struct("<QBBBQ")  # job, speed, vectorize, unroll, length
_JOB = struct.Struct("<Q")
_RESULT = struct.Struct("<BQ")  # ok, length
PACKAGE_PARENT = pathlib.Path(relaydsl.__file__).resolve().parents[1]


def wanted() -> bool:
    """Whether to start the helper now (see the module docstring)."""
    setting = os.environ.get("RELAYDSL_COMPILE_WORKER", "")
    if setting in ("0", "1"):
        return setting == "1"
    return spare_core()


def spare_core() -> bool:
    """Whether a core is idle right now: fewer runnable tasks (this process included) than
    cores this process may use. Where /proc/loadavg is missing: whether there are two."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    if cores < 2:
        return False
    try:
        running = int(pathlib.Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return running < cores


def _read_exactly(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError
    return data


class Worker:
    """The parent's side: ``submit`` a module, later ``take`` its object file."""

    def __init__(self, triple: str, cpu: str, features: str):
        env = dict(os.environ)
        # the helper imports relaydsl from wherever this process did
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_PARENT), env.get("PYTHONPATH"))
                                            if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "relaydsl.backend.llvm.compile_worker", triple, cpu, features],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self._cond = threading.Condition()
        self._started: set[int] = set()
        self._results: dict[int, tuple[bool, bytes]] = {}
        self._abandoned: set[int] = set()
        self._dead = False
        self._next_job = 0
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        # the writer never blocks the caller (a starting helper reads nothing for ~70 ms);
        # the reader drains results as they come (a full pipe would stall the helper)
        threading.Thread(target=self._write, name="relaydsl-compile-writer", daemon=True).start()
        threading.Thread(target=self._read, name="relaydsl-compile-reader", daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self._dead

    def submit(self, ir: str | Callable[[], str], speed_level: int, vectorize: bool,
               unroll: bool) -> int:
        with self._cond:
            job = self._next_job
            self._next_job += 1
        payload = pickle.dumps(ir)
        self._outbox.put(b"Q" + _REQUEST.pack(job, speed_level, vectorize, unroll, len(payload))
                         + payload)
        return job

    def take(self, job: int) -> bytes | None:
        """The object file of `job`; None if the caller is to compile it itself."""
        with self._cond:
            if job not in self._started and job not in self._results:
                self._abandoned.add(job)  # not started: compiled here, a late result dropped
                return None
            while job not in self._results and not self._dead:
                self._cond.wait()
            ok, data = self._results.pop(job, (False, b""))
        return data if ok else None

    def close(self) -> None:
        self._outbox.put(None)
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._proc.kill()

    def _write(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            while (message := self._outbox.get()) is not None:
                stdin.write(message)
                stdin.flush()
        except OSError:
            pass  # the helper died: the reader sees it too
        finally:
            try:
                stdin.close()
            except OSError:
                pass

    def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            while kind := stdout.read(1):
                (job,) = _JOB.unpack(_read_exactly(stdout, _JOB.size))
                if kind == b"S":
                    with self._cond:
                        self._started.add(job)
                    continue
                ok, length = _RESULT.unpack(_read_exactly(stdout, _RESULT.size))
                data = _read_exactly(stdout, length)
                with self._cond:
                    if job in self._abandoned:
                        self._abandoned.discard(job)
                    else:
                        self._results[job] = (bool(ok), data)
                    self._cond.notify_all()
        except (EOFError, OSError, struct.error):
            pass
        finally:
            with self._cond:
                self._dead = True
                self._cond.notify_all()


# ---- the helper's side ---------------------------------------------------------------------


def serve(triple: str, cpu: str, features: str) -> int:
    """Compiles requests from stdin, in order, until stdin closes."""
    from relaydsl.backend.llvm import jit

    host = jit.host_target()
    if (host.triple, host.cpu, host.features) != (triple, cpu, features):
        return 2  # another target than the parent's: the parent compiles everything itself
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints (LLVM's or Python's) must not corrupt the protocol
    requests: queue.SimpleQueue[tuple[int, int, bool, bool, bytes] | None] = queue.SimpleQueue()

    def read_requests() -> None:  # eagerly, so that the parent's writes never wait for us
        stdin = sys.stdin.buffer
        try:
            while stdin.read(1) == b"Q":
                job, speed, vectorize, unroll, length = _REQUEST.unpack(
                    _read_exactly(stdin, _REQUEST.size))
                payload = _read_exactly(stdin, length)
                requests.put((job, speed, bool(vectorize), bool(unroll), payload))
        except (EOFError, OSError, struct.error):
            pass
        requests.put(None)

    threading.Thread(target=read_requests, daemon=True).start()
    while (request := requests.get()) is not None:
        job, speed, vectorize, unroll, payload = request
        out.write(b"S" + _JOB.pack(job))
        out.flush()
        try:
            ir = pickle.loads(payload)  # from our parent, over our own pipe
            text = ir if isinstance(ir, str) else ir()
            data, ok = jit._compile_object(text, speed, vectorize, unroll), 1
        except Exception as e:  # reported to the parent, which compiles the module itself
            data, ok = f"{type(e).__name__}: {e}".encode(), 0
        out.write(b"R" + _JOB.pack(job) + _RESULT.pack(ok, len(data)) + data)
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(*sys.argv[1:4]))
