"""@relay translation of each construct: run on the interpreter, compared with jax.numpy.

Each test writes a decorated function and the same computation in (un-jitted) jax.numpy,
runs both on the same arguments and compares the results. Errors are in test_errors.py;
decorating, calling and the compiler's views in test_decorators.py.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaydsl import Bool, Float, Float64, Int, Tensor, relay
from relaydsl.errors import DSLSyntaxError, RelayTypeError
from relaydsl.ir.types import FuncType, Kind, TensorType, TupleType, TypeVar

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def assert_same(got, want, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """`got` (our result) equals `want` (jax's): same structure, dtype and values."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol, atol)
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), f"expected a numpy array, got {type(got).__name__}"
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def check(fn, reference, *args, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Run the decorated `fn` and the jax `reference` on `args` and compare."""
    jax_args = [tuple(map(jnp.asarray, a)) if isinstance(a, tuple) else jnp.asarray(a)
                for a in args]
    assert_same(fn(*args), reference(*jax_args), rtol, atol)


# ---- assignments ---------------------------------------------------------------------------


def test_assignments_augmented_unpacking_annotated_locals_docstring_and_pass():
    @relay
    def f(x: Tensor[Float, 3], y: Tensor[Float, 3]) -> Tensor[Float, 3]:
        """A docstring is ignored."""
        a = x + y
        a += 1.0
        a *= y
        a, b = b_first(a, y)
        z: Tensor[Float, 3] = a * b
        z -= 2.0
        z /= 4.0
        return z

    @relay
    def b_first(a: Tensor[Float, 3], b: Tensor[Float, 3]) -> tuple[Tensor[Float, 3],
                                                                      Tensor[Float, 3]]:
        a, b = b, a
        return a, b

    def reference(x, y):
        a = (x + y + 1.0) * y
        a, b = y, a
        return (a * b - 2.0) / 4.0

    check(f, reference, rand(3), rand(3))


def test_augmented_assignment_with_every_operator():
    @relay
    def f(x: Tensor[Float, (2, 2)], w: Tensor[Float, (2, 2)]) -> Tensor[Float, (2, 2)]:
        x += w
        x -= 0.5
        x *= w
        x /= 2.0
        x **= 2.0
        x @= w
        return x

    def reference(x, w):
        return ((((x + w) - 0.5) * w / 2.0) ** 2.0) @ w

    check(f, reference, rand(2, 2), rand(2, 2))


def test_nested_tuple_unpacking_and_swap():
    @relay
    def f(x: Tensor[Float, 2], y: Tensor[Float, 2]) -> Tensor[Float, 2]:
        a, (b, c) = x, (y, x * y)
        a, b = b, a
        return a - b + c

    check(f, lambda x, y: y - x + x * y, rand(2), rand(2))


def test_rebinding_a_name_makes_a_new_variable():
    @relay
    def f(x: Tensor[Float, 2]) -> Tensor[Float, 2]:
        y = x * 2.0
        first = y
        y = y + 1.0
        return first * y

    check(f, lambda x: (x * 2.0) * (x * 2.0 + 1.0), rand(2))
    assert "let %y = " in f.astext() and "let %y_1 = " in f.astext()


# ---- if / elif / else ------------------------------------------------------------------------


@relay
def sign_and_scale(x: Tensor[Float, 3], c: Int) -> tuple[Tensor[Float, 3], Tensor[Float, 3]]:
    scale = x
    if c > 0:
        sign = x * 0.0 + 1.0
        scale = x * 2.0
    elif c < 0:
        sign = x * 0.0 - 1.0
    else:
        sign = x * 0.0
        scale = scale + 10.0
    return sign, scale


def sign_and_scale_reference(x, c):
    if c > 0:
        return x * 0.0 + 1.0, x * 2.0
    if c < 0:
        return x * 0.0 - 1.0, x
    return x * 0.0, x + 10.0


@pytest.mark.parametrize("c", [-3, 0, 4])
def test_if_elif_else_joins_the_names_assigned_in_branches(c):
    x = rand(3)
    check(sign_and_scale, lambda x, _: sign_and_scale_reference(x, c), x, np.int32(c))


def test_if_without_else_keeps_the_previous_value():
    @relay
    def f(x: Tensor[Float, 2], c: Bool) -> Tensor[Float, 2]:
        if c:
            x = x * 3.0
        return x + 1.0

    for c in (True, False):
        check(f, lambda x, _, c=c: (x * 3.0 if c else x) + 1.0, rand(2), np.bool_(c))


@relay
def clamp_early(x: Float) -> Float:
    if x > 1.0:
        return 1.0 + 0.0 * x
    if x < -1.0:
        y = -1.0
        return y
    doubled = x * 2.0
    return doubled / 2.0


@pytest.mark.parametrize("x", [-3.0, -0.5, 0.25, 7.0])
def test_return_in_a_branch_then_code_after(x):
    check(clamp_early, lambda x: jnp.clip(x, -1.0, 1.0), np.float32(x))


@pytest.mark.parametrize("c", [True, False])
def test_return_in_both_branches(c):
    @relay
    def f(x: Tensor[Float, 2], c: Bool) -> Tensor[Float, 2]:
        if c:
            return x + 1.0
        else:
            return x - 1.0

    check(f, lambda x, _: x + 1.0 if c else x - 1.0, rand(2), c)


@pytest.mark.parametrize("x", [0.5, 3.0, 30.0])
def test_nested_if_with_a_return_inside_a_joining_branch(x):
    @relay
    def f(x: Float) -> Float:
        if x > 1.0:
            x = x * 2.0
            if x > 10.0:
                return x * 0.0
        else:
            x = x - 1.0
        return x + 0.5

    def reference(x):
        if x > 1.0:
            x = x * 2.0
            if x > 10.0:
                return x * 0.0
        else:
            x = x - 1.0
        return x + 0.5

    check(f, reference, np.float32(x))


def test_conditional_expression():
    @relay
    def f(x: Tensor[Float, 3], c: Bool) -> Tensor[Float, 3]:
        y = x * 2.0 if c else -x
        return (y if relay.sum(y) > 0.0 else y * 0.0) + (1.0 if c else 2.0)

    def reference(x, c):
        y = x * 2.0 if c else -x
        return (y if jnp.sum(y) > 0.0 else y * 0.0) + (1.0 if c else 2.0)

    for c in (True, False):
        check(f, lambda x, _, c=c: reference(x, c), rand(3), c)


# ---- for and while -------------------------------------------------------------------------


def test_for_over_range_of_a_python_int():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        for i in range(4):
            x = x * 0.5 + relay.cast(i, dtype="float32")
        return x

    def reference(x):
        for i in range(4):
            x = x * 0.5 + i
        return x

    check(f, reference, rand(3))


@pytest.mark.parametrize("n", [0, 1, 5])
def test_the_trip_count_comes_from_an_int_argument(n):
    @relay
    def f(x: Tensor[Float, 2], n: Int) -> Tensor[Float, 2]:
        total = x * 0.0
        for i in range(n):
            total = total + x * relay.cast(i, dtype="float32")
        return total

    check(f, lambda x, _: x * sum(range(n)), rand(2), np.int32(n))


@relay
def range_forms(a: Int, b: Int) -> tuple[Int, Int, Int, Int]:
    up = 0
    for i in range(a, b):
        up = up * 3 + i
    by_two = 0
    for i in range(a, b, 2):
        by_two = by_two * 3 + i
    down = 0
    for i in range(b, a, -2):
        down = down * 3 + i
    literal = 0
    for i in range(10, 0, -3):
        literal = literal * 3 + i
    return up, by_two, down, literal


def range_forms_reference(a: int, b: int) -> tuple:
    out = []
    for bounds in ((a, b), (a, b, 2), (b, a, -2), (10, 0, -3)):
        acc = 0
        for i in range(*bounds):
            acc = acc * 3 + i
        out.append(jnp.int32(acc))
    return tuple(out)


@settings(max_examples=25, deadline=None)
@given(st.integers(-6, 6), st.integers(-6, 6))
def test_range_with_start_stop_and_positive_or_negative_steps(start, stop):
    check(range_forms, lambda *_: range_forms_reference(start, stop), np.int32(start),
          np.int32(stop))


def test_for_over_the_first_axis_of_a_tensor():
    @relay
    def f(x: Tensor[Float, (4, 3)]) -> Tensor[Float, 3]:
        acc = relay.zeros(shape=(3,), dtype="float32")
        for row in x:
            acc = acc * 0.5 + row
        return acc

    def reference(x):
        acc = jnp.zeros(3, jnp.float32)
        for row in x:
            acc = acc * 0.5 + row
        return acc

    check(f, reference, rand(4, 3))


def test_for_unpacking_the_rows_of_a_tuple_of_tensors():
    @relay
    def f(data: tuple[Tensor[Float, (5, 3)], Tensor[Float, (5, 2)]]) -> Float:
        loss = 0.0
        for x, y in data:
            loss = loss + relay.sum(x) * relay.sum(y * y)
        return loss

    def reference(data):
        return sum(jnp.sum(x) * jnp.sum(y * y) for x, y in zip(*data))

    check(f, reference, (rand(5, 3), rand(5, 2)))


def test_for_over_a_relay_list_built_with_cons_or_a_list_literal():
    @relay
    def f(a: Tensor[Float, 3], b: Tensor[Float, 3]) -> Tensor[Float, 3]:
        acc = a * 0.0
        for v in relay.Cons(a, relay.Cons(b, relay.Nil())):
            acc = acc * 2.0 + v
        for v in [b, a, b]:
            acc = acc - v
        return acc

    check(f, lambda a, b: (a * 2.0 + b) - b - a - b, rand(3), rand(3))


def test_for_over_the_result_of_relay_map():
    @relay
    def f(a: Tensor[Float, 3], b: Tensor[Float, 3]) -> Tensor[Float, 3]:
        acc = a * 0.0
        for v in relay.map(lambda t: t * 2.0, [a, b]):
            acc = acc + v
        for v in relay.map(relay.tanh, [a, b]):
            acc = acc + v
        return acc

    check(f, lambda a, b: 2.0 * (a + b) + jnp.tanh(a) + jnp.tanh(b), rand(3), rand(3))


@pytest.mark.parametrize("x", [0.3, 5.0, 200.0])
def test_while_with_a_tensor_condition(x):
    @relay
    def f(x: Float) -> tuple[Float, Int]:
        steps = 0
        while x < 100.0:
            x = x * 3.0
            steps += 1
        return x, steps

    def reference(x):
        steps = 0
        while x < 100.0:
            x, steps = x * 3.0, steps + 1
        return x, jnp.int32(steps)

    check(f, reference, np.float32(x))


def test_while_swapping_two_state_variables():
    @relay
    def fib_pair(n: Int) -> Int:
        a, b = 0, 1
        i = 0
        while i < n:
            a, b = b, a + b
            i += 1
        return a

    assert [int(fib_pair(n)) for n in range(8)] == [0, 1, 1, 2, 3, 5, 8, 13]


def test_nested_loops_and_an_if_in_a_loop():
    @relay
    def f(x: Tensor[Float, (3, 4)], n: Int) -> Float:
        acc = 0.0
        for i in range(n):
            for row in x:
                for j in range(i):
                    acc = acc + relay.sum(row) * relay.cast(j, dtype="float32")
            if i > 1:
                acc = acc * 0.5
            else:
                acc = acc + 1.0
        return acc

    def reference(x, n):
        acc = jnp.float32(0.0)
        for i in range(n):
            for row in x:
                for j in range(i):
                    acc = acc + jnp.sum(row) * j
            acc = acc * 0.5 if i > 1 else acc + 1.0
        return acc

    check(f, lambda x, _: reference(x, 4), rand(3, 4), np.int32(4))


def test_a_name_first_assigned_in_a_loop_body_can_be_reassigned_after_it():
    @relay
    def f(x: Tensor[Float, 2]) -> Tensor[Float, 2]:
        for i in range(3):
            t = x * 2.0
            x = t
        t = x + 1.0
        return t

    check(f, lambda x: x * 8.0 + 1.0, rand(2))


# ---- functions -------------------------------------------------------------------------------


def test_nested_def_and_lambda_close_over_enclosing_lets():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        k = x * 2.0

        def add_k(y):
            return y + k

        times_k = lambda y: y * k  # noqa: E731
        return add_k(times_k(x)) + k

    def reference(x):
        k = x * 2.0
        return (x * k + k) + k

    check(f, reference, rand(3))


def test_nested_recursive_def_and_a_closure_returning_a_closure():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        def power_of_two(n, y):
            if n <= 0:
                return y
            return power_of_two(n - 1, y * 2.0)

        def adder(k):
            return lambda y: y + k

        add_x = adder(x)
        return add_x(power_of_two(3, x))

    check(f, lambda x: x * 8.0 + x, rand(3))


def test_nested_def_with_annotations_and_a_tuple_result():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        def halves(y: Tensor[Float, 3]) -> tuple[Tensor[Float, 3], Tensor[Float, 3]]:
            return y * 0.5, y - y * 0.5

        return halves(x)[0] + halves(x)[1] * 3.0

    check(f, lambda x: x * 0.5 + x * 0.5 * 3.0, rand(3))


def test_unused_nested_functions_with_unannotated_parameters_are_accepted():
    # issue 11, item 16: Python accepts a nested function it never calls; nothing fixes the
    # types of its parameters, so it was rejected ("cast_like: ... underconstrained").
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        def unused(y):
            return y * 2.0

        def calls_unused(y, z):
            return unused(relay.tanh(y)) * z

        ignored = lambda y: y + 1.0  # noqa: E731
        lambda y: y - 1.0  # a statement of its own
        for _ in range(2):
            def in_loop(y):
                return relay.exp(y)

            x = x + 1.0
        return x * 3.0

    check(f, lambda x: (x + 2.0) * 3.0, rand(3))


def test_a_helper_defined_in_every_branch_joins_only_when_read_after_the_branch():
    @relay
    def unread(x: Tensor[Float, 3], c: Bool) -> Tensor[Float, 3]:
        if c:
            def g(y):
                return y + 1.0
        else:
            def g(y):
                return y * 2.0
        return x * 3.0

    @relay
    def read_after_the_outer_branch(x: Tensor[Float, 3], a: Bool, b: Bool) -> Tensor[Float, 3]:
        if a:
            if b:
                def g(y):
                    return y + 1.0
            else:
                def g(y):
                    return y * 2.0
            k = 1.0
        else:
            def g(y):
                return y - 1.0
            k = 2.0
        return g(x) * k

    x = rand(3)
    for c in (True, False):
        np.testing.assert_allclose(unread(x, c), x * 3.0, rtol=1e-6)
    for a, b, want in [(True, True, (x + 1.0) * 1.0), (True, False, x * 2.0),
                       (False, True, (x - 1.0) * 2.0), (False, False, (x - 1.0) * 2.0)]:
        np.testing.assert_allclose(read_after_the_outer_branch(x, a, b), want, rtol=1e-6)


@relay
def factorial(n: Int) -> Int:
    if n <= 1:
        return 1
    return n * factorial(n - 1)


@relay
def fibonacci(n: Int) -> Int:
    if n < 2:
        return n
    else:
        return fibonacci(n - 1) + fibonacci(n - 2)


def test_recursion_factorial_and_fibonacci():
    assert [int(factorial(n)) for n in range(7)] == [1, 1, 2, 6, 24, 120, 720]
    assert [int(fibonacci(n)) for n in range(10)] == [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]


@relay
def is_even(n: Int) -> Bool:
    if n == 0:
        return True
    return is_odd(n - 1)  # defined below


@relay
def is_odd(n: Int) -> Bool:
    if n == 0:
        return False
    return is_even(n - 1)


def test_mutual_recursion_in_either_order():
    assert [bool(is_even(n)) for n in range(6)] == [True, False, True, False, True, False]
    assert [bool(is_odd(n)) for n in range(6)] == [False, True, False, True, False, True]


@relay
def row_sums(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 1)]:
    return relay.sum(x, axis=1, keepdims=True)


def test_a_polymorphic_function_called_at_two_shapes():
    @relay
    def f(a: Tensor[Float, (2, 3)], b: Tensor[Float, (4, 3)]) -> Tensor[Float, (6, 1)]:
        return relay.concatenate((row_sums(a), row_sums(b)), axis=0)

    def reference(a, b):
        return jnp.concatenate([a.sum(1, keepdims=True), b.sum(1, keepdims=True)], axis=0)

    check(f, reference, rand(2, 3), rand(4, 3))
    n = row_sums.checked_type.type_params[0]
    assert row_sums.checked_type == FuncType(
        (TensorType((n, 3), "float32"),), TensorType((n, 1), "float32"), (n,))
    assert n.kind is Kind.Shape


def test_calling_a_decorated_function_that_returns_a_tuple_and_indexing_it():
    @relay
    def pair(x: Tensor[Float, 3]) -> tuple[Tensor[Float, 3], tuple[Tensor[Float, 3], Float]]:
        return x, (x * 2.0, relay.sum(x))

    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return pair(x)[1][0] + pair(x)[-1][-1] + pair(x)[0]

    check(f, lambda x: x * 2.0 + jnp.sum(x) + x, rand(3))


# ---- operators ---------------------------------------------------------------------------------


def test_relay_operators_with_keyword_attributes():
    @relay
    def f(x: Tensor[Float, (2, 6)], img: Tensor[Float, (1, 2, 5, 5)],
          w: Tensor[Float, (4, 2, 3, 3)]):
        return (relay.sum(x, axis=1, keepdims=True),
                relay.transpose(x, axes=(1, 0)),
                relay.reshape(x, newshape=(3, 4)),
                relay.conv2d(img, w, strides=(2, 2), padding=(1, 1)),
                relay.softmax(x, axis=0),
                relay.concatenate((x, x * 2.0), axis=1),
                relay.split(x, indices_or_sections=3, axis=1)[0],
                relay.split(x, indices_or_sections=(1, 4), axis=1)[-1],
                relay.matmul(x, relay.transpose(x)))

    def reference(x, img, w):
        conv = jax.lax.conv_general_dilated(img, w, window_strides=(2, 2),
                                            padding=((1, 1), (1, 1)))
        return (jnp.sum(x, axis=1, keepdims=True), x.T, x.reshape(3, 4), conv,
                jax.nn.softmax(x, axis=0), jnp.concatenate([x, x * 2.0], axis=1),
                jnp.split(x, 3, axis=1)[0], jnp.split(x, [1, 4], axis=1)[-1], x @ x.T)

    check(f, reference, rand(2, 6), rand(1, 2, 5, 5), rand(4, 2, 3, 3), rtol=1e-4, atol=1e-5)


AXIS = 1
NEW_SHAPE = (3, 2)


def test_attributes_may_be_module_constants_and_arithmetic_on_them():
    @relay
    def f(x: Tensor[Float, (2, 3)]) -> tuple[Tensor[Float, 2], Tensor[Float, (3, 2)]]:
        return relay.sum(x, axis=AXIS), relay.reshape(x, newshape=(NEW_SHAPE[0], 2 * AXIS))

    check(f, lambda x: (x.sum(AXIS), x.reshape(NEW_SHAPE)), rand(2, 3))


def test_python_operators():
    @relay
    def f(x: Tensor[Float, (2, 3)], y: Tensor[Float, (2, 3)], w: Tensor[Float, (3, 4)]):
        return x + y, x - y, x * y, x / (y * y + 1.0), x @ w, (x * x) ** 1.5, -x, +x, -(x @ w)

    def reference(x, y, w):
        return x + y, x - y, x * y, x / (y * y + 1.0), x @ w, (x * x) ** 1.5, -x, +x, -(x @ w)

    check(f, reference, rand(2, 3), rand(2, 3), rand(3, 4), rtol=1e-4)


def test_python_numbers_are_folded_and_take_the_tensors_dtype():
    @relay
    def f(x: Tensor[Float, 3], n: Tensor[Int, 3]) -> tuple[Tensor[Float, 3], Tensor[Int, 3]]:
        return x * (1.0 / 3.0) + 2 ** 3 - (-1), n * (7 // 2) + 10 % 4 - (1 << 2)

    def reference(x, n):
        return x * (1.0 / 3.0) + 8.0 + 1.0, n * 3 + 2 - 4

    check(f, reference, rand(3), np.arange(3, dtype=np.int32))


def test_comparisons_including_chained_ones_inside_where():
    @relay
    def f(x: Tensor[Float, 6], y: Tensor[Float, 6]):
        inside = relay.where(-0.5 < x < 0.5, x, y)
        return (inside, x == y, x != y, x <= y, x >= y, x > y,
                relay.where(x < y <= 1.0, 1.0 + 0.0 * x, 0.0 * x))

    def reference(x, y):
        inside = jnp.where((x > -0.5) & (x < 0.5), x, y)
        return (inside, x == y, x != y, x <= y, x >= y, x > y,
                jnp.where((x < y) & (y <= 1.0), 1.0, 0.0).astype(jnp.float32))

    x = np.array([-1.0, -0.2, 0.0, 0.4, 0.7, 2.0], np.float32)
    check(f, reference, x, np.where(np.arange(6) % 2 == 0, x, np.float32(0.9)))


def test_and_or_not_on_bool_tensors():
    @relay
    def f(a: Tensor[Bool, 4], b: Tensor[Bool, 4], c: Tensor[Bool, 4]):
        return a and b, a or b, not a, a and b and c, (a or not b) and c

    def reference(a, b, c):
        return a & b, a | b, ~a, a & b & c, (a | ~b) & c

    a, b, c = (np.array(v, bool) for v in ([1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]))
    check(f, reference, a, b, c)


# ---- indexing ----------------------------------------------------------------------------------


def test_tensor_indexing_and_constant_slices():
    @relay
    def f(x: Tensor[Float, (4, 3)], i: Int):
        return (x[1], x[-1], x[i], x[1:3], x[:, 0], x[::2], x[1:, :2], x[-1, -1], x[::-1],
                x[i, 1:], x[:, i], x[-3:-1, ::-2])

    def reference(x, i):
        return (x[1], x[-1], x[i], x[1:3], x[:, 0], x[::2], x[1:, :2], x[-1, -1], x[::-1],
                x[i, 1:], x[:, i], x[-3:-1, ::-2])

    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for i in (0, 2):
        check(f, reference, x, np.int32(i))


def test_indexing_an_op_result_follows_its_attributes_tuple_or_tensor():
    # topk gives a (values, indices) pair, or with ret_type="values" one tensor whose [0] is a row
    @relay
    def f(x: Tensor[Float, (3, 5)]):
        return relay.topk(x, k=2)[0][1], relay.topk(x, k=2, ret_type="values")[0]

    def reference(x):
        return jax.lax.top_k(x, 2)[0][1], jax.lax.top_k(x, 2)[0][0]

    check(f, reference, rand(3, 5))


def test_tuple_indexing_positive_negative_and_nested():
    @relay
    def f(x: Tensor[Float, 2], t: tuple[Tensor[Float, 2], tuple[Float, Tensor[Float, 2]]]):
        mine = (x, (x * 2.0, x * 3.0))
        return mine[1][0] + mine[-1][-1] + mine[0] + t[1][1] * t[-1][0] + t[0]

    def reference(x, t):
        return x * 2.0 + x * 3.0 + x + t[1][1] * t[1][0] + t[0]

    x, a, s, b = rand(2), rand(2), np.float32(3.0), rand(2)
    assert_same(f(x, (a, (s, b))), reference(jnp.asarray(x), (a, (s, b))))


def test_indexing_a_parameter_of_unknown_kind_projects_a_tuple_and_takes_a_tensors_row():
    # Nothing says what an unannotated parameter is when `p[0]` is translated: type inference
    # does, a tuple's field for a tuple, a row for a tensor (issue 22, item 7).
    @relay
    def f(pairs: relay.List[tuple[Float, Tensor[Float, 3]]], rows: Tensor[Float, (4, 3)],
          init: Float):
        def weighted(p):
            return p[-1] * p[0]

        total = relay.foldr(lambda p, acc: p[0] + acc, init, pairs)
        weighted_sum = relay.foldl(lambda acc, p: acc + weighted(p), rows[0] * 0.0, pairs)
        ends = (lambda m: m[0] + m[-1])(rows)
        nested = (lambda q: q[1][2] * q[0])((init, rows))
        return total, weighted_sum, ends, nested

    scales, vectors, rows = rand(3), rand(3, 3), rand(4, 3)
    init = np.float32(0.5)
    pairs = [(s, v) for s, v in zip(scales, vectors)]
    want = (init + scales.sum(), (scales[:, None] * vectors).sum(0), rows[0] + rows[-1],
            rows[2] * init)
    for target in ("llvm", "interp"):
        assert_same(f.build(target)(pairs, rows, init), want)
    text = f.astext()
    assert "%p.0" in text and "getitem" not in text  # resolved before anything else runs


# ---- constants from the enclosing Python scope -------------------------------------------------

WEIGHTS = np.array([0.5, -1.0, 2.0], np.float32)
OFFSET = 3
HALF = np.float32(0.5)


def test_module_numbers_arrays_and_numpy_scalars_become_constants():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return x * WEIGHTS + OFFSET - HALF

    check(f, lambda x: x * WEIGHTS + OFFSET - HALF, rand(3))
    text = f.astext()
    assert "multiply(%x, meta[Constant][0])" in text and '"data": [0.5, -1.0, 2.0]' in text
    assert "0.5f" in text  # the numpy float32 scalar


def test_closure_variables_become_constants_in_a_nested_decorated_function():
    local = np.arange(3, dtype=np.float32)
    scale = 1.5

    def make():
        @relay
        def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
            return x * local + scale

        return f

    check(make(), lambda x: x * local + scale, rand(3))


def test_a_float_literal_with_a_float64_tensor_keeps_float64_precision():
    @relay
    def f(x: Tensor[Float64, 3]) -> Tensor[Float64, 3]:
        return x * 0.1 + 1 / 3

    x = np.array([1.0, 2.0, 3.0])
    got = f(x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, x * 0.1 + 1 / 3, rtol=1e-15)


def test_integer_literals_beyond_int32_meet_a_float_tensor_exactly():
    @relay
    def f(x: Tensor[Float64, 2]) -> Tensor[Float64, 2]:
        return x + 2 ** 40

    np.testing.assert_array_equal(f(np.zeros(2)), np.full(2, 2.0 ** 40))


def test_a_number_takes_the_dtype_of_the_tensor_it_meets_in_elementwise_operators_only():
    @relay
    def f(x: Tensor[Float64, 3], c: Tensor[Bool, 3], i: Int):
        return (relay.where(c, x, 0.5), relay.where(c, 2, x), relay.take(x, 1, axis=0),
                relay.maximum(x, 1) + relay.minimum(0.25, x), x[i] * 1.5, (x, 1.5, True))

    def reference(x, c, i):
        return (np.where(c, x, 0.5), np.where(c, 2.0, x), x[1],
                np.maximum(x, 1.0) + np.minimum(0.25, x), x[i] * 1.5,
                (x, np.float32(1.5), np.bool_(True)))

    x, c = np.array([0.1, 2.0, -3.0]), np.array([True, False, True])
    assert_same(f(x, c, 2), reference(x, c, 2), rtol=1e-15)


def test_numbers_in_a_conditional_expression_keep_their_own_dtype():
    @relay
    def fact(n: Int) -> Int:
        return 1 if n < 2 else n * fact(n - 1)

    assert int(fact(6)) == 720


def own_text(fn) -> str:
    """The printed definition of `fn` alone, out of its module's text."""
    text = fn.astext()
    start = text.index(f"def @{fn.global_var.name_hint}(")
    end = text.find("\ndef @", start)
    return text[start:] if end < 0 else text[start:end]


def test_an_operand_meeting_a_number_is_computed_once():
    @relay
    def f(n: Int) -> tuple[Int, Bool, Int]:
        total = 0
        for i in range(fibonacci(n) - 1):
            total = total + i
        return fibonacci(n) + 1, 0 < fibonacci(n) < 100, total

    assert own_text(f).count(f"@{fibonacci.global_var.name_hint}(") == 3
    assert [int(v) for v in f(10)] == [56, True, sum(range(54))]


# ---- types ------------------------------------------------------------------------------------


def test_checked_type_of_a_function_with_tuple_params_and_no_return_annotation():
    @relay
    def f(p: tuple[Tensor[Float, (2, 3)], Int], b: Bool):
        return p[0] * 2.0, b

    t2x3 = TensorType((2, 3), "float32")
    assert f.checked_type == FuncType(
        (TupleType((t2x3, TensorType((), "int32"))), TensorType((), "bool")),
        TupleType((t2x3, TensorType((), "bool"))))


def test_symbolic_dims_are_shape_type_variables_of_the_function():
    @relay
    def f(x: Tensor[Float, ("n", "m")], y: Tensor[Float, ("m", "n")]) -> Tensor[Float, ("n", "n")]:
        return x @ y

    t = f.checked_type
    n, m = t.arg_types[0].shape
    assert isinstance(n, TypeVar) and isinstance(m, TypeVar) and set(t.type_params) == {n, m}
    assert t.arg_types[1] == TensorType((m, n), "float32")
    assert t.ret_type == TensorType((n, n), "float32")
    check(f, lambda x, y: x @ y, rand(2, 5), rand(5, 2))


def test_annotated_local_is_checked_against_its_value():
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        y: Tensor[Float, 4] = x
        return x

    with pytest.raises(RelayTypeError):
        relay(f)  # when it is decorated


# ---- mutually recursive nested functions (issue 13, item 5) -----------------------------------

@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_nested_functions_that_call_each_other(target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)

    @relay
    def parity_scale(x: Tensor[Float, 3], n: Int) -> Tensor[Float, 3]:
        def even(k, v):
            return odd(k - 1, v * 2.0) if k > 0 else v

        def odd(k, v):
            return even(k - 1, v + 1.0) if k > 0 else -v

        return even(n, x)

    def reference(n, v):
        funcs = {}
        funcs["even"] = lambda k, v: funcs["odd"](k - 1, v * 2.0) if k > 0 else v
        funcs["odd"] = lambda k, v: funcs["even"](k - 1, v + 1.0) if k > 0 else -v
        return funcs["even"](n, v)

    x = rand(3)
    for n in (0, 1, 4, 5):
        np.testing.assert_allclose(parity_scale(x, n), reference(n, x), rtol=1e-6)


def test_a_cycle_of_three_nested_functions_capturing_a_variable():
    @relay
    def cycle(x: Tensor[Float, 3], n: Int) -> Tensor[Float, 3]:
        step = x * 0.5

        def a(k, v):
            return b(k - 1, v + step) if k > 0 else v

        def b(k, v):
            return c(k - 1, v * 2.0) if k > 0 else v

        def c(k, v):
            return a(k - 1, v - 1.0) if k > 0 else v

        return a(n, x)

    x = rand(3)
    v = x.copy()
    for k, f in zip(range(7), [lambda v: v + x * 0.5, lambda v: v * 2.0, lambda v: v - 1.0] * 3):
        v = f(v)
    np.testing.assert_allclose(cycle(x, 7), v, rtol=1e-5)


def test_mutually_recursive_nested_functions_need_the_same_parameters():
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        def g(v):
            return h(v, 1.0)

        def h(v, w):
            return g(v * w)

        return g(x)

    with pytest.raises(DSLSyntaxError, match="the mutually recursive nested functions g, h take "
                                             "different numbers of parameters"):
        relay(f)
