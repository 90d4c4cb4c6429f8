"""Scalar expressions of the tensor-expression language (TVM's ``tir.PrimExpr``, simplified).

A compute rule describes one element of its output as a scalar expression over
index variables: constants, variables, arithmetic, comparisons, logic,
``select``, ``cast``, math intrinsics, reads of other tensors and reductions.
Nodes are small immutable dataclasses with identity equality; each has a
``dtype`` and checks its operands' dtypes when built (no implicit promotion, as
in Relay: a Python number takes the dtype of the expression it meets).

Semantics follow the Relay ops: ``/`` is true division for floats and floor
division for integers, ``//`` and ``%`` are floor division and floor modulo
(Python's), casts from float to int truncate toward zero.

>>> from relaydsl.te.expr import Var, select, exp
>>> i = Var("i")
>>> e = select(i < 3, (i * 2 + 1) % 4, 0)
>>> e.dtype, str(e)
('int32', 'select((i < 3), (((i * 2) + 1) % 4), 0)')
>>> x = Var("x", "float32")
>>> str(exp(x) / 2), (x > 0.5).dtype
('(exp(x) / 2.0)', 'bool')
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Iterator, Union, final

from relaydsl.errors import IRError
from relaydsl.ir.node import conforms
from relaydsl.ir.types import DTYPES
from relaydsl.te.intrinsics import Intrinsic, lookup as lookup_intrinsic

if TYPE_CHECKING:
    from relaydsl.te.tensor import Tensor

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")
INDEX_DTYPE = "int32"

ExprLike = Union["PrimExpr", int, float, bool]


def _check_dtype(dtype: str, where: str) -> None:
    if dtype not in DTYPES:
        raise IRError(f"{where}: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")


class PrimExpr:
    """Base of all scalar expressions; Python operators build nodes.

    ``==`` and ``!=`` keep Python's identity meaning (nodes are dict keys); use
    ``equal`` / ``not_equal`` to build comparisons.
    """

    __slots__ = ()
    dtype: str

    def __add__(self, other: ExprLike) -> PrimExpr:
        return Add(self, const_like(other, self))

    def __radd__(self, other: ExprLike) -> PrimExpr:
        return Add(const_like(other, self), self)

    def __sub__(self, other: ExprLike) -> PrimExpr:
        return Sub(self, const_like(other, self))

    def __rsub__(self, other: ExprLike) -> PrimExpr:
        return Sub(const_like(other, self), self)

    def __mul__(self, other: ExprLike) -> PrimExpr:
        return Mul(self, const_like(other, self))

    def __rmul__(self, other: ExprLike) -> PrimExpr:
        return Mul(const_like(other, self), self)

    def __truediv__(self, other: ExprLike) -> PrimExpr:
        return Div(self, const_like(other, self))

    def __rtruediv__(self, other: ExprLike) -> PrimExpr:
        return Div(const_like(other, self), self)

    def __floordiv__(self, other: ExprLike) -> PrimExpr:
        return FloorDiv(self, const_like(other, self))

    def __rfloordiv__(self, other: ExprLike) -> PrimExpr:
        return FloorDiv(const_like(other, self), self)

    def __mod__(self, other: ExprLike) -> PrimExpr:
        return FloorMod(self, const_like(other, self))

    def __rmod__(self, other: ExprLike) -> PrimExpr:
        return FloorMod(const_like(other, self), self)

    def __neg__(self) -> PrimExpr:
        return Sub(const_like(0, self), self)

    def __lt__(self, other: ExprLike) -> PrimExpr:
        return LT(self, const_like(other, self))

    def __le__(self, other: ExprLike) -> PrimExpr:
        return LE(self, const_like(other, self))

    def __gt__(self, other: ExprLike) -> PrimExpr:
        return GT(self, const_like(other, self))

    def __ge__(self, other: ExprLike) -> PrimExpr:
        return GE(self, const_like(other, self))

    def __and__(self, other: ExprLike) -> PrimExpr:
        return And(self, const_like(other, self))

    def __rand__(self, other: ExprLike) -> PrimExpr:
        return And(const_like(other, self), self)

    def __or__(self, other: ExprLike) -> PrimExpr:
        return Or(self, const_like(other, self))

    def __ror__(self, other: ExprLike) -> PrimExpr:
        return Or(const_like(other, self), self)

    def __invert__(self) -> PrimExpr:
        return Not(self)

    def __bool__(self) -> bool:
        raise IRError(
            f"a te expression ({self}) has no Python truth value: use te.select(c, a, b) for "
            "if-then-else, & | ~ for and/or/not, and write a < b < c as (a < b) & (b < c)"
        )

    def __str__(self) -> str:
        return to_text(self)


# ---- leaves ---------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True, eq=False)
class IntImm(PrimExpr):
    """An integer (or bool) constant."""

    value: int
    dtype: str = INDEX_DTYPE

    def __post_init__(self) -> None:
        if self.dtype not in INT_DTYPES and self.dtype != "bool":
            raise IRError(f"IntImm: dtype must be an integer dtype or bool, got {self.dtype!r}")
        if isinstance(self.value, bool) or not conforms(self.value, int):
            raise IRError(f"IntImm: value must be an int, got {self.value!r}")


@final
@dataclass(frozen=True, slots=True, eq=False)
class FloatImm(PrimExpr):
    """A floating-point constant."""

    value: float
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.dtype not in FLOAT_DTYPES:
            raise IRError(f"FloatImm: dtype must be a float dtype, got {self.dtype!r}")
        object.__setattr__(self, "value", float(self.value))


@final
@dataclass(frozen=True, slots=True, eq=False)
class Var(PrimExpr):
    """A free scalar variable; the name is for printing only (identity is equality)."""

    name: str
    dtype: str = INDEX_DTYPE

    def __post_init__(self) -> None:
        _check_dtype(self.dtype, f"Var {self.name}")


@final
@dataclass(frozen=True, slots=True, eq=False)
class IterVar(PrimExpr):
    """An index ranging over ``0 .. extent-1``: an output axis of a compute, or a reduce axis.

    An output axis may be empty (extent 0: an empty tensor, as an empty split piece);
    a reduce axis may not (a reduction starts from its first value).
    """

    name: str
    extent: int
    is_reduce: bool = False
    dtype: str = field(default=INDEX_DTYPE, init=False)

    def __post_init__(self) -> None:
        least = 1 if self.is_reduce else 0
        if (isinstance(self.extent, bool) or not conforms(self.extent, int)
                or self.extent < least):
            what = "a positive int" if self.is_reduce else "a non-negative int"
            raise IRError(f"axis {self.name}: extent must be {what}, got {self.extent!r}")


# ---- arithmetic, comparison, logic --------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class BinaryOp(PrimExpr):
    """Base of two-operand nodes; ``symbol`` prints it and ``kind`` fixes its dtype rule."""

    a: PrimExpr
    b: PrimExpr
    dtype: str = field(init=False)
    symbol: ClassVar[str] = "?"
    kind: ClassVar[str] = "arith"  # arith: numeric -> same; compare: any -> bool; logic: bool

    def __post_init__(self) -> None:
        name = type(self).__name__
        for operand in (self.a, self.b):
            if not conforms(operand, PrimExpr):
                raise IRError(f"{name}: operand {operand!r} is not a te expression")
        if self.a.dtype != self.b.dtype:
            raise IRError(
                f"{name}: operand dtypes differ: {self.a} is {self.a.dtype}, "
                f"{self.b} is {self.b.dtype}; insert a te.cast"
            )
        dtype = self.a.dtype
        if self.kind == "arith" and dtype == "bool":
            raise IRError(f"{name}: arithmetic on bool operands {self.a} and {self.b}")
        if self.kind == "logic" and dtype != "bool":
            raise IRError(f"{name}: logical operands must be bool, got {dtype} ({self.a})")
        object.__setattr__(self, "dtype", "bool" if self.kind == "compare" else dtype)


def _binary(name: str, symbol: str, kind: str, doc: str) -> type[BinaryOp]:
    cls = type(name, (BinaryOp,), {"__slots__": (), "__doc__": doc, "symbol": symbol,
                                    "kind": kind})
    return final(cls)


Add = _binary("Add", "+", "arith", "a + b")
Sub = _binary("Sub", "-", "arith", "a - b")
Mul = _binary("Mul", "*", "arith", "a * b")
Div = _binary("Div", "/", "arith", "a / b for floats; floor(a / b) for integers")
FloorDiv = _binary("FloorDiv", "//", "arith", "floor(a / b)")
FloorMod = _binary("FloorMod", "%", "arith", "a - floor(a / b) * b (sign of b, as Python)")
Min = _binary("Min", "min", "arith", "min(a, b)")
Max = _binary("Max", "max", "arith", "max(a, b)")
EQ = _binary("EQ", "==", "compare", "a == b")
NE = _binary("NE", "!=", "compare", "a != b")
LT = _binary("LT", "<", "compare", "a < b")
LE = _binary("LE", "<=", "compare", "a <= b")
GT = _binary("GT", ">", "compare", "a > b")
GE = _binary("GE", ">=", "compare", "a >= b")
And = _binary("And", "&", "logic", "a and b")
Or = _binary("Or", "|", "logic", "a or b")


@final
@dataclass(frozen=True, slots=True, eq=False)
class Not(PrimExpr):
    """Logical not of a bool expression."""

    a: PrimExpr
    dtype: str = field(default="bool", init=False)

    def __post_init__(self) -> None:
        if self.a.dtype != "bool":
            raise IRError(f"Not: operand must be bool, got {self.a.dtype} ({self.a})")


@final
@dataclass(frozen=True, slots=True, eq=False)
class Select(PrimExpr):
    """``true_value if condition else false_value``; both branches have one dtype."""

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: str = field(init=False)

    def __post_init__(self) -> None:
        if self.condition.dtype != "bool":
            raise IRError(f"Select: condition {self.condition} must be bool, "
                          f"got {self.condition.dtype}")
        if self.true_value.dtype != self.false_value.dtype:
            raise IRError(
                f"Select: branch dtypes differ: {self.true_value} is {self.true_value.dtype}, "
                f"{self.false_value} is {self.false_value.dtype}"
            )
        object.__setattr__(self, "dtype", self.true_value.dtype)


@final
@dataclass(frozen=True, slots=True, eq=False)
class Cast(PrimExpr):
    """``value`` converted to ``dtype`` (float to int truncates toward zero)."""

    dtype: str
    value: PrimExpr

    def __post_init__(self) -> None:
        _check_dtype(self.dtype, "Cast")


@final
@dataclass(frozen=True, slots=True, eq=False)
class Call(PrimExpr):
    """The math intrinsic ``name`` (relaydsl/te/intrinsics.py) applied to operands of one dtype."""

    name: str
    args: tuple[PrimExpr, ...]
    intrinsic: Intrinsic = field(init=False, repr=False)
    dtype: str = field(init=False)

    def __post_init__(self) -> None:
        intrinsic = lookup_intrinsic(self.name)
        object.__setattr__(self, "intrinsic", intrinsic)
        object.__setattr__(self, "dtype", intrinsic.result_dtype(self.args))


@final
@dataclass(frozen=True, slots=True, eq=False)
class TensorRead(PrimExpr):
    """``tensor[indices]``: one element of a placeholder or computed tensor."""

    tensor: Tensor
    indices: tuple[PrimExpr, ...]
    dtype: str = field(init=False)

    def __post_init__(self) -> None:
        t = self.tensor
        if len(self.indices) != len(t.shape):
            raise IRError(f"{t.name} has {len(t.shape)} dimension(s), indexed with "
                          f"{len(self.indices)} index(es)")
        for i in self.indices:
            if i.dtype not in INT_DTYPES:
                raise IRError(f"{t.name}: index {i} must be an integer, got {i.dtype}")
        object.__setattr__(self, "dtype", t.dtype)


@final
@dataclass(frozen=True, slots=True, eq=False)
class Reduce(PrimExpr):
    """A reduction of ``source`` over the reduce ``axes``.

    The result is ``init`` folded with every ``source`` value (axes in row-major
    order) by the combiner: ``combined`` is an expression in ``lhs`` (the
    accumulator) and ``rhs`` (the next value), e.g. ``lhs + rhs`` for a sum.
    """

    name: str
    source: PrimExpr
    axes: tuple[IterVar, ...]
    init: PrimExpr
    lhs: Var
    rhs: Var
    combined: PrimExpr
    dtype: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.axes:
            raise IRError(f"{self.name}: a reduction needs at least one reduce axis")
        for ax in self.axes:
            if not conforms(ax, IterVar) or not ax.is_reduce:
                raise IRError(f"{self.name}: {ax} is not a reduce axis (make one with "
                              "te.reduce_axis)")
        dtypes = {self.source.dtype, self.init.dtype, self.lhs.dtype, self.rhs.dtype,
                  self.combined.dtype}
        if len(dtypes) != 1:
            raise IRError(f"{self.name}: source, init and combiner dtypes differ: {sorted(dtypes)}")
        object.__setattr__(self, "dtype", self.source.dtype)


# ---- builders ----------------------------------------------------------------------


def const(value: int | float | bool, dtype: str | None = None) -> PrimExpr:
    """A constant; the default dtype is int32 for ints, float32 for floats, bool for bools."""
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else INDEX_DTYPE if isinstance(
            value, int) else "float32"
    _check_dtype(dtype, "const")
    if dtype in FLOAT_DTYPES:
        return FloatImm(float(value), dtype)
    if isinstance(value, float):
        if not value.is_integer():
            raise IRError(f"constant {value} does not fit dtype {dtype}; write a te.cast")
        value = int(value)
    return IntImm(int(value), dtype)


def const_like(value: ExprLike, like: PrimExpr) -> PrimExpr:
    """``value`` as an expression: te expressions pass through, numbers take ``like``'s dtype."""
    if isinstance(value, PrimExpr):
        return value
    if conforms(value, (bool, int, float)):
        if isinstance(value, bool) != (like.dtype == "bool"):
            raise IRError(f"cannot combine {value!r} with {like} of dtype {like.dtype}")
        return const(value, like.dtype)
    raise IRError(f"{value!r} ({type(value).__name__}) is not a te expression or a number")


