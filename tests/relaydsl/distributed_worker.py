"""A data-parallel training run for tests/relaydsl/test_distributed.py, launched as
``mpiexec -n N python distributed_worker.py MODE ...`` (or plainly, for the references).

    train OUT.npz          K steps of SGD, Momentum and Adam on an MLP and on a batch-norm
                           model with relaydsl.distributed, and on the model with batch norm
                           over the global batch (sync=True) on llvm and interp; rank 0 writes
                           the parameters (and state) to OUT.npz after checking that every
                           rank holds the same
    reference N OUT.npz    the same in one process without MPI: "full/..." trains on each
                           whole global batch; "sliced/..." computes each of the N slices'
                           gradients and state updates from the same model and averages them
                           (what N ranks compute when batch norm normalises each slice)
    hang | die | raise     two steps, then rank 1 sleeps / is killed / raises mid-training;
                           the other ranks must fail the job within RELAYDSL_DIST_TIMEOUT
    hang-sync              hang, with batch norm over the global batch: rank 0 waits inside
                           the compiled training step (psum), not in dist.allreduce
    mismatch               rank 1 reduces gradients of another shape than rank 0's
    figure4                the training loop inside @relay with dist.allreduce and sync batch
                           norm, against one process on the global batch, on llvm and interp
    trees                  allreduce of ADT-shaped gradients (a tree, a relay.List), of
                           nested tuples and numbers, with counts; dropout keys after
                           broadcast_model; checked on every rank
"""
from __future__ import annotations

import copy
import os
import signal
import sys
import time

import numpy as np

from relaydsl import Float, Tensor, distributed as dist, relay, relay_model, settings

GLOBAL_BATCH, STEPS, FEATURES, CLASSES = 8, 3, 6, 4


@relay_model
def mlp(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, ("n", 4)]:
    return relay.linear(relay.tanh(relay.linear(x, num_hidden=10)), num_hidden=4)


# No bias before batch norm (as ResNet's convolutions): its gradient is zero up to rounding,
# which Adam's normalisation would turn into steps of the full learning rate in the
# direction of that rounding, different for every summation order.
@relay_model
def bn_net(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, ("n", 4)]:
    h = relay.batch_norm(relay.linear(x, num_hidden=10, no_bias=True), momentum=0.1)
    return relay.linear(relay.tanh(h), num_hidden=4)


@relay_model
def sbn_net(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, ("n", 4)]:
    h = relay.batch_norm(relay.linear(x, num_hidden=10, no_bias=True), momentum=0.1, sync=True)
    return relay.linear(relay.tanh(h), num_hidden=4)


@relay
def mlp_loss(x: Tensor[Float, ("n", 6)], y: Tensor[Float, ("n", 4)]) -> Float:
    return relay.softmax_cross_entropy(mlp(x), y)


@relay
def bn_loss(x: Tensor[Float, ("n", 6)], y: Tensor[Float, ("n", 4)]) -> Float:
    return relay.softmax_cross_entropy(bn_net(x), y)


@relay
def sbn_loss(x: Tensor[Float, ("n", 6)], y: Tensor[Float, ("n", 4)]) -> Float:
    return relay.softmax_cross_entropy(sbn_net(x), y)


MODELS = {"mlp": (mlp, mlp_loss), "bn": (bn_net, bn_loss)}
# batch norm over the global batch (sync=True), on each target: "sbn@interp/adam/..."
SYNCED = {"sbn@llvm": (sbn_net, sbn_loss, "llvm"), "sbn@interp": (sbn_net, sbn_loss, "interp")}
OPTIMISERS = {"sgd": lambda: relay.SGD(lr=0.1), "momentum": lambda: relay.Momentum(lr=0.1),
              "adam": lambda: relay.Adam(lr=0.01)}


def dataset() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((GLOBAL_BATCH * STEPS, FEATURES)).astype(np.float32)
    y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, len(x))]
    return x, y


def train_distributed(out: str) -> None:
    dist.init()
    data = dataset()
    results: dict[str, np.ndarray] = {}
    optimiser_state: dict[str, np.ndarray] = {}
    runs = [(m, fn, loss, "llvm") for m, (fn, loss) in MODELS.items()] + [
        (m, fn, loss, target) for m, (fn, loss, target) in SYNCED.items()]
    for mname, fn, loss, target in runs:
        os.environ["RELAYDSL_TARGET"] = target
        for oname, make in OPTIMISERS.items():
            model = relay.create_model(fn, seed=dist.rank())  # different until broadcast
            dist.broadcast_model(model)
            opt = make()
            for x, y in dist.shard(data, batch_size=GLOBAL_BATCH, seed=0):
                assert len(x) == GLOBAL_BATCH // dist.world_size()
                g = dist.allreduce(relay.grad(model, loss, (x, y)), op="mean")
                relay.update_model_params(model, g, opt)
            for k, v in model.params.items():
                results[f"{mname}/{oname}/{k}"] = v
            for slot, values in opt.state.items():
                for k, v in values.items():
                    optimiser_state[f"{mname}/{oname}/{slot}/{k}"] = np.asarray(v)
    # every rank holds the same parameters, state and optimiser state: compare with rank 0's
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    mine = {k: v.tobytes() for k, v in {**results, **optimiser_state}.items()}
    root = comm.bcast(mine if comm.rank == 0 else None)
    differ = [k for k in mine if mine[k] != root[k]]
    assert not differ, f"rank {comm.rank} differs from rank 0 in {differ}"
    if dist.rank() == 0:
        np.savez(out, **results)
        print(f"trained on {dist.world_size()} ranks")


