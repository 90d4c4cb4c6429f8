"""Every op case of the registry's tests, as a single-op primitive function, against JAX.

All cases are compiled in one ``compile_primitives`` call (one LLVM module). An op
without a compute rule yet is skipped, naming the missing rule, so its cases start
passing when the rule lands.
"""
from __future__ import annotations

import numpy as np
import pytest

from relaydsl.backend.llvm.kernel import compile_primitives
from relaydsl.ir import Call, Function, Op, TensorType, Tuple, Var
from relaydsl.op import lookup
from relaydsl.typing import infer_type
from tests.relaydsl.op import test_nn, test_reduce, test_tensor, test_transform
from tests.relaydsl.op.harness import OpCase, _to_jax, assert_same


CASES: list[OpCase] = [c for m in (test_tensor, test_reduce, test_transform, test_nn)
                       for c in m.CASES]


def build(case: OpCase) -> tuple[Function, list[np.ndarray]]:
    """The case's call as a primitive function; a tuple input becomes one param per field."""
    params, args, leaves = [], [], []
    for i, x in enumerate(case.inputs):
        if isinstance(x, (list, tuple)):
            vs = [Var(f"x{i}_{j}", TensorType(np.shape(a), np.asarray(a).dtype.name))
                  for j, a in enumerate(x)]
            params += vs
            leaves += [np.asarray(a) for a in x]
            args.append(Tuple(vs))
        else:
            a = np.asarray(x)
            v = Var(f"x{i}", TensorType(a.shape, a.dtype.name))
            params.append(v)
            leaves.append(a)
            args.append(v)
    fn = infer_type(Function(params, Call(Op.get(case.op), args, case.attrs),
                             attrs={"Primitive": 1}))
    return fn, leaves


@pytest.fixture(scope="module")
def kernels() -> dict[int, object]:
    """Case index -> Kernel, or the exception compiling it raised."""
    ready = [i for i, c in enumerate(CASES) if lookup(c.op).compute is not None]
    funcs = {i: build(CASES[i])[0] for i in ready}
    try:
        compiled = compile_primitives([funcs[i] for i in ready])
        return dict(zip(ready, compiled))
    except Exception:  # find the culprit(s): compile one by one
        out: dict[int, object] = {}
        for i in ready:
            try:
                out[i] = compile_primitives([funcs[i]])[0]
            except Exception as e:
                out[i] = e
        return out


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c in CASES])
def test_op_case_compiles_and_matches_jax(index: int, kernels: dict[int, object]) -> None:
    case = CASES[index]
    if lookup(case.op).compute is None:
        pytest.skip(f"op {case.op} has no compute rule yet "
                    f"(its definition block in relaydsl/op: {case.op})")
    kernel = kernels[index]
    if isinstance(kernel, Exception):
        raise kernel
    _, leaves = build(case)
    expected = case.expected(*[_to_jax(x) for x in case.inputs])
    actual = kernel(*leaves)
    assert_same(actual, expected, case.rtol, case.atol, f"{case.id} llvm")


def test_every_case_with_a_rule_is_compiled_in_one_module(kernels: dict[int, object]) -> None:
    assert not [i for i, k in kernels.items() if isinstance(k, Exception)]
