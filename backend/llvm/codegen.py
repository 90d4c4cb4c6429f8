"""LLVM IR for a scheduled primitive function: one function per materialised stage.

A stage computing ``T`` (shape ``(A, B, C)``, the first axis parallel) from
buffers ``X`` and ``Y`` becomes::

    define void @<prefix>_s0(float* noalias %T, float* noalias %X, float* noalias %Y,
                             i64 %begin, i64 %end) {
    outer.cond:  %o = phi i64 [%begin, ...]   ; for o in [begin, end): the parallel loop
      b.cond:    %b = phi i64 [0, ...]         ;   for b in [0, B)   constant trip counts
        c.cond:  %c = phi i64 [0, ...]         ;     for c in [0, C) the vectorised axis
                 ... the body, inlined producers substituted, reads clamped ...
                 store float %v, float* (T + (o*B + b)*C + c)
    }

and ``@<prefix>_entry(i8** %buffers)`` runs every stage in order, the parallel
ones on the native thread pool (``runtime.py``): a kernel is one ctypes call.

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
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from llvmlite import ir

from relaydsl.backend.llvm import intrinsics as M
from relaydsl.backend.llvm.intervals import Interval, Scope, clamped, interval, is_float
from relaydsl import settings
from relaydsl.backend.llvm.schedule import PARALLEL_WORK, ROW_BYTES, Schedule, Stage
from relaydsl.te.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, Call, Cast, Div, FloatImm, FloorDiv, FloorMod,
    IntImm, IterVar, Max, Min, Mul, Not, PrimExpr, Reduce, Select, Sub, TensorRead, Var,
    children, post_order,
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


def value_type(dtype: str) -> ir.Type:
    return _VALUE_TYPES[dtype]


def memory_type(dtype: str) -> ir.Type:
    return I8 if dtype == "bool" else _VALUE_TYPES[dtype]


def strides(shape: tuple[int, ...]) -> list[int]:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


@dataclass
class StageCode:
    """A stage's function: its symbol and the buffer slots it takes after the output."""

    stage: Stage
    out_slot: int
    read_slots: list[int]


def emit_module(module: ir.Module, sched: Schedule, prefix: str) -> tuple[list[StageCode], str]:
    """Adds every stage of ``sched`` and ``@<prefix>_entry`` to ``module``.

    The entry takes the kernel's buffer table and runs the stages in order; a parallel
    stage goes through the native thread pool (runtime.py) with a task that unpacks the
    table::

        define void @<prefix>_entry(ptr %buffers) {
          call void @<stage>(ptr %out, ptr %in0, ..., i64 0, i64 <extent>)        ; serial
          call void @relaydsl_parallel_for(ptr @<stage>.task, ptr %buffers, i64 <extent>)
        }
        define internal void @<stage>.task(ptr %buffers, i64 %begin, i64 %end)  ; parallel
    """
    slot = {t: i for i, t in enumerate(sched.buffers)}
    sym = sched.symbolic
    codes: list[StageCode] = []
    for stage in sched.stages:
        if stage.template is not None:
            info = stage.template.emit(module, stage.symbol)
            stage.extent = int(info.parallel_extent)
            stage.work = float(info.flops)
            stage.parallel = stage.work >= PARALLEL_WORK and stage.extent >= 2
        else:
            _StageEmitter(module, stage, sched).emit()
        reads = [slot[r] for r in stage.reads]
        codes.append(StageCode(stage, slot[stage.tensor],
                               reads if sym is None else [*reads, slot[sym.sizes]]))
    entry = f"{prefix}_entry"
    fn = ir.Function(module, ir.FunctionType(VOID, [TABLE]), entry)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sizes = None if sym is None else Sizes(b, b.bitcast(b.load(b.gep(
        fn.args[0], [ir.Constant(I64, slot[sym.sizes])], inbounds=True)), I64.as_pointer()))
    chained: set[int] = set()
    for i, code in enumerate(codes):
        if i in chained or math.prod(code.stage.tensor.shape) == 0:
            continue
        images = _images(code, codes[i + 1]) if i + 1 < len(codes) and sym is None else None
        if images is not None:  # the template and its epilogue, image by image
            chained.add(i + 1)
            task = _chain(module, code, codes[i + 1], images)
            if code.stage.parallel or codes[i + 1].stage.parallel:
                b.call(_parallel_for(module), [task, b.bitcast(fn.args[0], I8P),
                                               ir.Constant(I64, images)])
            else:
                b.call(task, [b.bitcast(fn.args[0], I8P), ir.Constant(I64, 0),
                              ir.Constant(I64, images)])
            continue
        extent: ir.Value = ir.Constant(I64, code.stage.extent)
        if sym is not None and sizes is not None:  # the leading axis, its size read now
            t = code.stage.tensor
            for d in sym.shape(t)[:code.stage.outer]:  # (outer is 0 or 1)
                extent = sizes.dim(d)
            if code.stage.parallel_at_run_time:
                _parallel_if_worth_it(b, module, code, fn.args[0], extent, sizes, sym)
                continue
        if code.stage.parallel:
            b.call(_parallel_for(module), [_task(module, code), b.bitcast(fn.args[0], I8P),
                                           extent])
        else:
            b.call(module.globals[code.stage.symbol],
                   [*_stage_args(b, module, code, fn.args[0]), ir.Constant(I64, 0), extent])
    b.ret_void()
    return codes, entry


