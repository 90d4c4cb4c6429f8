"""Figure 4's training loop written inside a decorated function."""
import numpy as np
import pytest

from relaydsl import DSLSyntaxError, Float, Int64, Tensor, relay, relay_model
from tests.frontend.models import net, net_loss


@relay
def train_net(data: tuple[Tensor[Float, (30, 4)], Tensor[Float, (30, 3)]]):
    model = relay.create_model(net, seed=5, init="glorot")
    for x, y in data:
        model_grad = relay.grad(model, net_loss, (x, y))
        relay.update_model_params(model, model_grad, lr=0.2)
    return relay.export_model(model)


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((30, 4)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0).astype(int)
    return x, np.eye(3, dtype=np.float32)[labels], labels


def test_the_loop_in_relay_equals_the_same_loop_in_python():
    x, y, _ = data()
    # the loop and the model it returns run as native code (the model's memory kept for it)
    assert train_net.build().program.path == "native"
    predict = train_net((x, y))  # an exported model: a plain callable
    # The same training, one SGD step per example, driven from Python.
    model = relay.create_model(net, seed=5, init="glorot")
    step = relay.grad(model, net_loss)
    for i in range(30):
        relay.update_model_params(model, step(x[i], y[i]), lr=0.2)
    for i in range(30):
        np.testing.assert_allclose(predict(x[i]), model(x[i]), rtol=1e-4, atol=1e-5)


def test_training_in_relay_reduces_the_loss():
    x, y, _ = data(1)
    untrained = relay.create_model(net, seed=5, init="glorot")
    before = np.mean([untrained.apply(net_loss, x[i], y[i]) for i in range(30)])
    predict = train_net((x, y))
    logits = np.stack([predict(x[i]) for i in range(30)])
    shifted = logits - logits.max(1, keepdims=True)
    after = np.mean(-np.sum(y * (shifted - np.log(np.exp(shifted).sum(1, keepdims=True))), 1))
    assert after < before


def test_misuse_is_a_located_error():
    with pytest.raises(DSLSyntaxError, match=r"made by relay\.create_model"):
        @relay
        def bad(x: Tensor[Float, 4], y: Tensor[Float, 3]) -> Float:
            g = relay.grad(x, net_loss, (x, y))
            return x


@relay_model
def normed_net(x: Tensor[Float, ("n", 4)]) -> Tensor[Float, ("n", 3)]:
    return relay.linear(relay.batch_norm(relay.linear(x, num_hidden=5)), num_hidden=3)


@relay
def normed_loss(x: Tensor[Float, ("n", 4)], y: Tensor[Float, ("n", 3)]) -> Float:
    return relay.softmax_cross_entropy(normed_net(x), y)


@relay
def train_normed(data: tuple[Tensor[Float, (5, 6, 4)], Tensor[Float, (5, 6, 3)]]):
    model = relay.create_model(normed_net, seed=2, sigma=0.3)
    for x, y in data:
        relay.update_model_params(model, relay.grad(model, normed_loss, (x, y)), lr=0.5)
    return relay.export_model(model)


