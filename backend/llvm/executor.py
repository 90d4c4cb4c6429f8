"""Running whole programs on compiled kernels: a static plan, or a dispatching executor.

``compile_program(mod, entry, opt_level)`` prepares the module (inlining, the
first-order gradient where it applies, fusion into primitive functions,
A-normal form; see ``prepare``) and picks how to run the entry function:

* ``StaticPlan`` for a first-order program with static shapes (a chain of
  calls of primitive functions, tuples and projections): all its kernels are
  compiled up front in one LLVM module, and its intermediate tensors live in
  one arena, allocated once, where buffers whose lifetimes do not overlap share
  memory (``plan_memory``). A call is a loop over bound kernels. A program
  whose dimensions are symbolic (``("n", 784)``) gets a plan per call signature.
* ``Dispatcher`` for everything else (control flow, closures, recursion, data
  types, references): the reference interpreter's evaluation, where every call
  of a primitive function runs a compiled kernel instead of NumPy; kernels are
  compiled on first use, per argument shapes.

Arguments are checked against the entry's type by the frontend before any kernel
runs; the executors then hand each kernel only C-contiguous, aligned arrays of
exactly the shapes and dtypes it was compiled for (a plan binds and checks its
kernels once; the dispatcher keys its kernels by the arguments' shapes), so no
input can make compiled code touch memory out of bounds.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any as AnyValue, Callable, Sequence

import numpy as np

from backend.interpreter import Closure, Interpreter, TailCall, Value, evaluate
from backend.llvm.jit import runtime_function
from backend.llvm.kernel import Kernel, compile_primitive, compile_primitives
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, Let, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type
from relaydsl.ir.visitor import ExprMutator
from relaydsl.transform.fuse_ops import is_primitive

_ALIGN = 64


def prepare(mod: IRModule, opt_level: int = 3) -> IRModule:
    """The module as the llvm target runs it: every op call inside a primitive function.

    Calls of non-recursive globals are inlined; grad nodes are lowered (to the
    reference-free first-order adjoint where the differentiated code is
    straight-line); constant op calls are folded; ops are fused into primitive functions (opt_level >= 1; at 0
    each op is its own primitive function); every call is let-bound (A-normal form).
    """
    from relaydsl.transform.a_normal_form import to_a_normal_form
    from relaydsl.transform.fold_constant import fold_constants
    from relaydsl.transform.fuse_ops import fuse_ops
    from relaydsl.transform.gradient import lower_grads
    from relaydsl.transform.graph_normal_form import to_graph_normal_form
    from relaydsl.transform.inline import inline_globals

    mod = inline_globals(mod)
    mod = inline_globals(lower_grads(mod, first_order=True))  # adjoints are applied literals
    mod = fold_constants(mod)
    mod = to_graph_normal_form(mod)
    mod = fuse_ops(mod, fuse_opt_level=2 if opt_level >= 1 else 0)
    return to_a_normal_form(mod)


def compile_program(mod: IRModule, entry: str, *, opt_level: int = 3) -> "Program":
    """The runnable form of global `entry` of `mod` (typed, possibly with grad nodes)."""
    return Program(mod, entry, opt_level)


class Program:
    """A compiled entry point: ``program(*values)``; values checked against its type.

    A first-order entry with symbolic dimensions (``Tensor[Float, ("n", 784)]``) gets a
    static plan per call signature: on a call with new shapes the entry is re-typed with
    those shapes and planned; other programs run on the dispatcher.
    """

    def __init__(self, source: IRModule, entry: str, opt_level: int):
        self.source, self.entry, self.opt_level = source, entry, opt_level
        self.mod = prepare(source, opt_level)
        fn = self.mod[entry]
        self.plan = StaticPlan.build(fn, opt_level) if StaticPlan.applies(fn) else None
        self._per_signature = self.plan is None and StaticPlan.applies(fn, static=False) and \
            all(isinstance(p.checked_type, TensorType) for p in fn.params)
        self._plans: dict[tuple, StaticPlan | None] = {}
        self._dispatcher = Dispatcher(self.mod, opt_level)

    @property
    def uses_static_plan(self) -> bool:
        return self.plan is not None

    def __call__(self, *values: Value) -> Value:
        plan = self.plan or (self._plan_for(values) if self._per_signature else None)
        if plan is not None:
            return plan(*values)
        return evaluate(self.mod, *values, entry=self.entry, interpreter=self._dispatcher)

    def _plan_for(self, values: Sequence[Value]) -> "StaticPlan | None":
        if not all(isinstance(v, np.ndarray) for v in values):
            return None
        key = tuple((v.shape, v.dtype.str) for v in values)
        if key not in self._plans:
            fn = prepare(specialize_entry(self.source, self.entry, values),
                         self.opt_level)[self.entry]
            self._plans[key] = StaticPlan.build(fn, self.opt_level) \
                if StaticPlan.applies(fn) else None
        return self._plans[key]

    def call_closure(self, closure: Closure, args: Sequence[Value]) -> Value:
        return self._dispatcher.call(closure, args)


# ---- the dispatching executor -------------------------------------------------------------

class Dispatcher(Interpreter):
    """The interpreter, with calls of primitive functions running compiled kernels."""

    def __init__(self, mod: IRModule, opt_level: int = 3):
        super().__init__(mod)
        self.opt_level = opt_level
        self._kernels: dict[tuple, Kernel] = {}
        self._held: list[Function] = []  # keeps the ids in the kernel keys valid

    def _call(self, call: Call, env: dict[Var, Value], tail: bool) -> Value | TailCall:
        if not is_primitive(call.op):
            return super()._call(call, env, tail)
        args = [self._value(a, env) for a in call.args]
        arrays = [contiguous(a) for a in args]
        key = (id(call.op), *[(a.shape, a.dtype.str) for a in arrays])
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = compile_primitive(specialize(call.op, arrays), opt_level=self.opt_level)
            self._kernels[key] = kernel
            self._held.append(call.op)
        outputs = kernel.call_trusted(arrays)
        return tuple(outputs) if kernel.returns_tuple else outputs[0]


def specialize(fn: Function, args: Sequence[np.ndarray]) -> Function:
    """`fn` with parameters typed by the concrete arguments' shapes (for symbolic / Any dims)."""
    concrete = [TensorType(a.shape, a.dtype.name) for a in args]
    if all(p.checked_type == t for p, t in zip(fn.params, concrete)):
        return fn
    from relaydsl.typing import infer_type

    out = infer_type(_retyped(fn, concrete))
    assert isinstance(out, Function)
    return out


