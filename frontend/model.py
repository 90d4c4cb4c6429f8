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
``model.params``; dropout draws a new mask from its key, which the step advances);
everything else -- calling the model, ``model.apply``, ``export_model`` -- runs it in
**inference mode** (batch_norm uses the running statistics, so an example's prediction does
not depend on the rest of its batch; dropout is the identity). ``model.params`` holds the
trainable parameters and the model's state (``model.state_names``: running statistics,
dropout keys), like PyTorch's ``state_dict``; gradients and optimisers touch only the
trainable ones.
"""
from __future__ import annotations

import abc
import json
import math
import os
import re
import socket
import tempfile
import time
import tokenize
import zipfile
import zlib
from typing import IO, TYPE_CHECKING, Any as AnyValue, Callable, ClassVar, NamedTuple

import numpy as np

from relaydsl.errors import ModelFileError, RelayTypeError
from relaydsl.ir.types import DTYPES, TensorType, type_to_str
from relaydsl.frontend.tracebacks import user_facing

if TYPE_CHECKING:
    from relaydsl.frontend.function import RelayFunction, RelayModelFunction

INITIALISERS = ("normal", "glorot")

# The @relay_model functions this program has defined, by (module, qualified name), the
# latest of a name winning as a redefinition does (function.py adds each): load_model finds the
# function of a file's model here. The module is part of the key: two modules may each define
# an `affine`, and a file of one must not load into the other.
MODEL_FUNCTIONS: dict[tuple[str, str], RelayModelFunction] = {}


def defined_model_function(qualname: str, module: str | None) -> RelayModelFunction | None:
    """The @relay_model function a model file names: the one of its module and qualified
    name, else the only one of that qualified name (a file saved from a script run as
    __main__ and loaded from a module, or written before files recorded the module); None when
    there is no such function or several modules define one."""
    if module is not None and (module, qualname) in MODEL_FUNCTIONS:
        return MODEL_FUNCTIONS[module, qualname]
    same_name = [fn for (_, name), fn in MODEL_FUNCTIONS.items() if name == qualname]
    return same_name[0] if len(same_name) == 1 else None


class Model:
    """The parameters of one model function, by name, in the function's order.

    A plain Python value: ``copy.deepcopy(model)`` is an independent model of the same function
    (a best-model snapshot, an EMA of the weights), and a model pickles as its arrays plus a
    reference to its function (module and qualified name, as pickle stores functions), so a
    ``multiprocessing`` worker can receive one.
    """

    def __init__(self, fn: "RelayModelFunction", params: dict[str, np.ndarray]):
        self.fn = fn
        self.params = params

    @property
    def state_names(self) -> tuple[str, ...]:
        """The entries of ``params`` that are state, updated by training steps rather than
        by gradients (batch_norm's running mean and variance, dropout's key)."""
        return tuple(h.name for h in self.fn.hidden if h.spec.state)

    @user_facing
    def __call__(self, *args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        """The model's forward pass, in inference mode."""
        return self.apply(self.fn, *args, **kwargs)

    @user_facing
    def apply(self, fn: "RelayFunction", *args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        """Run a decorated function that uses this model (e.g. a loss) with its parameters,
        in inference mode."""
        return fn.build().run(args, self.values_for(fn), kwargs)

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

    Each dropout layer's key is ``(k0, 0)``, k0 drawn from `seed` and the layer's name, so
    models created with the same seed draw the same sequence of masks.

    init: "normal" (mean 0, standard deviation `sigma`) or "glorot" (uniform, Glorot & Bengio).
    """
    # a RelayModelFunction, known by its flag: function.py, which defines it, imports this module
    if getattr(fn, "is_model", False) is not True:
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
        elif h.spec.kind == "key":  # (k0, step 0), k0 from the seed and the name alone
            words = np.random.SeedSequence([seed, zlib.crc32(h.name.encode())])
            value = np.array([words.generate_state(1)[0], 0], dtype)
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

class Optimizer(abc.ABC):
    """Base of the optimisers: hyperparameters (floats, as attributes) and state arrays by slot
    and parameter name (Momentum's velocities, Adam's moments and step counts).

    An optimiser serves one model, as a PyTorch optimiser is made for one model's parameters:
    its state is keyed by parameter name. ``save_model(model, path, optimizer=opt)`` stores its
    hyperparameters and state beside the parameters, ``load_model(path, optimizer=opt)``
    restores them, so training resumes where it stopped. A copy of an optimiser
    (``copy.deepcopy``) is an independent one, like a copy of a model.
    """

    kind: ClassVar[str]  # its name in update_model_params(optimizer=...) and in model files
    HYPERPARAMETERS: ClassVar[tuple[str, ...]] = ("lr",)
    SLOTS: ClassVar[tuple[str, ...]] = ()  # per-parameter state, each shaped as its parameter
    STEP_SLOTS: ClassVar[tuple[str, ...]] = ()  # per-parameter step counts (int64 scalars)

    def __init__(self) -> None:
        self.state: dict[str, dict[str, np.ndarray]] = {
            slot: {} for slot in (*self.SLOTS, *self.STEP_SLOTS)}

    @property
    def hyperparameters(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in self.HYPERPARAMETERS}

    def step(self, model: Model, grads: dict[str, np.ndarray]) -> None:
        """Update `model`'s parameters in place from their gradients."""
        for name, g in grads.items():
            p = model.params[name]
            p -= np.asarray(self.update(name, g), p.dtype)

    @abc.abstractmethod
    def update(self, name: str, g: np.ndarray) -> np.ndarray:
        """The amount to subtract from parameter `name` given its gradient `g`."""

    def load_state(self, hyperparameters: dict[str, float],
                   state: dict[str, dict[str, np.ndarray]]) -> None:
        """Continue as the optimiser that was saved: its hyperparameters and state."""
        for name in self.HYPERPARAMETERS:
            setattr(self, name, hyperparameters[name])
        self.state = {slot: dict(state.get(slot, {})) for slot in self.state}

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.hyperparameters.items())
        return f"{type(self).__name__}({settings})"


