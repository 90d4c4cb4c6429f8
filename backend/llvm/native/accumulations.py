"""Accumulations into references that a kernel may do in place, for native code (this package).

The gradient's adjoint references accumulate, ``ref_write(r, ref_read(r) + g)``: a
TreeLSTM training step adds a weight-sized gradient per node. Where the kernel adds
elementwise into an output of the total's type, native code writes the new total over the
old one when the cell is the total's only holder (a run-time flag in the cell).
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.ir.types import static_type
from relaydsl.ir.expr import Call, Expr, Function, Let, RefRead, RefWrite, Var
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprVisitor, let_chain
from relaydsl.op.tensor import add as add_op
from relaydsl.transform._dataflow import use_counts
from relaydsl.transform.fuse_ops import is_primitive


@dataclass(frozen=True)
class Accumulation:
    """A kernel call adding to the value of a reference cell: its input `index` is the
    running total (read from `cell`), which the output may overwrite."""

    index: int
    cell: Var


class Accumulations(dict[Call, Accumulation]):
    """The accumulations of a function body, by their kernel call; `reads` and `writes`
    their ``ref_read`` and ``ref_write`` nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: set[Expr] = set()
        self.writes: set[Expr] = set()


def accumulations(body: Expr) -> Accumulations:
    """The ``let v = ref_read(r); let s = k(.., v, ..); let _ = ref_write(r, s)`` of `body`
    (primitive functions let-bound between them), nested functions aside, what the
    gradient's adjoint references do, where v and s have no other use and kernel k computes
    ``add(v, ...)`` elementwise into an output of v's type: k reads each element of v once,
    as it writes the output's, so the output may be v's memory when the cell is v's only
    holder (a run-time flag: any other ``ref_read``, or a write of another value, clears
    it; the accumulation's write sets it)."""
    finder = _Finder(use_counts(body))
    finder.visit(body)
    return finder.found


class _Finder(ExprVisitor):
    """Walks `body`'s lets, branches and clauses (the code of the function, nested functions
    aside), matching an accumulation at each ``ref_read``."""

    def __init__(self, uses: dict[Expr, int]) -> None:
        super().__init__()
        self.uses = uses
        self.primitives: dict[Var, Function] = {}
        self.found = Accumulations()

    def visit_let(self, let: Let) -> None:
        chain, body = let_chain(let)
        for e in chain:
            if isinstance(e.value, Function):
                if is_primitive(e.value):
                    self.primitives[e.var] = e.value
            else:
                self.visit(e.value)
            if isinstance(e.value, RefRead) and isinstance(e.value.ref, Var):
                _match_accumulation(e, self.uses, self.primitives, self.found)
        self.visit(body)

    def visit_function(self, fn: Function) -> None:
        pass  # a nested function's accumulations are its own lowering's


def _match_accumulation(read: Let, uses: dict[Expr, int], primitives: dict[Var, Function],
                        found: Accumulations) -> None:
    def following(let: Let) -> Let | None:  # past the primitive functions let-bound next
        e = let.body
        while isinstance(e, Let) and isinstance(e.value, Function) and is_primitive(e.value):
            primitives[e.var] = e.value
            e = e.body
        return e if isinstance(e, Let) else None

    total, cell = read.var, read.value.ref
    add = following(read)
    write = following(add) if add is not None else None
    if write is None or not isinstance(add.value, Call) or \
            not isinstance(write.value, RefWrite) or write.value.ref is not cell or \
            write.value.value is not add.var:
        return
    call = add.value
    fn = primitives.get(call.op) if isinstance(call.op, Var) else call.op  # type: ignore
    # (a let-bound variable is used where it is bound and once more)
    if not isinstance(fn, Function) or not is_primitive(fn) or uses.get(total) != 2 or \
            uses.get(add.var) != 2 or [a is total for a in call.args].count(True) != 1:
        return
    index = [a is total for a in call.args].index(True)
    if not all(isinstance(a.checked_type, TensorType) for a in call.args):
        return
    param, root = fn.params[index], fn.body
    if isinstance(root, Call) and root.op == add_op.op and \
            any(a is param for a in root.args) and static_type(root.checked_type) and \
            param.checked_type == root.checked_type and \
            use_counts(fn.body).get(param) == 1:
        found[call] = Accumulation(index, cell)
        found.reads.add(read.value)
        found.writes.add(write.value)
