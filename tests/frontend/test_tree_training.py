"""Training a recursive model over trees passed in from Python (issue 14, item 2): a
TreeLSTM-like model whose cells own their parameters, shared by every node of the recursion,
trained by the Python step (``relay.grad(model, loss)``) and by a training loop written in
Relay, each for a few SGD steps compared with the same steps in JAX."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay, relay_model

LR = 0.5


@pytest.fixture(params=["llvm", "interp"])
def target(request, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", request.param)
    return request.param


@relay.adt
class Tree:
    Leaf: Tensor[Float, (1, 4)]
    Node: (Tree, Tree)


@relay_model
def tree_cell(t: Tree) -> tuple[Tensor[Float, (1, 3)], Tensor[Float, (1, 3)]]:
    match t:
        case Tree.Leaf(x):
            c = relay.linear(x, num_hidden=3)
            return relay.tanh(c), c
        case Tree.Node(left, right):
            hl, cl = tree_cell(left)
            hr, cr = tree_cell(right)
            gate = relay.sigmoid(relay.linear(relay.concatenate((hl, hr), axis=1),
                                              num_hidden=3))
            c = gate * cl + (1.0 - gate) * cr
            return relay.tanh(c), c


@relay
def tree_loss(t: Tree, y: Tensor[Float, (1, 3)]) -> Float:
    h, _ = tree_cell(t)
    return relay.sum((h - y) * (h - y))


@relay
def train(data: relay.List[tuple[Tree, Tensor[Float, (1, 3)]]]) -> Tensor[Float, (1, 3)]:
    model = relay.create_model(tree_cell, seed=1, sigma=0.8)
    for example in data:
        t, y = example
        relay.update_model_params(model, relay.grad(model, tree_loss, (t, y)), lr=LR)
    h, _ = relay.export_model(model)(Tree.Leaf(relay.ones((1, 4))))
    return h


def jax_tree_cell(p, t):
    if not isinstance(t, tuple):
        c = t @ p["linear_0.weight"].T + p["linear_0.bias"]
        return jnp.tanh(c), c
    (hl, cl), (hr, cr) = jax_tree_cell(p, t[0]), jax_tree_cell(p, t[1])
    gate = jax.nn.sigmoid(jnp.concatenate((hl, hr), axis=1) @ p["linear_1.weight"].T
                          + p["linear_1.bias"])
    c = gate * cl + (1.0 - gate) * cr
    return jnp.tanh(c), c


def jax_tree_loss(p, t, y):
    return jnp.sum((jax_tree_cell(p, t)[0] - y) ** 2)


def jax_sgd(params, examples):
    """The parameters after an SGD step per example, and the first step's gradients."""
    p = {k: jnp.asarray(v) for k, v in params.items()}
    first = None
    for t, y in examples:
        g = jax.grad(jax_tree_loss)(p, t, y)
        first = first or g
        p = {k: p[k] - LR * g[k] for k in p}
    return p, first


def examples():
    """Three (tree, target) pairs: the trees as relay values and as JAX pytrees."""
    rng = np.random.default_rng(3)
    leaves = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(4)]
    relay_trees = [Tree.Node(Tree.Leaf(leaves[0]), Tree.Leaf(leaves[1])),
                   Tree.Node(Tree.Node(Tree.Leaf(leaves[2]), Tree.Leaf(leaves[0])),
                             Tree.Leaf(leaves[3])),
                   Tree.Leaf(leaves[1])]
    jax_trees = [(leaves[0], leaves[1]), ((leaves[2], leaves[0]), leaves[3]), leaves[1]]
    ys = [rng.uniform(-0.5, 0.5, (1, 3)).astype(np.float32) for _ in range(3)]
    return list(zip(relay_trees, ys)), list(zip(jax_trees, ys))


def test_parameter_gradients_and_python_training_steps_over_trees_match_jax(target):
    model = relay.create_model(tree_cell, seed=1, sigma=0.8)
    relay_data, jax_data = examples()
    expected, first_grads = jax_sgd(model.params, jax_data)
    grads = relay.grad(model, tree_loss, relay_data[0])
    assert sorted(grads) == sorted(first_grads)
    for name, g in first_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-4, atol=1e-6, err_msg=name)
    step = relay.grad(model, tree_loss)
    for t, y in relay_data:
        relay.update_model_params(model, step(t, y), lr=LR)
    for name, p in expected.items():
        np.testing.assert_allclose(model.params[name], p, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_training_loop_in_relay_over_a_list_of_trees_matches_jax(target):
    relay_data, jax_data = examples()
    p, _ = jax_sgd(relay.create_model(tree_cell, seed=1, sigma=0.8).params, jax_data)
    expected = jax_tree_cell(p, jnp.ones((1, 4)))[0]
    np.testing.assert_allclose(train(relay_data), expected, rtol=1e-4, atol=1e-5)
