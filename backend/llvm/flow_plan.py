"""The flow plan: a first-order, static-shape program with ``if`` and loops, run natively.

Loops in the DSL (``for``/``while``, and recursion in tail position) become local
tail-recursive functions. After ``prepare`` an LSTM over a sequence reads::

    let %loop = fn (%i, %data, %c, %h) {
      let %t1 = %less(%i);                       # primitive calls (kernels)
      if (%t1) { let %t2 = ...; %loop(%t2, %data, %t10, %t12) } else { (%c, %h) }
    };
    let %r = %loop(0, %xs, %zeros, %zeros);  %r.1

Such a program is compiled to a few instructions that the native runtime interprets
(``relaydsl_run_program``, runtime.py): CALL a bound kernel, BRANCH on a bool
buffer, JUMP, COPY a buffer. The local function above becomes::

        COPY  i <- 0 ; COPY c <- zeros ; COPY h <- zeros     # %data aliases %xs: invariant
    L:  CALL  less(i) -> t1
        BRANCH t1 == 0 -> E
        CALL ... (8 kernels) ; COPY i <- t2 ; COPY c <- t10 ; COPY h <- t12 ; JUMP L
    E:  COPY r <- (c, h) ; ...
        HALT

so a call of the program is one call into compiled code: no Python between kernels.

What it takes (else the dispatcher runs the program): tensors and tuples of tensors
with static shapes; primitive calls, tuples, projections, constants, ``if`` on a
bool scalar; local functions (``let f = fn ...``) that are only called -- from
exactly one site outside their body, and from inside it only in tail position by
themselves (a loop). Each value gets its own slot in the arena (no sharing: liveness
across loops is not planned); a parameter that every tail call passes unchanged
aliases its initial argument instead of being copied.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any as AnyValue

import numpy as np

from relaydsl.backend.interpreter import Value
from relaydsl.backend.llvm.jit import runtime_function
from relaydsl.backend.llvm.kernel import address, compile_primitives
from relaydsl.backend.llvm.static_plan import (
    Buffer, Step, Structure, arena_views, bind_steps, contiguous, flatten, leaves, round_up,
    static_type,
)
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, If, Let, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.ir.visitor import post_order
from relaydsl.transform.fuse_ops import is_primitive

CALL, BRANCH, JUMP, COPY, HALT = range(5)


class Unsupported(Exception):
    """The program uses something a flow plan does not run (the dispatcher does)."""


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
        if isinstance(e, Call) and isinstance(e.op, Var) and e.op in own:
            if id(e) not in inside[e.op]:
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


class FlowPlan:
    """A compiled program with control flow: ``plan(*values)``; see the module docstring."""

    def __init__(self, compiler: _Compiler, result: Structure, opt_level: int):
        self.buffers, self.result = compiler.buffers, result
        self.params = compiler.params  # a structure of input buffers per entry parameter
        kernels = compile_primitives([c[0] for c in compiler.calls], opt_level=opt_level)
        self.steps = [Step(k, args, outs) for k, (_, args, outs) in zip(kernels, compiler.calls)]
        self._code = (ctypes.c_int64 * len(compiler.code))(*compiler.code)
        self._arena = _place(self.buffers)
        self._lock = threading.Lock()
        self._bound = False

    @staticmethod
    def applies(fn: Function, static: bool = True) -> bool:
        """Whether `fn` has a flow plan (with static shapes, if `static`)."""
        try:
            _Compiler(fn, static).compile()
        except Unsupported:
            return False
        return True

    @staticmethod
    def build(fn: Function, opt_level: int = 3) -> "FlowPlan | None":
        """The plan of `fn`, or None where a flow plan does not apply."""
        compiler = _Compiler(fn)
        try:
            result = compiler.compile()
        except Unsupported:
            return None
        return FlowPlan(compiler, result, opt_level)

    def __call__(self, *values: Value) -> Value:
        with self._lock:  # the arena is shared: one call at a time
            if not self._bound:
                self._bind()
            inputs = flatten([leaves(p, v) for p, v in zip(self.params, values)])
            for index, array in zip(flatten(self.params), inputs):
                self._point(index, contiguous(array))
            self._run(self._code, self._calls, self._addresses)
            return _copy_out(self.result, self.buffers)

    def _point(self, index: int, array: np.ndarray) -> None:
        self.buffers[index].value = array
        self._addresses[index] = address(array)
        for bound, position in self._uses[index]:
            bound.retarget(position, array)

    def _bind(self) -> None:
        self._uses, self._calls = bind_steps(self.steps, self.buffers, flatten(self.params))
        self._addresses = (ctypes.c_void_p * max(1, len(self.buffers)))(
            *[address(b.value) for b in self.buffers])
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            runtime_function("relaydsl_run_program"))
        self._bound = True


def _place(buffers: list[Buffer]) -> np.ndarray:
    """One arena for the temporaries; each gets its own slot (see the module docstring)."""
    placed, offset = [], 0
    for b in buffers:
        if b.kind == "temp":
            placed.append((b, offset))
            offset += round_up(max(b.nbytes, 1))
    arena = arena_views(placed, offset)
    for b in buffers:
        if b.kind == "constant":
            b.value = np.require(b.value, b.type.dtype, ("C", "A"))
    return arena


def _copy_out(s: Structure, buffers: list[Buffer]) -> Value:
    if isinstance(s, tuple):
        return tuple(_copy_out(x, buffers) for x in s)
    return np.array(buffers[s].value)
