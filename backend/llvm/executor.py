"""Running whole programs on compiled kernels: a static plan, a flow plan, or a dispatcher.

``compile_program(mod, entry, opt_level)`` prepares the module (the llvm pipeline of
relaydsl/transform/pipeline.py: grad lowering, inlining, the first-order gradient where it
applies, constant folding, fusion into primitive functions, A-normal form; see ``prepare``)
and picks how to run the entry function:

* ``StaticPlan`` (static_plan.py) for a first-order program with static shapes (a
  chain of calls of primitive functions, tuples and projections): kernels compiled
  together, intermediates in one arena shared by disjoint lifetimes, a call is one
  call into compiled code. A program whose dimensions are symbolic
  (``("n", 784)``) gets a plan per call signature.
* ``FlowPlan`` (flow_plan.py) for a static program with ``if`` and loops (local
  tail-recursive functions, which is what ``for`` and ``while`` become): a few
  instructions the native runtime interprets, again one call into compiled code.
* ``Dispatcher`` for everything else (closures, general recursion, data types,
  references): the reference interpreter's evaluation, where every call of a
  primitive function runs a compiled kernel instead of NumPy; kernels are
  compiled on first use, per argument shapes.

Arguments are checked against the entry's type by the frontend before any kernel
runs; the executors then hand each kernel only C-contiguous, aligned arrays of
exactly the shapes and dtypes it was compiled for (a plan binds and checks its
kernels once; the dispatcher keys its kernels by the arguments' shapes), so no
input can make compiled code touch memory out of bounds.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from relaydsl.backend.interpreter import Closure, Interpreter, TailCall, Value, evaluate
from relaydsl.backend.llvm.kernel import Kernel, compile_primitive
from relaydsl.backend.llvm.flow_plan import FlowPlan
from relaydsl.backend.llvm.static_plan import StaticPlan, contiguous, static_type
from relaydsl.ir.expr import Call, Expr, Function, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprMutator
from relaydsl.transform import pipeline
from relaydsl.transform.fuse_ops import is_primitive
from relaydsl.transform.pass_infra import PassContext


def prepare(mod: IRModule, context: PassContext) -> IRModule:
    """The module as the llvm target runs it: every op call inside a primitive function.

    The llvm pipeline (relaydsl/transform/pipeline.py) under `context`, whose opt_level
    is set: grad nodes lowered, and by level fusion, inlining, constant folding, the
    first-order gradient; every call let-bound (A-normal form).
    """
    return pipeline.run(mod, "llvm", context)


def compile_program(mod: IRModule, entry: str, *, opt_level: int = 3) -> "Program":
    """The runnable form of global `entry` of `mod` (typed, possibly with grad nodes)."""
    return Program(mod, entry, opt_level)


class Program:
    """A compiled entry point: ``program(*values)``; values checked against its type.

    A first-order entry with static shapes runs as a static plan; one with ``if`` and
    loops as a flow plan (flow_plan.py). An entry with symbolic dimensions
    (``Tensor[Float, ("n", 784)]``) that would be either gets a plan per call signature:
    on a call with new shapes the entry is re-typed with those shapes and planned. Other
    programs run on the dispatcher.
    """

    def __init__(self, source: IRModule, entry: str, opt_level: int):
        self.source, self.entry, self.opt_level = source, entry, opt_level
        # the pass settings it was built under, for the entry's re-preparation per signature
        self.context = replace(PassContext.current(), opt_level=opt_level)
        self.mod = prepare(source, self.context)
        fn = self.mod[entry]
        self.plan: StaticPlan | FlowPlan | None = None
        if StaticPlan.applies(fn):
            self.plan = StaticPlan.build(fn, opt_level)
        elif all(static_type(p.checked_type) for p in fn.params):
            self.plan = FlowPlan.build(fn, opt_level)
        self._per_signature = self.plan is None and \
            all(isinstance(p.checked_type, TensorType) for p in fn.params) and \
            (StaticPlan.applies(fn, static=False) or FlowPlan.applies(fn, static=False))
        self._plans: dict[tuple, StaticPlan | FlowPlan | None] = {}
        self._dispatcher = Dispatcher(self.mod, opt_level)

    @property
    def uses_static_plan(self) -> bool:
        return isinstance(self.plan, StaticPlan)

    @property
    def uses_flow_plan(self) -> bool:
        return isinstance(self.plan, FlowPlan)

    def __call__(self, *values: Value) -> Value:
        plan = self.plan or (self._plan_for(values) if self._per_signature else None)
        if plan is not None:
            return plan(*values)
        return evaluate(self.mod, *values, entry=self.entry, interpreter=self._dispatcher)

    def _plan_for(self, values: Sequence[Value]) -> "StaticPlan | FlowPlan | None":
        if not all(isinstance(v, np.ndarray) for v in values):
            return None
        key = tuple((v.shape, v.dtype.str) for v in values)
        if key not in self._plans:
            fn = prepare(specialize_entry(self.source, self.entry, values),
                         self.context)[self.entry]
            self._plans[key] = StaticPlan.build(fn, self.opt_level) \
                if StaticPlan.applies(fn) else FlowPlan.build(fn, self.opt_level)
        return self._plans[key]

    def call_closure(self, closure: Closure, args: Sequence[Value]) -> Value:
        return self._dispatcher.call(closure, args)


# ---- the dispatching executor -------------------------------------------------------------

class Dispatcher(Interpreter):
    """The interpreter, with calls of primitive functions running compiled kernels."""

    def __init__(self, mod: IRModule, opt_level: int = 3):
        super().__init__(mod)
        self.opt_level = opt_level
        self._kernels: dict[tuple, Kernel] = {}
        self._held: list[Function] = []  # keeps the ids in the kernel keys valid

    def _call(self, call: Call, env: dict[Var, Value], tail: bool) -> Value | TailCall:
        if not is_primitive(call.op):
            return super()._call(call, env, tail)
        args = [self._value(a, env) for a in call.args]
        arrays = [contiguous(a) for a in args]
        key = (id(call.op), *[(a.shape, a.dtype.str) for a in arrays])
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = compile_primitive(specialize(call.op, arrays), opt_level=self.opt_level)
            self._kernels[key] = kernel
            self._held.append(call.op)
        outputs = kernel.call_trusted(arrays)
        return tuple(outputs) if kernel.returns_tuple else outputs[0]


def specialize(fn: Function, args: Sequence[np.ndarray]) -> Function:
    """`fn` with parameters typed by the concrete arguments' shapes (for symbolic / Any dims)."""
    concrete = [TensorType(a.shape, a.dtype.name) for a in args]
    if all(p.checked_type == t for p, t in zip(fn.params, concrete)):
        return fn
    from relaydsl.typing import infer_type

    out = infer_type(_retyped(fn, concrete))
    assert isinstance(out, Function)
    return out


def specialize_entry(mod: IRModule, entry: str, args: Sequence[np.ndarray]) -> IRModule:
    """A copy of `mod` whose `entry` takes exactly the arguments' shapes, re-typed."""
    from relaydsl.typing import infer_types

    out = mod.copy()
    out.add(entry, _retyped(mod[entry], [TensorType(a.shape, a.dtype.name) for a in args]))
    return infer_types(out)


def _retyped(fn: Function, types: Sequence[TensorType]) -> Function:
    """`fn` with fresh parameters of `types` (the body's types are left to inference)."""
    params = [Var(p.name_hint, t) for p, t in zip(fn.params, types)]
    mapping = dict(zip(fn.params, params))

    class _Rebind(ExprMutator):
        def visit_var(self, v: Var) -> Expr:
            return mapping.get(v, v)

    return Function(params, _Rebind().visit(fn.body), None, (), fn.attrs, span=fn.span)