def _images(template: StageCode, epilogue: StageCode) -> int | None:
    """The number of images a conv2d template stage and its epilogue (schedule.py) run
    together, image by image, or None. The template's units are image-major (gemm.py's
    ``walk_units``: an image's units are consecutive), so are the epilogue's outer loop's
    (its leading axes, the first the image); one image's result (16 channels of 28x28:
    50 KB of int32) stays in cache between the two, where the whole batch's (5 MB) would
    go to memory and back. Not below 4 images per thread (the template's own units would
    parallelise better)."""
    t, e = template.stage, epilogue.stage
    conv = getattr(t.template, "conv", None)
    images = getattr(conv, "batch", None)
    if not e.epilogue or images is None or e.outer < 1 or t.extent % images \
            or e.extent % images or (t.parallel and images < 4 * settings.num_threads()):
        return None
    return images


def _chain(module: ir.Module, template: StageCode, epilogue: StageCode, images: int
           ) -> ir.Function:
    """``void @<template>.chain(ptr %table, i64 %begin, i64 %end)``: for each image of
    [begin, end), the template's units of that image, then its epilogue's::

        for.body:
          call void @<template>(..., i64 %i * U, i64 (%i + 1) * U)
          call void @<epilogue>(..., i64 %i * R, i64 (%i + 1) * R)
    """
    units, rows = template.stage.extent // images, epilogue.stage.extent // images
    fn = ir.Function(module, ir.FunctionType(VOID, [I8P, I64, I64]),
                     f"{template.stage.symbol}.chain")
    fn.linkage = "internal"
    entry, body, done = (fn.append_basic_block(n) for n in ("entry", "for.body", "for.end"))
    b = ir.IRBuilder(entry)
    table = b.bitcast(fn.args[0], TABLE)
    args = [_stage_args(b, module, c, table) for c in (template, epilogue)]
    begin, end = fn.args[1], fn.args[2]
    b.cbranch(b.icmp_signed("<", begin, end), body, done)
    b.position_at_end(body)
    i = b.phi(I64, "image")
    i.add_incoming(begin, entry)
    nxt = b.add(i, ir.Constant(I64, 1), "image.next")
    for code, each, stage_args in zip((template, epilogue), (units, rows), args):
        per = ir.Constant(I64, each)
        b.call(module.globals[code.stage.symbol], [*stage_args, b.mul(i, per), b.mul(nxt, per)])
    i.add_incoming(nxt, body)
    b.cbranch(b.icmp_signed("<", nxt, end), body, done)
    b.position_at_end(done)
    b.ret_void()
    return fn


I8P = I8.as_pointer()
TABLE = I8P.as_pointer()  # the kernel's buffers: one pointer per slot


