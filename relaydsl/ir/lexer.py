"""The tokenizer of the Relay text format: source text to tokens (parser.py reads them).

``split_metadata`` cuts off the ``#[metadata]`` section and decodes its constants;
``tokenize`` turns the rest into Tokens, dropping spaces and ``//`` and ``/* */`` comments,
and ends the list with eof tokens. ``Source`` keeps the text for line/column spans and
caret errors. Token kinds: local (``%x``), global (``@f``), number (with an optional
dtype suffix, ``1f``), string, ident, version (``#[version = "..."]``), punct, eof.
"""
from __future__ import annotations

import bisect
import functools
import json
import re
from typing import NamedTuple

from relaydsl.errors import IRError, ParseError
from relaydsl.ir.expr import Constant
from relaydsl.ir.printer import METADATA, decode_constant, is_json_array, is_json_object
from relaydsl.ir.span import Span


class Token(NamedTuple):
    """One token: its kind (local, global, ident, number, string, version, punct, eof, error),
    its text, and its start and end offsets in the source."""

    kind: str
    text: str
    start: int
    end: int


# Each match is (skipped spaces and comments, one token); '' for the end of the text.
_TOKEN = re.compile(r"""((?:[ \t\r\n]+|//[^\n]*|/\*.*?\*/)*)(
    %[A-Za-z0-9_]+ | @[A-Za-z_][A-Za-z0-9_]*
  | -?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:[A-Za-z_][A-Za-z0-9_]*)?
  | "(?:[^"\\\n]|\\.)*" | '(?:[^'\\\n]|\\.)*'
  | [A-Za-z_][A-Za-z0-9_]*
  | => | -> | [()\[\]{}<>,;:=.?\-]
  | \#\[[ \t]*version[ \t]*=[ \t]*"[^"\n]*"[ \t]*\]
  | /\* | . | \Z
)""", re.VERBOSE | re.DOTALL)
NUMBER = re.compile(r"(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)([A-Za-z_][A-Za-z0-9_]*)?\Z")
_PADDING = 4  # eof tokens at the end, so looking ahead never runs off the list


class Source:
    """The text being parsed: its name, its lines (for carets) and span construction."""

    def __init__(self, text: str, name: str):
        self.text = text
        self.name = name
        self.lines = text.split("\n")
        self.line_starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based line and column of an offset."""
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def token_span(self, first: Token, last: Token) -> Span:
        """From the start of `first` to the end of `last` (tokens never cross lines)."""
        line, col = self.line_col(first.start)
        line_end = self.line_starts[line] if line < len(self.line_starts) else len(self.text) + 1
        if last.start < line_end:  # the usual case: one line
            end_line, end_col = line, col + last.end - first.start
        else:
            end_line, end_col = self.line_col(last.start)
            end_col += last.end - last.start
        source_line = self.lines[line - 1] if line <= len(self.lines) else None
        return Span(self.name, line, col, end_line, end_col, source_line)

    def error(self, message: str, tok: Token) -> ParseError:
        return ParseError(message, self.token_span(tok, tok))


def tokenize(src: Source, text: str) -> list[Token]:
    """The tokens of `text` (the part of the source before any metadata section), ending
    with eof tokens. Spaces and comments are dropped."""
    tokens: list[Token] = []
    pos = 0
    for skipped, text_ in _TOKEN.findall(text):
        pos += len(skipped)
        kind = _kind(text_)
        tok = Token(kind, text_, pos, pos + len(text_))
        pos = tok.end
        if kind == "eof":
            break
        if kind == "error":
            what = {"/*": "unterminated comment", '"': "unterminated string",
                    "'": "unterminated string"}.get(text_, f"unexpected character {text_!r}")
            raise src.error(what, tok)
        if kind == "number" and tokens and tokens[-1].text == "." and "." in text_:
            tokens.extend(_split_indices(tok))  # `%t.0.1`: two projections, not 0.1
        else:
            tokens.append(tok)
    tokens.extend(Token("eof", "", pos, pos + 1) for _ in range(_PADDING))
    return tokens


@functools.cache
def _kind(text: str) -> str:
    """A token's kind, from its text (the token regex has already delimited it)."""
    if not text:
        return "eof"
    first = text[0]
    if first == "%":
        return "local"
    if first == "@":
        return "global"
    if first.isdigit() or (first == "-" and len(text) > 1 and text[1].isdigit()):
        return "number"
    if first in "\"'":
        return "string" if len(text) > 1 and text[-1] == first else "error"
    if first.isalpha() or first == "_":
        return "ident"
    if first == "#" and len(text) > 1:
        return "version"
    if text in _PUNCT:
        return "punct"
    return "error"


_PUNCT = frozenset(["=>", "->", *"()[]{}<>,;:=.?-"])


def _split_indices(tok: Token) -> list[Token]:
    out: list[Token] = []
    at = tok.start
    for i, part in enumerate(tok.text.split(".")):
        if i:
            out.append(Token("punct", ".", at, at + 1))
            at += 1
        out.append(Token("number", part, at, at + len(part)))
        at += len(part)
    return out


_METADATA_LINE = re.compile(r"^[ \t]*" + re.escape(METADATA) + r"[ \t]*$", re.MULTILINE)


def split_metadata(src: Source) -> tuple[str, list[Constant]]:
    """The program text, and the constants of its metadata section."""
    m = _METADATA_LINE.search(src.text)
    if m is None:
        return src.text, []
    start = m.start() + len(m.group()) - len(m.group().lstrip())
    marker = Token("punct", METADATA, start, start + len(METADATA))
    try:
        pool = json.loads(src.text[m.end():])
    except json.JSONDecodeError as e:
        at = Token("error", "", m.end() + e.pos, m.end() + e.pos + 1)
        raise src.error(f"the metadata section is not valid JSON: {e.msg}", at) from None
    except ValueError as e:  # a number beyond Python's limit on the digits of an int
        raise src.error(f"the metadata section is not valid: {e}", marker) from None
    except RecursionError:
        raise src.error("the metadata section nests too deeply", marker) from None
    not_constants = 'the metadata section must be {"Constant": [...]}'
    if not is_json_object(pool):
        raise src.error(not_constants, marker)
    entries = pool.get("Constant", [])
    if not is_json_array(entries) or set(pool) - {"Constant"}:
        raise src.error(not_constants, marker)
    constants: list[Constant] = []
    for i, entry in enumerate(entries):
        try:
            constants.append(Constant(decode_constant(entry)))
        except (ValueError, IRError) as e:
            raise src.error(f"metadata constant {i}: {e}", marker) from None
    return src.text[:m.start()], constants


__all__ = ["NUMBER", "Source", "Token", "split_metadata", "tokenize"]
