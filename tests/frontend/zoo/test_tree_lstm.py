"""The zoo's TreeLSTM against the same model in JAX, with the same parameters: the root's
scores and the loss at every node on trees of several shapes, and the loss's gradients, on
both targets."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import relay
from relaydsl.datasets.sst import Leaf, parse_tree, vocabulary
from relaydsl.frontend.zoo.tree_lstm import ParseTree, to_adt, tree_lstm

RTOL, ATOL = 1e-4, 1e-5
TREES = [parse_tree(s) for s in (
    "(3 lovely)",
    "(1 (2 not) (3 good))",
    "(3 (2 It) (4 (4 (2 's) (3 (2 a) (4 (3 lovely) (2 film)))) (2 .)))",
    "(0 (1 (1 (2 dull) (2 ,)) (2 (2 dull) (1 unseen))) (2 .))",
)]
VOCAB = vocabulary(TREES[:3])  # "dull" and "unseen" are unknown: index 0
NET = tree_lstm(len(VOCAB), hidden=6, dim=5)


def jax_tree_lstm(p, tree):
    """Tai et al.'s binary TreeLSTM, as the zoo's docstring writes it: the root's scores and
    the sum of every node's cross-entropy."""
    def classify(h, label):
        scores = h @ p["linear_0.weight"].T + p["linear_0.bias"]
        return scores, -jax.nn.log_softmax(scores)[0, label]

    def cell(t):
        if isinstance(t, Leaf):
            x = p["embedding_0.weight"][VOCAB[t.word]][None]
            i, o, u = jnp.split(x @ p["linear_1.weight"].T + p["linear_1.bias"], 3, axis=1)
            c = jax.nn.sigmoid(i) * jnp.tanh(u)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return h, c, classify(h, t.label)[1]
        (h_l, c_l, loss_l), (h_r, c_r, loss_r) = cell(t.left), cell(t.right)
        gates = jnp.concatenate([h_l, h_r], axis=1) @ p["linear_2.weight"].T + p["linear_2.bias"]
        i, f_l, f_r, o, u = jnp.split(gates, 5, axis=1)
        c = (jax.nn.sigmoid(i) * jnp.tanh(u) + jax.nn.sigmoid(f_l) * c_l
             + jax.nn.sigmoid(f_r) * c_r)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return h, c, loss_l + loss_r + classify(h, t.label)[1]

    h, _, loss = cell(tree)
    return classify(h, tree.label)[0], loss


@pytest.fixture(scope="module")
def model():
    model = relay.create_model(NET.model, seed=1, init="glorot")
    assert {k: v.shape for k, v in model.params.items()} == {
        "linear_0.weight": (5, 6), "linear_0.bias": (5,),  # the classifier of every node
        "embedding_0.weight": (len(VOCAB), 5),
        "linear_1.weight": (18, 5), "linear_1.bias": (18,),  # a leaf's i, o, u
        "linear_2.weight": (30, 12), "linear_2.bias": (30,),  # a node's i, f_l, f_r, o, u
    }
    return model


def test_sst_trees_become_parse_trees_of_word_indices_and_labels():
    value = to_adt(TREES[1], VOCAB)
    assert value.constructor is ParseTree.Node.constructor
    left, right, label = value.fields
    np.testing.assert_array_equal(label, [[0, 1, 0, 0, 0]])
    assert left.constructor is ParseTree.Leaf.constructor
    assert left.fields[0].tolist() == [VOCAB["not"]] and right.fields[0].tolist() == [VOCAB["good"]]
    np.testing.assert_array_equal(right.fields[1], [[0, 0, 0, 1, 0]])
    unknown = to_adt(TREES[3], VOCAB).fields[0].fields[0].fields[0]  # the first "dull"
    assert unknown.fields[0].tolist() == [0]


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_scores_loss_and_prediction_match_jax(model, target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    p = {k: jnp.asarray(v) for k, v in model.params.items()}
    for tree in TREES:
        scores, loss = model(to_adt(tree, VOCAB))
        expected_scores, expected_loss = jax_tree_lstm(p, tree)
        np.testing.assert_allclose(scores, expected_scores, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(loss, expected_loss, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(model.apply(NET.loss, to_adt(tree, VOCAB)), expected_loss,
                                   rtol=RTOL, atol=ATOL)
        assert model.apply(NET.predict, to_adt(tree, VOCAB)).tolist() == \
            [int(jnp.argmax(expected_scores))]


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_the_gradients_match_jax(model, target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    p = {k: jnp.asarray(v) for k, v in model.params.items()}
    for tree in TREES[1:]:
        grads = relay.grad(model, NET.loss, (to_adt(tree, VOCAB),))
        expected = jax.grad(lambda p, tree=tree: jax_tree_lstm(p, tree)[1])(p)
        assert set(grads) == set(expected)
        for name in expected:
            np.testing.assert_allclose(grads[name], expected[name], rtol=RTOL, atol=ATOL,
                                       err_msg=name)


def test_inference_and_training_run_as_native_code_on_the_default_target(model, monkeypatch):
    """Issue 14: no Python between kernels -- neither the model over an ADT tree nor its
    training step (closures and references of the higher-order gradient)."""
    monkeypatch.delenv("RELAYDSL_TARGET", raising=False)
    assert NET.model.build().program.path == "native"
    step = relay.grad(model, NET.loss)
    program, _ = step._program
    assert program.path == "native"
    grads = step(to_adt(TREES[2], VOCAB))
    assert set(grads) == set(model.params) and all(np.isfinite(g).all() for g in grads.values())
