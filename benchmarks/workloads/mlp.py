"""MLP 784-512-512-10 (relu hidden layers), batch 64: forward, and forward + backward.

The backward row computes the gradients of the softmax cross-entropy (mean over the batch of
-sum(y * log_softmax(logits))) with respect to all six weights and biases, in the order
w1, b1, w2, b2, w3, b3. Weights are (out, in) in every system (relaydsl's ``dense`` and
PyTorch's ``linear`` layout; JAX and NumPy multiply by the transpose, which BLAS and XLA take
without a copy).
"""
from __future__ import annotations

import numpy as np

from benchmarks.harness import Case
from benchmarks.workloads.common import (
    jax_modules,
    normal,
    relaydsl_runner,
    rng,
    specialize,
    torch_compiled_inference,
    torch_module,
)
from relaydsl import Float, Tensor, relay

BATCH, IN, HIDDEN, OUT = 64, 784, 512, 10


# ---- relaydsl: templates specialised with B (batch), I, H, O --------------------------------
def mlp_forward(x: Tensor[Float, (B, I)],  # noqa: F821  (names bound by specialize)
                w1: Tensor[Float, (H, I)], b1: Tensor[Float, H],  # noqa: F821
                w2: Tensor[Float, (H, H)], b2: Tensor[Float, H],  # noqa: F821
                w3: Tensor[Float, (O, H)], b3: Tensor[Float, O]  # noqa: F821
                ) -> Tensor[Float, (B, O)]:  # noqa: F821
    h1 = relay.relu(relay.dense(x, w1) + b1)
    h2 = relay.relu(relay.dense(h1, w2) + b2)
    return relay.dense(h2, w3) + b3


def mlp_loss(x: Tensor[Float, (B, I)], y: Tensor[Float, (B, O)],  # noqa: F821
             w1: Tensor[Float, (H, I)], b1: Tensor[Float, H],  # noqa: F821
             w2: Tensor[Float, (H, H)], b2: Tensor[Float, H],  # noqa: F821
             w3: Tensor[Float, (O, H)], b3: Tensor[Float, O]) -> Float:  # noqa: F821
    return relay.softmax_cross_entropy(forward(x, w1, b1, w2, b2, w3, b3), y)  # noqa: F821


def mlp_gradients(x: Tensor[Float, (B, I)], y: Tensor[Float, (B, O)],  # noqa: F821
                  w1: Tensor[Float, (H, I)], b1: Tensor[Float, H],  # noqa: F821
                  w2: Tensor[Float, (H, H)], b2: Tensor[Float, H],  # noqa: F821
                  w3: Tensor[Float, (O, H)], b3: Tensor[Float, O]):  # noqa: F821
    # relay.grad of a lambda that closes over the data: gradients w.r.t. the parameters only
    # ([0] would be the loss, [1] the tuple of gradients).
    return relay.grad(lambda v1, c1, v2, c2, v3, c3:
                      loss(x, y, v1, c1, v2, c2, v3, c3))(w1, b1, w2, b2, w3, b3)[1]  # noqa: F821


def relaydsl_functions(batch: int = BATCH):
    """Freshly decorated (forward, gradients) functions, statically shaped."""
    shapes = dict(B=batch, I=IN, H=HIDDEN, O=OUT)
    forward = specialize(mlp_forward, **shapes)
    loss = specialize(mlp_loss, forward=forward, **shapes)
    return forward, specialize(mlp_gradients, loss=loss, **shapes)


# ---- data ----------------------------------------------------------------------------------
def data(batch: int = BATCH, seed: int = 0):
    r = rng(seed)
    x = normal(r, (batch, IN))
    y = np.eye(OUT, dtype=np.float32)[r.integers(0, OUT, batch)]
    params = []
    for fan_out, fan_in in ((HIDDEN, IN), (HIDDEN, HIDDEN), (OUT, HIDDEN)):
        params += [normal(r, (fan_out, fan_in), np.sqrt(2.0 / fan_in)),
                   normal(r, (fan_out,), 0.1)]
    return x, y, tuple(params)


# ---- JAX -------------------------------------------------------------------------------------
def jax_forward(x, w1, b1, w2, b2, w3, b3):
    jax, _ = jax_modules()
    h1 = jax.nn.relu(x @ w1.T + b1)
    h2 = jax.nn.relu(h1 @ w2.T + b2)
    return h2 @ w3.T + b3


def jax_loss(params, x, y):
    jax, jnp = jax_modules()
    logits = jax_forward(x, *params)
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits, axis=-1), axis=-1))


