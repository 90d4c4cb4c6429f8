"""Passes and native code pick ops by the op itself, never by its name (issue 22).

A pass that asks ``call.op.name == "conv2d"`` or keeps ``_BINARY = ("add", "subtract")``
breaks silently when an op is renamed, and hides from the op's one block (DESIGN.md §3)
which stages depend on it. Code compares with the op's definition instead,
``call.op == conv2d.op`` (``from relaydsl.op.nn.conv import conv2d``), or asks a trait of
the op's block, ``call.op.definition.traits.arithmetic``.

So this test parses every module under relaydsl/transform/ and backend/llvm/native/ and
fails on a string literal equal to a registered op's name where code selects ops with it:

* an operand of a comparison: ``op.name == "add"``, ``name in ("add", "subtract")``;
* an element of a tuple, list, set or dict literal: ``_BINARY = ("add", "subtract")``;
* a call argument: ``_is(call, "conv2d")``, ``Op.get("add")``, ``anchors=("conv2d",)``;
* a subscript, an assigned value or a match pattern: ``defs["add"]``, ``name = "add"``.

Docstrings and messages are text and stay allowed: a docstring shows op names as printed
IR does, and a word such as ``"all"`` or ``"any"`` (both op names) may be a message's, as in
``_log.info("... %s", "any" if level is None else level)``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from relaydsl.op import all_ops

ROOT = Path(__file__).resolve().parents[3]
CHECKED = [ROOT / "relaydsl" / "transform", ROOT / "backend" / "llvm" / "native"]
# the quantization passes (config.py names modes, "round" and "max", that are op names too)
QUANTIZE_PASSES = [ROOT / "relaydsl" / "quantize" / f"{name}.py"
                   for name in ("annotate", "calibrate", "realize", "rules", "flow")]

# The parents of a string literal that make it select something by that string.
_SELECTING = (ast.Compare, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Call, ast.keyword,
              ast.Subscript, ast.Assign, ast.AnnAssign, ast.MatchValue)


def op_names_used(source: str) -> list[tuple[int, str]]:
    """(line, name) of each registered op name that `source` selects by (see above)."""
    names = set(all_ops())
    return [(child.lineno, child.value)
            for parent in ast.walk(ast.parse(source)) if isinstance(parent, _SELECTING)
            for child in ast.iter_child_nodes(parent)
            if isinstance(child, ast.Constant) and child.value in names]


def test_no_module_selects_ops_by_name() -> None:
    modules = [p for folder in CHECKED for p in sorted(folder.rglob("*.py"))] + QUANTIZE_PASSES
    assert len(modules) > 10, f"no modules found under {CHECKED}"
    uses = [f"{p.relative_to(ROOT)}:{line}: {name!r}"
            for p in modules for line, name in op_names_used(p.read_text())]
    assert not uses, "ops selected by name (compare with the OpDef's .op, or ask a trait):\n" + \
        "\n".join(uses)


@pytest.mark.parametrize("source", [
    'e.op.name == "conv2d"',
    'e.op.name in ("add", "subtract")',
    '_BINARY = ("add", "subtract")',
    '_is(call, "dense")',
    'rewrite_dataflow(mod, f, anchors=("conv2d",))',
    'Op.get("relu")',
    'name = "bias_add"',
    'match op.name:\n    case "multiply": pass',
])
def test_the_rule_catches(source: str) -> None:
    assert op_names_used(source)


@pytest.mark.parametrize("source", [
    'def f():\n    """add(%x, %y) becomes %x."""',
    '_log.info("%s ms in all", "any" if level is None else level)',
    'on = "all" if everywhere else ", ".join(targets)',
    'e.op == add.op',
])
def test_the_rule_allows(source: str) -> None:
    assert not op_names_used(source)
