"""Kernels generic in a leading batch dimension: one compile serves every batch size.

A primitive function whose inputs have a leading dimension known only at run time (the
``n`` of ``Tensor[Float, ("n", 784)]``, a ``relay.Any``) is compiled for *chunks* of a few
sizes (64, 16, 4 and 1 rows of 784 floats; ``chunk_levels``), each once, when a call
first needs it, if its computation is row-separable: every row of every output depends
only on the same row of the batched inputs and on the other inputs whole (an MLP, softmax
over the last axis, a convolution over a batch of images), or the output is a float32 sum
over the rows of such values (a weight's gradient, a sum of losses); not a mean over the
batch (its 1/n), nor a reshape mixing rows. A *driver* then runs those kernels over the
``n`` rows of a call: whole chunks in place, and the last rows copied into a padded chunk
(spare rows zero, their results dropped; never for a sum), as the plan for ``n`` says
(``ChunkedKernel.plan``: the fewest rows computed, counting a chunk's re-reading of the
weights and the padded rows' copies). Each chunk's loops keep the static trip counts the
loop vectoriser wants; only the chunk loops are bounded by the run-time size.

The price, measured on an Intel Xeon (AVX-512, 2 cores): an MLP 784-512-512-10 runs in
1.05-1.5x the time of kernels compiled for the exact batch (its GEMMs pack their weights
again per chunk), a small MLP and LeNet in 0.8-1.2x; a new batch size costs 1-50 ms
instead of a 70-200 ms compile (executor.py gives a signature called often code of its
own).

Row separability is proven on the kernel's tensor expressions (``separable``), not assumed
from op names:

* a tensor is *batched* (on one of its axes, of the chunk's ``C`` rows) when it is a
  batched input or reads a batched tensor: every read of a batched tensor indexes its
  row axis with one index variable that appears nowhere else, the reader's own row axis
  (or the reduce axis of a sum over the rows): no value depends on another row, nor on a
  row's position; a tensor that reads none is batched when its leading axis has ``C``
  rows its values do not depend on (``zeros_like`` of a batch);
* every output is batched on its leading axis, or is a float32 sum over the rows that no
  other tensor reads (the driver adds up the chunks' sums);
* the expressions at ``C`` and at ``C + 1`` rows are the same but for those row axes:
  no constant depends on the batch size (a ``1 / n`` of a mean over the
  batch, a shape read as a value).

A function that is not separable (a mean over the batch, a reshape mixing rows) gets a
kernel generic in its sizes where generic.py proves one (te loops reading the sizes at run
time), else kernels per shape (native/sites.py).

One driver, compiled once per process, runs every such function at every size: native
code calls it with the kernels' buffer table (inputs and outputs of n rows, constants,
scratch, padded buffers) and the call's plan, from the site's record
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
from relaydsl.te.expr import (
    FloatImm, IntImm, IterVar, PrimExpr, Reduce, TensorRead, Var, children, post_order,
)
from relaydsl.te.tensor import Tensor
from relaydsl.transform.pipeline import CompileOptions

CHUNK_ELEMENTS = 1 << 15  # elements of the widest batched row times the largest chunk
SMALL_ELEMENTS = 1 << 9  # ... and times the smallest
MAX_CHUNK = 1 << 16  # rows
LEVEL = 4  # each chunk size this many times the next


def chunk_levels(row_elements: int, other_elements: int = 0, *, to_one: bool = False
                 ) -> list[int]:
    """The chunk sizes for rows of `row_elements`, largest first: powers of two from the
    first with CHUNK_ELEMENTS elements (64 rows of 784) down, LEVEL times smaller each, to
    the first with SMALL_ELEMENTS (1 row of 784, 64 of 10), or to 1 row (`to_one`: a sum
    over the rows cannot take padded ones); the largest holds at least `other_elements`
    (the weights a GEMM packs again for every chunk) too."""
    def first(elements: int) -> int:
        rows = 1
        while rows * max(row_elements, 1) < elements and rows < MAX_CHUNK:
            rows *= 2
        return rows

    levels = [first(max(CHUNK_ELEMENTS, other_elements))]
    smallest = 1 if to_one else first(SMALL_ELEMENTS)
    while levels[-1] > smallest:
        levels.append(max(levels[-1] // LEVEL, smallest))
    return levels


# ---- proving a lowered function row-separable ------------------------------------------


@dataclass
class Batching:
    """How the rows run through a lowered function: the axis of each batched tensor, the
    axes (output or reduce) that count rows, and the outputs that sum over the rows."""

    axis: dict[Tensor, int]
    row_axes: set[IterVar]
    sums: set[Tensor]


def separable(at_c: Lowered, at_c1: Lowered, batched: Sequence[bool], rows: int
              ) -> Batching | None:
    """How `at_c` (lowered with `rows` rows in the batched inputs) is row-separable, if
    it is, and `at_c1` (the same function at rows + 1) differs from it only in the rows:
    every output is batched on its leading axis, or a float32 sum over the rows."""
    if at_c.empty or at_c1.empty:
        return None
    found = _batching(at_c, batched, rows)
    if found is None or not all(found.axis.get(t) == 0 or t in found.sums
                                for t in at_c.outputs):
        return None
    again = _batching(at_c1, batched, rows + 1)
    if again is None or _fingerprint(at_c, found) != _fingerprint(at_c1, again):
        return None
    return found


def _batching(lowered: Lowered, batched: Sequence[bool], rows: int) -> Batching | None:
    """The batching of `lowered`, or None where a read breaks row separability.

    A computed tensor that reads batched tensors must index their row axis with one index
    variable, used nowhere else: one of its own axes (it is batched on that axis), or the
    reduce axis of a sum that is its whole body (it sums over the rows; then it is an
    output no other tensor reads). One that reads none is batched when it has a leading
    axis of the rows that its values do not depend on."""
    found = Batching({p: 0 for p, b in zip(lowered.params, batched) if b}, set(), set())
    if any(not p.shape or p.shape[0] != rows for p in found.axis):
        return None
    readers: dict[Tensor, int] = {}
    for t in _topological(lowered.outputs):
        if t.body is None:
            continue
        for r in t.inputs:
            readers[r] = readers.get(r, 0) + 1
        if not any(r in found.axis or r in found.sums for r in t.inputs):
            if t.shape and t.shape[0] == rows and \
                    not any(node is t.axes[0] for node in post_order(t.body)):
                found.axis[t] = 0  # the same in every row (zeros_like of a batch)
                found.row_axes.add(t.axes[0])
            continue
        if any(r in found.sums for r in t.inputs):
            return None  # a sum over the rows is known only after the last chunk
        row = _row_index(t, found.axis)
        if row is None or row.extent != rows:
            return None
        if row in t.axes:
            found.axis[t] = t.axes.index(row)
        elif (isinstance(t.body, Reduce) and t.body.name == "sum" and row in t.body.axes
              and t.dtype == "float32" and _is_zero(t.body.init)):
            found.sums.add(t)
        else:
            return None
        found.row_axes.add(row)
    if any(readers.get(t) for t in found.sums):
        return None
    return found


def _row_index(t: Tensor, axis: dict[Tensor, int]) -> IterVar | None:
    """The index variable with which `t` reads the rows of the batched tensors it reads,
    if it is one variable used for nothing else."""
    assert t.body is not None
    row: IterVar | None = None
    nodes = list(post_order(t.body))
    for node in nodes:
        if isinstance(node, TensorRead) and node.tensor in axis:
            index = node.indices[axis[node.tensor]]
            if not isinstance(index, IterVar) or (row is not None and index is not row):
                return None
            row = index
    if row is None:
        return None
    for node in nodes:
        reads_batch = isinstance(node, TensorRead) and node.tensor in axis
        for position, child in enumerate(_operands(node)):
            allowed = (reads_batch and position == axis[node.tensor]) or \
                (isinstance(node, Reduce) and position >= len(children(node)))  # its axes
            if child is row and not allowed:
                return None
    return row


def _is_zero(e: PrimExpr) -> bool:
    return isinstance(e, (IntImm, FloatImm)) and e.value == 0


def _operands(node: PrimExpr) -> tuple:
    if isinstance(node, Reduce):  # its axes too
        return (*children(node), *node.axes)
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


def _fingerprint(lowered: Lowered, batching: Batching) -> list[str]:
    """Every tensor and expression of `lowered` as text, nodes numbered in order of
    appearance, the rows written N (batched tensors' row axes, the axes counting rows)."""
    def dims(t: Tensor) -> str:
        shape = [str(d) for d in t.shape]
        if t in batching.axis:
            shape[batching.axis[t]] = "N"
        return f"{t.dtype}[{', '.join(shape)}]"

    names: dict[Tensor | PrimExpr, str] = {}
    lines: list[str] = []
    for i, p in enumerate(lowered.params):
        names[p] = f"param{i}"
        lines.append(f"param{i} {dims(p)}")
    for i, (c, _) in enumerate(lowered.constants):
        names[c] = f"const{i}"
        lines.append(f"const{i} {dims(c)}")

    def name(node) -> str:
        found = names.get(node)
        if found is None:
            found = names[node] = f"%{len(names)}"
            lines.append(f"{found} = {describe(node)}")
        return found

    def describe(node) -> str:
        if isinstance(node, Tensor):
            return f"placeholder {dims(node)}"
        kind = type(node).__name__
        fields = [f"{k}={getattr(node, k)!r}" for k in ("value", "name", "extent", "is_reduce")
                  if not isinstance(node, (Var, TensorRead))
                  and not isinstance(getattr(node, k, None), (PrimExpr, type(None)))]
        if node in batching.row_axes:
            fields = ["extent=N", f"is_reduce={node.is_reduce}"]
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
        names[t] = f"t{len(names)}"
    lines.append(f"outputs {[names[t] for t in lowered.outputs]}")
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
    sums: list[bool]  # per output: a sum over the rows (else batched on its leading axis)
    pass_rows: int  # what a chunk costs beyond its rows, in rows: reading the other inputs
    driver: int  # the driver's address
    options: CompileOptions  # what its kernels are compiled with
    constants: int  # how many the kernels hold (the same for every size)
    kernels: list[Kernel | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kernels = [None] * len(self.rows)
        self._lock = threading.Lock()

    def output_types(self, n: int) -> list[TensorType]:
        return [t if total else TensorType((n, *t.shape[1:]), t.dtype)
                for t, total in zip(_leaves(self.functions[0].checked_type.ret_type),
                                    self.sums)]

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
            if rest == 0 or level == len(self.rows) - 1:  # (a sum's last level is 1 row)
                return (padded if rest else cost), [left]
            lower, taken = best(rest, level + 1)
            if padded <= cost + lower and not any(self.sums):  # a sum takes no padded row
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
        padded_at = len(scratch)
        scratch += [nbytes((pad, *t.shape[1:]), t.dtype) for t, b in
                    zip(self.functions[0].checked_type.arg_types, self.batched) if b]
        scratch += [nbytes((pad, *t.shape[1:]), t.dtype)
                    for t, total in zip(self.output_types(pad), self.sums) if not total]
        some = [k for k in kernels if k]
        constants = [*map(address, some[0].constants)] if some else [0] * self.constants
        inputs = self.functions[0].checked_type.arg_types
        outputs = self.output_types(0)
        # per operand: row bytes (0: not batched), its padded buffer's or partial sum's slot
        # in the table, and a sum's bytes
        extra = len(inputs) + len(outputs) + len(constants) + padded_at
        operands = []
        for t, b in zip(inputs, self.batched):
            operands += [_row_bytes(t) if b else 0, extra if b else 0, 0]
            extra += b
        for t, total in zip(outputs, self.sums):
            operands += [0 if total else _row_bytes(t), 0 if total else extra, 0]
            extra += not total
        for o, (t, total) in enumerate(zip(outputs, self.sums)):
            if total:
                scratch.append(nbytes(t.shape, t.dtype))
                at = 3 * (len(inputs) + o)
                operands[at + 1:at + 3] = [extra, nbytes(t.shape, t.dtype)]
                extra += 1
        words = [len(inputs), len(outputs), self.constants, len(self.rows), *operands,
                 *self.rows, *[k.entry_address if k else 0 for k in kernels],
                 *[len(k.scratch) if k else 0 for k in kernels],
                 *[word for step in plan for word in step]]
        return constants, scratch, np.array(words, np.int64)

    def _kernels(self, levels: list[int]) -> list[Kernel | None]:
        """The kernels, those of `levels` compiled (together, in one LLVM module)."""
        with self._lock:
            missing = [level for level in levels if self.kernels[level] is None]
            built = compile_primitives([self.functions[level] for level in missing],
                                       self.options) if missing else []
            for level, kernel in zip(missing, built):
                self.kernels[level] = kernel
            return list(self.kernels)


def _leaves(t) -> list[TensorType]:
    if isinstance(t, TupleType):
        return [leaf for f in t.fields for leaf in _leaves(f)]
    return [t]


def compile_chunked(fn: Function, types: Sequence[TensorType], batched: Sequence[bool],
                    options: CompileOptions) -> ChunkedKernel | None:
    """`fn` for chunks of rows of its inputs of `types` (whose leading dimension is ignored
    where `batched`), or None when it is not row-separable. Its kernels are compiled when
    a call first needs them."""
    row = max(math.prod(t.shape[1:]) for t, b in zip(types, batched) if b)
    others = sum(math.prod(t.shape) for t, b in zip(types, batched) if not b)

    def at(n: int) -> Function:
        return specialize(fn, [TensorType((n, *t.shape[1:]), t.dtype) if b else t
                               for t, b in zip(types, batched)])

    def proof(rows: list[int]) -> tuple[dict[int, Function], Lowered, Batching] | None:
        # at every size of two rows or more (a chunk of one row is the function itself at
        # one row, whose rules may index the row as 0 rather than by its axis)
        proven = [r for r in rows if r >= 2] or [2]
        functions = {r: at(r) for r in {*rows, *proven}}
        found = []
        for r in proven:
            low = lower(functions[r])
            batching = separable(low, lower(at(r + 1)), batched, r)
            if batching is None:
                return None
            found.append((low, batching))
        sums = {tuple(t in b.sums for t in low.outputs) for low, b in found}
        return (functions, *found[0]) if len(sums) == 1 else None

    rows = chunk_levels(row, others)
    try:
        proven = proof(rows)
        if proven is not None and proven[2].sums and rows[-1] != 1:
            rows = chunk_levels(row, others, to_one=True)
            proven = proof(rows)
    except RelayError:  # typed only for some sizes (broadcast with a static dimension)
        return None
    if proven is None:
        return None
    functions, lowered, batching = proven
    outputs = _leaves(functions[rows[0]].checked_type.ret_type)
    if any(math.prod(t.shape[1:]) == 0 for t in outputs):
        return None  # nothing to compute
    return ChunkedKernel([functions[r] for r in rows], rows, list(batched),
                         [t in batching.sums for t in lowered.outputs],
                         max(1, others // (row * PASS)), _driver(), options,
                         len(lowered.constants))


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
    return jit.load_or_compile("chunks", [DRIVER], lambda: text).address(DRIVER)


I1, I8, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(64)
PTR = I8.as_pointer()
WORD = ir.IntType(64).as_pointer()


def _driver_ir(symbol: str) -> ir.Module:
    """``void symbol(ptr table, ptr plan)``: a call of a function generic in the batch
    size, as its plan says (``ChunkedKernel.call``; native code passes it from the site's
    record)::

        [inputs, outputs, constants, chunk sizes,
         per input and output: (row bytes (0: not batched), padded buffer's or partial
         sum's table slot, a sum's bytes)...,
         rows per chunk size..., kernel entries..., their scratch counts...,
         (first row, rows) per chunk size...]

    Per chunk size, whole chunks in place, then the rest through the padded buffers; an
    output summing over the rows takes the first chunk's sum, then adds each next chunk's
    from its partial buffer (zeros when there are no rows)."""
    module = ir.Module(name=symbol)
    module.triple = jit.host_target().triple
    module.data_layout = jit.data_layout()
    void, f32 = ir.VoidType(), ir.FloatType()
    kernel_type = ir.FunctionType(void, [PTR.as_pointer()]).as_pointer()
    fn = ir.Function(module, ir.FunctionType(void, [PTR.as_pointer(), PTR]), symbol)
    memcpy = module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
    memset = module.declare_intrinsic("llvm.memset", [PTR, I64])
    g = Gen(module, fn)
    b = g.b
    table, plan = fn.args

    def at(base: ir.Value, i: ir.Value | int) -> ir.Value:
        return b.gep(base, [I64(i) if isinstance(i, int) else i])

    def slot(i: ir.Value) -> ir.Value:
        return b.load(at(table, i))

    data = b.bitcast(plan, WORD)

    def word(i: ir.Value | int) -> ir.Value:
        return b.load(at(data, i))

    def nonzero(v: ir.Value) -> ir.Value:
        return b.icmp_unsigned("!=", v, I64(0))

    n_in, n_out, n_const, levels = word(0), word(1), word(2), word(3)
    io = b.add(n_in, n_out)
    sizes = b.add(I64(4), b.mul(io, I64(3)))
    entries = b.add(sizes, levels)
    counts = b.add(entries, levels)
    steps = b.add(counts, levels)
    first_scratch = b.add(io, n_const)

    def operand(j: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        at3 = b.add(I64(4), b.mul(j, I64(3)))
        return word(at3), word(b.add(at3, I64(1))), word(b.add(at3, I64(2)))

    total, scratch_at, started = b.alloca(I64), b.alloca(I64), b.alloca(I64)
    b.store(I64(0), total)
    with g.loop(0, levels, name="total") as level:
        b.store(b.add(b.load(total), word(b.add(counts, level))), total)
    inner = b.alloca(PTR, b.add(first_scratch, b.load(total)))  # a kernel's table
    with g.loop(0, n_const, name="constants") as i:
        b.store(slot(b.add(io, i)), at(inner, b.add(io, i)))
    b.store(first_scratch, scratch_at)
    b.store(I64(0), started)

    def run(kernel: ir.Value, row: ir.Value, left: ir.Value, size: ir.Value,
            padded: bool) -> None:
        """The kernel on rows [row, row + left) (a whole chunk in place, or `left` rows
        of a chunk of `size` through the padded buffers)."""
        first = b.icmp_unsigned("==", b.load(started), I64(0))
        with g.loop(0, io, name="operand") as j:
            rb, extra, sum_bytes = operand(j)
            is_input = b.icmp_unsigned("<", j, n_in)
            pointer = slot(j)
            if padded:
                with b.if_then(b.and_(is_input, nonzero(rb))):
                    used = b.mul(left, rb)
                    b.call(memcpy, [slot(extra), at(pointer, b.mul(row, rb)), used, I1(0)])
                    b.call(memset, [at(slot(extra), used), I8(0), b.sub(b.mul(size, rb), used),
                                    I1(0)])
                batched = slot(extra)
            else:
                batched = at(pointer, b.mul(row, rb))
            summed = b.select(first, pointer, slot(extra))
            chosen = b.select(nonzero(rb), batched,
                              b.select(nonzero(sum_bytes), summed, pointer))
            b.store(chosen, at(inner, j))
        b.call(kernel, [inner])
        with g.loop(0, n_out, name="result") as o:
            j = b.add(n_in, o)
            rb, extra, sum_bytes = operand(j)
            if padded:
                with b.if_then(nonzero(rb)):
                    b.call(memcpy, [at(slot(j), b.mul(row, rb)), slot(extra),
                                    b.mul(left, rb), I1(0)])
            with b.if_then(b.and_(nonzero(sum_bytes), b.not_(first))):
                out = b.bitcast(slot(j), f32.as_pointer())
                part = b.bitcast(slot(extra), f32.as_pointer())
                with g.loop(0, b.udiv(sum_bytes, I64(4)), name="add") as e:
                    b.store(b.fadd(b.load(at(out, e)), b.load(at(part, e))), at(out, e))
        b.store(I64(1), started)

    with g.loop(0, levels, name="level") as level:
        size = word(b.add(sizes, level))
        kernel = b.inttoptr(word(b.add(entries, level)), kernel_type)
        count = word(b.add(counts, level))
        start = word(b.add(steps, b.mul(level, I64(2))))
        taken = word(b.add(steps, b.add(b.mul(level, I64(2)), I64(1))))
        with g.loop(0, count, name="scratch") as i:  # this kernel's scratch buffers
            b.store(slot(b.add(b.load(scratch_at), i)), at(inner, b.add(first_scratch, i)))
        b.store(b.add(b.load(scratch_at), count), scratch_at)
        chunks = b.udiv(taken, size)
        with g.loop(0, chunks, name="chunk") as c:  # whole chunks, in place
            run(kernel, b.add(start, b.mul(c, size)), size, size, padded=False)
        left = b.sub(taken, b.mul(chunks, size))
        with b.if_then(nonzero(left), likely=False):  # the rows left, padded
            run(kernel, b.add(start, b.mul(chunks, size)), left, size, padded=True)

    no_rows = b.icmp_unsigned("==", b.load(started), I64(0))
    with b.if_then(no_rows, likely=False), g.loop(0, n_out, name="empty") as o:
        _, _, sum_bytes = operand(b.add(n_in, o))  # every sum is zero
        b.call(memset, [slot(b.add(n_in, o)), I8(0), sum_bytes, I1(0)])
    b.ret_void()
    return module
