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

Modes, as in PyTorch and flax, but chosen by what is done rather than by a flag to set:
``relay.grad(model, loss, ...)`` is a training step and runs the model in **training mode**
(batch_norm normalises with the batch statistics and updates its running statistics in
``model.params``); everything else -- calling the model, ``model.apply``, ``export_model``
-- runs it in **inference mode** (batch_norm uses the running statistics, so an example's
prediction does not depend on the rest of its batch). ``model.params`` holds the trainable
parameters and the model's state (``model.state_names``: running statistics), like
PyTorch's ``state_dict``; gradients and optimisers touch only the trainable ones.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any as AnyValue

import numpy as np

from relaydsl.errors import RelayTypeError
from relaydsl.ir.types import TensorType, type_to_str

if TYPE_CHECKING:
    from relaydsl.frontend.decorators import RelayFunction, RelayModelFunction

INITIALISERS = ("normal", "glorot")


class Model:
    """The parameters of one model function, by name, in the function's order."""

    def __init__(self, fn: "RelayModelFunction", params: dict[str, np.ndarray]):
        self.fn = fn
        self.params = params

    @property
    def state_names(self) -> tuple[str, ...]:
        """The entries of ``params`` that are state, updated by training steps rather than
        by gradients (batch_norm's running mean and variance)."""
        return tuple(h.name for h in self.fn.hidden if h.spec.state)

    def __call__(self, *args: AnyValue) -> AnyValue:
        """The model's forward pass, in inference mode."""
        return self.apply(self.fn, *args)

    def apply(self, fn: "RelayFunction", *args: AnyValue) -> AnyValue:
        """Run a decorated function that uses this model (e.g. a loss) with its parameters,
        in inference mode."""
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
    from relaydsl.frontend.decorators import RelayModelFunction

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


# ---- training: optimisers and parameter updates --------------------------------------------

class SGD:
    """Plain stochastic gradient descent: p -= lr * g."""

    def __init__(self, lr: float = 0.01):
        self.lr = lr

    def step(self, model: Model, grads: dict[str, np.ndarray]) -> None:
        for name, g in grads.items():
            model.params[name] -= np.asarray(self.lr * g, model.params[name].dtype)


class Momentum:
    """SGD with momentum: v = momentum * v + g; p -= lr * v."""

    def __init__(self, lr: float = 0.01, momentum: float = 0.9):
        self.lr, self.momentum = lr, momentum
        self._velocity: dict[tuple[int, str], np.ndarray] = {}

    def step(self, model: Model, grads: dict[str, np.ndarray]) -> None:
        for name, g in grads.items():
            key = (id(model), name)
            v = self._velocity.get(key)
            v = g.copy() if v is None else self.momentum * v + g
            self._velocity[key] = v
            model.params[name] -= np.asarray(self.lr * v, model.params[name].dtype)


class Adam:
    """Adam (Kingma & Ba): bias-corrected first and second moment estimates."""

    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self._state: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, int]] = {}

    def step(self, model: Model, grads: dict[str, np.ndarray]) -> None:
        for name, g in grads.items():
            key = (id(model), name)
            m, v, t = self._state.get(key, (np.zeros_like(g), np.zeros_like(g), 0))
            t += 1
            m = self.beta1 * m + (1 - self.beta1) * g
            v = self.beta2 * v + (1 - self.beta2) * g * g
            self._state[key] = (m, v, t)
            m_hat = m / (1 - self.beta1 ** t)
            v_hat = v / (1 - self.beta2 ** t)
            update = self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
            model.params[name] -= np.asarray(update, model.params[name].dtype)


_OPTIMISERS = {"sgd": SGD, "momentum": Momentum, "adam": Adam}


