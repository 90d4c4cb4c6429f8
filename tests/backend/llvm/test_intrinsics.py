"""backend/llvm/intrinsics.py: every te intrinsic has a lowering, for every dtype it admits,
and the inline float32 math is accurate over wide ranges, against NumPy in float64.

Errors are measured in float32 ulps of the correctly rounded result (denormal
results in denormal ulps); special values (+-inf, NaN, +-0, denormal inputs)
must match exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
from llvmlite import binding as llvm, ir

from relaydsl import te
from relaydsl.backend.llvm.codegen import value_type
from relaydsl.backend.llvm.intrinsics import LOWERINGS, lower_call
from relaydsl.backend.llvm.kernel import compile_primitives
from relaydsl.backend.llvm.schedule import node_cost
from relaydsl.errors import IRError
from relaydsl.ir.types import DTYPES
from relaydsl.te.intrinsics import INTRINSICS
from tests.backend.llvm.helpers import call, primitive


def test_every_te_intrinsic_has_a_lowering_and_nothing_else_has_one():
    missing = [name for name, i in INTRINSICS.items() if i not in LOWERINGS]
    assert not missing, f"te intrinsics without an LLVM lowering: {missing}"
    assert len(LOWERINGS) == len(INTRINSICS)


@pytest.mark.parametrize("name", list(INTRINSICS))
def test_each_lowering_emits_valid_ir_for_every_dtype_its_intrinsic_admits(name):
    intrinsic = INTRINSICS[name]
    module = ir.Module(name)
    emitted = []
    for dtype in DTYPES:
        operands = [te.Var(f"x{k}", dtype) for k in range(intrinsic.arity)]
        try:
            te.call(name, *operands)
        except IRError:
            continue  # a dtype its rule rejects: no lowering needed
        t = value_type(dtype)
        fn = ir.Function(module, ir.FunctionType(t, [t] * intrinsic.arity), f"{name}_{dtype}")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(lower_call(b, intrinsic, list(fn.args), dtype))
        emitted.append(dtype)
    assert emitted
    llvm.parse_assembly(str(module)).verify()


@pytest.mark.parametrize("name", list(INTRINSICS))
def test_the_scheduler_counts_each_intrinsic_at_its_cost(name):
    intrinsic = INTRINSICS[name]
    dtype = "int32" if intrinsic.operands == "int" else "float32"
    e = te.call(name, *(te.Var(f"x{k}", dtype) for k in range(intrinsic.arity)))
    assert node_cost(e) == intrinsic.cost >= 1

F = "float32"
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40,
                    1.17549435e-38, 1.0, -1.0, 3.4e38, -3.4e38], F)


def _inputs(name: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if name == "exp":
        x = np.concatenate([np.linspace(-110, 95, 200_001), rng.uniform(-1, 1, 50_000),
                            [88.72283, 88.72284, 88.7228394, -87.33654, -103.9, -104.0]])
    elif name == "log":
        x = np.concatenate([np.geomspace(1e-45, 3.4e38, 200_001),
                            1 + rng.uniform(-1e-3, 1e-3, 50_000), rng.uniform(0, 10, 50_000),
                            [-1.0, -1e-30]])
    elif name == "tanh":
        x = np.concatenate([np.linspace(-20, 20, 200_001), np.geomspace(1e-38, 1, 50_000),
                            -np.geomspace(1e-38, 1, 50_000), [7.9, 7.905, 7.91, 9.0, 1e30]])
    else:  # sigmoid
        x = np.concatenate([np.linspace(-110, 110, 200_001), rng.uniform(-5, 5, 50_000)])
    return np.concatenate([x.astype(F), SPECIAL])


REFERENCE = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
}
# max error in float32 ulps of the correctly rounded result
ULPS = {"exp": 2, "log": 2, "tanh": 5, "sigmoid": 4}


@pytest.fixture(scope="module")
def results():
    names = list(REFERENCE)
    inputs = {n: _inputs(n) for n in names}
    fns = [primitive([(inputs[n].shape, F)], lambda x, n=n: call(n, x)) for n in names]
    kernels = compile_primitives(fns)
    return {n: (inputs[n], k(inputs[n])) for n, k in zip(names, kernels)}


def ulp_error(got: np.ndarray, x: np.ndarray, ref_fn) -> np.ndarray:
    with np.errstate(all="ignore"):
        ref64 = ref_fn(x.astype(np.float64))
        ref32 = ref64.astype(F)
        finite = np.isfinite(ref32) & np.isfinite(got)
        err = np.zeros(x.shape)
        spacing = np.spacing(np.abs(ref32[finite])).astype(np.float64)
        err[finite] = np.abs(got[finite].astype(np.float64) - ref64[finite]) / spacing
    return err


@pytest.mark.parametrize("name", list(REFERENCE))
def test_max_ulp_error(name, results):
    x, got = results[name]
    err = ulp_error(got, x, REFERENCE[name])
    worst = int(np.argmax(err))
    print(f"\n{name}: max {err.max():.2f} ulp at x={x[worst]!r}")
    assert err.max() <= ULPS[name], f"{name}({x[worst]!r}) = {got[worst]!r}, {err.max()} ulp"


@pytest.mark.parametrize("name", list(REFERENCE))
def test_special_values_match_numpy_exactly(name, results):
    x, got = results[name]
    with np.errstate(all="ignore"):
        want = REFERENCE[name](x.astype(np.float64)).astype(F)
    special = ~np.isfinite(want) | ~np.isfinite(got) | (want == 0)
    np.testing.assert_array_equal(got[special], want[special])


def test_tanh_saturates_to_exactly_one_where_float32_rounds_it_there(results):
    # Summed over many saturated units, 0.99999976 instead of 1 gave a gradient
    # (1 - tanh^2) of 4.8e-7 per unit where JAX gives exactly 0 (issue 11).
    x, got = results["tanh"]
    with np.errstate(all="ignore"):
        want = np.tanh(x.astype(np.float64)).astype(F)
    saturated = np.abs(want) == 1
    assert saturated.sum() > 1000
    np.testing.assert_array_equal(got[saturated], want[saturated])
