"""Kernels generic in every symbolic dimension: one compile serves every size.

A primitive function whose inputs have dimensions known only at run time (the ``n`` and
``m`` of ``Tensor[Float, ("n", "m")]``, a ``relay.Any``), and that chunked.py cannot run
on chunks of rows (a mean over a symbolic axis, whose 1/n no chunk knows; a symbolic
sequence length or feature dimension), is compiled once with those sizes as *run-time
scalars*: each distinct size is a variable whose value the kernel reads from a buffer
of int64 sizes, its loops bounded by those values (LLVM's loop vectoriser adds the
scalar remainder), its strides and every constant that is a size (``1 / n`` of a mean,
the ``n`` of ``shape_of``, a stride of a reshape) computed from them.

The kernel is proven generic on its tensor expressions, not assumed from op names: the
function is specialised and lowered at two sets of sentinel sizes (distinct primes, a set
of large and a set of small ones), and the two te graphs are walked in lockstep. They must
agree node for node; an integer (a shape, an extent, an index constant) or a float where
they differ must be, in both, the same product of the variables (``n``, ``n * m``) or, for
a float, its inverse. Anything else (``n - 1``, a constant tensor holding a shape, an
empty tensor) leaves the function to chunked.py or to kernels per shape
(native/sites.py). Template kernels (GEMM, convolution) need static shapes: a generic
kernel runs te loop nests only, serially; where a hand-written kernel matters (a dense
layer over a symbolic batch) chunked.py runs it on chunks of static sizes.

Which sizes are variables is decided per call by their values: input dimensions typed
symbolically take one variable per distinct value of 2 or more (sizes 0 and 1 stay
constants: a size of 1 broadcasts), so ``(n, m)`` with n = m gets a kernel of its own.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from llvmlite import ir

from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.codegen import emit_module
from relaydsl.backend.llvm.lower import Lowered, lower, stable_digest
from relaydsl.backend.llvm.schedule import Schedule, schedule
from relaydsl.backend.llvm.specialize import specialize
from relaydsl.errors import RelayError
from relaydsl.ir.expr import Function
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import deep_recursion
from relaydsl.te.expr import FloatImm, IntImm, IterVar, PrimExpr
from relaydsl.te.tensor import Tensor
from relaydsl.transform.pipeline import CompileOptions

_log = logging.getLogger(__name__)

Mono = tuple[int, ...]  # a product of variables: their indices, sorted, repeated for powers
Size = tuple[Mono, int]  # a product of variables plus a small constant (n - 1)
Dim = int | Size  # a static size, or one known at run time
OFFSETS = (0, -1, 1, -2, 2, -3, 3, -4, 4)  # the constants a size may be off a product by


def _primes(start: int, count: int, gap: int) -> list[int]:
    """`count` primes from `start`, each at least `gap` above the last."""
    found: list[int] = []
    n = start
    while len(found) < count:
        if all(n % p for p in range(2, math.isqrt(n) + 1)) and \
                (not found or n - found[-1] >= gap):
            found.append(n)
        n += 1
    return found


MAX_VARIABLES = 8
# two sentinel sets far apart: a size-dependent expression that matched a product of the
# variables at both by chance (max(n, 1500)) is unlikely at sizes so different
# (primes far enough apart that no size is another's plus an offset: n0 + 2 = n1 would be
# read either way)
LARGE = _primes(1009, MAX_VARIABLES, 3 * len(OFFSETS))
SMALL = _primes(211, MAX_VARIABLES, 2 * len(OFFSETS) + 1)


def size_value(size: Size, values: Sequence[int]) -> int:
    mono, offset = size
    return math.prod(values[v] for v in mono) + offset


def _affine(a: int, b: int, count: int) -> Size | None:
    """The size of `count` variables that is `a` at the LARGE sentinels and `b` at the
    SMALL ones, if exactly one is."""
    found = []
    for offset in OFFSETS:
        m, n = _factor(a - offset, LARGE[:count]), _factor(b - offset, SMALL[:count])
        if m is not None and m == n:
            found.append((m, offset))
    return found[0] if len(found) == 1 else None


def _factor(value: int, sentinels: Sequence[int]) -> Mono | None:
    """`value` as a product of `sentinels` (primes), if it is one (and not 1)."""
    if value < 2:
        return None
    out: list[int] = []
    for v, p in enumerate(sentinels):
        while value % p == 0:
            value //= p
            out.append(v)
    return tuple(out) if value == 1 else None


@dataclass(eq=False)
class Symbolic:
    """The run-time sizes of a lowered function (lowered at the LARGE sentinels): which
    dimensions, extents and constants are products of its variables, and the int64 buffer
    of the variables' values its kernel reads (a slot after the constants)."""

    count: int  # variables
    dims: dict[Tensor, tuple[Dim, ...]]  # tensors with a run-time dimension
    ints: dict[IntImm, Size]  # -> its value
    floats: dict[FloatImm, tuple[Size, bool]]  # -> its value, or (True) its inverse
    extents: dict[IterVar, Size]  # -> its extent
    sizes: Tensor

    def shape(self, t: Tensor) -> tuple[Dim, ...]:
        return self.dims.get(t, t.shape)

    def concrete(self, t: Tensor, values: Sequence[int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else size_value(d, values) for d in self.shape(t))


class _NotGeneric(Exception):
    pass


class _Lockstep:
    """Walks the te graphs of one function lowered at LARGE and at SMALL sentinel sizes
    together, recording in a Symbolic what differs between them (see the module's doc)."""

    def __init__(self, count: int):
        self.out = Symbolic(count, {}, {}, {}, {}, Tensor("sizes", (max(count, 1),), "int64"))
        self.paired: dict[object, object] = {}  # (te nodes and tensors hash by identity)

    def int_(self, a: int, b: int) -> Dim:
        if a == b:
            return a
        size = _affine(a, b, self.out.count)
        if size is None:
            raise _NotGeneric(f"{a} vs {b}")
        return size

    def float_(self, a: float, b: float) -> tuple[Size, bool] | None:
        if a == b or (math.isnan(a) and math.isnan(b)):
            return None
        if not (math.isfinite(a) and math.isfinite(b)):
            raise _NotGeneric(f"{a} vs {b}")
        for inverse in (False, True):
            if inverse and (a == 0 or b == 0):
                continue
            x, y = (1 / a, 1 / b) if inverse else (a, b)
            ra, rb = round(x), round(y)
            if abs(x - ra) <= 1e-6 * abs(x) and abs(y - rb) <= 1e-6 * abs(y):
                size = _affine(ra, rb, self.out.count)
                if size is not None:
                    return size, inverse
        raise _NotGeneric(f"{a} vs {b}")

    def tensor(self, a: Tensor, b: Tensor) -> None:
        if self.paired.get(a) is b:
            return
        if a in self.paired or a.dtype != b.dtype or a.ndim != b.ndim or \
                (a.body is None) != (b.body is None):
            raise _NotGeneric(f"{a} vs {b}")
        self.paired[a] = b
        shape = tuple(self.int_(x, y) for x, y in zip(a.shape, b.shape))
        if shape != a.shape:
            self.out.dims[a] = shape
        for x, y in zip(a.axes, b.axes):
            self.expr(x, y)
        if a.body is not None:
            assert b.body is not None
            self.expr(a.body, b.body)

    def expr(self, a: PrimExpr, b: PrimExpr) -> None:
        """Pairs two expressions, iteratively (a fused chain of ops is a deep expression)."""
        stack: list[tuple[object, object]] = [(a, b)]
        while stack:
            x, y = stack.pop()
            if isinstance(x, Tensor) and isinstance(y, Tensor):
                self.tensor(x, y)
                continue
            if self.paired.get(x) is y:
                continue
            if x in self.paired or type(x) is not type(y):
                raise _NotGeneric(f"{x} vs {y}")
            self.paired[x] = y
            if isinstance(x, FloatImm):
                assert isinstance(y, FloatImm)
                f = self.float_(x.value, y.value)
                if f is not None:
                    self.out.floats[x] = f
                continue
            # an integer's value and an axis's extent may be sizes; every other field the same
            sized = {IntImm: ("value", self.out.ints), IterVar: ("extent", self.out.extents)}
            size_field, found = sized.get(type(x), ("", {}))
            assert dataclasses.is_dataclass(x)
            for f in dataclasses.fields(x):
                u, v = getattr(x, f.name), getattr(y, f.name)
                if f.name == size_field:
                    size = self.int_(u, v)
                    if not isinstance(size, int):
                        found[x] = size
                elif isinstance(u, (PrimExpr, Tensor)):
                    stack.append((u, v))
                elif isinstance(u, tuple) and all(isinstance(e, (PrimExpr, Tensor)) for e in u):
                    if not isinstance(v, tuple) or len(u) != len(v):
                        raise _NotGeneric(f.name)
                    stack.extend(zip(u, v))
                elif u != v:
                    raise _NotGeneric(f"{f.name}: {u!r} vs {v!r}")


def prove(large: Lowered, small: Lowered, count: int) -> Symbolic | None:
    """The run-time sizes of `large` (lowered at the LARGE sentinels) if `small` (the same
    function at the SMALL ones) differs from it only in products of the variables."""
    if large.empty or small.empty or large.returns_tuple != small.returns_tuple or \
            len(large.params) != len(small.params) or \
            len(large.constants) != len(small.constants) or \
            len(large.outputs) != len(small.outputs):
        return None
    walk = _Lockstep(count)
    try:
        with deep_recursion():
            for (c, data), (d, other) in zip(large.constants, small.constants):
                if data.dtype != other.dtype or data.shape != other.shape or \
                        data.tobytes() != other.tobytes():
                    return None
                walk.tensor(c, d)
            for x, y in zip([*large.params, *large.outputs], [*small.params, *small.outputs]):
                walk.tensor(x, y)
    except _NotGeneric as e:
        _log.debug("not generic: %s", e)
        return None
    return walk.out


# ---- the kernel ------------------------------------------------------------------------


@dataclass(eq=False)
class GenericKernel:
    """A primitive function compiled once for every size of its variables: its entry takes
    the kernel's buffer table (inputs, outputs, constants, the int64 sizes, scratch)."""

    symbolic: Symbolic
    lowered: Lowered
    sched: Schedule
    entry_address: int
    positions: list[tuple[int, int, int]]  # (input, axis, variable): where each is read

    def values(self, types: Sequence[TensorType]) -> list[int]:
        """The variables' values for inputs of `types`."""
        out = [0] * self.symbolic.count
        for i, axis, v in self.positions:
            out[v] = int(types[i].shape[axis])
        return out

    def runs(self, values: Sequence[int]) -> bool:
        """Whether every size is at least 1 at `values` (a size n - 4 is not where n = 3:
        those calls get kernels of their shapes, which say what is wrong)."""
        sizes = [d for dims in self.symbolic.dims.values() for d in dims if not isinstance(d, int)]
        return all(size_value(d, values) >= 1
                   for d in [*sizes, *self.symbolic.extents.values()])

    def output_types(self, values: Sequence[int]) -> list[TensorType]:
        return [TensorType(self.symbolic.concrete(t, values), t.dtype)
                for t in self.lowered.outputs]

    def scratch_bytes(self, values: Sequence[int]) -> list[int]:
        from relaydsl.backend.llvm.kernel import nbytes

        return [nbytes(self.symbolic.concrete(t, values), t.dtype) for t in self.sched.scratch]

    @property
    def constants(self) -> list[np.ndarray]:
        return [data for _, data in self.lowered.constants]


def pattern(types: Sequence[TensorType], symbolic: Sequence[Sequence[bool]]
            ) -> tuple[tuple[int | str, ...], list[tuple[int, int, int]]]:
    """The genericity of a call with inputs of `types`, whose dimensions flagged in
    `symbolic` are typed symbolically: per such dimension its size (0 or 1: a constant) or
    the variable it is (one per distinct size, in order of appearance); and where each
    variable is first read (input, axis, variable)."""
    classes: dict[int, int] = {}
    key: list[int | str] = []
    positions: list[tuple[int, int, int]] = []
    for i, (t, flags) in enumerate(zip(types, symbolic)):
        for axis, (d, flag) in enumerate(zip(t.shape, flags)):
            if not flag:
                continue
            assert isinstance(d, int)
            if d < 2:
                key.append(d)
                continue
            if d not in classes:
                classes[d] = len(classes)
                positions.append((i, axis, classes[d]))
            key.append(f"v{classes[d]}")
    return tuple(key), positions


def compile_generic(fn: Function, types: Sequence[TensorType],
                    symbolic: Sequence[Sequence[bool]], options: CompileOptions
                    ) -> GenericKernel | None:
    """`fn` compiled generic in the symbolic dimensions of inputs of `types` (flagged in
    `symbolic`), or None where it is not (see the module's doc)."""
    key, positions = pattern(types, symbolic)
    count = len(positions)
    if count == 0 or count > MAX_VARIABLES:
        return None

    classes = {int(types[i].shape[axis]): v for i, axis, v in positions}

    def at(sentinels: Sequence[int]) -> Lowered:
        typed = []
        for t, flags in zip(types, symbolic):
            shape = tuple(sentinels[classes[d]] if flag and d >= 2 else d
                          for d, flag in zip(t.shape, flags))
            typed.append(TensorType(shape, t.dtype))
        return lower(specialize(fn, typed))

    try:
        large, small = at(LARGE), at(SMALL)
    except (RelayError, ValueError, ZeroDivisionError, OverflowError):
        return None
    found = prove(large, small, count)
    if found is None:
        return None
    return _build(fn, large, found, positions, key, options)


_LOCK = threading.Lock()
_BY_DIGEST: dict[str, GenericKernel] = {}


def _build(fn: Function, lowered: Lowered, symbolic: Symbolic,
           positions: list[tuple[int, int, int]], key: tuple, options: CompileOptions
           ) -> GenericKernel:
    from relaydsl.backend.llvm import kernel

    speed = 3 if options.opt_level >= 1 else 1
    digest = hashlib.sha256(f"generic|{stable_digest(fn)}|{key}|{speed}".encode()).hexdigest()
    with _LOCK:
        found = _BY_DIGEST.get(digest)
        if found is not None:
            return found
        start = time.perf_counter()
        prefix = f"rg{digest[:24]}"
        sched = schedule(lowered, prefix, symbolic)
        module = ir.Module(name="relaydsl_generic")
        module.triple = jit.host_target().triple
        module.data_layout = jit.data_layout()
        with deep_recursion():
            _, entry = emit_module(module, sched, prefix)
        text = functools.partial(str, module)
        lib = jit.load_or_compile(f"generic|{digest}", [entry], text, speed_level=speed)
        kernel.stats["modules"] += 1
        kernel.stats["functions"] += 1
        out = _BY_DIGEST[digest] = GenericKernel(symbolic, lowered, sched, lib.address(entry),
                                                 positions)
        if _log.isEnabledFor(logging.INFO):
            _log.info("a kernel generic in %d size(s) built in %.1f ms", symbolic.count,
                      1000 * (time.perf_counter() - start))
        return out
