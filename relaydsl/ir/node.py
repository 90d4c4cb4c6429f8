"""What every IR node shares: it is immutable, so copying one gives the node itself; and the
check its constructor runs on what it is given."""
from __future__ import annotations

from typing import Any as AnyValue


class Immutable:
    """Base of the IR's immutable nodes (expressions, types, patterns, attributes).

    A node never changes once built, and variables and type variables are compared by
    identity, so a copy (shallow or deep) is the node itself, as for a tuple or a string:
    ``copy.deepcopy`` of a model, a module or anything else holding IR shares its nodes rather
    than making distinct variables that no longer match their uses.
    """

    __slots__ = ()

    def __copy__(self) -> AnyValue:
        return self

    def __deepcopy__(self, memo: dict[int, AnyValue]) -> AnyValue:
        return self


def conforms(value: object, cls: type[object] | tuple[type[object], ...]) -> bool:
    """``isinstance(value, cls)``, for a value whose annotation already promises `cls`.

    IR constructors check what they are given, since their callers (a user's Python, the
    frontend) are not type-checked; pyright trusts the annotations and would call such a
    check unnecessary. Taking `value` as an ``object`` says the check is meant.
    """
    return isinstance(value, cls)
