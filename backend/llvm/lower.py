"""Lowering a primitive function to tensor expressions (TVM's ``relay.backend.te_compiler``).

A primitive function (attrs ``Primitive=1``, static tensor parameters, a body
of op calls, tuples, projections, constants and lets) becomes a graph of
``te`` tensors: a placeholder per parameter, the op's compute rule for each
call (a node shared in the DAG is lowered once), tuples and projections
resolved structurally. Constants of one element become immediates (``x * 0.5``
compiles to ``fmul %x, 0.5``); larger constants become extra input buffers
that the kernel holds.

    fn (%x: Tensor[(4,), float32]) { exp(%x) * 0.5 }
      =>  p0 = placeholder((4,));  T_exp = compute(i: exp(p0[i]));
          c = compute((): 0.5);  T_multiply = compute(i: T_exp[i] * c[])

Every computed tensor records the op call it came from (``OpStage``), which
the scheduler reads: pattern, attributes, argument tensors (for templates).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any as AnyValue

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.ir.visitor import ExprFunctor
from relaydsl.op.registry import OpDef, OpPattern
from relaydsl.te import expr as E
from relaydsl.te.tensor import Tensor, compute, placeholder

Value = AnyValue  # a te.Tensor, or a tuple of values


@dataclass(eq=False)
class OpStage:
    """The op call a computed tensor came from."""

    op: OpDef
    attrs: Attrs
    pattern: OpPattern
    args: list[Tensor]  # the call's argument tensors (tuple arguments flattened)
    arg_types: list[TensorType]
    out_type: TensorType
    is_result: bool  # the op's own result (not a helper tensor its rule made)


@dataclass(eq=False)
class Lowered:
    """A primitive function as te: its inputs, held constants, outputs and stage origins."""

    params: list[Tensor]
    constants: list[tuple[Tensor, np.ndarray]]
    outputs: list[Tensor]
    returns_tuple: bool
    origin: dict[Tensor, OpStage] = field(default_factory=dict)
    empty: set[Tensor] = field(default_factory=set)  # size-0 results: nothing to compute


def tensor_type(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType) or not all(isinstance(d, int) for d in t.shape) \
            or not isinstance(t.dtype, str):
        raise IRError(f"llvm backend: {what} must have a static tensor type, got {t}")
    return t


def lower(func: Function) -> Lowered:
    """The te graph of primitive function ``func`` (typed: nodes carry ``checked_type``)."""
    lowerer = _Lowerer()
    params = [placeholder(tensor_type(p.checked_type, f"parameter {p.name_hint}").shape,
                          p.checked_type.dtype, f"p{i}") for i, p in enumerate(func.params)]
    lowerer.bound.update(zip(func.params, params))
    result = lowerer.visit(func.body)
    returns_tuple = isinstance(result, tuple)
    leaves = _flatten(result)
    outputs: list[Tensor] = []
    for t in leaves:
        # An output must be a computed tensor of its own: copy params, constants, repeats.
        if (t.body is None and t not in lowerer.empty) or t in outputs:
            t = compute(t.shape, lambda *i, src=t: src[i], "T_copy")
        outputs.append(t)
    return Lowered(params, lowerer.constants, outputs, returns_tuple, lowerer.origin,
                   lowerer.empty)


def _unsupported(expr: Expr) -> IRError:
    if isinstance(expr, Var):
        return IRError(f"llvm backend: free variable {expr.name_hint} in a primitive function")
    return IRError(f"llvm backend: a primitive function may not contain {type(expr).__name__} "
                   f"nodes (only op calls, tuples, constants, lets)")


class _Lowerer(ExprFunctor[Value]):
    """Each node of a primitive function's body to its te value (a tensor, or a tuple)."""

    def __init__(self) -> None:
        super().__init__()
        self.constants: list[tuple[Tensor, np.ndarray]] = []
        self.origin: dict[Tensor, OpStage] = {}
        self.empty: set[Tensor] = set()

    def unsupported(self, expr: Expr) -> Exception:
        return _unsupported(expr)

    def visit_constant(self, c: Constant) -> Value:
        return self.constant(c.data)

    def visit_tuple(self, t: Tuple) -> Value:
        return tuple(self.visit(f) for f in t.fields)

    def visit_tuple_getitem(self, t: TupleGetItem) -> Value:
        value = self.visit(t.tuple_value)
        if not isinstance(value, tuple):
            raise IRError("llvm backend: projection of a non-tuple value")
        return value[t.index]

    def constant(self, data: np.ndarray) -> Tensor:
        dtype = data.dtype.name
        if data.size == 1:
            v = data.reshape(()).item()
            imm = E.const(bool(v) if dtype == "bool" else v, dtype)
            return compute(data.shape, lambda *i: imm, "T_const")
        t = placeholder(data.shape, dtype, f"c{len(self.constants)}")
        self.constants.append((t, np.ascontiguousarray(data)))
        if data.size == 0:
            self.empty.add(t)
        return t

    def visit_call(self, call: Call) -> Value:
        if not isinstance(call.op, Op):
            raise self.unsupported(call)
        opdef = call.op.definition
        args = _flatten([self.visit(a) for a in call.args])
        flat_types = [TensorType(t.shape, t.dtype) for t in args]
        out_type = call.checked_type
        if isinstance(out_type, TensorType) and math.prod(tensor_type(
                out_type, f"result of {opdef.name}").shape) == 0:
            out = Tensor(f"T_{opdef.name}_empty", out_type.shape, out_type.dtype)
            self.empty.add(out)
            return out
        if opdef.compute is None:
            raise IRError(f"llvm backend: op {opdef.name} has no compute rule yet")
        out = opdef.compute(call.attrs, list(args), out_type)
        results = _flatten(out)
        fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
        known = set(args)
        for r, ft in zip(results, fields):
            self._record(r, known, OpStage(opdef, call.attrs, opdef.pattern, list(args),
                                           flat_types, ft, True))
        return out

    def _record(self, result: Tensor, known: set[Tensor], stage: OpStage) -> None:
        """Tags ``result`` and the helper tensors its rule made (those not seen before)."""
        if result not in self.origin and result not in known:
            self.origin[result] = stage
        stack = [result]
        seen = set(known)
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t.body is None or (t in self.origin and t is not result):
                continue
            if t not in self.origin:
                self.origin[t] = OpStage(stage.op, stage.attrs, stage.pattern, stage.args,
                                         stage.arg_types, TensorType(t.shape, t.dtype), False)
            stack.extend(t.inputs)