def specialize_entry(mod: IRModule, entry: str, args: Sequence[np.ndarray]) -> IRModule:
    """A copy of `mod` whose `entry` takes exactly the arguments' shapes, re-typed."""
    from relaydsl.typing import infer_types

    out = mod.copy()
    out.add(entry, _retyped(mod[entry], [TensorType(a.shape, a.dtype.name) for a in args]))
    return infer_types(out)


def _retyped(fn: Function, types: Sequence[TensorType]) -> Function:
    """`fn` with fresh parameters of `types` (the body's types are left to inference)."""
    params = [Var(p.name_hint, t) for p, t in zip(fn.params, types)]
    mapping = dict(zip(fn.params, params))

    class _Rebind(ExprMutator):
        def visit_var(self, v: Var) -> Expr:
            return mapping.get(v, v)

    return Function(params, _Rebind().visit(fn.body), None, (), fn.attrs, span=fn.span)


# ---- the static plan ----------------------------------------------------------------------

@dataclass
class Buffer:
    """One tensor of the plan: an input, a constant, an intermediate or an output."""

    type: TensorType
    kind: str  # "input" | "constant" | "temp" | "output"
    value: np.ndarray | None = None  # constants' data; temps' arena views
    first_use: int = 0  # step that writes it
    last_use: int = -1  # last step that reads it

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.type.shape, dtype=np.int64)) * np.dtype(self.type.dtype).itemsize


@dataclass
class Step:
    kernel: Kernel
    inputs: list[int]
    outputs: list[int]
    run: Callable[[], None] | None = field(default=None, repr=False)


Structure = AnyValue  # a buffer index, or a tuple of structures


