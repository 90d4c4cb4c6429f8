"""Helpers shared by the tests of the normal forms and of operator fusion."""
from __future__ import annotations

import numpy as np

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir import Call, Function, IRModule, Let, Op, TensorType
from relaydsl.ir.visitor import children, post_order
from relaydsl.transform._util import is_primitive
from relaydsl.transform.a_normal_form import to_a_normal_form
from relaydsl.transform.fuse_ops import fuse_ops, primitive_functions
from relaydsl.transform.graph_normal_form import to_graph_normal_form
from tests.relaydsl.transform.module_helpers import typed


def pipeline(mod: IRModule, **fuse_options) -> tuple[IRModule, IRModule, IRModule]:
    """to_graph_normal_form -> fuse_ops -> to_a_normal_form, each stage's module."""
    graph = to_graph_normal_form(mod)
    fused = fuse_ops(graph, **fuse_options)
    return graph, fused, to_a_normal_form(fused)


def op_names(fn: Function) -> list[str]:
    names: list[str] = []
    post_order(fn.body, lambda e: names.append(e.op.name)
               if isinstance(e, Call) and isinstance(e.op, Op) else None)
    return sorted(names)


def groups(mod: IRModule | Function) -> list[list[str]]:
    """Each primitive function of the user's globals as the sorted list of its op names."""
    if isinstance(mod, IRModule):
        fns = [f for fn in mod.user_functions().values() for f in primitive_functions(fn)]
    else:
        fns = primitive_functions(mod)
    return sorted(op_names(f) for f in fns)


def check_fused(mod: IRModule) -> None:
    """Every op call is inside a primitive function; those take tensors and have no lets."""
    prims = {id(f) for f in primitive_functions(mod)}
    for fn in mod.functions.values():
        outside: list[str] = []

        def visit(e, outside=outside):
            if isinstance(e, Call) and isinstance(e.op, Op):
                outside.append(e.op.name)

        _walk_outside_primitives(fn, visit)
        assert not outside, f"op calls outside primitive functions: {outside}"
    for f in primitive_functions(mod):
        assert id(f) in prims
        for p in f.params:
            assert isinstance(p.checked_type, TensorType), (p, p.checked_type)
        kinds = _node_kinds(f.body)
        assert Let not in kinds and Function not in kinds


def _node_kinds(expr) -> list[type]:
    kinds: list[type] = []
    post_order(expr, lambda e: kinds.append(type(e)))
    return kinds


def _walk_outside_primitives(expr, fn) -> None:
    seen: set[int] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if id(e) in seen or is_primitive(e):
            continue
        seen.add(id(e))
        fn(e)
        stack += children(e)


def assert_same_values(before, after, atol=1e-5) -> None:
    if isinstance(before, tuple):
        assert isinstance(after, tuple) and len(before) == len(after)
        for b, a in zip(before, after):
            assert_same_values(b, a, atol)
        return
    before, after = np.asarray(before), np.asarray(after)
    assert before.dtype == after.dtype and before.shape == after.shape
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=atol)


def check_pipeline(mod: IRModule, *args, entry: str = "main", **fuse_options) -> IRModule:
    """Runs the pipeline, checks the fused invariants and that every stage computes the same
    values as `mod`; returns the fused module (before ANF)."""
    expected = evaluate(mod, *args, entry=entry)
    graph, fused, anf = pipeline(mod, **fuse_options)
    check_fused(fused)
    check_fused(anf)
    for stage in (graph, fused, anf):
        assert_same_values(expected, evaluate(stage, *args, entry=entry))
    return fused


def rand(*shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed + len(shape)).uniform(-1, 1, size=shape).astype(dtype)


__all__ = ["typed", "pipeline", "groups", "check_fused", "check_pipeline", "rand",
           "assert_same_values", "op_names"]
