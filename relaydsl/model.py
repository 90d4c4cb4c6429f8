"""Models: the parameters of a ``@relay_model`` function, created, run and applied.

``create_model(f)`` type-checks the model function, reads each hidden
parameter's shape from type inference (never from guesses in the frontend),
and initialises it: weights from a Gaussian with mean 0 and a small sigma
(or Glorot-uniform), biases and shifts at 0, scales and variances at 1.

>>> import numpy as np
>>> from relaydsl import relay, relay_model, Tensor, Float
>>> @relay_model
... def affine(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 2)]:
...     return relay.linear(x, num_hidden=2)
>>> model = relay.create_model(affine, seed=0)
>>> list(model.params), model.params["linear_0.weight"].shape
(['linear_0.weight', 'linear_0.bias'], (2, 3))
>>> model(np.ones((4, 3), np.float32)).shape
(4, 2)
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any as AnyValue

import numpy as np

from relaydsl.errors import RelayTypeError
from relaydsl.ir.types import TensorType, type_to_str

if TYPE_CHECKING:
    from frontend.decorators import RelayFunction, RelayModelFunction

INITIALISERS = ("normal", "glorot")


class Model:
    """The parameters of one model function, by name, in the function's order."""

    def __init__(self, fn: "RelayModelFunction", params: dict[str, np.ndarray]):
        self.fn = fn
        self.params = params

    def __call__(self, *args: AnyValue) -> AnyValue:
        """The model's forward pass."""
        return self.apply(self.fn, *args)

    def apply(self, fn: "RelayFunction", *args: AnyValue) -> AnyValue:
        """Run a decorated function that uses this model (e.g. a loss) with its parameters."""
        return fn.build().run(args, self.values_for(fn))

    def values_for(self, fn: "RelayFunction") -> list[np.ndarray]:
        """The values of `fn`'s hidden parameters under this model."""
        values = []
        for h in fn.hidden:
            owner = h.model or fn
            if owner is not self.fn:
                raise TypeError(f"{fn.__name__} uses the model {owner.__name__}, not "
                                f"{self.fn.__name__}")
            values.append(self.params[h.name])
        return values

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {v.shape}" for k, v in self.params.items())
        return f"<Model of {self.fn.__name__}: {shapes}>"


def create_model(fn: "RelayModelFunction", *, seed: int = 0, init: str = "normal",
                 sigma: float = 0.01) -> Model:
    """Parameters for `fn`, shaped by type inference and initialised with `init`.

    init: "normal" (mean 0, standard deviation `sigma`) or "glorot" (uniform, Glorot & Bengio).
    """
    from frontend.decorators import RelayModelFunction

    if not isinstance(fn, RelayModelFunction):
        raise TypeError(f"create_model takes a @relay_model function, got {fn!r}")
    if init not in INITIALISERS:
        raise ValueError(f"init must be one of {INITIALISERS}, got {init!r}")
    rng = np.random.default_rng(seed)
    mod_fn = fn.mod[fn.global_var]
    params: dict[str, np.ndarray] = {}
    for h, var in zip(fn.hidden, mod_fn.params[fn.num_user_params:]):
        t = var.checked_type
        if not isinstance(t, TensorType) or not t.is_static:
            raise RelayTypeError(
                f"the shape of parameter {h.name} is not determined by the program: "
                f"{type_to_str(t)} (annotate the model's inputs with static shapes)", var.span)
        shape, dtype = t.concrete_shape(), str(t.dtype)
        if h.spec.kind == "zeros":
            value = np.zeros(shape, dtype)
        elif h.spec.kind == "ones":
            value = np.ones(shape, dtype)
        elif init == "glorot":
            fan_in, fan_out = _fans(shape)
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            value = rng.uniform(-limit, limit, shape).astype(dtype)
        else:
            value = (rng.standard_normal(shape) * sigma).astype(dtype)
        params[h.name] = value
    return Model(fn, params)


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a dense (out, in) or conv (out, in, kh, kw) weight."""
    if len(shape) < 2:
        return shape[0] if shape else 1, shape[0] if shape else 1
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive
