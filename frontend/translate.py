"""Python AST -> Relay: the translation of one decorated function.

Statements are translated in continuation style: each assignment becomes a
``let`` whose body is the rest of the block, so rebinding a Python name makes
a new Relay variable. Control flow follows the 2019 paper's conversion of
loops into tail-recursive functions:

- ``if`` without a ``return`` inside joins its branches: the names either
  branch assigns come back as a tuple (``let (a, b) = if c {...; (a, b)} else {...}``);
  an ``if`` with a ``return`` inside takes the rest of the block into each branch;
- ``for``/``while`` become a local recursive function over the loop state (the
  names the body reassigns), called once; the call's result rebinds them;
- nested ``def`` and ``lambda`` become closures (``let f = fn ...``, recursive).

Straight-line statements are iterated, not recursed into, so long functions translate.
Names follow Python's scoping: a name assigned anywhere in a function is local to it, so a
use where it is not bound (before its assignment, after an ``if`` that assigns it in one
branch only, after the loop that first assigns it) is an error, never a global. Closures
capture values, so a name a nested function reads may not be rebound after it (Python's
closure would see the new value). Python numbers fold as Python computes them; a number
meeting a tensor in an elementwise operator takes its dtype (``cast_like(0.1f64, %x)``, with
``%x`` let-bound when it is not a variable, so it is computed once); elsewhere it is an Int,
a Float or a Bool. What is known statically of each value (`Translator.kind_of`: a tensor, a
tuple and its fields, a list, a function) decides what ``t[0]`` and ``for`` mean.

Every node gets the span of the Python node it comes from, so type errors
point at the user's line. Anything outside the subset is a DSLSyntaxError
located at the construct, saying what to write instead where that is clear.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field, replace
from typing import Any as AnyValue, Callable, Iterable

import numpy as np

from frontend.source import Source
from relaydsl.errors import DSLSyntaxError, IRError
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
)
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, Tuple, TupleGetItem,
    Var, const,
)
from relaydsl.ir.span import Span
from relaydsl.ir.types import TensorType, Type, TypeVar

_BINOPS = {
    ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide",
    ast.MatMult: "matmul", ast.Pow: "power", ast.FloorDiv: "floor_divide", ast.Mod: "mod",
}
_COMPARE = {
    ast.Eq: "equal", ast.NotEq: "not_equal", ast.Lt: "less", ast.LtE: "less_equal",
    ast.Gt: "greater", ast.GtE: "greater_equal",
}
_INT32 = TensorType((), "int32")
_INT32_RANGE = (-2**31, 2**31 - 1)

# Python operators folded when both operands are Python numbers.
_PYTHON_BINOPS: dict[type, Callable[[AnyValue, AnyValue], AnyValue]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}

# What to write instead of common constructs outside the subset.
_UNSUPPORTED_STATEMENTS: dict[type, str] = {
    ast.Try: "`try` is not supported: exceptions are not part of the language; check "
             "conditions with `if`",
    ast.With: "`with` is not supported; call functions directly",
    ast.Global: "`global` is not supported; pass the value as an argument",
    ast.Nonlocal: "`nonlocal` is not supported; return the new value instead",
    ast.ClassDef: "classes cannot be defined inside decorated functions; define ADTs at "
                  "module level",
    ast.Delete: "`del` is not supported; simply stop using the name",
    ast.Raise: "`raise` is not supported: exceptions are not part of the language",
    ast.Assert: "`assert` is not supported; check the inputs before calling the function",
    ast.Import: "imports are not allowed inside decorated functions; import at module level",
    ast.ImportFrom: "imports are not allowed inside decorated functions; import at module level",
    ast.AsyncFunctionDef: "`async def` is not supported; use a plain nested `def`",
    ast.AsyncFor: "`async for` is not supported; use `for`",
    ast.AsyncWith: "`async with` is not supported; call functions directly",
    ast.Break: "`break` is not supported; put the exit test in a `while` condition",
    ast.Continue: "`continue` is not supported; use `if` around the rest of the body",
}
_UNSUPPORTED_EXPRESSIONS: dict[type, str] = {
    ast.Yield: "generators are not supported; return a tuple or a relay.List",
    ast.YieldFrom: "generators are not supported; return a tuple or a relay.List",
    ast.Await: "`await` is not supported",
    ast.Dict: "dicts are not supported; use a tuple",
    ast.DictComp: "dict comprehensions are not supported; use a tuple or a relay.List",
    ast.SetComp: "set comprehensions are not supported; use a tuple or a relay.List",
    ast.Set: "sets are not supported; use a tuple",
    ast.GeneratorExp: "generator expressions are not supported; use a `for` loop",
    ast.ListComp: "list comprehensions are not supported; use a `for` loop or relay.map",
    ast.JoinedStr: "f-strings are not supported",
    ast.Starred: "starred expressions are not supported; write each element",
    ast.NamedExpr: "`:=` is not supported; assign in a separate statement",
}


class _Literal:
    """A Python number in the program: it takes the dtype of the tensor it meets."""

    __slots__ = ("value", "span")

    def __init__(self, value: int | float | bool, span: Span | None):
        self.value, self.span = value, span

    def default(self) -> Constant:
        """The number on its own: bool, int32 or float32 (Python's defaults in the DSL)."""
        self._check_int32()
        return const(self.value, span=self.span)

    def wide(self) -> Constant:
        """The number at full precision (bool, int64 or float64), for ``cast_like``."""
        v = self.value
        if isinstance(v, bool):
            return const(v, "bool", span=self.span)
        if isinstance(v, int):
            if not -2**63 <= v < 2**63:
                raise DSLSyntaxError(f"the integer {v} does not fit in 64 bits", self.span)
            return const(v, "int64", span=self.span)
        return const(v, "float64", span=self.span)

    def _check_int32(self) -> None:
        v = self.value
        if isinstance(v, int) and not isinstance(v, bool) \
                and not _INT32_RANGE[0] <= v <= _INT32_RANGE[1]:
            raise DSLSyntaxError(f"the integer {v} does not fit in int32 (a Python int on its own "
                                 "is an Int); use a float or a NumPy int64 array", self.span)


@dataclass
class Binding:
    """A Python name bound to a Relay expression; `kind` is what is known of its value."""

    expr: Expr
    kind: "Kind" = None  # what is known of the value; see `Translator.kind_of`
    annotation: AnyValue = None
    captured_by: str | None = None  # "the function 'g' (line 3)" once a closure reads it


Env = dict[str, Binding]
_LetBinding = tuple[Var, Expr, "Span | None"]  # a let, with the span of its statement


@dataclass
class Resolver:
    """How the translator reaches the Python world: name lookup and the frontend's objects."""

    lookup: Callable[[str], AnyValue]  # raises KeyError for an unknown name
    to_global: Callable[[AnyValue], GlobalVar | None]  # a decorated function's GlobalVar
    annotation_type: Callable[[AnyValue, dict[str, TypeVar]], Type]
    special: Callable[["Translator", AnyValue, ast.Call, list, dict], Expr | None]
    forward_refs: dict[str, GlobalVar] = field(default_factory=dict)


@dataclass
class _Context:
    """What falling off the end of a block means where it is."""

    fallthrough: Callable[[Env], Expr]
    in_loop: bool = False


def _assigned_names(stmts: Iterable[ast.stmt]) -> list[str]:
    """Names a block (re)binds, in order, not looking into nested functions."""
    out: list[str] = []

    class _Visitor(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, ast.Store) and node.id not in out:
                out.append(node.id)

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            if node.name not in out:
                out.append(node.name)

        def visit_Lambda(self, node: ast.Lambda) -> None:
            pass

        def visit_MatchAs(self, node: ast.MatchAs) -> None:
            if node.name and node.name not in out:
                out.append(node.name)
            self.generic_visit(node)

    v = _Visitor()
    for s in stmts:
        v.visit(s)
    return out


def _contains_return(stmts: Iterable[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for s in stmts for n in _walk_no_defs(s))


def _always_returns(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in a return."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    if isinstance(last, ast.If):
        return _always_returns(last.body) and _always_returns(last.orelse)
    if isinstance(last, ast.Match):
        return all(_always_returns(c.body) for c in last.cases)
    return False


def _walk_no_defs(node: ast.AST):
    """The nodes of `node` that belong to its scope: not those of functions and lambdas in it."""
    if isinstance(node, (ast.FunctionDef, ast.Lambda)):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk_no_defs(child)


def _nested_functions(nodes: Iterable[ast.AST]) -> list[ast.FunctionDef | ast.Lambda]:
    """The functions and lambdas among or inside `nodes` (not those inside them)."""
    out: list[ast.FunctionDef | ast.Lambda] = []
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            out.append(node)
        else:
            out.extend(_nested_functions(ast.iter_child_nodes(node)))
    return out


def _free_names(fn: ast.FunctionDef | ast.Lambda) -> set[str]:
    """The names `fn` reads from enclosing scopes (Python's free variables)."""
    params = {a.arg for a in fn.args.args}
    body = fn.body if isinstance(fn, ast.FunctionDef) else [fn.body]
    local = params | set(_assigned_names(body)) if isinstance(fn, ast.FunctionDef) else params
    used = {n.id for b in body for n in _walk_no_defs(b)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for inner in _nested_functions(body):
        used |= _free_names(inner)
    return used - local


class Translator:
    """Translates one function definition; see the module docstring."""

    def __init__(self, source: Source, resolver: Resolver):
        self.source = source
        self.resolver = resolver
        self.symbols: dict[str, TypeVar] = {}  # symbolic dims of the signature, by name
        self._fresh = 0
        self._kinds: dict[Expr, Kind] = {}  # calls whose callee declares its result type
        self.current_env: Env = {}
        self._return_kinds: dict[Var, Kind] = {}  # nested defs with a declared result type
        # The local names of the functions being translated, innermost last: a name local to
        # one of them but not bound at a use is used before its assignment (never a global, as
        # in Python). The value says why it is unbound there, when that is known.
        self._scopes: list[dict[str, str | None]] = []

    # ---- helpers ---------------------------------------------------------
    def error(self, node: ast.AST, message: str) -> DSLSyntaxError:
        return self.source.error(node, message)

    def span(self, node: ast.AST) -> Span | None:
        return self.source.span(node)

    def _line(self, node: ast.AST) -> int | str:
        span = self.span(node)
        return span.line if span is not None else "?"

    def var(self, name: str, node: ast.AST | None = None, annotation: Type | None = None) -> Var:
        return Var(name, annotation, span=self.span(node) if node is not None else None)

    def temp(self, hint: str) -> Var:
        self._fresh += 1
        return Var(f"{hint}{self._fresh}")

    def op(self, name: str, args: list, node: ast.AST | None, **attrs) -> Expr:
        return self._op_call(name, args, attrs, self.span(node) if node is not None else None)

    def _op_call(self, name: str, args: list, attrs: dict, span: Span | None) -> Expr:
        """``name(args, attrs)``, literal operands bound first; IR errors at the user's line."""
        lets: list[tuple[Var, Expr]] = []
        exprs = self.op_args(name, args, lets)
        try:
            return _let_all(lets, Call(Op.get(name), exprs, attrs, span=span))
        except IRError as e:
            raise DSLSyntaxError(e.raw_message, span) from None

    def materialize(self, value: Expr | _Literal, like: Expr | None = None) -> Expr:
        """An expression for a value; a Python literal takes `like`'s dtype when given."""
        if isinstance(value, _Literal):
            if like is None:
                return value.default()
            return Call(Op.get("cast_like"), (value.wide(), like), span=value.span)
        return value

    def materialize_all(self, values: list) -> list[Expr]:
        """Independent values (a tuple's fields, a function's arguments): each number alone."""
        return [self.materialize(v) for v in values]

    def materialize_alike(self, values: list, lets: list[tuple[Var, Expr]]) -> list[Expr]:
        """Values of one type (an elementwise operator's operands, a list's elements): numbers
        take the dtype of the first value that is not a number, ``cast_like(2i64, %x)``. That
        value is used twice, so unless it is atomic it is bound first, in `lets`: evaluated
        once, as Python evaluates it."""
        at = next((i for i, v in enumerate(values) if not isinstance(v, _Literal)), None)
        if at is None or not any(isinstance(v, _Literal) for v in values):
            return self.materialize_all(values)
        like = values[at]
        if not _is_atomic(like):
            tmp = self.temp("v")
            lets.append((tmp, like))
            values = [*values[:at], tmp, *values[at + 1:]]
            like = tmp
        return [self.materialize(v, like) for v in values]

    def op_args(self, name: str, args: list, lets: list[tuple[Var, Expr]]) -> list[Expr]:
        """An operator's arguments. A number meeting a tensor in an elementwise operator takes
        its dtype (``x * 2``, ``relay.where(c, x, 0.0)``); elsewhere it keeps its own
        (``relay.take(x, 0)``)."""
        from relaydsl.op.registry import OpPattern, lookup

        try:
            broadcast = lookup(name).pattern is OpPattern.BROADCAST
        except IRError:
            broadcast = False  # an unknown operator: reported when the call is built
        if not broadcast:
            return self.materialize_all(args)
        first = 1 if name == "where" else 0  # the condition of `where` is its own
        return [*self.materialize_all(args[:first]),
                *self.materialize_alike(args[first:], lets)]

    def kind_of(self, e: Expr | _Literal, env: Env) -> Kind:
        """What is known statically of a translated value, from annotations and constructions:
        "tensor", "list", "func", "tuple" (fields unknown), a tuple of kinds, or None."""
        if isinstance(e, (_Literal, Constant)):
            return "tensor"
        known = self._kinds.get(e)
        if known is not None:
            return known
        if isinstance(e, Var):
            for b in env.values():
                if b.expr is e:
                    return b.kind
            return _kind_of_type(e.type_annotation)
        if isinstance(e, Tuple):
            return tuple(self.kind_of(f, env) for f in e.fields)
        if isinstance(e, TupleGetItem):
            outer = self.kind_of(e.tuple_value, env)
            return outer[e.index] if isinstance(outer, tuple) and e.index < len(outer) else None
        if isinstance(e, Let):
            return self.kind_of(e.body, env)
        if isinstance(e, If):
            then = self.kind_of(e.true_branch, env)
            return then if then == self.kind_of(e.false_branch, env) else None
        if isinstance(e, Call) and isinstance(e.op, Op):
            return _op_result_kind(e)
        if isinstance(e, Call) and isinstance(e.op, Constructor) and e.op.belong_to.name == "List":
            return "list"
        if isinstance(e, Call) and isinstance(e.op, GlobalVar):
            from relaydsl.ir.prelude import prelude_definitions

            prelude = prelude_definitions()[1].get(e.op)  # relay.map, relay.zip, ...
            return _kind_of_type(prelude.ret_type) if prelude is not None else None
        if isinstance(e, Function):
            return "func"
        if isinstance(e, Grad):
            return "func"
        if isinstance(e, Call) and isinstance(e.op, Grad):
            return ("tensor", "tuple")  # (f(args), (d/darg0, ...))
        return None

    # ---- the function ------------------------------------------------------
    def function(self, tree: ast.FunctionDef, env: Env | None = None, *, top: bool = True
                 ) -> Function:
        local_names = [a.arg for a in tree.args.args] + _assigned_names(tree.body)
        self._scopes.append(dict.fromkeys(local_names))
        try:
            return self._function(tree, env, top)
        except IRError as e:  # malformed IR built from valid-looking Python: still the user's line
            raise DSLSyntaxError(e.raw_message, e.span or self.span(tree)) from None
        except RecursionError:
            if not top:
                raise
            raise self.error(tree, "the function nests too many statements (each `if` and loop "
                                   "holds the rest of its block) to be translated; split it "
                                   "into smaller functions") from None
        finally:
            self._scopes.pop()

    def _function(self, tree: ast.FunctionDef, env: Env | None, top: bool) -> Function:
        self._check_signature(tree, top)
        # The function's own locals hide the enclosing ones from its first line, as in Python.
        env = {n: b for n, b in (env or {}).items() if n not in self._scopes[-1]}
        params = []
        for a in tree.args.args:
            annotation = None
            kind = None
            if a.annotation is not None:
                py_ann = self.python_value(a.annotation)
                annotation = self.annotation(py_ann, a.annotation)
                kind = _kind_of_type(annotation)
            elif top:
                raise self.error(a, f"parameter {a.arg!r} needs a type annotation, e.g. "
                                    f"`{a.arg}: Tensor[Float, (2, 3)]`")
            p = self.var(a.arg, a, annotation)
            params.append(p)
            env[a.arg] = Binding(p, kind, annotation)
        ret = None
        if tree.returns is not None:
            ret = self.annotation(self.python_value(tree.returns), tree.returns)
        body = self.block(tree.body, env, _Context(lambda e: self._missing_return(tree)))
        return Function(params, body, ret, span=self.span(tree))

    def _check_signature(self, tree: ast.FunctionDef, top: bool) -> None:
        args = tree.args
        for bad, what in ((args.vararg, "*args"), (args.kwarg, "**kwargs")):
            if bad is not None:
                raise self.error(bad, f"{what} parameters are not supported; list each parameter")
        if args.kwonlyargs or args.posonlyargs:
            node = (args.kwonlyargs or args.posonlyargs)[0]
            raise self.error(node, "keyword-only and positional-only parameters are not supported")
        if args.defaults:
            raise self.error(args.defaults[0], "default parameter values are not supported")

    def _missing_return(self, tree: ast.AST) -> Expr:
        raise self.error(tree, "the function can end without returning a value; "
                               "end every path with `return ...`")

    def annotation(self, py_ann: AnyValue, node: ast.AST) -> Type:
        try:
            return self.resolver.annotation_type(py_ann, self.symbols)
        except TypeError as e:
            raise self.error(node, str(e)) from None

    # ---- statements --------------------------------------------------------
    def block(self, stmts: list[ast.stmt], env: Env, ctx: _Context) -> Expr:
        """The expression for `stmts` followed by what `ctx` says happens at the end.

        Straight-line statements are iterated (their lets collected, then nested around the
        tail), so a long function does not nest Python calls; a statement that needs the rest
        of the block (return, if, match, loops) translates it and ends the iteration."""
        lets: list[_LetBinding] = []
        for i, s in enumerate(stmts):
            bound = self.binding_statement(s, env)
            if bound is None:
                return _let_all(lets, self.control_statement(s, stmts[i + 1:], env, ctx))
            env, new_lets = self._mark_captures(s, *bound)
            lets.extend(new_lets)
        return _let_all(lets, ctx.fallthrough(env))

    def _mark_captures(self, s: ast.stmt, env: Env, lets: list[_LetBinding]
                       ) -> tuple[Env, list[_LetBinding]]:
        """After `def g` or a lambda, the names it reads from this function may not be
        rebound: Python's closure would see the new value, the Relay closure keeps the old."""
        closures = _nested_functions([s])
        for fn in closures:
            who = (f"the function {fn.name!r}" if isinstance(fn, ast.FunctionDef) else
                   "a lambda") + f" (line {self._line(fn)})"
            own = fn.name if isinstance(fn, ast.FunctionDef) else None
            for n in sorted(_free_names(fn)):
                if n in env and n != own and env[n].captured_by is None:
                    env = {**env, n: replace(env[n], captured_by=who)}
        return env, lets

    def _check_rebind(self, name: str, env: Env, node: ast.AST) -> None:
        b = env.get(name)
        if b is not None and b.captured_by is not None:
            raise self.error(node, f"{name!r} is assigned after {b.captured_by} captured it; a "
                                   "Relay closure keeps the value it captured, where Python's "
                                   "would see the new one: assign to a new name")

    def binding_statement(self, s: ast.stmt, env: Env) -> tuple[Env, list[_LetBinding]] | None:
        """A statement that binds names (or nothing): the new environment and its lets; None
        for a statement that is not one."""
        if isinstance(s, ast.Assign):
            return self.assign(s.targets, s.value, s, env)
        if isinstance(s, ast.AnnAssign):
            if s.value is None:
                raise self.error(s, "a declaration without a value is not supported; assign a "
                                    "value")
            ann = self.annotation(self.python_value(s.annotation), s.annotation)
            if not isinstance(s.target, ast.Name):
                raise self.error(s.target, "an annotated assignment must assign a plain name")
            value = self.materialize(self.expr(s.value, env))
            self._check_rebind(s.target.id, env, s.target)
            v = self.var(s.target.id, s.target, ann)
            return {**env, s.target.id: Binding(v, _kind_of_type(ann))}, [(v, value, self.span(s))]
        if isinstance(s, ast.AugAssign):
            if not isinstance(s.target, ast.Name):
                raise self.error(s.target, "augmented assignment needs a plain name, e.g. "
                                           "`x += 1`")
            value = self.binop(s.op, self.expr(s.target, env), self.expr(s.value, env), s)
            return self._bind_name(s.target, value, s, env)
        if isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                return env, []  # a docstring
            value = self.materialize(self.expr(s.value, env))
            return env, [(self.temp("_"), value, self.span(s))]
        if isinstance(s, ast.Pass):
            return env, []
        if isinstance(s, ast.FunctionDef):
            if s.decorator_list:
                raise self.error(s.decorator_list[0], "nested functions cannot be decorated")
            self._check_rebind(s.name, env, s)
            f = self.var(s.name, s)
            env2 = {**env, s.name: Binding(f, "func")}
            fn = self.function(s, env2, top=False)
            if fn.ret_type is not None:
                self._return_kinds[f] = _kind_of_type(fn.ret_type)
            return env2, [(f, fn, self.span(s))]
        return None

    def control_statement(self, s: ast.stmt, rest: list[ast.stmt], env: Env, ctx: _Context
                          ) -> Expr:
        """A statement whose translation takes the rest of its block."""
        if isinstance(s, ast.Return):
            if ctx.in_loop:
                raise self.error(s, "`return` inside a loop is not supported; assign the result "
                                    "to a variable and return it after the loop")
            if rest:
                raise self.error(rest[0], "unreachable code after `return`")
            if s.value is None:
                raise self.error(s, "a decorated function must return a value")
            return self.materialize(self.expr(s.value, env))
        if isinstance(s, ast.If):
            return self.if_statement(s, env, rest, ctx)
        if isinstance(s, ast.Match):
            return self.match_statement(s, env, rest, ctx)
        if isinstance(s, (ast.For, ast.While)):
            return self.loop(s, env, rest, ctx)
        raise self.error(s, _UNSUPPORTED_STATEMENTS.get(
            type(s), f"the {type(s).__name__} statement is not supported"))

    def assign(self, targets: list[ast.expr], value_node: ast.expr, s: ast.stmt, env: Env
               ) -> tuple[Env, list[_LetBinding]]:
        if len(targets) != 1:
            raise self.error(s, "chained assignment `a = b = ...` is not supported; assign once")
        target = targets[0]
        value = self.expr(value_node, env)
        if isinstance(target, ast.Name):
            return self._bind_name(target, value, s, env)
        if isinstance(target, (ast.Tuple, ast.List)):
            tmp = self.temp("tuple")
            env2 = dict(env)
            bindings: list[tuple[Var, Expr]] = []
            self._unpack(target, tmp, self.kind_of(value, env), env2, bindings)
            return env2, [(tmp, self.materialize(value), self.span(s)),
                          *((v, item, None) for v, item in bindings)]
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            raise self.error(target, "assigning to an element or attribute is not supported: "
                                     "values are immutable; build a new value instead")
        raise self.error(target, "unsupported assignment target")

    def _unpack(self, target: ast.Tuple | ast.List, value: Var, kind: Kind, env: Env,
                bindings: list[tuple[Var, Expr]]) -> None:
        """The names of `a, (b, c) = value`, each bound to a projection of the tuple."""
        if kind == "tensor":
            raise self.error(target, "a tensor cannot be unpacked; index its rows: `x[0]`")
        if isinstance(kind, tuple) and len(kind) != len(target.elts):
            raise self.error(target, f"cannot unpack a tuple of {len(kind)} fields into "
                                     f"{len(target.elts)} names")
        for i, elt in enumerate(target.elts):
            item = TupleGetItem(value, i, span=self.span(elt))
            item_kind = kind[i] if isinstance(kind, tuple) else None
            if isinstance(elt, ast.Name):
                self._check_rebind(elt.id, env, elt)
                v = self.var(elt.id, elt)
                bindings.append((v, item))
                env[elt.id] = Binding(v, item_kind)
            elif isinstance(elt, (ast.Tuple, ast.List)):
                tmp = self.temp("tuple")
                bindings.append((tmp, item))
                self._unpack(elt, tmp, item_kind, env, bindings)
            else:
                raise self.error(elt, "tuple unpacking assigns names, or tuples of names")

    def _bind_name(self, target: ast.Name, value, s: ast.stmt, env: Env
                   ) -> tuple[Env, list[_LetBinding]]:
        self._check_rebind(target.id, env, target)
        v = self.var(target.id, target)
        kind = self.kind_of(value, env)
        return {**env, target.id: Binding(v, kind)}, [(v, self.materialize(value), self.span(s))]

    # ---- if / match ------------------------------------------------------------
    def _join(self, branches: list[list[ast.stmt]], env: Env, rest: list[ast.stmt]
              ) -> list[str]:
        """Names coming out of branches that fall through: bound before, or in every branch."""
        assigned = [_assigned_names(b) for b in branches]
        everywhere = set.intersection(*(set(a) for a in assigned)) if assigned else set()
        out = []
        for names in assigned:
            for n in names:
                if n not in out and (n in env or n in everywhere):
                    out.append(n)
        return out

    def _branching(self, node: ast.stmt, branches: list[list[ast.stmt]], env: Env,
                   rest: list[ast.stmt], ctx: _Context,
                   make: Callable[[Callable[[list[ast.stmt], Env, _Context], Expr]], Expr]) -> Expr:
        """Shared by if and match: `make(translate_branch)` builds the branching expression."""
        self._note_partial_names(node, branches, env)
        if rest and all(_always_returns(b) for b in branches):
            raise self.error(rest[0], "unreachable code: every branch above ends in `return`")
        if _contains_return([s for b in branches for s in b]):
            # The rest of the block goes into each branch that falls through.
            return make(lambda stmts, e, c: self.block(
                stmts if _always_returns(stmts) else stmts + rest, e, ctx))
        outs = self._join(branches, env, rest)
        branch_kinds: list[list[Kind]] = []

        def fall(e: Env) -> Expr:
            missing = [n for n in outs if n not in e]
            if missing:
                raise self.error(node, f"{missing[0]!r} is assigned in some branches only; "
                                       "assign it before the branch or in every branch")
            branch_kinds.append([e[n].kind for n in outs])
            vals = [e[n].expr for n in outs]
            return vals[0] if len(vals) == 1 else Tuple(vals)

        joined = make(lambda stmts, e, c: self.block(stmts, e, _Context(fall, ctx.in_loop)))
        self._note_partial_names(node, branches, env)  # again: nested branches noted theirs
        if not outs:
            return Let(self.temp("_"), joined, self.block(rest, env, ctx))
        tmp = self.temp("join")
        env2 = dict(env)
        new_vars = []
        for i, n in enumerate(outs):
            v = Var(n, span=self.span(node))
            new_vars.append((v, tmp if len(outs) == 1 else TupleGetItem(tmp, i)))
            kinds = {k[i] for k in branch_kinds}
            env2[n] = Binding(v, kinds.pop() if len(kinds) == 1 else None)
        body = self.block(rest, env2, ctx)
        for v, item in reversed(new_vars):
            body = Let(v, item, body)
        return Let(tmp, joined, body, span=self.span(node))

    def _note_partial_names(self, node: ast.stmt, branches: list[list[ast.stmt]], env: Env
                            ) -> None:
        """Names that only some branches assign are not bound after the statement."""
        keyword = "if" if isinstance(node, ast.If) else "match"
        assigned = [set(_assigned_names(b)) for b in branches if not _always_returns(b)]
        everywhere = set.intersection(*assigned) if assigned else set()
        for n in set().union(*assigned) - everywhere - env.keys():
            self._note_unbound(n, f"{n!r} is assigned in only some branches of the `{keyword}` "
                                  f"at line {self._line(node)}; assign it before the `{keyword}` "
                                  "or in every branch")

    def condition(self, node: ast.expr, env: Env) -> Expr:
        """The test of an if or while; a Python number there is a bool, as in Python."""
        test = self.expr(node, env)
        if isinstance(test, _Literal):
            return const(bool(test.value), "bool", span=test.span)
        return test

    def if_statement(self, s: ast.If, env: Env, rest: list[ast.stmt], ctx: _Context) -> Expr:
        cond = self.condition(s.test, env)

        def make(branch) -> Expr:
            return If(cond, branch(s.body, env, ctx), branch(s.orelse, env, ctx), span=self.span(s))

        return self._branching(s, [s.body, s.orelse], env, rest, ctx, make)

    def match_statement(self, s: ast.Match, env: Env, rest: list[ast.stmt], ctx: _Context) -> Expr:
        data = self.materialize(self.expr(s.subject, env))

        def make(branch) -> Expr:
            clauses = []
            for case in s.cases:
                if case.guard is not None:
                    raise self.error(case.guard, "guards (`case ... if ...`) are not supported; "
                                                 "use an `if` inside the case")
                case_env = dict(env)
                pattern = self.pattern(case.pattern, case_env)
                clauses.append(Clause(pattern, branch(case.body, case_env, ctx)))
            return Match(data, clauses, span=self.span(s))

        return self._branching(s, [c.body for c in s.cases], env, rest, ctx, make)

    def pattern(self, p: ast.pattern, env: Env) -> Pattern:
        if isinstance(p, ast.MatchAs):
            if p.pattern is not None:
                raise self.error(p, "`pattern as name` is not supported")
            if p.name is None:
                return PatternWildcard(span=self.span(p))
            self._check_rebind(p.name, env, p)
            v = self.var(p.name, p)
            env[p.name] = Binding(v)
            return PatternVar(v, span=self.span(p))
        if isinstance(p, ast.MatchSequence):
            return PatternTuple([self.pattern(q, env) for q in p.patterns], span=self.span(p))
        if isinstance(p, ast.MatchClass):
            ctor = self.python_value(p.cls)
            ctor = getattr(ctor, "constructor", ctor)
            if not isinstance(ctor, Constructor):
                raise self.error(p.cls, "a class pattern must name an ADT constructor, e.g. "
                                        "`case Cons(h, t):`")
            if p.kwd_patterns:
                raise self.error(p, "keyword sub-patterns are not supported; use positional ones")
            subs = [self.pattern(q, env) for q in p.patterns]
            if len(subs) != len(ctor.inputs):
                raise self.error(p, f"{ctor.name} has {len(ctor.inputs)} fields, the pattern "
                                    f"gives {len(subs)}")
            return PatternConstructor(ctor, subs, span=self.span(p))
        raise self.error(p, "unsupported pattern; use constructor patterns `Cons(h, t)`, "
                            "tuples `(a, b)`, names and `_`")

    # ---- loops -------------------------------------------------------------------
    def loop(self, s: ast.For | ast.While, env: Env, rest: list[ast.stmt], ctx: _Context) -> Expr:
        if s.orelse:
            raise self.error(s.orelse[0], "`else` on a loop is not supported")
        body_assigned = _assigned_names(s.body)
        state = [n for n in body_assigned if n in env]
        loop_var = self.var("loop", s)
        state_params = [Var(n, span=self.span(s)) for n in state]
        state_env = {**env, **{n: replace(env[n], expr=p) for n, p in zip(state, state_params)}}
        for t in _target_names(s) if isinstance(s, ast.For) else ():
            self._check_rebind(t, env, s.target)

        def result(e: Env) -> Expr:
            vals = [e[n].expr for n in state]
            return Tuple(vals)

        lets: list[tuple[Var, Expr]] = []  # bound before the loop
        if isinstance(s, ast.While):
            fn = self._while_function(s, loop_var, state_params, state_env, state, result)
            initial = [env[n].expr for n in state]
        else:
            fn, initial, lets = self._for_function(s, loop_var, state_params, state_env, state,
                                                   env, result)
        res = self.temp("loop_result")
        env2 = dict(env)
        rebind = []
        for i, n in enumerate(state):
            v = Var(n, span=self.span(s))
            rebind.append((v, TupleGetItem(res, i)))
            env2[n] = Binding(v, env[n].kind)
        self._note_loop_locals(s, body_assigned, env, env2)
        body = self.block(rest, env2, ctx)
        for v, item in reversed(rebind):
            body = Let(v, item, body)
        call = Call(loop_var, initial, span=self.span(s))
        return _let_all(lets, Let(loop_var, fn, Let(res, call, body), span=self.span(s)))

    def _note_loop_locals(self, s: ast.For | ast.While, body_assigned: list[str], env: Env,
                          env2: Env) -> None:
        """Names that are not bound after the loop: those first assigned in its body, and the
        loop variables (unlike Python, which keeps their last value)."""
        line = self._line(s)
        for n in body_assigned:
            if n not in env:
                self._note_unbound(n, f"{n!r} is first assigned inside the loop at line {line}, "
                                      "so it is not defined after the loop; initialise it "
                                      "before the loop")
        targets = sorted(_target_names(s)) if isinstance(s, ast.For) else []
        for n in targets:
            if n not in body_assigned:
                env2.pop(n, None)
                self._note_unbound(n, f"{n!r} is the variable of the `for` loop at line {line} "
                                      "and is not defined after it; keep the value you need in "
                                      "a variable initialised before the loop")

    def _while_function(self, s: ast.While, loop_var: Var, params: list[Var], env: Env,
                        state: list[str], result: Callable[[Env], Expr]) -> Function:
        cond = self.condition(s.test, env)

        def again(e: Env) -> Expr:
            return Call(loop_var, [e[n].expr for n in state], span=self.span(s))

        body = self.block(s.body, env, _Context(again, in_loop=True))
        return Function(params, If(cond, body, result(env), span=self.span(s)), span=self.span(s))

    def _for_function(self, s: ast.For, loop_var: Var, params: list[Var], env: Env,
                      state: list[str], outer_env: Env, result: Callable[[Env], Expr]
                      ) -> tuple[Function, list[Expr], list[tuple[Var, Expr]]]:
        """The loop function, its first arguments, and lets to bind before the loop."""
        initial_state = [outer_env[n].expr for n in state]
        it = s.iter
        counter = Var("i", _INT32, span=self.span(s.target))
        if isinstance(it, ast.Call) and self._is_python_range(it.func, outer_env):
            start, stop, step = self._range_args(it, outer_env)
            lets: list[tuple[Var, Expr]] = []
            if not _is_atomic(stop):  # the loop tests `i < stop` each step: compute it once
                lets.append((self.temp("stop"), stop))
                stop = lets[0][0]
            if not isinstance(s.target, ast.Name):
                raise self.error(s.target, "a range loop assigns one name")
            body_env = {**env, s.target.id: Binding(counter, "tensor")}
            cmp = "less" if step > 0 else "greater"
            cond = Call(Op.get(cmp), (counter, stop), span=self.span(it))
            nxt = Call(Op.get("add"), (counter, const(step, "int32")), span=self.span(s))
            fn = self._counting_function(s, loop_var, counter, params, body_env, state, cond, nxt,
                                         result, env)
            return fn, [start, *initial_state], lets
        iterable = self.expr(it, outer_env)
        kind = self.kind_of(iterable, outer_env)
        if kind == "list":
            fn = self._list_function(s, loop_var, params, env, state, iterable, result)
            return fn, [self.materialize(iterable), *initial_state], []
        # Over the first axis of a tensor, or of each tensor of a tuple (`for x, y in data`).
        data = self.materialize(iterable)
        data_var = Var("data", span=self.span(it))
        if isinstance(s.target, ast.Tuple) or _is_tuple_kind(kind):
            if not isinstance(s.target, ast.Tuple):
                raise self.error(s.target, "a loop over a tuple of tensors unpacks each step: "
                                           "`for x, y in data:`")
            if kind == "tensor":
                raise self.error(s.target, "the rows of a tensor are tensors, not tuples: loop "
                                           "with one name, `for row in x:`")
            if isinstance(kind, tuple) and len(kind) != len(s.target.elts):
                raise self.error(s.target, f"the loop unpacks {len(s.target.elts)} names from a "
                                           f"tuple of {len(kind)} tensors")
            first = TupleGetItem(data_var, 0, span=self.span(it))
            items = [Call(Op.get("take"), (TupleGetItem(data_var, i, span=self.span(it)),
                                           counter), {"axis": 0}, span=self.span(t))
                     for i, t in enumerate(s.target.elts)]
            targets = s.target.elts
        else:
            first = data_var
            items = [Call(Op.get("take"), (data_var, counter), {"axis": 0},
                          span=self.span(s.target))]
            targets = [s.target]
        body_env = dict(env)
        for t in targets:
            if not isinstance(t, ast.Name):
                raise self.error(t, "a loop target must be a name or a tuple of names")
        n = Call(Op.get("take"), (Call(Op.get("shape_of"), (first,)), const(0, "int32")),
                 {"axis": 0})
        cond = Call(Op.get("less"), (counter, n), span=self.span(it))
        nxt = Call(Op.get("add"), (counter, const(1, "int32")))
        item_vars = []
        for t, item in zip(targets, items):
            v = self.var(t.id, t)  # type: ignore[attr-defined]
            item_vars.append((v, item))
            body_env[t.id] = Binding(v, "tensor")  # type: ignore[attr-defined]
        fn = self._counting_function(s, loop_var, counter, [data_var, *params], body_env, state,
                                     cond, nxt, result, env, item_vars=item_vars, extra=[data_var])
        return fn, [const(0, "int32"), data, *initial_state], []

    def _counting_function(self, s: ast.For, loop_var: Var, counter: Var, params: list[Var],
                           body_env: Env, state: list[str], cond: Expr, nxt: Expr,
                           result: Callable[[Env], Expr], env: Env,
                           item_vars: Iterable[tuple[Var, Expr]] = (),
                           extra: Iterable[Var] = ()) -> Function:
        def again(e: Env) -> Expr:
            return Call(loop_var, [nxt, *extra, *[e[n].expr for n in state]], span=self.span(s))

        body = self.block(s.body, body_env, _Context(again, in_loop=True))
        for v, item in reversed(list(item_vars)):
            body = Let(v, item, body)
        return Function([counter, *params], If(cond, body, result(env), span=self.span(s)),
                        span=self.span(s))

    def _list_function(self, s: ast.For, loop_var: Var, params: list[Var], env: Env,
                       state: list[str], iterable, result: Callable[[Env], Expr]) -> Function:
        from relaydsl.ir.prelude import prelude_definitions

        list_t = prelude_definitions()[0][0]
        cons, nil = list_t.constructors
        xs, head, tail = Var("xs"), Var("x"), Var("rest")
        if not isinstance(s.target, ast.Name):
            raise self.error(s.target, "a loop over a relay.List assigns one name per element")
        body_env = {**env, s.target.id: Binding(head)}

        def again(e: Env) -> Expr:
            return Call(loop_var, [tail, *[e[n].expr for n in state]], span=self.span(s))

        body = self.block(s.body, body_env, _Context(again, in_loop=True))
        match = Match(xs, [
            Clause(PatternConstructor(cons, [PatternVar(head), PatternVar(tail)]), body),
            Clause(PatternConstructor(nil, []), result(env)),
        ], span=self.span(s))
        return Function([xs, *params], match, span=self.span(s))

    def _is_python_range(self, func: ast.expr, env: Env) -> bool:
        if not isinstance(func, ast.Name) or func.id in env or self._is_local_name(func.id):
            return False
        try:
            return self.resolver.lookup(func.id) is range
        except KeyError:
            return False

    def _range_args(self, it: ast.Call, env: Env) -> tuple[Expr, Expr, int]:
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.error(it, "range takes 1 to 3 positional arguments")
        args = [self.expr(a, env) for a in it.args]
        for value, node in zip(args[:2], it.args):
            if isinstance(value, _Literal) and type(value.value) is not int:
                raise self.error(node, f"the bounds of range are ints, got {value.value!r}")
        step = 1
        if len(args) == 3:
            if not isinstance(args[2], _Literal) or type(args[2].value) is not int \
                    or args[2].value == 0:
                raise self.error(it.args[2], "the step of range must be a non-zero Python int")
            step = args[2].value
        start, stop = (args[0], args[1]) if len(args) >= 2 else (_Literal(0, None), args[0])
        as_int = [a.default() if isinstance(a, _Literal) else a for a in (start, stop)]
        return as_int[0], as_int[1], step

    # ---- expressions -------------------------------------------------------------
    def expr(self, node: ast.expr, env: Env):  # -> Expr | _Literal
        if isinstance(node, ast.Name):
            return self.name(node, env)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float)):
                return _Literal(node.value, self.span(node))
            raise self.error(node, f"constant {node.value!r} is not a number; only numbers and "
                                   "arrays can be values")
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left, env), self.expr(node.right, env), node)
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand, env)
            if isinstance(operand, _Literal):
                if isinstance(node.op, ast.Invert) and type(operand.value) is not int:
                    raise self.error(node, "`~` applies to ints only")
                fold = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                        ast.Invert: operator.invert}[type(node.op)]
                return _Literal(fold(operand.value), self.span(node))
            if isinstance(node.op, ast.USub):
                return self.op("negative", [operand], node)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.Not):
                return self.op("logical_not", [operand], node)
            raise self.error(node, "`~` is not supported; use relay.logical_not")
        if isinstance(node, ast.BoolOp):
            name = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
            values = [self.expr(v, env) for v in node.values]
            out = values[0]
            for v in values[1:]:
                out = self.op(name, [out, v], node)
            return out
        if isinstance(node, ast.Compare):
            return self.compare(node, env)
        if isinstance(node, ast.Call):
            return self.call(node, env)
        if isinstance(node, ast.Attribute):
            if self._local_root(node, env):
                hint = {"shape": "relay.shape_of(x)", "T": "relay.transpose(x)",
                        "dtype": "the annotation"}.get(node.attr, "a relay operator")
                raise self.error(node, f"attributes of values are not supported (`.{node.attr}`); "
                                       f"use {hint}")
            value = self.python_value(node)
            return self.python_to_relay(value, node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, env)
        if isinstance(node, ast.Tuple):
            return Tuple(self.materialize_all([self.expr(e, env) for e in node.elts]),
                         span=self.span(node))
        if isinstance(node, ast.List):
            return self.list_literal(node, env)
        if isinstance(node, ast.IfExp):
            cond = self.condition(node.test, env)
            # A number in one branch keeps its own dtype: taking the other branch's would
            # evaluate that branch (`1 if n < 2 else n * fact(n - 1)` would never stop).
            a, b = self.expr(node.body, env), self.expr(node.orelse, env)
            a_e, b_e = self.materialize_all([a, b])
            return If(cond, a_e, b_e, span=self.span(node))
        if isinstance(node, ast.Lambda):
            return self.lambda_(node, env)
        raise self.error(node, _UNSUPPORTED_EXPRESSIONS.get(
            type(node), f"the {type(node).__name__} expression is not supported"))

    def name(self, node: ast.Name, env: Env):
        b = env.get(node.id)
        if b is not None:
            return b.expr
        if self._is_local_name(node.id):
            raise self.error(node, self._unbound_reason(node.id))
        try:
            value = self.resolver.lookup(node.id)
        except KeyError:
            gv = self.resolver.forward_refs.get(node.id)
            if gv is None:
                gv = GlobalVar(node.id, span=self.span(node))
                self.resolver.forward_refs[node.id] = gv
            return gv
        return self.python_to_relay(value, node)

    def _is_local_name(self, name: str) -> bool:
        return any(name in scope for scope in self._scopes)

    def _unbound_reason(self, name: str) -> str:
        depth, scope = next((d, sc) for d, sc in enumerate(reversed(self._scopes)) if name in sc)
        if scope[name] is not None:
            return scope[name]
        if depth == 0:
            return f"{name!r} is used before it is assigned"
        return (f"{name!r} is used before it is assigned: the enclosing function assigns it "
                "after this function's definition; define the function after assigning it")

    def _note_unbound(self, name: str, reason: str) -> None:
        """Record why `name` is not bound after some statement, for a later use's error."""
        for scope in reversed(self._scopes):
            if name in scope:
                scope[name] = reason
                return

    def python_to_relay(self, value: AnyValue, node: ast.AST):
        """A Python object used as a value: numbers and arrays are constants, decorated functions
        globals, constructors constructors."""
        if isinstance(value, (bool, int, float)) and not isinstance(value, np.ndarray):
            return _Literal(value, self.span(node))
        if isinstance(value, np.generic):
            return Constant(np.asarray(value), span=self.span(node))
        if isinstance(value, np.ndarray):
            try:
                return Constant(value, span=self.span(node))
            except IRError as e:
                raise self.error(node, e.raw_message) from None
        gv = self.resolver.to_global(value)
        if gv is not None:
            return gv
        from frontend.namespace import OpFunction

        if isinstance(value, OpFunction):
            return self._op_as_function(value.name, node)
        ctor = getattr(value, "constructor", value)
        if isinstance(ctor, Constructor):
            return ctor
        raise self.error(node, f"{_describe(value)} cannot be used as a value inside a decorated "
                               "function (numbers, NumPy arrays, decorated functions and ADT "
                               "constructors can)")

    def _op_as_function(self, name: str, node: ast.AST) -> Function:
        """``relay.tanh`` passed as a value: ``fn (%data) { tanh(%data) }``."""
        from relaydsl.op import lookup

        span = self.span(node)
        params = [Var(p, span=span) for p in lookup(name).inputs]
        try:
            body = Call(Op.get(name), params, span=span)
        except IRError as e:
            raise self.error(node, f"{e.raw_message}; wrap the call in a lambda to pass relay."
                                   f"{name} as a function") from None
        return Function(params, body, span=span)

    def python_value(self, node: ast.expr) -> AnyValue:
        """The Python object a name or attribute path denotes in the function's scope."""
        if isinstance(node, ast.Name):
            if self._is_local_name(node.id):
                raise self.error(node, f"{node.id!r} is a value computed by the function, not a "
                                       "Python object known when the function is translated")
            try:
                return self.resolver.lookup(node.id)
            except KeyError:
                raise self.error(node, f"name {node.id!r} is not defined") from None
        if isinstance(node, ast.Attribute):
            base = self.python_value(node.value)
            try:
                return getattr(base, node.attr)
            except AttributeError as e:
                raise self.error(node, str(e)) from None
        if isinstance(node, ast.Subscript):
            base = self.python_value(node.value)
            index = self._static(node.slice)
            try:
                return base[index]
            except Exception as e:  # any error of the user's Python object, at the user's line
                raise self.error(node, f"{type(e).__name__}: {e}") from None
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self._static(e) for e in node.elts)
        raise self.error(node, "expected a name, an attribute or a constant here")

    def _static(self, node: ast.expr) -> AnyValue:
        """A Python value known when the function is translated: constants, names of the
        enclosing scope, and arithmetic on them (``axis=-1``, ``newshape=(N, 2 * K)``)."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self._static(e) for e in node.elts)
        folds = {ast.USub: operator.neg, ast.UAdd: operator.pos}
        try:
            if isinstance(node, ast.UnaryOp) and type(node.op) in folds:
                return folds[type(node.op)](self._static(node.operand))
            if isinstance(node, ast.BinOp) and type(node.op) in _PYTHON_BINOPS:
                return _PYTHON_BINOPS[type(node.op)](self._static(node.left),
                                                     self._static(node.right))
        except (ArithmeticError, TypeError, ValueError) as e:
            raise self.error(node, f"cannot compute this constant: {e}") from None
        return self.python_value(node)

    def binop(self, op: ast.operator, left, right, node: ast.AST):
        if isinstance(left, _Literal) and isinstance(right, _Literal):
            return self._fold(op, left, right, node)
        name = _BINOPS.get(type(op))
        if name in ("floor_divide", "mod") or name is None:
            hint = {"floor_divide": "; `/` floors on ints, write relay.floor(x / y) on floats",
                    "mod": "; write x - relay.floor(x / y) * y, or x - x / y * y on ints"}
            raise self.error(node, f"the operator {type(op).__name__} is not supported on "
                                   f"tensors{hint.get(name or '', '')}")
        return self.op(name, [left, right], node)

    def _fold(self, op: ast.operator, left: _Literal, right: _Literal, node: ast.AST) -> _Literal:
        """An operator on two Python numbers, computed now as Python would."""
        fold = _PYTHON_BINOPS.get(type(op))
        if fold is None:
            raise self.error(node, f"the operator {type(op).__name__} is not supported on numbers")
        try:
            value = fold(left.value, right.value)
        except ZeroDivisionError:
            raise self.error(node, "division by zero") from None
        except (OverflowError, TypeError, ValueError) as e:
            raise self.error(node, f"cannot compute this constant: {e}") from None
        if not isinstance(value, (bool, int, float)):
            raise self.error(node, f"this constant is a {type(value).__name__} "
                                   f"({value!r:.40}); only real numbers are supported")
        return _Literal(value, self.span(node))

    def compare(self, node: ast.Compare, env: Env):
        left = self.expr(node.left, env)
        out = None
        lets: list[tuple[Var, Expr]] = []
        for i, (op, comparator) in enumerate(zip(node.ops, node.comparators)):
            name = _COMPARE.get(type(op))
            if name is None:
                raise self.error(node, f"the comparison {type(op).__name__} is not supported")
            right = self.expr(comparator, env)
            if i + 1 < len(node.ops) and not isinstance(right, _Literal) \
                    and not _is_atomic(right):  # `a < f(x) < b` evaluates f(x) once
                tmp = self.temp("v")
                lets.append((tmp, right))
                right = tmp
            this = self.op(name, [left, right], node)
            out = this if out is None else self.op("logical_and", [out, this], node)
            left = right
        return _let_all(lets, out)

    def call(self, node: ast.Call, env: Env):
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.error(a, "starred arguments are not supported; pass each argument")
        for k in node.keywords:
            if k.arg is None:
                raise self.error(k, "`**kwargs` arguments are not supported")
        func = node.func
        if isinstance(func, ast.Attribute) and self._local_root(func, env):
            raise self.error(func, f"methods of values are not supported (`.{func.attr}(...)`); "
                                   f"call an operator instead, e.g. `relay.{func.attr}(x, ...)`")
        local = isinstance(func, ast.Name) and (func.id in env or self._is_local_name(func.id))
        if not local and isinstance(func, (ast.Name, ast.Attribute)):
            try:
                target = self.python_value(func)
            except DSLSyntaxError:
                target = None
                if isinstance(func, ast.Attribute):
                    raise
            if target is not None:
                args = [self.expr(a, env) for a in node.args]
                kwargs = {k.arg: k.value for k in node.keywords}
                self.current_env = env  # what a special call may ask kind_of about
                special = self.resolver.special(self, target, node, args, kwargs)
                if special is not None:
                    return special
                callee = self.materialize(self.python_to_relay(target, func))
                if kwargs:
                    raise self.error(node.keywords[0], "keyword arguments are only for relay "
                                                       "operators' attributes")
                call = self._make_call(callee, self.materialize_all(args), node)
                self._kinds[call] = _declared_result_kind(target)
                return call
        callee = self.materialize(self.expr(func, env))
        if node.keywords:
            raise self.error(node.keywords[0], "keyword arguments are only for relay operators' "
                                               "attributes")
        args = [self.expr(a, env) for a in node.args]
        call = self._make_call(callee, self.materialize_all(args), node)
        if isinstance(callee, Var) and callee in self._return_kinds:
            self._kinds[call] = self._return_kinds[callee]
        return call

    def _make_call(self, callee: Expr, args: list[Expr], node: ast.AST) -> Call:
        try:
            return Call(callee, args, span=self.span(node))
        except IRError as e:  # e.g. a constructor given the wrong number of fields
            raise self.error(node, e.raw_message) from None

    @staticmethod
    def _local_root(node: ast.Attribute, env: Env) -> bool:
        """Whether `a.b.c` starts from a value of the function (not a Python object)."""
        root: ast.expr = node
        while isinstance(root, ast.Attribute):
            root = root.value
        return not isinstance(root, ast.Name) or root.id in env

    def op_call(self, name: str, node: ast.Call, args: list, kwargs: dict[str, ast.expr]) -> Expr:
        """``relay.<op>(args, attr=constant, ...)``."""
        attrs = {}
        for key, value_node in kwargs.items():
            try:
                attrs[key] = self._static(value_node)
            except DSLSyntaxError:
                raise self.error(value_node, f"the attribute {key}= of {name} must be a constant "
                                             "known when the function is translated") from None
        return self._op_call(name, args, attrs, self.span(node))

    def subscript(self, node: ast.Subscript, env: Env):
        value = self.materialize(self.expr(node.value, env))
        kind = self.kind_of(value, env)
        if not _is_tuple_kind(kind):
            parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            return self._index(value, parts, node, env)
        index = None if isinstance(node.slice, ast.Slice) else self.expr(node.slice, env)
        if not isinstance(index, _Literal) or type(index.value) is not int:
            raise self.error(node.slice, "a tuple is indexed by a constant int, e.g. `t[0]`")
        i = index.value
        if i < 0 and isinstance(kind, tuple):
            i += len(kind)
        if i < 0:
            size = f"{len(kind)} fields" if isinstance(kind, tuple) else "a length unknown here"
            raise self.error(node.slice, f"tuple index {index.value} is out of range: the tuple "
                                         f"has {size}")
        return TupleGetItem(value, i, span=self.span(node))

    def _index(self, value: Expr, parts: list[ast.expr], node: ast.Subscript, env: Env) -> Expr:
        """Tensor indexing: integers take, constant slices strided_slice."""
        if any(isinstance(p, ast.Constant) and p.value is Ellipsis for p in parts):
            raise self.error(node, "`...` in indices is not supported; write each axis")
        begin, end, strides, axes, squeeze = [], [], [], [], []
        dynamic: list[tuple[int, Expr]] = []
        for axis, p in enumerate(parts):
            if isinstance(p, ast.Slice):
                lo, hi, st = (self._slice_bound(b, env) for b in (p.lower, p.upper, p.step))
                st = 1 if st is None else st
                if st == 0:
                    raise self.error(p, "slice step cannot be zero")
                big = 2**31 - 1
                begin.append(lo if lo is not None else (0 if st > 0 else big))
                end.append(hi if hi is not None else (big if st > 0 else -big - 1))
                strides.append(st)
                axes.append(axis)
                continue
            idx = self.expr(p, env)
            if isinstance(idx, _Literal) and isinstance(idx.value, int):
                i = idx.value
                begin.append(i)
                end.append(i + 1 if i != -1 else 2**31 - 1)
                strides.append(1)
                axes.append(axis)
                squeeze.append(axis)
            else:
                dynamic.append((axis, self.materialize(idx)))
        out = value
        if begin:
            out = Call(Op.get("strided_slice"), (out,),
                       {"begin": begin, "end": end, "strides": strides, "axes": axes},
                       span=self.span(node))
            if squeeze:
                out = Call(Op.get("squeeze"), (out,), {"axis": squeeze}, span=self.span(node))
        for removed, (axis, idx) in enumerate(dynamic):
            shift = sum(1 for s in squeeze if s < axis)
            out = Call(Op.get("take"), (out, idx), {"axis": axis - shift - removed},
                       span=self.span(node))
        return out

    def _slice_bound(self, node: ast.expr | None, env: Env) -> int | None:
        if node is None:
            return None
        value = self.expr(node, env)
        if not isinstance(value, _Literal) or type(value.value) is not int:
            raise self.error(node, "slice bounds are constant ints (known when the function is "
                                   "translated); index with a tensor `x[i]` or use relay.take")
        return value.value

    def list_literal(self, node: ast.List, env: Env) -> Expr:
        from relaydsl.ir.prelude import prelude_definitions

        cons, nil = prelude_definitions()[0][0].constructors
        out: Expr = Call(nil, (), span=self.span(node))
        lets: list[tuple[Var, Expr]] = []
        items = self.materialize_alike([self.expr(e, env) for e in node.elts], lets)
        for item in reversed(items):
            out = Call(cons, (item, out), span=self.span(node))
        return _let_all(lets, out)

    def lambda_(self, node: ast.Lambda, env: Env) -> Function:
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
            raise self.error(node, "lambdas take plain positional parameters only (no "
                                   "defaults, *args or keywords); pass every argument explicitly")
        inner = dict(env)
        params = []
        for a in args.args:
            p = self.var(a.arg, a)
            params.append(p)
            inner[a.arg] = Binding(p)
        self._scopes.append(dict.fromkeys(a.arg for a in args.args))
        try:
            body = self.materialize(self.expr(node.body, inner))
        finally:
            self._scopes.pop()
        return Function(params, body, span=self.span(node))


def _target_names(s: ast.For) -> set[str]:
    return {n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)}


Kind = AnyValue  # "tensor", "list", "func", "tuple" (fields unknown), a tuple of kinds, or None


def _is_tuple_kind(kind: Kind) -> bool:
    return kind == "tuple" or isinstance(kind, tuple)


def _kind_of_type(t: Type | None) -> Kind:
    """What a declared type says of a value: a tuple type gives the kinds of its fields."""
    from relaydsl.ir.types import FuncType, TupleType, TypeCall

    if isinstance(t, TensorType):
        return "tensor"
    if isinstance(t, TupleType):
        return tuple(_kind_of_type(f) for f in t.fields)
    if isinstance(t, FuncType):
        return "func"
    if isinstance(t, TypeCall) and t.func.name == "List":
        return "list"
    return None


def _op_result_kind(call: Call) -> Kind:
    """The kind of an operator call's result: the tuple-returning operators, or a tensor."""
    assert isinstance(call.op, Op)
    if call.op.name == "split":
        sections = call.attrs.get("indices_or_sections")
        if isinstance(sections, int):
            return ("tensor",) * sections
        if isinstance(sections, (tuple, list)):
            return ("tensor",) * (len(sections) + 1)
        return "tuple"
    if call.op.name == "batch_norm":
        return ("tensor",) * 3
    return "tensor"


def _is_atomic(e: Expr) -> bool:
    """Whether using `e` twice costs nothing (no computation is repeated)."""
    return isinstance(e, (Var, Constant, GlobalVar, Op, Constructor))


def _let_all(lets: Iterable[tuple[Var, Expr] | _LetBinding], body: Expr) -> Expr:
    """``let var = value; ...; body``; a binding's third item is the span of its statement."""
    for var, value, *span in reversed(list(lets)):
        body = Let(var, value, body, span=span[0] if span else None)
    return body


def _declared_result_kind(target: AnyValue) -> Kind:
    """The kind of what a decorated function returns, when its result type is written."""
    fn = getattr(target, "function", None)
    return _kind_of_type(fn.ret_type) if isinstance(fn, Function) else None


def _describe(value: AnyValue) -> str:
    if callable(value):
        return f"the Python function {getattr(value, '__qualname__', value)!r}"
    return f"the Python value {value!r:.60} of type {type(value).__name__}"


__all__ = ["Binding", "Resolver", "Translator"]
