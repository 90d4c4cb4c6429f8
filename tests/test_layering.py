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


def test_an_import_cycle_through_a_package_is_found(tmp_path):
    """A cycle through a package's own __init__ (relaydsl -> relaydsl.frontend.api -> relaydsl),
    which import-linter's acyclic_siblings contract does not see, is found by the search of the
    module graph that .ci/lint_imports.py adds."""
    pytest.importorskip("grimp", reason="grimp comes with import-linter, in the test extra")
    pkg = tmp_path / "relaydsl"
    (pkg / "frontend").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import relaydsl.frontend.api\n")
    (pkg / "frontend" / "__init__.py").write_text("")
    (pkg / "frontend" / "api.py").write_text("import relaydsl\n")
    (pkg / "frontend" / "leaf.py").write_text("import relaydsl.frontend.api\n")
    find = (f"import sys; sys.path.insert(0, {str(ROOT / '.ci')!r}); import lint_imports; "
            f"print(lint_imports.import_cycles(lint_imports.Path({str(tmp_path)!r})))")
    run = subprocess.run([sys.executable, "-c", find], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[['relaydsl', 'relaydsl.frontend.api']]"
