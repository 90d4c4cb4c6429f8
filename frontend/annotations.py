"""The type annotations users write, their Relay types, and the checks made on call arguments.

A decorated function's signature is written with these objects::

    def mlp(x: Tensor[Float, (64, 784)], w: Tensor[Float, (784, "k")]) -> Tensor[Float, "k"]

- dtype markers (``Float`` is float32, ``Int`` int32; ``Float16/32/64``, ``Int8/16/32/64``,
  ``UInt8``, ``Bool``), alone a scalar annotation;
- ``Tensor[dtype, shape]``: a shape is a tuple of ints, names (symbolic dimensions) and
  ``Any`` (a size known only at run time); a bare int or name is 1-D, ``()`` a scalar;
- ``tuple[T1, T2]``, ``Fn[[T1, T2], R]`` (function-typed parameters), ADT annotations
  (``List[Tensor[Float, 3]]``) and Python's ``float``, ``int`` and ``bool`` (scalars).

``annotation_to_type`` turns one into a Relay type; one function's symbolic dimensions share
a ``symbols`` table, so the same name is the same shape variable. ``check_argument`` checks
(and converts) a value passed for a parameter at call time. Importing this module also
teaches typeguard the annotations, so ``@typeguard.typechecked`` plain Python functions check
them too.

>>> n = {}
>>> annotation_to_type(Tensor[Float, ("n", 128)], symbols=n)
Tensor[(n, 128), float32]
>>> check_argument("x", annotation_to_type(Float, symbols={}), 2, {})
array(2., dtype=float32)
"""
from __future__ import annotations

import operator
import typing
import warnings
from dataclasses import dataclass, field
from typing import final

import numpy as np
import typeguard

from relaydsl.backend.interpreter import Closure, ConstructorValue
from relaydsl.ir.adt import Constructor, TypeData
from relaydsl.ir.expr import Op
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import (
    Any, AnyDim, FuncType, Kind, RefType, TensorType, TupleType, Type, TypeCall, TypeVar,
    type_to_str,
)
from relaydsl.prelude import prelude_definitions

__all__ = [
    "Any", "AdtAnnotation", "Bool", "DTypeMarker", "Float", "Float16", "Float32", "Float64",
    "Fn", "Int", "Int8", "Int16", "Int32", "Int64", "List", "Option", "Tensor", "Tree", "UInt8",
    "annotation_to_type", "check_argument",
]

_FORMS = ("write Tensor[Float, (2, 3)], Float, tuple[...], relay.Fn[[...], R] or an ADT")
_SHAPE_FORMS = (
    "write Tensor[Float, (2, 3)], Tensor[Float, 10] (1-D), Tensor[Float, ()] (a scalar), "
    "Tensor[Float, (\"n\", 128)] (a symbolic dimension n) or Tensor[Float, (relay.Any, 3)] "
    "(a size known only at run time)"
)


# ---- dtype markers --------------------------------------------------------------------------

@final
@dataclass(frozen=True, slots=True)
class DTypeMarker:
    """A dtype as users write it: ``Float`` alone is a float32 scalar; ``Tensor[Float, ...]``.

    Two markers of the same dtype are equal (``Float == Float32``); the repr is the name
    written.

    >>> Float, Float.dtype, Float == Float32
    (Float, 'float32', True)
    """

    name: str = field(compare=False)
    dtype: str

    def __repr__(self) -> str:
        return self.name


Float = DTypeMarker("Float", "float32")
Int = DTypeMarker("Int", "int32")
Float16 = DTypeMarker("Float16", "float16")
Float32 = DTypeMarker("Float32", "float32")
Float64 = DTypeMarker("Float64", "float64")
Int8 = DTypeMarker("Int8", "int8")
Int16 = DTypeMarker("Int16", "int16")
Int32 = DTypeMarker("Int32", "int32")
Int64 = DTypeMarker("Int64", "int64")
UInt8 = DTypeMarker("UInt8", "uint8")
Bool = DTypeMarker("Bool", "bool")

_PYTHON_SCALARS: dict[type, DTypeMarker] = {float: Float, int: Int, bool: Bool}
_MARKER_NAMES = "Float, Int, Float16, Float32, Float64, Int8, Int16, Int32, Int64, UInt8, Bool"


