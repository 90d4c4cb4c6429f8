"""relay.grad from Python (frontend/autodiff.py): what it compiles is made once and reused,
so the README's training form ``relay.grad(model, loss, (x, y))`` costs one build, not one
per step (issue 26, item 1); gradients against jax.grad."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, IRError, Tensor, relay
from relaydsl.frontend import autodiff
from tests.frontend.models import net, net_loss

RNG = np.random.default_rng(26)


@pytest.fixture
def builds(monkeypatch):
    """Counts the programs relay.grad compiles; starts with nothing cached."""
    monkeypatch.setattr(autodiff, "_cache", type(autodiff._cache)())
    count = [0]
    lowered = autodiff._lowered

    def counting(*args, **kwargs):
        count[0] += 1
        return lowered(*args, **kwargs)
    monkeypatch.setattr(autodiff, "_lowered", counting)
    return count


def jax_gradients(params: dict, x: np.ndarray, y: np.ndarray) -> dict:
    def loss(p):
        hidden = jnp.tanh(p["linear_0.weight"] @ x + p["linear_0.bias"])
        logits = p["linear_1.weight"] @ hidden + p["linear_1.bias"]
        return -jnp.sum(y * jax.nn.log_softmax(logits))
    return jax.grad(loss)({k: jnp.asarray(v) for k, v in params.items()})


def example():
    return (RNG.standard_normal(4).astype(np.float32),
            np.eye(3, dtype=np.float32)[RNG.integers(3)])


def test_twenty_training_steps_build_once_and_match_jax(builds):
    model = relay.create_model(net, seed=1, init="glorot")
    for _ in range(20):
        x, y = example()
        expected = jax_gradients(model.params, x, y)
        g = relay.grad(model, net_loss, (x, y))
        assert g.keys() == expected.keys()
        for k in g:
            np.testing.assert_allclose(g[k], expected[k], rtol=1e-5, atol=1e-6)
        relay.update_model_params(model, g, lr=0.1)
    assert builds[0] == 1


def test_models_of_one_function_share_the_build_with_their_own_values(builds):
    first = relay.create_model(net, seed=1)
    second = relay.create_model(net, seed=2)
    x, y = example()
    g1, g2 = relay.grad(first, net_loss, (x, y)), relay.grad(second, net_loss)(x, y)
    assert builds[0] == 1
    for model, g in ((first, g1), (second, g2)):
        expected = jax_gradients(model.params, x, y)
        for k in g:
            np.testing.assert_allclose(g[k], expected[k], rtol=1e-5, atol=1e-6)


def test_another_target_or_opt_level_builds_again(builds, monkeypatch):
    model = relay.create_model(net, seed=1)
    x, y = example()
    on_llvm = relay.grad(model, net_loss, (x, y))
    monkeypatch.setenv("RELAYDSL_TARGET", "interp")
    on_interp = relay.grad(model, net_loss, (x, y))
    assert builds[0] == 2
    with relay.PassContext(opt_level=0):
        relay.grad(model, net_loss, (x, y))
    assert builds[0] == 3
    for k in on_llvm:
        np.testing.assert_allclose(on_llvm[k], on_interp[k], rtol=1e-5, atol=1e-6)


@relay
def cube_sum(x: Tensor[Float, (3,)]) -> Float:
    return relay.sum(x * x * x)


def test_grad_of_a_function_builds_once_and_the_cache_is_bounded(builds, monkeypatch):
    x = np.array([1.0, -2.0, 0.5], np.float32)
    for _ in range(5):
        value, (dx,) = relay.grad(cube_sum)(x)
        np.testing.assert_allclose(value, jnp.sum(x ** 3), rtol=1e-6)
        np.testing.assert_allclose(dx, jax.grad(lambda v: jnp.sum(v ** 3))(x), rtol=1e-6)
    assert builds[0] == 1
    monkeypatch.setattr(autodiff, "_CACHE_SIZE", 1)
    relay.grad(relay.create_model(net, seed=0), net_loss, example())  # evicts cube_sum's
    relay.grad(cube_sum)(x)
    assert builds[0] == 3


# ---- the habits a JAX user brings (issue 26, item 7) ------------------------------------------

@relay
def weighted(x: Tensor[Float, (3,)], w: Tensor[Float, (3,)]) -> Float:
    return relay.sum(relay.tanh(x * w))


def plain(x: Tensor[Float, (3,)], w: Tensor[Float, (3,)]) -> Float:
    return relay.sum(relay.tanh(x * w))  # not decorated: relay.grad decorates it


def jax_weighted(x, w):
    return jnp.sum(jnp.tanh(x * w))


X3, W3 = np.array([0.5, -1.0, 2.0], np.float32), np.array([1.5, 0.2, -0.7], np.float32)


@pytest.mark.parametrize("argnums", [0, 1, -1, (0, 1), (1,)])
def test_value_and_grad_and_argnums_are_jax_s(argnums):
    value, g = relay.value_and_grad(weighted, argnums=argnums)(X3, W3)
    jax_value, jax_g = jax.value_and_grad(jax_weighted, argnums=argnums)(X3, W3)
    np.testing.assert_allclose(value, jax_value, rtol=1e-6)
    if isinstance(argnums, tuple):
        assert isinstance(g, tuple) and len(g) == len(argnums)
    for ours, theirs in zip(g if isinstance(g, tuple) else (g,),
                            jax_g if isinstance(jax_g, tuple) else (jax_g,)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    _, same = relay.grad(weighted, argnums=argnums)(X3, W3)
    for a, b in zip(same if isinstance(same, tuple) else (same,), g if isinstance(g, tuple)
                    else (g,)):
        np.testing.assert_array_equal(a, b)


def test_value_and_grad_defaults_to_the_first_argument():
    value, dx = relay.value_and_grad(weighted)(X3, W3)
    np.testing.assert_allclose(value, jax_weighted(X3, W3), rtol=1e-6)
    np.testing.assert_allclose(dx, jax.grad(jax_weighted)(X3, W3), rtol=1e-5, atol=1e-7)


def test_grad_of_a_plain_python_function_decorates_it():
    value, (dx, dw) = relay.grad(plain)(X3, W3)
    expected = jax.grad(jax_weighted, argnums=(0, 1))(X3, W3)
    np.testing.assert_allclose(value, jax_weighted(X3, W3), rtol=1e-6)
    np.testing.assert_allclose(dx, expected[0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dw, expected[1], rtol=1e-5, atol=1e-7)


def test_bad_argnums_are_errors_naming_them():
    with pytest.raises(ValueError, match=r"argnums 2: weighted takes 2 argument\(s\)"):
        relay.grad(weighted, argnums=2)
    with pytest.raises(TypeError, match=r"argnums: expected an int or a tuple of ints, "
                                        r"got '0'"):
        relay.value_and_grad(weighted, argnums="0")
    with pytest.raises(TypeError, match=r"argnums applies to relay\.grad"):
        relay.grad(relay.create_model(net, seed=0), net_loss, argnums=0)


@relay
def grown_sequence(x: Tensor[Float, (1, 4)], w: Tensor[Float, (4, 4)], n: Int) -> Float:
    outputs: Tensor[Float, (relay.Any, 4)] = x  # a sequence grown in a loop, as CharRNN's
    h = x
    i = 0
    while i < n:
        h = relay.tanh(relay.matmul(h, w))
        outputs = relay.concatenate((outputs, h * 2.0), axis=0)
        i = i + 1
    return relay.sum(outputs * outputs)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_the_gradient_of_a_concatenation_of_run_time_size_matches_jax(target, monkeypatch):
    """Issue 26, item 14: concatenate's gradient where an input's size along the axis is
    known only at run time (relay.Any) was refused."""
    import relaydsl.backend.target

    monkeypatch.setattr(relaydsl.backend.target, "DEFAULT_TARGET", target)

    def reference(x, w, n):
        outputs, h = x, x
        for _ in range(n):
            h = jnp.tanh(h @ w)
            outputs = jnp.concatenate([outputs, h * 2.0], axis=0)
        return jnp.sum(outputs * outputs)

    rng = np.random.default_rng(26)
    x = rng.standard_normal((1, 4)).astype(np.float32)
    w = (rng.standard_normal((4, 4)) * 0.5).astype(np.float32)
    for n in (0, 1, 3):
        value, (dx, dw) = relay.grad(grown_sequence, argnums=(0, 1))(x, w, np.int32(n))
        want_dx, want_dw = jax.grad(reference, argnums=(0, 1))(x, w, n)
        np.testing.assert_allclose(value, reference(x, w, n), rtol=1e-5)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-5)


def test_the_gradient_of_a_concatenation_of_two_run_time_sizes_is_a_located_error():
    @relay
    def doubled(x: Tensor[Float, (1, 4)], n: Int) -> Float:
        outputs: Tensor[Float, (relay.Any, 4)] = x
        i = 0
        while i < n:
            outputs = relay.concatenate((outputs, outputs), axis=0)
            i = i + 1
        return relay.sum(outputs)

    with pytest.raises(IRError, match=r"test_autodiff.py:\d+:\d+: the gradient of concatenate "
                                      r"takes at most one input whose size"):
        relay.grad(doubled)(np.ones((1, 4), np.float32), np.int32(2))
