"""Reverse-mode AD for first-order, straight-line programs, without references.

For a function whose body is lets, operator calls, tuples, projections and
constants, the adjoint program is itself straight-line: the forward bindings
(A-normal form), then one binding per backward step, each applying an op's
gradient rule (defined with the op, relaydsl/op) to the adjoint of its output, and
adjoints of a variable used several times summed. There are no references
or closures, so the result is ready for fusion and the other passes.

Example: ``fn (%x) { let %y = tanh(%x); multiply(%y, %y) }`` becomes, in outline::

    fn (%x) {
      let %y = tanh(%x); let %r = multiply(%y, %y);
      let %dr = ones_like(%r);
      let %dy = add(<rule of multiply, input 0>, <input 1>);     -- %y is used twice
      let %dx = <rule of tanh applied to %dy>;
      (%r, (%dx,))
    }

``supports(fn)`` says whether a function is in this fragment; elsewhere the
higher-order transform (gradient.py) applies. The two agree where both apply.
"""
from __future__ import annotations

from relaydsl.errors import RelayTypeError
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, Let, Op, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type, is_float, type_to_str
from relaydsl.ir.visitor import post_order
from relaydsl.op.grad_util import input_adjoints
from relaydsl.op.registry import ops

_STRAIGHT_LINE = (Var, Constant, Let, Tuple, TupleGetItem, Call)


def supports(fn: Function) -> bool:
    """Whether `fn` is first-order straight-line code over tensors (and tuples of them)."""
    ok = [True]

    def check(e: Expr) -> None:
        if e is fn:
            return
        if not isinstance(e, (*_STRAIGHT_LINE, Op)) or (
                isinstance(e, Call) and not isinstance(e.op, Op)):
            ok[0] = False

    post_order(fn.body, check)
    t = fn.checked_type
    # parameters of other types (an ADT passed through) have no zero adjoint here
    return ok[0] and isinstance(t, FuncType) and isinstance(t.ret_type, TensorType) and \
        all(_of_tensors(a) for a in t.arg_types)


def _of_tensors(t: Type) -> bool:
    """Whether `t` is a tensor type or a tuple of such types."""
    if isinstance(t, TupleType):
        return all(_of_tensors(f) for f in t.fields)
    return isinstance(t, TensorType)


def _typed(e: Expr, t: Type) -> Expr:
    e.set_checked_type(t)
    return e


def _zeros(value: Expr, t: Type) -> Expr:
    if isinstance(t, TupleType):
        return Tuple(tuple(_zeros(TupleGetItem(value, i), f) for i, f in enumerate(t.fields)))
    return ops.zeros_like(value)


def _add(a: Expr, b: Expr, t: Type) -> Expr:
    if isinstance(t, TupleType):
        return Tuple(tuple(_add(TupleGetItem(a, i), TupleGetItem(b, i), f)
                           for i, f in enumerate(t.fields)))
    return ops.add(a, b)


class _Adjoint:
    def __init__(self, fn: Function):
        self.fn = fn
        self.bindings: list[tuple[Var, Expr]] = []  # the forward program, A-normal form
        self.atoms: dict[Expr, Expr] = {}

    def atom(self, e: Expr) -> Expr:
        """A variable or constant standing for `e`, binding it first if needed."""
        known = self.atoms.get(e)
        if known is not None:
            return known
        if isinstance(e, (Var, Constant)):
            out: Expr = e
        elif isinstance(e, Let):
            self.bindings.append((e.var, self.shallow(e.value)))
            self.atoms[e.var] = e.var
            out = self.atom(e.body)
        else:
            v = Var("t")
            v.set_checked_type(e.checked_type)
            self.bindings.append((v, self.shallow(e)))
            out = v
        self.atoms[e] = out
        return out

    def shallow(self, e: Expr) -> Expr:
        """`e` with atoms for children."""
        if isinstance(e, Call):
            return _typed(Call(e.op, tuple(self.atom(a) for a in e.args), e.attrs, span=e.span),
                          e.checked_type)
        if isinstance(e, Tuple):
            return _typed(Tuple(tuple(self.atom(f) for f in e.fields)), e.checked_type)
        if isinstance(e, TupleGetItem):
            return _typed(TupleGetItem(self.atom(e.tuple_value), e.index), e.checked_type)
        if isinstance(e, Let):
            return self.shallow_let(e)
        return e

    def shallow_let(self, e: Let) -> Expr:
        self.bindings.append((e.var, self.shallow(e.value)))
        self.atoms[e.var] = e.var
        return self.shallow(e.body)

    def build(self) -> Function:
        t = self.fn.checked_type
        assert isinstance(t, FuncType)
        result = self.atom(self.fn.body)
        adjoints: dict[Var, Expr] = {}
        backward: list[tuple[Var, Expr]] = []

        def contribute(target: Expr, grad: Expr) -> None:
            if not isinstance(target, Var) or not _differentiable(target.checked_type):
                return
            old = adjoints.get(target)
            adjoints[target] = grad if old is None else _add(old, grad, target.checked_type)

        seed = Var("d_result")
        backward.append((seed, ops.ones_like(result)))
        if isinstance(result, Var):
            adjoints[result] = seed
        for var, value in reversed(self.bindings):
            if var not in adjoints:
                continue
            g = Var(f"d_{var.name_hint}")
            backward.append((g, adjoints.pop(var)))
            if isinstance(value, Call):
                op = value.op
                assert isinstance(op, Op)
                if not op.definition.differentiable:
                    continue
                for arg, d in zip(value.args, input_adjoints(value, g)):
                    contribute(arg, d)
            elif isinstance(value, Tuple):
                for i, f in enumerate(value.fields):
                    contribute(f, TupleGetItem(g, i))
            elif isinstance(value, TupleGetItem):
                tt = value.tuple_value.checked_type
                assert isinstance(tt, TupleType)
                parts = tuple(g if i == value.index
                              else _zeros(TupleGetItem(value.tuple_value, i), f)
                              for i, f in enumerate(tt.fields))
                contribute(value.tuple_value, Tuple(parts))
            elif isinstance(value, (Var, Constant)):
                contribute(value, g)
        grads = tuple(adjoints.get(p) or _zeros(p, p.checked_type) for p in self.fn.params)
        body: Expr = Tuple((result, Tuple(grads)))
        for var, value in reversed(self.bindings + backward):
            body = Let(var, value, body)
        return Function(self.fn.params, body, TupleType((t.ret_type, TupleType(t.arg_types))),
                        span=self.fn.span)


def _differentiable(t: Type) -> bool:
    if isinstance(t, TensorType):
        return is_float(t.dtype)
    return isinstance(t, TupleType)


def first_order_gradient(fn: Function) -> Function:
    """``fn(args) -> (fn(args), gradients)`` for a typed first-order straight-line function."""
    if not supports(fn):
        raise RelayTypeError(f"the first-order gradient needs straight-line code over tensors "
                             f"returning a tensor; {type_to_str(fn.checked_type)} with control "
                             "flow or functions needs relaydsl.transform.gradient", fn.span)
    return _Adjoint(fn).build()


__all__ = ["first_order_gradient", "supports"]
