"""Helpers shared by the tests of passes over small typed modules: build one (from Python or
Relay text), run it on a target, list its op calls."""
from __future__ import annotations

from typing import Callable

from relaydsl.backend.interpreter import to_value
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Call, Expr, Function, Op, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import post_order
from relaydsl.transform.gradient import FirstOrderGradients, LowerGrads
from relaydsl.transform.pass_infra import Sequential
from relaydsl.typing import infer_types


def module(shapes, body: Callable[..., Expr]) -> IRModule:
    """main(params of `shapes`) = body(*params), typed."""
    params = [Var(f"p{i}", TensorType(s)) for i, s in enumerate(shapes)]
    mod = IRModule()
    mod.add("main", Function(params, body(*params)))
    return infer_types(mod)


def typed(text: str) -> IRModule:
    """The module of Relay text `text`, typed."""
    return infer_types(parse(text))


def grads_lowered(mod: IRModule, first_order: bool = False) -> IRModule:
    """`mod` with its grad nodes lowered as the pipeline lowers them: with `first_order`,
    straight-line code to its first-order adjoint program first."""
    passes = [FirstOrderGradients(), LowerGrads()] if first_order else [LowerGrads()]
    return Sequential(passes)(mod)


def run(mod: IRModule, target: str, *args, entry: str = "main"):
    """`mod`'s `entry` compiled for `target`, applied to `args`."""
    program = get_target(target).build(mod, entry, {})
    return program(*[to_value(a, p.checked_type) for a, p in zip(args, mod[entry].params)])


def op_calls(mod: IRModule, entry: str = "main") -> list[Call]:
    calls: list[Call] = []
    post_order(mod[entry], lambda e: calls.append(e)
               if isinstance(e, Call) and isinstance(e.op, Op) else None)
    return calls


def op_names(mod: IRModule, entry: str = "main") -> list[str]:
    return sorted(c.op.name for c in op_calls(mod, entry))
