"""Decorated functions from source text, for code that has no file: ``python -c``, exec(),
notebooks that generate code.

``relay.function_from_source(text)`` runs `text` (Python source defining functions decorated
with ``@relay`` / ``@relay_model``) as a module of its own, whose source the frontend can read
(it is registered with ``linecache`` under a name like ``<relay source 1>``, which error
messages show with the line and a caret), and returns the last decorated function it defines.

>>> from relaydsl import relay
>>> double = relay.function_from_source('''
... @relay
... def double(x: Tensor[Float, (2,)]) -> Tensor[Float, (2,)]:
...     return x * 2.0
... ''')
>>> double([1.0, 2.5])
array([2., 5.], dtype=float32)
"""
from __future__ import annotations

import itertools
import linecache
import textwrap
from typing import Any as AnyValue

import numpy as np

import relaydsl
from relaydsl.frontend.decorators import RelayFunction

_COUNTER = itertools.count(1)


def function_from_source(text: str, namespace: dict[str, AnyValue] | None = None) -> AnyValue:
    """The last decorated function `text` defines. `text` runs with `namespace`'s names (by
    default relaydsl's: ``relay``, ``relay_model``, ``Tensor``, ``Float``, ``Int``, ...,
    and ``np``) and can import what else it needs."""
    source = textwrap.dedent(text)
    filename = f"<relay source {next(_COUNTER)}>"
    # inspect.getsource reads linecache: the entry makes the text a file for it (the
    # mtime None keeps linecache.checkcache from dropping an entry with no file behind it)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope: dict[str, AnyValue] = {"__name__": filename.strip("<>").replace(" ", "_"), "np": np,
                                  **{k: getattr(relaydsl, k) for k in relaydsl.__all__}}
    scope.update(namespace or {})
    exec(compile(source, filename, "exec"), scope)  # the user's own code
    found = [v for v in scope.values() if isinstance(v, RelayFunction)]
    if not found:
        raise ValueError("the source defines no @relay or @relay_model function")
    return found[-1]


__all__ = ["function_from_source"]
