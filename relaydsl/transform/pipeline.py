"""The pass pipeline: every pass a target runs, in order, and the opt_level it starts at.

This module is the one place that lists them. A target compiles a module in two phases:

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

Each target has its default level (llvm 3, interp 0: the interpreter stays the simple
reference). ``relay.build`` takes the level from its ``opt_level`` option, else the current
PassContext, else the target's default; the context's ``required_pass`` and
``disabled_pass`` add and remove passes whatever the level.

>>> pass_names("llvm", 0)
['LowerGrads', 'StaticShapes', 'ToGraphNormalForm', 'FuseOps', 'ToANormalForm']
>>> pass_names("interp", 2)[4:]
['SimplifyInference', 'DeadCodeElimination', 'FoldConstant']
>>> pass_names("interp", 0, required_pass=["InlineAll"])
['InlineAll', 'LowerGrads']
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from relaydsl.ir.module import IRModule
from relaydsl.transform.alter_op_layout import alter_op_layout
from relaydsl.transform.a_normal_form import to_a_normal_form
from relaydsl.transform.combine_parallel_conv2d import combine_parallel_conv2d
from relaydsl.transform.dead_code import eliminate_dead_code, inline_once
from relaydsl.transform.defunctionalize import defunctionalize
from relaydsl.transform.eliminate_common_subexpr import eliminate_common_subexpr
from relaydsl.transform.eta_expand import eta_expand
from relaydsl.transform.fold_constant import fold_constants
from relaydsl.transform.fold_scale_axis import fold_scale_axis
from relaydsl.transform.fuse_ops import fuse_ops
from relaydsl.transform.gradient import lower_first_order_grads, lower_grads
from relaydsl.transform.graph_normal_form import to_graph_normal_form
from relaydsl.transform.inline import inline, inline_all, inline_globals
from relaydsl.transform.lambda_lift import lambda_lift
from relaydsl.transform.partial_eval import partial_evaluate
from relaydsl.transform.pass_infra import Pass, PassContext, Sequential, module_pass
from relaydsl.transform.simplify_inference import simplify_inference
from relaydsl.transform.static_shapes import static_shapes

MAX_OPT_LEVEL = 3
ON_DEMAND = MAX_OPT_LEVEL + 1
"""The opt_level of passes that run only when the PassContext requires them."""


def _fuse_ops(mod: IRModule) -> IRModule:
    """Fusion at the current context's level: each op alone at 0, fused from 1."""
    return fuse_ops(mod, fuse_opt_level=0 if PassContext.current().opt_level == 0 else 2)


Inline = module_pass(
    inline, opt_level=2, name="Inline",
    description="substitute the globals marked Inline=1 and remove them (TVM's Inline)")
InlineAll = module_pass(
    inline_all, opt_level=ON_DEMAND, name="InlineAll",
    description="substitute every non-recursive global and remove it: one function per entry")
InlineGlobals = module_pass(
    inline_globals, opt_level=2, name="InlineGlobals",
    description="inline calls of non-recursive monomorphic globals and applied function literals")
FirstOrderGradients = module_pass(
    lower_first_order_grads, opt_level=3, name="FirstOrderGradients",
    description="a grad of straight-line code becomes a reference-free adjoint program")
LowerGrads = module_pass(
    lower_grads, opt_level=0, name="LowerGrads",
    description="the remaining grad nodes become reverse-mode AD code (closures, references)")
EtaExpand = module_pass(
    eta_expand, opt_level=ON_DEMAND, name="EtaExpand",
    description="a global or constructor used as a value becomes a literal calling it")
Defunctionalization = module_pass(
    defunctionalize, opt_level=ON_DEMAND, name="Defunctionalization",
    description="a higher-order global called with a known function becomes a first-order "
                "copy")
LambdaLift = module_pass(
    lambda_lift, opt_level=ON_DEMAND, name="LambdaLift",
    description="local function literals become globals (a closure: a Closure=1 global of "
                "its captures)")
PartialEvaluate = module_pass(
    partial_evaluate, opt_level=ON_DEMAND, name="PartialEvaluate",
    description="run what is static, emit the rest: inlines closures, unrolls static loops")
SimplifyInference = module_pass(
    simplify_inference, opt_level=2, name="SimplifyInference",
    description="inference-mode batch_norm becomes a per-channel multiply-add; dropout goes")
AlterOpLayout = module_pass(
    alter_op_layout, opt_level=3, name="AlterOpLayout",
    description="conv2d in the blocked NCHW32c layout where that is faster (llvm's kernel)")
DeadCodeElimination = module_pass(
    eliminate_dead_code, opt_level=2, name="DeadCodeElimination",
    description="drop let bindings of pure values that are never used")
InlineOnce = module_pass(
    inline_once, opt_level=ON_DEMAND, name="InlineOnce",
    description="dead-code elimination that also inlines a pure let used once (never into "
                "a function)")
FoldConstant = module_pass(
    fold_constants, opt_level=2, name="FoldConstant",
    description="evaluate what is known at compile time: constant op calls, lets, projections, ifs")
FoldScaleAxis = module_pass(
    fold_scale_axis, opt_level=3, name="FoldScaleAxis",
    description="fold per-channel scales (inference batch_norm) into conv2d/dense weights")
