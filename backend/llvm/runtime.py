"""The native runtime: a thread pool and the Ctrl-C wrapper of native calls, in LLVM IR
(runtime.ll).

Compiled kernels run their parallel stages without returning to Python: a kernel's entry
calls

    void @relaydsl_parallel_for(ptr %task, ptr %ctx, i64 %extent)

which runs ``task(ctx, begin, end)`` over chunks covering ``[0, extent)`` on every core.

Ctrl-C. While native code runs, Python's SIGINT handler cannot run (it runs between
bytecodes of the main thread), so an endless loop in native code could not be stopped. A
native program that loops or calls functions, called from the main thread, runs through

    i64 @relaydsl_call_interruptible(ptr %fn, ptr %state, ptr %slots)

which installs a native SIGINT handler that sets a flag, runs the program (which polls the
flag at every call and loop turn), and puts the previous handler back: a run stops within
one turn, and native/program.py hands the signal to Python's handler. Calls of programs
that end by themselves pay nothing.

The IR (runtime.ll, linked with the host's spin-wait hint built with llvmlite.ir) is
compiled once (and cached on disk like every kernel) when
the JIT engine is created; ``jit`` registers its functions in the process's
symbol table, so kernel objects, freshly compiled or loaded from the cache,
link against them.

How the pool works. ``RELAYDSL_NUM_THREADS`` (relaydsl/settings.py; default: the usable
cores) minus
one worker threads are started with pthreads. A job is published in one 64-bit
word ``{generation:32, chunks:16, next:16}``: workers (and the calling thread)
claim chunk ``next`` with a compare-and-swap, so a worker still busy with an
old job can never claim a chunk of a new one, and the job's other fields
(task, ctx, extent), written before the word, are consistent with any word a
claim succeeds on. The caller waits, spinning, until every chunk is done.
Idle workers spin for 200 microseconds and then sleep on a condition variable: a
sleeping worker takes ~20-50 us to wake, which the next call would wait for. The window is
time, not a count of spin-wait hints: a hint's cost differs by CPU (x86's pause takes ~10
cycles on some, ~140 on others), and a count of 2,000 let the worker sleep between two
calls of a 512 GEMM on an Intel Xeon (6% slower, one context switch a call). 200 us covers
the Python between calls of a program (~20 us) and a short training step's NumPy. Calls that find
the pool busy (nested, or from a second Python thread) run inline on the
calling thread, and so does every call in a forked child (``jit`` registers
``relaydsl_pool_forget`` with ``os.register_at_fork``).

>>> import ctypes
>>> from relaydsl.backend.llvm import jit
>>> jit.runtime_threads() >= 1
True
"""
from __future__ import annotations

import pathlib
import platform
import threading
from typing import Callable

import llvmlite.binding as llvm
import llvmlite.ir as ir

from relaydsl import settings


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


def parallel_for(chunk: Callable[[int, int], None], extent: int, parallel: bool = True) -> None:
    """Runs the Python callable ``chunk(begin, end)`` over ``range(extent)`` on every core.

    For callers outside compiled code (tests and tools that call one stage function through
    ctypes, which releases the GIL): one thread per extra chunk, the first chunk on the
    caller. Compiled kernels use the native pool instead.
    """
    bounds = split(extent, settings.num_threads() if parallel else 1)
    errors: list[BaseException] = []

    def run(begin: int, end: int) -> None:
        try:
            chunk(begin, end)
        except BaseException as e:  # reported to the caller, never lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=b) for b in bounds[1:]]
    for t in threads:
        t.start()
    run(*bounds[0])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


EXPORTS = ("relaydsl_parallel_for",
           "relaydsl_call_interruptible", "relaydsl_pool_start", "relaydsl_pool_threads",
           "relaydsl_pool_forget")

SOURCE = pathlib.Path(__file__).with_name("runtime.ll")


def runtime_ir() -> str:
    """The runtime's LLVM IR for the host: runtime.ll linked with the CPU's spin-wait hint."""
    module = llvm.parse_assembly(SOURCE.read_text())
    module.link_in(llvm.parse_assembly(str(spin_hint())))
    return str(module)


def spin_hint() -> ir.Module:
    """``void @relaydsl_spin_hint()``: x86's ``pause``; elsewhere nothing (a plain reload
    loop: correct, slightly hungrier)."""
    module = ir.Module(name="relaydsl_spin_hint")
    void = ir.FunctionType(ir.VoidType(), [])
    builder = ir.IRBuilder(ir.Function(module, void, "relaydsl_spin_hint").append_basic_block())
    if platform.machine().lower() in ("x86_64", "amd64", "i686", "x86"):
        builder.call(ir.Function(module, void, "llvm.x86.sse2.pause"), [])
    builder.ret_void()
    return module
