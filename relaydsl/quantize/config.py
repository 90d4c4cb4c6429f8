"""QConfig: the settings of one quantization (TVM's ``relay.quantize.qconfig``), and the
context manager ``qconfig`` that makes one current.

The scheme m/n is ``nbit_input``/``nbit_activation``: m-bit inputs and weights, n-bit
accumulators (8/32, 8/16 and 16/32; the paper's §5.4). ``calibrate_mode`` picks how
activation steps are calibrated (calibrate.py), ``weight_scale`` how weight steps are taken
from the weights ("max": the largest magnitude; "power2": that rounded up to a power of two,
so requantizing is a shift), ``per_channel`` one weight step per output channel.
``skip_conv_layers`` are the indices (in program order) of conv2d calls left in float (TVM's
default skips the first), ``skip_dense_layer`` leaves every dense in float (TVM's default).
``rounding`` is how values become integers: "round" (to nearest, ties to even), "floor",
"ceil", or "stochastic" (weights rounded up with probability equal to their fraction, seeded
by ``seed``; activations, which have no training noise to average out, round to nearest).
``overflow`` is what an 8/16 layer does whose int16 accumulator some input could overflow
(accumulate.py): "warn" (sum in int32, saturate into int16, warn naming the layer when that
clipped anything), "raise" (the same, an OverflowError instead), or "widen" (sum that layer
in int32).

>>> cfg = QConfig(nbit_input=8, nbit_weight=8, nbit_activation=16)
>>> cfg.scheme, cfg.accumulator_dtype, cfg.input_dtype
('8/16', 'int16', 'int8')
>>> QConfig(rounding="nearest")
Traceback (most recent call last):
...
ValueError: QConfig rounding must be one of round, floor, ceil, stochastic, got 'nearest'
>>> with qconfig(calibrate_mode="percentile"):
...     current().calibrate_mode
'percentile'
"""
from __future__ import annotations

import contextlib
import difflib
import threading
from collections.abc import Generator
from dataclasses import dataclass, fields, replace
from typing import Any as AnyValue

from relaydsl.ir.node import conforms

CALIBRATE_MODES = ("global_scale", "kl_divergence", "percentile", "mse")
WEIGHT_SCALES = ("max", "power2")
ROUNDINGS = ("round", "floor", "ceil", "stochastic")
SCHEMES = ("8/32", "8/16", "16/32")
OVERFLOWS = ("warn", "raise", "widen")


def _one_of(name: str, value: AnyValue, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"QConfig {name} must be one of {', '.join(choices)}, got {value!r}")


