"""A loop's memory in native code (backend/llvm/native/loops.py): released at the back edge,
with what the loop carries and what its root cells hold copied; the values of JAX, of the
interpreter and of the same loop driven from Python (issue 21, item 4)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.llvm.native import program as native_module
from relaydsl.backend.llvm.native import loops as native_loops
from tests.frontend.models import net, net_loss

RNG = np.random.default_rng(21)
W64 = (np.random.default_rng(64).standard_normal((64, 64)) * 0.1).astype(np.float32)


def native(fn):
    exe = relay.build(fn, target="llvm")
    assert exe.program.path == "native", exe.program.path
    return exe


@pytest.fixture
def release_every_turn(monkeypatch):
    """Loops compiled from now on release their memory at every turn that may."""
    monkeypatch.setattr(native_loops, "_RECLAIM", 0)
    monkeypatch.setattr(native_loops, "_COPY_RATIO", 0)


@pytest.fixture
def never_release(monkeypatch):
    """Loops compiled from now on keep their turns' memory (as before this module)."""
    monkeypatch.setattr(native_loops, "_RECLAIM", 1 << 62)


@relay
def iterate(x: Tensor[Float, (64, 64)], s: Tensor[Float, ()], n: Int
            ) -> Tensor[Float, (64, 64)]:
    scale = relay.ref(s)  # a reference cell the loop writes
    acc = x
    for _ in range(n):
        acc = relay.tanh(acc @ W64) * relay.ref_read(scale)
    return acc


def test_a_loop_carrying_tensors_releases_its_turns_memory():
    exe = native(iterate)
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    out = exe(x, np.float32(0.9), np.int32(3000))  # 3000 turns of 2 x 16 KiB
    assert exe.program.native._arena_bytes <= 2 << 20  # not the ~100 MB of every turn

    def body(_, acc):
        return jnp.tanh(acc @ W64) * 0.9

    np.testing.assert_allclose(out, jax.lax.fori_loop(0, 3000, body, x), rtol=1e-4,
                               atol=1e-5)


@relay
def tally(x: Tensor[Float, (64,)], n: Int) -> Tensor[Float, (64,)]:
    total = relay.ref(x * 0.0)
    acc = x
    for _ in range(n):
        acc = relay.tanh(acc) * 1.5
        relay.ref_write(total, relay.ref_read(total) + acc)  # a root cell: the loop's own
    return relay.ref_read(total)


@relay
def tally_through_a_closure(x: Tensor[Float, (64,)], n: Int) -> Tensor[Float, (64,)]:
    total = relay.ref(x * 0.0)

    def add(v: Tensor[Float, (64,)]) -> Tensor[Float, (64,)]:
        relay.ref_write(total, relay.ref_read(total) + v)  # an older cell, not the loop's
        return v
    acc = x
    for _ in range(n):
        acc = add(relay.tanh(acc) * 1.5)
    return relay.ref_read(total)


@relay
def nested(x: Tensor[Float, (64,)], n: Int) -> Tensor[Float, (64,)]:
    acc = x
    for _ in range(n):
        cell = relay.ref(acc)  # made in this turn: writing it keeps nothing alive
        for _ in range(3):
            relay.ref_write(cell, relay.tanh(relay.ref_read(cell)) + 0.5)
        acc = relay.ref_read(cell)
    return acc


@relay
def nested_root(x: Tensor[Float, (64,)], n: Int) -> Tensor[Float, (64,)]:
    total = relay.ref(x * 0.0)
    for _ in range(n):
        for _ in range(3):  # the inner loop's root cell, older than the outer loop too
            relay.ref_write(total, relay.tanh(relay.ref_read(total)) + x)
    return relay.ref_read(total)


@pytest.mark.parametrize("fn", [tally, tally_through_a_closure, nested, nested_root],
                         ids=lambda f: f.__name__)
def test_what_cells_hold_survives_a_release_at_every_turn(release_every_turn, fn):
    v = RNG.standard_normal(64).astype(np.float32)
    got = native(fn)(v, np.int32(40))
    np.testing.assert_allclose(got, relay.build(fn, target="interp")(v, np.int32(40)),
                               rtol=1e-5)


def test_a_loop_writing_its_own_cell_runs_in_bounded_memory(monkeypatch):
    """Each turn writes a new total into a cell older than the loop: the cell is a root,
    copied at a release, so 20,000 turns of 3 x 4 KiB (240 MB) stay within 3 MiB."""
    v = RNG.standard_normal(1024).astype(np.float32) * 0.1

    @relay
    def long_tally(x: Tensor[Float, (1024,)], n: Int) -> Tensor[Float, (1024,)]:
        total = relay.ref(x * 0.0)
        acc = x
        for _ in range(n):
            acc = relay.tanh(acc) * 1.5
            relay.ref_write(total, relay.ref_read(total) * 0.5 + acc)
        return relay.ref_read(total)

    monkeypatch.setattr(native_module, "_MEMORY_BUDGET", 3 << 20)
    got = native(long_tally)(v, np.int32(20_000))

    def body(_, carry):
        acc, total = carry
        acc = jnp.tanh(acc) * 1.5
        return acc, total * 0.5 + acc
    np.testing.assert_allclose(got, jax.lax.fori_loop(0, 20_000, body, (v, v * 0))[1],
                               rtol=1e-5, atol=1e-6)


