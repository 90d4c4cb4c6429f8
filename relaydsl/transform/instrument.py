"""Pass instruments, after TVM's (python/tvm/ir/instrument.py): objects a PassContext hands
every pass to, before and after it runs.

- ``PassInstrument``: the base class; every hook does nothing.
- ``PassTimingInstrument()``: the time each pass took (re-typing included); ``render()``
  tabulates it.
- ``PrintIR("FuseOps")``: prints the module's text before and after the named pass;
  ``PrintIR()`` for every pass.

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.transform import PassContext, pipeline
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse("def @main(%x: Tensor[(3), float32]) { multiply(%x, %x) }"))
>>> timing = PassTimingInstrument()
>>> with PassContext(opt_level=0, instruments=[timing]):
...     out = pipeline.for_target("llvm")(mod)
>>> [name for name, seconds in timing.timings]
['LowerGrads', 'ToGraphNormalForm', 'FuseOps', 'ToANormalForm']

With ``relay``: ``with relay.PassContext(instruments=[timing, PrintIR("FuseOps")]):
exe = relay.build(f)``, then ``print(timing.render())``.
"""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from relaydsl.ir.module import IRModule
from relaydsl.ir.printer import astext

if TYPE_CHECKING:
    from relaydsl.transform.pass_infra import Pass


class PassInstrument:
    """Hooks around every pass run under a PassContext holding this instrument.

    ``enter_pass_ctx``/``exit_pass_ctx`` run when the first context holding the instrument
    is entered and the last one exited; ``should_run`` can veto a pass; ``run_before_pass``
    and ``run_after_pass`` see the module going in and coming out.
    """

    def enter_pass_ctx(self) -> None:
        pass

    def exit_pass_ctx(self) -> None:
        pass

    def should_run(self, mod: IRModule, p: "Pass") -> bool:
        return True

    def run_before_pass(self, mod: IRModule, p: "Pass") -> None:
        pass

    def run_after_pass(self, mod: IRModule, p: "Pass") -> None:
        pass


class PassTimingInstrument(PassInstrument):
    """Records ``(pass name, seconds)`` for every pass run, in the order they finished."""

    def __init__(self) -> None:
        self.timings: list[tuple[str, float]] = []
        self._started: list[float] = []  # a stack: a pass may call another

    def enter_pass_ctx(self) -> None:
        self._started.clear()  # forget a pass that raised under an earlier context

    def run_before_pass(self, mod: IRModule, p: "Pass") -> None:
        self._started.append(time.perf_counter())

    def run_after_pass(self, mod: IRModule, p: "Pass") -> None:
        self.timings.append((p.name, time.perf_counter() - self._started.pop()))

    def render(self) -> str:
        """A text table: each pass (in the order first run), its runs and total time.

        Example::

            pass                 runs    time (ms)
            LowerGrads              1        0.412
            ToGraphNormalForm       1        0.950
            ...
            total                           12.301
        """
        totals: dict[str, list[float]] = {}
        for name, seconds in self.timings:
            totals.setdefault(name, []).append(seconds)
        width = max([len("pass"), *map(len, totals)]) + 2
        lines = [f"{'pass':<{width}}{'runs':>5}{'time (ms)':>13}"]
        lines += [f"{name:<{width}}{len(runs):>5}{1000 * sum(runs):>13.3f}"
                  for name, runs in totals.items()]
        total = 1000 * sum(seconds for _, seconds in self.timings)
        lines.append(f"{'total':<{width}}{'':>5}{total:>13.3f}")
        return "\n".join(lines)


class PrintIR(PassInstrument):
    """Prints the module's Relay text before and after the pass called `pass_name` (every
    pass for None), to `file` (standard output by default)."""

    def __init__(self, pass_name: str | None = None, *, show_types: bool = False,
                 file: TextIO | None = None):
        self.pass_name, self.show_types, self.file = pass_name, show_types, file

    def _print(self, when: str, mod: IRModule, p: "Pass") -> None:
        if self.pass_name is None or p.name == self.pass_name:
            text = astext(mod, show_types=self.show_types)
            print(f"// {when} {p.name}\n{text}", file=self.file or sys.stdout)

    def run_before_pass(self, mod: IRModule, p: "Pass") -> None:
        self._print("before", mod, p)

    def run_after_pass(self, mod: IRModule, p: "Pass") -> None:
        self._print("after", mod, p)


__all__ = ["PassInstrument", "PassTimingInstrument", "PrintIR"]
