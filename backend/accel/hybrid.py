"""A program that is not one network: its control on the host, its layers on the accelerator.

A program with control flow, recursion, ADTs or closures (a TreeLSTM, a loop over a layer)
cannot be one instruction stream. Here its op calls are fused into primitive functions
and bound once each (FuseOps and ToANormalForm, as for llvm: native code takes A-normal
form), and the program runs as the llvm target runs one: as native code
(backend/llvm/native), its control compiled, each call of a primitive function a kernel
call. A primitive function the accelerator has rules for is an external kernel there
(native/externals.py): native code calls out to Python, which simulates the call on the
accelerator -- the function scheduled once at build (its layers, groups and instructions,
as a whole network's), its arguments moved from the host to the accelerator's DRAM and its
result back into the host's memory. The rest (splits, losses, integer arithmetic) are
compiled llvm kernels, called natively. What the simulator raises is raised by the call.

A program native code does not run (a function passed in from Python) runs its control on
the reference interpreter instead, whose ``call_primitive`` hook sends the same calls to
the accelerator or to compiled kernels (as llvm's dispatcher does).

The report of a call sums what its primitive calls cost on the accelerator (each group
once per call), and counts the calls that ran on the host (native code counts them) and
the bytes moved between the host and the accelerator.
"""
from __future__ import annotations

import logging
from typing import Any as AnyValue, Sequence

import numpy as np

from relaydsl.backend.accel.config import AcceleratorConfig
from relaydsl.backend.accel.graph import Graph, NotOnAccelerator, extract
from relaydsl.backend.accel.isa import Instr, generate
from relaydsl.backend.accel.report import AccelReport, GroupReport
from relaydsl.backend.accel.schedule import GroupPlan, schedule
from relaydsl.backend.accel.simulator import Simulator, dram_of
from relaydsl.backend.interpreter import Interpreter, Value, evaluate
from relaydsl.backend.llvm.executor import PrimitiveKernels
from relaydsl.backend.llvm.lower import stable_digest
from relaydsl.backend.llvm.native import ExternalKernel, NativeProgram, Unsupported
from relaydsl.ir.expr import Function
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import FuncType, TensorType
from relaydsl.transform import pipeline
from relaydsl.transform.pipeline import CompileOptions

_log = logging.getLogger(__name__)


class _Offloaded:
    """A primitive function compiled for the accelerator, and its calls in the last run."""

    def __init__(self, name: str, graph: Graph, groups: list[GroupPlan], code: list[Instr]):
        self.name, self.graph, self.groups, self.code = name, graph, groups, code
        self.calls = 0


class HybridProgram:
    """`entry` of `mod` on the host, its primitive functions on the accelerator where it has
    rules for them (see the module docstring). `reason` says why the program is not one
    network. `native` False runs the control on the interpreter even where native code
    could (to compare the two)."""

    def __init__(self, mod: IRModule, entry: str, config: AcceleratorConfig,
                 schedule_kind: str, reason: str, *, native: bool = True):
        self.config, self.schedule_kind, self.reason = config, schedule_kind, reason
        self.mod = pipeline.accel_host_split()(mod)
        self.entry = entry
        options = CompileOptions.for_target("llvm")
        self._interpreter = Interpreter(self.mod, call_primitive=self._primitive)
        self._host = PrimitiveKernels(options)
        self._compiled: dict[Function, _Offloaded | None] = {}
        # primitive functions equal but for their object (each block of a ResNet) share one
        # schedule (a chain of 110 residual blocks builds in 0.49 s rather than 1.25)
        self._by_digest: dict[str, _Offloaded | None] = {}
        self._host_calls = self._transfer_bytes = 0
        self.native: NativeProgram | None = None
        if native:
            try:
                self.native = NativeProgram(self.mod, entry, options, externals=self._external,
                                            count_calls=True)
            except Unsupported as e:
                _log.info("@%s: its control runs on the interpreter, as native code does not "
                          "apply: %s", entry, e)
        self.report = AccelReport(schedule_kind, config, (), host=reason)

    @property
    def path(self) -> str:
        """Where the control runs: "native" code or the "interpreter"."""
        return "native" if self.native is not None else "interpreter"

    def _compile(self, fn: Function) -> _Offloaded | None:
        if fn not in self._compiled:
            digest = stable_digest(fn)
            if digest not in self._by_digest:
                self._by_digest[digest] = self._offload(fn, f"f{len(self._by_digest)}")
            self._compiled[fn] = self._by_digest[digest]
        return self._compiled[fn]

    def _offload(self, fn: Function, name: str) -> _Offloaded | None:
        try:
            graph = extract(fn, self.config.dtype)
        except NotOnAccelerator:
            return None
        groups = schedule(graph, self.config, self.schedule_kind)
        return _Offloaded(name, graph, groups, generate(groups))

    def _external(self, fn: Function) -> ExternalKernel | None:
        """Native code's hook: `fn` as an external kernel simulating it on the accelerator,
        or None (a compiled kernel on the host) when the accelerator has no rules for it."""
        offloaded = self._compile(fn)
        if offloaded is None:
            return None
        t = fn.checked_type
        assert isinstance(t, FuncType)
        inputs = [p for p in t.arg_types if isinstance(p, TensorType)]
        assert len(inputs) == len(t.arg_types) and isinstance(t.ret_type, TensorType), \
            "the accelerator takes tensors and gives one"

        def simulate(args: list[np.ndarray], outputs: list[np.ndarray]) -> None:
            outputs[0][...] = self._simulate(offloaded, args)

        return ExternalKernel(simulate, inputs, [t.ret_type])

    def _primitive(self, fn: Function, args: list[Value]) -> Value:
        """The interpreter's hook: a call of primitive function `fn` on `args`."""
        offloaded = self._compile(fn)
        if offloaded is None:
            self._host_calls += 1
            return self._host(fn, args)
        return self._simulate(offloaded, args)

    def _simulate(self, offloaded: _Offloaded, args: Sequence[Value]) -> np.ndarray:
        """A call of `offloaded` on the accelerator: its arguments moved to its DRAM, the
        instructions simulated, the result as the host receives it."""
        graph = offloaded.graph
        dram = dram_of(graph, list(args))
        Simulator(self.config).run(offloaded.code, dram)
        offloaded.calls += 1
        result = dram[graph.output]
        self._transfer_bytes += sum(dram[p].nbytes for p in graph.params) + result.nbytes
        return result

    def __call__(self, *values: AnyValue) -> AnyValue:
        for o in self._by_digest.values():
            if o is not None:
                o.calls = 0
        self._host_calls = self._transfer_bytes = 0
        if self.native is None:
            result = evaluate(self.mod, *values, entry=self.entry,
                              interpreter=self._interpreter)
        else:
            self.native.call_counts(reset=True)
            result = self.native(*values)
            self._host_calls = sum(n for fn, n in self.native.call_counts().items()
                                   if self._compiled.get(fn) is None)
        self.report = self._report()
        return result

    def call_closure(self, closure: AnyValue, args: Sequence[AnyValue]) -> AnyValue:
        return self._interpreter.call(closure, args)

    def _report(self) -> AccelReport:
        groups: list[GroupReport] = []
        read: dict[str, int] = {}
        written: dict[str, int] = {}
        offloaded_calls = 0
        for o in self._by_digest.values():
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

