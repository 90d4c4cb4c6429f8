"""Type inference over expressions and modules (2019 paper §3.2).

Three steps, as in the paper: a pass over the AST generates types (fresh
unification variables where nothing is annotated) and instantiates the type
relations of every operator call; the solver unifies and runs relations to a
fixpoint; finally every sub-expression is annotated with its resolved type
(``expr.checked_type``).

Global functions are checked in dependency order, one strongly connected
component at a time (so mutual recursion works), and generalised over their
type parameters -- the explicit ``type_params`` plus any type variable left
free in their signature (a symbolic dimension ``n`` in ``Tensor[(n, 128)]``).
Calls instantiate those parameters afresh, so one global is usable at
several shapes.

>>> from relaydsl.ir import Var, TensorType, Call, Op
>>> x = Var("x", TensorType((2, 3)))
>>> infer_type(Call(Op.get("add"), [x, x])).checked_type
Tensor[(2, 3), float32]
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
import typing
from typing import TYPE_CHECKING, Callable, cast

from relaydsl.errors import RelayTypeError
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
)
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule, installed_prelude
from relaydsl.ir.types import (
    AnyDim, FuncType, Kind, RefType, TensorType, TupleType, Type, TypeVar, static_type,
    type_to_str,
)
from relaydsl.ir.visitor import ExprFunctor, ExprVisitor, deep_recursion, type_vars_of
from relaydsl.typing.exhaustive import missing_case
from relaydsl.typing.relations import ConcreteContext
from relaydsl.typing.solver import PendingRelation, Solver, UnifyError

if TYPE_CHECKING:
    from relaydsl.ir.attrs import Attrs
    from relaydsl.typing.relations import RelationContext

BOOL_SCALAR = TensorType((), "bool")


# What a context expecting a type says when it gets another: a phrase ("argument 0 of @g"),
# followed by ": expected <type>, got <type>", or a function of the two rendered types.
Describe = str | Callable[[str, str], str]


def _mismatch(what: Describe, expected: Type, actual: Type, detail: str) -> str:
    exp, act = type_to_str(expected), type_to_str(actual)
    head = what(exp, act) if callable(what) else f"{what}: expected {exp}, got {act}"
    return f"{head} ({detail})"


@dataclass(frozen=True)
class _Expectation:
    """A type a context imposed on a value whose type was still unknown (a declared result on
    the body computing it): if the value's operator later yields another type, the error is
    the context's, at its place, not the operator's."""

    expected: Type
    where: Expr | None  # None: at the operator, the value that disagrees
    what: Describe


def _where(expr: Expr) -> str:
    """A short rendering of `expr` for messages about nodes without a source span."""
    try:
        text = " ".join(repr(expr).split())
    except Exception:  # the printer must never hide the real error
        text = type(expr).__name__
    return text if len(text) <= 90 else text[:87] + "..."


class _Inferencer(ExprFunctor[Type]):
    """Generates constraints for one group of globals (or one expression) against one solver."""

    def __init__(self, mod: IRModule, global_types: dict[GlobalVar, FuncType],
                 current: dict[GlobalVar, FuncType], allow_free_vars: bool,
                 static_calls: bool = True):
        super().__init__()  # memo: each node's type
        self.static_calls = static_calls  # see _static_call
        self.mod = mod
        self.solver = Solver()
        self.global_types = global_types  # finished globals: generalised types
        self.current = current  # globals being checked now: provisional types
        self.allow_free_vars = allow_free_vars
        self.env: dict[Var, Type] = {}
        self.nodes: list[Expr] = []
        self.pattern_vars: list[Var] = []
        self.free_var_types: list[Type] = []  # of the free variables allow_free_vars admits
        self.expectations: dict[TypeVar, _Expectation] = {}  # by the root variable they bound
        self.function_names: dict[Function, str] = {}  # -> "%g", when let-bound
        # The local functions with unannotated parameters, in the order met (outer first).
        self.inferred_params: list[tuple[Function, list[tuple[Var, Type]]]] = []

    # ---- errors ----------------------------------------------------------
    def error(self, expr: Expr | None, message: str) -> RelayTypeError:
        span = expr.span if expr is not None else None
        if span is None and expr is not None:
            message += f"\n  in: {_where(expr)}"
        return RelayTypeError(message, span)

    def unify(self, expected: Type, actual: Type, expr: Expr, what: Describe,
              use: Expr | None = None, join: bool = False, at_operator: bool = False) -> Type:
        """Unify or raise at `expr` -- or at `use`, the expression using it, when `expr` is a
        variable: a Var node is shared by all its uses and carries its binding's span.
        A polymorphic function `actual` (or either side of a `join`) is instantiated to meet a
        monomorphic function type.

        When `actual` is still unknown (an operator's result, which its relation computes
        later) and `expected` is not, the expectation is remembered: should the operator
        compute another type, the error is this one, the context's (`_relation_contradicted`),
        at `expr` -- or at the operator, the value that disagrees, for a `join` (each branch
        is as much to blame) or if `at_operator`.
        """
        where = use if use is not None and isinstance(expr, (Var, GlobalVar)) else expr
        pending = self.solver.unbound_root(actual)
        try:
            unified = self.solver.unify(expected, actual, (join, True))
        except UnifyError as e:
            raise self.error(where, _mismatch(what, self.solver.resolve(expected),
                                              self.solver.resolve(actual), e.detail)) from None
        if pending is not None and self.solver.unbound_root(expected) is None:
            self.expectations.setdefault(self.solver.root(pending), _Expectation(
                expected, None if join or at_operator else where, what))
        return unified

    def _relation_contradicted(self, rel: PendingRelation, result: Type, detail: str) -> None:
        """An operator computed a result other than the type a context had bound its output
        to: report the context's mismatch, if a context did."""
        root = rel.out if isinstance(rel.out, TypeVar) else None
        expectation = self.expectations.get(self.solver.root(root)) if root else None
        if expectation is None:
            return
        message = _mismatch(expectation.what, self.solver.resolve(expectation.expected),
                            self.solver.resolve(result), detail)
        if expectation.where is None:
            if rel.span is None:
                message += f"\n  in: {_where(rel.call)}"
            raise RelayTypeError(message, rel.span)
        raise self.error(expectation.where, message)

    def _relation_failed(self, rel: PendingRelation, message: str) -> None:
        args = ", ".join(type_to_str(self.solver.resolve(a)) for a in rel.args)
        prefix = "" if message.startswith(f"{rel.name}:") else f"{rel.name}: "
        text = f"{prefix}{message}\n  argument types: ({args})"
        if rel.span is None:
            text += f"\n  in: {_where(rel.call)}"
        raise RelayTypeError(text, rel.span)

    # ---- expressions -----------------------------------------------------
    def visit(self, expr: Expr) -> Type:
        """The type of `expr`, inferred once per node (``memo``) and listed in ``nodes``."""
        if isinstance(expr, (GlobalVar, Constructor)):
            return self.dispatch(expr)  # polymorphic: a fresh instance at every use
        t = self.memo.get(expr)
        if t is None:
            t = self.memo[expr] = self.dispatch(expr)
            self.nodes.append(expr)
        return t

    infer = visit

    def unsupported(self, expr: Expr) -> Exception:
        return self.error(expr, f"unknown expression node {type(expr).__name__}")

    def visit_constant(self, c: Constant) -> Type:
        return TensorType(c.data.shape, c.data.dtype.name)

    def visit_tuple(self, t: Tuple) -> Type:
        return TupleType(tuple(self.infer(f) for f in t.fields))

    def visit_if(self, i: If) -> Type:
        self.unify(BOOL_SCALAR, self.infer(i.cond), i.cond, "the condition of an if", use=i)
        then = self.infer(i.true_branch)
        return self.unify(then, self.infer(i.false_branch), i,
                          "the two branches of an if must have the same type", join=True)

    def visit_ref_create(self, r: RefCreate) -> Type:
        return RefType(self.infer(r.value))

    def visit_ref_read(self, r: RefRead) -> Type:
        value = self.solver.fresh()
        self.unify(RefType(value), self.infer(r.ref), r, "reading a reference")
        return value

    def visit_ref_write(self, r: RefWrite) -> Type:
        self.unify(RefType(self.infer(r.value)), self.infer(r.ref), r, "writing a reference")
        return TupleType(())

    def visit_constructor(self, c: Constructor) -> Type:
        return self._instantiate(self._constructor_type(c))

    def visit_op(self, op: Op) -> Type:
        raise self.error(op, f"operator {op.name} must be called directly; "
                             "wrap it in a fn to pass it")

    def visit_var(self, var: Var) -> Type:
        t = self.env.get(var)
        if t is not None:
            return t
        if self.allow_free_vars:
            t = var.type_annotation or self.solver.fresh(hint=var.name_hint)
            self.env[var] = t
            self.free_var_types.append(t)
            return t
        raise self.error(var, f"variable %{var.name_hint} is used outside the scope that binds it")

    def _any_free(self, t: Type) -> Type:
        """`t` with each ``relay.Any`` dimension a fresh shape variable."""
        if isinstance(t, TensorType) and any(isinstance(d, AnyDim) for d in t.shape):
            return TensorType(tuple(self.solver.fresh(Kind.Shape, "any")
                                    if isinstance(d, AnyDim) else d for d in t.shape), t.dtype)
        if isinstance(t, TupleType):
            fields = tuple(self._any_free(f) for f in t.fields)
            if any(a is not b for a, b in zip(fields, t.fields)):
                return TupleType(fields)
        return t

    def visit_let(self, let: Let) -> Type:
        node: Expr = let
        chain: list[Let] = []
        while isinstance(node, Let) and (node is let or node not in self.memo):
            var = node.var
            declared = var.type_annotation or self.solver.fresh(hint=var.name_hint)
            if isinstance(node.value, Function):
                self.env[var] = declared  # a let-bound function may call itself
                self.function_names[node.value] = f"%{var.name_hint}"
            value = self.infer(node.value)
            # an annotation's relay.Any dims make the variable's type less static, not the
            # value's: the value is checked against the annotation with those dims left free
            self.unify(self._any_free(declared), value, node,
                       f"the value bound to %{var.name_hint}")
            self.env[var] = declared
            self.memo[var] = declared
            self.nodes.append(var)
            chain.append(node)
            node = node.body
        body = self.infer(node)
        for link in chain[1:]:
            self.memo[link] = body
            self.nodes.append(link)
        return body

    def visit_function(self, fn: Function) -> Type:
        params: list[Type] = []
        inferred: list[tuple[Var, Type]] = []
        for p in fn.params:
            t = p.type_annotation or self.solver.fresh(hint=p.name_hint)
            if p.type_annotation is None:
                inferred.append((p, t))
            self.env[p] = t
            self.memo[p] = t
            self.nodes.append(p)
            params.append(t)
        if inferred and not any(self.mod.functions.get(gv) is fn for gv in self.current):
            self.inferred_params.append((fn, inferred))  # a global's are its callers' business
        if fn.ret_type is None:
            return FuncType(tuple(params), self.infer(fn.body), fn.type_params)

        def declared_result(expected: str, actual: str) -> str:
            return f"the function returns {actual}, but its return annotation is {expected}"

        # At the returned expression. A bare variable's span is where it was bound: then at
        # the operator computing its value, or at the function (whose `def` line holds the
        # annotation) when that is known at once.
        returned = fn.body
        while isinstance(returned, Let):
            returned = returned.body
        self.unify(fn.ret_type, self.infer(fn.body), returned if returned.span else fn,
                   declared_result, use=fn, at_operator=isinstance(returned, Var))
        return FuncType(tuple(params), fn.ret_type, fn.type_params)

    def visit_global_var(self, gv: GlobalVar) -> Type:
        if gv in self.current:
            t = self.current[gv]
            complete = not any(self.solver.is_flexible(v) for v in type_vars_of(t))
            return self._instantiate(t) if complete and t.type_params else t
        if gv in self.global_types:
            return self._instantiate(self.global_types[gv])
        raise self.error(gv, f"@{gv.name_hint} is not a global function of this module")

    def _instantiate(self, t: Type) -> Type:
        """Fresh unification variables for a polymorphic function type's parameters."""
        if not isinstance(t, FuncType) or not t.type_params:
            return t
        return self.solver.instantiate(t)

    def _constructor_type(self, c: Constructor) -> FuncType:
        td = self.mod.type_definitions.get(c.belong_to)
        if td is None:
            raise self.error(c, f"constructor {c.name} belongs to {c.belong_to.name}, "
                                "which this module does not define")
        return FuncType(c.inputs, td.self_type(), td.type_vars)

    def visit_call(self, call: Call) -> Type:
        if isinstance(call.op, Op):
            if self.static_calls:
                static = self._static_call(call)
                if static is not None:
                    return static
            ft = call.op.definition.func_type(call.attrs)
            inst = self._instantiate(ft)
            self.memo[call.op] = inst
            self.nodes.append(call.op)
        else:
            callee = self.solver.resolve(self.infer(call.op))
            if isinstance(callee, TypeVar):
                inst = FuncType(tuple(self.solver.fresh() for _ in call.args), self.solver.fresh())
                self.unify(callee, inst, call.op, "the callee")
            elif isinstance(callee, FuncType):
                inst = self._instantiate(callee)
            else:
                raise self.error(call, f"calling a value of type {type_to_str(callee)}, "
                                       "which is not a function")
        assert isinstance(inst, FuncType)
        name = call.op.name if isinstance(call.op, (Op, Constructor)) else (
            f"@{call.op.name_hint}" if isinstance(call.op, GlobalVar) else "the function")
        if len(inst.arg_types) != len(call.args):
            raise self.error(call, f"{name} takes {len(inst.arg_types)} arguments, "
                                   f"got {len(call.args)}")
        if call.type_args:
            raise self.error(call, "explicit type arguments are not supported; "
                                   "annotate the arguments instead")
        for i, (param, arg) in enumerate(zip(inst.arg_types, call.args)):
            self.unify(param, self.infer(arg), arg, f"argument {i} of {name}", use=call)
        inferable = call.op.definition.infers_inputs if isinstance(call.op, Op) else ()
        for rel in inst.relations:
            self.solver.add_relation(PendingRelation(
                rel.name, rel.func, rel.args, rel.out, rel.attrs, call.span, call,
                inferable=inferable))
        return inst.ret_type

    def _static_call(self, call: Call) -> Type | None:
        """The result type of an operator applied to arguments of static types, computed at
        once by its relation, or None to take the general way (instantiate the operator's type,
        unify, solve the relation later). Most calls of a first-order program are of this kind,
        and the general way costs several times more (a long let chain re-typed after each
        pass). The two find the same types; where the relation fails, None: the general way
        reports it. Errors found later could read differently (a result known at once
        disagrees at its use, not at the operator), so an error is reported from a second
        inference without this way (``_inferred``)."""
        assert isinstance(call.op, Op)
        args: list[Type] = []
        for a in call.args:
            t = self.solver.resolve(self.infer(a))
            if not static_type(t):
                return None
            args.append(t)
        try:
            out = call.op.definition.type_relation(args, call.attrs, ConcreteContext())
        except RelayTypeError:
            return None
        if out is None or not static_type(out):
            return None
        self.memo[call.op] = FuncType(tuple(args), out)
        self.nodes.append(call.op)
        return out

    def visit_grad(self, g: Grad) -> Type:
        """grad(f: fn(t0..tn) -> r) : fn(t0..tn) -> (r, (t0..tn)), r a tensor."""
        fn_type = self.infer(g.fn)
        out = self.solver.fresh(hint="grad")

        def rule(args: list[Type], attrs: Attrs | None, ctx: RelationContext) -> Type:
            f = args[0]
            if not isinstance(f, FuncType):
                ctx.fail(f"grad takes a function, got {type_to_str(f)}")
            ret = f.ret_type
            if not isinstance(ret, (TensorType, TypeVar)) or (
                    isinstance(ret, TensorType) and isinstance(ret.dtype, str)
                    and not ret.dtype.startswith("float")):
                ctx.fail(f"grad needs a function returning a floating-point tensor, got one "
                         f"returning {type_to_str(ret)}")
            return FuncType(f.arg_types, TupleType((f.ret_type, TupleType(f.arg_types))))

        self.solver.add_relation(PendingRelation(
            "grad", rule, (fn_type,), out, None, g.span, g, shallow=True))
        return out

    def visit_tuple_getitem(self, t: TupleGetItem) -> Type:
        tup = self.infer(t.tuple_value)
        out = self.solver.fresh()
        index = t.index

        def project(args: list[Type], attrs: Attrs | None, ctx: RelationContext) -> Type:
            t = args[0]
            if not isinstance(t, TupleType):
                ctx.fail(f"indexing with .{index} needs a tuple, got {type_to_str(t)}")
            if index >= len(t.fields):
                ctx.fail(f"index {index} is out of range for a tuple of {len(t.fields)} fields")
            return t.fields[index]

        self.solver.add_relation(PendingRelation(
            "tuple projection", project, (tup,), out, None, t.span, t, shallow=True))
        return out

    def visit_match(self, m: Match) -> Type:
        data = self.infer(m.data)
        result = self.solver.fresh(hint="match")
        for clause in m.clauses:
            self._pattern(clause.lhs, data, m)
            self.unify(result, self.infer(clause.rhs), clause.rhs,
                       "the clauses of a match must have the same type", use=m, join=True)
        if m.complete:
            missing = missing_case([c.lhs for c in m.clauses], self.mod)
            if missing is not None:
                raise self.error(m, f"the match is not exhaustive: no clause matches {missing} "
                                    "(add a clause or a wildcard `_`)")
        return result

    def _pattern(self, p: Pattern, expected: Type, m: Match) -> None:
        if isinstance(p, PatternWildcard):
            return
        if isinstance(p, PatternVar):
            declared = p.var.type_annotation or self.solver.fresh(hint=p.var.name_hint)
            self.unify(declared, expected, m, f"the pattern variable %{p.var.name_hint}")
            self.env[p.var] = declared
            self.memo[p.var] = declared
            self.pattern_vars.append(p.var)
            return
        if isinstance(p, PatternTuple):
            fields = tuple(self.solver.fresh() for _ in p.patterns)
            self.unify(TupleType(fields), expected, m, "a tuple pattern")
            for sub, t in zip(p.patterns, fields):
                self._pattern(sub, t, m)
            return
        assert isinstance(p, PatternConstructor)
        ft = self._instantiate(self._constructor_type(p.constructor))
        assert isinstance(ft, FuncType)
        self.unify(ft.ret_type, expected, m, f"the pattern {p.constructor.name}(...)")
        for sub, t in zip(p.patterns, ft.arg_types):
            self._pattern(sub, t, m)

    # ---- finishing ---------------------------------------------------------
    def solve_and_annotate(self, interface: tuple[Type, ...]) -> None:
        """Solve, then annotate every node; `interface` are the types the caller sees (the
        signatures being checked), whose variables must be inferred, not defaulted."""
        self.solver.solve(self._relation_failed, self._relation_contradicted)
        for rel in self.solver.unsolved():
            self._check_parameters_inferred(rel.args)
            args = ", ".join(type_to_str(self.solver.resolve(a)) for a in rel.args)
            text = (f"{rel.name}: the argument types ({args}) are not known well enough to infer "
                    "the result (the program is underconstrained: add a type annotation)")
            if rel.span is None:
                text += f"\n  in: {_where(rel.call)}"
            raise RelayTypeError(text, rel.span)
        typed = [*self.nodes, *self.pattern_vars]
        types = self.solver.resolve_many(self.memo[n] for n in typed)
        if self._default_unconstrained(interface, types):
            types = self.solver.resolve_many(self.memo[n] for n in typed)
        for node, t in zip(self.nodes, types):
            if not isinstance(node, Op):
                self._check_complete(node, t)
            node.set_checked_type(t)
        for var, t in zip(self.pattern_vars, types[len(self.nodes):]):
            var.set_checked_type(t)

    def _default_unconstrained(self, interface: tuple[Type, ...], types: list[Type]) -> bool:
        """Make the empty tuple every type variable in `types` (resolved) that nothing
        constrains and the caller does not see, such as the element type in
        ``length(Nil())``; whether there was one. Any type would do: no value of such a type
        is ever built (nothing could build one without constraining it; an empty list holds
        none), so it needs no layout. Shape and dtype variables are not defaulted: tensors of
        them would be built."""
        seen = {v for t in interface for v in type_vars_of(self.solver.resolve(t))}
        defaulted = False
        walked: set[int] = set()  # the types by identity: nodes share them (resolve_many)
        for t in types:
            if id(t) in walked:
                continue
            walked.add(id(t))
            for v in type_vars_of(t):
                if v.kind is Kind.Type and v not in seen and self.solver.is_flexible(v):
                    self.solver.unify(v, TupleType(()))
                    defaulted = True
        return defaulted

    def _check_parameters_inferred(self, types: tuple[Type, ...]) -> None:
        """Raise at the function, naming it and its parameter, if what is still unknown in
        `types` is an unannotated parameter's type: nothing in the program fixes it (the
        function is never called, or only somewhere it could take any type)."""
        unknown = {v for t in types for v in type_vars_of(self.solver.resolve(t))
                   if self.solver.is_flexible(v)}
        if not unknown:
            return
        for fn, inferred in reversed(self.inferred_params):  # the innermost function first
            for p, t in inferred:
                if unknown.intersection(type_vars_of(self.solver.resolve(t))):
                    name = self.function_names.get(fn)
                    example = f"`{p.name_hint}: Tensor[Float, (3,)]`"
                    advice = (f"annotate the parameter, e.g. {example}" if name else
                              f"define it with `def` and annotate the parameter, e.g. {example}")
                    raise self.error(fn, (
                        f"cannot infer the type of parameter {p.name_hint} of "
                        f"{f'the function {name}' if name else 'a lambda'}: nothing calls it "
                        f"with arguments of known types; {advice}"))

    def _check_complete(self, node: Expr, t: Type) -> None:
        unknown = [v for v in type_vars_of(t) if self.solver.is_flexible(v)]
        if unknown:
            self._check_parameters_inferred((t,))
            raise self.error(
                node,
                f"cannot infer a complete type: {type_to_str(t)} is underconstrained "
                "(add a type annotation)",
            )


