"""The frame of the passes that rewrite dataflow patterns across let bindings
(fold_scale_axis.py, combine_parallel_conv2d.py).

Their patterns -- a conv2d whose only consumer is a per-channel multiply, several conv2d
reading one input -- are edges of the dataflow graph, which ``let`` bindings (as the frontend
writes every assignment) hide. The frame shows each pass a graph view of its module: the functions
calling the pass's anchor ops in graph normal form (let-bound pure dataflow inlined, so
producers and consumers are linked directly, and ``uses`` counts each node's consumers),
typed. A function the pass left alone is returned as it was, lets and all; a function it
rewrote has its constants folded (the scaled or concatenated weights become constants) and
comes back in A-normal form, so that each node, shared or not, is evaluated once by any
evaluator (the interpreter evaluates a graph's shared pure node once per frame).

The view is built and taken apart one function at a time, with the helpers of the normal
form and folding passes (``graph_normal_form_function``, ``fold_function``,
``a_normal_form_function``), never by running those passes on the module: they would
rewrite every function, and the pass's result is the functions it rewrote.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Callable

from relaydsl.ir.expr import Call, Expr, Op
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import children, post_order
from relaydsl.op.registry import OpDef
from relaydsl.transform._util import calls_any
from relaydsl.transform.a_normal_form import a_normal_form_function
from relaydsl.transform.fold_constant import fold_function
from relaydsl.transform.graph_normal_form import graph_normal_form_function
from relaydsl.typing.infer import infer_types


def rewrite_dataflow(mod: IRModule, transform: Callable[[IRModule], IRModule],
                     anchors: Collection[OpDef]) -> IRModule:
    """`mod` with the functions that ``transform(graph view of mod)`` changed replaced by
    their new version, constants folded, in A-normal form; `mod` itself if none changed.

    The view holds the functions calling one of the `anchors` (the ops every rewrite of the
    pass involves) in graph form; most programs call none, and are returned at once.
    `transform` must keep each function it leaves alone (the same object), as
    ``rewrite_functions`` does; what it builds may be untyped.
    """
    chosen = [gv for gv, fn in mod.user_functions().items() if calls_any(fn, anchors)]
    if not chosen:
        return mod
    graph = mod.copy()
    for gv in chosen:
        graph.add(gv, graph_normal_form_function(mod[gv]))
    infer_types(graph)  # the view is new: the rewrite reads its types
    out = transform(graph)
    changed = [gv for gv in chosen if out[gv] is not graph[gv]]
    if not changed:
        return mod
    infer_types(out)  # a folded call takes its type
    result = mod.copy()
    for gv in changed:
        result.add(gv, a_normal_form_function(fold_function(out[gv])))
    return result


def use_counts(root: Expr) -> dict[Expr, int]:
    """How many times each node of the graph under `root` is an operand of another:
    a node used once has one consumer, whose rewrite may change it."""
    uses: dict[Expr, int] = {}
    seen: set[Expr] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for child in children(node):
            uses[child] = uses.get(child, 0) + 1
            stack.append(child)
    return uses


def op_consumers(root: Expr) -> dict[Expr, list[tuple[Call, int]]]:
    """The operator calls reading each node of the graph under `root`, with the
    argument position, in evaluation order."""
    readers: dict[Expr, list[tuple[Call, int]]] = {}

    def record(e: Expr) -> None:
        if isinstance(e, Call) and isinstance(e.op, Op):
            for i, a in enumerate(e.args):
                readers.setdefault(a, []).append((e, i))

    post_order(root, record)
    return readers


__all__ = ["rewrite_dataflow", "use_counts", "op_consumers"]