# ---- Tensor[dtype, shape] -------------------------------------------------------------------

AnnotationDim = int | str | AnyDim


def _annotation_dim(dim: object, written: object) -> AnnotationDim:
    if isinstance(dim, AnyDim):
        return dim
    if isinstance(dim, str):
        if not dim.isidentifier():
            raise TypeError(f"symbolic dimension {dim!r} in {written} is not a valid name; "
                            f"{_SHAPE_FORMS}")
        return dim
    if not isinstance(dim, bool) and not isinstance(dim, float):
        try:
            size = operator.index(dim)  # ints and NumPy integers
        except TypeError:
            pass
        else:
            if size < 0:
                raise TypeError(f"negative dimension {size} in {written}; {_SHAPE_FORMS}")
            return size
    hint = " (use relay.Any, not typing.Any)" if dim is typing.Any else ""
    raise TypeError(f"dimension {dim!r} in {written} must be an int, a name or relay.Any"
                    f"{hint}; {_SHAPE_FORMS}")


@final
@dataclass(frozen=True, slots=True)
class Tensor:
    """``Tensor[dtype, shape]``: the annotation of a tensor parameter or result.

    Immutable and hashable. A shape is a tuple of ints, names (symbolic dimensions, shared
    by the whole signature) and ``Any``; an int or a name alone means 1-D; ``()`` a scalar.

    >>> Tensor[Float, (2, 3)]
    Tensor[Float, (2, 3)]
    >>> Tensor[Int, "n"].shape, Tensor[Float, ()].shape
    (('n',), ())
    >>> Tensor[Float]
    Traceback (most recent call last):
    ...
    TypeError: Tensor takes a dtype and a shape, got Tensor[Float]; write Tensor[Float, (2, 3)], \
Tensor[Float, 10] (1-D), Tensor[Float, ()] (a scalar), Tensor[Float, ("n", 128)] (a symbolic \
dimension n) or Tensor[Float, (relay.Any, 3)] (a size known only at run time)
    """

    dtype: DTypeMarker
    shape: tuple[AnnotationDim, ...]

    def __post_init__(self) -> None:
        written = f"Tensor[{self.dtype!r}, {self.shape!r}]"
        if not isinstance(self.dtype, DTypeMarker):
            raise TypeError(f"the dtype of {written} must be one of {_MARKER_NAMES}; "
                            f"{_SHAPE_FORMS}")
        shape = self.shape if isinstance(self.shape, tuple) else (self.shape,)
        object.__setattr__(self, "shape", tuple(_annotation_dim(d, written) for d in shape))

    def __class_getitem__(cls, item: object) -> Tensor:
        if not isinstance(item, tuple) or len(item) != 2:
            inner = ", ".join(map(repr, item)) if isinstance(item, tuple) else repr(item)
            raise TypeError(f"Tensor takes a dtype and a shape, got Tensor[{inner}]; "
                            f"{_SHAPE_FORMS}")
        return cls(*item)

    def __repr__(self) -> str:
        dims = ", ".join(repr(d) for d in self.shape)
        return f"Tensor[{self.dtype!r}, ({dims}{',' if len(self.shape) == 1 else ''})]"


# ---- Fn[[T1, T2], R] ------------------------------------------------------------------------

@final
@dataclass(frozen=True, slots=True)
class Fn:
    """``Fn[[T1, T2], R]``: the annotation of a function-typed parameter.

    >>> Fn[[Float, Tensor[Float, 3]], Float]
    Fn[[Float, Tensor[Float, (3,)]], Float]
    >>> annotation_to_type(Fn[[Float], Int], symbols={})
    fn(Tensor[(), float32]) -> Tensor[(), int32]
    """

    params: tuple[object, ...]
    ret: object

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        for ann in (*self.params, self.ret):
            annotation_to_type(ann, symbols={})  # fail here, where the annotation is written

    def __class_getitem__(cls, item: object) -> Fn:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (list, tuple))):
            raise TypeError(f"Fn takes a list of parameter annotations and a result annotation, "
                            f"got Fn[{item!r}]; write relay.Fn[[Float, Tensor[Float, 3]], Float] "
                            f"or relay.Fn[[], Float]")
        return cls(tuple(item[0]), item[1])

    def __repr__(self) -> str:
        params = ", ".join(map(_annotation_repr, self.params))
        return f"Fn[[{params}], {_annotation_repr(self.ret)}]"


