"""RemoveUnusedFunctions: drop the global functions no entry reaches (TVM's pass of that name).

A module holds the prelude's ~30 functions besides the user's, and a build needs only what
its entry calls (directly, through other globals, or by passing a global as a value). A
build's pipeline (``pipeline.for_target(target, entry=...)``) runs this first, so that no
pass rewrites or re-types functions the program never runs (FuseOps and ToANormalForm
rebuilt every prelude function on every build); its InlineGlobals, told the entry, then
drops the globals it inlined. ADT definitions stay (their constructors are not functions,
and a type may be named by the entry's signature).

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @square(%x: Tensor[(2), float32]) { multiply(%x, %x) }
... def @unused(%x: Tensor[(2), float32]) { %x }
... def @main(%x: Tensor[(2), float32]) { @square(%x) }'''))
>>> sorted(gv.name_hint for gv in RemoveUnusedFunctions(entries=("main",))(mod).functions)
['main', 'square']
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.errors import IRError
from relaydsl.ir.module import IRModule
from relaydsl.transform._util import only_reached
from relaydsl.transform.pass_infra import Pass


@dataclass(frozen=True)
class RemoveUnusedFunctions(Pass, opt_level=0,
                            description="drop the global functions no entry calls or mentions"):
    """Only `entries` and the globals they reach remain."""

    entries: tuple[str, ...] = ("main",)

    def transform(self, mod: IRModule) -> IRModule:
        missing = [name for name in self.entries if name not in mod]
        if missing:
            raise IRError(f"RemoveUnusedFunctions: no global function named "
                          f"{', '.join(repr(m) for m in missing)} in the module")
        return only_reached(mod, self.entries)
