"""``relay.quantize``: a model or decorated function quantized by the flow of §4.2 (annotate,
calibrate, realize; relaydsl/quantize), as a callable taking and returning floats.

>>> import numpy as np
>>> from relaydsl import relay, relay_model, Tensor, Float
>>> @relay_model
... def quantize_example(x: Tensor[Float, (4, 8)]) -> Tensor[Float, (4, 3)]:
...     return relay.linear(relay.relu(relay.linear(x, num_hidden=16)), num_hidden=3)
>>> model = relay.create_model(quantize_example, seed=0)
>>> batches = [np.random.default_rng(i).normal(size=(4, 8)).astype(np.float32) for i in range(4)]
>>> cfg = relay.QConfig(calibrate_mode="percentile", skip_dense_layer=False)
>>> qf = relay.quantize(model, dataset=batches, config=cfg)
>>> y = qf(batches[0])
>>> bool(np.abs(y - model(batches[0])).max() < 0.05)
True
>>> "int8" in qf.astext() and "int32" in qf.astext()
True
"""
from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable, Sequence
from typing import Any as AnyValue

import numpy as np

from relaydsl.backend.target import Program, get_target
from relaydsl.frontend import annotations
from relaydsl.frontend.frozen import bind_params, call_checked
from relaydsl.frontend.function import RelayFunction
from relaydsl.frontend.model import Model
from relaydsl.frontend.tracebacks import user_facing
from relaydsl.ir.expr import Function, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.printer import astext
from relaydsl.ir.types import FuncType, TensorType
from relaydsl.errors import QuantizationOverflowWarning
from relaydsl.quantize.accumulate import accumulators_of
from relaydsl.quantize.calibrate import Calibrated
from relaydsl.quantize.config import QConfig, current, qconfig
from relaydsl.quantize.rules import register_rule, reset_rule
from relaydsl.quantize.flow import quantize_module


class QuantizedFunction:
    """A quantized program: called with the float arguments of the function it came from,
    returns floats. ``astext()`` shows the realized program, ``simulated`` is the calibrated
    program with simQ (float arithmetic), ``ranges`` each simQ's (kind, range) in program
    order, ``coarsened`` how many products had their weight step raised to keep their
    accumulators from overflowing on the calibration data. ``accumulators`` says how each
    product layer sums and why it cannot overflow silently (relaydsl/quantize/accumulate.py);
    ``overflows`` counts, per checked layer, the elements that saturated over all calls so
    far (each such call warns, or raises with ``overflow="raise"``), ``overflow_count`` their
    total. ``relay.build(qf, target=...)`` compiles it."""

    def __init__(self, name: str, mod: IRModule, entry: str, calibrated: Calibrated,
                 config: QConfig) -> None:
        self.__name__, self.mod, self.entry, self.config = name, mod, entry, config
        self.simulated = calibrated.mod
        self.ranges, self.coarsened = calibrated.ranges, calibrated.coarsened
        self.accumulators = accumulators_of(mod[entry])
        self._checked = [a.layer for a in self.accumulators if a.status == "checked"]
        self.overflows: dict[str, int] = dict.fromkeys(self._checked, 0)  # shared by builds
        fn_type = mod[entry].checked_type
        assert isinstance(fn_type, FuncType)
        self.type = fn_type
        self._programs: dict[tuple, Program] = {}
        self._program: Program | None = None  # what a call runs (a build's)

    @property
    def overflow_count(self) -> int:
        """How many accumulator elements saturated over all calls so far."""
        return sum(self.overflows.values())

    def astext(self, *, show_types: bool = False) -> str:
        """The Relay text of the realized program."""
        return astext(self.mod, show_types=show_types)

    def build(self, target: str | None = None, **options: AnyValue) -> "QuantizedFunction":
        """This function compiled for `target` (llvm by default), as a callable."""
        chosen = get_target(target)
        key = (chosen.name, tuple(sorted(options.items())))
        if key not in self._programs:
            self._programs[key] = chosen.build(self.mod, self.entry, options)
        built = copy.copy(self)
        built._program = self._programs[key]
        return built

    @user_facing
    def __call__(self, *args: AnyValue) -> AnyValue:
        program = self._program or self.build()._program
        assert program is not None
        params = self.mod[self.entry].params  # type: ignore[union-attr]
        out = call_checked(self.__name__, params, self.type.arg_types, args, program)
        if not self._checked:
            return out
        result, counts = out
        saturated = {layer: int(n) for layer, n in zip(self._checked, counts) if int(n)}
        for layer, n in saturated.items():
            self.overflows[layer] += n
        if saturated:
            self._overflowed(saturated)
        return result

    def _overflowed(self, saturated: dict[str, int]) -> None:
        where = "; ".join(f"{layer}: {n} element{'s' * (n != 1)}"
                          for layer, n in saturated.items())
        message = (f"{self.__name__} ({self.config.scheme}): the int16 accumulator overflowed "
                   f"on this input and saturated at the int16 bounds in {where}. Other "
                   "inputs than the calibration data reach further: QConfig(overflow="
                   "\"widen\") sums these layers in int32, nbit_activation=32 sums all.")
        if self.config.overflow == "raise":
            raise OverflowError(message)
        warnings.warn(message, QuantizationOverflowWarning, stacklevel=3)

    def __repr__(self) -> str:
        return f"<quantized {self.__name__} {self.config.scheme}>"