def update_model_params(model: Model, grads: dict[str, np.ndarray], lr: float = 0.01,
                        optimizer: "str | SGD | Momentum | Adam" = "sgd") -> None:
    """Apply gradients to the model's parameters in place.

    `optimizer` is "sgd" (default), "momentum", "adam", or an optimiser object (SGD, Momentum,
    Adam), which keeps its state (velocities, moments) across calls. A string keeps that state
    on the model.
    """
    unknown = sorted(set(grads) - set(model.params))
    if unknown:
        raise KeyError(f"gradients for parameters the model does not have: {unknown}")
    state = sorted(set(grads) & set(model.state_names))
    if state:
        raise KeyError(f"gradients for model state, which training steps update, not "
                       f"gradients: {state}")
    for name, g in grads.items():
        if np.shape(g) != model.params[name].shape:
            raise ValueError(f"the gradient of {name} has shape {np.shape(g)}, the parameter "
                             f"{model.params[name].shape}")
    if isinstance(optimizer, str):
        if optimizer not in _OPTIMISERS:
            raise ValueError(f"optimizer must be one of {sorted(_OPTIMISERS)} or an optimiser "
                             f"object, got {optimizer!r}")
        key = (optimizer, lr)
        state = model.__dict__.setdefault("_optimisers", {})
        if key not in state:
            state[key] = _OPTIMISERS[optimizer](lr=lr)
        optimizer = state[key]
    optimizer.step(model, {k: np.asarray(v) for k, v in grads.items()})


def export_model(model: Model):
    """A plain Python callable running the model's forward pass, in inference mode, on a
    snapshot of its parameters (and state)."""
    frozen = Model(model.fn, {k: v.copy() for k, v in model.params.items()})

    def predict(*args: AnyValue) -> AnyValue:
        return frozen(*args)

    predict.__name__ = f"{model.fn.__name__}_predict"
    predict.__doc__ = f"The trained {model.fn.__name__}: NumPy arrays in, NumPy arrays out."
    return predict


# ---- saving and loading: .npz with a JSON manifest, no pickle ------------------------------

_MANIFEST_KEY = "__relaydsl_manifest__"
FORMAT = "relaydsl-model"


def save_model(model: Model, path: str) -> str:
    """Write the parameters and a JSON manifest into one .npz file, atomically.

    The file is written beside its final name and renamed into place, so an interrupted save
    leaves any earlier file intact. Returns the path written (".npz" is added if missing).
    """
    path = str(path)
    if not path.endswith(".npz"):
        path += ".npz"
    manifest = {
        "format": FORMAT, "version": 1, "model": model.fn.__qualname__,
        "params": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)}
                   for k, v in model.params.items()],
    }
    arrays = {f"param/{k}": v for k, v in model.params.items()}
    arrays[_MANIFEST_KEY] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".relaydsl-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def load_model(path: str, fn: "RelayModelFunction | None" = None) -> Model:
    """Read a model saved by save_model. No code runs: only arrays and JSON are read.

    `fn` is the model function; by default the @relay_model function of the manifest's name
    that this program has defined. A file that does not match the function's parameters
    (names, shapes, dtypes) is a clear error.
    """
    from relaydsl.frontend.decorators import RelayModelFunction

    try:
        data = np.load(str(path), allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ValueError(f"cannot read the model file {path}: {e}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} is not a relaydsl model file (not an .npz archive)")
    with data:
        if _MANIFEST_KEY not in data.files:
            raise ValueError(f"{path} is not a relaydsl model file (no manifest)")
        try:
            manifest = json.loads(data[_MANIFEST_KEY].tobytes().decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} has a damaged manifest: {e}") from None
        arrays = {k.removeprefix("param/"): data[k] for k in data.files if k.startswith("param/")}
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a relaydsl model file")
    if fn is None:
        fn = RelayModelFunction.defined.get(manifest["model"])
        if fn is None:
            raise ValueError(f"{path} holds parameters of the model {manifest['model']!r}, which "
                             "this program has not defined: pass it, load_model(path, fn)")
    expected = {h.name: v for h, v in zip(fn.hidden, create_model(fn).params.values())}
    problems = []
    for name, ref in expected.items():
        got = arrays.get(name)
        if got is None:
            problems.append(f"{name} is missing")
        elif got.shape != ref.shape or got.dtype != ref.dtype:
            problems.append(f"{name} is {got.dtype}{list(got.shape)}, the model needs "
                            f"{ref.dtype}{list(ref.shape)}")
    problems += [f"{name} is not a parameter of {fn.__name__}"
                 for name in arrays if name not in expected]
    if problems:
        raise ValueError(f"{path} does not match the model {fn.__name__}: " + "; ".join(problems))
    return Model(fn, {name: arrays[name].copy() for name in expected})
