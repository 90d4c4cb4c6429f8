"""The plan: a first-order, static-shape program as one call into compiled code.

A straight-line program (an MLP, LeNet, the first-order adjoint of one) and a program
with ``if`` and loops (an LSTM over a sequence) are planned alike: compiled to a few
instructions that the native runtime interprets (``relaydsl_run_program``, runtime.ll):
CALL a bound kernel, BRANCH on a bool buffer, JUMP, COPY a buffer, HALT. A straight-line
program is CALLs only. Loops in the DSL (``for``/``while``, recursion in tail position)
are local tail-recursive functions; after ``prepare`` an LSTM reads::

    let %loop = fn (%i, %data, %c, %h) {
      let %t1 = %less(%i);                       # primitive calls (kernels)
      if (%t1) { let %t2 = ...; %loop(%t2, %data, %t10, %t12) } else { (%c, %h) }
    };
    let %r = %loop(0, %xs, %zeros, %zeros);  %r.1

and becomes::

        COPY  i <- 0 ; COPY c <- zeros ; COPY h <- zeros     # %data aliases %xs: invariant
    L:  CALL  less(i) -> t1
        BRANCH t1 == 0 -> E
        CALL ... (8 kernels) ; COPY i <- t2 ; COPY c <- t10 ; COPY h <- t12 ; JUMP L
    E:  COPY r <- (c, h) ; ...
        HALT

so a call of the program is one call into compiled code: no Python between kernels.

Memory. The intermediate tensors live in one arena, where tensors whose lifetimes do not
overlap share memory (``place_temporaries``): lifetimes come from liveness over the
instructions' control flow, so a value carried around a loop stays live across the back
edge. The results are fresh arrays each call (kernels write them in place); arguments
are read where they are.

What it takes (else the dispatcher runs the program, executor.py): tensors and tuples of
tensors with static shapes; primitive calls, tuples, projections, constants, ``if`` on a
bool scalar; local functions (``let f = fn ...``) that are only called -- from exactly
one site outside their body, and from inside it only in tail position by themselves (a
loop). A parameter that every tail call passes unchanged aliases its initial argument
instead of being copied.
"""
from __future__ import annotations

import _signal
import ctypes
import os
import signal
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any as AnyValue, Callable

import numpy as np

from relaydsl.backend.interpreter import Value
from relaydsl.backend.llvm.jit import runtime_function
from relaydsl.backend.llvm.kernel import Kernel, address, compile_primitives
from relaydsl.ir.expr import Call, Constant, Expr, Function, If, Let, Tuple, TupleGetItem, Var
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.ir.visitor import post_order
from relaydsl.transform.fuse_ops import is_primitive

CALL, BRANCH, JUMP, COPY, HALT = range(5)
_ALIGN = 64

Structure = AnyValue  # a buffer index, or a tuple of structures


class Unsupported(Exception):
    """The program uses something a plan does not run (the dispatcher does)."""


@dataclass
class Buffer:
    """One tensor of the plan: an input, a constant, an intermediate or a result."""

    type: TensorType
    kind: str  # "input" | "constant" | "temp" | "output"
    value: np.ndarray | None = None  # constants' data; temps' arena views

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.type.shape, dtype=np.int64)) * np.dtype(self.type.dtype).itemsize


@dataclass
class Step:
    """A CALL's kernel and the buffers it reads and writes; ``run`` once bound."""

    kernel: Kernel
    inputs: list[int]
    outputs: list[int]
    run: Callable[[], None] | None = field(default=None, repr=False)


# ---- compiling a function to instructions ----------------------------------------------------

@dataclass
class _Loop:
    """A local function run in place: its parameters, result and first instruction."""

    var: Var  # the let-bound name the body calls itself by
    fn: Function
    params: list[Structure] = field(default_factory=list)
    result: Structure = None
    start: int = -1
    exits: list[int] = field(default_factory=list)  # JUMPs to patch to the end
    invariant: list[bool] = field(default_factory=list)


@dataclass
class _Return:
    """Where a value in tail position goes: a loop's result (then leave the loop)."""

    loop: _Loop


@dataclass
class _Into:
    """Where a value in tail position goes: these buffers (an ``if``'s result)."""

    dest: Structure


