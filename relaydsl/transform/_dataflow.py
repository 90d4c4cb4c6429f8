"""The frame of the passes that rewrite dataflow patterns across let bindings
(fold_scale_axis.py, combine_parallel_conv2d.py).

Their patterns -- a conv2d whose only consumer is a per-channel multiply, several conv2d
reading one input -- are edges of the dataflow graph, which ``let`` bindings (as the frontend
writes every assignment) hide. The frame shows each pass its module in graph normal form
(let-bound pure dataflow inlined, so producers and consumers are linked directly, and
``uses`` counts each node's consumers); a function the pass left alone is returned as it
was, lets and all; a function it rewrote has its constants folded (the scaled or
concatenated weights become constants) and comes back in A-normal form, so that each node,
shared or not, is evaluated once (the interpreter evaluates a graph's shared node once per
reference).
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Callable

from relaydsl.ir.expr import Call, Expr, Op
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import children, post_order
from relaydsl.op.registry import OpDef
from relaydsl.transform._util import calls_any, retyped
from relaydsl.transform.a_normal_form import a_normal_form_function
from relaydsl.transform.fold_constant import fold_constants
from relaydsl.transform.graph_normal_form import to_graph_normal_form


def rewrite_dataflow(mod: IRModule, transform: Callable[[IRModule], IRModule],
                     anchors: Collection[OpDef]) -> IRModule:
    """`mod` with the functions that ``transform(graph form of mod)`` changed replaced by
    their new version, constants folded, in A-normal form; `mod` itself if none changed.

    `transform` must keep each function it leaves alone (the same object), as
    ``rewrite_functions`` does, and return a typed module. A module calling none of the
    `anchors` (the ops every rewrite of the pass involves) is returned at once: most
    programs have nothing to rewrite, and the graph form costs an inference.
    """
    if not any(calls_any(fn, anchors) for fn in mod.user_functions().values()):
        return mod
    graph = to_graph_normal_form(mod)
    out = transform(graph)
    changed = [gv for gv, fn in out.user_functions().items()
               if fn is not graph.functions.get(gv)]
    if not changed:
        return mod
    folded = fold_constants(out)
    result = mod.copy()
    for gv in changed:
        result.add(gv, a_normal_form_function(folded[gv]))
    return retyped(result, types_kept=True)


def use_counts(root: Expr) -> dict[int, int]:
    """How many times each node of the graph under `root` is an operand of another (by id):
    a node used once has one consumer, whose rewrite may change it."""
    uses: dict[int, int] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for child in children(node):
            uses[id(child)] = uses.get(id(child), 0) + 1
            stack.append(child)
    return uses


def op_consumers(root: Expr) -> dict[int, list[tuple[Call, int]]]:
    """The operator calls reading each node of the graph under `root` (by id), with the
    argument position, in evaluation order."""
    readers: dict[int, list[tuple[Call, int]]] = {}

    def record(e: Expr) -> None:
        if isinstance(e, Call) and isinstance(e.op, Op):
            for i, a in enumerate(e.args):
                readers.setdefault(id(a), []).append((e, i))

    post_order(root, record)
    return readers


__all__ = ["rewrite_dataflow", "use_counts", "op_consumers"]
