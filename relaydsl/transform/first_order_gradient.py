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
from relaydsl.ir.visitor import ExprFunctor, ExprFunctorWithArgs, let_chain, post_order
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


class _Forward(ExprFunctor[Expr]):
    """The forward program in A-normal form: `bindings` in order, and each expression's atom
    (a variable or constant standing for it) as its result."""

    def __init__(self) -> None:
        super().__init__()
        self.bindings: list[tuple[Var, Expr]] = []

    def visit_var(self, var: Var) -> Expr:
        return var

    def visit_constant(self, c: Constant) -> Expr:
        return c

    def visit_call(self, call: Call) -> Expr:
        return self.temporary(call)

    def visit_tuple(self, t: Tuple) -> Expr:
        return self.temporary(t)

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        return self.temporary(t)

    def visit_let(self, let: Let) -> Expr:
        chain, body = let_chain(let)
        for e in chain:
            self.bind(e.var, e.value)
        return self.visit(body)

    def temporary(self, e: Expr) -> Var:
        v = Var("t")
        v.set_checked_type(e.checked_type)
        self.bind(v, e)
        return v

    def bind(self, var: Var, value: Expr) -> None:
        """Binds `var` to `value` with atoms for its operands (a let chain's bindings first)."""
        while isinstance(value, Let):
            self.bind(value.var, value.value)
            value = value.body
        if isinstance(value, Call):
            value = _typed(Call(value.op, tuple(self.visit(a) for a in value.args), value.attrs,
                                span=value.span), value.checked_type)
        elif isinstance(value, Tuple):
            value = _typed(Tuple(tuple(self.visit(f) for f in value.fields)), value.checked_type)
        elif isinstance(value, TupleGetItem):
            value = _typed(TupleGetItem(self.visit(value.tuple_value), value.index),
                           value.checked_type)
        self.bindings.append((var, value))


class _Backward(ExprFunctorWithArgs[[Var], None]):
    """The backward step of one forward binding: ``visit(value, g)`` adds what the adjoint
    `g` of the binding's variable contributes to the adjoints of `value`'s operands."""

    def __init__(self) -> None:
        self.adjoints: dict[Var, Expr] = {}

    def contribute(self, target: Expr, grad: Expr) -> None:
        if not isinstance(target, Var) or not _differentiable(target.checked_type):
            return
        old = self.adjoints.get(target)
        self.adjoints[target] = grad if old is None else _add(old, grad, target.checked_type)

    def visit_call(self, call: Call, g: Var) -> None:
        op = call.op
        assert isinstance(op, Op)
        if op.definition.differentiable:
            for arg, d in zip(call.args, input_adjoints(call, g)):
                self.contribute(arg, d)

    def visit_tuple(self, t: Tuple, g: Var) -> None:
        for i, f in enumerate(t.fields):
            self.contribute(f, TupleGetItem(g, i))

    def visit_tuple_getitem(self, t: TupleGetItem, g: Var) -> None:
        tt = t.tuple_value.checked_type
        assert isinstance(tt, TupleType)
        parts = tuple(g if i == t.index else _zeros(TupleGetItem(t.tuple_value, i), f)
                      for i, f in enumerate(tt.fields))
        self.contribute(t.tuple_value, Tuple(parts))

    def visit_var(self, var: Var, g: Var) -> None:
        self.contribute(var, g)

    def visit_constant(self, c: Constant, g: Var) -> None:
        pass  # a constant has no adjoint


def _adjoint_program(fn: Function) -> Function:
    t = fn.checked_type
    assert isinstance(t, FuncType)
    forward = _Forward()
    result = forward.visit(fn.body)
    backward = _Backward()
    seed = Var("d_result")
    steps: list[tuple[Var, Expr]] = [(seed, ops.ones_like(result))]
    if isinstance(result, Var):
        backward.adjoints[result] = seed
    for var, value in reversed(forward.bindings):
        if var in backward.adjoints:
            g = Var(f"d_{var.name_hint}")
            steps.append((g, backward.adjoints.pop(var)))
            backward.visit(value, g)
    grads = tuple(backward.adjoints.get(p) or _zeros(p, p.checked_type) for p in fn.params)
    body: Expr = Tuple((result, Tuple(grads)))
    for var, value in reversed(forward.bindings + steps):
        body = Let(var, value, body)
    return Function(fn.params, body, TupleType((t.ret_type, TupleType(t.arg_types))),
                    span=fn.span)


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
    return _adjoint_program(fn)


__all__ = ["first_order_gradient", "supports"]
