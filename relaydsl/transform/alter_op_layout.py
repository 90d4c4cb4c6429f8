"""AlterOpLayout: conv2d in the blocked NCHW{c}c layout, layout_transform ops around it; a
dense of a small batch computed transposed (``DENSE_ROWS``), so the GEMM reads its weight in
place instead of packing it at every call.

§4.4 of the Relay paper: a CPU convolution runs on channels blocked into vector-wide groups
(NCHW32c data, OIHW32i32o weight), its inner loop vector FMAs over an output block. The
pass rewrites each NCHW conv2d into ``conv2d_nchwc`` with ``layout_transform`` calls taking
its data and weight into the blocked layouts and its result back to NCHW. Elementwise and
broadcast ops on a blocked result (relu, a per-channel bias or scale, an add of two blocked
results) run in the blocked layout too, their per-channel operands transformed; and a
transform followed by its inverse is dropped. A chain of convolutions then has one
transform in and one out; the weight transforms of constant weights are folded by
FoldConstant, which runs after this pass.

Before and after (block 32, 64 channels)::

    %0 = conv2d(%x, %w1, padding=1);           %x32 = layout_transform(%x, "NCHW", "NCHW32c");
    %1 = relu(add(%0, %b));                       %0 = conv2d_nchwc(%x32, <OIHW32i32o w1>, ...);
    conv2d(%1, %w2, padding=1)                 %1 = relu(add(%0, <b as (2, 1, 1, 32)>));
                                                  layout_transform(conv2d_nchwc(%1, <w2>, ...),
                                                                   "NCHW32c", "NCHW")

A convolution is rewritten where it gets a fast kernel: groups=1 on NCHW data, dilation 1, no
out_dtype change, and an out-channel block (the largest power of two up to ``block`` dividing
the out-channels) of at least ``MIN_BLOCK``; and where the transforms it brings cost less
than that kernel saves (``_AlterLayout._pays``). The llvm backend runs such a conv2d_nchwc as
direct convolution on its GEMM micro-kernel, reading data and weight in place with no
packing (backend/llvm/templates/conv2d_nchwc.py); other blocks would run as a generic loop
nest, slower than the NCHW conv2d (an implicit GEMM whose B operand is gathered from the
image). The in-channel block is the producer's where the data is blocked already, else all
the channels up to ``block`` (a first layer's 3: NCHW3c), else the out-channel rule's.

On four 3x3 64-channel 56x56 convolutions at batch 1 (benchmarks/alter_op_layout.py, an
Intel Xeon, rocketlake, 2 cores) the NCHW32c chain takes 3.06 ms against 3.68 ms (302
against 252 GFLOP/s, transforms in and out included); one such conv2d_nchwc alone reaches
340 GFLOP/s, 72% of the measured FMA peak. On whole networks at batch 1, weights bound as
constants, opt_level 3 with the pass against without (same machine, medians): ResNet-18 at
224x224 0.87x the time (17.4 against 19.9 ms), Nature-DQN 0.94x, VGG-16 0.96x (its time is
mostly the 400 MB of dense weights), MobileNet v1 1.0x (only its stem is rewritten: its
1x1 convolutions read NCHW data from depthwise ones); the 32x32 ResNet-18 of
benchmarks/run.py, whose weights are arguments, 1.0x. Before ``_pays`` MobileNet took 1.22x
and that ResNet-18 1.25x. The pass runs at opt_level 3 on the llvm target (pipeline.py).

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(1, 32, 8, 8), float32], %w: Tensor[(32, 32, 3, 3), float32]) {
...   relu(conv2d(conv2d(%x, %w, padding=1), %w, padding=1))
... }'''))
>>> op_calls(alter_op_layout(mod)["main"]).count("conv2d_nchwc")  # too small to pay
0
>>> calls = op_calls(alter_op_layout(mod, everywhere=True)["main"])
>>> calls.count("layout_transform"), calls.count("conv2d_nchwc"), "conv2d" in calls
(4, 2, False)
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.ir.expr import Call, Constant, Expr, Function, Let, Op, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprMutator, post_order
from relaydsl.op.nn.conv import conv2d, conv2d_nchwc, nchwc_layouts
from relaydsl.op.nn.linear import bias_add, dense, matmul
from relaydsl.op.registry import OpPattern, ops
from relaydsl.op.transform.layout import layout_transform
from relaydsl.op.transform.shape import transpose
from relaydsl.transform._util import (
    calls_any, is_primitive, rewrite_functions, with_parameter_types,
)
from relaydsl.transform.pass_infra import Pass

BLOCK = 32
"""The widest channel block: the llvm GEMM micro-tile's NR with AVX-512 (two vectors of 16
float32), its micro-kernel's B panel when conv2d_nchwc reads the weight in place."""

