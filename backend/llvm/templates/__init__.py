"""Hand-written LLVM IR for the contraction ops: one entry point, ``template_for``.

The scheduler (schedule.py) asks ``template_for(op, attrs, input_types, out_type,
transposable)`` for each op call it schedules; a ``Template`` it gets back is emitted by
the code generator as one stage (``Template.emit(module, name)``). Inside:

    contraction.py    which op calls get a template: dense, matmul, batch_matmul, conv2d(_nchwc)
    gemm.py           the shape-specific GEMM driver (batch, parallel units, blocking)
    conv2d.py         conv2d's implicit-im2col packer for the GEMM's B operand
    conv2d_nchwc.py   conv2d_nchwc as direct convolution on the micro-kernel, no packing
    conv2d_int8.py    int8 conv2d with a constant weight as direct convolution on AVX-512 VNNI
    gemm_library.py   the shape-independent GEMM core and micro-kernels, compiled once
    igemm.py          the integer GEMM (int8/uint8/int16, int32 sums) on AMX, VNNI or SIMD
    irgen.py          small helpers over llvmlite.ir shared by the above

>>> from relaydsl.ir.types import TensorType
>>> from relaydsl.op import ops
>>> t = template_for(ops.dense, {}, [TensorType((8, 16), "float32"),
...                                 TensorType((4, 16), "float32")], TensorType((8, 4), "float32"))
>>> (t.op_name, t.spec.m, t.spec.n, t.spec.k)
('dense', 8, 4, 16)
"""
from relaydsl.backend.llvm.templates.contraction import (
    AnyTemplate, BlockedConvTemplate, IntConvTemplate, StageInfo, Template, template_for,
)

__all__ = ["AnyTemplate", "BlockedConvTemplate", "IntConvTemplate", "StageInfo", "Template",
           "template_for"]
