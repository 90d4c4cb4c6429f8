"""The install layout: one import name, `relaydsl`, with the repository's frontend/ and
backend/ folders installed as relaydsl.frontend and relaydsl.backend (pyproject.toml)."""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"relaydsl": "relaydsl", "relaydsl.frontend": "frontend", "relaydsl.backend": "backend"}


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_folders_map_onto_one_import_name():
    assert _config()["package-dir"] == FOLDERS


def test_every_package_folder_is_listed_for_installation():
    on_disk = set()
    for package, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join((package, *parts)))
    assert set(_config()["packages"]) == on_disk


def test_frontend_and_backend_are_subpackages_of_relaydsl():
    import relaydsl.backend.target
    import relaydsl.frontend.decorators

    assert Path(relaydsl.frontend.decorators.__file__).parent == ROOT / "frontend"
    assert Path(relaydsl.backend.target.__file__).parent == ROOT / "backend"
    assert relaydsl.__file__ is not None


def test_the_bare_folder_names_are_not_importable():
    # a user project with its own `backend` package must not shadow or be shadowed by ours
    for name in ("frontend", "backend"):
        spec = importlib.util.find_spec(name)
        assert spec is None or not str(spec.origin).startswith(str(ROOT)), name


def test_the_version_is_the_installed_distribution_s():
    import relaydsl

    assert relaydsl.__version__ == _config_version()


def _config_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]
