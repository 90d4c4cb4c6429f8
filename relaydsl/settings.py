"""The environment settings relaydsl reads, each checked where it is read (here).

=====================  ===============================================================
``RELAYDSL_TARGET``    the default target of ``relay.build`` and of calls: a registered
                       target's name (``llvm``, ``interp``)
``RELAYDSL_NUM_THREADS``  threads a parallel loop of compiled code runs on: a whole number
                       from 1; more than the usable cores is capped to them (with a warning)
``RELAYDSL_VECTOR_WIDTH``  the width in bits of the vectors compiled code uses on a CPU
                       with AVX-512: 512 (the default) or 256; elsewhere, ignored
``RELAYDSL_INT_ISA``   the instructions of the llvm backend's integer kernels: ``amx``,
                       ``avx512vnni``, ``avxvnni`` or ``generic`` (one the CPU has; the
                       default: the best it has)
``RELAYDSL_CACHE_DIR`` the directory of the on-disk kernel cache (created if missing)
``RELAYDSL_DATA``      a directory holding datasets, or holding their folders (``mnist/``,
                       ``sst/``, ``names/``)
``RELAYDSL_LOG``       ``info`` or ``debug``: what the compiler does, logged to standard
                       error (a handler on the ``relaydsl`` logger, installed at a build)
``RELAYDSL_DUMP_IR``   a directory: the IR text after each pass of every build is written
                       to a subdirectory per compiled program (created if missing)
``RELAYDSL_TRACEBACK`` ``filtered`` (the default: an error in your program shows your
                       frames, not the compiler's) or ``full`` (every frame)
``RELAYDSL_VERIFY_IR`` ``1``: verify the IR after every pass (scoping, globals, types;
                       relaydsl/transform/verify.py), as the test suite does; ``0`` (the
                       default): do not
``RELAYDSL_DIST_TIMEOUT``  seconds a rank of a data-parallel job (relaydsl.distributed) waits
                       in a collective for the others before it aborts the job: a positive
                       number (the default: 600)
=====================  ===============================================================

An unset or empty variable means the default. A value that is not accepted raises a
``SettingError`` naming the variable, its value and what it accepts, when the setting is
first needed. They are read on each use, so a change of the environment applies to what
is built afterwards (the native thread pool is started once, with the count of then, and
the vector width is read once, when the first program is compiled).

"""
from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Iterable

from relaydsl.errors import SettingError


