"""Whole programs as native code: closures, data types, references and recursion.

A plan (plan.py) runs first-order programs over tensors. Everything else in the language
-- a TreeLSTM matching on a tree and calling itself, a character RNN consing up a list, the
higher-order gradient's backpropagator closures and adjoint references -- is lowered here
to one LLVM function per Relay function, so a call of the program is one call into
compiled code with no Python between kernels. The interpreter stays the specification;
tests run both and compare.

Values. Every value is one pointer:

* a tensor: its data (64-byte aligned); its type, static, says the shape and dtype;
* a tuple: an array of its fields; a reference: a cell of one field;
* an ADT value: ``[tag, field0, field1, ...]``; ``match`` is tag dispatch;
* a closure: ``[code, capture0, capture1, ...]``; code is ``ptr f(state, closure, args..)``
  -- a global function has the same signature (its closure is a constant with no captures),
  so calling a function value is one indirect call whatever it is.

Calls. A Relay function becomes ``ptr f(ptr state, ptr closure, ptr arg0, ...)``. A call
of a primitive function calls its compiled kernel (kernel.py) with freshly allocated
outputs; a call of a global is a direct call; a call of a constructor allocates the value.
A function calling itself in tail position (a loop: what ``for`` and ``while`` become)
jumps back to its start instead.

Memory. Everything a call allocates comes from one bump arena, released as a whole when
the call returns (results are copied out to NumPy and Python values first), so programs
pay no allocator or reference counts between kernels. When the arena runs out, native
code takes more chunks from malloc; Python frees them after the call and grows the arena
to the high-water mark, so later calls of the same program do not need them.

Memory is released when a call returns, not sooner: a loop inside one call (a whole
training run in a decorated function) keeps every iteration's values. Releasing an
iteration's memory at a loop's back edge needs the values it carries copied out and a
write barrier on references; not done yet.

Errors. A ``match`` no clause matches, recursion deeper than the thread's stack allows,
a SIGINT (Ctrl-C, on the main thread) and a call taking more than its memory budget (a
quarter of the machine's, at most 4 GiB) stop the run with a code in the state; each call
site checks it and returns, and Python raises the error (an ``InterpreterError`` naming
the match's source line, ``KeyboardInterrupt``, ``MemoryError``): never a crash.

What it takes (else the dispatcher runs the program, executor.py): static tensor shapes,
and arguments and results of tensors, tuples and data types (no functions or references
crossing into Python).

>>> # a recursive sum over a relay.List, then a TreeLSTM: examples/tree_lstm_sst.py
"""
from __future__ import annotations

import ctypes
import itertools
import logging
import os
import resource
import signal
import threading
import weakref
from dataclasses import dataclass
from typing import Any as AnyValue, Sequence

import numpy as np
from llvmlite import ir

from relaydsl.backend.interpreter import ConstructorValue, InterpreterError, Value
from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.kernel import Kernel, address, compile_primitives
from relaydsl.backend.llvm.plan import _sigint_reaches_python, contiguous, static_type
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
from relaydsl.transform.fuse_ops import is_primitive

_log = logging.getLogger(__name__)

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = I8.as_pointer()
SLOTS = PTR.as_pointer()
_ALIGN = 64

