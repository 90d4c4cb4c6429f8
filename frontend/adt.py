"""Algebraic data types declared in Python, for use in decorated code and annotations.

A class body lists the constructors; each annotation gives the fields: one
annotation for one field, a tuple of annotations for several -- ``(A, B)`` or
``tuple[A, B]`` -- and ``()`` for none (a single field of tuple type is
``(tuple[A, B],)``). Type parameters are named by ``relay.adt("a", ...)``;
inside the body a parameter is written as its name in quotes, and the type
itself as the class name, in quotes where Python needs it (it stands for the
type applied to its parameters).

>>> from relaydsl import relay, Tensor, Float
>>> @relay.adt("a")
... class BTree:
...     Leaf: "a"
...     Node: ("BTree", "BTree")
>>> BTree.Node
BTree.Node
>>> BTree[Tensor[Float, 3]]
BTree[Tensor[Float, (3,)]]
>>> @relay.adt("a")
... class Pair:
...     Leaf: "a"
...     Node: tuple["Pair", "Pair"]
>>> Pair.Node(Pair.Leaf(1.5), Pair.Leaf(2.5))
Node(Leaf(1.5), Leaf(2.5))
"""
from __future__ import annotations

import sys
import typing
from typing import Any as AnyValue, Callable

from relaydsl.backend.interpreter import ConstructorValue
from relaydsl.frontend.annotations import AdtAnnotation, annotation_to_type, check_argument
from relaydsl.frontend.tracebacks import user_facing
from relaydsl.ir.adt import Constructor, TypeData
from relaydsl.ir.types import GlobalTypeVar, Type, TypeCall, TypeVar

# Every ADT declared in Python, so a module can include the ones its functions use.
USER_TYPES: dict[GlobalTypeVar, TypeData] = {}


class ConstructorRef:
    """``BTree.Leaf``, ``relay.Cons``: a constructor. Called in decorated code it builds a
    value there; called in Python it builds the value programs take and return, each field
    checked against its declared type (a number in a polymorphic field takes its default
    dtype, as in decorated code).

    >>> from relaydsl import relay
    >>> relay.Cons(1.5, relay.Cons(2.5, relay.Nil()))
    Cons(1.5, Cons(2.5, Nil))
    """

    def __init__(self, owner: str, constructor: Constructor):
        self.owner = owner
        self.constructor = constructor

    def __call__(self, *fields: AnyValue) -> ConstructorValue:
        c = self.constructor
        if len(fields) != len(c.inputs):
            raise TypeError(f"{self} takes {len(c.inputs)} field(s), got {len(fields)}")
        bindings: dict = {}
        return ConstructorValue(c, tuple(
            check_argument(f"{self} field {i}", t, v, bindings)
            for i, (t, v) in enumerate(zip(c.inputs, fields))))

    def __repr__(self) -> str:
        return f"{self.owner}.{self.constructor.name}"


class UserADT:
    """What ``@relay.adt`` returns: the type (index it with type arguments) and its constructors."""

    def __init__(self, type_data: TypeData):
        self.type_data = type_data
        for c in type_data.constructors:
            setattr(self, c.name, ConstructorRef(type_data.header.name, c))

    @property
    def name(self) -> str:
        return self.type_data.header.name

    def __getitem__(self, args: AnyValue) -> AdtAnnotation:
        return AdtAnnotation(self.type_data)[args]

    def __repr__(self) -> str:
        return f"<relay ADT {self.name}>"


def declare_adt(cls: type, params: tuple[str, ...] = ()) -> UserADT:
    """The ADT a class body describes (see the module docstring)."""
    fields_by_ctor = dict(getattr(cls, "__annotations__", {}))
    if not fields_by_ctor:
        raise TypeError(f"@relay.adt class {cls.__name__} declares no constructors; write one "
                        "annotation per constructor, e.g. `Leaf: Tensor[Float, 3]`")
    header = GlobalTypeVar(cls.__name__)
    type_vars = tuple(TypeVar(p) for p in params)
    self_type = TypeCall(header, type_vars)

    def field_type(ann: AnyValue, ctor: str) -> Type:
        if isinstance(ann, str):
            if ann in params:
                return type_vars[params.index(ann)]
            if ann == cls.__name__:
                return self_type
            raise TypeError(f"{cls.__name__}.{ctor}: {ann!r} is neither a type parameter "
                            f"({', '.join(params) or 'none declared'}) nor {cls.__name__!r}")
        try:
            return annotation_to_type(ann, symbols={})
        except TypeError as e:
            raise TypeError(f"{cls.__name__}.{ctor}: {e}") from None

    def evaluated(ann: AnyValue, ctor: str) -> AnyValue:
        """Under ``from __future__ import annotations`` every annotation is its source text:
        evaluate it where the class was defined (the class's own name stands for itself)."""
        if not isinstance(ann, str) or ann in params or ann == cls.__name__:
            return ann
        namespace = vars(sys.modules[cls.__module__]) if cls.__module__ in sys.modules else {}
        try:
            return eval(ann, dict(namespace), {cls.__name__: cls.__name__})
        except Exception as e:
            raise TypeError(f"{cls.__name__}.{ctor}: cannot evaluate the annotation {ann!r} "
                            f"({type(e).__name__}: {e}); declare the ADT at module level") \
                from None

    constructors = []
    for tag, (name, spec) in enumerate(fields_by_ctor.items()):
        spec = evaluated(spec, name)
        if typing.get_origin(spec) is tuple:  # tuple[A, B]: the fields, as (A, B)
            spec = typing.get_args(spec)
        fields = tuple(evaluated(f, name) for f in spec) if isinstance(spec, tuple) else (spec,)
        inputs = tuple(field_type(f, name) for f in fields)
        constructors.append(Constructor(name, inputs, header, tag))
    td = TypeData(header, type_vars, tuple(constructors))
    USER_TYPES[header] = td
    return UserADT(td)


@user_facing
def adt(*args: AnyValue) -> UserADT | Callable[[type], UserADT]:
    """``@relay.adt`` on a class, or ``@relay.adt("a", "b")`` for type parameters."""
    if len(args) == 1 and isinstance(args[0], type):
        return declare_adt(args[0])
    if not all(isinstance(a, str) and a.isidentifier() for a in args):
        raise TypeError("relay.adt takes the names of type parameters: @relay.adt(\"a\")")
    return user_facing(lambda cls: declare_adt(cls, tuple(args)))
