"""Which contraction op calls (dense, matmul, batch_matmul, conv2d, conv2d_nchwc) get a
template, and how.

The scheduler asks ``template_for(op, attrs, input_types, out_type, transposable)``; a
Template's ``emit(module, name)`` defines

    void @name(float* noalias %out, float* noalias %in0, float* noalias %in1, i64 %begin, i64 %end)

(inputs in the op's argument order, C-contiguous, pointers to element 0) computing what
the op's NumPy reference computes for the parallel units ``[begin, end)`` of
``StageInfo.parallel_extent``. Any split of the units into chunks, run in any order or
concurrently, gives the same result (every unit writes its own part of ``out``).
Helper functions are internal and named ``name.<helper>``; intrinsic declarations are
shared through the module, and so are declarations of the shape-independent GEMM
library (gemm_library.py), whose parts the caller loads into the process before the
module's object (``gemm_library.load(gemm_library.declared_parts(module))``).

Integer operands (int8 x int8, uint8 x int8 either way, int16 x int16, summed into int32,
int16 or int8: ``igemm.int_types``) get the same GEMM specs with ``Template.ints`` set, run
by igemm.py (with the pointers ``i8*``); conv2d_nchwc stays float32. Except an int8/uint8
conv2d whose int8 weight is a constant of the kernel (``constants``: quantized inference)
with an int32 result, groups 1 and dilation 1, where the integer ISA is AVX-512 VNNI or
AMX: ``IntConvTemplate``, direct convolution with the weight packed at build time
(conv2d_int8.py; 2.3-2.9x the float32 NCHW{c}c convolution on the CPU measured there),
which takes the elementwise stage after it in registers (``epilogue_axes``, schedule.py).

Supported (float32, static, non-empty shapes): dense with any data rank; matmul with
1-D operands and broadcast batch dims; batch_matmul with both transposes and a batch
of 1 broadcasting; conv2d NCHW/OIHW or CHW with strides, any padding form, dilation and
groups; conv2d_nchwc with strides and padding, dilation 1, an out-channel block of whole
vectors. Anything else gives None.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Mapping, Sequence

import llvmlite.ir as ir
import numpy as np

from relaydsl.backend.llvm.epilogue import Epilogue
from relaydsl.backend.llvm.templates.conv2d import (
    ConvGeometry, emit_im2col_packer, int_im2col_rows,
)
from relaydsl.backend.llvm.templates.conv2d_int8 import IntConv, emit_int_conv, int_conv
from relaydsl.backend.llvm.templates.conv2d_nchwc import BlockedConv, emit_blocked_conv, micro_tile
from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.templates import gemm_library
from relaydsl.backend.llvm.templates.gemm import (
    Blocking, GemmSpec, default_blocking, emit_gemm, micro_kernel_parts,
)
from relaydsl.backend.llvm.templates.gemm_library import MicroTile
from relaydsl.backend.llvm.templates.igemm import IntTypes, emit_int_gemm, host_isa, int_types
from relaydsl.ir.expr import Call, Expr, GlobalVar, Op
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import post_order
from relaydsl.op.nn.conv import conv2d, conv2d_nchwc
from relaydsl.op.nn.linear import batch_matmul, dense, matmul
from relaydsl.op.nn.window import Window
from relaydsl.op.registry import OpDef
from relaydsl.transform.alter_op_layout import dense_runs_transposed, transposed_dense_matmul


@dataclass(frozen=True)
class StageInfo:
    name: str
    parallel_extent: int  # the emitted function computes units [begin, end) of this many
    flops: float


@dataclass(frozen=True)
class Template:
    """A GEMM (optionally with conv2d's implicit-im2col B operand) ready to be emitted."""

    epilogue_axes: ClassVar[int | None] = None  # takes no epilogue in registers

    op_name: str
    spec: GemmSpec
    conv: ConvGeometry | None = None
    blocking: Blocking | None = None
    transposed: frozenset[int] = frozenset()  # operands handed as the buffer they transpose
    ints: IntTypes | None = None  # an integer GEMM (igemm.py), else float32

    def emit(self, module: ir.Module, name: str) -> StageInfo:
        if self.ints is not None:
            rows_b = int_im2col_rows(self.conv) if self.conv is not None else None
            kernel = emit_int_gemm(module, name, self.spec, self.ints, rows_b=rows_b)
        else:
            packer = emit_im2col_packer(self.conv) if self.conv is not None else None
            kernel = emit_gemm(module, name, self.spec, self.blocking, pack_b=packer)
        return StageInfo(name, kernel.parallel_extent, kernel.flops)


@dataclass(frozen=True)
class BlockedConvTemplate:
    """conv2d_nchwc as direct convolution on the micro-kernel (conv2d_nchwc.py)."""

    epilogue_axes: ClassVar[int | None] = None

    op_name: str
    conv: BlockedConv
    tile: MicroTile
    transposed: frozenset[int] = frozenset()  # never: its operands are 5-D and 6-D

    def emit(self, module: ir.Module, name: str) -> StageInfo:
        emit_blocked_conv(module, name, self.conv, self.tile)
        return StageInfo(name, self.conv.units, self.conv.flops)


@dataclass(frozen=True)
class IntConvTemplate:
    """An int8 conv2d with a constant weight as direct convolution on AVX-512 VNNI
    (conv2d_int8.py), with the elementwise stage after it in registers where the schedule
    gives it one (``epilogue``: its function then also takes the epilogue's reads)."""

    op_name: str
    conv: IntConv
    transposed: frozenset[int] = frozenset()  # never
    epilogue: Epilogue | None = None
    # a register epilogue's uniform axes: a vector is 16 pixels of one image and channel
    epilogue_axes: ClassVar[int | None] = 2

    def emit(self, module: ir.Module, name: str) -> StageInfo:
        emit_int_conv(module, name, self.conv, self.epilogue)
        return StageInfo(name, self.conv.units, self.conv.flops)


AnyTemplate = Template | BlockedConvTemplate | IntConvTemplate


def _read_transposed(template: AnyTemplate, operand: int, shape: tuple[int, ...]
                     ) -> AnyTemplate | None:
    """`template` reading its 2-D operand `operand` (of `shape`) as the transpose of a buffer.

    The operand is ``Pᵀ`` with ``P`` contiguous, so its element (r, c) is at ``c * rows + r``
    rather than ``r * cols + c``: the spec's strides for it change from cols to 1 and from 1
    to rows, and the template is handed ``P``. None where that does not apply (batched or
    conv2d templates, degenerate shapes).
    """
    if not isinstance(template, Template):
        return None
    spec = template.spec
    if template.conv is not None or spec.batch or len(shape) != 2 or min(shape) < 2:
        return None
    rows, cols = shape
    swap = {cols: 1, 1: rows}

    def remap(strides: tuple[int, int]) -> tuple[int, int] | None:
        if strides[0] == strides[1] or any(s not in swap for s in strides):
            return None
        return (swap[strides[0]], swap[strides[1]])

    transposed = template.transposed | {operand}
    if spec.a_input == operand and (a := remap(spec.a_strides)) is not None:
        return replace(template, spec=replace(spec, a_strides=a), transposed=transposed)
    if spec.b_input == operand and (b := remap(spec.b_strides)) is not None:
        return replace(template, spec=replace(spec, b_strides=b), transposed=transposed)
    return None


def template_for(op: OpDef, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
                 out_type: TensorType, transposable: Sequence[int] = (),
                 constants: Mapping[int, np.ndarray] | None = None) -> AnyTemplate | None:
    """The template computing this op call, or None where there is none.

    `transposable` lists the operands that are 2-D transposes of a buffer; the template
    reads those it can in place (``Template.transposed``: the caller then hands it the
    buffer, and the transpose is never computed). `constants` holds the values of the
    operands that are constants of the kernel: an int8 conv2d's weight is packed from it.
    """
    template = _direct_int_conv(op, attrs, input_types, out_type, constants or {})
    if template is not None:
        return template
    template = _template_for(op, attrs, input_types, out_type)
    for operand in transposable:
        if template is None:
            break
        shape = input_types[operand].concrete_shape()
        template = _read_transposed(template, operand, shape) or template
    return template


def _template_for(op: OpDef, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
                  out_type: TensorType) -> AnyTemplate | None:
    build = _BUILDERS.get(op)
    if build is None or len(input_types) != 2:
        return None
    types = [*input_types, out_type]
    if not all(isinstance(t, TensorType) and t.is_static for t in types):
        return None
    dtypes = [str(t.dtype) for t in types]
    integer = any(d != "float32" for d in dtypes)
    if integer and op is conv2d_nchwc:
        return None
    shapes = [t.concrete_shape() for t in input_types]
    out = out_type.concrete_shape()
    if any(0 in s for s in (*shapes, out)):
        return None
    try:
        template = build(attrs, shapes[0], shapes[1], out)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not integer or not isinstance(template, Template):
        return template
    spec = template.spec  # conv2d's A is its weight
    ints = int_types(dtypes[spec.a_input], dtypes[spec.b_input], dtypes[2])
    return None if ints is None else replace(template, ints=ints)


# ---- the ops --------------------------------------------------------------------------------


def _dense(attrs: Mapping[str, Any], data: tuple, weight: tuple, out: tuple) -> Template | None:
    if len(data) < 1 or len(weight) != 2 or data[-1] != weight[1]:
        return None
    units, k = weight
    m = math.prod(data[:-1])
    if out != (*data[:-1], units):
        return None
    spec = GemmSpec(m=m, n=units, k=k, a_strides=(k, 1), b_strides=(1, k), ldc=units)
    return Template(dense.name, spec)


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return strides[::-1]


def _batch_strides(batch: Sequence[int], own: Sequence[int], matrix: int) -> tuple[int, ...]:
    """Element strides per output batch axis of an operand with batch dims `own` (right-aligned,
    size-1 dims broadcast) and `matrix` elements per batch entry."""
    own_strides = [s * matrix for s in _contiguous_strides(own)]
    pad = len(batch) - len(own)
    return tuple(0 if i < pad or own[i - pad] == 1 else own_strides[i - pad]
                 for i in range(len(batch)))


def _gemm(op: str, m: int, n: int, k: int, a_strides: tuple[int, int], b_strides: tuple[int, int],
          batch: tuple[int, ...], a_bs: tuple[int, ...], b_bs: tuple[int, ...],
          a_plain: bool) -> Template:
    """A batched GEMM with contiguous C; folds the batch into M where B broadcasts over it
    and A's batch entries are contiguous row blocks."""
    if batch and all(s == 0 for s in b_bs) and a_plain and \
            list(a_bs) == [s * m * k for s in _contiguous_strides(batch)]:
        return Template(op, GemmSpec(m=m * math.prod(batch), n=n, k=k, a_strides=a_strides,
                                     b_strides=b_strides, ldc=n))
    c_bs = tuple(s * m * n for s in _contiguous_strides(batch))
    return Template(op, GemmSpec(m=m, n=n, k=k, a_strides=a_strides, b_strides=b_strides, ldc=n,
                                 batch=tuple(batch), a_batch_strides=a_bs, b_batch_strides=b_bs,
                                 c_batch_strides=c_bs))


def _matmul(attrs: Mapping[str, Any], a: tuple, b: tuple, out: tuple) -> Template | None:
    if not a or not b:
        return None
    m, k = (1, a[0]) if len(a) == 1 else a[-2:]
    kb, n = (b[0], 1) if len(b) == 1 else b[-2:]
    if k != kb:
        return None
    a_batch, b_batch = a[:-2], b[:-2]
    nb = max(len(a_batch), len(b_batch))
    batch = []
    for i in range(nb):
        da = a_batch[i - nb + len(a_batch)] if i >= nb - len(a_batch) else 1
        db = b_batch[i - nb + len(b_batch)] if i >= nb - len(b_batch) else 1
        if da != db and 1 not in (da, db):
            return None
        batch.append(max(da, db))
    expect = (*batch, *([m] if len(a) > 1 else []), *([n] if len(b) > 1 else []))
    if tuple(out) != expect:
        return None
    a_bs = _batch_strides(batch, a_batch, m * k)
    b_bs = _batch_strides(batch, b_batch, k * n)
    a_plain = len(a) > 1 and tuple(a_batch) == tuple(batch)
    return _gemm(matmul.name, m, n, k, (k, 1), (n, 1), tuple(batch), a_bs, b_bs, a_plain)


def _batch_matmul(attrs: Mapping[str, Any], x: tuple, y: tuple, out: tuple) -> Template | None:
    if len(x) != 3 or len(y) != 3:
        return None
    ta, tb = bool(attrs.get("transpose_a", False)), bool(attrs.get("transpose_b", False))
    bx, *xm = x
    by, *ym = y
    m, k = reversed(xm) if ta else xm
    k2, n = reversed(ym) if tb else ym
    if k != k2 or (bx != by and 1 not in (bx, by)):
        return None
    batch = max(bx, by)
    if tuple(out) != (batch, m, n):
        return None
    a_strides = (1, m) if ta else (k, 1)
    b_strides = (1, k) if tb else (n, 1)
    a_bs = (0 if bx == 1 else m * k,)
    b_bs = (0 if by == 1 else k * n,)
    return _gemm(batch_matmul.name, m, n, k, a_strides, b_strides, (batch,), a_bs, b_bs,
                 a_plain=not ta and bx == batch)


def _conv2d(attrs: Mapping[str, Any], data: tuple, weight: tuple, out: tuple) -> Template | None:
    if len(data) not in (3, 4) or len(weight) != 4:
        return None
    # canonical attributes (the registry's "pair" and "padding" kinds)
    strides, pads, dilation = attrs["strides"], attrs["padding"], attrs["dilation"]
    groups = int(attrs.get("groups", 1))
    if min(strides) < 1 or min(dilation) < 1 or min(pads) < 0 or groups < 1:
        return None
    batch = data[0] if len(data) == 4 else None
    cin, h, w = data[-3:]
    cout, cg, kh, kw = weight
    if cin != cg * groups or cout % groups:
        return None
    oh, ow = Window((kh, kw), strides, dilation, pads).out_hw((h, w))
    if oh < 1 or ow < 1:
        return None
    expect = ((batch,) if batch is not None else ()) + (cout, oh, ow)
    if tuple(out) != expect:
        return None
    if max(cin * h * w, cg * kh * kw, oh * ow) >= 2 ** 31 // 2:
        return None  # the im2col packer indexes with i32
    geo = ConvGeometry(batch, cin, h, w, cout, kh, kw, oh, ow, strides, pads, dilation, groups)
    return Template(conv2d.name, geo.gemm_spec(), conv=geo)


def _conv2d_nchwc(attrs: Mapping[str, Any], data: tuple, weight: tuple, out: tuple
                  ) -> BlockedConvTemplate | None:
    if len(data) != 5 or len(weight) != 6 or tuple(attrs["dilation"]) != (1, 1):
        return None
    batch, in_blocks, h, w, in_block = data
    out_blocks, w_in_blocks, kh, kw, w_in_block, out_block = weight
    if (w_in_blocks, w_in_block) != (in_blocks, in_block):
        return None
    strides, pads = tuple(attrs["strides"]), tuple(attrs["padding"])
    oh, ow = Window((kh, kw), strides, (1, 1), pads).out_hw((h, w))
    tile = micro_tile(out_block, ow)
    if tuple(out) != (batch, out_blocks, oh, ow, out_block) or tile is None:
        return None
    geometry = BlockedConv(batch, in_blocks, h, w, in_block, out_blocks, kh, kw, out_block,
                           oh, ow, strides, pads)
    return BlockedConvTemplate(conv2d_nchwc.name, geometry, tile)


def _direct_int_conv(op: OpDef, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
                     out_type: TensorType, constants: Mapping[int, np.ndarray]
                     ) -> IntConvTemplate | None:
    """An int8/uint8 NCHW conv2d with a constant int8 weight, int32 result, groups 1 and
    dilation 1, where the integer ISA is AVX-512 VNNI (or AMX, whose CPUs have it)."""
    weight = constants.get(1)
    if op is not conv2d or weight is None or len(input_types) != 2 \
            or host_isa().name not in ("amx", "avx512vnni"):
        return None
    data_t, weight_t = input_types
    if not (data_t.is_static and weight_t.is_static and out_type.is_static) \
            or str(out_type.dtype) != "int32" or str(weight_t.dtype) != "int8" \
            or int(attrs.get("groups", 1)) != 1 or tuple(attrs["dilation"]) != (1, 1):
        return None
    data, out = data_t.concrete_shape(), out_type.concrete_shape()
    if len(data) != 4 or len(out) != 4 or 0 in (*data, *out):
        return None
    n, cin, h, w = data
    conv = int_conv(n, cin, h, w, np.asarray(weight), out[2], out[3], tuple(attrs["strides"]),
                    tuple(attrs["padding"]), str(data_t.dtype))
    return None if conv is None else IntConvTemplate(conv2d.name, conv)


_BUILDERS: dict[OpDef, Callable[..., AnyTemplate | None]] = {
    dense: _dense,
    matmul: _matmul,
    batch_matmul: _batch_matmul,
    conv2d: _conv2d,
    conv2d_nchwc: _conv2d_nchwc,
}


# ---- the GEMM core, compiled while the build goes on ------------------------------------------


def compile_core_ahead(mod: IRModule, entry: str) -> bool:
    """Starts compiling the GEMM library's core (its packer and blocked sub-GEMM, for the
    host's vectors) and the micro-kernels of the contractions it sees in a forked child
    where global `entry` of `mod` reaches float32 contractions of static shapes run as a
    GEMM (dense, matmul, batch_matmul), and they are neither loaded nor cached on disk:
    whatever the pipeline makes of the program, the kernels computing those contractions
    call them. The child compiles them while this process types, optimises and lowers the
    program, before the kernels, and the micro-kernels they call, are known (a cold build
    of the MLP's gradients: ~60 ms of IR building and LLVM taken off the ~200 ms each core
    then shares; the gradients' own contractions, transposed, mostly use the same tiles).
    Whether a child was started (``jit.compile_parallel``)."""
    templates: list[Template] = []
    start = mod.get_global_var(entry)
    seen, todo = {start}, [start]

    def visit(e: Expr) -> None:
        if isinstance(e, GlobalVar) and e not in seen:
            seen.add(e)
            todo.append(e)
        if not (isinstance(e, Call) and isinstance(e.op, Op)) or \
                not e.op.definition.traits.contraction or not e.has_type:
            return
        types, out = [a.checked_type for a in e.args], e.checked_type
        if all(isinstance(t, TensorType) for t in types) and isinstance(out, TensorType):
            op, attrs, tensors = e.op.definition, e.attrs, [
                t for t in types if isinstance(t, TensorType)]
            if op is dense and dense_runs_transposed(*tensors, attrs.out_dtype):
                # as AlterOpLayout will compute it: matmul(weight, data^T), transposed
                op, attrs = matmul, {}
                *tensors, out = transposed_dense_matmul(*tensors)
            template = _template_for(op, attrs, tensors, out)
            if isinstance(template, Template) and template.ints is None:
                templates.append(template)

    while todo:
        post_order(mod[todo.pop()], visit)
    if not templates:
        return False
    parts = gemm_library.core_parts(default_blocking().vl) + [
        part for t in templates for part in micro_kernel_parts(t.spec, t.blocking)]
    return jit.compile_parallel(gemm_library.jobs(list(dict.fromkeys(parts))), share=False)
