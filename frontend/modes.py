"""Modes: the variants of a function that uses a model with a mode-dependent layer.

Such a function (one with a batch_norm or dropout layer call, or calling a function using a
model that has one) has a variant in each `Mode`, each its own global:

- ``Mode.INFERENCE``, the function as written: batch_norm uses the running statistics,
  dropout is the identity;
- ``Mode.TRAINING``: batch statistics, dropout with the step's key; pure, it is what
  gradients are taken of;
- ``Mode.UPDATE``: training, and the state parameters are references that the layers update
  (the running statistics folded in, the dropout keys advanced).

A layer builds its inference form, which the function holds, and registers its training form
(layers.py, ``LayerContext.modal``); `ModeVariant` rewrites the inference form into the
training or update variant. Every variant starts from `ReplaceGlobals`, which resolves the
function's forward references to decorated functions (that alone makes the inference one).
"""
from __future__ import annotations

from enum import Enum

from relaydsl.errors import DSLSyntaxError
from relaydsl.frontend.layers import TrainingForm
from relaydsl.ir.adt import Pattern, PatternVar
from relaydsl.ir.expr import Call, Expr, Function, GlobalVar, Var
from relaydsl.ir.types import RefType
from relaydsl.ir.visitor import ExprMutator


class Mode(Enum):
    """What a function using a model runs for: see the module docstring."""

    INFERENCE = "inference"
    TRAINING = "training"
    UPDATE = "update"


class ReplaceGlobals(ExprMutator):
    """Replaces globals by `mapping`; a call of a global in `self_calls` (a function's call
    of itself) also passes those hidden parameters on."""

    def __init__(self, mapping: dict[GlobalVar, GlobalVar],
                 self_calls: dict[GlobalVar, tuple[Var, ...]] | None = None) -> None:
        super().__init__()
        self.mapping = mapping
        self.self_calls = self_calls or {}

    def followed_by(self, mapping: dict[GlobalVar, GlobalVar]) -> dict[GlobalVar, GlobalVar]:
        """This mutator's replacements, each followed by `mapping`, and `mapping`'s."""
        return {**mapping, **{k: mapping.get(v, v) for k, v in self.mapping.items()}}

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        if gv in self.self_calls:
            raise DSLSyntaxError(f"{gv.name_hint} has hidden parameters, so it can only be "
                                 "called, not used as a value", gv.span)
        return self.mapping.get(gv, gv)

    def visit_call(self, call: Call) -> Expr:
        hidden = self.self_calls.get(call.op) if isinstance(call.op, GlobalVar) else None
        if hidden is None:
            return super().visit_call(call)
        args = [self.visit(a) for a in (*call.args, *hidden)]
        return Call(self.mapping[call.op], args, call.attrs, call.type_args, span=call.span)


class ModeVariant(ReplaceGlobals):
    """A function's training (or update) variant, from its inference form: each
    mode-dependent layer call in its training form, the calls of functions with modes to
    their variants in the same mode. Every variable is bound anew: the variants share no
    binder (a state parameter is a tensor in one, a reference in another: `refs` are the
    state parameters of the update variant, their annotations wrapped in Ref)."""

    def __init__(self, forms: dict[Call, TrainingForm], refs: set[Var],
                 globals_: dict[GlobalVar, GlobalVar],
                 self_calls: dict[GlobalVar, tuple[Var, ...]]) -> None:
        super().__init__(globals_, self_calls)
        self.forms, self.refs = forms, refs
        self.update = bool(refs)
        self.renamed: dict[Var, Var] = {}

    def bind(self, v: Var) -> Var:
        if v not in self.renamed:
            annotation = v.type_annotation
            if v in self.refs and annotation is not None:
                annotation = RefType(annotation)
            self.renamed[v] = Var(v.name_hint, annotation, span=v.span)
        return self.renamed[v]

    def visit_var(self, v: Var) -> Expr:
        return self.renamed.get(v, v)

    def visit_let_var(self, v: Var) -> Var:
        return self.bind(v)

    def visit_function(self, f: Function) -> Expr:
        for p in f.params:
            self.bind(p)
        return super().visit_function(f)

    def visit_pattern(self, p: Pattern) -> Pattern:
        if isinstance(p, PatternVar):
            self.bind(p.var)
        return super().visit_pattern(p)

    def visit_call(self, call: Call) -> Expr:
        form = self.forms.get(call)
        if form is not None:
            return form([self.visit(a) for a in call.args], self.update)
        return super().visit_call(call)
