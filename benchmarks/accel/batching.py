"""The 2019 Relay paper's accelerator experiment (§5.4, Figure 3 right) on our accel target.

    python benchmarks/accel/batching.py                    # ResNet-18/34/50/101, TreeLSTM
    python benchmarks/accel/batching.py --quick            # 32x32 images, 20 trees
    python benchmarks/accel/batching.py --networks resnet18,tree_lstm

Two int8 VTA cores with the same 256 MACs a cycle: ``vta(batch=1, block_in=16,
block_out=16)`` (single-batch) and ``vta(batch=4, block_in=8, block_out=8)`` (multi-batch),
each with VTA's 32/256/128 KiB input/weight/accumulator buffers and a 1.6 GB/s DRAM port at
100 MHz. Every workload is quantized to int8 by ``relay.quantize`` (8/32, every conv2d and
dense layer, global-scale calibration on random data: the figures are times, which the
scales do not change) and run at batch 1 on the single-batch core and at batch 4 on the
multi-batch one (and, to show the waste, batch 1 on the multi-batch one); the time is the
simulated time per input (batch-size normalised).

- ResNet-18, -34, -50 and -101 (benchmarks/accel/networks.py): the real architectures at
  224x224 with random weights. The network is one call on the accelerator; batch 4 is the
  same realized program with a batch of four images (its input's first axis). The schedule
  is static, so the figures come from the build's report.
- TreeLSTM (frontend/zoo/tree_lstm.py, the paper's 150 hidden units and 100-wide word
  vectors, random weights) on SST dev trees (../shared/data/sst): the host runs the
  recursion and the embedding lookup, the accelerator each cell (a leaf's three gates and a
  node's five, their dense layers int8, the gates' sigmoid, tanh and products on its ALU),
  each cell a call, its weights loaded for it. Batching is dynamic, as TensorFlow Fold's and
  DyNet's: four trees at a time, their cells of one height (leaves 0, a node one more than
  its higher child) run four to a call. The per-call times come from the cells' reports;
  a few trees are also run through the simulator and checked bit-exact against the same
  quantized cells on llvm, cell by cell at batch 1.

Written to benchmarks/accel/BATCHING.md (and batching.png, matplotlib).
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if not __package__ and str(ROOT) not in sys.path:  # run as a script, from anywhere
    sys.path.insert(0, str(ROOT))

from benchmarks.accel import networks  # noqa: E402
from relaydsl import Float, Tensor, relay  # noqa: E402
from relaydsl.backend.accel.config import AcceleratorConfig  # noqa: E402
from relaydsl.backend.accel.program import AccelProgram  # noqa: E402
from relaydsl.backend.accel.report import AccelReport  # noqa: E402
from relaydsl.backend.target import get_target  # noqa: E402
from relaydsl.datasets.sst import Leaf, Node, Tree, sst  # noqa: E402
from relaydsl.ir import Function, IRModule, TensorType, Var  # noqa: E402
from relaydsl.ir.visitor import deep_recursion  # noqa: E402
from relaydsl.transform._util import substitute  # noqa: E402
from relaydsl.typing import infer_types  # noqa: E402

HERE = Path(__file__).resolve().parent
BATCH = 4
SINGLE = AcceleratorConfig.vta(batch=1, block_in=16, block_out=16)
MULTI = AcceleratorConfig.vta(batch=BATCH, block_in=8, block_out=8)
# (label, the batch run, the core)
RUNS = (("single-batch core, batch 1", 1, SINGLE), ("multi-batch core, batch 1", 1, MULTI),
        (f"multi-batch core, batch {BATCH}", BATCH, MULTI))
QCONFIG = relay.QConfig(nbit_input=8, nbit_weight=8, nbit_activation=32,
                        calibrate_mode="global_scale", skip_conv_layers=(),
                        skip_dense_layer=False)
HIDDEN, DIM = 150, 100  # the TreeLSTM paper's (Tai et al. 2015)
WORKLOADS = (*networks.RESNETS, "tree_lstm")


def rebatch(mod: IRModule, entry: str, batch: int) -> IRModule:
    """`mod`'s `entry` as a function of its parameters with `batch` for their first axis,
    typed again: a realized program is written for the batch it was quantized at."""
    fn = mod[entry]
    assert isinstance(fn, Function)
    params = []
    for p in fn.params:
        t = p.checked_type
        assert isinstance(t, TensorType)
        params.append(Var(p.name_hint, TensorType((batch, *t.shape[1:]), t.dtype)))
    with deep_recursion():  # ResNet-50's realized body nests deeper than Python's default
        body = substitute(fn.body, dict(zip(fn.params, params)))
        return infer_types(IRModule.from_expr(Function(params, body)))


@dataclass
class Row:
    workload: str
    run: str
    batch: int
    seconds_per_input: float
    dram_bytes_per_input: float
    macs_per_input: float
    build_seconds: float


def _row(workload: str, run: str, batch: int, seconds: float, dram: float, macs: float,
         build: float) -> Row:
    row = Row(workload, run, batch, seconds / batch, dram / batch, macs / batch, build)
    print(f"  {workload:10} {run:28} {row.seconds_per_input * 1e3:9.3f} ms/input "
          f"{row.dram_bytes_per_input / 1e6:8.3f} MB/input  (built in {build:.1f} s)",
          flush=True)
    return row


# ---- the ResNets ---------------------------------------------------------------------------


def resnet_rows(name: str, image: int | None, schedule: str) -> list[Row]:
    model = relay.create_model(networks.model(name, image), seed=0)
    shape = networks.input_shape(name, image)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    qf = relay.quantize(model, dataset=[(x,)], config=QCONFIG)
    rows = []
    for run, batch, config in RUNS:
        start = time.perf_counter()
        with deep_recursion():
            program = AccelProgram(rebatch(qf.mod, qf.entry, batch), "main", config, schedule)
        assert program.hybrid is None, program.report.host  # the whole network on the core
        r = program.report
        rows.append(_row(name, run, batch, r.seconds, r.dram_bytes, r.macs,
                         time.perf_counter() - start))
    return rows


# ---- the TreeLSTM ----------------------------------------------------------------------------


def cells(params: dict[str, np.ndarray]) -> tuple[Callable, Callable]:
    """The zoo TreeLSTM's leaf and node cells at batch 1, over `params` (its linear_1 and
    linear_2), each returning [h; c]: the split gates as one dense layer each, so that no
    tuple is left for the accelerator (the same weights, in the same products)."""
    w, b = params["linear_1.weight"], params["linear_1.bias"]
    u, c = params["linear_2.weight"], params["linear_2.bias"]
    wi, wo, wu = (w[k * HIDDEN:(k + 1) * HIDDEN] for k in range(3))
    bi, bo, bu = (b[k * HIDDEN:(k + 1) * HIDDEN] for k in range(3))
    ui, ufl, ufr, uo, uu = (u[k * HIDDEN:(k + 1) * HIDDEN] for k in range(5))
    ci, cfl, cfr, co, cu = (c[k * HIDDEN:(k + 1) * HIDDEN] for k in range(5))

    @relay
    def leaf(x: Tensor[Float, (1, DIM)]) -> Tensor[Float, (1, 2 * HIDDEN)]:
        i = relay.sigmoid(relay.bias_add(relay.dense(x, wi), bi))
        o = relay.sigmoid(relay.bias_add(relay.dense(x, wo), bo))
        cell = i * relay.tanh(relay.bias_add(relay.dense(x, wu), bu))
        return relay.concatenate((o * relay.tanh(cell), cell), axis=1)

    @relay
    def node(h_l: Tensor[Float, (1, HIDDEN)], c_l: Tensor[Float, (1, HIDDEN)],
             h_r: Tensor[Float, (1, HIDDEN)], c_r: Tensor[Float, (1, HIDDEN)]
             ) -> Tensor[Float, (1, 2 * HIDDEN)]:
        h = relay.concatenate((h_l, h_r), axis=1)
        i = relay.sigmoid(relay.bias_add(relay.dense(h, ui), ci))
        f_l = relay.sigmoid(relay.bias_add(relay.dense(h, ufl), cfl))
        f_r = relay.sigmoid(relay.bias_add(relay.dense(h, ufr), cfr))
        o = relay.sigmoid(relay.bias_add(relay.dense(h, uo), co))
        u_ = relay.tanh(relay.bias_add(relay.dense(h, uu), cu))
        cell = i * u_ + f_l * c_l + f_r * c_r
        return relay.concatenate((o * relay.tanh(cell), cell), axis=1)

    return leaf, node


def _heights(tree: Tree, out: list[tuple[int, Tree]]) -> int:
    """Every cell of `tree` with its height, children first."""
    if isinstance(tree, Leaf):
        out.append((0, tree))
        return 0
    height = 1 + max(_heights(tree.left, out), _heights(tree.right, out))
    out.append((height, tree))
    return height


def calls(trees: Sequence[Tree], batch: int) -> tuple[int, int]:
    """(leaf calls, node calls) running `trees` `batch` at a time, each height's cells of a
    group `batch` to a call."""
    leaf_calls = node_calls = 0
    for start in range(0, len(trees), batch):
        per_height: dict[int, int] = {}
        for tree in trees[start:start + batch]:
            found: list[tuple[int, Tree]] = []
            _heights(tree, found)
            for height, _ in found:
                per_height[height] = per_height.get(height, 0) + 1
        for height, n in per_height.items():
            if height == 0:
                leaf_calls += math.ceil(n / batch)
            else:
                node_calls += math.ceil(n / batch)
    return leaf_calls, node_calls


class _Cells:
    """The quantized cells' programs on one target, run over a tree by the host."""

    def __init__(self, leaf: Any, node: Any, vectors: dict[str, np.ndarray]):
        self.leaf, self.node, self.vectors = leaf, node, vectors

    def state(self, tree: Tree) -> np.ndarray:
        if isinstance(tree, Leaf):
            return np.asarray(self.leaf(self.vectors[tree.word]))
        assert isinstance(tree, Node)
        left, right = self.state(tree.left), self.state(tree.right)
        return np.asarray(self.node(left[:, :HIDDEN], left[:, HIDDEN:], right[:, :HIDDEN],
                                    right[:, HIDDEN:]))


