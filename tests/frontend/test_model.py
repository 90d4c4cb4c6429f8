"""Models: optimisers against their update equations, export, and save/load without pickle."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from relaydsl import Float, Tensor, relay, relay_model
from relaydsl.frontend.model import SGD, Adam, Momentum, load_model, save_model, update_model_params


@relay_model
def small(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 2)]:
    return relay.linear(x, num_hidden=2)


def fresh():
    return relay.create_model(small, seed=0)


def grads_for(model, scale=1.0):
    return {k: np.full(v.shape, scale, v.dtype) for k, v in model.params.items()}


def test_sgd_default():
    m = fresh()
    before = {k: v.copy() for k, v in m.params.items()}
    update_model_params(m, grads_for(m, 2.0), lr=0.1)
    for k in before:
        np.testing.assert_allclose(m.params[k], before[k] - 0.2, rtol=1e-6)


def test_momentum_and_adam_follow_their_equations():
    m = fresh()
    w0 = m.params["linear_0.weight"].copy()
    opt = Momentum(lr=0.1, momentum=0.5)
    g1, g2 = grads_for(m, 1.0), grads_for(m, 3.0)
    update_model_params(m, g1, optimizer=opt)
    update_model_params(m, g2, optimizer=opt)
    # v1 = 1; v2 = 0.5 * 1 + 3 = 3.5; total step 0.1 * (1 + 3.5)
    np.testing.assert_allclose(m.params["linear_0.weight"], w0 - 0.45, rtol=1e-6)

    m = fresh()
    w0 = m.params["linear_0.weight"].copy()
    adam = Adam(lr=0.01)
    update_model_params(m, grads_for(m, 4.0), optimizer=adam)
    # first step of Adam moves each weight by lr * sign(g) (bias-corrected moments)
    np.testing.assert_allclose(m.params["linear_0.weight"], w0 - 0.01, rtol=1e-5)
    update_model_params(m, grads_for(m, 4.0), optimizer="adam", lr=0.01)
    np.testing.assert_allclose(m.params["linear_0.weight"], w0 - 0.02, rtol=1e-5)


def test_update_errors():
    m = fresh()
    with pytest.raises(KeyError, match="does not have"):
        update_model_params(m, {"nope": np.zeros(2)})
    with pytest.raises(ValueError, match="has shape"):
        update_model_params(m, {"linear_0.bias": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="optimizer must be one of"):
        update_model_params(m, grads_for(m), optimizer="rmsprop")


def test_export_is_a_snapshot():
    m = fresh()
    predict = relay.export_model(m)
    x = np.ones((2, 3), np.float32)
    before = predict(x)
    update_model_params(m, grads_for(m), lr=1.0)
    np.testing.assert_array_equal(predict(x), before)
    assert not np.allclose(m(x), before)


def test_save_and_load_round_trip(tmp_path):
    m = fresh()
    update_model_params(m, grads_for(m, 0.3), lr=1.0)
    path = save_model(m, tmp_path / "small")
    assert path.endswith(".npz")
    loaded = load_model(path)  # the model function is found by name: nothing is imported
    assert loaded.fn is small
    for k in m.params:
        np.testing.assert_array_equal(loaded.params[k], m.params[k])
    with np.load(path, allow_pickle=False) as data:  # plain arrays and a JSON manifest
        manifest = json.loads(data["__relaydsl_manifest__"].tobytes())
    assert manifest["model"] == "small"
    assert [p["name"] for p in manifest["params"]] == ["linear_0.weight", "linear_0.bias"]


def test_loading_a_file_of_another_model_is_a_clear_error(tmp_path):
    @relay_model
    def other(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 4)]:
        return relay.linear(x, num_hidden=4)

    path = save_model(relay.create_model(other), tmp_path / "other")
    with pytest.raises(ValueError, match=r"does not match the model small: linear_0.weight is "
                                         r"float32\[4, 3\], the model needs float32\[2, 3\]"):
        load_model(path, small)
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="cannot read the model file"):
        load_model(tmp_path / "junk.npz", small)


def test_an_interrupted_save_leaves_the_old_file(tmp_path, monkeypatch):
    m = fresh()
    path = Path(save_model(m, tmp_path / "model.npz"))
    original = path.read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(KeyboardInterrupt):
        save_model(m, path)
    assert path.read_bytes() == original
    assert [f for f in os.listdir(tmp_path) if f != "model.npz"] == []  # no temp file left


def test_optimizer_objects_are_exported():
    assert relay.SGD is SGD and relay.Adam is Adam and relay.Momentum is Momentum


# ---- training and inference modes: batch_norm as in PyTorch ------------------------------------

@relay_model
def normed(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 2)]:
    return relay.linear(relay.tanh(relay.batch_norm(relay.linear(x, num_hidden=4),
                                                    momentum=0.2)), num_hidden=2)


@relay
def normed_loss(x: Tensor[Float, ("n", 3)], y: Tensor[Float, ("n", 2)]) -> Float:
    return relay.mean((normed(x) - y) ** 2.0)


def normed_reference(p, x, training, momentum=0.2, eps=1e-5):
    """`normed` with PyTorch's BatchNorm1d semantics in JAX: (output, new running mean, var)."""
    import jax.numpy as jnp

    h = x @ p["linear_0.weight"].T + p["linear_0.bias"]
    mean, var = p["batch_norm_0.moving_mean"], p["batch_norm_0.moving_var"]
    if training:  # normalise with the batch's biased variance, keep the unbiased one
        n = h.shape[0]
        bmean, bvar = h.mean(0), h.var(0)
        mean, var = (1 - momentum) * mean + momentum * bmean, \
            (1 - momentum) * var + momentum * bvar * n / (n - 1)
        use_mean, use_var = bmean, bvar
    else:
        use_mean, use_var = mean, var
    h = (h - use_mean) / jnp.sqrt(use_var + eps) * p["batch_norm_0.gamma"] + \
        p["batch_norm_0.beta"]
    return jnp.tanh(h) @ p["linear_1.weight"].T + p["linear_1.bias"], mean, var


