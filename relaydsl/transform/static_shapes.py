"""Shapes as static as the values make them: annotations with ``relay.Any`` dropped.

An annotation ``x: Tensor[Float, (relay.Any, 3)] = f(...)`` hides a dimension that the
value may well have statically. Compiled code wants static shapes (native code:
backend/llvm), so before lowering, the llvm pipeline tries the program without such
annotations: every let-bound variable, local function parameter and result type that
mentions ``Any`` loses its annotation, and inference gives it its value's type (the
llvm pipeline's StaticShapes pass, relaydsl/transform/pipeline.py). Where an
annotation is what makes the program type-check (two branches of different shapes joined
as ``(?, 3)``), inference fails and the program is kept as written.

Before::

    let %w: Tensor[(?, 2), float32] = where(%c, %p0, %q);   # %p0: Tensor[(3, 2)]
    transpose(%w)                                            # Tensor[(2, ?)]

After (the same values)::

    let %w = where(%c, %p0, %q);                             # Tensor[(3, 2)]
    transpose(%w)                                            # Tensor[(2, 3)]
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.errors import RelayTypeError
from relaydsl.ir.expr import Expr, Function, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import (
    AnyDim, FuncType, RefType, TensorType, TupleType, Type, TypeCall,
)
from relaydsl.ir.visitor import ExprMutator
from relaydsl.transform.pass_infra import Pass
from relaydsl.typing import infer_types


@dataclass(frozen=True)
class StaticShapes(Pass, opt_level=0,
                   description="drop relay.Any from annotations where the values' shapes are "
                               "static"):
    """The module re-typed without its ``Any`` annotations; the module itself when it has
    none, or when it needs them to type-check. Global functions' parameters keep their
    types."""

    def transform(self, mod: IRModule) -> IRModule:
        dropper = _DropDynamic()
        out = mod.copy()
        for gv, fn in mod.functions.items():
            new = dropper.visit_top(fn)
            if new is not fn:
                out.add(gv, new)
        if not dropper.dropped:
            return mod
        try:  # inference decides: the program stays as written where it needs an annotation
            return infer_types(out)
        except RelayTypeError:
            return mod


def static_shapes(mod: IRModule) -> IRModule:
    """``StaticShapes()(mod)``."""
    return StaticShapes()(mod)


def is_dynamic(t: Type | None) -> bool:
    """Whether `t` mentions a dimension known only at run time."""
    if isinstance(t, TensorType):
        return any(isinstance(d, AnyDim) for d in t.shape)
    if isinstance(t, TupleType):
        return any(is_dynamic(f) for f in t.fields)
    if isinstance(t, FuncType):
        return any(is_dynamic(a) for a in t.arg_types) or is_dynamic(t.ret_type)
    if isinstance(t, TypeCall):
        return any(is_dynamic(a) for a in t.args)
    if isinstance(t, RefType):
        return is_dynamic(t.value)
    return False


class _DropDynamic(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.dropped = False
        self.top: Function | None = None

    def visit_top(self, fn: Function) -> Function:
        """A global function: its parameters keep their annotations (callers rely on
        them); its body and local functions lose their dynamic ones."""
        self.top = fn
        body = self.visit(fn.body)
        ret = fn.ret_type
        if is_dynamic(ret):
            ret, self.dropped = None, True
        if body is fn.body and ret is fn.ret_type:
            return fn
        return Function(fn.params, body, ret, fn.type_params, fn.attrs, span=fn.span)

    def visit_var(self, var: Var) -> Expr:
        if self.top is not None and var in self.top.params:
            return var
        if is_dynamic(var.type_annotation):
            self.dropped = True
            return Var(var.name_hint, None, span=var.span)
        return var

    def visit_function(self, fn: Function) -> Expr:
        new = super().visit_function(fn)
        assert isinstance(new, Function)
        if is_dynamic(new.ret_type):
            self.dropped = True
            return Function(new.params, new.body, None, new.type_params, new.attrs,
                            span=new.span)
        return new