def _parallel_if_worth_it(b: ir.IRBuilder, module: ir.Module, code: StageCode,
                          table: ir.Value, extent: ir.Value, sizes: "Sizes", sym: "Symbolic"
                          ) -> None:
    """A stage of sizes known at run time: on the thread pool where its work, counted from
    those sizes as the scheduler counts it, reaches PARALLEL_WORK, else serially."""
    work: ir.Value = ir.Constant(I64, code.stage.per_point)
    for d in [*sym.shape(code.stage.tensor),
              *[sym.extents.get(a, a.extent) for a in code.stage.reduce_axes]]:
        work = b.mul(work, sizes.dim(d))
    worth = b.and_(b.icmp_signed(">=", work, ir.Constant(I64, PARALLEL_WORK)),
                   b.icmp_signed(">=", extent, ir.Constant(I64, 2)))
    with b.if_else(worth) as (parallel, serial):
        with parallel:
            b.call(_parallel_for(module), [_task(module, code), b.bitcast(table, I8P), extent])
        with serial:
            b.call(module.globals[code.stage.symbol],
                   [*_stage_args(b, module, code, table), ir.Constant(I64, 0), extent])


def _stage_args(b: ir.IRBuilder, module: ir.Module, code: StageCode, table: ir.Value
                ) -> list[ir.Value]:
    """The stage's buffer pointers, loaded from the table."""
    callee = module.globals[code.stage.symbol]
    args = []
    for s, param in zip([code.out_slot, *code.read_slots], callee.args):
        raw = b.load(b.gep(table, [ir.Constant(I64, s)], inbounds=True))
        args.append(b.bitcast(raw, param.type))
    return args


def _task(module: ir.Module, code: StageCode) -> ir.Function:
    """``void @<stage>.task(ptr %table, i64 %begin, i64 %end)``: the stage on a chunk."""
    task = ir.Function(module, ir.FunctionType(VOID, [I8P, I64, I64]), f"{code.stage.symbol}.task")
    task.linkage = "internal"
    b = ir.IRBuilder(task.append_basic_block("entry"))
    table = b.bitcast(task.args[0], TABLE)
    b.call(module.globals[code.stage.symbol],
           [*_stage_args(b, module, code, table), task.args[1], task.args[2]])
    b.ret_void()
    return task


def _parallel_for(module: ir.Module) -> ir.Function:
    """The runtime's ``void @relaydsl_parallel_for(ptr task, ptr ctx, i64 extent)``."""
    task_type = ir.FunctionType(VOID, [I8P, I64, I64]).as_pointer()
    return M.intrinsic(module, "relaydsl_parallel_for", VOID, [task_type, I8P, I64])


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


class _Ctx(Scope):
    """Where an expression is emitted: values and ranges of its axes/variables, and a memo."""

    def __init__(self, env: dict[PrimExpr, ir.Value], ranges: dict[PrimExpr, Interval],
                 parent: "_Ctx | None" = None, fast: bool = False):
        super().__init__(ranges, parent)
        self.env, self.fast = env, fast
        self.memo: dict[tuple[PrimExpr, str], ir.Value] = {}

    def child(self, env: dict[PrimExpr, ir.Value], ranges: dict[PrimExpr, Interval]) -> "_Ctx":
        return _Ctx({**self.env, **env}, {**self.ranges, **ranges}, self, self.fast)

    def lookup(self, key: tuple[PrimExpr, str]) -> ir.Value | None:
        ctx: _Ctx | None = self
        while ctx is not None:
            v = ctx.memo.get(key)
            if v is not None:
                return v
            ctx = ctx.parent
        return None


