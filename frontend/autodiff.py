"""``relay.grad``: derivatives of decorated functions and of losses under a model.

- ``relay.grad(f)(*args)`` returns ``(f(*args), (df/darg0, df/darg1, ...))``;
- ``relay.grad(model, loss, (x, y))`` is a training step's forward and backward pass: it
  returns the gradients of ``loss(x, y)`` with respect to the model's trainable parameters,
  as a dict keyed by their names in ``model.params``, and, the model running in training
  mode, updates the model's state in place (batch_norm's running statistics);
- ``relay.grad(model, loss)`` returns a step function: ``step(x, y) -> gradients``.

Each builds a small Relay program around the paper's Grad node, lowers it with
relaydsl/transform/gradient.py, and runs it. Inside decorated code,
``relay.grad(f)`` is the Grad node itself (so grad of grad works).

>>> import numpy as np
>>> from relaydsl import relay, Float
>>> @relay
... def cube(x: Float) -> Float:
...     return x * x * x
>>> value, (dx,) = relay.grad(cube)(np.float32(2.0))
>>> float(value), float(dx)
(8.0, 12.0)
"""
from __future__ import annotations

import inspect
import threading
from collections import OrderedDict
from typing import Any as AnyValue, Callable

import numpy as np

from relaydsl.backend.target import Program, get_target
from relaydsl.frontend import annotations
from relaydsl.frontend.decorators import relay_decorator
from relaydsl.frontend.function import RelayFunction
from relaydsl.frontend.model import Model
from relaydsl.frontend.modes import Mode
from relaydsl.frontend.tracebacks import user_facing
from relaydsl.ir.expr import Call, Expr, Function, Grad, Let, RefCreate, RefRead, Tuple, Var
from relaydsl.ir.types import TensorType, is_float
from relaydsl.transform.pass_infra import PassContext
from relaydsl.typing import infer_types


class GradFunction:
    """``relay.grad(f)``: computes f's value and its gradient with respect to every argument
    (or, with `argnums`, those arguments: one index gives one gradient, a tuple a tuple)."""

    def __init__(self, fn: RelayFunction, argnums: int | tuple[int, ...] | None = None):
        if fn.hidden:
            raise TypeError(f"{fn.__name__} uses a model's parameters: differentiate it with "
                            f"relay.grad(model, {fn.__name__}, args)")
        t = fn.checked_type
        if not isinstance(t.ret_type, TensorType) or not is_float(t.ret_type.dtype):
            raise TypeError(f"relay.grad needs a function returning a floating-point tensor; "
                            f"{fn.__name__} returns {t.ret_type}")
        self.fn = fn
        self.argnums = _checked_argnums(argnums, fn.num_user_params, fn.__name__)

        def build() -> tuple[Program, Function]:
            params = [Var(p.name_hint, a) for p, a in zip(fn.function.params, t.arg_types)]
            return _lowered(fn, Function(params, Call(Grad(fn.global_var), params)))
        self._program = _compiled(("grad", fn), build)

    @user_facing
    def __call__(self, *args: AnyValue) -> tuple[np.ndarray, AnyValue]:
        value, grads = _run(self._program, self.fn, args)
        if self.argnums is None:
            return value, grads
        if isinstance(self.argnums, int):
            return value, grads[self.argnums]
        return value, tuple(grads[i] for i in self.argnums)


def _checked_argnums(argnums: AnyValue, count: int, name: str) -> int | tuple[int, ...] | None:
    """`argnums` as JAX takes it (an index or a tuple of them; negative from the end), for a
    function of `count` parameters; a TypeError or ValueError naming what is wrong."""
    if argnums is None:
        return None
    indices = argnums if isinstance(argnums, tuple) else (argnums,)
    for i in indices:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"argnums: expected an int or a tuple of ints, got {argnums!r}")
        if not -count <= i < count:
            raise ValueError(f"argnums {argnums!r}: {name} takes {count} argument(s)")
    normal = tuple(i % count for i in indices)
    return normal if isinstance(argnums, tuple) else normal[0]


