"""Realize: each simQ becomes the integer operations it simulates (the last step of §4.2).

The paper's ``Q(x) = cast(clip(round(x / rho · 2^(β-σ)), qtype))``, written in standard ops::

    simQ(%x, s)      ->  cast(clip(round(multiply(%x, 1/s)), qmin, qmax), int8)

Values then flow as integers with a known step through the ops whose rules say how
(relaydsl/op/quantize_rule.py):

- a product (conv2d, dense, matmul, multiply) of integers runs on them, summed in the
  accumulator dtype (``out_dtype``; int16 sums widen to int32 after) where no input can
  overflow it, else as accumulate.py says (8/16: in int32, the narrowing to int16 checked),
  its result's step the product of its operands' (per channel where the weight's is);
- a sum (add, bias_add) adds integers of one step, a constant operand quantized at the other's
  step into int32; relu and reshapes keep the step (a reshape only a per-tensor one);
- a simQ of an integer requantizes it: a right shift (rounding half up) when the steps differ by
  a power of two, else ``cast(clip(round(multiply(cast(%q, float32), s_in / s_out))))``;
- every other op, and the program's result, gets floats back: ``multiply(cast(%q, float32), s)``.

The casts, multiplies, rounds and clips after a product are elementwise: fusion puts them in the
integer kernel's epilogue. Weights are quantized here, in NumPy, to integer constants.

Before and after (8/32, steps 0.5 for %x and 0.25 for the weight)::

    dense(simulated_quantize(%x, 0.5f), simulated_quantize(W, 0.25f))
    multiply(cast(dense(cast(clip(round(multiply(%x, 2f)), -127, 127), int8), Wq, int32),
                  float32), 0.125f)
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Constant, Expr, Function, Let, Op, Tuple, TupleGetItem, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprFunctor, deep_recursion
from relaydsl.op import ops
from relaydsl.op.nn.linear import bias_add
from relaydsl.op.quantize import NEAREST, ROUNDING_OPS, qrange, simulated_quantize
from relaydsl.op.quantize_rule import QuantizeRule, Realization
from relaydsl.op.registry import OpPattern
from relaydsl.quantize.accumulate import (Accumulator, checked_narrowing, fits, with_accumulators,
                                          worst_case)
from relaydsl.quantize.config import QConfig
from relaydsl.quantize.rules import rule_of
from relaydsl.transform._util import rewrite_functions
from relaydsl.transform.pass_infra import Pass


@dataclass(frozen=True)
class Realize(Pass, opt_level=4, description="simQ as integer ops: multiply, round, clip, "
                                             "cast, shifts (relay.quantize)"):
    """Each simQ as integer arithmetic; see the module docstring."""

    config: QConfig = field(default_factory=QConfig)

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_functions(mod, lambda fn: _Realizer(self.config).function(fn))


@dataclass(frozen=True)
class _Value:
    """A realized expression: a float (``step`` None) or an integer of `dtype` standing for
    ``expr · step``, `step` a scalar or one per channel along `axis`."""

    expr: Expr
    step: np.ndarray | None = None
    axis: int = -1
    dtype: str = "float32"
    ndim: int = 0

    @property
    def is_int(self) -> bool:
        return self.step is not None


def _dtype(nbit: int, signed: bool) -> str:
    return f"{'' if signed else 'u'}int{nbit}"


def _along(step: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A step broadcastable against a rank-ndim value (one per channel along `axis`)."""
    if step.ndim == 0:
        return step
    return step.reshape([-1 if i == axis % ndim else 1 for i in range(ndim)])


def _saturation(dtype: str) -> tuple[int, int]:
    """The bounds a requantization into `dtype` clips to: the dtype's symmetric range, or for
    int32 the largest float32 below 2^31 (a float32 clip bound of 2^31 - 1 is 2^31, which
    does not cast)."""
    info = np.iinfo(dtype)
    if info.bits >= 32:
        return -(2 ** 31 - 128), 2 ** 31 - 128
    return (-int(info.max) if info.min < 0 else 0), int(info.max)


def _const(value: np.ndarray | float, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype))


def _rank(e: Expr) -> int:
    return e.checked_type.ndim  # type: ignore[attr-defined]


def _power_of_two_shift(ratio: float) -> int | None:
    """k with ratio = 2^-k, k >= 1; None otherwise."""
    k = -math.log2(ratio) if ratio > 0 else 0.0
    return round(k) if k >= 1 and abs(k - round(k)) < 1e-9 else None