class _StageEmitter:
    def __init__(self, module: ir.Module, stage: Stage, sched: Schedule):
        self.module, self.stage, self.inlined = module, stage, sched.inlined
        self.sym = sched.symbolic
        t = stage.tensor
        tensors = [t, *stage.reads]
        ptrs = [memory_type(x.dtype).as_pointer() for x in tensors]
        if self.sym is not None:  # then the sizes
            ptrs.append(I64.as_pointer())
        self.fn = ir.Function(module, ir.FunctionType(VOID, [*ptrs, I64, I64]), stage.symbol)
        self.fn.attributes.add("noinline")  # the entry calls it; one copy of the code
        self.fn.attributes.add("nounwind")
        for arg, x in zip(self.fn.args, tensors):
            arg.add_attribute("noalias")
            arg.name = x.name
        self.fn.args[-2].name, self.fn.args[-1].name = "begin", "end"
        self.ptr = dict(zip(tensors, self.fn.args))
        entry = self.fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        self.b = ir.IRBuilder(self.fn.append_basic_block("start"))
        self._pure: dict[PrimExpr, bool] = {}
        self.sizes = None if self.sym is None else \
            Sizes(self.alloca_builder, self.fn.args[len(tensors)])
        self._strides: dict[Tensor, list[ir.Value]] = {}
        # trailing axes run as one loop (_nest): id((row, column)) -> (that loop's index,
        # the row length, the pair kept alive so the ids stay theirs)
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
        cond = self.fn.append_basic_block(f"{name}.cond")
        body = self.fn.append_basic_block(f"{name}.body")
        end = self.fn.append_basic_block(f"{name}.end")
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

    def emit(self) -> None:
        stage, t, b = self.stage, self.stage.tensor, self.b
        body = t.body
        assert body is not None
        axes, shape = t.axes, t.shape
        outer = stage.outer
        with self.loop(self.fn.args[-2], self.fn.args[-1], "outer") as o:
            env: dict[PrimExpr, ir.Value] = {}
            rem = o
            for d in range(outer - 1, -1, -1):  # unravel o over the leading axes
                if d == 0:
                    env[axes[d]] = rem
                else:
                    ext = self.dim(t, d)
                    env[axes[d]] = b.urem(rem, ext)
                    rem = b.udiv(rem, ext)
            ranges: dict[PrimExpr, Interval] = {a: (0, a.extent - 1) for a in axes}
            if stage.row_reduce and self.sym is not None and \
                    not isinstance(self.sym.shape(t)[-1], int):
                # rows up to ROW_BYTES (its size known only now): kept in a stack buffer
                row = self.dim(t, t.ndim - 1)
                fits = b.icmp_signed("<=", row, ir.Constant(I64, ROW_BYTES // 8))
                with b.if_else(fits) as (rows, columns):
                    with rows:
                        self._nest_rows(axes, shape, outer, dict(env), ranges, body)
                    with columns:
                        self._nest(axes, shape, outer, dict(env), ranges, body)
            elif stage.row_reduce:
                self._nest_rows(axes, shape, outer, env, ranges, body)
            else:
                self._nest(axes, shape, outer, env, ranges, body)
        b.ret_void()
        self.alloca_builder.branch(self.fn.blocks[1])

    def _nest(self, axes, shape, d, env, ranges, body) -> None:
        if d == len(axes):
            ctx = _Ctx(dict(env), ranges)
            self.store(axes, env, self.value(body, ctx))
            return
        if d == len(axes) - 2 and self._merges(shape, body):
            # rows shorter than a few vectors and not a whole number of them (28 of a
            # 28x28 image: 16 + 8 lanes + 4 scalar iterations, a requantisation epilogue
            # at half speed) run as one loop over rows x columns, offsets j*stride where
            # a read's two axes are this pair (offset), row = j / W and column = j % W
            # elsewhere
            rows, cols = shape[-2], shape[-1]
            with self.loop(ir.Constant(I64, 0), ir.Constant(I64, rows * cols),
                           f"{axes[d].name}_{axes[d + 1].name}") as j:
                pair = (self.b.udiv(j, ir.Constant(I64, cols)),
                        self.b.urem(j, ir.Constant(I64, cols)))
                self._merged[(id(pair[0]), id(pair[1]))] = (j, cols, pair)
                env[axes[d]], env[axes[d + 1]] = pair
                self._nest(axes, shape, len(axes), env, ranges, body)
            return
        with self.loop(ir.Constant(I64, 0), self.dim(self.stage.tensor, d), axes[d].name) as i:
            env[axes[d]] = i
            self._nest(axes, shape, d + 1, env, ranges, body)

    def _merges(self, shape: tuple[int, ...], body: PrimExpr) -> bool:
        """Whether _nest runs the last two axes as one loop: static, a row of fewer than 64
        elements and not a multiple of 16, no reduction."""
        cols = shape[-1]
        return self.sym is None and isinstance(cols, int) and 1 < cols < 64 and cols % 16 != 0 \
            and not any(isinstance(n, Reduce) for n in post_order(body))

    def store(self, axes, env, v: ir.Value) -> None:
        t = self.stage.tensor
        off = self.offset(t, [env[a] for a in axes])
        if t.dtype == "bool":
            v = self.b.zext(v, I8)
        self.b.store(v, self.b.gep(self.ptr[t], [off], inbounds=True))

    def _nest_rows(self, axes, shape, d, env, ranges, body) -> None:
        """Row-wise reduction: ``row[:] = init; for r: row[j] = f(row[j], src); out = epi(row)``."""
        t = self.stage.tensor
        if d < len(axes) - 1:
            with self.loop(ir.Constant(I64, 0), self.dim(t, d), axes[d].name) as i:
                env[axes[d]] = i
                self._nest_rows(axes, shape, d + 1, env, ranges, body)
            return
        b = self.b
        (red,) = [n for n in post_order(body) if isinstance(n, Reduce)]
        last = axes[-1]
        n = self.dim(t, len(axes) - 1)
        acc_t = value_type(red.dtype)
        # a size known only at run time gets the largest row emit() lets through
        room = shape[-1] if isinstance(n, ir.Constant) else ROW_BYTES // 8
        row = self.alloca(ir.ArrayType(memory_type(red.dtype), room), "row")

        def slot(j: ir.Value) -> ir.Value:
            return b.gep(row, [ir.Constant(I64, 0), j], inbounds=True)

        with self.loop(ir.Constant(I64, 0), n, "init") as j:
            ctx = _Ctx({**env, last: j}, ranges)
            self._store_val(slot(j), self.value(red.init, ctx), red.dtype)

        def over(k: int, renv: dict) -> None:
            if k == len(red.axes):
                with self.loop(ir.Constant(I64, 0), n, last.name) as j:
                    rranges = {**ranges, **{a: (0, a.extent - 1) for a in red.axes}}
                    ctx = _Ctx({**env, **renv, last: j}, rranges)
                    src = self.value(red.source, ctx)
                    acc = self._load_val(slot(j), red.dtype)
                    self._store_val(slot(j), self.combine(red, acc, src), red.dtype)
                return
            ax = red.axes[k]
            with self.loop(ir.Constant(I64, 0), self.extent(ax), ax.name) as r:
                over(k + 1, {**renv, ax: r})

        over(0, {})
        del acc_t
        with self.loop(ir.Constant(I64, 0), n, "epilogue") as j:
            ctx = _Ctx({**env, last: j}, ranges)
            ctx.memo[(red, "v")] = self._load_val(slot(j), red.dtype)
            self.store(axes, {**env, last: j}, self.value(body, ctx))

    def _store_val(self, ptr: ir.Value, v: ir.Value, dtype: str) -> None:
        self.b.store(self.b.zext(v, I8) if dtype == "bool" else v, ptr)

    def _load_val(self, ptr: ir.Value, dtype: str) -> ir.Value:
        v = self.b.load(ptr)
        return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dtype == "bool" else v

    def combine(self, red: Reduce, acc: ir.Value, src: ir.Value) -> ir.Value:
        ctx = _Ctx({red.lhs: acc, red.rhs: src}, {}, fast=True)
        return self.value(red.combined, ctx)

    def interval(self, e: PrimExpr, ctx: _Ctx) -> Interval:
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

    def index(self, e: PrimExpr, ctx: _Ctx) -> ir.Value:
        """``e`` (an integer expression) as i64."""
        key = (e, "i")
        v = ctx.lookup(key)
        if v is None:
            v = self._index(e, ctx)
            ctx.memo[key] = v
        return v

    def _index(self, e: PrimExpr, ctx: _Ctx) -> ir.Value:
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
    def value(self, e: PrimExpr, ctx: _Ctx) -> ir.Value:
        key = (e, "v")
        v = ctx.lookup(key)
        if v is None:
            v = self._value(e, ctx)
            ctx.memo[key] = v
        return v

    def _value(self, e: PrimExpr, ctx: _Ctx) -> ir.Value:
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
                return b.xor(self.value(a, ctx), ir.Constant(I1, 1))
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

    def binary(self, e: BinaryOp, ctx: _Ctx) -> ir.Value:
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
        minimum = ir.Constant(t, -(1 << (t.width - 1)))
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

    def _saturating_fptosi(self, v: ir.Value, st: ir.Type, wide: ir.IntType) -> ir.Value:
        """``llvm.fptosi.sat`` written out: LLVM 20 scalarises the intrinsic on vectors (a
        compare and two branches per lane: a requantization epilogue ran 4x slower), while
        compares, selects and a plain ``fptosi`` of an in-range value vectorise::

            %big = fcmp oge %v, 2^(n-1)    %small = fcmp olt %v, -2^(n-1)    %nan = fcmp uno
            %r   = fptosi (select %big | %small | %nan, 0.0, %v)
            select %big, INT_MAX, (select %small, INT_MIN, %r)
        """
        b = self.b
        bits = wide.width
        big = b.fcmp_ordered(">=", v, ir.Constant(st, float(2 ** (bits - 1))))
        small = b.fcmp_ordered("<", v, ir.Constant(st, -float(2 ** (bits - 1))))
        out = b.or_(b.or_(big, small), b.fcmp_unordered("uno", v, v))
        r = b.fptosi(b.select(out, ir.Constant(st, 0.0), v), wide)
        r = b.select(small, ir.Constant(wide, -(1 << (bits - 1))), r)
        return b.select(big, ir.Constant(wide, (1 << (bits - 1)) - 1), r)

    def cast(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        b = self.b
        st, dt = value_type(src), value_type(dst)
        if src == dst:
            return v
        if dst == "bool":
            if is_float(src):
                return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(st, 0))
        if is_float(dst):
            if is_float(src):
                return b.fpext(v, dt) if _fbits(st) < _fbits(dt) else b.fptrunc(v, dt)
            if src in ("uint8", "bool"):
                return b.uitofp(v, dt)
            return b.sitofp(v, dt)
        if is_float(src):  # saturating: NaN -> 0, no poison (C's cast is undefined there)
            wide = I64 if dst == "int64" else ir.IntType(32)
            if src in ("float32", "float64"):
                r = self._saturating_fptosi(v, st, wide)
            else:
                fn = M.intrinsic(self.module, f"llvm.fptosi.sat.{M.type_suffix(wide)}."
                                 f"{M.type_suffix(st)}", wide, [st])
                r = b.call(fn, [v])
            return r if wide == dt else b.trunc(r, dt)
        if st.width == dt.width:
            return v
        if st.width > dt.width:
            return b.trunc(v, dt)
        return b.zext(v, dt) if src in ("uint8", "bool") else b.sext(v, dt)

    def read(self, e: TensorRead, ctx: _Ctx) -> ir.Value:
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
            return self.value(t.body, _Ctx(env, rng))
        x = b.load(b.gep(self.ptr[t], [self.offset(t, idx)], inbounds=True))
        return b.icmp_unsigned("!=", x, ir.Constant(I8, 0)) if t.dtype == "bool" else x

    def reduce(self, red: Reduce, ctx: _Ctx) -> ir.Value:
        """``acc = init; for r...: acc = combine(acc, source)``, the accumulator in a register."""
        acc = self.alloca(memory_type(red.dtype), "acc")
        self._store_val(acc, self.value(red.init, ctx), red.dtype)

        def over(k: int, env: dict) -> None:
            if k == len(red.axes):
                inner = ctx.child(env, {a: (0, a.extent - 1) for a in red.axes})
                src = self.value(red.source, inner)
                cur = self._load_val(acc, red.dtype)
                self._store_val(acc, self.combine(red, cur, src), red.dtype)
                return
            ax = red.axes[k]
            with self.loop(ir.Constant(I64, 0), self.extent(ax), ax.name) as r:
                over(k + 1, {**env, ax: r})

        over(0, {})
        return self._load_val(acc, red.dtype)


_ICMP = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}


def _fbits(t: ir.Type) -> int:
    return {"f16": 16, "f32": 32, "f64": 64}[M.type_suffix(t)]


__all__ = ["StageCode", "emit_module", "memory_type", "value_type", "children", "Tensor"]
