"""Scheduling a lowered primitive function: what to inline, what to materialise, how to loop.

The rules (TVM's schedule primitives, decided automatically):

* **inline** (``compute_inline``): a stage without a reduction is substituted
  into its consumers, unless it is a kernel output, an input of a template op,
  or *expensive* (its inlined cost, counting transcendental calls, is high) and
  would be evaluated more than once per element (several consumers, a
  broadcasting read, a read inside a reduction that does not depend on the
  reduction's axes).
* **materialise**: reductions, kernel outputs, template ops (a hand-written
  kernel from ``backend.llvm.templates``, e.g. dense or conv2d) and their
  inputs, and the expensive shared stages above. Intermediates live in scratch
  buffers that a kernel binding allocates once.
* **loop order**: the output axes in order, the reduction inside (a reduction
  over the innermost contiguous axis vectorises with reassociation), except
  that a reduction whose reads are contiguous along the *output's* innermost
  axis and strided along its own (``sum(x, axis=0)``, ``matmul``'s ``B[k, j]``)
  accumulates whole rows: ``for r: for j: row[j] += x[r, j]``.
* **parallel**: the leading output axes are flattened into one loop, of at
  least ``4 * cores`` iterations where the shape allows, that the kernel
  splits across threads when the stage's work exceeds ``PARALLEL_WORK``
  scalar operations; the innermost axis keeps a constant trip count and is the
  one the loop vectoriser widens.
* **epilogues** (``compute_at``): a stage right after a template's that reads the
  template's tensor only at its own element (bias, relu, a requantization: ``pointwise``)
  is its ``epilogue``; codegen may run the two image by image, so the template's result
  is read back from cache rather than from memory (codegen.py, ``_chain``). A template
  that takes an epilogue in registers (the direct int8 conv2d) gets it as part of itself
  where every expression of it can run on a vector of the template's results
  (epilogue.py): the two are one stage, the template's result never stored.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from relaydsl import settings
from relaydsl.errors import IRError
from relaydsl.te.expr import (
    Call, Div, FloorDiv, FloorMod, IterVar, PrimExpr, Reduce, TensorRead, post_order,
)
from relaydsl.te.tensor import Tensor
from relaydsl.backend.llvm import templates
from relaydsl.backend.llvm.epilogue import register_epilogue
from relaydsl.backend.llvm.lower import Lowered
from relaydsl.backend.llvm.templates import AnyTemplate
from relaydsl.op.nn.linear import dense

if TYPE_CHECKING:
    from relaydsl.backend.llvm.generic import Symbolic

PARALLEL_WORK = 150_000  # scalar operations below which a stage runs on the calling thread
EXPENSIVE = 12  # inlined cost at which recomputation is avoided
ROW_BYTES = 64 * 1024  # largest accumulator row kept on the stack


@dataclass(eq=False)
class Stage:
    """One materialised tensor and how its loop nest runs."""

    tensor: Tensor
    reads: list[Tensor]  # the buffers it reads, in its function's argument order
    template: AnyTemplate | None = None  # a hand-written kernel, or None: a te loop nest
    outer: int = 0  # leading output axes flattened into the parallel loop
    row_reduce: bool = False
    extent: int = 1  # parallel units
    work: float = 0.0
    parallel: bool = False
    symbol: str = ""
    epilogue: bool = False  # pointwise in the previous stage, a template's (see pointwise)
    # sizes known at run time (generic.py): the work is the stage's elements times these
    # reduce axes' trips times `per_point`, and parallel where that reaches PARALLEL_WORK
    reduce_axes: list[IterVar] = field(default_factory=list)
    per_point: int = 1
    parallel_at_run_time: bool = False


@dataclass(eq=False)
class Schedule:
    lowered: Lowered
    stages: list[Stage]
    inlined: set[Tensor]
    buffers: list[Tensor]  # params, outputs, constants, [sizes], scratch: the argument slots
    scratch: list[Tensor] = field(default_factory=list)
    # sizes known only at run time (generic.py), read from the sizes slot; None: all static
    symbolic: "Symbolic | None" = None


def size(t: Tensor) -> int:
    return math.prod(t.shape)


def node_cost(e: PrimExpr) -> int:
    if isinstance(e, Call):
        return e.intrinsic.cost
    if isinstance(e, (Div, FloorDiv, FloorMod)):
        return 3 if e.dtype.startswith("float") else 6
    return 1


def template_for(lowered: Lowered, t: Tensor) -> tuple[AnyTemplate, list[Tensor]] | None:
    """The template kernel for the op that made ``t``, if one exists, and what it reads.

    An operand that is a 2-D transpose of a kernel input (fusion puts such transposes with
    their contraction) is read in place through strides where the template can: it then
    reads the input, and the transpose is never computed.
    """
    origin = lowered.origin.get(t)
    if origin is None or not origin.is_result:
        return None
    if origin.op is dense and math.prod(origin.out_type.shape[:-1]) == 1:
        # one row (a matrix-vector product: an RNN step at batch 1) reads each weight once;
        # the generic code's vectorised row reductions beat packing the weight for the GEMM
        # (4.5 us against 13 us for 1x128 . 512x128^T)
        return None
    sources = {i: s for i, x in enumerate(origin.args)
               if (s := _transposed_input(lowered, x)) is not None}
    held = dict(lowered.constants)
    constants = {i: held[x] for i, x in enumerate(origin.args) if x in held}
    template = templates.template_for(origin.op, origin.attrs, origin.arg_types,
                                      origin.out_type, transposable=sorted(sources),
                                      constants=constants)
    if template is None:
        return None
    args = [sources[i] if i in template.transposed else x for i, x in enumerate(origin.args)]
    return template, args


def _transposed_input(lowered: Lowered, x: Tensor) -> Tensor | None:
    """The kernel input `x` is the 2-D transpose of, if it is one."""
    origin = lowered.origin.get(x)
    if origin is None or not origin.op.traits.transpose or not origin.is_result:
        return None
    axes = origin.attrs.axes
    source = origin.args[0]
    if (axes is not None and tuple(axes) not in ((1, 0), (-1, -2))) or \
            source not in lowered.params:
        return None
    return source


def schedule(lowered: Lowered, prefix: str, symbolic: "Symbolic | None" = None) -> Schedule:
    """How `lowered` runs; with `symbolic` (a kernel generic in its sizes, generic.py) te
    loop nests only (templates need static shapes), serial, and the sizes' buffer a slot
    after the constants."""
    chosen: dict[Tensor, AnyTemplate] = {}
    operands: dict[Tensor, list[Tensor]] = {}  # what each template reads

    def producers(t: Tensor) -> list[Tensor]:
        if t in chosen:
            return operands[t]
        return [] if t.body is None else t.inputs

    # Topological order of the computed tensors the outputs need.
    order: list[Tensor] = []
    seen: set[Tensor] = set()
    for out in lowered.outputs:
        stack: list[tuple[Tensor, bool]] = [(out, False)]
        while stack:
            t, expanded = stack.pop()
            if expanded:
                order.append(t)
                continue
            if t in seen or t.body is None:
                continue
            seen.add(t)
            found = None if symbolic is not None else template_for(lowered, t)
            if found is not None:
                chosen[t], operands[t] = found
            stack.append((t, True))
            stack.extend((p, False) for p in reversed(producers(t)))

    consumers: dict[Tensor, list[Tensor]] = {t: [] for t in order}
    for t in order:
        for p in producers(t):
            if p in consumers:
                consumers[p].append(t)

    outputs = set(lowered.outputs)
    forced = {p for t in chosen for p in producers(t)}
    inlined: set[Tensor] = set()
    cost: dict[Tensor, int] = {}
    for t in order:  # producers first, so an inlined producer's cost is known
        if t in chosen:
            continue
        body = t.body
        assert body is not None
        has_reduce = False
        c = 0
        for node in post_order(body):
            c += node_cost(node)
            if isinstance(node, Reduce):
                has_reduce = True
            elif isinstance(node, TensorRead) and node.tensor in inlined:
                c += cost[node.tensor]
        cost[t] = c
        for p in producers(t):
            if p in lowered.empty and size(t) > 0:
                raise IRError(f"llvm backend: {t.name} reads the empty tensor {p.name}")
        if t in outputs or t in forced or has_reduce:
            continue
        if c < EXPENSIVE or _evaluations(t, consumers[t]) <= 1.5 * size(t):
            inlined.add(t)

    stages: list[Stage] = []
    for t in order:
        if t in inlined:
            continue
        stage = Stage(t, list(producers(t)) if t in chosen else _buffer_reads(t, inlined),
                      chosen.get(t))
        stage.symbol = f"{prefix}_s{len(stages)}"
        _plan_loops(stage, inlined)
        if symbolic is not None:  # its sizes are not these: the leading axis, parallel if
            stage.parallel = False  # its work says so; rows up to ROW_BYTES at run time
            stage.outer = min(1, t.ndim - 1 if stage.row_reduce else t.ndim)
            stage.parallel_at_run_time = stage.template is None and t.ndim >= 1 and \
                settings.num_threads() > 1
        stages.append(stage)

    for before, stage in pairwise(stages):
        stage.epilogue = before.template is not None and stage.template is None and \
            pointwise(stage.tensor, before.tensor, inlined)
    stages = _in_registers(stages, inlined, outputs)

    scratch = [s.tensor for s in stages if s.tensor not in outputs]
    constants = [c for c, _ in lowered.constants]
    sizes = [] if symbolic is None else [symbolic.sizes]
    buffers = [*lowered.params, *lowered.outputs, *constants, *sizes, *scratch]
    return Schedule(lowered, stages, inlined, buffers, scratch, symbolic)


def _in_registers(stages: list[Stage], inlined: set[Tensor], outputs: set[Tensor]
                  ) -> list[Stage]:
    """Each template stage whose template takes an epilogue in registers (its
    ``epilogue_axes``) and whose result only its epilogue stage reads, joined with that
    stage where the epilogue can run so (epilogue.py): one stage computing the epilogue's
    tensor, reading the template's operands and then the epilogue's buffers."""
    out: list[Stage] = []
    for stage in stages:
        before = out[-1] if out else None
        template = before.template if before is not None else None
        if before is None or template is None or template.epilogue_axes is None or \
                not stage.epilogue or before.tensor in outputs or \
                any(before.tensor in s.reads for s in stages if s is not stage):
            out.append(stage)
            continue
        epi = register_epilogue(stage.tensor, before.tensor, inlined, template.epilogue_axes)
        if epi is None or set(epi.reads) != set(stage.reads) - {before.tensor}:
            out.append(stage)
            continue
        out[-1] = Stage(stage.tensor, [*before.reads, *epi.reads],
                        replace(template, epilogue=epi), symbol=before.symbol)
    return out


def pointwise(t: Tensor, source: Tensor, inlined: set[Tensor]) -> bool:
    """Whether ``t`` (of ``source``'s shape) reads ``source`` only at its own element, with
    no reduction, directly or through inlined stages that do the same: each element of
    ``t`` can be computed as soon as that element of ``source`` is."""
    if t.shape != source.shape or t.body is None:
        return False
    reads: dict[Tensor, bool] = {}  # inlined tensors: whether they read source at all

    def reads_source(u: Tensor) -> bool:
        if u not in reads:
            assert u.body is not None
            reads[u] = any(isinstance(n, TensorRead) and (n.tensor is source or (
                n.tensor in inlined and reads_source(n.tensor))) for n in post_order(u.body))
        return reads[u]

    def at_own_element(u: Tensor) -> bool:
        assert u.body is not None
        for node in post_order(u.body):
            if isinstance(node, Reduce):
                return False
            if not isinstance(node, TensorRead):
                continue
            via = node.tensor in inlined and reads_source(node.tensor)
            if node.tensor is not source and not via:
                continue
            own = node.tensor.shape == u.shape and len(node.indices) == len(u.axes) and \
                all(i is a for i, a in zip(node.indices, u.axes))
            if not own or (node.tensor is not source and not at_own_element(node.tensor)):
                return False
        return True

    return at_own_element(t)


def _evaluations(t: Tensor, consumers: list[Tensor]) -> float:
    """How often ``t``'s elements would be computed if it were inlined into ``consumers``."""
    total = 0.0
    for c in consumers:
        assert c.body is not None
        total += size(c) * _reads_inside(c.body, t, 1)
    return total


def _reads_inside(e: PrimExpr, t: Tensor, repeat: int) -> int:
    """Reads of ``t`` in ``e``, each weighted by the trip count of the reductions around it.

    ``e`` is a DAG (a hash reuses its operand in dozens of terms): each distinct node counts
    once, as the code generator evaluates it once and as the cost above counts it; a walk of
    the tree would take exponential time."""
    from relaydsl.te.expr import children

    total, seen = 0, set()
    stack = [(e, repeat)]
    while stack:
        node, times = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, TensorRead) and node.tensor is t:
            total += times
        elif isinstance(node, Reduce):
            stack.append((node.source, times * math.prod(a.extent for a in node.axes)))
            stack.append((node.init, times))
        else:
            stack.extend((c, times) for c in children(node))
    return total