def _read(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def target(known: Iterable[str]) -> str | None:
    """``$RELAYDSL_TARGET``, one of the `known` targets; None when unset."""
    value = _read("RELAYDSL_TARGET")
    names = sorted(known)
    if value is not None and value not in names:
        raise SettingError(f"RELAYDSL_TARGET={value!r}: expected one of "
                           f"{', '.join(repr(n) for n in names)}")
    return value


def num_threads() -> int:
    """``$RELAYDSL_NUM_THREADS``, at most the usable cores; else the usable cores.

    More threads than cores only slow a pool whose workers spin while they wait, so a
    larger value is capped, with a warning.
    """
    cores = usable_cores()
    value = _read("RELAYDSL_NUM_THREADS")
    if value is None:
        return cores
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise SettingError(f"RELAYDSL_NUM_THREADS={value!r}: expected a whole number of "
                           f"threads from 1 to {cores} (the usable cores)")
    if count > cores:
        warnings.warn(f"RELAYDSL_NUM_THREADS={value!r} exceeds the {cores} usable cores; "
                      f"using {cores} threads", RuntimeWarning, stacklevel=2)
        return cores
    return count


def vector_width() -> int | None:
    """``$RELAYDSL_VECTOR_WIDTH`` in bits (256 or 512); None when unset."""
    value = _read("RELAYDSL_VECTOR_WIDTH")
    if value is None:
        return None
    if value not in ("256", "512"):
        raise SettingError(f"RELAYDSL_VECTOR_WIDTH={value!r}: expected 256 or 512 (bits)")
    return int(value)


INT_ISAS = ("amx", "avx512vnni", "avxvnni", "generic")


def int_isa() -> str | None:
    """``$RELAYDSL_INT_ISA``: one of ``INT_ISAS``; None when unset (whether the CPU has it
    is checked by the backend)."""
    value = _read("RELAYDSL_INT_ISA")
    if value is None:
        return None
    if value not in INT_ISAS:
        raise SettingError(f"RELAYDSL_INT_ISA={value!r}: expected one of {', '.join(INT_ISAS)}")
    return value


def cache_dir() -> Path | None:
    """``$RELAYDSL_CACHE_DIR``: a directory, or a path where one can be created; None when
    unset."""
    return _directory("RELAYDSL_CACHE_DIR", must_exist=False)


def data_dir() -> Path | None:
    """``$RELAYDSL_DATA``: an existing directory; None when unset."""
    return _directory("RELAYDSL_DATA", must_exist=True)


def _directory(name: str, must_exist: bool) -> Path | None:
    value = _read(name)
    if value is None:
        return None
    path = Path(value).expanduser()
    if path.is_dir() or not (path.exists() or must_exist):
        return path
    what = "is not a directory" if path.exists() else "does not exist"
    accepted = "an existing directory" if must_exist else \
        "a directory, or a path where one can be created"
    raise SettingError(f"{name}={value!r}: {path} {what}; expected {accepted}")


def full_tracebacks() -> bool:
    """Whether ``$RELAYDSL_TRACEBACK`` asks for every frame of a user error's traceback."""
    value = _read("RELAYDSL_TRACEBACK")
    if value not in (None, "filtered", "full"):
        raise SettingError(f"RELAYDSL_TRACEBACK={value!r}: expected 'filtered' or 'full'")
    return value == "full"


def verify_ir() -> bool:
    """Whether ``$RELAYDSL_VERIFY_IR`` asks for the IR verifier after every pass."""
    value = _read("RELAYDSL_VERIFY_IR")
    if value not in (None, "0", "1"):
        raise SettingError(f"RELAYDSL_VERIFY_IR={value!r}: expected 0 or 1")
    return value == "1"


DEFAULT_DIST_TIMEOUT = 600.0


def dist_timeout() -> float:
    """``$RELAYDSL_DIST_TIMEOUT`` in seconds, a positive number; DEFAULT_DIST_TIMEOUT when
    unset."""
    value = _read("RELAYDSL_DIST_TIMEOUT")
    if value is None:
        return DEFAULT_DIST_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise SettingError(f"RELAYDSL_DIST_TIMEOUT={value!r}: expected a positive number of "
                           "seconds")
    return seconds


def dump_ir_dir() -> Path | None:
    """``$RELAYDSL_DUMP_IR``: a directory, or a path where one can be created; None when
    unset."""
    return _directory("RELAYDSL_DUMP_IR", must_exist=False)


_LOG_LEVELS = {"info": logging.INFO, "debug": logging.DEBUG}


def log_level() -> int | None:
    """``$RELAYDSL_LOG`` (``info`` or ``debug``, in any case) as a logging level; None when
    unset."""
    value = _read("RELAYDSL_LOG")
    if value is None:
        return None
    level = _LOG_LEVELS.get(value.lower())
    if level is None:
        raise SettingError(f"RELAYDSL_LOG={value!r}: expected one of "
                           f"{', '.join(repr(n) for n in _LOG_LEVELS)}")
    return level


class _StderrHandler(logging.StreamHandler):
    """Writes to the ``sys.stderr`` of the moment, which a notebook or a test may replace
    after the handler is installed (as logging's own last-resort handler does)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr


_handler: _StderrHandler | None = None


def apply_log_setting() -> None:
    """Make the ``relaydsl`` logger follow ``$RELAYDSL_LOG``: when set, our standard-error
    handler is installed and the logger's level set; when unset, that handler is removed
    (handlers and levels the application configured itself are left alone).

    The library configures logging nowhere else; a build calls this, so a change of the
    environment applies to what is built afterwards.
    """
    global _handler
    level = log_level()
    logger = logging.getLogger("relaydsl")
    if level is None:
        if _handler is not None:
            logger.removeHandler(_handler)
            logger.setLevel(logging.NOTSET)
            _handler = None
        return
    if _handler is None:
        _handler = _StderrHandler()
        logger.addHandler(_handler)
    logger.setLevel(level)
