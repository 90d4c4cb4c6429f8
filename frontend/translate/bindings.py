"""What a Python name is bound to, and the lets and block endings that bind them."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any as AnyValue, Callable, Iterable

from relaydsl.ir.expr import Constant, Constructor, Expr, GlobalVar, Let, Op, Var
from relaydsl.ir.span import Span

if TYPE_CHECKING:
    from relaydsl.frontend.translate.kinds import Kind


@dataclass
class Binding:
    """A Python name bound to a Relay expression; `kind` is what is known of its value."""

    expr: Expr
    kind: Kind = None  # see kinds.py
    annotation: AnyValue = None
    captured_by: str | None = None  # "the function 'g' (line 3)" once a closure reads it


Env = dict[str, Binding]
LetBinding = tuple[Var, Expr, "Span | None"]  # a let, with the span of its statement


@dataclass
class BlockEnd:
    """What falling off the end of a block means where it is."""

    fallthrough: Callable[[Env], Expr]
    in_loop: bool = False
    # names first bound in the block that the fallthrough reads (a join of branches)
    live: frozenset[str] = frozenset()


def is_atomic(e: Expr) -> bool:
    """Whether using `e` twice costs nothing (no computation is repeated)."""
    return isinstance(e, (Var, Constant, GlobalVar, Op, Constructor))


def let_all(lets: Iterable[tuple[Var, Expr] | LetBinding], body: Expr) -> Expr:
    """``let var = value; ...; body``; a binding's third item is the span of its statement."""
    for var, value, *span in reversed(list(lets)):
        body = Let(var, value, body, span=span[0] if span else None)
    return body


def is_value_path(node: ast.Attribute, env: Env) -> bool:
    """Whether `a.b.c` starts from a value of the function (not a Python object)."""
    root: ast.expr = node
    while isinstance(root, ast.Attribute):
        root = root.value
    return not isinstance(root, ast.Name) or root.id in env
