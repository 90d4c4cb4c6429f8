"""Models as Python values (issue 13, item 4): copied, pickled, sent to worker processes, saved
with their optimiser and resumed; recursive models; Figure 4's training loop with an
optimiser, as the paper writes it."""
import copy
import multiprocessing
import pickle
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import DSLSyntaxError, Float, Int, Model, Tensor, relay, relay_model
from relaydsl.ir.attrs import Attrs
from tests.frontend.models import affine, net, net_loss, predict_affine

RTOL, ATOL = 1e-4, 1e-5
x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)


@relay
def affine_loss(x: Tensor[Float, ("n", 3)]) -> Float:
    return relay.sum(affine(x) * affine(x))


def trained(steps=3, optimizer="momentum"):
    model = relay.create_model(affine, seed=1, init="glorot")
    for _ in range(steps):
        relay.update_model_params(model, relay.grad(model, affine_loss, (x,)), lr=0.1,
                                  optimizer=optimizer)
    return model


# ---- copies -----------------------------------------------------------------------------

def test_a_deep_copy_is_an_independent_model_of_the_same_function():
    model = trained()
    best = copy.deepcopy(model)  # keep the best model while training goes on
    assert best.fn is affine and best.params.keys() == model.params.keys()
    expected = model(x)
    relay.update_model_params(model, relay.grad(model, affine_loss, (x,)), lr=0.1)
    np.testing.assert_array_equal(best(x), expected)
    assert not np.allclose(model(x), expected)


def test_an_exponential_moving_average_of_the_parameters():
    model = relay.create_model(affine, seed=1, init="glorot")
    ema = copy.deepcopy(model)
    reference = {k: v.copy() for k, v in model.params.items()}
    for _ in range(3):
        relay.update_model_params(model, relay.grad(model, affine_loss, (x,)), lr=0.1)
        for k in ema.params:
            ema.params[k] = 0.5 * ema.params[k] + 0.5 * model.params[k]
            reference[k] = 0.5 * reference[k] + 0.5 * model.params[k]
    w, b = reference["linear_0.weight"], reference["linear_0.bias"]
    np.testing.assert_allclose(ema(x), x @ w.T + b, rtol=RTOL, atol=ATOL)


def test_a_copy_carries_its_optimiser_state_and_trains_on_as_the_original():
    model = trained(optimizer="momentum")  # the velocities live on the model
    twin = copy.deepcopy(model)
    for m in (model, twin):
        relay.update_model_params(m, relay.grad(m, affine_loss, (x,)), lr=0.1,
                                  optimizer="momentum")
    for k in model.params:
        np.testing.assert_array_equal(twin.params[k], model.params[k])


def test_ir_nodes_copy_as_themselves():
    fn = affine.mod[affine.global_var]
    assert copy.deepcopy(fn) is fn and copy.copy(fn) is fn
    assert copy.deepcopy(fn.checked_type) is fn.checked_type
    attrs = Attrs({"axis": 1, "shape": [2, 3]})
    assert copy.deepcopy(attrs) is attrs
    assert pickle.loads(pickle.dumps(attrs)) == attrs


# ---- pickling -----------------------------------------------------------------------------

def test_a_model_pickles_as_its_arrays_and_a_reference_to_its_function():
    model = trained()
    data = pickle.dumps(model)
    assert b"tests.frontend.models" in data and b"affine" in data
    assert len(data) < 2_000  # six numbers, a short name: no IR, no compiled code
    back = pickle.loads(data)
    assert back.fn is affine
    np.testing.assert_array_equal(back(x), model(x))
    assert pickle.loads(pickle.dumps(affine)) is affine


def test_a_function_that_cannot_be_found_by_name_does_not_pickle():
    @relay_model
    def local(x: Tensor[Float, (1, 2)]) -> Tensor[Float, (1, 2)]:
        return relay.linear(x, num_hidden=2)

    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(relay.create_model(local))


def test_a_worker_process_receives_a_model(monkeypatch):
    # a spawned worker starts afresh: it imports the model's module by name, as for a function
    # (a worker takes this process's sys.path; pytest imports the tests without it)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    model = trained()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        out = pool.apply_async(predict_affine, (model, x)).get(timeout=120)
    np.testing.assert_allclose(out, model(x), rtol=1e-6)


# ---- saving and loading ----------------------------------------------------------------------