class _Compiler:
    def __init__(self, fn: Function, static: bool = True):
        self.fn, self.static = fn, static
        self.buffers: list[Buffer] = []
        self.code: list[int] = []
        self.calls: list[tuple[Function, list[int], list[int]]] = []
        self.params: list[Structure] = []
        self.sites = _call_sites(fn)
        self.loops = False  # whether the code has a back edge

    # ---- buffers ---------------------------------------------------------------------------
    def new(self, t: Type, kind: str, value: np.ndarray | None = None) -> Structure:
        if isinstance(t, TupleType):
            return tuple(self.new(f, kind) for f in t.fields)
        if not isinstance(t, TensorType) or (self.static and not static_type(t)):
            raise Unsupported(f"a value of type {t}")
        self.buffers.append(Buffer(t, kind, value))
        return len(self.buffers) - 1

    def copy(self, dest: Structure, src: Structure) -> None:
        for d, s in zip(flatten(dest), flatten(src)):
            if d != s:  # (a check of the structure alone has no sizes to give)
                self.code += [COPY, d, s, self.buffers[d].nbytes if self.static else 0]

    # ---- expressions -----------------------------------------------------------------------
    def compile(self) -> Structure:
        self.params = [self.new(p.checked_type, "input") for p in self.fn.params]
        env: dict[Var, AnyValue] = dict(zip(self.fn.params, self.params))
        result = self.tail(self.fn.body, env, None)
        self.code.append(HALT)
        return result

    def atom(self, e: Expr, env: dict) -> Structure:
        if isinstance(e, Var):
            value = env.get(e)
            if value is None or isinstance(value, _Loop):
                raise Unsupported(f"{e.name_hint} used as a value")
            return value
        if isinstance(e, Constant):
            return self.new(e.checked_type, "constant", e.data)
        if isinstance(e, Tuple):
            return tuple(self.atom(f, env) for f in e.fields)
        if isinstance(e, TupleGetItem):
            return self.atom(e.tuple_value, env)[e.index]
        raise Unsupported(type(e).__name__)

    def tail(self, e: Expr, env: dict, k: _Return | _Into | None) -> Structure:
        """Compiles `e` in tail position: its value goes where `k` says (None: returned)."""
        while isinstance(e, Let):
            env = {**env, e.var: self.value(e.var, e.value, env)}
            e = e.body
        if isinstance(e, If):
            return self.branch(e, env, k)
        if isinstance(e, Call) and isinstance(e.op, Var) and isinstance(k, _Return) and \
                env.get(e.op) is k.loop:
            self.tail_call(k.loop, [self.atom(a, env) for a in e.args])
            return None
        value = self.evaluate(e, env)
        return self.deliver(value, k)

    def deliver(self, value: Structure, k: _Return | _Into | None) -> Structure:
        if isinstance(k, _Return):
            self.copy(k.loop.result, value)
            self.code += [JUMP, -1]
            k.loop.exits.append(len(self.code) - 1)
            return None
        if isinstance(k, _Into):
            self.copy(k.dest, value)
            return k.dest
        return value

    def value(self, var: Var, e: Expr, env: dict) -> AnyValue:
        """What a let binds: a loop to run later, the buffers of a value."""
        if isinstance(e, Function) and not is_primitive(e):
            if self.sites.get(var, 0) != 1:
                raise Unsupported(f"{var.name_hint} is not called from exactly one place")
            return _Loop(var, e)
        if isinstance(e, If):
            return self.branch(e, env, _Into(self.new(var.checked_type, "temp")))
        return self.evaluate(e, env)

    def evaluate(self, e: Expr, env: dict) -> Structure:
        if isinstance(e, Call) and is_primitive(e.op):
            if self.static and not all(static_type(p.checked_type) for p in e.op.params):
                # a value ascribed relay.Any dims: the dispatcher specializes the kernel
                raise Unsupported("a kernel with parameters of dynamic shape")
            args = flatten([self.atom(a, env) for a in e.args])
            out = self.new(e.checked_type, "temp")
            self.calls.append((e.op, args, flatten(out)))
            self.code += [CALL, len(self.calls) - 1]
            return out
        if isinstance(e, Call) and isinstance(e.op, Var) and isinstance(env.get(e.op), _Loop):
            return self.run_loop(env[e.op], e, env)
        if isinstance(e, If):
            return self.branch(e, env, _Into(self.new(e.checked_type, "temp")))
        return self.atom(e, env)

    def branch(self, e: If, env: dict, k: _Return | _Into | None) -> Structure:
        cond = self.atom(e.cond, env)
        t = self.buffers[cond].type if isinstance(cond, int) else None
        if t is None or t.dtype != "bool" or len(t.shape) != 0:
            raise Unsupported("an if whose condition is not a bool scalar")
        if k is None:  # the program's result comes from an if: give it buffers
            k = _Into(self.new(e.checked_type, "temp"))
        self.code += [BRANCH, cond, -1]
        to_else = len(self.code) - 1
        self.tail(e.true_branch, env, k)
        self.code += [JUMP, -1]
        to_end = len(self.code) - 1
        self.code[to_else] = len(self.code)
        self.tail(e.false_branch, env, k)
        self.code[to_end] = len(self.code)
        return k.dest if isinstance(k, _Into) else None

    # ---- loops -----------------------------------------------------------------------------
    def run_loop(self, loop: _Loop, call: Call, env: dict) -> Structure:
        """The loop's one outside call: bind its parameters, run its body in place."""
        if loop.start >= 0:
            raise Unsupported("a loop entered twice")
        fn = loop.fn
        args = [self.atom(a, env) for a in call.args]
        loop.invariant = _invariant_params(fn, loop.var)
        loop.params = [a if inv else self.new(p.checked_type, "temp")
                       for p, a, inv in zip(fn.params, args, loop.invariant)]
        for p, a, inv in zip(loop.params, args, loop.invariant):
            if not inv:
                self.copy(p, a)
        loop.result = self.new(call.checked_type, "temp")
        loop.start = len(self.code)
        body_env = {**env, **dict(zip(fn.params, loop.params))}
        self.tail(fn.body, body_env, _Return(loop))
        for at in loop.exits:
            self.code[at] = len(self.code)
        return loop.result

    def tail_call(self, loop: _Loop, args: list[Structure]) -> None:
        """``loop(args)`` in tail position: new parameter values, then back to the start."""
        params = [p for p, inv in zip(loop.params, loop.invariant) if not inv]
        values = [a for a, inv in zip(args, loop.invariant) if not inv]
        taken = {b for p in params for b in flatten(p)}
        staged = []
        for p, a in zip(params, values):
            if any(b in taken and b not in flatten(p) for b in flatten(a)):
                # the value is another parameter's old content: keep it before overwriting
                stage = self.new(_type_of(self.buffers, a), "temp")
                self.copy(stage, a)
                a = stage
            staged.append(a)
        for p, a in zip(params, staged):
            self.copy(p, a)
        self.code += [JUMP, loop.start]
        self.loops = True


