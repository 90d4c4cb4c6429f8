"""Figure 5 of the Relay paper: the speedup of successively layered passes on four CNNs.

    python benchmarks/figure5.py                     # the four networks at the paper's sizes
    python benchmarks/figure5.py --quick             # a smoke run: 32x32 images, few samples
    python benchmarks/figure5.py --models dqn,vgg16  # a subset

ResNet-18, MobileNet v1, VGG-16 and Nature-DQN (benchmarks/workloads/vision.py, random
weights from a seed) run at batch 1 on the llvm target, their parameters bound into the
program as constants (as TVM's ``relay.build(mod, params=...)`` does), once per pass set of
``LAYERS``: no optimisation at all (opt_level 0: one kernel per op), then fusion, then each
further pass added to the ones before. Every program is first checked against a JAX forward
pass over the same weights, then all of a network's programs are timed round-robin by the
benchmark harness (median, after a warm-up). The figure is each program's speedup over the
opt_level-0 one.

A pass that this pipeline does not have (relaydsl/transform/pipeline.py) is skipped, and the
output says so: its layer then measures the same passes as the layer before it.

The table goes into its own section of benchmarks/RESULTS.md (replacing an earlier one, the
rest of the file untouched), the bar chart into benchmarks/figure5.png (matplotlib, the
"bench" extra: ``pip install -e .[bench]``; without it the chart is skipped).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# run as a script (`python benchmarks/figure5.py`, from anywhere): the benchmarks package is
# found from the repository root; imported as benchmarks.figure5, it already is
if not __package__ and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.harness import Case, Result, Settings, replace_section, run_case  # noqa: E402
from benchmarks.machine import machine_kind  # noqa: E402
from benchmarks.workloads import vision  # noqa: E402
from benchmarks.workloads.common import jax_modules  # noqa: E402
from relaydsl import relay  # noqa: E402
from relaydsl.backend.target import get_target  # noqa: E402
from relaydsl.transform import PassContext, pipeline  # noqa: E402


@dataclass(frozen=True)
class Layer:
    """One bar of the figure: a PassContext, by opt_level and the pass names it requires."""

    label: str
    opt_level: int
    required_pass: tuple[str, ...] = ()


# Level 0 runs only what a program needs (each op its own kernel); level 1 adds fusion; every
# later layer requires one more pass group on top of the ones before. FoldConstant comes with
# every layer after its own, as in the paper, since the later passes leave work for it (the
# scaled or re-laid-out weights). The pipeline orders the passes, whatever the order here.
# Unlike TVM, which runs SimplifyInference at every level (its batch_norm has no kernel), ours
# compiles batch_norm as one opaque kernel, which fusion cannot merge into the convolution
# before it, until the last layer: for ResNet-18 and MobileNet, that layer shows part of what
# fusion buys in TVM's figure.
LAYERS: tuple[Layer, ...] = (
    Layer("none", 0),
    Layer("+ fusion", 1),
    Layer("+ constant folding", 1, ("FoldConstant",)),
    Layer("+ layout alteration", 1, ("FoldConstant", "AlterOpLayout")),
    Layer("+ CSE", 1, ("FoldConstant", "AlterOpLayout", "EliminateCommonSubexpr")),
    Layer("+ fold-scale-axis / simplify-inference", 1,
          ("FoldConstant", "AlterOpLayout", "EliminateCommonSubexpr", "SimplifyInference",
           "FoldScaleAxis")),
)
TARGET = "llvm"
QUICK_IMAGE = {"resnet18": 32, "mobilenet": 32, "vgg16": 32, "dqn": 36}
SECTION = "## Figure 5: speedup of layered passes"


def known_passes() -> set[str]:
    """The names of every pass the target's pipeline has."""
    return {p.name for p in pipeline.for_target(TARGET).passes}


def context(layer: Layer, known: set[str]) -> PassContext:
    """The layer's PassContext, leaving out the passes the pipeline does not have."""
    return PassContext(opt_level=layer.opt_level,
                       required_pass=[p for p in layer.required_pass if p in known])


