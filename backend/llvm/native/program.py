"""A whole program as native code, as Python calls it (``NativeProgram``); how it works.

Every program of the language -- an MLP's forward pass and its first-order adjoint, an
LSTM's loop over a sequence, a TreeLSTM matching on a tree and calling itself, a character
RNN consing up a list, the higher-order gradient's backpropagator closures and adjoint
references -- is lowered here to one LLVM function per Relay function, so a call of the
program is one call into compiled code with no Python between kernels. The interpreter
stays the specification; tests run both and compare.

Values. Every value is one pointer:

* a tensor: its data (64-byte aligned); its type, static, says the shape and dtype. In a
  program where some shape is known only at run time (``relay.Any``, a shape variable no
  argument fixes), every tensor is a header ``[data, dim0, dim1, ...]`` instead;
* a tuple: an array of its fields; a reference: a cell ``[value, epoch, only holder]``
  (see Memory);
* an ADT value: ``[tag, field0, field1, ...]``; ``match`` is tag dispatch;
* a closure: ``[code, capture0, capture1, ...]``; code is ``ptr f(state, closure, args..)``
  -- a global function has the same signature (its closure is a constant with no captures),
  so calling a function value is one indirect call whatever it is.

Calls. A Relay function becomes ``ptr f(ptr state, ptr closure, ptr arg0, ...)``. A call
of a primitive function calls its compiled kernel (kernel.py) with freshly allocated
outputs; a call of a global is a direct call; a call of a constructor allocates the value.
A function calling itself in tail position (a loop: what ``for`` and ``while`` become)
jumps back to its start instead.

Shapes known only at run time. A kernel call whose types have such dimensions is a site
with a few "ways": records of the kernels it used last, keyed by the inputs' dimensions.
Native code compares the dimensions with each way's; on a miss it calls Python, which
compiles the primitive function for those shapes (type inference, re-run with them, is the
shape function: it gives the outputs' shapes) on first use and returns the record. A
growing tensor makes a kernel per size, as the dispatcher did, but runs with no Python
between kernels once they are made.

Memory. Everything a call allocates comes from one bump arena, released as a whole when
the call returns (results are copied out to NumPy and Python values first), so programs
pay no allocator or reference counts between kernels. A static first-order function's
intermediates share one frame by liveness (frames.py), and an entry's result is written by
its kernels into the arrays Python returns (results.py). When the arena runs out, native
code takes more chunks from malloc; Python frees them after the call and grows the arena
to the high-water mark, so later calls of the same program do not need them.

A loop releases its turns' memory as it goes (loops.py): at the back edge it copies
out what it carries and what its own reference cells hold (a training loop's parameters, in
the model's cell), resets the arena to its mark and copies them back. A cell older than the
turn written elsewhere keeps the turn's memory; so do loops carrying closures, or data
they made themselves (a list they build; a list they walk is fine).

Adding into a reference (the gradient's adjoints: ``ref_write(r, ref_read(r) + g)``, g a
node's weight gradient) writes the new total over the old one when the kernel adds
elementwise into an output of the total's type and the cell is the total's only holder: a
flag in the cell that such a write sets and any other read or write clears. A TreeLSTM
training step then stops taking a fresh weight-sized tensor per node (178 MB a step).

Errors. A ``match`` no clause matches, recursion deeper than the thread's stack allows,
a SIGINT (Ctrl-C, on the main thread) and a call taking more than its memory budget (a
quarter of the machine's, at most 4 GiB) stop the run with a code in the state; each call
site checks it and returns, and Python raises the error (an ``InterpreterError`` naming
the match's source line, ``KeyboardInterrupt``, ``MemoryError``): never a crash. Only a
program that loops or calls functions runs under the native SIGINT handler
(``relaydsl_call_interruptible``, runtime.py); one that ends by itself saves the two
system calls.

Closures returned to Python (a training loop returning ``relay.export_model(model)``,
Figure 4) keep the memory of the call that made them: its arena and chunks are handed to
them, and calling one runs native code through a wrapper per arity. A call of such a
closure that writes into a cell of the call that made it keeps its own memory for as long.

What it takes: a module in A-normal form (lowering.py); then (else the dispatcher runs the
program, executor.py) arguments of tensors, tuples and data types, results of those and of
functions; no function arguments and no references crossing into Python. (An operator
call outside a primitive function, when FuseOps is disabled, becomes a primitive function
of its own.)

>>> # a recursive sum over a relay.List, then a TreeLSTM: examples/tree_lstm_sst.py
"""
from __future__ import annotations

