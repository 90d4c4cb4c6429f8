"""Operator attributes: an immutable, validated mapping attached to a Call of an Op."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any as AnyValue, TypeGuard, cast

from relaydsl.ir.node import Immutable


def freeze(value: AnyValue) -> AnyValue:
    """Lists become tuples so attributes are hashable and immutable."""
    if isinstance(value, (list, tuple)):
        # isinstance cannot tell the element type: any value, each frozen in turn
        return tuple(freeze(v) for v in cast("list[AnyValue] | tuple[AnyValue, ...]", value))
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()  # numpy scalars
    return value


def is_tuple(value: object) -> TypeGuard[tuple[AnyValue, ...]]:
    """Whether an attribute value is a tuple, of attribute values (``isinstance`` alone cannot
    say what its items are)."""
    return isinstance(value, tuple)


class Attrs(Immutable, Mapping[str, AnyValue]):
    """Read-only attribute mapping; also readable as ``attrs.axis``."""

    __slots__ = ("_items",)
    _items: dict[str, AnyValue]

    def __init__(self, items: Mapping[str, AnyValue] | None = None):
        object.__setattr__(self, "_items", {k: freeze(v) for k, v in (items or {}).items()})

    def __getitem__(self, key: str) -> AnyValue:
        return self._items[key]

    def __getattr__(self, key: str) -> AnyValue:
        if key.startswith("_"):  # not an attribute name: e.g. `_items` before __init__ ran
            raise AttributeError(key)
        try:
            return self._items[key]
        except KeyError:
            raise AttributeError(
                f"no attribute {key!r}; attributes are {sorted(self._items)}") from None

    def __setattr__(self, key: str, value: AnyValue) -> None:
        raise AttributeError("Attrs are immutable")

    def __reduce__(self) -> tuple[type[Attrs], tuple[dict[str, AnyValue]]]:
        # rebuilt through __init__: __setattr__ refuses the slot
        return (Attrs, (self._items,))

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items(), key=lambda kv: kv[0])))

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items.items()) + ")"
