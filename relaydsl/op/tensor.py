"""Elementwise and broadcasting ops: unary math, binary arithmetic, comparisons, logic."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from relaydsl.op.registry import OpDef, OpPattern, register
from relaydsl.typing.relations import broadcast_rel, broadcast_to_bool_rel, identity_rel


def _unary(name: str, numpy_ref, jax_lower, doc: str) -> None:
    register(OpDef(name, ("data",), identity_rel, OpPattern.ELEMWISE, numpy_ref, jax_lower, doc=doc))


def _binary(name: str, numpy_ref, jax_lower, doc: str) -> None:
    register(OpDef(name, ("lhs", "rhs"), broadcast_rel, OpPattern.BROADCAST, numpy_ref, jax_lower, doc=doc))


def _compare(name: str, numpy_ref, jax_lower, doc: str) -> None:
    register(OpDef(name, ("lhs", "rhs"), broadcast_to_bool_rel, OpPattern.BROADCAST, numpy_ref, jax_lower,
                   doc=doc, differentiable=False))


_unary("negative", np.negative, jnp.negative, "-x")
_unary("exp", np.exp, jnp.exp, "e**x")

_binary("add", np.add, jnp.add, "x + y, broadcasting")

_compare("equal", np.equal, jnp.equal, "x == y, broadcasting; bool result")
_binary("subtract", np.subtract, jnp.subtract, "x - y, broadcasting")