# The state a run threads through every function: ``[cur, end, error, detail, stack limit,
# overflow chunks, overflow bytes, stop flag, memory budget]`` (8-byte words).
CUR, END, ERROR, DETAIL, STACK_LIMIT, CHUNKS, OVERFLOW, STOP, BUDGET = range(9)
NO_CLAUSE, TOO_DEEP, INTERRUPTED, NO_MEMORY = 1, 2, 3, 4
_CHUNK = 1 << 20
_INITIAL_ARENA = 1 << 16
_MAX_ARENA = 1 << 30  # beyond it, a call's extra memory comes in chunks each time


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
    Building one for a program it cannot run raises ``Unsupported``.
    """

    def __init__(self, mod: IRModule, entry: str, opt_level: int = 3):
        self.mod, self.entry = mod, entry
        fn = mod[entry]
        t = fn.checked_type
        assert isinstance(t, FuncType)
        self.param_types = [p.checked_type for p in fn.params]
        self.ret_type = t.ret_type
        for p, pt in zip(fn.params, self.param_types):
            _check_boundary(pt, f"parameter {p.name_hint}")
        _check_boundary(self.ret_type, "the result")
        lowering = _Lowering(mod, opt_level)
        name = lowering.lower_entry(mod.get_global_var(entry))
        self._keep = lowering.keep
        self._matches = lowering.matches
        self.kernels = len(lowering.kernels)
        self.kernel_calls = lowering.kernel_calls
        library = jit.compile_ir(str(lowering.module), f"native|{id(self)}|{name}",
                                 speed_level=2, vectorize=False, use_disk_cache=False)
        self._function = library.address(name)
        self._run = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(
            self._function)
        self._run_interruptible = ctypes.CFUNCTYPE(
            ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            jit.runtime_function("relaydsl_call_interruptible"))
        self._codec = _Codec(mod)
        self._arena_bytes = _INITIAL_ARENA
        self._local = threading.local()  # a thread's arena and state

    def describe(self) -> str:
        """It in a line, for the executor's log."""
        return (f"{self.kernels} kernel(s) at {self.kernel_calls} call site(s), native code "
                "between them")

    def __call__(self, *values: Value) -> Value:
        local = self._local
        if not hasattr(local, "state"):  # this thread's first call
            local.state = np.zeros(BUDGET + 1, np.int64)
            local.stop = np.zeros(1, np.int32)
            local.stack = _stack_budget()
            local.arena = None
        arena = local.arena
        if arena is None or arena.nbytes < self._arena_bytes + _ALIGN:
            arena = local.arena = np.empty(self._arena_bytes + _ALIGN, np.uint8)
        state = local.state
        base = address(arena) + (-address(arena)) % _ALIGN
        state[:] = (base, base + arena.nbytes - _ALIGN, 0, 0, -local.stack, 0, 0,
                    address(local.stop), _MEMORY_BUDGET)
        keep: list = []  # the arguments' memory, alive through the call
        codec = self._codec
        slots = np.array([codec.encode(v, t, keep) for v, t in zip(values, self.param_types)]
                         + [0], np.int64)
        if _sigint_reaches_python():
            status = self._run_interruptible(self._function, address(state), address(slots))
        else:
            status = self._run(address(state), address(slots))
        try:
            if status >> 8:  # a SIGINT came during the run
                signal.raise_signal(signal.SIGINT)  # by default, raises KeyboardInterrupt
            if status & 0xFF:
                raise self._error(int(status & 0xFF), int(state[DETAIL]))
            return codec.decode(int(slots[-1]), self.ret_type)
        finally:
            del keep
            self._release(state, grow=status == 0)

    def _release(self, state: np.ndarray, grow: bool) -> None:
        """Frees the chunks native code took beyond the arena; after a run that finished,
        grows the arena to what it needed (up to _MAX_ARENA) for the next calls."""
        chunk = int(state[CHUNKS])
        while chunk:
            following = ctypes.c_int64.from_address(chunk).value
            _free(chunk)
            chunk = following
        overflow = int(state[OVERFLOW])
        if overflow and grow:
            self._arena_bytes = min(max(2 * self._arena_bytes, self._arena_bytes + overflow),
                                    _MAX_ARENA)

    def _error(self, code: int, detail: int) -> BaseException:
        if code == NO_CLAUSE:
            node = self._matches[detail]
            where = f" at {node.span}" if node.span is not None else ""
            return InterpreterError(f"no clause of the match{where} matches its value",
                                    node.span)
        if code == NO_MEMORY:
            return MemoryError(
                f"the program took more than {_MEMORY_BUDGET >> 20} MiB in one call (a "
                "quarter of the machine's memory, at most 4 GiB): native code frees what a "
                "call allocates when the call returns, so a long loop inside one call (a "
                "whole training run) keeps every step's values; loop in Python over calls "
                "of one step instead")
        if code == TOO_DEEP:
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