def tree_lstm_rows(count: int, schedule: str) -> list[Row]:
    from relaydsl.frontend.zoo import tree_lstm as zoo

    trees = sst("dev", fallbacks=(ROOT.parent / "shared" / "data" / "sst",))[:count]
    words = sorted({w for t in trees for w in t.words()})
    net = zoo.tree_lstm(len(words) + 1, hidden=HIDDEN, dim=DIM)
    model = relay.create_model(net.model, seed=0, init="glorot")
    params = {k: np.asarray(v) for k, v in model.params.items()}
    table = params["embedding_0.weight"]
    vectors = {w: table[i + 1][None, :] for i, w in enumerate(words)}  # the host's lookup
    leaf, node = cells(params)
    # calibration: the float cells' inputs over the first trees
    float_cells = _Cells(leaf, node, vectors)
    leaf_data = [(vectors[w],) for t in trees[:4] for w in t.words()]
    node_data = []
    for t in trees[:4]:
        found: list[tuple[int, Tree]] = []
        _heights(t, found)
        for _, sub in found:
            if isinstance(sub, Node):
                left, right = float_cells.state(sub.left), float_cells.state(sub.right)
                node_data.append((left[:, :HIDDEN], left[:, HIDDEN:], right[:, :HIDDEN],
                                  right[:, HIDDEN:]))
    q_leaf = relay.quantize(leaf, dataset=leaf_data, config=QCONFIG)
    q_node = relay.quantize(node, dataset=node_data, config=QCONFIG)
    _check_bit_exact(q_leaf, q_node, vectors, trees[:3], schedule)
    rows = []
    for run, batch, config in RUNS:
        start = time.perf_counter()
        reports: list[AccelReport] = []
        for q in (q_leaf, q_node):
            program = AccelProgram(rebatch(q.mod, q.entry, batch), "main", config, schedule)
            assert program.hybrid is None, program.report.host
            reports.append(program.report)
        n_leaf, n_node = calls(trees, batch)
        # per input: per tree (the call counts are over all trees)
        seconds = n_leaf * reports[0].seconds + n_node * reports[1].seconds
        dram = n_leaf * reports[0].dram_bytes + n_node * reports[1].dram_bytes
        macs = n_leaf * reports[0].macs + n_node * reports[1].macs
        rows.append(_row("tree_lstm", run, batch, seconds * batch / len(trees),
                         dram * batch / len(trees), macs * batch / len(trees),
                         time.perf_counter() - start))
    return rows


