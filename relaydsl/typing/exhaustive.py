"""Exhaustiveness of match clauses (a small version of Maranget's usefulness algorithm).

``missing_case(patterns, mod)`` returns a value no clause matches, rendered
as a pattern (``Cons(_, Nil)``), or None when the clauses cover every value.
"""
from __future__ import annotations

from relaydsl.ir.adt import Pattern, PatternConstructor, PatternTuple, PatternWildcard
from relaydsl.ir.module import IRModule

_WILD = PatternWildcard()


def missing_case(patterns: list[Pattern], mod: IRModule) -> str | None:
    witness = _missing([[p] for p in patterns], 1, mod)
    return None if witness is None else witness[0]


def _is_wild(p: Pattern) -> bool:
    return not isinstance(p, (PatternConstructor, PatternTuple))


def _missing(rows: list[list[Pattern]], width: int, mod: IRModule) -> list[str] | None:
    """A row of values matched by no row of the matrix, or None."""
    if width == 0:
        return None if rows else []
    heads = [r[0] for r in rows]
    tuples = [p for p in heads if isinstance(p, PatternTuple)]
    ctors = [p for p in heads if isinstance(p, PatternConstructor)]
    if tuples:
        k = len(tuples[0].patterns)
        sub = [
            (list(r[0].patterns) if isinstance(r[0], PatternTuple) else [_WILD] * k) + r[1:]
            for r in rows
        ]
        w = _missing(sub, k - 1 + width, mod)
        if w is None:
            return None
        inner = ", ".join(w[:k]) + ("," if k == 1 else "")
        return [f"({inner})", *w[k:]]
    if ctors:
        adt = mod.type_definitions.get(ctors[0].constructor.belong_to)
        constructors = (adt.constructors if adt is not None
                        else tuple({p.constructor for p in ctors}))
        for c in constructors:
            a = len(c.inputs)
            sub: list[list[Pattern]] = []
            for r in rows:
                head = r[0]
                if isinstance(head, PatternConstructor):
                    if head.constructor is c or head.constructor.name == c.name:
                        sub.append(list(head.patterns) + r[1:])
                elif _is_wild(head):
                    sub.append([_WILD] * a + r[1:])
            w = _missing(sub, a - 1 + width, mod)
            if w is not None:
                args = f"({', '.join(w[:a])})" if a else ""
                return [f"{c.name}{args}", *w[a:]]
        return None
    w = _missing([r[1:] for r in rows if _is_wild(r[0])], width - 1, mod)
    return None if w is None else ["_", *w]
