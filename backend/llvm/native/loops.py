"""A loop's memory in native code (this package): released as the loop goes.

A loop is a function calling itself in tail position; each turn allocates its kernels'
outputs from the call's bump arena. A turn's memory can be released once nothing that
survives the turn points into it. What survives is what the loop carries to its next turn
(its arguments), and what it wrote into reference cells older than the turn: a training
loop written as Figure 4 writes the model's new parameters into the model's cell every
turn.

So at the back edge, once the turns since the loop's mark have taken enough memory, the
loop copies out the tensors it carries and those held by its *root cells* -- the cells of
flat values (tensors and tuples of them) that it captures and writes itself -- resets the
arena to the mark and copies them back. Only young tensors are copied: a tensor allocated
before the mark (the data set a loop walks, a constant) stays where it is.

Any other write into an older cell (the write barrier: every cell holds the epoch it was
made in, and the state keeps the oldest epoch written during the turn) moves the mark past
the turn instead, keeping its memory. A loop may also carry data (lists, trees: no
functions or references inside) made before its mark, such as the list a ``for`` walks: it
is not copied, nothing in it can point at newer memory. While it carries data it made
itself (a list it builds) or closures, it keeps its memory until the call returns.

How often: a release copies what survives, so the loop releases only once the turns have
allocated ``_COPY_RATIO`` times what the last release copied (and at least ``_RECLAIM``):
copying costs at most a fraction of what the turns allocate, and the memory in use stays
within a few turns' needs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from relaydsl.backend.llvm.native.abi import I64, NEVER, PTR, Word
from relaydsl.backend.llvm.native.sites import ALIGN, leaf_types
from relaydsl.ir.expr import Function, RefWrite, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import RefType, TensorType, TupleType, Type, TypeCall
from relaydsl.ir.visitor import ExprVisitor

if TYPE_CHECKING:
    from relaydsl.backend.llvm.native.functions import FunctionCompiler

_RECLAIM = 1 << 20  # bytes the turns take at least before a release
_COPY_RATIO = 4  # ... and at least this many times what the last release copied


def flat(t: Type) -> bool:
    """Whether values of type `t` hold only tensors (what a loop can copy without
    knowing more than the type)."""
    if isinstance(t, TupleType):
        return all(flat(f) for f in t.fields)
    return isinstance(t, TensorType) and isinstance(t.dtype, str)


def immutable_data(t: Type, mod: IRModule, seen: set | None = None) -> bool:
    """Whether values of type `t` are tensors, tuples and data types of them all the way
    down: no functions, no references. Such a value allocated before a loop's mark points
    only at older memory (its objects were made before it, and none can change), so a
    loop may carry it through a release untouched."""
    if isinstance(t, TensorType):
        return True
    if isinstance(t, TupleType):
        return all(immutable_data(f, mod, seen) for f in t.fields)
    if isinstance(t, TypeCall) and t.func in mod.type_definitions:
        seen = set() if seen is None else seen
        if t in seen:
            return True
        seen.add(t)
        return all(immutable_data(f, mod, seen)
                   for c in mod.type_definitions[t.func].constructors
                   for f in mod.field_types(c, t))
    return False


def written_cells(fn: Function, captured: list[Var]) -> list[Var]:
    """The variables of `captured` that hold cells of flat values and that `fn`'s body
    writes into itself (not in a function it makes)."""
    candidates = {v for v in captured if v.has_type and isinstance(v.checked_type, RefType)
                  and flat(v.checked_type.value)}
    found: list[Var] = []

    class Writes(ExprVisitor):
        def visit_function(self, f: Function) -> None:
            pass  # its writes happen whenever it is called: through the barrier

        def visit_ref_write(self, r: RefWrite) -> None:
            if r.ref in candidates and r.ref not in found:
                found.append(r.ref)  # type: ignore[arg-type]
            super().visit_ref_write(r)

    Writes().visit(fn.body)
    return found


def _marks(fc: FunctionCompiler) -> list[ir.Value]:
    """``fc.mark()`` and the bytes of chunks then (for the memory taken since)."""
    return [*fc.mark(), fc.b.load(fc.b.gep(fc.words, [I64(Word.OVERFLOW)]))]


class LoopMemory:
    """The memory of the loop `fc` emits: made before its header, started at the header,
    and asked at each back edge for the arguments to loop with."""

    def __init__(self, fc: FunctionCompiler, roots: list[tuple[ir.Value, Type]]):
        """`roots`: the loop's root cells (their values in the function) and the types of
        what they hold. The loop's parameters are flat (copied at a release) or immutable
        data (a release waits until they are older than the mark: a list the loop walks,
        not one it builds)."""
        self.fc, self.roots = fc, roots
        self.copied = [i for i, p in enumerate(fc.fn.params) if flat(p.checked_type)]
        self.first_marks = _marks(fc)
        self.threshold = fc.allocas.alloca(I64, name="release_after")
        fc.b.store(I64(_RECLAIM), self.threshold)
        # the oldest root cell written (for the enclosing loop's barrier)
        self.roots_written = fc.allocas.alloca(I64, name="roots_written")

    def start(self, before: ir.Block) -> None:
        """At the loop's header (`before`: the block entering the loop)."""
        fc, b = self.fc, self.fc.b
        self.marks = [b.phi(I64) for _ in self.first_marks]  # where the turns' memory starts
        for phi, mark in zip(self.marks, self.first_marks):
            phi.add_incoming(mark, before)
        epoch_p = b.gep(fc.words, [I64(Word.EPOCH)])
        self.epoch = b.add(b.load(epoch_p), I64(1))
        b.store(self.epoch, epoch_p)
        written_p = b.gep(fc.words, [I64(Word.WRITTEN)])
        self.written_before = b.load(written_p)  # by an enclosing loop's turn
        b.store(I64(NEVER), written_p)
        b.store(I64(NEVER), self.roots_written)

    def is_root(self, cell: ir.Value) -> bool:
        return any(cell is c for c, _ in self.roots)

    def note_root_write(self, cell: ir.Value) -> None:
        """A write into a root cell: no barrier for this loop (a release copies what the
        cell holds), but one for the loops around it."""
        b = self.fc.b
        epoch, written = self.fc.word(cell, 1), b.load(self.roots_written)
        b.store(b.select(b.icmp_signed("<", epoch, written), epoch, written),
                self.roots_written)

    def leave(self) -> ir.Value:
        """On the way out of a turn (back edge or exit): the oldest cell written in it other
        than a root; the enclosing loop's record updated with every write."""
        fc, b = self.fc, self.fc.b
        written_p = b.gep(fc.words, [I64(Word.WRITTEN)])
        written = b.load(written_p)
        oldest = b.load(self.roots_written)
        for other in (written, self.written_before):
            oldest = b.select(b.icmp_signed("<", other, oldest), other, oldest)
        b.store(oldest, written_p)
        return written

    def back_edge(self, args: list[ir.Value]) -> list[ir.Value]:
        """At the back edge: the turns' memory released when they took enough of it and no
        older cell but a root was written (after such a write the mark moves past the
        turn instead). The arguments to loop with."""
        fc, b = self.fc, self.fc.b
        dirty = b.icmp_signed("<", self.leave(), self.epoch)
        now = _marks(fc)
        same_chunk = b.icmp_unsigned("==", now[2], self.marks[2])
        taken = b.add(b.sub(now[3], self.marks[3]),
                      b.select(same_chunk, b.sub(now[0], self.marks[0]), I64(0)))
        full = b.icmp_unsigned(">", taken, b.load(self.threshold))
        may = b.and_(full, b.not_(dirty))
        for i, a in enumerate(args):
            if i not in self.copied:  # data made since the mark would need copying
                may = b.and_(may, b.not_(self._young(a)))
        start = b.block
        release, done = fc.new_block("release"), fc.new_block("turn_done")
        b.cbranch(may, release, done)
        b.position_at_end(release)
        copies = self._release(args)
        released = b.block
        b.branch(done)
        b.position_at_end(done)
        new_args = []
        for a, c in zip(args, copies):
            phi = b.phi(PTR)
            phi.add_incoming(a, start)
            phi.add_incoming(c, released)
            new_args.append(phi)
        for phi, current in zip(self.marks, now):
            phi.add_incoming(b.select(dirty, current, phi), b.block)
        return new_args

    def _release(self, args: list[ir.Value]) -> list[ir.Value]:
        """The young tensors of `args` and of the root cells copied to a side buffer, the
        arena reset to the mark, and copied back; the new arguments."""
        fc, b, low = self.fc, self.fc.b, self.fc.low
        params = fc.fn.params
        types = [params[i].checked_type for i in self.copied] + [t for _, t in self.roots]
        values = [*(args[i] for i in self.copied), *(fc.field(cell, 0) for cell, _ in self.roots)]
        leaves: list[ir.Value] = []
        for v, t in zip(values, types):
            fc.leaves(v, t, leaves)
        shapes, sizes, offsets, youngs = [], [], [], []
        total: ir.Value = I64(0)
        for tensor, t in zip(leaves, leaf_types(types)):
            dims = fc.dims(tensor, len(t.shape)) if low.boxed else [I64(d) for d in t.shape]
            size: ir.Value = I64(np.dtype(str(t.dtype)).itemsize)
            for d in dims:
                size = b.mul(size, d)
            young = self._young(fc.data(tensor))
            if low.boxed:  # a header of its own over older data
                young = b.or_(young, self._young(tensor))
            size = b.select(young, size, I64(0))
            shapes.append(dims)
            sizes.append(size)
            offsets.append(total)
            youngs.append(young)
            total = b.and_(b.add(b.add(total, size), I64(ALIGN - 1)), I64(-ALIGN))
        side = b.call(low.malloc, [b.add(total, I64(1))])
        for tensor, size, offset in zip(leaves, sizes, offsets):
            b.call(low.memcpy, [b.gep(side, [offset]), fc.data(tensor), size,
                                ir.Constant(ir.IntType(1), 0)])
        b.call(low.reset, [fc.st, *self.marks[:3]])
        copies = []
        for tensor, dims, size, offset, young in zip(leaves, shapes, sizes, offsets, youngs):
            copy = fc.new_tensor(dims, size)
            b.call(low.memcpy, [fc.data(copy), b.gep(side, [offset]), size,
                                ir.Constant(ir.IntType(1), 0)])
            copies.append(b.select(young, copy, tensor))
        b.call(low.free, [side])
        again = b.mul(total, I64(_COPY_RATIO))
        b.store(b.select(b.icmp_unsigned(">", again, I64(_RECLAIM)), again, I64(_RECLAIM)),
                self.threshold)
        rebuilt = iter(copies)
        new_values = [fc.rebuild(t, rebuilt) for t in types]
        for (cell, _), value in zip(self.roots, new_values[len(self.copied):]):
            fc.set_field(cell, 0, value)
        new_args = list(args)
        for i, value in zip(self.copied, new_values):
            new_args[i] = value
        return new_args

    def _young(self, pointer: ir.Value) -> ir.Value:
        """Whether `pointer` was allocated since the mark (an i1)."""
        b = self.fc.b
        return b.trunc(b.call(self.fc.low.young, [self.fc.st, b.ptrtoint(pointer, I64),
                                                   *self.marks[:3]]), ir.IntType(1))


