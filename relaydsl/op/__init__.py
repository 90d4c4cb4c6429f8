"""The operator registry and the op families: every op defined once (registry.py).

Importing this package defines every op.
"""
from relaydsl.op.registry import (
    REQUIRED, Attr, OpDef, OpPattern, Traits, all_ops, lookup, ops, register,
)

# The families, each defining its ops (import order: later families use earlier ones' ops).
from relaydsl.op import tensor, reduce, transform, nn, quantize, collective

__all__ = ["Attr", "OpDef", "OpPattern", "REQUIRED", "Traits", "all_ops", "lookup", "ops",
           "register", "tensor", "reduce", "transform", "nn", "quantize", "collective"]
