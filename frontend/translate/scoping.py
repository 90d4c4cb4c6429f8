"""Python's scoping read off the AST: the names a block assigns, a closure reads, a loop binds.

These decide which names are local to a function (a use where one is unbound is an error, never
a global; `LocalNames` keeps them during the translation), what an ``if`` or a loop joins, and
which names a closure captures."""
from __future__ import annotations

import ast
import contextlib
import weakref
from collections.abc import Iterable, Iterator


def assigned_names(stmts: Iterable[ast.stmt]) -> list[str]:
    """Names a block (re)binds, in order, not looking into nested functions."""
    out: list[str] = []
    for s in stmts:
        _add(out, _statement_names(s))
    return out


# Facts of a statement, kept while its AST lives: the translation asks them of the same
# nested blocks again and again (each `elif` of a chain of n asks about the n - 1 after it),
# which was cubic in n (600 branches: 20 s to decorate).
_NAMES: weakref.WeakKeyDictionary[ast.stmt, tuple[str, ...]] = weakref.WeakKeyDictionary()
_RETURNS: weakref.WeakKeyDictionary[ast.stmt, bool] = weakref.WeakKeyDictionary()
_ALWAYS_RETURNS: weakref.WeakKeyDictionary[ast.stmt, bool] = weakref.WeakKeyDictionary()


def _statement_names(s: ast.stmt) -> tuple[str, ...]:
    names = _NAMES.get(s)
    if names is None:
        out: list[str] = []
        _collect_names(s, out, inner=False)
        names = _NAMES[s] = tuple(out)
    return names


def _collect_names(node: ast.AST, out: list[str], inner: bool = True) -> None:
    """The names `node` binds, appended to `out` in the order of its fields (a statement
    nested in it: from the memo)."""
    if inner and isinstance(node, ast.stmt):
        _add(out, _statement_names(node))
    elif isinstance(node, ast.Name):
        if isinstance(node.ctx, ast.Store):
            _add(out, [node.id])
    elif isinstance(node, ast.FunctionDef):
        _add(out, [node.name])
    elif not isinstance(node, ast.Lambda):
        if isinstance(node, ast.MatchAs) and node.name:
            _add(out, [node.name])
        for child in ast.iter_child_nodes(node):
            _collect_names(child, out)


def _add(out: list[str], names: Iterable[str]) -> None:
    out.extend(n for n in names if n not in out)


def contains_return(stmts: Iterable[ast.stmt]) -> bool:
    return any(_returns(s) for s in stmts)


def _returns(s: ast.stmt) -> bool:
    """Whether `s` is or holds a ``return`` (not one of a nested function)."""
    got = _RETURNS.get(s)
    if got is None:
        got = _RETURNS[s] = isinstance(s, ast.Return) or (
            not isinstance(s, ast.FunctionDef) and any(_returns(c) for c in _statements_in(s)))
    return got


def _statements_in(node: ast.AST) -> Iterator[ast.stmt]:
    """The statements directly nested in `node` (in its blocks, its cases' and handlers')."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            yield child
        elif isinstance(child, (ast.match_case, ast.excepthandler)):
            yield from _statements_in(child)


def always_returns(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in a return."""
    if not stmts:
        return False
    last = stmts[-1]
    got = _ALWAYS_RETURNS.get(last)
    if got is None:
        if isinstance(last, ast.If):
            got = always_returns(last.body) and always_returns(last.orelse)
        elif isinstance(last, ast.Match):
            got = all(always_returns(c.body) for c in last.cases)
        else:
            got = isinstance(last, ast.Return)
        _ALWAYS_RETURNS[last] = got
    return got


def walk_no_defs(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `node` that belong to its scope (not those of functions and lambdas in
    it), parents before children: iterative, as a chain of nested generators is quadratic
    in the depth."""
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, (ast.FunctionDef, ast.Lambda)):
            yield n
            stack.extend(reversed(list(ast.iter_child_nodes(n))))


def nested_functions(nodes: Iterable[ast.AST]) -> list[ast.FunctionDef | ast.Lambda]:
    """The functions and lambdas among or inside `nodes` (not those inside them)."""
    out: list[ast.FunctionDef | ast.Lambda] = []
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            out.append(node)
        else:
            out.extend(nested_functions(ast.iter_child_nodes(node)))
    return out


def free_names(fn: ast.FunctionDef | ast.Lambda) -> set[str]:
    """The names `fn` reads from enclosing scopes (Python's free variables)."""
    params = {a.arg for a in fn.args.args}
    body = fn.body if isinstance(fn, ast.FunctionDef) else [fn.body]
    local = params | set(assigned_names(body)) if isinstance(fn, ast.FunctionDef) else params
    used = {n.id for b in body for n in walk_no_defs(b)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for inner in nested_functions(body):
        used |= free_names(inner)
    return used - local


def target_names(s: ast.For) -> set[str]:
    return {n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)}


class LocalNames:
    """The local names of the functions being translated, innermost last.

    A name local to one of them but not bound at a use is used before its assignment (never a
    global, as in Python). Each name maps to why it is unbound after the statements translated
    so far, when that is known (assigned in one branch only, first assigned in a loop)."""

    def __init__(self) -> None:
        self._scopes: list[dict[str, str | None]] = []

    @contextlib.contextmanager
    def function(self, names: Iterable[str]) -> Iterator[None]:
        """While translating a function whose local names are `names`."""
        self._scopes.append(dict.fromkeys(names))
        try:
            yield
        finally:
            self._scopes.pop()

    def __contains__(self, name: str) -> bool:
        """Whether `name` is local to one of the functions being translated."""
        return any(name in scope for scope in self._scopes)

    def innermost(self) -> set[str]:
        """The local names of the function being translated (the innermost)."""
        return set(self._scopes[-1])

    def unbound_reason(self, name: str) -> str:
        """Why the local `name` is not bound where it is used."""
        depth, scope = next((d, sc) for d, sc in enumerate(reversed(self._scopes)) if name in sc)
        reason = scope[name]
        if reason is not None:
            return reason
        if depth == 0:
            return f"{name!r} is used before it is assigned"
        return (f"{name!r} is used before it is assigned: the enclosing function assigns it "
                "after this function's definition; define the function after assigning it")

    def note_unbound(self, name: str, reason: str) -> None:
        """Record why `name` is not bound after some statement, for a later use's error."""
        for scope in reversed(self._scopes):
            if name in scope:
                scope[name] = reason
                return
