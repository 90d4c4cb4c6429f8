"""Collectives: ops whose result depends on every rank of a distributed job, run inside a
compiled program (JAX's ``lax.psum`` inside ``pmap``; what PyTorch's SyncBatchNorm needs).

``psum(x)`` is the elementwise sum of ``x`` over the ranks (JAX's ``psum`` over the one axis
there is here: the job's ranks). Its facets are those of every op, and one more, the
``Collective`` trait (``Traits.collective``): the compute rule makes this rank's part (a
copy of x), then the ``Collective`` reduces it over the ranks in place, through the reducer
that ``relaydsl.distributed.init`` installs in a job of several ranks. With no reducer (one
process, or MPI not started) it is the identity, and the core needs no MPI.

The gradient: every rank r computes ``y = sum_s x_s`` and its loss L_r(y); the job's loss is
the sum (or the mean) of the L_r, so ``d L / d x_s = sum_r dL_r/dy``: psum of the adjoints,
on every rank, at the same point of the backward pass.

Passes must see that a collective talks to the other ranks, which run the same program: a
call is evaluated where and as often as it is written, on every rank alike. Its calls are
therefore not pure (``transform._util.is_pure``): never folded at compile time (a sum over
ranks is not a compile-time constant), merged with an equal call, moved into a branch
(another rank might take the other one and wait forever), or dropped.

>>> import numpy as np
>>> psum.numpy_ref(np.array([1.0, 2.0], np.float32))   # one process: the identity
array([1., 2.], dtype=float32)
>>> seen = []
>>> previous = install_reducer(lambda a: (seen.append(a.copy()), a.__imul__(2)))  # 2 ranks
>>> psum.numpy_ref(np.array([1.0, 2.0], np.float32)), len(seen)
(array([2., 4.], dtype=float32), 1)
>>> _ = install_reducer(previous)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from relaydsl.ir.expr import Call, Expr
from relaydsl.op.registry import Array, OpDef, OpPattern, Traits, register
from relaydsl.op.tensor import elementwise_rel
from relaydsl.te.rules import elementwise
from relaydsl.typing.relations import NUMERIC

# Sums a C-contiguous array over the ranks, in place (relaydsl.distributed's MPI Allreduce,
# within its timeout); raises to stop the program.
Reducer = Callable[[np.ndarray], None]

_reducer: Reducer | None = None


def install_reducer(reducer: Reducer | None) -> Reducer | None:
    """Make `reducer` the sum over ranks of every collective (None: one process, the
    identity); returns the one it replaces. ``relaydsl.distributed.init`` calls it."""
    global _reducer
    previous, _reducer = _reducer, reducer
    return previous


@dataclass(frozen=True)
class Collective:
    """What an op does across the ranks once its compute rule has made this rank's part:
    ``reduce_in_place(part)`` (the registry's ``Traits.collective``; backends call it on the
    kernel's output)."""

    reduction: str  # only "sum" so far (a mean is a sum divided by psum(1))

    def reduce_in_place(self, part: np.ndarray) -> None:
        """Replace `part`, this rank's C-contiguous array, by its sum over the ranks."""
        reducer = _reducer
        if reducer is not None and part.size:
            reducer(part)


SUM = Collective("sum")


def _psum_numpy(x: Array) -> Array:
    out = np.array(x, copy=True, order="C")
    SUM.reduce_in_place(out)
    return out


def _psum_jax(x: Array) -> Array:
    return x  # the oracle runs in one process, a world of one rank


def _psum_grad(call: Call, g: Expr) -> list[Expr]:
    """d psum(x) = psum(g): each rank's x reaches every rank's result."""
    return [psum(g)]


psum = register(OpDef(
    "psum", ("data",), elementwise_rel("psum", NUMERIC), OpPattern.OPAQUE,
    numpy_ref=_psum_numpy, jax_lower=_psum_jax,
    compute=elementwise("psum", lambda attrs, x: x),  # this rank's part
    gradient=_psum_grad,
    doc="the elementwise sum of x over the ranks of a distributed job (JAX's lax.psum), "
        "inside a compiled program; the identity in one process",
    traits=Traits(collective=SUM),
))


__all__ = ["Collective", "Reducer", "SUM", "install_reducer", "psum"]
