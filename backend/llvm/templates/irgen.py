"""Small helpers for hand-written LLVM IR (llvmlite.ir), shared by the GEMM and conv2d templates.

``Gen`` wraps an IRBuilder over one function with counted loops, e.g.::

    with g.loop(0, n, 4, "t") as t:      ; t.head: %t = phi i64 [0, %entry], [%t.next, %t.body]
        ...                              ;         br (icmp slt %t, %n), %t.body, %t.end

and i64 arithmetic that folds constant operands (``g.mul(x, 1)`` is ``x``).
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Iterator, Sequence

import llvmlite.ir as ir

F32 = ir.FloatType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PF = F32.as_pointer()
VOID = ir.VoidType()


def c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


# One constant object per type: llvmlite writes a vector constant element by element, and
# caches the text of an object (a micro-kernel splats 14 values per k step: its IR took a
# third less time to build)
@functools.cache
def zeros(t: ir.Type) -> ir.Constant:
    return ir.Constant(t, None)


@functools.cache
def undefined(t: ir.Type) -> ir.Constant:
    return ir.Constant(t, ir.Undefined)


class VectorGEP(ir.Instruction):
    """``getelementptr float, float* %base, <n x iK> %idx`` (llvmlite lacks vector GEPs).

    Not ``inbounds``: lanes a masked gather leaves off may point anywhere."""

    def __init__(self, parent: ir.Block, ptr: ir.Value, index: ir.Value, name: str = ""):
        super().__init__(parent, ir.VectorType(ptr.type, index.type.count), "getelementptr",
                         [ptr, index], name)

    def descr(self, buf: list) -> None:
        ptr, idx = self.operands
        buf.append(f"getelementptr {ptr.type.pointee}, {ptr.type} {ptr.get_reference()}, "
                   f"{idx.type} {idx.get_reference()}\n")


def get_function(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    """The module's function `name` (an intrinsic shared by several templates), declared once."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, fnty, name)


def new_function(module: ir.Module, name: str, args: Sequence[ir.Type], internal: bool = True,
                 noalias: Sequence[int] = ()) -> ir.Function:
    fn = ir.Function(module, ir.FunctionType(VOID, list(args)), name)
    if internal:
        fn.linkage = "internal"
    for i in noalias:
        fn.args[i].add_attribute("noalias")
    fn.attributes.add("nounwind")
    return fn