@final
@dataclass(frozen=True, slots=True)
class Ref:
    """``Ref[T]``: the annotation of a reference (a mutable cell holding a T).

    >>> annotation_to_type(Ref[Tensor[Float, 3]], symbols={})
    Ref[Tensor[(3,), float32]]
    """

    value: object

    def __post_init__(self) -> None:
        annotation_to_type(self.value, symbols={})  # fail here, where it is written

    def __class_getitem__(cls, item: object) -> Ref:
        return cls(item)

    def __repr__(self) -> str:
        return f"Ref[{_annotation_repr(self.value)}]"


def _annotation_repr(ann: object) -> str:
    if isinstance(ann, type):
        return ann.__name__
    return repr(ann)


# ---- algebraic data types -------------------------------------------------------------------

@final
@dataclass(frozen=True, slots=True)
class AdtAnnotation:
    """An algebraic data type as an annotation, applied to its type arguments by indexing.

    >>> List[Tensor[Float, 3]]
    List[Tensor[Float, (3,)]]
    >>> annotation_to_type(List[Float], symbols={})
    List[Tensor[(), float32]]
    """

    type_data: TypeData
    args: tuple[object, ...] | None = None  # None: not applied yet

    def __post_init__(self) -> None:
        if not isinstance(self.type_data, TypeData):
            raise TypeError(f"AdtAnnotation needs a TypeData, got {self.type_data!r:.80}")
        if self.args is None:
            return
        object.__setattr__(self, "args", tuple(self.args))
        arity = len(self.type_data.type_vars)
        if len(self.args) != arity:
            raise TypeError(f"{self.name} takes {arity} type argument(s), got {len(self.args)}: "
                            f"{self!r}")
        for ann in self.args:
            annotation_to_type(ann, symbols={})

    @property
    def name(self) -> str:
        return self.type_data.header.name

    def __getitem__(self, item: object) -> AdtAnnotation:
        if self.args is not None:
            raise TypeError(f"{self!r} is already applied to its type arguments")
        return AdtAnnotation(self.type_data, item if isinstance(item, tuple) else (item,))

    def __repr__(self) -> str:
        if self.args is None:
            return self.name
        return f"{self.name}[{', '.join(map(_annotation_repr, self.args))}]"


def _prelude_adt(name: str) -> AdtAnnotation:
    types, _ = prelude_definitions()
    return AdtAnnotation(next(td for td in types if td.header.name == name))


List = _prelude_adt("List")
Option = _prelude_adt("Option")
Tree = _prelude_adt("Tree")


# ---- annotation -> Relay type ---------------------------------------------------------------