def _declared_type(fn: Function, solver: Solver) -> FuncType:
    """The signature as annotated, with fresh variables where it is not; generic over the
    annotations' own type variables, so a fully annotated global is polymorphic even
    within its own recursive group."""
    params = tuple(p.type_annotation or solver.fresh(hint=p.name_hint) for p in fn.params)
    ret = fn.ret_type or solver.fresh(hint="ret")
    rigid = [v for v in type_vars_of(FuncType(params, ret))
             if not solver.is_flexible(v) and v not in fn.type_params]
    return FuncType(params, ret, (*fn.type_params, *rigid))


def _function_type(fn: Function) -> FuncType:
    """The type inference gave `fn`: a function type (``checked_type`` is declared a Type)."""
    return cast(FuncType, fn.checked_type)


def _generalise(t: FuncType, fn: Function) -> FuncType:
    """Quantify over explicit type params and any other variable free in the signature."""
    free = [v for v in type_vars_of(FuncType(t.arg_types, t.ret_type)) if v not in t.type_params]
    return FuncType(t.arg_types, t.ret_type, (*fn.type_params, *free))


class _GlobalRefs(ExprVisitor):
    """The globals an expression calls or mentions, in order of first occurrence."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[GlobalVar, None] = {}

    def visit_global_var(self, gv: GlobalVar) -> None:
        self.found[gv] = None


_MENTIONS: dict[Function, tuple[GlobalVar, ...]] = {}


def mentioned_globals(fn: Function) -> tuple[GlobalVar, ...]:
    """The globals `fn` calls or mentions, in order of first occurrence. Remembered per
    function (nodes are immutable): every pass re-types its module, and walking each
    function again to find its callees took a tenth of a long program's build."""
    found = _MENTIONS.get(fn)
    if found is None:
        refs = _GlobalRefs()
        refs.visit(fn)
        found = tuple(refs.found)
        _remember(_MENTIONS, fn, found)
    return found