def test_load_takes_the_name_save_was_given(tmp_path):
    model = trained()
    written = relay.save_model(model, tmp_path / "m")
    assert written == str(tmp_path / "m.npz")
    for name in (tmp_path / "m", written):
        np.testing.assert_array_equal(relay.load_model(name)(x), model(x))
    with pytest.raises(FileNotFoundError, match=r"missing\.npz"):
        relay.load_model(tmp_path / "missing")


@pytest.mark.parametrize("make", [lambda: relay.Momentum(lr=0.05, momentum=0.8),
                                  lambda: relay.Adam(lr=0.05, beta1=0.8)],
                         ids=["momentum", "adam"])
def test_training_resumes_from_a_saved_model_and_optimiser(tmp_path, make):
    def steps(model, optimizer, n):
        for _ in range(n):
            relay.update_model_params(model, relay.grad(model, affine_loss, (x,)),
                                      optimizer=optimizer)

    model, optimizer = relay.create_model(affine, seed=1), make()
    steps(model, optimizer, 3)
    path = relay.save_model(model, tmp_path / "checkpoint", optimizer=optimizer)
    steps(model, optimizer, 2)  # the run that was not interrupted

    resumed_optimizer = type(optimizer)(lr=1.0)  # the file's hyperparameters replace these
    resumed = relay.load_model(path, optimizer=resumed_optimizer)
    assert resumed_optimizer.hyperparameters == optimizer.hyperparameters
    steps(resumed, resumed_optimizer, 2)
    for k in model.params:
        np.testing.assert_allclose(resumed.params[k], model.params[k], rtol=1e-6)


def test_optimiser_state_that_is_not_in_the_file_is_a_clear_error(tmp_path):
    model = trained()
    plain = relay.save_model(model, tmp_path / "plain")
    with pytest.raises(relay.ModelFileError, match="holds no optimiser state"):
        relay.load_model(plain, optimizer=relay.Adam())
    with_momentum = relay.save_model(model, tmp_path / "mom", optimizer=relay.Momentum())
    with pytest.raises(relay.ModelFileError, match="a momentum optimiser, not of Adam"):
        relay.load_model(with_momentum, optimizer=relay.Adam())
    relay.load_model(with_momentum)  # the parameters alone need no optimiser


# ---- a model that calls itself -------------------------------------------------------------

@relay_model
def tree_cell(x: Tensor[Float, (1, 4)], depth: Int) -> Tensor[Float, (1, 4)]:
    """A TreeLSTM-like model over a complete binary tree: each node gates its two subtrees,
    which the same model (the same weights) computes."""
    h = relay.tanh(relay.linear(x, num_hidden=4))
    if depth == 0:
        return h
    left = tree_cell(h, depth - 1)
    right = tree_cell(-h, depth - 1)
    gate = relay.sigmoid(relay.linear(h, num_hidden=4))
    return gate * left + (1.0 - gate) * right


@relay
def tree_loss(x: Tensor[Float, (1, 4)], depth: Int) -> Float:
    out = tree_cell(x, depth)
    return relay.sum(out * out)


