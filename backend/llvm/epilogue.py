"""A template's epilogue in registers: the elementwise stage after a template kernel (bias,
activation, a requantisation, a residual add: schedule.py's ``pointwise``) applied to the
template's result vectors before they are stored, so the result is written once, in the
epilogue's type, and the template's own (int32 sums) never reaches memory.

The schedule asks ``register_epilogue(t, source, inlined, uniform)`` whether the stage
``t`` (reading the template's result ``source``) can run so: a vector of the template's
results shares the values of ``source``'s first ``uniform`` axes (a conv2d's image and
output channel) and holds 16 values of the others (its pixels, the *lanes*). Then every
expression of ``t``'s body (through its inlined producers) is either

* **uniform**: it reads no lane; emitted once per vector row as scalar code (exprgen.py,
  the stage emitter's own), then splat (a bias ``c[0, i1, 0, 0]``, a scale);
* **lanes**: it depends on ``source`` read at its own element, or on another buffer read
  at its own element (a residual), and is emitted on <16 x T> vectors by the same
  ExprEmitter, whose arithmetic and casts take a value's type from the value.

and the template supplies the two things it knows: the vector of ``source`` values and the
own-element reads of other buffers in the same lanes (``EpilogueEmitter.apply``). Anything
else (a reduction, a lane axis used as a value or in a gather's index, an intrinsic whose
vector form would compute other bits: ``Lowering.vectors``) keeps the epilogue a stage.

    T_add[n, c, y, x]  = T_conv2d[n, c, y, x] + bias[0, c, 0, 0]     (int32)
    T_cast[n, c, y, x] = int8(clip(round(float32(T_add[...]) * 0.0031), -127, 127))
  =>
    %b   = load i32, i32* (bias + c)                                 ; uniform, per row
    %acc = sub <16 x i32> %sums, %correction                        ; the template's result
    %v   = add <16 x i32> %acc, (splat %b) ... fptosi ... trunc to <16 x i8>
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from relaydsl.backend.llvm import intrinsics as M
from relaydsl.backend.llvm.exprgen import Ctx, ExprEmitter, like, value_type
from relaydsl.te.expr import (
    Call, IterVar, PrimExpr, Reduce, TensorRead, Var, children,
)
from relaydsl.te.tensor import Tensor

LANES = 16
# what a template stores or reads in lanes (whole 32-bit lanes or fewer bits)
LANE_DTYPES = ("int8", "uint8", "int16", "int32", "float32")


@dataclass(frozen=True, eq=False)
class Epilogue:
    """The stage ``tensor`` as an epilogue of the template computing ``source``: what it
    reads besides ``source`` (``lane_reads`` at their own element, ``uniform_reads`` at
    indices of the ``uniform`` leading axes only: the buffers the template's function
    takes, ``reads``), the ``inlined`` tensors it evaluates, and which expressions
    depend on the lanes."""

    tensor: Tensor
    source: Tensor
    uniform: int
    inlined: frozenset[Tensor]
    lane_reads: tuple[Tensor, ...]
    uniform_reads: tuple[Tensor, ...]
    lane_nodes: frozenset[PrimExpr]

    @property
    def reads(self) -> tuple[Tensor, ...]:
        return self.lane_reads + self.uniform_reads

    def is_lanes(self, e: PrimExpr) -> bool:
        return e in self.lane_nodes


class _Unsupported(Exception):
    pass


def register_epilogue(t: Tensor, source: Tensor, inlined: set[Tensor], uniform: int
                      ) -> Epilogue | None:
    """`t` as an epilogue in registers of the template computing `source` (its shape), the
    first `uniform` axes one value per vector, or None where it cannot be one (see the
    module's docstring).

    >>> from relaydsl.te.expr import maximum
    >>> from relaydsl.te.tensor import compute, placeholder
    >>> sums, bias = placeholder((2, 8, 4, 4), "int32", "sums"), placeholder(8, "int32", "bias")
    >>> relu = compute(sums.shape, lambda n, c, y, x: maximum(sums[n, c, y, x] + bias[c], 0))
    >>> epilogue = register_epilogue(relu, sums, set(), 2)   # vectors of one image and channel
    >>> [x.name for x in epilogue.uniform_reads], epilogue.lane_reads
    (['bias'], ())
    >>> register_epilogue(relu, sums, set(), 1) is None       # the channel varies in a vector
    True
    """
    if t.body is None or t.shape != source.shape or t.dtype not in LANE_DTYPES or \
            not 0 <= uniform < len(t.shape):
        return None
    lane_nodes: set[PrimExpr] = set()
    known: dict[PrimExpr, bool] = {}
    tensors: dict[Tensor, bool] = {}  # inlined tensor -> whether its values are lanes
    lane_reads: dict[Tensor, None] = {}
    uniform_reads: dict[Tensor, None] = {}

    def tensor_lanes(u: Tensor) -> bool:
        if u not in tensors:
            assert u.body is not None
            tensors[u] = visit(u.body, u)
        return tensors[u]

    def visit(e: PrimExpr, u: Tensor) -> bool:
        """Whether `e` (in `u`'s body) depends on the lanes; raises where it cannot run."""
        if e in known:
            return known[e]
        lanes = False
        match e:
            case TensorRead(tensor=x, indices=idx):
                own = x.shape == t.shape and len(idx) == len(u.axes) and \
                    all(i is a for i, a in zip(idx, u.axes))
                if own and x is source:
                    lanes = True
                elif own and x in inlined:
                    lanes = tensor_lanes(x)
                elif own:  # a buffer (a residual)
                    if x.dtype not in LANE_DTYPES:
                        raise _Unsupported
                    lane_reads[x] = None
                    lanes = True
                else:  # a uniform read: its index of uniform axes and constants only
                    if any(visit(i, u) for i in idx) or x is source or \
                            (x in inlined and tensor_lanes(x)):
                        raise _Unsupported
                    if x not in inlined:
                        uniform_reads[x] = None
            case IterVar():
                if e in u.axes[uniform:] or e not in u.axes:  # a lane's pixel as a value
                    raise _Unsupported
            case Var() | Reduce():
                raise _Unsupported
            case _:
                for c in children(e):  # every child: each records its reads
                    lanes = visit(c, u) or lanes
                if lanes and isinstance(e, Call) and (
                        not M.LOWERINGS[e.intrinsic].vectors or e.dtype == "float16"):
                    raise _Unsupported
        if lanes:
            lane_nodes.add(e)
        known[e] = lanes
        return lanes

    try:
        if not visit(t.body, t):  # a result not of the template's: nothing to fuse
            return None
    except _Unsupported:
        return None
    return Epilogue(t, source, uniform, frozenset(tensors), tuple(lane_reads),
                    tuple(uniform_reads), frozenset(lane_nodes))


class _Lanes(Ctx):
    """Where a lanes expression of `tensor`'s body is emitted (on vectors)."""

    def __init__(self, tensor: Tensor, env: dict[PrimExpr, ir.Value]):
        super().__init__(env, {})
        self.tensor = tensor


class EpilogueEmitter(ExprEmitter):
    """Emits an Epilogue with `b` in a template's function: per vector row ``begin_row``
    (the uniform axes' i64 values), per vector ``apply``; `ptr` maps the epilogue's
    ``reads`` to the function's pointers."""

    def __init__(self, module: ir.Module, b: ir.IRBuilder, ptr: dict[Tensor, ir.Value],
                 epilogue: Epilogue):
        super().__init__(module, b, b, ptr, set(epilogue.inlined))
        self.epilogue = epilogue
        self._uniform: list[ir.Value] = []
        self._rows: dict[Tensor, Ctx] = {}
        self._vectors: dict[Tensor, ir.Value] = {}
        self._acc: ir.Value | None = None
        self._lane_read: Callable[[Tensor], ir.Value] | None = None

    def begin_row(self, uniform: list[ir.Value]) -> None:
        """The next vectors share these values of the uniform axes (i64)."""
        self._uniform, self._rows = uniform, {}

    def apply(self, acc: ir.Value, lane_read: Callable[[Tensor], ir.Value]) -> ir.Value:
        """The epilogue's vector for the template's vector `acc`; `lane_read(x)` gives
        buffer x's values in the same lanes, as a <16 x T> of its element type."""
        self._acc, self._lane_read, self._vectors = acc, lane_read, {}
        return self._lanes_of(self.epilogue.tensor)

    def _env(self, u: Tensor) -> dict[PrimExpr, ir.Value]:
        return dict(zip(u.axes[:self.epilogue.uniform], self._uniform))

    def _row(self, u: Tensor) -> Ctx:
        """Where uniform expressions of `u`'s body are emitted, once per row."""
        if u not in self._rows:
            self._rows[u] = Ctx(self._env(u), {a: (0, a.extent - 1)
                                               for a in u.axes[:self.epilogue.uniform]})
        return self._rows[u]

    def _lanes_of(self, u: Tensor) -> ir.Value:
        found = self._vectors.get(u)
        if found is None:
            if u is self.epilogue.source:
                assert self._acc is not None
                found = self._acc
            elif u is self.epilogue.tensor or u in self.inlined:
                assert u.body is not None
                found = self.value(u.body, _Lanes(u, self._env(u)))
            else:
                assert self._lane_read is not None
                found = self._lane_read(u)
            self._vectors[u] = found
        return found

    def value(self, e: PrimExpr, ctx: Ctx) -> ir.Value:
        if not isinstance(ctx, _Lanes):
            return super().value(e, ctx)
        if self.epilogue.is_lanes(e):
            return super().value(e, ctx)
        found = ctx.memo.get((e, "v"))
        if found is None:
            scalar = super().value(e, self._row(ctx.tensor))
            found = splat(self.b, scalar, LANES)
            ctx.memo[(e, "v")] = found
        return found

    def read(self, e: TensorRead, ctx: Ctx) -> ir.Value:
        if isinstance(ctx, _Lanes):  # a lanes read is at its own element
            return self._lanes_of(e.tensor)
        return super().read(e, ctx)


def splat(b: ir.IRBuilder, x: ir.Value, lanes: int) -> ir.Value:
    """``x`` in every lane of a vector."""
    vec = ir.VectorType(x.type, lanes)
    one = b.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
    return b.shuffle_vector(one, ir.Constant(vec, ir.Undefined),
                            ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def lanes_type(dtype: str, lanes: int = LANES) -> ir.VectorType:
    """The vector of `dtype` values a template hands the epilogue (bool: i1 lanes)."""
    return ir.VectorType(value_type(dtype), lanes)


__all__ = ["Epilogue", "EpilogueEmitter", "LANES", "LANE_DTYPES", "lanes_type", "like",
           "register_epilogue", "splat"]
