"""Execution: a decorated function compiled for one target and run from Python.

`Executable` (what ``f.build(target)`` returns, and what calling ``f`` runs) checks the user's
arguments against the function's type, runs the target's program, and makes its results Python
values (`to_python`): arrays, tuples, and closures as plain callables.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any as AnyValue

from relaydsl.backend.interpreter import Closure
from relaydsl.backend.target import Program, get_target
from relaydsl.frontend import annotations
from relaydsl.frontend.tracebacks import user_facing
from relaydsl.ir.types import FuncType

if TYPE_CHECKING:
    from relaydsl.frontend.function import RelayFunction


class Executable:
    """A compiled function for one target: checks its arguments, runs, returns NumPy values."""

    def __init__(self, fn: RelayFunction, target: str, options: dict[str, AnyValue]):
        self.fn, self.target, self.options = fn, target, options
        self.program = get_target(target).build(fn.mod, fn.global_var.name_hint, options)
        self.type = fn.checked_type
        # the `relay.Fn` parameters, which may take a decorated function or a relay op; the
        # programs with such arguments bound, by their positions and identities (kept alive)
        self._function_params = [i for i, t in enumerate(self.type.arg_types[
            :fn.num_user_params]) if isinstance(t, FuncType)]
        self._with_functions: dict[tuple, tuple[Program, FuncType, tuple]] = {}

    @user_facing
    def __call__(self, *args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        if self.fn.hidden:
            models = sorted({h.model.__name__ for h in self.fn.hidden if h.model} or
                            {self.fn.__name__})
            raise TypeError(f"{self.fn.__name__} uses the parameters of the model "
                            f"{', '.join(models)}: create one with relay.create_model and run "
                            f"it under that model (model(...), model.apply({self.fn.__name__}, "
                            "...), relay.grad(model, ...))")
        return self.run(args, [], kwargs)

    def run(self, args: tuple, hidden_values: list[AnyValue],
            kwargs: dict[str, AnyValue] | None = None) -> AnyValue:
        """Check the user's arguments (positional, or by name in `kwargs`), then run with the
        hidden parameters' values appended."""
        args = self.fn.bind_arguments(args, kwargs or {})
        params = self.fn.function.params[:self.fn.num_user_params]
        if len(args) != len(params):
            raise TypeError(f"{self.fn.__name__}() takes {len(params)} argument(s) "
                            f"({', '.join(p.name_hint for p in params)}), got {len(args)}")
        functions = {i: args[i] for i in self._function_params
                     if self.fn.is_static_function(args[i])}
        program, type_ = self.program, self.type
        if functions:  # run a program calling fn with those functions in their places
            program, type_ = self._program_with(functions)
            params = [p for i, p in enumerate(params) if i not in functions]
            args = tuple(a for i, a in enumerate(args) if i not in functions)
        bindings: dict = {}
        values = [annotations.check_argument(p.name_hint, t, a, bindings)
                  for p, t, a in zip(params, type_.arg_types, args)]
        hidden_types = type_.arg_types[len(params):]
        values += [annotations.check_argument(h.name, t, v, bindings)
                   for h, t, v in zip(self.fn.hidden, hidden_types, hidden_values)]
        return to_python(program(*values), program)

    @property
    def report(self) -> AnyValue:
        """The accelerator's report of the last call (``AccelReport``; the accel target)."""
        return program_report(self.program, self.target)

    def _program_with(self, functions: dict[int, AnyValue]) -> tuple[Program, FuncType]:
        """The program of ``fn(x0, .., @g, .., xn)`` (`RelayFunction.module_with`), built
        once for those functions."""
        key = tuple((i, id(f)) for i, f in functions.items())
        if key not in self._with_functions:
            mod, entry = self.fn.module_with(functions)
            program = get_target(self.target).build(mod, entry.name_hint, self.options)
            fn_type = mod[entry].checked_type
            assert isinstance(fn_type, FuncType)
            self._with_functions[key] = (program, fn_type, tuple(functions.values()))
        program, fn_type, _ = self._with_functions[key]
        return program, fn_type


def to_python(value: AnyValue, program: Program) -> AnyValue:
    """Results for Python: arrays, tuples, and closures as plain callables (NumPy in and out)."""
    if isinstance(value, tuple):
        return tuple(to_python(v, program) for v in value)
    if isinstance(value, Closure):
        params = value.function.params

        def call(*args: AnyValue) -> AnyValue:
            if len(args) != len(params):
                raise TypeError(f"the function takes {len(params)} argument(s), got {len(args)}")
            bindings: dict = {}
            checked = [annotations.check_argument(p.name_hint, p.checked_type, a, bindings)
                       for p, a in zip(params, args)]
            return to_python(program.call_closure(value, checked), program)

        call.relay_closure = value  # type: ignore[attr-defined]  # passed back to a program
        return call
    return value


def program_report(program: AnyValue, target: str) -> AnyValue:
    """What a compiled program reports of its last call (the accel target's AccelReport)."""
    report = getattr(program, "report", None)
    if report is None:
        raise AttributeError(f"a program built for target {target!r} keeps no report; "
                             "target 'accel' does")
    return report
