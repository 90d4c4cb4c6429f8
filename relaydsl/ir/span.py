"""Source locations carried by IR nodes, so errors can point at the user's code."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A half-open source range: ``file:line:col`` to ``end_line:end_col`` (1-based lines and
    columns)."""

    file: str
    line: int
    col: int
    end_line: int | None = None
    end_col: int | None = None
    source_line: str | None = None  # the text of `line`, for carets in error messages

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def excerpt(self) -> str:
        """The source line with a caret under the spanned columns; '' when the text is unknown."""
        if self.source_line is None:
            return ""
        width = 1
        if self.end_line == self.line and self.end_col is not None and self.end_col > self.col:
            width = self.end_col - self.col
        return f"    {self.source_line}\n    {' ' * (self.col - 1)}{'^' * width}"
