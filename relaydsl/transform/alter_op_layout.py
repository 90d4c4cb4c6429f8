"""AlterOpLayout: conv2d in the blocked NCHW{c}c layout, layout_transform ops around it.

§4.4 of the Relay paper: a CPU convolution runs on channels blocked into vector-wide groups
(NCHW16c data, OIHW16i16o weight), its inner loop one vector FMA over an output block. The
pass rewrites each NCHW conv2d into ``conv2d_nchwc`` with ``layout_transform`` calls taking
its data and weight into the blocked layouts and its result back to NCHW. Elementwise and
broadcast ops on a blocked result (relu, a per-channel bias or scale, an add of two blocked
results) run in the blocked layout too, their per-channel operands transformed; and a
transform followed by its inverse is dropped. A chain of convolutions then has one
transform in and one out; the weight transforms of constant weights are folded by
FoldConstant, which runs after this pass.

Before and after (block 16, 32 channels)::

    %0 = conv2d(%x, %w1, padding=1);           %x16 = layout_transform(%x, "NCHW", "NCHW16c");
    %1 = relu(add(%0, %b));                       %0 = conv2d_nchwc(%x16, <OIHW16i16o w1>, ...);
    conv2d(%1, %w2, padding=1)                 %1 = relu(add(%0, <b as (2, 1, 1, 16)>));
                                                  layout_transform(conv2d_nchwc(%1, <w2>, ...),
                                                                   "NCHW16c", "NCHW")

Block sizes are the largest power of two up to ``block`` dividing the channels (1 for odd
channel counts: a first layer's 3 input channels). Only groups=1 convolutions on NCHW data
without an out_dtype change are rewritten.

The pass runs on demand (``required_pass=["AlterOpLayout"]``, pipeline.py), not at a level:
on our llvm backend the NCHW conv2d is an implicit GEMM on the register-blocked GEMM
micro-kernel, while conv2d_nchwc is a generic loop nest (one vector FMA per weight row
load, no register blocking over output pixels). On four 3x3 64-channel 56x56 convolutions
at batch 1 (benchmarks/alter_op_layout.py, a loaded 2-core Zen 5) the blocked chain took
1.8-2.4x the NCHW one (NCHW16c 42.7 ms against 23.8 ms, medians; one pinned core 63.0
against 34.6 ms; NCHW8c 3x slower). A blocked conv2d template would change that.

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(1, 32, 8, 8), float32], %w: Tensor[(32, 32, 3, 3), float32]) {
...   relu(conv2d(conv2d(%x, %w, padding=1), %w, padding=1))
... }'''))
>>> calls = op_calls(alter_op_layout(mod)["main"])
>>> calls.count("layout_transform"), calls.count("conv2d_nchwc"), "conv2d" in calls
(4, 2, False)
"""
from __future__ import annotations

from relaydsl.ir.expr import Call, Expr, Function, Let, Op, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprMutator, post_order
from relaydsl.op.nn.conv import conv2d, conv2d_nchwc, nchwc_layouts
from relaydsl.op.nn.linear import bias_add
from relaydsl.op.registry import OpPattern, ops
from relaydsl.op.transform.layout import layout_transform
from relaydsl.transform._util import is_primitive, rewrite_functions
from relaydsl.transform.fold_constant import fold_constants

BLOCK = 16
"""The widest channel block: one AVX-512 vector of float32."""

_LAYOUT_BOUND = ("axis", "shape")
"""Attributes naming an axis or the result's shape (bias_add, prelu, broadcast_to, full): an
op with one means them in NCHW, so it is not moved into a blocked layout as it is."""


def alter_op_layout(mod: IRModule, block: int = BLOCK) -> IRModule:
    """A copy of `mod` with its NCHW conv2d calls in blocked layouts (see the module doc);
    channel blocks are powers of two up to `block`. The transforms of constant weights and
    biases are folded."""

    def alter(fn: Function) -> Expr:
        if is_primitive(fn) or not any(c == "conv2d" for c in op_calls(fn)):
            return fn
        return _AlterLayout(block).visit(fn)

    return fold_constants(rewrite_functions(mod, alter))


def op_calls(e: Expr) -> list[str]:
    """The names of the ops `e` calls, in post order (one per call node)."""
    names: list[str] = []
    post_order(e, lambda n: names.append(n.op.name)
               if isinstance(n, Call) and isinstance(n.op, Op) else None)
    return names


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
    def __init__(self, block: int) -> None:
        super().__init__()
        self.block = block
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
        if new.op == bias_add.op:
            return self._bias_add(call, new)
        if new.op.definition.pattern <= OpPattern.BROADCAST and \
                not any(a in new.attrs for a in _LAYOUT_BOUND):
            return self._broadcast(call, new)
        return new

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
        ib, ob = channel_block(data[1], self.block), channel_block(weight[0], self.block)
        _, weight_layout, _ = nchwc_layouts(ib, ob)
        out = conv2d_nchwc(self.to_blocked(new.args[0], ib),
                           layout_transform(new.args[1], src_layout="OIHW",
                                            dst_layout=weight_layout),
                           strides=a.strides, padding=a.padding, dilation=a.dilation,
                           span=call.span)
        return _unblock(out, ob)

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


__all__ = ["alter_op_layout", "channel_block"]
