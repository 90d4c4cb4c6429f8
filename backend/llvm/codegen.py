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
ones on the native thread pool (``runtime.py``): a kernel is one ctypes call. Only the
entry is visible outside the module: each stage is internal (and noinline), so LLVM
specialises it to its callers (the constant range of a serial stage propagated and its
arguments dropped, a faster calling convention) and skips its public symbol: a fifth less
LLVM time for the MLP's kernels.

Expressions (reads, arithmetic, casts) are exprgen.py's; this file places them in loops.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from relaydsl import settings
from relaydsl.backend.llvm.exprgen import (
    I8, I64, VOID, Ctx, ExprEmitter, Sizes, memory_type, strides, value_type,
)
from relaydsl.backend.llvm import intrinsics as M
from relaydsl.backend.llvm.intervals import Interval
from relaydsl.backend.llvm.schedule import PARALLEL_WORK, ROW_BYTES, Schedule, Stage
from relaydsl.te.expr import PrimExpr, Reduce, children, post_order
from relaydsl.te.tensor import Tensor

if TYPE_CHECKING:
    from relaydsl.backend.llvm.generic import Symbolic


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
    for code in codes:
        module.globals[code.stage.symbol].linkage = "internal"
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




class _StageEmitter(ExprEmitter):
    """A stage's function: its loop nest around the body's expressions."""

    def __init__(self, module: ir.Module, stage: Stage, sched: Schedule):
        self.stage = stage
        sym = sched.symbolic
        t = stage.tensor
        tensors = [t, *stage.reads]
        ptrs = [memory_type(x.dtype).as_pointer() for x in tensors]
        if sym is not None:  # then the sizes
            ptrs.append(I64.as_pointer())
        self.fn = ir.Function(module, ir.FunctionType(VOID, [*ptrs, I64, I64]), stage.symbol)
        self.fn.attributes.add("noinline")  # the entry calls it; one copy of the code
        self.fn.attributes.add("nounwind")
        for arg, x in zip(self.fn.args, tensors):
            arg.add_attribute("noalias")
            arg.name = x.name
        self.fn.args[-2].name, self.fn.args[-1].name = "begin", "end"
        alloca_builder = ir.IRBuilder(self.fn.append_basic_block("entry"))
        sizes = None if sym is None else Sizes(alloca_builder, self.fn.args[len(tensors)])
        super().__init__(module, ir.IRBuilder(self.fn.append_basic_block("start")),
                         alloca_builder, dict(zip(tensors, self.fn.args)), sched.inlined, sym,
                         sizes)

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
            ctx = Ctx(dict(env), ranges)
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
            ctx = Ctx({**env, last: j}, ranges)
            self._store_val(slot(j), self.value(red.init, ctx), red.dtype)

        def over(k: int, renv: dict) -> None:
            if k == len(red.axes):
                with self.loop(ir.Constant(I64, 0), n, last.name) as j:
                    rranges = {**ranges, **{a: (0, a.extent - 1) for a in red.axes}}
                    ctx = Ctx({**env, **renv, last: j}, rranges)
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
            ctx = Ctx({**env, last: j}, ranges)
            ctx.memo[(red, "v")] = self._load_val(slot(j), red.dtype)
            self.store(axes, {**env, last: j}, self.value(body, ctx))


__all__ = ["StageCode", "emit_module", "memory_type", "strides", "value_type", "children", "Tensor"]
