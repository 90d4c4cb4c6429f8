"""Functions re-typed with the shapes values have at run time.

A primitive function typed with ``relay.Any`` or symbolic dimensions cannot be compiled as
it is; its kernel is compiled for the shapes its arguments have (the dispatcher, and native
code's kernels whose shapes are known only at run time), and an entry whose parameters
have symbolic dimensions is compiled per call signature. Type inference re-run with the
concrete parameter types gives the body's shapes: the type relations of the ops are their
shape functions.
"""
from __future__ import annotations

from typing import Sequence

from relaydsl.ir.expr import Function, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType, Type, static_type
from relaydsl.transform._util import substitute
from relaydsl.transform.inline import fresh_copy


def specialize(fn: Function, types: Sequence[TensorType]) -> Function:
    """`fn` with parameters of the static tensor types `types`, re-typed."""
    # Static parameters are not enough: a value ascribed a dynamic type (a let annotated
    # with relay.Any dims) may leave the body's types dynamic; re-inference makes them static.
    if all(p.checked_type == t for p, t in zip(fn.params, types)) and \
            static_type(fn.checked_type.ret_type):
        return fn
    from relaydsl.typing import infer_type

    out = infer_type(_retyped(fn, types))
    assert isinstance(out, Function)
    return out


def specialize_entry(mod: IRModule, entry: str, types: Sequence[Type]) -> IRModule:
    """A copy of `mod` whose `entry` takes parameters of exactly `types`, re-typed."""
    from relaydsl.typing import infer_types

    out = mod.copy()
    out.add(entry, _retyped(mod[entry], types))
    return infer_types(out)


def _retyped(fn: Function, types: Sequence[Type]) -> Function:
    """`fn` with parameters of `types` (the body's types left to inference), every variable
    it binds a new one: inference sets the types of the nodes it checks, and nodes shared
    with `fn` would take these shapes in every other build of `fn` too (an interpreter build
    of a shape-polymorphic function saw its let typed (2, 16) after an llvm call with n=2)."""
    fresh = fresh_copy(fn)
    params = [Var(p.name_hint, t) for p, t in zip(fresh.params, types)]
    body = substitute(fresh.body, dict(zip(fresh.params, params)))
    return Function(params, body, None, (), fn.attrs, span=fn.span)

