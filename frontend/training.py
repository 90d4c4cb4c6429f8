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

import ast
from typing import TYPE_CHECKING

import numpy as np

from relaydsl.errors import DSLSyntaxError
from relaydsl.frontend.function import RelayFunction
from relaydsl.frontend.model import (
    OPTIMISERS, SGD, Adam, Momentum, create_model as create_parameters, update_model_params,
)
from relaydsl.frontend.modes import Mode
from relaydsl.frontend.translate.kinds import TupleKind, ValueKind, declared_result_kind
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, Grad, Let, RefCreate, RefRead, RefWrite, Tuple,
    TupleGetItem, Var,
)
from relaydsl.ir.visitor import type_vars_of
from relaydsl.op.registry import ops

if TYPE_CHECKING:
    from relaydsl.frontend.function import RelayModelFunction
    from relaydsl.frontend.model import Optimizer
    from relaydsl.frontend.translate import Translator
    from relaydsl.frontend.translate.bindings import Env


class ModelValue:
    """What the translator knows of a model value: its function, its parameters' dtypes, and
    the optimiser its updates use.

    The model reference holds a tuple: the parameters (trainable and state, in the function's
    order), then the optimiser's state: for each of its slots (Momentum's velocity, Adam's
    moments) one array per trainable parameter, and, for Adam, the step count.
    """

    def __init__(self, fn: "RelayModelFunction", dtypes: list[str],
                 optimizer: "type[Optimizer]"):
        self.fn, self.dtypes, self.optimizer = fn, dtypes, optimizer
        # the indices of the parameters gradients update (the others are state)
        self.trainable = [i for i, h in enumerate(fn.hidden) if not h.spec.state]
        self.num_fields = (len(dtypes) + len(optimizer.SLOTS) * len(self.trainable)
                           + (1 if optimizer.STEP_SLOTS else 0))

    def slot_index(self, slot: str, k: int) -> int:
        """The tuple index of `slot`'s array for the k-th trainable parameter."""
        return len(self.dtypes) + self.optimizer.SLOTS.index(slot) * len(self.trainable) + k

    @property
    def step_index(self) -> int:
        return self.num_fields - 1


def create_model(tr: "Translator", owner: "RelayFunction", node, model_fn, static: dict) -> Expr:
    """relay.create_model(fn, seed=, init=, sigma=): a reference to the parameters' initial
    values, and to zeros for the state of the optimiser this function's updates of the model
    use (found in the function's text: the state must exist before the training loop)."""
    params = create_parameters(model_fn, **static).params
    owner.global_of(model_fn)
    optimizer = _optimizer_of(tr, owner, node)
    model = ModelValue(model_fn, [str(v.dtype) for v in params.values()], optimizer)
    values = list(params.values())
    trainable = [values[i] for i in model.trainable]
    fields = [Constant(v) for v in values]
    fields += [Constant(np.zeros_like(v)) for _ in optimizer.SLOTS for v in trainable]
    if optimizer.STEP_SLOTS:
        fields.append(Constant(np.array(0, "int32")))
    expr = RefCreate(Tuple(fields), span=tr.span(node))
    tr.kinds.note(expr, model)
    return expr


def _optimizer_of(tr: "Translator", owner: "RelayFunction", node: ast.Call
                  ) -> "type[Optimizer]":
    """The optimiser of the `relay.update_model_params(model, ..., optimizer=...)` calls in
    `owner` of the model that `node` creates (assigned to a name); SGD when there are none."""
    tree = owner.source.tree
    names = {t.id for a in ast.walk(tree) if isinstance(a, ast.Assign) and a.value is node
             for t in a.targets if isinstance(t, ast.Name)}
    found: dict[str, ast.Call] = {}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Name)
                and call.args[0].id in names and isinstance(call.func, (ast.Name, ast.Attribute))):
            continue
        try:
            target = tr.values.python_value(call.func)
        except DSLSyntaxError:  # a local function: not the update
            continue
        if target is not update_model_params:
            continue
        chosen = next((k.value for k in call.keywords if k.arg == "optimizer"), None)
        kind = "sgd" if chosen is None else tr.values.static(chosen)
        if kind not in OPTIMISERS:
            raise tr.error(call, f"optimizer must be one of {sorted(OPTIMISERS)}, got {kind!r}")
        found.setdefault(kind, call)
    if len(found) > 1:
        raise tr.error(list(found.values())[1], f"one model's updates use one optimiser; this "
                                                f"function uses {' and '.join(found)}")
    return OPTIMISERS[next(iter(found))] if found else SGD