import _signal
import ctypes
import hashlib
import os
import resource
import signal
import threading
import weakref
from typing import Callable, Sequence

import numpy as np

from relaydsl.backend.interpreter import Closure, InterpreterError, Value
from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.kernel import address
from relaydsl.backend.llvm.native.externals import Externals
from relaydsl.backend.llvm.native.functions import Unsupported
from relaydsl.backend.llvm.native.lowering import WRAPPER, Lowering
from relaydsl.backend.llvm.native.abi import (
    NEVER, STATE_WORDS, Error, Word, array_at,
)
from relaydsl.backend.llvm.native.sites import ALIGN, WAYS, leaf_types
from relaydsl.backend.llvm.native.values import Codec
from relaydsl.ir.expr import (
    Function, Tuple, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type, TypeCall
from relaydsl.transform.pipeline import CompileOptions


_INITIAL_ARENA = 1 << 16
_MAX_ARENA = 1 << 30  # beyond it, a call's extra memory comes in chunks each time
_OPTIMISED_IR = 1 << 20  # bytes of LLVM IR text: larger native code is compiled unoptimised
_RESOLVE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_RUN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
_REDUCE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)
_EXTERNAL = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)


def _address_of(callback: ctypes._CFuncPtr) -> int:
    """The address native code calls a ctypes callback at."""
    at = ctypes.cast(callback, ctypes.c_void_p).value
    assert at is not None
    return at


# ---- the program ---------------------------------------------------------------------------