def annotation_to_type(ann: object, *, symbols: dict[str, TypeVar],
                       mod: IRModule | None = None) -> Type:
    """The Relay type an annotation stands for.

    Symbolic dimensions are looked up in (or added to) `symbols`, so one signature's ``"n"``
    is one ``TypeVar("n", Kind.Shape)``. A Relay ``Type`` is returned as it is, and ``None``
    (a ``-> None`` result) is the empty tuple. When `mod` is given, an ADT used here is
    added to it unless it is there already.

    >>> symbols = {}
    >>> x = annotation_to_type(Tensor[Float, ("n", 128)], symbols=symbols)
    >>> y = annotation_to_type(tuple[Tensor[Int, "n"], float], symbols=symbols)
    >>> x.shape[0] is y.fields[0].shape[0] is symbols["n"]
    True
    >>> y
    (Tensor[(n,), int32], Tensor[(), float32])
    >>> annotation_to_type(list[float], symbols={})
    Traceback (most recent call last):
    ...
    TypeError: unsupported annotation list[float] (a Python list; use relay.List[...]); write \
Tensor[Float, (2, 3)], Float, tuple[...], relay.Fn[[...], R] or an ADT
    """
    def sub(a: object) -> Type:
        return annotation_to_type(a, symbols=symbols, mod=mod)

    if isinstance(ann, Type):
        return ann
    if isinstance(ann, DTypeMarker):
        return TensorType((), ann.dtype)
    if isinstance(ann, type) and ann in _PYTHON_SCALARS:
        return TensorType((), _PYTHON_SCALARS[ann].dtype)
    if ann is None or ann is type(None):
        return TupleType(())
    if isinstance(ann, Tensor):
        return TensorType(tuple(_dim_type(d, symbols) for d in ann.shape), ann.dtype.dtype)
    if isinstance(ann, Fn):
        return FuncType(tuple(sub(p) for p in ann.params), sub(ann.ret))
    if isinstance(ann, Ref):
        return RefType(sub(ann.value))
    adt = _as_adt(ann)
    if adt is not None:
        return _adt_type(adt, sub, mod)
    if typing.get_origin(ann) is tuple and ann is not typing.Tuple:  # noqa: UP006
        args = typing.get_args(ann)
        if args == ((),):  # typing.Tuple[()] on some Python versions
            args = ()
        if Ellipsis in args:
            raise TypeError(f"unsupported annotation {ann!r} (a tuple of any length); "
                            f"give each field a type: tuple[Float, Float]")
        return TupleType(tuple(sub(a) for a in args))
    raise TypeError(f"unsupported annotation {_annotation_repr(ann)}{_hint_for(ann)}; {_FORMS}")


def _dim_type(dim: AnnotationDim, symbols: dict[str, TypeVar]) -> int | TypeVar | AnyDim:
    if isinstance(dim, str):
        if dim not in symbols:
            symbols[dim] = TypeVar(dim, Kind.Shape)
        return symbols[dim]
    return dim


def _as_adt(ann: object) -> AdtAnnotation | None:
    """An AdtAnnotation for `ann` if it names an ADT: ours, or any object with `type_data`."""
    if isinstance(ann, AdtAnnotation):
        return ann
    origin = typing.get_origin(ann)
    td = getattr(origin, "type_data", None)
    if isinstance(td, TypeData):  # a user ADT class subscripted as a generic: MyTree[Float]
        return AdtAnnotation(td, typing.get_args(ann))
    td = getattr(ann, "type_data", None)
    if isinstance(td, TypeData):
        return AdtAnnotation(td)
    return None


def _adt_type(adt: AdtAnnotation, sub: typing.Callable[[object], Type],
              mod: IRModule | None) -> TypeCall:
    td = adt.type_data
    if adt.args is None and td.type_vars:
        example = f"{adt.name}[{', '.join('Tensor[Float, 3]' for _ in td.type_vars)}]"
        raise TypeError(f"{adt.name} takes {len(td.type_vars)} type argument(s); write "
                        f"{example}")
    if mod is not None and td.header not in mod.type_definitions:
        if adt.name in {h.name for h in mod.type_definitions}:
            raise TypeError(f"annotation {adt!r} names a type {adt.name} other than the one "
                            f"defined in the module")
        mod.add_type(td)
    return TypeCall(td.header, tuple(sub(a) for a in adt.args or ()))


def _hint_for(ann: object) -> str:
    if ann is Tensor:
        return " (Tensor needs a dtype and a shape: Tensor[Float, (2, 3)])"
    if ann is Fn:
        return " (Fn needs parameter and result types: relay.Fn[[Float], Float])"
    if ann is tuple or ann is typing.Tuple:  # noqa: UP006
        return " (give each field a type: tuple[Float, Float])"
    if ann is list or typing.get_origin(ann) is list:
        return " (a Python list; use relay.List[...])"
    if ann is np.ndarray:
        return " (a NumPy array; give dtype and shape: Tensor[Float, (2, 3)])"
    if isinstance(ann, str):
        return " (a string; evaluate postponed annotations first)"
    return ""


# ---- call-time checking ---------------------------------------------------------------------

class _Bound(int):
    """A symbolic dimension's size, remembering which value and axis fixed it."""

    who: str
    axis: int
    token: object

    def __new__(cls, size: int, who: str, axis: int, token: object) -> _Bound:
        self = super().__new__(cls, size)
        self.who, self.axis, self.token = who, axis, token
        return self


