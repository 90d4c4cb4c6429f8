"""Type inference: Hindley-Milner with union-find and a queue of type relations (2019 paper §3.2)."""
