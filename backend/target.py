"""The registry of targets: how a typed module becomes something that runs.

A target compiles ``(module, entry, options)`` into a *program*: a callable on
argument values (already checked against the entry's type by the frontend) that
returns the result, and can call closures the result contains. ``relay.build``
and every decorated function go through here.

A build compiles with one ``CompileOptions`` (relaydsl/transform/pipeline.py): its
``opt_level`` is the build's ``opt_level`` option if given, else the current PassContext's,
else the target's default (``pipeline.DEFAULT_OPT_LEVEL``: llvm 3, interp 0), and its
context, the one the target runs its pipeline under, is the current PassContext at that
level.

>>> sorted(available_targets())
['accel', 'interp', 'llvm']
>>> get_target("llvm").options
{'opt_level': 3}
>>> from relaydsl.transform import PassContext
>>> with PassContext(opt_level=1, disabled_pass=["FuseOps"]):
...     options, context = get_target("llvm").configure({})
>>> options, context.opt_level, sorted(context.disabled_pass)
({'opt_level': 1}, 1, ['FuseOps'])
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field, replace
from typing import Any as AnyValue, Callable, Protocol, Sequence

from relaydsl import settings
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import deep_recursion
from relaydsl.transform import pipeline
from relaydsl.transform.instrument import DumpIR
from relaydsl.transform.pass_infra import PassContext
from relaydsl.transform.pipeline import CompileOptions

DEFAULT_TARGET = "llvm"
_log = logging.getLogger(__name__)


class Program(Protocol):
    def __call__(self, *values: AnyValue) -> AnyValue: ...

    def call_closure(self, closure: AnyValue, args: Sequence[AnyValue]) -> AnyValue: ...


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    compile: Callable[[IRModule, str, CompileOptions], Program]  # run under options.context
    own_options: dict[str, AnyValue] = field(default_factory=dict)  # the target's, defaults
    check_options: Callable[[dict[str, AnyValue]], None] | None = None  # raises on bad values

    @property
    def options(self) -> dict[str, AnyValue]:
        """The options a build accepts, with their defaults."""
        return {"opt_level": pipeline.DEFAULT_OPT_LEVEL[self.name], **self.own_options}

    def compile_options(self, options: dict[str, AnyValue]) -> CompileOptions:
        """What a build with `options` (``relay.build``'s keywords) compiles with, under the
        current PassContext. Together with the target it is everything a compiled program
        depends on besides its module."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            accepted = ", ".join(self.options) or "none"
            raise TypeError(f"target {self.name!r} has no option {', '.join(unknown)} "
                            f"(accepted: {accepted})")
        own = {**self.own_options, **{k: v for k, v in options.items() if k != "opt_level"}}
        if self.check_options is not None:
            self.check_options(own)
        level, context = options.get("opt_level"), PassContext.current()
        chosen = _options(self.name, context) if level is None else \
            CompileOptions(level, context)
        return replace(chosen, target_options=tuple(sorted(own.items()))) if own else chosen

    def configure(self, options: dict[str, AnyValue]) -> tuple[dict[str, AnyValue], PassContext]:
        """``compile_options(options)`` as the options with defaults filled in and the
        PassContext the pipeline runs under (the key of a compiled program)."""
        chosen = self.compile_options(options)
        return {**self.own_options, **options, "opt_level": chosen.opt_level}, chosen.context

    def build(self, mod: IRModule, entry: str, options: dict[str, AnyValue]) -> Program:
        """`entry` of `mod` compiled with `options` under the current PassContext.

        Where the settings ask for it, what it does is logged (``RELAYDSL_LOG``) and the IR
        after each pass written to files (``RELAYDSL_DUMP_IR``: a subdirectory
        ``<entry>.<target>`` per build)."""
        settings.apply_log_setting()
        chosen = self.compile_options(options)
        dump = settings.dump_ir_dir()
        if dump is not None:
            context = chosen.context
            instrument = DumpIR.fresh(dump, f"{entry}.{self.name}")
            chosen = replace(chosen, context=replace(
                context, instruments=(*context.instruments, instrument)))
        _log.info("building @%s for %s at opt_level %d", entry, self.name, chosen.opt_level)
        with chosen.context, deep_recursion():
            return self.compile(mod, entry, chosen)


@functools.lru_cache(maxsize=64)  # every call of a decorated function asks
def _options(target: str, context: PassContext) -> CompileOptions:
    return CompileOptions.for_target(target, context=context)


_TARGETS: dict[str, Target] = {}


def register_target(target: Target) -> Target:
    _TARGETS[target.name] = target
    return target


def default_target() -> str:
    """``$RELAYDSL_TARGET`` if set, else DEFAULT_TARGET."""
    return settings.target(_TARGETS) or DEFAULT_TARGET


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
    """The reference interpreter running the module's entry, after the interp pipeline (grad
    nodes lowered; more at higher opt_levels) under the current PassContext."""

    def __init__(self, mod: IRModule, entry: str):
        from relaydsl.backend.interpreter import Interpreter

        self.mod, self.entry = pipeline.for_target("interp", entry)(mod), entry
        self._interpreter = Interpreter(self.mod)
        _log.info("@%s runs on the interpreter", entry)

    def __call__(self, *values: AnyValue) -> AnyValue:
        from relaydsl.backend.interpreter import evaluate

        return evaluate(self.mod, *values, entry=self.entry)

    def call_closure(self, closure: AnyValue, args: Sequence[AnyValue]) -> AnyValue:
        return self._interpreter.call(closure, args)


def _interp(mod: IRModule, entry: str, options: CompileOptions) -> Program:
    return InterpreterProgram(mod, entry)


def _llvm(mod: IRModule, entry: str, options: CompileOptions) -> Program:
    from relaydsl.backend.llvm.executor import compile_program

    return compile_program(mod, entry, options)


register_target(Target("interp", "the reference interpreter over NumPy", _interp))
register_target(Target("llvm", "fused kernels compiled for the host CPU with llvmlite", _llvm))


def _check_accel_options(options: dict[str, AnyValue]) -> None:
    from relaydsl.backend.accel.config import AcceleratorConfig
    from relaydsl.backend.accel.schedule import SCHEDULES

    config = options["config"]
    if config is not None and not isinstance(config, AcceleratorConfig):
        raise TypeError(f"target 'accel': config must be a relay.AcceleratorConfig, got "
                        f"{type(config).__name__}")
    if options["schedule"] not in SCHEDULES:
        raise ValueError(f"target 'accel': unknown schedule {options['schedule']!r}; choose one "
                         f"of {', '.join(repr(s) for s in SCHEDULES)}")


def _accel(mod: IRModule, entry: str, options: CompileOptions) -> Program:
    from relaydsl.backend.accel.config import AcceleratorConfig
    from relaydsl.backend.accel.program import AccelProgram

    config = options["config"] or AcceleratorConfig.deep_fusion()
    return AccelProgram(mod, entry, config, options["schedule"])


register_target(Target("accel", "a simulated DNN accelerator with Deep Fusion scheduling "
                       "(relay.AcceleratorConfig)", _accel,
                       {"config": None, "schedule": "fusion+reuse"}, _check_accel_options))
