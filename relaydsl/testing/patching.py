"""Tests that need an op to misbehave (a wrong reference, a counting one) patch it here.

An OpDef is frozen; ``patch_op`` puts a copy with other facets in the registry for the
length of one test (pytest's ``monkeypatch`` undoes it).
"""
from __future__ import annotations

import dataclasses
from typing import Any as AnyValue

from relaydsl.ir import expr
from relaydsl.op import registry


def patch_op(monkeypatch: AnyValue, name: str, **facets: AnyValue) -> registry.OpDef:
    """Make op `name` use `facets` (e.g. ``numpy_ref=...``) until the test ends."""
    original = registry.lookup(name)
    patched = dataclasses.replace(original, **facets)
    object.__setattr__(patched, "op", original.op)
    monkeypatch.setitem(registry._REGISTRY, name, patched)
    monkeypatch.setitem(expr._OP_DEFINITIONS, name, patched)
    return patched
