"""te's math intrinsics (relaydsl/te/intrinsics.py): each one's arity and dtype rule are
enforced by ``te.call`` with an IRError naming the problem, and its NumPy implementation
agrees with JAX's function in float32 (and exactly on integers)."""
from __future__ import annotations

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import te
from relaydsl.errors import IRError
from relaydsl.ir.types import DTYPES
from relaydsl.te.intrinsics import INTRINSICS, Intrinsic, register

RNG = np.random.default_rng(0)

JAX = {
    "exp": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt, "rsqrt": jax.lax.rsqrt,
    "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "sin": jnp.sin, "cos": jnp.cos,
    "tan": jnp.tan, "atan": jnp.arctan, "erf": jax.scipy.special.erf,
    "floor": jnp.floor, "ceil": jnp.ceil, "round": jnp.round, "trunc": jnp.trunc,
    "pow": jnp.power, "abs": jnp.abs, "sign": jnp.sign,
    "left_shift": jnp.left_shift, "right_shift": jnp.right_shift,
}
# (rtol, atol) of the NumPy float32 result against JAX's: the libms differ by a few ulp
# (2**-23 is one ulp of relative error); rounding, sqrt, abs and sign are exact. NumPy's
# sigmoid, (tanh(x / 2) + 1) / 2, cancels for x << 0: its error there is absolute.
EXACT = ("sqrt", "floor", "ceil", "round", "trunc", "abs", "sign")
TOLERANCE = (dict.fromkeys(JAX, (1e-6, 0.0)) | dict.fromkeys(EXACT, (0.0, 0.0))
             | {"sigmoid": (1e-6, 2.0 ** -22)})
# where each float intrinsic is compared (default: -20 .. 20)
DOMAIN = {"exp": (-80.0, 80.0), "log": (1e-30, 1e30), "sqrt": (0.0, 1e30),
          "rsqrt": (1e-30, 1e30), "tan": (-1.5, 1.5), "pow": (0.01, 10.0)}
# also compared at: zeros, infinities, NaN and halves (round to even); not at denormals,
# which XLA's CPU code flushes to zero
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 2.5, -2.5], "float32")


def admits(intrinsic: Intrinsic, dtype: str) -> bool:
    """The dtype rule, restated: float, int (uint8 too) or either; never bool."""
    is_float, is_int = dtype.startswith("float"), dtype.startswith(("int", "uint"))
    return {"float": is_float, "int": is_int, "numeric": is_float or is_int}[intrinsic.operands]


def test_every_intrinsic_is_registered_under_its_name_and_checked_against_jax() -> None:
    assert all(i.name == name for name, i in INTRINSICS.items())
    assert set(JAX) == set(INTRINSICS)


@pytest.mark.parametrize("name", list(INTRINSICS))
def test_a_call_has_the_operand_dtype_and_knows_its_intrinsic(name: str) -> None:
    intrinsic = INTRINSICS[name]
    dtype = "float32" if intrinsic.operands != "int" else "int32"
    args = [te.Var(f"x{k}", dtype) for k in range(intrinsic.arity)]
    call = te.call(name, *args)
    assert isinstance(call, te.Call)
    assert call.intrinsic is intrinsic and call.dtype == dtype
    assert str(call) == f"{name}({', '.join(a.name for a in args)})"


@pytest.mark.parametrize("name", list(INTRINSICS))
def test_arity_is_enforced(name: str) -> None:
    intrinsic = INTRINSICS[name]
    dtype = "float32" if intrinsic.operands != "int" else "int32"
    for count in (intrinsic.arity - 1, intrinsic.arity + 1):
        args = [te.Var(f"x{k}", dtype) for k in range(count)]
        with pytest.raises(IRError, match=f"^{name} takes {intrinsic.arity} operand\\(s\\), "
                                          f"got {count}$"):
            te.call(name, *args)


@pytest.mark.parametrize("name", list(INTRINSICS))
def test_the_dtype_rule_is_enforced(name: str) -> None:
    intrinsic = INTRINSICS[name]
    for dtype in DTYPES:
        args = [te.Var(f"x{k}", dtype) for k in range(intrinsic.arity)]
        if admits(intrinsic, dtype):
            assert te.call(name, *args).dtype == dtype
            continue
        needs = {"float": f"{name} needs a float operand, got {dtype} \\(x0\\)",
                 "int": f"{name} needs integer operands, got {dtype} \\(x0\\)",
                 "numeric": f"{name}: bool operand x0"}[intrinsic.operands]
        with pytest.raises(IRError, match=f"^{needs}$"):
            te.call(name, *args)


def test_operands_of_two_dtypes_and_unknown_names_are_errors() -> None:
    with pytest.raises(IRError, match=r"^pow: operand dtypes differ: \['float32', 'float64'\]$"):
        te.Call("pow", (te.Var("x", "float32"), te.Var("y", "float64")))
    with pytest.raises(IRError, match=r"^unknown intrinsic 'expm1'; known: exp, log, sqrt, "):
        te.call("expm1", te.Var("x", "float32"))
    with pytest.raises(IRError, match="intrinsic 'exp' is registered twice"):
        register(Intrinsic("exp", arity=1, operands="float", numpy=np.exp, cost=1))


def test_a_copied_or_unpickled_intrinsic_is_the_registered_one() -> None:
    # backends key their tables (the LLVM lowerings) by the object
    sigmoid = INTRINSICS["sigmoid"]
    assert copy.deepcopy(sigmoid) is sigmoid and copy.copy(sigmoid) is sigmoid
    assert pickle.loads(pickle.dumps(sigmoid)) is sigmoid


def _floats(name: str) -> np.ndarray:
    lo, hi = DOMAIN.get(name, (-20.0, 20.0))
    return np.concatenate([np.linspace(lo, hi, 2001), RNG.uniform(lo, hi, 2000)]).astype("float32")


@pytest.mark.parametrize("name", [n for n, i in INTRINSICS.items() if i.operands != "int"])
def test_numpy_matches_jax_in_float32(name: str) -> None:
    intrinsic = INTRINSICS[name]
    x = _floats(name)
    if intrinsic.arity == 1:
        args = [np.concatenate([x, SPECIAL])]
    else:  # pow: a positive base, any exponent
        args = [x, RNG.uniform(-5, 5, x.shape).astype("float32")]
    with np.errstate(all="ignore"):
        got = intrinsic.numpy(*args)
    want = np.asarray(JAX[name](*args))
    assert got.dtype == want.dtype == np.float32
    rtol, atol = TOLERANCE[name]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
@pytest.mark.parametrize("name", [n for n, i in INTRINSICS.items() if i.operands != "float"])
def test_numpy_matches_jax_exactly_on_integers(name: str, dtype: str) -> None:
    info = np.iinfo(dtype)
    x = np.concatenate([[info.min, info.min + 1, -1, 0, 1, info.max],
                        RNG.integers(info.min, info.max, 500, endpoint=True)]).astype(dtype)
    intrinsic = INTRINSICS[name]
    if intrinsic.arity == 1:
        args = [x]
    else:  # shift counts outside 0 .. bits-1 included (negative ones too, where signed)
        least = 0 if dtype == "uint8" else -3
        args = [x, RNG.integers(least, info.bits + 4, x.shape).astype(dtype)]
    got = intrinsic.numpy(*args)
    want = np.asarray(JAX[name](*args))
    assert got.dtype == want.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


def test_every_intrinsic_costs_at_least_one_operation() -> None:
    assert all(isinstance(i.cost, int) and i.cost >= 1 for i in INTRINSICS.values())