def _float_module(model_or_fn: AnyValue) -> tuple[str, IRModule, str]:
    if isinstance(model_or_fn, Model):
        mod, entry = bind_params(model_or_fn)
        return model_or_fn.fn.__name__, mod, entry
    if isinstance(model_or_fn, RelayFunction):
        if model_or_fn.hidden:
            raise TypeError(f"relay.quantize: model_or_fn {model_or_fn.__name__} has model "
                            "parameters: pass the model, relay.create_model("
                            f"{model_or_fn.__name__})")
        return model_or_fn.__name__, model_or_fn.mod, model_or_fn.global_var.name_hint
    raise TypeError(f"relay.quantize: model_or_fn must be a model (relay.create_model) or a "
                    f"@relay function, got {type(model_or_fn).__name__}")


def _batches(dataset: Iterable[AnyValue] | None, params: Sequence[Var],
             types: Sequence[TensorType]) -> list[tuple[np.ndarray, ...]]:
    """The calibration batches as argument tuples, each checked against the parameter types
    as a call's arguments are (symbolic dimensions agreeing within a batch). A batch is an
    array (one parameter), a tuple or list of the arguments, or, as TVM's dataset, a dict of
    them by parameter name."""
    if dataset is None:
        return []
    if isinstance(dataset, np.ndarray):
        raise TypeError("relay.quantize: dataset must be an iterable of batches (a list of "
                        "arrays, or of argument tuples), not one array; wrap it in a list")
    if isinstance(dataset, (str, bytes, dict)) or not isinstance(dataset, Iterable):
        raise TypeError(f"relay.quantize: dataset must be an iterable of batches (a list of "
                        f"arrays, of argument tuples or of dicts by parameter name), got "
                        f"{type(dataset).__name__}")
    names = [p.name_hint for p in params]
    out = []
    for n, batch in enumerate(dataset):
        if isinstance(batch, dict):
            batch = _by_name(n, batch, names)
        args = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
        if len(args) != len(params):
            raise ValueError(f"relay.quantize: dataset batch {n} has {len(args)} value(s), "
                             f"the function takes {len(params)} argument(s) "
                             f"({', '.join(names)})")
        bindings: dict = {}
        try:
            out.append(tuple(annotations.check_argument(name, t, a, bindings)
                             for name, t, a in zip(names, types, args)))
        except TypeError as e:
            raise ValueError(f"relay.quantize: dataset batch {n}: {e}") from None
    return out  # type: ignore[return-value]


def _by_name(n: int, batch: dict, names: list[str]) -> list[AnyValue]:
    """A dict batch's values in parameter order (TVM's dataset: input name -> array)."""
    unknown = [k for k in batch if k not in names]
    missing = [k for k in names if k not in batch]
    if unknown or missing:
        said = [f"has no parameter {', '.join(map(repr, unknown))}"] if unknown else []
        said += [f"lacks {', '.join(map(repr, missing))}"] if missing else []
        raise ValueError(f"relay.quantize: dataset batch {n} {' and '.join(said)}; the "
                         f"function takes {', '.join(names)}")
    return [batch[k] for k in names]


def _runner(mod: IRModule, entry: str) -> AnyValue:
    return get_target("llvm").build(mod, entry, {})


@user_facing
def quantize(model_or_fn: AnyValue, dataset: Iterable[AnyValue] | None = None,
             config: QConfig | None = None) -> QuantizedFunction:
    """`model_or_fn` (a model, or a @relay function of tensors) quantized under `config`
    (default: the current ``relay.qconfig``), calibrated on `dataset` (batches: arrays, or
    tuples of the function's arguments). Returns a QuantizedFunction, float in and out."""
    config = current() if config is None else config
    if not isinstance(config, QConfig):
        raise TypeError(f"relay.quantize: config must be a relay.QConfig, got "
                        f"{type(config).__name__}")
    name, mod, entry = _float_module(model_or_fn)
    main = mod[entry]
    assert isinstance(main, Function)
    types = [p.checked_type for p in main.params]
    if not all(isinstance(t, TensorType) and t.dtype == "float32" for t in types):
        raise TypeError(f"relay.quantize: {name} must take float32 tensors only")
    batches = _batches(dataset, main.params, types)  # type: ignore[arg-type]
    if not batches and config.calibrate_mode != "global_scale":
        given = "no dataset was given" if dataset is None else "dataset has no batch"
        raise ValueError(f"relay.quantize: calibrate_mode {config.calibrate_mode!r} needs "
                         f"calibration data and {given}: pass dataset= (a list of input "
                         "batches), or use calibrate_mode='global_scale', which needs none")
    realized, calibrated = quantize_module(mod, entry, batches, config, _runner)
    return QuantizedFunction(name, realized, entry, calibrated, config)


# TVM's spellings: relay.quantize.qconfig(...), relay.quantize.current_qconfig(), and its
# register_annotate_function, a user's rule for an op
quantize.qconfig = qconfig  # type: ignore[attr-defined]
quantize.current_qconfig = current  # type: ignore[attr-defined]
quantize.QConfig = QConfig  # type: ignore[attr-defined]
quantize.register_rule = register_rule  # type: ignore[attr-defined]
quantize.reset_rule = reset_rule  # type: ignore[attr-defined]
