"""A dict that also sees the entries of the dict it was opened in: nested scopes.

Three walks keep values per scope and look a key up through the enclosing ones: the
interpreter's memo of shared dataflow nodes, the LLVM expression emitter's memo of emitted
values and partial evaluation's frames of variables. Each scope writes only its own entries
(``scope[key] = value``); ``find`` reads the nearest one.

>>> outer = ChainedDict(entries={"x": 1})
>>> inner = ChainedDict(outer, {"y": 2})
>>> inner.find("x"), inner.find("y"), inner.get("x"), outer.find("y")
(1, 2, None, None)
"""
from __future__ import annotations

from typing import Generic, Iterable, Mapping, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ChainedDict(dict[K, V], Generic[K, V]):
    """This scope's entries, and through ``find`` its `parent`'s (None values are absent)."""

    __slots__ = ("parent",)

    # a scope is itself, not its entries: two frames binding equal values are two frames
    # (partial evaluation keys memos by frame)
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__  # type: ignore[assignment]

    def __init__(self, parent: ChainedDict[K, V] | None = None,
                 entries: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        super().__init__(entries)
        self.parent = parent

    def find(self, key: K) -> V | None:
        """The value of `key` in this scope or the nearest enclosing one that has it."""
        scope: ChainedDict[K, V] | None = self
        while scope is not None:
            found = dict.get(scope, key)
            if found is not None:
                return found
            scope = scope.parent
        return None