EliminateCommonSubexpr = module_pass(
    eliminate_common_subexpr, opt_level=3, name="EliminateCommonSubexpr",
    description="compute each pure op call once: equal calls share one node")
CombineParallelConv2D = module_pass(
    combine_parallel_conv2d, opt_level=ON_DEMAND, name="CombineParallelConv2D",
    description="conv2d calls of one input (3 or more) become one wider conv2d and slices")
StaticShapes = module_pass(
    static_shapes, opt_level=0, name="StaticShapes",
    description="drop relay.Any from annotations where the values' shapes are static")
ToGraphNormalForm = module_pass(
    to_graph_normal_form, opt_level=0, name="ToGraphNormalForm",
    description="inline let-bound pure dataflow into a DAG of shared nodes")
FuseOps = module_pass(
    _fuse_ops, opt_level=0, name="FuseOps", required=[ToGraphNormalForm],
    description="put op calls in primitive functions: one op each at opt_level 0, fused from 1")
ToANormalForm = module_pass(
    to_a_normal_form, opt_level=0, name="ToANormalForm",
    description="bind every computation once, in order, in the innermost scope using it")

# Inline and InlineAll run first: the globals they remove are gone for every later pass.
# InlineGlobals runs twice: first so that a grad sees through the calls of its function (and gets
# the first-order adjoint), then to inline the adjoints, which are applied function literals.
# PartialEvaluate runs once grads are lowered (it leaves grad nodes alone) and before
# FoldConstant and fusion, which then see the unrolled straight-line code.
# SimplifyInference runs before FoldConstant, which folds its per-channel scale and shift,
# which FoldScaleAxis (as TVM's, after FoldConstant: it needs constant scales) then moves
# into the weights of the convolutions before it. CombineParallelConv2D comes after both (a
# batch_norm folds into each branch's weights before they are concatenated) and after CSE
# (equal inputs are one node). It runs on demand, at TVM's opt_level 4: one wide convolution
# is not always faster than several narrow ones on a CPU. AlterOpLayout comes after them all
# (as in TVM's build): the passes before it read conv2d in NCHW; it folds the layout
# transforms of constant weights itself. The closure conversions run on lowered grads (which make
# closures): eta-expansion first, so that defunctionalization sees globals passed as values
# as literals too, then lifting of what stays local.
OPTIMIZE: tuple[Pass, ...] = (Inline, InlineAll, InlineGlobals, FirstOrderGradients,
                              LowerGrads, InlineGlobals, PartialEvaluate,
                              EtaExpand, Defunctionalization, LambdaLift,
                              SimplifyInference, DeadCodeElimination, InlineOnce,
                              FoldConstant, FoldScaleAxis, EliminateCommonSubexpr,
                              CombineParallelConv2D)
# AlterOpLayout is the llvm target's: its blocked layouts are chosen for that target's
# conv2d_nchwc kernel, which the interpreter would run by unblocking and reblocking.
LOWERING: dict[str, tuple[Pass, ...]] = {
    "interp": (),
    "llvm": (AlterOpLayout, StaticShapes, FuseOps, ToANormalForm),
    "accel": (StaticShapes,),
}
# Passes a target runs first at every level (unless disabled by name). The accelerator's code
# generator takes the network as one function of op calls (§4.4 of the 2019 Relay paper; the
# notes ask whether InlineAll can do it: it can), with no scalar op left (SimplifyInference,
# FoldConstant and FoldScaleAxis come with opt_level 3, its default).
ALWAYS: dict[str, tuple[Pass, ...]] = {"accel": (InlineAll,)}


def for_target(target: str) -> Sequential:
    """The pipeline `target` runs: the Sequential of OPTIMIZE then the target's LOWERING
    passes; which of them run is decided by the PassContext it is called under."""
    try:
        lowering = LOWERING[target]
    except KeyError:
        raise ValueError(f"no pipeline for target {target!r}; "
                         f"known: {', '.join(sorted(LOWERING))}") from None
    always = [replace(p, opt_level=0) for p in ALWAYS.get(target, ())]
    return Sequential([*always, *OPTIMIZE, *lowering], name=f"{target} pipeline")


def run(mod: IRModule, target: str, context: PassContext) -> IRModule:
    """`mod` after `target`'s pipeline under `context` (its instruments watching)."""
    with context:
        return for_target(target)(mod)


def pass_names(target: str, opt_level: int, required_pass: Sequence[str] = ()) -> list[str]:
    """The names of the passes `target` runs at `opt_level`, in order (the passes they
    require too), with the passes named in `required_pass` whatever their level."""
    context = PassContext(opt_level=opt_level, required_pass=frozenset(required_pass))
    return [p.name for p in for_target(target).plan(context)]


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


__all__ = ["OPTIMIZE", "LOWERING", "MAX_OPT_LEVEL", "ON_DEMAND", "for_target", "run",
           "pass_names", "table", "Inline", "InlineAll", "InlineGlobals", "FirstOrderGradients",
           "LowerGrads", "PartialEvaluate", "EtaExpand", "Defunctionalization", "LambdaLift",
           "SimplifyInference", "DeadCodeElimination", "InlineOnce", "FoldConstant",
           "FoldScaleAxis", "EliminateCommonSubexpr", "CombineParallelConv2D", "AlterOpLayout",
           "ToGraphNormalForm", "FuseOps", "ToANormalForm"]