MIN_PIXELS = 1024
"""The output pixels (batch x height x width) from which a convolution whose weight is not a
constant is rewritten: its weight's layout transform then costs a few percent of it."""

MIN_BLOCK = 16
"""The narrowest out-channel block a convolution is rewritten for: a whole AVX-512 vector
(two AVX2 ones)."""

DENSE_ROWS = (16, 64)
"""The batches (data rows) for which a float32 dense of at least ``DENSE_UNITS`` units is
computed transposed, ``transpose(matmul(weight, transpose(data)))``: the llvm GEMM then
reads the weight in place, by rows, as its micro-kernel's A (no more than two column tiles
of the batch: gemm.py's ``reads_a_in_place``), and packs only the batch's columns, where the
dense packs the whole weight at every call. Measured with its bias and relu (AMD EPYC,
Zen 5, 2 threads, microseconds, dense / transposed): 512 -> 512 units at batch 1 27/42,
8 44/43, 16 68/43, 32 86/63, 64 119/107, 96 149/158, 128 193/214; 784 -> 512 at 64
176/150; 800 -> 500 at 32 117/79; 2048 -> 2048 at 64 1787/1284; 256 -> 128 at 64 30/29;
the MLP of benchmarks/run.py (batch 64) 280/248, jax.jit 260."""

DENSE_UNITS = 128
"""The fewest units (weight rows) a dense is computed transposed for: the weight's rows feed
the GEMM's 14-row tiles (with fewer, a 10-class output layer, the dense's packing is cheap)."""

_LAYOUT_BOUND = ("axis", "shape")
"""Attributes naming an axis or the result's shape (bias_add, prelu, broadcast_to, full): an
op with one means them in NCHW, so it is not moved into a blocked layout as it is."""


@dataclass(frozen=True)
class AlterOpLayout(Pass, opt_level=3,
                    description="conv2d in NCHW32c blocks, a small batch's dense transposed, "
                                "where that is faster"):
    """The NCHW conv2d calls in blocked layouts where that is faster (see the module doc),
    or with `everywhere` every groups=1 NCHW conv2d, whatever its blocks; channel blocks are
    powers of two up to `block`. A float32 dense of a batch within ``DENSE_ROWS`` and at
    least ``DENSE_UNITS`` units becomes ``transpose(matmul(weight, transpose(data)))``.
    FoldConstant, after it in the pipeline, folds the transforms of constant weights and
    biases."""

    block: int = BLOCK
    everywhere: bool = False

    def transform(self, mod: IRModule) -> IRModule:
        def alter(fn: Function) -> Expr:
            if is_primitive(fn) or not calls_any(fn, (conv2d, dense)):
                return fn
            new = _AlterLayout(self.block, self.everywhere).visit(fn)
            assert isinstance(new, Function)
            # a weight whose shape conv2d's relation inferred is now read by layout_transform
            return fn if new is fn else with_parameter_types(new)

        return rewrite_functions(mod, alter)


def alter_op_layout(mod: IRModule, block: int = BLOCK, everywhere: bool = False) -> IRModule:
    """``AlterOpLayout(block, everywhere)(mod)``."""
    return AlterOpLayout(block, everywhere)(mod)


def op_calls(e: Expr) -> list[str]:
    """The names of the ops `e` calls, in post order (one per call node)."""
    names: list[str] = []
    post_order(e, lambda n: names.append(n.op.name)
               if isinstance(n, Call) and isinstance(n.op, Op) else None)
    return names


