"""Defunctionalization where a function parameter has one static target: a higher-order
global called with a known function becomes a first-order copy specialised to it.

A call of a global ``@g`` passing, for a function-typed parameter ``%f``, a global function
``@h``, a function literal, or a variable let-bound to one, calls instead a copy
``@g_h`` without that parameter, in which ``%f(args)`` is ``@h(args)`` (a literal is
applied in place: its body, on fresh variables). What a literal captures becomes leading
parameters of the copy, passed at the call. The recursion of ``@g`` must pass ``%f`` on
unchanged -- then ``%f`` has that one target throughout, and the copy's recursive calls
call the copy::

    def @map<a, b>(%f: fn(a) -> b, %xs: List[a]) -> List[b] {
      match (%xs) { Cons(%x, %rest) => Cons(%f(%x), @map(%f, %rest)), Nil => Nil }
    }
    def @main(%l: List[float32], %s: float32) { @map(fn (%v: float32) { %v * %s }, %l) }

        =>  def @map_fn(%s1: float32, %xs: List[float32]) {
              match (%xs) { Cons(%x, %rest) => Cons(%x * %s1, @map_fn(%s1, %rest)), Nil => Nil }
            }
            def @main(%l: List[float32], %s: float32) { @map_fn(%s, %l) }

A copy is typed as the call instantiates the global: its parameters and result take the
types the call's arguments give the global's type parameters (those of a polymorphic target,
like ``@id``, count for nothing), and an annotation that still mentions one is left to
inference. A call with several static function arguments is specialised once per round,
each round re-typing the module; the copies are memoised by (global, parameter, target,
instantiated types), so specialising ``@a`` and ``@b`` that pass ``%f`` to each other ends,
and a bound on the rounds ends any other chain. A literal capturing a function-typed
variable (a recursive local function, another closure) is not a static target: its copy
would still be higher order. The original globals stay (other calls may use them).
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import FuncType, RefType, TensorType, TupleType, Type, TypeCall, TypeVar
from relaydsl.ir.visitor import ExprMutator, ExprVisitor, free_vars, substitute_types, type_vars_of
from relaydsl.transform._util import is_primitive, substitute
from relaydsl.transform.dead_code import remove_dead_lets
from relaydsl.transform.inline import fresh_copy, inlined_call
from relaydsl.transform.pass_infra import ON_DEMAND, Pass
from relaydsl.typing.infer import infer_types

MAX_ROUNDS = 8
"""How many rounds of specialisation at most (a round specialises each call once)."""

Target = GlobalVar | Function  # a global function, or a function literal


@dataclass(frozen=True)
class Defunctionalization(Pass, opt_level=ON_DEMAND,
                          description="a higher-order global called with a known function "
                                      "becomes a first-order copy"):
    """Calls of higher-order globals with static function arguments call first-order copies
    of them (see the module doc)."""

    def transform(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        copies = _Copies(out)
        for _ in range(MAX_ROUNDS):
            changed = False
            for gv, fn in list(out.user_functions().items()):
                new = _Specialise(copies).visit(fn)
                assert isinstance(new, Function)  # a function's rewrite is a function
                if new is not fn:
                    new = remove_dead_lets(new)  # a literal's let, now called nowhere
                    assert isinstance(new, Function)
                    out.add(gv, new)
                    changed = True
            if not changed:
                break
            infer_types(out)  # the copies' literals are next: their captures need types
        return out


def defunctionalize(mod: IRModule) -> IRModule:
    """``Defunctionalization()(mod)``."""
    return Defunctionalization()(mod)


class _Copies:
    """The specialised copies of the module's globals, made on demand and memoised."""

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.made: dict[tuple[GlobalVar, int, Target, tuple[Type | None, ...]], GlobalVar] = {}

    def get(self, g: GlobalVar, i: int, target: Target, name: str, captured: list[Var],
            arg_types: list[Type]) -> GlobalVar | None:
        """The copy of `g` with parameter `i` fixed to `target` (called `name`; its captured
        variables lead the copy's parameters) for a call with arguments of `arg_types`, or
        None if `g` passes that parameter on changed."""
        signature = _instantiate(g.checked_type, arg_types, first=i)
        key = (g, i, target, (*signature[0], signature[1]))
        if key not in self.made:
            fn = self.mod[g]
            if not _passes_on_unchanged(g, fn, i):
                return None
            gv = GlobalVar(self._fresh_name(f"{g.name_hint}_{name}"))
            self._make(gv, g, fn, i, target, captured, signature)
            self.made[key] = gv
        return self.made[key]

    def _make(self, gv: GlobalVar, g: GlobalVar, fn: Function, i: int, target: Target,
              captured: list[Var], signature: tuple[list[Type | None], Type | None]) -> None:
        """Adds `gv`, the copy of `fn` (global `g`) with parameter `i` fixed to `target`."""
        fn = fresh_copy(fn)  # its annotations with g's type variables are dropped
        leading = [Var(v.name_hint, v.checked_type) for v in captured]
        if isinstance(target, Function):
            target = substitute(target, dict(zip(captured, leading)))  # type: ignore[assignment]
        body = _Instantiate(g, gv, i, fn.params[i], target, leading).visit(fn.body)
        arg_types, ret_type = signature
        params = [Var(p.name_hint, t, span=p.span) for p, t in
                  zip(fn.params, arg_types)]  # typed as at the call
        body = substitute(body, dict(zip(fn.params, params)))
        del params[i]
        self.mod.add(gv, Function((*leading, *params), body, ret_type, (), fn.attrs,
                                  span=fn.span))

    def _fresh_name(self, base: str) -> str:
        name, i = base, 0
        while self.mod.has_global(name):
            i += 1
            name = f"{base}{i}"
        return name