def call_graph_sccs(mod: IRModule, names: list[GlobalVar]) -> list[list[GlobalVar]]:
    """Strongly connected components of the global call graph, callees first (Tarjan)."""
    return _call_graph(mod, names)[0]


def _call_graph(mod: IRModule, names: list[GlobalVar]
                ) -> tuple[list[list[GlobalVar]], dict[GlobalVar, list[GlobalVar]]]:
    """call_graph_sccs, and the globals each of `names` uses."""
    deps: dict[GlobalVar, list[GlobalVar]] = {}
    for gv in names:
        deps[gv] = [g for g in mentioned_globals(mod.functions[gv]) if g in mod.functions]

    index: dict[GlobalVar, int] = {}
    low: dict[GlobalVar, int] = {}
    stack: list[GlobalVar] = []
    on_stack: set[GlobalVar] = set()
    out: list[list[GlobalVar]] = []

    def strongconnect(v: GlobalVar) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in deps.get(v, []):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[GlobalVar] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w is v:
                    break
            out.append(comp)

    for v in names:
        if v not in index:
            strongconnect(v)
    return out, deps


def infer_types(mod: IRModule, *, reuse_typed: bool = True) -> IRModule:
    """Type-check every global of `mod`, annotating each node's ``checked_type``.

    Raises RelayTypeError naming the location and both disagreeing types.
    Returns `mod` (the nodes are annotated in place; a pass may rely on it). A global
    typed before against the same types of what it calls keeps its types, unless not
    `reuse_typed` (the IR verifier re-infers everything).
    """
    with deep_recursion():
        return _check_globals(mod, _prelude_types(), reuse_typed)


