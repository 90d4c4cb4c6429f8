"""psum (relaydsl/op/collective.py) in one process: the identity, against JAX's psum over a
named axis of one rank; with a reducer standing in for k ranks that hold the same values (it
multiplies this rank's part by k), its value and gradient against JAX on k copies; the
passes keep every call; a failing exchange stops the program with what it raised."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.interpreter import InterpreterError
from relaydsl.backend.llvm.executor import PrimitiveKernels
from relaydsl.backend.llvm.native.functions import primitive_of
from relaydsl.ir import Function, TensorType, Var
from relaydsl.op import ops
from relaydsl.op.collective import install_reducer
from relaydsl.transform.pipeline import CompileOptions
from relaydsl.typing import infer_type
from tests.relaydsl.op.harness import OpCase, check_case

rng = np.random.default_rng(5)


def psum_of_one(x):
    """JAX's psum over a named axis of one rank (vmap of a batch of one)."""
    return jax.vmap(lambda v: jax.lax.psum(v, "ranks"), axis_name="ranks")(x[None])[0]


CASES = [
    OpCase("psum", [rng.standard_normal((3, 4)).astype(np.float32)], psum_of_one),
    OpCase("psum", [rng.integers(-5, 5, (5,)).astype(np.int32)], psum_of_one, name="int32"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_psum_matches_jax(case):
    check_case(case)


@pytest.fixture
def ranks():
    """``ranks(k)``: psum as in a job of k ranks holding this rank's values; the parts it
    exchanged, in order."""
    seen: list[np.ndarray] = []

    def be(k: int) -> list[np.ndarray]:
        def reduce(part: np.ndarray) -> None:
            seen.append(part.copy())
            part *= part.dtype.type(k)

        install_reducer(reduce)
        return seen

    yield be
    install_reducer(None)


@relay
def loss(x: Tensor[Float, (2, 3)]) -> Float:
    return relay.sum(relay.tanh(relay.psum(x * x)))


@relay
def dloss(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 3)]:
    return relay.grad(loss)(x)[1][0]


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_value_and_gradient_in_a_job_of_equal_ranks_match_jax(ranks, target):
    k = 3
    seen = ranks(k)
    x = (0.5 * rng.standard_normal((2, 3))).astype(np.float32)  # tanh not saturated

    def job_loss(xs):  # every rank's loss of the sum over the ranks, added up
        return k * jnp.sum(jnp.tanh(jnp.sum(xs * xs, axis=0)))

    copies = jnp.stack([x] * k)
    want = jax.grad(job_loss)(copies)[0]  # d(job's loss)/d(rank 0's x)
    np.testing.assert_allclose(relay.build(loss, target=target)(x), job_loss(copies) / k,
                               rtol=1e-5)
    seen.clear()
    np.testing.assert_allclose(relay.build(dloss, target=target)(x), want, rtol=1e-5,
                               atol=1e-5)
    assert len(seen) == 2  # forward and backward: one exchange each


@relay
def exchanges(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
    unused = relay.psum(x)  # noqa: F841 - its exchange still happens
    c = relay.psum(relay.ones((3,), "float32"))  # of a constant: not folded
    return relay.psum(x) + relay.psum(x) + c  # equal calls: not merged


@pytest.mark.parametrize("target, opt_level", [("interp", 0), ("interp", 3), ("llvm", 3)])
def test_passes_keep_every_exchange(ranks, target, opt_level):
    seen = ranks(2)
    x = np.arange(3, dtype=np.float32)
    out = relay.build(exchanges, target=target, opt_level=opt_level)(x)
    np.testing.assert_array_equal(out, 4 * x + 2)
    assert len(seen) == 4


@relay
def scaled(x: Tensor[Float, ("n",)]) -> Tensor[Float, ("n",)]:
    return relay.psum(x) * 0.5


def test_exchanges_of_shapes_known_only_at_run_time(ranks):
    seen = ranks(2)
    f = relay.build(scaled, target="llvm")
    for n in (3, 5, 7):  # the first signature's native code, then run-time shapes
        x = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(f(x), x, rtol=1e-6)
    assert [p.shape for p in seen] == [(3,), (5,), (7,)]


def test_the_dispatcher_exchanges_too(ranks):
    seen = ranks(3)
    x = Var("x", TensorType((3,), "float32"))
    call = ops.psum(x)
    infer_type(Function([x], call))
    fn = primitive_of(call)  # a primitive function, as FuseOps makes them
    kernels = PrimitiveKernels(CompileOptions.for_target("llvm"))
    np.testing.assert_array_equal(kernels(fn, [np.ones(3, np.float32)]), np.full(3, 3.0))
    assert len(seen) == 1


def _failing(part: np.ndarray) -> None:
    raise RuntimeError("the other ranks are gone")


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_failing_exchange_stops_the_program_with_what_it_raised(target):
    install_reducer(_failing)
    try:
        x = np.ones(3, np.float32)
        with pytest.raises((RuntimeError, InterpreterError),
                           match="the other ranks are gone") as info:
            relay.build(exchanges, target=target)(x)
        if target == "interp":  # located at the call
            assert "test_collective.py" in str(info.value)
        # the next run is not disturbed by the last one's failure
        install_reducer(None)
        np.testing.assert_array_equal(relay.build(exchanges, target=target)(x), 2 * x + 1)
    finally:
        install_reducer(None)
