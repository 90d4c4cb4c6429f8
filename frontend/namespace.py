"""The ``relay`` object users import: the decorator, and the namespace of the language.

``@relay`` decorates a function; ``relay.<op>`` names an operator of the
registry (inside decorated code it becomes an op call; outside, it runs
eagerly on NumPy arrays); ``relay.map`` and friends are the prelude;
``relay.Any``, ``relay.Fn``, ``relay.List`` are for annotations;
``relay.function_from_source`` decorates functions written as text.

>>> import numpy as np
>>> from relaydsl import relay
>>> relay.maximum(np.array([1.0, 5.0], np.float32), np.array([3.0, 2.0], np.float32))
array([3., 5.], dtype=float32)
>>> relay.sofmax
Traceback (most recent call last):
...
AttributeError: relay has no operator or function 'sofmax'. Did you mean softmax, log_softmax, max?
"""
from __future__ import annotations

import functools
import itertools
import linecache
import textwrap
from typing import Any as AnyValue, Callable

import numpy as np

from relaydsl import errors
from relaydsl.backend.accel.config import AcceleratorConfig
from relaydsl.errors import (DSLSyntaxError, IRError, ModelFileError, QuantizationOverflowWarning,
                             RelayTypeError, SettingError)
from relaydsl.frontend import annotations, references
from relaydsl.frontend.adt import ConstructorRef
from relaydsl import datasets
from relaydsl.frontend.adt import adt
from relaydsl.frontend.autodiff import grad, value_and_grad
from relaydsl.frontend.decorators import relay_decorator, relay_model_decorator
from relaydsl.frontend.function import RelayFunction
from relaydsl.frontend.model import (
    SGD, Adam, Model, Momentum, create_model, export_model, load_model, save_model,
    update_model_params,
)
from relaydsl.frontend.quantize import QuantizedFunction, quantize
from relaydsl.frontend.special_calls import PreludeFunction
from relaydsl.tools.to_python import python_source
from relaydsl.transform import DumpIR, PassContext, PassInstrument, PassTimingInstrument, PrintIR
from relaydsl.frontend.layers import LAYER_HELP, LAYERS
from relaydsl.frontend.tracebacks import user_facing
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import suggest
from relaydsl.ir.types import TensorType, TupleType
from relaydsl.op import all_ops, lookup
from relaydsl.prelude import prelude_definitions
from relaydsl.quantize import QConfig, qconfig
from relaydsl.typing.relations import check_relation


@functools.cache
def op_function(name: str) -> Callable[..., AnyValue]:
    """``relay.<name>``: the operator as a Python function (one per op: ``relay.softmax is
    relay.softmax``), with the op's signature and documentation for ``help()``. Inside
    decorated code a call of it is the op's call; outside, it runs on NumPy arrays. Its
    ``relay_op`` is the op's definition."""
    opdef = lookup(name)

    def call(*args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        try:
            inputs, attrs = opdef.bind_arguments(args, kwargs)
        except IRError as e:  # as Python reports a call that does not fit the signature
            raise TypeError(e.raw_message) from None
        values = [_array(a) for a in inputs]
        checked = opdef.check_call(tuple(values), Attrs(attrs))
        check_relation(opdef.type_relation, [_type_of(v) for v in values], checked)
        return opdef.numpy_ref(*values, **checked)

    call.__name__ = call.__qualname__ = name
    call.__module__ = "relaydsl.relay"
    call.__doc__ = opdef.help_text()
    if name in LAYER_HELP:  # conv2d, batch_norm, dropout: a layer form too
        call.__doc__ += "\n\nInside a @relay_model function, also a layer:\n\n" + LAYER_HELP[name]
    call.__signature__ = opdef.signature  # type: ignore[attr-defined]
    call.relay_op = opdef  # type: ignore[attr-defined]
    return call


@functools.cache
def layer_function(name: str) -> Callable[..., AnyValue]:
    """``relay.linear``, ``relay.embedding``, ...: a layer (frontend/layers.py), not an op.
    Its ``help()`` is the layer form's; called outside decorated code it says where it
    belongs. ``relay_layer`` names it for the translator."""

    def call(*args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        raise TypeError(f"relay.{name} is a layer: it makes parameters of the model it is "
                        "in, so it is called inside a @relay_model function (see "
                        f"help(relay.{name}))")

    call.__name__ = call.__qualname__ = name
    call.__module__ = "relaydsl.relay"
    call.__doc__ = LAYER_HELP[name]
    call.relay_layer = name  # type: ignore[attr-defined]
    return call


def _array(value: AnyValue) -> AnyValue:
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], np.ndarray):
        return tuple(value)
    if isinstance(value, np.ndarray):
        return value
    arr = np.asarray(value)
    if arr.dtype == np.float64 and not isinstance(value, np.ndarray):
        arr = arr.astype(np.float32)
    elif arr.dtype == np.int64:
        arr = arr.astype(np.int32)
    return arr


