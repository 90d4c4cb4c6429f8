"""Kernels generic in a leading batch dimension: one compile serves every batch size.

A primitive function whose inputs have a leading dimension known only at run time (the
``n`` of ``Tensor[Float, ("n", 784)]``, a ``relay.Any``) is compiled for *chunks* of a few
sizes (64, 16, 4 and 1 rows of 784 floats; ``chunk_levels``), each once, when a call
first needs it, if its computation is row-separable: every row of every output depends
only on the same row of the batched inputs and on the other inputs whole (an MLP, softmax
over the last axis, a convolution over a batch of images; not a sum over the batch, nor a
reshape mixing rows). A *driver* then runs those kernels over the ``n`` rows of a call:
whole chunks in place, and the last rows copied into a padded chunk (spare rows zero,
their results dropped), as the plan for ``n`` says (``ChunkedKernel.plan``: the fewest
rows computed, counting a chunk's re-reading of the weights and the padded rows' copies).
Each chunk's loops keep the static trip counts the loop vectoriser wants; only the chunk
loops are bounded by the run-time size.

The price, measured on an Intel Xeon (AVX-512, 2 cores): an MLP 784-512-512-10 runs in
1.05-1.5x the time of kernels compiled for the exact batch (its GEMMs pack their weights
again per chunk), a small MLP and LeNet in 0.8-1.2x; a new batch size costs 1-50 ms
instead of a 70-200 ms compile (executor.py gives a signature called often code of its
own).

Row separability is proven on the kernel's tensor expressions (``separable``), not assumed
from op names:

* a tensor is *batched* when it is a batched input or reads a batched tensor; a batched
  tensor's leading dimension is the chunk's ``C`` rows, and every read of a batched
  tensor indexes its leading axis with exactly the reader's own leading axis, which
  appears nowhere else: no value depends on another row, nor on a row's position;
* every output is batched;
* the expressions at ``C`` and at ``C + 1`` rows are the same but for those leading
  dimensions: no constant depends on the batch size (a ``1 / n`` of a mean over the
  batch, a shape read as a value).

A function that is not separable is compiled per shape, as before (native/sites.py).

One driver, compiled once per process, runs every such function at every size: native
code calls it with the kernels' buffer table (inputs and outputs of n rows, constants,
scratch, padded buffers) and the site's record, whose data word points at the call's plan
(``ChunkedKernel.call``, ``_driver_ir``).
"""
from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from llvmlite import ir

from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.kernel import Kernel, address, compile_primitives, nbytes
from relaydsl.backend.llvm.lower import Lowered, lower
from relaydsl.backend.llvm.specialize import specialize
from relaydsl.backend.llvm.templates.irgen import Gen
from relaydsl.errors import RelayError
from relaydsl.ir.expr import Function
from relaydsl.ir.types import TensorType, TupleType
from relaydsl.te.expr import PrimExpr, Reduce, TensorRead, Var, children, post_order
from relaydsl.te.tensor import Tensor

CHUNK_ELEMENTS = 1 << 15  # elements of the widest batched row times the largest chunk
SMALL_ELEMENTS = 1 << 9  # ... and times the smallest
MAX_CHUNK = 1 << 16  # rows
LEVEL = 4  # each chunk size this many times the next