class StaticPlan:
    """A first-order, static-shape program as a list of kernel calls over planned buffers."""

    def __init__(self, buffers: list[Buffer], steps: list[Step], params: list[Structure],
                 result: Structure):
        self.buffers, self.steps, self.params, self.result = buffers, steps, params, result
        self.arena_bytes = plan_memory(buffers, steps)
        self._lock = threading.Lock()
        self._uses: dict[int, list] | None = None  # buffer -> [(bound kernel, position)]
        self._outputs: list[int] = []

    # Which functions it applies to
    @staticmethod
    def applies(fn: Function, static: bool = True) -> bool:
        """Whether `fn` is a chain of primitive calls (with static shapes, if `static`)."""
        ret = fn.checked_type.ret_type if isinstance(fn.checked_type, FuncType) else None
        if static and not all(_static(t) for t in [ret, *(p.checked_type for p in fn.params)]):
            return False
        node: Expr = fn.body
        while isinstance(node, Let):
            if not _plan_value(node.value):
                return False
            node = node.body
        return _plan_atom(node)

    @classmethod
    def build(cls, fn: Function, opt_level: int = 3) -> "StaticPlan":
        buffers: list[Buffer] = []
        env: dict[Var, Structure] = {}

        def new(t: TensorType, kind: str, value: np.ndarray | None = None) -> int:
            buffers.append(Buffer(t, kind, value))
            return len(buffers) - 1

        def structure_of_type(t: Type, kind: str) -> Structure:
            if isinstance(t, TupleType):
                return tuple(structure_of_type(f, kind) for f in t.fields)
            assert isinstance(t, TensorType)
            return new(t, kind)

        params = [structure_of_type(p.checked_type, "input") for p in fn.params]
        env.update(zip(fn.params, params))

        def atom(e: Expr) -> Structure:
            if isinstance(e, Var):
                return env[e]
            if isinstance(e, Constant):
                return new(e.checked_type, "constant", e.data)
            if isinstance(e, Tuple):
                return tuple(atom(f) for f in e.fields)
            if isinstance(e, TupleGetItem):
                return atom(e.tuple_value)[e.index]
            raise AssertionError(f"not an atom: {type(e).__name__}")

        calls: list[tuple[Function, list[int], Structure]] = []
        node: Expr = fn.body
        while isinstance(node, Let):
            value = node.value
            if isinstance(value, Call):
                args = _flatten([atom(a) for a in value.args])
                out = structure_of_type(value.checked_type, "temp")
                calls.append((value.op, args, out))
                env[node.var] = out
            else:
                env[node.var] = atom(value)
            node = node.body
        result = atom(node)

        kernels = compile_primitives([c[0] for c in calls], opt_level=opt_level)
        steps = [Step(k, args, _flatten(out)) for k, (_, args, out) in zip(kernels, calls)]
        for b in _flatten(result):
            if buffers[b].kind == "temp":
                buffers[b].kind = "output"
        return cls(buffers, steps, params, result)

    def __call__(self, *values: Value) -> Value:
        with self._lock:  # the arena is shared: one call at a time
            if self._uses is None:
                self._bind()
            inputs = _flatten([_leaves(p, v) for p, v in zip(self.params, values)])
            for index, array in zip(_flatten(self.params), inputs):
                self._point(index, contiguous(array))
            for index in self._outputs:
                t = self.buffers[index].type
                self._point(index, np.empty(t.shape, t.dtype))
            self._run_sequence(self._sequence, len(self.steps))
            return _rebuild(self.result, self.buffers)

    def _point(self, index: int, array: np.ndarray) -> None:
        """Makes every kernel that reads or writes buffer `index` use `array`."""
        self.buffers[index].value = array
        for bound, position in self._uses[index]:
            bound.retarget(position, array)

    def _bind(self) -> None:
        """Binds each step once (checked); calls then only retarget inputs and outputs.

        The bound steps become one array of ``{entry, table}`` pairs that the native
        runtime runs in order: a call of the plan is one call into compiled code.
        """
        self._outputs = [i for i, b in enumerate(self.buffers) if b.kind == "output"]
        self._uses: dict[int, list] = {i: [] for i, b in enumerate(self.buffers)
                                       if b.kind in ("input", "output")}
        for b in self.buffers:
            if b.value is None:  # inputs and outputs: placeholders until the first call
                b.value = np.empty(b.type.shape, b.type.dtype)
        for step in self.steps:
            arrays = [self.buffers[i].value for i in step.inputs + step.outputs]
            step.run = step.kernel.bind(arrays[:len(step.inputs)], arrays[len(step.inputs):])
            for position, index in enumerate(step.inputs + step.outputs):
                if index in self._uses:
                    self._uses[index].append((step.run, position))
        pairs = [(s.kernel.entry_address, s.run.table_address) for s in self.steps]
        self._sequence = (ctypes.c_void_p * max(1, 2 * len(pairs)))(
            *[address for pair in pairs for address in pair])
        self._run_sequence = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
            runtime_function("relaydsl_run_sequence"))


