"""Calibrate: the steps of every simQ of an annotated program, from the user's data (§4.2).

A simQ's step ``s`` maps its range ``rho`` onto the integers as the paper's formula does:
``s = rho / 2^(β-σ)`` (so a power-of-two range gives a power-of-two step, and requantizing
between such steps is a shift). Activation ranges
come from running the float program (every simQ an identity) over the calibration batches and
watching each simQ's input; weights' from the weights themselves. The modes:

- ``global_scale`` (the paper's first): one range for every activation, the config's
  ``global_scale`` times the power of two that is the smallest with no activation overflowing
  (swept down and up from ``global_scale``): every step a power of two;
- ``kl_divergence`` (MXNet's and TensorRT's): the range whose clipped, quantized histogram of
  ``|x|`` is closest in KL divergence to the original's;
- ``percentile``: the ``percentile``-th percentile of ``|x|``;
- ``mse`` (the paper's vision scheme): the range minimising the mean-squared quantization error;
  for weights with ``per_channel``, one per output channel.

Weights take ``max`` (their largest magnitude, per tensor or per channel) or ``power2`` (that
rounded up to a power of two), except in ``mse`` mode. Then accumulators: a product's integer
result is bounded by the largest ``|y| / (s_x · s_w)`` seen on the data; where that, with
HEADROOM, would overflow the accumulator (8/16 above all), the operands' steps double until it
fits: overflow is avoided, at the price of precision, and reported.

``calibrate`` runs programs through the ``run`` it is given (the frontend's compiled
executables): the core runs nothing itself.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any as AnyValue

import numpy as np

from relaydsl.ir.expr import Call, Constant, Expr, Function, Let, Tuple
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator, deep_recursion, let_chain, post_order
from relaydsl.op.quantize import qrange, simulated_quantize
from relaydsl.op.quantize_rule import Realization
from relaydsl.quantize.config import QConfig
from relaydsl.quantize.rules import rule_of
from relaydsl.typing.infer import infer_types

Runner = Callable[[IRModule, str], Callable[..., AnyValue]]


@dataclass(frozen=True)
class Calibrated:
    """What calibration chose: the annotated module with its steps set, each simQ's kind,
    range and step (in program order), and the products whose weights were coarsened to
    keep their accumulators from overflowing (their number)."""

    mod: IRModule
    ranges: tuple[tuple[str, float], ...]
    coarsened: int


def is_simq(e: Expr) -> bool:
    return isinstance(e, Call) and e.op == simulated_quantize.op


class _Strip(ExprMutator):
    """simQ(x, s) -> x: the float program annotation started from."""

    def visit_call(self, call: Call) -> Expr:
        return self.visit(call.args[0]) if is_simq(call) else super().visit_call(call)


def _products(body: Expr) -> list[Call]:
    """The calls of PRODUCT ops whose operands are all simQ (their accumulators)."""
    found: list[Call] = []

    def visit(e: Expr) -> None:
        if isinstance(e, Call) and all(is_simq(a) for a in e.args) and hasattr(e.op, "definition"):
            rule = rule_of(e.op.definition)  # type: ignore[union-attr]
            if rule is not None and rule.realization is Realization.PRODUCT:
                found.append(e)

    post_order(body, visit)
    return found


def levels(q: Call) -> int:
    """2^(β-σ) of a simQ: its range over its step."""
    return 2 ** (q.attrs.nbit - int(q.attrs.signed))


def simqs(body: Expr) -> list[Call]:
    """The simQ calls of `body`, in program (post) order."""
    found: list[Call] = []
    post_order(body, lambda e: found.append(e) if is_simq(e) else None)  # type: ignore[func-returns-value]
    return found


def calibrate(mod: IRModule, entry: str, batches: Sequence[tuple[np.ndarray, ...]],
              config: QConfig, run: Runner) -> Calibrated:
    """`mod` (annotated) with every simQ's step calibrated; see the module docstring."""
    # a deep network is as deep an expression (the passes before and after recurse as deep)
    with deep_recursion():
        return _calibrate(mod, entry, batches, config, run)


def _calibrate(mod: IRModule, entry: str, batches: Sequence[tuple[np.ndarray, ...]],
               config: QConfig, run: Runner) -> Calibrated:
    main = mod[entry]
    assert isinstance(main, Function)
    quantizers = simqs(main.body)
    inputs = [q for q in quantizers if q.attrs.kind == "input"]
    products = _products(main.body)
    watched = [q.args[0] for q in inputs] + list(products)
    # with no data (global_scale only), every activation takes the global range as it is
    nothing: dict[int, np.ndarray] = {}
    samples = _watch(mod, entry, main, watched, batches, config, run) if watched and batches \
        else [(np.zeros(0, np.float32), nothing) for _ in watched]
    steps: dict[Expr, np.ndarray] = {}
    act_ranges = _activation_ranges(inputs, samples[:len(inputs)], config)
    for q, r in zip(inputs, act_ranges):
        steps[q] = np.asarray(r / levels(q), np.float32)
    for q in quantizers:
        if q.attrs.kind == "weight":
            steps[q] = _weight_step(q, config)
    coarsened = 0
    for p, (_, amax) in zip(products, samples[len(inputs):]):
        if amax:
            coarsened += _fit_accumulator(p, amax, steps, config)
    ranges = [(q.attrs.kind, float(np.max(steps[q]) * levels(q))) for q in quantizers]
    out = mod.copy()
    out.add(mod.get_global_var(entry), _SetSteps(steps).visit(main))  # type: ignore[arg-type]
    return Calibrated(infer_types(out), tuple(ranges), coarsened)


