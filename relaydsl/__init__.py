"""relaydsl: a Python-embedded, statically typed, differentiable deep-learning language on Relay.

>>> import numpy as np
>>> from relaydsl import relay, Tensor, Float
>>> @relay
... def f(x: Tensor[Float, ("n", 2)]) -> Tensor[Float, ("n", 2)]:
...     return relay.tanh(x) + 1.0
>>> f(np.zeros((3, 2), np.float32)).shape
(3, 2)
"""
from importlib import metadata as _metadata

from relaydsl.errors import (
    DSLSyntaxError, IRError, ModelFileError, ParseError, RelayError, RelayTypeError, SettingError,
)
import relaydsl.op  # defines every op before anything builds Relay
import relaydsl.prelude  # noqa: F401  (installs the prelude every IRModule starts with)

# The user-facing names live in the frontend package; imported last (it builds on relaydsl).
from relaydsl.frontend.annotations import (
    Bool, Float, Float16, Float32, Float64, Fn, Int, Int8, Int16, Int32, Int64, Tensor, UInt8,
)
from relaydsl.frontend.decorators import relay_model_decorator as relay_model
from relaydsl.frontend.model import Model
from relaydsl.frontend.namespace import relay

try:
    __version__ = _metadata.version("relaydsl")
except _metadata.PackageNotFoundError:  # a source tree on the path, not installed
    __version__ = "0+unknown"

__all__ = [
    "Bool", "DSLSyntaxError", "Float", "Float16", "Float32", "Float64", "Fn", "IRError", "Int",
    "Int8", "Int16", "Int32", "Int64", "Model", "ModelFileError", "ParseError", "RelayError",
    "RelayTypeError", "SettingError", "Tensor", "UInt8", "relay", "relay_model",
]
