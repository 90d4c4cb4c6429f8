"""Temporaries in a frame (backend/llvm/native/frames.py): the tensors a function's spine
passes from kernel to kernel share memory where their lifetimes do not overlap; values
against JAX."""
from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np

from relaydsl import Float, Tensor, relay
from relaydsl.backend.llvm.native import NativeProgram
from relaydsl.backend.llvm.native.abi import Word
from relaydsl.backend.llvm.native.frames import frame
from relaydsl.ir.expr import Call, Let

RNG = np.random.default_rng(33)
W = (RNG.standard_normal((16, 16)) * 0.3).astype(np.float32)


def prepared(fn):
    program = relay.build(fn, target="llvm").program
    return program.mod, program.entry


@relay
def chain(x: Tensor[Float, (16, 16)]) -> Tensor[Float, (16, 16)]:
    a = relay.tanh(x @ W)
    b = relay.tanh(a @ W)
    c = relay.tanh(b @ W)
    d = relay.tanh(c @ W)
    return d @ W


def spine_calls(fn) -> list[Call]:
    calls, e = [], fn.body
    while isinstance(e, Let):
        if isinstance(e.value, Call):
            calls.append(e.value)
        e = e.body
    return calls


def test_a_chain_of_five_kernels_takes_two_slots():
    mod, entry = prepared(chain)
    layout = frame(mod[entry])
    slot = 16 * 16 * 4  # bytes of one tensor (a multiple of the alignment)
    # a..d placed (the last kernel's output is the result: memory of its own)
    assert sorted(layout.offsets.values()) == [0, 0, slot, slot]
    assert layout.size == 2 * slot
    placed = [layout.offsets.get(id(c)) for c in spine_calls(mod[entry])]
    # neighbours never share: a kernel's output is not where its input is
    kernels = [p for p in placed if p is not None]
    assert all(p != q for p, q in itertools.pairwise(kernels))


@relay
def escaping(x: Tensor[Float, (16, 16)]):
    a = relay.tanh(x @ W)
    b = relay.tanh(a @ W)  # read by the next kernel, then returned: its own memory
    c = relay.tanh(b @ W)
    return (b, c)


def test_what_the_result_holds_is_not_placed_and_values_hold():
    mod, entry = prepared(escaping)
    layout = frame(mod[entry])
    assert len(layout.offsets) == 1  # a only
    x = RNG.standard_normal((16, 16)).astype(np.float32)
    b, c = NativeProgram(mod, entry)(x)
    eb = jnp.tanh(jnp.tanh(x @ W) @ W)
    np.testing.assert_allclose(b, eb, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, jnp.tanh(eb @ W), rtol=1e-5, atol=1e-6)


def test_the_chain_runs_with_jax_s_values():
    mod, entry = prepared(chain)
    x = RNG.standard_normal((16, 16)).astype(np.float32)
    expected = x
    for _ in range(4):
        expected = jnp.tanh(expected @ W)
    np.testing.assert_allclose(NativeProgram(mod, entry)(x), expected @ W, rtol=1e-5,
                               atol=1e-5)


W512 = (RNG.standard_normal((512, 512)) * 0.05).astype(np.float32)


@relay
def wide(x: Tensor[Float, (256, 512)]) -> Tensor[Float, (256, 512)]:
    return relay.tanh(x @ W512)  # written in place: only the scratch is in the arena


def test_the_arena_grows_to_the_most_a_call_held_so_later_calls_take_no_chunk():
    """The GEMM's packing scratch is taken and freed within the call: the arena must still
    grow to hold it, or every call takes it from malloc (fresh pages) again."""
    native = NativeProgram(*prepared(wide))
    x = RNG.standard_normal((256, 512)).astype(np.float32)
    expected = jnp.tanh(x @ W512)
    np.testing.assert_allclose(native(x), expected, rtol=1e-4, atol=1e-5)
    assert native._local.state[Word.PEAK] > 0  # the first call needed chunks
    np.testing.assert_allclose(native(x), expected, rtol=1e-4, atol=1e-5)
    assert native._local.state[Word.PEAK] == 0
