"""Function definitions: the decorated function, nested ``def``s and lambdas (closures)."""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any as AnyValue

from relaydsl.errors import DSLSyntaxError, IRError
from relaydsl.frontend.model import Model
from relaydsl.frontend.translate.bindings import Binding, BlockEnd, Env
from relaydsl.frontend.translate.kinds import kind_of_type
from relaydsl.frontend.translate.scoping import assigned_names
from relaydsl.ir.expr import Expr, Function
from relaydsl.ir.types import Type

if TYPE_CHECKING:
    from relaydsl.frontend.translate.translator import Translator


class FunctionTranslator:
    """Translates function definitions; the translator's ``functions``."""

    def __init__(self, tr: Translator):
        self.tr = tr

    def function(self, tree: ast.FunctionDef, env: Env | None = None, *, top: bool = True
                 ) -> Function:
        """The function `tree` defines: the decorated function (`top`), or a nested ``def``
        seeing `env`."""
        tr = self.tr
        local_names = [a.arg for a in tree.args.args] + assigned_names(tree.body)
        with tr.locals.function(local_names):
            try:
                return self._function(tree, env, top)
            except IRError as e:  # malformed IR from valid-looking Python: still the user's line
                raise DSLSyntaxError(e.raw_message, e.span or tr.span(tree)) from None
            except RecursionError:
                if not top:
                    raise
                raise tr.error(tree, "the function nests too many statements (each `if` "
                                     "and loop holds the rest of its block) to be "
                                     "translated; split it into smaller functions") from None

    def _function(self, tree: ast.FunctionDef, env: Env | None, top: bool) -> Function:
        tr = self.tr
        self._check_signature(tree, top)
        # The function's own locals hide the enclosing ones from its first line, as in Python.
        own = tr.locals.innermost()
        env = {n: b for n, b in (env or {}).items() if n not in own}
        params = []
        for a in tree.args.args:
            annotation = None
            kind = None
            if a.annotation is not None:
                py_ann = self._signature_value(a.arg, a.annotation, top)
                annotation = self.annotation(py_ann, a.annotation)
                kind = kind_of_type(annotation)
            elif top:
                raise tr.error(a, f"parameter {a.arg!r} needs a type annotation, e.g. "
                                  f"`{a.arg}: Tensor[Float, (2, 3)]`")
            p = tr.var(a.arg, a, annotation)
            params.append(p)
            env[a.arg] = Binding(p, kind, annotation)
        ret = None
        if tree.returns is not None:
            py_ret = self._signature_value("return", tree.returns, top)
            # `-> Model`, as Figure 4 writes a training function: the model export_model
            # returns, a function of the model's inputs whose type inference finds
            if py_ret is not Model:
                ret = self.annotation(py_ret, tree.returns)
        body = tr.statements.block(tree.body, env,
                                        BlockEnd(lambda e: self._missing_return(tree)))
        return Function(params, body, ret, span=tr.span(tree))

    def _signature_value(self, name: str, node: ast.expr, top: bool) -> AnyValue:
        """The annotation of parameter `name` ("return": the result): for the decorated
        function itself, the value Python evaluated at its definition when there is one (not
        under ``from __future__ import annotations``); else the annotation's text, read in
        the function's scope."""
        tr = self.tr
        if top and name in tr.resolver.signature:
            return tr.resolver.signature[name]
        return tr.values.python_value(node)

    def _check_signature(self, tree: ast.FunctionDef, top: bool) -> None:
        tr = self.tr
        args = tree.args
        for bad, what in ((args.vararg, "*args"), (args.kwarg, "**kwargs")):
            if bad is not None:
                raise tr.error(bad, f"{what} parameters are not supported; list each parameter")
        if args.kwonlyargs or args.posonlyargs:
            node = (args.kwonlyargs or args.posonlyargs)[0]
            raise tr.error(node, "keyword-only and positional-only parameters are not supported")
        if args.defaults:
            raise tr.error(args.defaults[0], "default parameter values are not supported")

    def _missing_return(self, tree: ast.AST) -> Expr:
        raise self.tr.error(tree, "the function can end without returning a value; "
                                  "end every path with `return ...`")

    def annotation(self, py_ann: AnyValue, node: ast.AST) -> Type:
        """The type the Python annotation `py_ann` (at `node`) denotes."""
        tr = self.tr
        try:
            return tr.resolver.annotation_type(py_ann, tr.symbols)
        except TypeError as e:
            raise tr.error(node, str(e)) from None

    def lambda_(self, node: ast.Lambda, env: Env) -> Function:
        """A lambda: a closure over `env`."""
        tr = self.tr
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
            raise tr.error(node, "lambdas take plain positional parameters only (no "
                                 "defaults, *args or keywords); pass every argument explicitly")
        inner = dict(env)
        params = []
        for a in args.args:
            p = tr.var(a.arg, a)
            params.append(p)
            inner[a.arg] = Binding(p)
        with tr.locals.function(a.arg for a in args.args):
            body = tr.materialize(tr.expressions.expr(node.body, inner))
        return Function(params, body, span=tr.span(node))
