"""Random well-typed first-order programs, as a hypothesis strategy.

A program is a Function over 1-3 tensor parameters whose body is a chain of
``let`` bindings, each applying a random op (unary math, broadcasting binary
arithmetic, comparisons with ``where``, reductions, shape ops, dropout in training or
inference mode, ``if`` on a reduced comparison, tuples and projections) to earlier values
of compatible shapes. The shapes are tracked while generating, so every program
type-checks by construction; values are kept bounded (``tanh``/``sigmoid``
and safe denominators) so results are finite and comparable. Optionally some
``let``s annotate their variable: exactly the value's type, or with some
dimensions ``Any`` (known at run time only).

>>> from hypothesis import given
>>> @given(random_programs())
... def check(program_and_inputs):
...     fn, inputs = program_and_inputs
...     assert len(fn.params) == len(inputs)
>>> check()

``through_data_and_closures(fn)`` wraps a program so that its value passes through the rest
of the language -- a closure held in a reference, a tuple in a ``relay.List``, a recursive
local function matching on it -- unchanged, so the JAX oracle of `fn` still applies.
``in_a_loop(fn, turns)`` runs a program's result through a dense layer in a loop
whose count is a parameter, and gives the loop unrolled for the oracle.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from relaydsl.ir.adt import PatternConstructor, PatternVar, PatternWildcard
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, If, Let, Match, RefCreate, RefRead, Tuple,
    TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import AnyDim, Dim, Kind, TensorType, TupleType, Type, TypeVar
from relaydsl.op.registry import ops
from relaydsl.typing import infer_types


def _exp_of_tanh(x: Expr) -> Expr:
    return ops.exp(ops.tanh(x))


def _sqrt_of_abs(x: Expr) -> Expr:
    return ops.sqrt(ops.abs(x))


# the unary steps: bounded where the op alone is not (exp of tanh; sqrt of abs)
UNARY: tuple[Callable[[Expr], Expr], ...] = (
    ops.negative, ops.tanh, ops.sigmoid, ops.abs, ops.relu, _exp_of_tanh, _sqrt_of_abs,
    ops.floor, ops.sign, ops.sin, ops.cos, ops.atan, ops.erf, ops.trunc)
REDUCE = (ops.sum, ops.mean, ops.max, ops.min, ops.variance)


@dataclass
class _Value:
    expr: Expr
    shape: tuple[Dim, ...]  # as typed: sizes, and shape parameters where symbolic
    # The type an annotated let gave it, or None; for a tuple (whose `shape` is ()), its type.
    declared: Type | None = None


def _broadcast(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """The broadcast of two shapes as the type checker sees it, or None if they do not.

    Two shape parameters agree only if they are the same one (whatever sizes they stand for
    in the inputs), and a shape parameter agrees with no size but 1.
    """
    out: list[Dim] = []
    for x, y in zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x == 1 or x == y:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            return None
    return tuple(reversed(out))


class _Builder:
    def __init__(self, rng: np.random.Generator, dtype: str, control_flow: bool = True,
                 annotate: bool = False):
        self.rng = rng
        self.dtype = dtype
        self.annotate = annotate
        self.kinds = ["unary", "binary", "binary", "reduce", "shape", "where", "tuple",
                      "dropout"] + (["if"] if control_flow else [])
        self.values: list[_Value] = []
        self.bindings: list[tuple[Var, Expr]] = []
        self.binaries: tuple[Callable[[Expr, Expr], Expr], ...] = (
            ops.add, ops.subtract, ops.multiply, ops.maximum, ops.minimum, self.safe_divide)

    def pick(self) -> _Value:
        return self.values[int(self.rng.integers(len(self.values)))]

    def bind(self, expr: Expr, shape: tuple[Dim, ...], fields: tuple[_Value, ...] = (),
             ascribe: Type | None = None) -> _Value:
        """``let v = expr``, v of `shape` (or the tuple of `fields`), annotated `ascribe` if
        given. With `annotate`, half the other lets annotate v: a graph normal form or CSE that
        drops the annotation changes the types later operators see, and ``Any`` dimensions are
        checked and run dynamically."""
        declared = ascribe
        if declared is None and self.annotate and self.rng.integers(2):
            declared = TupleType(tuple(self.declared_type(f) for f in fields)) if fields else \
                self.annotation(shape)
        var = Var(f"v{len(self.bindings)}", declared)
        self.bindings.append((var, expr))
        value = _Value(var, shape, declared)
        self.values.append(value)
        return value

    def annotation(self, shape: tuple[Dim, ...]) -> TensorType:
        """The type of a value of `shape`, each dimension ``Any`` with probability 1/3."""
        return TensorType(tuple(AnyDim() if self.rng.integers(3) == 0 else d for d in shape),
                          self.dtype)

    def declared_type(self, value: _Value) -> Type:
        """The type `value` is known by: its annotation, or its shape's."""
        return value.declared or TensorType(value.shape, self.dtype)

    def const(self, value: float) -> Constant:
        return Constant(np.array(value, dtype=self.dtype))

    def safe_divide(self, a: Expr, b: Expr) -> Expr:
        """a / (|b| + 1): never divides by zero."""
        return ops.divide(a, ops.add(ops.abs(b), self.const(1.0)))

    def step(self) -> None:
        kind = self.rng.choice(self.kinds)
        x = self.pick()
        if kind == "unary":
            self.bind(self.rng.choice(UNARY)(x.expr), x.shape)
        elif kind == "binary":
            partners = [v for v in self.values if _broadcast(v.shape, x.shape) is not None]
            y = partners[int(self.rng.integers(len(partners)))]
            shape = _broadcast(x.shape, y.shape)
            assert shape is not None
            self.bind(self.rng.choice(self.binaries)(x.expr, y.expr), shape)
        elif kind == "reduce" and x.shape:
            axis = int(self.rng.integers(len(x.shape)))
            keepdims = bool(self.rng.integers(2))
            shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape)) if keepdims else \
                x.shape[:axis] + x.shape[axis + 1:]
            reduction = self.rng.choice(REDUCE)
            self.bind(reduction(x.expr, axis=(axis,), keepdims=keepdims), shape)
        elif kind == "shape" and len(x.shape) >= 2:
            sizes = [d for d in x.shape if isinstance(d, int)]
            if self.rng.integers(2) or len(sizes) < len(x.shape):  # flatten static shapes only
                self.bind(ops.transpose(x.expr), tuple(reversed(x.shape)))
            else:
                self.bind(ops.reshape(x.expr, newshape=(-1,)), (int(np.prod(sizes)),))
        elif kind == "where":
            partners = [v for v in self.values if v.shape == x.shape]  # same dims, same vars
            y = partners[int(self.rng.integers(len(partners)))]
            self.bind(ops.where(ops.greater(x.expr, y.expr), x.expr, y.expr), x.shape)
        elif kind == "dropout":
            # a mask hashed from a constant key (training), or the identity (inference)
            key = Constant(self.rng.integers(0, 2**40, size=2, dtype=np.int64))
            self.bind(ops.dropout(x.expr, key, rate=float(self.rng.choice([0.25, 0.5])),
                                  training=bool(self.rng.integers(2))), x.shape)
        elif kind == "if":
            # The condition reads a parameter exactly (max, not a sum of computed values), so
            # rounding differences between backends cannot flip the branch.
            cond = ops.greater(ops.max(self.values[0].expr), self.const(0.0))
            self.bind(If(cond, ops.tanh(x.expr), ops.negative(x.expr)), x.shape)
        elif kind == "tuple":
            y = self.pick()
            pair = self.bind(Tuple([x.expr, y.expr]), (), fields=(x, y))
            self.values.remove(pair)  # a tuple is not a tensor operand
            index = int(self.rng.integers(2))
            self.bind(TupleGetItem(pair.expr, index), (x, y)[index].shape)
        else:
            self.bind(ops.sigmoid(x.expr), x.shape)

    def body(self, tuple_result: bool = True) -> Expr:
        result: Expr = self.values[-1].expr
        if tuple_result and self.rng.integers(4) == 0 and len(self.values) >= 2:
            result = Tuple([self.values[-1].expr, self.values[-2].expr])
        return _let_all(self.bindings, result)


