"""Relay types (Figure 1 of the 2019 paper).

A tensor type is a shape and a base type (dtype). A shape dimension is an int,
a shape-kinded ``TypeVar`` (a symbolic dimension, solved by inference), or
``Any`` (known only at run time). Nodes are immutable; equality of types is
structural (``==``), which is what unification and the tests want.
"""
from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, SupportsIndex, cast, final

from relaydsl.errors import IRError
from relaydsl.ir.node import Immutable, conforms

if TYPE_CHECKING:
    from relaydsl.ir.attrs import Attrs

DTYPES = (
    "float16", "float32", "float64",
    "int8", "int16", "int32", "int64",
    "uint8", "bool",
)


class Kind(enum.Enum):
    """What a type variable stands for."""

    Type = "Type"          # any type
    Shape = "Shape"        # a tensor dimension
    BaseType = "BaseType"  # a dtype


class Type(Immutable):
    """Base of all types."""

    __slots__ = ()


class AnyDim:
    """A dimension known only at run time (Relay's ``Any``, printed ``?``)."""

    _instance: "AnyDim | None" = None

    def __new__(cls) -> "AnyDim":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "Any"

    def __reduce__(self):  # keep the singleton through copy/pickle
        return (AnyDim, ())


Any = AnyDim()

_fresh_ids = itertools.count()


@final
@dataclass(frozen=True, slots=True, eq=False)
class TypeVar(Type):
    """A type variable. Identity is the object: two TypeVars named ``n`` are different variables."""

    name: str
    kind: Kind = Kind.Type
    uid: int = field(default_factory=lambda: next(_fresh_ids))

    def __repr__(self) -> str:
        return self.name


Dim = int | TypeVar | AnyDim
DType = str | TypeVar


def _check_dim(dim: object) -> Dim:
    if isinstance(dim, bool):
        raise IRError(f"a tensor dimension must be an int, a Shape TypeVar or Any, got {dim!r}")
    if isinstance(dim, int):
        if dim < 0:
            raise IRError(f"a tensor dimension must be non-negative, got {dim}")
        return dim
    if isinstance(dim, SupportsIndex) and not isinstance(dim, (TypeVar, AnyDim)):
        return _check_dim(int(dim))  # numpy integers
    if isinstance(dim, TypeVar):
        if dim.kind is not Kind.Shape:
            raise IRError(f"type variable {dim.name} of kind {dim.kind.name} used as a dimension")
        return dim
    if isinstance(dim, AnyDim):
        return dim
    raise IRError(f"a tensor dimension must be an int, a Shape TypeVar or Any, got {dim!r}")


@final
@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """``Tensor[(d0, d1, ...), dtype]``. A scalar has shape ``()``."""

    shape: tuple[Dim, ...]
    dtype: DType = "float32"

    def __post_init__(self) -> None:
        shape = self.shape if conforms(self.shape, (tuple, list)) else (self.shape,)
        object.__setattr__(self, "shape", tuple(_check_dim(d) for d in shape))
        if isinstance(self.dtype, TypeVar):
            if self.dtype.kind is not Kind.BaseType:
                raise IRError(f"type variable {self.dtype.name} used as a dtype must have "
                              "kind BaseType")
        elif self.dtype not in DTYPES:
            raise IRError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def is_ground(self) -> bool:
        """No type variables in it: every dimension a size or Any, the dtype a name (what
        type inference can take as it is, without resolving or substituting)."""
        return isinstance(self.dtype, str) and not any(isinstance(d, TypeVar) for d in self.shape)

    def concrete_shape(self) -> tuple[int, ...]:
        if not self.is_static:
            raise IRError(f"shape {self.shape} is not static")
        return cast("tuple[int, ...]", self.shape)  # is_static: every dimension an int

    def concrete_dtype(self) -> str:
        if not isinstance(self.dtype, str):
            raise IRError(f"dtype {self.dtype} is not known")
        return self.dtype


def scalar_type(dtype: str = "float32") -> TensorType:
    return TensorType((), dtype)


