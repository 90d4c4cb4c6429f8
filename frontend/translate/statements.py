"""Statements: blocks in continuation style, assignments, and the joins of ``if`` and ``match``.

Each assignment becomes a ``let`` whose body is the rest of the block. An ``if`` or ``match``
without a ``return`` inside joins the names its branches assign into a tuple; with a ``return``
inside, the rest of the block goes into each branch."""
from __future__ import annotations

import ast
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from relaydsl.frontend.translate.bindings import Binding, BlockEnd, Env, LetBinding, let_all
from relaydsl.frontend.translate.kinds import Kind, TupleKind, ValueKind, kind_of_type
from relaydsl.frontend.translate.literals import Number
from relaydsl.frontend.translate.scoping import (
    always_returns,
    assigned_names,
    contains_return,
    free_names,
    nested_functions,
)
from relaydsl.frontend.translate.unsupported import UNSUPPORTED_STATEMENTS
from relaydsl.ir.adt import (
    Constructor,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
)
from relaydsl.ir.expr import (
    Call, Clause, Expr, Function, If, Let, Match, Tuple, TupleGetItem, Var, const,
)
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import free_vars
from relaydsl.op.registry import ops

if TYPE_CHECKING:
    from relaydsl.frontend.translate.translator import Translator


def _mutually_recursive_defs(stmts: list[ast.stmt], start: int) -> list[ast.FunctionDef]:
    """The consecutive ``def``s from `stmts[start]` on that a forward call ties together (a
    def calling one defined after it), or fewer than two."""
    stop = start  # (not a slice of the rest: a block may be 20,000 statements long)
    while stop < len(stmts) and isinstance(stmts[stop], ast.FunctionDef):
        stop += 1
    run = [s for s in stmts[start:stop] if isinstance(s, ast.FunctionDef)]
    names = [d.name for d in run]
    end, k = 0, 0
    while k <= end < len(run):
        free = free_names(run[k])
        end = max([end, *(j for j in range(k + 1, len(run)) if names[j] in free)])
        k += 1
    return run[:end + 1] if end > 0 else []


def _without_unused_functions(lets: list[LetBinding], body: Expr) -> list[LetBinding]:
    """`lets` less the functions (``def``s, lambdas) that nothing after them uses: Python
    accepts a nested function that is never called, whatever its parameters, but nothing
    could infer the types of an unannotated one. A use in a later join or loop state is a use
    (the name is free in `body`), so such a function is kept."""
    if not any(isinstance(value, Function) for _, value, _ in lets):
        return lets
    used = set(free_vars(body))
    kept: list[LetBinding] = []
    for let in reversed(lets):
        var, value, _ = let
        if isinstance(value, Function) and var not in used:
            continue
        used.update(free_vars(value))
        kept.append(let)
    return kept[::-1]