class _Mismatch(Exception):
    """A value does not fit `expected`; `where` is the tuple-field path inside the argument."""

    def __init__(self, expected: Type, value: object, where: str, hint: str = ""):
        super().__init__(hint)
        self.expected, self.value, self.where, self.hint = expected, value, where, hint


@dataclass(slots=True)
class _Check:
    """One argument's check: who it is (for messages) and the shared bindings."""

    who: str              # "argument 'x'"
    name: str             # "x", used in cast hints
    bindings: dict[TypeVar, typing.Any]
    # the value goes into a Relay program (check_argument), not a typeguard check of Python
    # code: lists and NumPy's int64 convert, and a function must be one a program can call
    for_program: bool
    token: object = field(default_factory=object)


def check_argument(param_name: str, expected: Type, value: object,
                   bindings: dict[TypeVar, typing.Any]) -> object:
    """`value` checked against parameter type `expected`, converted for a Relay call.

    Arrays must have the exact dtype, the rank, every static dimension, and symbolic
    dimensions that agree with `bindings` (a table the caller shares across one call's
    arguments; new sizes are added to it). ``Any`` dimensions take any size. Python numbers
    become 0-d arrays when the kind allows (bool only for bool; int for int and float; float
    for float); lists go through ``np.asarray`` under the same rules. Tuples are checked field
    by field. Function and ADT values pass unchanged after a basic kind check. Arrays come
    back C-contiguous, copied only when needed.

    >>> t = annotation_to_type(Tensor[Float, ("n", 2)], symbols={})
    >>> bindings = {}
    >>> check_argument("x", t, [[1, 2], [3, 4]], bindings)
    array([[1., 2.],
           [3., 4.]], dtype=float32)
    >>> list(bindings.values())
    [2]
    >>> check_argument("y", t, np.zeros((2, 2), np.int64), bindings)
    Traceback (most recent call last):
    ...
    TypeError: argument 'y': expected Tensor[(n, 2), float32], got an int64 array of shape \
(2, 2); cast it with y.astype(np.float32)
    """
    check = _Check(f"argument {param_name!r}", param_name, bindings, for_program=True)
    try:
        return _conform(expected, value, check, "")
    except _Mismatch as m:
        raise TypeError(f"{check.who}{m.where}: expected {type_to_str(m.expected)}, "
                        f"got {_describe(m.value)}{m.hint}") from None


def _conform(expected: Type, value: object, check: _Check, where: str) -> object:
    if isinstance(expected, TensorType):
        return _conform_tensor(expected, value, check, where)
    if isinstance(expected, TupleType):
        if not isinstance(value, tuple) or len(value) != len(expected.fields):
            hint = "; pass a tuple" if isinstance(value, list) else ""
            raise _Mismatch(expected, value, where, hint)
        return tuple(_conform(t, v, check, f"{where}[{i}]")
                     for i, (t, v) in enumerate(zip(expected.fields, value)))
    if check.for_program and isinstance(expected, TypeCall) and isinstance(value, list) and \
            expected.func is prelude_definitions()[0][0].header:
        # a Python list for a relay.List: Cons(v0, Cons(v1, ... Nil))
        cons, nil = prelude_definitions()[0][0].constructors
        items = [_conform(expected.args[0], v, check, f"{where}[{i}]")
                 for i, v in enumerate(value)]
        out = ConstructorValue(nil)
        for item in reversed(items):
            out = ConstructorValue(cons, (item, out))
        return out
    if check.for_program and isinstance(expected, FuncType) and not _is_data(value):
        closure = getattr(value, "relay_closure", None)  # a function a program returned
        if closure is not None:
            return closure
        if not isinstance(value, (Closure, Op, Constructor)):
            raise _Mismatch(expected, value, where, "; pass a @relay function or a relay "
                                                    "operator (Python code cannot run inside "
                                                    "a program)")
        return value
    if check.for_program and isinstance(expected, TypeVar) and expected.kind is Kind.Type:
        return python_data(value)  # a polymorphic field: a number takes its default dtype
    if isinstance(expected, (FuncType, TypeCall, RefType)) and _is_data(value):
        raise _Mismatch(expected, value, where)
    if isinstance(expected, TypeCall):
        ctor = getattr(value, "constructor", None)
        if isinstance(ctor, Constructor) and ctor.belong_to is not expected.func:
            raise _Mismatch(expected, value, where)
    return value


