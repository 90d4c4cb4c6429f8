"""Calls with a meaning of their own inside decorated code.

The translator (translate/calls.py) asks `SpecialCalls.translate` first about every call of a
Python object; None means an ordinary call (of an op, a decorated function, a function value).
The special ones, each its own method below:

- a layer (``relay.conv2d(x, num_filter=...)`` in a ``@relay_model``; layers.py): a call of
  the op with new hidden parameters of the function being translated (its owner);
- a model, or a function using one: a call passing its hidden parameters on;
- the training API (``relay.create_model``, ``relay.grad(model, loss, data)``,
  ``relay.update_model_params``, ``relay.export_model``, and ``dist.allreduce`` of the
  gradients; training.py);
- ``relay.grad(f)``: the paper's Grad node;
- references (``relay.ref``, ``relay.ref_read``, ``relay.ref_write``) and the prelude's
  functions (``relay.map``, ...: `PreludeFunction`).

One `SpecialCalls` serves one decorated function: the numbering of its layers' parameters and
the model parameters it passes on are its own.
"""
from __future__ import annotations

import ast
import contextlib
from collections import Counter
from typing import TYPE_CHECKING, Any as AnyValue, Callable

from relaydsl import distributed
from relaydsl.frontend import annotations, references, training
from relaydsl.frontend.function import HiddenParam, RelayFunction, RelayModelFunction
from relaydsl.frontend.layers import (
    LAYERS, PARAMETER_FREE, LayerContext, ParamSpec, TrainingForm, is_layer_call,
)
from relaydsl.frontend.model import create_model, export_model, update_model_params
from relaydsl.frontend.translate.bindings import Env
from relaydsl.frontend.translate.literals import Number
from relaydsl.ir.expr import Call, Expr, Grad, Var
from relaydsl.ir.types import TensorType, Type
from relaydsl.prelude import prelude_definitions

if TYPE_CHECKING:
    from relaydsl.frontend.translate import Translator

Args = list[Expr | Number]  # a call's translated positional arguments
Keywords = dict[str, ast.expr]  # its keyword arguments, untranslated (attributes are constants)


class PreludeFunction:
    """``relay.map``, ``relay.foldl``, ...: a global function of the prelude."""

    def __init__(self, name: str):
        self.name = name
        self.global_var = next(gv for gv in prelude_definitions()[1] if gv.name_hint == name)

    def __repr__(self) -> str:
        return f"relay.{self.name}"


def is_grad(target: AnyValue) -> bool:
    """Whether `target` is ``relay.grad``, which autodiff.py marks ``relay_grad``: that module
    cannot be imported here, since it decorates plain Python functions given to relay.grad, so
    it imports the decorators, which import this module."""
    return getattr(target, "relay_grad", False) is True