def _type_of(value: AnyValue):
    if isinstance(value, tuple):
        return TupleType(tuple(_type_of(v) for v in value))
    return TensorType(value.shape, value.dtype.name)


def _prelude_functions() -> list[str]:
    """The prelude's functions by name; an op of the same name (``sum``) comes first."""
    return [gv.name_hint for gv in prelude_definitions()[1] if gv.name_hint not in all_ops()]


class RelayNamespace:
    """The ``relay`` object: a decorator and a namespace (see the module docstring)."""

    Any = annotations.Any
    Fn = annotations.Fn
    Ref = annotations.Ref
    List = annotations.List
    Option = annotations.Option
    Tree = annotations.Tree

    @user_facing
    def __call__(self, pyfunc: Callable):
        return relay_decorator(pyfunc)

    def __getattr__(self, name: str) -> AnyValue:
        if name in all_ops():
            return op_function(name)
        if name in _prelude_functions():
            return PreludeFunction(name)
        if name in LAYERS:
            return layer_function(name)
        for td in prelude_definitions()[0]:
            for c in td.constructors:
                if c.name == name:
                    return ConstructorRef("relay", c)
        api = _api()
        if name in api:
            return api[name]
        known = [*all_ops(), *_prelude_functions(), *LAYERS, *api]
        raise AttributeError(f"relay has no operator or function {name!r}.{suggest(name, known)}")

    def __dir__(self) -> list[str]:
        return sorted({*all_ops(), *_prelude_functions(), *LAYERS, *_api(), "Any", "Fn", "Ref",
                       "List", "Option", "Tree"})

    def __repr__(self) -> str:
        return "<relaydsl.relay>"


def _decorated(fn: AnyValue, what: str) -> AnyValue:
    """`fn` if it is a decorated function, else a TypeError naming `relay.<what>`'s parameter."""
    if not isinstance(fn, RelayFunction):
        raise TypeError(f"relay.{what}(fn) takes a function decorated with @relay, got "
                        f"{type(fn).__name__}")
    return fn