@st.composite
def random_programs(draw, max_ops: int = 10, control_flow: bool = True, scalar_result: bool = False,
                    symbolic: bool = False, annotate: bool = False
                    ) -> tuple[Function, list[np.ndarray]]:
    """A (Function, inputs) pair: a random well-typed first-order program and arguments for it.

    `control_flow=False` leaves out `if`; `scalar_result` sums the result to a scalar (and
    never returns a tuple), as differentiation wants. With `symbolic`, some axes of the
    parameters' types are shape parameters (``Tensor[(n0, 3)]``, one per axis, shared by
    the parameters having that axis), so the program is shape-polymorphic: bind it to a
    global, and the inputs give one instance. With `annotate`, about half the lets annotate
    their variable with the value's type, some of its dimensions replaced by ``Any``, and a
    third of the parameters are typed only by a first let ascribing their type.
    """
    seed = draw(st.integers(0, 2**32 - 1))
    n_ops = draw(st.integers(1, max_ops))
    rng = np.random.default_rng(seed)
    dtype = "float64" if rng.integers(5) == 0 else "float32"
    rank = int(rng.integers(0, 4))
    base = tuple(int(d) for d in rng.integers(1, 5, size=rank))
    # the shape parameter standing for each axis of the base, where it is symbolic
    dims: list[Dim] = [TypeVar(f"n{axis}", Kind.Shape) if symbolic and rng.integers(2) else d
                       for axis, d in enumerate(base)]
    builder = _Builder(rng, dtype, control_flow, annotate)
    params, inputs = [], []
    for i in range(int(rng.integers(1, 4))):
        # Each parameter's shape broadcasts with the base: a suffix of it, some dims set to 1.
        start = int(rng.integers(0, rank + 1)) if i else 0
        ones = [bool(rng.integers(4) == 0) for _ in base[start:]]
        shape = tuple(1 if one else d for one, d in zip(ones, base[start:]))
        annotation = tuple(1 if one else d for one, d in zip(ones, dims[start:]))
        inputs.append(rng.uniform(-2, 2, size=shape).astype(dtype))
        if annotate and rng.integers(3) == 0:
            # Typed only by a let's annotation, as a model's weight is in a loss calling it.
            var = Var(f"p{i}")
            params.append(var)
            builder.bind(var, annotation, ascribe=TensorType(annotation, dtype))
            continue
        var = Var(f"p{i}", TensorType(annotation, dtype))
        params.append(var)
        builder.values.append(_Value(var, annotation))
    for _ in range(n_ops):
        builder.step()
    if scalar_result:
        last = builder.values[-1]
        builder.bind(ops.sum(last.expr), ())
    body = builder.body(tuple_result=not scalar_result)
    return Function(params, body), inputs