def jax_tree(p, x, depth):
    h = jnp.tanh(x @ p["linear_0.weight"].T + p["linear_0.bias"])
    if depth == 0:
        return h
    gate = jax.nn.sigmoid(h @ p["linear_1.weight"].T + p["linear_1.bias"])
    return gate * jax_tree(p, h, depth - 1) + (1 - gate) * jax_tree(p, -h, depth - 1)


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_a_recursive_model_shares_its_weights_across_the_recursion(target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    model = relay.create_model(tree_cell, seed=3, init="glorot")
    assert list(model.params) == ["linear_0.weight", "linear_0.bias", "linear_1.weight",
                                  "linear_1.bias"]  # one set of weights, not one per call
    x0 = np.array([[0.5, -1.0, 0.25, 2.0]], np.float32)
    depth = np.int32(3)
    p = {k: jnp.asarray(v) for k, v in model.params.items()}
    np.testing.assert_allclose(model(x0, depth), jax_tree(p, x0, 3), rtol=RTOL, atol=ATOL)
    grads = relay.grad(model, tree_loss, (x0, depth))
    truth = jax.grad(lambda p: jnp.sum(jax_tree(p, x0, 3) ** 2))(p)
    for k in truth:
        np.testing.assert_allclose(grads[k], truth[k], rtol=RTOL, atol=ATOL)


def test_a_recursive_model_is_called_not_passed():
    with pytest.raises(DSLSyntaxError, match="can only be called"):
        @relay_model
        def passes_itself(x: Tensor[Float, (1, 4)]) -> Tensor[Float, (1, 4)]:
            f = passes_itself
            return relay.linear(x, num_hidden=4)

        passes_itself.mod  # resolved when the module is built


# ---- Figure 4, with an optimiser ----------------------------------------------------------------

@relay
def train_momentum(data: tuple[Tensor[Float, (12, 4)], Tensor[Float, (12, 3)]]) -> Model:
    model = relay.create_model(net, seed=5, init="glorot")
    for x, y in data:
        model_grad = relay.grad(model, net_loss, (x, y))
        relay.update_model_params(model, model_grad, lr=0.1, optimizer="momentum",
                                  momentum=0.8)
    return relay.export_model(model)


@relay
def train_adam(data: tuple[Tensor[Float, (12, 4)], Tensor[Float, (12, 3)]]) -> Model:
    model = relay.create_model(net, seed=5, init="glorot")
    for x, y in data:
        model_grad = relay.grad(model, net_loss, (x, y))
        relay.update_model_params(model, model_grad, lr=0.05, optimizer="adam")
    return relay.export_model(model)


def jax_train(params, xs, ys, update):
    """The same training in JAX: jax.grad of the loss, the optimiser's equations."""
    def forward(p, x):
        h = jnp.tanh(p["linear_0.weight"] @ x + p["linear_0.bias"])
        return p["linear_1.weight"] @ h + p["linear_1.bias"]

    def loss(p, x, y):
        return -jnp.sum(y * jax.nn.log_softmax(forward(p, x)))

    p = {k: jnp.asarray(v) for k, v in params.items()}
    state = {k: (jnp.zeros_like(v), jnp.zeros_like(v)) for k, v in p.items()}
    for t, (x, y) in enumerate(zip(xs, ys), start=1):
        g = jax.grad(loss)(p, x, y)
        for k in p:
            p[k], state[k] = update(p[k], g[k], state[k], t)
    return lambda x: forward(p, x)


def momentum_update(p, g, state, t):
    v = 0.8 * state[0] + g
    return p - 0.1 * v, (v, state[1])


def adam_update(p, g, state, t):
    m = 0.9 * state[0] + 0.1 * g
    v = 0.999 * state[1] + 0.001 * g * g
    m_hat, v_hat = m / (1 - 0.9 ** t), v / (1 - 0.999 ** t)
    return p - 0.05 * m_hat / (jnp.sqrt(v_hat) + 1e-8), (m, v)


@pytest.mark.parametrize(("train", "optimizer", "update"), [
    (train_momentum, relay.Momentum(lr=0.1, momentum=0.8), momentum_update),
    (train_adam, relay.Adam(lr=0.05), adam_update),
], ids=["momentum", "adam"])
def test_figure4_with_an_optimiser_equals_the_python_loop_and_jax(train, optimizer, update):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((12, 4)).astype(np.float32)
    ys = np.eye(3, dtype=np.float32)[(xs[:, 0] > 0).astype(int) + (xs[:, 1] > 0)]
    predict = train((xs, ys))  # `-> Model`: the exported model, a plain callable

    model = relay.create_model(net, seed=5, init="glorot")  # the loop in Python
    step = relay.grad(model, net_loss)
    for i in range(12):
        relay.update_model_params(model, step(xs[i], ys[i]), optimizer=optimizer)
    reference = jax_train(relay.create_model(net, seed=5, init="glorot").params, xs, ys, update)
    for i in range(12):
        np.testing.assert_allclose(predict(xs[i]), model(xs[i]), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(predict(xs[i]), reference(xs[i]), rtol=1e-3, atol=1e-4)


def test_an_optimiser_setting_it_does_not_have_is_a_located_error():
    with pytest.raises(DSLSyntaxError, match=r"optimizer='sgd' takes the keyword arguments "
                                             r"lr=; got lr, momentum"):
        @relay
        def bad(data: tuple[Tensor[Float, (2, 4)], Tensor[Float, (2, 3)]]) -> Model:
            model = relay.create_model(net)
            for x, y in data:
                relay.update_model_params(model, relay.grad(model, net_loss, (x, y)), lr=0.1,
                                          momentum=0.9)
            return relay.export_model(model)