def _check_boundary(t: Type, what: str) -> None:
    """Values crossing into Python: tensors of static shape, tuples and data types of them."""
    if isinstance(t, TensorType):
        if not static_type(t):
            raise Unsupported(f"{what} has a shape known only at run time")
    elif isinstance(t, TupleType):
        for f in t.fields:
            _check_boundary(f, what)
    elif isinstance(t, TypeCall):
        for a in t.args:
            _check_boundary(a, what)
    else:
        raise Unsupported(f"{what} is of type {t}, which does not cross into Python natively")


# ---- lowering ------------------------------------------------------------------------------

class _Lowering:
    """The LLVM module of one program: a function per reachable Relay function."""

    def __init__(self, mod: IRModule, opt_level: int):
        self.mod, self.opt_level = mod, opt_level
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
        self.alloc = self._alloc_function()
        # (), what a ref_write returns: no allocation
        self.unit = self.constant_object("relaydsl_unit", [ir.Constant(PTR, None)])
        self.frame_address = ir.Function(self.module, ir.FunctionType(PTR, [I32]),
                                         "llvm.frameaddress.p0")

    def lower_entry(self, entry: GlobalVar) -> str:
        self.compile_kernels(entry)
        target = self.global_function(entry)
        while self.pending:
            _FunctionCompiler(self, *self.pending.pop()).compile()
        return self._entry_wrapper(target, len(self.mod[entry].params))

    def compile_kernels(self, entry: GlobalVar) -> None:
        """Compiles every primitive function the entry can reach, together."""
        seen, todo, prims = {entry}, [entry], []

        def note(e: Expr) -> None:
            if isinstance(e, GlobalVar) and e not in seen:
                seen.add(e)
                todo.append(e)
            elif isinstance(e, Function) and is_primitive(e):
                prims.append(e)

        while todo:
            post_order(self.mod[todo.pop()], note)
        unique = list({id(f): f for f in prims}.values())
        for f in unique:
            t = f.checked_type
            if not all(static_type(p) for p in t.arg_types) or not static_type(t.ret_type):
                raise Unsupported("a kernel whose shapes are known only at run time")
        for f, k in zip(unique, compile_primitives(unique, opt_level=self.opt_level)):
            self.kernels[id(f)] = k
            self.keep.append(k)

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
        a = np.require(data, requirements=("C", "A"))
        self.keep.append(a)
        return ir.Constant(I64, address(a)).inttoptr(PTR)

    def _alloc_function(self) -> ir.Function:
        """``ptr alloc(state, bytes, align - 1)``: bump allocation; when the arena is full,
        a chunk from malloc (linked into the state's list, for Python to free)."""
        malloc = ir.Function(self.module, ir.FunctionType(PTR, [I64]), "malloc")
        f = ir.Function(self.module, ir.FunctionType(PTR, [PTR, I64, I64]), "relaydsl_alloc")
        f.linkage = "internal"
        st, n, mask = f.args
        entry, bump, fast, slow = (f.append_basic_block(x)
                                   for x in ("entry", "bump", "fast", "slow"))
        b = ir.IRBuilder(entry)
        words = b.bitcast(st, I64.as_pointer())
        cur_p, end_p = b.gep(words, [I64(CUR)]), b.gep(words, [I64(END)])
        b.branch(bump)
        b.position_at_end(bump)
        start = b.and_(b.add(b.load(cur_p), mask), b.not_(mask))
        new = b.add(start, n)
        b.cbranch(b.icmp_unsigned("<=", new, b.load(end_p)), fast, slow)
        b.position_at_end(fast)
        b.store(new, cur_p)
        b.ret(b.inttoptr(start, PTR))
        b.position_at_end(slow)
        size = b.add(n, I64(_CHUNK + 2 * _ALIGN))
        chunk = b.call(malloc, [size])
        chunks_p = b.gep(words, [I64(CHUNKS)])
        b.store(b.load(chunks_p), b.bitcast(chunk, I64.as_pointer()))
        b.store(b.ptrtoint(chunk, I64), chunks_p)
        over_p = b.gep(words, [I64(OVERFLOW)])
        over = b.add(b.load(over_p), size)
        b.store(over, over_p)
        with b.if_then(b.icmp_unsigned(">", over, b.load(b.gep(words, [I64(BUDGET)]))),
                       likely=False):  # the run stops at the next call or loop turn
            b.store(I64(NO_MEMORY), b.gep(words, [I64(ERROR)]))
        base = b.ptrtoint(chunk, I64)
        b.store(b.add(base, I64(_ALIGN)), cur_p)
        b.store(b.add(base, size), end_p)
        b.branch(bump)
        return f

    def _entry_wrapper(self, target: ir.Function, arity: int) -> str:
        """``i64 run(state, slots)``: the entry on ``slots[0..arity)``, its result into
        ``slots[arity]``; returns the state's error code. Turns the state's stack budget
        into the lowest address functions may reach."""
        name = f"relaydsl_native_{next(self.names)}"
        f = ir.Function(self.module, ir.FunctionType(I64, [PTR, PTR]), name)
        st, slots = f.args
        b = ir.IRBuilder(f.append_basic_block("entry"))
        words = b.bitcast(st, I64.as_pointer())
        limit_p = b.gep(words, [I64(STACK_LIMIT)])
        here = b.ptrtoint(b.call(self.frame_address, [I32(0)]), I64)
        b.store(b.add(here, b.load(limit_p)), limit_p)
        pointers = b.bitcast(slots, SLOTS)
        args = [b.load(b.gep(pointers, [I64(i)])) for i in range(arity)]
        result = b.call(target, [st, ir.Constant(PTR, None), *args])
        b.store(result, b.gep(pointers, [I64(arity)]))
        b.ret(b.load(b.gep(words, [I64(ERROR)])))
        return name


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
        deep = b.icmp_unsigned("<", here, b.load(b.gep(self.words, [I64(STACK_LIMIT)])))
        with b.if_then(deep, likely=False):
            self.fail(TOO_DEEP, 0)
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
        # a self call in tail position comes back to the header with new arguments
        self.header = f.append_basic_block("header")
        before = b.block
        b.branch(self.header)
        b.position_at_end(self.header)
        self.phis = [b.phi(PTR, name=_symbol(p.name_hint)) for p in fn.params]
        for phi, arg in zip(self.phis, params):
            phi.add_incoming(arg, before)
        self.poll_stop()
        env.update(zip(fn.params, self.phis))
        self.tail(fn.body, env)
        self.allocas.branch(start)

    # ---- helpers ---------------------------------------------------------------------
    def fail(self, code: int, detail: int) -> None:
        b = self.b
        b.store(I64(code), b.gep(self.words, [I64(ERROR)]))
        b.store(I64(detail), b.gep(self.words, [I64(DETAIL)]))
        b.ret(ir.Constant(PTR, None))

    def poll_stop(self) -> None:
        """At each call and loop turn: stop on a SIGINT, or on an error an allocation
        flagged (it cannot return one itself)."""
        b = self.b
        flag = b.inttoptr(b.load(b.gep(self.words, [I64(STOP)])), I32.as_pointer())
        stop = b.load_atomic(flag, "monotonic", 4)
        with b.if_then(b.icmp_signed("!=", stop, I32(0)), likely=False):
            self.fail(INTERRUPTED, 0)
        self.check_error()

    def check_error(self) -> None:
        b = self.b
        err = b.load(b.gep(self.words, [I64(ERROR)]))
        with b.if_then(b.icmp_signed("!=", err, I64(0)), likely=False):
            b.ret(ir.Constant(PTR, None))

    def allocate(self, nbytes: int, align: int = 8) -> ir.Value:
        return self.b.call(self.low.alloc, [self.st, I64(max(nbytes, 1)), I64(align - 1)])

    def field(self, obj: ir.Value, i: int) -> ir.Value:
        return self.b.load(self.b.gep(self.b.bitcast(obj, SLOTS), [I64(i)]))

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
            for phi, a in zip(self.phis, args):
                phi.add_incoming(a, b.block)
            b.branch(self.header)
        else:
            b.ret(self.value(e, env, tail=True))

    def is_self(self, op: Expr, env: dict) -> bool:
        if self.self_global is not None:
            return op is self.self_global
        return self.self_var is not None and op is self.self_var and \
            env.get(op) is self.closure

    def branch(self, e: If, env: dict) -> tuple[ir.Block, ir.Block]:
        """Branches on the bool scalar `e.cond`; the two blocks to fill."""
        b = self.b
        flag = b.load(b.bitcast(self.value(e.cond, env), I8.as_pointer()))
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
        self.fail(NO_CLAUSE, site)
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
            return self.low.constant(e.data)
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
            return self.record([self.value(e.value, env)])
        if isinstance(e, RefRead):
            return self.field(self.value(e.ref, env), 0)
        if isinstance(e, RefWrite):
            cell, new = self.value(e.ref, env), self.value(e.value, env)
            self.set_field(cell, 0, new)
            return self.low.unit
        if isinstance(e, If):
            arms = [(block, branch, env) for block, branch in
                    zip(self.branch(e, env), (e.true_branch, e.false_branch))]
            return self.join(arms)
        if isinstance(e, Match):
            return self.join([(block, rhs, clause_env)
                              for block, clause_env, rhs in self.clauses(e, env)])
        raise Unsupported(type(e).__name__)

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
            raise Unsupported(f"the operator {op.name} outside a primitive function")
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
        kernel = self.low.kernels[id(fn)]
        self.low.kernel_calls += 1
        inputs: list[ir.Value] = []
        for a in call.args:
            self.leaves(self.value(a, env), a.checked_type, inputs)
        outputs = [self.allocate(_nbytes(t.shape, t.dtype), _ALIGN)
                   for t in kernel.output_types]
        if not kernel.empty:
            scratch = [self.allocate(_nbytes(shape, dtype), _ALIGN)
                       for shape, dtype in kernel.scratch]
            constants = [self.low.constant(c) for c in kernel.constants]
            pointers = [*inputs, *outputs, *constants, *scratch]
            table = self.kernel_table(len(pointers))
            for i, p in enumerate(pointers):
                b.store(p, b.gep(table, [I64(0), I64(i)]))
            entry = b.inttoptr(I64(kernel.entry_address),
                               ir.FunctionType(ir.VoidType(), [PTR]).as_pointer())
            b.call(entry, [b.bitcast(table, PTR)])
        return self.rebuild(call.checked_type, iter(outputs))

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


