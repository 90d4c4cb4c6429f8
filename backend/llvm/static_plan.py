"""The static plan: a first-order, static-shape program as one call into compiled code.

A program that is a chain of calls of primitive functions, tuples and projections
(an MLP, LeNet, the first-order adjoint of one) is planned once: its kernels are
compiled together, its intermediate tensors placed in one arena where buffers
whose lifetimes do not overlap share memory (``plan_memory``), and each kernel
bound to its buffers. A call points the kernels at the arguments and a fresh
output, then runs the whole list natively (``relaydsl_run_sequence``).
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any as AnyValue, Callable

import numpy as np

from relaydsl.backend.interpreter import Value
from relaydsl.backend.llvm.jit import runtime_function
from relaydsl.backend.llvm.kernel import Kernel, compile_primitives
from relaydsl.ir.expr import Call, Constant, Expr, Function, Let, Tuple, TupleGetItem, Var
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type
from relaydsl.transform.fuse_ops import is_primitive

_ALIGN = 64


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
        if static and not all(static_type(t) for t in [ret, *(p.checked_type for p in fn.params)]):
            return False
        node: Expr = fn.body
        while isinstance(node, Let):
            if not _plan_value(node.value):
                return False
            node = node.body
        return is_atom(node)

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
                args = flatten([atom(a) for a in value.args])
                out = structure_of_type(value.checked_type, "temp")
                calls.append((value.op, args, out))
                env[node.var] = out
            else:
                env[node.var] = atom(value)
            node = node.body
        result = atom(node)

        kernels = compile_primitives([c[0] for c in calls], opt_level=opt_level)
        steps = [Step(k, args, flatten(out)) for k, (_, args, out) in zip(kernels, calls)]
        for b in flatten(result):
            if buffers[b].kind == "temp":
                buffers[b].kind = "output"
        return cls(buffers, steps, params, result)

    def __call__(self, *values: Value) -> Value:
        with self._lock:  # the arena is shared: one call at a time
            if self._uses is None:
                self._bind()
            inputs = flatten([leaves(p, v) for p, v in zip(self.params, values)])
            for index, array in zip(flatten(self.params), inputs):
                self._point(index, contiguous(array))
            for index in self._outputs:
                t = self.buffers[index].type
                self._point(index, np.empty(t.shape, t.dtype))
            self._run_sequence(self._sequence, len(self.steps))
            return rebuild(self.result, self.buffers)

    def _point(self, index: int, array: np.ndarray) -> None:
        """Makes every kernel that reads or writes buffer `index` use `array`."""
        self.buffers[index].value = array
        for bound, position in self._uses[index]:
            bound.retarget(position, array)

    def _bind(self) -> None:
        """Binds each step once (checked); calls then only retarget inputs and outputs."""
        self._outputs = [i for i, b in enumerate(self.buffers) if b.kind == "output"]
        self._uses, self._sequence = bind_steps(
            self.steps, self.buffers, [i for i, b in enumerate(self.buffers)
                                       if b.kind in ("input", "output")])
        self._run_sequence = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
            runtime_function("relaydsl_run_sequence"))


def bind_steps(steps: list[Step], buffers: list[Buffer], changing: list[int]
               ) -> tuple[dict[int, list], ctypes.Array]:
    """Binds every step's kernel to its buffers (checked once, here).

    Buffers without a value yet (inputs, outputs) get placeholders. Returns, for each buffer
    in `changing` (those each call points elsewhere), the ``(bound kernel, position)`` pairs
    to retarget, and the ``{entry, table}`` array the native runtime runs the steps from.
    """
    for b in buffers:
        if b.value is None:
            b.value = np.empty(b.type.shape, b.type.dtype)
    uses: dict[int, list] = {i: [] for i in changing}
    for step in steps:
        arrays = [buffers[i].value for i in step.inputs + step.outputs]
        step.run = step.kernel.bind(arrays[:len(step.inputs)], arrays[len(step.inputs):])
        for position, index in enumerate(step.inputs + step.outputs):
            if index in uses:
                uses[index].append((step.run, position))
    calls = (ctypes.c_void_p * max(1, 2 * len(steps)))(
        *[a for s in steps for a in (s.kernel.entry_address, s.run.table_address)])
    return uses, calls


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
            need = round_up(max(buffers[b].nbytes, 1))
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
    arena_views([(buffers[b], offsets[s]) for b, s in slot_of.items()], total)
    return total


def arena_views(placed: list[tuple[Buffer, int]], size: int) -> np.ndarray:
    """Allocates one 64-byte aligned arena of `size` bytes; each buffer's value becomes the
    view at its byte offset. The views keep the arena alive; it is also returned."""
    arena = np.empty(size + _ALIGN, np.uint8)
    base = (-arena.ctypes.data) % _ALIGN
    for b, offset in placed:
        count = int(np.prod(b.type.shape, dtype=np.int64))
        b.value = np.frombuffer(arena, b.type.dtype, count, base + offset).reshape(b.type.shape)
    return arena


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


def is_atom(e: Expr) -> bool:
    if isinstance(e, (Var, Constant)):
        return True
    if isinstance(e, Tuple):
        return all(is_atom(f) for f in e.fields)
    if isinstance(e, TupleGetItem):
        return is_atom(e.tuple_value)
    return False


def _plan_value(e: Expr) -> bool:
    if isinstance(e, Call):
        return is_primitive(e.op) and all(is_atom(a) for a in e.args)
    return is_atom(e)


def flatten(s: Structure) -> list:
    if isinstance(s, (tuple, list)):
        return [leaf for x in s for leaf in flatten(x)]
    return [s]


def leaves(structure: Structure, value: Value) -> list:
    if isinstance(structure, tuple):
        return [leaves(s, v) for s, v in zip(structure, value)]
    return [value]


def rebuild(s: Structure, buffers: list[Buffer]) -> Value:
    if isinstance(s, tuple):
        return tuple(rebuild(x, buffers) for x in s)
    b = buffers[s]
    return b.value if b.kind == "output" else np.array(b.value)  # inputs/constants: a copy
