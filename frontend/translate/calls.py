"""Calls: of operators (``relay.<op>(inputs, attributes)``), of decorated functions and of
function values.

A callee that names a Python object (``relay.conv2d``, ``relay.grad``, ``f``) may have a
meaning of its own, which the resolver's ``special`` says first (the frontend's
special_calls.py: layers, the training API, models, grad, references, the prelude's
functions); otherwise an operator's call is the op's call, a decorated function's call a call
of its global."""
from __future__ import annotations

import ast
import builtins
from typing import TYPE_CHECKING, Any as AnyValue

from relaydsl.errors import DSLSyntaxError, IRError
from relaydsl.frontend.translate.bindings import Env, is_value_path
from relaydsl.frontend.translate.kinds import declared_result_kind
from relaydsl.frontend.translate.literals import Number
from relaydsl.ir.expr import Call, Expr
from relaydsl.op.registry import OpDef

if TYPE_CHECKING:
    from relaydsl.frontend.translate.translator import Translator


class CallTranslator:
    """Translates calls; the translator's ``calls``."""

    def __init__(self, tr: Translator):
        self.tr = tr

    def call(self, node: ast.Call, env: Env) -> Expr:
        tr = self.tr
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise tr.error(a, "starred arguments are not supported; pass each argument")
        for k in node.keywords:
            if k.arg is None:
                raise tr.error(k, "`**kwargs` arguments are not supported")
        func = node.func
        if isinstance(func, ast.Attribute) and is_value_path(func, env):
            raise tr.error(func, f"methods of values are not supported (`.{func.attr}(...)`); "
                                 f"call an operator instead, e.g. `relay.{func.attr}(x, ...)`")
        local = isinstance(func, ast.Name) and (func.id in env or func.id in tr.locals)
        if not local and isinstance(func, (ast.Name, ast.Attribute)):
            try:
                target = tr.values.python_value(func)
            except DSLSyntaxError:
                target = None
                if isinstance(func, ast.Attribute):
                    raise
            if target is not None:
                return self._python_call(target, node, env)
        callee = tr.materialize(tr.expressions.expr(func, env))
        if node.keywords:
            raise tr.error(node.keywords[0], "keyword arguments are only for relay operators' "
                                             "attributes")
        args = [tr.expressions.expr(a, env) for a in node.args]
        call = self._make_call(callee, tr.materialize_all(args), node)
        result = tr.kinds.result(callee)
        if result is not None:
            tr.kinds.note(call, result)
        return call

    def _python_call(self, target: AnyValue, node: ast.Call, env: Env) -> Expr:
        """A call of the Python object `target`: a relay operator, a decorated function, or a
        callee with a meaning of its own."""
        tr = self.tr
        refusal = getattr(target, "relay_python_only", None)  # e.g. relaydsl.distributed's
        if isinstance(refusal, str):
            raise tr.error(node, refusal)
        # an operator's attributes given positionally are Python constants, read by op_call
        # from the syntax: only its inputs are translated here
        relay_op = getattr(target, "relay_op", None)
        inputs = node.args if relay_op is None else node.args[:relay_op.num_inputs]
        args = [tr.expressions.expr(a, env) for a in inputs]
        kwargs = {k.arg: k.value for k in node.keywords if k.arg is not None}
        special = tr.resolver.special(tr, target, node, args, kwargs, env)
        if special is not None:
            return special
        if relay_op is not None:
            return self.op_call(relay_op, node, args, kwargs, env)
        if target is range:
            raise tr.error(node, "range(...) can only be iterated by a `for` loop")
        if getattr(builtins, getattr(target, "__name__", ""), None) is target:
            raise tr.error(node, f"the Python builtin {target.__name__}() cannot run inside "
                                 "decorated code; use relay operators")
        callee = tr.materialize(tr.values.python_to_relay(target, node.func))
        if kwargs:
            raise tr.error(node.keywords[0], "keyword arguments are only for relay operators' "
                                             "attributes")
        call = self._make_call(callee, tr.materialize_all(args), node)
        tr.kinds.note(call, declared_result_kind(target))
        return call

    def _make_call(self, callee: Expr, args: list[Expr], node: ast.AST) -> Call:
        try:
            return Call(callee, args, span=self.tr.span(node))
        except IRError as e:  # e.g. a constructor given the wrong number of fields
            raise self.tr.error(node, e.raw_message) from None

    def op_call(self, relay_op: OpDef, node: ast.Call, args: list[Expr | Number],
                kwargs: dict[str, ast.expr], env: Env) -> Expr:
        """``relay.<op>(inputs, attributes)``, as in Python: the inputs (`args`, translated)
        positionally or by name, then the attributes, Python constants, positionally in
        TVM's order (the rest of ``node.args``) or by name."""
        tr = self.tr

        def static(value_node: ast.expr, what: str) -> AnyValue:
            try:
                return tr.values.static(value_node)
            except DSLSyntaxError:
                raise tr.error(value_node, f"the attribute {what} of {relay_op.name} must be "
                                           "a constant known when the function is "
                                           "translated") from None

        names = [a.name for a in relay_op.attrs]
        positional = [static(v, names[i] if i < len(names) else f"#{i + 1}")
                      for i, v in enumerate(node.args[len(args):])]
        given = {k: tr.expressions.expr(v, env) if k in relay_op.inputs else
                 static(v, f"{k}=") for k, v in kwargs.items()}
        try:
            inputs, attrs = relay_op.bind_arguments([*args, *positional], given)
        except IRError as e:
            raise DSLSyntaxError(e.raw_message, tr.span(node)) from None
        return tr.op(relay_op, list(inputs), node, **attrs)