class SGD(Optimizer):
    """Plain stochastic gradient descent: p -= lr * g."""

    kind = "sgd"

    def __init__(self, lr: float = 0.01):
        super().__init__()
        self.lr = lr

    def update(self, name: str, g: np.ndarray) -> np.ndarray:
        return self.lr * g


class Momentum(Optimizer):
    """SGD with momentum: v = momentum * v + g; p -= lr * v."""

    kind = "momentum"
    HYPERPARAMETERS = ("lr", "momentum")
    SLOTS = ("velocity",)

    def __init__(self, lr: float = 0.01, momentum: float = 0.9):
        super().__init__()
        self.lr, self.momentum = lr, momentum

    def update(self, name: str, g: np.ndarray) -> np.ndarray:
        velocity = self.state["velocity"]
        v = velocity.get(name)
        velocity[name] = v = g.copy() if v is None else self.momentum * v + g
        return self.lr * v


class Adam(Optimizer):
    """Adam (Kingma & Ba): bias-corrected first and second moment estimates."""

    kind = "adam"
    HYPERPARAMETERS = ("lr", "beta1", "beta2", "eps")
    SLOTS = ("m", "v")
    STEP_SLOTS = ("t",)

    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8):
        super().__init__()
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps

    def update(self, name: str, g: np.ndarray) -> np.ndarray:
        m, v, t = (self.state[slot].get(name) for slot in ("m", "v", "t"))
        t = np.int64(1 if t is None else t + 1)
        m = (1 - self.beta1) * g if m is None else self.beta1 * m + (1 - self.beta1) * g
        v = (1 - self.beta2) * g * g if v is None else self.beta2 * v + (1 - self.beta2) * g * g
        self.state["m"][name], self.state["v"][name], self.state["t"][name] = m, v, t
        m_hat = m / (1 - self.beta1 ** t)
        v_hat = v / (1 - self.beta2 ** t)
        return self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


OPTIMISERS: dict[str, type[Optimizer]] = {o.kind: o for o in (SGD, Momentum, Adam)}


