"""Whole programs as native code: closures, data types, references and recursion.

A plan (plan.py) runs first-order programs over tensors. Everything else in the language
-- a TreeLSTM matching on a tree and calling itself, a character RNN consing up a list, the
higher-order gradient's backpropagator closures and adjoint references -- is lowered here
to one LLVM function per Relay function, so a call of the program is one call into
compiled code with no Python between kernels. The interpreter stays the specification;
tests run both and compare.

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
pay no allocator or reference counts between kernels. When the arena runs out, native
code takes more chunks from malloc; Python frees them after the call and grows the arena
to the high-water mark, so later calls of the same program do not need them.

A loop releases its turns' memory as it goes (native_loops.py): at the back edge it copies
out what it carries and what its own reference cells hold (a training loop's parameters, in
the model's cell), resets the arena to its mark and copies them back. A cell older than the
turn written elsewhere keeps the turn's memory; so do loops carrying data types or closures.

Adding into a reference (the gradient's adjoints: ``ref_write(r, ref_read(r) + g)``, g a
node's weight gradient) writes the new total over the old one when the kernel adds
elementwise into an output of the total's type and the cell is the total's only holder: a
flag in the cell that such a write sets and any other read or write clears. A TreeLSTM
training step then stops taking a fresh weight-sized tensor per node (178 MB a step).

Errors. A ``match`` no clause matches, recursion deeper than the thread's stack allows,
a SIGINT (Ctrl-C, on the main thread) and a call taking more than its memory budget (a
quarter of the machine's, at most 4 GiB) stop the run with a code in the state; each call
site checks it and returns, and Python raises the error (an ``InterpreterError`` naming
the match's source line, ``KeyboardInterrupt``, ``MemoryError``): never a crash.

Closures returned to Python (a training loop returning ``relay.export_model(model)``,
Figure 4) keep the memory of the call that made them: its arena and chunks are handed to
them, and calling one runs native code through a wrapper per arity. A call of such a
closure that writes into a cell of the call that made it keeps its own memory for as long.

What it takes (else the dispatcher runs the program, executor.py): arguments of tensors,
tuples and data types, results of those and of functions; no function arguments and no
references crossing into Python. (An operator call outside a primitive function, when
FuseOps is disabled, becomes a primitive function of its own.)

>>> # a recursive sum over a relay.List, then a TreeLSTM: examples/tree_lstm_sst.py
"""
from __future__ import annotations

import ctypes
import itertools
import os
import resource
import signal
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any as AnyValue, Iterator, Sequence

import numpy as np
from llvmlite import ir

from relaydsl.backend.interpreter import Closure, InterpreterError, Value
from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.kernel import Kernel, address, compile_primitives
from relaydsl.backend.llvm.plan import _sigint_reaches_python, static_type
from relaydsl.backend.llvm.native_abi import (
    I8, I32, I64, NEVER, PTR, SLOTS, STATE_WORDS, Error, Word,
)
from relaydsl.backend.llvm.native_accumulations import Accumulation, accumulations
from relaydsl.backend.llvm.native_loops import LoopMemory, flat, written_cells, young_function
from relaydsl.backend.llvm.native_sites import ALIGN, KernelSite, leaf_types, nbytes
from relaydsl.backend.llvm.native_values import Codec
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
)
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type, TypeCall
from relaydsl.ir.visitor import free_vars, post_order
from relaydsl.transform.fuse_ops import PRIMITIVE, is_primitive


_CHUNK = 1 << 20
_INITIAL_ARENA = 1 << 16
_MAX_ARENA = 1 << 30  # beyond it, a call's extra memory comes in chunks each time
_OPTIMISED_IR = 1 << 20  # bytes of LLVM IR text: larger native code is compiled unoptimised
_WAYS = 4  # the kernels a call site of run-time shapes finds without asking Python
_RESOLVE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_RUN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


class Unsupported(Exception):
    """The program uses something the native lowering does not run (the dispatcher does)."""


@dataclass(frozen=True)
class _Primitive:
    """A let-bound primitive function: called as a kernel, never a runtime value."""

    fn: Function


# ---- the program ---------------------------------------------------------------------------

