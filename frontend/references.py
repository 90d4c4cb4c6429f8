"""References: mutable cells, as in the MAPL paper's Relay (``ref``, ``!``, ``:=``).

Inside decorated code, ``relay.ref(v)`` makes a cell holding v, ``relay.ref_read(r)`` reads
it and ``relay.ref_write(r, v)`` replaces its value (the result is the empty tuple). A cell
is a value like any other: passed to and returned from functions, captured by closures, and
differentiable: ``relay.grad`` follows values through cells (the reverse-mode transform keeps
a store). Annotate a cell parameter ``relay.Ref[T]``.

Outside decorated code the same three functions make and use the cells programs take and
return, so Python can hand a program a cell and read what the program wrote.

>>> import numpy as np
>>> from relaydsl import relay, Float
>>> @relay
... def accumulate(total: relay.Ref[Float], x: Float) -> Float:
...     relay.ref_write(total, relay.ref_read(total) + x)
...     return relay.ref_read(total) * 2.0
>>> cell = relay.ref(np.float32(1.0))
>>> float(accumulate(cell, 2.0)), float(relay.ref_read(cell))
(6.0, 3.0)
"""
from __future__ import annotations

from typing import Any as AnyValue

from relaydsl.backend.interpreter import RefValue
from relaydsl.frontend.annotations import python_data
from relaydsl.ir.expr import Expr, RefCreate, RefRead, RefWrite
from relaydsl.ir.span import Span


def ref(value: AnyValue) -> RefValue:
    """A new cell holding `value` (``ref(v)`` in Relay)."""
    return RefValue(python_data(value))


def ref_read(cell: RefValue) -> AnyValue:
    """The value in `cell` (``!r`` in Relay)."""
    return _cell(cell, "ref_read").value


def ref_write(cell: RefValue, value: AnyValue) -> tuple:
    """Put `value` in `cell` (``r := v`` in Relay); the result is the empty tuple."""
    _cell(cell, "ref_write").value = python_data(value)
    return ()


def _cell(cell: AnyValue, who: str) -> RefValue:
    if not isinstance(cell, RefValue):
        raise TypeError(f"relay.{who} takes a cell made by relay.ref, got {type(cell).__name__}")
    return cell


ARITY = {ref: 1, ref_read: 1, ref_write: 2}


def translate(form: AnyValue, args: list[Expr], span: Span | None) -> Expr:
    """The Relay expression of a call of `form` (one of ARITY) with translated `args`."""
    if form is ref:
        return RefCreate(args[0], span=span)
    if form is ref_read:
        return RefRead(args[0], span=span)
    return RefWrite(args[0], args[1], span=span)


__all__ = ["ARITY", "ref", "ref_read", "ref_write", "translate"]