def _model(tr: "Translator", value: Expr, env: Env, node: ast.Call) -> ModelValue:
    kind = tr.kinds.of(value, env)
    if not isinstance(kind, ModelValue):
        raise tr.error(node, "the first argument must be a model made by relay.create_model in "
                             "this function")
    return kind


def grad(tr: "Translator", owner: "RelayFunction", node, args: list, env) -> Expr:
    """relay.grad(model, loss, data): the loss's gradients with respect to the trainable
    parameters, the loss running in training mode (the model's state updated)."""
    model_expr, loss, data = args
    model = _model(tr, model_expr, env, node)
    if not isinstance(loss, RelayFunction) or not loss.hidden or any(
            h.model is not model.fn for h in loss.hidden):
        raise tr.error(node, f"relay.grad(model, loss, data): loss must be a decorated function "
                             f"using the model {model.fn.__name__}")
    owner.global_of(loss)
    owner.mode_callees.append((loss, Mode.TRAINING))
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
    inner = Function(list(qs.values()), Call(loss.global_var_for(Mode.TRAINING), loss_args(qs)))
    result = Call(Grad(inner, span=span), [TupleGetItem(params, i) for i in model.trainable],
                  span=span)
    body: Expr = TupleGetItem(result, 1)
    refs = {i: Var(h.name) for i, h in enumerate(hidden) if h.spec.state}
    if refs:  # the update variant's final state goes back into the model
        owner.mode_callees.append((loss, Mode.UPDATE))
        g = Var("grads")
        new = Tuple([hidden[i].spec.after_step(RefRead(refs[i])) if i in refs
                     else TupleGetItem(params, i) for i in range(model.num_fields)])
        update = Let(Var("_"), Call(loss.global_var_for(Mode.UPDATE), loss_args(refs)),
                     Let(Var("_"), RefWrite(model_expr, new), g))
        for i, ref in reversed(refs.items()):
            update = Let(ref, RefCreate(TupleGetItem(params, i)), update)
        body = Let(g, body, update)
    for var, field in reversed(list(zip(bound, fields))):
        body = Let(var, field, body)
    out = Let(params, RefRead(model_expr), body, span=span)
    tr.kinds.note(out, TupleKind((ValueKind.TENSOR,) * len(model.trainable)))
    return out


def allreduce(tr: "Translator", node, args: list, static: dict, env) -> Expr:
    """dist.allreduce(grads, op="mean") inside decorated code: each gradient of
    relay.grad(model, loss, data) summed over the ranks by ``psum`` in the compiled program
    (one exchange per gradient), divided for the mean by the number of ranks, ``psum(1)``.
    In one process, the identity."""
    op = static.pop("op", "mean")
    if len(args) != 1 or static or op not in ("mean", "sum"):
        raise tr.error(node, "inside decorated code dist.allreduce takes the gradients of "
                             "relay.grad(model, loss, data) and op='mean' or op='sum' "
                             f"(count=, model= and bucket_bytes= are the Python loop's); got "
                             f"{len(args)} argument(s), op={op!r}"
                             f"{', ' + ', '.join(f'{k}=' for k in static) if static else ''}")
    kind = tr.kinds.of(args[0], env)
    if not isinstance(kind, TupleKind) or any(f is not ValueKind.TENSOR for f in kind.fields):
        raise tr.error(node, "inside decorated code dist.allreduce takes the gradients "
                             "relay.grad(model, loss, data) returns (a tuple of tensors); for "
                             "another value, sum it over the ranks with relay.psum(x)")
    grads, ranks = Var("grads"), Var("ranks")
    fields: list[Expr] = []
    for k in range(len(kind.fields)):
        total = ops.psum(TupleGetItem(grads, k))
        fields.append(ops.divide(total, ops.cast_like(ranks, total)) if op == "mean" else total)
    body: Expr = Tuple(fields)
    if op == "mean":
        body = Let(ranks, ops.psum(Constant(np.array(1.0, "float32"))), body)
    out = Let(grads, args[0], body, span=tr.span(node))
    tr.kinds.note(out, kind)
    return out


