"""TEMPORARY (issue 10 migration): the old way of defining ops, where the gradient and the
compute rule were attached later by name from other packages. Families not yet rewritten
as one block per op import ``OpDef`` and ``register`` from here; this module goes away
when the last family is converted."""
from __future__ import annotations

from typing import Any as AnyValue, Callable

from relaydsl.ir.expr import declare_op
from relaydsl.op import registry
from relaydsl.op.registry import Traits


def _pending(*args: AnyValue, **kwargs: AnyValue) -> AnyValue:
    raise NotImplementedError("facet not attached yet")


def OpDef(name: str, inputs: tuple[str, ...], type_relation: Callable, pattern: AnyValue,  # noqa: N802
          numpy_ref: Callable, jax_lower: Callable, attrs: tuple = (), doc: str = "",
          differentiable: bool = True, infers_inputs: tuple[int, ...] = ()) -> registry.OpDef:
    return registry.OpDef(name, tuple(inputs), type_relation, pattern, numpy_ref, jax_lower,
                          compute=_pending, gradient=_pending if differentiable else None,
                          differentiable=differentiable, attrs=tuple(attrs), doc=doc,
                          traits=Traits(infers_inputs=tuple(infers_inputs)))


def register(opdef: registry.OpDef) -> registry.OpDef:
    if opdef.name in registry._REGISTRY:
        raise ValueError(f"op {opdef.name} is registered twice")
    object.__setattr__(opdef, "op", declare_op(opdef.name, opdef))
    registry._REGISTRY[opdef.name] = opdef
    return opdef


def attach(name: str, facet: str, fn: Callable) -> None:
    """Sets a facet of a legacy op (its gradient or compute rule)."""
    opdef = registry.lookup(name)
    if getattr(opdef, facet) is not _pending:
        raise ValueError(f"op {name} already has its {facet}")
    object.__setattr__(opdef, facet, fn)


def is_pending(fn: AnyValue) -> bool:
    return fn is _pending
