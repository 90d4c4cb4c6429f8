"""te expressions as LLVM values: what a stage's loop body (codegen.py) and a template's
epilogue in registers (epilogue.py) both emit.

``ExprEmitter`` turns a te expression into LLVM instructions at its builder's position,
given the values of the axes around it (a ``Ctx``):

    T_relu[i, j] = max(T_add[i, j], 0.0),  T_add inlined  =>
        %a = load float, float* (X + i*J + j)        ; a read, its index clamped if need be
        %r = call float @llvm.maximum.f32(float %a, float 0.0)


Expressions: index arithmetic (integer expressions of axes and constants) is
computed in i64 with ``nsw`` so addresses stay simple affine forms; data
arithmetic follows NumPy (integers wrap; integer division floors and gives 0
for a zero divisor, never trapping; float max/min propagate NaN; float->int
casts saturate instead of producing poison). bool is i1 in registers, i8 in
memory. Every read's index is checked by interval analysis (intervals.py) over the
loop ranges and clamped where it is not provably in range, so no input -- not even
a guarded read in a padding region, which ``select`` still evaluates, or a
data-dependent index -- reads out of bounds. Reductions accumulate with
reassociation allowed (``fadd reassoc nsz``) so the vectoriser can split them.

The arithmetic (binary ops, casts, the intrinsics whose ``Lowering.vectors`` says so) also
runs on vectors of values (<16 x float>): a value's type, not the expression's dtype, gives
the instructions' types. epilogue.py's emitter hands it such operands (scalar ones splat).
"""
from __future__ import annotations

import itertools
import math
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from llvmlite import ir

from relaydsl.backend.llvm import intrinsics as M
from relaydsl.backend.llvm.intervals import Interval, Scope, clamped, interval, is_float
from relaydsl.chained import ChainedDict
from relaydsl.te.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, Call, Cast, Div, FloatImm, FloorDiv, FloorMod,
    IntImm, IterVar, Max, Min, Mul, Not, PrimExpr, Reduce, Select, Sub, TensorRead, Var,
    post_order,
)
from relaydsl.te.tensor import Tensor

if TYPE_CHECKING:
    from relaydsl.backend.llvm.generic import Symbolic

I1, I8, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(64)

VOID = ir.VoidType()
_VALUE_TYPES = {
    "bool": I1, "int8": I8, "uint8": I8, "int16": ir.IntType(16), "int32": ir.IntType(32),
    "int64": I64, "float16": M.F16, "float32": M.F32, "float64": M.F64,
}
FAST = ("reassoc", "nsz", "contract")
# reductions of at most this many steps (of static extents) are emitted unrolled (reduce)
UNROLLED_REDUCE = 16


def value_type(dtype: str) -> ir.Type:
    return _VALUE_TYPES[dtype]


def memory_type(dtype: str) -> ir.Type:
    return I8 if dtype == "bool" else _VALUE_TYPES[dtype]


def strides(shape: tuple[int, ...]) -> list[int]:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]



class Sizes:
    """Sizes known only at run time (generic.py) as i64 values: products of the variables
    the kernel reads from its sizes buffer, each loaded and multiplied once, where
    `builder` is (a block dominating their uses)."""

    def __init__(self, builder: ir.IRBuilder, pointer: ir.Value):
        self.b, self.pointer = builder, pointer
        self.memo: dict[tuple[int, ...], ir.Value] = {}

    def dim(self, d: "int | tuple[tuple[int, ...], int]") -> ir.Value:
        """A size: static, or a product of variables plus a constant (generic.Size)."""
        if isinstance(d, int):
            return ir.Constant(I64, d)
        mono, offset = d
        v = self.product(mono)
        return v if offset == 0 else self.b.add(v, ir.Constant(I64, offset), flags=["nsw"])

    def product(self, mono: tuple[int, ...]) -> ir.Value:
        v = self.memo.get(mono)
        if v is None:
            if len(mono) == 1:
                v = self.b.load(self.b.gep(self.pointer, [ir.Constant(I64, mono[0])],
                                           inbounds=True), name=f"size{mono[0]}")
            else:
                v = self.b.mul(self.product(mono[:-1]), self.product(mono[-1:]), flags=["nsw"])
            self.memo[mono] = v
        return v


