"""Pass instruments, after TVM's (python/tvm/ir/instrument.py): objects a PassContext hands
every pass to, before and after it runs.

- ``PassInstrument``: the base class; every hook does nothing.
- ``PassTimingInstrument()``: the time each pass took (re-typing included); ``render()``
  tabulates it.
- ``PrintIR("FuseOps")``: prints the module's text before and after the named pass;
  ``PrintIR()`` for every pass.
- ``DumpIR(directory)``: writes the module's text going in (``00_input.txt``) and after
  each pass (``01_DeadCodeElimination.txt``, ...) to files; ``RELAYDSL_DUMP_IR=dir`` adds one to
  every build, in a fresh subdirectory per compiled program (``DumpIR.fresh``).

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.transform import PassContext, pipeline
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse("def @main(%x: Tensor[(3), float32]) { multiply(%x, %x) }"))
>>> timing = PassTimingInstrument()
>>> with PassContext(opt_level=0, instruments=[timing]):
...     out = pipeline.for_target("llvm")(mod)
>>> [name for name, seconds in timing.timings][:3]
['DeadCodeElimination', 'LowerGrads', 'StaticShapes']

With ``relay``: ``with relay.PassContext(instruments=[timing, PrintIR("FuseOps")]):
exe = relay.build(f)``, then ``print(timing.render())``.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
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


class DumpIR(PassInstrument):
    """Writes the module's Relay text to numbered files in `directory` (created when the
    first pass runs): ``00_input.txt`` before the first pass, then ``<NN>_<pass name>.txt``
    after each pass, in the order they ran. The numbering continues over every pipeline run
    under it (the llvm target prepares an entry again per call signature of symbolic
    shapes)."""

    def __init__(self, directory: str | os.PathLike[str], *, show_types: bool = False):
        self.directory, self.show_types = Path(directory), show_types
        self.written = 0

    @classmethod
    def fresh(cls, root: str | os.PathLike[str], name: str, *, show_types: bool = False
              ) -> "DumpIR":
        """A DumpIR writing into a new subdirectory of `root`: `name`, else the first free
        of ``name.2``, ``name.3``, ...; created now, so that builds never share one."""
        Path(root).mkdir(parents=True, exist_ok=True)
        attempt = 1
        while True:
            directory = Path(root) / (name if attempt == 1 else f"{name}.{attempt}")
            try:
                directory.mkdir()
            except FileExistsError:
                attempt += 1
                continue
            return cls(directory, show_types=show_types)

    def _write(self, mod: IRModule, label: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{self.written:02d}_{label}.txt"
        path.write_text(astext(mod, show_types=self.show_types) + "\n")
        self.written += 1

    def run_before_pass(self, mod: IRModule, p: "Pass") -> None:
        if self.written == 0:
            self._write(mod, "input")

    def run_after_pass(self, mod: IRModule, p: "Pass") -> None:
        self._write(mod, p.name)


__all__ = ["PassInstrument", "PassTimingInstrument", "PrintIR", "DumpIR"]
