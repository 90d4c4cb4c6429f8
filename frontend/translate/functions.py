"""Function definitions: the decorated function, nested ``def``s and lambdas (closures)."""
from __future__ import annotations

import ast
from typing import Any as AnyValue

from relaydsl.errors import DSLSyntaxError, IRError
from relaydsl.frontend.model import Model
from relaydsl.frontend.translate.base import TranslatorBase
from relaydsl.frontend.translate.bindings import Binding, Env, _Context
from relaydsl.frontend.translate.kinds import _kind_of_type
from relaydsl.frontend.translate.scoping import _assigned_names
from relaydsl.ir.expr import Expr, Function
from relaydsl.ir.types import Type


class Functions(TranslatorBase):
    """Translates function definitions; mixed into `Translator`."""

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
                py_ann = self._signature_value(a.arg, a.annotation, top)
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
            py_ret = self._signature_value("return", tree.returns, top)
            # `-> Model`, as Figure 4 writes a training function: the model export_model
            # returns, a function of the model's inputs whose type inference finds
            if py_ret is not Model:
                ret = self.annotation(py_ret, tree.returns)
        body = self.block(tree.body, env, _Context(lambda e: self._missing_return(tree)))
        return Function(params, body, ret, span=self.span(tree))

    def _signature_value(self, name: str, node: ast.expr, top: bool) -> AnyValue:
        """The annotation of parameter `name` ("return": the result): for the decorated
        function itself, the value Python evaluated at its definition when there is one (not
        under ``from __future__ import annotations``); else the annotation's text, read in
        the function's scope."""
        if top and name in self.resolver.signature:
            return self.resolver.signature[name]
        return self.python_value(node)

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