class NativeProgram:
    """Global `entry` of a prepared module (executor.prepare) as native code.

    ``program(*values)`` takes and returns NumPy arrays, tuples and ``ConstructorValue``s.
    Building one for a program it cannot run raises ``Unsupported``. `shapes_at_run_time`
    treats every kernel as one of shapes known only at run time (for tests: random
    programs check that machinery against JAX).
    """

    def __init__(self, mod: IRModule, entry: str, opt_level: int = 3, *,
                 shapes_at_run_time: bool = False):
        self.mod, self.entry = mod, entry
        fn = mod[entry]
        t = fn.checked_type
        assert isinstance(t, FuncType)
        self.param_types = [p.checked_type for p in fn.params]
        self.ret_type = t.ret_type
        for p, pt in zip(fn.params, self.param_types):
            _check_boundary(pt, f"parameter {p.name_hint}")
        _check_boundary(self.ret_type, "the result", result=True)
        self.opt_level = opt_level
        self._resolver = _RESOLVE(self._resolve)  # kernels of run-time shapes, on demand
        lowering = _Lowering(mod, opt_level, ctypes.cast(self._resolver, ctypes.c_void_p).value,
                             shapes_at_run_time)
        name = lowering.lower_entry(mod.get_global_var(entry),
                                    [*self.param_types, self.ret_type])
        arities = sorted(_closure_arities(self.ret_type, set()))
        closure_names = {n: lowering.closure_wrapper(n) for n in arities}
        self.boxed = lowering.boxed
        self._keep = lowering.keep
        self._matches = lowering.matches
        self._sites = lowering.sites
        # per site, the records of the last kernels it used (native code looks there first)
        self._ways = np.zeros(len(self._sites) * _WAYS + 1, np.int64)
        self._ways_at = address(self._ways)
        self._wrong_shapes = lowering.wrong_shapes
        self.kernels = len(lowering.kernels)
        self.kernel_calls = lowering.kernel_calls
        text = str(lowering.module)
        # LLVM's optimiser takes seconds on the megabytes a third derivative lowers to, for
        # code between kernels that runs ~10% faster for it
        speed = 2 if len(text) < _OPTIMISED_IR else 0
        library = jit.compile_ir(text, f"native|{id(self)}|{name}", speed_level=speed,
                                 vectorize=False, use_disk_cache=False)
        self._function = library.address(name)
        # the entry's and the closures' wrappers: i64 run(state, slots)
        self._closure_entries = {n: library.address(f) for n, f in closure_names.items()}
        self._runners = {a: _RUN(a) for a in [self._function, *self._closure_entries.values()]}
        self._epoch = 0  # where the next call's epochs start
        self._run_interruptible = ctypes.CFUNCTYPE(
            ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            jit.runtime_function("relaydsl_call_interruptible"))
        self._codec = Codec(mod, self.boxed)
        self._arena_bytes = _INITIAL_ARENA
        self._local = threading.local()  # a thread's arena and state

    def describe(self) -> str:
        """It in a line, for the executor's log."""
        dynamic = f", {len(self._sites)} of shapes known only at run time (a kernel per " \
            "shape, made on first use)" if self._sites else ""
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
        arena = local.arena
        if arena is None or arena.nbytes < self._arena_bytes + ALIGN:
            arena = local.arena = np.empty(self._arena_bytes + ALIGN, np.uint8)
            base = address(arena) + (-address(arena)) % ALIGN
            # the state a call starts from (its budget and epoch set below)
            local.fresh = np.array((base, base + arena.nbytes - ALIGN, 0, 0, -local.stack, 0,
                                    0, address(local.stop), 0, self._ways_at, 0, NEVER),
                                   np.int64)
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
        if _sigint_reaches_python():
            status = self._run_interruptible(function, local.state_at, address(slots))
        else:
            status = self._runners[function](local.state_at, address(slots))
        pin = _Pin()  # the call's memory, if a closure in its result lives in it
        try:
            if status >> 8:  # a SIGINT came during the run
                signal.raise_signal(signal.SIGINT)  # by default, raises KeyboardInterrupt
            if status & 0xFF:
                raise self._error(int(status & 0xFF), int(state[Word.DETAIL]))
            result = codec.decode(int(slots[-1]), ret_type,
                                  lambda pointer, t: self._closure(pointer, t, pin))
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
        grows the arena to what it needed (up to _MAX_ARENA) for the next calls."""
        _free_chunks(int(state[Word.CHUNKS]))
        overflow = int(state[Word.OVERFLOW])
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
                record = s.records.setdefault(key, s.record(key, self.opt_level))
            self._ways[site * _WAYS + s.next_way] = address(record)
            s.next_way = (s.next_way + 1) % _WAYS
            return address(record)
        except BaseException as e:  # raised again when the call has stopped
            self._local.failure = e
            return 0

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
                "turns' memory when it carries only tensors and tuples of them and writes "
                "older reference cells only itself, but one carrying data types or closures, "
                "or writing an older cell through a function it calls, keeps every turn's "
                "values until the call returns; loop in Python over calls of one step instead")
        if code == Error.NO_KERNEL:  # making the kernel failed: what it raised
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


# Memory one call may take beyond its arena before it stops with a MemoryError: a quarter
# of the machine's, at most 4 GiB. A call's memory is released only when it returns, and a
# tight loop allocating its kernels' outputs takes ~1.5 GB/s: the cap stops an endless one
# before it starves the machine (and leaves Ctrl-C time to act).
_MEMORY_BUDGET = min(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4, 4 << 30)


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
    also functions of such values (closures, called back natively)."""
    if isinstance(t, TensorType):
        if not isinstance(t.dtype, str):
            raise Unsupported(f"{what} has a dtype known only at run time")
    elif isinstance(t, TupleType):
        for f in t.fields:
            _check_boundary(f, what, result)
    elif isinstance(t, TypeCall):
        for a in t.args:
            _check_boundary(a, what, result)
    elif isinstance(t, FuncType) and result and not t.type_params:
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


# ---- lowering ------------------------------------------------------------------------------