def as_expr(value: ExprLike) -> PrimExpr:
    """A te expression, or a Python number as a constant of its default dtype."""
    return value if isinstance(value, PrimExpr) else const(value)


def _pair(a: ExprLike, b: ExprLike) -> tuple[PrimExpr, PrimExpr]:
    if isinstance(a, PrimExpr):
        return a, const_like(b, a)
    if isinstance(b, PrimExpr):
        return const_like(a, b), b
    return const(a), const(b)


def select(condition: ExprLike, true_value: ExprLike, false_value: ExprLike) -> PrimExpr:
    """``true_value if condition else false_value``; a number takes the other branch's dtype."""
    t, f = _pair(true_value, false_value)
    return Select(as_expr(condition), t, f)


def cast(dtype: str, value: ExprLike) -> PrimExpr:
    """``value`` converted to ``dtype``."""
    return Cast(dtype, as_expr(value))


def equal(a: ExprLike, b: ExprLike) -> PrimExpr:
    return EQ(*_pair(a, b))


def not_equal(a: ExprLike, b: ExprLike) -> PrimExpr:
    return NE(*_pair(a, b))


def minimum(a: ExprLike, b: ExprLike) -> PrimExpr:
    return Min(*_pair(a, b))


def maximum(a: ExprLike, b: ExprLike) -> PrimExpr:
    return Max(*_pair(a, b))