def python_data(value: object) -> object:
    """A value for a place of unknown type: Python numbers (and lists of them) as arrays of
    the default dtypes (bool, int32, float32, as in decorated code); anything else as is."""
    if type(value) in (bool, int, float) or (isinstance(value, list) and value
                                             and _all_python_numbers(value)):
        arr = np.asarray(value)
        return arr.astype(_DEFAULT_DTYPES[arr.dtype.kind])
    if isinstance(value, np.generic):  # a NumPy scalar keeps its dtype
        return np.asarray(value)
    return value


def _is_data(value: object) -> bool:
    """Whether `value` is plainly a tensor or a tuple, so it cannot be a function or an ADT."""
    return isinstance(value, (np.ndarray, np.generic, bool, int, float, tuple))


def _conform_tensor(expected: TensorType, value: object, check: _Check,
                    where: str) -> np.ndarray:
    dtype = expected.dtype
    if isinstance(dtype, TypeVar):  # a dtype variable: bind it like a dimension
        arr = _as_array(value, None, expected, check, where)
        bound = check.bindings.setdefault(dtype, arr.dtype.name)
        if bound != arr.dtype.name:
            raise _Mismatch(expected, value, where, f"; {dtype.name} is {bound} elsewhere")
    else:
        arr = _as_array(value, np.dtype(dtype), expected, check, where)
    if arr.ndim != len(expected.shape):
        raise _Mismatch(expected, value, where)
    for dim, size in zip(expected.shape, arr.shape):
        if isinstance(dim, int) and dim != size:
            raise _Mismatch(expected, value, where)
    for axis, (dim, size) in enumerate(zip(expected.shape, arr.shape)):
        if isinstance(dim, TypeVar):
            bound = check.bindings.get(dim)
            if bound is None:
                check.bindings[dim] = _Bound(size, check.who + where, axis, check.token)
            elif bound != size:
                raise _Mismatch(expected, value, where,
                                _inconsistent(dim, size, axis, bound, check))
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def _inconsistent(dim: TypeVar, size: int, axis: int, bound: object, check: _Check) -> str:
    here = f"; {dim.name} is {size} at axis {axis}"
    if not isinstance(bound, _Bound):
        return f"{here}, but {dim.name} = {int(bound)} was fixed earlier"  # type: ignore[arg-type]
    if bound.token is check.token and bound.who == check.who:
        return f"{here}, but {bound} at axis {bound.axis}"
    return f"{here}, but {bound.who} (axis {bound.axis}) has {dim.name} = {int(bound)}"


def _as_array(value: object, dtype: np.dtype | None, expected: TensorType, check: _Check,
              where: str) -> np.ndarray:
    """`value` as an array of `dtype` (any dtype when None), or a _Mismatch."""
    if type(value) in (bool, int, float) or (check.for_program and isinstance(value, list)):
        arr = _from_python(value, dtype, expected, where)
    elif isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__array__"):
        arr = np.asarray(value)
        if arr.dtype.kind in "biuf" and not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if check.for_program and dtype is not None and arr.dtype != dtype and \
                arr.dtype.kind in "iu" and dtype.kind in "iu":
            # NumPy's default int64 for an Int (int32) parameter: taken when the values fit
            return _narrowed(arr, dtype, expected, value, where)
        if check.for_program and dtype is not None and arr.dtype != dtype and \
                arr.dtype.kind == "f" and dtype.kind == "f":
            # NumPy's default float64 for a Float (float32) parameter: rounded, as JAX does
            _warn_once_rounding(arr.dtype, dtype)
            with np.errstate(over="ignore"):  # beyond float32's range is inf, as in IEEE
                return arr.astype(dtype)
        if dtype is not None and arr.dtype != dtype:
            name = check.name + "".join(f"[{i}]" for i in _indices(where)) if check.name else ""
            hint = f"; cast it with {name}.astype(np.{_numpy_name(dtype)})"
            raise _Mismatch(expected, value, where, hint)
    else:
        hint = "; pass a NumPy array" if isinstance(value, list) else ""
        raise _Mismatch(expected, value, where, hint)
    return arr