def _nbytes(shape: Sequence[int], dtype: str) -> int:
    return max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)


# ---- values across the boundary -------------------------------------------------------------

class _Tensor:
    """How a tensor type crosses: its shape, dtype and size."""

    def __init__(self, t: TensorType):
        self.shape = tuple(int(d) for d in t.shape)  # static: checked by _check_boundary
        self.dtype = np.dtype(str(t.dtype))
        self.count = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.count * self.dtype.itemsize
        self.text = str(t)


class _Codec:
    """Python values to native objects and back, for the types of one program.

    A data value or tuple argument becomes one int64 buffer of objects pointing at each
    other and at the tensors where they are (no copies of C-contiguous arrays of the right
    dtype). The buffer of a data value is remembered while the value lives (training
    passes the same trees every epoch), unless making it copied a tensor.
    """

    def __init__(self, mod: IRModule):
        self.mod = mod
        self._fields: dict[tuple[int, TypeCall], list[Type]] = {}
        self._tensors: dict[Type, _Tensor] = {}
        self._cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def tensor_type(self, t: TensorType) -> _Tensor:
        found = self._tensors.get(t)
        if found is None:
            found = self._tensors[t] = _Tensor(t)
        return found

    def fields(self, c: Constructor, t: TypeCall) -> list[Type]:
        """The field types of constructor `c` in instance `t` (memoised)."""
        key = (id(c), t)
        found = self._fields.get(key)
        if found is None:
            found = self._fields[key] = self.mod.field_types(c, t)
        return found

    def encode(self, value: AnyValue, t: Type, keep: list) -> int:
        """The native value of argument `value`: an address; what must stay alive while
        native code runs goes into `keep`."""
        if isinstance(t, TensorType):
            a = self.array(value, self.tensor_type(t))
            keep.append(a)
            return address(a)
        cached = self._cache.get(value) if isinstance(value, ConstructorValue) else None
        if cached is None:
            arrays: list[np.ndarray] = []
            buffer, copied = self._objects(value, t, arrays)
            cached = (buffer, arrays)
            if isinstance(value, ConstructorValue) and not copied:
                self._cache[value] = cached
        keep.append(cached)
        return address(cached[0])

    def array(self, value: AnyValue, t: _Tensor) -> np.ndarray:
        a = value if isinstance(value, np.ndarray) else np.asarray(value, t.dtype)
        if a.shape != t.shape or a.dtype != t.dtype:
            raise TypeError(f"expected a tensor of {t.text}, got {a.dtype}{list(a.shape)}")
        return contiguous(a)

    def _objects(self, value: AnyValue, t: Type, arrays: list[np.ndarray]
                 ) -> tuple[np.ndarray, bool]:
        """The objects of `value` in one buffer (the root first), and whether a tensor
        had to be copied."""
        words: list[int] = []
        relative: list[int] = []  # words holding an offset into the buffer
        copied = False
        stack: list[tuple[AnyValue, Type, int]] = [(value, t, -1)]
        while stack:
            value, t, at = stack.pop()
            start = len(words)
            if isinstance(t, TupleType):
                if not isinstance(value, tuple) or len(value) != len(t.fields):
                    raise TypeError(f"expected a tuple of {len(t.fields)} value(s), got "
                                    f"{value!r:.60}")
                fields, first = zip(value, t.fields), start
            elif isinstance(t, TypeCall):
                if not isinstance(value, ConstructorValue) or \
                        value.constructor.belong_to is not t.func:
                    raise TypeError(f"expected a value of {t}, got {value!r:.60}")
                c = value.constructor
                words.append(c.tag)
                fields, first = zip(value.fields, self.fields(c, t)), start + 1
            else:
                raise TypeError(f"a value of type {t} cannot be passed to native code")
            fields = list(fields)
            words.extend([0] * len(fields))
            if at >= 0:
                words[at] = 8 * start
                relative.append(at)
            for i, (v, ft) in enumerate(fields):
                if isinstance(ft, TensorType):
                    a = self.array(v, self.tensor_type(ft))
                    copied = copied or a is not v
                    arrays.append(a)
                    words[first + i] = address(a)
                else:
                    stack.append((v, ft, first + i))
        buffer = np.array(words, np.int64)
        if relative:
            buffer[relative] += address(buffer)
        return buffer, copied

    def decode(self, pointer: int, t: Type) -> Value:
        """The native value at `pointer`, of type `t`, as a Python value (tensors copied).

        Iterative: a result may be a list of a hundred thousand cells."""
        root: list = [None]
        objects: list[tuple[list, int, Constructor | None, list]] = []  # parents first
        stack: list[tuple[int, Type, list, int]] = [(pointer, t, root, 0)]
        while stack:
            pointer, t, parent, index = stack.pop()
            if isinstance(t, TensorType):
                tt = self.tensor_type(t)
                raw = (ctypes.c_char * tt.nbytes).from_address(pointer)
                parent[index] = np.frombuffer(raw, tt.dtype, tt.count).reshape(tt.shape).copy()
                continue
            words = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_int64))
            if isinstance(t, TupleType):
                c, types, first = None, t.fields, 0
            else:
                assert isinstance(t, TypeCall)
                c = self.mod.type_definitions[t.func].constructors[words[0]]
                types, first = self.fields(c, t), 1
            fields: list = [None] * len(types)
            objects.append((parent, index, c, fields))
            stack.extend((words[first + i], f, fields, i) for i, f in enumerate(types))
        for parent, index, c, fields in reversed(objects):  # children before parents
            parent[index] = tuple(fields) if c is None else ConstructorValue(c, tuple(fields))
        return root[0]
