"""Functions re-typed with the shapes of a call (backend/llvm/specialize.py): a build for one
call's shapes never retypes what other builds of the function share (issue 26, item 15)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from relaydsl import Float, Tensor, relay
from relaydsl.ir.expr import Let


@relay
def scaled(x: Tensor[Float, ("n", 16)]) -> Tensor[Float, ("n", 16)]:
    y = relay.tanh(x)
    return y * 2.0


def let_types(fn) -> list[str]:
    out, e = [], fn.body
    while isinstance(e, Let):
        out.append(str(e.var.checked_type))
        e = e.body
    return out


def test_a_call_with_n_2_leaves_the_other_builds_polymorphic():
    before = let_types(scaled.mod[scaled.global_var.name_hint])
    x2 = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    x8 = np.linspace(-2, 2, 128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_allclose(scaled(x2), jnp.tanh(x2) * 2, rtol=1e-6)  # llvm, n = 2
    assert let_types(scaled.mod[scaled.global_var.name_hint]) == before
    np.testing.assert_allclose(scaled.build("interp")(x8), jnp.tanh(x8) * 2, rtol=1e-6)
    np.testing.assert_allclose(scaled(x8), jnp.tanh(x8) * 2, rtol=1e-6)