_ROUNDING_WARNED: set[tuple[str, str]] = set()


def _warn_once_rounding(given: np.dtype, wanted: np.dtype) -> None:
    """The first time a program is given floats of another width, say that they are
    converted (once per pair of dtypes, as JAX warns of x64 once)."""
    key = (given.name, wanted.name)
    if key not in _ROUNDING_WARNED:
        _ROUNDING_WARNED.add(key)
        warnings.warn(f"{given.name} arguments are converted to the {wanted.name} parameters "
                      f"they are passed for (this warning is shown once); pass "
                      f"{wanted.name} arrays to avoid the conversion", UserWarning,
                      stacklevel=4)


def _narrowed(arr: np.ndarray, dtype: np.dtype, expected: TensorType, value: object,
              where: str) -> np.ndarray:
    """An integer array as another integer dtype, or a _Mismatch naming the value that does
    not fit."""
    bad = _out_of_range(arr, dtype)
    if bad is not None:
        raise _Mismatch(expected, value, where, f"; {bad} is out of range for {dtype.name}")
    return arr.astype(dtype)


def _out_of_range(arr: np.ndarray, dtype: np.dtype) -> int | None:
    """A value of the integer array `arr` that integer `dtype` cannot hold, or None."""
    if not arr.size:
        return None
    info = np.iinfo(dtype)
    low, high = arr.min(), arr.max()
    return int(low) if low < info.min else int(high) if high > info.max else None


def _indices(where: str) -> list[str]:
    return [part for part in where.replace("]", "").split("[") if part]


def _numpy_name(dtype: np.dtype) -> str:
    return "bool_" if dtype.kind == "b" else dtype.name


_KIND_CASTS = {"b": "b", "i": "iuf", "f": "f"}  # Python value kind -> dtype kinds it may become
# the dtype a Python bool, int or float takes where nothing else decides (as in decorated code)
_DEFAULT_DTYPES = {"b": "bool", "i": "int32", "f": "float32"}


def _from_python(value: object, dtype: np.dtype | None, expected: TensorType,
                 where: str) -> np.ndarray:
    """Python numbers (or nested lists of them) as an array of `dtype`, when the kind allows."""
    try:
        arr = np.asarray(value)
    except ValueError:
        raise _Mismatch(expected, value, where, "; the list is ragged") from None
    if isinstance(value, list) and not _all_python_numbers(value):
        if dtype is not None and arr.dtype != dtype:  # a list of arrays: dtypes must agree
            raise _Mismatch(expected, value, where)
        return arr
    if arr.dtype.kind not in _KIND_CASTS:
        raise _Mismatch(expected, value, where)
    if dtype is None:
        dtype = np.dtype(_DEFAULT_DTYPES[arr.dtype.kind])
    if arr.size and dtype.kind not in _KIND_CASTS[arr.dtype.kind]:
        what = {"b": "a bool", "i": "an int", "f": "a float"}[arr.dtype.kind]
        raise _Mismatch(expected, value, where, f"; {what} cannot become {dtype.name}")
    if dtype.kind in "iu" and _out_of_range(arr, dtype) is not None:
        raise _Mismatch(expected, value, where, f"; out of range for {dtype.name}")
    with np.errstate(over="ignore"):
        out = arr.astype(dtype)
    if dtype.kind == "f" and np.any(np.isinf(out) & np.isfinite(arr)):
        raise _Mismatch(expected, value, where, f"; out of range for {dtype.name}")
    return out


