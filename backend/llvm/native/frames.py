"""Temporaries in a frame: the tensors a function's straight-line code passes from kernel to
kernel share memory where their lifetimes do not overlap.

Native code takes every kernel's outputs from the bump arena, so a forward pass touches a
fresh buffer for every intermediate (an MLP's 1.2 MB where 0.4 MB would do): memory that has
left the caches by the next call. For the lets at the top of a function's body (its spine,
before any branch) lifetimes are plain intervals: a tensor lives from the kernel call
writing it to the last kernel call on the spine reading it. One block of the arena, the
frame, taken when the function starts, holds them all, best fit in the order they are
written; a kernel's outputs never share memory with its inputs.

A tensor read by anything but a kernel call on the spine (a tuple, a branch, a closure, a
reference, the result) may outlive the function's straight line: it keeps memory of its own.
So does everything of a function that loops (its turns would write over what they carry).
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.backend.llvm.native.results import is_kernel_call
from relaydsl.backend.llvm.native.sites import ALIGN, nbytes
from relaydsl.ir.expr import Call, Expr, Function, Let, Var
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import free_vars


@dataclass(frozen=True)
class Frame:
    """Where in the frame each placed kernel call writes its output, and the
    frame's size in bytes."""

    offsets: dict[Expr, int]
    size: int


def frame(fn: Function) -> Frame:
    """The frame of `fn`'s spine (empty when nothing can share memory)."""
    spine: list[tuple[Var, Expr]] = []
    e: Expr = fn.body
    while isinstance(e, Let):
        spine.append((e.var, e.value))
        e = e.body
    bound = dict(spine)
    written: dict[Var, int] = {}  # a single static tensor output: where it is written
    for i, (v, value) in enumerate(spine):
        t = value.checked_type if value.has_type else None
        if is_kernel_call(value, bound) and isinstance(t, TensorType) and \
                all(isinstance(d, int) for d in t.shape) and isinstance(t.dtype, str):
            written[v] = i
    last_read = dict(written)
    escapes: set[Var] = set()
    for i, (_, value) in enumerate(spine):
        if is_kernel_call(value, bound):
            assert isinstance(value, Call)
            for a in value.args:
                if isinstance(a, Var) and a in written:
                    last_read[a] = i
                else:
                    escapes.update(free_vars(a))
        else:
            escapes.update(free_vars(value))
    escapes.update(free_vars(e))
    placed = sorted((v for v in written if v not in escapes), key=written.__getitem__)
    # best fit, in the order they are written
    sizes: list[int] = []  # per slot
    busy: list[int] = []  # per slot, the last spine index reading its current tensor
    slot_of: dict[Var, int] = {}
    for v in placed:
        t = v.checked_type if v.has_type else bound[v].checked_type
        need = -(-nbytes(t.shape, t.dtype) // ALIGN) * ALIGN
        free = [s for s in range(len(sizes)) if busy[s] < written[v]]
        fits = [s for s in free if sizes[s] >= need]
        if fits:
            s = min(fits, key=sizes.__getitem__)
        elif free:  # grow the largest free slot rather than add one
            s = max(free, key=sizes.__getitem__)
            sizes[s] = need
        else:
            sizes.append(need)
            busy.append(-1)
            s = len(sizes) - 1
        busy[s] = last_read[v]
        slot_of[v] = s
    starts = [sum(sizes[:s]) for s in range(len(sizes))]
    return Frame({bound[v]: starts[s] for v, s in slot_of.items()}, sum(sizes))
