"""External kernels (backend/llvm/native/externals.py): calls of primitive functions that
native code makes into Python, with JAX's values; what their bodies raise is raised by the
call, which leaves the program usable; Ctrl-C stops the run (issue 23, item 4)."""
from __future__ import annotations

import os
import signal

import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.llvm.native import ExternalKernel, NativeProgram
from relaydsl.backend.llvm.native.sites import leaf_types
from relaydsl.ir.types import FuncType, TensorType
from tests.backend.llvm.native.test_program import native

RNG = np.random.default_rng(23)


@relay
def steps(x: Tensor[Float, (2, 3)], n: Int) -> Tensor[Float, (2, 3)]:
    h = x
    for _ in range(n):
        h = relay.tanh(h) * 2.0 + x
    return relay.sigmoid(h)


def jax_steps(x, n):
    h = x
    for _ in range(n):
        h = jnp.tanh(h) * 2.0 + x
    return 1 / (1 + jnp.exp(-h))


def externals(op: str, body, taken: list | None = None):
    """The hook making each primitive function that calls `op` an external kernel of
    `body` (noted in `taken`)."""

    def hook(fn):
        if f"{op}(" not in str(fn):
            return None
        if taken is not None:
            taken.append(fn)
        t = fn.checked_type
        assert isinstance(t, FuncType)
        return ExternalKernel(body, leaf_types(t.arg_types), leaf_types([t.ret_type]))

    return hook


def program(fn, hook, **options) -> NativeProgram:
    exe = native(fn)
    return NativeProgram(exe.program.mod, fn.global_var.name_hint, exe.program.options,
                         externals=hook, **options)


def test_an_external_kernel_runs_each_call_in_python_between_native_kernels():
    calls = []

    def tanh_twice_plus(inputs, outputs):  # the fused tanh(h) * 2 + x
        calls.append([a.copy() for a in inputs])
        h, x = inputs
        assert not h.flags.writeable  # the run's memory, read only
        np.add(np.tanh(h) * 2.0, x, out=outputs[0])

    taken: list = []
    p = program(steps, externals("tanh", tanh_twice_plus, taken), count_calls=True)
    assert len(taken) == 1
    for n in (0, 1, 4, 4, 1):  # (the views of a layout met before see the new values)
        x = RNG.standard_normal((2, 3)).astype(np.float32)
        calls.clear()
        np.testing.assert_allclose(p(x, np.int32(n)), jax_steps(x, n), rtol=1e-5, atol=1e-6)
        assert len(calls) == n and all(np.array_equal(c[1], x) for c in calls)
        counts = p.call_counts(reset=True)
        assert counts[taken[0]] == n  # native code counts external calls as kernels'
        assert sum(counts.values()) == 3 * n + 2  # (i < n, i + 1, the step) a turn; test, end


def test_what_a_body_raises_is_raised_by_the_call_and_the_program_runs_again():
    fail_at = [2]

    def body(inputs, outputs):
        fail_at[0] -= 1
        if fail_at[0] == 0:
            raise ZeroDivisionError("the external kernel failed on its second call")
        np.add(np.tanh(inputs[0]) * 2.0, inputs[1], out=outputs[0])

    p = program(steps, externals("tanh", body))
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(ZeroDivisionError, match="failed on its second call") as info:
        p(x, np.int32(5))
    assert any(frame.name == "body" for frame in info.traceback)  # the body's own traceback
    np.testing.assert_allclose(p(x, np.int32(3)), jax_steps(x, 3), rtol=1e-5, atol=1e-6)


def test_an_external_kernel_of_the_wrong_types_is_refused_at_build():
    def hook(fn):
        if "tanh(" not in str(fn):
            return None
        return ExternalKernel(lambda i, o: None, [TensorType((2, 3))], [TensorType((3, 2))])

    with pytest.raises(ValueError, match=r"an external kernel of .* for a primitive function"):
        program(steps, hook)


def test_a_body_calling_its_own_program_is_refused_not_corrupting_the_run():
    p: list[NativeProgram] = []
    x = RNG.standard_normal((2, 3)).astype(np.float32)

    def body(inputs, outputs):
        p[0](x, np.int32(0))

    p.append(program(steps, externals("tanh", body)))
    with pytest.raises(RuntimeError, match="called from inside one of its own external"):
        p[0](x, np.int32(1))
    np.testing.assert_allclose(p[0](x, np.int32(0)), jax_steps(x, 0), rtol=1e-5)


@relay
def exp_rows_grown(x: Tensor[Float, (1, 3)], n: Int) -> Tensor[Float, (relay.Any, 3)]:
    acc: Tensor[Float, (relay.Any, 3)] = x
    for _ in range(n):
        acc = relay.concatenate((acc, relay.exp(x)), axis=0)
    return acc


def test_an_external_kernel_among_kernels_of_run_time_shapes():
    def body(inputs, outputs):
        np.exp(inputs[0], out=outputs[0])

    p = program(exp_rows_grown, externals("exp", body))
    assert p.boxed  # tensors carry their shapes: the external's inputs are checked
    x = RNG.standard_normal((1, 3)).astype(np.float32)
    want = jnp.concatenate([x] + [jnp.exp(x)] * 3, axis=0)
    np.testing.assert_allclose(p(x, np.int32(3)), want, rtol=1e-6)


def test_a_sigint_during_an_external_kernel_stops_the_run():
    # Python's own handler, as an interactive user has it (a suite started in the
    # background has SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    calls = []

    def body(inputs, outputs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        np.add(np.tanh(inputs[0]) * 2.0, inputs[1], out=outputs[0])

    try:
        p = program(steps, externals("tanh", body))
        x = RNG.standard_normal((2, 3)).astype(np.float32)
        with pytest.raises(KeyboardInterrupt):
            p(x, np.int32(1000))
        assert len(calls) == 2  # stopped at the next turn
        calls.clear()
        np.testing.assert_allclose(p(x, np.int32(1)), jax_steps(x, 1), rtol=1e-5)
    finally:
        signal.signal(signal.SIGINT, previous)