class Ctx(Scope):
    """Where an expression is emitted: values and ranges of its axes/variables, and a memo."""

    def __init__(self, env: dict[PrimExpr, ir.Value], ranges: dict[PrimExpr, Interval],
                 parent: "Ctx | None" = None, fast: bool = False):
        super().__init__(ranges, parent)
        self.env, self.fast = env, fast
        self.memo: ChainedDict[tuple[PrimExpr, str], ir.Value] = ChainedDict(
            None if parent is None else parent.memo)

    def child(self, env: dict[PrimExpr, ir.Value], ranges: dict[PrimExpr, Interval]) -> "Ctx":
        return Ctx({**self.env, **env}, {**self.ranges, **ranges}, self, self.fast)


def element(t: ir.Type) -> ir.Type:
    """A vector type's element type; any other type itself."""
    return t.element if isinstance(t, ir.VectorType) else t


def like(v: ir.Value, t: ir.Type) -> ir.Type:
    """`t`, or vectors of `t` as many as `v`'s lanes where `v` is a vector."""
    return ir.VectorType(t, v.type.count) if isinstance(v.type, ir.VectorType) else t


class ExprEmitter:
    """Emits te expressions with `b` (values of the axes in a ``Ctx``), reading the buffers
    `ptr` (tensor -> pointer argument) and substituting the `inlined` tensors' bodies;
    `sym`/`sizes`: sizes known at run time (generic.py); `alloca_builder`: where stack slots
    go (a function's entry block)."""

    def __init__(self, module: ir.Module, b: ir.IRBuilder, alloca_builder: ir.IRBuilder,
                 ptr: dict[Tensor, ir.Value], inlined: set[Tensor],
                 sym: "Symbolic | None" = None, sizes: Sizes | None = None):
        self.module, self.b, self.alloca_builder = module, b, alloca_builder
        self.ptr, self.inlined, self.sym, self.sizes = ptr, inlined, sym, sizes
        self._pure: dict[PrimExpr, bool] = {}
        self._strides: dict[Tensor, list[ir.Value]] = {}
        # trailing axes run as one loop (codegen's _nest): id((row, column)) -> (that loop's
        # index, the row length, the pair kept alive so the ids stay theirs)
        self._merged: dict[tuple[int, int], tuple[ir.Value, int, tuple]] = {}

    # ---- sizes: constants, or read at run time (generic.py) ---------------------------
    def dim(self, t: Tensor, d: int) -> ir.Value:
        if self.sym is None or self.sizes is None:
            return ir.Constant(I64, t.shape[d])
        return self.sizes.dim(self.sym.shape(t)[d])

    def extent(self, a: IterVar) -> ir.Value:
        if self.sym is None or self.sizes is None or a not in self.sym.extents:
            return ir.Constant(I64, a.extent)
        return self.sizes.dim(self.sym.extents[a])

    def strides(self, t: Tensor) -> list[ir.Value]:
        """Row-major strides of `t`, in elements (computed once, in the entry block)."""
        found = self._strides.get(t)
        if found is None:
            if self.sym is None or self.sizes is None or t not in self.sym.dims:
                found = [ir.Constant(I64, s) for s in strides(t.shape)]
            else:
                dims = self.sym.shape(t)
                found = []
                for d in range(len(dims)):
                    inner = dims[d + 1:]
                    s = ir.Constant(I64, math.prod(x for x in inner if isinstance(x, int)))
                    for x in inner:
                        if not isinstance(x, int):
                            one = s.constant == 1 if isinstance(s, ir.Constant) else False
                            v = self.sizes.dim(x)
                            s = v if one else self.alloca_builder.mul(s, v, flags=["nsw"])
                    found.append(s)
            self._strides[t] = found
        return found

    def offset(self, t: Tensor, index: list[ir.Value]) -> ir.Value:
        off: ir.Value = ir.Constant(I64, 0)
        index, strides_ = list(index), list(self.strides(t))
        for d in range(len(index) - 1):  # a merged (row, column) of a row as long: one term
            merged = self._merged.get((id(index[d]), id(index[d + 1])))
            if merged is not None and t.shape[d + 1] == merged[1]:
                index[d:d + 2], strides_[d:d + 2] = [merged[0]], [strides_[d + 1]]
                break
        for v, s in zip(index, strides_):
            one = isinstance(s, ir.Constant) and s.constant == 1
            term = v if one else self.b.mul(v, s, flags=["nsw"])
            off = self.b.add(off, term, flags=["nsw"])
        return off

    # ---- loops -----------------------------------------------------------------------
    @contextmanager
    def loop(self, start: ir.Value, stop: ir.Value, name: str) -> Iterator[ir.Value]:
        """``for (i = start; i < stop; i++)``; blocks ``name.cond``, ``name.body``, ``name.end``."""
        b = self.b
        pre = b.block
        cond = b.function.append_basic_block(f"{name}.cond")
        body = b.function.append_basic_block(f"{name}.body")
        end = b.function.append_basic_block(f"{name}.end")
        b.branch(cond)
        b.position_at_end(cond)
        i = b.phi(I64, name)
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, stop), body, end)
        b.position_at_end(body)
        yield i
        nxt = b.add(i, ir.Constant(I64, 1), name=f"{name}.next", flags=["nsw", "nuw"])
        i.add_incoming(nxt, b.block)
        b.branch(cond)
        b.position_at_end(end)

    def alloca(self, t: ir.Type, name: str) -> ir.Value:
        return self.alloca_builder.alloca(t, name=name)


    def _store_val(self, ptr: ir.Value, v: ir.Value, dtype: str) -> None:
        self.b.store(self.b.zext(v, I8) if dtype == "bool" else v, ptr)

    def _load_val(self, ptr: ir.Value, dtype: str) -> ir.Value:
        v = self.b.load(ptr)
        return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dtype == "bool" else v

    def combine(self, red: Reduce, acc: ir.Value, src: ir.Value) -> ir.Value:
        ctx = Ctx({red.lhs: acc, red.rhs: src}, {}, fast=True)
        return self.value(red.combined, ctx)

    def interval(self, e: PrimExpr, ctx: Ctx) -> Interval:
        """Bounds of an integer expression over the loop ranges (intervals.py)."""
        return interval(e, ctx, self.inlined)

    # ---- index arithmetic (i64) -----------------------------------------------------------
    def pure(self, e: PrimExpr) -> bool:
        """An integer (or bool) expression of axes and constants only: computed in i64."""
        if e not in self._pure:
            self._pure[e] = all(
                not is_float(n.dtype) and not isinstance(n, (TensorRead, Var, Reduce, Call, Cast))
                for n in post_order(e))
        return self._pure[e]

    def index(self, e: PrimExpr, ctx: Ctx) -> ir.Value:
        """``e`` (an integer expression) as i64."""
        key = (e, "i")
        v = ctx.memo.find(key)
        if v is None:
            v = self._index(e, ctx)
            ctx.memo[key] = v
        return v

    def _index(self, e: PrimExpr, ctx: Ctx) -> ir.Value:
        b = self.b
        if not self.pure(e) or e.dtype == "bool":
            v = self.value(e, ctx)
            if v.type == I64:
                return v
            return b.zext(v, I64) if e.dtype in ("uint8", "bool") else b.sext(v, I64)
        match e:
            case IntImm(value=v):
                if self.sizes is not None and self.sym is not None and e in self.sym.ints:
                    return self.sizes.dim(self.sym.ints[e])
                return ir.Constant(I64, v)
            case IterVar():
                return ctx.env[e]
            case Add(a=a, b=x):
                return b.add(self.index(a, ctx), self.index(x, ctx), flags=["nsw"])
            case Sub(a=a, b=x):
                return b.sub(self.index(a, ctx), self.index(x, ctx), flags=["nsw"])
            case Mul(a=a, b=x):
                return b.mul(self.index(a, ctx), self.index(x, ctx), flags=["nsw"])
            case Min(a=a, b=x) | Max(a=a, b=x):
                p, q = self.index(a, ctx), self.index(x, ctx)
                op = "<" if isinstance(e, Min) else ">"
                return b.select(b.icmp_signed(op, p, q), p, q)
            case FloorDiv(a=a, b=x) | Div(a=a, b=x) | FloorMod(a=a, b=x):
                p, q = self.interval(a, ctx), self.interval(x, ctx)
                mod = isinstance(e, FloorMod)
                if p is not None and q is not None and p[0] >= 0 and q[0] > 0:
                    u, w = self.index(a, ctx), self.index(x, ctx)
                    return b.urem(u, w) if mod else b.udiv(u, w)
                return self.int_divide(self.index(a, ctx), self.index(x, ctx), False, mod)
            case Select(condition=c, true_value=tv, false_value=fv):
                return b.select(self.value(c, ctx), self.index(tv, ctx), self.index(fv, ctx))
        raise TypeError(f"not an index expression: {e}")

    # ---- values --------------------------------------------------------------------------
    def value(self, e: PrimExpr, ctx: Ctx) -> ir.Value:
        key = (e, "v")
        v = ctx.memo.find(key)
        if v is None:
            v = self._value(e, ctx)
            ctx.memo[key] = v
        return v

    def _value(self, e: PrimExpr, ctx: Ctx) -> ir.Value:
        b = self.b
        t = value_type(e.dtype)
        if self.pure(e) and e.dtype != "bool" and not isinstance(e, IntImm):
            v = self.index(e, ctx)
            return v if t == I64 else b.trunc(v, t)
        match e:
            case IntImm(value=v):
                if self.sizes is not None and self.sym is not None and e in self.sym.ints:
                    return b.trunc(self.sizes.dim(self.sym.ints[e]), t) if t != I64 \
                        else self.sizes.dim(self.sym.ints[e])
                return ir.Constant(t, v)
            case FloatImm(value=v):
                if self.sizes is not None and self.sym is not None and e in self.sym.floats:
                    mono, inverse = self.sym.floats[e]
                    f = b.sitofp(self.sizes.dim(mono), t)
                    return b.fdiv(ir.Constant(t, 1.0), f) if inverse else f
                return ir.Constant(t, v)
            case IterVar() | Var():
                v = ctx.env[e]
                return b.trunc(v, t) if v.type != t and v.type == I64 else v
            case Not(a=a):
                x = self.value(a, ctx)
                return b.xor(x, ir.Constant(x.type, 1))
            case Select(condition=c, true_value=tv, false_value=fv):
                return b.select(self.value(c, ctx), self.value(tv, ctx), self.value(fv, ctx))
            case Cast(dtype=d, value=v):
                return self.cast(self.value(v, ctx), v.dtype, d)
            case Call(intrinsic=intrinsic, args=args):
                return M.lower_call(b, intrinsic, [self.value(a, ctx) for a in args], e.dtype)
            case TensorRead():
                return self.read(e, ctx)
            case Reduce():
                return self.reduce(e, ctx)
            case BinaryOp():
                return self.binary(e, ctx)
        raise TypeError(f"cannot emit {e!r}")

    def binary(self, e: BinaryOp, ctx: Ctx) -> ir.Value:
        b = self.b
        dt = e.a.dtype
        if e.kind == "compare" and self.pure(e.a) and self.pure(e.b) and dt != "bool":
            x, y = self.index(e.a, ctx), self.index(e.b, ctx)
            return b.icmp_signed(_ICMP[type(e)], x, y)
        x, y = self.value(e.a, ctx), self.value(e.b, ctx)
        if e.kind == "logic":
            return b.and_(x, y) if isinstance(e, And) else b.or_(x, y)
        if e.kind == "compare":
            if is_float(dt):
                op = _ICMP[type(e)]
                return b.fcmp_unordered(op, x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
            if dt in ("uint8", "bool"):
                return b.icmp_unsigned(_ICMP[type(e)], x, y)
            return b.icmp_signed(_ICMP[type(e)], x, y)
        if is_float(dt):
            flags = FAST if ctx.fast else ()
            match e:
                case Add():
                    return b.fadd(x, y, flags=flags)
                case Sub():
                    return b.fsub(x, y, flags=flags)
                case Mul():
                    return b.fmul(x, y, flags=flags)
                case Div():
                    return b.fdiv(x, y)
                case FloorDiv():
                    return M.call1(b, "floor", b.fdiv(x, y))
                case FloorMod():  # x - floor(x / y) * y
                    return b.fsub(x, b.fmul(M.call1(b, "floor", b.fdiv(x, y)), y))
                case Max():
                    return M.call2(b, "maximum", x, y)
                case Min():
                    return M.call2(b, "minimum", x, y)
        unsigned = dt == "uint8"
        match e:
            case Add():
                return b.add(x, y)
            case Sub():
                return b.sub(x, y)
            case Mul():
                return b.mul(x, y)
            case Div() | FloorDiv():
                return self.int_divide(x, y, unsigned, False)
            case FloorMod():
                return self.int_divide(x, y, unsigned, True)
            case Max():
                cmp = b.icmp_unsigned(">", x, y) if unsigned else b.icmp_signed(">", x, y)
                return b.select(cmp, x, y)
            case Min():
                cmp = b.icmp_unsigned("<", x, y) if unsigned else b.icmp_signed("<", x, y)
                return b.select(cmp, x, y)
        raise TypeError(f"cannot emit {e}")

    def int_divide(self, x: ir.Value, y: ir.Value, unsigned: bool, mod: bool) -> ir.Value:
        """NumPy's floor division / modulo; 0 for a zero divisor; MIN // -1 wraps. No traps."""
        b = self.b
        t = x.type
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        by_zero = b.icmp_unsigned("==", y, zero)
        if unsigned:
            safe = b.select(by_zero, one, y)
            r = b.urem(x, safe) if mod else b.udiv(x, safe)
            return b.select(by_zero, zero, r)
        minimum = ir.Constant(t, -(1 << (element(t).width - 1)))
        overflow = b.and_(b.icmp_signed("==", x, minimum),
                          b.icmp_signed("==", y, ir.Constant(t, -1)))
        safe = b.select(b.or_(by_zero, overflow), one, y)  # MIN / 1 = MIN, MIN % 1 = 0
        q, r = b.sdiv(x, safe), b.srem(x, safe)
        adjust = b.and_(b.icmp_signed("!=", r, zero),
                        b.icmp_signed("<", b.xor(r, safe), zero))  # signs differ
        if mod:
            out = b.select(adjust, b.add(r, safe), r)
        else:
            out = b.select(adjust, b.sub(q, one), q)
        return b.select(by_zero, zero, out)

    def _saturating_fptosi(self, v: ir.Value, st: ir.Type, wide: ir.Type) -> ir.Value:
        """``llvm.fptosi.sat`` written out: LLVM 20 scalarises the intrinsic on vectors (a
        compare and two branches per lane: a requantization epilogue ran 4x slower), while
        compares, selects and a plain ``fptosi`` of an in-range value vectorise::

            %big = fcmp oge %v, 2^(n-1)    %small = fcmp olt %v, -2^(n-1)    %nan = fcmp uno
            %r   = fptosi (select %big | %small | %nan, 0.0, %v)
            select %big, INT_MAX, (select %small, INT_MIN, %r)
        """
        b = self.b
        bits = element(wide).width
        big = b.fcmp_ordered(">=", v, ir.Constant(st, float(2 ** (bits - 1))))
        small = b.fcmp_ordered("<", v, ir.Constant(st, -float(2 ** (bits - 1))))
        out = b.or_(b.or_(big, small), b.fcmp_unordered("uno", v, v))
        r = b.fptosi(b.select(out, ir.Constant(st, 0.0), v), wide)
        r = b.select(small, ir.Constant(wide, -(1 << (bits - 1))), r)
        return b.select(big, ir.Constant(wide, (1 << (bits - 1)) - 1), r)

    def cast(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        b = self.b
        es, ed = value_type(src), value_type(dst)  # the elements' types
        st, dt = like(v, es), like(v, ed)  # the values' (vectors where v is one)
        if src == dst:
            return v
        if dst == "bool":
            if is_float(src):
                return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(st, 0))
        if is_float(dst):
            if is_float(src):
                return b.fpext(v, dt) if _fbits(es) < _fbits(ed) else b.fptrunc(v, dt)
            if src in ("uint8", "bool"):
                return b.uitofp(v, dt)
            return b.sitofp(v, dt)
        if is_float(src):  # saturating: NaN -> 0, no poison (C's cast is undefined there)
            wide = like(v, I64 if dst == "int64" else ir.IntType(32))
            if src in ("float32", "float64"):
                r = self._saturating_fptosi(v, st, wide)
            else:
                fn = M.intrinsic(self.module, f"llvm.fptosi.sat.{M.type_suffix(wide)}."
                                 f"{M.type_suffix(st)}", wide, [st])
                r = b.call(fn, [v])
            return r if wide == dt else b.trunc(r, dt)
        if es.width == ed.width:
            return v
        if es.width > ed.width:
            return b.trunc(v, dt)
        return b.zext(v, dt) if src in ("uint8", "bool") else b.sext(v, dt)

    def read(self, e: TensorRead, ctx: Ctx) -> ir.Value:
        t = e.tensor
        b = self.b
        idx = []
        ranges = {}
        shape = t.shape if self.sym is None else self.sym.shape(t)
        for i, extent, d in zip(e.indices, t.shape, shape):
            v = self.index(i, ctx)
            r = self.interval(i, ctx)
            if not isinstance(d, int):  # a size known at run time: clamped to it unless
                # the index is an axis of the same extent (the intervals are the sentinels')
                assert self.sym is not None
                if not (isinstance(i, IterVar) and self.sym.extents.get(i) == d):
                    zero = ir.Constant(I64, 0)
                    v = b.select(b.icmp_signed("<", v, zero), zero, v)
                    top = b.sub(self.dim(t, len(idx)), ir.Constant(I64, 1))
                    v = b.select(b.icmp_signed(">", v, top), top, v)
                idx.append(v)
                ranges[i] = clamped(r, extent)
                continue
            if r is None or r[0] < 0:
                v = b.select(b.icmp_signed("<", v, ir.Constant(I64, 0)), ir.Constant(I64, 0), v)
            if r is None or r[1] > extent - 1:
                top = ir.Constant(I64, max(extent - 1, 0))
                v = b.select(b.icmp_signed(">", v, top), top, v)
            idx.append(v)
            ranges[i] = clamped(r, extent)
        if t in self.inlined:
            assert t.body is not None
            env = dict(zip(t.axes, idx))
            rng = {a: clamped(self.interval(i, ctx), a.extent)
                   for a, i in zip(t.axes, e.indices)}
            return self.value(t.body, Ctx(env, rng))
        x = b.load(b.gep(self.ptr[t], [self.offset(t, idx)], inbounds=True))
        return b.icmp_unsigned("!=", x, ir.Constant(I8, 0)) if t.dtype == "bool" else x

    def reduce(self, red: Reduce, ctx: Ctx) -> ir.Value:
        """``acc = init; for r...: acc = combine(acc, source)``, the accumulator in a register.

        A reduction of at most ``UNROLLED_REDUCE`` steps of static extents is written out
        step by step (same order, same result) unless it calls an intrinsic (exp, log, ...:
        ``_calls_intrinsic``): its loops would be the innermost, of two or three
        iterations, which LLVM's loop vectoriser skips (and its unroller is off,
        jit.compile_ir), leaving a pooling window scalar; unrolled, the loop around it over
        the output's last axis is the innermost one and is vectorised (LeNet's 2x2 max pool
        over 64x20x24x24: 0.41 -> 0.13 ms on an AMD EPYC, Zen 5; jax.jit 0.23).
        """
        acc = self.alloca(memory_type(red.dtype), "acc")
        self._store_val(acc, self.value(red.init, ctx), red.dtype)
        ranges = {a: (0, a.extent - 1) for a in red.axes}

        def step(env: dict) -> None:
            src = self.value(red.source, ctx.child(env, ranges))
            cur = self._load_val(acc, red.dtype)
            self._store_val(acc, self.combine(red, cur, src), red.dtype)

        extents = [self.extent(ax) for ax in red.axes]
        if all(isinstance(e, ir.Constant) for e in extents) and \
                math.prod(ax.extent for ax in red.axes) <= UNROLLED_REDUCE and \
                not self._calls_intrinsic(red.source):
            for index in itertools.product(*(range(ax.extent) for ax in red.axes)):
                step({ax: ir.Constant(I64, i) for ax, i in zip(red.axes, index)})
            return self._load_val(acc, red.dtype)

        def over(k: int, env: dict) -> None:
            if k == len(red.axes):
                step(env)
                return
            ax = red.axes[k]
            with self.loop(ir.Constant(I64, 0), extents[k], ax.name) as r:
                over(k + 1, {**env, ax: r})

        over(0, {})
        return self._load_val(acc, red.dtype)

    def _calls_intrinsic(self, e: PrimExpr) -> bool:
        """Whether `e` (with the inlined tensors it reads) calls a math intrinsic: exp
        written out ten times (a 10-class softmax's sum) is ~300 instructions more for
        LLVM (11 ms of an MLP's gradients) and no faster."""
        return any(isinstance(n, Call) or (isinstance(n, TensorRead) and n.tensor in self.inlined
                                           and self._calls_intrinsic(n.tensor.body))
                   for n in post_order(e))


_ICMP = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}


def _fbits(t: ir.Type) -> int:
    return {"f16": 16, "f32": 32, "f64": 64}[M.type_suffix(t)]



__all__ = ["Ctx", "ExprEmitter", "Sizes", "element", "like", "memory_type", "strides",
           "value_type"]
