"""The operator registry and the op families. See registry.py."""
from relaydsl.op.registry import REQUIRED, Attr, OpDef, OpPattern, all_ops, lookup, register

__all__ = ["Attr", "OpDef", "OpPattern", "REQUIRED", "all_ops", "lookup", "register"]
