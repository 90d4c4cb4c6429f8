"""Python's scoping read off the AST: the names a block assigns, a closure reads, a loop binds.

These decide which names are local to a function (a use where one is unbound is an error, never
a global), what an ``if`` or a loop joins, and which names a closure captures."""
from __future__ import annotations

import ast
from typing import Iterable


def _assigned_names(stmts: Iterable[ast.stmt]) -> list[str]:
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


def _contains_return(stmts: Iterable[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for s in stmts for n in _walk_no_defs(s))


def _always_returns(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in a return."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    if isinstance(last, ast.If):
        return _always_returns(last.body) and _always_returns(last.orelse)
    if isinstance(last, ast.Match):
        return all(_always_returns(c.body) for c in last.cases)
    return False


def _walk_no_defs(node: ast.AST):
    """The nodes of `node` that belong to its scope: not those of functions and lambdas in it."""
    if isinstance(node, (ast.FunctionDef, ast.Lambda)):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk_no_defs(child)


def _nested_functions(nodes: Iterable[ast.AST]) -> list[ast.FunctionDef | ast.Lambda]:
    """The functions and lambdas among or inside `nodes` (not those inside them)."""
    out: list[ast.FunctionDef | ast.Lambda] = []
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            out.append(node)
        else:
            out.extend(_nested_functions(ast.iter_child_nodes(node)))
    return out


def _free_names(fn: ast.FunctionDef | ast.Lambda) -> set[str]:
    """The names `fn` reads from enclosing scopes (Python's free variables)."""
    params = {a.arg for a in fn.args.args}
    body = fn.body if isinstance(fn, ast.FunctionDef) else [fn.body]
    local = params | set(_assigned_names(body)) if isinstance(fn, ast.FunctionDef) else params
    used = {n.id for b in body for n in _walk_no_defs(b)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for inner in _nested_functions(body):
        used |= _free_names(inner)
    return used - local


def _target_names(s: ast.For) -> set[str]:
    return {n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)}
