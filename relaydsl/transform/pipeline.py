"""The pass pipeline: every pass a target runs, in order, and what a build compiles with.

This module is the one place that lists them (each pass declares its opt_level, description
and prerequisites in its own file; see pass_infra.py). A target compiles a module in two
phases:

1. ``OPTIMIZE``, target-independent: grad nodes lowered (required to run anything), and at
   higher levels inlining, first-order gradients, dead code elimination, constant folding;
2. the target's ``LOWERING`` phase, what its executor needs: on llvm blocked conv2d
   layouts (at opt_level 3), static shapes where only an annotation hid them, every op call
   in a primitive function (fused from level 1), in A-normal form; the interpreter runs the
   whole language and needs nothing.

What each opt_level adds:

- 0: what a program needs to run: grad nodes lowered (closures and references); on llvm
  each op call is its own primitive function (one kernel per op);
- 1: fusion: FuseOps groups op calls into fused primitive functions;
- 2: inlining of non-recursive globals (those marked ``Inline=1`` removed), inference-mode
  batch_norm and dropout as arithmetic (SimplifyInference), dead code elimination, constant
  folding;
- 3: first-order gradients: a grad of straight-line code becomes a reference-free adjoint
  program (whose intermediates the llvm target places by liveness); per-channel scales folded into
  conv2d/dense weights (FoldScaleAxis); common-subexpression elimination; conv2d in the
  blocked NCHW32c layout where that is faster (AlterOpLayout: direct convolution on the
  llvm target's micro-kernel, 0.87x the time of ResNet-18 at 224x224). Everything but
  the passes run on demand;
- on demand (``PassContext(required_pass=[...])``), at no level: InlineAll, a whole network
  as one function with no other globals (for an accelerator's code generator);
  CombineParallelConv2D, convolutions of one input (an Inception block's) as one; and the
  closure conversions
  EtaExpand, Defunctionalization, LambdaLift and InlineOnce (dead-code elimination that also
  inlines a pure let used once). Our executors run closures as cheaply as globals -- the
  llvm target's dispatcher is the interpreter calling compiled kernels -- so these buy
  neither backend speed; lifting would even cost the llvm target its loops (local
  tail-recursive functions, which native code runs as jumps). They are for a code generator that
  wants first-order globals (an accelerator's, a C backend's), as in TVM, where none of them
  is in the default pipeline either; and PartialEvaluate, as in TVM, where it runs only on
  request: it inlines every call it can and unrolls loops on static counts, which can grow
  a program a lot (up to FUEL nested calls of one function), so the user asks for it (a
  model with static loops, before fusion).

A build names its entry (``for_target(target, entry)``): RemoveUnusedFunctions then runs first,
at every level, and InlineGlobals drops the globals it inlined, so that no pass rewrites or
re-types a global the entry does not reach (the prelude's, the inlined ones).

A pass's prerequisites run right before it whatever the level (LowerGrads requires
DeadCodeElimination, FuseOps ToGraphNormalForm), and a pass right after an equal one is left
out (pass_infra.resolve).

Each target has its default level, ``DEFAULT_OPT_LEVEL`` (llvm 3, interp 0: the interpreter
stays the simple reference). ``relay.build`` takes the level from its ``opt_level`` option,
else the current PassContext, else the target's default; the context's ``required_pass`` and
``disabled_pass`` add and remove passes whatever the level. The level and the context travel
together to the backends as one ``CompileOptions``.

>>> print(", ".join(pass_names("llvm", 0)))
DeadCodeElimination, LowerGrads, StaticShapes, ToGraphNormalForm, FuseOps, ToANormalForm
>>> pass_names("interp", 2)[5:]
['SimplifyInference', 'DeadCodeElimination', 'FoldConstant']
>>> pass_names("interp", 0, required_pass=["InlineAll"])
['InlineAll', 'DeadCodeElimination', 'LowerGrads']
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any as AnyValue

from relaydsl.ir.module import IRModule
from relaydsl.ir.node import conforms
from relaydsl.transform.a_normal_form import ToANormalForm
from relaydsl.transform.alter_op_layout import AlterOpLayout
from relaydsl.transform.combine_parallel_conv2d import CombineParallelConv2D
from relaydsl.transform.dead_code import DeadCodeElimination, InlineOnce
from relaydsl.transform.defunctionalize import Defunctionalization
from relaydsl.transform.eliminate_common_subexpr import EliminateCommonSubexpr
from relaydsl.transform.eta_expand import EtaExpand
from relaydsl.transform.fold_constant import FoldConstant
from relaydsl.transform.fold_scale_axis import FoldScaleAxis
from relaydsl.transform.fuse_ops import FuseOps
from relaydsl.transform.gradient import FirstOrderGradients, LowerGrads
from relaydsl.transform.graph_normal_form import ToGraphNormalForm
from relaydsl.transform.inline import Inline, InlineAll, InlineGlobals
from relaydsl.transform.lambda_lift import LambdaLift
from relaydsl.transform.partial_eval import PartialEvaluate
from relaydsl.transform.pass_infra import (
    MAX_OPT_LEVEL, ON_DEMAND, Pass, PassContext, Sequential,
)
from relaydsl.transform.remove_unused_functions import RemoveUnusedFunctions
from relaydsl.transform.simplify_inference import SimplifyInference
from relaydsl.transform.static_shapes import StaticShapes

# Inline and InlineAll run first: the globals they remove are gone for every later pass.
# InlineGlobals runs twice: first so that a grad sees through the calls of its function (and gets
# the first-order adjoint), then to inline the adjoints, which are applied function literals.
# The grad lowerings require DeadCodeElimination (dead code would send nan adjoints back): it
# runs right before each.
# PartialEvaluate runs once grads are lowered (it leaves grad nodes alone) and before
# FoldConstant and fusion, which then see the unrolled straight-line code.
# SimplifyInference runs before FoldConstant, which folds its per-channel scale and shift,
# which FoldScaleAxis (as TVM's, after FoldConstant: it needs constant scales) then moves
# into the weights of the convolutions before it. CombineParallelConv2D comes after both (a
# batch_norm folds into each branch's weights before they are concatenated) and after CSE
# (equal inputs are one node). It runs on demand, at TVM's opt_level 4: one wide convolution
# is not always faster than several narrow ones on a CPU. AlterOpLayout comes after them all
# (as in TVM's build): the passes before it read conv2d in NCHW; FoldConstant runs again
# after it (as in TVM's build), folding the layout transforms of constant weights (at a level
# without AlterOpLayout, the two FoldConstants are adjacent and run once). The closure
# conversions run on lowered grads (which make closures): eta-expansion first, so that
# defunctionalization sees globals passed as values as literals too, then lifting of what
# stays local. FuseOps requires ToGraphNormalForm, which runs right before it.
OPTIMIZE: tuple[Pass, ...] = (
    Inline(), InlineAll(), InlineGlobals(), FirstOrderGradients(), LowerGrads(), InlineGlobals(),
    PartialEvaluate(), EtaExpand(), Defunctionalization(), LambdaLift(), SimplifyInference(),
    DeadCodeElimination(), InlineOnce(), FoldConstant(), FoldScaleAxis(),
    EliminateCommonSubexpr(), CombineParallelConv2D())
# AlterOpLayout is the llvm target's: its blocked layouts are chosen for that target's
# conv2d_nchwc kernel, which the interpreter would run by unblocking and reblocking. FuseOps
# takes its level from the context: one op per primitive function at opt_level 0.
LOWERING: dict[str, tuple[Pass, ...]] = {
    "interp": (),
    "llvm": (AlterOpLayout(), FoldConstant(), StaticShapes(), FuseOps(), ToANormalForm()),
    "accel": (StaticShapes(),),
}
# Passes a target runs first at every level (unless disabled by name). The accelerator's code
# generator takes the network as one function of op calls (§4.4 of the 2019 Relay paper; the
# notes ask whether InlineAll can do it: it can), with no scalar op left (SimplifyInference,
# FoldConstant and FoldScaleAxis come with opt_level 3, its default).
ALWAYS: dict[str, tuple[Pass, ...]] = {"accel": (InlineAll(),)}
DEFAULT_OPT_LEVEL: dict[str, int] = {"interp": 0, "llvm": 3, "accel": 3}
"""Each target's level when neither the build nor the PassContext gives one."""