def dense_runs_transposed(data: TensorType, weight: TensorType, out_dtype: str | None
                          ) -> bool:
    """Whether the pass computes ``dense(data, weight)`` transposed (``DENSE_ROWS``): float32,
    static 2-D shapes, a batch within ``DENSE_ROWS``, at least ``DENSE_UNITS`` units."""
    if not (data.is_static and weight.is_static and data.ndim == 2 and weight.ndim == 2):
        return False
    (rows, _), (units, _) = data.concrete_shape(), weight.concrete_shape()
    return str(data.dtype) == "float32" and str(weight.dtype) == "float32" and \
        out_dtype in (None, "float32") and DENSE_ROWS[0] <= rows <= DENSE_ROWS[1] and \
        units >= DENSE_UNITS


def transposed_dense_matmul(data: TensorType, weight: TensorType
                            ) -> tuple[TensorType, TensorType, TensorType]:
    """The types of the matmul a transposed dense computes (``_AlterLayout._dense``):
    ``matmul(weight, transpose(data))``, its operands' and its result's."""
    (rows, k), (units, _) = data.concrete_shape(), weight.concrete_shape()
    return (weight, TensorType((k, rows), data.dtype),
            TensorType((units, rows), weight.dtype))


def channel_block(channels: int, block: int) -> int:
    """The largest power of two up to `block` dividing `channels`."""
    b = 1
    while b * 2 <= block and channels % (b * 2) == 0:
        b *= 2
    return b


def _unblock(e: Expr, factor: int) -> Call:
    return layout_transform(e, src_layout=f"NCHW{factor}c", dst_layout="NCHW")


def _static_shape(e: Expr) -> tuple[int, ...] | None:
    t = e.checked_type if e.has_type else None
    return t.concrete_shape() if isinstance(t, TensorType) and t.is_static else None


