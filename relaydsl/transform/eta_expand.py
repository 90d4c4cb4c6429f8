"""Eta-expansion: a global function or a constructor used as a value becomes a function
literal that calls it (TVM's EtaExpand, with its expand_global_var and expand_constructor).

Only mentions that are not called are expanded; a call ``@aux(%y)`` or ``Cons(%h, %t)``
stays as it is::

    def @aux(%x: int32) { %x }                 def @aux(%x: int32) { %x }
    def @main() {                         =>   def @main() {
      (@aux, Cons)                               (fn (%x: int32) { @aux(%x) },
    }                                             fn (%x0, %x1) { Cons(%x0, %x1) })
                                               }

The literal's parameters are named after the global's and annotated with its parameter
types, or the constructor's field types, unless these mention type variables (a polymorphic
global or data type): inference then types the literal where it is used. Each mention gets
a literal of its own, so no variable is bound twice.
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.ir.adt import Constructor, Pattern
from relaydsl.ir.expr import Call, Expr, Function, GlobalVar, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import FuncType, Type
from relaydsl.ir.visitor import ExprMutator, type_vars_of
from relaydsl.transform._util import is_primitive, rewrite_functions
from relaydsl.transform.pass_infra import ON_DEMAND, Pass


@dataclass(frozen=True)
class EtaExpand(Pass, opt_level=ON_DEMAND,
                description="a global or constructor used as a value becomes a literal "
                            "calling it"):
    """Globals (`expand_global_var`) and constructors (`expand_constructor`) mentioned as
    values become function literals calling them."""

    expand_global_var: bool = True
    expand_constructor: bool = True

    def transform(self, mod: IRModule) -> IRModule:
        def expand(fn: Function) -> Expr:
            return _EtaExpand(mod, self.expand_global_var, self.expand_constructor).visit(fn)

        return rewrite_functions(mod, expand)


def eta_expand(mod: IRModule, *, expand_global_var: bool = True,
               expand_constructor: bool = True) -> IRModule:
    """``EtaExpand(expand_global_var, expand_constructor)(mod)``."""
    return EtaExpand(expand_global_var, expand_constructor)(mod)


class _EtaExpand(ExprMutator):
    def __init__(self, mod: IRModule, globals_: bool, constructors: bool):
        super().__init__()
        self.mod = mod
        self.globals = globals_
        self.constructors = constructors

    def visit(self, expr: Expr) -> Expr:
        # a global or constructor node is shared by all its mentions: each gets a literal
        if isinstance(expr, GlobalVar):
            return self.visit_global_var(expr)
        if isinstance(expr, Constructor):
            return self.visit_constructor(expr)
        return super().visit(expr)

    def visit_call(self, call: Call) -> Expr:
        if not isinstance(call.op, (GlobalVar, Constructor)):
            return super().visit_call(call)
        args = [self.visit(a) for a in call.args]  # the callee stays: it is called
        if all(a is b for a, b in zip(args, call.args)):
            return call
        return Call(call.op, tuple(args), call.attrs, call.type_args, span=call.span)

    def visit_function(self, fn: Function) -> Expr:
        return fn if is_primitive(fn) else super().visit_function(fn)

    def visit_pattern(self, p: Pattern) -> Pattern:
        return p  # a pattern's constructor is matched against, not a value


    def visit_global_var(self, gv: GlobalVar) -> Expr:
        if not self.globals or gv not in self.mod.functions:
            return gv
        t = gv.checked_type
        assert isinstance(t, FuncType)
        names = [p.name_hint for p in self.mod[gv].params]
        return _calling(gv, names, t.arg_types)

    def visit_constructor(self, c: Constructor) -> Expr:
        if not self.constructors:
            return c
        return _calling(c, [f"x{i}" for i in range(len(c.inputs))], c.inputs)


def _calling(callee: Expr, names: list[str], types: tuple[Type, ...]) -> Function:
    """``fn (%names: types) { callee(%names) }``, without annotations that mention type
    variables."""
    params = tuple(Var(name, None if type_vars_of(t) else t) for name, t in zip(names, types))
    return Function(params, Call(callee, params))


__all__ = ["EtaExpand", "eta_expand"]