@dataclass(frozen=True)
class CompileOptions:
    """What a target compiles a module with, besides the module: the optimisation level, and
    the PassContext its pipeline runs under, at that level (its required and disabled passes
    and instruments). Equal options compile equal programs.

    >>> CompileOptions.for_target("llvm").opt_level
    3
    >>> with PassContext(opt_level=1, disabled_pass=["FuseOps"]):
    ...     options = CompileOptions.for_target("llvm")
    >>> options.opt_level, options.context.opt_level, sorted(options.context.disabled_pass)
    (1, 1, ['FuseOps'])
    >>> CompileOptions(opt_level=4)
    Traceback (most recent call last):
    ValueError: opt_level must be an int from 0 to 3, got 4
    """

    opt_level: int
    context: PassContext = field(default_factory=PassContext)
    target_options: tuple[tuple[str, AnyValue], ...] = ()  # a target's own, by name

    def __getitem__(self, name: str) -> AnyValue:
        """A target's own option: ``options["schedule"]`` on the accel target."""
        return dict(self.target_options)[name]

    def __post_init__(self) -> None:
        level = self.opt_level
        if not conforms(level, int) or isinstance(level, bool) or \
                not 0 <= level <= MAX_OPT_LEVEL:
            raise ValueError(f"opt_level must be an int from 0 to {MAX_OPT_LEVEL}, "
                             f"got {level!r}")
        if self.context.opt_level != level:
            object.__setattr__(self, "context", replace(self.context, opt_level=level))

    @staticmethod
    def for_target(target: str, opt_level: int | None = None,
                   context: PassContext | None = None) -> "CompileOptions":
        """The options `target` compiles with under `context` (default: the current
        PassContext): at `opt_level` if given, else the context's, else the target's
        default level."""
        context = PassContext.current() if context is None else context
        if opt_level is None:
            opt_level = context.opt_level
        if opt_level is None:
            opt_level = DEFAULT_OPT_LEVEL[target]
        return CompileOptions(opt_level, context)


