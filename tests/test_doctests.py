"""Every docstring example of the installed package runs and shows what it claims.

Modules are found by walking the installed package, not the source folders: frontend/ and
backend/ install as relaydsl.frontend and relaydsl.backend (a package-dir mapping), so
pytest's --doctest-modules over the folders would import them under the wrong names. One
test per module, so a failure names it.
"""
from __future__ import annotations
import __future__

import doctest
import importlib
import importlib.util
import pkgutil
from types import ModuleType

import pytest

# Packages installed from folders outside relaydsl/ (pyproject's package-dir): an editable
# install does not place them under relaydsl.__path__, so they are walked from their own.
ROOTS = ("relaydsl", "relaydsl.frontend", "relaydsl.backend")
FUTURE_FEATURE = type(__future__.annotations)  # what `from __future__ import x` binds
# Modules whose examples run JAX, the test oracle; the runtime does not need it.
NEEDS_JAX = {"relaydsl.testing.oracle"}


def package_modules() -> list[str]:
    """The dotted names of every module of the installed package, sorted."""
    names: set[str] = set()
    for root in ROOTS:
        package = importlib.import_module(root)
        names.add(root)
        names.update(m.name for m in pkgutil.walk_packages(package.__path__, root + "."))
    return sorted(names)


def doctests_of(module: ModuleType) -> list[doctest.DocTest]:
    """The module's docstring examples, run as typed into a REPL: with the module's names but
    without its ``from __future__`` flags (``from __future__ import annotations`` would turn
    an example's class annotations into strings of their source)."""
    globs = {name: value for name, value in vars(module).items()
             if not isinstance(value, FUTURE_FEATURE)}
    found = doctest.DocTestFinder().find(module, module.__name__, globs=globs)
    return [test for test in found if test.examples]


def with_examples() -> list:
    # Import every module before looking for examples: a lookup on a module with lazy
    # attributes (relay.<name>) may import another submodule into the package mid-walk.
    modules = [importlib.import_module(name) for name in package_modules()]
    params = []
    for module in modules:
        if not doctests_of(module):
            continue
        marks = []
        if module.__name__ in NEEDS_JAX and importlib.util.find_spec("jax") is None:
            marks.append(pytest.mark.skip(reason="its examples run JAX, the test oracle"))
        params.append(pytest.param(module.__name__, marks=marks, id=module.__name__))
    return params


@pytest.mark.parametrize("name", with_examples())
def test_docstring_examples(name: str) -> None:
    runner = doctest.DocTestRunner()
    for test in doctests_of(importlib.import_module(name)):
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{failed} of {attempted} examples of {name} failed (printed above)"


def test_every_package_module_is_walked() -> None:
    """The walk reaches the mapped folders (a regression would silently skip their examples)."""
    names = package_modules()
    assert "relaydsl.frontend.annotations" in names
    assert "relaydsl.backend.llvm.codegen" in names
    assert len(names) == len(set(names))
