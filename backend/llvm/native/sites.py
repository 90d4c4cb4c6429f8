"""Kernel calls whose shapes are known only at run time, in native code (this package).

Such a call site compiles its primitive function per shape of its inputs, on first use
(type inference re-run with the shapes is the shape function: it gives the outputs'), and
describes each kernel to native code by a record; native code keeps the last few records
of a site in its "ways" and asks Python only on a miss.
"""
from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from relaydsl.backend.llvm.kernel import address, compile_primitive
from relaydsl.backend.llvm.specialize import specialize
from relaydsl.ir.expr import Function
from relaydsl.ir.types import TensorType, TupleType, Type

ALIGN = 64  # bytes: tensors' data, kernels' scratch
WAYS = 4  # the kernels a call site of run-time shapes finds without asking Python
_log = logging.getLogger(__name__)


def nbytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes of a tensor (at least 1, so that every tensor has an address of its own)."""
    return max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)


def leaf_types(types: Sequence[Type]) -> list[TensorType]:
    """The tensor types of `types`, tuples flattened (as kernels take and give them)."""
    out: list[TensorType] = []
    for t in types:
        if isinstance(t, TupleType):
            out.extend(leaf_types(t.fields))
        else:
            assert isinstance(t, TensorType)
            out.append(t)
    return out


class KernelSite:
    """A kernel call whose shapes are known only at run time.

    Its kernel is compiled per shape of the inputs, on first use, and described to native
    code by a record (int64 words): ``[kernel entry (0: nothing to compute), table size,
    scratch bytes, scratch buffers, input dims..., output dims..., output bytes...,
    table template...]``. The template is the kernel's buffer table with its constants'
    addresses, and its scratch buffers' offsets in one block native code allocates.
    """

    ENTRY, TABLE, SCRATCH_BYTES, SCRATCHES, KEY = range(5)

    def __init__(self, fn: Function, inputs: list[TensorType], outputs: list[TensorType]):
        self.fn, self.inputs, self.outputs = fn, inputs, outputs
        self.key_words = sum(len(t.shape) for t in inputs)
        self.out_dims_at = self.KEY + self.key_words
        self.out_bytes_at = self.out_dims_at + sum(len(t.shape) for t in outputs)
        self.template_at = self.out_bytes_at + len(outputs)
        self.records: dict[tuple[int, ...], np.ndarray] = {}
        self.next_way = 0  # the way the next record goes to
        self._kept: list = []  # every record made, its kernel and the constants it points at

    def record(self, key: tuple[int, ...], opt_level: int) -> np.ndarray:
        """The record for input dimensions `key`, its kernel compiled."""
        types, at = [], 0
        for t in self.inputs:
            types.append(TensorType(key[at:at + len(t.shape)], t.dtype))
            at += len(t.shape)
        kernel = compile_primitive(specialize(self.fn, types), opt_level=opt_level)
        outputs = kernel.output_types
        assert [len(t.shape) for t in outputs] == [len(t.shape) for t in self.outputs]
        constants = [np.require(c, requirements=("C", "A")) for c in kernel.constants]
        offsets, scratch_bytes = [], 0
        for shape, dtype in kernel.scratch:
            offsets.append(scratch_bytes)
            scratch_bytes += -(-nbytes(shape, dtype) // ALIGN) * ALIGN
        template = [0] * (len(self.inputs) + len(outputs)) + \
            [address(c) for c in constants] + offsets
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("native code: for (%s) %r",
                       ", ".join(f"{t.dtype}{list(t.shape)}" for t in types), kernel)
        record = np.array([0 if kernel.empty else kernel.entry_address, len(template),
                         scratch_bytes, len(offsets), *key,
                         *[d for t in outputs for d in t.shape],
                         *[nbytes(t.shape, t.dtype) for t in outputs], *template], np.int64)
        self._kept.append((record, kernel, constants))  # ways may point at it for good
        return record
