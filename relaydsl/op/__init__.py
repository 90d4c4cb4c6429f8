"""The operator registry and the op families. See registry.py.

Importing this package also installs every op's compute rule (relaydsl/te/compute_rules),
so ``lookup(name).compute`` is set wherever the registry is used.
"""
from relaydsl.op.registry import REQUIRED, Attr, OpDef, OpPattern, all_ops, lookup, register

__all__ = ["Attr", "OpDef", "OpPattern", "REQUIRED", "all_ops", "lookup", "register"]

# Last: the rules import the registry (and load every family through lookup).
import relaydsl.te.compute_rules  # noqa: E402,F401