class StmtTranslator:
    """Translates statements; the translator's ``statements``."""

    def __init__(self, tr: Translator):
        self.tr = tr

    def block(self, stmts: list[ast.stmt], env: Env, ctx: BlockEnd) -> Expr:
        """The expression for `stmts` followed by what `ctx` says happens at the end.

        Straight-line statements are iterated (their lets collected, then nested around the
        tail), so a long function does not nest Python calls; a statement that needs the rest
        of the block (return, if, match, loops) translates it and ends the iteration."""
        lets: list[LetBinding] = []
        i = 0
        while i < len(stmts):
            s = stmts[i]
            group = _mutually_recursive_defs(stmts, i)
            if len(group) > 1:
                env, new_lets = self.mutually_recursive_defs(group, env)
                for d in group:
                    env, _ = self._mark_captures(d, env, [])
                lets.extend(new_lets)
                i += len(group)
                continue
            bound = self.binding_statement(s, env)
            if bound is None:
                tail = self.control_statement(s, stmts[i + 1:], env, ctx)
                return let_all(_without_unused_functions(lets, tail), tail)
            env, new_lets = self._mark_captures(s, *bound)
            lets.extend(new_lets)
            i += 1
        tail = ctx.fallthrough(env)
        return let_all(_without_unused_functions(lets, tail), tail)

    def mutually_recursive_defs(self, defs: list[ast.FunctionDef], env: Env
                                ) -> tuple[Env, list[LetBinding]]:
        """Nested ``def``s that call each other (``even`` calls ``odd``, defined after it).
        Relay's recursive let binds one function, so the group becomes one recursive
        function dispatching on a tag, and each name a function calling it::

            let %group = fn (%tag, %p..) {
              let %even = fn (%q..) { %group(0, %q..) }; let %odd = ...;
              if (%tag == 0) { (fn (%n..) { even's body })(%p..) } else { ... }
            };
            let %even = fn (%q..) { %group(0, %q..) }; let %odd = ...

        The functions must take as many parameters; their types and results unify."""
        tr = self.tr
        arity = {len(d.args.args) for d in defs}
        names = ", ".join(d.name for d in defs)
        if len(arity) > 1:
            raise tr.error(defs[0], f"the mutually recursive nested functions {names} take "
                                    "different numbers of parameters; give them the same "
                                    "parameters, or define them at module level with @relay")
        for d in defs:
            if d.decorator_list:
                raise tr.error(d.decorator_list[0], "nested functions cannot be decorated")
            self.check_rebind(d.name, env, d)
        n = arity.pop()
        group = tr.var("_".join(d.name for d in defs) + "_group", defs[0])
        tag = tr.var("tag", defs[0], TensorType((), "int32"))

        def callers() -> list[tuple[Var, Function]]:
            """Each def's name bound to a function calling the group with its tag."""
            out = []
            for k, d in enumerate(defs):
                qs = [tr.var(a.arg, d) for a in d.args.args]
                out.append((tr.var(d.name, d),
                            Function(qs, Call(group, [const(k, "int32"), *qs]))))
            return out

        inner = callers()  # inside the group: its members call each other through these
        inner_env = {**env, **{d.name: Binding(v, ValueKind.FUNCTION)
                               for d, (v, _) in zip(defs, inner)}}
        params = [tr.var(f"p{j}", defs[0]) for j in range(n)]
        bodies = [Call(tr.functions.function(d, inner_env, top=False), params) for d in defs]
        dispatch: Expr = bodies[-1]
        for k in range(len(defs) - 2, -1, -1):
            dispatch = If(ops.equal(tag, const(k, "int32")), bodies[k], dispatch)
        group_fn = Function([tag, *params], let_all(inner, dispatch), span=tr.span(defs[0]))
        outer = callers()  # after it: the rest of the block calls them
        env = {**env, **{d.name: Binding(v, ValueKind.FUNCTION) for d, (v, _) in zip(defs, outer)}}
        return env, [(group, group_fn, tr.span(defs[0])),
                     *((v, f, tr.span(d)) for d, (v, f) in zip(defs, outer))]

    def _mark_captures(self, s: ast.stmt, env: Env, lets: list[LetBinding]
                       ) -> tuple[Env, list[LetBinding]]:
        """After `def g` or a lambda, the names it reads from this function may not be
        rebound: Python's closure would see the new value, the Relay closure keeps the old."""
        closures = nested_functions([s])
        for fn in closures:
            who = (f"the function {fn.name!r}" if isinstance(fn, ast.FunctionDef) else
                   "a lambda") + f" (line {self.tr.line(fn)})"
            own = fn.name if isinstance(fn, ast.FunctionDef) else None
            for n in sorted(free_names(fn)):
                if n in env and n != own and env[n].captured_by is None:
                    env = {**env, n: replace(env[n], captured_by=who)}
        return env, lets

    def check_rebind(self, name: str, env: Env, node: ast.AST) -> None:
        """Assigning `name` at `node` is an error once a closure has captured it."""
        b = env.get(name)
        if b is not None and b.captured_by is not None:
            raise self.tr.error(node, f"{name!r} is assigned after {b.captured_by} captured it; a "
                                      "Relay closure keeps the value it captured, where Python's "
                                      "would see the new one: assign to a new name")

    def binding_statement(self, s: ast.stmt, env: Env) -> tuple[Env, list[LetBinding]] | None:
        """A statement that binds names (or nothing): the new environment and its lets; None
        for a statement that is not one."""
        tr = self.tr
        if isinstance(s, ast.Assign):
            return self.assign(s.targets, s.value, s, env)
        if isinstance(s, ast.AnnAssign):
            if s.value is None:
                raise tr.error(s, "a declaration without a value is not supported; assign a "
                                  "value")
            ann = tr.functions.annotation(tr.values.python_value(s.annotation), s.annotation)
            if not isinstance(s.target, ast.Name):
                raise tr.error(s.target, "an annotated assignment must assign a plain name")
            value = tr.materialize(tr.expressions.expr(s.value, env))
            self.check_rebind(s.target.id, env, s.target)
            v = tr.var(s.target.id, s.target, ann)
            return {**env, s.target.id: Binding(v, kind_of_type(ann))}, [(v, value, tr.span(s))]
        if isinstance(s, ast.AugAssign):
            if not isinstance(s.target, ast.Name):
                raise tr.error(s.target, "augmented assignment needs a plain name, e.g. "
                                         "`x += 1`")
            exprs = tr.expressions
            value = exprs.binop(s.op, exprs.expr(s.target, env), exprs.expr(s.value, env), s)
            return self._bind_name(s.target, value, s, env)
        if isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                return env, []  # a docstring
            value = tr.materialize(tr.expressions.expr(s.value, env))
            return env, [(tr.temp("_"), value, tr.span(s))]
        if isinstance(s, ast.Pass):
            return env, []
        if isinstance(s, ast.FunctionDef):
            if s.decorator_list:
                raise tr.error(s.decorator_list[0], "nested functions cannot be decorated")
            self.check_rebind(s.name, env, s)
            f = tr.var(s.name, s)
            env2 = {**env, s.name: Binding(f, ValueKind.FUNCTION)}
            fn = tr.functions.function(s, env2, top=False)
            if fn.ret_type is not None:
                tr.kinds.note_result(f, kind_of_type(fn.ret_type))
            return env2, [(f, fn, tr.span(s))]
        return None

    def control_statement(self, s: ast.stmt, rest: list[ast.stmt], env: Env, ctx: BlockEnd
                          ) -> Expr:
        """A statement whose translation takes the rest of its block."""
        tr = self.tr
        if isinstance(s, ast.Return):
            if ctx.in_loop:
                raise tr.error(s, "`return` inside a loop is not supported; assign the result "
                                  "to a variable and return it after the loop")
            if rest:
                raise tr.error(rest[0], "unreachable code after `return`")
            if s.value is None:
                raise tr.error(s, "a decorated function must return a value")
            return tr.materialize(tr.expressions.expr(s.value, env))
        if isinstance(s, ast.If):
            return self.if_statement(s, env, rest, ctx)
        if isinstance(s, ast.Match):
            return self.match_statement(s, env, rest, ctx)
        if isinstance(s, (ast.For, ast.While)):
            return tr.loops.loop(s, env, rest, ctx)
        raise tr.error(s, UNSUPPORTED_STATEMENTS.get(
            type(s), f"the {type(s).__name__} statement is not supported"))

    def assign(self, targets: list[ast.expr], value_node: ast.expr, s: ast.stmt, env: Env
               ) -> tuple[Env, list[LetBinding]]:
        tr = self.tr
        if len(targets) != 1:
            raise tr.error(s, "chained assignment `a = b = ...` is not supported; assign once")
        target = targets[0]
        value = tr.expressions.expr(value_node, env)
        if isinstance(target, ast.Name):
            return self._bind_name(target, value, s, env)
        if isinstance(target, (ast.Tuple, ast.List)):
            tmp = tr.temp("tuple")
            env2 = dict(env)
            bindings: list[tuple[Var, Expr]] = []
            self._unpack(target, tmp, tr.kinds.of(value, env), env2, bindings)
            return env2, [(tmp, tr.materialize(value), tr.span(s)),
                          *((v, item, None) for v, item in bindings)]
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            raise tr.error(target, "assigning to an element or attribute is not supported: "
                                   "values are immutable; build a new value instead")
        raise tr.error(target, "unsupported assignment target")

    def _unpack(self, target: ast.Tuple | ast.List, value: Var, kind: Kind, env: Env,
                bindings: list[tuple[Var, Expr]]) -> None:
        """The names of `a, (b, c) = value`, each bound to a projection of the tuple."""
        tr = self.tr
        if kind is ValueKind.TENSOR:
            raise tr.error(target, "a tensor cannot be unpacked; index its rows: `x[0]`")
        if isinstance(kind, TupleKind) and len(kind.fields) != len(target.elts):
            raise tr.error(target, f"cannot unpack a tuple of {len(kind.fields)} fields into "
                                   f"{len(target.elts)} names")
        for i, elt in enumerate(target.elts):
            item = TupleGetItem(value, i, span=tr.span(elt))
            item_kind = kind.fields[i] if isinstance(kind, TupleKind) else None
            if isinstance(elt, ast.Name):
                self.check_rebind(elt.id, env, elt)
                v = tr.var(elt.id, elt)
                bindings.append((v, item))
                env[elt.id] = Binding(v, item_kind)
            elif isinstance(elt, (ast.Tuple, ast.List)):
                tmp = tr.temp("tuple")
                bindings.append((tmp, item))
                self._unpack(elt, tmp, item_kind, env, bindings)
            else:
                raise tr.error(elt, "tuple unpacking assigns names, or tuples of names")

    def _bind_name(self, target: ast.Name, value: Expr | Number, s: ast.stmt, env: Env
                   ) -> tuple[Env, list[LetBinding]]:
        tr = self.tr
        self.check_rebind(target.id, env, target)
        v = tr.var(target.id, target)
        kind = tr.kinds.of(value, env)
        result = tr.kinds.result(value)
        if result is not None:  # a function value: its calls' results as the value's
            tr.kinds.note_result(v, result)
        return {**env, target.id: Binding(v, kind)}, [(v, tr.materialize(value), tr.span(s))]

    # ---- if / match ------------------------------------------------------------
    def _join(self, branches: list[list[ast.stmt]], env: Env, rest: list[ast.stmt],
              ctx: BlockEnd) -> list[str]:
        """Names coming out of branches that fall through: bound before, or in every branch
        and read after it (an unread one, e.g. a helper ``def`` in each branch, stays local:
        joining it would only ask for types nothing constrains)."""
        assigned = [assigned_names(b) for b in branches]
        everywhere = set.intersection(*(set(a) for a in assigned)) if assigned else set()
        # the walk over the rest only for names new in every branch: a chain of a thousand
        # ifs rebinding x would otherwise walk what follows each of them (quadratic)
        new = everywhere - set(env)
        read_after = ctx.live | {n.id for s in rest for n in ast.walk(s)
                                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                                 and n.id in new} if new else set()
        out = []
        for names in assigned:
            for n in names:
                if n not in out and (n in env or (n in everywhere and n in read_after)):
                    out.append(n)
        return out

    def _branching(self, node: ast.stmt, branches: list[list[ast.stmt]], env: Env,
                   rest: list[ast.stmt], ctx: BlockEnd,
                   make: Callable[[Callable[[list[ast.stmt], Env, BlockEnd], Expr]], Expr]) -> Expr:
        """Shared by if and match: `make(translate_branch)` builds the branching expression."""
        tr = self.tr
        self._note_partial_names(node, branches, env)
        if rest and all(always_returns(b) for b in branches):
            raise tr.error(rest[0], "unreachable code: every branch above ends in `return`")
        if contains_return([s for b in branches for s in b]):
            # The rest of the block goes into each branch that falls through.
            return make(lambda stmts, e, c: self.block(
                stmts if always_returns(stmts) else stmts + rest, e, ctx))
        outs = self._join(branches, env, rest, ctx)
        branch_kinds: list[list[Kind]] = []

        def fall(e: Env) -> Expr:
            missing = [n for n in outs if n not in e]
            if missing:
                raise tr.error(node, f"{missing[0]!r} is assigned in some branches only; "
                                     "assign it before the branch or in every branch")
            branch_kinds.append([e[n].kind for n in outs])
            vals = [e[n].expr for n in outs]
            return vals[0] if len(vals) == 1 else Tuple(vals)

        joined = make(lambda stmts, e, c: self.block(
            stmts, e, BlockEnd(fall, ctx.in_loop, frozenset(outs))))
        self._note_partial_names(node, branches, env)  # again: nested branches noted theirs
        if not outs:
            return Let(tr.temp("_"), joined, self.block(rest, env, ctx))
        tmp = tr.temp("join")
        env2 = dict(env)
        new_vars = []
        for i, n in enumerate(outs):
            v = Var(n, span=tr.span(node))
            item = tmp if len(outs) == 1 else TupleGetItem(tmp, i, span=tr.span(node))
            new_vars.append((v, item))
            kinds = {k[i] for k in branch_kinds}
            env2[n] = Binding(v, kinds.pop() if len(kinds) == 1 else None)
        body = self.block(rest, env2, ctx)
        for v, item in reversed(new_vars):
            body = Let(v, item, body)
        return Let(tmp, joined, body, span=tr.span(node))

    def _note_partial_names(self, node: ast.stmt, branches: list[list[ast.stmt]], env: Env
                            ) -> None:
        """Names that only some branches assign are not bound after the statement."""
        tr = self.tr
        keyword = "if" if isinstance(node, ast.If) else "match"
        assigned = [set(assigned_names(b)) for b in branches if not always_returns(b)]
        everywhere = set.intersection(*assigned) if assigned else set()
        for n in set().union(*assigned) - everywhere - env.keys():
            tr.locals.note_unbound(n, f"{n!r} is assigned in only some branches of the `{keyword}` "
                                      f"at line {tr.line(node)}; assign it before the `{keyword}` "
                                      "or in every branch")

    def if_statement(self, s: ast.If, env: Env, rest: list[ast.stmt], ctx: BlockEnd) -> Expr:
        tr = self.tr
        cond = tr.expressions.condition(s.test, env)

        def make(branch) -> Expr:
            return If(cond, branch(s.body, env, ctx), branch(s.orelse, env, ctx), span=tr.span(s))

        return self._branching(s, [s.body, s.orelse], env, rest, ctx, make)

    def match_statement(self, s: ast.Match, env: Env, rest: list[ast.stmt], ctx: BlockEnd) -> Expr:
        tr = self.tr
        data = tr.materialize(tr.expressions.expr(s.subject, env))

        def make(branch) -> Expr:
            clauses = []
            for case in s.cases:
                if case.guard is not None:
                    raise tr.error(case.guard, "guards (`case ... if ...`) are not supported; "
                                               "use an `if` inside the case")
                case_env = dict(env)
                pattern = self.pattern(case.pattern, case_env)
                clauses.append(Clause(pattern, branch(case.body, case_env, ctx)))
            return Match(data, clauses, span=tr.span(s))

        return self._branching(s, [c.body for c in s.cases], env, rest, ctx, make)

    def pattern(self, p: ast.pattern, env: Env) -> Pattern:
        tr = self.tr
        if isinstance(p, ast.MatchAs):
            if p.pattern is not None:
                raise tr.error(p, "`pattern as name` is not supported")
            if p.name is None:
                return PatternWildcard(span=tr.span(p))
            self.check_rebind(p.name, env, p)
            v = tr.var(p.name, p)
            env[p.name] = Binding(v)
            return PatternVar(v, span=tr.span(p))
        if isinstance(p, ast.MatchSequence):
            return PatternTuple([self.pattern(q, env) for q in p.patterns], span=tr.span(p))
        if isinstance(p, ast.MatchClass):
            ctor = tr.values.python_value(p.cls)
            ctor = getattr(ctor, "constructor", ctor)
            if not isinstance(ctor, Constructor):
                raise tr.error(p.cls, "a class pattern must name an ADT constructor, e.g. "
                                      "`case Cons(h, t):`")
            if p.kwd_patterns:
                raise tr.error(p, "keyword sub-patterns are not supported; use positional ones")
            subs = [self.pattern(q, env) for q in p.patterns]
            if len(subs) != len(ctor.inputs):
                raise tr.error(p, f"{ctor.name} has {len(ctor.inputs)} fields, the pattern "
                                  f"gives {len(subs)}")
            return PatternConstructor(ctor, subs, span=tr.span(p))
        raise tr.error(p, "unsupported pattern; use constructor patterns `Cons(h, t)`, "
                          "tuples `(a, b)`, names and `_`")