@functools.cache
def _prelude_types() -> dict[GlobalVar, FuncType]:
    """The prelude's function types, checked once, in a module of the prelude alone: its nodes
    are shared by every module, and no module's own definitions (a ``type List`` of its own)
    may bear on them."""
    with deep_recursion():
        mod = _check_globals(IRModule(), None)
    return {gv: _function_type(fn) for gv, fn in mod.functions.items()}


def _check_globals(mod: IRModule, prelude: dict[GlobalVar, FuncType] | None,
                   reuse_typed: bool = True) -> IRModule:
    """infer_types, taking the types of the prelude's functions from `prelude` (None: check
    them too)."""
    prelude_functions = installed_prelude()[1]
    global_types: dict[GlobalVar, FuncType] = {}
    sccs, uses = _call_graph(mod, list(mod.functions))
    for scc in sccs:
        if prelude is not None and all(gv in prelude_functions and (
                prelude_functions[gv] is mod.functions[gv] or mod.functions[gv].has_type)
                for gv in scc):
            # The prelude's own functions, as checked once, or as a pass rewrote and typed
            # them (rechecking would re-annotate the operators they share with user code).
            for gv in scc:
                fn = mod.functions[gv]
                t = prelude[gv] if fn is prelude_functions[gv] else fn.checked_type
                assert isinstance(t, FuncType)
                global_types[gv] = t
                gv.set_checked_type(t)
            continue
        callees = {g: global_types[g] for gv in scc for g in uses[gv] if g not in scc}
        if reuse_typed and all(_TYPED_AGAINST.get(mod.functions[gv]) == callees for gv in scc):
            # typed already, against these very types of what it calls: inference would
            # find the same types again (a pass re-types a module after rewriting a part)
            for gv in scc:
                global_types[gv] = _function_type(mod.functions[gv])
                gv.set_checked_type(global_types[gv])
            continue
        _inferred(functools.partial(_infer_scc, mod, scc, global_types))
        for gv in scc:
            fn = mod.functions[gv]
            t = fn.checked_type
            assert isinstance(t, FuncType)
            general = _generalise(t, fn)
            fn.set_checked_type(general)
            gv.set_checked_type(general)
            global_types[gv] = general
        for gv in scc:
            _remember(_TYPED_AGAINST, mod.functions[gv], callees)
    return mod


