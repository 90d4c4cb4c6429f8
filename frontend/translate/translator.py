"""`Translator`: the translation of one function definition, the context its parts share.

The parts translate one family of constructs each and call each other through the translator
(a statement holds expressions, an expression a lambda, a lambda's body statements):

- ``tr.functions``  (functions.py): the decorated function, nested ``def``s and lambdas;
- ``tr.statements`` (statements.py): blocks, assignments, ``if`` and ``match``;
- ``tr.loops``      (loops.py): ``for`` and ``while``;
- ``tr.expressions`` (expressions.py): names, operators, indexing, literals;
- ``tr.calls``      (calls.py): calls, of operators, decorated functions and function values,
  and the calls with a meaning of their own, which the `Resolver` translates;
- ``tr.values``     (python_values.py): objects and constants of the enclosing Python scope.

The translator holds what they share: the source (for errors at the user's line), the
resolver (the Python world), the local names of the functions being translated, what is known
of each value's kind, the signature's symbolic dimensions; and the helpers every part uses.
"""
from __future__ import annotations

import ast

from relaydsl.errors import DSLSyntaxError, IRError
from relaydsl.frontend.source import Source
from relaydsl.frontend.translate.bindings import is_atomic, let_all
from relaydsl.frontend.translate.calls import CallTranslator
from relaydsl.frontend.translate.expressions import ExprTranslator
from relaydsl.frontend.translate.functions import FunctionTranslator
from relaydsl.frontend.translate.kinds import KnownKinds
from relaydsl.frontend.translate.literals import Number
from relaydsl.frontend.translate.loops import LoopTranslator
from relaydsl.frontend.translate.python_values import PythonValues, Resolver
from relaydsl.frontend.translate.scoping import LocalNames
from relaydsl.frontend.translate.statements import StmtTranslator
from relaydsl.ir.expr import Expr, Function, Var
from relaydsl.ir.span import Span
from relaydsl.ir.types import Type, TypeVar
from relaydsl.op import OpDef, OpPattern, ops


class Translator:
    """Translates one function definition (`function`); see the module docstring."""

    def __init__(self, source: Source, resolver: Resolver):
        self.source = source
        self.resolver = resolver
        self.symbols: dict[str, TypeVar] = {}  # symbolic dims of the signature, by name
        self.locals = LocalNames()
        self.kinds = KnownKinds()
        self._fresh = 0
        self.functions = FunctionTranslator(self)
        self.statements = StmtTranslator(self)
        self.loops = LoopTranslator(self)
        self.expressions = ExprTranslator(self)
        self.calls = CallTranslator(self)
        self.values = PythonValues(self)

    def function(self, tree: ast.FunctionDef) -> Function:
        """The decorated function `tree` defines."""
        return self.functions.function(tree)

    # ---- errors and locations ------------------------------------------------------
    def error(self, node: ast.AST, message: str) -> DSLSyntaxError:
        """A DSLSyntaxError at `node`, with its line and a caret."""
        return self.source.error(node, message)

    def span(self, node: ast.AST) -> Span | None:
        return self.source.span(node)

    def line(self, node: ast.AST) -> int | str:
        """`node`'s line number, for a message."""
        span = self.span(node)
        return span.line if span is not None else "?"

    # ---- new variables --------------------------------------------------------------
    def var(self, name: str, node: ast.AST | None = None, annotation: Type | None = None) -> Var:
        """A variable for the Python name `name`, located at `node`."""
        return Var(name, annotation, span=self.span(node) if node is not None else None)

    def temp(self, hint: str) -> Var:
        """A variable of the translation's own (``%tuple3``, ``%join4``)."""
        self._fresh += 1
        return Var(f"{hint}{self._fresh}")

    # ---- values: Python numbers made expressions ---------------------------------------
    def materialize(self, value: Expr | Number, like: Expr | None = None) -> Expr:
        """An expression for a value; a Python number takes `like`'s dtype when given."""
        if isinstance(value, Number):
            if like is None:
                return value.default()
            return ops.cast_like(value.wide(), like, span=value.span)
        return value

    def materialize_all(self, values: list) -> list[Expr]:
        """Independent values (a tuple's fields, a function's arguments): each number alone."""
        return [self.materialize(v) for v in values]

    def materialize_alike(self, values: list, lets: list[tuple[Var, Expr]]) -> list[Expr]:
        """Values of one type (an elementwise operator's operands, a list's elements): numbers
        take the dtype of the first value that is not a number, ``cast_like(2i64, %x)``. That
        value is used twice, so unless it is atomic it is bound first, in `lets`: evaluated
        once, as Python evaluates it."""
        at = next((i for i, v in enumerate(values) if not isinstance(v, Number)), None)
        if at is None or not any(isinstance(v, Number) for v in values):
            return self.materialize_all(values)
        like = values[at]
        if not is_atomic(like):
            tmp = self.temp("v")
            lets.append((tmp, like))
            values = [*values[:at], tmp, *values[at + 1:]]
            like = tmp
        return [self.materialize(v, like) for v in values]

    def op(self, op: OpDef, args: list, node: ast.AST | None, **attrs) -> Expr:
        """``op(args, attrs)``, literal operands bound first; IR errors at the user's line."""
        span = self.span(node) if node is not None else None
        lets: list[tuple[Var, Expr]] = []
        exprs = self._op_args(op, args, lets)
        try:
            return let_all(lets, op(*exprs, span=span, **attrs))
        except IRError as e:
            raise DSLSyntaxError(e.raw_message, span) from None

    def _op_args(self, op: OpDef, args: list, lets: list[tuple[Var, Expr]]) -> list[Expr]:
        """An operator's arguments. A number meeting a tensor in an elementwise operator takes
        its dtype (``x * 2``, ``relay.where(c, x, 0.0)``); elsewhere it keeps its own
        (``relay.take(x, 0)``)."""
        if op.pattern is not OpPattern.BROADCAST:
            return self.materialize_all(args)
        first = 1 if op is ops.where else 0  # the condition of `where` is its own
        return [*self.materialize_all(args[:first]),
                *self.materialize_alike(args[first:], lets)]
