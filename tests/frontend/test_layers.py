"""@relay_model layers: parameters shaped by type inference, forward passes against JAX."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import DSLSyntaxError, Float, Int, RelayTypeError, Tensor, relay, relay_model
from relaydsl.ir import FuncType, TensorType
from tests.frontend.models import lenet, loss

rng = np.random.default_rng(0)
RTOL, ATOL = 1e-4, 1e-5


def jax_lenet(p, x):
    """Figure 4's LeNet written directly in JAX (one CHW example)."""
    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x[None], w, (1, 1), "VALID",
                                         precision=jax.lax.Precision.HIGHEST)[0]
        return y + b[:, None, None]

    def pool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2), (1, 2, 2), "VALID")

    h = pool(jnp.tanh(conv(x, p["conv2d_0.weight"], p["conv2d_0.bias"])))
    h = pool(jnp.tanh(conv(h, p["conv2d_1.weight"], p["conv2d_1.bias"])))
    h = jnp.tanh(h.reshape(-1) @ p["linear_0.weight"].T + p["linear_0.bias"])
    return h @ p["linear_1.weight"].T + p["linear_1.bias"]


def test_figure4_lenet_parameters_are_shaped_by_inference():
    model = relay.create_model(lenet, seed=0)
    shapes = {k: v.shape for k, v in model.params.items()}
    # 28 -conv5-> 24 -pool2-> 12 -conv5-> 8 -pool2-> 4; 50 * 4 * 4 = 800 features.
    assert shapes == {
        "conv2d_0.weight": (20, 1, 5, 5), "conv2d_0.bias": (20,),
        "conv2d_1.weight": (50, 20, 5, 5), "conv2d_1.bias": (50,),
        "linear_0.weight": (500, 800), "linear_0.bias": (500,),
        "linear_1.weight": (10, 500), "linear_1.bias": (10,),
    }
    assert all(v.dtype == np.float32 for v in model.params.values())