def chunk_levels(row_elements: int, other_elements: int = 0) -> list[int]:
    """The chunk sizes for rows of `row_elements`, largest first: powers of two from the
    first with CHUNK_ELEMENTS elements (64 rows of 784) down, LEVEL times smaller each, to
    the first with SMALL_ELEMENTS (1 row of 784, 64 of 10); the largest holds at least
    `other_elements` (the weights a GEMM packs again for every chunk) too."""
    def first(elements: int) -> int:
        rows = 1
        while rows * max(row_elements, 1) < elements and rows < MAX_CHUNK:
            rows *= 2
        return rows

    levels, smallest = [first(max(CHUNK_ELEMENTS, other_elements))], first(SMALL_ELEMENTS)
    while levels[-1] > smallest:
        levels.append(max(levels[-1] // LEVEL, smallest))
    return levels


# ---- proving a lowered function row-separable ------------------------------------------


def separable(at_c: Lowered, at_c1: Lowered, batched: Sequence[bool], rows: int) -> bool:
    """Whether `at_c` (lowered with `rows` rows in the batched inputs) is row-separable,
    and `at_c1` (the same function at rows + 1) differs from it only in those rows."""
    if at_c.empty or at_c1.empty:
        return False
    marked = _batched_tensors(at_c, batched, rows)
    if marked is None or not all(t in marked for t in at_c.outputs):
        return False
    marked1 = _batched_tensors(at_c1, batched, rows + 1)
    if marked1 is None:
        return False
    return _fingerprint(at_c, marked) == _fingerprint(at_c1, marked1)


def _batched_tensors(lowered: Lowered, batched: Sequence[bool], rows: int
                     ) -> set[Tensor] | None:
    """The batched tensors of `lowered`, or None when a read breaks row separability."""
    marked = {p for p, b in zip(lowered.params, batched) if b}
    if any(not p.shape or p.shape[0] != rows for p in marked):
        return None
    for t in _topological(lowered.outputs):
        if t.body is None or not any(r in marked for r in t.inputs):
            continue
        if not t.shape or t.shape[0] != rows:
            return None
        lead = t.axes[0]
        for node in post_order(t.body):
            reads_batch = isinstance(node, TensorRead) and node.tensor in marked
            if reads_batch and node.indices[0] is not lead:
                return None
            for position, child in enumerate(_operands(node)):
                if child is lead and not (reads_batch and position == 0):
                    return None
        marked.add(t)
    return marked


def _operands(node) -> tuple:
    if isinstance(node, Reduce):  # its axes and combiner too: a reduction over the rows
        return (*children(node), *node.axes, node.combined)
    return children(node)


def _topological(outputs: Sequence[Tensor]) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[Tensor] = set()
    stack: list[tuple[Tensor, bool]] = [(t, False) for t in reversed(outputs)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
        elif t not in seen:
            seen.add(t)
            stack.append((t, True))
            stack.extend((i, False) for i in reversed(t.inputs))
    return order


def _fingerprint(lowered: Lowered, marked: set[Tensor]) -> list[str]:
    """Every tensor and expression of `lowered` as text, nodes numbered in order of
    appearance, the leading dimension of batched tensors written N."""
    def dims(t: Tensor) -> str:
        shape = [str(d) for d in t.shape]
        if t in marked:
            shape[0] = "N"
        return f"{t.dtype}[{', '.join(shape)}]"

    names: dict[int, str] = {}
    lines: list[str] = []
    for i, p in enumerate(lowered.params):
        names[id(p)] = f"param{i}"
        lines.append(f"param{i} {dims(p)}")
    for i, (c, _) in enumerate(lowered.constants):
        names[id(c)] = f"const{i}"
        lines.append(f"const{i} {dims(c)}")
    leads = {id(t.axes[0]) for t in marked if t.body is not None}

    def name(node) -> str:
        found = names.get(id(node))
        if found is None:
            found = names[id(node)] = f"%{len(names)}"
            lines.append(f"{found} = {describe(node)}")
        return found

    def describe(node) -> str:
        if isinstance(node, Tensor):
            return f"placeholder {dims(node)}"
        kind = type(node).__name__
        fields = [f"{k}={getattr(node, k)!r}" for k in ("value", "name", "extent", "is_reduce")
                  if not isinstance(node, (Var, TensorRead))
                  and not isinstance(getattr(node, k, None), (PrimExpr, type(None)))]
        if id(node) in leads:  # a batched tensor's leading axis
            fields = ["extent=N"]
        if isinstance(node, TensorRead):
            fields.append(f"tensor={name(node.tensor)}")
        if isinstance(node, Reduce):
            fields += [f"axes={[name(a) for a in node.axes]}",
                       f"acc={name(node.lhs)} x={name(node.rhs)}",
                       f"combined={name_tree(node.combined)}"]
        return f"{kind} {node.dtype} {' '.join(fields)} ({', '.join(map(name, children(node)))})"

    def name_tree(e) -> str:
        for node in post_order(e):
            name(node)
        return name(e)

    for t in _topological(lowered.outputs):
        if t.body is None:
            name(t)
            continue
        axes = [name(a) for a in t.axes]
        body = name_tree(t.body)
        lines.append(f"tensor {dims(t)} axes={axes} body={body}")
        names[id(t)] = f"t{len(names)}"
    lines.append(f"outputs {[names[id(t)] for t in lowered.outputs]}")
    return lines


# ---- the compiled kernels and their driver ----------------------------------------------


@dataclass(eq=False)
class ChunkedKernel:
    """The function for chunks of `rows` rows of its batched inputs, largest first, each
    compiled when a plan first uses it, and the driver that runs them over any number of
    rows (``call``)."""

    functions: list[Function]  # the function typed for each chunk size
    rows: list[int]
    batched: list[bool]  # per input
    pass_rows: int  # what a chunk costs beyond its rows, in rows: reading the other inputs
    driver: int  # the driver's address
    opt_level: int
    constants: int  # how many the kernels hold (the same for every size)
    kernels: list[Kernel | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kernels = [None] * len(self.rows)
        self._lock = threading.Lock()

    def output_types(self, n: int) -> list[TensorType]:
        return [TensorType((n, *t.shape[1:]), t.dtype)
                for t in _leaves(self.functions[0].checked_type.ret_type)]

    def plan(self, n: int) -> list[tuple[int, int]]:
        """Per chunk size, the first row and how many rows it takes for `n` rows: whole
        chunks, and the chunk that takes the last rows padded. The cheapest way, counting a
        chunk as its rows plus ``pass_rows`` (a GEMM reads its weights again per chunk:
        padding 3 rows to 8 is cheaper than three chunks of one), and copying a row in and
        out of the padded chunk as COPY rows."""
        def best(left: int, level: int) -> tuple[float, list[int]]:
            size = self.rows[level]
            whole, rest = divmod(left, size)
            cost = whole * (size + self.pass_rows)
            padded = cost + size + self.pass_rows + COPY * rest
            if rest == 0 or level == len(self.rows) - 1:
                return (padded if rest else cost), [left]
            lower, taken = best(rest, level + 1)
            if padded <= cost + lower:
                return padded, [left]
            return cost + lower, [left - rest, *taken]

        _, taken = best(n, 0)
        out, start = [], 0
        for level in range(len(self.rows)):
            rows = taken[level] if level < len(taken) else 0
            out.append((start, rows))
            start += rows
        return out

    def call(self, n: int) -> tuple[list[int], list[int], np.ndarray]:
        """For a call of `n` rows: the driver's table after the inputs and outputs, before
        the scratch offsets (the constants' addresses); the bytes of each scratch buffer
        (each kernel's the plan uses, then the padded inputs and outputs, sized for the
        chunk that pads); and the plan the driver reads (``_driver_ir``). Compiles the
        chunk sizes the plan uses for the first time."""
        plan = self.plan(n)
        used = [level for level, (_, rows) in enumerate(plan) if rows]
        kernels = [k if level in used else None for level, k in enumerate(self._kernels(used))]
        padding = [size for size, (_, rows) in zip(self.rows, plan) if rows % size]
        pad = padding[0] if padding else 0
        scratch = [nbytes(shape, dtype) for k in kernels if k for shape, dtype in k.scratch]
        scratch += [nbytes((pad, *t.shape[1:]), t.dtype) for t, b in
                    zip(self.functions[0].checked_type.arg_types, self.batched) if b]
        scratch += [nbytes((pad, *t.shape[1:]), t.dtype) for t in self.output_types(pad)]
        some = [k for k in kernels if k]
        constants = [*map(address, some[0].constants)] if some else [0] * self.constants
        inputs = self.functions[0].checked_type.arg_types
        words = [len(inputs), len(self.output_types(0)), self.constants, len(self.rows),
                 *[_row_bytes(t) if b else 0 for t, b in zip(inputs, self.batched)],
                 *[_row_bytes(t) for t in self.output_types(0)], *self.rows,
                 *[k.entry_address if k else 0 for k in kernels],
                 *[len(k.scratch) if k else 0 for k in kernels],
                 *[word for step in plan for word in step]]
        return constants, scratch, np.array(words, np.int64)

    def _kernels(self, levels: list[int]) -> list[Kernel | None]:
        """The kernels, those of `levels` compiled (together, in one LLVM module)."""
        with self._lock:
            missing = [level for level in levels if self.kernels[level] is None]
            built = compile_primitives([self.functions[level] for level in missing],
                                       opt_level=self.opt_level) if missing else []
            for level, kernel in zip(missing, built):
                self.kernels[level] = kernel
            return list(self.kernels)


def _leaves(t) -> list[TensorType]:
    if isinstance(t, TupleType):
        return [leaf for f in t.fields for leaf in _leaves(f)]
    return [t]


def compile_chunked(fn: Function, types: Sequence[TensorType], batched: Sequence[bool],
                    *, opt_level: int) -> ChunkedKernel | None:
    """`fn` for chunks of rows of its inputs of `types` (whose leading dimension is ignored
    where `batched`), or None when it is not row-separable. Its kernels are compiled when
    a call first needs them."""
    row = max(math.prod(t.shape[1:]) for t, b in zip(types, batched) if b)
    others = sum(math.prod(t.shape) for t, b in zip(types, batched) if not b)
    rows = chunk_levels(row, others)

    def at(n: int) -> Function:
        return specialize(fn, [TensorType((n, *t.shape[1:]), t.dtype) if b else t
                               for t, b in zip(types, batched)])

    # The proof at every size of two rows or more (a chunk of one row is the function
    # itself at one row, whose rules may index the row as 0 rather than by its axis)
    proven = [r for r in rows if r >= 2] or [2]
    try:
        functions = {r: at(r) for r in {*rows, *proven}}
        lowered = {r: lower(functions[r]) for r in proven}
        if not all(separable(lowered[r], lower(at(r + 1)), batched, r) for r in proven):
            return None
    except RelayError:  # typed only for some sizes (broadcast with a static dimension)
        return None
    constants = len(lowered[proven[0]].constants)  # (the same at every size)
    outputs = _leaves(functions[rows[0]].checked_type.ret_type)
    if any(math.prod(t.shape[1:]) == 0 for t in outputs):
        return None  # nothing to compute
    return ChunkedKernel([functions[r] for r in rows], rows, list(batched),
                         max(1, others // (row * PASS)), _driver(), opt_level, constants)


COPY = 0.5  # what copying a row in and out of a padded chunk costs, in rows computed
PASS = 16  # a row of a dense layer costs 2 flops per weight; reading the weights again
#            costs about what 1/PASS of a row's worth of weights in flops would (measured on an MLP)


def _row_bytes(t: TensorType) -> int:
    return math.prod(t.shape[1:]) * np.dtype(t.dtype).itemsize


DRIVER = "relaydsl_chunks"


@functools.cache
def _driver() -> int:
    """The address of the driver (one for every function, compiled once per process)."""
    text = str(_driver_ir(DRIVER))
    return jit.load_or_compile("chunks", [DRIVER], lambda: text, speed_level=2,
                               vectorize=False).address(DRIVER)


I1, I8, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(64)
PTR = I8.as_pointer()
WORD = ir.IntType(64).as_pointer()


def _driver_ir(symbol: str) -> ir.Module:
    """``void symbol(ptr table, ptr record)``: a call of a function generic in the batch
    size, its plan at the record's data slot (``ChunkedKernel.call``)::

        [inputs, outputs, constants, chunk sizes, row bytes per input (0: not batched)...,
         per output..., rows per chunk size..., kernel entries..., their scratch counts...,
         (first row, rows) per chunk size...]

    Per chunk size, whole chunks in place, then the rest through the padded buffers; the
    table is ``[inputs, outputs, constants, each kernel's scratch..., padded inputs...,
    padded outputs...]``."""
    module = ir.Module(name=symbol)
    module.triple = jit.host_target().triple
    module.data_layout = jit.data_layout()
    void = ir.VoidType()
    kernel_type = ir.FunctionType(void, [PTR.as_pointer()]).as_pointer()
    fn = ir.Function(module, ir.FunctionType(void, [PTR.as_pointer(), PTR]), symbol)
    memcpy = module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
    memset = module.declare_intrinsic("llvm.memset", [PTR, I64])
    g = Gen(module, fn)
    b = g.b
    table, record = fn.args

    def at(base: ir.Value, i: ir.Value | int) -> ir.Value:
        return b.gep(base, [I64(i) if isinstance(i, int) else i])

    def slot(i: ir.Value) -> ir.Value:
        return b.load(at(table, i))

    data = b.inttoptr(b.load(at(b.bitcast(record, WORD), 4)), WORD)  # KernelSite.DATA

    def word(i: ir.Value | int) -> ir.Value:
        return b.load(at(data, i))

    n_in, n_out, n_const, levels = word(0), word(1), word(2), word(3)
    io = b.add(n_in, n_out)
    row_bytes = I64(4)  # word indices
    sizes = b.add(row_bytes, io)
    entries = b.add(sizes, levels)
    counts = b.add(entries, levels)
    steps = b.add(counts, levels)
    first_scratch = b.add(io, n_const)
    total, scratch_at, padded_at = b.alloca(I64), b.alloca(I64), b.alloca(I64)
    b.store(I64(0), total)  # every kernel's scratch buffers: then the padded ones
    with g.loop(0, levels, name="total") as level:
        b.store(b.add(b.load(total), word(b.add(counts, level))), total)
    pads = b.add(first_scratch, b.load(total))
    inner = b.alloca(PTR, pads)  # a kernel's table: operands, constants, scratch
    with g.loop(0, n_const, name="constants") as i:
        b.store(slot(b.add(io, i)), at(inner, b.add(io, i)))
    b.store(first_scratch, scratch_at)

    with g.loop(0, levels, name="level") as level:
        size = word(b.add(sizes, level))
        kernel = b.inttoptr(word(b.add(entries, level)), kernel_type)
        count = word(b.add(counts, level))
        start = word(b.add(steps, b.mul(level, I64(2))))
        taken = word(b.add(steps, b.add(b.mul(level, I64(2)), I64(1))))
        with g.loop(0, count, name="scratch") as i:  # this kernel's scratch buffers
            b.store(slot(b.add(b.load(scratch_at), i)), at(inner, b.add(first_scratch, i)))
        b.store(b.add(b.load(scratch_at), count), scratch_at)

        chunks = b.udiv(taken, size)  # whole chunks, in place
        with g.loop(0, chunks, name="chunk") as c:
            row = b.add(start, b.mul(c, size))
            with g.loop(0, io, name="operand") as j:
                b.store(at(slot(j), b.mul(row, word(b.add(row_bytes, j)))), at(inner, j))
            b.call(kernel, [inner])

        row = b.add(start, b.mul(chunks, size))  # the rows left, padded
        left = b.sub(taken, b.mul(chunks, size))
        with b.if_then(b.icmp_unsigned("!=", left, I64(0)), likely=False):
            b.store(pads, padded_at)
            with g.loop(0, n_in, name="input") as j:
                rb = word(b.add(row_bytes, j))
                with b.if_else(b.icmp_unsigned("!=", rb, I64(0))) as (batched, other):
                    with batched:
                        padded, used = slot(b.load(padded_at)), b.mul(left, rb)
                        b.call(memcpy, [padded, at(slot(j), b.mul(row, rb)), used, I1(0)])
                        b.call(memset, [at(padded, used), I8(0),
                                        b.sub(b.mul(size, rb), used), I1(0)])
                        b.store(padded, at(inner, j))
                        b.store(b.add(b.load(padded_at), I64(1)), padded_at)
                    with other:
                        b.store(slot(j), at(inner, j))
            first_out = b.load(padded_at)
            with g.loop(0, n_out, name="output") as o:
                b.store(slot(b.add(first_out, o)), at(inner, b.add(n_in, o)))
            b.call(kernel, [inner])
            with g.loop(0, n_out, name="result") as o:
                rb = word(b.add(row_bytes, b.add(n_in, o)))
                b.call(memcpy, [at(slot(b.add(n_in, o)), b.mul(row, rb)),
                                slot(b.add(first_out, o)), b.mul(left, rb), I1(0)])
    b.ret_void()
    return module
