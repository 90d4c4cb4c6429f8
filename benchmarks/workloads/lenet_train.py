"""The LeNet training step of examples/lenet_mnist.py: forward, gradients, momentum update, b64.

relaydsl runs it as the README does: ``step = relay.grad(model, loss)`` on a ``@relay_model``
LeNet (Figure 4 of the MAPL paper), then ``relay.update_model_params(model, g, Momentum)``.
JAX jits the whole step (value_and_grad and the update); PyTorch eager runs an ``nn.Module``
with ``torch.optim.SGD(momentum=)``; torch.compile compiles its forward and loss (the backward
by AOTAutograd). Every system starts from the same parameters, and the check compares the
parameters after one step. Momentum as PyTorch's: v = momentum * v + g; p -= lr * v.
"""
from __future__ import annotations

import numpy as np

from benchmarks.harness import Case
from benchmarks.workloads.common import jax_modules, normal, rng, specialize, torch_module
from relaydsl import Float, Tensor, relay, relay_model

BATCH, LR, MOMENTUM = 64, 0.01, 0.9


def lenet(x: Tensor[Float, (B, 1, 28, 28)]) -> Tensor[Float, (B, 10)]:  # noqa: F821
    h = relay.max_pool(relay.tanh(relay.conv2d(x, num_filter=20, ksize=5)), ksize=2, strides=2)
    h = relay.max_pool(relay.tanh(relay.conv2d(h, num_filter=50, ksize=5)), ksize=2, strides=2)
    h = relay.tanh(relay.linear(relay.flatten_layer(h), num_hidden=500))
    return relay.linear(h, num_hidden=10)


def lenet_loss(x: Tensor[Float, (B, 1, 28, 28)], y: Tensor[Float, (B, 10)]) -> Float:  # noqa: F821
    return relay.softmax_cross_entropy(net(x), y)  # noqa: F821  (net bound by specialize)


# the parameters in the order every system keeps them
NAMES = ("conv2d_0.weight", "conv2d_0.bias", "conv2d_1.weight", "conv2d_1.bias",
         "linear_0.weight", "linear_0.bias", "linear_1.weight", "linear_1.bias")


def data(seed: int = 0):
    r = rng(seed)
    x = normal(r, (BATCH, 1, 28, 28))
    y = np.eye(10, dtype=np.float32)[r.integers(0, 10, BATCH)]
    shapes = [(20, 1, 5, 5), (20,), (50, 20, 5, 5), (50,), (500, 800), (500,), (10, 500), (10,)]
    params = []
    for s in shapes:
        fan_in = int(np.prod(s[1:])) if len(s) > 1 else 0
        params.append(normal(r, s, np.sqrt(1.0 / fan_in)) if fan_in else normal(r, s, 0.1))
    return x, y, params


def relaydsl_setup(x, y, params):
    net = specialize(lenet, relay_model, B=BATCH)
    loss = specialize(lenet_loss, B=BATCH, net=net)
    model = relay.create_model(net, seed=0)
    for name, p in zip(NAMES, params):
        model.params[name] = p.copy()
    step, optimiser = relay.grad(model, loss), relay.Momentum(lr=LR, momentum=MOMENTUM)

    def run():
        relay.update_model_params(model, step(x, y), optimiser)
        return tuple(model.params[n] for n in NAMES)
    return run


def jax_setup(x, y, params):
    jax, jnp = jax_modules()

    def loss(p, x, y):
        c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b = p
        window = (1, 1, 2, 2)

        def conv(h, w, b):
            out = jax.lax.conv_general_dilated(h, w, (1, 1), "VALID",
                                               dimension_numbers=("NCHW", "OIHW", "NCHW"))
            return out + b[:, None, None]

        def pool(h):
            return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, window, window, "VALID")

        h = pool(jnp.tanh(conv(x, c1w, c1b)))
        h = pool(jnp.tanh(conv(h, c2w, c2b)))
        h = jnp.tanh(h.reshape(h.shape[0], -1) @ f1w.T + f1b)
        logits = h @ f2w.T + f2b
        return jnp.mean(-jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))

    @jax.jit
    def step(p, v, x, y):
        g = jax.grad(loss)(p, x, y)
        v = tuple(MOMENTUM * vi + gi for vi, gi in zip(v, g))
        return tuple(pi - LR * vi for pi, vi in zip(p, v)), v

    state = [tuple(jnp.asarray(p) for p in params), tuple(jnp.zeros_like(p) for p in params)]
    jx, jy = jnp.asarray(x), jnp.asarray(y)

    def run():
        state[0], state[1] = step(state[0], state[1], jx, jy)
        return state[0]
    return run


def torch_setup(x, y, params, compiled: bool):
    torch = torch_module()
    F = torch.nn.functional

    class LeNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params)

        def forward(self, v, labels):
            c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b = self.weights
            h = F.max_pool2d(torch.tanh(F.conv2d(v, c1w, c1b)), 2)
            h = F.max_pool2d(torch.tanh(F.conv2d(h, c2w, c2b)), 2)
            h = torch.tanh(F.linear(h.flatten(1), f1w, f1b))
            logits = F.linear(h, f2w, f2b)
            return torch.mean(-torch.sum(labels * F.log_softmax(logits, dim=-1), dim=-1))

    model = LeNet()
    loss = torch.compile(model) if compiled else model
    optimiser = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def run():
        optimiser.zero_grad(set_to_none=True)
        loss(tx, ty).backward()
        optimiser.step()
        return tuple(p.detach().numpy().copy() for p in model.weights)
    return run


def case() -> Case:
    x, y, params = data()
    return Case(f"LeNet training step (b{BATCH})", "lenet-train",
                {"relaydsl": lambda: relaydsl_setup(x, y, params),
                 "jax": lambda: jax_setup(x, y, params),
                 "torch": lambda: torch_setup(x, y, params, compiled=False),
                 "torch_compile": lambda: torch_setup(x, y, params, compiled=True)},
                target=("torch", 1 / 1.2),
                notes=["a step: forward, the mean softmax cross-entropy, its gradients w.r.t. "
                       "the eight parameters and a momentum update (lr 0.01, momentum 0.9); "
                       "relaydsl: step = relay.grad(model, loss) of the README's @relay_model "
                       "LeNet, then relay.update_model_params(model, g, relay.Momentum(...)); "
                       "JAX: the whole step jitted; PyTorch: an nn.Module and "
                       "torch.optim.SGD(momentum=0.9); torch.compile: its forward and loss "
                       "compiled; the target: at least 1.2x PyTorch eager's throughput"])


def cases() -> list[Case]:
    return [case()]
