"""Expressions: names, operators, comparisons, indexing, tuple and list literals, conditional
expressions (calls are calls.py's, lambdas functions.py's)."""
from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING

from relaydsl.frontend.translate.bindings import Env, is_atomic, is_value_path, let_all
from relaydsl.frontend.translate.getitem import getitem, index_end
from relaydsl.frontend.translate.kinds import TupleKind, is_tuple
from relaydsl.frontend.translate.literals import PYTHON_BINOPS, Number
from relaydsl.frontend.translate.unsupported import UNSUPPORTED_EXPRESSIONS
from relaydsl.ir.expr import Call, Expr, GlobalVar, If, Tuple, TupleGetItem, Var, const
from relaydsl.op import ops
from relaydsl.prelude import prelude_definitions

if TYPE_CHECKING:
    from relaydsl.frontend.translate.translator import Translator

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


class ExprTranslator:
    """Translates expressions; the translator's ``expressions``."""

    def __init__(self, tr: Translator):
        self.tr = tr

    def expr(self, node: ast.expr, env: Env) -> Expr | Number:
        """The translation of `node`: an expression, or a Python number (folded as Python
        computes it, typed by the tensor it meets)."""
        tr = self.tr
        if isinstance(node, ast.Name):
            return self.name(node, env)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float)):
                return Number(node.value, tr.span(node))
            raise tr.error(node, f"constant {node.value!r} is not a number; only numbers and "
                                 "arrays can be values")
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left, env), self.expr(node.right, env), node)
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand, env)
            if isinstance(operand, Number):
                if isinstance(node.op, ast.Invert) and type(operand.value) is not int:
                    raise tr.error(node, "`~` applies to ints only")
                fold = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                        ast.Invert: operator.invert}[type(node.op)]
                return Number(fold(operand.value), tr.span(node))
            if isinstance(node.op, ast.USub):
                return tr.op(ops.negative, [operand], node)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.Not):
                return tr.op(ops.logical_not, [operand], node)
            raise tr.error(node, "`~` is not supported; use relay.logical_not")
        if isinstance(node, ast.BoolOp):
            combine = ops.logical_and if isinstance(node.op, ast.And) else ops.logical_or
            values = [self.expr(v, env) for v in node.values]
            out = values[0]
            for v in values[1:]:
                out = tr.op(combine, [out, v], node)
            return out
        if isinstance(node, ast.Compare):
            return self.compare(node, env)
        if isinstance(node, ast.Call):
            return tr.calls.call(node, env)
        if isinstance(node, ast.Attribute):
            if is_value_path(node, env):
                hint = {"shape": "relay.shape_of(x)", "T": "relay.transpose(x)",
                        "dtype": "the annotation"}.get(node.attr, "a relay operator")
                raise tr.error(node, f"attributes of values are not supported (`.{node.attr}`); "
                                     f"use {hint}")
            value = tr.values.python_value(node)
            return tr.values.python_to_relay(value, node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, env)
        if isinstance(node, ast.Tuple):
            return Tuple(tr.materialize_all([self.expr(e, env) for e in node.elts]),
                         span=tr.span(node))
        if isinstance(node, ast.List):
            return self.list_literal(node, env)
        if isinstance(node, ast.IfExp):
            cond = self.condition(node.test, env)
            # A number in one branch keeps its own dtype: taking the other branch's would
            # evaluate that branch (`1 if n < 2 else n * fact(n - 1)` would never stop).
            a, b = self.expr(node.body, env), self.expr(node.orelse, env)
            a_e, b_e = tr.materialize_all([a, b])
            return If(cond, a_e, b_e, span=tr.span(node))
        if isinstance(node, ast.Lambda):
            return tr.functions.lambda_(node, env)
        raise tr.error(node, UNSUPPORTED_EXPRESSIONS.get(
            type(node), f"the {type(node).__name__} expression is not supported"))

    def name(self, node: ast.Name, env: Env):
        tr = self.tr
        b = env.get(node.id)
        if b is not None:
            return b.expr
        if node.id in tr.locals:
            raise tr.error(node, tr.locals.unbound_reason(node.id))
        resolver = tr.resolver
        try:
            value = resolver.lookup(node.id)
        except KeyError:
            gv = resolver.forward_refs.get(node.id)
            if gv is None:
                gv = GlobalVar(node.id, span=tr.span(node))
                resolver.forward_refs[node.id] = gv
            return gv
        return tr.values.python_to_relay(value, node)

    def binop(self, op: ast.operator, left, right, node: ast.AST):
        tr = self.tr
        if isinstance(left, Number) and isinstance(right, Number):
            return self._fold(op, left, right, node)
        relay_op = _BINOPS.get(type(op))
        if relay_op is None:
            hint = _UNSUPPORTED_BINOPS.get(type(op), "")
            raise tr.error(node, f"the operator {type(op).__name__} is not supported on "
                                 f"tensors{hint}")
        return tr.op(relay_op, [left, right], node)

    def _fold(self, op: ast.operator, left: Number, right: Number, node: ast.AST) -> Number:
        """An operator on two Python numbers, computed now as Python would."""
        tr = self.tr
        fold = PYTHON_BINOPS.get(type(op))
        if fold is None:
            raise tr.error(node, f"the operator {type(op).__name__} is not supported on numbers")
        try:
            value = fold(left.value, right.value)
        except ZeroDivisionError:
            raise tr.error(node, "division by zero") from None
        except (OverflowError, TypeError, ValueError) as e:
            raise tr.error(node, f"cannot compute this constant: {e}") from None
        if not isinstance(value, (bool, int, float)):
            raise tr.error(node, f"this constant is a {type(value).__name__} "
                                 f"({value!r:.40}); only real numbers are supported")
        return Number(value, tr.span(node))

    def compare(self, node: ast.Compare, env: Env):
        tr = self.tr
        left = self.expr(node.left, env)
        out = None
        lets: list[tuple[Var, Expr]] = []
        for i, (op, comparator) in enumerate(zip(node.ops, node.comparators)):
            relay_op = _COMPARE.get(type(op))
            if relay_op is None:
                raise tr.error(node, f"the comparison {type(op).__name__} is not supported")
            right = self.expr(comparator, env)
            if i + 1 < len(node.ops) and not isinstance(right, Number) \
                    and not is_atomic(right):  # `a < f(x) < b` evaluates f(x) once
                tmp = tr.temp("v")
                lets.append((tmp, right))
                right = tmp
            this = tr.op(relay_op, [left, right], node)
            out = this if out is None else tr.op(ops.logical_and, [out, this], node)
            left = right
        return let_all(lets, out)

    def subscript(self, node: ast.Subscript, env: Env):
        tr = self.tr
        value = tr.materialize(self.expr(node.value, env))
        kind = tr.kinds.of(value, env)
        if not is_tuple(kind):
            parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(isinstance(p, ast.Constant) and p.value is Ellipsis for p in parts):
                raise tr.error(node, "`...` in indices is not supported; write each axis")
            indices = [p if isinstance(p, ast.Slice) else self.expr(p, env) for p in parts]
            if kind is None and len(indices) == 1 and isinstance(indices[0], Number) \
                    and type(indices[0].value) is int:
                # a tuple's field or a tensor's row: which, type inference says (getitem.py)
                return getitem(value, indices[0].value, tr.span(node))
            return self._index(value, indices, node, env)
        index = None if isinstance(node.slice, ast.Slice) else self.expr(node.slice, env)
        if not isinstance(index, Number) or type(index.value) is not int:
            raise tr.error(node.slice, "a tuple is indexed by a constant int, e.g. `t[0]`")
        i = index.value
        if i < 0 and isinstance(kind, TupleKind):
            i += len(kind.fields)
        if i < 0:
            size = f"{len(kind.fields)} fields" if isinstance(kind, TupleKind) else \
                "a length unknown here"
            raise tr.error(node.slice, f"tuple index {index.value} is out of range: the tuple "
                                       f"has {size}")
        return TupleGetItem(value, i, span=tr.span(node))

    def _index(self, value: Expr, parts: list[ast.Slice | Expr | Number], node: ast.Subscript,
               env: Env) -> Expr:
        """Tensor indexing, each axis's index translated or a slice: integers take, constant
        slices strided_slice."""
        tr = self.tr
        begin, end, strides, axes, squeeze = [], [], [], [], []
        dynamic: list[tuple[int, Expr]] = []
        for axis, p in enumerate(parts):
            if isinstance(p, ast.Slice):
                lo, hi, st = (self._slice_bound(b, env) for b in (p.lower, p.upper, p.step))
                st = 1 if st is None else st
                if st == 0:
                    raise tr.error(p, "slice step cannot be zero")
                big = 2**31 - 1
                begin.append(lo if lo is not None else (0 if st > 0 else big))
                end.append(hi if hi is not None else (big if st > 0 else -big - 1))
                strides.append(st)
                axes.append(axis)
                continue
            if isinstance(p, Number) and isinstance(p.value, int):
                begin.append(p.value)
                end.append(index_end(p.value))
                strides.append(1)
                axes.append(axis)
                squeeze.append(axis)
            else:
                dynamic.append((axis, tr.materialize(p)))
        out = value
        if begin:
            out = ops.strided_slice(out, begin=begin, end=end, strides=strides, axes=axes,
                                    span=tr.span(node))
            if squeeze:
                out = ops.squeeze(out, axis=squeeze, span=tr.span(node))
        for removed, (axis, idx) in enumerate(dynamic):
            shift = sum(1 for s in squeeze if s < axis)
            out = ops.take(out, idx, axis=axis - shift - removed, span=tr.span(node))
        return out

    def _slice_bound(self, node: ast.expr | None, env: Env) -> int | None:
        if node is None:
            return None
        value = self.expr(node, env)
        if not isinstance(value, Number) or type(value.value) is not int:
            raise self.tr.error(node, "slice bounds are constant ints (known when the function is "
                                      "translated); index with a tensor `x[i]` or use relay.take")
        return value.value

    def list_literal(self, node: ast.List, env: Env) -> Expr:
        tr = self.tr
        cons, nil = prelude_definitions()[0][0].constructors
        out: Expr = Call(nil, (), span=tr.span(node))
        lets: list[tuple[Var, Expr]] = []
        items = tr.materialize_alike([self.expr(e, env) for e in node.elts], lets)
        for item in reversed(items):
            out = Call(cons, (item, out), span=tr.span(node))
        return let_all(lets, out)

    def condition(self, node: ast.expr, env: Env) -> Expr:
        """The test of an if or while; a Python number there is a bool, as in Python."""
        test = self.expr(node, env)
        if isinstance(test, Number):
            return const(bool(test.value), "bool", span=test.span)
        return test
