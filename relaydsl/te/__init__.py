"""relaydsl.te: the tensor-expression language in which ops' arithmetic is written.

Scalar expressions (expr.py), the math intrinsics they call (intrinsics.py),
placeholders / computes / reductions (tensor.py) and the NumPy reference
evaluator (evaluate.py). Backends lower these; tests check them against the ops'
NumPy references.

>>> import numpy as np
>>> from relaydsl import te
>>> A = te.placeholder((3,), "float32", "A")
>>> B = te.compute((3,), lambda i: te.exp(A[i]) + 1.0, "B")
>>> te.evaluate(B, {A: np.zeros(3, "float32")})
array([2., 2., 2.], dtype=float32)
"""
from relaydsl.te.evaluate import evaluate
from relaydsl.te.expr import (
    Add, And, BinaryOp, Call, Cast, Div, EQ, FloatImm, FloorDiv, FloorMod, GE, GT, IntImm,
    IterVar, LE, LT, Max, Min, Mul, NE, Not, Or, PrimExpr, Reduce, Select, Sub, TensorRead, Var,
    abs_, call, cast, const, equal, exp, log, maximum, minimum, not_equal, post_order, power,
    select, sigmoid, sqrt, tanh, to_text,
)
from relaydsl.te.tensor import Reducer, Tensor, compute, placeholder, reduce_axis

# te.sum, te.max, te.min and te.prod are reductions; they stay out of __all__ so that
# `from relaydsl.te import *` does not shadow the builtins (`x as x` marks a re-export).
from relaydsl.te.tensor import max as max, min as min, prod as prod, sum as sum

__all__ = [
    "Add", "And", "BinaryOp", "Call", "Cast", "Div", "EQ", "FloatImm", "FloorDiv", "FloorMod",
    "GE", "GT", "IntImm", "IterVar", "LE", "LT", "Max", "Min", "Mul", "NE", "Not", "Or",
    "PrimExpr", "Reduce", "Reducer", "Select", "Sub", "Tensor", "TensorRead", "Var", "abs_",
    "call", "cast", "compute", "const", "equal", "evaluate", "exp", "log", "maximum", "minimum",
    "not_equal", "placeholder", "post_order", "power", "reduce_axis", "select", "sigmoid",
    "sqrt", "tanh", "to_text",
]
