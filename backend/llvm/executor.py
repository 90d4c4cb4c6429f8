"""Running whole programs on compiled kernels: native code, or the dispatcher.

``compile_program(mod, entry, options)`` prepares the module (the llvm pipeline of
relaydsl/transform/pipeline.py: grad lowering, inlining, the first-order gradient where it
applies, constant folding, fusion into primitive functions, A-normal form; see ``prepare``)
and picks how to run the entry function:

* ``NativeProgram`` (native/) for the language: each Relay function an LLVM function
  calling the kernels directly, so a call is one call into compiled code. A static
  first-order program (an MLP, LeNet, the first-order adjoint of one) places its
  intermediates in one frame by liveness and writes its results into the arrays Python
  returns; loops (``for`` and ``while``: local tail-recursive functions) are jumps that
  release what a turn no longer needs; closures, general and mutual recursion, data types
  and ``match``, references, the higher-order gradient's backpropagators and shapes known
  only at run time (a ``relay.Any`` dimension: kernels generic in a leading batch
  dimension where the computation is row-separable, chunked.py, or in every size where
  generic.py proves it, else made per shape on first use) all run there.
* a program whose tensor parameters have symbolic dimensions (``("n", 784)``) gets native
  code for its first call signature (the entry re-typed with the call's shapes and
  compiled), and for every later one native code of the entry as typed: one build, whose
  kernels of run-time shapes are generic in their sizes where they can be. A signature
  called HOT_CALLS times gets native code of its own.
* the dispatcher for what remains (functions passed in from Python, references passed
  to or returned to it): the reference interpreter, whose
  ``call_primitive`` hook runs each call of a primitive function as a compiled kernel
  instead of NumPy; kernels are compiled on first use, per function and argument shapes.

Arguments are checked against the entry's type by the frontend before any kernel
runs; the executors then hand each kernel only C-contiguous, aligned arrays of
exactly the shapes and dtypes it was compiled for (native code checks the tensors inside
data values as it encodes them; the dispatcher keys its kernels by the arguments' shapes),
so no input can make compiled code touch memory out of bounds.

The path chosen is logged (INFO, logger ``relaydsl.backend.llvm.executor``): "native
code", native code for a call signature or of run-time shapes (and what each gets as it is made), or
"the dispatcher" with the reason native code does not apply (native's ``Unsupported``).
``Program.path`` names it for tests and tools.
"""
from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from relaydsl.backend.interpreter import Closure, ConstructorValue, Interpreter, Value, evaluate
from relaydsl.backend.llvm.kernel import Kernel, compile_primitive
from relaydsl.backend.llvm.native import NativeProgram, Unsupported
from relaydsl.backend.llvm.native.values import contiguous
from relaydsl.backend.llvm.specialize import specialize, specialize_entry
from relaydsl.backend.llvm.templates.contraction import compile_core_ahead
from relaydsl.ir.expr import Function
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import (
    Kind, TensorType, TupleType, Type, TypeCall, TypeVar, static_type, type_to_str,
)
from relaydsl.ir.visitor import substitute_types, type_vars_of
from relaydsl.transform import pipeline
from relaydsl.op.collective import Collective
from relaydsl.transform._util import collective_of
from relaydsl.transform.pipeline import CompileOptions

_log = logging.getLogger(__name__)

# Calls with one signature after which an entry with symbolic dimensions gets native code
# for that signature: static buffer placement and kernels of exact shapes, a build of 20-200
# ms that pays back over many calls (LeNet's forward pass runs 15-30% faster than on its
# kernels generic in the batch size), not over a few.
HOT_CALLS = 100
_MAX_COUNTED = 256  # signatures whose calls are counted at once
_UNBUILT = object()  # an executor's generic native program before its first use


def prepare(mod: IRModule, options: CompileOptions, entry: str | None = None) -> IRModule:
    """The module as the llvm target runs it: every op call inside a primitive function.

    The llvm pipeline (relaydsl/transform/pipeline.py) under the options' PassContext:
    grad nodes lowered, and by level fusion, inlining, constant folding, the first-order
    gradient; every call let-bound (A-normal form).
    """
    return pipeline.run(mod, "llvm", options.context, entry)


def compile_program(mod: IRModule, entry: str, options: CompileOptions | None = None
                    ) -> "Program":
    """The runnable form of global `entry` of `mod` (typed, possibly with grad nodes),
    compiled with `options` (default: the llvm target's under the current PassContext)."""
    return Program(mod, entry, CompileOptions.for_target("llvm") if options is None else options)


