"""The operator reference, generated from the registry: ``docs/ops.md``.

Each op's entry is its Python signature (as ``relay.<name>``), what it computes, its
attributes, its gradient's math and its fusion pattern: ``OpDef.help_text``, which
``help(relay.<name>)`` shows too. Regenerate the page after adding or changing an op::

    python -m relaydsl.op.reference > docs/ops.md

(tests/test_readme.py fails while the page is stale.)
"""
from __future__ import annotations

from relaydsl.op.registry import all_ops


def markdown() -> str:
    """The reference page: a table of contents, then one section per op, by name."""
    defs = sorted(all_ops().values(), key=lambda d: d.name)
    lines = ["# Operator reference", "",
             "Generated from the op registry by `python -m relaydsl.op.reference`; each entry "
             "is what `help(relay.<name>)` shows. Attributes are given by keyword, or "
             "positionally after the inputs in TVM's order (those after a `*` by keyword "
             "only).", "",
             " · ".join(f"[{d.name}](#{d.name})" for d in defs), ""]
    for d in defs:
        lines += [f"## {d.name}", "", "```python", f"relay.{d.name}{d.signature}", "```", "",
                  *_markdown_body(d.help_text()), ""]
    return "\n".join(lines).rstrip() + "\n"


def _markdown_body(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("    "):
            out.append(f"- {line.strip()}")
        else:
            out.append(line)
    return out


if __name__ == "__main__":
    print(markdown(), end="")
