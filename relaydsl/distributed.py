"""Data-parallel training on MPI: every rank holds the whole model, takes its slice of each
global batch, and the ranks average their gradients before every update.

Launched as ``mpiexec -n 4 python train.py`` (on a cluster ``srun -n 64 python train.py``);
``pip install "relaydsl[distributed]"`` brings mpi4py and the MPICH wheel, whose ``mpiexec``
runs the ranks on one machine over shared memory::

    from relaydsl import relay, distributed as dist
    dist.init()                                   # a no-op in a plain `python train.py`
    model = relay.create_model(lenet, seed=0)
    dist.broadcast_model(model)                   # every rank starts from rank 0's weights
    opt = relay.Momentum(lr=0.01, momentum=0.9)   # the lr of one process at this global batch
    for x, y in dist.shard((images, labels), batch_size=64, seed=0, epoch=epoch):
        g = dist.allreduce(relay.grad(model, loss, (x, y)), op="mean")
        relay.update_model_params(model, g, opt)
    if dist.rank() == 0:
        relay.save_model(model, "m", optimizer=opt)   # written beside "m.npz", then renamed

In a plain ``python train.py`` (no MPI launcher in the environment) the world is one rank:
``init`` does not start MPI, and nothing needs mpi4py.

**Learning rate.** As PyTorch DDP and Horovod: ``allreduce(g, op="mean")`` is the mean of
the ranks' gradients, each the gradient of the mean loss over the rank's slice, so it is the
gradient of the mean loss over the global batch (slices of equal size; with unequal ones pass
``count=len(x)`` for the exact weighted mean). N ranks at global batch B therefore take the
same steps as one process at batch B, with the same learning rate. Keeping the per-rank batch
fixed while adding ranks multiplies the global batch by N; the usual rule then is to scale
the learning rate by N (Goyal et al., 2017), with a warm-up.

**Model state.** ``broadcast_model`` gives every rank rank 0's parameters and state (and,
given one, the optimiser's state); from there the ranks stay equal because every rank
applies the same averaged gradients. The state that ``relay.grad`` updates is kept
consistent by ``allreduce``: it averages the floating-point state of the model whose
gradients it reduces (batch_norm's running statistics) in the same buffer, so every rank
holds the same running statistics. Dropout keys are state too: their step counters advance
in lockstep on every rank, and each rank's ``k0`` has the rank folded in by
``broadcast_model`` (rank 0 keeps its own), so the ranks drop different units of their
different examples instead of repeating rank 0's masks.

**Batch norm.** By default a batch_norm layer normalises with the statistics of the rank's
own slice, as PyTorch DDP does without SyncBatchNorm: the result equals one process computing
each slice's gradient and averaging them, not one batch norm over the global batch (the
averaged running variance leaves out the variance between the slices' means).
``relay.batch_norm(x, sync=True)`` is SyncBatchNorm: the compiled training step combines the
ranks' per-channel counts, means and variances exactly with ``relay.psum``, a collective op
inside the program (relaydsl/op/collective.py), whose exchanges go through the reducer
``init`` installs (an MPI allreduce in place, within the timeout); N ranks then take the
steps, and keep the running statistics, of one process on the global batch. It is opt-in,
as in PyTorch, flax and Horovod: it costs two small exchanges forward and two backward per
layer and step, and matters most when each rank's slice is small.

**Buffers.** ``allreduce`` packs the gradients into a few contiguous buffers (buckets of at
most ``bucket_bytes``, 25 MiB as PyTorch DDP's, one per dtype at least; a model of less
than 25 MiB of float32 gradients is one fused buffer per step), starts a non-blocking
allreduce of each bucket as soon as it is packed, so packing and unpacking overlap the
communication of the other buckets, and returns views of the reduced buffers.

**No overlap with the backward pass.** PyTorch DDP starts a bucket's allreduce as soon as
autograd has produced its gradients, while the backward pass continues. Here the backward
pass is one compiled program (``relay.grad``) that returns all the gradients when it ends,
so there is no point inside it at which a bucket is ready: the allreduce starts after the
backward pass. benchmarks/distributed.py measures what that costs (the communication time
per step beside the compute time) and DISTRIBUTED.md models it at scale.

**Failures.** A collective waits at most ``timeout`` seconds (``init(timeout=)``,
``$RELAYDSL_DIST_TIMEOUT``, default 600) for the other ranks; then the waiting rank prints
which collective it was in and aborts the whole job (``MPI_Abort``), as NCCL's watchdog
does, so a hung or dead rank fails the job instead of hanging it; a psum inside a compiled
program waits the same way (the message names it). An exception that no code
catches on one rank aborts the job at once (as ``python -m mpi4py`` does). A save from rank 0
is atomic (``relay.save_model`` writes a temporary file and renames it), so a rank dying
mid-save leaves the previous file whole.

**Threads.** Ranks sharing a machine share its cores: unless ``RELAYDSL_NUM_THREADS`` is set,
``init`` sets it to the usable cores divided by the ranks on this machine (at least 1), before
the first program compiles (call ``init`` first). ``mpiexec -bind-to core`` gives each rank
one core of its own.

**Inside ``@relay``.** A training loop written inside a decorated function (Figure 4) runs as
one compiled program, which exchanges data with the other ranks only through its collectives:
``dist.allreduce(g, op="mean")`` of the gradients of ``relay.grad(model, loss, data)``
becomes a ``relay.psum`` of each gradient (divided by ``psum(1)``, the number of ranks, for
the mean; one exchange per gradient, not bucketed), and ``batch_norm(sync=True)`` works there
too. A call of any other function of this module there is a DSLSyntaxError at the call:
call it in Python and pass what it gives in.

This module works on any model with ``params`` (a dict of NumPy arrays) and ``state_names``
and on gradients as ``relay.grad`` returns them (dicts, tuples, lists, ADT values, arrays),
without importing the frontend: it sits beside ``relaydsl.datasets`` in the layers
(pyproject.toml's import contracts), and mpi4py is imported only when a launcher started
the process.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sys
import time
import weakref
from typing import Any as AnyValue, Iterator, NamedTuple, NoReturn

import numpy as np

from relaydsl import settings
from relaydsl.errors import RelayError
from relaydsl.op.collective import install_reducer

__all__ = [
    "DistributedError", "allreduce", "barrier", "broadcast", "broadcast_model", "init",
    "last_allreduce", "rank", "shard", "sync_state", "world_size",
]

# Environment variables that MPI launchers set in every process they start: MPICH's and Intel
# MPI's hydra (PMI_RANK), PMIx (Open MPI 5, Slurm --mpi=pmix), Open MPI's own, MVAPICH.
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK",
                      "MV2_COMM_WORLD_RANK")
DEFAULT_BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's bucket_cap_mb


class DistributedError(RelayError):
    """A misuse of relaydsl.distributed, or ranks that disagree (different models, different
    gradient structures)."""


@dataclasses.dataclass
class _World:
    comm: AnyValue  # an mpi4py communicator, or None for one rank without MPI
    rank: int
    size: int
    local_size: int  # ranks on this machine
    timeout: float


_world: _World | None = None
# Models given to broadcast_model: allreduce averages the state of the one whose gradients it
# reduces (weakly held, so a finished model is not kept alive).
_models: list[weakref.ref] = []


def launched_by_mpi() -> bool:
    """Whether an MPI launcher (mpiexec, srun) started this process."""
    return any(os.environ.get(v) for v in LAUNCHER_VARIABLES)


def init(*, timeout: float | None = None, mpi: bool | None = None) -> None:
    """Join the job's ranks. Call it first, before anything compiles; later calls change only
    the timeout.

    mpi: None (the default) uses MPI when an MPI launcher started the process (or mpi4py has
    already initialised MPI), else runs as world size 1 without importing mpi4py; True
    requires MPI; False never uses it.
    timeout: seconds a collective waits for the other ranks before aborting the job (default
    ``$RELAYDSL_DIST_TIMEOUT``, else 600).
    """
    global _world
    if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout < math.inf):
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    if _world is not None:
        if timeout is not None:
            _world.timeout = float(timeout)
        return
    seconds = float(timeout) if timeout is not None else settings.dist_timeout()
    already = "mpi4py.MPI" in sys.modules and sys.modules["mpi4py.MPI"].Is_initialized()
    if mpi is False or not (mpi or already or launched_by_mpi()):
        _world = _World(None, 0, 1, 1, seconds)
        return
    MPI = _import_mpi()
    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    _world = _World(comm, comm.Get_rank(), comm.Get_size(), local.Get_size(), seconds)
    local.Free()
    if _world.size > 1:
        if not os.environ.get("RELAYDSL_NUM_THREADS", "").strip():
            threads = max(1, settings.usable_cores() // _world.local_size)
            os.environ["RELAYDSL_NUM_THREADS"] = str(threads)
        _install_abort_on_exception()
        install_reducer(_sum_over_ranks)


def _import_mpi() -> AnyValue:
    try:
        import mpi4py
    except ImportError:
        raise DistributedError(
            "this process was started by an MPI launcher but mpi4py is not installed: "
            "pip install 'relaydsl[distributed]' (mpi4py and the MPICH wheel)") from None
    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.thread_level = "funneled"  # MPI is called from the main thread only
    from mpi4py import MPI
    return MPI


def _the_world() -> _World:
    if _world is None:
        init()
    assert _world is not None
    return _world


def rank() -> int:
    """This process's rank, 0 .. world_size() - 1 (0 without MPI)."""
    return _the_world().rank