class Program:
    """A compiled entry point: ``program(*values)``; values checked against its type.

    The entry runs as native code (native/). An entry with symbolic dimensions
    (``Tensor[Float, ("n", 784)]``) gets native code for its first call signature, then
    native code of run-time shapes for the others (see ``_compiled_for``). The few programs
    native code does not run go to the dispatcher.
    """

    def __init__(self, source: IRModule, entry: str, options: CompileOptions):
        # the options it was built with, for the entry's re-preparation per signature too
        self.source, self.entry, self.options = source, entry, options
        compile_core_ahead(source, entry)  # while the program is prepared and lowered
        self.mod = prepare(source, options, entry)
        fn = self.mod[entry]
        # symbolic dimensions: native code of run-time shapes, per signature once hot
        self._symbolic = any(symbolic_type(p.checked_type) for p in fn.params)
        self._compiled: dict[tuple, NativeProgram | None] = {}
        self._generic: NativeProgram | object | None = _UNBUILT
        self._calls: dict[tuple, int] = {}
        self._native_unsupported = ""
        self.native = None if self._symbolic else self._native(self.mod)
        self._interpreter = Interpreter(self.mod, call_primitive=PrimitiveKernels(options))
        if _log.isEnabledFor(logging.INFO):
            self._log_path()

    def _native(self, mod: IRModule) -> NativeProgram | None:
        try:
            return NativeProgram(mod, self.entry, self.options)
        except Unsupported as e:
            self._native_unsupported = str(e)
            return None

    def _log_path(self) -> None:
        if self._symbolic:
            _log.info("@%s has symbolic shapes: it runs as native code for its first call "
                      "signature, then as native code of run-time shapes (and for a signature "
                      "called %d times, native code for it)", self.entry, HOT_CALLS)
        elif self.native is not None:
            _log.info("@%s runs as native code: %s", self.entry, self.native.describe())
        else:
            _log.info("@%s runs on the dispatcher (the interpreter, each primitive function "
                      "a compiled kernel); native code does not apply: %s", self.entry,
                      self._native_unsupported)

    @property
    def path(self) -> str:
        """How calls run: "native", "run-time shapes" (the entry has symbolic dimensions:
        native code of run-time shapes, and native code per call signature once it is hot)
        or "dispatcher"."""
        if self._symbolic:
            return "run-time shapes"
        return "native" if self.native is not None else "dispatcher"

    def __call__(self, *values: Value) -> Value:
        compiled = self.native or (self._compiled_for(values) if self._symbolic else None)
        if compiled is not None:
            return compiled(*values)
        return evaluate(self.mod, *values, entry=self.entry, interpreter=self._interpreter)

    def _compiled_for(self, values: Sequence[Value]) -> NativeProgram | None:
        """The native code for the values: of the entry typed with their shapes for the
        first signature (most programs are called with one), for a signature called
        HOT_CALLS times, and where native code of run-time shapes cannot run the program;
        else, from the second signature on, of the entry as typed, one build for every
        signature (its kernels generic in a batch dimension, or made per shape:
        native/sites.py). PyTorch's compiler does the same ("automatic dynamic shapes")."""
        params = self.mod[self.entry].params
        if all(isinstance(v, np.ndarray) for v in values):
            key: tuple = tuple((v.shape, v.dtype.str) for v in values)
            types = None
        else:  # data values: the types their tensors give the parameters' shape variables
            found = signature_types([p.checked_type for p in params], values, self.mod)
            if found is None:  # e.g. an empty list: nothing fixes its tensors' shapes
                return self._generic_native
            types = found
            key = tuple(types)
        compiled = self._compiled.get(key)
        if compiled is not None:
            return compiled
        calls = self._calls[key] = self._calls.get(key, 0) + 1
        if self._compiled and calls < HOT_CALLS and self._generic_native is not None:
            if len(self._calls) > _MAX_COUNTED:  # only the recent signatures can get hot
                self._calls.pop(next(iter(self._calls)), None)  # (another thread may too)
            return self._generic_native
        if types is None:
            types = [TensorType(v.shape, v.dtype.name) for v in values]
        if key not in self._compiled:
            mod = prepare(specialize_entry(self.source, self.entry, types), self.options,
                          self.entry)
            compiled = self._compiled[key] = self._native(mod)
            if _log.isEnabledFor(logging.INFO):
                shapes = ", ".join(f"{t.dtype}{list(t.shape)}" if isinstance(t, TensorType)
                                   else type_to_str(t) for t in types)
                how = f"native code: {compiled.describe()}" if compiled else "the dispatcher"
                _log.info("@%s for (%s): %s", self.entry, shapes, how)
        return self._compiled[key] or self._generic_native

    @property
    def _generic_native(self) -> NativeProgram | None:
        """Native code of the entry as it is typed, its kernels' shapes known only at run
        time (one build for every call signature), built on first use.

        Not a functools.cached_property: on Python 3.11 that holds one lock for every
        executor while one of them builds, and a child forked meanwhile would wait for it
        forever."""
        if self._generic is _UNBUILT:
            native = self._native(self.mod)
            if _log.isEnabledFor(logging.INFO):
                _log.info("@%s for every call signature after the first: %s", self.entry,
                          f"native code: {native.describe()}" if native else "the dispatcher")
            self._generic = native
        return self._generic  # type: ignore[return-value]

    def call_closure(self, closure: Closure, args: Sequence[Value]) -> Value:
        return self._interpreter.call(closure, args)