def normed_batches(steps=3, n=4, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, 3)).astype(np.float32) * 2 + 1,
             rng.standard_normal((n, 2)).astype(np.float32)) for _ in range(steps)]


def test_training_steps_update_the_running_statistics_as_pytorch():
    import jax

    model = relay.create_model(normed, seed=1, sigma=0.5)
    assert model.state_names == ("batch_norm_0.moving_mean", "batch_norm_0.moving_var")
    ref = {k: jax.numpy.asarray(v) for k, v in model.params.items()}
    trainable = [k for k in ref if k not in model.state_names]
    step = relay.grad(model, normed_loss)
    for x, y in normed_batches():
        grads = step(x, y)
        assert sorted(grads) == sorted(trainable)  # no gradient for the state

        def ref_loss(q, x=x, y=y, ref=ref):
            out, mean, var = normed_reference({**ref, **q}, x, training=True)
            return jax.numpy.mean((out - y) ** 2), (mean, var)

        (value, (mean, var)), ref_grads = jax.value_and_grad(ref_loss, has_aux=True)(
            {k: ref[k] for k in trainable})
        np.testing.assert_allclose(step.last_loss, value, rtol=1e-5, atol=1e-6)
        for k in trainable:
            np.testing.assert_allclose(grads[k], ref_grads[k], rtol=1e-4, atol=1e-6)
        update_model_params(model, grads, lr=0.1)
        ref = {**ref, **{k: ref[k] - 0.1 * ref_grads[k] for k in trainable},
               "batch_norm_0.moving_mean": mean, "batch_norm_0.moving_var": var}
        for k in ref:
            np.testing.assert_allclose(model.params[k], ref[k], rtol=1e-5, atol=1e-6)
    x = normed_batches(1, n=5, seed=9)[0][0]
    want = normed_reference(ref, x, training=False)[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(relay.export_model(model)(x), want, rtol=1e-5, atol=1e-6)


def test_inference_of_one_example_does_not_depend_on_its_batch():
    model = relay.create_model(normed, seed=1, sigma=0.5)
    step = relay.grad(model, normed_loss)
    for x, y in normed_batches():
        update_model_params(model, step(x, y), lr=0.1)
    x = normed_batches(1, seed=5)[0][0]
    batch = model(x)
    for i in range(len(x)):
        np.testing.assert_allclose(model(x[i:i + 1]), batch[i:i + 1], rtol=1e-5, atol=1e-6)


def test_gradients_of_state_are_refused():
    model = relay.create_model(normed)
    with pytest.raises(KeyError, match="model state"):
        update_model_params(model, {"batch_norm_0.moving_mean": np.zeros(4, np.float32)})