def update_model_params(model: Model, grads: dict[str, np.ndarray],
                        lr: "float | Optimizer" = 0.01,
                        optimizer: "str | Optimizer" = "sgd") -> None:
    """Apply gradients to the model's parameters in place.

    `optimizer` is "sgd" (default), "momentum", "adam", or an optimiser object (SGD, Momentum,
    Adam), which keeps its state (velocities, moments) across calls and its own learning
    rate; it may also come third, in `lr`'s place. A string keeps that state on the model.

    Example (``model`` and ``loss`` as in the README)::

        momentum = relay.Momentum(lr=0.05, momentum=0.9)  # keeps the velocities
        for x, y in batches:
            relay.update_model_params(model, relay.grad(model, loss, (x, y)), momentum)
    """
    if isinstance(lr, Optimizer):  # update_model_params(model, g, relay.Momentum(lr=0.05))
        if optimizer != "sgd":
            raise TypeError("update_model_params() got an optimiser object for lr and also "
                            f"optimizer={optimizer!r}: give one")
        lr, optimizer = 0.01, lr
    elif isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating, np.integer)):
        raise TypeError(f"update_model_params() parameter lr: expected a number (or an "
                        f"optimiser object), got {type(lr).__name__} {lr!r}")
    if not isinstance(optimizer, (str, Optimizer)):
        raise TypeError(f"update_model_params() parameter optimizer: expected 'sgd', "
                        f"'momentum', 'adam' or an optimiser object, got "
                        f"{type(optimizer).__name__} {optimizer!r}")
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
        if optimizer not in OPTIMISERS:
            raise ValueError(f"optimizer must be one of {sorted(OPTIMISERS)} or an optimiser "
                             f"object, got {optimizer!r}")
        key = (optimizer, lr)
        state = model.__dict__.setdefault("_optimisers", {})
        if key not in state:
            state[key] = OPTIMISERS[optimizer](lr=lr)
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


def model_file_path(path: "str | os.PathLike[str]") -> str:
    """The file save_model writes and load_model reads for `path`: ".npz" added if missing."""
    path = os.fspath(path)
    return path if path.endswith(".npz") else path + ".npz"


def save_model(model: Model, path: "str | os.PathLike[str]", *,
               optimizer: Optimizer | None = None) -> str:
    """Write the parameters and a JSON manifest into one .npz file, atomically.

    With `optimizer`, its hyperparameters and state (velocities, moments, step counts) are
    saved too, for ``load_model(path, optimizer=...)`` to resume training. The file is written
    beside its final name and renamed into place, so an interrupted save leaves any earlier
    file intact. Returns the path written, ``model_file_path(path)`` (".npz" is added if
    missing); load_model takes either.
    """
    path = model_file_path(path)
    manifest: dict[str, AnyValue] = {
        "format": FORMAT, "version": 1, "model": model.fn.__qualname__,
        "module": model.fn.__module__,
        "params": _entries(model.params),
    }
    arrays = {f"param/{k}": v for k, v in model.params.items()}
    if optimizer is not None:
        state = _flat_state(optimizer)
        manifest["optimizer"] = {"kind": optimizer.kind,
                                 "hyperparameters": optimizer.hyperparameters,
                                 "state": _entries(state)}
        arrays.update({f"optimizer/{k}": v for k, v in state.items()})
    arrays[_MANIFEST_KEY] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    directory = os.path.dirname(os.path.abspath(path))
    _remove_stale_temp_files(directory)
    fd, tmp = tempfile.mkstemp(prefix=f"{_TEMP_PREFIX}{_HOST}-{os.getpid()}-", suffix=".npz",
                               dir=directory)
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


