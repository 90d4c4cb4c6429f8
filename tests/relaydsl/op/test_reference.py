from pathlib import Path

from relaydsl.op.reference import markdown
from relaydsl.op.registry import all_ops

PAGE = Path(__file__).resolve().parents[3] / "docs" / "ops.md"


def test_the_operator_reference_page_is_generated_from_the_current_registry():
    assert PAGE.read_text() == markdown(), (
        "docs/ops.md is stale: python -m relaydsl.op.reference > docs/ops.md")


def test_every_op_has_an_entry_with_its_signature():
    text = markdown()
    for name, opdef in all_ops().items():
        assert f"## {name}\n" in text
        assert f"relay.{name}{opdef.signature}" in text
