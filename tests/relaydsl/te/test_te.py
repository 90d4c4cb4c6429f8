"""The tensor-expression language: build computes, evaluate them, compare with NumPy and JAX."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaydsl import te
from relaydsl.errors import IRError

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def close(actual: np.ndarray, expected: object, rtol: float = 1e-5) -> None:
    expected = np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=1e-6)


# ---- elementwise and broadcast ---------------------------------------------------------


@pytest.mark.parametrize("name, build, ref", [
    ("add", lambda a, b: a + b, np.add),
    ("sub_rev", lambda a, b: 1.5 - a * b, lambda a, b: np.float32(1.5) - a * b),
    ("div", lambda a, b: a / b, np.divide),
    ("exp", lambda a, b: te.exp(a) * te.tanh(b), lambda a, b: np.exp(a) * np.tanh(b)),
    ("sigmoid", lambda a, b: te.sigmoid(a), lambda a, b: 1 / (1 + np.exp(-a))),
    ("minmax", lambda a, b: te.maximum(te.minimum(a, b), 0.0),
     lambda a, b: np.maximum(np.minimum(a, b), 0)),
    ("neg_abs", lambda a, b: -te.abs_(a), lambda a, b: -np.abs(a)),
    ("pow", lambda a, b: te.power(te.abs_(a), b), lambda a, b: np.abs(a) ** b),
    ("sqrt_log", lambda a, b: te.sqrt(te.abs_(a)) + te.log(te.abs_(b)),
     lambda a, b: np.sqrt(np.abs(a)) + np.log(np.abs(b))),
])
def test_elementwise_matches_numpy(name: str, build, ref) -> None:
    A = te.placeholder((3, 4), "float32", "A")
    B = te.placeholder((3, 4), "float32", "B")
    C = te.compute((3, 4), lambda i, j: build(A[i, j], B[i, j]), name)
    a, b = rand(3, 4), rand(3, 4)
    close(te.evaluate(C, {A: a, B: b}), ref(a, b).astype("float32"))


def test_broadcast_by_explicit_index_mapping() -> None:
    A = te.placeholder((4, 3), "float32", "A")
    row = te.placeholder((3,), "float32", "row")
    col = te.placeholder((4, 1), "float32", "col")
    C = te.compute((4, 3), lambda i, j: A[i, j] * row[j] + col[i, 0], "C")
    a, r, c = rand(4, 3), rand(3), rand(4, 1)
    close(te.evaluate(C, {A: a, row: r, col: c}), jnp.asarray(a) * r + c)


def test_body_independent_of_an_axis_is_broadcast_to_the_shape() -> None:
    v = te.placeholder((5,), "float32", "v")
    T = te.compute((2, 5), lambda i, j: v[j], "T")
    x = rand(5)
    close(te.evaluate(T, {v: x}), np.broadcast_to(x, (2, 5)))
    K = te.compute((2, 3), lambda i, j: 7, "K")
    assert te.evaluate(K, {}).tolist() == [[7] * 3] * 2


def test_transpose_and_reverse_are_index_mappings() -> None:
    A = te.placeholder((3, 5), "float32", "A")
    T = te.compute((5, 3), lambda i, j: A[2 - j, i], "T")
    a = rand(3, 5)
    close(te.evaluate(T, {A: a}), a[::-1].T)


# ---- select and cast ----------------------------------------------------------------


def test_select_relu_and_guarded_padding() -> None:
    A = te.placeholder((6,), "float32", "A")
    relu = te.compute((6,), lambda i: te.select(A[i] > 0.0, A[i], 0.0), "relu")
    pad = te.compute((8,), lambda i: te.select((i >= 1) & (i < 7), A[i - 1], -1.0), "pad")
    a = rand(6)
    close(te.evaluate(relu, {A: a}), jax.nn.relu(a))
    close(te.evaluate(pad, {A: a}), np.pad(a, 1, constant_values=-1.0))


def test_unguarded_out_of_bounds_read_is_an_error() -> None:
    A = te.placeholder((6,), "float32", "A")
    bad = te.compute((7,), lambda i: A[i], "bad")
    with pytest.raises(IRError, match="A read out of bounds: index 6 in dimension 0 of extent 6"):
        te.evaluate(bad, {A: rand(6)})


def test_cast_truncates_toward_zero_and_widens() -> None:
    A = te.placeholder((5,), "float32", "A")
    I32 = te.compute((5,), lambda i: te.cast("int32", A[i] * 3.0), "I")
    F = te.compute((5,), lambda i: te.cast("float64", I32[i]) / 2.0, "F")
    a = rand(5)
    ints = (a * 3).astype("int32")
    assert te.evaluate(I32, {A: a}).tolist() == ints.tolist()
    close(te.evaluate(F, {A: a}), ints.astype("float64") / 2)


def test_integer_division_is_floor_division() -> None:
    A = te.placeholder((4,), "int32", "A")
    B = te.placeholder((4,), "int32", "B")
    Q = te.compute((4,), lambda i: A[i] / B[i], "Q")
    M = te.compute((4,), lambda i: A[i] % B[i] + A[i] // 2, "M")
    a = np.array([7, -7, 7, -7], "int32")
    b = np.array([2, 2, -2, -2], "int32")
    assert te.evaluate(Q, {A: a, B: b}).tolist() == [3, -4, -4, 3]
    assert te.evaluate(M, {A: a, B: b}).tolist() == [x % y + x // 2 for x, y in zip(a, b)]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(-1000, 1000), st.integers(-50, 50).filter(bool)),
                min_size=1, max_size=8))
def test_integer_arithmetic_agrees_with_python(pairs: list[tuple[int, int]]) -> None:
    n = len(pairs)
    A = te.placeholder((n,), "int32", "A")
    B = te.placeholder((n,), "int32", "B")
    E = te.compute((n,), lambda i: te.select(
        te.equal(A[i] % 3, 0), (A[i] // B[i]) * 3 - te.minimum(A[i], B[i]),
        te.maximum(A[i] % B[i], 5 - B[i])), "E")
    a = np.array([x for x, _ in pairs], "int32")
    b = np.array([y for _, y in pairs], "int32")
    expected = [(x // y) * 3 - min(x, y) if x % 3 == 0 else max(x % y, 5 - y) for x, y in pairs]
    assert te.evaluate(E, {A: a, B: b}).tolist() == expected


# ---- reductions ------------------------------------------------------------------------


def test_sum_and_max_over_one_and_two_axes() -> None:
    A = te.placeholder((3, 4, 5), "float32", "A")
    k1, k2 = te.reduce_axis(4, "k1"), te.reduce_axis(5, "k2")
    S1 = te.compute((3, 5), lambda i, j: te.sum(A[i, k1, j], axis=k1), "S1")
    M2 = te.compute((3,), lambda i: te.max(A[i, k1, k2], axis=[k1, k2]), "M2")
    m, p = te.reduce_axis(3, "m"), te.reduce_axis(4, "p")
    N2 = te.compute((5,), lambda j: te.min(A[m, p, j] * 2.0, axis=[m, p]), "N2")
    a = rand(3, 4, 5)
    close(te.evaluate(S1, {A: a}), jnp.sum(a, axis=1))
    close(te.evaluate(M2, {A: a}), jnp.max(a, axis=(1, 2)))
    close(te.evaluate(N2, {A: a}), jnp.min(a * 2, axis=(0, 1)))


def test_prod_init_and_integer_reductions() -> None:
    A = te.placeholder((4, 3), "int32", "A")
    k = te.reduce_axis(3, "k")
    P = te.compute((4,), lambda i: te.prod(A[i, k], axis=[k]), "P")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=[k], init=100), "S")
    M = te.compute((4,), lambda i: te.max(A[i, k], axis=[k]), "M")
    a = RNG.integers(-5, 5, (4, 3)).astype("int32")
    assert te.evaluate(P, {A: a}).tolist() == np.prod(a, axis=1).tolist()
    assert te.evaluate(S, {A: a}).tolist() == (100 + a.sum(axis=1)).tolist()
    assert te.evaluate(M, {A: a}).tolist() == a.max(axis=1).tolist()


def test_reduction_inside_arithmetic_softmax() -> None:
    X = te.placeholder((4, 6), "float32", "X")
    k = te.reduce_axis(6, "k")
    mx = te.compute((4,), lambda i: te.max(X[i, k], axis=[k]), "mx")
    e = te.compute((4, 6), lambda i, j: te.exp(X[i, j] - mx[i]), "e")
    r = te.reduce_axis(6, "r")
    sm = te.compute((4, 6), lambda i, j: e[i, j] / te.sum(e[i, r], axis=[r]), "softmax")
    x = rand(4, 6)
    close(te.evaluate(sm, {X: x}), jax.nn.softmax(x, axis=-1))
    assert [t.name for t in sm.inputs] == ["e"]


def test_matmul_as_compute_and_reduce() -> None:
    A = te.placeholder((5, 7), "float32", "A")
    B = te.placeholder((7, 3), "float32", "B")
    k = te.reduce_axis(7, "k")
    C = te.compute((5, 3), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), "C")
    a, b = rand(5, 7), rand(7, 3)
    close(te.evaluate(C, {A: a, B: b}), jnp.matmul(a, b), rtol=1e-4)
    assert str(C.body) == "sum((A[i, k] * B[k, j]), axis=[k])"


@pytest.mark.parametrize("stride, pad", [(1, 0), (1, 1), (2, 1)])
def test_conv2d_nchw_written_in_te(stride: int, pad: int) -> None:
    n, c, h, w, o, kh, kw = 2, 3, 7, 6, 4, 3, 3
    X = te.placeholder((n, c, h, w), "float32", "X")
    W = te.placeholder((o, c, kh, kw), "float32", "W")
    padded = te.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda b, ch, y, x: te.select(
            (y >= pad) & (y < h + pad) & (x >= pad) & (x < w + pad),
            X[b, ch, y - pad, x - pad], 0.0),
        "padded")
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    out = te.compute(
        (n, o, oh, ow),
        lambda b, f, y, x: te.sum(
            padded[b, rc, y * stride + ry, x * stride + rx] * W[f, rc, ry, rx],
            axis=[rc, ry, rx]),
        "conv2d")
    x, wt = rand(n, c, h, w), rand(o, c, kh, kw)
    expected = jax.lax.conv_general_dilated(
        x, wt, (stride, stride), [(pad, pad), (pad, pad)],
        dimension_numbers=("NCHW", "OIHW", "NCHW"))
    close(te.evaluate(out, {X: x, W: wt}), expected, rtol=1e-4)


def test_conv2d_padding_fused_into_one_compute() -> None:
    X = te.placeholder((1, 2, 5, 5), "float32", "X")
    W = te.placeholder((3, 2, 3, 3), "float32", "W")
    rc, ry, rx = te.reduce_axis(2, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")

    def body(b, f, y, x):
        yy, xx = y + ry - 1, x + rx - 1
        inside = (yy >= 0) & (yy < 5) & (xx >= 0) & (xx < 5)
        return te.sum(te.select(inside, X[b, rc, yy, xx], 0.0) * W[f, rc, ry, rx],
                      axis=[rc, ry, rx])

    out = te.compute((1, 3, 5, 5), body, "conv2d_same")
    x, wt = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    expected = jax.lax.conv_general_dilated(x, wt, (1, 1), "SAME",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))
    close(te.evaluate(out, {X: x, W: wt}), expected, rtol=1e-4)


# ---- construction errors ------------------------------------------------------------


def test_construction_errors_name_the_problem() -> None:
    A = te.placeholder((2, 2), "float32", "A")
    N = te.placeholder((2,), "int32", "N")
    i = te.Var("i")
    with pytest.raises(IRError, match="operand dtypes differ: A\\[i, i\\] is float32, "
                                      "N\\[i\\] is int32; insert a te\\.cast"):
        _ = A[i, i] + N[i]
    with pytest.raises(IRError, match="A has 2 dimension\\(s\\), indexed with 1"):
        _ = A[i]
    with pytest.raises(IRError, match="index \\(A\\[i, i\\] \\* 2\\.0\\) must be an integer"):
        _ = N[A[i, i] * 2.0]
    with pytest.raises(IRError, match="no Python truth value"):
        _ = te.compute((2,), lambda j: A[j, j] if A[j, j] > 0.0 else 0.0)
    with pytest.raises(IRError, match="exp needs a float operand, got int32"):
        te.exp(N[i])
    with pytest.raises(IRError, match="Select: condition"):
        te.select(N[i], 1, 2)
    with pytest.raises(IRError, match="is not a reduce axis"):
        te.sum(N[i], axis=[i])  # type: ignore[list-item]
    with pytest.raises(IRError, match="constant 0\\.5 does not fit dtype int32"):
        _ = N[i] + 0.5


def test_evaluation_errors() -> None:
    A = te.placeholder((3,), "float32", "A")
    k = te.reduce_axis(3, "k")
    leaked = te.compute((3,), lambda i: A[k], "leaked")
    with pytest.raises(IRError, match="reduce axis k is used outside its scope"):
        te.evaluate(leaked, {A: rand(3)})
    B = te.compute((3,), lambda i: A[i] * 2.0, "B")
    with pytest.raises(IRError, match="no array given for placeholder A"):
        te.evaluate(B, {})
    with pytest.raises(IRError, match="placeholder A is float32\\[3\\], given an array of "
                                      "float64\\[3\\]"):
        te.evaluate(B, {A: np.zeros(3)})


def test_free_variables_are_bound_at_evaluation() -> None:
    A = te.placeholder((4,), "float32", "A")
    alpha = te.Var("alpha", "float32")
    Y = te.compute((4,), lambda i: te.select(A[i] > 0.0, A[i], alpha * A[i]), "leaky_relu")
    a = rand(4)
    close(te.evaluate(Y, {A: a}, {alpha: 0.1}), np.where(a > 0, a, np.float32(0.1) * a))


def test_expression_structure() -> None:
    A = te.placeholder((3,), "float32", "A")
    B = te.compute((3,), lambda i: te.cast("float32", i) * A[i], "B")
    assert [ax.name for ax in B.axes] == ["i"] and B.axes[0].extent == 3
    assert str(B.body) == "(float32(i) * A[i])"
    kinds = [type(n).__name__ for n in te.post_order(B.body)]
    assert kinds == ["IterVar", "Cast", "TensorRead", "Mul"]  # the shared i once
    assert repr(B) == "Tensor(B: compute float32[3])"
