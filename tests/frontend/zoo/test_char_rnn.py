"""The zoo's recurrent models against the same models in JAX, with the same parameters: the
name generator's loss, gradients and greedy names (a relay.List and a tensor), and the RNN,
GRU and LSTM encoders over sequences, on both targets."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.datasets.names import END, NUM_CHARS, decode
from relaydsl.frontend.zoo.char_rnn import (
    char_rnn, language_tensor, list_items, name_tensors, sequence_encoder,
)

RTOL, ATOL = 1e-4, 1e-5
HIDDEN = 7
NET = char_rnn(hidden=HIDDEN, max_length=6)
sigmoid = jax.nn.sigmoid


def jax_gru(p, prefix, x, h):
    """frontend/layers.py's gru_cell."""
    dense = lambda v, name: v @ p[f"{prefix}.{name}"].T  # noqa: E731
    rz = sigmoid(dense(x, "rz_weight_ih") + dense(h, "rz_weight_hh") + p[f"{prefix}.rz_bias"])
    r, z = jnp.split(rz, 2, axis=-1)
    n = jnp.tanh(dense(x, "n_weight_ih") + r * dense(h, "n_weight_hh") + p[f"{prefix}.n_bias"])
    return (1 - z) * n + z * h


def jax_step(p, language, char, h):
    h = jax_gru(p, "gru_cell_0", jnp.concatenate([language, char], axis=1), h)
    return h @ p["linear_0.weight"].T + p["linear_0.bias"], h


def jax_loss(p, language, inputs, targets):
    h, total = jnp.zeros((1, HIDDEN)), 0.0
    for char, target in zip(inputs, targets):
        scores, h = jax_step(p, language, char[None], h)
        total -= jnp.sum(target * jax.nn.log_softmax(scores[0]))
    return total


def jax_greedy(p, language, char, h, limit):
    out = []
    while len(out) < limit:
        scores, h = jax_step(p, language, char, h)
        best = int(jnp.argmax(scores))
        if best == END:
            break
        out.append(best)
        char = jax.nn.one_hot(jnp.array([best]), NUM_CHARS)
    return out


@pytest.fixture(scope="module")
def model():
    return relay.create_model(NET.model, seed=2, init="glorot")


def test_a_name_as_tensors():
    language, inputs, targets = name_tensors("Abe", "Czech")
    np.testing.assert_array_equal(language, language_tensor("Czech"))
    assert language.shape == (1, 18) and language[0, 2] == 1  # Arabic, Chinese, Czech
    assert inputs.shape == targets.shape == (4, NUM_CHARS)
    assert not inputs[0].any()  # the start of the name
    assert inputs[1:].argmax(1).tolist() == targets[:3].argmax(1).tolist() == [26, 1, 4]
    assert targets[3].argmax() == END


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_loss_gradients_and_score_match_jax(model, target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    p = {k: jnp.asarray(v) for k, v in model.params.items()}
    for name, language in (("Abe", "Russian"), ("O'Neal", "Irish")):
        data = name_tensors(name, language)  # names of 3 and 6 letters: one program
        np.testing.assert_allclose(model.apply(NET.loss, *data), jax_loss(p, *data),
                                   rtol=RTOL, atol=ATOL)
        assert NET.score(model, name, language) == pytest.approx(-float(jax_loss(p, *data)),
                                                                 rel=RTOL)
        grads = relay.grad(model, NET.loss, data)
        expected = jax.grad(jax_loss)(p, *data)
        assert set(grads) == set(expected)
        for k in expected:
            np.testing.assert_allclose(grads[k], expected[k], rtol=RTOL, atol=ATOL, err_msg=k)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_greedy_names_as_a_list_and_as_a_tensor(model, target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    p = {k: jnp.asarray(v) for k, v in model.params.items()}
    zeros_h, start = np.zeros((1, HIDDEN), np.float32), np.zeros((1, NUM_CHARS), np.float32)
    lengths = set()
    # untrained, these names reach the length limit (6) or end early (1 and 4 letters)
    for language in ("Russian", "Greek", "Japanese", "Polish"):
        expected = jax_greedy(p, language_tensor(language), start, zeros_h, 6)
        lengths.add(len(expected))
        items = list_items(model.apply(NET.generate, language_tensor(language), start,
                                       zeros_h, np.int32(6)))
        assert [int(i) for i in items] == expected
        written = model.apply(NET.generate_tensor, language_tensor(language), start, zeros_h)
        assert written.tolist() == expected + [END] * (6 - len(expected))
        assert NET.sample(model, language) == NET.sample(model, language, as_list=False) \
            == decode(expected)
    # given letters are read, then generation goes on from the last one
    _, h = jax_step(p, language_tensor("Greek"), start, zeros_h)
    b = np.eye(NUM_CHARS, dtype=np.float32)[[1]]
    assert NET.sample(model, "Greek", "b") == "b" + decode(
        jax_greedy(p, language_tensor("Greek"), b, h, 6))
    assert lengths == {6, 1, 4}, lengths


def jax_encoder(cell, p, xs, hidden):
    h = c = jnp.zeros((1, hidden))
    for x in xs:
        x = x[None]
        if cell == "rnn":
            h = jnp.tanh(jnp.concatenate([x, h], 1) @ p["linear_0.weight"].T
                         + p["linear_0.bias"])
        elif cell == "gru":
            h = jax_gru(p, "gru_cell_0", x, h)
        else:
            gates = (x @ p["lstm_cell_0.weight_ih"].T + h @ p["lstm_cell_0.weight_hh"].T
                     + p["lstm_cell_0.bias"])
            i, f, g, o = jnp.split(gates, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * jnp.tanh(g)
            h = sigmoid(o) * jnp.tanh(c)
    return h


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_recurrent_encoders_over_sequences(cell, target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    encoder = sequence_encoder(cell, features=3, hidden=4)

    @relay
    def loss(xs: Tensor[Float, ("n", 3)]) -> Float:
        return relay.sum(encoder(xs) * encoder(xs))

    model = relay.create_model(encoder, seed=4, init="glorot")
    p = {k: jnp.asarray(v) for k, v in model.params.items()}
    rng = np.random.default_rng(0)
    for n in (1, 4):
        xs = rng.normal(size=(n, 3)).astype(np.float32)
        np.testing.assert_allclose(model(xs), jax_encoder(cell, p, xs, 4), rtol=RTOL, atol=ATOL)
    grads = relay.grad(model, loss, (xs,))
    expected = jax.grad(lambda p: jnp.sum(jax_encoder(cell, p, xs, 4) ** 2))(p)
    for k in expected:
        np.testing.assert_allclose(grads[k], expected[k], rtol=RTOL, atol=ATOL, err_msg=k)


def test_an_unknown_cell():
    with pytest.raises(ValueError, match="'rnn', 'gru' or 'lstm', not 'elman'"):
        sequence_encoder("elman", 3, 4)


def test_generation_and_training_run_as_native_code_on_the_default_target(model, monkeypatch):
    """Issue 14: the list-consing generator runs natively; the loss over a name's (n, 59)
    tensor gets native code per length, never the dispatcher."""
    monkeypatch.delenv("RELAYDSL_TARGET", raising=False)
    assert NET.generate.build().program.path == "native"
    step = relay.grad(model, NET.loss)
    program, _ = step._program
    assert program.path in ("native", "run-time shapes")
    step(*name_tensors("Chun", "Chinese"))
    assert all(compiled is not None for compiled in program._compiled.values())