def _type_of(buffers: list[Buffer], s: Structure) -> Type:
    if isinstance(s, tuple):
        return TupleType([_type_of(buffers, x) for x in s])
    return buffers[s].type


def _nodes(e: Expr) -> list[Expr]:
    found: list[Expr] = []
    post_order(e, found.append)
    return found


def _call_sites(fn: Function) -> dict[Var, int]:
    """How often each local function is called from outside its own body."""
    sites: dict[Var, int] = {}
    own: dict[Var, Function] = {}
    for e in _nodes(fn):
        if isinstance(e, Let) and isinstance(e.value, Function):
            own[e.var] = e.value
    inside = {v: {id(x) for x in _nodes(f.body)} for v, f in own.items()}
    for e in _nodes(fn):
        if (isinstance(e, Call) and isinstance(e.op, Var) and e.op in own
                and id(e) not in inside[e.op]):
            sites[e.op] = sites.get(e.op, 0) + 1
    return sites


def _invariant_params(fn: Function, var: Var) -> list[bool]:
    """Which parameters every self call of the loop passes unchanged."""
    invariant = [True] * len(fn.params)
    for e in _nodes(fn.body):
        if isinstance(e, Call) and e.op is var:
            for i, (p, a) in enumerate(zip(fn.params, e.args)):
                invariant[i] = invariant[i] and a is p
    return invariant


# ---- the plan ---------------------------------------------------------------------------------

