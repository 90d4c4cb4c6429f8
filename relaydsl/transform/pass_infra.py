"""A small pass infrastructure, after TVM's (include/tvm/ir/transform.h): Pass, Sequential,
PassContext.

- A ``Pass`` is a named ``IRModule -> IRModule`` function with an ``opt_level``, a one-line
  ``description`` and the passes it ``required`` (run before it). Calling it runs the
  function and re-types what the function left untyped, so the next pass can rely on every
  node's ``checked_type`` (DESIGN.md §1).
- ``module_pass(opt_level=..., name=..., description=...)`` turns a plain function into a Pass.
- ``Sequential([...])`` is itself a Pass: it runs each pass the current ``PassContext``
  enables (a pass's required passes run first, whatever their level).
- ``PassContext(opt_level=2, required_pass=[...], disabled_pass=[...], instruments=[...])``
  is a context manager. A pass is enabled when it is not disabled and either required or at
  most at the context's level (disabled wins). ``opt_level=None``, the default context's,
  leaves the level to whoever runs the passes: ``relay.build`` takes the target's default
  level, a Sequential run on its own runs every level.
- Instruments (instrument.py) watch every pass called under the context: timing, IR dumps.
- Logging: each Sequential run logs its passes and their times to the
  ``relaydsl.transform.pass_infra`` logger (INFO: the pipeline in one line; DEBUG: each pass).

The passes a target runs, and their levels, are listed in pipeline.py.

>>> from relaydsl.ir import Call, Function, IRModule, Op, TensorType, Var
>>> @module_pass(opt_level=3, name="Noop", description="changes nothing")
... def noop(mod):
...     return mod.copy()
>>> x = Var("x", TensorType((2,)))
>>> mod = IRModule.from_expr(Function([x], Call(Op.get("exp"), [x])))
>>> seq = Sequential([noop], name="demo")
>>> with PassContext(opt_level=2):
...     out = seq(mod)          # Noop is above level 2: skipped
>>> seq.last_run
()
>>> with PassContext(opt_level=2, required_pass=["Noop"]):
...     out = seq(mod)
>>> seq.last_run
('Noop',)
>>> out["main"].checked_type
fn(Tensor[(2,), float32]) -> Tensor[(2,), float32]
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import overload

from relaydsl import settings
from relaydsl.errors import IRError
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import deep_recursion
from relaydsl.transform._util import retyped
from relaydsl.transform.instrument import PassInstrument
from relaydsl.transform.verify import changed_functions, check_scopes, check_types, kept_types

_log = logging.getLogger(__name__)


def _names(value: Iterable[str], what: str) -> frozenset[str]:
    if isinstance(value, str):
        raise IRError(f"PassContext {what} takes a list of pass names, not one string")
    return frozenset(value)


@dataclass(frozen=True)
class PassContext:
    """The settings passes run under: the optimisation level, the passes switched on and off
    whatever the level, and the instruments watching every pass.

    Use as a context manager; contexts nest, the innermost is ``PassContext.current()``.
    Equal settings make equal (and equally hashed) contexts: compiled programs are cached by
    them. Instruments compare by identity.
    """

    opt_level: int | None = None
    required_pass: frozenset[str] = field(default_factory=frozenset)
    disabled_pass: frozenset[str] = field(default_factory=frozenset)
    instruments: tuple[PassInstrument, ...] = ()

    def __post_init__(self) -> None:
        level = self.opt_level
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)
                                  or level < 0):
            raise IRError(f"PassContext opt_level must be an int >= 0, got {level!r}")
        object.__setattr__(self, "required_pass", _names(self.required_pass, "required_pass"))
        object.__setattr__(self, "disabled_pass", _names(self.disabled_pass, "disabled_pass"))
        object.__setattr__(self, "instruments", tuple(self.instruments))
        for i in self.instruments:
            if not isinstance(i, PassInstrument):
                raise IRError(f"PassContext instruments must be PassInstruments, got {i!r}")

    def __enter__(self) -> "PassContext":
        # an instrument is entered with the first context holding it, exited with the last
        active = _active_instruments()
        _stack().append(self)
        for i in self.instruments:
            if i not in active:
                i.enter_pass_ctx()
        return self

    def __exit__(self, *exc: object) -> None:
        popped = _stack().pop()
        assert popped is self, "PassContexts must be exited in the order they were entered"
        still_active = _active_instruments()
        for i in self.instruments:
            if i not in still_active:
                i.exit_pass_ctx()

    @staticmethod
    def current() -> "PassContext":
        stack = _stack()
        return stack[-1] if stack else _DEFAULT_CONTEXT

    def enables(self, p: "Pass") -> bool:
        """Whether a Sequential running under this context runs `p`."""
        if p.name in self.disabled_pass:
            return False
        return p.name in self.required_pass or self.opt_level is None or \
            p.opt_level <= self.opt_level


_DEFAULT_CONTEXT = PassContext()
_local = threading.local()


def _stack() -> list[PassContext]:
    if not hasattr(_local, "contexts"):
        _local.contexts = []
    return _local.contexts


def _active_instruments() -> list[PassInstrument]:
    return [i for ctx in _stack() for i in ctx.instruments]


@dataclass(frozen=True, eq=False)
class Pass:
    """A named module transformation: ``pass_(mod)`` returns the transformed, typed module.

    The instruments of the current context see the call: any ``should_run`` returning False
    skips it (the module is returned as it is), then ``run_before_pass`` and
    ``run_after_pass`` surround it.
    """

    name: str
    opt_level: int
    transform: Callable[[IRModule], IRModule] = field(repr=False)
    description: str
    required: tuple["Pass", ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "required", tuple(self.required))
        for r in self.required:
            if not isinstance(r, Pass):
                raise IRError(f"pass {self.name}: required passes must be Passes, got {r!r}")

    def __call__(self, mod: IRModule) -> IRModule:
        if not isinstance(mod, IRModule):
            raise IRError(f"pass {self.name} takes an IRModule, got {type(mod).__name__}")
        instruments = PassContext.current().instruments
        if not all(i.should_run(mod, self) for i in instruments):
            return mod
        for i in instruments:
            i.run_before_pass(mod, self)
        with deep_recursion():
            out = self.transform(mod)
        if not isinstance(out, IRModule):
            raise IRError(f"pass {self.name} returned {type(out).__name__}, not an IRModule")
        kept = None
        if settings.verify_ir():  # (the functions the pass rebuilt: the others were checked)
            changed = changed_functions(mod, out)
            check_scopes(out, changed, self.name)
            kept = kept_types(changed)
        out = retyped(out, types_kept=True)  # infers only functions the pass left untyped
        if kept is not None:
            check_types(out, kept, self.name)
        for i in instruments:
            i.run_after_pass(out, self)
        return out


@overload
def module_pass(transform: Callable[[IRModule], IRModule], *, opt_level: int,
                description: str, name: str | None = None, required: Iterable[Pass] = ()
                ) -> Pass: ...
@overload
def module_pass(transform: None = None, *, opt_level: int,
                description: str, name: str | None = None, required: Iterable[Pass] = ()
                ) -> Callable[[Callable[[IRModule], IRModule]], Pass]: ...
def module_pass(transform: Callable[[IRModule], IRModule] | None = None, *, opt_level: int,
                description: str, name: str | None = None, required: Iterable[Pass] = ()
                ) -> Pass | Callable[[Callable[[IRModule], IRModule]], Pass]:
    """Make a Pass of a function ``IRModule -> IRModule``; usable as a decorator
    (``@module_pass(opt_level=1, description="...")``) or called directly
    (``module_pass(f, opt_level=1, description="...")``). The name defaults to the
    function's name."""

    def make(fn: Callable[[IRModule], IRModule]) -> Pass:
        return Pass(name or fn.__name__, opt_level, fn, description, tuple(required))

    return make if transform is None else make(transform)


