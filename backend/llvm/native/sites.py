"""Kernel calls whose shapes are known only at run time, in native code (this package).

Such a call site compiles its primitive function once for chunks of rows where its inputs
have a leading dimension known only at run time and the function is row-separable (a
kernel generic in the batch size: ../chunked.py), else once with its sizes read at run
time where that is proven to compute the same (../generic.py: a mean over a symbolic axis,
symbolic dimensions anywhere; tried first when dimensions other than the leading ones are
symbolic), else per shape of its inputs, on first
use (type inference re-run with the shapes is the shape function: it gives the outputs'),
and describes the kernel for each shape to native code by a record; native code keeps the
last few records of a site in its "ways" and asks Python only on a miss.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

import numpy as np
from llvmlite import ir

from relaydsl.backend.llvm.chunked import ChunkedKernel, compile_chunked
from relaydsl.backend.llvm.generic import GenericKernel, compile_generic, pattern
from relaydsl.backend.llvm.kernel import Kernel, address, compile_primitive, nbytes
from relaydsl.backend.llvm.native.abi import I64, PTR, Error, Word
from relaydsl.backend.llvm.native.values import contiguous
from relaydsl.backend.llvm.specialize import specialize
from relaydsl.ir.expr import Call, Function
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.transform.pipeline import CompileOptions

if TYPE_CHECKING:
    from relaydsl.backend.llvm.native.externals import ExternalKernel
    from relaydsl.backend.llvm.native.functions import FunctionCompiler

ALIGN = 64  # bytes: tensors' data, kernels' scratch
WAYS = 4  # the kernels a call site of run-time shapes finds without asking Python
_log = logging.getLogger(__name__)


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

    Its kernel is compiled per shape of the inputs (or once for chunks of rows: chunked.py),
    on first use, and described to native code by a record (int64 words): ``[kernel entry
    (0: nothing to compute), table size, scratch bytes, scratch buffers, data, input
    dims..., output dims..., output bytes..., table template...]``. The template is the
    kernel's buffer table with its constants' addresses, and its scratch buffers' offsets
    in one block native code allocates. The entry is called with the table and the
    record's data: a kernel ignores it; the driver of kernels generic in the batch size
    (chunked.py) finds its plan there.
    """

    ENTRY, TABLE, SCRATCH_BYTES, SCRATCHES, DATA, KEY = range(6)

    def __init__(self, fn: Function, inputs: list[TensorType], outputs: list[TensorType]):
        self.fn, self.inputs, self.outputs = fn, inputs, outputs
        self.key_words = sum(len(t.shape) for t in inputs)
        self.out_dims_at = self.KEY + self.key_words
        self.out_bytes_at = self.out_dims_at + sum(len(t.shape) for t in outputs)
        self.template_at = self.out_bytes_at + len(outputs)
        self.records: dict[tuple[int, ...], np.ndarray] = {}
        self.next_way = 0  # the way the next record goes to
        self._kept: list = []  # every record made, and what it points at
        # inputs whose leading dimension is known only at run time, and the kernels generic
        # in it (chunked.py) by the other dimensions
        self.batched = [bool(t.shape) and not isinstance(t.shape[0], int) for t in inputs]
        self._chunked: dict[tuple, ChunkedKernel | None] = {}
        # the dimensions typed symbolically, and the kernels generic in them (generic.py)
        # by which of them are one size (generic.pattern)
        self.symbolic = [[not isinstance(d, int) for d in t.shape] for t in inputs]
        self._generic: dict[tuple, GenericKernel | None] = {}
        self.inner_symbolic = any(any(flags[1:]) for flags in self.symbolic)

    def record(self, key: tuple[int, ...], options: CompileOptions) -> np.ndarray:
        """The record for input dimensions `key`: of the function's kernel generic in the
        batch size where it has one, else of its kernel compiled for these shapes."""
        types, at = [], 0
        for t in self.inputs:
            types.append(TensorType(key[at:at + len(t.shape)], t.dtype))
            at += len(t.shape)
        # chunks of static rows first (their GEMMs run templates, their inner loops have
        # static trip counts), unless other dimensions are symbolic too: chunked kernels
        # are made per size of those
        generic = self._generic_kernel(types, options) if self.inner_symbolic else None
        if generic is not None and generic.runs(generic.values(types)):
            return self._generic_record(key, generic, types)
        chunked = self._chunked_kernel(types, options)
        if chunked is not None:
            return self._chunked_record(key, chunked, types[self.batched.index(True)].shape[0])
        generic = None if self.inner_symbolic else self._generic_kernel(types, options)
        if generic is not None and generic.runs(generic.values(types)):
            return self._generic_record(key, generic, types)
        kernel = compile_primitive(specialize(self.fn, types), options)
        outputs = kernel.output_types
        assert [len(t.shape) for t in outputs] == [len(t.shape) for t in self.outputs]
        constants = [contiguous(c) for c in kernel.constants]
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("native code: for (%s) %r",
                       ", ".join(f"{t.dtype}{list(t.shape)}" for t in types), kernel)
        return self._record(key, 0 if kernel.empty else kernel.entry_address, 0, outputs,
                            [address(c) for c in constants],
                            [nbytes(shape, dtype) for shape, dtype in kernel.scratch],
                            (kernel, constants))

    def _record(self, key: tuple[int, ...], entry: int, data: int,
                outputs: list[TensorType], table: list[int], scratch: list[int],
                keep: object) -> np.ndarray:
        """The record of a kernel (or driver) at `entry`: its table after the inputs and
        outputs is `table` then the offsets of scratch buffers of `scratch` bytes; `keep`
        (what the table points at) lives as long as the site, as ways may point at it."""
        offsets, scratch_bytes = [], 0
        for size in scratch:
            offsets.append(scratch_bytes)
            scratch_bytes += -(-size // ALIGN) * ALIGN
        template = [0] * (len(self.inputs) + len(outputs)) + table + offsets
        record = np.array([entry, len(template), scratch_bytes, len(offsets), data, *key,
                           *[d for t in outputs for d in t.shape],
                           *[nbytes(t.shape, t.dtype) for t in outputs], *template], np.int64)
        self._kept.append((record, keep))
        return record

    def _chunked_kernel(self, types: list[TensorType], options: CompileOptions
                        ) -> ChunkedKernel | None:
        """The kernel generic in the batch size for inputs of `types`, if the batched inputs
        agree on a size and the function is row-separable."""
        if not any(self.batched):
            return None
        sizes = {t.shape[0] for t, b in zip(types, self.batched) if b}
        if len(sizes) != 1:
            return None
        key = tuple(t.shape[1:] if b else t.shape for t, b in zip(types, self.batched))
        if key not in self._chunked:
            self._chunked[key] = compile_chunked(self.fn, types, self.batched,
                                                 options)
        return self._chunked[key]

    def _generic_kernel(self, types: list[TensorType], options: CompileOptions
                        ) -> GenericKernel | None:
        """The kernel generic in the symbolic dimensions of inputs of `types`, if there is
        one for the way their sizes coincide."""
        key = pattern(types, self.symbolic)[0]
        if key not in self._generic:
            self._generic[key] = compile_generic(self.fn, types, self.symbolic, options)
        return self._generic[key]

    def _generic_record(self, key: tuple[int, ...], generic: GenericKernel,
                        types: list[TensorType]) -> np.ndarray:
        values = generic.values(types)
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("native code: for (%s) a kernel generic in its sizes %s",
                       ", ".join(f"{t.dtype}{list(t.shape)}" for t in types), values)
        sizes = np.array(values, np.int64)
        constants = [contiguous(c) for c in generic.constants]
        return self._record(key, generic.entry_address, 0, generic.output_types(values),
                            [*map(address, constants), address(sizes)],
                            generic.scratch_bytes(values), (generic, constants, sizes))

    def _chunked_record(self, key: tuple[int, ...], chunked: ChunkedKernel, n: int
                        ) -> np.ndarray:
        constants, scratch, plan = chunked.call(n)
        return self._record(key, chunked.driver, address(plan), chunked.output_types(n),
                            constants, scratch, (chunked, plan))


# ---- native code calling a site ---------------------------------------------------------------

def check_shapes(fc: FunctionCompiler, kernel: Kernel | ExternalKernel, call: Call,
                 inputs: list[ir.Value]) -> None:
    """Stops the run unless the inputs have the shapes `kernel` was compiled for (a
    value typed with relay.Any dimensions could otherwise reach it at another size)."""
    b = fc.b
    for i, (tensor, t) in enumerate(zip(inputs, kernel.input_types)):
        wrong = ir.Constant(ir.IntType(1), 0)
        for d, want in zip(fc.dims(tensor, len(t.shape)), t.shape):
            wrong = b.or_(wrong, b.icmp_signed("!=", d, I64(want)))
        with b.if_then(wrong, likely=False):
            fc.fail(Error.WRONG_SHAPE, len(fc.low.wrong_shapes) << 8 | min(i, 0xFF))
    fc.low.wrong_shapes.append((kernel, call.span))

def site_call(fc: FunctionCompiler, fn: Function, call: Call, inputs: list[ir.Value]
              ) -> ir.Value:
    """A call of primitive function `fn` whose shapes are known only at run time: the
    kernel for the inputs' dimensions is looked for in the site's ways, else asked of
    Python (which compiles it on first use); its record says the outputs' dimensions
    and the kernel's buffer table."""
    b, low = fc.b, fc.low
    site = KernelSite(fn, leaf_types([a.checked_type for a in call.args]),
                 leaf_types([call.checked_type]))
    index = len(low.sites)
    low.sites.append(site)
    dims = [d for tensor, t in zip(inputs, site.inputs)
            for d in fc.dims(tensor, len(t.shape))]
    keys = fc.allocas.alloca(ir.ArrayType(I64, max(len(dims), 1)))
    for k, d in enumerate(dims):
        b.store(d, b.gep(keys, [I64(0), I64(k)]))
    ways = b.inttoptr(b.load(b.gep(fc.words, [I64(Word.WAYS)])), I64.as_pointer())
    found = fc.new_block("kernel_found")
    incoming = []
    for way in range(WAYS):
        record = b.load(b.gep(ways, [I64(index * WAYS + way)]))
        compare, following = fc.new_block("kernel_way"), fc.new_block("kernel_next")
        b.cbranch(b.icmp_unsigned("!=", record, I64(0)), compare, following)
        b.position_at_end(compare)
        same, pointer = ir.Constant(ir.IntType(1), 1), b.inttoptr(record, PTR)
        for k, d in enumerate(dims):
            same = b.and_(same, b.icmp_signed("==", fc.word(pointer, KernelSite.KEY + k), d))
        incoming.append((record, b.block))
        b.cbranch(same, found, following)
        b.position_at_end(following)
    resolve = b.bitcast(fc.linked(low.resolve), ir.FunctionType(I64, [I64, PTR]).as_pointer())
    asked = b.call(resolve, [I64(index), b.bitcast(keys, PTR)])
    with b.if_then(b.icmp_unsigned("==", asked, I64(0)), likely=False):
        fc.fail(Error.NO_KERNEL, index)
    incoming.append((asked, b.block))
    b.branch(found)
    b.position_at_end(found)
    chosen = b.phi(I64)
    for v, block in incoming:
        chosen.add_incoming(v, block)
    record = b.inttoptr(chosen, PTR)
    outputs, at = [], site.out_dims_at
    for i, t in enumerate(site.outputs):
        rank = len(t.shape)
        out_dims = [fc.word(record, at + r) for r in range(rank)]
        at += rank
        outputs.append(fc.new_tensor(out_dims, fc.word(record, site.out_bytes_at + i)))
    # the table: the record's template (constants; scratch offsets, made addresses)
    mark = fc.mark()  # the table and the scratch buffers are dead after the call
    size = fc.word(record, KernelSite.TABLE)
    table = fc.allocate(b.mul(size, I64(8)))
    scratch = b.ptrtoint(fc.allocate(fc.word(record, KernelSite.SCRATCH_BYTES), ALIGN), I64)
    first_scratch = b.sub(size, fc.word(record, KernelSite.SCRATCHES))
    with fc.counting(size) as i:
        entry = fc.word(record, b.add(i, I64(site.template_at)))
        offset = b.select(b.icmp_signed(">=", i, first_scratch), scratch, I64(0))
        b.store(b.add(entry, offset), b.gep(b.bitcast(table, I64.as_pointer()), [i]))
    for i, p in enumerate([*map(fc.data, inputs), *map(fc.data, outputs)]):
        fc.set_field(table, i, p)
    code = fc.word(record, KernelSite.ENTRY)
    with b.if_then(b.icmp_unsigned("!=", code, I64(0))):  # (a kernel ignores the data)
        b.call(b.inttoptr(code, ir.FunctionType(ir.VoidType(), [PTR, PTR]).as_pointer()),
               [table, b.inttoptr(fc.word(record, KernelSite.DATA), PTR)])
    b.call(low.reset, [fc.st, *mark])
    return fc.rebuild(call.checked_type, iter(outputs))
