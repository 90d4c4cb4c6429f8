"""Values across the boundary of native code: Python values to native objects and back.

Tensors are NumPy arrays: passed by their data pointer (C-contiguous, aligned, of the right
dtype, or copied so), or by a header ``[data, dims...]`` when the program's tensors are
boxed (some shape is known only at run time). Tuples and data values become int64 buffers
of objects pointing at each other; results are decoded iteratively into NumPy arrays,
tuples and ``ConstructorValue``s (and functions, by a callback of native/program.py's).
"""
from __future__ import annotations

import ctypes
import weakref
from typing import Any as AnyValue, Callable

import numpy as np

from relaydsl.backend.interpreter import ConstructorValue, Value
from relaydsl.backend.llvm.kernel import address
from relaydsl.backend.llvm.native.abi import array_at
from relaydsl.ir.adt import Constructor
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type, TypeCall


def contiguous(a: np.ndarray) -> np.ndarray:
    """`a` itself when C-contiguous and aligned, else a copy (0-d arrays stay 0-d)."""
    if a.flags.c_contiguous and a.flags.aligned:
        return a
    return np.require(a, requirements=("C", "A"))


class TensorLayout:
    """How a tensor type crosses: its shape (None where known only at run time), dtype and
    size (when static)."""

    def __init__(self, t: TensorType):
        self.shape = tuple(d if isinstance(d, int) else None for d in t.shape)
        self.dtype = np.dtype(str(t.dtype))
        self.static = None not in self.shape
        self.count = int(np.prod(self.shape, dtype=np.int64)) if self.static else 0
        self.nbytes = self.count * self.dtype.itemsize
        self.text = str(t)

    def fits(self, a: np.ndarray) -> bool:
        if a.dtype != self.dtype:
            return False
        if self.static:
            return a.shape == self.shape
        return len(a.shape) == len(self.shape) and \
            all(d is None or d == n for d, n in zip(self.shape, a.shape))


