"""relaydsl.distributed: world size 1 in this process (no launcher, no MPI); then real jobs of
two ranks launched with ``mpiexec -n 2`` (distributed_worker.py beside this file), each with a
hard timeout so that a hang fails the test instead of CI."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import DSLSyntaxError, Float, SettingError, Tensor, relay, relay_model, settings
from relaydsl import distributed as dist
from tests.relaydsl import distributed_worker

WORKER = Path(__file__).with_name("distributed_worker.py")
# the tree the two-rank "trees" job reduces gradients of (the worker's, not a copy)
Tree, total = distributed_worker.Tree, distributed_worker.total
ROOT = Path(__file__).resolve().parents[2]


def _mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"  # the MPICH wheel's, in the venv
    return str(beside) if beside.exists() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
    reason="mpi4py and mpiexec are not installed (pip install -e '.[distributed]')")


@pytest.fixture
def world(monkeypatch):
    """Pretend to be rank `r` of `n` (no communicator: for shard, which needs none)."""
    def be(r: int, n: int) -> None:
        monkeypatch.setattr(dist, "_world", dist._World(None, r, n, n, 600.0))
    monkeypatch.setattr(dist, "_world", None)
    return be


def _no_launcher_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in dist.LAUNCHER_VARIABLES}


# ---- one process --------------------------------------------------------------------------

def test_a_plain_python_process_is_world_size_1_without_mpi4py():
    # mpi4py made unimportable: a plain run neither needs it nor starts MPI
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "from relaydsl import distributed as dist\n"
            "dist.init(); import numpy as np\n"
            "g = {'w': np.ones(3, np.float32)}\n"
            "assert (dist.rank(), dist.world_size()) == (0, 1)\n"
            "assert dist.allreduce(g) is g\n"
            "dist.barrier(); print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], env=_no_launcher_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_launched_process_without_mpi4py_says_what_to_install(monkeypatch):
    monkeypatch.setattr(dist, "_world", None)
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    with pytest.raises(dist.DistributedError, match=r"mpi4py is not installed: pip install "
                                                    r"'relaydsl\[distributed\]'"):
        dist.init()


def test_one_rank_returns_what_it_is_given_and_checks_its_arguments(world):
    world(0, 1)
    g = {"a": np.ones(2, np.float32)}
    assert dist.allreduce(g, op="sum") is g
    with pytest.raises(ValueError, match="op must be 'mean' or 'sum'"):
        dist.allreduce(g, op="max")
    with pytest.raises(ValueError, match="count"):
        dist.allreduce(g, op="sum", count=3)
    with pytest.raises(TypeError, match="op='mean' takes floating-point arrays"):
        dist.allreduce({"n": np.arange(3)}, op="mean")
    with pytest.raises(TypeError, match="cannot reduce a str"):
        dist.allreduce({"s": "text"})


def test_init_checks_the_timeout(monkeypatch):
    monkeypatch.setattr(dist, "_world", None)
    with pytest.raises(ValueError, match="positive number of seconds"):
        dist.init(timeout=0)
    monkeypatch.setenv("RELAYDSL_DIST_TIMEOUT", "soon")
    with pytest.raises(SettingError, match="RELAYDSL_DIST_TIMEOUT='soon'"):
        settings.dist_timeout()
    monkeypatch.setenv("RELAYDSL_DIST_TIMEOUT", "2.5")
    assert settings.dist_timeout() == 2.5


def test_gradient_trees_flatten_and_rebuild_in_their_own_structure():
    t = Tree.Node(Tree.Leaf(np.ones(3, np.float32)), Tree.Leaf(np.zeros(3, np.float32)))
    _, grads = relay.grad(total)(t)
    tree = {"b": grads, "a": [np.float32(2.0), 3.0], "c": None}
    leaves = dist._leaves(tree, [])
    assert [a.shape for a in leaves] == [(), (), (3,), (3,)]  # "a" before "b": sorted keys
    rebuilt = dist._rebuild(tree, iter([a * 2 for a in leaves]))
    assert list(rebuilt) == ["b", "a", "c"] and rebuilt["c"] is None
    assert isinstance(rebuilt["a"][0], np.float32) and rebuilt["a"][1] == 6.0
    node = rebuilt["b"][0]
    assert node.name == "Node" and [f.name for f in node.fields] == ["Leaf", "Leaf"]
    np.testing.assert_array_equal(node.fields[1].fields[0], 2 * grads[0].fields[1].fields[0])


def test_gradients_are_packed_into_few_buckets():
    sig = dist._signature([np.zeros((500, 800), np.float32), np.zeros(500, np.float32),
                           np.zeros(10, np.float64), np.zeros((10, 500), np.float32)])
    one = dist._plan(sig, dist.DEFAULT_BUCKET_BYTES)  # a small model: one buffer per dtype
    assert [(b.dtype.name, b.size) for b in one] == [("float32", 405500), ("float64", 10)]
    assert [s.offset for s in one[0].slots] == [0, 400000, 400500]
    capped = dist._plan(sig, 1_000_000)  # the big weight alone, the rest together
    assert [(b.dtype.name, [s.leaf for s in b.slots]) for b in capped] == [
        ("float32", [0]), ("float32", [1, 3]), ("float64", [2])]


def test_shard_gives_each_rank_its_slice_of_every_global_batch(world):
    x = np.arange(20).reshape(10, 2)
    y = np.arange(10)
    batches = [(x[:5], y[:5]), (x[5:], y[5:])]
    parts = []
    for r in range(3):
        world(r, 3)
        parts.append(list(dist.shard(batches)))
    for b, (bx, by) in enumerate(batches):  # the ranks' slices partition each batch, in order
        np.testing.assert_array_equal(np.concatenate([p[b][0] for p in parts]), bx)
        np.testing.assert_array_equal(np.concatenate([p[b][1] for p in parts]), by)
    assert [len(p[0][1]) for p in parts] == [1, 2, 2]


def test_shard_of_a_dataset_follows_the_seeded_epoch_order(world):
    x = np.arange(100, dtype=np.float32)[:, None]
    world(0, 1)
    one = dist.shard(x, batch_size=8, seed=3, epoch=2)
    assert len(one) == 12
    rng = np.random.default_rng(3)  # a one-process loop: a permutation per epoch
    orders = [rng.permutation(100) for _ in range(3)]
    np.testing.assert_array_equal(np.concatenate(list(one))[:, 0], orders[2][:96])
    world(1, 2)
    second = list(dist.shard(x, batch_size=8, seed=3, epoch=2))
    np.testing.assert_array_equal(second[0][:, 0], orders[2][4:8])
    world(1, 2)
    assert len(dist.shard(x, batch_size=8, drop_last=False)) == 13
    with pytest.raises(ValueError, match="cannot be split over 2 ranks"):
        list(dist.shard([np.zeros((1, 3))]))
    with pytest.raises(ValueError, match="same number of rows"):
        list(dist.shard([(np.zeros((4, 3)), np.zeros(3))]))
    with pytest.raises(ValueError, match="needs batch_size"):
        dist.shard(x, seed=0)


@relay_model
def tiny(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 2)]:
    return relay.linear(x, num_hidden=2)


def test_broadcast_model_at_world_size_1_keeps_the_model_and_registers_it(world):
    world(0, 1)
    model = relay.create_model(tiny, seed=0)
    before = {k: v.copy() for k, v in model.params.items()}
    dist.broadcast_model(model)
    assert all(np.array_equal(before[k], model.params[k]) for k in before)
    grads = {k: np.zeros_like(v) for k, v in model.params.items()}
    assert dist._model_of((grads, 1.0)) is model


@relay_model
def net(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 2)]:
    return relay.linear(x, num_hidden=2)


@relay
def net_loss(x: Tensor[Float, ("n", 3)], y: Tensor[Float, ("n", 2)]) -> Float:
    return relay.mean((net(x) - y) * (net(x) - y))


def test_dist_inside_a_relay_function_is_refused_where_it_is_called():
    with pytest.raises(DSLSyntaxError) as info:
        @relay
        def train(x: Tensor[Float, (4, 3)], y: Tensor[Float, (4, 2)]) -> Float:
            model = relay.create_model(net)
            ranks = dist.world_size()
            relay.update_model_params(model, relay.grad(model, net_loss, (x, y)), lr=0.1)
            return net_loss(x, y) * ranks
    message = str(info.value)
    assert "relaydsl.distributed.world_size() cannot run inside a @relay function" in message
    assert "exchanges data with the other ranks only through collectives" in message
    assert "ranks = dist.world_size()" in message  # the line, shown
    assert re.search(r"test_distributed\.py:\d+", message)


@relay
def train_in_relay(x: Tensor[Float, (4, 3)], y: Tensor[Float, (4, 2)]) -> Tensor[Float, (4, 2)]:
    model = relay.create_model(net, seed=0)
    for _ in range(3):
        g = dist.allreduce(relay.grad(model, net_loss, (x, y)), op="mean")
        relay.update_model_params(model, g, lr=0.1)
    return relay.export_model(model)(x)


@relay
def train_in_relay_summed(x: Tensor[Float, (4, 3)], y: Tensor[Float, (4, 2)]
                          ) -> Tensor[Float, (4, 2)]:
    model = relay.create_model(net, seed=0)
    for _ in range(3):
        relay.update_model_params(model, dist.allreduce(relay.grad(model, net_loss, (x, y)),
                                                        op="sum"), lr=0.05)
    return relay.export_model(model)(x)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_allreduce_inside_a_relay_function_sums_the_gradients_over_the_ranks(target):
    """A stand-in for two ranks holding the same batch (psum doubles this rank's part): the
    mean of equal gradients is this rank's, their sum twice it; checked against JAX."""
    from relaydsl.op.collective import install_reducer

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    y = rng.standard_normal((4, 2)).astype(np.float32)
    params = {k: jnp.asarray(v) for k, v in relay.create_model(net, seed=0).params.items()}

    def jax_loss(p):
        out = x @ p["linear_0.weight"].T + p["linear_0.bias"]
        return jnp.mean((out - y) ** 2)

    for _ in range(3):  # SGD at lr 0.1 on the mean of two equal gradients
        grads = jax.grad(jax_loss)(params)
        params = {k: v - 0.1 * grads[k] for k, v in params.items()}
    want = x @ params["linear_0.weight"].T + params["linear_0.bias"]
    install_reducer(lambda part: part.__imul__(2))
    try:
        for fn in (train_in_relay, train_in_relay_summed):  # lr 0.05 on the sum of two
            np.testing.assert_allclose(relay.build(fn, target=target)(x, y), want, rtol=1e-5,
                                       atol=1e-6, err_msg=fn.__name__)
    finally:
        install_reducer(None)
    np.testing.assert_allclose(relay.build(train_in_relay, target=target)(x, y), want,
                               rtol=1e-5, atol=1e-6)  # one process: the identity


def test_allreduce_inside_a_relay_function_takes_gradients_and_op_only():
    with pytest.raises(DSLSyntaxError, match=r"takes the gradients relay.grad\(model, loss, "
                                             r"data\) returns .* relay.psum\(x\)"):
        @relay
        def reduce_data(x: Tensor[Float, (4, 3)]) -> Tensor[Float, (4, 3)]:
            return dist.allreduce(x)
    with pytest.raises(DSLSyntaxError, match=r"op='mean' or op='sum' \(count=, model= and "
                                             r"bucket_bytes= are the Python loop's\); got 1 "
                                             r"argument\(s\), op='mean', count="):
        @relay
        def train(x: Tensor[Float, (4, 3)], y: Tensor[Float, (4, 2)]) -> Float:
            model = relay.create_model(net)
            g = dist.allreduce(relay.grad(model, net_loss, (x, y)), count=4)
            relay.update_model_params(model, g, lr=0.1)
            return net_loss(x, y)


# ---- jobs of two ranks ----------------------------------------------------------------------

def _run(cmd: list[str], limit: float, **kwargs) -> subprocess.CompletedProcess:
    """`cmd` in a session of its own, killed with every process it started (mpiexec's ranks)
    after `limit` seconds: a hang fails the test, and leaves no rank behind."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {limit} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _job(*args: str, ranks: int = 2, timeout_s: float | None = None, limit: float = 300):
    """``mpiexec -n ranks python -P distributed_worker.py args``, killed after `limit` seconds
    (-P: the worker's folder, which holds a package named ``typing``, is not put on sys.path)."""
    env = dict(os.environ)
    if timeout_s is not None:
        env["RELAYDSL_DIST_TIMEOUT"] = str(timeout_s)
    start = time.monotonic()
    done = _run([MPIEXEC, "-n", str(ranks), sys.executable, "-P", str(WORKER), *args], limit,
                env=env)
    return done, time.monotonic() - start


@needs_mpi
@pytest.mark.slow
def test_two_ranks_train_as_one_process_on_the_same_global_batch(tmp_path):
    done, _ = _job("train", str(tmp_path / "ranks.npz"))
    assert done.returncode == 0, done.stdout + done.stderr  # and every rank held the same
    assert "trained on 2 ranks" in done.stdout
    ref = subprocess.run([sys.executable, "-P", str(WORKER), "reference", "2",
                          str(tmp_path / "one.npz")], env=_no_launcher_env(),
                         capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    ranks, one = np.load(tmp_path / "ranks.npz"), np.load(tmp_path / "one.npz")
    cases = {k.rsplit("/", 1)[0] for k in ranks.files}
    assert cases == {f"{m}/{o}" for m in ("mlp", "bn", "sbn@llvm", "sbn@interp")
                     for o in ("sgd", "momentum", "adam")}
    for key in ranks.files:
        # without batch norm: one process on each whole global batch; with it, batch norm
        # normalises each rank's slice, as one process averaging the slices' gradients
        # (and their running statistics) does; with batch norm over the global batch
        # (sync=True), one process's plain batch_norm on each whole global batch
        model, rest = key.split("/", 1)
        want = {"mlp": f"full/mlp/{rest}", "bn": f"sliced/bn/{rest}"}.get(model,
                                                                         f"full/bn/{rest}")
        np.testing.assert_allclose(ranks[key], one[want], rtol=1e-5, atol=1e-6, err_msg=key)
    moving = [k for k in ranks.files if "moving_" in k]
    assert len(moving) == 3 * 3 * 2
    # the statistics moved
    start = {"moving_mean": 0.0, "moving_var": 1.0}
    for key in moving:
        assert np.abs(ranks[key] - start[key.rsplit(".", 1)[1]]).max() > 1e-3, key
    # and the sync=True comparison can fail: slices' statistics train other parameters
    gap = max(np.abs(one[k] - one[k.replace("full/", "sliced/", 1)]).max()
              for k in one.files if k.startswith("full/bn/"))
    assert gap > 1e-2


@needs_mpi
def test_allreduce_of_adt_shaped_gradients_keeps_their_structure():
    done, _ = _job("trees")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0: trees reduced" in done.stdout and "rank 1: trees reduced" in done.stdout


@needs_mpi
@pytest.mark.slow
def test_a_training_loop_inside_relay_trains_on_two_ranks_as_one_process():
    done, _ = _job("figure4")
    assert done.returncode == 0, done.stdout + done.stderr
    for r in (0, 1):
        for target in ("llvm", "interp"):
            assert f"rank {r}: figure 4 on {target} trains as one process" in done.stdout


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("failure", ["hang", "hang-sync", "raise", "die", "mismatch"])
def test_a_failing_rank_fails_the_job_within_the_timeout(failure):
    done, seconds = _job(failure, timeout_s=5, limit=240)
    output = done.stdout + done.stderr
    if failure.startswith("hang"):  # rank 0 gives up waiting after the timeout, and says why
        where = (r"psum of float32\[[\d, ]+\] inside a compiled program" if failure == "hang-sync"
                 else "allreduce")
        expected = [rf"rank 0 of 2 waited \d+ s in {where}",
                    r"one of them has hung, died or taken another path",
                    re.escape("(The limit, 5 s, is dist.init(timeout=...) or "
                              "$RELAYDSL_DIST_TIMEOUT.)")]
    elif failure == "raise":  # the exception aborts the job at once
        expected = ["RuntimeError: rank 1 fails mid-training",
                    "rank 1 of 2 stopped on the exception above; aborting the job"]
    elif failure == "die":  # the launcher sees the killed rank and ends the others
        expected = ["BAD TERMINATION", "signal 9"]
    else:
        expected = [re.escape("the arrays of rank(s) [1] differ from rank 0's")]
    assert done.returncode != 0, output
    assert "the failure was not detected" not in output, output
    for pattern in expected:
        assert re.search(pattern, output), output
    # bounded: the compile, two steps and the 5 s timeout, with room for a loaded machine
    assert seconds < 200


@needs_mpi
@pytest.mark.slow
def test_the_example_trains_lenet_on_two_ranks(tmp_path):
    mnist = next((p / "shared" / "data" / "mnist" for p in ROOT.parents
                  if (p / "shared" / "data" / "mnist").is_dir()), None)
    if mnist is None:
        pytest.skip("the shared MNIST copy is not present")
    done = _run([MPIEXEC, "-n", "2", sys.executable, str(ROOT / "examples" / "lenet_mnist.py"),
                 "--distributed", "--quick", "--data", str(mnist), "--out", str(tmp_path)],
                900, cwd=tmp_path)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert out.count("epoch 1: ") == 1  # rank 0 alone reports
    assert "2 ranks" in out
    accuracy = float(re.search(r"epoch 1: .* test accuracy ([\d.]+)%", out).group(1))
    assert accuracy >= 97.0
    reloaded = float(re.search(r"reloaded, its test accuracy is ([\d.]+)%", out).group(1))
    assert reloaded == accuracy
    assert (tmp_path / "lenet.npz").is_file()
    assert not list(tmp_path.glob(".relaydsl-*"))  # no temporary file left by the save
