"""Compiled primitive functions: ``compile_primitives(funcs) -> [Kernel]``.

The pipeline for each function reads in one place (``_build``):

    lower     (lower.py)     primitive Function -> te tensors
    schedule  (schedule.py)  inline / materialise, loop order, parallel axis
    codegen   (codegen.py)   one LLVM function per materialised stage + an entry
    jit       (jit.py)       one LLVM optimisation + code generation per module

The functions of one ``compile_primitives`` call share LLVM modules of ~50 ms of
compilation each (``_GROUP_INSTRUCTIONS``; a module costs ~2 ms on its own), which this
process and a forked child compile together with the GEMM library's missing modules
(``jit.compile_parallel``; the library's core may be compiled ahead by another child, from
the build's start: ``contraction.compile_core_ahead``).

Caches: four layers, each for a reason.

1. ``_BY_HASH``, in memory: ``structural_hash`` -> (function, kernel), confirmed by
   ``structural_equal``. The cheap lookup: a function seen before in the process (the
   same object, or an equal one: native code per call signature, the dispatcher) costs a hash,
   not a digest.
2. ``_BY_DIGEST``, in memory: the stable digest (``lower.stable_digest``, which is not
   salted per process as ``structural_hash`` is) -> kernel. Needed for correctness: the
   digest names the kernel's symbols, and loading its object twice would define them twice
   in the one JIT engine. It also joins functions that compute the same but are not
   structurally equal (a let-bound body and its graph form).

Both memory keys include the integer kernels' ISA (``igemm.host_isa``; ``$RELAYDSL_INT_ISA``
forces one), which decides the templates of integer contractions.
3. On disk (jit.py): object files keyed by the digests, the host CPU and the backend's
   sources, so a second process does not recompile (the compile benchmark's "warm disk
   cache" row against its cold one).
4. The GEMM library's modules (templates/gemm_library.py), loaded once per process and
   read from disk without building their IR (``jit.load_or_compile``).

What each call found in which cache, and what it compiled, is logged (INFO, logger
``relaydsl.backend.llvm.kernel``; jit.py logs each LLVM module compiled or loaded from disk).

The executors only keep what they built (native code per call signature, the dispatcher's
kernels per primitive function and shapes) in front of these.

A ``Kernel`` checks its arguments before any compiled code runs: exact dtype,
shape, C-contiguity, alignment, writeable and non-overlapping outputs; a
mismatch is a ``TypeError`` naming the argument, the expected and the actual
type.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import math
import os
import threading
import time
from typing import Sequence

import numpy as np
from llvmlite import ir

from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.codegen import StageCode, emit_module
from relaydsl.backend.llvm.lower import Lowered, lower, stable_digest
from relaydsl.backend.llvm.schedule import Schedule, schedule
from relaydsl.backend.llvm.templates import gemm_library
from relaydsl.backend.llvm.templates.igemm import host_isa
from relaydsl.errors import IRError
from relaydsl.ir.expr import Function
from relaydsl.ir.structural import structural_equal, structural_hash
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import deep_recursion
from relaydsl.transform.pipeline import CompileOptions

_ALIGN = 64
_log = logging.getLogger(__name__)


class Kernel:
    """A compiled primitive function: ``kernel(*inputs)``, ``run``, ``bind``."""

    def __init__(self, lowered: Lowered, sched: Schedule, codes: list[StageCode], entry: str,
                 lib: jit.Library):
        self.input_types = [TensorType(t.shape, t.dtype) for t in lowered.params]
        self.output_types = [TensorType(t.shape, t.dtype) for t in lowered.outputs]
        self.returns_tuple = lowered.returns_tuple
        # the buffers after inputs and outputs in the entry's table: constants, then scratch
        self.constants = [data for _, data in lowered.constants]
        self.scratch = [(t.shape, t.dtype) for t in sched.scratch]
        self.entry_address = lib.address(entry)
        self._entry = lib.function(entry, None, [ctypes.c_void_p])
        self.empty = all(  # nothing to compute: the entry need not be called
            math.prod(c.stage.tensor.shape) == 0 for c in codes)
        self.stages = [(c.stage.symbol, c.stage.extent, c.stage.parallel, c.stage.work)
                       for c in codes]

    def __repr__(self) -> str:
        ins = ", ".join(str(t) for t in self.input_types)
        outs = ", ".join(str(t) for t in self.output_types)
        return f"Kernel(({ins}) -> ({outs}), {len(self.stages)} stage(s))"

    def __call__(self, *inputs: np.ndarray) -> np.ndarray | tuple:
        outputs = [np.empty(t.shape, t.dtype) for t in self.output_types]
        self.run(inputs, outputs)
        return tuple(outputs) if self.returns_tuple else outputs[0]

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        self.bind(inputs, outputs)()

    def call_trusted(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Runs on `inputs` into fresh outputs, skipping the checks of ``bind``.

        For executors that have already matched the inputs' shapes, dtypes and layout
        against this kernel's input types (the dispatcher keys its kernels by them).
        """
        outputs = [np.empty(t.shape, t.dtype) for t in self.output_types]
        if self.scratch:
            self.bind(inputs, outputs)()
        elif not self.empty:
            arrays = [*inputs, *outputs, *self.constants]
            self._entry((ctypes.c_void_p * len(arrays))(*[address(a) for a in arrays]))
        return outputs

    def bind(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> "Bound":
        """Checks once; returns a zero-argument callable that runs the kernel on these arrays."""
        _check(inputs, self.input_types, "input", writeable=False)
        _check(outputs, self.output_types, "output", writeable=True)
        _check_disjoint(inputs, outputs)
        scratch = [_aligned_empty(shape, dtype) for shape, dtype in self.scratch]
        return Bound(self, [*inputs, *outputs, *self.constants, *scratch])


def nbytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes of a tensor (at least 1, so that every tensor has an address of its own)."""
    return max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)


def _slow_address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _data_field_offset() -> int | None:
    """Where NumPy's array object keeps its data pointer, from the object's start: the
    first field after the object header in ``PyArrayObject_fields`` (16 bytes on 64-bit
    CPython, NumPy 1 and 2 alike); None if a probe of a few arrays finds it elsewhere (a
    debug build of Python, another NumPy)."""
    probes = [np.empty(n, np.float32) for n in (1, 1000, 1 << 16)]
    probes.append(probes[1][3:])
    for offset in (16,):
        if all(ctypes.c_void_p.from_address(id(a) + offset).value == _slow_address(a)
               for a in probes):
            return offset
    return None


_DATA_OFFSET = _data_field_offset()
_read_pointer = ctypes.c_void_p.from_address


def address(a: np.ndarray) -> int:
    """The address of `a`'s first element: read from the array object's data field, ~0.1
    us (``a.__array_interface__`` builds a dict: ~0.9 us, six times in a call of a small
    program), or through the interface where that field was not found."""
    if _DATA_OFFSET is None or not isinstance(a, np.ndarray):
        return _slow_address(a)
    return _read_pointer(id(a) + _DATA_OFFSET).value or 0


class Bound:
    """A kernel bound to its arrays (inputs, outputs, constants, scratch): ``bound()`` runs it
    on their current contents, with no checks (they were made once, at ``Kernel.bind``)."""

    def __init__(self, kernel: Kernel, arrays: list[np.ndarray]):
        self.kernel = kernel
        self._arrays = arrays  # keeps the memory alive while bound
        self._table = (ctypes.c_void_p * max(1, len(arrays)))(*[address(a) for a in arrays])

    def __call__(self) -> None:
        if not self.kernel.empty:
            self.kernel._entry(self._table)


def _describe(a: object) -> str:
    if isinstance(a, np.ndarray):
        return f"Tensor[{a.shape}, {a.dtype}]"
    return type(a).__name__


def _check(arrays: Sequence[np.ndarray], types: list[TensorType], what: str,
           writeable: bool) -> None:
    if len(arrays) != len(types):
        raise TypeError(f"kernel takes {len(types)} {what}(s), got {len(arrays)}")
    for i, (a, t) in enumerate(zip(arrays, types)):
        if not isinstance(a, np.ndarray) or a.dtype != np.dtype(t.dtype) or \
                a.shape != tuple(t.shape):
            raise TypeError(f"kernel {what} {i}: expected a NumPy array of type {t}, "
                            f"got {_describe(a)}")
        if not a.flags.c_contiguous or not a.flags.aligned:
            raise TypeError(f"kernel {what} {i}: expected a C-contiguous, aligned array of "
                            f"type {t}, got a non-contiguous or unaligned one")
        if writeable and not a.flags.writeable:
            raise TypeError(f"kernel {what} {i}: expected a writeable array of type {t}, "
                            f"got a read-only one")


def _check_disjoint(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
    for i, out in enumerate(outputs):
        if out.size == 0:
            continue
        for j, x in enumerate(inputs):
            if np.may_share_memory(out, x):
                raise TypeError(f"kernel output {i} overlaps input {j}: outputs must be "
                                f"separate arrays")
        for j, other in enumerate(outputs[:i]):
            if other.size and np.may_share_memory(out, other):
                raise TypeError(f"kernel outputs {j} and {i} overlap")


def _aligned_empty(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    n = math.prod(shape) * np.dtype(dtype).itemsize
    raw = np.empty(n + _ALIGN, np.uint8)
    start = (-raw.ctypes.data) % _ALIGN
    return raw[start:start + n].view(dtype).reshape(shape)


# ---- compilation and the caches ----------------------------------------------------------

_LOCK = threading.RLock()
_BY_HASH: dict[int, list[tuple[Function, Kernel]]] = {}
_BY_DIGEST: dict[str, Kernel] = {}
stats = {"modules": 0, "functions": 0, "hits": 0}


def _fresh_lock() -> None:
    """In a forked child: a lock held by a thread of the parent (lowering a function, for
    instance) would never be released. The caches it guards are consistent at any point
    (a kernel is recorded only once built), and the JIT is idle at a fork (jit._LOCK)."""
    global _LOCK
    _LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock)


def _check_primitive(func: Function) -> None:
    if not isinstance(func, Function):
        raise IRError(f"compile_primitive takes a Function, got {type(func).__name__}")
    for p in func.params:
        t = p.checked_type
        if not isinstance(t, TensorType) or not all(isinstance(d, int) for d in t.shape):
            raise IRError(f"llvm backend: parameter {p.name_hint} of a primitive function must "
                          f"have a static tensor type, got {t}")


def _remembered(func: Function, h: int) -> Kernel | None:
    for other, kernel in _BY_HASH.get(h, []):
        if other is func or structural_equal(other, func):
            return kernel
    return None


def compile_primitives(funcs: Sequence[Function], options: CompileOptions | None = None
                       ) -> list[Kernel]:
    """One kernel per function; the new ones compiled together in a few LLVM modules, at the
    LLVM speed level of `options` (default: the llvm target's): 3, or 1 at opt_level 0."""
    options = CompileOptions.for_target("llvm") if options is None else options
    speed = 3 if options.opt_level >= 1 else 1
    # the integer kernels' instructions (a setting may force them) choose their templates:
    # a kernel built for one ISA is not the kernel of another
    isa = host_isa().name
    with _LOCK:
        results: list[Kernel | None] = [None] * len(funcs)
        todo: dict[str, tuple[Function, int, list[int]]] = {}
        for i, f in enumerate(funcs):
            _check_primitive(f)
            h = hash((structural_hash(f), isa))
            kernel = _remembered(f, h)
            if kernel is None:
                digest = hashlib.sha256(f"{stable_digest(f)}|{speed}|{isa}".encode()).hexdigest()
                kernel = _BY_DIGEST.get(digest)
                if kernel is None:
                    todo.setdefault(digest, (f, h, []))[2].append(i)
                    continue
                _BY_HASH.setdefault(h, []).append((f, kernel))
            stats["hits"] += 1
            results[i] = kernel
        start = time.perf_counter()
        if todo:
            for digest, kernel in _build(todo, speed).items():
                f, h, indices = todo[digest]
                _BY_DIGEST[digest] = kernel
                _BY_HASH.setdefault(h, []).append((f, kernel))
                for i in indices:
                    results[i] = kernel
        if _log.isEnabledFor(logging.INFO):
            _log.info("%d kernel(s): %d from the memory cache, %d built in %.1f ms "
                      "(LLVM speed level %d)", len(funcs), len(funcs) - len(todo), len(todo),
                      1000 * (time.perf_counter() - start), speed)
        return results  # type: ignore[return-value]


def compile_primitive(func: Function, options: CompileOptions | None = None) -> Kernel:
    return compile_primitives([func], options)[0]


def _build(todo: dict[str, tuple[Function, int, list[int]]], speed: int) -> dict[str, Kernel]:
    with deep_recursion():  # a fused chain of 256 ops is a 256-deep expression
        groups = _emit({digest: f for digest, (f, _, _) in todo.items()})
    # the integer kernels' instructions depend on the OS too (AMX tiles only where granted):
    # an object with tile instructions must never be loaded where they would fault
    keys = ["kernels|" + "|".join(sorted(p[0] for p in parts)) + f"|speed{speed}"
            f"|int:{host_isa().name}" for _, parts in groups]
    # a module's text (a fifth of the Python time of a build) only where it is compiled
    texts = [functools.partial(str, module) for module, _ in groups]
    library = list(dict.fromkeys(part for module, _ in groups
                                 for part in gemm_library.declared_parts(module)))
    # the kernels' modules and the GEMM library's missing ones, on two cores
    jit.compile_parallel([jit.Job(key, text, speed_level=speed)
                          for key, text in zip(keys, texts)] + gemm_library.jobs(library))
    gemm_library.load(library)  # before the kernels' objects, which call it
    kernels = {}
    for key, text, (_, parts) in zip(keys, texts, groups):
        lib = jit.load_or_compile(key, [entry for *_, entry in parts], text, speed_level=speed)
        stats["modules"] += 1
        stats["functions"] += len(parts)
        kernels.update({digest: Kernel(lowered, sched, codes, entry, lib)
                        for digest, lowered, sched, codes, entry in parts})
    return kernels


# LLVM instructions of a module of kernels, beyond which the next kernel starts another
# module, so that two cores can share their compilation (jit.compile_parallel): ~35 ms of
# LLVM's time at speed level 3 (~0.14 ms an instruction, including code generation, on
# the MLP's kernels on an Intel Xeon, rocketlake); a module costs ~2 ms more on its own.
# Cold builds on an AMD EPYC (Zen 5), fresh processes alternating with 350: the MLP's
# gradients 4-6 ms faster with 250 or 175 (a core no longer waits ~20 ms for the other's
# last 40 ms module), ResNet-18's the same with 250 and 5 ms slower with 175; 120 is slower.
_GROUP_INSTRUCTIONS = 250


def _emit(functions: dict[str, Function]) -> list[tuple[ir.Module, list[tuple]]]:
    """LLVM modules defining the kernels of `functions` (by digest), each with, per kernel,
    (digest, lowered, schedule, stage codes, entry symbol): a new module once one holds
    ``_GROUP_INSTRUCTIONS``."""
    groups: list[tuple[ir.Module, list[tuple]]] = []
    size = _GROUP_INSTRUCTIONS
    for digest, f in functions.items():
        if size >= _GROUP_INSTRUCTIONS:
            module = ir.Module(name="relaydsl")
            module.triple = jit.host_target().triple
            module.data_layout = jit.data_layout()
            groups.append((module, []))
            size = 0
        module, parts = groups[-1]
        prefix = f"rd{digest[:24]}"
        lowered = lower(f)
        sched = schedule(lowered, prefix)
        before = len(module.globals)
        codes, entry = emit_module(module, sched, prefix)
        size += sum(len(block.instructions) for g in list(module.globals.values())[before:]
                    if isinstance(g, ir.Function) for block in g.blocks)
        parts.append((digest, lowered, sched, codes, entry))
    return groups
