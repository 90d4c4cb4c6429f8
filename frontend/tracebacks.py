"""Tracebacks of user errors that show the user's frames, as JAX filters its own.

An error in the user's program (a ``RelayError``: syntax, type, a bad setting or file; or a
``TypeError`` for a wrong argument) raised from deep inside the compiler would print 30-60
frames of relaydsl internals above the one line that matters, which the message already
locates. The public entry points are wrapped with ``user_facing``: such an error leaves
with relaydsl's frames dropped from its traceback, except the one re-raising it (plain
Python prints the frame a ``raise`` runs in; its line says that relaydsl's frames are hidden
and how to see them; pytest, IPython and Jupyter hide it, as ``__tracebackhide__`` asks).
Set ``RELAYDSL_TRACEBACK=full`` to see everything (when reporting a relaydsl bug). Other
exceptions, which would be our bugs, always keep every frame.
"""
from __future__ import annotations

import functools
import types
from pathlib import Path
from typing import Any as AnyValue, Callable, TypeVar

from relaydsl import settings
from relaydsl.errors import RelayError

F = TypeVar("F", bound=Callable[..., AnyValue])

# the installed package's folders: relaydsl itself (settings.py's), and frontend/backend
# mapped into it
_OURS = tuple({str(Path(settings.__file__).resolve().parent),
               str(Path(__file__).resolve().parent),
               str(Path(__file__).resolve().parent.parent / "backend")})


def _is_ours(frame: types.FrameType) -> bool:
    return str(Path(frame.f_code.co_filename).resolve()).startswith(_OURS)


def user_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` without relaydsl's frames (the user's frames and anything else kept)."""
    kept: list[types.TracebackType] = []
    while tb is not None:
        if not _is_ours(tb.tb_frame):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _drop_internal_causes(e: BaseException) -> None:
    """Leave out an exception `e` was raised from or while handling when all its frames are
    relaydsl's (a unification failure the message has already put in the user's terms)."""
    for linked in (e.__cause__, e.__context__):
        if linked is not None and user_frames(linked.__traceback__) is None:
            if linked is e.__cause__:
                e.__cause__ = None
            e.__suppress_context__ = True


def user_facing(fn: F) -> F:
    """`fn`, whose user errors leave with a filtered traceback (see the module docstring)."""
    @functools.wraps(fn)
    def wrapper(*args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        __tracebackhide__ = True  # pytest, IPython and Jupyter hide this frame
        try:
            return fn(*args, **kwargs)
        except (RelayError, TypeError) as e:
            if settings.full_tracebacks():
                raise
            _drop_internal_causes(e)
            # Re-raising adds this frame to the traceback, and plain Python prints it: its line
            # is what the user reads, so it says what happened and how to see the rest.
            raise e.with_traceback(user_frames(e.__traceback__))  # relaydsl's frames hidden: RELAYDSL_TRACEBACK=full shows them  # noqa: B904, E501

    return wrapper  # type: ignore[return-value]


__all__ = ["user_facing", "user_frames"]