def _check_bit_exact(q_leaf: Any, q_node: Any, vectors: dict[str, np.ndarray],
                     trees: Sequence[Tree], schedule: str) -> None:
    """The quantized cells on the accelerator (the multi-batch core) give the interpreter's
    values bit for bit, and llvm's within float32 rounding (its sigmoid and tanh are its own
    polynomials, not NumPy's)."""
    interp = [get_target("interp").build(q.mod, q.entry, {}) for q in (q_leaf, q_node)]
    llvm = [get_target("llvm").build(q.mod, q.entry, {}) for q in (q_leaf, q_node)]
    accel = [AccelProgram(q.mod, q.entry, MULTI, schedule) for q in (q_leaf, q_node)]
    for tree in trees:
        got = _Cells(*accel, vectors).state(tree)
        if not np.array_equal(got, _Cells(*interp, vectors).state(tree)):
            raise AssertionError("the TreeLSTM's int8 cells differ between accel and interp")
        np.testing.assert_allclose(got, _Cells(*llvm, vectors).state(tree), atol=1e-2)


# ---- the note ---------------------------------------------------------------------------------


def speedups(rows: list[Row]) -> dict[str, float]:
    """Per workload: single-batch time per input over the multi-batch core's at batch 4."""
    per = {(r.workload, r.run): r for r in rows}
    return {w: per[w, RUNS[0][0]].seconds_per_input / per[w, RUNS[2][0]].seconds_per_input
            for w in dict.fromkeys(r.workload for r in rows)}


