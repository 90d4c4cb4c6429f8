"""The accel target: a program compiled for the simulated accelerator, and run on it.

``relay.build(f, target="accel", config=..., schedule=...)`` comes here (target.py):

1. the accel pipeline (pipeline.py): the llvm target's optimisations with batch norm and
   per-channel scales folded into the weights and constants folded, so that no scalar op
   is left over, and InlineAll, so that the network is one function, one call;
2. ``graph.extract``: the function as layers the accelerator has rules for;
3. ``schedule.schedule``: the fused groups, tiles and on-chip addresses;
4. ``isa.generate``: the instruction stream;
5. a call runs it on ``simulator.Simulator`` and returns the result as NumPy.

The report (``program.report``) is known from the build, before any call: the schedule is
static. A program that is not one network (control flow, recursion, ADTs, closures, an op
without an accelerator rule) runs its control on the host and its fused groups of op calls
on the accelerator (hybrid.py); its report says why and counts both.

>>> import numpy as np
>>> from relaydsl.ir import Call, Function, Op, TensorType, Var
>>> from relaydsl.ir.module import IRModule
>>> from relaydsl.typing import infer_types
>>> x = Var("x", TensorType((1, 2, 4, 4)))
>>> mod = infer_types(IRModule.from_expr(Function([x], Call(Op.get("relu"), [x]))))
>>> program = AccelProgram(mod, "main", AcceleratorConfig.deep_fusion(), "none")
>>> float(program(-np.ones((1, 2, 4, 4), np.float32)).max())
0.0
>>> program.report.dram_bytes   # 32 floats read, 32 written
256
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any as AnyValue, Sequence


from relaydsl.backend.accel.config import AcceleratorConfig
from relaydsl.backend.accel.graph import Graph, NotOnAccelerator, TensorInfo, extract
from relaydsl.backend.accel.hybrid import HybridProgram
from relaydsl.backend.accel.isa import generate
from relaydsl.backend.accel.layers import Region, full_region, region_size
from relaydsl.backend.accel.report import AccelReport
from relaydsl.backend.accel.schedule import schedule, tiles_seconds
from relaydsl.backend.accel.simulator import Simulator, dram_of
from relaydsl.ir.module import IRModule
from relaydsl.transform import pipeline

_log = logging.getLogger(__name__)


def compulsory_bytes(graph: Graph) -> int:
    """Inputs and weights read once, the result written once. Of an input, only what the
    result depends on -- the whole result's shape transferred back through every layer, row
    by row and column by column: a strided window skips rows and columns (the last ones,
    and those between its windows where it is narrower than its stride), and so may every
    layer before it, and a schedule's bands of rows and strips of columns skip them too.
    The rows and columns of an image (axes 2 and 3, which a layer reads apart) are kept
    exactly, the other axes as the span from first to last."""
    spans: dict[TensorInfo, Region] = {}
    exact: dict[TensorInfo, tuple[set[int], set[int]]] = {}

    def need(t: TensorInfo, region: Region, axes: tuple[int, ...] = (2, 3)) -> None:
        known = spans.get(t, region)
        spans[t] = tuple((min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(known, region))
        if len(t.shape) == 4:
            sets = exact.setdefault(t, (set(), set()))
            for axis in axes:
                sets[axis - 2].update(range(*region[axis]))

    need(graph.output, full_region(graph.output.shape))
    for layer in reversed(graph.layers):  # consumers before their producers
        out = spans.get(layer.output)
        if out is None:
            continue
        if layer.output not in exact or not layer.rule.row_tiles:
            for t, region in zip(layer.inputs, layer.rule.deduce(layer, out)):
                need(t, region)
            continue
        # one row (all the columns) at a time gives the rows an input needs, one column
        # (all the rows) at a time its columns
        for axis, indices in ((2, exact[layer.output][0]), (3, exact[layer.output][1])):
            for i in sorted(indices):
                band = tuple((i, i + 1) if a == axis else r for a, r in enumerate(out))
                for t, region in zip(layer.inputs, layer.rule.deduce(layer, band)):
                    need(t, region, (axis,))

    def size(t: TensorInfo) -> int:
        region = spans[t]
        if t not in exact:
            return region_size(region)
        rows, columns = exact[t]
        return region_size(region[:2]) * len(rows) * len(columns)

    return sum(size(t) * t.itemsize for t in spans if t.is_constant or t in graph.params) + \
        graph.output.nbytes


class AccelProgram:
    """`entry` of `mod` compiled for the accelerator `config` under `schedule_kind` (see the
    module docstring); called with the entry's arguments, it returns its result."""

    def __init__(self, mod: IRModule, entry: str, config: AcceleratorConfig,
                 schedule_kind: str):
        self.config, self.schedule_kind = config, schedule_kind
        self.mod = pipeline.for_target("accel", entry)(mod)
        self.entry = entry
        self.hybrid: HybridProgram | None = None
        try:
            self.graph = extract(self.mod[entry], config.dtype)
        except NotOnAccelerator as e:
            _log.info("@%s is not one network (%s): its control runs on the host, its fused "
                      "op groups on the accelerator", entry, e)
            self.hybrid = HybridProgram(self.mod, entry, config, schedule_kind, str(e))
            self.report = self.hybrid.report
            return
        self.groups = schedule(self.graph, config, schedule_kind)
        self.code = generate(self.groups)
        read: dict[str, int] = {}
        written: dict[str, int] = {}
        for g in self.groups:
            for name, n in g.read_bytes.items():
                read[name] = read.get(name, 0) + n
            for name, n in g.write_bytes.items():
                written[name] = written.get(name, 0) + n
        self.report = AccelReport(schedule_kind, config,
                                  tuple(g.report() for g in self.groups), read, written,
                                  compulsory_bytes(self.graph))
        _log.info("@%s on the accelerator: %s", entry, self.report.summary())

    def __call__(self, *values: AnyValue) -> AnyValue:
        if self.hybrid is not None:
            result = self.hybrid(*values)
            self.report = self.hybrid.report
            return result
        dram = dram_of(self.graph, list(values))
        counters = Simulator(self.config).run(self.code, dram)
        start, tiles_per_group = 0, []
        for g in self.groups:
            tiles_per_group.append(counters.tiles[start:start + len(g.tiles)])
            start += len(g.tiles)
        groups = tuple(  # the simulator's own counts
            replace(r, dram_read_bytes=sum(t.load_bytes for t in tiles),
                    dram_write_bytes=sum(t.store_bytes for t in tiles),
                    macs=sum(t.mac_ops for t in tiles), alu_ops=sum(t.alu_ops for t in tiles),
                    seconds=tiles_seconds(tiles, self.config))
            for r, tiles in zip(self.report.groups, tiles_per_group))
        self.report = AccelReport(self.schedule_kind, self.config, groups,
                                  counters.read_bytes, counters.write_bytes,
                                  self.report.compulsory_bytes)
        return dram[self.graph.output]

    def call_closure(self, closure: AnyValue, args: Sequence[AnyValue]) -> AnyValue:
        if self.hybrid is not None:
            return self.hybrid.call_closure(closure, args)
        raise TypeError("a program on the accelerator returns tensors, not functions")
