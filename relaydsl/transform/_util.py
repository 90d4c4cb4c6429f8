"""Small helpers shared by the normal-form and fusion passes."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Expr, Function

PRIMITIVE = Attrs({"Primitive": 1})


def is_primitive(expr: Expr) -> bool:
    """Whether `expr` is a primitive function (``attrs.Primitive == 1``, made by fuse_ops)."""
    return isinstance(expr, Function) and expr.attrs.get("Primitive", 0) == 1


@contextlib.contextmanager
def deep_recursion(limit: int = 20000) -> Iterator[None]:
    """Raises Python's recursion limit while a pass recurses over a deep expression."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)