def _buffer_reads(t: Tensor, inlined: set[Tensor]) -> list[Tensor]:
    """The materialised tensors ``t``'s body reads, through inlined producers."""
    found: dict[Tensor, None] = {}
    visited: set[Tensor] = set()
    stack = [t]
    while stack:
        u = stack.pop()
        if u in visited:
            continue
        visited.add(u)
        assert u.body is not None
        for node in post_order(u.body):
            if isinstance(node, TensorRead):
                if node.tensor in inlined:
                    stack.append(node.tensor)
                else:
                    found.setdefault(node.tensor, None)
    return list(found)


def _plan_loops(stage: Stage, inlined: set[Tensor]) -> None:
    t = stage.tensor
    n = t.ndim
    threads = settings.num_threads()
    if stage.template is not None:  # extent and work come from the template's StageInfo
        return
    body = t.body
    assert body is not None
    reduces = [node for node in post_order(body) if isinstance(node, Reduce)]
    reduce_trips = math.prod(math.prod(a.extent for a in r.axes) for r in reduces) or 1
    per_point = sum(node_cost(node) for node in post_order(body))
    stage.reduce_axes = [a for r in reduces for a in r.axes]
    stage.per_point = max(1, per_point // 2)
    stage.work = float(size(t)) * max(1, reduce_trips) * max(1, per_point // 2)
    if len(reduces) == 1 and n >= 1 and _row_better(reduces[0], t.axes[-1]):
        itemsize = 8
        stage.row_reduce = t.shape[-1] * itemsize <= ROW_BYTES
    limit = n - 1 if (n >= 2 or stage.row_reduce) else n
    outer = limit
    for k in range(1, limit + 1):
        if math.prod(t.shape[:k]) >= 4 * threads:
            outer = k
            break
    stage.outer = outer
    stage.extent = math.prod(t.shape[:outer])
    stage.parallel = stage.work >= PARALLEL_WORK and stage.extent >= 2 and threads > 1


def _row_better(r: Reduce, last: IterVar) -> bool:
    inner = r.axes[-1]
    return _contiguity(r.source, last) > _contiguity(r.source, inner)


def _contiguity(e: PrimExpr, v: IterVar) -> int:
    """+1 per read whose last index moves with ``v``, -1 per read that ``v`` strides."""
    score = 0
    for node in post_order(e):
        if isinstance(node, TensorRead) and node.indices:
            *lead, last = node.indices
            if _uses(last, v):
                score += 1
            elif any(_uses(i, v) for i in lead):
                score -= 1
    return score


def _uses(e: PrimExpr, v: IterVar) -> bool:
    return any(node is v for node in post_order(e))
