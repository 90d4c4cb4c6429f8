"""No pass runs another pass (issue 22): the pipeline does, by prerequisites.

A pass that calls ``to_graph_normal_form(mod)`` or ``fold_constants(mod)`` inside itself hides
a step from the pipeline (pipeline.py lists every pass a target runs), from the instruments
and the verifier, and runs it again where the pipeline ran it already. It declares it
instead (``requires=(ToGraphNormalForm,)``), or the pipeline lists the pass after it; a pass
may use another file's helpers on one function or expression (``a_normal_form_function``,
``fold_function``, ``remove_dead_lets``), which neither copy nor re-type a module.

So this test collects the passes (the ``Pass`` classes of relaydsl/transform/) and the
functions that run them (``fuse_ops(mod)`` is ``FuseOps()(mod)``), and parses every module
of relaydsl/transform/ and backend/ for a call of one defined in another module. Only
pipeline.py, which lists the passes, and pass_infra.py, which runs them, may; the backend
runs its target's pipeline through pipeline.py.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import relaydsl.transform
from relaydsl.transform.pass_infra import Pass

ROOT = Path(__file__).resolve().parents[3]
TRANSFORM = ROOT / "relaydsl" / "transform"
CHECKED = [TRANSFORM, ROOT / "backend"]
RUNNERS_OF_PASSES = {"pipeline", "pass_infra"}


def pass_classes() -> dict[str, str]:
    """The name of every pass class of relaydsl/transform/, and its module's."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(relaydsl.transform.__path__):
        module = importlib.import_module(f"relaydsl.transform.{info.name}")
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, Pass) and value is not Pass \
                    and value.__module__ == module.__name__:
                found[name] = info.name
    return found


def called_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every call of a name or attribute in `tree` (``f(x)``, ``m.f(x)``)."""
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                calls.append((node.lineno, node.func.id))
            elif isinstance(node.func, ast.Attribute):
                calls.append((node.lineno, node.func.attr))
    return calls


def pass_runners(module: str, source: str, classes: dict[str, str]) -> dict[str, str]:
    """The module-level functions of `module` that call one of its own pass classes."""
    own = {name for name, home in classes.items() if home == module}
    return {node.name: module for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef)
            and any(name in own for _, name in called_names(node))}


def passes_and_runners() -> dict[str, str]:
    """Every pass class and every function running one, by name, with its module."""
    classes = pass_classes()
    runners = {}
    for path in TRANSFORM.glob("*.py"):
        runners.update(pass_runners(path.stem, path.read_text(), classes))
    return {**classes, **runners}


def foreign_pass_calls(module: str, source: str, passes: dict[str, str]) -> list[str]:
    """The calls in `source` (of `module`) of passes, or functions running them, of other
    modules."""
    return [f"{line}: {name}" for line, name in called_names(ast.parse(source))
            if name in passes and passes[name] != module]


def test_passes_and_their_runners_are_found():
    passes = passes_and_runners()
    assert passes["FuseOps"] == passes["fuse_ops"] == "fuse_ops"
    assert passes["LowerGrads"] == passes["lower_grads"] == "gradient"
    assert passes["InlineOnce"] == passes["eliminate_dead_code"] == "dead_code"
    assert len([n for n, m in passes.items() if n[0].isupper()]) == 22


def test_no_pass_calls_another_pass():
    passes = passes_and_runners()
    modules = [p for folder in CHECKED for p in sorted(folder.rglob("*.py"))
               if not (p.parent == TRANSFORM and p.stem in RUNNERS_OF_PASSES)]
    assert len(modules) > 40, f"no modules found under {CHECKED}"
    calls = [f"{p.relative_to(ROOT)}:{call}" for p in modules
             for call in foreign_pass_calls(p.stem, p.read_text(), passes)]
    assert not calls, "passes run inside another module (declare requires=, or list the pass " \
        "in pipeline.py):\n" + "\n".join(calls)


@pytest.mark.parametrize("source", [
    "graph = to_graph_normal_form(mod)",
    "out = fold_constants(rewrite_functions(mod, alter))",
    "mod = FuseOps(level=0)(mod)",
    "return gnf.to_graph_normal_form(mod)",
])
def test_a_pass_call_is_caught(source):
    assert foreign_pass_calls("alter_op_layout", source, passes_and_runners())


@pytest.mark.parametrize("source", [
    "return AlterOpLayout(block, everywhere)(mod)",  # the module's own pass
    "requires = (ToGraphNormalForm,)",  # declared, not called
    "new = a_normal_form_function(fold_function(fn))",  # helpers on one function
])
def test_a_module_may_run_its_own_pass_and_name_or_use_others(source):
    assert not foreign_pass_calls("alter_op_layout", source, passes_and_runners())
