"""End to end: an MLP trained on a real MNIST subset reaches over 90% test accuracy."""
from pathlib import Path

import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay, relay_model
from relaydsl.datasets import mnist

SHARED_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"


@relay_model
def mlp(x: Tensor[Float, ("n", 784)]) -> Tensor[Float, ("n", 10)]:
    return relay.linear(relay.tanh(relay.linear(x, num_hidden=128)), num_hidden=10)


@relay
def mlp_loss(x: Tensor[Float, ("n", 784)], y: Tensor[Float, ("n", 10)]) -> Float:
    return relay.softmax_cross_entropy(mlp(x), y)


@relay
def predict(x: Tensor[Float, ("n", 784)]) -> Tensor[Int, ("n",)]:
    return relay.argmax(mlp(x), axis=1)


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="the shared MNIST copy is not present")
def test_an_mlp_learns_mnist():
    (train_x, train_y), (test_x, test_y) = mnist(SHARED_MNIST)
    train_x, test_x = train_x.reshape(-1, 784), test_x[:2000].reshape(-1, 784)
    test_y = test_y[:2000]
    one_hot = np.eye(10, dtype=np.float32)
    model = relay.create_model(mlp, seed=0, init="glorot")
    step = relay.grad(model, mlp_loss)
    optimizer = relay.Momentum(lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(500):
        idx = rng.integers(0, 20000, 64)  # a 20,000-image subset of the training set
        relay.update_model_params(model, step(train_x[idx], one_hot[train_y[idx]]),
                                  optimizer=optimizer)
        losses.append(float(step.last_loss))
    accuracy = float(np.mean(model.apply(predict, test_x) == test_y))
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    assert accuracy > 0.90, accuracy


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="the shared MNIST copy is not present")
def test_figure_4_s_loop_inside_relay_trains_lenet_in_bounded_memory(monkeypatch):
    """Figure 4 as printed: the training loop inside @relay, one image a step. 10,000 turns
    (megabytes of activations and gradients each: without releases the budget is gone
    within ten turns) run within 32 MiB beyond the arena; the exported model classifies."""
    from relaydsl.backend.llvm.native import program as native
    from tests.frontend.models import lenet, loss

    @relay
    def train_lenet(data: tuple[Tensor[Float, (10_000, 1, 28, 28)], Tensor[Float, (10_000, 10)]]):
        model = relay.create_model(lenet, seed=0)
        for x, y in data:
            model_grad = relay.grad(model, loss, (x, y))
            relay.update_model_params(model, model_grad, lr=0.01)
        return relay.export_model(model)

    (train_x, train_y), (test_x, test_y) = mnist(SHARED_MNIST)
    data = (np.ascontiguousarray(train_x[:10_000]),
            np.eye(10, dtype=np.float32)[train_y[:10_000]])
    monkeypatch.setattr(native, "_MEMORY_BUDGET", 32 << 20)
    predict = train_lenet(data)
    accuracy = np.mean([np.argmax(predict(test_x[i])) == test_y[i] for i in range(1000)])
    assert accuracy > 0.9, accuracy