# What relay.grad compiled, by what it differentiates, the target and the pass settings: a
# training loop calling relay.grad(model, loss, (x, y)) every step builds once. The least
# recently used go first.
_CACHE_SIZE = 64
_cache: OrderedDict[tuple, AnyValue] = OrderedDict()
_cache_lock = threading.Lock()


def _compiled(what: tuple, build: Callable[[], AnyValue]) -> AnyValue:
    """``build()`` for `what` under the default target and the current pass settings, made
    once and then found here."""
    key = (*what, get_target().name, PassContext.current())
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    made = build()
    with _cache_lock:
        _cache[key] = made
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return made


def _lowered(fn: RelayFunction, main: Function,
             mode: Mode = Mode.INFERENCE) -> tuple[Program, Function]:
    """The program computing `main`, which calls `fn` in `mode`, compiled for the default
    target, and `main` typed."""
    mod = fn.module_for(mode).copy()
    mod.add("__grad_main", main)
    infer_types(mod)
    return get_target().build(mod, "__grad_main", {}), mod["__grad_main"]


def _run(lowered: tuple[Program, Function], fn: RelayFunction, args: tuple,
         hidden: list | None = None):
    program, main = lowered
    t = main.checked_type
    all_args = list(args) + list(hidden or [])
    if len(args) != fn.num_user_params:
        raise TypeError(f"{fn.__name__}() takes {fn.num_user_params} argument(s), "
                        f"got {len(args)}")
    names = [p.name_hint for p in main.params]
    bindings: dict = {}
    values = [annotations.check_argument(n, a, v, bindings)
              for n, a, v in zip(names, t.arg_types, all_args)]
    return program(*values)


class _LossGradient:
    """The compiled programs of ``relay.grad(model, loss)`` for one loss (see ModelGrad)."""

    def __init__(self, loss: RelayFunction):
        t = loss.checked_type
        n = loss.num_user_params
        user = [Var(p.name_hint, a) for p, a in zip(loss.function.params[:n], t.arg_types[:n])]
        hidden = [Var(h.name, a) for h, a in zip(loss.hidden, t.arg_types[n:])]
        self.trainable = [h.name for h in loss.hidden if not h.spec.state]
        self.state = [h.name for h in loss.hidden if h.spec.state]
        # grad with respect to the trainable parameters only: the data and the state are
        # constants of the inner function
        inner = {h.name: Var(h.name, v.type_annotation)
                 for h, v in zip(loss.hidden, hidden) if not h.spec.state}
        of_params = Function(list(inner.values()), Call(
            loss.global_var_for(Mode.TRAINING),
            [*user, *(inner.get(h.name, v) for h, v in zip(loss.hidden, hidden))]))
        by_name = {h.name: v for h, v in zip(loss.hidden, hidden)}
        main = Function([*user, *hidden],
                        Call(Grad(of_params), [by_name[k] for k in self.trainable]))
        self.program = _lowered(loss, main, Mode.TRAINING)
        self.update = None
        if self.state:
            refs = {k: Var(k) for k in self.state}
            spec = {h.name: h.spec for h in loss.hidden}
            body: Expr = Let(Var("_"), Call(loss.global_var_for(Mode.UPDATE), [
                *user, *(refs.get(h.name, v) for h, v in zip(loss.hidden, hidden))]),
                Tuple([spec[k].after_step(RefRead(r)) for k, r in refs.items()]))
            for k, ref in reversed(refs.items()):
                body = Let(ref, RefCreate(by_name[k]), body)
            self.update = _lowered(loss, Function([*user, *hidden], body), Mode.UPDATE)


