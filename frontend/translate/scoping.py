"""Python's scoping read off the AST: the names a block assigns, a closure reads, a loop binds.

These decide which names are local to a function (a use where one is unbound is an error, never
a global; `LocalNames` keeps them during the translation), what an ``if`` or a loop joins, and
which names a closure captures."""
from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterable, Iterator


def assigned_names(stmts: Iterable[ast.stmt]) -> list[str]:
    """Names a block (re)binds, in order, not looking into nested functions."""
    out: list[str] = []

    class _Visitor(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, ast.Store) and node.id not in out:
                out.append(node.id)

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            if node.name not in out:
                out.append(node.name)

        def visit_Lambda(self, node: ast.Lambda) -> None:
            pass

        def visit_MatchAs(self, node: ast.MatchAs) -> None:
            if node.name and node.name not in out:
                out.append(node.name)
            self.generic_visit(node)

    v = _Visitor()
    for s in stmts:
        v.visit(s)
    return out


def contains_return(stmts: Iterable[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for s in stmts for n in walk_no_defs(s))


def always_returns(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in a return."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    if isinstance(last, ast.If):
        return always_returns(last.body) and always_returns(last.orelse)
    if isinstance(last, ast.Match):
        return all(always_returns(c.body) for c in last.cases)
    return False


def walk_no_defs(node: ast.AST):
    """The nodes of `node` that belong to its scope: not those of functions and lambdas in it."""
    if isinstance(node, (ast.FunctionDef, ast.Lambda)):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from walk_no_defs(child)


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