def world_size() -> int:
    """The number of ranks in the job (1 without MPI)."""
    return _the_world().size


def _install_abort_on_exception() -> None:
    """An exception no code catches ends this rank; the others would wait in their next
    collective until the timeout. Abort the job at once instead."""
    previous = sys.excepthook

    def abort_job(kind, value, traceback) -> None:
        previous(kind, value, traceback)
        world = _world
        if world is not None and world.comm is not None and world.size > 1:
            _abort(world, f"rank {world.rank} of {world.size} stopped on the exception above; "
                          "aborting the job")

    sys.excepthook = abort_job


# Seconds between a rank's last words and MPI_Abort: the launcher forwards each rank's output
# through a pipe, and an abort ends the job before the launcher has read what was just written.
ABORT_GRACE = 1.0


def _abort(world: _World, message: str) -> NoReturn:
    """Say why on standard error, then abort every rank of the job (MPI_Abort)."""
    sys.stdout.flush()
    sys.stderr.write(f"relaydsl.distributed: {message}\n")
    sys.stderr.flush()
    time.sleep(ABORT_GRACE)
    world.comm.Abort(1)
    raise SystemExit(1)  # not reached: MPI_Abort ends this process


def _wait(world: _World, requests: list, what: str) -> None:
    """Complete `requests` (non-blocking collectives), polling; past the timeout, abort the
    job with a message naming the collective."""
    from mpi4py import MPI

    start = time.monotonic()
    deadline = start + world.timeout
    polls = 0
    while not MPI.Request.Testall(requests):
        polls += 1
        if polls % 256:
            continue
        now = time.monotonic()
        if now > deadline:
            _abort(world, f"rank {world.rank} of {world.size} waited {now - start:.0f} s in "
                          f"{what} for the other ranks: one of them has hung, died or taken "
                          "another path through the program. Aborting the job. (The limit, "
                          f"{world.timeout:g} s, is dist.init(timeout=...) or "
                          "$RELAYDSL_DIST_TIMEOUT.)")
        if now - start > 0.05:  # a long wait (another rank compiling): poll without spinning
            time.sleep(0.001)


