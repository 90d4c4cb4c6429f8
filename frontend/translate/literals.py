"""Python numbers in a program: folded as Python computes them, typed by the tensor they meet."""
from __future__ import annotations

import ast
import operator
from typing import Any as AnyValue, Callable

from relaydsl.errors import DSLSyntaxError
from relaydsl.ir.expr import Constant, const
from relaydsl.ir.span import Span
from relaydsl.ir.types import TensorType

INT32 = TensorType((), "int32")
_INT32_RANGE = (-2**31, 2**31 - 1)

# Python operators folded when both operands are Python numbers.
PYTHON_BINOPS: dict[type, Callable[[AnyValue, AnyValue], AnyValue]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}


class Number:
    """A Python number in the program: it takes the dtype of the tensor it meets."""

    __slots__ = ("span", "value")

    def __init__(self, value: int | float | bool, span: Span | None):
        self.value, self.span = value, span

    def default(self) -> Constant:
        """The number on its own: bool, int32 or float32 (Python's defaults in the DSL)."""
        self._check_int32()
        return const(self.value, span=self.span)

    def wide(self) -> Constant:
        """The number at full precision (bool, int64 or float64), for ``cast_like``."""
        v = self.value
        if isinstance(v, bool):
            return const(v, "bool", span=self.span)
        if isinstance(v, int):
            if not -2**63 <= v < 2**63:
                raise DSLSyntaxError(f"the integer {v} does not fit in 64 bits", self.span)
            return const(v, "int64", span=self.span)
        return const(v, "float64", span=self.span)

    def _check_int32(self) -> None:
        v = self.value
        if isinstance(v, int) and not isinstance(v, bool) \
                and not _INT32_RANGE[0] <= v <= _INT32_RANGE[1]:
            raise DSLSyntaxError(f"the integer {v} does not fit in int32 (a Python int on its own "
                                 "is an Int); use a float or a NumPy int64 array", self.span)