class Codec:
    """Python values to native objects and back, for the types of one program.

    A data value or tuple argument becomes one int64 buffer of objects pointing at each
    other and at the tensors where they are (no copies of C-contiguous arrays of the right
    dtype). The buffer of a data value is remembered while the value lives (training
    passes the same trees every epoch), unless making it copied a tensor.
    """

    def __init__(self, mod: IRModule, boxed: bool):
        self.mod, self.boxed = mod, boxed
        self._fields: dict[tuple[Constructor, TypeCall], list[Type]] = {}
        self._tensors: dict[int, tuple[TensorType, TensorLayout]] = {}
        self._cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def tensor_type(self, t: TensorType) -> TensorLayout:
        # by identity (the program holds its types): hashing a type costs ~1 us a call
        found = self._tensors.get(id(t))
        if found is None or found[0] is not t:
            found = self._tensors[id(t)] = (t, TensorLayout(t))
        return found[1]

    def fields(self, c: Constructor, t: TypeCall) -> list[Type]:
        """The field types of constructor `c` in instance `t` (memoised)."""
        key = (c, t)
        found = self._fields.get(key)
        if found is None:
            found = self._fields[key] = self.mod.field_types(c, t)
        return found

    def encode(self, value: AnyValue, t: Type, keep: list) -> int:
        """The native value of argument `value`: an address; what must stay alive while
        native code runs goes into `keep`."""
        if isinstance(t, TensorType):
            a = self.array(value, self.tensor_type(t))
            keep.append(a)
            if not self.boxed:
                return address(a)
            header = np.array([address(a), *a.shape], np.int64)
            keep.append(header)
            return address(header)
        cached = self._cache.get(value) if isinstance(value, ConstructorValue) else None
        if cached is None:
            arrays: list[np.ndarray] = []
            buffer, copied = self._objects(value, t, arrays)
            cached = (buffer, arrays)
            if isinstance(value, ConstructorValue) and not copied:
                self._cache[value] = cached
        keep.append(cached)
        return address(cached[0])

    def array(self, value: AnyValue, t: TensorLayout) -> np.ndarray:
        a = value if isinstance(value, np.ndarray) else np.asarray(value, t.dtype)
        if not t.fits(a):
            raise TypeError(f"expected a tensor of {t.text}, got {a.dtype}{list(a.shape)}")
        return contiguous(a)

    def _objects(self, value: AnyValue, t: Type, arrays: list[np.ndarray]
                 ) -> tuple[np.ndarray, bool]:
        """The objects of `value` in one buffer (the root first), and whether a tensor
        had to be copied."""
        words: list[int] = []
        relative: list[int] = []  # words holding an offset into the buffer
        copied = False
        stack: list[tuple[AnyValue, Type, int]] = [(value, t, -1)]
        while stack:
            value, t, at = stack.pop()
            start = len(words)
            if isinstance(t, TupleType):
                if not isinstance(value, tuple) or len(value) != len(t.fields):
                    raise TypeError(f"expected a tuple of {len(t.fields)} value(s), got "
                                    f"{value!r:.60}")
                fields, first = zip(value, t.fields), start
            elif isinstance(t, TypeCall):
                if not isinstance(value, ConstructorValue) or \
                        value.constructor.belong_to is not t.func:
                    raise TypeError(f"expected a value of {t}, got {value!r:.60}")
                c = value.constructor
                words.append(c.tag)
                fields, first = zip(value.fields, self.fields(c, t)), start + 1
            else:
                raise TypeError(f"a value of type {t} cannot be passed to native code")
            fields = list(fields)
            words.extend([0] * len(fields))
            if at >= 0:
                words[at] = 8 * start
                relative.append(at)
            for i, (v, ft) in enumerate(fields):
                if isinstance(ft, TensorType):
                    a = self.array(v, self.tensor_type(ft))
                    copied = copied or a is not v
                    arrays.append(a)
                    if self.boxed:  # the header after the objects so far
                        words[first + i] = 8 * len(words)
                        relative.append(first + i)
                        words.extend([address(a), *a.shape])
                    else:
                        words[first + i] = address(a)
                else:
                    stack.append((v, ft, first + i))
        buffer = np.array(words, np.int64)
        if relative:
            buffer[relative] += address(buffer)
        return buffer, copied

    def decode(self, pointer: int, t: Type,
               closure: Callable[[int, FuncType], Value] | None = None,
               in_place: dict[int, np.ndarray] | None = None) -> Value:
        """The native value at `pointer`, of type `t`, as a Python value (tensors copied,
        except those native code wrote into the arrays of `in_place`, by address; a
        function, by `closure` of its address and type).

        Iterative: a result may be a list of a hundred thousand cells."""
        root: list = [None]
        objects: list[tuple[list, int, Constructor | None, list]] = []  # parents first
        stack: list[tuple[int, Type, list, int]] = [(pointer, t, root, 0)]
        while stack:
            pointer, t, parent, index = stack.pop()
            if isinstance(t, TensorType):
                written = in_place.pop(pointer, None) if in_place else None
                parent[index] = written if written is not None else \
                    self.tensor(pointer, self.tensor_type(t))
                continue
            if isinstance(t, FuncType):
                assert closure is not None
                parent[index] = closure(pointer, t)
                continue
            words = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_int64))
            if isinstance(t, TupleType):
                c, types, first = None, t.fields, 0
            else:
                assert isinstance(t, TypeCall)
                c = self.mod.type_definitions[t.func].constructors[words[0]]
                types, first = self.fields(c, t), 1
            fields: list = [None] * len(types)
            objects.append((parent, index, c, fields))
            stack.extend((words[first + i], f, fields, i) for i, f in enumerate(types))
        for parent, index, c, fields in reversed(objects):  # children before parents
            parent[index] = tuple(fields) if c is None else ConstructorValue(c, tuple(fields))
        return root[0]

    def tensor(self, pointer: int, t: TensorLayout) -> np.ndarray:
        """A copy of the tensor at `pointer`: its data, or its header when boxed."""
        shape = t.shape
        if self.boxed:
            header = (ctypes.c_int64 * (1 + len(shape))).from_address(pointer)
            pointer, shape = header[0], tuple(header[1:])
        return array_at(pointer, t.dtype, shape).copy()