def table(rows: list[Row]) -> str:
    lines = ["| workload | run | ms / input | DRAM MB / input | MMACs / input | "
             "bound | build s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        config = SINGLE if r.run == RUNS[0][0] else MULTI
        compute = r.macs_per_input * r.batch / config.macs_per_cycle / config.clock_hz
        memory = r.dram_bytes_per_input * r.batch / config.dram_bandwidth
        bound = f"{'memory' if memory > compute else 'compute'} " \
                f"({memory / max(compute, 1e-12):.2f}x)"
        lines.append(f"| {r.workload} | {r.run} | {r.seconds_per_input * 1e3:.3f} | "
                     f"{r.dram_bytes_per_input / 1e6:.3f} | {r.macs_per_input / 1e6:.1f} | "
                     f"{bound} | {r.build_seconds:.1f} |")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    workloads = list(dict.fromkeys(r.workload for r in rows))
    per = {(r.workload, r.run): r.seconds_per_input for r in rows}
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / len(RUNS)
    for k, (run, _, _) in enumerate(RUNS):
        base = [per[w, RUNS[0][0]] for w in workloads]
        ax.bar([i + k * width for i in range(len(workloads))],
               [per[w, run] / b for w, b in zip(workloads, base)], width, label=run)
    ax.set_xticks([i + width for i in range(len(workloads))], workloads)
    ax.set_ylabel("time per input\n(single-batch core = 1)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_note(rows: list[Row], args: argparse.Namespace, seconds: float) -> None:
    gains = speedups(rows)
    resnets = [w for w in gains if w != "tree_lstm"]
    lines = [
        "# Batching on the int8 accelerator (the 2019 Relay paper's Figure 3, right)",
        "",
        f"Written by `python benchmarks/accel/batching.py{' --quick' if args.quick else ''}` "
        f"on {datetime.date.today()} in {seconds / 60:.1f} minutes; schedule "
        f"`{args.schedule}`. See the script's docstring for the set-up.",
        "",
        f"- single-batch core: {SINGLE.describe()}",
        f"- multi-batch core: {MULTI.describe()}",
        "",
        table(rows),
        "",
        "Single-batch time per input over the multi-batch core's at batch "
        f"{BATCH} (batching's gain): " +
        ", ".join(f"{w} {g:.2f}x" for w, g in gains.items()) + ".",
        "",
    ]
    if resnets and "tree_lstm" in gains:
        mean = math.exp(sum(math.log(gains[w]) for w in resnets) / len(resnets))
        # the finding is qualitative: a clear gain for the TreeLSTM, next to none for the
        # ResNets (thresholds written out so a reader can disagree with them)
        holds = gains["tree_lstm"] >= 1.5 and mean < 1.1
        lines += [
            f"The paper's finding -- batching helps the memory-bound TreeLSTM and hardly the "
            f"compute-bound ResNets -- {'holds' if holds else 'does not hold'} here (taken "
            f"as: the TreeLSTM gains at least 1.5x per input, the ResNets less than 1.1x): "
            f"the TreeLSTM gains {gains['tree_lstm']:.2f}x per input, the ResNets "
            f"{mean:.2f}x (geometric mean). Under the schedule `none` the ResNets are memory- "
            "rather than compute-bound on these cores (the bound column), yet batching does "
            "not help them either: their DRAM traffic per input does not fall at batch 4 "
            "(the DRAM MB / input column), the TreeLSTM's halves.",
            "",
        ]
    (HERE / "BATCHING.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="32x32 images and 20 trees (a smoke run)")
    parser.add_argument("--networks", default=",".join(WORKLOADS))
    parser.add_argument("--schedule", default="none",
                        help="the accel schedule (default none: the fusion searches "
                             "take tens of minutes on the ResNets at batch 4)")
    parser.add_argument("--trees", type=int, default=200, help="SST dev trees")
    args = parser.parse_args()
    names = args.networks.split(",")
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    start = time.perf_counter()
    rows: list[Row] = []
    for name in names:
        if name == "tree_lstm":
            rows += tree_lstm_rows(20 if args.quick else args.trees, args.schedule)
        else:
            rows += resnet_rows(name, 32 if args.quick else None, args.schedule)
    write_note(rows, args, time.perf_counter() - start)
    plot(rows, HERE / "batching.png")
    print(f"wrote {HERE / 'BATCHING.md'}")


if __name__ == "__main__":
    main()
