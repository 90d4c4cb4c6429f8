"""Makes the repository's benchmarks/ package importable in these tests.

It is not installed, and the repository root must not go on sys.path (its frontend/ and
backend/ folders would become importable under their bare names, tests/test_packaging.py):
the package alone is loaded from its folder and registered as ``benchmarks``.
"""
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

if "benchmarks" not in sys.modules:
    spec = importlib.util.spec_from_file_location(
        "benchmarks", BENCHMARKS / "__init__.py", submodule_search_locations=[str(BENCHMARKS)])
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = package
    spec.loader.exec_module(package)