class NativeProgram:
    """Global `entry` of a prepared module (executor.prepare) as native code.

    ``program(*values)`` takes and returns NumPy arrays, tuples and ``ConstructorValue``s.
    Building one for a program it cannot run raises ``Unsupported``. `shapes_at_run_time`
    treats every kernel as one of shapes known only at run time (for tests: random
    programs check that machinery against JAX). `externals` is asked about each primitive
    function of static types: an ``ExternalKernel`` it returns runs the function's calls in
    Python instead of a compiled kernel (externals.py). With `count_calls`, native code
    counts the calls of each primitive function (``call_counts``).
    """

    def __init__(self, mod: IRModule, entry: str, options: CompileOptions | None = None, *,
                 shapes_at_run_time: bool = False, externals: Externals | None = None,
                 count_calls: bool = False):
        self.mod, self.entry = mod, entry
        fn = mod[entry]
        t = fn.checked_type
        assert isinstance(t, FuncType)
        self.param_types = [p.checked_type for p in fn.params]
        self.ret_type = t.ret_type
        for p, pt in zip(fn.params, self.param_types):
            _check_boundary(pt, f"parameter {p.name_hint}")
        _check_boundary(self.ret_type, "the result", result=True)
        # what its kernels are compiled with (default: the llvm target's)
        self.options = CompileOptions.for_target("llvm") if options is None else options
        self._resolver = _RESOLVE(self._resolve)  # kernels of run-time shapes, on demand
        self._reducer = _REDUCE(self._reduce)  # collectives' exchanges with the other ranks
        self._externaller = _EXTERNAL(self._external)  # external kernels' bodies
        lowering = Lowering(mod, self.options,
                            _address_of(self._resolver), _address_of(self._reducer),
                            shapes_at_run_time, _address_of(self._externaller), externals,
                            count_calls)
        name = lowering.lower_entry(mod.get_global_var(entry),
                                    [*self.param_types, self.ret_type])
        arities = sorted(_closure_arities(self.ret_type, set()))
        closure_names = {n: lowering.closure_wrapper(n) for n in arities}
        self.boxed = lowering.boxed
        self._finite = lowering.finite
        self._codec = Codec(mod, self.boxed)
        # the result's tensors, made by Python for the entry to write (results.py)
        self._result_leaves = [self._codec.tensor_type(t) for t in leaf_types([self.ret_type])
                               ] if lowering.results_in_place else []
        self._keep = lowering.keep
        self._matches = lowering.matches
        self._sites = lowering.sites
        # per site, the records of the last kernels it used (native code looks there first)
        self._ways = np.zeros(len(self._sites) * WAYS + 1, np.int64)
        self._ways_at = address(self._ways)
        self._wrong_shapes = lowering.wrong_shapes
        self._collectives = lowering.collectives
        self._external_kernels = lowering.external_kernels
        self._counts, self._counted = lowering.call_counts, lowering.counted
        self.kernels = len(lowering.kernels)
        self.kernel_calls = lowering.kernel_calls
        # the addresses the code reads (kernels, constants, the resolver): Word.LINKS
        self._links = np.array(lowering.links or [0], np.int64)
        library, rename = _library(str(lowering.module), lowering.finite)
        self._function = library.address(rename(name))
        # the entry's and the closures' wrappers: i64 run(state, slots)
        self._closure_entries = {n: library.address(rename(f))
                                 for n, f in closure_names.items()}
        self._runners = {a: _RUN(a) for a in [self._function, *self._closure_entries.values()]}
        self._epoch = 0  # where the next call's epochs start
        self._run_interruptible = ctypes.CFUNCTYPE(
            ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            jit.runtime_function("relaydsl_call_interruptible"))
        self._arena_bytes = _INITIAL_ARENA
        self._local = threading.local()  # a thread's arena and state

    def call_counts(self, reset: bool = False) -> dict[Function, int]:
        """The calls of each primitive function since the build or the last reset, as native
        code counted them (a program built with `count_calls`; calls from several threads
        at once may lose counts); with `reset`, the counts start again from 0."""
        counts = {fn: int(self._counts[i]) for fn, i in self._counted.items()}
        if reset:
            self._counts[:] = 0
        return counts

    def describe(self) -> str:
        """It in a line, for the executor's log."""
        dynamic = f", {len(self._sites)} of shapes known only at run time (a kernel per " \
            "shape or one generic in the sizes, made on first use)" if self._sites else ""
        return (f"{self.kernels + len(self._sites)} kernel(s) at {self.kernel_calls} call "
                f"site(s){dynamic}, native code between them")

    def __call__(self, *values: Value) -> Value:
        return self._invoke(self._function, None, values, self.param_types, self.ret_type)

    def _invoke(self, function: int, closure: tuple[int, "_Pin"] | None,
                values: Sequence[Value], types: Sequence[Type], ret_type: Type) -> Value:
        """Runs the entry, or a closure a call returned (`closure`: its address and the
        memory it lives in), on `values`; its result as Python values."""
        local = self._local
        if not hasattr(local, "state"):  # this thread's first call
            local.state = np.zeros(STATE_WORDS, np.int64)
            local.state_at = address(local.state)
            local.stop = np.zeros(1, np.int32)
            local.stack = _stack_budget()
            local.arena = None
            local.running = False
        if local.running:  # its state and arena are the running call's
            raise RuntimeError(f"@{self.entry} was called from inside one of its own external "
                               "kernels: a thread runs one call of a program at a time")
        arena = local.arena
        if arena is None or arena.nbytes < self._arena_bytes + ALIGN:
            arena = local.arena = np.empty(self._arena_bytes + ALIGN, np.uint8)
            base = address(arena) + (-address(arena)) % ALIGN
            # the state a call starts from (its budget and epoch set below)
            local.fresh = np.array((base, base + arena.nbytes - ALIGN, 0, 0, -local.stack, 0,
                                    0, address(local.stop), 0, self._ways_at, 0, NEVER, 0, 0,
                                    address(self._links)), np.int64)
        state = local.state
        state[:] = local.fresh
        state[Word.BUDGET] = _MEMORY_BUDGET
        epoch = self._epoch  # above the epochs of every cell earlier calls left alive
        state[Word.EPOCH] = epoch
        keep: list = []  # the arguments' memory, alive through the call
        codec = self._codec
        slots = np.array(([] if closure is None else [closure[0]])
                         + [codec.encode(v, t, keep) for v, t in zip(values, types)] + [0],
                         np.int64)
        in_place: dict[int, np.ndarray] = {}
        if closure is None and self._result_leaves:
            arrays = [np.empty(t.shape, t.dtype) for t in self._result_leaves]
            in_place = {address(a): a for a in arrays if a.size}
            addresses = np.array([address(a) for a in arrays], np.int64)
            keep.append(addresses)
            state[Word.RESULTS] = address(addresses)
        local.running = True
        try:
            if not self._finite and _sigint_reaches_python():
                status = self._run_interruptible(function, local.state_at, address(slots))
            else:
                status = self._runners[function](local.state_at, address(slots))
        finally:
            local.running = False
        pin = _Pin()  # the call's memory, if a closure in its result lives in it
        try:
            if status >> 8:  # a SIGINT came during the run
                signal.raise_signal(signal.SIGINT)  # by default, raises KeyboardInterrupt
            if status & 0xFF:
                raise self._error(int(status & 0xFF), int(state[Word.DETAIL]))
            result = codec.decode(int(slots[-1]), ret_type,
                                  lambda pointer, t: self._closure(pointer, t, pin), in_place)
            self._epoch = max(self._epoch, int(state[Word.EPOCH]) + 1)
            # a write into a cell of an earlier call (which a closure captured) may point
            # at this call's memory: it lives as long as that call's
            wrote_earlier = closure is not None and int(state[Word.WRITTEN]) < epoch
            if pin.closures or wrote_earlier:
                pin.hold(arena, int(state[Word.CHUNKS]), keep)
                local.arena, state[Word.CHUNKS] = None, 0
                if wrote_earlier:
                    closure[1].held.append(pin)  # type: ignore[index]
            return result
        finally:
            del keep
            self._release(state, grow=status == 0)

    def _closure(self, pointer: int, t: FuncType, pin: "_Pin") -> Closure:
        """A closure of the result, for Python: the interpreter's function value, called
        natively (what the frontend and the dispatcher call)."""
        pin.closures += 1
        params = []
        for i, arg_type in enumerate(t.arg_types):
            params.append(Var(f"x{i}", arg_type))
            params[-1].set_checked_type(arg_type)
        entry = self._closure_entries[len(t.arg_types)]

        def call(args: list[Value]) -> Value:
            if len(args) != len(params):
                raise TypeError(f"the function takes {len(params)} argument(s), got "
                                f"{len(args)}")
            return self._invoke(entry, (pointer, pin), args, t.arg_types, t.ret_type)

        return Closure(Function(params, Tuple(())), {}, f"<native closure of @{self.entry}>",
                       external=call)

    def _release(self, state: np.ndarray, grow: bool) -> None:
        """Frees the chunks native code took beyond the arena; after a run that finished,
        grows the arena to what it needed at most (up to _MAX_ARENA) for the next calls: a
        kernel's scratch, taken in a chunk and freed after it, would otherwise come from
        malloc, and fresh pages, at every call."""
        _free_chunks(int(state[Word.CHUNKS]))
        overflow = int(state[Word.PEAK])
        if overflow and grow:
            self._arena_bytes = min(max(2 * self._arena_bytes, self._arena_bytes + overflow),
                                    _MAX_ARENA)

    def _resolve(self, site: int, keys: int) -> int:
        """Native code's call at kernel call site `site`, of shapes known only at run time,
        whose ways hold no kernel for the input dimensions at `keys`: the address of the
        site's record for them (made on first use: the kernel compiled for these shapes),
        now in one of its ways; 0 when it cannot be made (what was raised is kept)."""
        try:
            s = self._sites[site]
            key = tuple((ctypes.c_int64 * s.key_words).from_address(keys))
            record = s.records.get(key)
            if record is None:  # (two threads may make it at once: either is kept)
                record = s.records.setdefault(key, s.record(key, self.options))
            self._ways[site * WAYS + s.next_way] = address(record)
            s.next_way = (s.next_way + 1) % WAYS
            return address(record)
        except BaseException as e:  # raised again when the call has stopped
            self._local.failure = e
            return 0

    def _reduce(self, site: int, data: int, count: int) -> int:
        """Native code's call at collective site `site`, whose kernel has written this
        rank's part, `count` elements at `data`: the exchange with the other ranks, in place
        (``Collective.reduce_in_place``); 0, or 1 when it raised (kept, and raised again
        when the call has stopped)."""
        try:
            collective, dtype = self._collectives[site]
            collective.reduce_in_place(array_at(data, dtype, (count,)))
            return 0
        except BaseException as e:
            self._local.failure = e
            return 1

    def _external(self, site: int, table: int) -> int:
        """Native code's call of external kernel `site` on the buffers at `table`: 0, or 1
        when its body raised (kept, and raised again when the call has stopped)."""
        try:
            self._external_kernels[site].run(table)
            return 0
        except BaseException as e:
            self._local.failure = e
            return 1

    def _error(self, code: int, detail: int) -> BaseException:
        if code == Error.NO_CLAUSE:
            node = self._matches[detail]
            where = f" at {node.span}" if node.span is not None else ""
            return InterpreterError(f"no clause of the match{where} matches its value",
                                    node.span)
        if code == Error.NO_MEMORY:
            return MemoryError(
                f"the program took more than {_MEMORY_BUDGET >> 20} MiB in one call (a "
                "quarter of the machine's memory, at most 4 GiB): a loop releases its "
                "turns' memory when it carries tensors, tuples and data made before it (a "
                "list it walks) and writes older reference cells only itself, but one "
                "carrying closures or data it makes (a list it builds), or writing an older "
                "cell through a function it calls, keeps every turn's values until the call "
                "returns; loop in Python over calls of one step instead")
        if code in (Error.NO_KERNEL, Error.NO_EXCHANGE, Error.EXTERNAL):  # what making the
            # kernel, the collective's exchange or the external kernel raised
            failure, self._local.failure = self._local.failure, None
            return failure
        if code == Error.WRONG_SHAPE:
            kernel, span = self._wrong_shapes[detail >> 8]
            where = f" at {span}" if span is not None else ""
            return InterpreterError(
                f"an input of the kernel{where} is not of {kernel.input_types[detail & 0xFF]} "
                "at run time: a value whose type has relay.Any dimensions was used where "
                "static ones are required", span)
        if code == Error.TOO_DEEP:
            return InterpreterError(
                "the program's non-tail recursion is too deep for the native stack; write "
                "the recursion in tail position (e.g. foldl rather than foldr) so that it "
                "runs as a loop")
        return KeyboardInterrupt()


