"""The binary TreeLSTM of Tai, Socher and Manning (ACL 2015; the N-ary TreeLSTM, N = 2) over
the first 200 trees of the real SST dev set: inference, and one training step per tree (over
the first 50: JAX's steps take ~0.1 s each).

The paper's setting: hidden 150, fixed 300-wide word vectors (here a fixed random vector per
word of the trees' vocabulary, stored in the leaves), a 5-class classifier of the root. At a
leaf with word vector x, and at a node with children states (h_l, c_l), (h_r, c_r)::

    leaf:  i, o, u = split(W x + b);            c = σ(i)·tanh(u)
    node:  i, f_l, f_r, o, u = split(U [h_l; h_r] + b')
           c = σ(i)·tanh(u) + σ(f_l)·c_l + σ(f_r)·c_r
    both:  h = σ(o)·tanh(c);   root: log_softmax(V h + b'')

The training loss is the root's cross-entropy against its SST label; a step is the forward
pass, the loss and the gradients of the six parameters (no update, so every step of a run
sees the same weights and the systems can be compared).

relaydsl: a ``@relay.adt`` tree (``Leaf: Tensor[Float, (1, 300)]``, ``Node: (Tree, Tree)``)
and a ``@relay_model`` recursing over it with ``match``; training is
``relay.grad(model, loss)(tree, y)``. PyTorch eager: an ``nn.Module`` recursing over a Python
tree (nested pairs, NumPy-free leaves); torch.compile: the leaf and node cells compiled, the
recursion in Python. JAX: the cells ``jax.jit``-ed, the recursion in Python (one jit per tree
shape would compile 200 programs); training is ``jax.value_and_grad`` of that recursion.
NumPy: the same recursion (inference only).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import Case
from benchmarks.workloads.common import jax_modules, normal, rng, torch_module
from relaydsl import Float, Tensor, relay, relay_model
from relaydsl.datasets.sst import NUM_CLASSES, Leaf, sst, vocabulary
from relaydsl.datasets.sst import Tree as SSTTree

WORD, HIDDEN, CLASSES, TREES, TRAIN_TREES = 300, 150, NUM_CLASSES, 200, 50
SHARED_SST = Path(__file__).resolve().parents[3] / "shared" / "data" / "sst"

# The weights in the layout every system uses: linear layers as (out, in) matrices, the gates
# stacked in the order of the equations above.
PARAMS = ("leaf_w", "leaf_b", "node_w", "node_b", "out_w", "out_b")
# the relaydsl model's parameter for each (its linear layers in the order they appear)
RELAY_NAMES = {"leaf_w": "linear_0.weight", "leaf_b": "linear_0.bias",
               "node_w": "linear_1.weight", "node_b": "linear_1.bias",
               "out_w": "linear_2.weight", "out_b": "linear_2.bias"}

# A Python tree, what the other systems recurse over: a leaf is its word vector (1, WORD),
# a node the pair of its children.
PyTree = Any


@relay.adt
class Tree:
    Leaf: Tensor[Float, (1, WORD)]
    Node: (Tree, Tree)


def relay_tree_lstm(hidden: int):
    """The relaydsl TreeLSTM with `hidden` units: (the model: tree -> class log-probabilities
    (1, 5), the loss: (tree, one-hot label) -> the root's cross-entropy)."""

    @relay_model
    def tree_lstm(tree: Tree) -> Tensor[Float, (1, CLASSES)]:
        def cell(t: Tree) -> tuple[Tensor[Float, (1, hidden)], Tensor[Float, (1, hidden)]]:
            match t:
                case Tree.Leaf(x):
                    i, o, u = relay.split(relay.linear(x, num_hidden=3 * hidden), 3, axis=1)
                    c = relay.sigmoid(i) * relay.tanh(u)
                    return relay.sigmoid(o) * relay.tanh(c), c
                case Tree.Node(left, right):
                    h_l, c_l = cell(left)
                    h_r, c_r = cell(right)
                    gates = relay.linear(relay.concatenate((h_l, h_r), axis=1),
                                         num_hidden=5 * hidden)
                    i, f_l, f_r, o, u = relay.split(gates, 5, axis=1)
                    c = (relay.sigmoid(i) * relay.tanh(u) + relay.sigmoid(f_l) * c_l
                         + relay.sigmoid(f_r) * c_r)
                    return relay.sigmoid(o) * relay.tanh(c), c

        h, _ = cell(tree)
        return relay.log_softmax(relay.linear(h, num_hidden=CLASSES), axis=1)

    @relay
    def loss(tree: Tree, y: Tensor[Float, (1, CLASSES)]) -> Float:
        return -relay.sum(tree_lstm(tree) * y)

    return tree_lstm, loss


# ---- data ------------------------------------------------------------------------------------
def sst_trees(count: int = TREES) -> list[SSTTree]:
    """The first `count` trees of the SST dev set."""
    return sst("dev", fallbacks=[SHARED_SST])[:count]


def weights(hidden: int, seed: int = 0) -> dict[str, np.ndarray]:
    r = rng(seed)
    return {"leaf_w": normal(r, (3 * hidden, WORD), 1 / np.sqrt(WORD)),
            "leaf_b": normal(r, (3 * hidden,), 0.1),
            "node_w": normal(r, (5 * hidden, 2 * hidden), 1 / np.sqrt(2 * hidden)),
            "node_b": normal(r, (5 * hidden,), 0.1),
            "out_w": normal(r, (CLASSES, hidden), 1 / np.sqrt(hidden)),
            "out_b": normal(r, (CLASSES,), 0.1)}


def python_trees(trees: list[SSTTree], seed: int = 1) -> list[PyTree]:
    """`trees` with a fixed random vector (1, WORD) per word of their vocabulary at the
    leaves, as nested pairs."""
    vocab = vocabulary(trees)
    vectors = normal(rng(seed), (len(vocab), 1, WORD))

    def convert(t: SSTTree) -> PyTree:
        if isinstance(t, Leaf):
            return vectors[vocab[t.word]]
        return convert(t.left), convert(t.right)
    return [convert(t) for t in trees]


def map_leaves(fn: Callable[[np.ndarray], Any], tree: PyTree) -> PyTree:
    if isinstance(tree, tuple):
        return map_leaves(fn, tree[0]), map_leaves(fn, tree[1])
    return fn(tree)


def to_adt(tree: PyTree):
    if isinstance(tree, tuple):
        return Tree.Node(to_adt(tree[0]), to_adt(tree[1]))
    return Tree.Leaf(tree)


def labels(trees: list[SSTTree]) -> list[np.ndarray]:
    """Each root's label, one-hot (1, 5)."""
    return [np.eye(CLASSES, dtype=np.float32)[[t.label]] for t in trees]


# ---- relaydsl ----------------------------------------------------------------------------------
def relay_model_with(w: dict[str, np.ndarray]):
    """(model, loss function) with the weights `w`."""
    net, loss = relay_tree_lstm(w["out_w"].shape[1])
    model = relay.create_model(net)
    for key, name in RELAY_NAMES.items():
        if model.params[name].shape != w[key].shape:
            raise AssertionError(f"{name} is {model.params[name].shape}, not {key}'s "
                                 f"{w[key].shape}: the model's layers changed order")
        model.params[name] = w[key]
    return model, loss


# ---- NumPy, JAX, PyTorch: the same recursion over a Python tree --------------------------------
def numpy_forward(w: dict[str, np.ndarray], tree: PyTree) -> np.ndarray:
    def sigmoid(v):
        return 1.0 / (1.0 + np.exp(-v))
    leaf_wt, node_wt = w["leaf_w"].T, w["node_w"].T

    def cell(t):
        if isinstance(t, tuple):
            (h_l, c_l), (h_r, c_r) = cell(t[0]), cell(t[1])
            i, f_l, f_r, o, u = np.split(np.concatenate((h_l, h_r), axis=1) @ node_wt
                                         + w["node_b"], 5, axis=1)
            c = sigmoid(i) * np.tanh(u) + sigmoid(f_l) * c_l + sigmoid(f_r) * c_r
        else:
            i, o, u = np.split(t @ leaf_wt + w["leaf_b"], 3, axis=1)
            c = sigmoid(i) * np.tanh(u)
        return sigmoid(o) * np.tanh(c), c
    scores = cell(tree)[0] @ w["out_w"].T + w["out_b"]
    shifted = scores - scores.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def jax_functions():
    """(forward(p, tree), loss(p, tree, y)): the recursion in Python over jitted cells."""
    jax, jnp = jax_modules()

    @jax.jit
    def leaf(p, x):
        i, o, u = jnp.split(x @ p["leaf_w"].T + p["leaf_b"], 3, axis=1)
        c = jax.nn.sigmoid(i) * jnp.tanh(u)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c

    @jax.jit
    def node(p, h_l, c_l, h_r, c_r):
        i, f_l, f_r, o, u = jnp.split(jnp.concatenate((h_l, h_r), axis=1) @ p["node_w"].T
                                      + p["node_b"], 5, axis=1)
        c = (jax.nn.sigmoid(i) * jnp.tanh(u) + jax.nn.sigmoid(f_l) * c_l
             + jax.nn.sigmoid(f_r) * c_r)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c

    @jax.jit
    def classify(p, h):
        return jax.nn.log_softmax(h @ p["out_w"].T + p["out_b"], axis=1)

    def cell(p, t):
        if isinstance(t, tuple):
            return node(p, *cell(p, t[0]), *cell(p, t[1]))
        return leaf(p, t)

    def forward(p, tree):
        return classify(p, cell(p, tree)[0])

    def loss(p, tree, y):
        return -jnp.sum(forward(p, tree) * y)
    return forward, loss


def torch_net(w: dict[str, np.ndarray], compiled: bool):
    """The PyTorch TreeLSTM with the weights `w`; `compiled`: its cells through
    torch.compile."""
    torch = torch_module()
    nn = torch.nn

    class TreeLSTM(nn.Module):
        def __init__(self, hidden: int):
            super().__init__()
            self.leaf = nn.Linear(WORD, 3 * hidden)
            self.node = nn.Linear(2 * hidden, 5 * hidden)
            self.out = nn.Linear(hidden, CLASSES)
            if compiled:
                self.leaf_cell = torch.compile(self.leaf_cell)
                self.node_cell = torch.compile(self.node_cell)

        def leaf_cell(self, x):
            i, o, u = self.leaf(x).chunk(3, dim=1)
            c = torch.sigmoid(i) * torch.tanh(u)
            return torch.sigmoid(o) * torch.tanh(c), c

        def node_cell(self, h_l, c_l, h_r, c_r):
            i, f_l, f_r, o, u = self.node(torch.cat((h_l, h_r), dim=1)).chunk(5, dim=1)
            c = (torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(f_l) * c_l
                 + torch.sigmoid(f_r) * c_r)
            return torch.sigmoid(o) * torch.tanh(c), c

        def cell(self, t):
            if isinstance(t, tuple):
                return self.node_cell(*self.cell(t[0]), *self.cell(t[1]))
            return self.leaf_cell(t)

        def forward(self, tree):
            return torch.log_softmax(self.out(self.cell(tree)[0]), dim=1)

    net = TreeLSTM(w["out_w"].shape[1])
    with torch.no_grad():
        for key in PARAMS:
            layer, kind = key.split("_")
            getattr(net, layer).get_parameter("weight" if kind == "w" else "bias").copy_(
                torch.from_numpy(w[key]))
    return net


# ---- the rows ------------------------------------------------------------------------------------
def inference_case(trees: list[SSTTree], hidden: int = HIDDEN) -> Case:
    w, pytrees = weights(hidden), python_trees(trees)

    def relaydsl_setup():
        model, _ = relay_model_with(w)
        adts = [to_adt(t) for t in pytrees]
        return lambda: [model(t) for t in adts]

    def jax_setup():
        _, jnp = jax_modules()
        forward, _ = jax_functions()
        p = {k: jnp.asarray(v) for k, v in w.items()}
        jtrees = [map_leaves(jnp.asarray, t) for t in pytrees]
        return lambda: [forward(p, t) for t in jtrees]

    def torch_setup(compiled: bool):
        torch = torch_module()
        net = torch_net(w, compiled)
        ttrees = [map_leaves(torch.from_numpy, t) for t in pytrees]

        def run():
            with torch.no_grad():
                return [net(t) for t in ttrees]
        return run

    return Case(f"TreeLSTM h{hidden}, per SST tree", "treelstm",
                {"relaydsl": relaydsl_setup, "jax": jax_setup,
                 "numpy": lambda: (lambda: [numpy_forward(w, t) for t in pytrees]),
                 "torch": lambda: torch_setup(False),
                 "torch_compile": lambda: torch_setup(True)},
                items=len(trees), target=("torch", 0.5),
                notes=[f"the root's class log-probabilities of each of the first {len(trees)} "
                       "SST dev trees, the mean time per tree; relaydsl: a @relay_model "
                       "recursing over a @relay.adt tree with match; JAX: the cells jitted, "
                       "the recursion in Python; torch.compile: the leaf and node cells "
                       "compiled, the recursion in Python"])


def train_case(trees: list[SSTTree], hidden: int = HIDDEN) -> Case:
    w, pytrees, ys = weights(hidden), python_trees(trees), labels(trees)

    def relaydsl_setup():
        model, loss = relay_model_with(w)
        step = relay.grad(model, loss)
        adts = [to_adt(t) for t in pytrees]

        def run():
            losses = []
            for t, y in zip(adts, ys):
                grads = step(t, y)
                losses.append(step.last_loss)
            return losses, [grads[RELAY_NAMES[k]] for k in PARAMS]
        return run

    def jax_setup():
        jax, jnp = jax_modules()
        _, loss = jax_functions()
        value_and_grad = jax.value_and_grad(loss)
        p = {k: jnp.asarray(v) for k, v in w.items()}
        jtrees = [map_leaves(jnp.asarray, t) for t in pytrees]
        jys = [jnp.asarray(y) for y in ys]

        def run():
            losses = []
            for t, y in zip(jtrees, jys):
                value, grads = value_and_grad(p, t, y)
                losses.append(value)
            return losses, [grads[k] for k in PARAMS]
        return run

    def torch_setup(compiled: bool):
        torch = torch_module()
        net = torch_net(w, compiled)
        ttrees = [map_leaves(torch.from_numpy, t) for t in pytrees]
        tys = [torch.from_numpy(y) for y in ys]
        params = [getattr(net, k.split("_")[0]).get_parameter(
            "weight" if k.endswith("_w") else "bias") for k in PARAMS]

        def run():
            losses = []
            for t, y in zip(ttrees, tys):
                net.zero_grad(set_to_none=True)
                loss = -(net(t) * y).sum()
                loss.backward()
                losses.append(loss.detach())
            # a parameter the last tree does not use (a leaf alone: the node cell) has none
            return losses, [torch.zeros_like(p) if p.grad is None else p.grad
                            for p in params]
        return run

    return Case(f"TreeLSTM h{hidden} training step, per SST tree", "treelstm-train",
                {"relaydsl": relaydsl_setup, "jax": jax_setup,
                 "torch": lambda: torch_setup(False),
                 "torch_compile": lambda: torch_setup(True)},
                items=len(trees), target=("torch", 0.5),
                notes=[f"over the first {len(trees)} SST dev trees (JAX takes ~0.1 s a tree); a "
                       "step: forward, the root's cross-entropy, the gradients of the six "
                       "parameters (no update); checked: every tree's loss and the last tree's "
                       "gradients; relaydsl: relay.grad(model, loss)(tree, y); JAX: "
                       "value_and_grad of the Python recursion over jitted cells; PyTorch: "
                       "loss.backward(); NumPy: not written (no autodiff)"])
