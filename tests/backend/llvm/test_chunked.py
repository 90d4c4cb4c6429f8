"""Kernels generic in a leading batch dimension (backend/llvm/chunked.py), checked with JAX.

A function with a symbolic batch dimension is compiled once for chunks of rows; every
later batch size runs on those kernels (whole chunks in place, the rest padded; a sum over
the batch adds up its chunks), with no compile. Functions that are not row-separable (a
mean over the batch, a reshape mixing rows, a transpose) are not chunked (they get kernels
reading their sizes at run time, test_generic.py, or per shape): the tests check both the
values and which way each call site went.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay, relay_model, te
from relaydsl.backend.llvm import chunked, executor, kernel
from relaydsl.backend.llvm.chunked import chunk_levels, separable
from relaydsl.backend.llvm.lower import Lowered

RNG = np.random.default_rng(7)
SIZES = (3, 1, 8, 9, 63, 64, 65, 130, 1000)  # around the chunk sizes of 64, 8 and 1 rows


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def generic_sites(exe) -> list:
    """The call sites of the program's native code of run-time shapes, by whether their
    kernels are generic in the batch size (True), per shape (False)."""
    return [next(iter(s._chunked.values()), None) is not None
            for s in exe.program._generic_native._sites]


def test_chunk_levels_go_down_by_four_to_a_row_of_512_elements():
    assert chunk_levels(784) == [64, 16, 4, 1]
    assert chunk_levels(784, 784 * 512) == [512, 128, 32, 8, 2, 1]  # as many rows as weights
    assert chunk_levels(10) == [4096, 1024, 256, 64]
    assert chunk_levels(1) == [32768, 8192, 2048, 512]
    assert chunk_levels(100_000) == [1]
    for width in (1, 3, 10, 100, 784, 5000):
        levels = chunk_levels(width)
        assert levels == sorted(levels, reverse=True)
        assert levels[0] * width >= chunked.CHUNK_ELEMENTS or width >= chunked.CHUNK_ELEMENTS
        assert all(a // b <= chunked.LEVEL for a, b in itertools.pairwise(levels))


class Plan:  # what ChunkedKernel.plan reads
    plan = chunked.ChunkedKernel.plan

    def __init__(self, rows: list[int], pass_rows: int, sums: tuple[bool, ...] = ()):
        self.rows, self.pass_rows, self.sums = rows, pass_rows, sums


@pytest.mark.parametrize("n", [0, 1, 3, 7, 8, 9, 63, 64, 65, 100, 1000, 4097])
@pytest.mark.parametrize("pass_rows", [1, 16])
def test_a_plan_covers_every_row_once_and_pads_at_most_one_chunk(n, pass_rows):
    rows = [64, 8, 1]
    plan = Plan(rows, pass_rows).plan(n)
    assert len(plan) == len(rows)
    start = 0
    for first, taken in plan:
        assert first == start  # in order, no gap, no overlap
        start += taken
    assert start == n
    assert sum(taken % size != 0 for (_, taken), size in zip(plan, rows)) <= 1


def test_a_plan_pads_rather_than_rereading_heavy_weights():
    assert Plan([64, 8, 1], 1).plan(3) == [(0, 0), (0, 0), (0, 3)]  # three rows of one
    assert Plan([64, 8, 1], 16).plan(3) == [(0, 0), (0, 3), (3, 0)]  # one chunk of 8


@relay
def mlp(x: Tensor[Float, ("n", 784)], w1: Tensor[Float, (784, 32)],
        w2: Tensor[Float, (32, 10)]) -> Tensor[Float, ("n", 10)]:
    return relay.softmax(relay.matmul(relay.relu(relay.matmul(x, w1)), w2))


@relay
def mlp_fresh(x: Tensor[Float, ("n", 784)], w1: Tensor[Float, (784, 32)],
              w2: Tensor[Float, (32, 10)]) -> Tensor[Float, ("n", 10)]:
    return relay.softmax(relay.matmul(relay.relu(relay.matmul(x, w1)), w2))


def jax_mlp(x, w1, w2):
    return jax.nn.softmax(jax.nn.relu(x @ w1) @ w2, axis=-1)


def test_an_mlp_compiles_once_for_every_batch_size():
    exe = relay.build(mlp, target="llvm")
    w1, w2 = rand(784, 32) * 0.05, rand(32, 10)
    for n in SIZES:  # the first gets code of its own, the others share generic code
        x = rand(n, 784)
        np.testing.assert_allclose(exe(x, w1, w2), jax_mlp(x, w1, w2), rtol=1e-5, atol=1e-6)
    built = kernel.stats["modules"]
    for n in (2, 7, 50, 99, 999, 4):
        x = rand(n, 784)
        np.testing.assert_allclose(exe(x, w1, w2), jax_mlp(x, w1, w2), rtol=1e-5, atol=1e-6)
    assert kernel.stats["modules"] == built  # each chunk size was compiled once, before
    assert all(generic_sites(exe))
    assert len(exe.program._compiled) == 1


def test_a_call_compiles_only_the_chunk_sizes_its_plan_uses():
    exe = relay.build(mlp_fresh, target="llvm")
    w1, w2 = rand(784, 32) * 0.05, rand(32, 10)
    for n in (64, 5):  # its own code at 64; the generic code's chunks of 4 and 1 rows at 5
        exe(rand(n, 784), w1, w2)
    compiled = [[k is not None for k in next(iter(s._chunked.values())).kernels]
                for s in exe.program._generic_native._sites]
    assert compiled[0] == [False, False, True, True]


@relay
def lenet(x: Tensor[Float, ("n", 1, 12, 12)], w1: Tensor[Float, (4, 1, 3, 3)],
          b1: Tensor[Float, (4,)], w2: Tensor[Float, (100, 10)]) -> Tensor[Float, ("n", 10)]:
    h = relay.relu(relay.bias_add(relay.conv2d(x, w1), b1))
    h = relay.max_pool2d(h, pool_size=(2, 2), strides=(2, 2))
    return relay.log_softmax(relay.matmul(relay.reshape(h, (-1, 100)), w2))


def jax_lenet(x, w1, b1, w2):
    h = jax.lax.conv_general_dilated(x, w1, (1, 1), "VALID")
    h = jax.nn.relu(h + b1[None, :, None, None])
    h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return jax.nn.log_softmax(h.reshape(h.shape[0], -1) @ w2, axis=-1)


def test_a_convolutional_network_runs_every_batch_size_on_generic_kernels():
    exe = relay.build(lenet, target="llvm")
    params = rand(4, 1, 3, 3), rand(4), rand(100, 10) * 0.1
    for n in (2, 1, 7, 17, 70):
        x = rand(n, 1, 12, 12)
        np.testing.assert_allclose(exe(x, *params), jax_lenet(x, *params), rtol=1e-4,
                                   atol=1e-5)
    assert all(generic_sites(exe))  # the reshape keeps the batch axis as it is


@relay
def two_outputs(x: Tensor[Float, ("n", 5)], k: Tensor[Int, ("n", 5)], w: Tensor[Float, (5,)]):
    return relay.tanh(x) * w, relay.cast(k * 3, "float32") + x


def test_a_kernel_with_two_outputs_and_an_integer_input_runs_every_batch_size():
    exe = relay.build(two_outputs, target="llvm")
    w = rand(5)
    for n in (2, 1, 9, 17, 130):
        x, k = rand(n, 5), RNG.integers(-5, 5, (n, 5)).astype(np.int32)
        got = exe(x, k, w)
        np.testing.assert_allclose(got[0], jnp.tanh(x) * w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], (k * 3).astype(np.float32) + x, rtol=1e-6)
    assert all(generic_sites(exe))


@relay
def batch_sum(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, (6,)]:
    return relay.sum(relay.exp(x), axis=0)


@relay
def batch_centred(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, ("n", 6)]:
    return x - relay.mean(x, axis=0, keepdims=True)


@relay
def rows_mixed(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, (relay.Any, 3)]:
    return relay.reshape(x, (-1, 3)) * 2.0


@relay
def columns(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, (6, "n")]:
    return relay.transpose(relay.sigmoid(x))


def test_a_sum_over_the_batch_adds_up_its_chunks():
    exe = relay.build(batch_sum, target="llvm")
    for n in (2, 9, 1, 70, 0, 1000):
        x = rand(n, 6)
        np.testing.assert_allclose(exe(x), jnp.exp(x).sum(0), rtol=1e-5, atol=1e-5)
    assert all(generic_sites(exe))


@relay_model
def classifier(x: Tensor[Float, ("n", 20)]) -> Tensor[Float, ("n", 4)]:
    return relay.linear(relay.tanh(relay.linear(x, num_hidden=16)), num_hidden=4)


@relay
def classifier_loss(x: Tensor[Float, ("n", 20)], y: Tensor[Float, ("n", 4)]) -> Float:
    return relay.sum(-(y * relay.log_softmax(classifier(x))))  # (a mean's 1/n: per shape)


def test_a_training_step_runs_new_batch_sizes_on_the_chunks_it_has():
    model = relay.create_model(classifier, seed=0)
    step = relay.grad(model, classifier_loss)
    params = {k: jnp.asarray(v) for k, v in model.params.items()}
    names = sorted(params)
    assert [n.split(".")[-1] for n in names] == ["bias", "weight", "bias", "weight"]

    def jax_loss(p, x, y):
        h = jnp.tanh(x @ p[names[1]].T + p[names[0]])
        return -jnp.sum(y * jax.nn.log_softmax(h @ p[names[3]].T + p[names[2]]))

    def check(n: int) -> None:
        x, y = rand(n, 20), np.eye(4, dtype=np.float32)[RNG.integers(0, 4, n)]
        grads, want = step(x, y), jax.grad(jax_loss)(params, x, y)
        for k in names:
            np.testing.assert_allclose(grads[k], want[k], rtol=2e-4, atol=2e-4, err_msg=k)

    for n in (8, 4095):  # its own code at 8; 4095 rows take a chunk of every size up to 2048
        check(n)
    built = kernel.stats["modules"]
    for n in (3, 17, 64, 1, 100, 999):
        check(n)
    assert kernel.stats["modules"] == built


@pytest.mark.parametrize("fn, reference", [
    (batch_centred, lambda x: x - x.mean(0, keepdims=True)),
    (rows_mixed, lambda x: x.reshape(-1, 3) * 2.0),
    (columns, lambda x: jax.nn.sigmoid(x).T),
], ids=["mean over the batch", "reshape mixing rows", "transpose"])
def test_a_function_that_is_not_row_separable_is_not_chunked(fn, reference):
    exe = relay.build(fn, target="llvm")
    for n in (2, 9, 1, 70):
        x = rand(n, 6)
        np.testing.assert_allclose(exe(x), reference(x), rtol=1e-5, atol=1e-5)
    assert not all(generic_sites(exe))  # (centring: the mean per shape, the rest generic)


@relay
def two_batches(x: Tensor[Float, (relay.Any, 5)], y: Tensor[Float, (relay.Any, 5)]
                ) -> Tensor[Float, (relay.Any, 5)]:
    return relay.tanh(x) * y


def test_batched_inputs_of_unequal_sizes_broadcast_on_a_kernel_of_their_shapes():
    exe = relay.build(two_batches, target="llvm")
    for nx, ny in ((4, 4), (3, 3), (1, 6), (6, 1), (9, 9)):
        x, y = rand(nx, 5), rand(ny, 5)
        np.testing.assert_allclose(exe(x, y), jnp.tanh(x) * y, rtol=1e-5, atol=1e-6)


def test_a_hot_signature_gets_native_code_of_its_own(monkeypatch):
    monkeypatch.setattr(executor, "HOT_CALLS", 4)
    exe = relay.build(mlp, target="llvm")
    w1, w2 = rand(784, 32) * 0.05, rand(32, 10)
    for n in (1, 5, 5, 5, 5, 5, 7):
        x = rand(n, 784)
        np.testing.assert_allclose(exe(x, w1, w2), jax_mlp(x, w1, w2), rtol=1e-5, atol=1e-6)
    signatures = [k[0][0][0] for k in exe.program._compiled]
    assert 5 in signatures and 7 not in signatures


# ---- the proof, on tensor expressions written by hand ----------------------------------------

def lowered(rows: int, body) -> Lowered:
    """A kernel of one batched input x (rows, 4) and one other w (4,): `body(x, w, i, j)`."""
    x, w = te.placeholder((rows, 4), "float32", "x"), te.placeholder((4,), "float32", "w")
    out = te.compute((rows, 4), lambda i, j: body(x, w, i, j), "out")
    return Lowered([x, w], [], [out], False)


@pytest.mark.parametrize("body, expected", [
    (lambda x, w, i, j: x[i, j] * w[j], True),
    (lambda x, w, i, j: te.exp(x[i, 3 - j]) + w[0], True),
    (lambda x, w, i, j: x[i, j] * te.cast("float32", i), False),   # the row's position
    (lambda x, w, i, j: x[0, j], False),                            # another row
    (lambda x, w, i, j: x[i // 2, j], False),                       # rows mixed
    (lambda x, w, i, j: w[j] * 2.0, True),                          # the same in every row
    (lambda x, w, i, j: w[j] * te.cast("float32", i), False),       # a row's position
], ids=["row-wise", "reversed columns", "position", "row 0", "rows mixed", "every row alike",
        "position alone"])
def test_the_proof_accepts_row_wise_expressions_only(body, expected):
    assert (separable(lowered(8, body), lowered(9, body), [True, False], 8) is not None) \
        is expected


def test_the_proof_refuses_a_constant_that_depends_on_the_rows():
    def scaled(rows: int) -> Lowered:  # x / rows: row-wise reads, but 1/rows baked in
        return lowered(rows, lambda x, w, i, j: x[i, j] * (1.0 / rows))

    def eighth(rows: int) -> Lowered:  # the same constant at every size
        return lowered(rows, lambda x, w, i, j: x[i, j] * 0.125)

    assert separable(eighth(8), eighth(9), [True, False], 8) is not None
    assert separable(scaled(8), scaled(9), [True, False], 8) is None