# Native code by a digest of its LLVM IR, loaded: the code holds no address of the process
# (abi.py), so programs of equal text -- the same function built again, a program per call
# signature met before -- share one module, and a later process loads it from the disk cache.
_LIBRARIES: dict[str, jit.Library] = {}
_LIBRARIES_LOCK = threading.Lock()


def _library(text: str, finite: bool) -> tuple[jit.Library, Callable[[str], str]]:
    """The compiled module of `text`, and the names its wrappers have in it."""
    # LLVM's optimiser takes ~3x the time of code generation alone, for code between
    # kernels that runs ~10% faster for it where it loops or recurses (a TreeLSTM's
    # training step); a program that runs straight through gains nothing measurable (an
    # MLP, LeNet). Megabytes (a third derivative) would take seconds: never optimised.
    # Code that runs straight through runs each instruction once a call: LLVM's -O0 code
    # generator makes it in a third of the time (the MLP's gradients: 6 ms rather than 18;
    # 721 instructions rather than 522, ~0.05 us more a call).
    speed = 2 if not finite and len(text) < _OPTIMISED_IR else 0
    digest = hashlib.sha256(f"{speed}|{text}".encode()).hexdigest()[:24]
    prefix = WRAPPER.replace("PROGRAM", digest)

    def rename(name: str) -> str:
        return name.replace(WRAPPER, prefix)

    with _LIBRARIES_LOCK:
        library = _LIBRARIES.get(digest)
        if library is None:
            library = _LIBRARIES[digest] = jit.compile_ir(
                text.replace(WRAPPER, prefix), f"native|{digest}", speed_level=speed,
                vectorize=False, fast_codegen=finite)
    return library, rename


