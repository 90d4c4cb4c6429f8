"""Models used by several tests: Figure 4's LeNet (as the paper writes it) and its loss, an
affine model, and a small classifier with its loss."""
from relaydsl import Float, Tensor, relay, relay_model


@relay_model
def lenet(x: Tensor[Float, (1, 28, 28)]) -> Tensor[Float, 10]:
    conv1 = relay.conv2d(x, num_filter=20, ksize=[1, 5, 5, 1], no_bias=False)
    tanh1 = relay.tanh(conv1)
    pool1 = relay.max_pool(tanh1, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    conv2 = relay.conv2d(pool1, num_filter=50, ksize=[1, 5, 5, 1], no_bias=False)
    tanh2 = relay.tanh(conv2)
    pool2 = relay.max_pool(tanh2, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    flatten = relay.flatten_layer(pool2)
    fc1 = relay.linear(flatten, num_hidden=500)
    tanh3 = relay.tanh(fc1)
    return relay.linear(tanh3, num_hidden=10)


@relay
def loss(x: Tensor[Float, (1, 28, 28)], y: Tensor[Float, 10]) -> Float:
    return relay.softmax_cross_entropy(lenet(x), y)


@relay_model
def affine(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 2)]:
    return relay.linear(x, num_hidden=2)


def predict_affine(model, x):
    """Run in a worker process: the model arrives pickled (its arrays and a reference to
    `affine`)."""
    return model(x)


# A small classifier and its loss, trained by the Figure 4 loops of test_training.py and
# test_model_copies.py
@relay_model
def net(x: Tensor[Float, 4]) -> Tensor[Float, 3]:
    return relay.linear(relay.tanh(relay.linear(x, num_hidden=8)), num_hidden=3)


@relay
def net_loss(x: Tensor[Float, 4], y: Tensor[Float, 3]) -> Float:
    return relay.softmax_cross_entropy(net(x), y)
