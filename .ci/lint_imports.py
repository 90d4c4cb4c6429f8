"""Run the import contracts of pyproject.toml ([tool.importlinter]) on the installed layout.

import-linter finds a package by its folder, but the repository's frontend/ and backend/
folders only become relaydsl.frontend and relaydsl.backend when installed (package-dir).
So this lays the sources out as an install would, in a temporary folder, and runs
``lint-imports`` there. The exit status is lint-imports' own (0: every contract kept).

    python .ci/lint_imports.py
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def install_layout(into: Path) -> None:
    """Copy each package folder of [tool.setuptools.package-dir] to where it installs."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        shutil.copytree(ROOT / folder, into / package.replace(".", os.sep), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))


def main() -> int:
    lint_imports = shutil.which("lint-imports") or shutil.which(
        "lint-imports", path=str(Path(sys.executable).parent))
    if lint_imports is None:
        print("lint-imports is not installed (pip install -e '.[test]')", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="relaydsl-layout-") as tmp:
        install_layout(Path(tmp))
        env = {**os.environ, "PYTHONPATH": tmp}
        # Run from the layout: lint-imports puts the working directory first on sys.path.
        return subprocess.run([lint_imports, "--no-cache", str(ROOT / "pyproject.toml")],
                              cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
