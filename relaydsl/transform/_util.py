"""Small helpers shared by the passes."""
from __future__ import annotations

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Expr, Function
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import deep_recursion  # noqa: F401  (used by the passes)
from relaydsl.typing.infer import infer_types

PRIMITIVE = Attrs({"Primitive": 1})


def is_primitive(expr: Expr) -> bool:
    """Whether `expr` is a primitive function (``attrs.Primitive == 1``, made by fuse_ops)."""
    return isinstance(expr, Function) and expr.attrs.get("Primitive", 0) == 1


def retyped(out: IRModule, types_kept: bool) -> IRModule:
    """A pass's result `out`, re-typed -- unless the pass kept the types of a typed input:
    changed no function (every node is one of the input's, with its checked type), or
    gave every node it built the type of the node it stands for. Inference would then
    only find the same types again."""
    if types_kept and all(fn.has_type for fn in out.functions.values()):
        return out
    return infer_types(out)