def _let_all(lets: list[tuple[Var, Expr]], body: Expr) -> Expr:
    for var, value in reversed(lets):
        body = Let(var, value, body)
    return body


def through_data_and_closures(fn: Function, mod: IRModule | None = None) -> Function:
    """`fn`, computing the same value through a closure, a reference, a data type, ``match``
    and recursion::

        fn (%p0, %p1) {
          let %f = fn (%a0, %a1) { <fn's body on %a0, %a1> };
          let %cell = ref(%f);
          let %go = fn (%xs) {
            match? (%xs) { Cons(%t, Nil) => (!%cell)(%t.0, %t.1); Cons(_, %rest) => %go(%rest) }
          };
          %go(Cons((%p0, %p1), Cons((%p0, %p1), Nil)))
        }

    `mod` supplies the prelude's ``Cons`` and ``Nil`` (a fresh module's by default).
    """
    mod = mod if mod is not None else IRModule()
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    inner = Function(fn.params, fn.body)
    params = tuple(Var(p.name_hint, p.type_annotation) for p in fn.params)
    f, cell, go, xs = Var("f"), Var("cell"), Var("go"), Var("xs")
    t, rest = Var("t"), Var("rest")
    call = Call(RefRead(cell), tuple(TupleGetItem(t, i) for i in range(len(params))))
    walk = Match(xs, (
        Clause(PatternConstructor(cons, (PatternVar(t), PatternConstructor(nil, ()))), call),
        Clause(PatternConstructor(cons, (PatternWildcard(), PatternVar(rest))),
               Call(go, (rest,))),
    ), complete=False)
    args = Tuple(params)
    data = Call(cons, (args, Call(cons, (args, Call(nil, ())))))
    body = Let(f, inner, Let(cell, RefCreate(f), Let(go, Function((xs,), walk),
                                                    Call(go, (data,)))))
    return Function(params, body)


def repeat(layer: Callable[[Expr], Expr], x: Expr, count: Var) -> Expr:
    """`layer` applied `count` (an int32 scalar) times to `x`, as a loop of the language::

        let %loop = fn (%i: int32, %h) {
          if (%i < %count) { %loop(%i + 1, layer(%h)) } else { %h }
        };
        %loop(0, x)
    """
    loop, i, h = Var("loop"), Var("i", TensorType((), "int32")), Var("h")
    one, zero = Constant(np.array(1, np.int32)), Constant(np.array(0, np.int32))
    body = If(ops.less(i, count), Call(loop, (ops.add(i, one), layer(h))), h)
    return Let(loop, Function((i, h), body), Call(loop, (zero, x)))


def in_a_loop(fn: Function, turns: int, seed: int = 0) -> tuple[Function, Function]:
    """(looped, reference): `fn` whose (first) result then goes through
    ``tanh(dense(h, w))`` -- the result flattened to one row, `w` a random square constant
    over its elements -- as many times as a new last parameter ``%count`` says, in a loop
    (``repeat``); and `fn` with that loop unrolled `turns` times, first order, for the
    oracle."""
    typed = infer_types(IRModule.from_expr(fn))["main"]
    result = typed.body.checked_type
    first = result.fields[0] if isinstance(result, TupleType) else result
    assert isinstance(first, TensorType)
    shape = tuple(int(d) for d in first.shape)  # type: ignore[arg-type]
    size = int(np.prod(shape))
    weight = np.random.default_rng(seed).uniform(-1, 1, (size, size)) / np.sqrt(size)
    w = Constant(weight.astype(first.concrete_dtype()))

    def layer(h: Expr) -> Expr:
        row = ops.dense(ops.reshape(h, newshape=(1, -1)), w)
        return ops.reshape(ops.tanh(row), newshape=shape)

    def around(body: Expr, turn: Callable[[Expr], Expr]) -> Expr:
        y = Var("y")
        if isinstance(result, TupleType):
            out: Expr = Tuple([turn(TupleGetItem(y, 0)),
                               *(TupleGetItem(y, k) for k in range(1, len(result.fields)))])
        else:
            out = turn(y)
        return Let(y, body, out)

    def unrolled(h: Expr) -> Expr:
        for _ in range(turns):
            h = layer(h)
        return h

    count = Var("count", TensorType((), "int32"))
    looped = Function([*fn.params, count], around(fn.body, lambda h: repeat(layer, h, count)))
    return looped, Function(fn.params, around(fn.body, unrolled))
