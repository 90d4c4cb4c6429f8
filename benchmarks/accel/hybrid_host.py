"""The host side of a program that is not one network (backend/accel/hybrid.py): its control
as native code calling the simulator through external kernels, against the same control on
the reference interpreter.

    python benchmarks/accel/hybrid_host.py              # 15 rounds
    python benchmarks/accel/hybrid_host.py --rounds 5

Two workloads on ``deep_fusion(onchip_bytes=24 KiB)``: a TreeLSTM (frontend/zoo/tree_lstm.py,
32 hidden units, 16-wide word vectors) on a random 24-leaf tree, its cells on the
accelerator and its recursion, embedding lookups, splits and losses on the host; and a loop
of 20 turns over a 16-channel 3x3 conv layer and tanh at 16x16, the layer on the
accelerator each turn. Times are CPU times of the calling thread (``time.thread_time``:
the kernel pool's workers spin between jobs, which process time would count): of a call,
then of a call with the simulator replaced by a stub returning zeros (neither workload's
control depends on the values), which is the host's time -- the control, the host's
kernels, the calls out to the accelerator with their arguments and results. The two paths
run round-robin in one process, so that load on the machine falls on both alike; the
medians are printed with the CPU's name.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time
from typing import Any, Callable

import numpy as np

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from relaydsl.backend.accel.hybrid import HybridProgram

CONFIG = AcceleratorConfig.deep_fusion(onchip_bytes=24 * KIB)


@relay
def conv_loop(x: Tensor[Float, (1, 16, 16, 16)], w: Tensor[Float, (16, 16, 3, 3)], n: Int
              ) -> Tensor[Float, (1, 16, 16, 16)]:
    h = x
    for _ in range(n):
        h = relay.tanh(relay.conv2d(h, w, padding=1))
    return h


def _conv_loop() -> tuple[Any, tuple]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 16, 16)).astype(np.float32)
    w = (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
    return relay.build(conv_loop, target="accel", config=CONFIG).program, (x, w, np.int32(20))


def _tree_lstm() -> tuple[Any, tuple]:
    from relaydsl.datasets.sst import Leaf, Node, Vocabulary
    from relaydsl.frontend.zoo import tree_lstm as zoo

    rng = np.random.default_rng(0)
    words = ("<unk>", "a", "b", "c", "d")

    def tree(n: int):
        if n == 1:
            return Leaf(int(rng.integers(5)), words[int(rng.integers(1, 5))])
        k = int(rng.integers(1, n))
        return Node(int(rng.integers(5)), tree(k), tree(n - k))

    net = zoo.tree_lstm(vocab=len(words), hidden=32, dim=16)
    model = relay.create_model(net.model, seed=0)
    value = zoo.to_adt(tree(24), Vocabulary(words))
    return relay.build(model, target="accel", config=CONFIG).program, (value,)


def _stub(hybrid: HybridProgram) -> None:
    """`hybrid`'s accelerator calls made free: each counted, its result zeros (the control of
    both workloads does not depend on the values), so that a call's time is the host's."""

    def free(offloaded: Any, args: Any) -> np.ndarray:
        offloaded.calls += 1
        return np.zeros(offloaded.graph.output.shape, offloaded.graph.output.dtype)

    hybrid._simulate = free  # type: ignore[method-assign]


def _round_robin(paths: dict[str, HybridProgram], args: tuple, rounds: int
                 ) -> dict[str, float]:
    """The median CPU time of the calling thread per call of each path, called in turn."""
    times: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(rounds):
        for k, h in paths.items():
            start = time.thread_time()
            h(*args)
            times[k].append(time.thread_time() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def _paths(make: Callable[[], tuple[Any, tuple]]) -> tuple[dict[str, HybridProgram], tuple]:
    program, args = make()
    native = program.hybrid
    assert native is not None and native.path == "native"
    interpreted = HybridProgram(program.mod, program.entry, native.config,
                                native.schedule_kind, native.reason, native=False)
    return {"interpreter": interpreted, "native": native}, args


def measure(name: str, make: Callable[[], tuple[Any, tuple]], rounds: int) -> None:
    paths, args = _paths(make)
    results = {k: h(*args) for k, h in paths.items()}  # compiled kernels, caches warm
    want, got = results["interpreter"], results["native"]
    for a, b in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    r = paths["native"].report
    counts = [(r.offloaded_calls, r.host_calls, r.transfer_bytes, r.dram_bytes, r.macs)
              for r in (h.report for h in paths.values())]
    assert counts[0] == counts[1], f"the two paths' reports differ: {counts}"
    print(f"{name}: {r.offloaded_calls} accelerator calls, {r.host_calls} host calls, "
          f"{r.transfer_bytes / 1e3:.1f} kB moved")
    total = _round_robin(paths, args, rounds)
    for h in paths.values():
        _stub(h)
    host = _round_robin(paths, args, 4 * rounds)
    for k in paths:
        print(f"  {k:12s} a call {total[k] * 1e3:8.2f} ms, of which the host's "
              f"{host[k] * 1e3:7.2f} ms")
    print(f"  host time, interpreter / native: {host['interpreter'] / host['native']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    rounds = parser.parse_args().rounds
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"CPU: {cpu}; medians of {rounds} round-robin calls, "
          "the calling thread's CPU time")
    measure("TreeLSTM (24 leaves)", _tree_lstm, rounds)
    measure("conv loop (20 turns)", _conv_loop, rounds)


if __name__ == "__main__":
    main()
