"""A small pass infrastructure, after TVM's (include/tvm/ir/transform.h): Pass, Sequential,
PassContext.

- A pass is a small frozen dataclass deriving from ``Pass``, in a file of its own. Its fields
  are its options (``FuseOps(level=0)``, ``AlterOpLayout(everywhere=True)``); its class
  statement declares its ``opt_level``, a one-line ``description`` and the passes it
  ``requires`` (classes: they must have run right before it); ``transform(mod)`` is the
  rewrite::

      @dataclass(frozen=True)
      class FuseOps(Pass, opt_level=0, requires=(ToGraphNormalForm,),
                    description="put op calls in primitive functions"):
          level: int | None = None

          def transform(self, mod: IRModule) -> IRModule: ...

  Calling it, ``FuseOps(level=0)(mod)``, runs its prerequisites, then the transform, then
  re-types what the transform left untyped, so that the next pass can rely on every node's
  ``checked_type`` (DESIGN.md §1): a transform re-infers types only where it needs them
  itself, before it returns. A pass never runs another pass; prerequisites are the
  infrastructure's business.
- Prerequisites (``resolve``): each pass is preceded by the passes it requires, with their
  default options (theirs before them), whatever the context's level or disabled passes (the
  pass would be wrong without them, as in TVM). A pass right after an equal one (same class,
  same options) is left out: the module is already as that pass leaves it (a pass reaches
  its fixed point in one run; PartialEvaluate cut short by its budget is the exception, and
  nothing lists it twice). So ``Sequential([ToGraphNormalForm(), FuseOps()])`` runs
  ToGraphNormalForm once.
- ``Sequential([...])`` runs each pass the current ``PassContext`` enables, prerequisites
  resolved.
- ``PassContext(opt_level=2, required_pass=[...], disabled_pass=[...], instruments=[...])``
  is a context manager. A pass is enabled when it is not disabled and either required or at
  most at the context's level (disabled wins); passes are named by their class's name.
  ``opt_level=None``, the default context's, leaves the level to whoever runs the passes:
  ``relay.build`` takes the target's default level, a Sequential run on its own runs every
  level.
- Instruments (instrument.py) watch every pass run under the context: timing, IR dumps.
- ``module_pass(fn, opt_level=..., description=...)`` makes a pass of a plain function
  ``IRModule -> IRModule`` (a quick pass in a test or a notebook).
- Logging: each Sequential run logs its passes and their times to the
  ``relaydsl.transform.pass_infra`` logger (INFO: the pipeline in one line; DEBUG: each pass).

The passes a target runs, in order, are listed in pipeline.py.

>>> from dataclasses import dataclass
>>> from relaydsl.ir import Call, Function, IRModule, Op, TensorType, Var
>>> @dataclass(frozen=True)
... class Noop(Pass, opt_level=3, description="changes nothing"):
...     def transform(self, mod):
...         return mod.copy()
>>> x = Var("x", TensorType((2,)))
>>> mod = IRModule.from_expr(Function([x], Call(Op.get("exp"), [x])))
>>> seq = Sequential([Noop()], name="demo")
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
import types
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any as AnyValue, ClassVar, overload

from relaydsl import settings
from relaydsl.errors import IRError
from relaydsl.ir.module import IRModule
from relaydsl.ir.node import conforms
from relaydsl.ir.visitor import COMPILER_RECURSION_LIMIT, deep_recursion
from relaydsl.transform.instrument import PassInstrument
from relaydsl.transform.verify import changed_functions, check_scopes, check_types, kept_types
from relaydsl.typing.infer import infer_types

_log = logging.getLogger(__name__)

MAX_OPT_LEVEL = 3
"""The highest optimisation level: a build's opt_level runs from 0 to it."""
ON_DEMAND = MAX_OPT_LEVEL + 1
"""The opt_level of passes that run only when the PassContext requires them."""


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
    required_pass: frozenset[str] = field(default_factory=frozenset[str])
    disabled_pass: frozenset[str] = field(default_factory=frozenset[str])
    instruments: tuple[PassInstrument, ...] = ()

    def __post_init__(self) -> None:
        level = self.opt_level
        if level is not None and (isinstance(level, bool) or not conforms(level, int)
                                  or level < 0):
            raise IRError(f"PassContext opt_level must be an int >= 0, got {level!r}")
        object.__setattr__(self, "required_pass", _names(self.required_pass, "required_pass"))
        object.__setattr__(self, "disabled_pass", _names(self.disabled_pass, "disabled_pass"))
        object.__setattr__(self, "instruments", tuple(self.instruments))
        for i in self.instruments:
            if not conforms(i, PassInstrument):
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
    stack: list[PassContext] | None = getattr(_local, "contexts", None)
    if stack is None:
        stack = _local.contexts = []
    return stack