def _infer_scc(mod: IRModule, scc: list[GlobalVar], global_types: dict[GlobalVar, FuncType],
               static_calls: bool) -> None:
    """Infer and annotate the mutually recursive globals `scc`."""
    inferencer = _Inferencer(mod, global_types, {}, allow_free_vars=False,
                              static_calls=static_calls)
    for gv in scc:
        inferencer.current[gv] = _declared_type(mod.functions[gv], inferencer.solver)
    signatures: list[Type] = []
    for gv in scc:
        fn = mod.functions[gv]
        t = inferencer.infer(fn)
        signatures.append(t)
        declared = inferencer.current[gv]
        assert isinstance(t, FuncType)
        inferencer.unify(FuncType(declared.arg_types, declared.ret_type),
                           FuncType(t.arg_types, t.ret_type), fn,
                           f"the type of @{gv.name_hint}")
    inferencer.solve_and_annotate(tuple(signatures))


def _inferred(infer: Callable[[bool], None]) -> None:
    """`infer` with static calls typed at once (_Inferencer._static_call); should that find an
    error, `infer` again the general way, which reports it as it always has."""
    try:
        return infer(True)
    except RelayTypeError:
        pass  # (not raised from here: the user's traceback would show both errors)
    infer(False)


_TYPED_AGAINST: dict[Function, dict[GlobalVar, FuncType]] = {}
"""The globals' types each recently inferred global function was typed against (by
identity: a rewritten function is a new object); the oldest forgotten past a bound."""
_REMEMBERED_MAX = 4096  # entries per table of facts about functions (_TYPED_AGAINST, _MENTIONS)


_Fact = typing.TypeVar("_Fact")


def _remember(table: dict[Function, _Fact], fn: Function, fact: _Fact) -> None:
    """``table[fn] = fact``, the oldest entry forgotten past _REMEMBERED_MAX."""
    if len(table) >= _REMEMBERED_MAX:
        # (no lock: a build in another thread may change the table meanwhile, and a lost
        # entry only means finding that fact again)
        with contextlib.suppress(RuntimeError, StopIteration):
            table.pop(next(iter(table)), None)
    table[fn] = fact


def infer_type(expr: Expr, mod: IRModule | None = None) -> Expr:
    """Type-check a standalone expression; free variables take their annotated types.

    Globals of `mod` (by default a module holding only the prelude) may be referenced.
    """
    module = mod if mod is not None else IRModule()
    infer_types(module)
    global_types = {gv: _function_type(fn) for gv, fn in module.functions.items()}

    def infer(static_calls: bool) -> None:
        inferencer = _Inferencer(module, global_types, {}, allow_free_vars=True,
                                 static_calls=static_calls)
        t = inferencer.infer(expr)
        inferencer.solve_and_annotate((t, *inferencer.free_var_types))

    _inferred(infer)
    return expr

