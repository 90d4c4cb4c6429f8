"""Kernel calls whose shapes are known only at run time, in native code
(backend/llvm/native/sites.py): kernels made per shape as the program runs, with JAX's
values; shapes that do not hold at run time are located errors (issue 14, item 1)."""
from __future__ import annotations

import threading

import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.interpreter import InterpreterError
from tests.backend.llvm.native.test_program import native

RNG = np.random.default_rng(141)


@relay
def grown(x: Tensor[Float, (1, 3)], n: Int) -> Tensor[Float, (relay.Any, 3)]:
    acc: Tensor[Float, (relay.Any, 3)] = x  # a row more each turn
    for _ in range(n):
        acc = relay.concatenate((acc, relay.tanh(acc[-1:] + x)), axis=0)
    return acc * 2.0


def jax_grown(x, n):
    acc = x
    for _ in range(n):
        acc = jnp.concatenate([acc, jnp.tanh(acc[-1:] + x)], axis=0)
    return acc * 2.0


def test_sizes_known_only_at_run_time_run_natively_with_a_kernel_per_shape():
    exe = native(grown)
    program = exe.program.native
    assert program.boxed  # tensors carry their shapes
    x = RNG.standard_normal((1, 3)).astype(np.float32)
    for n in (0, 1, 6, 2, 6, 9, 1):  # more sizes than a site keeps in its ways; some again
        np.testing.assert_allclose(exe(x, np.int32(n)), jax_grown(x, n), rtol=1e-5)
    concatenate = max(program._sites, key=lambda s: len(s.records))
    assert sorted(k[0] for k in concatenate.records) == list(range(1, 10))  # each made once
    errors: list[BaseException] = []

    def work(n):
        try:
            for _ in range(20):
                np.testing.assert_allclose(exe(x, np.int32(n)), jax_grown(x, n), rtol=1e-5)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in (3, 12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


@relay
def pair_up(x: Tensor[Float, (1, 3)], n: Int) -> Tensor[Float, (relay.Any, 3)]:
    acc: Tensor[Float, (relay.Any, 3)] = x
    for _ in range(n):
        acc = relay.concatenate((acc, x), axis=0)
    return acc + relay.concatenate((x, x), axis=0)  # broadcasts only for 1 or 2 rows


@relay
def claimed(x: Tensor[Float, (1, 3)], n: Int) -> Tensor[Float, (2, 3)]:
    acc: Tensor[Float, (relay.Any, 3)] = x
    for _ in range(n):
        acc = relay.concatenate((acc, x), axis=0)
    pair: Tensor[Float, (2, 3)] = acc  # holds for n == 1 only
    return relay.tanh(pair)


def test_shapes_that_do_not_hold_at_run_time_are_located_errors():
    from relaydsl.errors import RelayTypeError

    x = np.ones((1, 3), np.float32)
    exe = native(pair_up)
    np.testing.assert_allclose(exe(x, np.int32(1)), np.full((2, 3), 2.0))
    with pytest.raises(RelayTypeError, match=r"cannot be broadcast.*\(4, 3\) and \(2, 3\)"):
        exe(x, np.int32(3))
    np.testing.assert_allclose(exe(x, np.int32(0)), np.full((2, 3), 2.0))  # and runs on
    for target in ("llvm", "interp"):
        exe = relay.build(claimed, target=target)
        np.testing.assert_allclose(exe(x, np.int32(1)), np.tanh(np.ones((2, 3))), rtol=1e-6)
        with pytest.raises(InterpreterError, match=r"\(2, 3\).* at run time"):
            exe(x, np.int32(3))


@relay
def doubled_sum(xs: relay.List[Tensor[Float, ("n",)]], init: Tensor[Float, (relay.Any,)]
          ) -> Tensor[Float, (relay.Any,)]:
    match xs:
        case relay.Cons(h, rest):
            return h * 2.0 + doubled_sum(rest, init)
        case _:
            return init


def test_values_that_fix_no_size_get_native_code_with_run_time_shapes():
    exe = relay.build(doubled_sum, target="llvm")
    assert exe.program.path == "run-time shapes"
    init = RNG.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(exe([], init), init)  # an empty list fixes no "n"
    assert exe.program._generic_native.boxed
    xs = [RNG.standard_normal(4).astype(np.float32) for _ in range(3)]
    np.testing.assert_allclose(exe(xs, init), sum(2 * x for x in xs) + init, rtol=1e-5)


@relay
def tiled(x: Tensor[Float, (1, 3)], n: Int) -> Tensor[Float, (relay.Any, 3)]:
    acc: Tensor[Float, (relay.Any, 3)] = x
    for _ in range(n):
        acc = relay.concatenate((acc, x), axis=0)
    return relay.tile(acc, reps=(2, 1))


def test_a_gradient_rule_needing_static_sizes_is_a_located_error():
    from relaydsl.errors import IRError

    with pytest.raises(IRError, match=r"test_sites.py:\d+:\d+: the gradient of "
                                      r"tile needs static dims"):
        relay.grad(tiled)
