"""Building primitive functions by hand for the llvm backend's tests."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from relaydsl.ir import Function, TensorType, Var
from relaydsl.ir.expr import Expr, op_call
from relaydsl.typing import infer_type


def primitive(types: list[tuple[tuple[int, ...], str]], body: Callable[..., Expr]) -> Function:
    """``fn(p0, p1, ...) { body(p0, p1, ...) }`` with Primitive=1, typed."""
    params = [Var(f"p{i}", TensorType(shape, dtype)) for i, (shape, dtype) in enumerate(types)]
    fn = infer_type(Function(params, body(*params), attrs={"Primitive": 1}))
    assert isinstance(fn, Function)
    return fn


def call(name: str, *args: Expr, **attrs: Any) -> Expr:
    return op_call(name, *args, **attrs)


def randn(*shape: int, dtype: str = "float32", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(dtype)