def _sum_over_ranks(part: np.ndarray) -> None:
    """psum's exchange inside a compiled program (relaydsl.op.collective's reducer): an
    allreduce of this rank's part, in place, within the timeout."""
    from mpi4py import MPI

    world = _the_world()
    _wait(world, [world.comm.Iallreduce(MPI.IN_PLACE, part, op=MPI.SUM)],
          f"psum of {part.dtype.name}{list(part.shape)} inside a compiled program (a "
          "batch_norm(sync=True), or a relay.psum)")


def barrier() -> None:
    """Wait until every rank has reached this point (within the timeout)."""
    world = _the_world()
    if world.comm is not None and world.size > 1:
        _wait(world, [world.comm.Ibarrier()], "barrier()")


# ---- trees of arrays: gradients as relay.grad returns them -----------------------------------

def _is_adt(value: AnyValue) -> bool:
    """An ADT value as programs return them (backend.interpreter.ConstructorValue): a
    dataclass of a constructor and its fields."""
    return (dataclasses.is_dataclass(value) and not isinstance(value, type)
            and hasattr(value, "constructor") and isinstance(getattr(value, "fields", None), tuple))


def _dict_order(d: dict) -> list:
    """The keys of `d` in an order equal on every rank: sorted when they are all strings."""
    keys = list(d)
    return sorted(keys) if all(isinstance(k, str) for k in keys) else keys


