"""Training a recursive model over trees passed in from Python (issue 14, item 2): the
Python training step (``relay.grad(model, loss)``) and the training loop written in Relay,
each a few SGD steps compared with the same steps in JAX."""
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
def encode(t: Tree) -> Tensor[Float, (1, 3)]:
    match t:
        case Tree.Leaf(x):
            return relay.tanh(relay.linear(x, num_hidden=3))
        case Tree.Node(left, right):
            both = relay.concatenate((encode(left), encode(right)), axis=1)
            return relay.tanh(relay.linear(both, num_hidden=3))


@relay
def tree_loss(t: Tree, y: Tensor[Float, (1, 3)]) -> Float:
    h = encode(t)
    return relay.sum((h - y) * (h - y))


@relay
def train(data: relay.List[tuple[Tree, Tensor[Float, (1, 3)]]]) -> Tensor[Float, (1, 3)]:
    model = relay.create_model(encode, seed=1, sigma=0.5)
    for example in data:
        t, y = example
        relay.update_model_params(model, relay.grad(model, tree_loss, (t, y)), lr=LR)
    return relay.export_model(model)(Tree.Leaf(relay.ones((1, 4))))


def jax_tree_loss(p, t, y):
    def enc(t):
        if isinstance(t, tuple):
            both = jnp.concatenate((enc(t[0]), enc(t[1])), axis=1)
            return jnp.tanh(both @ p["linear_1.weight"].T + p["linear_1.bias"])
        return jnp.tanh(t @ p["linear_0.weight"].T + p["linear_0.bias"])

    return jnp.sum((enc(t) - y) ** 2)


def jax_sgd(params, examples):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    for t, y in examples:
        g = jax.grad(jax_tree_loss)(p, t, y)
        p = {k: p[k] - LR * g[k] for k in p}
    return p


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


def test_a_python_training_step_over_trees_matches_jax(target):
    model = relay.create_model(encode, seed=1, sigma=0.5)
    relay_data, jax_data = examples()
    expected = jax_sgd(model.params, jax_data)
    step = relay.grad(model, tree_loss)
    for t, y in relay_data:
        relay.update_model_params(model, step(t, y), lr=LR)
    for name, p in expected.items():
        np.testing.assert_allclose(model.params[name], p, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_training_loop_in_relay_over_a_list_of_trees_matches_jax(target):
    relay_data, jax_data = examples()
    p = jax_sgd(relay.create_model(encode, seed=1, sigma=0.5).params, jax_data)
    expected = jnp.tanh(jnp.ones((1, 4)) @ p["linear_0.weight"].T + p["linear_0.bias"])
    np.testing.assert_allclose(train(relay_data), expected, rtol=1e-4, atol=1e-5)
