"""Loops: ``for`` and ``while`` become a local recursive function over the loop state.

The state is the names the body reassigns; the function is called once and its result rebinds
them. A ``for`` counts over a Python ``range``, walks a relay.List, or takes the rows of a tensor
(or of each tensor of a tuple)."""
from __future__ import annotations

import ast
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterable

from relaydsl.frontend.translate.bindings import Binding, BlockEnd, Env, is_atomic, let_all
from relaydsl.frontend.translate.kinds import TupleKind, ValueKind, is_tuple
from relaydsl.frontend.translate.literals import INT32, Number
from relaydsl.frontend.translate.scoping import assigned_names, target_names
from relaydsl.ir.adt import PatternConstructor, PatternVar
from relaydsl.ir.expr import (
    Call,
    Clause,
    Expr,
    Function,
    If,
    Let,
    Match,
    Tuple,
    TupleGetItem,
    Var,
    const,
)
from relaydsl.op import ops
from relaydsl.prelude import prelude_definitions

if TYPE_CHECKING:
    from relaydsl.frontend.translate.translator import Translator


class LoopTranslator:
    """Translates ``for`` and ``while``; the translator's ``loops``."""

    def __init__(self, tr: Translator):
        self.tr = tr

    def loop(self, s: ast.For | ast.While, env: Env, rest: list[ast.stmt], ctx: BlockEnd) -> Expr:
        tr = self.tr
        if s.orelse:
            raise tr.error(s.orelse[0], "`else` on a loop is not supported")
        body_assigned = assigned_names(s.body)
        state = [n for n in body_assigned if n in env]
        loop_var = tr.var("loop", s)
        state_params = [Var(n, span=tr.span(s)) for n in state]
        state_env = {**env, **{n: replace(env[n], expr=p) for n, p in zip(state, state_params)}}
        for t in target_names(s) if isinstance(s, ast.For) else ():
            tr.statements.check_rebind(t, env, s.target)

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
        res = tr.temp("loop_result")
        env2 = dict(env)
        rebind = []
        for i, n in enumerate(state):
            v = Var(n, span=tr.span(s))
            rebind.append((v, TupleGetItem(res, i, span=tr.span(s))))  # errors point at the loop
            env2[n] = Binding(v, env[n].kind)
        self._note_loop_locals(s, body_assigned, env, env2)
        body = tr.statements.block(rest, env2, ctx)
        for v, item in reversed(rebind):
            body = Let(v, item, body)
        call = Call(loop_var, initial, span=tr.span(s))
        return let_all(lets, Let(loop_var, fn, Let(res, call, body), span=tr.span(s)))

    def _note_loop_locals(self, s: ast.For | ast.While, body_assigned: list[str], env: Env,
                          env2: Env) -> None:
        """Names that are not bound after the loop: those first assigned in its body, and the
        loop variables (unlike Python, which keeps their last value)."""
        tr = self.tr
        line = tr.line(s)
        for n in body_assigned:
            if n not in env:
                tr.locals.note_unbound(n, f"{n!r} is first assigned inside the loop at line "
                                          f"{line}, so it is not defined after the loop; "
                                          "initialise it before the loop")
        targets = sorted(target_names(s)) if isinstance(s, ast.For) else []
        for n in targets:
            if n not in body_assigned:
                env2.pop(n, None)
                tr.locals.note_unbound(n, f"{n!r} is the variable of the `for` loop at line {line} "
                                          "and is not defined after it; keep the value you need in "
                                          "a variable initialised before the loop")

    def _while_function(self, s: ast.While, loop_var: Var, params: list[Var], env: Env,
                        state: list[str], result: Callable[[Env], Expr]) -> Function:
        tr = self.tr
        cond = tr.expressions.condition(s.test, env)

        def again(e: Env) -> Expr:
            return Call(loop_var, [e[n].expr for n in state], span=tr.span(s))

        body = tr.statements.block(s.body, env, BlockEnd(again, in_loop=True))
        return Function(params, If(cond, body, result(env), span=tr.span(s)), span=tr.span(s))

    def _for_function(self, s: ast.For, loop_var: Var, params: list[Var], env: Env,
                      state: list[str], outer_env: Env, result: Callable[[Env], Expr]
                      ) -> tuple[Function, list[Expr], list[tuple[Var, Expr]]]:
        """The loop function, its first arguments, and lets to bind before the loop."""
        tr = self.tr
        initial_state = [outer_env[n].expr for n in state]
        it = s.iter
        counter = Var("i", INT32, span=tr.span(s.target))
        if isinstance(it, ast.Call) and self._is_python_range(it.func, outer_env):
            start, stop, step = self._range_args(it, outer_env)
            lets: list[tuple[Var, Expr]] = []
            if not is_atomic(stop):  # the loop tests `i < stop` each step: compute it once
                lets.append((tr.temp("stop"), stop))
                stop = lets[0][0]
            if not isinstance(s.target, ast.Name):
                raise tr.error(s.target, "a range loop assigns one name")
            body_env = {**env, s.target.id: Binding(counter, ValueKind.TENSOR)}
            cmp = ops.less if step > 0 else ops.greater
            cond = cmp(counter, stop, span=tr.span(it))
            nxt = ops.add(counter, const(step, "int32"), span=tr.span(s))
            fn = self._counting_function(s, loop_var, counter, params, body_env, state, cond, nxt,
                                         result, env)
            return fn, [start, *initial_state], lets
        iterable = tr.expressions.expr(it, outer_env)
        kind = tr.kinds.of(iterable, outer_env)
        if kind is ValueKind.LIST:
            fn = self._list_function(s, loop_var, params, env, state, iterable, result)
            return fn, [tr.materialize(iterable), *initial_state], []
        # Over the first axis of a tensor, or of each tensor of a tuple (`for x, y in data`).
        data = tr.materialize(iterable)
        data_var = Var("data", span=tr.span(it))
        if isinstance(s.target, ast.Tuple) or is_tuple(kind):
            if not isinstance(s.target, ast.Tuple):
                raise tr.error(s.target, "a loop over a tuple of tensors unpacks each step: "
                                         "`for x, y in data:`")
            if kind is ValueKind.TENSOR:
                raise tr.error(s.target, "the rows of a tensor are tensors, not tuples: loop "
                                         "with one name, `for row in x:`")
            if isinstance(kind, TupleKind) and len(kind.fields) != len(s.target.elts):
                raise tr.error(s.target, f"the loop unpacks {len(s.target.elts)} names from "
                                         f"a tuple of {len(kind.fields)} tensors")
            first = TupleGetItem(data_var, 0, span=tr.span(it))
            items = [ops.take(TupleGetItem(data_var, i, span=tr.span(it)), counter, axis=0,
                              span=tr.span(t))
                     for i, t in enumerate(s.target.elts)]
            targets = s.target.elts
        else:
            first = data_var
            items = [ops.take(data_var, counter, axis=0, span=tr.span(s.target))]
            targets = [s.target]
        body_env = dict(env)
        for t in targets:
            if not isinstance(t, ast.Name):
                raise tr.error(t, "a loop target must be a name or a tuple of names")
        n = ops.take(ops.shape_of(first), const(0, "int32"), axis=0)
        cond = ops.less(counter, n, span=tr.span(it))
        nxt = ops.add(counter, const(1, "int32"))
        item_vars = []
        for t, item in zip(targets, items):
            v = tr.var(t.id, t)  # type: ignore[attr-defined]
            item_vars.append((v, item))
            body_env[t.id] = Binding(v, ValueKind.TENSOR)  # type: ignore[attr-defined]
        fn = self._counting_function(s, loop_var, counter, [data_var, *params], body_env, state,
                                     cond, nxt, result, env, item_vars=item_vars, extra=[data_var])
        return fn, [const(0, "int32"), data, *initial_state], []

    def _counting_function(self, s: ast.For, loop_var: Var, counter: Var, params: list[Var],
                           body_env: Env, state: list[str], cond: Expr, nxt: Expr,
                           result: Callable[[Env], Expr], env: Env,
                           item_vars: Iterable[tuple[Var, Expr]] = (),
                           extra: Iterable[Var] = ()) -> Function:
        tr = self.tr
        def again(e: Env) -> Expr:
            return Call(loop_var, [nxt, *extra, *[e[n].expr for n in state]], span=tr.span(s))

        body = tr.statements.block(s.body, body_env, BlockEnd(again, in_loop=True))
        for v, item in reversed(list(item_vars)):
            body = Let(v, item, body)
        return Function([counter, *params], If(cond, body, result(env), span=tr.span(s)),
                        span=tr.span(s))

    def _list_function(self, s: ast.For, loop_var: Var, params: list[Var], env: Env,
                       state: list[str], iterable, result: Callable[[Env], Expr]) -> Function:
        tr = self.tr
        list_t = prelude_definitions()[0][0]
        cons, nil = list_t.constructors
        xs, head, tail = Var("xs"), Var("x"), Var("rest")
        if not isinstance(s.target, ast.Name):
            raise tr.error(s.target, "a loop over a relay.List assigns one name per element")
        body_env = {**env, s.target.id: Binding(head)}

        def again(e: Env) -> Expr:
            return Call(loop_var, [tail, *[e[n].expr for n in state]], span=tr.span(s))

        body = tr.statements.block(s.body, body_env, BlockEnd(again, in_loop=True))
        match = Match(xs, [
            Clause(PatternConstructor(cons, [PatternVar(head), PatternVar(tail)]), body),
            Clause(PatternConstructor(nil, []), result(env)),
        ], span=tr.span(s))
        return Function([xs, *params], match, span=tr.span(s))

    def _is_python_range(self, func: ast.expr, env: Env) -> bool:
        tr = self.tr
        if not isinstance(func, ast.Name) or func.id in env or func.id in tr.locals:
            return False
        try:
            return tr.resolver.lookup(func.id) is range
        except KeyError:
            return False

    def _range_args(self, it: ast.Call, env: Env) -> tuple[Expr, Expr, int]:
        tr = self.tr
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise tr.error(it, "range takes 1 to 3 positional arguments")
        args = [tr.expressions.expr(a, env) for a in it.args]
        for value, node in zip(args[:2], it.args):
            if isinstance(value, Number) and type(value.value) is not int:
                raise tr.error(node, f"the bounds of range are ints, got {value.value!r}")
        step = 1
        if len(args) == 3:
            if not isinstance(args[2], Number) or type(args[2].value) is not int \
                    or args[2].value == 0:
                raise tr.error(it.args[2], "the step of range must be a non-zero Python int")
            step = args[2].value
        start, stop = (args[0], args[1]) if len(args) >= 2 else (Number(0, None), args[0])
        as_int = [a.default() if isinstance(a, Number) else a for a in (start, stop)]
        return as_int[0], as_int[1], step