def test_a_loop_in_relay_updates_running_statistics_as_the_loop_in_python():
    x, y, _ = data()
    xs, ys = x.reshape(5, 6, 4) * 3 + 1, y.reshape(5, 6, 3)
    predict = train_normed((xs, ys))
    model = relay.create_model(normed_net, seed=2, sigma=0.3)
    step = relay.grad(model, normed_loss)
    for i in range(5):
        relay.update_model_params(model, step(xs[i], ys[i]), lr=0.5)
    assert not np.allclose(model.params["batch_norm_0.moving_var"], 1)  # state was updated
    # the exported model is in inference mode: running statistics, one example as in a batch
    np.testing.assert_allclose(predict(x), model(x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(predict(x[:1]), model(x)[:1], rtol=1e-4, atol=1e-5)


@relay_model
def dropped_net(x: Tensor[Float, ("n", 4)]) -> Tensor[Float, ("n", 3)]:
    return relay.linear(relay.dropout(relay.tanh(relay.linear(x, num_hidden=16)), rate=0.4),
                        num_hidden=3)


@relay
def dropped_loss(x: Tensor[Float, ("n", 4)], y: Tensor[Float, ("n", 3)]) -> Float:
    return relay.softmax_cross_entropy(dropped_net(x), y)


@relay
def train_dropped(data: tuple[Tensor[Float, (5, 6, 4)], Tensor[Float, (5, 6, 3)]]):
    model = relay.create_model(dropped_net, seed=4, sigma=0.3)
    for x, y in data:
        relay.update_model_params(model, relay.grad(model, dropped_loss, (x, y)), lr=0.5)
    return relay.export_model(model)


def test_a_loop_in_relay_draws_the_dropout_masks_of_the_loop_in_python():
    x, y, _ = data()
    xs, ys = x.reshape(5, 6, 4), y.reshape(5, 6, 3)
    predict = train_dropped((xs, ys))
    model = relay.create_model(dropped_net, seed=4, sigma=0.3)
    step = relay.grad(model, dropped_loss)
    for i in range(5):
        relay.update_model_params(model, step(xs[i], ys[i]), lr=0.5)
    np.testing.assert_array_equal(model.params["dropout_0.key"][1], 5)  # five steps, five masks
    # the same masks: the same trained weights; the exported model does not drop
    np.testing.assert_allclose(predict(x), model(x), rtol=1e-4, atol=1e-5)
    # (a fixed mask, or none, trains other weights)
    fixed = relay.create_model(dropped_net, seed=4, sigma=0.3)
    for i in range(5):
        fixed.params["dropout_0.key"][:] = model.params["dropout_0.key"][0], 0
        relay.update_model_params(fixed, relay.grad(fixed, dropped_loss, (xs[i], ys[i])), lr=0.5)
    assert not np.allclose(fixed(x), model(x), rtol=1e-3, atol=1e-3)


@relay
def drop_with(x: Tensor[Float, (40, 50)], key: Tensor[Int64, 2]) -> Tensor[Float, (40, 50)]:
    return relay.dropout(x, key, rate=0.25, training=True)


def test_a_plain_function_drops_with_the_key_it_is_given():
    from tests.frontend.test_model import dropout_mask

    x = np.random.default_rng(0).standard_normal((40, 50)).astype(np.float32)
    for key in ([1, 2], [1, 3], [2**32 + 1, 2]):
        keep = dropout_mask(key, x.shape, rate=0.25)
        want = np.where(keep, x / np.float32(0.75), 0)
        for target in ("llvm", "interp"):
            np.testing.assert_allclose(drop_with.build(target)(x, np.array(key, np.int64)), want,
                                       rtol=1e-6)


def test_dropout_outside_a_model_needs_a_key():
    with pytest.raises(DSLSyntaxError, match=r"give it a key: relay\.dropout\(x, key"):
        @relay
        def keyless(x: Tensor[Float, 4]) -> Tensor[Float, 4]:
            return relay.dropout(x, rate=0.5)


@relay_model
def two_heads(x: Tensor[Float, 4]) -> tuple[Tensor[Float, 3], Tensor[Float, 2]]:
    h = relay.tanh(relay.linear(x, num_hidden=5))
    return relay.linear(h, num_hidden=3), relay.linear(h, num_hidden=2)


@relay
def first_head(x: Tensor[Float, 4]) -> Tensor[Float, 3]:
    model = relay.create_model(two_heads, seed=3)
    predict = relay.export_model(model)
    return relay.export_model(model)(x)[0] + predict(x)[0]  # a tuple's field, not a slice


def test_the_result_of_an_exported_model_returning_a_tuple_is_indexed_as_a_tuple():
    x = data()[0][0]
    model = relay.create_model(two_heads, seed=3)
    np.testing.assert_allclose(first_head(x), 2 * model(x)[0], rtol=1e-5)


# A model written with a symbolic batch dim, trained in a loop whose result is annotated with
# the exported function's type at a concrete batch (issue 22, item 7): the exported function
# is as polymorphic as the model, so the annotation is an instance of its type.
@relay_model
def batched_net(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, ("n", 3)]:
    return relay.linear(relay.tanh(relay.linear(x, num_hidden=5)), num_hidden=3)


@relay
def batched_loss(x: Tensor[Float, ("n", 6)], y: Tensor[Float, ("n", 3)]) -> Float:
    return relay.softmax_cross_entropy(batched_net(x), y)


@relay
def train_batches(data: tuple[Tensor[Float, (4, 8, 6)], Tensor[Float, (4, 8, 3)]]
                  ) -> relay.Fn[[Tensor[Float, (8, 6)]], Tensor[Float, (8, 3)]]:
    model = relay.create_model(batched_net, seed=7, init="glorot")
    for x, y in data:
        relay.update_model_params(model, relay.grad(model, batched_loss, (x, y)), lr=0.3)
    return relay.export_model(model)


@relay
def predict_after_training(x: Tensor[Float, (8, 6)],
                           data: tuple[Tensor[Float, (4, 8, 6)], Tensor[Float, (4, 8, 3)]]
                           ) -> Tensor[Float, (8, 3)]:
    return train_batches(data)(x)  # inlined: the exported function at this call's batch


def test_a_polymorphic_model_exported_at_a_concrete_type_is_an_instance_of_its_type():
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((4, 8, 6)).astype(np.float32)
    ys = np.eye(3, dtype=np.float32)[rng.integers(0, 3, (4, 8))]
    result = train_batches.checked_type.ret_type
    assert str(result) == "fn(Tensor[(8, 6), float32]) -> Tensor[(8, 3), float32]"
    # unannotated, the exported function stays polymorphic (any batch) and runs natively
    assert str(train_normed.checked_type.ret_type) == \
        "fn<n: Shape>(Tensor[(n, 4), float32]) -> Tensor[(n, 3), float32]"
    assert train_normed.build().program.path == train_batches.build().program.path == "native"
    # the same training driven from Python; its weights give the forward pass in NumPy
    model = relay.create_model(batched_net, seed=7, init="glorot")
    for i in range(4):
        relay.update_model_params(model, relay.grad(model, batched_loss, (xs[i], ys[i])), lr=0.3)
    p = {k: np.asarray(v, np.float64) for k, v in model.params.items()}
    x = rng.standard_normal((8, 6)).astype(np.float32)
    hidden = np.tanh(x @ p["linear_0.weight"].T + p["linear_0.bias"])
    want = hidden @ p["linear_1.weight"].T + p["linear_1.bias"]
    assert not np.allclose(p["linear_1.bias"], 0)  # training moved the weights
    for target in ("llvm", "interp"):
        predict = train_batches.build(target)((xs, ys))
        np.testing.assert_allclose(predict(x), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(predict_after_training.build(target)(x, (xs, ys)), want,
                                   rtol=1e-4, atol=1e-5)
