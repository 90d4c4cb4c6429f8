"""relaydsl: a Python-embedded, statically typed, differentiable deep-learning language on Relay."""
from relaydsl.errors import DSLSyntaxError, IRError, ParseError, RelayError, RelayTypeError

__all__ = ["DSLSyntaxError", "IRError", "ParseError", "RelayError", "RelayTypeError"]