def young_function(module: ir.Module) -> ir.Function:
    """``i64 young(state, address, mark cur, mark end, mark chunks)``: 1 when `address`
    lies in memory allocated since the mark -- after it in the arena or chunk it was taken
    in, or in a chunk taken since -- else 0."""
    f = ir.Function(module, ir.FunctionType(I64, [PTR, I64, I64, I64, I64]), "relaydsl_young")
    f.linkage = "internal"
    st, at, cur, end, mark = f.args
    entry, walk, check, yes, no = (f.append_basic_block(x)
                                   for x in ("entry", "walk", "check", "yes", "no"))
    b = ir.IRBuilder(entry)
    words = b.bitcast(st, I64.as_pointer())
    after_mark = b.and_(b.icmp_unsigned(">=", at, cur), b.icmp_unsigned("<", at, end))
    first = b.load(b.gep(words, [I64(Word.CHUNKS)]))
    b.cbranch(after_mark, yes, walk)
    b.position_at_end(walk)
    chunk = b.phi(I64)
    chunk.add_incoming(first, entry)
    b.cbranch(b.icmp_unsigned("==", chunk, mark), no, check)
    b.position_at_end(check)
    chunk_words = b.inttoptr(chunk, I64.as_pointer())  # [next chunk, size, ...]
    size = b.load(b.gep(chunk_words, [I64(1)]))
    inside = b.and_(b.icmp_unsigned(">=", at, chunk),
                    b.icmp_unsigned("<", at, b.add(chunk, size)))
    chunk.add_incoming(b.load(chunk_words), check)
    b.cbranch(inside, yes, walk)
    b.position_at_end(yes)
    b.ret(I64(1))
    b.position_at_end(no)
    b.ret(I64(0))
    return f