class _AlterLayout(ExprMutator):
    def __init__(self, block: int, everywhere: bool) -> None:
        super().__init__()
        self.block, self.everywhere = block, everywhere
        self.let_values: dict[Var, Expr] = {}  # let-bound variables' (original) values

    def visit_let(self, let: Let) -> Expr:
        # A consumer of a let-bound blocked result sees through the variable (`resolve`).
        e: Expr = let
        while isinstance(e, Let):
            self.let_values[e.var] = e.value
            e = e.body
        return super().visit_let(let)

    def resolve(self, e: Expr) -> Expr:
        """The rewritten value of `e` (rewritten), through let-bound variables."""
        while isinstance(e, Var) and e in self.let_values:
            e = self.visit(self.let_values[e])  # memoised: visited before its uses
        return e

    def blocked(self, e: Expr) -> tuple[Expr, int] | None:
        """(x, f) where `e` (a rewritten expression) is x, of layout NCHW{f}c, unblocked."""
        e = self.resolve(e)
        if isinstance(e, Call) and e.op == layout_transform.op and \
                e.attrs.dst_layout == "NCHW" and e.attrs.src_layout.startswith("NCHW") and \
                e.attrs.src_layout.endswith("c") and e.attrs.src_layout[4:-1].isdigit():
            return e.args[0], int(e.attrs.src_layout[4:-1])
        return None

    def to_blocked(self, e: Expr, factor: int) -> Expr:
        """NCHW `e` in NCHW{factor}c: the blocked value it unblocks, else a transform."""
        found = self.blocked(e)
        if found is not None and found[1] == factor:
            return found[0]
        return layout_transform(e, src_layout="NCHW", dst_layout=f"NCHW{factor}c")

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if not isinstance(new, Call) or not isinstance(new.op, Op):
            return new
        if new.op == layout_transform.op:
            return self._cancel(new)
        if new.op == conv2d.op:
            return self._conv2d(call, new)
        if new.op == dense.op:
            return self._dense(call, new)
        if new.op == bias_add.op:
            return self._bias_add(call, new)
        if new.op.definition.pattern <= OpPattern.BROADCAST and \
                not any(a in new.attrs for a in _LAYOUT_BOUND):
            return self._broadcast(call, new)
        return new

    def _dense(self, call: Call, new: Call) -> Expr:
        """A float32 dense of a small batch computed transposed (``DENSE_ROWS``)."""
        data, weight = (a.checked_type if a.has_type else None for a in call.args)
        if not (isinstance(data, TensorType) and isinstance(weight, TensorType) and
                dense_runs_transposed(data, weight, new.attrs.out_dtype)):
            return new
        x, w = new.args
        return transpose(matmul(w, transpose(x)))

    def _cancel(self, new: Call) -> Expr:
        """A transform of a transform's result back to its source layout is its source."""
        inner = self.resolve(new.args[0])
        if isinstance(inner, Call) and inner.op == layout_transform.op and \
                inner.attrs.src_layout == new.attrs.dst_layout and \
                inner.attrs.dst_layout == new.attrs.src_layout:
            return inner.args[0]
        return new

    def _conv2d(self, call: Call, new: Call) -> Expr:
        data, weight = _static_shape(call.args[0]), _static_shape(call.args[1])
        a = call.attrs
        if data is None or weight is None or len(data) != 4 or a.groups != 1 or \
                a.out_dtype not in (None, call.args[0].checked_type.dtype):  # pyright: ignore
            return new
        ob = channel_block(weight[0], self.block)
        found = self.blocked(new.args[0])
        if not (self.everywhere or self._pays(call, found is not None, weight, ob)):
            return new
        ib = found[1] if found is not None else \
            data[1] if data[1] <= self.block else channel_block(data[1], self.block)
        _, weight_layout, _ = nchwc_layouts(ib, ob)
        out = conv2d_nchwc(self.to_blocked(new.args[0], ib),
                           layout_transform(new.args[1], src_layout="OIHW",
                                            dst_layout=weight_layout),
                           strides=a.strides, padding=a.padding, dilation=a.dilation,
                           span=call.span)
        return _unblock(out, ob)

    def _pays(self, call: Call, data_blocked: bool, weight: tuple[int, ...], ob: int) -> bool:
        """Whether the blocked convolution is likely faster than the NCHW one, the layout
        transforms it brings included (measured on ResNet-18, VGG-16, MobileNet and DQN,
        see the module doc). Only out-channel blocks of whole vectors with dilation 1 get
        the fast kernel; a 1x1 convolution does too little work per element to pay for
        taking its data into the blocked layout; and a weight that is not a constant is
        transformed at every call, which pays only over many output pixels."""
        if ob < MIN_BLOCK or tuple(call.attrs.dilation) != (1, 1):
            return False
        if weight[2:] == (1, 1) and not data_blocked:
            return False
        out = _static_shape(call)
        pixels = out[0] * out[2] * out[3] if out is not None else 0
        return isinstance(self.resolve(call.args[1]), Constant) or pixels >= MIN_PIXELS

    def _bias_add(self, call: Call, new: Call) -> Expr:
        """bias_add along the channels of a blocked result: an add of the bias as
        (C/f, 1, 1, f), which broadcasts over (N, C/f, H, W, f)."""
        found = self.blocked(new.args[0])
        if found is None or call.attrs.axis not in (1, -3):
            return new
        x, f = found
        shape = _static_shape(call.args[1])
        if shape is None:
            return new
        bias = ops.reshape(new.args[1], newshape=(shape[0] // f, 1, 1, f))
        return _unblock(ops.add(x, bias, span=call.span), f)

    def _broadcast(self, call: Call, new: Call) -> Expr:
        """An elementwise or broadcast op of a blocked result, in the blocked layout: its
        other operands blocked too where they are NCHW-shaped (per-channel ones broadcast
        over the blocked axes), kept where they are scalars."""
        out = _static_shape(call)
        if out is None or len(out) != 4:
            return new
        found = [b for arg, orig in zip(new.args, call.args)
                 if (b := self.blocked(arg)) is not None and _static_shape(orig) == out]
        if not found:
            return new
        f = found[0][1]
        args: list[Expr] = []
        for arg, orig in zip(new.args, call.args):
            shape = _static_shape(orig)
            if shape is None:
                return new
            if len(shape) == 0:
                args.append(arg)
                continue
            padded = (1,) * (4 - len(shape)) + shape
            if len(shape) > 4 or any(d not in (1, o) for d, o in zip(padded, out)):
                return new
            if padded[1] == 1:  # nothing per channel: a block axis of 1 broadcasts
                args.append(ops.reshape(arg, newshape=(*padded, 1)))
                continue
            if padded != shape:
                arg = ops.reshape(arg, newshape=padded)
            args.append(self.to_blocked(arg, f))
        return _unblock(Call(new.op, tuple(args), new.attrs, new.type_args, span=new.span), f)


__all__ = ["AlterOpLayout", "alter_op_layout", "channel_block"]
