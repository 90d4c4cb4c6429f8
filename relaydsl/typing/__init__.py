"""Type inference: Hindley-Milner with union-find and a queue of type relations (2019 paper,
§3.2)."""
from relaydsl.typing.infer import infer_type, infer_types

__all__ = ["infer_type", "infer_types"]
