"""The IR verifier: what every pass must leave true of a module, checked after each one.

With ``RELAYDSL_VERIFY_IR=1`` (the test suite sets it; see relaydsl/settings.py) every
Pass checks its result (pass_infra.py), as JAX's ``check_jaxpr`` and MLIR's verifier do, so
a pass that builds bad IR fails where it does so, naming itself, instead of a later pass or
the code generator failing on its output:

* scoping: every variable is used inside the scope of its binder (a function's parameters,
  a let, a match clause's pattern; a let-bound function sees its own variable), a global
  function has no free variables, and no variable is bound by two binders;
* globals: every global variable used is defined in the module;
* types: inference run afresh finds the types the module's nodes keep (the passes keep
  types they did not re-infer: they must be the ones inference would give).

>>> from relaydsl.ir.expr import Function, Let, Var, const
>>> from relaydsl.ir.module import IRModule
>>> x, y = Var("x"), Var("y")
>>> mod = IRModule.from_expr(Function([x], Let(y, x, y)))
>>> verify(mod, after="MyPass")
>>> bad = IRModule.from_expr(Function([x], Let(y, x, Var("z"))))
>>> verify(bad, after="MyPass")
Traceback (most recent call last):
relaydsl.errors.IRError: after MyPass, @main uses %z outside the scope of any binder of it
"""
from __future__ import annotations

from typing import Sequence

from relaydsl.errors import IRError
from relaydsl.ir.adt import Constructor, pattern_vars
from relaydsl.ir.expr import Expr, Function, GlobalVar, Let, Match, Op, Var
from relaydsl.ir.module import IRModule, installed_prelude
from relaydsl.ir.types import Any, FuncType, TensorType, TupleType, Type
from relaydsl.ir.visitor import (
    ExprVisitor, deep_recursion, let_chain, post_order, type_vars_of,
)
from relaydsl.typing.infer import infer_types


def verify(mod: IRModule, after: str) -> None:
    """Raises IRError, naming the pass `after`, where `mod` breaks a rule of the module doc
    (its types are checked where every function is typed)."""
    functions = _user_functions(mod)
    check_scopes(mod, functions, after)
    if all(fn.has_type for fn in functions.values()):
        check_types(mod, kept_types(functions), after, afresh=True)


def changed_functions(before: IRModule, after: IRModule) -> dict[GlobalVar, Function]:
    """The user functions of `after` that are not those of `before` (a pass rewrote them)."""
    return {gv: fn for gv, fn in _user_functions(after).items()
            if before.functions.get(gv) is not fn}


def check_scopes(mod: IRModule, functions: dict[GlobalVar, Function], after: str) -> None:
    """The scoping and globals rules for `functions` of `mod` (before inference, which would
    fail on them less clearly)."""
    with deep_recursion():
        for gv, fn in functions.items():
            _Scopes(mod, f"after {after}, @{gv.name_hint}").visit(fn)


def kept_types(functions: dict[GlobalVar, Function]) -> dict[Expr, Type]:
    """The types the nodes of `functions` have now: a pass's result, before it is re-typed.

    An operator, a global or a constructor is one node shared by all its uses, each of which
    types it at its instance: its calls' types are the ones compared."""
    kept: dict[Expr, Type] = {}

    def keep(e: Expr) -> None:
        if e.has_type and not isinstance(e, (Op, GlobalVar, Constructor)):
            kept.setdefault(e, e.checked_type)

    with deep_recursion():
        for fn in functions.values():
            post_order(fn, keep)
    return kept


def check_types(mod: IRModule, kept: dict[Expr, Type], after: str, afresh: bool = False
                ) -> None:
    """Types `mod` (afresh: every global; else those not typed before against the same
    callee types, which includes every function a pass rebuilt) and compares each node's
    type with the one it kept."""
    with deep_recursion():
        infer_types(mod, reuse_typed=not afresh)
    for e, before in kept.items():
        if not _agree(before, e.checked_type):
            raise IRError(f"after {after}, a {type(e).__name__} kept the type {before}, but "
                          f"inference finds {e.checked_type}", e.span)


def _agree(kept: Type, found: Type) -> bool:
    """Whether `kept` is `found`, up to the names of type variables (inference makes them
    afresh) and to dimensions one side knows and the other leaves Any (a more precise
    kept type is no error)."""
    if kept == found or type_vars_of(kept) or type_vars_of(found):
        return True
    if isinstance(kept, TensorType) and isinstance(found, TensorType):
        return kept.dtype == found.dtype and len(kept.shape) == len(found.shape) and all(
            a == b or a is Any or b is Any for a, b in zip(kept.shape, found.shape))
    if isinstance(kept, TupleType) and isinstance(found, TupleType):
        return len(kept.fields) == len(found.fields) and all(
            _agree(a, b) for a, b in zip(kept.fields, found.fields))
    if isinstance(kept, FuncType) and isinstance(found, FuncType):
        return len(kept.arg_types) == len(found.arg_types) and _agree(
            kept.ret_type, found.ret_type) and all(
            _agree(a, b) for a, b in zip(kept.arg_types, found.arg_types))
    return str(kept) == str(found)  # equal types may hold distinct relation objects


def _user_functions(mod: IRModule) -> dict[GlobalVar, Function]:
    """The functions not as the prelude installed them: ``mod.user_functions()``, and any
    prelude function a pass rewrote (which that leaves out)."""
    prelude = installed_prelude()[1]
    return {gv: fn for gv, fn in mod.functions.items() if prelude.get(gv) is not fn}


class _Scopes(ExprVisitor):
    """The scoping and globals rules, one walk: `in_scope` holds the variables bound around
    the node visited (a binder adds its variables for its body and takes them out after);
    the memo, that a node a graph shares is checked once."""

    def __init__(self, mod: IRModule, where: str) -> None:
        super().__init__()
        self.mod, self.where = mod, where
        self.binder: dict[Var, Expr] = {}  # each variable's binding node
        self.in_scope: set[Var] = set()

    def fail(self, message: str) -> None:
        raise IRError(f"{self.where} {message}")

    def bind(self, var: Var, node: Expr) -> None:
        if self.binder.setdefault(var, node) is not node:
            self.fail(f"binds %{var.name_hint} twice")

    def visit_var(self, var: Var) -> None:
        if var not in self.in_scope:
            self.fail(f"uses %{var.name_hint} outside the scope of any binder of it")

    def visit_global_var(self, gv: GlobalVar) -> None:
        if gv not in self.mod.functions:
            self.fail(f"uses @{gv.name_hint}, which the module does not define")

    def visit_function(self, fn: Function) -> None:
        self.scoped(fn, fn.params, fn.body)

    def visit_let(self, let: Let) -> None:
        # iterative over the chain, so a long one does not recurse
        chain, body = let_chain(let)
        for e in chain:
            self.bind(e.var, e)
            if isinstance(e.value, Function):  # a let-bound function sees its own variable
                self.in_scope.add(e.var)
                self.visit(e.value)
            else:
                self.visit(e.value)
                self.in_scope.add(e.var)
        self.visit(body)
        self.in_scope.difference_update(e.var for e in chain)

    def visit_match(self, m: Match) -> None:
        self.visit(m.data)
        for clause in m.clauses:
            self.scoped(m, pattern_vars(clause.lhs), clause.rhs)

    def scoped(self, binder: Expr, bound: Sequence[Var], body: Expr) -> None:
        """Visits `body` with the variables `binder` binds in scope."""
        for v in bound:
            self.bind(v, binder)
        self.in_scope.update(bound)
        self.visit(body)
        self.in_scope.difference_update(bound)