def _leaves(tree: AnyValue, out: list[np.ndarray]) -> list[np.ndarray]:
    """The arrays of `tree` (dicts, lists, tuples, ADT values; arrays and numbers as leaves)
    in a fixed order."""
    if isinstance(tree, dict):
        for k in _dict_order(tree):
            _leaves(tree[k], out)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            _leaves(v, out)
    elif _is_adt(tree):
        for v in tree.fields:
            _leaves(v, out)
    elif tree is None:
        pass
    else:
        array = np.asarray(tree)
        if array.dtype.kind not in "iu" and array.dtype not in (np.float32, np.float64):
            raise TypeError(f"dist: cannot reduce a {type(tree).__name__} of dtype "
                            f"{array.dtype}: the leaves are arrays or numbers of an integer "
                            "dtype, float32 or float64")
        out.append(array)
    return out


def _rebuild(tree: AnyValue, new: Iterator[np.ndarray]) -> AnyValue:
    """`tree` with its leaves replaced, in _leaves's order, by the arrays of `new`."""
    if isinstance(tree, dict):
        values = {k: _rebuild(tree[k], new) for k in _dict_order(tree)}
        return {k: values[k] for k in tree}  # in the caller's order
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a named tuple
        return type(tree)(*(_rebuild(v, new) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_rebuild(v, new) for v in tree)
    if _is_adt(tree):
        return dataclasses.replace(tree, fields=tuple(_rebuild(v, new) for v in tree.fields))
    if tree is None:
        return None
    array = next(new)
    if isinstance(tree, np.ndarray):
        return array
    if isinstance(tree, np.generic):
        return array[()]
    return type(tree)(array[()]) if isinstance(tree, (int, float)) else array


def _signature(arrays: list[np.ndarray]) -> tuple:
    return tuple((a.shape, a.dtype.str) for a in arrays)


class _Slot(NamedTuple):
    leaf: int
    offset: int
    size: int


class _Bucket(NamedTuple):
    dtype: np.dtype
    size: int
    slots: tuple[_Slot, ...]


_plans: dict[tuple, tuple[_Bucket, ...]] = {}
_checked: set[tuple] = set()  # layouts every rank has been seen to share


def _plan(signature: tuple, bucket_bytes: int) -> tuple[_Bucket, ...]:
    """The leaves grouped into buckets: per dtype, in order, at most `bucket_bytes` each (a
    larger leaf is a bucket of its own)."""
    key = (signature, bucket_bytes)
    plan = _plans.get(key)
    if plan is not None:
        return plan
    by_dtype: dict[str, list[int]] = {}
    for i, (_, dtype) in enumerate(signature):
        by_dtype.setdefault(dtype, []).append(i)
    buckets: list[_Bucket] = []
    for dtype_str, leaves in by_dtype.items():
        dtype = np.dtype(dtype_str)
        slots: list[_Slot] = []
        offset = 0
        for i in leaves:
            size = math.prod(signature[i][0])
            if slots and (offset + size) * dtype.itemsize > bucket_bytes:
                buckets.append(_Bucket(dtype, offset, tuple(slots)))
                slots, offset = [], 0
            slots.append(_Slot(i, offset, size))
            offset += size
        if slots:
            buckets.append(_Bucket(dtype, offset, tuple(slots)))
    plan = _plans[key] = tuple(buckets)
    return plan


def _check_same_layout(world: _World, signature: tuple, what: str) -> None:
    """Fail clearly, on every rank, when the ranks' arrays differ in number, shapes or dtypes
    (once per layout: a mismatch would otherwise reduce garbage or hang). The ranks exchange a
    digest of their layouts, within the timeout."""
    if signature in _checked:
        return
    digest = np.frombuffer(hashlib.blake2b(repr(signature).encode(), digest_size=16).digest(),
                           np.uint8)
    digests = np.empty((world.size, digest.size), np.uint8)
    _wait(world, [world.comm.Iallgather(digest, digests)], f"{what}: comparing the ranks' arrays")
    differ = [r for r in range(world.size) if not np.array_equal(digests[r], digests[0])]
    if differ:
        raise DistributedError(
            f"{what}: the arrays of rank(s) {differ} differ from rank 0's in number, shapes or "
            f"dtypes (rank {world.rank} has {_describe(signature)}): every rank must run the "
            "same model and loss, and reduce the same arrays")
    _checked.add(signature)


def _describe(signature: tuple) -> str:
    if len(signature) == 2 and isinstance(signature[1], tuple) and all(
            isinstance(n, str) for n in signature[0]):  # broadcast_model's: (names, arrays)
        names, signature = signature
        return f"the parameters {list(names)[:4]}" + ("..." if len(names) > 4 else "")
    shapes = ", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in signature[:4])
    more = f", ... ({len(signature)} arrays)" if len(signature) > 4 else ""
    return shapes + more


# ---- allreduce --------------------------------------------------------------------------------

class AllreduceStats(NamedTuple):
    """What the last allreduce moved: its bytes, its buckets (messages), and the seconds from
    its start to the reduced arrays' return (packing, communication, unpacking)."""

    bytes: int
    buckets: int
    seconds: float


_last = AllreduceStats(0, 0, 0.0)


def last_allreduce() -> AllreduceStats:
    """The bytes, buckets and seconds of the last ``allreduce`` of this rank."""
    return _last


def _trainable(model: AnyValue) -> set[str]:
    return set(model.params) - set(model.state_names)


def _model_of(tree: AnyValue) -> AnyValue:
    """The model given to broadcast_model whose trainable parameters are the keys of a dict in
    `tree` (gradients as relay.grad(model, ...) returns them), or None."""
    models = [m for m in (ref() for ref in _models) if m is not None]
    if not models:
        return None
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            keys = set(node)
            for m in models:
                if keys == _trainable(m):
                    return m
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return None


def _float_state(model: AnyValue) -> list[str]:
    return [k for k in model.state_names if np.asarray(model.params[k]).dtype.kind == "f"]


def allreduce(tree: AnyValue, op: str = "mean", *, model: AnyValue = None,
              count: int | None = None, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> AnyValue:
    """The sum or mean over the ranks of every array in `tree`, in the same structure.

    tree: gradients as relay.grad returns them -- a dict keyed by parameter name, a tuple,
    an ADT value (the same tree of gradients as the tree argument), a list -- or any nesting
    of these with arrays and numbers as leaves (``(grads, loss)`` reduces both in one buffer).
    op: "mean" (the gradient of the global batch's mean loss; see the module docstring on
    the learning rate) or "sum".
    model: whose floating-point state (batch_norm's running statistics) to average across the
    ranks in the same buffer; by default the model given to ``broadcast_model`` whose
    trainable parameters are the keys of a dict in `tree`.
    count: with op="mean", this rank's number of examples: the result is then the mean
    weighted by each rank's count (exact for slices of unequal size).
    bucket_bytes: the largest buffer sent in one message (a larger array is one message).

    The returned arrays are new on every call. With one rank `tree` is returned as it is.
    """
    global _last
    if op not in ("mean", "sum"):
        raise ValueError(f"allreduce op must be 'mean' or 'sum', got {op!r}")
    if count is not None and (op != "mean" or isinstance(count, bool)
                              or not isinstance(count, (int, np.integer)) or count < 0):
        raise ValueError(f"count (this rank's number of examples) is a whole number, with "
                         f"op='mean' only; got count={count!r}, op={op!r}")
    world = _the_world()
    leaves = _leaves(tree, [])
    if op == "mean" and any(a.dtype.kind != "f" for a in leaves):
        raise TypeError("allreduce op='mean' takes floating-point arrays; reduce integers with "
                        "op='sum'")
    if world.size == 1 or world.comm is None:
        return tree
    start = time.perf_counter()
    owner = model if model is not None else _model_of(tree)
    params: dict[str, np.ndarray] = {} if owner is None else owner.params
    state = [] if owner is None else _float_state(owner)
    extra = [np.asarray(params[k]) for k in state]
    if count is not None:
        extra.append(np.array(count, leaves[0].dtype if leaves else np.float64))
    arrays = leaves + extra
    signature = _signature(arrays)
    _check_same_layout(world, signature, "allreduce")
    plan = _plan(signature, bucket_bytes)
    from mpi4py import MPI

    buffers, requests = [], []
    weight = None if count is None or not leaves else leaves[0].dtype.type(count)
    for bucket in plan:
        buf = np.empty(bucket.size, bucket.dtype)
        for slot in bucket.slots:
            view = buf[slot.offset:slot.offset + slot.size]
            source = arrays[slot.leaf].reshape(-1)
            if weight is not None and slot.leaf < len(leaves):
                np.multiply(source, weight, out=view)
            else:
                view[...] = source
        buffers.append(buf)
        requests.append(world.comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM))
    _wait(world, requests, f"allreduce() of {len(leaves)} arrays")
    out: list[np.ndarray] = [np.empty(0)] * len(arrays)
    for bucket, buf in zip(plan, buffers):
        for slot in bucket.slots:
            out[slot.leaf] = buf[slot.offset:slot.offset + slot.size].reshape(
                signature[slot.leaf][0])
    if count is not None:
        total = float(out[-1])
        if total <= 0:
            raise DistributedError("allreduce(count=...): the ranks' counts add up to 0")
        grad_scale = 1.0 / total
    else:
        grad_scale = 1.0 / world.size if op == "mean" else None
    if grad_scale is not None:
        for a in out[:len(leaves)]:
            a *= a.dtype.type(grad_scale)
    for name, a in zip(state, out[len(leaves):]):  # the mean, whatever `op`
        a /= a.dtype.type(world.size)
        params[name] = a
    result = _rebuild(tree, iter(out[:len(leaves)]))
    _last = AllreduceStats(sum(b.nbytes for b in buffers), len(buffers),
                           time.perf_counter() - start)
    return result


def sync_state(model: AnyValue) -> None:
    """Average `model`'s floating-point state (batch_norm's running statistics) across the
    ranks, on its own (``allreduce`` does it in the gradients' buffer)."""
    names = _float_state(model)
    if names and world_size() > 1:
        model.params.update(allreduce({k: model.params[k] for k in names}, op="mean"))


# ---- broadcast --------------------------------------------------------------------------------

def broadcast(tree: AnyValue, root: int = 0) -> AnyValue:
    """Rank `root`'s arrays of `tree`, on every rank (the same structure, dtypes and shapes on
    every rank, as `allreduce` needs)."""
    world = _the_world()
    if world.size == 1 or world.comm is None:
        return tree
    leaves = _leaves(tree, [])
    signature = _signature(leaves)
    _check_same_layout(world, signature, "broadcast")
    buffers, requests = [], []
    for bucket in _plan(signature, DEFAULT_BUCKET_BYTES):
        buf = np.empty(bucket.size, bucket.dtype)
        if world.rank == root:
            for slot in bucket.slots:
                buf[slot.offset:slot.offset + slot.size] = leaves[slot.leaf].reshape(-1)
        buffers.append(buf)
        requests.append(world.comm.Ibcast(buf, root=root))
    _wait(world, requests, f"broadcast() of {len(leaves)} arrays")
    out: list[np.ndarray] = [np.empty(0)] * len(leaves)
    for bucket, buf in zip(_plan(signature, DEFAULT_BUCKET_BYTES), buffers):
        for slot in bucket.slots:
            out[slot.leaf] = buf[slot.offset:slot.offset + slot.size].reshape(
                signature[slot.leaf][0])
    return _rebuild(tree, iter(out))


_FOLD = 0x9E3779B9  # 2**32 / golden ratio: rank r's dropout k0 is k0 + r * _FOLD (mod 2**32)


def broadcast_model(model: AnyValue, *, optimizer: AnyValue = None, root: int = 0) -> None:
    """Give every rank rank `root`'s parameters and state (in place), and, with `optimizer`,
    its hyperparameters and state (velocities, moments: after ``load_model`` on one rank, say).
    Each rank's dropout keys then get the rank folded in (rank 0 keeps its own), so the ranks'
    masks differ. ``allreduce`` afterwards keeps this model's running statistics equal."""
    world = _the_world()
    if not any(ref() is model for ref in _models):
        _models[:] = [ref for ref in _models if ref() is not None]
        _models.append(weakref.ref(model))
    if world.size == 1 or world.comm is None:
        return
    names = list(model.params)
    _check_same_layout(world, (tuple(names), _signature([np.asarray(model.params[k])
                                                         for k in names])), "broadcast_model")
    model.params.update(broadcast({k: model.params[k] for k in names}, root=root))
    keys = [k for k in model.state_names if np.asarray(model.params[k]).dtype.kind in "iu"]
    for k in keys:
        key = model.params[k]
        key[0] = (int(key[0]) + world.rank * _FOLD) % (2**32 if key.itemsize >= 8 else 2**31)
    if optimizer is not None:
        hyper, state = world.comm.bcast(
            (optimizer.hyperparameters, optimizer.state) if world.rank == root else None,
            root=root)
        optimizer.load_state(hyper, state)


# ---- shard ------------------------------------------------------------------------------------

def _rows(data: AnyValue) -> int:
    counts = {len(a) for a in _leaves(data, []) if a.ndim}
    if len(counts) != 1:
        raise ValueError(f"dist.shard: the arrays of a batch must have the same number of rows "
                         f"(their first axis), got {sorted(counts)}")
    return counts.pop()


def _local_range(rows: int, world: _World) -> tuple[int, int]:
    if rows < world.size:
        raise ValueError(f"dist.shard: a global batch of {rows} rows cannot be split over "
                         f"{world.size} ranks")
    return world.rank * rows // world.size, (world.rank + 1) * rows // world.size


def _take(data: AnyValue, index: AnyValue) -> AnyValue:
    arrays = _leaves(data, [])
    return _rebuild(data, iter(a[index] if a.ndim else a for a in arrays))


class Shard:
    """This rank's slices of a sequence of global batches (what ``shard`` returns)."""

    def __init__(self, data: AnyValue, batch_size: int | None, seed: int | None, epoch: int,
                 drop_last: bool):
        self.data, self.batch_size, self.seed, self.epoch = data, batch_size, seed, epoch
        self.drop_last = drop_last
        self.world = _the_world()
        if batch_size is not None:
            self.rows = _rows(data)
            steps = self.rows / batch_size
            self.steps = math.floor(steps) if drop_last else math.ceil(steps)

    def __len__(self) -> int:
        if self.batch_size is not None:
            return self.steps
        return len(self.data)

    def order(self) -> np.ndarray:
        """The dataset's rows in this epoch's order: the `epoch`-th permutation (from 0) that
        ``np.random.default_rng(seed)`` draws, as a one-process loop drawing a permutation per
        epoch from one generator; the rows in order without a seed."""
        if self.seed is None:
            return np.arange(self.rows)
        rng = np.random.default_rng(self.seed)
        for _ in range(self.epoch):
            rng.permutation(self.rows)
        return rng.permutation(self.rows)

    def __iter__(self) -> Iterator[AnyValue]:
        if self.batch_size is None:
            for batch in self.data:
                lo, hi = _local_range(_rows(batch), self.world)
                yield _take(batch, slice(lo, hi))
            return
        order = self.order()
        for s in range(self.steps):
            rows = order[s * self.batch_size:(s + 1) * self.batch_size]
            lo, hi = _local_range(len(rows), self.world)
            yield _take(self.data, rows[lo:hi])


def shard(data: AnyValue, *, batch_size: int | None = None, seed: int | None = None,
          epoch: int = 0, drop_last: bool = True) -> Shard:
    """This rank's slice of every global batch: rows ``rank * B // N`` to
    ``(rank + 1) * B // N`` of a batch of B rows over N ranks, the same split on every run.

    Without `batch_size`, `data` is an iterable of global batches (an array, or a tuple,
    list or dict of arrays with the same number of rows) and each is sliced. With it, `data`
    is the dataset (an array or a tuple of arrays) and the global batches are its rows in the
    epoch's order: with a `seed`, the `epoch`-th permutation drawn from
    ``np.random.default_rng(seed)`` -- the same on every rank, so no rank talks to another to
    agree on it, and the one a single-process loop drawing a permutation per epoch from
    ``default_rng(seed)`` uses --, else in order; `drop_last` drops a last, smaller batch
    (otherwise it is split too: pass ``count=len(x)`` to allreduce then). ``len()`` is the
    number of steps. With one rank, the slices are the global batches.
    """
    if batch_size is not None and (isinstance(batch_size, bool) or
                                   not isinstance(batch_size, (int, np.integer)) or
                                   batch_size < 1):
        raise ValueError(f"dist.shard: batch_size must be a positive whole number, got "
                         f"{batch_size!r}")
    if seed is not None and batch_size is None:
        raise ValueError("dist.shard: seed orders a dataset's rows, so it needs batch_size=")
    return Shard(data, batch_size, seed, epoch, drop_last)


# Inside a @relay function these are refused where they are called (translate/calls.py reads
# the mark): the compiled program exchanges data with the other ranks only through its
# collectives (allreduce, which the frontend translates to psum, is not marked).
_IN_RELAY = ("relaydsl.distributed.{0}() cannot run inside a @relay function: the function is "
             "one compiled program, which exchanges data with the other ranks only through "
             "collectives -- dist.allreduce(g) of relay.grad(model, loss, data)'s gradients, "
             "relay.psum(x), relay.batch_norm(x, sync=True). Call {0}() in Python, before the "
             "function, and pass what it gives in as an argument")

for _function in (init, rank, world_size, barrier, sync_state, broadcast, broadcast_model,
                  shard):
    _function.relay_python_only = _IN_RELAY.format(_function.__name__)  # type: ignore[attr-defined]
del _function