class PrimitiveKernels:
    """The dispatcher's ``call_primitive`` hook: each call of a primitive function runs as a
    compiled kernel, compiled on first use per function and argument shapes. The accel
    target's host runs its primitive calls through it too.
    """

    def __init__(self, options: CompileOptions):
        self.options = options
        # by primitive function (held, so never confused with a later one) and argument
        # shapes: the kernel, and the collective it makes this rank's part of (or None)
        self._kernels: dict[tuple, tuple[Kernel, Collective | None]] = {}

    def __call__(self, fn: Function, args: list[Value]) -> Value:
        """`fn` on `args` as a compiled kernel."""
        arrays = [contiguous(a) for a in args]
        key = (fn, *[(a.shape, a.dtype.str) for a in arrays])
        found = self._kernels.get(key)
        if found is None:
            types = [TensorType(a.shape, a.dtype.name) for a in arrays]
            kernel = compile_primitive(specialize(fn, types), self.options)
            if _log.isEnabledFor(logging.DEBUG):
                shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays)
                _log.debug("dispatcher: for (%s) %r", shapes, kernel)
            found = self._kernels[key] = (kernel, collective_of(fn))
        kernel, collective = found
        outputs = kernel.call_trusted(arrays)
        if collective is not None:  # the kernel made this rank's part: the exchange
            collective.reduce_in_place(outputs[0])
        return tuple(outputs) if kernel.returns_tuple else outputs[0]


def symbolic_type(t: Type) -> bool:
    """Whether a parameter type has dimensions a call's values fix: tensors, tuples and data
    types of them, with a shape variable or ``Any`` somewhere."""
    if isinstance(t, TensorType):
        return not static_type(t)
    if isinstance(t, TupleType):
        return any(symbolic_type(f) for f in t.fields) and \
            all(isinstance(f, (TensorType, TupleType, TypeCall)) for f in t.fields)
    if isinstance(t, TypeCall):
        return any(symbolic_type(a) for a in t.args)
    return False


def signature_types(types: Sequence[Type], values: Sequence[Value], mod: IRModule
                    ) -> list[Type] | None:
    """`types` with the shape variables that the values' tensors fix replaced by their
    sizes (the first tensor that mentions one decides; type checking has made them agree);
    None when a variable stays unfixed (no tensor mentions it: an empty list)."""
    sizes: dict[TypeVar, int] = {}
    wanted = {v for t in types for v in type_vars_of(t) if v.kind == Kind.Shape}
    stack = list(zip(types, values))
    while stack and len(sizes) < len(wanted):
        t, v = stack.pop()
        if isinstance(t, TensorType):
            for d, n in zip(t.shape, np.shape(v)):
                if isinstance(d, TypeVar):
                    sizes.setdefault(d, int(n))
        elif isinstance(t, TupleType) and isinstance(v, tuple):
            stack.extend(zip(t.fields, v))
        elif isinstance(t, TypeCall) and isinstance(v, ConstructorValue):
            stack.extend(zip(mod.field_types(v.constructor, t), v.fields))
    if len(sizes) < len(wanted):
        return None
    return [substitute_types(t, sizes) for t in types]
