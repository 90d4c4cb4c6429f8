"""A small pass infrastructure, after TVM's (include/tvm/ir/transform.h): Pass, Sequential,
PassContext.

- A ``Pass`` is a named ``IRModule -> IRModule`` function with an ``opt_level`` and the passes
  it ``required`` (run before it). Calling it runs the function and re-types the result, so
  the next pass can rely on every node's ``checked_type`` (DESIGN.md §1).
- ``module_pass(opt_level=..., name=...)`` turns a plain function into a Pass.
- ``Sequential([...])`` is itself a Pass: it types its input, then runs each pass whose
  ``opt_level`` is at most the current ``PassContext.opt_level`` and whose name is not in
  ``disabled_pass`` (a pass's required passes run first, whatever their level).
- ``PassContext(opt_level=2, disabled_pass=[...])`` is a context manager; outside any ``with``
  the default context (opt_level 2, nothing disabled) is current.

A pass called on its own always runs; only Sequential consults the context (as in TVM).

>>> from relaydsl.ir import Call, Function, IRModule, Op, TensorType, Var
>>> @module_pass(opt_level=3, name="Noop")
... def noop(mod):
...     return mod.copy()
>>> x = Var("x", TensorType((2,)))
>>> mod = IRModule.from_expr(Function([x], Call(Op.get("exp"), [x])))
>>> seq = Sequential([noop], name="demo")
>>> with PassContext(opt_level=2):
...     out = seq(mod)          # Noop is above level 2: skipped
>>> seq.last_run
()
>>> with PassContext(opt_level=3):
...     out = seq(mod)
>>> seq.last_run
('Noop',)
>>> out["main"].checked_type
fn(Tensor[(2,), float32]) -> Tensor[(2,), float32]
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from relaydsl.errors import IRError
from relaydsl.ir.module import IRModule
from relaydsl.typing.infer import infer_types


@dataclass(frozen=True)
class PassContext:
    """The settings a Sequential reads: the optimisation level and the passes switched off.

    Use as a context manager; contexts nest, the innermost is ``PassContext.current()``.
    """

    opt_level: int = 2
    disabled_pass: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if isinstance(self.opt_level, bool) or not isinstance(self.opt_level, int) or \
                self.opt_level < 0:
            raise IRError(f"PassContext opt_level must be an int >= 0, got {self.opt_level!r}")
        if isinstance(self.disabled_pass, str):
            raise IRError("PassContext disabled_pass takes a list of pass names, not one string")
        object.__setattr__(self, "disabled_pass", frozenset(self.disabled_pass))

    def __enter__(self) -> "PassContext":
        _stack().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        popped = _stack().pop()
        assert popped is self, "PassContexts must be exited in the order they were entered"

    @staticmethod
    def current() -> "PassContext":
        stack = _stack()
        return stack[-1] if stack else _DEFAULT_CONTEXT

    def enables(self, p: "Pass") -> bool:
        """Whether a Sequential running under this context runs `p`."""
        return p.opt_level <= self.opt_level and p.name not in self.disabled_pass


_DEFAULT_CONTEXT = PassContext()
_local = threading.local()


def _stack() -> list[PassContext]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


@dataclass(frozen=True, eq=False)
class Pass:
    """A named module transformation: ``pass_(mod)`` returns the transformed, re-typed module."""

    name: str
    opt_level: int
    transform: Callable[[IRModule], IRModule] = field(repr=False)
    required: tuple["Pass", ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "required", tuple(self.required))
        for r in self.required:
            if not isinstance(r, Pass):
                raise IRError(f"pass {self.name}: required passes must be Passes, got {r!r}")

    def __call__(self, mod: IRModule) -> IRModule:
        if not isinstance(mod, IRModule):
            raise IRError(f"pass {self.name} takes an IRModule, got {type(mod).__name__}")
        out = self.transform(mod)
        if not isinstance(out, IRModule):
            raise IRError(f"pass {self.name} returned {type(out).__name__}, not an IRModule")
        return infer_types(out)


def module_pass(transform: Callable[[IRModule], IRModule] | None = None, *, opt_level: int,
                name: str | None = None, required: Iterable[Pass] = ()
                ) -> Pass | Callable[[Callable[[IRModule], IRModule]], Pass]:
    """Make a Pass of a function ``IRModule -> IRModule``; usable as a decorator
    (``@module_pass(opt_level=1)``) or called directly (``module_pass(f, opt_level=1)``).
    The name defaults to the function's name."""

    def make(fn: Callable[[IRModule], IRModule]) -> Pass:
        return Pass(name or fn.__name__, opt_level, fn, tuple(required))

    return make if transform is None else make(transform)


class Sequential(Pass):
    """Runs passes in order under the current PassContext; itself a Pass (opt_level 0).

    After a run, ``last_run`` lists the names of the passes that ran, required ones included.
    """

    def __init__(self, passes: Sequence[Pass], name: str = "Sequential", opt_level: int = 0,
                 required: Iterable[Pass] = ()):
        for p in passes:
            if not isinstance(p, Pass):
                raise IRError(f"Sequential takes Passes, got {p!r}")
        super().__init__(name, opt_level, self._run, tuple(required))
        object.__setattr__(self, "passes", tuple(passes))
        object.__setattr__(self, "last_run", ())

    def _run(self, mod: IRModule) -> IRModule:
        ctx = PassContext.current()
        ran: list[str] = []
        mod = infer_types(mod)
        for p in self.passes:  # type: ignore[attr-defined]
            if not ctx.enables(p):
                continue
            for r in p.required:
                mod = r(mod)
                ran.append(r.name)
            mod = p(mod)
            ran.append(p.name)
        object.__setattr__(self, "last_run", tuple(ran))
        return mod

    def __repr__(self) -> str:
        names = ", ".join(p.name for p in self.passes)  # type: ignore[attr-defined]
        return f"Sequential({self.name}: {names})"


__all__ = ["Pass", "PassContext", "Sequential", "module_pass"]
