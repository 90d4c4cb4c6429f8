"""CombineParallelConv2D, as TVM's: convolutions of one input become one wider convolution
(§4.4 of the Relay paper; an Inception block's 1x1 branches are the example).

Conv2d calls reading the same data with the same attributes, kernel size and dtype, differing
only in their number of out-channels, are replaced -- when there are at least
`min_num_branches` of them (TVM's default 3) -- by one conv2d over their weights
concatenated along the out-channels, each branch then reading its channels of the result
with a ``strided_slice``. Grouped convolutions are left alone (their groups would
interleave), as in TVM.

The element-wise ops that every branch applies next are combined too, as long as they agree
(the same op and attributes, the branch in the same operand position): a unary element-wise
op (relu, ...), ``bias_add`` along the channels, and ``add``/``subtract``/``multiply``/
``divide`` with a per-branch operand that spans the branch's channels (a bias or scale of
shape (C_i, 1, 1)): the operands are concatenated along the channels. A node with another
consumer ends its branch's chain. The slices come after the last combined op.

Before and after (three 1x1 convolutions of %x, each followed by relu)::

    (relu(conv2d(%x, %w1)), relu(conv2d(%x, %w2)), relu(conv2d(%x, %w3)))

    %0 = relu(conv2d(%x, concatenate((%w1, %w2, %w3)), channels=C1+C2+C3));
    (strided_slice(%0, begin=[0], end=[C1], axes=[1]), strided_slice(%0, begin=[C1], ...), ...)

Whether one wide convolution beats several narrow ones depends on the hardware: TVM runs
this pass only at opt_level 4, i.e. on request, and so does our pipeline.

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(1, 2, 3, 3), float32], %a: Tensor[(1, 2, 1, 1), float32],
...           %b: Tensor[(2, 2, 1, 1), float32]) {
...   (relu(conv2d(%x, %a)), relu(conv2d(%x, %b)))
... }'''))
>>> print(combine_parallel_conv2d(mod, min_num_branches=2)["main"].body)
let %t1 = (%a: Tensor[(1, 2, 1, 1), float32], %b: Tensor[(2, 2, 1, 1), float32]);
let %t2 = concatenate(%t1);
let %t3 = conv2d(%x: Tensor[(1, 2, 3, 3), float32], %t2, channels=3);
let %t4 = relu(%t3);
let %t5 = strided_slice(%t4, begin=[0], end=[1], axes=[1]);
let %t6 = strided_slice(%t4, begin=[1], end=[3], axes=[1]);
let %t7 = (%t5, %t6);
%t7
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from relaydsl.ir.expr import Call, Expr, Function, Op, Tuple
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprMutator, children, post_order
from relaydsl.op.nn.conv import conv2d
from relaydsl.op.nn.linear import bias_add
from relaydsl.op.registry import OpPattern, ops
from relaydsl.transform._dataflow import op_consumers, rewrite_dataflow, use_counts
from relaydsl.transform._util import rewrite_functions
from relaydsl.transform.pass_infra import ON_DEMAND, Pass

DEFAULT_MIN_NUM_BRANCHES = 3


@dataclass(frozen=True)
class CombineParallelConv2D(Pass, opt_level=ON_DEMAND,
                            description="conv2d calls of one input (3 or more) become one wider "
                                        "conv2d and slices"):
    """Each set of at least `min_num_branches` combinable conv2d calls of one input made one
    conv2d (and the element-wise ops all of them apply next), then sliced."""

    min_num_branches: int = DEFAULT_MIN_NUM_BRANCHES

    def __post_init__(self) -> None:
        if self.min_num_branches < 2:
            raise ValueError(f"min_num_branches must be at least 2, got {self.min_num_branches}")

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_dataflow(
            mod, lambda graph: rewrite_functions(
                graph, lambda fn: _Combine(fn, self.min_num_branches).visit(fn)),
            anchors=(conv2d,))


def combine_parallel_conv2d(mod: IRModule,
                            min_num_branches: int = DEFAULT_MIN_NUM_BRANCHES) -> IRModule:
    """``CombineParallelConv2D(min_num_branches)(mod)``."""
    return CombineParallelConv2D(min_num_branches)(mod)


def _static_type(e: Expr) -> TensorType | None:
    t = e.checked_type if e.has_type else None
    if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
        return t
    return None


def _concrete_shape(e: Expr) -> tuple[int, ...]:
    t = _static_type(e)
    assert t is not None
    return t.concrete_shape()


def _reaches(e: Expr, convs: list[Call]) -> bool:
    """Whether `e` depends on one of `convs`: it then cannot be an operand of their combination,
    which would read its own result."""
    targets: set[Expr] = set(convs)
    seen: set[Expr] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if node in targets:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(children(node))
    return False


@dataclass
class _Branches:
    """Combinable conv2d calls of one input, the ops combined after them, and their channels."""

    convs: list[Call]
    axis: int  # the channel axis of the convolutions' results
    channels: list[int]
    ends: list[Expr] = field(default_factory=list[Expr])  # each branch's last combined node
    # the ops after the convs, step by step: one call per branch, and the operand position
    # of the branch's value in them
    chain: list[tuple[list[Call], int]] = field(default_factory=list[tuple[list[Call], int]])
    combined: Expr | None = None  # the combined result, once built


class _Combine(ExprMutator):
    def __init__(self, fn: Function, min_num_branches: int) -> None:
        super().__init__()
        self.uses = use_counts(fn)
        self.consumers = op_consumers(fn)
        self.ending: dict[Expr, tuple[_Branches, int]] = {}  # a branch's end -> (set, index)
        for branches in self._combinable(fn, min_num_branches):
            self._extend(branches)
            for i, end in enumerate(branches.ends):
                self.ending[end] = (branches, i)

    # ---- analysis ----

    def _combinable(self, fn: Function, min_num_branches: int) -> list[_Branches]:
        """The sets of conv2d calls to combine, grouped by input and by what must agree."""
        found: list[_Branches] = []
        seen: set[Expr] = set()

        def visit(e: Expr) -> None:
            if e in seen or e not in self.consumers:
                return
            seen.add(e)
            groups: dict[Hashable, list[Call]] = {}
            for call, i in self.consumers[e]:
                key = self._key(call) if i == 0 else None
                if key is not None and call.args[1] is not e:
                    groups.setdefault(key, []).append(call)
            for convs in groups.values():
                convs = list(dict.fromkeys(convs))
                if len(convs) >= min_num_branches and not any(
                        _reaches(c.args[1], convs) for c in convs):
                    shapes = [_concrete_shape(c) for c in convs]
                    axis = len(shapes[0]) - 3  # C of NCHW, or of one CHW example
                    found.append(_Branches(convs, axis, [shape[axis] for shape in shapes]))

        post_order(fn, visit)
        return found

    @staticmethod
    def _key(call: Call) -> Hashable | None:
        """What combinable conv2d calls share: everything but the out-channels."""
        if call.op != conv2d.op or call.attrs.groups != 1:
            return None
        data, weight, out = (_static_type(e) for e in (*call.args, call))
        if data is None or weight is None or out is None:
            return None
        attrs = tuple(sorted((k, v) for k, v in call.attrs.items() if k != "channels"))
        return attrs, weight.shape[1:], weight.dtype, data.dtype

    def _extend(self, branches: _Branches) -> None:
        """Follow the branches while each applies the same element-wise op next."""
        ends: list[Expr] = list(branches.convs)
        while True:
            nexts = [self._next(end) for end in ends]
            if any(n is None for n in nexts):
                break
            steps = [n for n in nexts if n is not None]
            first, position = steps[0]
            if len({c for c, _ in steps}) != len(steps) or not all(
                    self._agrees(first, c, position, p, branches, i)
                    for i, (c, p) in enumerate(steps)):
                break
            branches.chain.append(([c for c, _ in steps], position))
            ends = [c for c, _ in steps]
        branches.ends = ends

    def _next(self, end: Expr) -> tuple[Call, int] | None:
        """The one consumer of `end`, with `end`'s operand position, if it has only one."""
        readers = self.consumers.get(end, [])
        if self.uses.get(end, 0) != 1 or len(readers) != 1:
            return None
        return readers[0]

    def _agrees(self, first: Call, call: Call, position: int, p: int, branches: _Branches,
                i: int) -> bool:
        """Whether `call`, branch i's next op, combines with the first branch's."""
        out, t = _static_type(call), _static_type(call.args[p])
        if out is None or out != t or p != position or call.op is not first.op or \
                call.attrs != first.attrs:
            return False
        assert isinstance(call.op, Op)
        if len(call.args) == 1:
            return call.op.definition.pattern == OpPattern.ELEMWISE
        if call.op == bias_add.op:
            return call.attrs.axis % out.ndim == branches.axis
        if not call.op.definition.traits.arithmetic:
            return False
        if _reaches(call.args[1 - p], branches.convs):
            return False  # the combined op would read a slice of itself
        other = _static_type(call.args[1 - p])
        first_other = _static_type(first.args[1 - p])
        if other is None or first_other is None or other.ndim != first_other.ndim:
            return False
        axis = branches.axis - (out.ndim - other.ndim)  # the channel axis within the operand
        if axis < 0 or other.shape[axis] != branches.channels[i]:
            return False
        return all(d == f for k, (d, f) in enumerate(zip(other.shape, first_other.shape))
                   if k != axis)

    # ---- rewriting ----

    def visit(self, expr: Expr) -> Expr:
        found = self.ending.get(expr)
        if found is None:
            return super().visit(expr)
        branches, i = found
        combined = self._combined(branches)
        begin = sum(branches.channels[:i])
        return ops.strided_slice(combined, begin=(begin,),
                                 end=(begin + branches.channels[i],), axes=(branches.axis,))

    def _combined(self, branches: _Branches) -> Expr:
        """The one conv2d of all branches, then their combined element-wise ops (built once)."""
        if branches.combined is None:
            first = branches.convs[0]
            weights = Tuple(tuple(self.visit(c.args[1]) for c in branches.convs))
            attrs = dict(first.attrs.items(), channels=sum(branches.channels))
            out: Expr = conv2d(self.visit(first.args[0]), ops.concatenate(weights, axis=0),
                               **attrs)
            for step, position in branches.chain:
                out = self._combined_step(out, step, position, branches)
            branches.combined = out
        return branches.combined

    def _combined_step(self, data: Expr, step: list[Call], position: int,
                       branches: _Branches) -> Expr:
        """The op of `step` (one call per branch, each branch's value its operand
        `position`) applied to the combined `data`, the other operands concatenated."""
        first = step[0]
        if len(first.args) == 1:
            return Call(first.op, (data,), first.attrs, span=first.span)
        other_type, out_type = _static_type(first.args[1 - position]), _static_type(first)
        assert other_type is not None and out_type is not None
        # the channel axis within the operand (bias_add's bias is 1-D)
        axis = 0 if first.op == bias_add.op else \
            branches.axis - (out_type.ndim - other_type.ndim)
        other = ops.concatenate(Tuple(tuple(self.visit(c.args[1 - position]) for c in step)),
                                axis=axis)
        args = (data, other) if position == 0 else (other, data)
        return Call(first.op, args, first.attrs, span=first.span)


__all__ = ["CombineParallelConv2D", "combine_parallel_conv2d", "DEFAULT_MIN_NUM_BRANCHES"]
