"""Running whole programs on compiled kernels: a plan, or the dispatcher.

``compile_program(mod, entry, opt_level)`` prepares the module (the llvm pipeline of
relaydsl/transform/pipeline.py: grad lowering, inlining, the first-order gradient where it
applies, constant folding, fusion into primitive functions, A-normal form; see ``prepare``)
and picks how to run the entry function:

* a ``Plan`` (plan.py) for a first-order program with static shapes: a chain of calls
  of primitive functions, tuples and projections, with ``if`` and loops (local
  tail-recursive functions, which is what ``for`` and ``while`` become). Its kernels
  are compiled together, its intermediates share one arena by liveness, and a call is
  one call into compiled code. A program whose dimensions are symbolic
  (``("n", 784)``) gets a plan per call signature.
* the dispatcher for everything else (closures, general recursion, data types,
  references): the reference interpreter, whose ``call_primitive`` hook runs each call
  of a primitive function as a compiled kernel instead of NumPy; kernels are compiled on
  first use, per function and argument shapes.

Arguments are checked against the entry's type by the frontend before any kernel
runs; the executors then hand each kernel only C-contiguous, aligned arrays of
exactly the shapes and dtypes it was compiled for (a plan binds and checks its
kernels once; the dispatcher keys its kernels by the arguments' shapes), so no
input can make compiled code touch memory out of bounds.

The path chosen is logged (INFO, logger ``relaydsl.backend.llvm.executor``): "a plan", "a
plan per call signature" (and each signature's plan as it is made), or "the dispatcher"
with the reason a plan does not apply (plan.py's ``Plan.unsupported``).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Sequence

import numpy as np

from relaydsl.backend.interpreter import Closure, Interpreter, Value, evaluate
from relaydsl.backend.llvm.kernel import Kernel, compile_primitive
from relaydsl.backend.llvm.native import NativeProgram, Unsupported
from relaydsl.backend.llvm.plan import Plan, contiguous, static_type
from relaydsl.ir.expr import Expr, Function, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprMutator
from relaydsl.transform import pipeline
from relaydsl.transform.pass_infra import PassContext

_log = logging.getLogger(__name__)


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

    An entry a plan applies to runs as one (plan.py). An entry with symbolic dimensions
    (``Tensor[Float, ("n", 784)]``) that would have a plan gets one per call signature:
    on a call with new shapes the entry is re-typed with those shapes and planned. Other
    programs run on the dispatcher.
    """

    def __init__(self, source: IRModule, entry: str, opt_level: int):
        self.source, self.entry, self.opt_level = source, entry, opt_level
        # the pass settings it was built under, for the entry's re-preparation per signature
        self.context = replace(PassContext.current(), opt_level=opt_level)
        self.mod = prepare(source, self.context)
        fn = self.mod[entry]
        self.plan: Plan | None = None
        if all(static_type(p.checked_type) for p in fn.params):
            self.plan = Plan.build(fn, opt_level)
        self._per_signature = self.plan is None and \
            all(isinstance(p.checked_type, TensorType) for p in fn.params) and \
            Plan.applies(fn, static=False)
        self._plans: dict[tuple, Plan | None] = {}
        self.native: NativeProgram | None = None
        self._native_unsupported = ""
        if self.plan is None and not self._per_signature:
            try:
                self.native = NativeProgram(self.mod, entry, opt_level)
            except Unsupported as e:
                self._native_unsupported = str(e)
        # the dispatcher: kernels by primitive function (held, so never confused with a
        # later one) and argument shapes
        self._kernels: dict[tuple, Kernel] = {}
        self._interpreter = Interpreter(self.mod, call_primitive=self._run_kernel)
        if _log.isEnabledFor(logging.INFO):
            self._log_path(fn)

    def _log_path(self, fn: Function) -> None:
        if self.plan is not None:
            _log.info("@%s runs as a plan: %s", self.entry, self.plan.describe())
        elif self._per_signature:
            _log.info("@%s runs as a plan per call signature (its shapes are symbolic)",
                      self.entry)
        elif self.native is not None:
            _log.info("@%s runs as native code: %s", self.entry, self.native.describe())
        else:
            _log.info("@%s runs on the dispatcher (the interpreter, each primitive function "
                      "a compiled kernel); native code does not apply: %s", self.entry,
                      self._native_unsupported or "parameters of symbolic shape")

    @property
    def path(self) -> str:
        """How calls run: "plan", "plan per signature", "native" or "dispatcher"."""
        if self.plan is not None:
            return "plan"
        if self._per_signature:
            return "plan per signature"
        return "native" if self.native is not None else "dispatcher"

    @property
    def uses_plan(self) -> bool:
        """Whether calls run as a plan (one per call signature, for symbolic shapes) rather
        than on the dispatcher."""
        return self.plan is not None or self._per_signature

    def __call__(self, *values: Value) -> Value:
        plan = self.plan or (self._plan_for(values) if self._per_signature else None)
        if plan is not None:
            return plan(*values)
        if self.native is not None:
            return self.native(*values)
        return evaluate(self.mod, *values, entry=self.entry, interpreter=self._interpreter)

    def _plan_for(self, values: Sequence[Value]) -> Plan | None:
        if not all(isinstance(v, np.ndarray) for v in values):
            return None
        key = tuple((v.shape, v.dtype.str) for v in values)
        if key not in self._plans:
            fn = prepare(specialize_entry(self.source, self.entry, values),
                         self.context)[self.entry]
            plan = self._plans[key] = Plan.build(fn, self.opt_level)
            if _log.isEnabledFor(logging.INFO):
                shapes = ", ".join(f"{v.dtype}{list(v.shape)}" for v in values)
                _log.info("@%s for (%s): %s", self.entry, shapes,
                          f"a plan: {plan.describe()}" if plan else "the dispatcher")
        return self._plans[key]

    def call_closure(self, closure: Closure, args: Sequence[Value]) -> Value:
        return self._interpreter.call(closure, args)

    def _run_kernel(self, fn: Function, args: list[Value]) -> Value:
        """The dispatcher's ``call_primitive``: `fn` on `args` as a compiled kernel."""
        arrays = [contiguous(a) for a in args]
        key = (fn, *[(a.shape, a.dtype.str) for a in arrays])
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = compile_primitive(specialize(fn, arrays), opt_level=self.opt_level)
            if _log.isEnabledFor(logging.DEBUG):
                shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays)
                _log.debug("dispatcher: for (%s) %r", shapes, kernel)
            self._kernels[key] = kernel
        outputs = kernel.call_trusted(arrays)
        return tuple(outputs) if kernel.returns_tuple else outputs[0]


def specialize(fn: Function, args: Sequence[np.ndarray]) -> Function:
    """`fn` with parameters typed by the concrete arguments' shapes (for symbolic / Any dims)."""
    concrete = [TensorType(a.shape, a.dtype.name) for a in args]
    # Static parameters are not enough: a value ascribed a dynamic type (a let annotated
    # with relay.Any dims) may leave the body's types dynamic; re-inference makes them static.
    if all(p.checked_type == t for p, t in zip(fn.params, concrete)) and \
            static_type(fn.checked_type.ret_type):
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
    body = _Rebind(dict(zip(fn.params, params))).visit(fn.body)
    return Function(params, body, None, (), fn.attrs, span=fn.span)


class _Rebind(ExprMutator):
    """Replaces variables by others (`mapping`), everywhere in an expression."""

    def __init__(self, mapping: dict[Var, Var]):
        super().__init__()
        self.mapping = mapping

    def visit_var(self, v: Var) -> Expr:
        return self.mapping.get(v, v)