def _api() -> dict[str, AnyValue]:
    """The non-operator functions of the namespace."""
    def build(fn, target: str | None = None, **options):
        """Compile a decorated function for `target` (default: the target a call uses,
        llvm or $RELAYDSL_TARGET) under the current ``relay.PassContext``; returns a
        callable. A Model is compiled with its parameters as constants (a snapshot).
        ``target="accel"`` takes ``config=relay.AcceleratorConfig...`` and ``schedule=``
        ("none", "fusion", "fusion+reuse", the default; "fusion:greedy",
        "fusion+reuse:greedy" for the Deep Fusion paper's own loop); the result's
        ``.report`` is an AccelReport."""
        if isinstance(fn, QuantizedFunction):
            return fn.build(target, **options)
        if isinstance(fn, Model):
            from relaydsl.frontend.frozen import FrozenModel

            return FrozenModel(fn, target, options)
        return fn.build(target, **options)

    def visualize(fn, *, fused: bool = False):
        """The dataflow graph of a decorated function (op calls; shapes on the edges; with
        `fused`, the fused groups the llvm backend compiles, as clusters): DOT text in
        ``.source``, rendered by Graphviz where installed (``.render("f.svg")``, Jupyter)."""
        return _decorated(fn, "visualize").visualize(fused=fused)

    def to_python(fn) -> str:
        """A decorated function's typed program as runnable Python/NumPy source defining a
        function of its name: one statement per let, each op call its NumPy reference
        (relaydsl/tools/to_python.py)."""
        fn = _decorated(fn, "to_python")
        return python_source(fn.mod, fn.global_var.name_hint, fn.__name__)

    return {"build": build, "create_model": create_model, "Model": Model, "adt": adt, "grad": grad,
            "value_and_grad": value_and_grad,
            "update_model_params": update_model_params, "export_model": export_model,
            "save_model": save_model, "load_model": load_model, "SGD": SGD, "Momentum": Momentum,
            "Adam": Adam, "datasets": datasets, "AcceleratorConfig": AcceleratorConfig,
            "DSLSyntaxError": DSLSyntaxError, "RelayTypeError": RelayTypeError,
            "ModelFileError": ModelFileError, "SettingError": SettingError,
            "PassContext": PassContext, "PassInstrument": PassInstrument,
            "PassTimingInstrument": PassTimingInstrument, "PrintIR": PrintIR, "DumpIR": DumpIR,
            "visualize": visualize, "to_python": to_python,
            "quantize": quantize, "QConfig": QConfig, "qconfig": qconfig,
            "QuantizationOverflowWarning": QuantizationOverflowWarning,
            "function_from_source": function_from_source,
            "ref": references.ref, "ref_read": references.ref_read,
            "ref_write": references.ref_write}


relay = RelayNamespace()


def _user_names() -> dict[str, AnyValue]:
    """What ``from relaydsl import *`` binds: relaydsl/__init__.py re-exports these names
    (tests/frontend/test_namespace.py checks that the two agree)."""
    return {
        "relay": relay, "relay_model": relay_model_decorator, "Model": Model,
        **{name: getattr(annotations, name) for name in (
            "Bool", "Float", "Float16", "Float32", "Float64", "Fn", "Int", "Int8", "Int16",
            "Int32", "Int64", "Tensor", "UInt8")},
        **{name: getattr(errors, name) for name in (
            "DSLSyntaxError", "IRError", "ModelFileError", "ParseError", "RelayError",
            "RelayTypeError", "SettingError")},
    }


_SOURCE_COUNTER = itertools.count(1)


def function_from_source(text: str, namespace: dict[str, AnyValue] | None = None) -> AnyValue:
    """The last decorated function `text` defines. `text` runs with `namespace`'s names (by
    default relaydsl's: ``relay``, ``relay_model``, ``Tensor``, ``Float``, ``Int``, ...,
    and ``np``) and can import what else it needs.

    For code that has no file: ``python -c``, exec(), notebooks that generate code. `text`
    (Python source defining functions decorated with ``@relay`` / ``@relay_model``) runs as a
    module of its own, whose source the frontend can read: it is registered with
    ``linecache`` under a name like ``<relay source 1>``, which error messages show with the
    line and a caret.

    >>> double = relay.function_from_source('''
    ... @relay
    ... def double(x: Tensor[Float, (2,)]) -> Tensor[Float, (2,)]:
    ...     return x * 2.0
    ... ''')
    >>> double([1.0, 2.5])
    array([2., 5.], dtype=float32)
    """
    source = textwrap.dedent(text)
    filename = f"<relay source {next(_SOURCE_COUNTER)}>"
    # inspect.getsource reads linecache: the entry makes the text a file for it (the
    # mtime None keeps linecache.checkcache from dropping an entry with no file behind it)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope: dict[str, AnyValue] = {"__name__": filename.strip("<>").replace(" ", "_"), "np": np,
                                  **_user_names()}
    scope.update(namespace or {})
    exec(compile(source, filename, "exec"), scope)  # the user's own code
    found = [v for v in scope.values() if isinstance(v, RelayFunction)]
    if not found:
        raise ValueError("the source defines no @relay or @relay_model function")
    return found[-1]
