"""Lambda lifting: every local function literal becomes a global function (TVM's LambdaLift).

A literal without free variables becomes a global of its own, and each mention of it the
global's name; a ``let`` binding it goes, its variable replaced by the global::

    def @main(%x: float32) {                   def @main_add1(%y: float32) { add(%y, 1f) }
      let %add1 = fn (%y: float32) {      =>   def @main(%x: float32) { @main_add1(%x) }
        add(%y, 1f)
      };
      %add1(%x)
    }

A closure -- a literal with free variables -- becomes, as in TVM, a global marked
``Closure=1`` that takes the captured variables and returns the literal (now closed over
its parameters only); where the literal was, the global is applied to the variables it
captures, which builds the closure::

    def @main(%x: float32, %b: float32) {      def @main_shift(%b1: float32, Closure=1) {
      let %shift = fn (%y: float32) {     =>     fn (%y: float32) { add(%y, %b1) }
        add(%y, %b)                            }
      };                                       def @main(%x: float32, %b: float32) {
      %shift(%x)                                 let %shift = @main_shift(%b);
    }                                            %shift(%x)
                                               }

A recursive local function (``let %loop = fn (...) { ... %loop(...) ... }``, what ``for``
and ``while`` become) calls the global in its body: ``@main_loop(...)``, or for a closure
``@main_loop(%captured...)(...)``. Literals nested in a literal are lifted first, so the
captured variables of an outer literal include those its inner ones need. Primitive
functions (fused kernels) and the function a ``grad`` differentiates stay where they are;
the inner literal of a ``Closure=1`` global stays too, so lifting twice lifts nothing more.
Parameters without annotation get the type inference gave them (a global's signature must
stand on its own); a global lifted from a polymorphic function is generalised over the
type variables its signature mentions, and where the literal was, a let ascribes the
global's value the literal's type, so that they stay the enclosing function's variables.
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, Function, GlobalVar, Grad, Let, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator, free_vars, let_chain, type_vars_of
from relaydsl.transform._util import is_primitive, substitute
from relaydsl.transform.pass_infra import ON_DEMAND, Pass

CLOSURE = Attrs({"Closure": 1})


@dataclass(frozen=True)
class LambdaLift(Pass, opt_level=ON_DEMAND,
                 description="local function literals become globals (a closure: a Closure=1 "
                             "global of its captures)"):
    """Every local function literal of a user function lifted to a global (see the module
    doc)."""

    def transform(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        for gv, fn in list(out.user_functions().items()):
            new = _Lifter(out, gv.name_hint).lift_global(fn)
            if new is not fn:
                out.add(gv, new)
        return out


def lambda_lift(mod: IRModule) -> IRModule:
    """``LambdaLift()(mod)``."""
    return LambdaLift()(mod)


def is_closure_global(fn: Function) -> bool:
    """Whether `fn` is a lifted closure: a global marked ``Closure=1`` returning a literal."""
    return fn.attrs.get("Closure", 0) == 1 and isinstance(fn.body, Function)


class _Lifter(ExprMutator):
    """Lifts the literals of one global (named `prefix`) into new globals of `mod`."""

    def __init__(self, mod: IRModule, prefix: str):
        super().__init__()
        self.mod = mod
        self.prefix = prefix
        self.replaced: dict[Var, Expr] = {}  # let-bound literals lifted to a plain global

    def lift_global(self, fn: Function) -> Function:
        """`fn` with its literals lifted; the literal a closure global returns stays."""
        target = fn.body if is_closure_global(fn) else fn
        assert isinstance(target, Function)
        body = self.visit(target.body)
        if body is target.body:
            return fn
        inner = Function(target.params, body, target.ret_type, target.type_params,
                         target.attrs, span=target.span)
        if target is fn:
            return inner
        return Function(fn.params, inner, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    def visit(self, expr: Expr) -> Expr:
        # Variables are not memoised: a let-bound literal's variable, once lifted, stands for
        # its global everywhere after, also where an earlier visit met it in the literal.
        if isinstance(expr, Var):
            return self.replaced.get(expr, expr)
        return super().visit(expr)

    def visit_function(self, fn: Function) -> Expr:
        if is_primitive(fn):
            return fn
        value = self.lift(fn, None)
        if not _mentions_type_vars(fn):
            return value
        var = Var("lambda", fn.checked_type, span=fn.span)
        return Let(var, value, var, span=fn.span)

    def visit_grad(self, g: Grad) -> Expr:
        if isinstance(g.fn, Function):  # grad needs its literal: lift only inside it
            body = self.visit(g.fn.body)
            if body is g.fn.body:
                return g
            fn = Function(g.fn.params, body, g.fn.ret_type, g.fn.type_params, g.fn.attrs,
                          span=g.fn.span)
            return Grad(fn, span=g.span)
        return super().visit_grad(g)

    def visit_let(self, let: Let) -> Expr:
        chain, node = let_chain(let)
        kept: list[tuple[Let, Var, Expr]] = []
        for link in chain:
            var, fn = link.var, link.value
            if not isinstance(fn, Function) or is_primitive(fn):
                kept.append((link, var, self.visit(fn)))
                continue
            value = self.lift(fn, var)
            if _mentions_type_vars(fn):
                var = Var(var.name_hint, fn.checked_type, span=var.span)
                self.replaced[link.var] = var
            elif isinstance(value, GlobalVar):  # no closure to build: the let goes
                self.replaced[link.var] = value
                continue
            kept.append((link, var, value))
        body = self.visit(node)
        for link, var, value in reversed(kept):
            if var is not link.var or value is not link.value or body is not link.body:
                body = Let(var, value, body, span=link.span)
            else:
                body = link
        return body

    def lift(self, fn: Function, recursive_var: Var | None) -> Expr:
        """Adds `fn` (bound to `recursive_var` by a let, None for an anonymous literal) as a
        global and returns what builds its value here: the global, or the closure global
        applied to the captured variables."""
        body = self.visit(fn.body)  # inner literals first: their captures become ours
        # a global's signature must stand on its own: unannotated parameters get their types
        params = tuple(p if p.type_annotation is not None else
                       Var(p.name_hint, p.checked_type, span=p.span) for p in fn.params)
        mapping: dict[Var, Expr] = {p: q for p, q in zip(fn.params, params) if q is not p}
        captured = [v for v in free_vars(Function(fn.params, body)) if v is not recursive_var]
        gv = GlobalVar(self._fresh_name(recursive_var))
        # (a variable this pass made is not typed yet, but annotated)
        inner_captured = tuple(Var(v.name_hint, v.checked_type if v.has_type else
                                   v.type_annotation, span=v.span) for v in captured)
        mapping.update(zip(captured, inner_captured))
        if recursive_var is not None:  # the body calls the global (with what it captures)
            mapping[recursive_var] = Call(gv, inner_captured) if captured else gv
        literal = Function(params, substitute(body, mapping), fn.ret_type, fn.type_params,
                           fn.attrs, span=fn.span)
        if not captured:
            self.mod.add(gv, literal)
            return gv
        self.mod.add(gv, Function(inner_captured, literal, None, (), CLOSURE, span=fn.span))
        return Call(gv, tuple(captured), span=fn.span)

    def _fresh_name(self, var: Var | None) -> str:
        base = f"{self.prefix}_{var.name_hint if var is not None else 'lambda'}"
        name, i = base, 0
        while self.mod.has_global(name):
            i += 1
            name = f"{base}{i}"
        return name


def _mentions_type_vars(fn: Function) -> bool:
    """Whether the type of the literal `fn` mentions type variables: those of the function
    around it (its shape variable ``n``), which the global's own type quantifies afresh.
    Where the literal was, a let then ascribes the global's value the literal's type, tying
    them back to the enclosing function's: without it, a closure that escapes (a model
    returned by ``export_model``) would leave ``n`` unknown."""
    return bool(type_vars_of(fn.checked_type))


__all__ = ["lambda_lift", "is_closure_global", "CLOSURE"]
