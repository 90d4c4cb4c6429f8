"""What the shape transformations share: axis tuples, the shape attribute, an index along one
axis."""
from __future__ import annotations

from typing import Any as AnyValue

from relaydsl.op.registry import Attr


def as_tuple(v: int | tuple[int, ...]) -> tuple[int, ...]:
    """An ``int_or_ints``-like attribute as a tuple: ``as_tuple(2) == (2,)``."""
    return (v,) if isinstance(v, int) else tuple(v)


def _nonnegative(shape: tuple[int, ...]) -> str | None:
    return f"dims must be >= 0, got {shape}" if any(d < 0 for d in shape) else None


def shape_attr(doc: str) -> Attr:
    """The ``shape`` attribute of broadcast_to and the constructors: dims >= 0."""
    return Attr("shape", "ints", check=_nonnegative, doc=doc)


def along(axis: int, ndim: int, index: AnyValue) -> tuple[AnyValue, ...]:
    """An index applying `index` on `axis` and taking everything on the other axes.

    >>> along(-1, 3, slice(1, 2))
    (slice(None, None, None), slice(None, None, None), slice(1, 2, None))
    """
    axis = axis % ndim
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)
