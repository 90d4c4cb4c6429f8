"""Calling decorated functions as Python: keyword arguments, NumPy's int64 for Int, Python
lists for relay.List, ADT values built and read in Python, functions for relay.Fn (issue 13,
item 2). This module uses ``from __future__ import annotations``, as many user modules do,
so its @relay.adt declarations are strings until relaydsl evaluates them."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay

Scalar = Tensor[Float, ()]


@pytest.fixture(params=["llvm", "interp"])
def target(request, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", request.param)
    return request.param


@relay
def affine(x: Tensor[Float, ("n",)], w: Tensor[Float, ("n",)], b: Scalar) -> Scalar:
    return relay.sum(x * w) + b


def test_keyword_arguments_bind_by_parameter_name(target):
    x, w = np.arange(3, dtype=np.float32), np.full(3, 0.5, np.float32)
    want = float(jnp.sum(x * w) + 2.0)
    for got in (affine(x, w, np.float32(2)), affine(x, w=w, b=np.float32(2)),
                affine(b=np.float32(2), w=w, x=x)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(TypeError, match="affine\\(\\): got an unexpected keyword argument 'z'"):
        affine(x, w, np.float32(2), z=1.0)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        affine(x, w, np.float32(2), x=x)
    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        affine(x, w=w)


@relay
def count_down(n: Int) -> relay.List[Int]:
    if n <= 0:
        return relay.Nil()
    return relay.Cons(n, count_down(n - 1))


def test_numpy_int64_is_taken_for_int_when_it_fits(target):
    assert repr(count_down(np.int64(3))) == "Cons(3, Cons(2, Cons(1, Nil)))"
    assert repr(count_down(3)) == "Cons(3, Cons(2, Cons(1, Nil)))"
    with pytest.raises(TypeError, match="argument 'n': expected Tensor\\[\\(\\), int32\\], got "
                                        "a NumPy int64 scalar; 4294967296 is out of range"):
        count_down(np.int64(2**32))
    with pytest.raises(TypeError, match="cast it with"):  # a float is not an int
        count_down(np.float32(3))


@relay
def total(xs: relay.List[Scalar]) -> Scalar:
    return relay.foldl(lambda acc, v: acc + v, 0.0, xs)


def test_python_lists_for_relay_list_parameters(target):
    np.testing.assert_allclose(total([1.0, 2.5, 4.0]), 7.5)
    np.testing.assert_allclose(total([np.float32(1), np.float32(2)]), 3.0)
    np.testing.assert_allclose(total([]), 0.0)
    with pytest.raises(TypeError, match=r"argument 'xs'\[1\]: expected Tensor\[\(\), float32\]"):
        total([1.0, np.zeros(2, np.float32)])


def test_adt_values_built_in_python_and_returned_readable(target):
    xs = relay.Cons(1.5, relay.Cons(2.5, relay.Nil()))
    assert repr(xs) == "Cons(1.5, Cons(2.5, Nil))"
    np.testing.assert_allclose(total(xs), 4.0)
    with pytest.raises(TypeError, match=r"relay\.Cons takes 2 field\(s\), got 1"):
        relay.Cons(1.0)


@relay.adt("a")
class BTree:
    Leaf: "a"
    Node: (BTree, BTree)


@relay.adt
class Shape:
    Circle: Scalar
    Rect: (Scalar, Scalar)


@relay
def leaves(t: BTree[Scalar]) -> Scalar:
    match t:
        case BTree.Leaf(v):
            return v
        case BTree.Node(left, right):
            return leaves(left) + leaves(right)


@relay
def area(s: Shape) -> Scalar:
    match s:
        case Shape.Circle(r):
            return 3.0 * r * r
        case Shape.Rect(w, h):
            return w * h


@relay
def mirror(t: BTree[Scalar]) -> BTree[Scalar]:
    match t:
        case BTree.Leaf(v):
            return BTree.Leaf(-v)
        case BTree.Node(left, right):
            return BTree.Node(mirror(right), mirror(left))


def test_user_adts_under_future_annotations_built_and_matched_from_python(target):
    tree = BTree.Node(BTree.Leaf(1.0), BTree.Node(BTree.Leaf(2.0), BTree.Leaf(4.0)))
    assert repr(tree) == "Node(Leaf(1.0), Node(Leaf(2.0), Leaf(4.0)))"
    np.testing.assert_allclose(leaves(tree), 7.0)
    assert repr(mirror(tree)) == "Node(Node(Leaf(-4.0), Leaf(-2.0)), Leaf(-1.0))"
    np.testing.assert_allclose(area(Shape.Rect(2.0, 3.0)), 6.0)
    np.testing.assert_allclose(area(Shape.Circle(1.0)), 3.0)
    with pytest.raises(TypeError, match="argument 's': expected Shape, got"):
        area(tree)


@relay
def twice(g: relay.Fn[[Scalar], Scalar], x: Scalar) -> Scalar:
    return g(g(x))


@relay
def inc(x: Scalar) -> Scalar:
    return x + 1.0


@relay
def adder(k: Scalar) -> relay.Fn[[Scalar], Scalar]:
    return lambda v: v + k


def test_functions_for_relay_fn_parameters(target):
    np.testing.assert_allclose(twice(inc, np.float32(1)), 3.0)
    np.testing.assert_allclose(twice(x=np.float32(2), g=inc), 4.0)
    np.testing.assert_allclose(twice(relay.tanh, np.float32(0.5)),
                               jnp.tanh(jnp.tanh(0.5)), rtol=1e-6)
    add3 = adder(np.float32(3))  # a closure a program returned goes back into one
    np.testing.assert_allclose(add3(np.float32(1)), 4.0)
    np.testing.assert_allclose(twice(add3, np.float32(1)), 7.0)
    with pytest.raises(TypeError, match="argument 'g': expected fn\\(Tensor\\[\\(\\), float32\\]"
                                        "\\) -> Tensor\\[\\(\\), float32\\], got a function; "
                                        "pass a @relay function or a relay operator"):
        twice(lambda v: v + 1, np.float32(1))
    with pytest.raises(TypeError, match="fn\\(Tensor\\[\\(3,\\), float32\\]\\)"):
        twice(vector_inc, np.float32(1))


@relay
def vector_inc(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
    return x + 1.0