def for_target(target: str, entry: str | None = None) -> Sequential:
    """The pipeline `target` runs: the Sequential of OPTIMIZE then the target's LOWERING
    passes; which of them run is decided by the PassContext it is called under. Given the
    `entry` a build runs, the globals it does not reach go first (RemoveUnusedFunctions:
    the passes then neither rewrite nor re-type the prelude's functions on every build)."""
    try:
        lowering = LOWERING[target]
    except KeyError:
        raise ValueError(f"no pipeline for target {target!r}; "
                         f"known: {', '.join(sorted(LOWERING))}") from None
    passes: list[Pass] = [*OPTIMIZE, *lowering]
    always = ALWAYS.get(target, ())
    if entry is not None:
        passes = [InlineGlobals(entries=(entry,)) if isinstance(p, InlineGlobals) else p
                  for p in passes]
        always = (RemoveUnusedFunctions(entries=(entry,)), *always)
    return Sequential(passes, name=f"{target} pipeline", always=always)


def accel_host_split() -> Sequential:
    """What the accel target runs on a program that is not one network (after its pipeline):
    its op calls fused into primitive functions, each call of which goes to the accelerator
    where it has the rules (backend/accel/hybrid.py), in A-normal form as on the llvm target:
    the host's native code lowers each node once per use, so a node graph form shares (a
    residual block's input) must be bound once.

    >>> [p.name for p in accel_host_split().plan(PassContext(opt_level=0))]
    ['ToGraphNormalForm', 'FuseOps', 'ToANormalForm']
    """
    return Sequential([FuseOps(), ToANormalForm()], name="accel host split")


