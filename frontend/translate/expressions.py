"""Expressions: names, operators, comparisons, calls, indexing and list literals."""
from __future__ import annotations

import ast
import operator
from typing import Any as AnyValue

from relaydsl.errors import DSLSyntaxError, IRError
from relaydsl.frontend.translate.base import TranslatorBase
from relaydsl.frontend.translate.bindings import Env, _is_atomic, _let_all
from relaydsl.frontend.translate.getitem import getitem, index_end
from relaydsl.frontend.translate.kinds import _declared_result_kind, _is_tuple_kind
from relaydsl.frontend.translate.literals import _PYTHON_BINOPS, _Literal
from relaydsl.frontend.translate.unsupported import _UNSUPPORTED_EXPRESSIONS
from relaydsl.ir.expr import Call, Expr, GlobalVar, If, Tuple, TupleGetItem, Var
from relaydsl.op import ops
from relaydsl.op.registry import OpDef
from relaydsl.prelude import prelude_definitions

_BINOPS = {
    ast.Add: ops.add, ast.Sub: ops.subtract, ast.Mult: ops.multiply, ast.Div: ops.divide,
    ast.MatMult: ops.matmul, ast.Pow: ops.power,
}
_UNSUPPORTED_BINOPS = {
    ast.FloorDiv: "; `/` floors on ints, write relay.floor(x / y) on floats",
    ast.Mod: "; write x - relay.floor(x / y) * y, or x - x / y * y on ints",
}
_COMPARE = {
    ast.Eq: ops.equal, ast.NotEq: ops.not_equal, ast.Lt: ops.less, ast.LtE: ops.less_equal,
    ast.Gt: ops.greater, ast.GtE: ops.greater_equal,
}


class Expressions(TranslatorBase):
    """Translates expressions; mixed into `Translator`."""

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
                return self.op(ops.negative, [operand], node)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.Not):
                return self.op(ops.logical_not, [operand], node)
            raise self.error(node, "`~` is not supported; use relay.logical_not")
        if isinstance(node, ast.BoolOp):
            combine = ops.logical_and if isinstance(node.op, ast.And) else ops.logical_or
            values = [self.expr(v, env) for v in node.values]
            out = values[0]
            for v in values[1:]:
                out = self.op(combine, [out, v], node)
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

    def binop(self, op: ast.operator, left, right, node: ast.AST):
        if isinstance(left, _Literal) and isinstance(right, _Literal):
            return self._fold(op, left, right, node)
        relay_op = _BINOPS.get(type(op))
        if relay_op is None:
            hint = _UNSUPPORTED_BINOPS.get(type(op), "")
            raise self.error(node, f"the operator {type(op).__name__} is not supported on "
                                   f"tensors{hint}")
        return self.op(relay_op, [left, right], node)

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
            relay_op = _COMPARE.get(type(op))
            if relay_op is None:
                raise self.error(node, f"the comparison {type(op).__name__} is not supported")
            right = self.expr(comparator, env)
            if i + 1 < len(node.ops) and not isinstance(right, _Literal) \
                    and not _is_atomic(right):  # `a < f(x) < b` evaluates f(x) once
                tmp = self.temp("v")
                lets.append((tmp, right))
                right = tmp
            this = self.op(relay_op, [left, right], node)
            out = this if out is None else self.op(ops.logical_and, [out, this], node)
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
                # an operator's attributes given positionally are Python constants, read by
                # op_call from the syntax: only its inputs are translated here
                relay_op = getattr(target, "relay_op", None)
                inputs = node.args if relay_op is None else node.args[:relay_op.num_inputs]
                args = [self.expr(a, env) for a in inputs]
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
        if callee in self._return_kinds:
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

    def op_call(self, relay_op: OpDef, node: ast.Call, args: list,
                kwargs: dict[str, ast.expr]) -> Expr:
        """``relay.<op>(inputs, attributes)``, as in Python: the inputs (`args`, translated)
        positionally or by name, then the attributes, Python constants, positionally in
        TVM's order (the rest of ``node.args``) or by name."""
        def static(value_node: ast.expr, what: str) -> AnyValue:
            try:
                return self._static(value_node)
            except DSLSyntaxError:
                raise self.error(value_node, f"the attribute {what} of {relay_op.name} must be "
                                             "a constant known when the function is "
                                             "translated") from None

        names = [a.name for a in relay_op.attrs]
        positional = [static(v, names[i] if i < len(names) else f"#{i + 1}")
                      for i, v in enumerate(node.args[len(args):])]
        given = {k: self.expr(v, self.current_env) if k in relay_op.inputs else
                 static(v, f"{k}=") for k, v in kwargs.items()}
        try:
            inputs, attrs = relay_op.bind_arguments([*args, *positional], given)
        except IRError as e:
            raise DSLSyntaxError(e.raw_message, self.span(node)) from None
        return self.op(relay_op, list(inputs), node, **attrs)

    def subscript(self, node: ast.Subscript, env: Env):
        value = self.materialize(self.expr(node.value, env))
        kind = self.kind_of(value, env)
        if not _is_tuple_kind(kind):
            parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(isinstance(p, ast.Constant) and p.value is Ellipsis for p in parts):
                raise self.error(node, "`...` in indices is not supported; write each axis")
            indices = [p if isinstance(p, ast.Slice) else self.expr(p, env) for p in parts]
            if kind is None and len(indices) == 1 and isinstance(indices[0], _Literal) \
                    and type(indices[0].value) is int:
                # a tuple's field or a tensor's row: which, type inference says (getitem.py)
                return getitem(value, indices[0].value, self.span(node))
            return self._index(value, indices, node, env)
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

    def _index(self, value: Expr, parts: list[ast.Slice | Expr | _Literal], node: ast.Subscript,
               env: Env) -> Expr:
        """Tensor indexing, each axis's index translated or a slice: integers take, constant
        slices strided_slice."""
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
            if isinstance(p, _Literal) and isinstance(p.value, int):
                begin.append(p.value)
                end.append(index_end(p.value))
                strides.append(1)
                axes.append(axis)
                squeeze.append(axis)
            else:
                dynamic.append((axis, self.materialize(p)))
        out = value
        if begin:
            out = ops.strided_slice(out, begin=begin, end=end, strides=strides, axes=axes,
                                    span=self.span(node))
            if squeeze:
                out = ops.squeeze(out, axis=squeeze, span=self.span(node))
        for removed, (axis, idx) in enumerate(dynamic):
            shift = sum(1 for s in squeeze if s < axis)
            out = ops.take(out, idx, axis=axis - shift - removed, span=self.span(node))
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
        cons, nil = prelude_definitions()[0][0].constructors
        out: Expr = Call(nil, (), span=self.span(node))
        lets: list[tuple[Var, Expr]] = []
        items = self.materialize_alike([self.expr(e, env) for e in node.elts], lets)
        for item in reversed(items):
            out = Call(cons, (item, out), span=self.span(node))
        return _let_all(lets, out)