def _entries(arrays: dict[str, np.ndarray]) -> list[dict[str, AnyValue]]:
    return [{"name": k, "shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype)}
            for k, v in arrays.items()]


def _flat_state(optimizer: Optimizer) -> dict[str, np.ndarray]:
    """An optimiser's state as "<slot>/<parameter>" -> array."""
    return {f"{slot}/{name}": np.asarray(v)
            for slot, values in optimizer.state.items() for name, v in values.items()}


# A save writes `.relaydsl-<host>-<pid>-<random>.npz` and renames it into place; a killed save
# leaves it behind. (Saves before this naming wrote `.relaydsl-<random>.npz`.)
_TEMP_PREFIX = ".relaydsl-"
_TEMP_NAME = re.compile(r"\.relaydsl-(?:(?P<host>.+)-(?P<pid>\d+)-)?[a-z0-9_]+\.npz")
_HOST = socket.gethostname()
# A save rewrites its temp file continuously until it renames it: one untouched this long has
# no writer, wherever that writer ran.
STALE_TEMP_AGE = 3600.0


def _remove_stale_temp_files(directory: str) -> None:
    """Delete the temp files of saves into `directory` that were killed before finishing.

    A temp file is stale when the process that wrote it (named by host and pid) is gone, or,
    when that cannot be checked here (another host, an old name), when it has not been
    modified for STALE_TEMP_AGE seconds. A file whose writer is alive is never touched.
    (Off POSIX, signal 0 is not a harmless probe: only the age rule applies there.)
    """
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return  # mkstemp will report an unusable directory
    now = time.time()
    for entry in entries:
        m = _TEMP_NAME.fullmatch(entry.name)
        if m is None:
            continue
        try:
            if m["host"] == _HOST and os.name == "posix":
                stale = not _process_exists(int(m["pid"]))
            else:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMP_AGE
            if stale:
                os.remove(entry.path)
        except OSError:
            pass  # removed by a concurrent save, or not ours to remove: leave it


def _process_exists(pid: int) -> bool:
    """Whether a process with this id is running on this host (signal 0 only checks)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OverflowError:
        return False  # not a possible pid
    return True


def load_model(path: "str | os.PathLike[str]", fn: "RelayModelFunction | None" = None, *,
               optimizer: Optimizer | None = None) -> Model:
    """Read a model saved by save_model. No code runs: only arrays and JSON are read.

    `path` is what save_model was given or returned: "m" reads "m.npz". A missing file is a
    FileNotFoundError. `fn` is the model function; by default the @relay_model function of the
    manifest's name that this program has defined. With `optimizer` (an optimiser of the kind
    that was saved), its hyperparameters and state are restored from the file. A file that is
    damaged, not in save_model's format, or does not match the function's parameters (names,
    shapes, dtypes) or the optimiser is a ModelFileError naming it; nothing is allocated before
    the manifest and the array headers agree with the file's size.
    """
    path = model_file_path(path)
    contents = _read_model_file(path)
    if fn is None:
        fn = defined_model_function(contents.model, contents.module)
        if fn is None:
            modules = sorted(m for m, name in MODEL_FUNCTIONS if name == contents.model)
            where = (f"which several modules define ({', '.join(modules)})" if modules
                     else "which this program has not defined")
            raise ModelFileError(f"{path} holds parameters of the model {contents.model!r}, "
                                 f"{where}: pass it, load_model(path, fn)")
    expected = dict(zip((h.name for h in fn.hidden), create_model(fn).params.values()))
    problems = []
    for name, ref in expected.items():
        got = contents.params.get(name)
        if got is None:
            problems.append(f"{name} is missing")
        elif got.shape != ref.shape or got.dtype != ref.dtype:
            problems.append(f"{name} is {got.dtype}{list(got.shape)}, the model needs "
                            f"{ref.dtype}{list(ref.shape)}")
    problems += [f"{name} is not a parameter of {fn.__name__}"
                 for name in contents.params if name not in expected]
    if problems:
        raise ModelFileError(f"{path} does not match the model {fn.__name__}: "
                             + "; ".join(problems))
    model = Model(fn, {name: contents.params[name] for name in expected})
    if optimizer is not None:
        _restore_optimizer(path, optimizer, contents, model)
    return model


def _restore_optimizer(path: str, optimizer: Optimizer, contents: "_ModelFile",
                       model: Model) -> None:
    saved = contents.optimizer
    if saved is None:
        raise ModelFileError(f"{path} holds no optimiser state: save it with "
                             "save_model(model, path, optimizer=...)")
    kind, hyperparameters, flat = saved
    if kind != optimizer.kind or set(hyperparameters) != set(optimizer.HYPERPARAMETERS):
        raise ModelFileError(f"{path} holds the state of a {kind} optimiser, not of "
                             f"{type(optimizer).__name__}")
    state: dict[str, dict[str, np.ndarray]] = {slot: {} for slot in optimizer.state}
    for key, value in flat.items():
        slot, _, name = key.partition("/")
        param = model.params.get(name)
        if slot not in state or param is None or name in model.state_names:
            raise ModelFileError(f"{path} holds optimiser state {key}, which is not a slot of "
                                 f"{type(optimizer).__name__} for a trainable parameter")
        shape = () if slot in optimizer.STEP_SLOTS else param.shape
        if value.shape != shape:
            raise ModelFileError(f"{path}: the optimiser state {key} has shape "
                                 f"{value.shape}, not {shape}")
        state[slot][name] = value
    optimizer.load_state(hyperparameters, state)


_MANIFEST_MEMBER = f"{_MANIFEST_KEY}.npy"

# What zipfile, numpy's .npy header reader and json raise on damaged bytes: a truncated or
# altered archive (BadZipFile, EOFError, OSError for a seek outside the file), a header field
# changed to an unsupported zip feature (NotImplementedError), an unreadable header or manifest
# (ValueError, SyntaxError, TokenError, RecursionError).
_DAMAGE = (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, ValueError, SyntaxError,
           tokenize.TokenError, RecursionError, zlib.error)
_MAX_DEFLATE_RATIO = 1032  # deflate expands a byte to at most this many


class _ModelFile(NamedTuple):
    """What a model file holds, checked: the model's name and module (None in files written
    before the module was recorded), its parameters, and the optimiser's (kind,
    hyperparameters, state by "<slot>/<parameter>") when one was saved."""

    model: str
    module: str | None
    params: dict[str, np.ndarray]
    optimizer: tuple[str, dict[str, float], dict[str, np.ndarray]] | None


def _read_model_file(path: str) -> _ModelFile:
    """The contents of a file written by save_model, checked throughout."""
    with open(path, "rb") as f:  # a missing file stays a FileNotFoundError
        try:
            return _read_archive(f, os.fstat(f.fileno()).st_size, path)
        except ModelFileError:
            raise
        except _DAMAGE as e:
            raise ModelFileError(f"cannot read the model file {path}: {e}") from None


def _read_archive(f: IO[bytes], size: int, path: str) -> _ModelFile:
    def damaged(problem: str) -> ModelFileError:
        return ModelFileError(f"cannot read the model file {path}: {problem}")

    with zipfile.ZipFile(f) as archive:
        members: dict[str, zipfile.ZipInfo] = {}
        for info in archive.infolist():
            if info.filename in members:
                raise damaged(f"it holds two members named {info.filename!r}")
            # save_model stores members uncompressed; np.savez_compressed deflates them. No
            # member can claim more bytes than the file has, or than deflate can expand it to
            if info.flag_bits & 0x1:
                raise damaged(f"its member {info.filename!r} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise damaged(f"its member {info.filename!r} is compressed with zip method "
                              f"{info.compress_type} (stored or deflated are read)")
            stored = info.compress_type == zipfile.ZIP_STORED
            if info.compress_size > size or (stored and info.file_size != info.compress_size) \
                    or info.file_size > _MAX_DEFLATE_RATIO * size:
                raise damaged(f"its member {info.filename!r} claims {info.file_size} bytes")
            members[info.filename] = info
        if _MANIFEST_MEMBER not in members:
            raise damaged("it is not a relaydsl model file (no manifest)")
        raw = _read_npy(archive, members[_MANIFEST_MEMBER], None, damaged)
        try:
            manifest = json.loads(raw.tobytes().decode())
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise damaged(f"its manifest is not valid JSON: {e}") from None
        model_name, params = _check_manifest(manifest, damaged)
        optimizer = _check_optimizer_manifest(manifest.get("optimizer"), damaged)
        declared = {f"param/{name}.npy": (params, name) for name in params}
        if optimizer is not None:
            declared.update({f"optimizer/{key}.npy": (optimizer[2], key) for key in optimizer[2]})
        for member in members:
            if member != _MANIFEST_MEMBER and member not in declared:
                raise damaged(f"it holds a member {member!r} that the manifest does not list")
        arrays: dict[str, np.ndarray] = {}
        state: dict[str, np.ndarray] = {}
        for member, (entries, name) in declared.items():
            if member not in members:
                what = "parameter" if entries is params else "optimiser state"
                raise damaged(f"the manifest lists the {what} {name}, which the file lacks")
            out = arrays if entries is params else state
            out[name] = _read_npy(archive, members[member], entries[name], damaged)
    module = manifest.get("module")
    if module is not None and not isinstance(module, str):
        raise damaged("its manifest names the model's module with something not a string")
    return _ModelFile(model_name, module, arrays,
                      None if optimizer is None else (optimizer[0], optimizer[1], state))


_Entries = dict[str, tuple[tuple[int, ...], np.dtype]]


def _check_manifest(manifest: AnyValue, damaged: Callable[[str], ModelFileError]
                    ) -> tuple[str, _Entries]:
    """The model name and each parameter's (shape, dtype), from a manifest checked whole."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise damaged("it is not a relaydsl model file")
    if manifest.get("version") != 1:
        raise damaged(f"its format version is {manifest.get('version')!r}; this relaydsl "
                      "reads version 1")
    model_name, entries = manifest.get("model"), manifest.get("params")
    if not isinstance(model_name, str) or not isinstance(entries, list):
        raise damaged("its manifest does not name the model and list its parameters")
    return model_name, _check_entries(entries, "parameter", damaged)