def test_figure4_lenet_forward_and_loss_match_jax():
    model = relay.create_model(lenet, seed=1, init="glorot")
    x = rng.standard_normal((1, 28, 28)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[7]
    expected = jax_lenet(model.params, x)
    np.testing.assert_allclose(model(x), expected, rtol=RTOL, atol=ATOL)
    expected_loss = -jnp.sum(y * jax.nn.log_softmax(expected))
    np.testing.assert_allclose(model.apply(loss, x, y), expected_loss, rtol=RTOL, atol=ATOL)


def test_a_function_using_a_model_takes_its_parameters_as_hidden_arguments():
    t = loss.checked_type
    assert isinstance(t, FuncType)
    assert t.arg_types[:2] == (TensorType((1, 28, 28)), TensorType((10,)))
    assert t.arg_types[2] == TensorType((20, 1, 5, 5))  # then every parameter of lenet
    assert len(t.arg_types) == 2 + 8
    with pytest.raises(TypeError, match="uses the parameters of the model lenet"):
        loss(np.zeros((1, 28, 28), np.float32), np.zeros(10, np.float32))
    with pytest.raises(TypeError, match="create_model"):
        lenet(np.zeros((1, 28, 28), np.float32))


def test_seeds_and_initialisers():
    a, b = relay.create_model(lenet, seed=3), relay.create_model(lenet, seed=3)
    c = relay.create_model(lenet, seed=4)
    w = "linear_0.weight"
    np.testing.assert_array_equal(a.params[w], b.params[w])
    assert not np.array_equal(a.params[w], c.params[w])
    assert abs(float(a.params[w].std()) - 0.01) < 0.001 and abs(float(a.params[w].mean())) < 1e-3
    np.testing.assert_array_equal(a.params["linear_0.bias"], 0)
    g = relay.create_model(lenet, init="glorot").params[w]
    limit = np.sqrt(6 / (800 + 500))
    assert g.max() <= limit and g.min() >= -limit and g.max() > 0.9 * limit
    with pytest.raises(ValueError, match="init must be one of"):
        relay.create_model(lenet, init="uniform")
    with pytest.raises(TypeError, match="@relay_model"):
        relay.create_model(loss)



@relay_model
def separable(x: Tensor[Float, (1, 4, 6, 6)]) -> Tensor[Float, (1, 8, 3, 3)]:
    h = relay.conv2d(x, num_filter=4, ksize=3, strides=2, padding=1, groups=4, no_bias=True)
    return relay.conv2d(h, num_filter=8, ksize=1)


def test_a_conv2d_layer_with_groups_is_depthwise_when_groups_equal_the_channels():
    model = relay.create_model(separable, seed=0, init="glorot")
    p = model.params
    # one 3x3 filter per channel: the weight's in-channel axis is in-channels / groups = 1
    assert p["conv2d_0.weight"].shape == (4, 1, 3, 3)
    assert p["conv2d_1.weight"].shape == (8, 4, 1, 1)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    conv = jax.lax.conv_general_dilated
    h = conv(x, p["conv2d_0.weight"], (2, 2), [(1, 1), (1, 1)], feature_group_count=4,
             precision=jax.lax.Precision.HIGHEST)
    expected = conv(h, p["conv2d_1.weight"], (1, 1), "VALID",
                    precision=jax.lax.Precision.HIGHEST) + p["conv2d_1.bias"][:, None, None]
    np.testing.assert_allclose(model(x), expected, rtol=RTOL, atol=ATOL)


@relay_model
def separable_tvm(x: Tensor[Float, (1, 4, 6, 6)]) -> Tensor[Float, (1, 3)]:
    h = relay.conv2d(x, channels=4, kernel_size=3, strides=2, padding=1, groups=4, no_bias=True)
    return relay.linear(relay.reshape(h, (1, 36)), units=3)


def test_tvm_s_spellings_of_a_layer_s_arguments_build_the_same_layers():
    model = relay.create_model(separable_tvm, seed=0, init="glorot")
    p = model.params
    assert p["conv2d_0.weight"].shape == (4, 1, 3, 3) and p["linear_0.weight"].shape == (3, 36)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    h = jax.lax.conv_general_dilated(x, p["conv2d_0.weight"], (2, 2), [(1, 1), (1, 1)],
                                     feature_group_count=4, precision=jax.lax.Precision.HIGHEST)
    expected = jnp.dot(h.reshape(1, 36), p["linear_0.weight"].T,
                       precision=jax.lax.Precision.HIGHEST) + p["linear_0.bias"]
    np.testing.assert_allclose(model(x), expected, rtol=RTOL, atol=ATOL)
    with pytest.raises(DSLSyntaxError, match="give num_filter= or channels=, not both"):
        @relay_model
        def both(x: Tensor[Float, (1, 4, 6, 6)]) -> Tensor[Float, (1, 4, 6, 6)]:
            return relay.conv2d(x, num_filter=4, channels=4, ksize=1)
    with pytest.raises(DSLSyntaxError, match=r"needs ksize= \(or TVM's kernel_size=\)"):
        @relay_model
        def no_kernel(x: Tensor[Float, (1, 4, 6, 6)]) -> Tensor[Float, (1, 4, 6, 6)]:
            return relay.conv2d(x, channels=4)


@relay_model
def mlp(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, ("n", 3)]:
    h = relay.relu(relay.linear(x, num_hidden=5))
    return relay.linear(h, num_hidden=3, no_bias=True)


def test_two_calls_make_two_parameter_sets_and_batch_size_stays_symbolic():
    model = relay.create_model(mlp, seed=0)
    assert list(model.params) == ["linear_0.weight", "linear_0.bias", "linear_1.weight"]
    p = model.params
    for batch in (1, 4):
        x = rng.standard_normal((batch, 6)).astype(np.float32)
        expected = jnp.maximum(x @ p["linear_0.weight"].T + p["linear_0.bias"], 0) \
            @ p["linear_1.weight"].T
        np.testing.assert_allclose(model(x), expected, rtol=RTOL, atol=ATOL)


@relay_model
def twice(x: Tensor[Float, (2, 6)]) -> Tensor[Float, (2, 3)]:
    return mlp(x) + mlp(x)


def test_a_sub_model_called_twice_has_a_parameter_set_per_call():
    model = relay.create_model(twice, seed=0)
    assert list(model.params) == [f"mlp_{i}.{n}" for i in (0, 1) for n in
                                  ("linear_0.weight", "linear_0.bias", "linear_1.weight")]
    x = rng.standard_normal((2, 6)).astype(np.float32)
    p = model.params

    def one(i):
        h = jnp.maximum(x @ p[f"mlp_{i}.linear_0.weight"].T + p[f"mlp_{i}.linear_0.bias"], 0)
        return h @ p[f"mlp_{i}.linear_1.weight"].T

    np.testing.assert_allclose(model(x), one(0) + one(1), rtol=RTOL, atol=ATOL)


@relay_model
def cells(x: Tensor[Float, (2, 4)], h: Tensor[Float, (2, 3)], c: Tensor[Float, (2, 3)]
          ) -> tuple[Tensor[Float, (2, 3)], Tensor[Float, (2, 3)], Tensor[Float, (2, 3)]]:
    h1, c1 = relay.lstm_cell(x, (h, c), num_hidden=3)
    g = relay.gru_cell(x, h, num_hidden=3)
    return h1, c1, g


def test_lstm_and_gru_cells_match_their_equations_in_jax():
    model = relay.create_model(cells, seed=0, init="glorot")
    p = {k: v + rng.standard_normal(v.shape).astype(np.float32) * 0.1
         for k, v in model.params.items()}  # non-zero biases too
    model.params.update(p)
    x, h, c = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4), (2, 3), (2, 3)))
    sig = jax.nn.sigmoid
    gates = x @ p["lstm_cell_0.weight_ih"].T + h @ p["lstm_cell_0.weight_hh"].T \
        + p["lstm_cell_0.bias"]
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c1 = sig(f) * c + sig(i) * jnp.tanh(g)
    h1 = sig(o) * jnp.tanh(c1)
    rz = sig(x @ p["gru_cell_0.rz_weight_ih"].T + h @ p["gru_cell_0.rz_weight_hh"].T
             + p["gru_cell_0.rz_bias"])
    r, z = jnp.split(rz, 2, axis=-1)
    n = jnp.tanh(x @ p["gru_cell_0.n_weight_ih"].T + r * (h @ p["gru_cell_0.n_weight_hh"].T)
                 + p["gru_cell_0.n_bias"])
    gru = (1 - z) * n + z * h
    for got, want in zip(model(x, h, c), (h1, c1, gru)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert model.params["lstm_cell_0.weight_ih"].shape == (12, 4)
    assert model.params["gru_cell_0.n_weight_hh"].shape == (3, 3)


@relay_model
def embed_norm(ids: Tensor[Int, (5,)]) -> Tensor[Float, (5, 4)]:
    e = relay.embedding(ids, vocab=10, dim=4)
    return relay.batch_norm(e, axis=1)


def test_embedding_and_batch_norm_layers_match_jax():
    model = relay.create_model(embed_norm, seed=0)
    assert {k: v.shape for k, v in model.params.items()} == {
        "embedding_0.weight": (10, 4), "batch_norm_0.gamma": (4,), "batch_norm_0.beta": (4,),
        "batch_norm_0.moving_mean": (4,), "batch_norm_0.moving_var": (4,)}
    model.params["batch_norm_0.gamma"][:] = [1, 2, 3, 4]
    model.params["batch_norm_0.beta"][:] = [0, 1, 0, -1]
    model.params["batch_norm_0.moving_mean"][:] = [0.5, -1, 0, 2]
    model.params["batch_norm_0.moving_var"][:] = [1, 4, 0.25, 2]
    ids = np.array([1, 3, 3, 7, 9], np.int32)
    e = model.params["embedding_0.weight"][ids]
    # inference: the running statistics
    normed = (e - jnp.array([0.5, -1, 0, 2])) / jnp.sqrt(jnp.array([1, 4, 0.25, 2]) + 1e-5)
    np.testing.assert_allclose(model(ids), normed * jnp.array([1, 2, 3, 4]) +
                               jnp.array([0, 1, 0, -1]), rtol=RTOL, atol=1e-4)


def test_layers_outside_a_model_are_errors():
    with pytest.raises(DSLSyntaxError, match=r"layer with hidden parameters.*@relay_model"):
        @relay
        def f(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 4)]:
            return relay.linear(x, num_hidden=4)
    with pytest.raises(DSLSyntaxError, match="needs num_hidden="):
        @relay_model
        def g(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 4)]:
            return relay.linear(x)


