"""The training API inside decorated code: the training loop of Figure 4 written in Relay.

    @relay
    def train(data: tuple[Tensor[Float, ("n", 784)], Tensor[Float, ("n", 10)]]):
        model = relay.create_model(mlp)             # Ref[(p0, ..., pk)], initialised now
        for x, y in data:
            g = relay.grad(model, loss, (x, y))      # grad(fn(q..) { loss(x, y, q..) })(!model)
            relay.update_model_params(model, g)      # model := (p0 - lr * g0, ...)
        return relay.export_model(model)            # fn(x) { mlp(x, !model...) }

A model is a reference to the tuple of its parameters: ``update_model_params``
is the one form of mutation, as in the paper. The parameters' initial values
are made when the function is translated (``relay.create_model``'s seed and
initialiser apply).

As in Python, ``relay.grad`` runs the loss in training mode and ``export_model`` gives the
inference mode. A model with state (batch_norm's running statistics) gets it from the model
reference into references of its own, which the training variant updates, and back::

    let params = !model;
    let g = grad(fn(q..) { loss_training(x, y, q.., params.k..) })(trainable params..).1;
    let s = ref(params.k) ..; loss_update(x, y, params.0.., s..);
    model := (params.0, .., !s, ..); g
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, Grad, Let, RefCreate, RefRead, RefWrite, Tuple,
    TupleGetItem, Var,
)
from relaydsl.op.registry import ops

if TYPE_CHECKING:
    from relaydsl.frontend.decorators import RelayFunction, RelayModelFunction
    from relaydsl.frontend.translate import Translator


class ModelValue:
    """What the translator knows of a model value: its function and its parameters' dtypes."""

    def __init__(self, fn: "RelayModelFunction", dtypes: list[str]):
        self.fn, self.dtypes = fn, dtypes
        # the indices of the parameters gradients update (the others are state)
        self.trainable = [i for i, h in enumerate(fn.hidden) if not h.spec.state]


def create_model(tr: "Translator", owner: "RelayFunction", node, model_fn, static: dict) -> Expr:
    from relaydsl.frontend.model import create_model as create

    params = create(model_fn, **static).params
    owner._to_global(model_fn)
    expr = RefCreate(Tuple([Constant(v) for v in params.values()]), span=tr.span(node))
    tr._kinds[expr] = ModelValue(model_fn, [str(v.dtype) for v in params.values()])
    return expr


def _model(tr: "Translator", value: Expr, env, node) -> ModelValue:
    kind = tr.kind_of(value, env)
    if not isinstance(kind, ModelValue):
        raise tr.error(node, "the first argument must be a model made by relay.create_model in "
                             "this function")
    return kind


def grad(tr: "Translator", owner: "RelayFunction", node, args: list, env) -> Expr:
    """relay.grad(model, loss, data): the loss's gradients with respect to the trainable
    parameters, the loss running in training mode (the model's state updated)."""
    from relaydsl.frontend.decorators import RelayFunction

    model_expr, loss, data = args
    model = _model(tr, model_expr, env, node)
    if not isinstance(loss, RelayFunction) or not loss.hidden or any(
            h.model is not model.fn for h in loss.hidden):
        raise tr.error(node, f"relay.grad(model, loss, data): loss must be a decorated function "
                             f"using the model {model.fn.__name__}")
    owner._to_global(loss)
    owner.mode_callees.append((loss, "training"))
    span = tr.span(node)
    hidden = model.fn.hidden
    params = Var("params")
    index = {h.name: i for i, h in enumerate(hidden)}
    fields = list(data.fields) if isinstance(data, Tuple) else [data]
    bound = [Var(f"data{i}") for i in range(len(fields))]  # used by two calls: bound once

    def loss_args(replace: dict[int, Var]) -> list[Expr]:
        """The loss's arguments: the data, then its hidden ones, `replace`d or the model's."""
        return [*bound, *(replace[index[h.name]] if index[h.name] in replace
                          else TupleGetItem(params, index[h.name]) for h in loss.hidden)]

    qs = {i: Var(hidden[i].name) for i in model.trainable}
    inner = Function(list(qs.values()), Call(loss.global_var_for("training"), loss_args(qs)))
    result = Call(Grad(inner, span=span), [TupleGetItem(params, i) for i in model.trainable],
                  span=span)
    body: Expr = TupleGetItem(result, 1)
    refs = {i: Var(h.name) for i, h in enumerate(hidden) if h.spec.state}
    if refs:  # the update variant's final state goes back into the model
        owner.mode_callees.append((loss, "update"))
        g = Var("grads")
        new = Tuple([hidden[i].spec.after_step(RefRead(refs[i])) if i in refs
                     else TupleGetItem(params, i) for i in range(len(hidden))])
        update = Let(Var("_"), Call(loss.global_var_for("update"), loss_args(refs)),
                     Let(Var("_"), RefWrite(model_expr, new), g))
        for i, ref in reversed(refs.items()):
            update = Let(ref, RefCreate(TupleGetItem(params, i)), update)
        body = Let(g, body, update)
    for var, field in reversed(list(zip(bound, fields))):
        body = Let(var, field, body)
    out = Let(params, RefRead(model_expr), body, span=span)
    tr._kinds[out] = "tuple"
    return out


def update(tr: "Translator", node, args: list, static: dict, env) -> Expr:
    """relay.update_model_params(model, grads, lr=0.01): SGD on the trainable parameters, in
    place."""
    model_expr, grads = args
    model = _model(tr, model_expr, env, node)
    lr = float(static.pop("lr", 0.01))
    if static:
        raise tr.error(node, f"relay.update_model_params inside decorated code takes lr= only "
                             f"(SGD); got {', '.join(static)}")
    params, g = Var("params"), Var("grads")
    grad_of = {i: k for k, i in enumerate(model.trainable)}  # parameter index -> grads index

    def updated(i: int, dtype: str) -> Expr:
        p = TupleGetItem(params, i)
        if i not in grad_of:
            return p
        return ops.subtract(p, ops.multiply(Constant(np.array(lr, dtype)),
                                            TupleGetItem(g, grad_of[i])))

    new = Tuple([updated(i, dtype) for i, dtype in enumerate(model.dtypes)])
    # the gradients first: computing them may update the model's state
    return Let(g, grads, Let(params, RefRead(model_expr), RefWrite(model_expr, new)),
               span=tr.span(node))


def export(tr: "Translator", owner: "RelayFunction", node, args: list, env) -> Expr:
    """relay.export_model(model): a closure running the model in inference mode on a snapshot
    of its parameters."""
    (model_expr,) = args
    model = _model(tr, model_expr, env, node)
    owner._to_global(model.fn)
    fn = model.fn
    user = [Var(p.name_hint, p.type_annotation) for p in fn.function.params[:fn.num_user_params]]
    params = Var("params")
    body = Call(fn.global_var, [*user, *(TupleGetItem(params, i) for i in range(len(fn.hidden)))])
    out = Let(params, RefRead(model_expr), Function(user, body), span=tr.span(node))
    tr._kinds[out] = "func"
    return out


__all__ = ["ModelValue", "create_model", "export", "grad", "update"]