def quantize_prepare() -> Sequential:
    """What ``relay.quantize`` runs on the float program before annotating it: one function
    (InlineAll), inference batch_norm as arithmetic folded into the weights (SimplifyInference,
    FoldConstant, FoldScaleAxis), dead code out, and dataflow form for the annotation rules.
    Every pass runs whatever the PassContext's level (``always``)."""
    return Sequential([], name="quantize: prepare", always=(
        InlineAll(), SimplifyInference(), DeadCodeElimination(), FoldConstant(),
        FoldScaleAxis(), ToGraphNormalForm()))


QUANTIZE_FINISH: tuple[Pass, ...] = (FoldConstant(), DeadCodeElimination())
"""What ``relay.quantize`` runs after realization (relaydsl/quantize/flow.py, which runs the
quantize package's own passes, Annotate and Realize, above this layer): what realization left
constant folded, dead code out."""


def run(mod: IRModule, target: str, context: PassContext, entry: str | None = None
        ) -> IRModule:
    """`mod` after `target`'s pipeline under `context` (its instruments watching); with
    `entry`, only the globals `entry` reaches remain."""
    with context:
        return for_target(target, entry)(mod)


def pass_names(target: str, opt_level: int, required_pass: Sequence[str] = (),
               entry: str | None = None) -> list[str]:
    """The names of the passes `target` runs at `opt_level`, in order (the passes they
    require too), with the passes named in `required_pass` whatever their level; as a build
    of `entry` runs them, given one."""
    context = PassContext(opt_level=opt_level, required_pass=frozenset(required_pass))
    return [p.name for p in for_target(target, entry).plan(context)]


def table() -> str:
    """The Markdown table of the README's "Passes and opt_level": each pass, the levels it
    runs at (x), the targets running it, and what it does (a pass run on demand marks no
    level)."""
    levels = range(MAX_OPT_LEVEL + 1)
    rows: dict[str, tuple[Pass, set[int], list[str]]] = {}
    always = {p.name: target for target, passes in ALWAYS.items() for p in passes}
    for target in LOWERING:
        for level in [*levels, ON_DEMAND]:
            for p in for_target(target).plan(PassContext(opt_level=level)):
                if always.get(p.name) == target:
                    continue  # a column of its own: "always on <target>"
                _, at, targets = rows.setdefault(p.name, (p, set(), []))
                at.add(level)
                if target not in targets:
                    targets.append(target)
    # every pass, in pipeline order
    order = [p.name for p in for_target("llvm").plan(PassContext())]
    header = " | ".join(str(level) for level in levels)
    lines = [f"| pass | {header} | targets | what it does |",
             "|---|" + "---|" * len(levels) + "---|---|"]
    for name in dict.fromkeys(order):
        p, at, targets = rows[name]
        marks = " | ".join("x" if level in at else "" for level in levels)
        on = "all" if len(targets) == len(LOWERING) else ", ".join(targets)
        what = p.description if p.opt_level <= MAX_OPT_LEVEL else \
            f"on demand (`required_pass`): {p.description}"
        if name in always:
            what = f"always on {always[name]}; elsewhere {what}"
        lines.append(f"| {name} | {marks} | {on} | {what} |")
    return "\n".join(lines)


__all__ = ["OPTIMIZE", "LOWERING", "ALWAYS", "DEFAULT_OPT_LEVEL", "MAX_OPT_LEVEL", "ON_DEMAND",
           "CompileOptions", "for_target", "accel_host_split", "run", "pass_names", "table",
           "quantize_prepare", "QUANTIZE_FINISH",
           "Inline", "InlineAll",
           "InlineGlobals", "FirstOrderGradients", "LowerGrads", "PartialEvaluate", "EtaExpand",
           "Defunctionalization", "LambdaLift", "SimplifyInference", "DeadCodeElimination",
           "InlineOnce", "FoldConstant", "FoldScaleAxis", "EliminateCommonSubexpr",
           "CombineParallelConv2D", "AlterOpLayout", "ToGraphNormalForm", "FuseOps",
           "ToANormalForm"]
