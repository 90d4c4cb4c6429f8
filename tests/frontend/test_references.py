"""References in decorated code (issue 13, item 3): relay.ref, relay.ref_read and
relay.ref_write, as in the MAPL paper; their values and gradients against NumPy and JAX."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay
from relaydsl.errors import DSLSyntaxError, RelayTypeError

X = np.array([0.5, -1.0, 2.0], np.float32)


@pytest.fixture(params=["llvm", "interp"])
def target(request, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", request.param)
    return request.param


@relay
def counter(steps: Int) -> Int:
    count = relay.ref(0)

    def tick():
        relay.ref_write(count, relay.ref_read(count) + 1)
        return relay.ref_read(count)

    for _ in range(steps):
        tick()
    return relay.ref_read(count) * 10 + tick()


def test_a_closure_updates_the_cell_it_captured(target):
    assert int(counter(3)) == 3 * 10 + 4


@relay
def weighted_sum(x: Tensor[Float, (3,)], n: Int) -> Tensor[Float, (3,)]:
    acc = relay.ref(x * 0.0)
    for i in range(n):
        relay.ref_write(acc, relay.ref_read(acc) + x * relay.cast(i, "float32"))
    return relay.ref_read(acc)


def test_a_loop_accumulates_in_a_cell(target):
    np.testing.assert_allclose(weighted_sum(X, 4), X * (0 + 1 + 2 + 3), rtol=1e-6)


@relay
def squared_through_a_cell(x: Tensor[Float, (3,)]) -> Float:
    cell = relay.ref(x)
    relay.ref_write(cell, relay.ref_read(cell) * relay.ref_read(cell))
    relay.ref_write(cell, relay.sin(relay.ref_read(cell)) + x)
    return relay.sum(relay.ref_read(cell))


def test_gradients_flow_through_cells(target):
    def reference(x):
        return jnp.sum(jnp.sin(x * x) + x)

    value, (grad,) = relay.grad(squared_through_a_cell)(X)
    np.testing.assert_allclose(value, reference(X), rtol=1e-5)
    np.testing.assert_allclose(grad, jax.grad(reference)(X), rtol=1e-5)


@relay
def bump(cell: relay.Ref[Tensor[Float, (3,)]], by: Tensor[Float, (3,)]) -> relay.Ref[
        Tensor[Float, (3,)]]:
    relay.ref_write(cell, relay.ref_read(cell) + by)
    return cell


def test_cells_cross_between_python_and_programs(target):
    cell = relay.ref(X.copy())
    returned = bump(cell, X)
    assert returned is cell
    np.testing.assert_allclose(relay.ref_read(cell), 2 * X)
    relay.ref_write(cell, np.zeros(3, np.float32))
    np.testing.assert_allclose(relay.ref_read(bump(cell, X)), X)
    with pytest.raises(TypeError, match=r"argument 'cell': expected Ref\[Tensor"):
        bump(X, X)
    with pytest.raises(TypeError, match=r"relay\.ref_read takes a cell made by relay\.ref"):
        relay.ref_read(X)


def test_misuse_is_a_located_error():
    def wrong_arity(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
        return relay.ref_read(relay.ref(x), x)

    with pytest.raises(DSLSyntaxError, match=r"relay\.ref_read takes 1 positional argument") as e:
        relay(wrong_arity)(X)
    assert "test_references.py" in str(e.value)

    def not_a_cell(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
        return relay.ref_read(x)

    with pytest.raises(RelayTypeError, match="Tensor\\[\\(3,\\), float32\\]"):
        relay(not_a_cell)(X)