# Memory one call may take beyond its arena before it stops with a MemoryError: a quarter
# of the machine's, at most 4 GiB. A call's memory is released only when it returns, and a
# tight loop allocating its kernels' outputs takes ~1.5 GB/s: the cap stops an endless one
# before it starves the machine (and leaves Ctrl-C time to act).
_MEMORY_BUDGET = min(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4, 4 << 30)


def _sigint_reaches_python() -> bool:
    """Whether Python would act on a SIGINT now: on the main thread (where its handlers run),
    with a Python handler (not ignored, nor the default action)."""
    # _signal.getsignal: signal.getsignal's wrapping of the result in an enum costs 5 us
    return threading.get_ident() == threading.main_thread().ident and \
        callable(_signal.getsignal(signal.SIGINT))


def _after_fork_in_child() -> None:
    """The native SIGINT handler of a run the main thread was in at the fork (a run the
    child does not have) would swallow the child's Ctrl-C: Python's handler instead. A
    lock another thread held at the fork would never be released: a new one."""
    global _LIBRARIES_LOCK
    _LIBRARIES_LOCK = threading.Lock()
    handler = signal.getsignal(signal.SIGINT)
    if handler is not None:  # None: a handler installed outside Python, left alone
        signal.signal(signal.SIGINT, handler)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _stack_budget() -> int:
    """How far below the caller's frame native code may grow the stack: half of what a
    thread has (the main thread's rlimit, else the threads' default size)."""
    size = threading.stack_size()
    if not size:
        size = resource.getrlimit(resource.RLIMIT_STACK)[0]
    if size <= 0 or size == resource.RLIM_INFINITY:
        size = 8 << 20
    return size // 2


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_free = _libc.free


