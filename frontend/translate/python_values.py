"""The Python world seen from a decorated function: names of the enclosing scope, constants
known when the function is translated, and Python objects used as values."""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any as AnyValue, Callable

import numpy as np

from relaydsl.errors import IRError
from relaydsl.frontend.translate.literals import PYTHON_BINOPS, Number
from relaydsl.ir.expr import Call, Constant, Constructor, Expr, Function, GlobalVar, Op, Var
from relaydsl.ir.types import Type, TypeVar
from relaydsl.op import lookup

if TYPE_CHECKING:
    from relaydsl.frontend.translate.bindings import Env
    from relaydsl.frontend.translate.translator import Translator


@dataclass
class Resolver:
    """How the translator reaches the Python world: name lookup and the frontend's objects."""

    lookup: Callable[[str], AnyValue]  # raises KeyError for an unknown name
    to_global: Callable[[AnyValue], GlobalVar | None]  # a decorated function's GlobalVar
    annotation_type: Callable[[AnyValue, dict[str, TypeVar]], Type]
    # a call with a meaning of its own (an op, a layer, the training API...): its Relay
    # expression, from the callee, the call, its translated arguments and keyword nodes
    special: Callable[[Translator, AnyValue, ast.Call, list, dict[str, ast.expr], Env],
                      Expr | None]
    forward_refs: dict[str, GlobalVar] = field(default_factory=dict)
    # The decorated function's annotations as Python evaluated them when it was defined (by
    # parameter name, "return" for the result): a name used only in an annotation, such as
    # a size in a factory's decorated function, is in no closure cell, only here.
    signature: dict[str, AnyValue] = field(default_factory=dict)


class PythonValues:
    """Reads Python objects and constants; the translator's ``values``."""

    def __init__(self, tr: Translator):
        self.tr = tr

    def python_to_relay(self, value: AnyValue, node: ast.AST):
        """A Python object used as a value: numbers and arrays are constants, decorated functions
        globals, constructors constructors."""
        tr = self.tr
        if isinstance(value, (bool, int, float)) and not isinstance(value, np.ndarray):
            return Number(value, tr.span(node))
        if isinstance(value, np.generic):
            return Constant(np.asarray(value), span=tr.span(node))
        if isinstance(value, np.ndarray):
            try:
                return Constant(value, span=tr.span(node))
            except IRError as e:
                raise tr.error(node, e.raw_message) from None
        gv = tr.resolver.to_global(value)
        if gv is not None:
            return gv
        relay_op = getattr(value, "relay_op", None)  # relay.<op>
        if relay_op is not None:
            return self._op_as_function(relay_op.name, node)
        ctor = getattr(value, "constructor", value)
        if isinstance(ctor, Constructor):
            return ctor
        raise tr.error(node, f"{_describe(value)} cannot be used as a value inside a decorated "
                             "function (numbers, NumPy arrays, decorated functions and ADT "
                             "constructors can)")

    def _op_as_function(self, name: str, node: ast.AST) -> Function:
        """``relay.tanh`` passed as a value: ``fn (%data) { tanh(%data) }``."""
        tr = self.tr
        span = tr.span(node)
        params = [Var(p, span=span) for p in lookup(name).inputs]
        try:
            body = Call(Op.get(name), params, span=span)
        except IRError as e:
            raise tr.error(node, f"{e.raw_message}; wrap the call in a lambda to pass relay."
                                 f"{name} as a function") from None
        return Function(params, body, span=span)

    def python_value(self, node: ast.expr) -> AnyValue:
        """The Python object a name or attribute path denotes in the function's scope."""
        tr = self.tr
        if isinstance(node, ast.Name):
            if node.id in tr.locals:
                raise tr.error(node, f"{node.id!r} is a value computed by the function, not a "
                                     "Python object known when the function is translated")
            try:
                return tr.resolver.lookup(node.id)
            except KeyError:
                raise tr.error(node, f"name {node.id!r} is not defined") from None
        if isinstance(node, ast.Attribute):
            base = self.python_value(node.value)
            try:
                return getattr(base, node.attr)
            except AttributeError as e:
                raise tr.error(node, str(e)) from None
        if isinstance(node, ast.Subscript):
            base = self.python_value(node.value)
            index = self.static(node.slice)
            try:
                return base[index]
            except Exception as e:  # any error of the user's Python object, at the user's line
                raise tr.error(node, f"{type(e).__name__}: {e}") from None
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.static(e) for e in node.elts)
        raise tr.error(node, "expected a name, an attribute or a constant here")

    def static(self, node: ast.expr) -> AnyValue:
        """A Python value known when the function is translated: constants, names of the
        enclosing scope, and arithmetic on them (``axis=-1``, ``newshape=(N, 2 * K)``)."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.static(e) for e in node.elts)
        folds = {ast.USub: operator.neg, ast.UAdd: operator.pos}
        try:
            if isinstance(node, ast.UnaryOp) and type(node.op) in folds:
                return folds[type(node.op)](self.static(node.operand))
            if isinstance(node, ast.BinOp) and type(node.op) in PYTHON_BINOPS:
                return PYTHON_BINOPS[type(node.op)](self.static(node.left),
                                                     self.static(node.right))
        except (ArithmeticError, TypeError, ValueError) as e:
            raise self.tr.error(node, f"cannot compute this constant: {e}") from None
        return self.python_value(node)


def _describe(value: AnyValue) -> str:
    if callable(value):
        return f"the Python function {getattr(value, '__qualname__', value)!r}"
    return f"the Python value {value!r:.60} of type {type(value).__name__}"