class _Lowering:
    """The LLVM module of one program: a function per reachable Relay function."""

    def __init__(self, mod: IRModule, opt_level: int, resolve: int, shapes_at_run_time: bool):
        self.mod, self.opt_level = mod, opt_level
        self.shapes_at_run_time = shapes_at_run_time
        self.resolve = resolve  # the address of ``i64 resolve(site, dims)`` (Python)
        # tensors as headers [data, dims...] (when some shape is known only at run time)
        self.boxed = False
        self.sites: list[KernelSite] = []  # kernel calls of run-time shapes, by index
        self.wrong_shapes: list[tuple[Kernel, AnyValue]] = []  # the checks' kernels, spans
        self.op_kernels: dict[int, Function] = {}  # a lone operator call's primitive function
        self.module = ir.Module(name="relaydsl_native")
        self.module.triple = jit.host_target().triple
        self.module.data_layout = jit.data_layout()
        self.keep: list[AnyValue] = []  # constants and kernels the code points at
        self.kernels: dict[int, Kernel] = {}  # by id of the primitive function
        self.matches: list[Match] = []  # by the index a no-clause error reports
        self.kernel_calls = 0
        self.globals: dict[GlobalVar, ir.Function] = {}
        self.closures: dict[GlobalVar, ir.Value] = {}
        self.pending: list[tuple] = []  # functions declared, to emit
        self.names = itertools.count()
        self.malloc = ir.Function(self.module, ir.FunctionType(PTR, [I64]), "malloc")
        self.free = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), "free")
        self.memcpy = self.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
        self.alloc = self._alloc_function()
        self.reset = self._reset_function()
        self.young = young_function(self.module)
        # (), what a ref_write returns: no allocation
        self.unit = self.constant_object("relaydsl_unit", [ir.Constant(PTR, None)])
        self.frame_address = ir.Function(self.module, ir.FunctionType(PTR, [I32]),
                                         "llvm.frameaddress.p0")

    def lower_entry(self, entry: GlobalVar, boundary: list[Type]) -> str:
        self.compile_kernels(entry)
        self.boxed = self.shapes_at_run_time or bool(self.dynamic) or \
            any(self.dynamic_type(t, set()) for t in boundary)
        target = self.global_function(entry)
        while self.pending:
            _FunctionCompiler(self, *self.pending.pop()).compile()
        return self._entry_wrapper(target, len(self.mod[entry].params))

    def compile_kernels(self, entry: GlobalVar) -> None:
        """Compiles every primitive function the entry can reach, together."""
        seen, todo, prims, op_calls = {entry}, [entry], [], []

        def note(e: Expr) -> None:
            if isinstance(e, GlobalVar) and e not in seen:
                seen.add(e)
                todo.append(e)
            elif isinstance(e, Function) and is_primitive(e):
                prims.append(e)
            elif isinstance(e, Call) and isinstance(e.op, Op):
                op_calls.append(e)

        while todo:
            post_order(self.mod[todo.pop()], note)
        inside: set[int] = set()
        for f in prims:
            post_order(f.body, lambda e: inside.add(id(e)))
        for call in op_calls:  # outside primitive functions: FuseOps did not run
            if id(call) not in inside:
                self.op_kernels[id(call)] = _primitive_of(call)
                prims.append(self.op_kernels[id(call)])
        unique = list({id(f): f for f in prims}.values())
        static = []
        self.dynamic = set()  # the ids of primitive functions compiled per shape at run time
        for f in unique:
            t = f.checked_type
            if all(static_type(p) for p in t.arg_types) and static_type(t.ret_type) and \
                    not self.shapes_at_run_time:
                static.append(f)
            elif all(isinstance(p.dtype, str) for p in leaf_types([*t.arg_types, t.ret_type])):
                self.dynamic.add(id(f))
            else:
                raise Unsupported("a kernel whose dtypes are known only at run time")
        for f, k in zip(static, compile_primitives(static, opt_level=self.opt_level)):
            self.kernels[id(f)] = k
            self.keep.append(k)

    def dynamic_type(self, t: Type, seen: set) -> bool:
        """Whether a value of type `t` from or to Python holds a tensor of a shape known
        only at run time (the fields of data types included)."""
        if isinstance(t, TensorType):
            return not static_type(t)
        if isinstance(t, TupleType):
            return any(self.dynamic_type(f, seen) for f in t.fields)
        if isinstance(t, TypeCall) and t not in seen:
            seen.add(t)
            return any(self.dynamic_type(f, seen)
                       for c in self.mod.type_definitions[t.func].constructors
                       for f in self.mod.field_types(c, t))
        return False

    def signature(self, arity: int) -> ir.FunctionType:
        return ir.FunctionType(PTR, [PTR, PTR] + [PTR] * arity)

    def declare(self, fn: Function, hint: str, captures: list, self_var: Var | None,
                self_global: GlobalVar | None) -> ir.Function:
        """A function for `fn`, emitted later (closures and globals nest freely)."""
        f = ir.Function(self.module, self.signature(len(fn.params)),
                        f"{_symbol(hint)}_{next(self.names)}")
        f.linkage = "internal"
        self.pending.append((f, fn, captures, self_var, self_global))
        return f

    def global_function(self, gv: GlobalVar) -> ir.Function:
        f = self.globals.get(gv)
        if f is None:
            f = self.globals[gv] = self.declare(self.mod[gv], gv.name_hint, [], None, gv)
        return f

    def global_closure(self, gv: GlobalVar) -> ir.Value:
        """The closure of a global used as a value: its code and no captures."""
        closure = self.closures.get(gv)
        if closure is None:
            closure = self.closures[gv] = self.constant_object(
                f"closure_{_symbol(gv.name_hint)}_{next(self.names)}",
                [self.global_function(gv).bitcast(PTR)])
        return closure

    def constant_object(self, name: str, fields: list[ir.Constant]) -> ir.Value:
        """An object in the module's constant data rather than the arena."""
        t = ir.ArrayType(PTR, len(fields))
        g = ir.GlobalVariable(self.module, t, name)
        g.linkage = "internal"
        g.global_constant = True
        g.initializer = ir.Constant(t, fields)
        return g.bitcast(PTR)

    def constant(self, data: np.ndarray) -> ir.Value:
        """A pointer to a copy of `data` the program keeps."""
        a = np.require(data, requirements=("C", "A"))
        self.keep.append(a)
        return ir.Constant(I64, address(a)).inttoptr(PTR)

    def tensor_constant(self, data: np.ndarray) -> ir.Value:
        """A constant tensor as a value: its data, or its header when tensors are boxed."""
        pointer = self.constant(data)
        if not self.boxed:
            return pointer
        dims = [ir.Constant(I64, d).inttoptr(PTR) for d in np.shape(data)]
        return self.constant_object(f"tensor_{next(self.names)}", [pointer, *dims])

    def _alloc_function(self) -> ir.Function:
        """``ptr alloc(state, bytes, align - 1)``: bump allocation; when the arena is full,
        a chunk from malloc (linked into the state's list, for Python to free)."""
        f = ir.Function(self.module, ir.FunctionType(PTR, [PTR, I64, I64]), "relaydsl_alloc")
        f.linkage = "internal"
        st, n, mask = f.args
        entry, bump, fast, slow = (f.append_basic_block(x)
                                   for x in ("entry", "bump", "fast", "slow"))
        b = ir.IRBuilder(entry)
        words = b.bitcast(st, I64.as_pointer())
        cur_p, end_p = b.gep(words, [I64(Word.CUR)]), b.gep(words, [I64(Word.END)])
        b.branch(bump)
        b.position_at_end(bump)
        start = b.and_(b.add(b.load(cur_p), mask), b.not_(mask))
        new = b.add(start, n)
        b.cbranch(b.icmp_unsigned("<=", new, b.load(end_p)), fast, slow)
        b.position_at_end(fast)
        b.store(new, cur_p)
        b.ret(b.inttoptr(start, PTR))
        b.position_at_end(slow)
        size = b.add(n, I64(_CHUNK + 2 * ALIGN))
        chunk = b.call(self.malloc, [size])
        chunks_p = b.gep(words, [I64(Word.CHUNKS)])
        chunk_words = b.bitcast(chunk, I64.as_pointer())  # [next chunk, size, ...]
        b.store(b.load(chunks_p), chunk_words)
        b.store(size, b.gep(chunk_words, [I64(1)]))
        b.store(b.ptrtoint(chunk, I64), chunks_p)
        over_p = b.gep(words, [I64(Word.OVERFLOW)])
        over = b.add(b.load(over_p), size)
        b.store(over, over_p)
        with b.if_then(b.icmp_unsigned(">", over, b.load(b.gep(words, [I64(Word.BUDGET)]))),
                       likely=False):  # the run stops at the next call or loop turn
            b.store(I64(Error.NO_MEMORY), b.gep(words, [I64(Word.ERROR)]))
        base = b.ptrtoint(chunk, I64)
        b.store(b.add(base, I64(ALIGN)), cur_p)
        b.store(b.add(base, size), end_p)
        b.branch(bump)
        return f

    def _reset_function(self) -> ir.Function:
        """``void reset(state, cur, end, chunks)``: the arena back to a mark taken earlier,
        the chunks taken since freed."""
        f = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64, I64]),
                        "relaydsl_reset")
        f.linkage = "internal"
        st, cur, end, mark = f.args
        entry, test, release, done = (f.append_basic_block(x)
                                      for x in ("entry", "test", "release", "done"))
        b = ir.IRBuilder(entry)
        words = b.bitcast(st, I64.as_pointer())
        chunks_p, over_p = b.gep(words, [I64(Word.CHUNKS)]), b.gep(words, [I64(Word.OVERFLOW)])
        b.branch(test)
        b.position_at_end(test)
        chunk = b.load(chunks_p)
        b.cbranch(b.icmp_unsigned("!=", chunk, mark), release, done)
        b.position_at_end(release)
        chunk_words = b.inttoptr(chunk, I64.as_pointer())
        b.store(b.load(chunk_words), chunks_p)
        b.store(b.sub(b.load(over_p), b.load(b.gep(chunk_words, [I64(1)]))), over_p)
        b.call(self.free, [b.inttoptr(chunk, PTR)])
        b.branch(test)
        b.position_at_end(done)
        b.store(cur, b.gep(words, [I64(Word.CUR)]))
        b.store(end, b.gep(words, [I64(Word.END)]))
        b.ret_void()
        return f

    def _entry_wrapper(self, target: ir.Function | None, arity: int) -> str:
        """``i64 run(state, slots)``: the entry (`target`) on ``slots[0..arity)``, its
        result into ``slots[arity]`` -- or, with no target, the closure at ``slots[0]`` on
        the next `arity` slots; returns the state's error code. Turns the state's stack
        budget into the lowest address functions may reach."""
        name = f"relaydsl_native_{next(self.names)}"
        f = ir.Function(self.module, ir.FunctionType(I64, [PTR, PTR]), name)
        st, slots = f.args
        b = ir.IRBuilder(f.append_basic_block("entry"))
        words = b.bitcast(st, I64.as_pointer())
        limit_p = b.gep(words, [I64(Word.STACK_LIMIT)])
        here = b.ptrtoint(b.call(self.frame_address, [I32(0)]), I64)
        b.store(b.add(here, b.load(limit_p)), limit_p)
        pointers = b.bitcast(slots, SLOTS)
        first = 0 if target is not None else 1
        args = [b.load(b.gep(pointers, [I64(first + i)])) for i in range(arity)]
        if target is not None:
            result = b.call(target, [st, ir.Constant(PTR, None), *args])
        else:
            closure = b.load(pointers)
            code = b.load(b.bitcast(closure, SLOTS))
            result = b.call(b.bitcast(code, self.signature(arity).as_pointer()),
                            [st, closure, *args])
        b.store(result, b.gep(pointers, [I64(first + arity)]))
        b.ret(b.load(b.gep(words, [I64(Word.ERROR)])))
        return name

    def closure_wrapper(self, arity: int) -> str:
        """``i64 run(state, slots)`` calling a closure of `arity` arguments (one a call
        returned to Python)."""
        return self._entry_wrapper(None, arity)