_LIVE: "weakref.WeakSet[Plan]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A lock another thread held at the fork would never be released: new ones. The
    native SIGINT handler of a run the main thread was in at the fork (a run the child does
    not have): Python's instead."""
    for plan in list(_LIVE):
        plan._lock = threading.Lock()
    handler = signal.getsignal(signal.SIGINT)
    if handler is not None:  # None: a handler installed outside Python, left alone
        signal.signal(signal.SIGINT, handler)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Plan:
    """A compiled program: ``plan(*values)``; see the module docstring.

    >>> from relaydsl.ir.parser import parse
    >>> from relaydsl.transform.fuse_ops import fuse_ops
    >>> from relaydsl.transform.a_normal_form import to_a_normal_form
    >>> from relaydsl.typing import infer_types
    >>> mod = infer_types(parse('def @main(%x: Tensor[(4,), float32]) { tanh(exp(%x)) }'))
    >>> plan = Plan.build(to_a_normal_form(fuse_ops(mod))["main"])
    >>> plan(np.zeros(4, "float32"))
    array([0.7615942, 0.7615942, 0.7615942, 0.7615942], dtype=float32)
    """

    def __init__(self, compiler: _Compiler, result: Structure, opt_level: int):
        self.buffers, self.result = compiler.buffers, result
        self.params = compiler.params  # a structure of input buffers per entry parameter
        for b in flatten(result):  # results are written in place into fresh arrays
            if self.buffers[b].kind == "temp":
                self.buffers[b].kind = "output"
        kernels = compile_primitives([c[0] for c in compiler.calls], opt_level=opt_level)
        self.steps = [Step(k, args, outs) for k, (_, args, outs) in zip(kernels, compiler.calls)]
        self.code = list(compiler.code)
        self.loops = compiler.loops  # may run for long: Ctrl-C must be able to stop it
        self.arena_bytes = place_temporaries(self.buffers, self.code, self.steps)
        for b in self.buffers:
            if b.kind == "constant":
                b.value = np.require(b.value, b.type.dtype, ("C", "A"))
        self._inputs = flatten(self.params)
        self._outputs = [i for i, b in enumerate(self.buffers) if b.kind == "output"]
        self._lock = threading.Lock()  # the arena is shared: one call at a time
        self._bound = False
        _LIVE.add(self)

    @staticmethod
    def applies(fn: Function, static: bool = True) -> bool:
        """Whether `fn` has a plan (with static shapes, if `static`; else once retyped)."""
        return Plan.unsupported(fn, static) is None

    @staticmethod
    def unsupported(fn: Function, static: bool = True) -> str | None:
        """What in `fn` a plan does not take ("a value of type ..."); None when it has a plan
        (with static shapes, if `static`; else once retyped)."""
        try:
            _Compiler(fn, static).compile()
        except Unsupported as e:
            return str(e)
        return None

    def describe(self) -> str:
        """It in a line: kernel calls, loops, arena bytes (for the executor's log)."""
        flow = "with loops" if self.loops else "no loops"
        return (f"{len(self.steps)} kernel call(s), {flow}, "
                f"{self.arena_bytes} bytes of intermediates")

    @staticmethod
    def build(fn: Function, opt_level: int = 3) -> "Plan | None":
        """The plan of `fn`, or None where a plan does not apply."""
        compiler = _Compiler(fn)
        try:
            result = compiler.compile()
        except Unsupported:
            return None
        return Plan(compiler, result, opt_level)

    def __call__(self, *values: Value) -> Value:
        with self._lock:
            if not self._bound:
                self._bind()
            arrays = flatten([leaves(p, v) for p, v in zip(self.params, values)])
            for index, array in zip(self._inputs, arrays):
                self._point(index, contiguous(array))
            for index in self._outputs:
                t = self.buffers[index].type
                self._point(index, np.empty(t.shape, t.dtype))
            if self.loops and _sigint_reaches_python():
                self._run_interruptibly()
            else:
                self._run(self._code, self._calls, self._addresses, None)
            return self._rebuild(self.result)

    def _run_interruptibly(self) -> None:
        """Runs the program so that a SIGINT stops it within one loop iteration (see
        runtime.py); the signal then goes to Python's handler, as if it came now."""
        status = self._run_interruptible(self._code, self._calls, self._addresses)
        if status:
            signal.raise_signal(signal.SIGINT)  # by default, raises KeyboardInterrupt
            if status == _STOPPED:  # the handler returned, but the run has no result
                raise KeyboardInterrupt

    def _point(self, index: int, array: np.ndarray) -> None:
        """Makes every instruction that reads or writes buffer `index` use `array`."""
        self.buffers[index].value = array
        self._addresses[index] = address(array)
        for bound, position in self._uses[index]:
            bound.retarget(position, array)

    def _bind(self) -> None:
        """Binds each kernel once (checked); calls then only retarget inputs and outputs."""
        for b in self.buffers:  # inputs and outputs: placeholders until the first call
            if b.value is None:
                b.value = np.empty(b.type.shape, b.type.dtype)
        self._uses: dict[int, list] = {i: [] for i in self._inputs + self._outputs}
        for step in self.steps:
            arrays = [self.buffers[i].value for i in step.inputs + step.outputs]
            step.run = step.kernel.bind(arrays[:len(step.inputs)], arrays[len(step.inputs):])
            for position, index in enumerate(step.inputs + step.outputs):
                if index in self._uses:
                    self._uses[index].append((step.run, position))
        self._code = (ctypes.c_int64 * len(self.code))(*self.code)
        self._calls = (ctypes.c_void_p * max(1, 2 * len(self.steps)))(
            *[a for s in self.steps for a in (s.kernel.entry_address, s.run.table_address)])
        self._addresses = (ctypes.c_void_p * max(1, len(self.buffers)))(
            *[address(b.value) for b in self.buffers])
        pointers = [ctypes.c_void_p] * 3
        self._run = ctypes.CFUNCTYPE(ctypes.c_int32, *pointers, ctypes.c_void_p)(
            runtime_function("relaydsl_run_program"))
        self._run_interruptible = ctypes.CFUNCTYPE(ctypes.c_int32, *pointers)(
            runtime_function("relaydsl_run_interruptible"))
        self._bound = True

    def _rebuild(self, s: Structure) -> Value:
        if isinstance(s, tuple):
            return tuple(self._rebuild(x) for x in s)
        b = self.buffers[s]
        return b.value if b.kind == "output" else np.array(b.value)  # inputs/constants: a copy


