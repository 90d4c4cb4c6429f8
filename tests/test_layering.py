"""The import contracts hold: the core imports neither the frontend nor the backend, the
layers of pyproject.toml's [tool.importlinter] are respected, and no subpackages form a cycle."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold():
    if shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None and \
            shutil.which("lint-imports") is None:
        pytest.skip("lint-imports is not installed (it comes with the test extra: "
                    "pip install -e '.[test]')")
    run = subprocess.run([sys.executable, str(ROOT / ".ci" / "lint_imports.py")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
