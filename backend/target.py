"""The registry of targets: how a typed module becomes something that runs.

A target compiles ``(module, entry, options)`` into a *program*: a callable on
argument values (already checked against the entry's type by the frontend) that
returns the result, and can call closures the result contains. ``relay.build``
and every decorated function go through here.

>>> sorted(available_targets())
['interp', 'llvm']
>>> get_target("llvm").options
{'opt_level': 3}
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any as AnyValue, Callable, Protocol, Sequence

from relaydsl.ir.module import IRModule

DEFAULT_TARGET = "llvm"


class Program(Protocol):
    def __call__(self, *values: AnyValue) -> AnyValue: ...

    def call_closure(self, closure: AnyValue, args: Sequence[AnyValue]) -> AnyValue: ...


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    compile: Callable[[IRModule, str, dict[str, AnyValue]], Program]
    options: dict[str, AnyValue] = field(default_factory=dict)  # accepted options, defaults

    def build(self, mod: IRModule, entry: str, options: dict[str, AnyValue]) -> Program:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            accepted = ", ".join(self.options) or "none"
            raise TypeError(f"target {self.name!r} has no option {', '.join(unknown)} "
                            f"(accepted: {accepted})")
        return self.compile(mod, entry, {**self.options, **options})


_TARGETS: dict[str, Target] = {}


def register_target(target: Target) -> Target:
    _TARGETS[target.name] = target
    return target


def default_target() -> str:
    """``$RELAYDSL_TARGET`` if set, else DEFAULT_TARGET."""
    return os.environ.get("RELAYDSL_TARGET") or DEFAULT_TARGET


def get_target(name: str | None = None) -> Target:
    """The target called `name`; the default target for None."""
    name = default_target() if name is None else name
    try:
        return _TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; available: "
                         f"{', '.join(repr(n) for n in sorted(_TARGETS))}") from None


def available_targets() -> list[str]:
    return list(_TARGETS)


class InterpreterProgram:
    """The reference interpreter running the module's entry (grad nodes lowered first)."""

    def __init__(self, mod: IRModule, entry: str):
        from relaydsl.backend.interpreter import Interpreter
        from relaydsl.transform.gradient import lower_grads

        self.mod, self.entry = lower_grads(mod), entry
        self._interpreter = Interpreter(self.mod)

    def __call__(self, *values: AnyValue) -> AnyValue:
        from relaydsl.backend.interpreter import evaluate

        return evaluate(self.mod, *values, entry=self.entry)

    def call_closure(self, closure: AnyValue, args: Sequence[AnyValue]) -> AnyValue:
        return self._interpreter.call(closure, args)


def _interp(mod: IRModule, entry: str, options: dict[str, AnyValue]) -> Program:
    return InterpreterProgram(mod, entry)


def _llvm(mod: IRModule, entry: str, options: dict[str, AnyValue]) -> Program:
    from relaydsl.backend.llvm.executor import compile_program

    level = options["opt_level"]
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 3:
        raise ValueError(f"opt_level must be an int from 0 to 3, got {level!r}")
    return compile_program(mod, entry, opt_level=level)


register_target(Target("interp", "the reference interpreter over NumPy", _interp))
register_target(Target("llvm", "fused kernels compiled for the host CPU with llvmlite", _llvm,
                       {"opt_level": 3}))
