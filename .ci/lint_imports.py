"""Run the import contracts of pyproject.toml ([tool.importlinter]) on the installed layout,
then check that no module of relaydsl imports itself through others.

import-linter finds a package by its folder, but the repository's frontend/ and backend/
folders only become relaydsl.frontend and relaydsl.backend when installed (package-dir).
So this lays the sources out as an install would, in a temporary folder, and runs
``lint-imports`` there. Its acyclic_siblings contract sees cycles between the children of a
package, not those through a package's own __init__ (relaydsl -> relaydsl.frontend.x ->
relaydsl), so the import graph of the modules is then searched for any cycle, imports under
TYPE_CHECKING left out as the contracts leave them. The exit status is 0 when every contract
is kept and there is no cycle.

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

import grimp

ROOT = Path(__file__).resolve().parent.parent


def install_layout(into: Path) -> None:
    """Copy each package folder of [tool.setuptools.package-dir] to where it installs."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        shutil.copytree(ROOT / folder, into / package.replace(".", os.sep), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))


def import_cycles(layout: Path) -> list[list[str]]:
    """The sets of relaydsl's modules (in `layout`) that import each other, directly or not:
    the strongly connected components of the import graph (Tarjan's algorithm) of more than
    one module."""
    sys.path.insert(0, str(layout))  # before the editable install's finder
    try:
        graph = grimp.build_graph("relaydsl", exclude_type_checking_imports=True, cache_dir=None)
    finally:
        sys.path.remove(str(layout))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


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
        status = subprocess.run([lint_imports, "--no-cache", str(ROOT / "pyproject.toml")],
                                cwd=tmp, env=env).returncode
        cycles = import_cycles(Path(tmp))
    for cycle in cycles:
        print(f"Import cycle: these modules import each other: {', '.join(cycle)}")
    if not cycles:
        print("No import cycle between the modules of relaydsl.")
    return status or int(bool(cycles))


if __name__ == "__main__":
    sys.exit(main())
