"""Gradients over ADT values (issue 14, item 2): ADTs whose constructors declare tensor fields,
passed in from Python or built inside the differentiated code, and lists of tensors, against
jax.grad of the same functions on JAX pytrees. The gradient with respect to a tree is a tree of
gradients, as in JAX. Training a tree model: tests/frontend/test_tree_training.py."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay

rng = np.random.default_rng(0)


@pytest.fixture(params=["llvm", "interp"])
def target(request, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", request.param)
    return request.param


def randn(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@relay.adt
class STree:
    Leaf: Tensor[Float, (1, 4)]
    Node: (STree, STree)


def pytree(t):
    """An STree value as the JAX pytree the reference functions take: a leaf's array, or the
    pair of the subtrees."""
    if t.name == "Leaf":
        return t.fields[0]
    return tuple(pytree(f) for f in t.fields)


def assert_trees_close(actual, expected, **tolerances) -> None:
    assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(a, e, **tolerances)


@relay
def tree_tanh_sum(t: STree, w: Tensor[Float, (4, 3)]) -> Float:
    match t:
        case STree.Leaf(x):
            return relay.sum(relay.tanh(relay.matmul(x, w)))
        case STree.Node(left, right):
            return tree_tanh_sum(left, w) + tree_tanh_sum(right, w)


def jax_tree_tanh_sum(t, w):
    if isinstance(t, tuple):
        return jax_tree_tanh_sum(t[0], w) + jax_tree_tanh_sum(t[1], w)
    return jnp.sum(jnp.tanh(t @ w))


def test_the_gradient_of_a_tree_passed_in_from_python_is_a_tree_of_gradients(target):
    tree = STree.Node(STree.Leaf(randn(1, 4)),
                      STree.Node(STree.Leaf(randn(1, 4)), STree.Leaf(randn(1, 4))))
    w = randn(4, 3)
    value, (d_tree, d_w) = relay.grad(tree_tanh_sum)(tree, w)
    expected, (e_tree, e_w) = jax.value_and_grad(jax_tree_tanh_sum, argnums=(0, 1))(
        pytree(tree), w)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    assert repr(d_tree).startswith("Node(Leaf(")  # readable, the argument's structure
    assert_trees_close(pytree(d_tree), e_tree, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d_w, e_w, rtol=1e-5, atol=1e-6)


@relay
def slope_norm(t: STree, w: Tensor[Float, (4, 3)]) -> Float:
    g = relay.grad(tree_tanh_sum)(t, w)[1][1]
    return relay.sum(g * g)


def test_grad_of_grad_over_a_tree_passed_in_from_python(target):
    tree, w = STree.Node(STree.Leaf(randn(1, 4)), STree.Leaf(randn(1, 4))), randn(4, 3)
    value, (d_tree, d_w) = relay.grad(slope_norm)(tree, w)

    def jax_slope_norm(t, w):
        return jnp.sum(jax.grad(jax_tree_tanh_sum, argnums=1)(t, w) ** 2)

    expected, (e_tree, e_w) = jax.value_and_grad(jax_slope_norm, argnums=(0, 1))(
        pytree(tree), w)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    assert_trees_close(pytree(d_tree), e_tree, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(d_w, e_w, rtol=1e-4, atol=1e-5)


@relay
def ignores_the_tree(t: STree, x: Tensor[Float, (1, 4)]) -> Float:
    return relay.sum(x * x)


def test_a_tree_argument_the_function_does_not_use_gets_a_tree_of_zeros(target):
    # straight-line code: at opt_level 3 the first-order transform would take it, but it has
    # no zero adjoint for an ADT; the higher-order transform does
    x = randn(1, 4)
    value, (d_tree, d_x) = relay.grad(ignores_the_tree)(STree.Node(STree.Leaf(x), STree.Leaf(x)), x)
    np.testing.assert_allclose(value, np.sum(x * x), rtol=1e-6)
    assert_trees_close(pytree(d_tree), (np.zeros_like(x), np.zeros_like(x)))
    np.testing.assert_allclose(d_x, 2 * x, rtol=1e-6)


@relay
def fold_tanh(xs: relay.List[Tensor[Float, (1, 4)]], w: Tensor[Float, (4, 4)]) -> Float:
    h = relay.foldl(lambda h, x: relay.tanh(relay.matmul(h, w) + x), relay.zeros((1, 4)), xs)
    return relay.sum(h * h)


def jax_fold_tanh(xs, w):
    h = jnp.zeros((1, 4))
    for x in xs:
        h = jnp.tanh(h @ w + x)
    return jnp.sum(h * h)


def test_the_gradient_of_a_relay_list_is_a_relay_list_of_gradients(target):
    xs, w = [randn(1, 4) for _ in range(3)], randn(4, 4) * 0.5
    expected, (e_xs, e_w) = jax.value_and_grad(jax_fold_tanh, argnums=(0, 1))(xs, w)
    grad = relay.grad(fold_tanh)
    as_cons = relay.Cons(xs[0], relay.Cons(xs[1], relay.Cons(xs[2], relay.Nil())))
    for argument in (xs, as_cons):  # a Python list, or the list built with the public API
        value, (d_xs, d_w) = grad(argument, w)
        np.testing.assert_allclose(value, expected, rtol=1e-5)
        items = []
        while d_xs.name == "Cons":
            items.append(d_xs.fields[0])
            d_xs = d_xs.fields[1]
        assert d_xs.name == "Nil" and len(items) == 3
        for a, e in zip(items, e_xs):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(d_w, e_w, rtol=1e-4, atol=1e-6)


@relay.adt
class Box:
    Full: Tensor[Float, 2]
    Empty: ()


@relay
def boxed_cube(x: Tensor[Float, 2]) -> Float:
    b = Box.Full(x * x)  # a field declared as a tensor, built in the differentiated code
    match b:
        case Box.Full(v):
            return relay.sum(v * x)
        case Box.Empty():
            return 0.0


@relay
def boxed_cube_slope(x: Tensor[Float, 2]) -> Float:
    return relay.sum(relay.grad(boxed_cube)(x)[1][0])


def test_gradients_flow_through_an_adt_built_inside_and_grad_of_grad_works(target):
    x = np.array([0.5, -1.5], np.float32)
    np.testing.assert_allclose(relay.grad(boxed_cube)(x)[1][0],
                               jax.grad(lambda x: jnp.sum(x ** 3))(x), rtol=1e-6)
    np.testing.assert_allclose(relay.grad(boxed_cube_slope)(x)[1][0],
                               jax.grad(lambda x: jnp.sum(jax.grad(
                                   lambda x: jnp.sum(x ** 3))(x)))(x), rtol=1e-6)


@relay
def fold_matmul(xs: relay.List[Tensor[Float, ("n", 4)]], w: Tensor[Float, (4, 4)]) -> Float:
    return relay.foldl(lambda acc, x: acc + relay.sum(relay.tanh(relay.matmul(x, w))),
                       relay.zeros(()), xs)


@relay
def fold_matmul_slope(xs: relay.List[Tensor[Float, ("n", 4)]],
                      w: Tensor[Float, (4, 4)]) -> Tensor[Float, (4, 4)]:
    # xs is a free variable of the differentiated function: its list enters the lifted
    # program through a walk generic in n, instantiated at each use
    return relay.grad(lambda v: fold_matmul(xs, v))(w)[1][0]


def test_a_list_with_symbolic_dimensions_from_outside_the_differentiated_function(target):
    w = randn(4, 4) * 0.5
    for n in (2, 3):
        xs = [randn(n, 4) for _ in range(2)]
        expected = jax.grad(lambda w, xs=xs: sum(jnp.sum(jnp.tanh(x @ w)) for x in xs))(w)
        np.testing.assert_allclose(fold_matmul_slope(xs, w), expected, rtol=1e-5, atol=1e-6)


def lowered_grad_module(fn):
    """lower_grads of a module whose @main is ``grad(fn)``, over fn's parameters."""
    from relaydsl.ir import Call, Function, Grad, Var
    from relaydsl.transform.gradient import lower_grads
    from relaydsl.typing import infer_types

    mod = fn.mod.copy()
    t = fn.checked_type
    params = [Var(f"x{i}", a) for i, a in enumerate(t.arg_types)]
    mod.add("main", Function(params, Call(Grad(fn.global_var), params)))
    return infer_types(lower_grads(infer_types(mod)))


def test_an_adt_declaring_tensor_fields_gets_a_lifted_twin_and_a_list_lifts_through_its_element():
    from relaydsl.ir import RefType, TupleType, TypeCall

    mod = lowered_grad_module(tree_tanh_sum)
    stree, twin = mod.get_type("STree"), mod.get_type("STree_lifted")
    leaf, node = twin.constructors
    x = stree.constructors[0].inputs[0]
    assert (leaf.name, leaf.inputs) == ("Leaf_lifted", (TupleType((x, RefType(x))),))
    assert (node.name, node.inputs) == ("Node_lifted", (TypeCall(twin.header),) * 2)
    # values cross through two walks: into the lifted program and, as gradients, out of it
    assert mod.has_global("lift_STree") and mod.has_global("adjoint_STree")
    ret = mod["main"].checked_type.ret_type
    assert ret.fields[1].fields[0] == TypeCall(stree.header)  # a tree of gradients

    mod = lowered_grad_module(fold_tanh)
    assert not mod.has_type("List_lifted")  # List[t] lifts through t, as before
    assert mod.has_global("lift_List") and mod.has_global("adjoint_List")
