"""Finding a dataset's files and checking them: what every loader here shares.

A dataset named ``name`` is looked for in the directory given as `path`, else in
``$RELAYDSL_DATA`` (a directory holding the files, or holding a ``name/`` folder), else in
``~/.cache/relaydsl/name``, then in a program's own `fallbacks`. A file whose SHA-256 is
not the one the dataset's authors published is a DatasetError naming it: a truncated or
edited copy fails here, before a parser could misread it.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from relaydsl import settings


class DatasetError(OSError):
    """A dataset file is missing or not what it should be."""


def candidates(name: str, path: str | Path | None,
               fallbacks: Sequence[str | Path] = ()) -> list[Path]:
    """The directories searched for the dataset `name`, in order (see the module docstring)."""
    if path is not None:
        return [Path(path)]
    out = []
    env = settings.data_dir()
    if env is not None:
        out += [env, env / name]
    out.append(Path.home() / ".cache" / "relaydsl" / name)
    return out + [Path(d) for d in fallbacks]


def find_directory(title: str, name: str, sha256: Mapping[str, str], path: str | Path | None,
                   fallbacks: Sequence[str | Path]) -> Path:
    """The first candidate directory holding every file of `sha256` (file name -> digest),
    each checked; else a DatasetError listing the files and every directory searched."""
    tried = candidates(name, path, fallbacks)
    for directory in tried:
        if all((directory / f).is_file() for f in sha256):
            for f, digest in sha256.items():
                check_sha256(directory / f, digest)
            return directory
    where = "\n  ".join(str(d) for d in tried)
    # A directory with some of the files most likely lost the others: name them.
    lacking = "".join(
        f"{d} lacks {', '.join(f for f in sha256 if not (d / f).is_file())}\n"
        for d in tried if any((d / f).is_file() for f in sha256))
    raise DatasetError(
        f"{title} not found. Looked for its {len(sha256)} files ({', '.join(sha256)}) in:\n"
        f"  {where}\n{lacking}Put them in one of these directories, or in a directory passed "
        f"as the path argument or named by RELAYDSL_DATA.")


def check_sha256(path: Path, expected: str) -> None:
    """Raise a DatasetError naming `path` unless its SHA-256 is `expected`."""
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as e:
        raise DatasetError(f"cannot read {path}: {e}") from None
    if digest != expected:
        raise DatasetError(f"{path} is corrupted or not the published file: its SHA-256 is "
                           f"{digest}, expected {expected}")