def _active_instruments() -> list[PassInstrument]:
    return [i for ctx in _stack() for i in ctx.instruments]


@dataclass(frozen=True)
class Pass(ABC):
    """A module transformation: ``pass_(mod)`` returns the transformed, typed module.

    A pass is a frozen dataclass deriving from this class, declaring its level, description
    and prerequisites in its class statement (see the module doc); its name is its class's.
    The instruments of the current context see each pass run: any ``should_run`` returning
    False skips it (the module is returned as it is), then ``run_before_pass`` and
    ``run_after_pass`` surround it.
    """

    name: ClassVar[str]
    opt_level: ClassVar[int]
    description: ClassVar[str]
    requires: ClassVar[tuple[type["Pass"], ...]]

    def __init_subclass__(cls, *, opt_level: int, description: str,
                          requires: Iterable[type["Pass"]] = (), **kwargs: AnyValue) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = cls.__name__
        if isinstance(opt_level, bool) or not conforms(opt_level, int) or opt_level < 0:
            raise IRError(f"pass {cls.name}: opt_level must be an int >= 0, got {opt_level!r}")
        if not conforms(description, str) or not description or "\n" in description:
            raise IRError(f"pass {cls.name}: the description is one line of text")
        cls.opt_level, cls.description, cls.requires = opt_level, description, tuple(requires)
        for r in cls.requires:
            if not _is_pass_class(r):
                raise IRError(f"pass {cls.name}: requires takes pass classes, got {r!r}")

    @abstractmethod
    def transform(self, mod: IRModule) -> IRModule:
        """The rewrite: a new module (or `mod` itself, unchanged). `mod` is typed; what the
        rewrite builds may be left untyped, the caller re-types it."""

    def __call__(self, mod: IRModule) -> IRModule:
        """`mod` after the passes this one requires, then this one; typed."""
        mod = _typed(_module(mod, self.name))
        for p in resolve([self]):
            mod = _apply(p, mod)
        return mod


def _is_pass_class(x: object) -> bool:
    return isinstance(x, type) and issubclass(x, Pass)


def _apply(p: Pass, mod: IRModule) -> IRModule:
    """`p` alone on the typed `mod`: watched, verified (RELAYDSL_VERIFY_IR), typed."""
    instruments = PassContext.current().instruments
    if not all(i.should_run(mod, p) for i in instruments):
        return mod
    for i in instruments:
        i.run_before_pass(mod, p)
    with deep_recursion():
        try:
            out = p.transform(mod)
        except RecursionError:
            raise IRError(
                f"pass {p.name}: the program nests expressions deeper than the compiler "
                f"recurses ({COMPILER_RECURSION_LIMIT:,} Python frames, a few per level): "
                "bind intermediate results with let, as the frontend does for a Python "
                "function of any length") from None
    if not conforms(out, IRModule):
        raise IRError(f"pass {p.name} returned {type(out).__name__}, not an IRModule")
    kept = None
    if settings.verify_ir():  # (the functions the pass rebuilt: the others were checked)
        changed = changed_functions(mod, out)
        check_scopes(out, changed, p.name)
        kept = kept_types(changed)
    out = _typed(out)
    if kept is not None:
        check_types(out, kept, p.name)
    for i in instruments:
        i.run_after_pass(out, p)
    return out


def _module(mod: object, name: str) -> IRModule:
    if not isinstance(mod, IRModule):
        raise IRError(f"pass {name} takes an IRModule, got {type(mod).__name__}")
    return mod


def _typed(mod: IRModule) -> IRModule:
    """`mod` with every function typed: inferred where a function has no type (one a pass
    rebuilt); the functions it kept keep their types."""
    if all(fn.has_type for fn in mod.functions.values()):
        return mod
    return infer_types(mod)


def resolve(passes: Iterable[Pass]) -> list[Pass]:
    """The passes to run for `passes`, in order: each preceded by the passes it requires (with
    their default options, theirs before them), and none right after an equal one (the same
    class and options), as the module is then already as that pass leaves it."""
    order: list[Pass] = []

    def add(p: Pass) -> None:
        for required in p.requires:
            add(required())
        if not order or order[-1] != p:
            order.append(p)

    for p in passes:
        add(p)
    return order


