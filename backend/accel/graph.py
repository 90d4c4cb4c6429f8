"""The accelerator's view of a program: a list of layers over tensors, in dataflow order.

The accel pipeline leaves the entry one function (InlineAll) of op calls on its parameters
and constants, bound by lets or nested. ``extract`` turns it into a ``Graph``: every op call
a ``Layer`` with the ``LayerRule`` it runs by (layers.py); every value a ``TensorInfo`` with
a static shape. What the accelerator has no rule for -- control flow, ADTs, closures,
references, calls of other functions, an op with no rule, a shape known only at run time --
raises ``NotOnAccelerator`` with the reason, and the program runs on the host.

>>> from relaydsl.ir import Call, Function, Op, TensorType, Var
>>> from relaydsl.typing import infer_types
>>> from relaydsl.ir.module import IRModule
>>> x = Var("x", TensorType((1, 4, 8, 8)))
>>> mod = infer_types(IRModule.from_expr(Function([x], Call(Op.get("relu"), [x]))))
>>> g = extract(mod["main"])
>>> [(layer.name, layer.output.shape) for layer in g.layers]
[('relu_0', (1, 4, 8, 8))]
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any as AnyValue

import numpy as np

from relaydsl.backend.accel.config import INT8_ACCUMULATOR, INT8_ALU, INT8_OPERANDS
from relaydsl.backend.accel.layers import LayerRule, rule_for
from relaydsl.ir.expr import Call, Constant, Expr, Function, Op, Tuple, Var
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprFunctor
from relaydsl.op.registry import OpDef


class NotOnAccelerator(Exception):
    """The program (or a part of it) has something the accelerator cannot run."""


@dataclass(frozen=True, eq=False)
class TensorInfo:
    """A value of the program: an input, a constant (weights) or a layer's output."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    value: np.ndarray | None = field(default=None, repr=False)  # a constant's

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes of one element, in DRAM and on chip."""
        return np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_constant(self) -> bool:
        return self.value is not None


@dataclass(frozen=True, eq=False)
class Layer:
    """One op call: its op, attributes, input tensors, output tensor and rule."""

    name: str
    opdef: OpDef
    attrs: dict[str, AnyValue]
    inputs: tuple[TensorInfo, ...]
    output: TensorInfo
    rule: LayerRule


@dataclass
class Graph:
    """The layers in dataflow order; ``params`` the entry's inputs, ``output`` its result."""

    params: list[TensorInfo]
    layers: list[Layer]
    output: TensorInfo

    def consumers(self) -> dict[TensorInfo, list[Layer]]:
        users: dict[TensorInfo, list[Layer]] = {}
        for layer in self.layers:
            for t in dict.fromkeys(layer.inputs):
                users.setdefault(t, []).append(layer)
        return users

    @property
    def constants(self) -> list[TensorInfo]:
        return list(dict.fromkeys(t for layer in self.layers for t in layer.inputs
                                  if t.is_constant))


def _static(t: object, what: str) -> tuple[tuple[int, ...], str]:
    if not isinstance(t, TensorType):
        raise NotOnAccelerator(f"{what} is a {t}, not a tensor")
    shape = t.shape
    if not all(isinstance(n, int) for n in shape):
        raise NotOnAccelerator(f"{what} has a shape known only at run time ({t})")
    return tuple(shape), t.concrete_dtype()