def _channel_max(v: np.ndarray, axis: int) -> np.ndarray:
    """The largest magnitude of `v` per index of `axis` (of a scalar: itself)."""
    if v.ndim == 0:
        return np.abs(v).reshape(1)
    return np.abs(np.moveaxis(v, axis, 0)).reshape(v.shape[axis], -1).max(axis=1)


def _watch(mod: IRModule, entry: str, main: Function, watched: list[Expr],
           batches: Sequence[tuple[np.ndarray, ...]], config: QConfig, run: Runner
           ) -> list[tuple[np.ndarray, dict[int, np.ndarray]]]:
    """For each watched expression over the batches, in the float program (its simQs and
    those of the lets it is under stripped): a sample of its values (at most
    ``calibrate_samples`` over all batches), and its largest magnitude per channel along axis
    1 and along the last axis (what per-channel accumulator bounds need)."""
    stats = mod.copy()
    body = _Strip().visit(_in_scope(main.body, Tuple(tuple(watched))))
    stats.add(mod.get_global_var(entry), Function(main.params, body))
    fn = run(infer_types(stats), entry)
    rng = np.random.default_rng(config.seed)
    per_batch = max(1, config.calibrate_samples // max(1, len(batches)))
    kept: list[list[np.ndarray]] = [[] for _ in watched]
    amax: list[dict[int, np.ndarray]] = [{} for _ in watched]
    for batch in batches:
        for i, v in enumerate(fn(*batch)):
            v = np.asarray(v, np.float32)
            flat = v.reshape(-1)
            kept[i].append(flat if flat.size <= per_batch else rng.choice(flat, per_batch))
            for axis in ((1, -1) if v.ndim >= 2 else (-1,)):
                m = _channel_max(v, axis)
                amax[i][axis] = np.maximum(amax[i].get(axis, m), m)
    return [(np.concatenate(k), a) for k, a in zip(kept, amax)]


def _in_scope(body: Expr, result: Expr) -> Expr:
    """`result` under the lets that open `body`: a watched expression may use their
    variables (graph normal form keeps a let every MAX_DEPTH nodes of a deep network, one
    with a type ascription and one of a closure)."""
    chain, _ = let_chain(body) if isinstance(body, Let) else ([], body)
    for let in reversed(chain):
        result = Let(let.var, let.value, result, span=let.span)
    return result


# ---- activations --------------------------------------------------------------------------


def _activation_ranges(inputs: list[Call], samples: list[tuple[np.ndarray, dict[int, np.ndarray]]],
                       config: QConfig) -> list[float]:
    maxima = [float(np.abs(s).max()) if s.size else 0.0 for s, _ in samples]
    if config.calibrate_mode == "global_scale":
        return [global_range(max(maxima, default=0.0), config.global_scale)] * len(inputs)
    out: list[float] = []
    for q, (s, _), m in zip(inputs, samples, maxima):
        qmax = qrange(q.attrs.nbit, q.attrs.signed)[1]
        if m == 0.0:
            out.append(1.0)
        elif config.calibrate_mode == "percentile":
            out.append(float(np.percentile(np.abs(s), config.percentile)) or m)
        elif config.calibrate_mode == "kl_divergence":
            out.append(kl_divergence_range(s, qmax) or m)
        else:
            out.append(float(mse_range(s[None, :], qmax, levels(q), q.attrs.rounding)[0]))
    return out


def global_range(largest: float, global_scale: float) -> float:
    """The smallest ``global_scale · 2^k`` (k an integer) that `largest` does not exceed.

    >>> global_range(3.0, 8.0), global_range(9.0, 8.0)
    (4.0, 16.0)
    """
    if largest <= 0:
        return global_scale
    return global_scale * 2.0 ** math.ceil(math.log2(largest / global_scale))


def kl_divergence_range(x: np.ndarray, qmax: int, bins: int = 2048) -> float:
    """The clipping range of ``|x|`` minimising KL(P || Q), P the histogram clipped at the
    range (the outliers in its last bin), Q that histogram merged into ``qmax + 1`` levels and
    spread back over the bins that were non-zero (TensorRT's, MXNet's ``_get_optimal_threshold``).
    """
    a = np.abs(x)
    top = float(a.max()) if a.size else 0.0
    # exact zeros (a relu's many) are exact at every range: in the first bin they would
    # weigh on every candidate's divergence and favour the narrowest ranges
    a = a[a > 0]
    levels = qmax + 1
    if top == 0.0 or levels >= bins:
        return top
    hist, edges = np.histogram(a, bins=bins, range=(0.0, top))
    hist = hist.astype(np.float64)
    best, best_i = math.inf, bins
    for i in range(levels, bins + 1, max(1, (bins - levels) // 256)):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        nonzero = p > 0
        # merge the i bins into `levels` groups, spread each group's mass over its non-zero bins
        group = (np.arange(i) * levels) // i
        mass = np.bincount(group, weights=hist[:i], minlength=levels)
        count = np.bincount(group, weights=nonzero.astype(np.float64), minlength=levels)
        q = np.where(nonzero, mass[group] / np.maximum(count[group], 1), 0.0)
        ps, qs = p[nonzero] / p.sum(), q[nonzero]
        if qs.sum() == 0:
            continue
        qs = qs / qs.sum()
        kl = float(np.sum(ps * np.log(ps / np.maximum(qs, 1e-12))))
        if kl < best:
            best, best_i = kl, i
    return float(edges[best_i]) if best_i < bins else top


def mse_range(x: np.ndarray, qmax: int, levels: int, rounding: str = "round",
              candidates: int = 64) -> np.ndarray:
    """For each row of `x`, the range in ``(0, max|row|]`` minimising the mean-squared error
    of quantizing the row with step ``range / levels``, clipped to ``±qmax`` (a grid of
    `candidates` fractions)."""
    top = np.abs(x).max(axis=1).astype(np.float64)
    top = np.where(top > 0, top, 1.0)
    fractions = np.linspace(1.0 / candidates, 1.0, candidates)
    best = np.full(x.shape[0], np.inf)
    out = top.copy()
    rnd = getattr(np, rounding)
    for f in fractions:
        step = (top * f / levels)[:, None]
        err = ((np.clip(rnd(x / step), -qmax, qmax) * step - x) ** 2).mean(axis=1)
        better = err < best
        best = np.where(better, err, best)
        out = np.where(better, top * f, out)
    return out


# ---- weights and accumulators -------------------------------------------------------------


def _weight_step(q: Call, config: QConfig) -> np.ndarray:
    w = q.args[0]
    if not isinstance(w, Constant):
        raise ValueError("a weight quantized by annotation must be a constant")
    data = w.data.astype(np.float32)
    qmax = qrange(q.attrs.nbit, q.attrs.signed)[1]
    per_channel = np.ndim(q.args[1].data) == 1  # type: ignore[union-attr]
    rows = (np.moveaxis(data, q.attrs.axis, 0).reshape(data.shape[q.attrs.axis], -1)
            if per_channel else data.reshape(1, -1))
    if config.calibrate_mode == "mse":
        ranges = mse_range(rows, qmax, levels(q), q.attrs.rounding)
    else:
        ranges = np.abs(rows).max(axis=1).astype(np.float64)
        ranges = np.where(ranges > 0, ranges, 1.0)
        if config.weight_scale == "power2":
            ranges = 2.0 ** np.ceil(np.log2(ranges))
    step = (ranges / levels(q)).astype(np.float32)
    return step if per_channel else step.reshape(())


HEADROOM = 1.25
"""How far above the largest accumulator seen on the calibration data the accumulator's range
must reach (other data may go further; an integer sum that overflows wraps)."""


def _fit_accumulator(product: Call, amax: dict[int, np.ndarray], steps: dict[Expr, np.ndarray],
                     config: QConfig) -> int:
    """Coarsen the steps of `product`'s operands by powers of two until its largest
    accumulator (times HEADROOM) fits; 1 if it had to. The factor is split between the two
    operands (the activation's square root of it, shared by every channel), which costs each
    half the bits that coarsening one of them alone would."""
    a, b = product.args
    weight = b if b.attrs.kind == "weight" or a.attrs.kind != "weight" else a  # type: ignore[union-attr]
    other = a if weight is b else b
    rule = rule_of(product.op.definition)  # type: ignore[union-attr]
    out_axis = rule.out_axis if rule is not None and rule.out_axis is not None else -1
    largest = amax.get(out_axis, amax[-1])
    ws, xs = steps[weight], steps[other]
    limit = (2 ** (config.nbit_activation - 1) - 1) / HEADROOM
    bound = np.asarray(largest, np.float64) / (np.float64(xs) * ws.astype(np.float64))
    if ws.ndim == 0:
        bound = np.max(bound)
    doublings = np.ceil(np.log2(np.maximum(bound, 1.0) / limit)).clip(0)
    if not np.any(doublings):
        return 0
    shared = np.floor(np.max(doublings) / 2)
    steps[other] = (xs * 2.0 ** shared).astype(np.float32)
    steps[weight] = (ws * 2.0 ** np.maximum(doublings - shared, 0)).astype(np.float32)
    return 1


class _SetSteps(ExprMutator):
    def __init__(self, steps: dict[Expr, np.ndarray]) -> None:
        super().__init__()
        self.steps = steps

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if call in self.steps and isinstance(new, Call):
            step = Constant(np.asarray(self.steps[call], np.float32))
            return Call(new.op, (new.args[0], step), new.attrs, new.type_args, span=new.span)
        return new