def power(a: ExprLike, b: ExprLike) -> PrimExpr:
    return Call("pow", _pair(a, b))


def call(name: str, *args: ExprLike) -> PrimExpr:
    """The intrinsic ``name`` applied to ``args`` (numbers take the first expression's dtype)."""
    like = next((a for a in args if isinstance(a, PrimExpr)), None)
    exprs = tuple(as_expr(a) if like is None else const_like(a, like) for a in args)
    return Call(name, exprs)


def exp(x: ExprLike) -> PrimExpr:
    return call("exp", x)


def log(x: ExprLike) -> PrimExpr:
    return call("log", x)


def sqrt(x: ExprLike) -> PrimExpr:
    return call("sqrt", x)


def tanh(x: ExprLike) -> PrimExpr:
    return call("tanh", x)


def sigmoid(x: ExprLike) -> PrimExpr:
    return call("sigmoid", x)


def abs_(x: ExprLike) -> PrimExpr:  # trailing underscore: not the builtin
    return call("abs", x)


# ---- traversal and printing ------------------------------------------------------------


def children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    """The direct operands of ``e``, in evaluation order."""
    match e:
        case BinaryOp(a=a, b=b):
            return (a, b)
        case Not(a=a) | Cast(value=a):
            return (a,)
        case Select(condition=c, true_value=t, false_value=f):
            return (c, t, f)
        case Call(args=args) | TensorRead(indices=args):
            return args
        case Reduce(source=s, init=i):
            return (s, i)
        case IntImm() | FloatImm() | Var() | IterVar():
            return ()
        case _:
            raise IRError(f"not a te expression: {e!r}")


