"""A model compiled with its parameters as constants: ``relay.build(model, target=...)``.

A model's parameters are arguments of its function (``model(x)`` passes them at each
call). Built this way they are constants of the program, as TVM's
``relay.build(mod, params=...)`` binds them: known at compile time, so constant folding
and fold-scale-axis fold batch norm into the weights, and an accelerator keeps them where
its schedule wants them. The build takes a snapshot: training the model afterwards does
not change it.

>>> import numpy as np
>>> from relaydsl import relay, relay_model, Tensor, Float
>>> @relay_model
... def frozen_example(x: Tensor[Float, (1, 4)]) -> Tensor[Float, (1, 2)]:
...     return relay.linear(x, num_hidden=2)
>>> m = relay.create_model(frozen_example, seed=0)
>>> exe = relay.build(m, target="interp")
>>> x = np.ones((1, 4), np.float32)
>>> bool(np.allclose(exe(x), m(x)))
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any as AnyValue, Sequence

from relaydsl.backend.target import Program, get_target
from relaydsl.frontend import annotations
from relaydsl.frontend.execution import program_report, to_python
from relaydsl.frontend.tracebacks import user_facing
from relaydsl.ir.expr import Constant, Expr, Function, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import Type
from relaydsl.ir.visitor import ExprMutator
from relaydsl.typing import infer_types

if TYPE_CHECKING:
    from relaydsl.frontend.model import Model


class _Bind(ExprMutator):
    def __init__(self, values: dict[Var, Constant]) -> None:
        super().__init__()
        self.values = values

    def visit_var(self, var: Var) -> Expr:
        return self.values.get(var, var)


def bind_params(model: "Model") -> tuple[IRModule, str]:
    """The typed module of `model`'s forward pass with its parameters (a snapshot) bound as
    constants, and the name of its entry function."""
    fn = model.fn
    main = fn.mod[fn.global_var]
    hidden = main.params[fn.num_user_params:]
    values = {var: Constant(model.params[h.name].copy()) for var, h in zip(hidden, fn.hidden)}
    bound = IRModule(dict(fn.mod.functions), dict(fn.mod.type_definitions), prelude=False)
    bound.add(fn.global_var, Function(
        main.params[:fn.num_user_params], _Bind(values).visit(main.body), main.ret_type,
        main.type_params, main.attrs, span=main.span))
    return infer_types(bound), fn.global_var.name_hint


def call_checked(name: str, params: Sequence[Var], types: Sequence[Type],
                 args: Sequence[AnyValue], program: Program) -> AnyValue:
    """`program` (a build of the function `name`) on `args`, each first checked against its
    parameter's type (a TypeError naming the parameter, expected and actual type)."""
    if len(args) != len(params):
        raise TypeError(f"{name}() takes {len(params)} argument(s) "
                        f"({', '.join(p.name_hint for p in params)}), got {len(args)}")
    bindings: dict = {}
    values = [annotations.check_argument(p.name_hint, t, a, bindings)
              for p, t, a in zip(params, types, args)]
    return to_python(program(*values), program)


class FrozenModel:
    """`model`'s forward pass compiled for `target` with its parameters as constants (see
    the module docstring); called with the model function's own arguments."""

    def __init__(self, model: "Model", target: str | None, options: dict[str, AnyValue]):
        self.fn = model.fn
        mod, entry = bind_params(model)
        self.target = get_target(target)
        self.program = self.target.build(mod, entry, options)
        self.type = mod[entry].checked_type

    @user_facing
    def __call__(self, *args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        args = self.fn.bind_arguments(args, kwargs)
        params = self.fn.function.params[:self.fn.num_user_params]
        return call_checked(self.fn.__name__, params, self.type.arg_types, args, self.program)

    @property
    def report(self) -> AnyValue:
        """The accelerator's report of the last call (``AccelReport``; the accel target)."""
        return program_report(self.program, self.target.name)