class ModelGrad:
    """``relay.grad(model, loss)``: a training step returning the parameters' gradients.

    The gradients are those of the loss's training variant (batch statistics) with respect to
    the trainable parameters: ``grad(fn(q..) { loss_training(x, y, q.., state..) })(params..)``.
    A model with state (running statistics) then runs the loss's update variant, which
    updates references holding the state, and the references' final values become the
    model's new state.
    """

    def __init__(self, model: Model, loss: RelayFunction):
        model.values_for(loss)  # loss must use this model
        self.model, self.loss = model, loss
        # the programs depend on the loss (and the model function it calls), not on the
        # model's values: every model of that function shares them
        compiled = _compiled(("model grad", loss), lambda: _LossGradient(loss))
        self.trainable, self.state = compiled.trainable, compiled.state
        self._program, self._update = compiled.program, compiled.update

    @user_facing
    def __call__(self, *args: AnyValue) -> dict[str, np.ndarray]:
        values = self.model.values_for(self.loss)
        value, grads = _run(self._program, self.loss, args, values)
        if self._update is not None:
            state = _run(self._update, self.loss, args, values)
            self.model.params.update(zip(self.state, state))
        self.last_loss = value
        return dict(zip(self.trainable, grads))


@user_facing
def grad(*args: AnyValue, argnums: int | tuple[int, ...] | None = None) -> AnyValue:
    """The gradient of a function, or of a loss with respect to a model's parameters.

    - ``relay.grad(f)(*xs)`` returns ``(f(*xs), (df/dx0, df/dx1, ...))`` (the paper's Grad:
      the value comes too); with ``argnums=i`` the second item is df/dxi alone, with a tuple
      of indices a tuple. `f` is a function decorated with ``@relay``, or a plain Python
      function with annotated parameters in a file, decorated here.
    - ``relay.grad(model, loss, (x, y))`` returns the gradients of ``loss(x, y)`` with respect
      to the model's trainable parameters, a dict keyed as ``model.params`` (and updates its
      state, such as batch_norm's running statistics); ``relay.grad(model, loss)`` returns
      a step function, ``step(x, y) -> gradients``. Either form compiles once per loss.

    Example (a file holding)::

        @relay
        def cube(x: Float) -> Float:
            return x * x * x

        value, (dx,) = relay.grad(cube)(np.float32(2.0))   # 8.0, 12.0
        value, dx = relay.value_and_grad(cube)(np.float32(2.0))
    """
    if len(args) == 1 and isinstance(args[0], RelayFunction):
        return GradFunction(args[0], argnums)
    if len(args) == 1 and inspect.isfunction(args[0]):
        return GradFunction(relay_decorator(args[0]), argnums)
    if argnums is not None:
        raise TypeError("argnums applies to relay.grad(f); relay.grad(model, loss) "
                        "differentiates with respect to the model's parameters")
    if len(args) in (2, 3) and isinstance(args[0], Model) and isinstance(args[1], RelayFunction):
        step = ModelGrad(args[0], args[1])
        if len(args) == 2:
            return step
        data = args[2] if isinstance(args[2], tuple) else (args[2],)
        return step(*data)
    raise TypeError("relay.grad takes a decorated function, or (model, loss) and optionally the "
                    "loss's arguments as a tuple")


# Inside decorated code a call of relay.grad is translated, not run (special_calls.py): the mark
# says it is this function, which special_calls.py cannot import (this module imports it).
grad.relay_grad = True  # type: ignore[attr-defined]


@user_facing
def value_and_grad(fn: AnyValue, argnums: int | tuple[int, ...] = 0) -> GradFunction:
    """JAX's spelling: ``relay.value_and_grad(f)(*xs)`` is ``(f(*xs), df/dx0)``; `argnums`
    as ``jax.value_and_grad``'s (an index, or a tuple of them for a tuple of gradients).
    For use from Python; inside decorated code write ``relay.grad(f)``."""
    return grad(fn, argnums=argnums)


__all__ = ["GradFunction", "ModelGrad", "grad", "value_and_grad"]