@final
@dataclass(frozen=True, slots=True)
class TupleType(Type):
    fields: tuple[Type, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        for f in self.fields:
            _check_type(f, "a tuple field")


@final
@dataclass(frozen=True, slots=True)
class RefType(Type):
    value: Type

    def __post_init__(self) -> None:
        _check_type(self.value, "a reference's value type")


@final
@dataclass(frozen=True, slots=True, eq=False)
class TypeRelation(Immutable):
    """A call of a type relation over some types: ``Broadcast(t0, t1, t_out)``.

    ``func(arg_types, attrs, ctx)`` returns the output type, or None while
    its inputs are not yet known well enough (see relaydsl/typing).
    """

    name: str
    func: Callable[..., "Type | None"]
    args: tuple[Type, ...]
    out: Type
    attrs: "Attrs | None" = None


@final
@dataclass(frozen=True, slots=True)
class FuncType(Type):
    """``fn<type_params>(arg_types) -> ret_type where relations``."""

    arg_types: tuple[Type, ...]
    ret_type: Type
    type_params: tuple[TypeVar, ...] = ()
    relations: tuple[TypeRelation, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "arg_types", tuple(self.arg_types))
        object.__setattr__(self, "type_params", tuple(self.type_params))
        object.__setattr__(self, "relations", tuple(self.relations))
        for a in self.arg_types:
            _check_type(a, "a function argument type")
        _check_type(self.ret_type, "a function return type")


@final
@dataclass(frozen=True, slots=True, eq=False)
class GlobalTypeVar(Type):
    """The name of an algebraic data type (``List``). Identity is the object."""

    name: str
    kind: Kind = Kind.Type

    def __repr__(self) -> str:
        return self.name


@final
@dataclass(frozen=True, slots=True)
class TypeCall(Type):
    """An ADT applied to type arguments: ``List[Tensor[(3,), float32]]``."""

    func: GlobalTypeVar
    args: tuple[Type, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if not conforms(self.func, GlobalTypeVar):
            raise IRError(f"TypeCall expects a GlobalTypeVar, got {self.func!r}")
        for a in self.args:
            _check_type(a, "a type argument")


def _check_type(t: object, what: str) -> None:
    if not isinstance(t, Type):
        raise IRError(f"{what} must be a Type, got {t!r}")


def static_type(t: Type | None) -> bool:
    """Whether `t` is a tensor, or tuples of tensors, of sizes and dtypes known now (what a
    kernel can be compiled for, what a type relation can be run on at once)."""
    if isinstance(t, TupleType):
        return all(static_type(f) for f in t.fields)
    return isinstance(t, TensorType) and t.is_static and isinstance(t.dtype, str)


def dtype_of(t: Type) -> DType:
    if not isinstance(t, TensorType):
        raise IRError(f"expected a tensor type, got {t}")
    return t.dtype


def is_float(dtype: DType) -> bool:
    return isinstance(dtype, str) and dtype.startswith("float")


def has_float(t: Type) -> bool:
    """Whether a tensor type, or some tensor in a tuple type, has a floating-point dtype."""
    if isinstance(t, TupleType):
        return any(has_float(f) for f in t.fields)
    return isinstance(t, TensorType) and is_float(t.dtype)


def is_int(dtype: DType) -> bool:
    return isinstance(dtype, str) and dtype.startswith(("int", "uint"))


def shape_to_str(shape: tuple[Dim, ...]) -> str:
    """``(3, n, ?)``; a 1-tuple keeps its comma."""
    dims = ", ".join(type_to_str(d) for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"


def type_to_str(t: "Type | Dim | str", name_of: "Callable[[TypeVar], str] | None" = None) -> str:
    """The text-format rendering of a type, used by error messages and the printer.

    `name_of` names type variables (the printer passes one that disambiguates clashes).

    >>> n = TypeVar("n", Kind.Shape)
    >>> type_to_str(FuncType((TensorType((n, 3)),), TensorType(())))
    'fn(Tensor[(n, 3), float32]) -> Tensor[(), float32]'
    >>> type_to_str(FuncType((), TensorType(()), (n,)))
    'fn<n: Shape>() -> Tensor[(), float32]'
    """
    def sub(x: "Type | Dim | str") -> str:
        return type_to_str(x, name_of)

    if isinstance(t, TensorType):
        dims = ", ".join(sub(d) for d in t.shape)
        if len(t.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {sub(t.dtype)}]"
    if isinstance(t, AnyDim):
        return "?"
    if isinstance(t, bool):
        return str(t)
    if isinstance(t, (int, str)):
        return str(t)
    if isinstance(t, TypeVar):
        return name_of(t) if name_of is not None else t.name
    if isinstance(t, TupleType):
        inner = ", ".join(sub(f) for f in t.fields)
        return f"({inner},)" if len(t.fields) == 1 else f"({inner})"
    if isinstance(t, RefType):
        return f"Ref[{sub(t.value)}]"
    if isinstance(t, FuncType):
        tps = ""
        if t.type_params:
            tps = f"<{', '.join(type_param_to_str(p, name_of) for p in t.type_params)}>"
        args = ", ".join(sub(a) for a in t.arg_types)
        return f"fn{tps}({args}) -> {sub(t.ret_type)}"
    if isinstance(t, GlobalTypeVar):
        return t.name
    if isinstance(t, TypeCall):
        if not t.args:
            return t.func.name
        return f"{t.func.name}[{', '.join(sub(a) for a in t.args)}]"
    return repr(t)


def type_param_to_str(tv: TypeVar, name_of: "Callable[[TypeVar], str] | None" = None) -> str:
    """A type parameter as declared: ``a``, ``n: Shape``, ``d: BaseType``."""
    name = name_of(tv) if name_of is not None else tv.name
    return name if tv.kind is Kind.Type else f"{name}: {tv.kind.name}"


def _type_text(self: Type) -> str:
    return type_to_str(self)


# Readable reprs everywhere (tests, errors, debugging).
for _cls in (TensorType, TupleType, RefType, FuncType, TypeCall):
    _cls.__repr__ = _type_text
    _cls.__str__ = _type_text
