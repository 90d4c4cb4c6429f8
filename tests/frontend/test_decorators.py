"""``@relay`` where functions are defined, how they find each other, their views, and calls."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from relaydsl import Bool, Float, Float64, Int, Tensor, relay
from relaydsl.ir.expr import Function
from relaydsl.ir.types import FuncType, TensorType, TypeVar

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


# ---- defined in this module ----------------------------------------------------------------


@relay
def countdown_sum(n: Int) -> Int:
    """Recursion through a module-level function defined further down."""
    if n <= 0:
        return 0
    return n + countdown_helper(n - 1)


@relay
def countdown_helper(n: Int) -> Int:
    return countdown_sum(n)


@relay
def double_rows(x: Tensor[Float, ("n", 2)]) -> Tensor[Float, ("n", 2)]:
    return x * 2.0


@relay
def uses_double_rows(x: Tensor[Float, (3, 2)]) -> Tensor[Float, (3, 2)]:
    return double_rows(x) + 1.0


def test_module_level_functions_call_each_other_in_any_order():
    assert int(countdown_sum(4)) == 4 + 3 + 2 + 1
    assert int(countdown_helper(3)) == 3 + 2 + 1


def test_a_decorated_function_keeps_the_python_functions_identity():
    assert countdown_sum.__name__ == "countdown_sum"
    assert countdown_sum.__doc__.startswith("Recursion through")
    assert "countdown_sum" in repr(countdown_sum)
    assert relay(countdown_sum) is countdown_sum  # decorating twice changes nothing


# ---- defined in a nested scope ----------------------------------------------------------------


def test_nested_functions_see_local_arrays_and_later_local_decorated_functions():
    bias = np.array([1.0, -2.0, 0.5], np.float32)

    @relay
    def outer(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return inner(x) + bias  # `inner` is decorated below: resolved when first used

    @relay
    def inner(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return relay.tanh(x) * 2.0

    x = np.array([0.1, 0.2, -0.3], np.float32)
    np.testing.assert_allclose(outer(x), np.tanh(x) * 2.0 + bias, rtol=1e-6)
    assert inner in outer.callees


def test_nested_mutual_recursion_defined_in_either_order():
    @relay
    def even(n: Int) -> Bool:
        if n == 0:
            return True
        return odd(n - 1)

    @relay
    def odd(n: Int) -> Bool:
        if n == 0:
            return False
        return even(n - 1)

    assert [bool(even(n)) for n in range(5)] == [True, False, True, False, True]
    assert [bool(odd(n)) for n in range(5)] == [False, True, False, True, False]


def test_a_closure_value_is_read_when_the_function_is_decorated():
    scale = 2.0

    @relay
    def f(x: Float) -> Float:
        return x * scale

    scale = 100.0
    assert float(f(3.0)) == 6.0


# ---- run as a script ----------------------------------------------------------------------------


def test_a_script_run_with_python_prints_its_results():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    result = subprocess.run([sys.executable, str(SCRIPTS / "script_example.py")], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "collatz [0, 8, 16, 111]",
        "smooth [[1.3125, 1.4375, 1.5625, 1.6875], [5.3125, 5.4375, 5.5625, 5.6875]]",
        "type fn<n: Shape>(Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32]",
    ]


# ---- the compiler's views -----------------------------------------------------------------


def test_astext_shows_the_typed_function_and_its_callees():
    text = uses_double_rows.astext()
    name = uses_double_rows.global_var.name_hint
    callee = double_rows.global_var.name_hint
    assert f"def @{name}(%x: Tensor[(3, 2), float32]) -> Tensor[(3, 2), float32]" in text
    assert f"def @{callee}(" in text and f"@{callee}(%x)" in text


def test_checked_type_is_the_inferred_function_type():
    t = uses_double_rows.checked_type
    assert t == FuncType((TensorType((3, 2), "float32"),), TensorType((3, 2), "float32"))
    poly = double_rows.checked_type
    (n,) = poly.type_params
    assert isinstance(n, TypeVar)
    assert poly == FuncType((TensorType((n, 2), "float32"),), TensorType((n, 2), "float32"), (n,))


def test_mod_holds_the_function_and_every_callee():
    mod = countdown_sum.mod
    assert countdown_sum.global_var in mod and countdown_helper.global_var in mod
    assert isinstance(mod[countdown_helper.global_var], Function)
    assert uses_double_rows.mod[double_rows.global_var].checked_type is not None


def test_a_function_with_no_parameters():
    @relay
    def constant() -> Tensor[Float, 2]:
        return relay.ones(shape=(2,), dtype="float32") * 3.0

    assert constant.checked_type == FuncType((), TensorType((2,), "float32"))
    np.testing.assert_array_equal(constant(), np.full(2, 3.0, np.float32))


# ---- calling ------------------------------------------------------------------------------------


@relay
def affine(x: Tensor[Float, ("n", 3)], w: Tensor[Float, (3, "k")], b: Tensor[Float, "k"]
           ) -> Tensor[Float, ("n", "k")]:
    return x @ w + b


def test_a_call_returns_numpy_arrays():
    x, w, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.zeros(4, np.float32)
    out = affine(x, w, b)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, 4)
    np.testing.assert_array_equal(out, np.full((2, 4), 3.0, np.float32))


def test_a_tuple_result_is_a_tuple_of_arrays_and_scalars_are_0d_arrays():
    @relay
    def stats(x: Tensor[Float, 4]) -> tuple[Float, tuple[Float, Int]]:
        return relay.sum(x), (relay.max(x), relay.argmax(x))

    total, (largest, where) = out = stats(np.array([1.0, 5.0, 2.0, 0.0], np.float32))
    assert isinstance(out, tuple) and isinstance(out[1], tuple)
    assert all(isinstance(v, np.ndarray) and v.shape == () for v in (total, largest, where))
    assert (float(total), float(largest), int(where)) == (8.0, 5.0, 1)


def test_python_scalars_are_accepted_for_scalar_parameters():
    @relay
    def mix(a: Float, n: Int, flag: Bool, d: Float64) -> Float64:
        if flag:
            return d + relay.cast(a * relay.cast(n, dtype="float32"), dtype="float64")
        return d

    out = mix(1.5, 2, True, 0.25)
    assert out.dtype == np.float64 and float(out) == 3.25
    assert float(mix(np.float32(1.5), np.int32(2), np.bool_(False), 0.25)) == 0.25


def test_a_wrong_dtype_names_the_parameter_and_both_types():
    x, w, b = np.ones((2, 3), np.int64), np.ones((3, 4), np.float32), np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"argument 'x': expected Tensor\[\(n, 3\), float32\], "
                                        r"got an int64 array of shape \(2, 3\)"):
        affine(x, w, b)


def test_a_wrong_shape_names_the_parameter_and_both_shapes():
    x, w, b = np.ones((2, 3), np.float32), np.ones((4, 4), np.float32), np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"argument 'w': expected Tensor\[\(3, k\), float32\], "
                                        r"got a float32 array of shape \(4, 4\)"):
        affine(x, w, b)


def test_symbolic_dims_must_agree_across_parameters():
    x, w, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.zeros(5, np.float32)
    with pytest.raises(TypeError, match=r"argument 'b'.*k is 5 at axis 0, but argument 'w' "
                                        r"\(axis 1\) has k = 4"):
        affine(x, w, b)
    assert affine(np.ones((7, 3), np.float32), w, np.zeros(4, np.float32)).shape == (7, 4)


def test_a_wrong_number_of_arguments_names_the_parameters():
    with pytest.raises(TypeError, match=r"affine\(\) takes 3 argument\(s\) \(x, w, b\), got 2"):
        affine(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))


def test_a_python_float_for_an_int_parameter_is_refused():
    with pytest.raises(TypeError, match="argument 'n'"):
        countdown_sum(2.5)


def test_a_function_compiles_once_per_target_and_options():
    assert affine.build() is affine.build()
    assert relay.build(affine, target="interp") is affine.build("interp")