def _flatten(v: Value) -> list[Tensor]:
    if isinstance(v, (tuple, list)):
        return [leaf for x in v for leaf in _flatten(x)]
    return [v]


# ---- a stable digest (structural_hash salts strings per process; the disk cache cannot) ----


def stable_digest(func: Function) -> str:
    """A process-independent digest of everything that decides ``func``'s compiled code."""
    digest = _Digest()
    digest.bound.update({p: -1 - i for i, p in enumerate(func.params)})
    result = digest.visit(func.body)
    lines = [*digest.lines, f"result {result}",
             "params " + " ".join(str(p.checked_type) for p in func.params)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


class _Digest(ExprFunctor[int]):
    """Each node to the number of its line, which describes it by its children's numbers (a
    parameter is numbered -1 - its position; a let-bound variable stands for its value)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def unsupported(self, expr: Expr) -> Exception:
        return _unsupported(expr)

    def line(self, text: str) -> int:
        self.lines.append(text)
        return len(self.lines) - 1

    def visit_constant(self, c: Constant) -> int:
        d = c.data
        return self.line(f"const {d.dtype.name} {d.shape} "
                         f"{hashlib.sha256(d.tobytes()).hexdigest()}")

    def visit_tuple(self, t: Tuple) -> int:
        return self.line(f"tuple {[self.visit(f) for f in t.fields]}")

    def visit_tuple_getitem(self, t: TupleGetItem) -> int:
        return self.line(f"get {self.visit(t.tuple_value)} {t.index}")

    def visit_call(self, call: Call) -> int:
        if not isinstance(call.op, Op):
            raise self.unsupported(call)
        args = [self.visit(a) for a in call.args]
        attrs = sorted((k, repr(v)) for k, v in call.attrs.items())
        return self.line(f"call {call.op.name} {args} {attrs} : {call.checked_type}")