def post_order(e: PrimExpr) -> Iterator[PrimExpr]:
    """Every node reachable from ``e`` once, operands before users."""
    seen: set[PrimExpr] = set()
    stack: list[tuple[PrimExpr, bool]] = [(e, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
        elif node not in seen:
            seen.add(node)
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(children(node)))


def to_text(e: PrimExpr) -> str:
    """Infix text of ``e``, fully parenthesised."""
    match e:
        case IntImm(value=v, dtype=d):
            return str(bool(v)) if d == "bool" else str(v)
        case FloatImm(value=v):
            return repr(v)
        case Var(name=n) | IterVar(name=n):
            return n
        case Min() | Max():
            return f"{e.symbol}({to_text(e.a)}, {to_text(e.b)})"
        case BinaryOp(a=a, b=b):
            return f"({to_text(a)} {e.symbol} {to_text(b)})"
        case Not(a=a):
            return f"~{to_text(a)}"
        case Select(condition=c, true_value=t, false_value=f):
            return f"select({to_text(c)}, {to_text(t)}, {to_text(f)})"
        case Cast(dtype=d, value=v):
            return f"{d}({to_text(v)})"
        case Call(name=n, args=args):
            return f"{n}({', '.join(to_text(a) for a in args)})"
        case TensorRead(tensor=t, indices=idx):
            return f"{t.name}[{', '.join(to_text(i) for i in idx)}]"
        case Reduce(name=n, source=s, axes=axes):
            return f"{n}({to_text(s)}, axis=[{', '.join(a.name for a in axes)}])"
        case _:
            raise IRError(f"not a te expression: {e!r}")