def _instantiate(t: Type, arg_types: list[Type], first: int
                 ) -> tuple[list[Type | None], Type | None]:
    """The signature `t` of a global, its type parameters replaced by what a call with
    arguments of `arg_types` gives them (argument `first`, the function, matched last: a
    polymorphic target leaves them to the other arguments); where one stays unknown, the
    type that mentions it is None, left to inference."""
    assert isinstance(t, FuncType)
    params = set(t.type_params)
    target = arg_types[first]
    foreign: set[TypeVar] = set(target.type_params) if isinstance(target, FuncType) else set()
    mapping: dict[TypeVar, object] = {}

    def match(pattern: object, actual: object) -> None:
        if isinstance(pattern, TypeVar):
            if pattern in params and actual not in foreign and (
                    pattern not in mapping or isinstance(mapping[pattern], TypeVar)):
                mapping[pattern] = actual
        elif isinstance(pattern, TensorType) and isinstance(actual, TensorType) and \
                len(pattern.shape) == len(actual.shape):
            for p, a in zip((*pattern.shape, pattern.dtype), (*actual.shape, actual.dtype)):
                match(p, a)
        elif isinstance(pattern, FuncType) and isinstance(actual, FuncType):
            for p, a in zip((*pattern.arg_types, pattern.ret_type),
                            (*actual.arg_types, actual.ret_type)):
                match(p, a)
        elif isinstance(pattern, TupleType) and isinstance(actual, TupleType):
            for p, a in zip(pattern.fields, actual.fields):
                match(p, a)
        elif isinstance(pattern, TypeCall) and isinstance(actual, TypeCall):
            for p, a in zip(pattern.args, actual.args):
                match(p, a)
        elif isinstance(pattern, RefType) and isinstance(actual, RefType):
            match(pattern.value, actual.value)

    order = [j for j in range(len(arg_types)) if j != first] + [first]
    for j in order:
        match(t.arg_types[j], arg_types[j])
    def instantiated(pattern: Type) -> Type | None:
        out = substitute_types(pattern, mapping)
        return None if set(type_vars_of(out)) & params else out

    return [instantiated(a) for a in t.arg_types], instantiated(t.ret_type)


