"""The errors users see. Each carries a source span where one is known."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relaydsl.ir.span import Span


def _located(message: str, span: Span | None) -> str:
    if span is None:
        return message
    excerpt = span.excerpt()
    return f"{span}: {message}" + (f"\n{excerpt}" if excerpt else "")


class RelayError(Exception):
    """Base of every relaydsl error."""

    def __init__(self, message: str, span: Span | None = None):
        self.raw_message = message
        self.span = span
        super().__init__(_located(message, span))


class RelayTypeError(RelayError, TypeError):
    """A type or shape mismatch found by type inference; the message names both types."""


class IRError(RelayError, ValueError):
    """Malformed IR built through the Python API (wrong arity, unknown op, bad attribute)."""


class ParseError(RelayError, SyntaxError):
    """The Relay text format could not be parsed; `span` gives line and column."""


class DSLSyntaxError(RelayError, SyntaxError):
    """Python outside the subset the frontend translates."""


class ModelFileError(RelayError, ValueError):
    """A model file that cannot be loaded: not save_model's format, damaged, or not matching the
    model function. The message names the file. (A missing file is a FileNotFoundError.)"""


class SettingError(RelayError, ValueError):
    """An environment setting (``RELAYDSL_*``) holds a value relaydsl does not accept; the
    message names the variable, its value and what is accepted."""


class QuantizationOverflowWarning(RuntimeWarning):
    """A quantized program's narrow (int16) accumulator saturated on this call: the values of
    the layer it names were clipped (``relay.quantize``; QConfig ``overflow``)."""