def test_a_parameter_shape_the_program_does_not_fix_is_a_clear_error():
    @relay_model
    def loose(x: Tensor[Float, ("n", "k")]) -> Tensor[Float, ("n", 2)]:
        return relay.linear(x, num_hidden=2)

    with pytest.raises(RelayTypeError,
                       match=r"shape of parameter linear_0\.weight is not determined"):
        relay.create_model(loose)


def test_a_model_must_be_defined_before_its_callers():
    @relay
    def early(x: Tensor[Float, (2, 6)]) -> Tensor[Float, (2, 3)]:
        return later(x)

    @relay_model
    def later(x: Tensor[Float, (2, 6)]) -> Tensor[Float, (2, 3)]:
        return relay.linear(x, num_hidden=3)

    with pytest.raises(DSLSyntaxError, match="'later' uses model parameters, so it must be "
                                             "defined before"):
        early.mod


# An NLP model on the default target: the loss calls a model using relay.embedding, whose
# table is typed only by the model's signature (issue 11, item 3).

@relay_model
def bag_of_words(ids: Tensor[Int, ("n",)]) -> Tensor[Float, (3,)]:
    return relay.linear(relay.tanh(relay.sum(relay.embedding(ids, vocab=10, dim=4), axis=0)),
                        num_hidden=3)


