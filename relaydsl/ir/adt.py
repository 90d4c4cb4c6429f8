"""Algebraic data types: definitions, constructors and match patterns.

``List[a] = Cons(a, List[a]) | Nil`` is a TypeData whose header is the
GlobalTypeVar ``List`` with type variable ``a`` and two Constructors.

`Constructor` and the base class `Pattern` are defined in expr.py, beside the nodes that check
them (a call checks a constructor's arity, a match clause its pattern), and are named here too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, final

from relaydsl.errors import IRError
from relaydsl.ir.expr import Constructor, Pattern, Var
from relaydsl.ir.node import Immutable, conforms
from relaydsl.ir.span import Span
from relaydsl.ir.types import GlobalTypeVar, Type, TypeCall, TypeVar


@final
@dataclass(frozen=True, slots=True, eq=False)
class TypeData(Immutable):
    """An ADT definition: ``type header[type_vars] { constructors }``."""

    header: GlobalTypeVar
    type_vars: tuple[TypeVar, ...]
    constructors: tuple[Constructor, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_vars", tuple(self.type_vars))
        object.__setattr__(self, "constructors", tuple(self.constructors))
        for i, c in enumerate(self.constructors):
            if c.belong_to is not self.header:
                raise IRError(f"constructor {c.name} does not belong to {self.header.name}")
            if c.tag != i:
                object.__setattr__(c, "tag", i)

    def self_type(self) -> TypeCall:
        return TypeCall(self.header, self.type_vars)

    def constructor(self, name: str) -> Constructor:
        for c in self.constructors:
            if c.name == name:
                return c
        raise IRError(f"{self.header.name} has no constructor {name}")


# A constructor's field: a Type, or f(self_type, type_vars) -> Type for the recursive cases.
FieldSpec = Type | Callable[[TypeCall, tuple[TypeVar, ...]], Type]


def define_adt(name: str, type_var_names: list[str],
               constructors: list[tuple[str, list[FieldSpec]]]) -> TypeData:
    """Build a TypeData. Each constructor is (name, inputs); an input may be a callable
    ``f(self_type, type_vars) -> Type`` for the recursive cases.

    >>> lst = define_adt("MyList", ["a"], [("MyCons", [lambda s, tv: tv[0], lambda s, tv: s]),
    ...                                    ("MyNil", [])])
    >>> [c.name for c in lst.constructors]
    ['MyCons', 'MyNil']
    """
    header = GlobalTypeVar(name)
    type_vars = tuple(TypeVar(n) for n in type_var_names)
    self_type = TypeCall(header, type_vars)
    ctors: list[Constructor] = []
    for tag, (cname, inputs) in enumerate(constructors):
        resolved = [i(self_type, type_vars) if callable(i) else i for i in inputs]
        ctors.append(Constructor(cname, tuple(resolved), header, tag))
    return TypeData(header, type_vars, tuple(ctors))


@final
@dataclass(frozen=True, slots=True, eq=False)
class PatternWildcard(Pattern):
    """``_``"""

    span: Span | None = field(default=None, kw_only=True, repr=False)


@final
@dataclass(frozen=True, slots=True, eq=False)
class PatternVar(Pattern):
    """Binds the matched value to `var`."""

    var: Var
    span: Span | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        if not conforms(self.var, Var):
            raise IRError(f"PatternVar binds a Var, got {self.var!r:.80}")


@final
@dataclass(frozen=True, slots=True, eq=False)
class PatternConstructor(Pattern):
    """``Cons(p0, p1)``"""

    constructor: Constructor
    patterns: tuple[Pattern, ...] = ()
    span: Span | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(self.patterns))
        if not conforms(self.constructor, Constructor):
            raise IRError(f"PatternConstructor needs a Constructor, got {self.constructor!r:.80}")
        if len(self.patterns) != len(self.constructor.inputs):
            raise IRError(
                f"pattern {self.constructor.name}(...) has {len(self.patterns)} sub-patterns, "
                f"but {self.constructor.name} takes {len(self.constructor.inputs)}",
                self.span,
            )
        for p in self.patterns:
            if not conforms(p, Pattern):
                raise IRError(f"sub-patterns must be Patterns, got {p!r:.80}")


@final
@dataclass(frozen=True, slots=True, eq=False)
class PatternTuple(Pattern):
    """``(p0, p1, ...)``"""

    patterns: tuple[Pattern, ...]
    span: Span | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(self.patterns))
        for p in self.patterns:
            if not conforms(p, Pattern):
                raise IRError(f"sub-patterns must be Patterns, got {p!r:.80}")


def pattern_vars(p: Pattern) -> list[Var]:
    """The variables a pattern binds, left to right."""
    if isinstance(p, PatternVar):
        return [p.var]
    if isinstance(p, (PatternConstructor, PatternTuple)):
        return [v for sub in p.patterns for v in pattern_vars(sub)]
    return []


__all__ = [
    "Constructor", "TypeData", "FieldSpec", "define_adt", "Pattern", "PatternWildcard",
    "PatternVar", "PatternConstructor", "PatternTuple", "pattern_vars",
]
