"""The math intrinsics of te (``exp``, ``pow``, ``left_shift``, ...): one object, one block each.

An ``Intrinsic`` holds every facet of one intrinsic that the core reads: how many
operands it takes, which dtypes they may have (all operands share one dtype, and
the result has it too), its NumPy implementation (the reference evaluator's, so
the executable definition) and its cost, in scalar operations, that the llvm
scheduler weighs when it decides whether to recompute an expression. ``te.Call``
names an intrinsic and checks its operands through it.

The LLVM lowering is the one facet written elsewhere, in
backend/llvm/intrinsics.py, because the core does not import llvmlite; it is keyed
by these objects, and a test fails for an intrinsic that has none.

Adding an intrinsic is one block here, its lowering there, and, if users call it
often, a helper next to ``te.exp`` in expr.py.

>>> import numpy as np
>>> sigmoid = INTRINSICS["sigmoid"]
>>> sigmoid.arity, sigmoid.operands, sigmoid.cost
(1, 'float', 18)
>>> sigmoid.numpy(np.array([0.0, 2.0], "float32"))
array([0.5      , 0.8807971], dtype=float32)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any as AnyValue, Callable, Literal, Sequence, final

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.types import is_float, is_int

if TYPE_CHECKING:
    from relaydsl.te.expr import PrimExpr

Array = np.ndarray
# An intrinsic's NumPy rule, one parameter per operand (as many as its arity).
NumpyRule = (Callable[[Array], Array] | Callable[[Array, Array], Array]
             | Callable[[Array, Array, Array], Array])

# The dtypes an intrinsic's operands may have: floats, integers, or either (never bool).
OperandRule = Literal["float", "int", "numeric"]


@final
@dataclass(frozen=True, slots=True, eq=False)
class Intrinsic:
    """A math function te expressions may call (``te.call(name, *operands)``)."""

    name: str
    arity: int
    operands: OperandRule
    numpy: NumpyRule  # on arrays of the operand dtype, returning that dtype
    cost: int  # scalar operations one call counts for in the llvm scheduler's inlining rule

    def result_dtype(self, args: Sequence[PrimExpr]) -> str:
        """The dtype of this intrinsic applied to ``args``; an IRError says what does not fit."""
        if len(args) != self.arity:
            raise IRError(f"{self.name} takes {self.arity} operand(s), got {len(args)}")
        dtypes = {a.dtype for a in args}
        if len(dtypes) != 1:
            raise IRError(f"{self.name}: operand dtypes differ: {sorted(dtypes)}")
        (dtype,) = dtypes
        if self.operands == "float" and not is_float(dtype):
            raise IRError(f"{self.name} needs a float operand, got {dtype} ({args[0]})")
        if self.operands == "int" and not is_int(dtype):
            raise IRError(f"{self.name} needs integer operands, got {dtype} ({args[0]})")
        if dtype == "bool":
            raise IRError(f"{self.name}: bool operand {args[0]}")
        return dtype

    def __reduce__(self) -> tuple[Callable[[str], Intrinsic], tuple[str]]:
        # a copy or an unpickled one is the registered object: backends key tables by identity
        return lookup, (self.name,)


INTRINSICS: dict[str, Intrinsic] = {}


def register(intrinsic: Intrinsic) -> Intrinsic:
    if intrinsic.name in INTRINSICS:
        raise IRError(f"intrinsic {intrinsic.name!r} is registered twice")
    INTRINSICS[intrinsic.name] = intrinsic
    return intrinsic


def lookup(name: str) -> Intrinsic:
    """The intrinsic called ``name``; an IRError lists the known ones."""
    intrinsic = INTRINSICS.get(name)
    if intrinsic is None:
        raise IRError(f"unknown intrinsic {name!r}; known: {', '.join(INTRINSICS)}")
    return intrinsic


def _scalar(x: Array, value: float) -> AnyValue:
    """``value`` as a scalar of x's dtype (so float16 and float32 results keep their dtype)."""
    return x.dtype.type(value)


def erf(x: Array) -> Array:
    """The error function elementwise, in x's dtype (NumPy has none: math.erf per element)."""
    x = np.asarray(x)
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


# ---- float math (a cost above 1: the scheduler avoids computing it twice per element) -------

EXP = register(Intrinsic("exp", arity=1, operands="float", numpy=np.exp, cost=16))
LOG = register(Intrinsic("log", arity=1, operands="float", numpy=np.log, cost=16))
SQRT = register(Intrinsic("sqrt", arity=1, operands="float", numpy=np.sqrt, cost=4))
RSQRT = register(Intrinsic("rsqrt", arity=1, operands="float",
                           numpy=lambda x: np.reciprocal(np.sqrt(x)), cost=5))
TANH = register(Intrinsic("tanh", arity=1, operands="float", numpy=np.tanh, cost=16))
# 1 / (1 + exp(-x)) written as (tanh(x / 2) + 1) / 2, which never overflows
SIGMOID = register(Intrinsic(
    "sigmoid", arity=1, operands="float",
    numpy=lambda x: _scalar(x, 0.5) * (np.tanh(_scalar(x, 0.5) * x) + _scalar(x, 1.0)),
    cost=18))
SIN = register(Intrinsic("sin", arity=1, operands="float", numpy=np.sin, cost=30))
COS = register(Intrinsic("cos", arity=1, operands="float", numpy=np.cos, cost=30))
# tan, atan and erf are libm calls, rare in models: counted as one operation
TAN = register(Intrinsic("tan", arity=1, operands="float", numpy=np.tan, cost=1))
ATAN = register(Intrinsic("atan", arity=1, operands="float", numpy=np.arctan, cost=1))
ERF = register(Intrinsic("erf", arity=1, operands="float", numpy=erf, cost=1))

# ---- rounding to an integral float -------------------------------------------------------

FLOOR = register(Intrinsic("floor", arity=1, operands="float", numpy=np.floor, cost=1))
CEIL = register(Intrinsic("ceil", arity=1, operands="float", numpy=np.ceil, cost=1))
ROUND = register(Intrinsic("round", arity=1, operands="float", numpy=np.round, cost=1))  # to even
TRUNC = register(Intrinsic("trunc", arity=1, operands="float", numpy=np.trunc, cost=1))

POW = register(Intrinsic("pow", arity=2, operands="float", numpy=np.power, cost=40))

# ---- on any number ---------------------------------------------------------------------

# abs of an integer's minimum wraps to itself; sign is -1, 0 or 1, and NaN for NaN
ABS = register(Intrinsic("abs", arity=1, operands="numeric", numpy=np.abs, cost=1))
SIGN = register(Intrinsic("sign", arity=1, operands="numeric", numpy=np.sign, cost=1))

# ---- integer shifts ----------------------------------------------------------------------

# NumPy's: a count outside 0 .. bits-1 shifts every bit out (right: the sign fills)
LEFT_SHIFT = register(Intrinsic("left_shift", arity=2, operands="int", numpy=np.left_shift,
                                cost=1))
RIGHT_SHIFT = register(Intrinsic("right_shift", arity=2, operands="int", numpy=np.right_shift,
                                 cost=1))
