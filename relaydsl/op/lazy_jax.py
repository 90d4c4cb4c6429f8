"""JAX, imported on first use: the ops' JAX lowerings are the test oracle's, not the runtime's.

``jnp`` and ``lax`` stand for ``jax.numpy`` and ``jax.lax``; the real module is imported
the first time an attribute is read, so ``import relaydsl`` works without JAX installed
(and does not pay JAX's ~1 s import). A lowering reads them only inside its body.

>>> import sys
>>> from relaydsl.op.lazy_jax import jnp
>>> jnp                                           # doctest: +ELLIPSIS
<lazy module jax.numpy...>
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any as AnyValue


class LazyModule:
    """A module imported when an attribute is first read."""

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def _load(self) -> ModuleType:
        if self._module is None:
            try:
                self._module = importlib.import_module(self._name)
            except ImportError as e:
                raise ImportError(
                    f"{self._name} is needed for the ops' JAX lowerings (the test oracle); "
                    "install the test extra: pip install 'relaydsl[test]'") from e
        return self._module

    def __getattr__(self, attr: str) -> AnyValue:
        return getattr(self._load(), attr)

    def __repr__(self) -> str:
        state = "loaded" if self._module is not None else "not loaded"
        return f"<lazy module {self._name} ({state})>"


jax = LazyModule("jax")
jnp = LazyModule("jax.numpy")
lax = LazyModule("jax.lax")

__all__ = ["LazyModule", "jax", "jnp", "lax"]