class Gen:
    """An IRBuilder over one function, with counted loops and small arithmetic helpers."""

    def __init__(self, module: ir.Module, fn: ir.Function):
        self.module, self.fn = module, fn
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._n = 0

    def block(self, hint: str) -> ir.Block:
        self._n += 1
        return self.fn.append_basic_block(f"{hint}{self._n}")

    @contextmanager
    def loop(self, start: ir.Value | int, stop: ir.Value | int, step: ir.Value | int = 1,
             name: str = "i") -> Iterator[ir.Value]:
        """``for (i = start; i < stop; i += step)`` (signed; a run-time step must be > 0)."""
        b = self.b
        start, stop = self.val(start), self.val(stop)
        pre = b.block
        header, body = self.block(name + ".head"), self.block(name + ".body")
        done = self.block(name + ".end")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name)
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, stop), body, done)
        b.position_at_end(body)
        yield i
        nxt = b.add(i, self.val(step), name=name + ".next", flags=["nsw"])
        i.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(done)

    @staticmethod
    def val(v: ir.Value | int) -> ir.Value:
        return c64(v) if isinstance(v, int) else v

    def min(self, x: ir.Value | int, y: ir.Value | int) -> ir.Value:
        x, y = self.val(x), self.val(y)
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def max(self, x: ir.Value | int, y: ir.Value | int) -> ir.Value:
        x, y = self.val(x), self.val(y)
        return self.b.select(self.b.icmp_signed(">", x, y), x, y)

    def mul(self, x: ir.Value | int, k: ir.Value | int) -> ir.Value:
        if isinstance(x, int) and isinstance(k, int):
            return c64(x * k)
        if isinstance(x, int):
            x, k = k, x
        if isinstance(k, int):
            if k == 0:
                return c64(0)
            if k == 1:
                return self.val(x)
        return self.b.mul(self.val(x), self.val(k), flags=["nsw"])

    def add(self, x: ir.Value | int, y: ir.Value | int) -> ir.Value:
        if isinstance(y, int) and y == 0:
            return self.val(x)
        if isinstance(x, int) and x == 0:
            return self.val(y)
        return self.b.add(self.val(x), self.val(y), flags=["nsw"])

    def at(self, ptr: ir.Value, offset: ir.Value | int) -> ir.Value:
        if isinstance(offset, int) and offset == 0:
            return ptr
        return self.b.gep(ptr, [self.val(offset)], inbounds=True)

    def vptr(self, ptr: ir.Value, vl: int) -> ir.Value:
        return self.b.bitcast(ptr, ir.VectorType(F32, vl).as_pointer())

    def splat(self, x: ir.Value, n: int) -> ir.Value:
        vt = ir.VectorType(x.type, n)
        v = self.b.insert_element(undefined(vt), x, c32(0))
        return self.b.shuffle_vector(v, undefined(vt), zeros(ir.VectorType(I32, n)))

    def accumulators(self, entry: ir.Block, counter: str, vector: ir.VectorType, rows: int,
                     cols: int) -> tuple[ir.PhiInstr, list[list[ir.PhiInstr]]]:
        """At the top of a micro-kernel's loop body (reached from `entry` and from itself):
        its i64 counter, 0 from `entry`, and rows x cols accumulator vectors, zero from
        `entry`; the caller adds the incoming values of the loop's back edge."""
        b = self.b
        k = b.phi(I64, counter)
        k.add_incoming(c64(0), entry)
        accs = [[b.phi(vector, f"acc{i}_{v}") for v in range(cols)] for i in range(rows)]
        for row in accs:
            for acc in row:
                acc.add_incoming(ir.Constant(vector, None), entry)
        return k, accs

    def stack(self, count: int, name: str, element: ir.Type = F32) -> ir.Value:
        """A 64-byte aligned stack buffer of `count` elements (floats unless said), allocated
        in the entry block; a pointer to its first element."""
        b = self.b
        here = b.block
        with b.goto_entry_block():
            b.position_at_start(self.fn.entry_basic_block)
            buf = b.alloca(ir.ArrayType(element, max(1, count)), name=name)
            buf.align = 64
            ptr = b.bitcast(buf, element.as_pointer())
        assert here is b.block
        return ptr

    def lane_mask(self, count: ir.Value | int, vl: int, first_lane: int = 0) -> ir.Value:
        """``<vl x i1>``: lane l is on where ``first_lane + l < count``."""
        lanes = ir.Constant(ir.VectorType(I32, vl), [first_lane + lane for lane in range(vl)])
        count32 = self.b.trunc(self.min(self.max(count, 0), 1 << 30), I32)
        return self.b.icmp_signed("<", lanes, self.splat(count32, vl))

    def masked_load(self, ptr: ir.Value, mask: ir.Value, vl: int, element: ir.Type = F32
                    ) -> ir.Value:
        """``llvm.masked.load``: the lanes of `mask` from `ptr` (floats unless said), 0 in the
        others (never read)."""
        vec = ir.VectorType(element, vl)
        mask_t = ir.VectorType(I1, vl)
        fn = get_function(self.module, f"llvm.masked.load.v{vl}{_suffix(element)}.p0",
                          ir.FunctionType(vec, [vec.as_pointer(), I32, mask_t, vec]))
        ptr = self.b.bitcast(ptr, vec.as_pointer())
        return self.b.call(fn, [ptr, c32(_bytes(element)), mask, zeros(vec)])

    def prefetch(self, ptr: ir.Value, write: bool = False, locality: int = 3) -> None:
        """``llvm.prefetch`` of the cache line holding `ptr` (never faults, whatever `ptr`)."""
        i8p = ir.IntType(8).as_pointer()
        fn = get_function(self.module, "llvm.prefetch.p0",
                          ir.FunctionType(VOID, [i8p, I32, I32, I32]))
        self.b.call(fn, [self.b.bitcast(ptr, i8p), c32(int(write)), c32(locality), c32(1)])

    def masked_store(self, value: ir.Value, ptr: ir.Value, mask: ir.Value, vl: int) -> None:
        """``llvm.masked.store``: writes only the lanes of `mask` (of `value`'s type)."""
        vec = value.type
        assert isinstance(vec, ir.VectorType) and vec.count == vl
        mask_t = ir.VectorType(I1, vl)
        fn = get_function(self.module, f"llvm.masked.store.v{vl}{_suffix(vec.element)}.p0",
                          ir.FunctionType(VOID, [vec, vec.as_pointer(), I32, mask_t]))
        self.b.call(fn, [value, self.b.bitcast(ptr, vec.as_pointer()), c32(_bytes(vec.element)),
                         mask])


def _suffix(element: ir.Type) -> str:
    return f"i{element.width}" if isinstance(element, ir.IntType) else "f32"


def _bytes(element: ir.Type) -> int:
    return element.width // 8 if isinstance(element, ir.IntType) else 4