class _Realizer(ExprFunctor[_Value]):
    def __init__(self, config: QConfig) -> None:
        super().__init__()  # its memo: each node realized once (nodes hash by identity)
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.accumulators: list[Accumulator] = []
        self.counts: list[Expr] = []  # per checked accumulator: how many saturated
        self.layers: dict[str, int] = {}  # products realized so far, per op

    def function(self, fn: Function) -> Function:
        with deep_recursion():  # one Python frame per node of a deep network
            body = self.float(self.visit(fn.body))
        if self.counts:
            body = Tuple((body, Tuple(tuple(self.counts))))
        return with_accumulators(fn, body, self.accumulators)

    # ---- the walk --------------------------------------------------------------------------

    def visit_call(self, call: Call) -> _Value:
        if call.op == simulated_quantize.op:
            return self.simq(call)
        if isinstance(call.op, Op):
            rule = rule_of(call.op.definition)
            if rule is not None and rule.realization is Realization.COMMON_SCALE:
                joined = self.common_scale(call)
                if joined is not None:
                    return joined
            args = [self.visit(a) for a in call.args]
            if rule is not None and any(a.is_int for a in args):
                done = self.integer_call(call, rule, args)
                if done is not None:
                    return done
            return _Value(Call(call.op, tuple(self.float(a) for a in args), call.attrs,
                               call.type_args, span=call.span))
        return _Value(Call(self.float(self.visit(call.op)),
                           tuple(self.float(self.visit(a)) for a in call.args), call.attrs,
                           call.type_args, span=call.span))

    def visit_tuple(self, t: Tuple) -> _Value:
        return _Value(Tuple(tuple(self.float(self.visit(f)) for f in t.fields), span=t.span))

    def visit_tuple_getitem(self, t: TupleGetItem) -> _Value:
        return _Value(TupleGetItem(self.float(self.visit(t.tuple_value)), t.index, span=t.span))

    def visit_let(self, let: Let) -> _Value:
        return self.let(let) if not isinstance(let.value, Function) else _Value(let)

    def dispatch(self, expr: Expr) -> _Value:
        if isinstance(expr, (Call, Tuple, TupleGetItem, Let)):
            return super().dispatch(expr)
        # variables, constants, ops; a function (not dataflow: annotation leaves what is
        # inside it float) and control flow are kept as they are
        return _Value(expr)

    def let(self, let: Let) -> _Value:
        """A let of the dataflow (graph normal form keeps one every MAX_DEPTH nodes of a deep
        network, ResNet-101's): its value realized, its variable standing for that value,
        integer or not, in the body. Kept as it was, the simQs under it stayed unrealized and
        the whole network float. The variable is a fresh one without annotation unless its
        annotation ascribes a type the value does not have of its own (a float one never
        holds an integer; one that only restates the value's type, as inlining a call leaves
        its parameter's, would pin the batch that a rebatched program changes)."""
        value = self.visit(let.value)
        t = let.var.type_annotation
        ascribed = t is not None and not (let.value.has_type and let.value.checked_type == t)
        var = let.var if ascribed and not value.is_int else \
            Var(let.var.name_hint, span=let.var.span)
        self.memo[let.var] = _Value(var, value.step, value.axis, value.dtype, value.ndim)
        body = self.visit(let.body)
        return _Value(Let(var, value.expr, body.expr, span=let.span), body.step, body.axis,
                      body.dtype, body.ndim)

    # ---- integers and floats ---------------------------------------------------------------

    def float(self, v: _Value) -> Expr:
        """`v` as a float: ``multiply(cast(q, float32), step)``."""
        if not v.is_int:
            return v.expr
        assert v.step is not None
        return ops.multiply(ops.cast(v.expr, dtype="float32"),
                            _const(_along(v.step, v.axis, v.ndim), "float32"))

    def simq(self, call: Call) -> _Value:
        x, s = call.args
        a = call.attrs
        assert isinstance(s, Constant)
        step = s.data.astype(np.float32)
        lo, hi = qrange(a.nbit, a.signed)
        dtype = _dtype(a.nbit, a.signed)
        axis = a.axis if step.ndim else -1
        ndim = _rank(x)
        v = self.visit(x)
        if isinstance(v.expr, Constant) and not v.is_int:  # a weight: quantized now
            data = v.expr.data.astype(np.float32)
            scaled = data * (np.float32(1) / _along(step, axis, data.ndim))
            if self.config.rounding == "stochastic":
                q = np.floor(scaled + self.rng.random(scaled.shape, np.float32))
            else:
                q = getattr(np, a.rounding)(scaled)
            return _Value(_const(np.clip(q, lo, hi), dtype), step, axis, dtype, ndim)
        if not v.is_int:
            inv = np.float32(1) / _along(step, axis, ndim)
            q = ROUNDING_OPS[a.rounding](ops.multiply(v.expr, _const(inv, "float32")))
            return _Value(self._saturate(q, lo, hi, dtype), step, axis, dtype, ndim)
        return _Value(self.requantize(v, step, axis, a.rounding, lo, hi, dtype), step, axis,
                      dtype, ndim)

    def _saturate(self, q: Expr, lo: int, hi: int, dtype: str) -> Expr:
        return ops.cast(ops.clip(q, a_min=float(lo), a_max=float(hi)), dtype=dtype)

    def requantize(self, v: _Value, step: np.ndarray, axis: int, rounding: str, lo: int,
                   hi: int, dtype: str) -> Expr:
        """Integer `v` at a new step: a rounding right shift where the steps differ by a
        power of two, else through float32."""
        assert v.step is not None
        if v.step.ndim == 0 and step.ndim == 0 and rounding == NEAREST:
            k = _power_of_two_shift(float(v.step) / float(step))
            if k is not None:
                wide = ops.cast(v.expr, dtype="int32") if v.dtype != "int32" else v.expr
                half = ops.add(wide, _const(1 << (k - 1), "int32"))
                return self._saturate(ops.right_shift(half, _const(k, "int32")), lo, hi, dtype)
        ndim = v.ndim
        ratio = (_along(v.step, v.axis, ndim).astype(np.float64)
                 / _along(step, axis, ndim).astype(np.float64)).astype(np.float32)
        scaled = ops.multiply(ops.cast(v.expr, dtype="float32"), _const(ratio, "float32"))
        return self._saturate(ROUNDING_OPS[rounding](scaled), lo, hi, dtype)

    # ---- ops with rules --------------------------------------------------------------------

    def integer_call(self, call: Call, rule: QuantizeRule, args: list[_Value]) -> _Value | None:
        """`call` on integers as its rule says, or None to run it in float."""
        if rule.realization is Realization.PRODUCT:
            return self.product(call, rule, args) if all(a.is_int for a in args) else None
        if rule.realization is Realization.SUM:
            return self.sum(call, args)
        (v,) = args[:1]
        if len(args) != 1 or not v.is_int:
            return None
        assert v.step is not None
        if v.step.ndim and not rule.keeps_channels(v.axis, v.ndim):
            return None
        if rule.realization is Realization.RESCALE:
            assert rule.integer is not None
            form = rule.integer(call, v.expr, v.step, v.dtype)
            if form is None:
                return None
            step = (v.step.astype(np.float64) * form.factor).astype(np.float32)
            return _Value(form.expr, step, v.axis, form.dtype, _rank(call))
        return _Value(Call(call.op, (v.expr,), call.attrs, span=call.span), v.step, v.axis,
                      v.dtype, _rank(call))

    def common_scale(self, call: Call) -> _Value | None:
        """A call on a tuple of integers (concatenate) with every field requantized to the
        coarsest of their steps, in the widest of their dtypes: nothing overflows, and fields
        already at that step are left as they are. None (float) if a field is a float or has
        per-channel steps."""
        (joined,) = call.args
        if not isinstance(joined, Tuple):
            return None
        fields = [self.visit(f) for f in joined.fields]
        if not fields or any(f.step is None or f.step.ndim for f in fields):
            return None
        dtypes = {f.dtype for f in fields}
        dtype = dtypes.pop() if len(dtypes) == 1 else "int32"
        step = np.float32(max(float(f.step) for f in fields))  # type: ignore[arg-type]
        lo, hi = _saturation(dtype)
        exprs: list[Expr] = []
        for f in fields:
            if float(f.step) != float(step):  # type: ignore[arg-type]
                exprs.append(self.requantize(f, np.asarray(step), -1, NEAREST, lo, hi, dtype))
            else:
                exprs.append(f.expr if f.dtype == dtype else ops.cast(f.expr, dtype=dtype))
        out = Call(call.op, (Tuple(tuple(exprs), span=joined.span),), call.attrs, span=call.span)
        return _Value(out, np.asarray(step), -1, dtype, _rank(call))

    def product(self, call: Call, rule: QuantizeRule, args: list[_Value]) -> _Value:
        a, b = args
        exprs = [a.expr, b.expr]
        if a.dtype != b.dtype:  # uint8 activations with int8 weights: both as int16
            exprs = [ops.cast(e, dtype="int16") for e in exprs]
        out = self.accumulator(call, rule, exprs, [a, b])
        assert a.step is not None and b.step is not None
        step = (a.step * b.step).astype(np.float32)
        ndim = _rank(call)
        if step.ndim and rule.out_axis is None:  # per channel, but along no known axis
            return _Value(self.float(_Value(out, step, a.axis if a.step.ndim else b.axis,
                                            "int32", ndim)))
        axis = rule.out_axis if step.ndim and rule.out_axis is not None else -1
        return _Value(out, step, axis, "int32", ndim)

    def accumulator(self, call: Call, rule: QuantizeRule, exprs: Sequence[Expr],
                    args: list[_Value]) -> Expr:
        """`call` on the integers `exprs`, summed as accumulate.py says, as int32."""
        acc = self.config.accumulator_dtype
        # an activation at its dtype's largest magnitude (a cast to int16 changes no value)
        operands = [a.expr if isinstance(a.expr, Constant) else
                    TensorType(o.checked_type.shape, a.dtype)  # type: ignore[attr-defined]
                    for a, o in zip(args, call.args)]
        op = call.op
        assert isinstance(op, Op)
        bound = worst_case(operands, rule.weight_axis,
                           op.definition.pattern <= OpPattern.BROADCAST)
        if fits(bound, acc):
            status = "proven"
        elif acc == "int32":
            status = "unchecked"
        else:
            status = "widened" if self.config.overflow == "widen" else "checked"
        sums = acc if status in ("proven", "unchecked") else "int32"
        if "out_dtype" in call.attrs:
            out: Expr = Call(call.op, tuple(exprs), Attrs({**call.attrs, "out_dtype": sums}),
                             span=call.span)
        else:
            out = Call(call.op, tuple(ops.cast(e, dtype=sums) for e in exprs), call.attrs,
                       span=call.span)
        if status == "checked":
            out, count = checked_narrowing(out, acc)
            self.counts.append(count)
        self.accumulators.append(Accumulator(self._layer(call), sums if status == "widened"
                                             else acc, status, bound))
        narrow = status == "checked" or sums != "int32"
        # the epilogue (bias, requantization) in int32
        return ops.cast(out, dtype="int32") if narrow else out

    def _layer(self, call: Call) -> str:
        op = call.op
        assert isinstance(op, Op)
        name = op.definition.name
        n = self.layers[name] = self.layers.get(name, 0) + 1
        return f"{name} #{n}" + (f" at {call.span}" if call.span is not None else "")

    def sum(self, call: Call, args: list[_Value]) -> _Value | None:
        a, b = args
        if a.is_int and b.is_int:
            same = a.dtype == b.dtype and a.axis == b.axis and \
                np.array_equal(a.step, b.step)  # type: ignore[arg-type]
            if not same:
                return None
            # two int8s of one step may sum past int8 (a user's rule quantizing both
            # operands of an add): the sum is int32, so it cannot wrap
            x, y = ((a.expr, b.expr) if a.dtype == "int32" else
                    (ops.cast(a.expr, dtype="int32"), ops.cast(b.expr, dtype="int32")))
            return _Value(ops.add(x, y), a.step, a.axis, "int32", _rank(call))
        q, c = (a, b) if a.is_int else (b, a)
        if not isinstance(c.expr, Constant) or q.dtype != "int32":
            return None
        assert q.step is not None
        ndim = _rank(call)
        data = c.expr.data.astype(np.float64)
        if call.op == bias_add.op:
            data = _along(data, call.attrs.axis, ndim)
        quantized = np.round(data / _along(q.step, q.axis, ndim).astype(np.float64))
        if np.abs(quantized).max(initial=0) >= 2 ** 31 - 1:
            return None
        return _Value(ops.add(q.expr, _const(quantized, "int32")), q.step, q.axis, "int32", ndim)
