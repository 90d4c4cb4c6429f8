"""One op case checked three ways against an independent JAX formulation.

Each op-family test module defines ``CASES: list[OpCase]`` and parametrises
``check_case`` over them; test_registry.py checks that every registered op
has at least one case.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from relaydsl.ir import Call, Op, TensorType, TupleType, Var
from relaydsl.op import lookup
from relaydsl.typing import infer_type
from relaydsl.typing.relations import check_relation

jax.config.update("jax_enable_x64", True)  # so float64/int64 cases are really 64-bit


@dataclass
class OpCase:
    op: str
    inputs: Sequence[Any]  # an ndarray per input; a list/tuple of ndarrays for a tuple-typed input
    expected: Callable[..., Any]  # the JAX truth, written independently of our jax_lower
    attrs: dict[str, Any] = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-6
    name: str = ""

    @property
    def id(self) -> str:
        shapes = ",".join(_shape_str(x) for x in self.inputs)
        return f"{self.op}[{self.name or shapes}]"


def _shape_str(x: Any) -> str:
    if isinstance(x, (list, tuple)):
        return "(" + ",".join(_shape_str(i) for i in x) + ")"
    return f"{x.dtype}{list(x.shape)}"


def type_of(x: Any):
    if isinstance(x, (list, tuple)):
        return TupleType(tuple(type_of(i) for i in x))
    return TensorType(tuple(x.shape), x.dtype.name)


def _to_jax(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return tuple(_to_jax(i) for i in x)
    return jnp.asarray(x)


def _flatten(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        return [leaf for i in x for leaf in _flatten(i)]
    return [x]


def assert_same(actual: Any, expected: Any, rtol: float, atol: float, what: str) -> None:
    a_leaves, e_leaves = _flatten(actual), _flatten(expected)
    assert len(a_leaves) == len(e_leaves), \
        f"{what}: {len(a_leaves)} outputs, expected {len(e_leaves)}"
    for a, e in zip(a_leaves, e_leaves):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, f"{what}: shape {a.shape}, expected {e.shape}"
        assert a.dtype == e.dtype, f"{what}: dtype {a.dtype}, expected {e.dtype}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=what)


def assert_type_matches(t, expected: Any, what: str) -> None:
    if isinstance(expected, (list, tuple)):
        assert isinstance(t, TupleType) and len(t.fields) == len(expected), f"{what}: {t} vs tuple"
        for f, e in zip(t.fields, expected):
            assert_type_matches(f, e, what)
        return
    e = np.asarray(expected)
    assert t == TensorType(tuple(e.shape), e.dtype.name), f"{what}: {t} vs {e.dtype}{list(e.shape)}"


def check_case(case: OpCase) -> None:
    opdef = lookup(case.op)
    expected = case.expected(*[_to_jax(x) for x in case.inputs])
    # The IR call is well formed (arity, attributes).
    params = [Var(f"x{i}", type_of(x)) for i, x in enumerate(case.inputs)]
    call = Call(Op.get(case.op), params, case.attrs)
    # NumPy reference (the interpreter's semantics) against the JAX truth.
    actual = opdef.numpy_ref(*case.inputs, **call.attrs)
    assert_same(actual, expected, case.rtol, case.atol, f"{case.id} numpy_ref")
    # JAX lowering (the oracle's semantics) against the JAX truth.
    lowered = opdef.jax_lower(*[_to_jax(x) for x in case.inputs], **call.attrs)
    assert_same(lowered, expected, case.rtol, case.atol, f"{case.id} jax_lower")
    # Type relation gives the truth's shape and dtype, alone and through type inference.
    out_type = check_relation(opdef.type_relation, [type_of(x) for x in case.inputs], call.attrs)
    assert_type_matches(out_type, expected, f"{case.id} type relation")
    assert_type_matches(infer_type(call).checked_type, expected, f"{case.id} type inference")
