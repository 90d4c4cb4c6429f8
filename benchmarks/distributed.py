"""Data-parallel training throughput on MPI (relaydsl.distributed), measured and modelled.

    python benchmarks/distributed.py [--quick] [--models lenet,resnet] [--output FILE]

For each model (LeNet of Figure 4 on MNIST-shaped images; a small ResNet with batch norm on
Fashion-MNIST-shaped images; with ``--models resnet-sync``, that ResNet with batch norm over
the global batch, ``sync=True``, whose training step exchanges every layer's statistics),
one run measures training throughput:

- 1 process on 1 core (pinned to core 0, ``RELAYDSL_NUM_THREADS=1``), per-rank batch B;
- 2 processes on 2 cores (``mpiexec -n 2``, rank r pinned to core r, one thread each), per-rank
  batch B (global batch 2B: weak scaling, as DDP and Horovod report images/s at a fixed
  per-GPU batch), and at global batch B (strong scaling, B/2 per rank);

each step split into compute (``relay.grad``: forward and backward), communication
(``dist.allreduce`` of the gradients and the batch-norm state, waiting for the other rank
included) and the optimiser update; and, after a barrier, the allreduce of the same
buffers alone. From the measured compute time and gradient bytes it models 8, 64 and 512
ranks on a 25 Gb/s network with ring allreduce, and writes benchmarks/DISTRIBUTED.md.

The images are random (throughput does not depend on their values). The ranks run in
processes launched by this script: ``--worker`` is that entry point.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if not __package__ and str(ROOT) not in sys.path:  # `python benchmarks/distributed.py`
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from relaydsl import Float, Tensor, distributed as dist, relay, relay_model  # noqa: E402

# ruff: noqa: F821  ("n" in the annotations is a shape symbol, the batch size, not a name)

OUTPUT = ROOT / "benchmarks" / "DISTRIBUTED.md"
LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
NETWORK_GBIT = 25.0  # the modelled network: 25 Gb/s per link
LATENCY_S = 10e-6  # per message hop (a TCP/RoCE round trip is a few to tens of microseconds)
RANKS_MODELLED = (2, 8, 64, 512)
GOAL = 1.8  # the goal: 1.8x at 2 ranks, i.e. an efficiency of 90%, at every scale


@relay_model
def lenet(x: Tensor[Float, ("n", 1, 28, 28)]) -> Tensor[Float, ("n", 10)]:
    conv1 = relay.conv2d(x, num_filter=20, ksize=[1, 5, 5, 1], no_bias=False)
    pool1 = relay.max_pool(relay.tanh(conv1), ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    conv2 = relay.conv2d(pool1, num_filter=50, ksize=[1, 5, 5, 1], no_bias=False)
    pool2 = relay.max_pool(relay.tanh(conv2), ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    fc1 = relay.linear(relay.flatten_layer(pool2), num_hidden=500)
    return relay.linear(relay.tanh(fc1), num_hidden=10)


@relay
def lenet_loss(x: Tensor[Float, ("n", 1, 28, 28)], y: Tensor[Float, ("n", 10)]) -> Float:
    return relay.softmax_cross_entropy(lenet(x), y)


def small_resnet(sync: bool) -> tuple:
    """A small ResNet for 28x28 grey images and its loss: a 3x3 stem of 16 channels, three
    basic blocks (16, 32 and 64 channels, the last two at stride 2, with 1x1 projections),
    batch norm after every convolution (over the global batch with `sync`), global average
    pooling, a linear classifier."""

    @relay_model
    def resnet(x: Tensor[Float, ("n", 1, 28, 28)]) -> Tensor[Float, ("n", 10)]:
        c = relay.conv2d(x, num_filter=16, ksize=3, padding=1, no_bias=True)
        h = relay.relu(relay.batch_norm(c, sync=sync))
        c = relay.conv2d(h, num_filter=16, ksize=3, padding=1, no_bias=True)
        t = relay.relu(relay.batch_norm(c, sync=sync))
        c = relay.conv2d(t, num_filter=16, ksize=3, padding=1, no_bias=True)
        h = relay.relu(relay.batch_norm(c, sync=sync) + h)
        c = relay.conv2d(h, num_filter=32, ksize=3, strides=2, padding=1, no_bias=True)
        t = relay.relu(relay.batch_norm(c, sync=sync))
        c = relay.conv2d(t, num_filter=32, ksize=3, padding=1, no_bias=True)
        s = relay.conv2d(h, num_filter=32, ksize=1, strides=2, no_bias=True)
        h = relay.relu(relay.batch_norm(c, sync=sync) + relay.batch_norm(s, sync=sync))
        c = relay.conv2d(h, num_filter=64, ksize=3, strides=2, padding=1, no_bias=True)
        t = relay.relu(relay.batch_norm(c, sync=sync))
        c = relay.conv2d(t, num_filter=64, ksize=3, padding=1, no_bias=True)
        s = relay.conv2d(h, num_filter=64, ksize=1, strides=2, no_bias=True)
        h = relay.relu(relay.batch_norm(c, sync=sync) + relay.batch_norm(s, sync=sync))
        return relay.linear(relay.flatten_layer(relay.global_avg_pool2d(h)), num_hidden=10)

    @relay
    def resnet_loss(x: Tensor[Float, ("n", 1, 28, 28)], y: Tensor[Float, ("n", 10)]) -> Float:
        return relay.softmax_cross_entropy(resnet(x), y)

    return resnet, resnet_loss


MODELS = {"lenet": (lenet, lenet_loss, "LeNet (MNIST)"),
          "resnet": (*small_resnet(False), "small ResNet, batch norm (Fashion-MNIST)"),
          "resnet-sync": (*small_resnet(True),
                          "small ResNet, batch norm over the global batch (sync=True)")}


# ---- one rank (the --worker entry point) --------------------------------------------------

def worker(name: str, batch: int, steps: int, warmup: int, core: int | None) -> None:
    """Train `name` for `steps` timed steps at `batch` images per rank on this rank's core
    (or `core`); rank 0 prints the medians as JSON."""
    dist.init()
    rank = dist.rank()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {(rank if core is None else core) % (os.cpu_count() or 1)})
    fn, loss, _ = MODELS[name]
    model = relay.create_model(fn, seed=0, init="glorot")
    dist.broadcast_model(model)
    opt = relay.Momentum(lr=0.01, momentum=0.9)
    rng = np.random.default_rng(rank)
    x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    step = relay.grad(model, loss)
    compute, comm, update, total = [], [], [], []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        g = step(x, y)
        t1 = time.perf_counter()
        g = dist.allreduce(g, op="mean")
        t2 = time.perf_counter()
        relay.update_model_params(model, g, opt)
        t3 = time.perf_counter()
        if s >= warmup:
            compute.append(t1 - t0)
            comm.append(t2 - t1)
            update.append(t3 - t2)
            total.append(t3 - t0)
    stats = dist.last_allreduce()
    alone = []
    if dist.world_size() > 1:  # the same buffers, without the wait for the other rank
        g = step(x, y)
        for _ in range(10):
            dist.barrier()
            t0 = time.perf_counter()
            dist.allreduce(g, op="mean")
            alone.append(time.perf_counter() - t0)
    grad_bytes = sum(v.nbytes for k, v in model.params.items() if k not in model.state_names)
    slowest = compute
    if dist.world_size() > 1:  # each step waits for the rank whose compute took longest
        from mpi4py import MPI
        slowest = [max(c) for c in zip(*MPI.COMM_WORLD.allgather(compute))]
    if rank == 0:
        print(json.dumps({
            "ranks": dist.world_size(), "batch": batch, "steps": steps,
            "compute": statistics.median(compute), "comm": statistics.median(comm),
            "slowest": statistics.median(slowest),
            "update": statistics.median(update), "step": statistics.median(total),
            "wall": sum(total), "alone": statistics.median(alone) if alone else 0.0,
            "bytes": stats.bytes if dist.world_size() > 1 else grad_bytes,
            "buckets": stats.buckets, "grad_bytes": grad_bytes,
            "images_per_s": batch * dist.world_size() * steps / sum(total)}), flush=True)


def launch(name: str, ranks: int, batch: int, steps: int, warmup: int,
           independent: bool = False) -> dict:
    """One measurement in fresh processes: `ranks` of them, one core and one thread each;
    `independent`: that many plain processes at once, without MPI (the control: what the
    cores give without any communication), their throughputs added up."""
    env = {**os.environ, "RELAYDSL_NUM_THREADS": "1"}
    for var in dist.LAUNCHER_VARIABLES:
        env.pop(var, None)
    cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "--worker", name,
           "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup)]
    if independent:
        procs = [subprocess.Popen([*cmd, "--core", str(r)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(ranks)]
        outs = [p.communicate(timeout=3600) for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{outs}")
        runs = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
        merged = dict(runs[0])
        merged["images_per_s"] = sum(r["images_per_s"] for r in runs)
        merged["compute"] = statistics.mean(r["compute"] for r in runs)
        merged["slowest"] = max(r["compute"] for r in runs)
        merged["step"] = statistics.mean(r["step"] for r in runs)
        merged["ranks"], merged["independent"] = ranks, True
        return merged
    if ranks > 1:
        mpiexec = Path(sys.executable).parent / "mpiexec"
        cmd = [str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(ranks), *cmd]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- the model of larger jobs ---------------------------------------------------------------

# (in channels, out channels, kernel, stride) of the convolutions, padding kernel // 2
SMALL_RESNET_CONVS = [(1, 16, 3, 1), (16, 16, 3, 1), (16, 16, 3, 1), (16, 32, 3, 2),
                      (32, 32, 3, 1), (16, 32, 1, 2), (32, 64, 3, 2), (64, 64, 3, 1),
                      (32, 64, 1, 2)]


def resnet18_convs() -> list[tuple[int, int, int, int]]:
    """ResNet-18 for CIFAR (benchmarks/workloads/cnn.py's layers)."""
    from benchmarks.workloads.cnn import resnet_layers
    return [(cin, cout, k, stride) for _, cin, cout, k, stride in resnet_layers()]


def conv_flops(convs: list[tuple[int, int, int, int]], image: int) -> int:
    """Multiply-adds x 2 of the convolutions of a residual network applied to one image,
    each in order from `image` pixels square, a stride-2 one halving the size (a shortcut
    reads the block's input: it follows its block's first convolution's size)."""
    flops, size = 0, image
    for cin, cout, k, stride in convs:
        if k != 1:  # a shortcut's output is the size its block's first convolution made
            size = -(-size // stride)
        flops += 2 * cin * cout * k * k * size * size
    return flops


def resnet18_gradient_bytes() -> int:
    """float32 gradients of ResNet-18 for CIFAR with batch norm: convolutions without bias,
    a scale and a shift per channel after each, the 512-to-10 classifier."""
    convs = resnet18_convs()
    return 4 * (sum(cin * cout * k * k + 2 * cout for cin, cout, k, _ in convs) + 512 * 10 + 10)


def ring_seconds(nbytes: float, ranks: int, gbit: float = NETWORK_GBIT,
                 latency: float = LATENCY_S) -> float:
    """Ring allreduce of `nbytes` over `ranks` (a reduce-scatter and an allgather): each rank
    sends and receives 2 (p - 1) / p of the buffer, in 2 (p - 1) messages."""
    if ranks == 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / (gbit * 1e9 / 8) + 2 * (ranks - 1) * latency


def modelled(compute: float, update: float, nbytes: float, batch: int) -> list[tuple]:
    """(ranks, comm s, step s, images/s, speedup over 1 rank, efficiency) at each modelled
    scale: every rank computes as one core here, then the ring allreduce (no overlap with the
    backward pass: relay.grad returns every gradient at its end)."""
    one = compute + update
    rows = []
    for p in RANKS_MODELLED:
        comm = ring_seconds(nbytes, p)
        step = compute + comm + update
        rows.append((p, comm, step, p * batch / step, p * one / step, one / step))
    return rows


# ---- the report -------------------------------------------------------------------------------

def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def report(results: dict[str, dict[str, dict]], quick: bool) -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "# Data-parallel training on MPI: measured and modelled",
        "",
        "Written by `python benchmarks/distributed.py" + (" --quick" if quick else "") + "` "
        f"on {time.strftime('%Y-%m-%d')}: {cpu}, {os.cpu_count()} cores, load average "
        f"{LOAD_AT_START:.1f} when it started and {load:.1f} when it finished (other work on "
        f"the machine: the measurements are only as steady as it was), MPICH over shared "
        "memory (the `mpich` wheel). Each rank is one process pinned to its own core with one "
        "thread (`RELAYDSL_NUM_THREADS=1`); "
        "the images are random (the throughput does not depend on their values). Medians over "
        "the timed steps, after warm-up steps that compile.",
        "",
        "## Measured: 1 process on 1 core against 2 processes on 2 cores",
        "",
        "| model | gradients | run | per-rank batch | global batch | compute ms | compute ms, "
        "slowest rank | allreduce ms (in the step) | allreduce alone ms | update ms | step ms | "
        "images/s | speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        base = runs["1"]
        label = MODELS[name][2]
        for r in runs.values():
            speedup = r["images_per_s"] / base["images_per_s"]
            what = ("2 processes, no MPI (control)" if r.get("independent") else
                    f"{r['ranks']} rank{'s' if r['ranks'] > 1 else ''}")
            mpi = r["ranks"] > 1 and not r.get("independent")
            lines.append(
                f"| {label} | {r['grad_bytes'] / 1e6:.2f} MB | {what} | {r['batch']} | "
                f"{r['batch'] * r['ranks'] if mpi or r['ranks'] == 1 else '—'} | "
                f"{ms(r['compute'])} | {ms(r.get('slowest', r['compute']))} | "
                f"{ms(r['comm']) if mpi else '—'} | {ms(r['alone']) if mpi else '—'} | "
                f"{ms(r['update'])} | {ms(r['step'])} | {r['images_per_s']:,.0f} | "
                f"{speedup:.2f}x |")
    lines += [
        "",
        "The goal is at least 1.8x at 2 processes on 2 cores against 1 process on 1 core, at "
        "the same per-rank batch (weak scaling, as DDP and Horovod report it). The control row "
        "runs two independent one-core processes at once, without MPI: what the two cores give "
        "with no communication at all, so the gap between it and the 2-rank row is what "
        "data parallelism costs, and the gap between it and 2x is the machine (cores slowing "
        "each other, and the load of other work). The global-batch rows (strong scaling: the "
        "same global batch split in two) show the cost of halving each rank's batch. Each step "
        "waits for the slower rank's compute (\"slowest rank\"); \"allreduce (in the step)\" "
        "includes that wait, \"alone\" is the same buffers reduced right after a barrier: the "
        "communication itself. The gradients of a model this size go in one fused buffer per "
        "step (plus the batch-norm running statistics, averaged in the same buffer).",
        "",
        "## Modelled: 8, 64 and 512 ranks on a 25 Gb/s network",
        "",
        f"Each rank computes as one core does here (the 1-process compute and update times "
        f"above); the gradients are reduced by a ring allreduce, which sends and receives "
        f"2 (p - 1) / p of the buffer per rank in 2 (p - 1) messages: "
        f"t = 2 (p - 1) / p x bytes / ({NETWORK_GBIT:g} Gb/s) + 2 (p - 1) x "
        f"{LATENCY_S * 1e6:g} us. relaydsl's backward pass is one compiled program returning "
        "every gradient at its end, so nothing overlaps the allreduce: step = compute + "
        "allreduce + update, and the efficiency is (compute + update) / step. Stragglers, "
        "contention and the network's real latency are left out: an upper bound.",
        "",
        "| model | gradient bytes | per-rank batch | ranks | allreduce ms | step ms | images/s | "
        "speed-up over 1 rank | efficiency |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        base = runs["1"]
        for p, comm, step, rate, speedup, eff in modelled(base["compute"], base["update"],
                                                          base["grad_bytes"], base["batch"]):
            lines.append(f"| {MODELS[name][2]} | {base['grad_bytes'] / 1e6:.2f} MB | "
                         f"{base['batch']} | {p} | {ms(comm)} | {ms(step)} | {rate:,.0f} | "
                         f"{speedup:,.1f}x | {eff:.1%} |")
    res = results.get("resnet", {}).get("1")
    if res is not None:
        # ResNet-18 (CIFAR) from the small ResNet's measured time per FLOP
        ratio = conv_flops(resnet18_convs(), 32) / conv_flops(SMALL_RESNET_CONVS, 28)
        compute, update = res["compute"] * ratio, res["update"] * ratio
        nbytes = resnet18_gradient_bytes()
        for p, comm, step, rate, speedup, eff in modelled(compute, update, nbytes, res["batch"]):
            lines.append(f"| ResNet-18 (CIFAR), estimated | {nbytes / 1e6:.2f} MB | "
                         f"{res['batch']} | {p} | {ms(comm)} | {ms(step)} | {rate:,.0f} | "
                         f"{speedup:,.1f}x | {eff:.1%} |")
        lines += [
            "",
            f"ResNet-class gradients: ResNet-18 for CIFAR has {nbytes / 1e6:.1f} MB of float32 "
            f"gradients, and {ratio:.0f}x the small ResNet's convolution FLOPs per image "
            f"({conv_flops(resnet18_convs(), 32) / 1e9:.2f} GFLOP at 32x32 against "
            f"{conv_flops(SMALL_RESNET_CONVS, 28) / 1e6:.1f} MFLOP at 28x28); its rows above "
            "scale the small ResNet's measured compute and update times by that ratio (an "
            "estimate: the same throughput per FLOP on one core)."]
    goal = []
    for name, runs in results.items():
        base = runs["1"]
        worst = min(r[5] for r in modelled(base["compute"], base["update"], base["grad_bytes"],
                                           base["batch"]))
        measured = runs["2"]["images_per_s"] / base["images_per_s"]
        goal.append(f"{MODELS[name][2]}: {measured:.2f}x measured at 2 ranks "
                    f"({'meets' if measured >= GOAL else 'misses'} the {GOAL}x goal); "
                    f"lowest modelled efficiency {worst:.1%} "
                    f"({'meets' if worst >= GOAL / 2 else 'misses'} the goal's 90% at every "
                    "modelled scale)")
    lines += ["", "## Against the goal", "", *[f"- {g}" for g in goal]]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few steps: indicative only")
    parser.add_argument("--models", default="lenet,resnet")
    parser.add_argument("--output", default=str(OUTPUT), help="'' writes nothing")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.batch, args.steps or 20, args.warmup, args.core)
        return
    steps = args.steps or (5 if args.quick else 30)
    results: dict[str, dict[str, dict]] = {}
    for name in args.models.split(","):
        runs = results[name] = {}
        for key, ranks, batch in (("1", 1, args.batch), ("2 alone", 2, args.batch),
                                  ("2", 2, args.batch), ("2 strong", 2, args.batch // 2)):
            r = runs[key] = launch(name, ranks, batch, steps, args.warmup,
                                   independent=key == "2 alone")
            print(f"{name}: {ranks} rank(s), {batch} images each: {r['images_per_s']:,.0f} "
                  f"images/s (compute {ms(r['compute'])} ms, allreduce {ms(r['comm'])} ms, "
                  f"alone {ms(r['alone'])} ms, update {ms(r['update'])} ms)", flush=True)
    text = report(results, args.quick)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    else:
        print(text)


if __name__ == "__main__":
    main()