def jax_gradients_fn():
    """A freshly traced jax.jit of the gradients (a new function object each time)."""
    jax, _ = jax_modules()
    return jax.jit(jax.grad(lambda params, x, y: jax_loss(params, x, y)))


# ---- NumPy -----------------------------------------------------------------------------------
def numpy_forward(x, w1, b1, w2, b2, w3, b3):
    h1 = np.maximum(x @ w1.T + b1, 0)
    h2 = np.maximum(h1 @ w2.T + b2, 0)
    return h2 @ w3.T + b3


def numpy_gradients(x, y, w1, b1, w2, b2, w3, b3):
    z1 = x @ w1.T + b1
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w2.T + b2
    h2 = np.maximum(z2, 0)
    z3 = h2 @ w3.T + b3
    e = np.exp(z3 - z3.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    dz3 = (p * y.sum(axis=1, keepdims=True) - y) / x.shape[0]
    dh2 = dz3 @ w3
    dz2 = dh2 * (z2 > 0)
    dh1 = dz2 @ w2
    dz1 = dh1 * (z1 > 0)
    return (dz1.T @ x, dz1.sum(0), dz2.T @ h1, dz2.sum(0), dz3.T @ h2, dz3.sum(0))


# ---- PyTorch ---------------------------------------------------------------------------------
def torch_forward(torch, x, w1, b1, w2, b2, w3, b3):
    F = torch.nn.functional
    h1 = F.relu(F.linear(x, w1, b1))
    h2 = F.relu(F.linear(h1, w2, b2))
    return F.linear(h2, w3, b3)


def torch_loss(torch, x, y, *params):
    logits = torch_forward(torch, x, *params)
    return -(y * torch.log_softmax(logits, dim=-1)).sum(-1).mean()


def torch_gradients(torch, x, y, params, loss=torch_loss):
    """The gradients of `loss` (torch_loss, or it compiled) w.r.t. `params`."""
    return torch.autograd.grad(loss(torch, x, y, *params), params)


# ---- the rows --------------------------------------------------------------------------------
def forward_case() -> Case:
    x, _, params = data()

    def relaydsl_setup():
        forward, _ = relaydsl_functions()
        return relaydsl_runner(forward, x, *params)

    def jax_setup():
        jax, jnp = jax_modules()
        f = jax.jit(jax_forward)
        args = [jnp.asarray(a) for a in (x, *params)]
        return lambda: f(*args)

    def torch_setup():
        torch = torch_module()
        args = [torch.from_numpy(a) for a in (x, *params)]

        def run():
            with torch.no_grad():
                return torch_forward(torch, *args)
        return run

    def torch_compile_setup():
        torch = torch_module()
        return torch_compiled_inference(lambda v, *p: torch_forward(torch, v, *p), params, x)

    return Case("MLP fwd (b64)", "mlp",
                {"relaydsl": relaydsl_setup, "jax": jax_setup,
                 "numpy": lambda: (lambda: numpy_forward(x, *params)), "torch": torch_setup,
                 "torch_compile": torch_compile_setup})


def backward_case() -> Case:
    x, y, params = data()

    def relaydsl_setup():
        _, gradients = relaydsl_functions()
        return relaydsl_runner(gradients, x, y, *params)

    def jax_setup():
        _, jnp = jax_modules()
        f = jax_gradients_fn()
        jp, jx, jy = tuple(jnp.asarray(p) for p in params), jnp.asarray(x), jnp.asarray(y)
        return lambda: f(jp, jx, jy)

    def torch_setup(compiled: bool):
        torch = torch_module()
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        tp = tuple(torch.from_numpy(p.copy()).requires_grad_() for p in params)
        # training: no freezing (it is for inference); AOTAutograd compiles the backward too
        loss = torch.compile(torch_loss) if compiled else torch_loss
        return lambda: torch_gradients(torch, tx, ty, tp, loss)

    return Case("MLP fwd+bwd (b64)", "mlp",
                {"relaydsl": relaydsl_setup, "jax": jax_setup,
                 "numpy": lambda: (lambda: numpy_gradients(x, y, *params)),
                 "torch": lambda: torch_setup(False), "torch_compile": lambda: torch_setup(True)},
                target=("jax", 1.0),
                notes=["gradients of the mean softmax cross-entropy w.r.t. the six weights and "
                       "biases; relaydsl: relay.grad of a lambda over them inside @relay; JAX: "
                       "jax.grad; NumPy: hand-written backward; PyTorch: torch.autograd.grad; "
                       "torch.compile: the loss compiled (its backward by AOTAutograd), "
                       "torch.autograd.grad of it"])


def cases() -> list[Case]:
    return [forward_case(), backward_case()]