@relay
def bag_of_words_loss(ids: Tensor[Int, ("n",)], y: Tensor[Float, (3,)]) -> Float:
    return relay.softmax_cross_entropy(bag_of_words(ids), y)


def jax_bag_of_words_loss(p, ids, y):
    h = jnp.tanh(jnp.sum(p["embedding_0.weight"][ids], axis=0))
    logits = h @ p["linear_0.weight"].T + p["linear_0.bias"]
    return -jnp.sum(y * jax.nn.log_softmax(logits))


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_an_embedding_model_s_loss_and_its_gradients_match_jax(target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    model = relay.create_model(bag_of_words, seed=0)
    params = {k: jnp.asarray(v) for k, v in model.params.items()}
    step = relay.grad(model, bag_of_words_loss)
    for ids in (np.array([1, 3, 3, 7, 0], np.int32), np.array([9, 2], np.int32)):
        y = np.array([0.0, 1.0, 0.0], np.float32)
        grads = step(ids, y)
        np.testing.assert_allclose(step.last_loss, jax_bag_of_words_loss(params, ids, y),
                                   rtol=RTOL, atol=ATOL)
        expected = jax.grad(jax_bag_of_words_loss)(params, ids, y)
        assert set(grads) == set(expected)
        for name, g in grads.items():
            np.testing.assert_allclose(g, expected[name], rtol=RTOL, atol=ATOL, err_msg=name)


# ---- help(relay.<layer>): the layer forms, each with an example that runs ------------------

def _example(name: str):
    """The model of relay.<name>'s help example, made and built from its text."""
    from relaydsl.frontend.layers import LAYER_HELP

    code = LAYER_HELP[name].split("Example::\n", 1)[1]
    return relay.function_from_source(code)


def _jax_reference(name, params, args):
    p = params
    if name == "conv2d":
        out = jax.lax.conv_general_dilated(args[0], p["conv2d_0.weight"], (1, 1), "VALID",
                                           dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                           precision=jax.lax.Precision.HIGHEST)
        return out + p["conv2d_0.bias"][:, None, None]
    if name == "linear":
        return args[0] @ p["linear_0.weight"].T + p["linear_0.bias"]
    if name == "max_pool":
        return jax.lax.reduce_window(args[0], -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")
    if name == "flatten_layer":
        return jnp.reshape(args[0], (args[0].shape[0], -1))
    if name == "embedding":
        return p["embedding_0.weight"][args[0]]
    if name == "dropout":  # inference: the identity
        return args[0]
    return None


@pytest.mark.parametrize("name", ["conv2d", "linear", "batch_norm", "dropout", "embedding",
                                  "lstm_cell", "gru_cell", "max_pool", "flatten_layer"])
def test_every_layer_s_help_shows_its_form_and_an_example_that_runs(name, monkeypatch):
    import pydoc

    text = pydoc.render_doc(getattr(relay, name), renderer=pydoc.plaintext)
    assert f"relay.{name}(" in text and "Example::" in text and "see above" not in text
    net = _example(name)
    model = relay.create_model(net, seed=0)
    for documented in [w for w in text.replace(",", " ").split() if w.startswith(f"{name}_<k>.")]:
        assert documented.replace("<k>", "0").rstrip(".") in model.params, documented
    rng = np.random.default_rng(7)
    arity = len(inspect.signature(net.pyfunc).parameters)
    args = [rng.integers(0, 10, t.shape).astype(t.dtype) if t.dtype == "int32"
            else rng.standard_normal(t.shape).astype(t.dtype)
            for t in net.checked_type.arg_types[:arity]]
    out = model(*args)
    want = _jax_reference(name, model.params, args)
    if want is None:  # the cells and batch_norm: as the reference interpreter computes them
        import relaydsl.backend.target

        monkeypatch.setattr(relaydsl.backend.target, "DEFAULT_TARGET", "interp")
        want = model(*args)
    for got, expected in zip(*(v if isinstance(v, tuple) else (v,) for v in (out, want))):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_ops_with_a_layer_form_document_both_and_layers_refuse_python_calls():
    assert "num_filter" in relay.conv2d.__doc__ and "ksize" in relay.conv2d.__doc__
    assert "strides=(1, 1)" in str(relay.conv2d.__signature__)  # the op form's signature
    assert "momentum=0.1" in relay.batch_norm.__doc__ and "rate=0.5" in relay.dropout.__doc__
    with pytest.raises(TypeError, match=r"relay.linear is a layer.*@relay_model"):
        relay.linear(np.ones((2, 3), np.float32), num_hidden=4)
    assert relay.linear is relay.linear


# ---- batch norm over the global batch ------------------------------------------------------

@relay_model
def synced(x: Tensor[Float, ("n", 3, 2, 2)]) -> Tensor[Float, ("n", 3, 2, 2)]:
    return relay.tanh(relay.batch_norm(x, momentum=0.3, sync=True))


@relay_model
def plain(x: Tensor[Float, ("n", 3, 2, 2)]) -> Tensor[Float, ("n", 3, 2, 2)]:
    return relay.tanh(relay.batch_norm(x, momentum=0.3))


@relay
def synced_loss(x: Tensor[Float, ("n", 3, 2, 2)]) -> Float:
    return relay.sum(synced(x) * relay.cos(x))


@relay
def plain_loss(x: Tensor[Float, ("n", 3, 2, 2)]) -> Float:
    return relay.sum(plain(x) * relay.cos(x))


def jax_bn_loss(p, x):
    """The loss of one process on the whole batch x, normalised with x's statistics."""
    mean, var = jnp.mean(x, axis=(0, 2, 3)), jnp.var(x, axis=(0, 2, 3))
    xhat = (x - mean[:, None, None]) / jnp.sqrt(var[:, None, None] + 1e-5)
    y = jnp.tanh(xhat * p["batch_norm_0.gamma"][:, None, None]
                 + p["batch_norm_0.beta"][:, None, None])
    return jnp.sum(y * jnp.cos(x))


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_synced_batch_norm_of_ranks_with_equal_slices_is_batch_norm_of_the_global_batch(
        target, monkeypatch):
    """Two ranks holding the same slice x (psum doubles this rank's part) normalise with the
    statistics of the global batch [x, x]: the same loss and gradients per example as jax on
    [x, x], and running statistics that count 2n values (the unbiased variance's n)."""
    from relaydsl.op.collective import install_reducer

    monkeypatch.setenv("RELAYDSL_TARGET", target)
    rng = np.random.default_rng(3)
    scale, shift = np.array([1.0, 3.0, 0.5]), np.array([0.0, 2.0, -1.0])
    x = (rng.standard_normal((2, 3, 2, 2)) * scale[:, None, None]
         + shift[:, None, None]).astype(np.float32)
    model = relay.create_model(synced, seed=0)
    model.params["batch_norm_0.gamma"][:] = [1.0, 0.5, 2.0]
    model.params["batch_norm_0.beta"][:] = [0.1, -0.2, 0.3]
    params = {k: jnp.asarray(v) for k, v in model.params.items()}
    install_reducer(lambda part: part.__imul__(2))
    try:
        step = relay.grad(model, synced_loss)
        grads = step(x)
    finally:
        install_reducer(None)
    both = np.concatenate([x, x])
    # the job's loss is the sum of the ranks' (equal) losses: half of it is this rank's
    np.testing.assert_allclose(step.last_loss, jax_bn_loss(params, both) / 2, rtol=1e-5)
    want = jax.grad(jax_bn_loss)(params, both)
    for name in ("batch_norm_0.gamma", "batch_norm_0.beta"):
        np.testing.assert_allclose(grads[name], want[name] / 2, rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    n = both.size // 3
    mean, var = both.mean(axis=(0, 2, 3)), both.var(axis=(0, 2, 3)) * n / (n - 1)
    np.testing.assert_allclose(model.params["batch_norm_0.moving_mean"], 0.3 * mean,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.params["batch_norm_0.moving_var"], 0.7 + 0.3 * var,
                               rtol=1e-5)


def test_synced_batch_norm_in_one_process_is_batch_norm():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    a, b = relay.create_model(synced, seed=0), relay.create_model(plain, seed=0)
    ga, gb = relay.grad(a, synced_loss, (x,)), relay.grad(b, plain_loss, (x,))
    for k in ga:
        np.testing.assert_allclose(ga[k], gb[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for k in a.params:
        np.testing.assert_allclose(a.params[k], b.params[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_batch_norm_sync_is_a_bool():
    with pytest.raises(DSLSyntaxError, match="sync must be True or False, got 'yes'"):
        @relay_model
        def net(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 3)]:
            return relay.batch_norm(x, sync="yes")
