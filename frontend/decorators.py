"""``@relay`` and ``@relay_model``: a Python function translated to Relay, type-checked and run.

Decorating makes a `RelayFunction` (function.py), whose calls with a meaning of their own
(layers, the training API, models...) special_calls.py translates. Calling it type-checks the
module of every function it reaches, compiles once per (target, options, PassContext), checks
the arguments against the annotations and runs.

>>> import numpy as np
>>> from relaydsl import relay, Tensor, Float
>>> @relay
... def scale(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
...     return x * 2.0
>>> scale(np.ones(3, np.float32))
array([2., 2., 2.], dtype=float32)
"""
from __future__ import annotations

from typing import Callable

from relaydsl.frontend.function import RelayFunction, RelayModelFunction
from relaydsl.frontend.special_calls import SpecialCalls
from relaydsl.frontend.tracebacks import user_facing


@user_facing
def relay_model_decorator(pyfunc: Callable) -> RelayModelFunction:
    """``@relay_model``: a function whose layer calls own hidden parameters (Figure 4)."""
    if not callable(pyfunc):
        raise TypeError(f"@relay_model decorates a function, got {type(pyfunc).__name__}")
    return RelayModelFunction(pyfunc, SpecialCalls)


@user_facing
def relay_decorator(pyfunc: Callable) -> RelayFunction:
    """``@relay``: see the module docstring."""
    if isinstance(pyfunc, RelayFunction):
        return pyfunc
    if not callable(pyfunc):
        raise TypeError(f"@relay decorates a function, got {type(pyfunc).__name__}")
    return RelayFunction(pyfunc, SpecialCalls)