class SpecialCalls:
    """The calls with a meaning of their own in the decorated function `owner`."""

    def __init__(self, owner: RelayFunction):
        self.owner = owner
        self._call_sites: Counter[str] = Counter()  # per layer or sub-model: calls so far
        # the model parameters passed on by this function, once each
        self._model_vars: dict[tuple[RelayModelFunction, str], Var] = {}

    def translate(self, tr: Translator, target: AnyValue, node: ast.Call, args: Args,
                  kwargs: Keywords, env: Env) -> Expr | None:
        """The Relay expression of ``target(args, kwargs)`` (`node`) if the call has a meaning
        of its own, else None."""
        relay_op = getattr(target, "relay_op", None)  # relay.<op>
        layer = getattr(target, "relay_layer", None)  # relay.<layer>
        name = relay_op.name if relay_op is not None else layer
        if name is not None and is_layer_call(name, args, kwargs):
            return self._layer(tr, name, node, args, kwargs)
        if target in references.ARITY:
            name = target.__name__
            if kwargs or len(args) != references.ARITY[target]:
                raise tr.error(node, f"relay.{name} takes {references.ARITY[target]} "
                                     "positional argument(s)")
            return references.translate(target, tr.materialize_all(args), tr.span(node))
        training_call = self._training_call(tr, target, node, args, kwargs, env)
        if training_call is not None:
            return training_call
        if is_grad(target):
            if kwargs or len(args) != 1:
                raise tr.error(node, "inside decorated code relay.grad takes one function: "
                                     "relay.grad(f)(args) is (f(args), gradients)")
            return Grad(tr.materialize(args[0]), span=tr.span(node))
        if isinstance(target, PreludeFunction):
            if kwargs:
                raise tr.error(node, f"relay.{target.name} takes no keyword arguments")
            return Call(target.global_var, tr.materialize_all(args), span=tr.span(node))
        if isinstance(target, RelayFunction) and (target.is_model or target.hidden):
            if kwargs:
                raise tr.error(node, "keyword arguments are only for relay operators")
            self.owner.global_of(target)
            hidden = self._hidden_arguments(tr, target, node)
            return Call(target.global_var, [*tr.materialize_all(args), *hidden],
                        span=tr.span(node))
        return None

    def _training_call(self, tr: Translator, target: AnyValue, node: ast.Call, args: Args,
                       kwargs: Keywords, env: Env) -> Expr | None:
        """create_model, grad(model, loss, data), update_model_params, export_model, and
        relaydsl.distributed's allreduce of their gradients."""
        if target is create_model:
            model_fn = _python_arg(tr, node, 0)
            if not isinstance(model_fn, RelayModelFunction) or len(args) != 1:
                raise tr.error(node, "relay.create_model takes one @relay_model function")
            static = {k: tr.values.static(v) for k, v in kwargs.items()}
            return training.create_model(tr, self.owner, node, model_fn, static)
        if is_grad(target) and len(args) == 3:
            loss = _python_arg(tr, node, 1)
            return training.grad(tr, self.owner, node, [args[0], loss, args[2]], env)
        if target is update_model_params:
            static = {k: tr.values.static(v) for k, v in kwargs.items()}
            return training.update(tr, node, args, static, env)
        if target is export_model:
            return training.export(tr, self.owner, node, args, env)
        if target is distributed.allreduce:
            static = {k: tr.values.static(v) for k, v in kwargs.items()}
            return training.allreduce(tr, node, args, static, env)
        return None

    def _layer(self, tr: Translator, name: str, node: ast.Call, args: Args,
               kwargs: Keywords) -> Expr:
        owner = self.owner
        if not owner.is_model and name not in PARAMETER_FREE:
            op_form = ("; or, as the op, give it a key: relay.dropout(x, key, rate=, "
                       "training=True)" if name == "dropout" else "")
            raise tr.error(node, f"relay.{name}(...) here is a layer with hidden parameters: "
                                 f"use it inside a @relay_model function{op_form}")
        static = {k: tr.values.static(v) for k, v in kwargs.items()}
        site = self._call_sites[name]
        if name not in PARAMETER_FREE:
            self._call_sites[name] += 1

        def new_param(layer: str, pname: str, annotation: TensorType | None,
                      spec: ParamSpec) -> Var:
            full = f"{layer}_{site}.{pname}"
            var = Var(full, annotation, span=tr.span(node))
            owner.hidden.append(HiddenParam(full, var, spec))
            return var

        def modal(call: Call, training_form: TrainingForm) -> None:
            owner.training_forms[call] = training_form

        ctx = LayerContext(new_param, modal, tr.span(node), self._unbatched())
        return LAYERS[name](ctx, tr.materialize_all(args), static)

    def _unbatched(self) -> bool:
        """A model whose first input is one example (a CHW image or a vector)."""
        args = self.owner.source.tree.args.args
        if not args or args[0].annotation is None:
            return False
        ann = self._lookup_annotation(args[0].annotation)
        return isinstance(ann, TensorType) and ann.ndim in (1, 3)

    def _lookup_annotation(self, node: ast.expr) -> Type | None:
        pyfunc = self.owner.pyfunc
        try:
            value = eval(compile(ast.Expression(node), "<annotation>", "eval"),
                         pyfunc.__globals__, _closure_dict(pyfunc))
            return annotations.annotation_to_type(value, symbols={})
        except Exception:  # an annotation error is reported by the translation itself
            return None

    def _hidden_arguments(self, tr: Translator, target: RelayFunction,
                          node: ast.Call) -> list[Var]:
        """The parameters a call of a model (or of a function using one) passes on."""
        owner = self.owner
        if owner.is_model:
            if not target.is_model:
                raise tr.error(node, f"a @relay_model cannot call {target.__name__}, a @relay "
                                     "function that uses another model")
            site = self._call_sites[target.__name__]
            self._call_sites[target.__name__] += 1
            out = []
            for h in target.hidden:  # a sub-model: its own parameters at each call site
                full = f"{target.__name__}_{site}.{h.name}"
                var = Var(full, h.var.type_annotation, span=tr.span(node))
                owner.hidden.append(HiddenParam(full, var, h.spec))
                out.append(var)
            return out
        pairs = [(target, h.name) for h in target.hidden] if target.is_model else \
            [(h.model, h.name) for h in target.hidden]
        out = []
        for model, pname in pairs:
            var = self._model_vars.get((model, pname))
            if var is None:
                var = Var(pname)
                self._model_vars[(model, pname)] = var
                spec = next(h.spec for h in model.hidden if h.name == pname)
                owner.hidden.append(HiddenParam(pname, var, spec, model))
            out.append(var)
        return out


def _python_arg(tr: Translator, node: ast.Call, i: int) -> AnyValue:
    """The Python object the call's argument `i` names (the model function of create_model,
    the loss of grad)."""
    if len(node.args) <= i:
        raise tr.error(node, f"missing argument {i + 1}")
    return tr.values.python_value(node.args[i])


def _closure_dict(pyfunc: Callable) -> dict[str, AnyValue]:
    out = {}
    for name, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__ or ()):
        with contextlib.suppress(ValueError):  # an empty cell: a name not bound yet
            out[name] = cell.cell_contents
    return out