def _passes_on_unchanged(g: GlobalVar, fn: Function, i: int) -> bool:
    """Whether every call `fn` (the body of `g`) makes of `g` passes its parameter `i`
    at position `i`."""
    param = fn.params[i]
    ok = True

    class Calls(ExprVisitor):
        def visit_call(self, call: Call) -> None:
            nonlocal ok
            if call.op is g and call.args[i] is not param:
                ok = False
            super().visit_call(call)

    Calls().visit(fn.body)
    return ok


class _Specialise(ExprMutator):
    """Replaces calls of higher-order globals with a static function argument by calls of
    their copies."""

    def __init__(self, copies: _Copies):
        super().__init__()
        self.copies = copies
        self.literals: dict[Var, Function] = {}  # variables let-bound to function literals

    def visit_let(self, let: Let) -> Expr:
        node: Expr = let
        while isinstance(node, Let):
            if isinstance(node.value, Function) and not is_primitive(node.value):
                self.literals[node.var] = node.value
            node = node.body
        return super().visit_let(let)

    def visit_call(self, call: Call) -> Expr:
        g = call.op
        if not (isinstance(g, GlobalVar) and g in self.copies.mod.functions):
            return super().visit_call(call)
        signature = g.checked_type
        assert isinstance(signature, FuncType)
        for i, arg in enumerate(call.args):
            target, name = self._static_target(arg)
            if target is None or not isinstance(signature.arg_types[i], FuncType):
                continue
            captured = [] if isinstance(target, GlobalVar) else free_vars(target)
            if any(isinstance(v.checked_type, FuncType) for v in captured):
                continue  # the copy would still take a function
            copy = self.copies.get(g, i, target, name, captured,
                                   [a.checked_type for a in call.args])
            if copy is None:
                continue
            rest = [self.visit(a) for j, a in enumerate(call.args) if j != i]
            return Call(copy, (*captured, *rest), span=call.span)
        return super().visit_call(call)

    def _static_target(self, arg: Expr) -> tuple[Target | None, str]:
        """The function `arg` is, if known here, and a name for it."""
        if isinstance(arg, GlobalVar) and arg in self.copies.mod.functions:
            return arg, arg.name_hint
        if isinstance(arg, Var):
            return self.literals.get(arg), arg.name_hint
        if isinstance(arg, Function) and not is_primitive(arg):
            return arg, "fn"
        return None, ""


class _Instantiate(ExprMutator):
    """The body of a copy of `g` with `param` fixed to `target`: calls of `param` call the
    target, other mentions are the target's value, and `g`'s recursive calls call the copy
    `gv` (with the captured variables `leading`, without `param`)."""

    def __init__(self, g: GlobalVar, gv: GlobalVar, i: int, param: Var, target: Target,
                 leading: list[Var]):
        super().__init__()
        self.g, self.gv, self.i, self.param = g, gv, i, param
        self.target, self.leading = target, leading

    def visit(self, expr: Expr) -> Expr:
        if expr is self.param:  # not memoised: each mention gets a literal of its own
            return self.target if isinstance(self.target, GlobalVar) else \
                fresh_copy(self.target)
        return super().visit(expr)

    def visit_call(self, call: Call) -> Expr:
        if call.op is self.param:
            args = [self.visit(a) for a in call.args]
            if isinstance(self.target, GlobalVar):
                return Call(self.target, tuple(args), span=call.span)
            return inlined_call(self.target, args, call.span)
        if call.op is self.g:
            args = [self.visit(a) for j, a in enumerate(call.args) if j != self.i]
            return Call(self.gv, (*self.leading, *args), span=call.span)
        return super().visit_call(call)


__all__ = ["Defunctionalization", "defunctionalize", "MAX_ROUNDS"]
