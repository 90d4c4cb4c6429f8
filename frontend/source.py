"""The Python source of a decorated function, and spans / errors located in it."""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Callable

from relaydsl.errors import DSLSyntaxError
from relaydsl.ir.span import Span


@dataclass(frozen=True)
class Source:
    """A function's parsed source with what is needed to map AST positions back to the file."""

    file: str
    lines: tuple[str, ...]  # the file's lines covering the function, as written
    first_line: int  # 1-based line number of lines[0] in the file
    indent: int  # columns removed by dedenting
    tree: ast.FunctionDef

    @classmethod
    def of(cls, func: Callable) -> "Source":
        try:
            lines, first_line = inspect.getsourcelines(func)
            file = inspect.getsourcefile(func) or "<unknown>"
        except (OSError, TypeError) as e:
            raise DSLSyntaxError(
                f"cannot read the source of {getattr(func, '__qualname__', func)!r}: {e}. "
                "Decorated functions must be defined in a file; for code without one (python -c, "
                "exec(), the bare REPL) use relay.function_from_source(text)"
            ) from None
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        indent = len(lines[0]) - len(lines[0].lstrip()) if dedented != text else 0
        module = ast.parse(dedented)
        tree = module.body[0]
        if not isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise DSLSyntaxError(f"{func!r} is not a function definition")
        return cls(file, tuple(line.rstrip("\n") for line in lines), first_line, indent, tree)  # type: ignore[arg-type]

    def span(self, node: ast.AST) -> Span | None:
        lineno = getattr(node, "lineno", None)
        if lineno is None:
            return None
        col = node.col_offset + self.indent + 1  # type: ignore[attr-defined]
        end_line = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        line = lineno + self.first_line - 1
        text = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else None
        return Span(
            self.file, line, col,
            end_line + self.first_line - 1 if end_line is not None else None,
            end_col + self.indent + 1 if end_col is not None else None,
            source_line=text,
        )

    def error(self, node: ast.AST, message: str) -> DSLSyntaxError:
        """A DSLSyntaxError at `node`: file:line:col, the source line and a caret."""
        return DSLSyntaxError(message, self.span(node))


def names_bound_in(file: str) -> frozenset[str] | None:
    """Every name the Python file `file` binds anywhere (defs, classes, assignments, imports,
    in any scope): a name outside it can never be defined there, so a decorated function
    using it is wrong now, whatever is defined later. None when the file cannot be read or
    a star import could bind anything."""
    return _names_bound(file, "".join(linecache.getlines(file)))


@functools.lru_cache(maxsize=64)
def _names_bound(file: str, text: str) -> frozenset[str] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return frozenset(names) if text else None