def _free_chunks(chunk: int) -> None:
    """Frees a list of chunks native code took from malloc (each starts with the next's
    address)."""
    while chunk:
        following = ctypes.c_int64.from_address(chunk).value
        _free(chunk)
        chunk = following


class _Pin:
    """The memory of a call whose result holds closures: its arena, its chunks and its
    arguments, alive while a closure refers to it (and the memory of later calls that wrote
    into its reference cells, in `held`)."""

    def __init__(self) -> None:
        self.closures = 0
        self.held: list[_Pin] = []
        self._memory: tuple = ()

    def hold(self, arena: np.ndarray, chunks: int, arguments: list) -> None:
        self._memory = (arena, arguments)
        weakref.finalize(self, _free_chunks, chunks)


def _check_boundary(t: Type, what: str, result: bool = False) -> None:
    """Values crossing into Python: tensors, tuples and data types of them; in a result,
    also functions of such values (closures, called back natively), shape-polymorphic ones
    too (``fn<n>(Tensor[(n, 4)]) -> ...``, a model relay.export_model exports): they run as
    a closure whose types hold the entry's own shape variables does."""
    if isinstance(t, TensorType):
        if not isinstance(t.dtype, str):
            raise Unsupported(f"{what} has a dtype known only at run time")
    elif isinstance(t, TupleType):
        for f in t.fields:
            _check_boundary(f, what, result)
    elif isinstance(t, TypeCall):
        for a in t.args:
            _check_boundary(a, what, result)
    elif isinstance(t, FuncType) and result:
        for a in t.arg_types:
            _check_boundary(a, what)
        _check_boundary(t.ret_type, what, result)
    else:
        raise Unsupported(f"{what} is of type {t}, which does not cross into Python natively")


def _closure_arities(t: Type, found: set[int]) -> set[int]:
    """The arities of the function types in result type `t`."""
    if isinstance(t, TupleType):
        for f in t.fields:
            _closure_arities(f, found)
    elif isinstance(t, TypeCall):
        for a in t.args:
            _closure_arities(a, found)
    elif isinstance(t, FuncType):
        found.add(len(t.arg_types))
        _closure_arities(t.ret_type, found)
    return found

