"""Imports every op family so each registers its ops."""
import importlib

for _family in ("tensor", "reduce", "transform", "nn"):
    try:
        importlib.import_module(f"relaydsl.op.{_family}")
    except ModuleNotFoundError as e:  # a family not written yet
        if e.name != f"relaydsl.op.{_family}":
            raise