class Sequential(Pass):
    """Runs passes in order under the current PassContext; itself a Pass (opt_level 0).

    ``plan()`` lists the passes a run would call; after a run, ``last_run`` lists the names
    of the passes that were called, required ones included. A Sequential is not itself
    shown to instruments: its passes are.
    """

    def __init__(self, passes: Sequence[Pass], name: str = "Sequential", opt_level: int = 0,
                 required: Iterable[Pass] = ()):
        for p in passes:
            if not isinstance(p, Pass):
                raise IRError(f"Sequential takes Passes, got {p!r}")
        description = "runs " + (", ".join(p.name for p in passes) or "nothing")
        super().__init__(name, opt_level, self._run, description, tuple(required))
        object.__setattr__(self, "passes", tuple(passes))
        object.__setattr__(self, "last_run", ())

    def plan(self, context: PassContext | None = None) -> list[Pass]:
        """The passes a run under `context` (default: the current one) calls, in order."""
        context = PassContext.current() if context is None else context
        return [q for p in self.passes if context.enables(p)  # type: ignore[attr-defined]
                for q in (*p.required, p)]

    def __call__(self, mod: IRModule) -> IRModule:
        if not isinstance(mod, IRModule):
            raise IRError(f"pass {self.name} takes an IRModule, got {type(mod).__name__}")
        return self._run(mod)

    def _run(self, mod: IRModule) -> IRModule:
        plan = self.plan()
        mod = retyped(mod, types_kept=True)
        timings: list[tuple[str, float]] = []
        for p in plan:
            start = time.perf_counter()
            mod = p(mod)
            timings.append((p.name, 1000 * (time.perf_counter() - start)))
            if _log.isEnabledFor(logging.DEBUG):
                _log.debug("%s: %s in %.2f ms", self.name, *timings[-1])
        object.__setattr__(self, "last_run", tuple(p.name for p in plan))
        if _log.isEnabledFor(logging.INFO):
            level = PassContext.current().opt_level
            _log.info("%s (opt_level %s): %s; %.1f ms in all", self.name,
                      "any" if level is None else level,
                      ", ".join(f"{name} {ms:.1f} ms" for name, ms in timings) or "no passes",
                      sum(ms for _, ms in timings))
        return mod

    def __repr__(self) -> str:
        names = ", ".join(p.name for p in self.passes)  # type: ignore[attr-defined]
        return f"Sequential({self.name}: {names})"


__all__ = ["Pass", "PassContext", "Sequential", "module_pass"]