# ---- Figure 4: the training loop inside @relay ---------------------------------------------

@relay
def train(data: tuple[Tensor[Float, (3000, 4)], Tensor[Float, (3000, 3)]]):
    model = relay.create_model(net, seed=5, init="glorot")
    for x, y in data:
        relay.update_model_params(model, relay.grad(model, net_loss, (x, y)), lr=0.1)
    return relay.export_model(model)


def examples(n: int):
    x = RNG.standard_normal((n, 4)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0).astype(int)
    return x, np.eye(3, dtype=np.float32)[labels]


def test_figure_4_trains_in_the_memory_of_a_few_turns(monkeypatch):
    """The loop writes the model's new parameters into the model's cell every turn: 3,000
    turns (5 MiB in all) run within a 3 MiB budget (a chunk is 1 MiB), and train the model
    the Python loop trains."""
    x, y = examples(3000)
    monkeypatch.setattr(native_module, "_MEMORY_BUDGET", 3 << 20)
    predict = native(train)((x, y))
    model = relay.create_model(net, seed=5, init="glorot")
    step = relay.grad(model, net_loss)
    for i in range(len(x)):
        relay.update_model_params(model, step(x[i], y[i]), lr=0.1)
    for i in range(0, 3000, 300):
        np.testing.assert_allclose(predict(x[i]), model(x[i]), rtol=1e-4, atol=1e-5)


def test_without_releases_the_same_loop_runs_out_of_that_memory(monkeypatch, never_release):
    """The budget above is a real bound: the loop keeping every turn exceeds it."""
    x, y = examples(3000)

    @relay
    def train_again(data: tuple[Tensor[Float, (3000, 4)], Tensor[Float, (3000, 3)]]):
        model = relay.create_model(net, seed=5, init="glorot")
        for x, y in data:
            relay.update_model_params(model, relay.grad(model, net_loss, (x, y)), lr=0.1)
        return relay.export_model(model)

    monkeypatch.setattr(native_module, "_MEMORY_BUDGET", 3 << 20)
    with pytest.raises(MemoryError, match="more than 3 MiB"):
        native(train_again)((x, y))


# ---- loops carrying data: released while the data is older than the loop -----------------------

@relay
def walk(xs: relay.List[Tensor[Float, (256,)]], acc: Tensor[Float, (256,)]
         ) -> Tensor[Float, (256,)]:
    total = acc
    for x in xs:  # the loop carries the list's tail: made before the loop, never copied
        total = relay.tanh(total + x) * 1.5
    return total


@relay.adt
class Tree:
    Leaf: Tensor[Float, (64,)]
    Node: (Tree, Tree)


@relay
def tree_sum(t: Tree) -> Tensor[Float, (64,)]:
    match t:
        case Tree.Leaf(v):
            return relay.tanh(v)
        case Tree.Node(left, right):
            return tree_sum(left) + tree_sum(right)


@relay
def walk_tree(t: Tree, n: Int) -> Tensor[Float, (64,)]:
    acc = relay.zeros((64,), "float32")
    for _ in range(n):  # the loop captures the tree and walks it every turn
        acc = relay.tanh(acc + tree_sum(t))
    return acc


def test_a_loop_walking_a_list_from_python_runs_in_bounded_memory(monkeypatch):
    xs = RNG.standard_normal((5000, 256)).astype(np.float32) * 0.1
    acc = np.zeros(256, np.float32)
    monkeypatch.setattr(native_module, "_MEMORY_BUDGET", 3 << 20)  # 5,000 turns of 2 KiB
    got = native(walk)(list(xs), acc)

    def body(total, x):
        return jnp.tanh(total + x) * 1.5, None
    np.testing.assert_allclose(got, jax.lax.scan(body, acc, xs)[0], rtol=1e-5, atol=1e-6)


def test_a_loop_walking_a_tree_repeatedly_runs_in_bounded_memory(monkeypatch):
    leaves = RNG.standard_normal((16, 64)).astype(np.float32)
    tree = Tree.Leaf(leaves[0])
    for leaf in leaves[1:]:
        tree = Tree.Node(tree, Tree.Leaf(leaf))
    monkeypatch.setattr(native_module, "_MEMORY_BUDGET", 3 << 20)  # 2,000 turns of 8 KiB
    got = native(walk_tree)(tree, np.int32(2000))
    acc = jnp.zeros(64)
    total = jnp.sum(jnp.tanh(leaves), axis=0)
    for _ in range(2000):
        acc = jnp.tanh(acc + total)
    np.testing.assert_allclose(got, acc, rtol=1e-4, atol=1e-5)


@relay
def build(n: Int, x: Tensor[Float, (256,)]) -> relay.List[Tensor[Float, (256,)]]:
    xs = relay.Nil()
    for _ in range(n):  # the list is made in the loop: its memory stays (not released)
        x = x * 0.9 + relay.tanh(x)  # every cell holds other values
        xs = relay.Cons(x, xs)
    return xs


def test_a_loop_building_a_list_keeps_it_whole(release_every_turn):
    x = RNG.standard_normal(256).astype(np.float32)
    got = native(build)(np.int32(50), x)
    expected = relay.build(build, target="interp")(np.int32(50), x)
    while got.name == "Cons":
        np.testing.assert_allclose(got.fields[0], expected.fields[0], rtol=1e-5)
        got, expected = got.fields[1], expected.fields[1]
    assert expected.name == "Nil"