def update(tr: "Translator", node, args: list, static: dict, env) -> Expr:
    """relay.update_model_params(model, grads, lr=0.01, optimizer="sgd", ...): a step of the
    optimiser on the trainable parameters, in place, as the Python API's (its hyperparameters
    by keyword: momentum=; beta1=, beta2=, eps=), its state kept in the model reference."""
    model_expr, grads = args
    model = _model(tr, model_expr, env, node)
    static.pop("optimizer", None)  # create_model chose the model's optimiser from this call
    try:
        optimizer = OPTIMISERS[model.optimizer.kind](**static)
    except TypeError:
        raise tr.error(node, f"relay.update_model_params with optimizer="
                             f"{model.optimizer.kind!r} takes the keyword arguments "
                             f"{', '.join(f'{h}=' for h in model.optimizer.HYPERPARAMETERS)}; "
                             f"got {', '.join(static)}") from None
    params, g = Var("params"), Var("grads")
    lets: list[tuple[Var, Expr]] = [(g, grads), (params, RefRead(model_expr))]
    fields: list[Expr] = [TupleGetItem(params, i) for i in range(model.num_fields)]

    def bind(name: str, value: Expr) -> Var:
        var = Var(name)
        lets.append((var, value))
        return var

    def const(value: float, dtype: str) -> Constant:
        return Constant(np.array(value, dtype))

    step = None
    if model.optimizer.STEP_SLOTS:
        step = bind("t", ops.add(fields[model.step_index], Constant(np.array(1, "int32"))))
        fields[model.step_index] = step
    for k, i in enumerate(model.trainable):
        dtype, grad_k = model.dtypes[i], TupleGetItem(g, k)
        if isinstance(optimizer, Momentum):
            v = bind("velocity", ops.add(ops.multiply(const(optimizer.momentum, dtype),
                                                      fields[model.slot_index("velocity", k)]),
                                         grad_k))
            fields[model.slot_index("velocity", k)] = v
            delta: Expr = ops.multiply(const(optimizer.lr, dtype), v)
        elif isinstance(optimizer, Adam):
            assert step is not None
            grad_k = bind("g", grad_k)
            b1, b2 = const(optimizer.beta1, dtype), const(optimizer.beta2, dtype)
            one = const(1.0, dtype)
            m = bind("m", ops.add(ops.multiply(b1, fields[model.slot_index("m", k)]),
                                  ops.multiply(ops.subtract(one, b1), grad_k)))
            v = bind("v", ops.add(ops.multiply(b2, fields[model.slot_index("v", k)]),
                                  ops.multiply(ops.subtract(one, b2),
                                               ops.multiply(grad_k, grad_k))))
            fields[model.slot_index("m", k)], fields[model.slot_index("v", k)] = m, v
            t = ops.cast(step, dtype=dtype)
            m_hat = ops.divide(m, ops.subtract(one, ops.power(b1, t)))
            v_hat = ops.divide(v, ops.subtract(one, ops.power(b2, t)))
            delta = ops.divide(ops.multiply(const(optimizer.lr, dtype), m_hat),
                               ops.add(ops.sqrt(v_hat), const(optimizer.eps, dtype)))
        else:
            delta = ops.multiply(const(optimizer.lr, dtype), grad_k)
        fields[i] = ops.subtract(fields[i], delta)
    # the gradients first: computing them may update the model's state
    out: Expr = RefWrite(model_expr, Tuple(fields))
    for var, value in reversed(lets[1:]):
        out = Let(var, value, out)
    return Let(g, grads, out, span=tr.span(node))


def export(tr: "Translator", owner: "RelayFunction", node, args: list, env) -> Expr:
    """relay.export_model(model): a closure running the model in inference mode on a snapshot
    of its parameters."""
    (model_expr,) = args
    model = _model(tr, model_expr, env, node)
    owner.global_of(model.fn)
    fn = model.fn
    user = [Var(p.name_hint, p.type_annotation) for p in fn.function.params[:fn.num_user_params]]
    params = Var("params")
    body = Call(fn.global_var, [*user, *(TupleGetItem(params, i) for i in range(len(fn.hidden)))])
    # As polymorphic as the model: for one written with symbolic dims, ``fn<n>(%x:
    # Tensor[(n, 784)]) -> Tensor[(n, 10)]``, which a caller (a result annotated
    # `relay.Fn[[Tensor[Float, (8, 784)]], ...]`) uses at an instance. Without its own type
    # parameters the closure's `n` would be rigid in this function, standing for any size,
    # never 8. Its result type is written out (the model's, typed when create_model made the
    # parameters): a polymorphic type is instantiated whole, so it must be complete.
    ret = fn.checked_type.ret_type
    dims = list(dict.fromkeys(
        v for t in (*(u.type_annotation for u in user if u.type_annotation), ret)
        for v in type_vars_of(t)))
    closure = Function(user, body, ret if dims else None, tuple(dims))
    out = Let(params, RefRead(model_expr), closure, span=tr.span(node))
    tr.kinds.note(out, ValueKind.FUNCTION)
    tr.kinds.note_result(out, declared_result_kind(fn))
    return out


__all__ = ["ModelValue", "create_model", "export", "grad", "update"]