def skipped(layers: Sequence[Layer], known: set[str]) -> list[str]:
    """The pass names of `layers` that the pipeline does not have, in order, once each."""
    return list(dict.fromkeys(p for layer in layers for p in layer.required_pass
                              if p not in known))


def labels(layers: Sequence[Layer], known: set[str]) -> list[str]:
    """The layers' labels, each marked with the passes it adds that the pipeline lacks."""
    out, before = [], set()
    for layer in layers:
        lacking = [p for p in layer.required_pass if p not in known and p not in before]
        out.append(layer.label + (f" (no {', '.join(lacking)})" if lacking else ""))
        before.update(layer.required_pass)
    return out


@dataclass
class ModelResult:
    """One network's row: the harness's cells, keyed "jax" and layer_key(i)."""

    name: str
    result: Result

    def seconds(self, key: str) -> float | None:
        return self.result.cells[key].seconds


def layer_key(i: int) -> str:
    return f"layer:{i}"


def network_case(name: str, image: int, layers: Sequence[Layer], known: set[str],
                 seed: int = 0) -> Case:
    """One network's row: the JAX reference and a program per layer, on the same weights."""
    fn = vision.model(name, image)
    model = relay.create_model(fn)
    params = vision.random_params(model, seed)
    x = np.random.default_rng(seed + 1).standard_normal(
        vision.input_shape(name, image)).astype(np.float32)
    mod, entry = vision.bind_params(model)

    def jax_setup():
        jax, jnp = jax_modules()
        forward = jax.jit(vision.JAX_FORWARD[name])
        jp, jx = {k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(x)
        return lambda: forward(jp, jx)

    def relaydsl_setup(layer: Layer):
        def setup():
            with context(layer, known):
                program = get_target(TARGET).build(mod, entry, {})
            return lambda: program(x)
        return setup

    setups = {"jax": jax_setup}
    setups.update({layer_key(i): relaydsl_setup(layer) for i, layer in enumerate(layers)})
    return Case(f"{vision.TITLES[name]} ({image}x{image})", "figure5", setups, reference="jax")


def measure(names: Sequence[str], layers: Sequence[Layer], settings: Settings,
            image: int | None = None) -> list[ModelResult]:
    """Checks and times every network of `names` under every layer (image: their size, by
    default the paper's, or 32x32 for a quick run)."""
    known = known_passes()
    results = []
    for name in names:
        size = image or (QUICK_IMAGE[name] if settings.quick else vision.MODELS[name][2])
        case = network_case(name, size, layers, known)
        print(f"  {case.name} ...", file=sys.stderr, flush=True)
        (result,) = run_case(case, settings)
        results.append(ModelResult(name, result))
    return results


# ---- the table and the chart -----------------------------------------------------------------
def speedup(r: ModelResult, i: int) -> float | None:
    base, t = r.seconds(layer_key(0)), r.seconds(layer_key(i))
    return base / t if base and t else None


def ms(seconds: float) -> str:
    """Milliseconds, three significant digits (no exponent for the slow networks)."""
    value = seconds * 1e3
    return f"{value:.0f} ms" if value >= 100 else f"{value:.3g} ms"


def table(results: Sequence[ModelResult], layers: Sequence[Layer]) -> tuple[str, list[str]]:
    """The Markdown table (speedup over opt_level 0, and the median time) and its notes."""
    notes: list[str] = []
    header = ["network", *labels(layers, known_passes()), "jax.jit (NCHW)"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for r in results:
        cells = [r.result.case.name]
        for i in range(len(layers)):
            cell = r.result.cells[layer_key(i)]
            if cell.seconds is None:
                notes.append(f"{r.result.case.name}, {layers[i].label}: {cell.status}: "
                             f"{cell.footnote}")
                cells.append(cell.status)
                continue
            s = speedup(r, i)
            cells.append(f"{s:.2f}x ({ms(cell.seconds)})" if s else f"— ({ms(cell.seconds)})")
        jax = r.result.cells["jax"]
        cells.append(ms(jax.seconds) if jax.seconds else jax.status)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), notes


def draw(results: Sequence[ModelResult], layers: Sequence[Layer], path: Path) -> bool:
    """The bar chart as a PNG at `path`; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(layers)
    for i, label in enumerate(labels(layers, known_passes())):
        xs = [m + (i - (len(layers) - 1) / 2) * width for m in range(len(results))]
        ax.bar(xs, [speedup(r, i) or 0.0 for r in results], width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(results)), [vision.TITLES[r.name] for r in results])
    ax.set_ylabel("speedup over opt_level 0")
    ax.set_title(f"Layered passes, batch 1, relaydsl on {TARGET} (this machine's CPU)")
    ax.legend(fontsize=8, ncols=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def section_text(results: Sequence[ModelResult], layers: Sequence[Layer], missing: list[str],
                 settings: Settings, load: tuple[str, str], argv: Sequence[str]) -> str:
    known = known_passes()
    table_md, notes = table(results, layers)
    command = " ".join(["python benchmarks/figure5.py", *argv])
    lines = [
        f"Written by `{command}` on {machine_kind()},"
        f" on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; load average "
        f"{load[0]} at the start, {load[1]} at the end. Batch 1, float32, NCHW, random "
        "weights bound as constants; the speedup of each pass set over opt_level 0 "
        f"(median time per call in brackets), on the `{TARGET}` target"
        + ("; `--quick`: indicative only" if settings.quick else "") + ". The chart: "
        "[`figure5.png`](figure5.png).",
        "", table_md, "", "The pass sets (PassContexts), each after the one before (FuseOps puts "
        "each op in a kernel of its own at opt_level 0 and fuses from opt_level 1; batch_norm "
        "is a kernel of its own, which fusion does not merge into the convolution before it, "
        "until SimplifyInference turns it into a multiply-add):", ""]
    for layer in layers:
        names = pipeline.for_target(TARGET).plan(context(layer, known))
        lines.append(f"- **{layer.label}**: opt_level {layer.opt_level}"
                     + (f", required_pass {list(layer.required_pass)}"
                        if layer.required_pass else "")
                     + f": runs {', '.join(p.name for p in names)}")
    if missing:
        lines += ["", f"Not in this pipeline, so skipped: {', '.join(missing)} (a layer that "
                      "adds nothing else measures the same passes as the layer before)."]
    if notes:
        lines += ["", "Failures:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="32x32 images (DQN 36x36), few samples: a smoke run")
    parser.add_argument("--models", default=",".join(vision.MODELS),
                        help=f"comma-separated subset of: {', '.join(vision.MODELS)}")
    parser.add_argument("--image", type=int, default=None,
                        help="image size for every network (default: the paper's, 224; "
                             "DQN 84)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "RESULTS.md"),
                        help="the Markdown file whose Figure 5 section is written ('' to skip)")
    parser.add_argument("--chart", default=str(ROOT / "benchmarks" / "figure5.png"),
                        help="where the bar chart goes ('' to skip)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in vision.MODELS]
    if unknown:
        parser.error(f"unknown models {', '.join(unknown)}; choose from "
                     f"{', '.join(vision.MODELS)}")

    missing = skipped(LAYERS, known_passes())
    for name in missing:
        print(f"{name}: not in this pipeline, skipped", file=sys.stderr)
    settings = Settings.for_mode(TARGET, args.quick)
    start_load = load_average()
    results = measure(names, LAYERS, settings, args.image)
    text = section_text(results, LAYERS, missing, settings, (start_load, load_average()), argv)
    print("\n" + text)
    if args.output:
        path = Path(args.output)
        old = path.read_text() if path.exists() else "# Benchmark results\n"
        path.write_text(replace_section(old, SECTION, text))
        print(f"written to {path}")
    if args.chart:
        if draw(results, LAYERS, Path(args.chart)):
            print(f"chart written to {args.chart}")
        else:
            print("no chart: matplotlib is not installed (pip install -e .[bench])")
    return 0


if __name__ == "__main__":
    sys.exit(main())