def _check_dtypes(name: str, rule: LayerRule, inputs: list[TensorInfo], dtype: str,
                  accelerator: str) -> None:
    """That the accelerator computing in `accelerator` runs a layer `name` of `rule` from
    `inputs` to a `dtype` result: a float32 one float32 layers only; an int8 one int8 (or
    uint8) products summed in int32 on its MAC array, and on its ALU the integers and
    float32 of a realized program's epilogues."""
    found = [t.dtype for t in inputs]
    if accelerator == "float32":
        if dtype != "float32" or any(d != "float32" for d in found):
            raise NotOnAccelerator(f"{name} computes in {dtype}: the accelerator runs float32")
    elif rule.unit == "mac":
        if dtype != INT8_ACCUMULATOR or any(d not in INT8_OPERANDS for d in found[:2]):
            raise NotOnAccelerator(
                f"{name} multiplies {' by '.join(found[:2])} into {dtype}: the accelerator's "
                f"MAC array takes {accelerator} operands summed in {INT8_ACCUMULATOR}")
    elif dtype not in INT8_ALU or any(d not in INT8_ALU for d in found):
        raise NotOnAccelerator(f"{name} computes in {dtype}: the accelerator's ALU takes "
                               f"{', '.join(INT8_ALU)}")


class _Extractor(ExprFunctor[TensorInfo | list[TensorInfo]]):
    """``visit(e)``: the tensor (a list of them for a tuple) `e` computes, its layers
    appended to ``layers``; a let-bound variable is its value's tensor (``bound``)."""

    def __init__(self, dtype: str = "float32") -> None:
        super().__init__()
        self.dtype = dtype  # the accelerator's (AcceleratorConfig.dtype)
        self.layers: list[Layer] = []
        self.counts: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return f"{base}_{n}"

    def unsupported(self, expr: Expr) -> Exception:
        return NotOnAccelerator(f"the program has a {type(expr).__name__}, which the "
                                "accelerator does not run")

    def visit_var(self, var: Var) -> TensorInfo | list[TensorInfo]:
        if var not in self.bound:
            raise NotOnAccelerator(f"the variable %{var.name_hint} is not bound by the program")
        return self.bound[var]

    def visit_constant(self, c: Constant) -> TensorInfo | list[TensorInfo]:
        shape, dtype = tuple(c.data.shape), c.data.dtype.name
        return TensorInfo(self.fresh("const"), shape, dtype, c.data)

    def visit_tuple(self, t: Tuple) -> TensorInfo | list[TensorInfo]:
        return [self.tensor(f) for f in t.fields]

    def tensor(self, e: Expr) -> TensorInfo:
        v = self.visit(e)
        if isinstance(v, list):
            raise NotOnAccelerator("a tuple is used where the accelerator needs a tensor")
        return v

    def visit_call(self, call: Call) -> TensorInfo | list[TensorInfo]:
        if not isinstance(call.op, Op):
            raise self.unsupported(call)
        opdef = call.op.definition
        inputs: list[TensorInfo] = []
        for a in call.args:
            v = self.visit(a)
            inputs.extend(v if isinstance(v, list) else [v])
        name = self.fresh(opdef.name)
        shape, dtype = _static(call.checked_type, f"the result of {opdef.name}")
        attrs = dict(call.attrs)
        rule = rule_for(opdef, attrs, [t.shape for t in inputs], shape)
        if rule is None:
            raise NotOnAccelerator(f"{opdef.name} has no accelerator lowering")
        _check_dtypes(name, rule, inputs, dtype, self.dtype)
        out = TensorInfo(name, shape, dtype)
        self.layers.append(Layer(name, opdef, attrs, tuple(inputs), out, rule))
        return out


def extract(fn: Function, dtype: str = "float32") -> Graph:
    """The graph of a typed function of op calls (see the module docstring) for an
    accelerator computing in `dtype` (AcceleratorConfig.dtype)."""
    ex = _Extractor(dtype)
    params = []
    for p in fn.params:
        shape, dtype = _static(p.checked_type, f"the parameter %{p.name_hint}")
        t = TensorInfo(p.name_hint, shape, dtype)
        ex.bound[p] = t
        params.append(t)
    result = ex.visit(fn.body)
    if isinstance(result, list):
        raise NotOnAccelerator("the result is a tuple: the accelerator returns one tensor")
    if not ex.layers or result not in {layer.output for layer in ex.layers}:
        raise NotOnAccelerator("the result is not computed by an op call")
    return Graph(params, ex.layers, result)