_STOPPED = 2  # relaydsl_run_interruptible: a SIGINT stopped the run


def _sigint_reaches_python() -> bool:
    """Whether Python would act on a SIGINT now: on the main thread (where its handlers run),
    with a Python handler (not ignored, nor the default action)."""
    # _signal.getsignal: signal.getsignal's wrapping of the result in an enum costs 5 us
    return threading.get_ident() == threading.main_thread().ident and \
        callable(_signal.getsignal(signal.SIGINT))


# ---- memory -----------------------------------------------------------------------------------

def place_temporaries(buffers: list[Buffer], code: list[int], steps: list[Step]) -> int:
    """Places the temporaries in one arena, sharing memory between disjoint lifetimes.

    Liveness runs backwards over the instructions' control flow to a fixed point, so a
    value read after a loop's back edge (a loop-carried value) is live through the loop.
    Two temporaries interfere when one is written while the other is live afterwards; a
    kernel's outputs also interfere with its inputs (kernels never write over what they
    read). Greedy best fit, in the order temporaries are first written: each takes the
    smallest slot holding none it interferes with (growing the largest such slot, else
    adding one). Each temporary's value becomes its view of the arena; returns the
    arena's size in bytes.

    A chain ``t1 = f(x); t2 = g(t1); t3 = h(t2)`` needs two slots: t3 reuses t1's.
    """
    temps = [i for i, b in enumerate(buffers) if b.kind == "temp"]
    if not temps:
        return 0
    mask = 0
    for i in temps:
        mask |= 1 << i
    program = list(_instructions(code, steps, mask))
    at = {pc: n for n, (pc, *_) in enumerate(program)}
    live_out = [0] * len(program)
    live_in = [0] * len(program)
    changed = True
    while changed:
        changed = False
        for n in range(len(program) - 1, -1, -1):
            _, uses, defs, _, successors = program[n]
            out = 0
            for s in successors:
                out |= live_in[at[s]]
            new_in = uses | (out & ~defs)
            if out != live_out[n] or new_in != live_in[n]:
                live_out[n], live_in[n], changed = out, new_in, True
    interferes = dict.fromkeys(temps, 0)

    def conflict(group: int, others: int) -> None:
        for b in _bits(group):
            interferes[b] |= others & ~(1 << b)
            for o in _bits(others & ~(1 << b)):
                interferes[o] |= 1 << b

    first_write: dict[int, int] = {}
    conflict(live_in[0], live_in[0])  # read before any write: live together from the start
    for n, (_, _, defs, clobbers, _) in enumerate(program):
        conflict(defs, live_out[n] | defs | clobbers)
        for b in _bits(defs):
            first_write.setdefault(b, n)
    sizes: list[int] = []  # slot sizes
    members: list[int] = []  # per slot, the temporaries in it (a bit set)
    slot_of: dict[int, int] = {}
    for b in sorted(temps, key=lambda b: (first_write.get(b, -1), b)):
        need = round_up(max(buffers[b].nbytes, 1))
        free = [s for s in range(len(sizes)) if not members[s] & interferes[b]]
        fits = [s for s in free if sizes[s] >= need]
        if fits:
            s = min(fits, key=lambda s: sizes[s])
        elif free:  # grow the largest free slot rather than add one
            s = max(free, key=lambda s: sizes[s])
            sizes[s] = need
        else:
            sizes.append(need)
            members.append(0)
            s = len(sizes) - 1
        members[s] |= 1 << b
        slot_of[b] = s
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += size
    arena_views([(buffers[b], offsets[s]) for b, s in slot_of.items()], total)
    return total


