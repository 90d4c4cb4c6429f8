"""Accumulations into references done in place by native code
(backend/llvm/native/accumulations.py): only when the cell is the total's only holder."""
from __future__ import annotations

import numpy as np

from relaydsl import Float, Int, Tensor, relay
from tests.backend.llvm.native.test_program import native

RNG = np.random.default_rng(142)


START = np.full(64, 0.5, np.float32)


@relay
def running_totals(x: Tensor[Float, (64,)], n: Int
                   ) -> tuple[Tensor[Float, (64,)], Tensor[Float, (64,)]]:
    total = relay.ref(START)  # a constant of the program: never added to in place
    for _ in range(n):
        relay.ref_write(total, relay.ref_read(total) + relay.tanh(x))
    snapshot = relay.ref_read(total)  # held elsewhere now: the next sum is fresh memory
    relay.ref_write(total, relay.ref_read(total) + x)
    return snapshot, relay.ref_read(total)


def test_accumulating_into_a_reference_reuses_its_memory_only_when_nothing_else_holds_it():
    exe = native(running_totals)
    x = RNG.standard_normal(64).astype(np.float32)
    for _ in range(2):  # the constant the cell starts from is intact for the second call
        snapshot, total = exe(x, np.int32(3))
        np.testing.assert_allclose(snapshot, START + 3 * np.tanh(x), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total, START + 3 * np.tanh(x) + x, rtol=1e-5, atol=1e-6)