@dataclass(frozen=True)
class QConfig:
    """The settings of a quantization; see the module docstring. Frozen and checked: an
    unknown mode, scheme or rounding is a ValueError naming the field."""

    nbit_input: int = 8
    nbit_weight: int = 8
    nbit_activation: int = 32
    calibrate_mode: str = "global_scale"
    global_scale: float = 8.0
    weight_scale: str = "max"
    per_channel: bool = False
    signed: bool = True
    rounding: str = "round"
    percentile: float = 99.99
    skip_conv_layers: tuple[int, ...] = (0,)
    skip_dense_layer: bool = True
    calibrate_samples: int = 2 ** 20
    seed: int = 0
    overflow: str = "warn"

    def __post_init__(self) -> None:
        _one_of("calibrate_mode", self.calibrate_mode, CALIBRATE_MODES)
        _one_of("weight_scale", self.weight_scale, WEIGHT_SCALES)
        _one_of("rounding", self.rounding, ROUNDINGS)
        _one_of("overflow", self.overflow, OVERFLOWS)
        if self.nbit_weight != self.nbit_input:
            raise ValueError(f"QConfig nbit_weight must equal nbit_input (the m of an m/n "
                             f"scheme), got {self.nbit_weight} and {self.nbit_input}")
        _one_of("scheme (nbit_input/nbit_activation)", self.scheme, SCHEMES)
        if not self.signed and self.scheme != "8/32":
            raise ValueError(f"QConfig signed=False (uint8 activations) is for the 8/32 scheme, "
                             f"got {self.scheme}")
        if not (conforms(self.global_scale, (int, float)) and self.global_scale > 0):
            raise ValueError(f"QConfig global_scale must be a positive number, "
                             f"got {self.global_scale!r}")
        if not 0 < self.percentile <= 100:
            raise ValueError(f"QConfig percentile must be in (0, 100], got {self.percentile!r}")
        layers = self.skip_conv_layers
        if conforms(layers, int) or not all(conforms(i, int) for i in layers):
            raise ValueError(f"QConfig skip_conv_layers must be a tuple of conv2d indices, "
                             f"got {layers!r}")
        object.__setattr__(self, "skip_conv_layers", tuple(layers))

    @property
    def scheme(self) -> str:
        """m/n: the input bits over the accumulator bits."""
        return f"{self.nbit_input}/{self.nbit_activation}"

    @property
    def input_dtype(self) -> str:
        """The integer dtype quantized inputs and weights take."""
        return f"{'' if self.signed else 'u'}int{self.nbit_input}"

    @property
    def accumulator_dtype(self) -> str:
        """The dtype products are summed in."""
        return f"int{self.nbit_activation}"

    @property
    def dtype_input(self) -> str:
        """TVM's name of ``input_dtype``."""
        return self.input_dtype

    @property
    def dtype_weight(self) -> str:
        """The integer dtype quantized weights take (always signed)."""
        return f"int{self.nbit_weight}"

    @property
    def dtype_activation(self) -> str:
        """TVM's name of ``accumulator_dtype``."""
        return self.accumulator_dtype

    def replace(self, **changes: AnyValue) -> "QConfig":
        """This config with `changes` (checked as a new one). TVM's ``dtype_input``,
        ``dtype_weight`` and ``dtype_activation`` set the bits (and an unsigned input the
        signedness) their dtypes say.

        >>> QConfig().replace(dtype_activation="int16").scheme
        '8/16'
        """
        known = [f.name for f in fields(self)]
        for name in list(changes):
            if name in _TVM_DTYPES:
                _dtype_setting(name, changes.pop(name), changes)
            elif name not in known:
                close = difflib.get_close_matches(name, known + list(_TVM_DTYPES), n=3)
                hint = (f"did you mean {' or '.join(close)}?" if close else
                        f"known: {', '.join(known + list(_TVM_DTYPES))}")
                raise TypeError(f"QConfig has no setting {name!r}; {hint}")
        return replace(self, **changes)


_TVM_DTYPES = {"dtype_input": "nbit_input", "dtype_weight": "nbit_weight",
               "dtype_activation": "nbit_activation"}


def _dtype_setting(name: str, dtype: AnyValue, changes: dict[str, AnyValue]) -> None:
    """Add to `changes` what TVM's setting `name` (``dtype_input="int8"``...) means."""
    bits = {"int8": 8, "int16": 16, "int32": 32, "uint8": 8}.get(str(dtype))
    if bits is None or (dtype == "uint8" and name != "dtype_input"):
        raise ValueError(f"QConfig {name} must be int8, int16 or int32"
                         f"{' (or uint8)' if name == 'dtype_input' else ''}, got {dtype!r}")
    nbit = _TVM_DTYPES[name]
    if changes.get(nbit, bits) != bits:
        raise ValueError(f"QConfig {name}={dtype!r} and {nbit}={changes[nbit]!r} disagree")
    changes[nbit] = bits
    if name == "dtype_input":
        changes["signed"] = dtype != "uint8"


_LOCAL = threading.local()


def current() -> QConfig:
    """The innermost ``qconfig`` in effect, else the default QConfig."""
    stack = getattr(_LOCAL, "stack", [])
    return stack[-1] if stack else QConfig()


@contextlib.contextmanager
def qconfig(**settings: AnyValue) -> Generator[QConfig, None, None]:
    """Make the current config the enclosing one with `settings` changed, inside a ``with``
    (TVM's spelling); ``relay.quantize`` without ``config=`` uses it."""
    cfg = current().replace(**settings)
    stack = _LOCAL.__dict__.setdefault("stack", [])
    stack.append(cfg)
    try:
        yield cfg
    finally:
        stack.pop()
