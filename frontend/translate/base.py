"""The translator's state and the helpers every part of it uses: errors at the user's line,
fresh variables, operator calls, Python numbers made into expressions, and the scopes of the
functions being translated."""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from relaydsl.errors import DSLSyntaxError, IRError
from relaydsl.frontend.source import Source
from relaydsl.frontend.translate.bindings import Env, _is_atomic, _let_all
from relaydsl.frontend.translate.literals import _Literal
from relaydsl.ir.expr import Expr, Var
from relaydsl.ir.span import Span
from relaydsl.ir.types import Type, TypeVar
from relaydsl.op import OpDef, OpPattern, ops

if TYPE_CHECKING:
    from relaydsl.frontend.translate.kinds import Kind
    from relaydsl.frontend.translate.python_values import Resolver


class TranslatorBase:
    """State and shared helpers of `Translator`; see the package docstring."""

    def __init__(self, source: Source, resolver: Resolver):
        self.source = source
        self.resolver = resolver
        self.symbols: dict[str, TypeVar] = {}  # symbolic dims of the signature, by name
        self._fresh = 0
        self._kinds: dict[Expr, Kind] = {}  # calls whose callee declares its result type
        self.current_env: Env = {}
        # what calling a function value gives, when known: a nested def with a declared
        # result type, an exported model (``relay.export_model(m)(x)[0]``), names bound to them
        self._return_kinds: dict[Expr, Kind] = {}
        # The local names of the functions being translated, innermost last: a name local to
        # one of them but not bound at a use is used before its assignment (never a global, as
        # in Python). The value says why it is unbound there, when that is known.
        self._scopes: list[dict[str, str | None]] = []

    # ---- helpers ---------------------------------------------------------
    def error(self, node: ast.AST, message: str) -> DSLSyntaxError:
        return self.source.error(node, message)

    def span(self, node: ast.AST) -> Span | None:
        return self.source.span(node)

    def _line(self, node: ast.AST) -> int | str:
        span = self.span(node)
        return span.line if span is not None else "?"

    def var(self, name: str, node: ast.AST | None = None, annotation: Type | None = None) -> Var:
        return Var(name, annotation, span=self.span(node) if node is not None else None)

    def temp(self, hint: str) -> Var:
        self._fresh += 1
        return Var(f"{hint}{self._fresh}")

    def op(self, op: OpDef, args: list, node: ast.AST | None, **attrs) -> Expr:
        """``op(args, attrs)``, literal operands bound first; IR errors at the user's line."""
        span = self.span(node) if node is not None else None
        lets: list[tuple[Var, Expr]] = []
        exprs = self.op_args(op, args, lets)
        try:
            return _let_all(lets, op(*exprs, span=span, **attrs))
        except IRError as e:
            raise DSLSyntaxError(e.raw_message, span) from None

    def materialize(self, value: Expr | _Literal, like: Expr | None = None) -> Expr:
        """An expression for a value; a Python literal takes `like`'s dtype when given."""
        if isinstance(value, _Literal):
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
        at = next((i for i, v in enumerate(values) if not isinstance(v, _Literal)), None)
        if at is None or not any(isinstance(v, _Literal) for v in values):
            return self.materialize_all(values)
        like = values[at]
        if not _is_atomic(like):
            tmp = self.temp("v")
            lets.append((tmp, like))
            values = [*values[:at], tmp, *values[at + 1:]]
            like = tmp
        return [self.materialize(v, like) for v in values]

    def op_args(self, op: OpDef, args: list, lets: list[tuple[Var, Expr]]) -> list[Expr]:
        """An operator's arguments. A number meeting a tensor in an elementwise operator takes
        its dtype (``x * 2``, ``relay.where(c, x, 0.0)``); elsewhere it keeps its own
        (``relay.take(x, 0)``)."""
        if op.pattern is not OpPattern.BROADCAST:
            return self.materialize_all(args)
        first = 1 if op is ops.where else 0  # the condition of `where` is its own
        return [*self.materialize_all(args[:first]),
                *self.materialize_alike(args[first:], lets)]

    def _is_local_name(self, name: str) -> bool:
        return any(name in scope for scope in self._scopes)

    def _unbound_reason(self, name: str) -> str:
        depth, scope = next((d, sc) for d, sc in enumerate(reversed(self._scopes)) if name in sc)
        if scope[name] is not None:
            return scope[name]
        if depth == 0:
            return f"{name!r} is used before it is assigned"
        return (f"{name!r} is used before it is assigned: the enclosing function assigns it "
                "after this function's definition; define the function after assigning it")

    def _note_unbound(self, name: str, reason: str) -> None:
        """Record why `name` is not bound after some statement, for a later use's error."""
        for scope in reversed(self._scopes):
            if name in scope:
                scope[name] = reason
                return