@overload
def module_pass(transform: Callable[[IRModule], IRModule], *, opt_level: int,
                description: str, name: str | None = None,
                required: Iterable[Pass | type[Pass]] = ()) -> Pass: ...
@overload
def module_pass(transform: None = None, *, opt_level: int,
                description: str, name: str | None = None,
                required: Iterable[Pass | type[Pass]] = ()
                ) -> Callable[[Callable[[IRModule], IRModule]], Pass]: ...
def module_pass(transform: Callable[[IRModule], IRModule] | None = None, *, opt_level: int,
                description: str, name: str | None = None,
                required: Iterable[Pass | type[Pass]] = ()
                ) -> Pass | Callable[[Callable[[IRModule], IRModule]], Pass]:
    """A pass (without options) of a function ``IRModule -> IRModule``; usable as a decorator
    (``@module_pass(opt_level=1, description="...")``) or called directly
    (``module_pass(f, opt_level=1, description="...")``). Its name defaults to the function's;
    `required` takes passes or pass classes (a required pass runs with its default options).
    """

    def make(fn: Callable[[IRModule], IRModule]) -> Pass:
        requires = tuple(type(r) if isinstance(r, Pass) else r for r in required)
        declaration = {"opt_level": opt_level, "description": description, "requires": requires}

        def body(namespace: dict[str, AnyValue]) -> None:
            def transform(self: Pass, mod: IRModule) -> IRModule:
                return fn(mod)

            namespace["transform"] = transform
            namespace["__doc__"] = fn.__doc__

        cls: type[Pass] = types.new_class(name or fn.__name__, (Pass,), declaration, body)
        return cls()

    return make if transform is None else make(transform)


class Sequential:
    """Runs passes in order under the current PassContext: those it enables, each preceded by
    its prerequisites (``resolve``); the `always` passes first, at every level (unless
    disabled).

    ``plan()`` lists the passes a run would call; after a run, ``last_run`` lists the names
    of the passes that were called, prerequisites included. Instruments see its passes, not
    the Sequential itself.
    """

    def __init__(self, passes: Sequence[Pass], name: str = "Sequential",
                 always: Sequence[Pass] = ()):
        for p in [*passes, *always]:
            if isinstance(p, type) and issubclass(p, Pass):
                raise IRError(f"Sequential takes Passes, got the class {p.name}: "
                              f"{p.name}() is the pass with its default options")
            if not conforms(p, Pass):
                raise IRError(f"Sequential takes Passes, got {p!r}")
        self.passes: tuple[Pass, ...] = tuple(passes)
        self.always: tuple[Pass, ...] = tuple(always)  # first, whatever the level
        self.name = name
        self.last_run: tuple[str, ...] = ()

    def plan(self, context: PassContext | None = None) -> list[Pass]:
        """The passes a run under `context` (default: the current one) calls, in order."""
        context = PassContext.current() if context is None else context
        return resolve([*(p for p in self.always if p.name not in context.disabled_pass),
                        *(p for p in self.passes if context.enables(p))])

    def __call__(self, mod: IRModule) -> IRModule:
        plan = self.plan()
        mod = _typed(_module(mod, self.name))
        timings: list[tuple[str, float]] = []
        for p in plan:
            start = time.perf_counter()
            mod = _apply(p, mod)
            timings.append((p.name, 1000 * (time.perf_counter() - start)))
            if _log.isEnabledFor(logging.DEBUG):
                _log.debug("%s: %s in %.2f ms", self.name, *timings[-1])
        self.last_run = tuple(p.name for p in plan)
        if _log.isEnabledFor(logging.INFO):
            level = PassContext.current().opt_level
            _log.info("%s (opt_level %s): %s; %.1f ms in all", self.name,
                      "any" if level is None else level,
                      ", ".join(f"{name} {ms:.1f} ms" for name, ms in timings) or "no passes",
                      sum(ms for _, ms in timings))
        return mod

    def __repr__(self) -> str:
        return f"Sequential({self.name}: {', '.join(p.name for p in self.passes)})"


__all__ = ["Pass", "PassContext", "Sequential", "module_pass", "resolve", "MAX_OPT_LEVEL",
           "ON_DEMAND"]