def plan_memory(buffers: list[Buffer], steps: list[Step]) -> int:
    """Places the temporaries in one arena, sharing memory between disjoint lifetimes.

    Greedy best fit over the steps in order: a step's outputs take the smallest free
    slot that holds them (or a new slot), and a temporary's slot is freed after the
    last step that reads it. Returns the arena size in bytes.
    """
    for i, step in enumerate(steps):
        for b in step.outputs:
            buffers[b].first_use = i
        for b in step.inputs:
            buffers[b].last_use = max(buffers[b].last_use, i)
    slots: list[int] = []  # slot sizes
    free: set[int] = set()
    slot_of: dict[int, int] = {}
    for i, step in enumerate(steps):
        for b in step.outputs:
            if buffers[b].kind != "temp":
                continue
            need = _round_up(max(buffers[b].nbytes, 1))
            fits = [s for s in free if slots[s] >= need]
            if fits:
                s = min(fits, key=lambda s: slots[s])
            elif free:  # grow the largest free slot rather than add one
                s = max(free, key=lambda s: slots[s])
                slots[s] = need
            else:
                slots.append(need)
                s = len(slots) - 1
            free.discard(s)
            slot_of[b] = s
        for b in set(step.inputs + step.outputs):
            if b in slot_of and buffers[b].last_use <= i:
                free.add(slot_of[b])
    offsets, total = [], 0
    for size in slots:
        offsets.append(total)
        total += size
    arena = np.empty(total + _ALIGN, np.uint8)
    base = (-arena.ctypes.data) % _ALIGN
    for b, s in slot_of.items():
        t = buffers[b].type
        count = int(np.prod(t.shape, dtype=np.int64))
        buffers[b].value = np.frombuffer(arena, t.dtype, count, base + offsets[s]).reshape(t.shape)
    return total


def contiguous(a: np.ndarray) -> np.ndarray:
    """`a` itself when C-contiguous and aligned, else a copy (0-d arrays stay 0-d)."""
    if a.flags.c_contiguous and a.flags.aligned:
        return a
    return np.require(a, requirements=("C", "A"))


def _round_up(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _static(t: Type | None) -> bool:
    if isinstance(t, TupleType):
        return all(_static(f) for f in t.fields)
    return isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape) and \
        isinstance(t.dtype, str)


def _plan_atom(e: Expr) -> bool:
    if isinstance(e, (Var, Constant)):
        return True
    if isinstance(e, Tuple):
        return all(_plan_atom(f) for f in e.fields)
    if isinstance(e, TupleGetItem):
        return _plan_atom(e.tuple_value)
    return False


def _plan_value(e: Expr) -> bool:
    if isinstance(e, Call):
        return is_primitive(e.op) and all(_plan_atom(a) for a in e.args)
    return _plan_atom(e)


def _flatten(s: Structure) -> list:
    if isinstance(s, (tuple, list)):
        return [leaf for x in s for leaf in _flatten(x)]
    return [s]


def _leaves(structure: Structure, value: Value) -> list:
    if isinstance(structure, tuple):
        return [_leaves(s, v) for s, v in zip(structure, value)]
    return [value]


def _rebuild(s: Structure, buffers: list[Buffer]) -> Value:
    if isinstance(s, tuple):
        return tuple(_rebuild(x, buffers) for x in s)
    b = buffers[s]
    return b.value if b.kind == "output" else np.array(b.value)  # inputs/constants: a copy