def _symbol(hint: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in hint)[:40] or "fn"


class _FunctionCompiler:
    """Emits one Relay function as ``ptr f(state, closure, params...)``.

    `captures` lists the free variables of a closure in the order its object holds them
    (a let-bound primitive function is static: no slot); `self_var` is the name a
    recursive local function calls itself by, `self_global` the global being emitted.
    """

    def __init__(self, lowering: _Lowering, llvm_fn: ir.Function, fn: Function,
                 captures: list, self_var: Var | None, self_global: GlobalVar | None):
        self.low, self.llvm_fn, self.fn = lowering, llvm_fn, fn
        self.captures, self.self_var, self.self_global = captures, self_var, self_global

    def compile(self) -> None:
        f, fn = self.llvm_fn, self.fn
        self.st, self.closure, *params = f.args
        allocas = f.append_basic_block("allocas")
        start = f.append_basic_block("start")
        self.allocas = ir.IRBuilder(allocas)
        self.table: ir.AllocaInstr | None = None
        self.table_size = 0
        self.b = b = ir.IRBuilder(start)
        self.words = b.bitcast(self.st, I64.as_pointer())
        here = b.ptrtoint(b.call(self.low.frame_address, [I32(0)]), I64)
        deep = b.icmp_unsigned("<", here, b.load(b.gep(self.words, [I64(Word.STACK_LIMIT)])))
        with b.if_then(deep, likely=False):
            self.fail(Error.TOO_DEEP, 0)
        env: dict = {}
        slot = 1
        for v, static in self.captures:
            if static is None:
                env[v] = self.field(self.closure, slot)
                slot += 1
            else:
                env[v] = static
        if self.self_var is not None:
            env[self.self_var] = self.closure
        self.accumulations = accumulations(fn.body)
        # a self call in tail position comes back to the header with new arguments
        self.loop_memory: LoopMemory | None = None
        if self.loops(fn.body) and all(p.has_type and flat(p.checked_type) for p in fn.params):
            roots = written_cells(fn, [v for v, static in self.captures if static is None])
            self.loop_memory = LoopMemory(self, [(env[v], v.checked_type.value) for v in roots])
        self.header = f.append_basic_block("header")
        before = b.block
        b.branch(self.header)
        b.position_at_end(self.header)
        self.phis = [b.phi(PTR, name=_symbol(p.name_hint)) for p in fn.params]
        for phi, arg in zip(self.phis, params):
            phi.add_incoming(arg, before)
        if self.loop_memory is not None:
            self.loop_memory.start(before)
        self.poll_stop()
        env.update(zip(fn.params, self.phis))
        self.tail(fn.body, env)
        self.allocas.branch(start)

    # ---- helpers ---------------------------------------------------------------------
    def fail(self, code: int, detail: int) -> None:
        b = self.b
        b.store(I64(code), b.gep(self.words, [I64(Word.ERROR)]))
        b.store(I64(detail), b.gep(self.words, [I64(Word.DETAIL)]))
        b.ret(ir.Constant(PTR, None))

    def poll_stop(self) -> None:
        """At each call and loop turn: stop on a SIGINT, or on an error an allocation
        flagged (it cannot return one itself)."""
        b = self.b
        flag = b.inttoptr(b.load(b.gep(self.words, [I64(Word.STOP)])), I32.as_pointer())
        stop = b.load_atomic(flag, "monotonic", 4)
        with b.if_then(b.icmp_signed("!=", stop, I32(0)), likely=False):
            self.fail(Error.INTERRUPTED, 0)
        self.check_error()

    def check_error(self) -> None:
        b = self.b
        err = b.load(b.gep(self.words, [I64(Word.ERROR)]))
        with b.if_then(b.icmp_signed("!=", err, I64(0)), likely=False):
            b.ret(ir.Constant(PTR, None))

    def allocate(self, nbytes: int | ir.Value, align: int = 8) -> ir.Value:
        size = I64(max(nbytes, 1)) if isinstance(nbytes, int) else nbytes
        return self.b.call(self.low.alloc, [self.st, size, I64(align - 1)])

    def field(self, obj: ir.Value, i: int) -> ir.Value:
        return self.b.load(self.b.gep(self.b.bitcast(obj, SLOTS), [I64(i)]))

    def word(self, obj: ir.Value, i: int | ir.Value) -> ir.Value:
        """Word `i` of `obj` as an integer."""
        at = I64(i) if isinstance(i, int) else i
        return self.b.load(self.b.gep(self.b.bitcast(obj, I64.as_pointer()), [at]))

    # ---- tensors: data pointers, or headers [data, dims...] when shapes vary at run time
    def data(self, tensor: ir.Value) -> ir.Value:
        return self.field(tensor, 0) if self.low.boxed else tensor

    def dims(self, tensor: ir.Value, rank: int) -> list[ir.Value]:
        return [self.word(tensor, 1 + i) for i in range(rank)]

    def new_tensor(self, dims: Sequence[ir.Value], nbytes: int | ir.Value) -> ir.Value:
        """Fresh memory for a tensor of `dims`, `nbytes` of data."""
        if not self.low.boxed:
            return self.allocate(nbytes, ALIGN)
        header = _header_bytes(len(dims))
        size = I64(header + max(nbytes, 1)) if isinstance(nbytes, int) else \
            self.b.add(nbytes, I64(header))
        tensor = self.allocate(size, ALIGN)
        self.set_field(tensor, 0, self.b.gep(tensor, [I64(header)]))
        for i, d in enumerate(dims):
            self.set_field(tensor, 1 + i, self.b.inttoptr(d, PTR))
        return tensor

    def set_field(self, obj: ir.Value, i: int, value: ir.Value) -> None:
        self.b.store(value, self.b.gep(self.b.bitcast(obj, SLOTS), [I64(i)]))

    def record(self, values: Sequence[ir.Value], tag: int | None = None) -> ir.Value:
        """A fresh object holding `values` (after an ADT value's tag)."""
        fields = ([] if tag is None else [ir.Constant(I64, tag).inttoptr(PTR)]) + list(values)
        obj = self.allocate(8 * len(fields))
        for i, v in enumerate(fields):
            self.set_field(obj, i, v)
        return obj

    def new_block(self, name: str) -> ir.Block:
        return self.llvm_fn.append_basic_block(name)

    # ---- tail position ---------------------------------------------------------------
    def tail(self, e: Expr, env: dict) -> None:
        """Emits `e` and returns its value; a self call jumps back to the header."""
        while isinstance(e, Let):
            env = self.bind(e, env)
            e = e.body
        b = self.b
        if isinstance(e, If):
            for block, branch in zip(self.branch(e, env), (e.true_branch, e.false_branch)):
                b.position_at_end(block)
                self.tail(branch, env)
        elif isinstance(e, Match):
            for block, clause_env, rhs in self.clauses(e, env):
                b.position_at_end(block)
                self.tail(rhs, clause_env)
        elif isinstance(e, Call) and self.is_self(e.op, env):
            args = [self.value(a, env) for a in e.args]
            if self.loop_memory is not None:
                args = self.loop_memory.back_edge(args)
            for phi, a in zip(self.phis, args):
                phi.add_incoming(a, b.block)
            b.branch(self.header)
        else:
            result = self.value(e, env, tail=True)
            if self.loop_memory is not None:
                self.loop_memory.leave()
            b.ret(result)

    def loops(self, e: Expr) -> bool:
        """Whether `e`, the body, calls this function in tail position (a loop)."""
        while isinstance(e, Let):
            e = e.body
        if isinstance(e, If):
            return self.loops(e.true_branch) or self.loops(e.false_branch)
        if isinstance(e, Match):
            return any(self.loops(c.rhs) for c in e.clauses)
        return isinstance(e, Call) and (e.op is self.self_global if self.self_global
                                        else e.op is self.self_var and e.op is not None)

    def is_self(self, op: Expr, env: dict) -> bool:
        if self.self_global is not None:
            return op is self.self_global
        return self.self_var is not None and op is self.self_var and \
            env.get(op) is self.closure

    def branch(self, e: If, env: dict) -> tuple[ir.Block, ir.Block]:
        """Branches on the bool scalar `e.cond`; the two blocks to fill."""
        b = self.b
        flag = b.load(b.bitcast(self.data(self.value(e.cond, env)), I8.as_pointer()))
        then, other = self.new_block("then"), self.new_block("else")
        b.cbranch(b.icmp_unsigned("!=", flag, I8(0)), then, other)
        return then, other

    def clauses(self, m: Match, env: dict) -> list[tuple[ir.Block, dict, Expr]]:
        """Tests the clauses in order: each one's body block (empty, to fill), environment
        and body. When none matches, the run stops with the match's index."""
        b = self.b
        data = self.value(m.data, env)
        self.low.matches.append(m)
        site = len(self.low.matches) - 1
        bodies = []
        for clause in m.clauses:
            no = self.new_block("next_clause")
            clause_env = dict(env)
            self.test(clause.lhs, data, clause_env, no)
            body = self.new_block("clause")
            b.branch(body)
            bodies.append((body, clause_env, clause.rhs))
            b.position_at_end(no)
        self.fail(Error.NO_CLAUSE, site)
        return bodies

    def test(self, p: Pattern, value: ir.Value, env: dict, no: ir.Block) -> None:
        """Branches to `no` unless `value` matches `p`; binds its variables in `env`."""
        b = self.b
        if isinstance(p, PatternWildcard):
            return
        if isinstance(p, PatternVar):
            env[p.var] = value
        elif isinstance(p, PatternConstructor):
            tag = b.ptrtoint(self.field(value, 0), I64)
            yes = self.new_block("tag_matches")
            b.cbranch(b.icmp_signed("==", tag, I64(p.constructor.tag)), yes, no)
            b.position_at_end(yes)
            for i, sub in enumerate(p.patterns):
                self.test(sub, self.field(value, i + 1), env, no)
        elif isinstance(p, PatternTuple):
            for i, sub in enumerate(p.patterns):
                self.test(sub, self.field(value, i), env, no)
        else:
            raise Unsupported(f"the pattern {type(p).__name__}")

    # ---- values ----------------------------------------------------------------------
    def bind(self, let: Let, env: dict) -> dict:
        env = dict(env)
        v = let.value
        if isinstance(v, Function) and is_primitive(v):
            env[let.var] = _Primitive(v)
        elif isinstance(v, Function):
            env[let.var] = self.closure_of(v, env, let.var)
        else:
            env[let.var] = self.value(v, env)
        return env

    def value(self, e: Expr, env: dict, tail: bool = False) -> ir.Value:
        """Emits `e`; its value (`tail`: the caller returns it at once)."""
        if isinstance(e, Var):
            v = env.get(e)
            if v is None or isinstance(v, _Primitive):
                raise Unsupported(f"the variable {e.name_hint} used as a value")
            return v
        if isinstance(e, Let):
            while isinstance(e, Let):
                env = self.bind(e, env)
                e = e.body
            return self.value(e, env, tail)
        if isinstance(e, Call):
            return self.call(e, env, tail)
        if isinstance(e, Constant):
            return self.low.tensor_constant(e.data)
        if isinstance(e, Tuple):
            return self.record([self.value(f, env) for f in e.fields])
        if isinstance(e, TupleGetItem):
            return self.field(self.value(e.tuple_value, env), e.index)
        if isinstance(e, GlobalVar):
            return self.low.global_closure(e)
        if isinstance(e, Function):
            if is_primitive(e):
                raise Unsupported("a primitive function used as a value")
            return self.closure_of(e, env, None)
        if isinstance(e, Constructor):
            params = tuple(Var(f"x{i}") for i in range(len(e.inputs)))
            return self.closure_of(Function(params, Call(e, params)), {}, None)
        if isinstance(e, RefCreate):
            # a cell: [value, the epoch it was made in, whether it is the value's only holder]
            epoch = self.b.load(self.b.gep(self.words, [I64(Word.EPOCH)]))
            return self.record([self.value(e.value, env), self.b.inttoptr(epoch, PTR),
                                ir.Constant(PTR, None)])
        if isinstance(e, RefRead):
            cell = self.value(e.ref, env)
            if id(e) not in self.accumulations.reads:  # the value may now be held elsewhere
                self.set_field(cell, 2, ir.Constant(PTR, None))
            return self.field(cell, 0)
        if isinstance(e, RefWrite):
            cell, new = self.value(e.ref, env), self.value(e.value, env)
            self.set_field(cell, 0, new)
            only = id(e) in self.accumulations.writes  # an accumulation's total
            self.set_field(cell, 2, ir.Constant(I64, int(only)).inttoptr(PTR))
            if self.loop_memory is not None and self.loop_memory.is_root(cell):
                self.loop_memory.note_root_write(cell)
            else:
                self.note_write(cell)
            return self.low.unit
        if isinstance(e, If):
            arms = [(block, branch, env) for block, branch in
                    zip(self.branch(e, env), (e.true_branch, e.false_branch))]
            return self.join(arms)
        if isinstance(e, Match):
            return self.join([(block, rhs, clause_env)
                              for block, clause_env, rhs in self.clauses(e, env)])
        raise Unsupported(type(e).__name__)

    def note_write(self, cell: ir.Value) -> None:
        """The write barrier: the state keeps the oldest epoch of a cell written into."""
        b = self.b
        written_p = b.gep(self.words, [I64(Word.WRITTEN)])
        epoch, written = self.word(cell, 1), b.load(written_p)
        b.store(b.select(b.icmp_signed("<", epoch, written), epoch, written), written_p)

    def join(self, arms: list[tuple[ir.Block, Expr, dict]]) -> ir.Value:
        """Fills each arm's block with its expression; their values meet in a phi."""
        b = self.b
        merge = self.new_block("join")
        incoming = []
        for block, e, env in arms:
            b.position_at_end(block)
            incoming.append((self.value(e, env), b.block))
            b.branch(merge)
        b.position_at_end(merge)
        phi = b.phi(PTR)
        for v, block in incoming:
            phi.add_incoming(v, block)
        return phi

    def call(self, call: Call, env: dict, tail: bool) -> ir.Value:
        b, op = self.b, call.op
        if isinstance(op, Var) and isinstance(env.get(op), _Primitive):
            op = env[op].fn
        if isinstance(op, Function) and is_primitive(op):
            return self.kernel_call(op, call, env)
        if isinstance(op, Constructor):
            return self.record([self.value(a, env) for a in call.args], tag=op.tag)
        if isinstance(op, Op):
            return self.kernel_call(self.low.op_kernels[id(call)], call, env)
        if isinstance(op, GlobalVar):
            args = [self.value(a, env) for a in call.args]
            result = b.call(self.low.global_function(op),
                            [self.st, ir.Constant(PTR, None), *args], tail=tail)
        else:
            closure = self.value(op, env)
            args = [self.value(a, env) for a in call.args]
            code = b.bitcast(self.field(closure, 0), self.low.signature(len(args)).as_pointer())
            result = b.call(code, [self.st, closure, *args], tail=tail)
        if not tail:
            self.check_error()
        return result

    def kernel_call(self, fn: Function, call: Call, env: dict) -> ir.Value:
        """The kernel of primitive function `fn` on the call's arguments, into fresh
        outputs: one call through its buffer table (inputs, outputs, constants, scratch)."""
        b = self.b
        self.low.kernel_calls += 1
        inputs: list[ir.Value] = []
        for a in call.args:
            self.leaves(self.value(a, env), a.checked_type, inputs)
        if id(fn) in self.low.dynamic:
            return self.dynamic_kernel_call(fn, call, inputs)
        kernel = self.low.kernels[id(fn)]
        if self.low.boxed:
            self.check_shapes(kernel, call, inputs)
        accumulation = self.accumulations.get(id(call))
        if accumulation is not None and not kernel.empty:
            outputs = [self.accumulate(kernel, accumulation, inputs[accumulation.index], env)]
        else:
            outputs = [self.new_tensor([I64(d) for d in t.shape], nbytes(t.shape, t.dtype))
                       for t in kernel.output_types]
        if not kernel.empty:
            mark = self.mark() if kernel.scratch else None
            scratch = [self.allocate(nbytes(shape, dtype), ALIGN)
                       for shape, dtype in kernel.scratch]
            constants = [self.low.constant(c) for c in kernel.constants]
            pointers = [*map(self.data, inputs), *map(self.data, outputs), *constants,
                        *scratch]
            table = self.kernel_table(len(pointers))
            for i, p in enumerate(pointers):
                b.store(p, b.gep(table, [I64(0), I64(i)]))
            entry = b.inttoptr(I64(kernel.entry_address),
                               ir.FunctionType(ir.VoidType(), [PTR]).as_pointer())
            b.call(entry, [b.bitcast(table, PTR)])
            if mark is not None:  # the scratch buffers are dead
                b.call(self.low.reset, [self.st, *mark])
        return self.rebuild(call.checked_type, iter(outputs))

    def mark(self) -> list[ir.Value]:
        """Where the arena is: what ``reset`` returns it to, freeing all allocated since."""
        return [self.b.load(self.b.gep(self.words, [I64(w)]))
                for w in (Word.CUR, Word.END, Word.CHUNKS)]

    def accumulate(self, kernel: Kernel, accumulation: Accumulation, total: ir.Value,
                   env: dict) -> ir.Value:
        """The output of an accumulation's kernel: over the running total it adds to when
        the reference cell holding it is its only holder, else fresh memory."""
        b = self.b
        t = kernel.output_types[0]
        owned = self.word(env[accumulation.cell], 2)
        before = b.block
        fresh, done = self.new_block("fresh_total"), self.new_block("total")
        b.cbranch(b.icmp_unsigned("!=", owned, I64(0)), done, fresh)
        b.position_at_end(fresh)
        new = self.new_tensor([I64(d) for d in t.shape], nbytes(t.shape, t.dtype))
        fresh_end = b.block
        b.branch(done)
        b.position_at_end(done)
        out = b.phi(PTR)
        out.add_incoming(total, before)
        out.add_incoming(new, fresh_end)
        return out

    def check_shapes(self, kernel: Kernel, call: Call, inputs: list[ir.Value]) -> None:
        """Stops the run unless the inputs have the shapes `kernel` was compiled for (a
        value typed with relay.Any dimensions could otherwise reach it at another size)."""
        b = self.b
        for i, (tensor, t) in enumerate(zip(inputs, kernel.input_types)):
            wrong = ir.Constant(ir.IntType(1), 0)
            for d, want in zip(self.dims(tensor, len(t.shape)), t.shape):
                wrong = b.or_(wrong, b.icmp_signed("!=", d, I64(want)))
            with b.if_then(wrong, likely=False):
                self.fail(Error.WRONG_SHAPE, len(self.low.wrong_shapes) << 8 | min(i, 0xFF))
        self.low.wrong_shapes.append((kernel, call.span))

    def dynamic_kernel_call(self, fn: Function, call: Call, inputs: list[ir.Value]
                            ) -> ir.Value:
        """A call of primitive function `fn` whose shapes are known only at run time: the
        kernel for the inputs' dimensions is looked for in the site's ways, else asked of
        Python (which compiles it on first use); its record says the outputs' dimensions
        and the kernel's buffer table."""
        b, low = self.b, self.low
        site = KernelSite(fn, leaf_types([a.checked_type for a in call.args]),
                     leaf_types([call.checked_type]))
        index = len(low.sites)
        low.sites.append(site)
        dims = [d for tensor, t in zip(inputs, site.inputs)
                for d in self.dims(tensor, len(t.shape))]
        keys = self.allocas.alloca(ir.ArrayType(I64, max(len(dims), 1)))
        for k, d in enumerate(dims):
            b.store(d, b.gep(keys, [I64(0), I64(k)]))
        ways = b.inttoptr(b.load(b.gep(self.words, [I64(Word.WAYS)])), I64.as_pointer())
        found = self.new_block("kernel_found")
        incoming = []
        for way in range(_WAYS):
            record = b.load(b.gep(ways, [I64(index * _WAYS + way)]))
            compare, following = self.new_block("kernel_way"), self.new_block("kernel_next")
            b.cbranch(b.icmp_unsigned("!=", record, I64(0)), compare, following)
            b.position_at_end(compare)
            same, pointer = ir.Constant(ir.IntType(1), 1), b.inttoptr(record, PTR)
            for k, d in enumerate(dims):
                same = b.and_(same, b.icmp_signed("==", self.word(pointer, KernelSite.KEY + k), d))
            incoming.append((record, b.block))
            b.cbranch(same, found, following)
            b.position_at_end(following)
        resolve = b.inttoptr(I64(low.resolve), ir.FunctionType(I64, [I64, PTR]).as_pointer())
        asked = b.call(resolve, [I64(index), b.bitcast(keys, PTR)])
        with b.if_then(b.icmp_unsigned("==", asked, I64(0)), likely=False):
            self.fail(Error.NO_KERNEL, index)
        incoming.append((asked, b.block))
        b.branch(found)
        b.position_at_end(found)
        chosen = b.phi(I64)
        for v, block in incoming:
            chosen.add_incoming(v, block)
        record = b.inttoptr(chosen, PTR)
        outputs, at = [], site.out_dims_at
        for i, t in enumerate(site.outputs):
            rank = len(t.shape)
            out_dims = [self.word(record, at + r) for r in range(rank)]
            at += rank
            outputs.append(self.new_tensor(out_dims, self.word(record, site.out_bytes_at + i)))
        # the table: the record's template (constants; scratch offsets, made addresses)
        mark = self.mark()  # the table and the scratch buffers are dead after the call
        size = self.word(record, KernelSite.TABLE)
        table = self.allocate(b.mul(size, I64(8)))
        scratch = b.ptrtoint(self.allocate(self.word(record, KernelSite.SCRATCH_BYTES), ALIGN), I64)
        first_scratch = b.sub(size, self.word(record, KernelSite.SCRATCHES))
        with self.counting(size) as i:
            entry = self.word(record, b.add(i, I64(site.template_at)))
            offset = b.select(b.icmp_signed(">=", i, first_scratch), scratch, I64(0))
            b.store(b.add(entry, offset), b.gep(b.bitcast(table, I64.as_pointer()), [i]))
        for i, p in enumerate([*map(self.data, inputs), *map(self.data, outputs)]):
            self.set_field(table, i, p)
        code = self.word(record, KernelSite.ENTRY)
        with b.if_then(b.icmp_unsigned("!=", code, I64(0))):
            b.call(b.inttoptr(code, ir.FunctionType(ir.VoidType(), [PTR]).as_pointer()),
                   [table])
        b.call(low.reset, [self.st, *mark])
        return self.rebuild(call.checked_type, iter(outputs))

    @contextmanager
    def counting(self, count: ir.Value) -> Iterator[ir.Value]:
        """A loop over ``i`` in ``[0, count)``: its body is what the block emits."""
        b = self.b
        before, test = b.block, self.new_block("count")
        body, done = self.new_block("count_body"), self.new_block("count_done")
        b.branch(test)
        b.position_at_end(test)
        i = b.phi(I64)
        i.add_incoming(I64(0), before)
        b.cbranch(b.icmp_signed("<", i, count), body, done)
        b.position_at_end(body)
        yield i
        i.add_incoming(b.add(i, I64(1)), b.block)
        b.branch(test)
        b.position_at_end(done)

    def kernel_table(self, size: int) -> ir.Value:
        """A stack array for kernels' buffer tables, in the entry block (so a loop does
        not grow the stack); one per function, grown when a kernel needs more."""
        if self.table is None or size > self.table_size:
            self.table_size = max(size, 2 * self.table_size, 8)
            self.table = self.allocas.alloca(ir.ArrayType(PTR, self.table_size))
        return self.table

    def leaves(self, value: ir.Value, t: Type, out: list[ir.Value]) -> None:
        if isinstance(t, TupleType):
            for i, f in enumerate(t.fields):
                self.leaves(self.field(value, i), f, out)
        else:
            out.append(value)

    def rebuild(self, t: Type, outputs) -> ir.Value:
        if isinstance(t, TupleType):
            return self.record([self.rebuild(f, outputs) for f in t.fields])
        return next(outputs)

    def closure_of(self, fn: Function, env: dict, self_var: Var | None) -> ir.Value:
        """A closure of `fn`: its code and the values of its free variables from `env`."""
        captures, runtime = [], []
        for v in free_vars(fn):
            if v is self_var:
                continue
            if v not in env:
                raise Unsupported(f"the free variable {v.name_hint} of a closure")
            value = env[v]
            if isinstance(value, _Primitive):
                captures.append((v, value))
            else:
                captures.append((v, None))
                runtime.append(value)
        code = self.low.declare(fn, self_var.name_hint if self_var else "lambda", captures,
                                self_var, None)
        return self.record([code.bitcast(PTR), *runtime])


def _primitive_of(call: Call) -> Function:
    """A lone operator call as a primitive function of its own (tuple arguments passed
    field by field, as FuseOps passes them)."""
    from relaydsl.typing import infer_type

    params: list[Var] = []

    def as_params(t: Type) -> Expr:
        if isinstance(t, TupleType):
            return Tuple(tuple(as_params(f) for f in t.fields))
        params.append(Var(f"p{len(params)}", t))
        return params[-1]

    args = tuple(as_params(a.checked_type) for a in call.args)
    fn = infer_type(Function(tuple(params), Call(call.op, args, call.attrs, call.type_args),
                             attrs=PRIMITIVE))
    assert isinstance(fn, Function)
    return fn


def _header_bytes(rank: int) -> int:
    """The room before a boxed tensor's data (which stays 64-byte aligned)."""
    return -(-8 * (1 + rank) // ALIGN) * ALIGN