def slices(batch: tuple[np.ndarray, ...], n: int) -> list[tuple[np.ndarray, ...]]:
    rows = len(batch[0])
    return [tuple(a[r * rows // n:(r + 1) * rows // n] for a in batch) for r in range(n)]


def train_reference(n: int, out: str) -> None:
    dist.init(mpi=False)
    assert dist.world_size() == 1
    data = dataset()
    results: dict[str, np.ndarray] = {}
    for mname, (fn, loss) in MODELS.items():
        for oname, make in OPTIMISERS.items():
            full, fopt = relay.create_model(fn, seed=0), make()
            sliced, sopt = relay.create_model(fn, seed=0), make()
            for x, y in dist.shard(data, batch_size=GLOBAL_BATCH, seed=0):
                relay.update_model_params(full, relay.grad(full, loss, (x, y)), fopt)
                start = copy.deepcopy(sliced.params)
                grads, states = [], []
                for part in slices((x, y), n):
                    sliced.params = copy.deepcopy(start)
                    grads.append(relay.grad(sliced, loss, part))
                    states.append({k: sliced.params[k] for k in sliced.state_names})
                sliced.params = start
                for k in sliced.state_names:
                    sliced.params[k] = np.mean([s[k] for s in states], axis=0).astype(
                        start[k].dtype)
                mean = {k: np.mean([g[k] for g in grads], axis=0) for k in grads[0]}
                relay.update_model_params(sliced, mean, sopt)
            for k in full.params:
                results[f"full/{mname}/{oname}/{k}"] = full.params[k]
                results[f"sliced/{mname}/{oname}/{k}"] = sliced.params[k]
    np.savez(out, **results)


def fail(mode: str) -> None:
    """Train an MLP; after two steps rank 1 misbehaves as `mode` says. The ranks compile
    before they wait on each other with $RELAYDSL_DIST_TIMEOUT (a loaded machine may compile
    one rank much later than the other)."""
    dist.init(timeout=600)
    fn, loss = (sbn_net, sbn_loss) if mode == "hang-sync" else (mlp, mlp_loss)
    model = relay.create_model(fn, seed=0)
    dist.broadcast_model(model)
    opt = relay.SGD(lr=0.1)
    x, y = dataset()
    relay.grad(model, loss, (x[:4], y[:4]))
    dist.barrier()
    dist.init(timeout=settings.dist_timeout())
    for step in range(1000):
        if dist.rank() == 1 and step == (0 if mode == "mismatch" else 2):
            print(f"rank 1: {mode}", flush=True)
            if mode.startswith("hang"):
                time.sleep(600)
            elif mode == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            elif mode == "raise":
                raise RuntimeError("rank 1 fails mid-training")
            elif mode == "mismatch":
                dist.allreduce({"w": np.zeros(3, np.float32)})
        g = dist.allreduce(relay.grad(model, loss, (x[:4], y[:4])))
        relay.update_model_params(model, g, opt)
        if dist.rank() == 0:
            print(f"rank 0: step {step}", flush=True)
    print("finished: the failure was not detected", flush=True)


@relay.adt
class Tree:
    Leaf: Tensor[Float, 3]
    Node: tuple["Tree", "Tree"]


@relay
def total(t: Tree) -> Float:
    match t:
        case Tree.Leaf(v):
            return relay.sum(relay.tanh(v))
        case Tree.Node(left, right):
            return total(left) + total(right)


@relay
def list_total(xs: relay.List[Tensor[Float, 2]]) -> Float:
    return relay.sum(relay.foldl(lambda a, b: a + b * b, relay.zeros_like(relay.hd(xs)), xs))


@relay_model
def dropped(x: Tensor[Float, ("n", 6)]) -> Tensor[Float, ("n", 4)]:
    return relay.dropout(relay.linear(x, num_hidden=4), rate=0.5)


@relay
def dropped_loss(x: Tensor[Float, ("n", 6)], y: Tensor[Float, ("n", 4)]) -> Float:
    return relay.softmax_cross_entropy(dropped(x), y)


def trees() -> None:
    """Each rank differentiates at its own point; the reduced gradients are the mean of what
    every rank computed, in the same structure."""
    dist.init()
    n = dist.world_size()

    def point(r: int):
        leaf = np.full(3, 0.1 * (r + 1), np.float32)
        return (Tree.Node(Tree.Leaf(leaf), Tree.Leaf(2 * leaf)),
                [np.full(2, r + 1.0, np.float32), np.ones(2, np.float32)])

    def gradients(r: int):
        t, xs = point(r)
        return relay.grad(total)(t)[1], relay.grad(list_total)(xs)[1], float(r)

    mine = gradients(dist.rank())
    got = dist.allreduce(mine, op="mean")
    every = [gradients(r) for r in range(n)]
    tree = [g[0][0] for g in every]
    assert type(got[0]) is tuple and type(got[0][0]).__name__ == "ConstructorValue"
    assert got[0][0].name == "Node" and got[0][0].fields[0].name == "Leaf"
    for side in (0, 1):
        want = np.mean([t.fields[side].fields[0] for t in tree], axis=0)
        np.testing.assert_allclose(got[0][0].fields[side].fields[0], want, rtol=1e-6)
    cons = got[1][0]
    assert cons.name == "Cons"
    want = np.mean([g[1][0].fields[0] for g in every], axis=0)
    np.testing.assert_allclose(cons.fields[0], want, rtol=1e-6)
    assert isinstance(got[2], float) and got[2] == np.mean(range(n))
    total_sum = dist.allreduce({"count": np.int64(dist.rank() + 1)}, op="sum")
    assert total_sum["count"] == n * (n + 1) // 2
    # slices of unequal size: the mean weighted by each rank's count of examples
    weighted = dist.allreduce({"g": np.full(2, dist.rank() + 1.0, np.float32)},
                              count=dist.rank() + 1)
    want = sum((r + 1) ** 2 for r in range(n)) / sum(r + 1 for r in range(n))
    np.testing.assert_allclose(weighted["g"], want, rtol=1e-6)
    # dropout keys: rank 0's, with the rank folded into k0; the step counts in lockstep
    model = relay.create_model(dropped, seed=dist.rank())
    dist.broadcast_model(model)
    from mpi4py import MPI
    keys = MPI.COMM_WORLD.allgather(model.params["dropout_0.key"].copy())
    assert [int(k[0]) for k in keys] == [(int(keys[0][0]) + r * dist._FOLD) % 2**32
                                         for r in range(n)]
    x, y = dataset()
    g = dist.allreduce(relay.grad(model, dropped_loss, (x[:2], y[:2])))
    assert set(g) == {"linear_0.weight", "linear_0.bias"}
    assert int(model.params["dropout_0.key"][1]) == 1
    print(f"rank {dist.rank()}: trees reduced", flush=True)


@relay
def train_in_relay(x: Tensor[Float, ("n", 6)], y: Tensor[Float, ("n", 4)],
                   every: Tensor[Float, (GLOBAL_BATCH, 6)]) -> Tensor[Float, (GLOBAL_BATCH, 4)]:
    model = relay.create_model(sbn_net, seed=0)
    for _ in range(STEPS):
        g = dist.allreduce(relay.grad(model, sbn_loss, (x, y)), op="mean")
        relay.update_model_params(model, g, lr=0.1)
    return relay.export_model(model)(every)


@relay
def train_in_relay_alone(x: Tensor[Float, (GLOBAL_BATCH, 6)], y: Tensor[Float, (GLOBAL_BATCH, 4)]
                         ) -> Tensor[Float, (GLOBAL_BATCH, 4)]:
    model = relay.create_model(bn_net, seed=0)
    for _ in range(STEPS):
        relay.update_model_params(model, relay.grad(model, bn_loss, (x, y)), lr=0.1)
    return relay.export_model(model)(x)


def figure4() -> None:
    """The training loop inside @relay (Figure 4), every rank on its slice of one global
    batch, with dist.allreduce and batch norm over the global batch in the compiled program:
    the trained model's outputs equal those of one process on the whole batch with plain
    batch norm (computed here, on every rank: it exchanges nothing)."""
    dist.init()
    x, y = (a[:GLOBAL_BATCH] for a in dataset())
    for target in ("llvm", "interp"):
        os.environ["RELAYDSL_TARGET"] = target
        (mine_x, mine_y), = dist.shard([(x, y)])
        got = train_in_relay(mine_x, mine_y, x)
        want = train_in_relay_alone(x, y)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=target)
        print(f"rank {dist.rank()}: figure 4 on {target} trains as one process", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "train":
        train_distributed(sys.argv[2])
    elif mode == "reference":
        train_reference(int(sys.argv[2]), sys.argv[3])
    elif mode == "trees":
        trees()
    elif mode == "figure4":
        figure4()
    else:
        fail(mode)
