"""Module gathering: the typed module of a decorated function is its own Relay function and
those of every decorated function it reaches, in one mode, with the ADTs declared in Python
that they use.

A function's body resolves its forward references (names of decorated functions defined after
it) when it is gathered, not when it is translated; a function with modes (modes.py) is
gathered in the variant of the mode asked for, and so are the functions it calls, while the
losses its training loop differentiates (its ``mode_callees``) come in their own modes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from relaydsl.frontend.adt import USER_TYPES
from relaydsl.frontend.modes import Mode, ModeVariant
from relaydsl.ir.adt import TypeData
from relaydsl.ir.expr import Constructor, Function, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import GlobalTypeVar, Type, TypeCall
from relaydsl.ir.visitor import ExprVisitor, TypeMutator

if TYPE_CHECKING:
    from relaydsl.frontend.function import RelayFunction


def gather_module(root: RelayFunction, mode: Mode) -> IRModule:
    """The module of `root`'s variant in `mode` and of every decorated function it reaches
    (untyped)."""
    mod = IRModule()
    pending, seen = [(root, mode)], set()
    while pending:
        f, m = pending.pop()
        m = m if f.has_modes else Mode.INFERENCE
        if (f, m) in seen:
            continue
        seen.add((f, m))
        resolve = f.resolve_forward_refs()
        if m is Mode.INFERENCE:
            out = resolve.visit(f.function)
        else:
            variants = {c.global_var: c.global_var_for(m) for c in [f, *f.callees]}
            state = {h.var for h in f.hidden if h.spec.state}
            out = ModeVariant(f.training_forms, state if m is Mode.UPDATE else set(),
                              resolve.followed_by(variants), resolve.self_calls
                              ).visit(f.function)
        assert isinstance(out, Function)
        for td in _user_types_in(out):
            if td.header not in mod.type_definitions:
                mod.add_type(td)
        mod.add(f.global_var_for(m), out)
        pending.extend((c, m) for c in f.callees)
        pending.extend(f.mode_callees)
    return mod


def _user_types_in(fn: Function) -> list[TypeData]:
    """The ADTs declared in Python that `fn` constructs, matches or mentions in annotations."""
    collect = _CollectUserTypes(USER_TYPES)
    collect.visit(fn)
    return collect.found


class _CollectUserTypes(ExprVisitor):
    """The user ADTs an expression mentions, and those their constructors' fields mention."""

    def __init__(self, user_types: dict[GlobalTypeVar, TypeData]) -> None:
        super().__init__()
        self.user_types = user_types
        self.found: list[TypeData] = []

    def note_header(self, header: GlobalTypeVar) -> None:
        td = self.user_types.get(header)
        if td is not None and td not in self.found:
            self.found.append(td)
            for c in td.constructors:
                for t in c.inputs:
                    self.note_type(t)

    def note_type(self, t: Type | None) -> None:
        if t is None:
            return
        for sub in _type_calls(t):
            self.note_header(sub.func)

    def visit_constructor(self, c: Constructor) -> None:
        self.note_header(c.belong_to)

    def visit_var(self, v: Var) -> None:
        self.note_type(v.type_annotation)

    def visit_function(self, f: Function) -> None:
        self.note_type(f.ret_type)
        super().visit_function(f)


def _type_calls(t: Type) -> list[TypeCall]:
    find = _FindTypeCalls()
    find.visit(t)
    return find.found


class _FindTypeCalls(TypeMutator):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[TypeCall] = []

    def visit(self, x: Type) -> Type:
        if isinstance(x, TypeCall):
            self.found.append(x)
        return super().visit(x)