def _check_optimizer_manifest(section: AnyValue, damaged: Callable[[str], ModelFileError]
                              ) -> tuple[str, dict[str, float], _Entries] | None:
    """The saved optimiser's kind, hyperparameters and state entries, if the file has one."""
    if section is None:
        return None
    ok = (isinstance(section, dict) and set(section) == {"kind", "hyperparameters", "state"}
          and section["kind"] in OPTIMISERS and isinstance(section["hyperparameters"], dict)
          and all(isinstance(k, str) and type(v) in (int, float)
                  for k, v in section["hyperparameters"].items())
          and isinstance(section["state"], list))
    if not ok:
        raise damaged("its manifest has a malformed optimizer section")
    return (section["kind"], {k: float(v) for k, v in section["hyperparameters"].items()},
            _check_entries(section["state"], "optimiser state", damaged))


def _check_entries(entries: list, what: str, damaged: Callable[[str], ModelFileError]
                   ) -> _Entries:
    out: _Entries = {}
    for entry in entries:
        ok = (isinstance(entry, dict) and set(entry) == {"name", "shape", "dtype"}
              and isinstance(entry["name"], str) and entry["dtype"] in DTYPES
              and isinstance(entry["shape"], list)
              and all(type(d) is int and d >= 0 for d in entry["shape"]))
        if not ok:
            raise damaged(f"its manifest has a malformed {what} entry {str(entry)[:80]}")
        if entry["name"] in out:
            raise damaged(f"its manifest lists the {what} {entry['name']} twice")
        out[entry["name"]] = (tuple(entry["shape"]), np.dtype(entry["dtype"]))
    return out


