"""A program that is not one network: its control on the host, its layers on the accelerator.

A program with control flow, recursion, ADTs or closures (a TreeLSTM, a loop over a layer)
cannot be one instruction stream. Here its op calls are fused into primitive functions
(FuseOps, as for llvm), and the program runs as the llvm target's dispatcher runs one: its
control on the reference interpreter, whose ``call_primitive`` hook sends each call of a
primitive function to the accelerator. There the function is scheduled once (its layers,
groups and instructions, as a whole network's) and each call simulated, its arguments moved
from the host to the accelerator's DRAM and its result back. A primitive function the
accelerator has no rule for (splits, losses, integer arithmetic) runs on the host as a
compiled llvm kernel. (The control stays on the interpreter rather than in llvm's native
code because native code cannot call back into the simulator.)

The report of a call sums what its primitive calls cost on the accelerator (each group
once per call), and counts the calls that ran on the host and the bytes moved between the
host and the accelerator.
"""
from __future__ import annotations

from typing import Any as AnyValue, Sequence


from relaydsl.backend.accel.config import AcceleratorConfig
from relaydsl.backend.accel.graph import Graph, NotOnAccelerator, extract
from relaydsl.backend.accel.isa import Instr, generate
from relaydsl.backend.accel.report import AccelReport, GroupReport
from relaydsl.backend.accel.schedule import GroupPlan, schedule
from relaydsl.backend.accel.simulator import Simulator, dram_of
from relaydsl.backend.interpreter import Interpreter, Value, evaluate
from relaydsl.backend.llvm.executor import PrimitiveKernels
from relaydsl.ir.expr import Function
from relaydsl.ir.module import IRModule
from relaydsl.transform import pipeline
from relaydsl.transform.pipeline import CompileOptions


class _Offloaded:
    """A primitive function compiled for the accelerator, and its calls in the last run."""

    def __init__(self, name: str, graph: Graph, groups: list[GroupPlan], code: list[Instr]):
        self.name, self.graph, self.groups, self.code = name, graph, groups, code
        self.calls = 0


class HybridProgram:
    """`entry` of `mod` on the host, its primitive functions on the accelerator where it has
    rules for them (see the module docstring). `reason` says why the program is not one
    network."""

    def __init__(self, mod: IRModule, entry: str, config: AcceleratorConfig,
                 schedule_kind: str, reason: str):
        self.config, self.schedule_kind, self.reason = config, schedule_kind, reason
        self.mod = pipeline.accel_host_split()(mod)
        self.entry = entry
        self._interpreter = Interpreter(self.mod, call_primitive=self._primitive)
        self._host = PrimitiveKernels(CompileOptions.for_target("llvm"))
        self._compiled: dict[Function, _Offloaded | None] = {}
        self._host_calls = self._transfer_bytes = 0
        self.report = AccelReport(schedule_kind, config, (), host=reason)

    def _compile(self, fn: Function) -> _Offloaded | None:
        if fn not in self._compiled:
            try:
                graph = extract(fn, self.config.dtype)
            except NotOnAccelerator:
                self._compiled[fn] = None
            else:
                groups = schedule(graph, self.config, self.schedule_kind)
                name = f"f{len(self._compiled)}"
                self._compiled[fn] = _Offloaded(name, graph, groups, generate(groups))
        return self._compiled[fn]

    def _primitive(self, fn: Function, args: list[Value]) -> Value:
        offloaded = self._compile(fn)
        if offloaded is None:
            self._host_calls += 1
            return self._host(fn, args)
        graph = offloaded.graph
        dram = dram_of(graph, args)
        Simulator(self.config).run(offloaded.code, dram)
        offloaded.calls += 1
        result = dram[graph.output]
        self._transfer_bytes += sum(dram[p].nbytes for p in graph.params) + result.nbytes
        return result

    def __call__(self, *values: AnyValue) -> AnyValue:
        for o in self._compiled.values():
            if o is not None:
                o.calls = 0
        self._host_calls = self._transfer_bytes = 0
        result = evaluate(self.mod, *values, entry=self.entry, interpreter=self._interpreter)
        self.report = self._report()
        return result

    def call_closure(self, closure: AnyValue, args: Sequence[AnyValue]) -> AnyValue:
        return self._interpreter.call(closure, args)

    def _report(self) -> AccelReport:
        groups: list[GroupReport] = []
        read: dict[str, int] = {}
        written: dict[str, int] = {}
        offloaded_calls = 0
        for o in self._compiled.values():
            if o is None or not o.calls:
                continue
            offloaded_calls += o.calls
            for g in o.groups:
                groups.append(g.report(o.calls, f"{o.name}."))
                for totals, counts in ((read, g.read_bytes), (written, g.write_bytes)):
                    for name, n in counts.items():
                        key = f"{o.name}.{name}"
                        totals[key] = totals.get(key, 0) + n * o.calls
        return AccelReport(self.schedule_kind, self.config, tuple(groups), read, written,
                           host=self.reason, host_calls=self._host_calls,
                           offloaded_calls=offloaded_calls,
                           transfer_bytes=self._transfer_bytes)