def _all_python_numbers(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_all_python_numbers(v) for v in value)
    return type(value) in (bool, int, float)


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{_article(value.dtype.name)} {value.dtype.name} array of shape {value.shape}"
    if isinstance(value, np.generic):
        return f"a NumPy {value.dtype.name} scalar"
    if type(value) in (bool, int, float):
        return f"a Python {type(value).__name__} ({value!r:.40})"
    if isinstance(value, tuple):
        return f"a tuple of length {len(value)}"
    if isinstance(value, list):
        try:
            arr = np.asarray(value)
        except ValueError:
            return "a list"
        return f"a list of shape {arr.shape}"
    ctor = getattr(value, "constructor", None)
    if isinstance(ctor, Constructor):
        adt = ctor.belong_to.name
        return f"{_article(adt)} {adt} value ({ctor.name})"
    if hasattr(value, "__array__"):
        arr = np.asarray(value)
        return f"a {type(value).__name__} of dtype {arr.dtype.name} and shape {arr.shape}"
    return f"{_article(type(value).__name__)} {type(value).__name__}"


def _article(word: str) -> str:
    return "an" if word[:1].lower() in ("a", "e", "i", "o") else "a"  # "a uint8"


# ---- typeguard ------------------------------------------------------------------------------

_TYPEGUARD_STATE = "__relaydsl_symbolic_dims__"


def _typeguard_state(memo: typeguard.TypeCheckMemo) -> tuple[dict[str, TypeVar], dict]:
    """Symbol and binding tables shared by one ``@typechecked`` call's arguments and result.

    The instrumented function makes one memo per call, with the global configuration and its
    own ``locals()``; the tables live there under a reserved key. Any other memo (from
    ``check_type``) gets fresh tables: dimensions then agree within one value only.
    """
    per_call = (memo.config is typeguard.config and isinstance(memo.locals, dict)
                and memo.locals is not memo.globals)
    if not per_call:
        return {}, {}
    state = memo.locals.get(_TYPEGUARD_STATE)
    if state is None:
        state = memo.locals[_TYPEGUARD_STATE] = ({}, {})
    return state


def _typeguard_check(value: object, origin_type: object, args: tuple,
                     memo: typeguard.TypeCheckMemo) -> None:
    if isinstance(origin_type, Fn):
        if not callable(value):
            raise typeguard.TypeCheckError(f"is not callable, so not a {origin_type!r}")
        return
    symbols, bindings = _typeguard_state(memo)
    expected = annotation_to_type(origin_type, symbols=symbols)
    check = _Check("an earlier argument", "", bindings, for_program=False)
    try:
        _conform(expected, value, check, "")
    except _Mismatch as m:
        raise typeguard.TypeCheckError(
            f"is not compatible with {origin_type!r}: got {_describe(m.value)}{m.hint}"
        ) from None


def _typeguard_lookup(origin_type: object, args: tuple, extras: tuple):
    """typeguard's checker lookup: ours for Tensor, dtype markers, Fn and ADT annotations."""
    if isinstance(origin_type, (Tensor, DTypeMarker, Fn, AdtAnnotation)):
        return _typeguard_check
    return None


# The paths under which users import Tensor. typeguard's instrumenter reads a string inside an
# annotation as a forward reference and rewrites it into a name ("n" -> n, a NameError at call
# time); it leaves typing.Literal[...] alone, and so it must leave Tensor[...] alone.
_TENSOR_PATHS = (
    "relaydsl.Tensor", "relaydsl.relay.Tensor", "relaydsl.frontend.Tensor",
    "relaydsl.frontend.annotations.Tensor",
)


def _keep_tensor_strings_in_typeguard() -> None:
    """Add Tensor's import paths to typeguard's Literal-like names (a private tuple), once."""
    transformer = getattr(typeguard, "_transformer", None)
    names = getattr(transformer, "literal_names", None)
    if isinstance(names, tuple):
        new = tuple(p for p in _TENSOR_PATHS if p not in names)
        transformer.literal_names = names + new  # type: ignore[union-attr]


def _register_typeguard_checker() -> None:
    """Put `_typeguard_lookup` first in typeguard's lookups, once (also across reloads)."""
    lookups = typeguard.checker_lookup_functions
    def ours(f: object) -> bool:
        return (getattr(f, "__module__", None) == __name__
                and getattr(f, "__name__", None) == "_typeguard_lookup")

    lookups[:] = [f for f in lookups if not ours(f)]
    lookups.insert(0, _typeguard_lookup)


_register_typeguard_checker()
_keep_tensor_strings_in_typeguard()