def _read_npy(archive: zipfile.ZipFile, info: zipfile.ZipInfo,
              declared: tuple[tuple[int, ...], np.dtype] | None,
              damaged: Callable[[str], ModelFileError]) -> np.ndarray:
    """One member's array, after its .npy header agrees with the manifest (`declared`; for the
    manifest itself, a byte vector) and with the member's size."""
    what = f"the member {info.filename!r}"
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in ((1, 0), (2, 0)):
            raise damaged(f"{what} has .npy format version {version}")
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran_order, dtype = read_header(member)
        if declared is None:
            if dtype != np.uint8 or len(shape) != 1:
                raise damaged(f"{what} is {dtype}{list(shape)}, not a byte vector")
        elif dtype.name != declared[1].name or shape != declared[0]:
            raise damaged(f"{what} is {dtype.name}{list(shape)}, but the manifest says "
                          f"{declared[1].name}{list(declared[0])}")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes != info.file_size - member.tell():
            raise damaged(f"{what} has {info.file_size - member.tell()} bytes of data, but its "
                          f"header describes {nbytes}")
        data = member.read()  # zipfile checks it against its CRC
    # byte order as written (numpy saves natively), values in this machine's order
    array = np.frombuffer(data, dtype).reshape(shape, order="F" if fortran_order else "C")
    return array.astype(dtype.newbyteorder("="), order="C")
