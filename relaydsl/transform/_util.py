"""Small helpers shared by the normal-form and fusion passes."""
from __future__ import annotations

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Expr, Function
from relaydsl.ir.visitor import deep_recursion  # noqa: F401  (used by the passes)

PRIMITIVE = Attrs({"Primitive": 1})


def is_primitive(expr: Expr) -> bool:
    """Whether `expr` is a primitive function (``attrs.Primitive == 1``, made by fuse_ops)."""
    return isinstance(expr, Function) and expr.attrs.get("Primitive", 0) == 1