def _instructions(code: list[int], steps: list[Step], mask: int):
    """Each instruction as (position, temporaries read, temporaries written, temporaries
    its writes must not overlap, successors). A COPY may write over its source (memmove),
    so a copy from a value that dies there costs no memory."""
    pc = 0
    while pc < len(code):
        op = code[pc]
        if op == CALL:
            step = steps[code[pc + 1]]
            reads = _set(step.inputs) & mask
            yield pc, reads, _set(step.outputs) & mask, reads, (pc + 2,)
            pc += 2
        elif op == BRANCH:
            yield pc, (1 << code[pc + 1]) & mask, 0, 0, (pc + 3, code[pc + 2])
            pc += 3
        elif op == JUMP:
            yield pc, 0, 0, 0, (code[pc + 1],)
            pc += 2
        elif op == COPY:
            yield pc, (1 << code[pc + 2]) & mask, (1 << code[pc + 1]) & mask, 0, (pc + 4,)
            pc += 4
        else:
            yield pc, 0, 0, 0, ()
            pc += 1


def _set(indices: list[int]) -> int:
    bits = 0
    for i in indices:
        bits |= 1 << i
    return bits


def _bits(bits: int):
    while bits:
        low = bits & -bits
        yield low.bit_length() - 1
        bits ^= low


def arena_views(placed: list[tuple[Buffer, int]], size: int) -> np.ndarray:
    """Allocates one 64-byte aligned arena of `size` bytes; each buffer's value becomes the
    view at its byte offset. The views keep the arena alive; it is also returned."""
    arena = np.empty(size + _ALIGN, np.uint8)
    base = (-arena.ctypes.data) % _ALIGN
    for b, offset in placed:
        count = int(np.prod(b.type.shape, dtype=np.int64))
        b.value = np.frombuffer(arena, b.type.dtype, count, base + offset).reshape(b.type.shape)
    return arena


# ---- helpers ----------------------------------------------------------------------------------

def contiguous(a: np.ndarray) -> np.ndarray:
    """`a` itself when C-contiguous and aligned, else a copy (0-d arrays stay 0-d)."""
    if a.flags.c_contiguous and a.flags.aligned:
        return a
    return np.require(a, requirements=("C", "A"))


def round_up(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def static_type(t: Type | None) -> bool:
    if isinstance(t, TupleType):
        return all(static_type(f) for f in t.fields)
    return isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape) and \
        isinstance(t.dtype, str)


def flatten(s: Structure) -> list:
    if isinstance(s, (tuple, list)):
        return [leaf for x in s for leaf in flatten(x)]
    return [s]


def leaves(structure: Structure, value: Value) -> list:
    if isinstance(structure, tuple):
        return [leaves(s, v) for s, v in zip(structure, value)]
    return [value]
