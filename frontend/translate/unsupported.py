"""What to write instead of the Python constructs outside the DSL's subset."""
from __future__ import annotations

import ast

# What to write instead of common constructs outside the subset.
UNSUPPORTED_STATEMENTS: dict[type, str] = {
    ast.Try: "`try` is not supported: exceptions are not part of the language; check "
             "conditions with `if`",
    ast.With: "`with` is not supported; call functions directly",
    ast.Global: "`global` is not supported; pass the value as an argument",
    ast.Nonlocal: "`nonlocal` is not supported; return the new value instead",
    ast.ClassDef: "classes cannot be defined inside decorated functions; define ADTs at "
                  "module level",
    ast.Delete: "`del` is not supported; simply stop using the name",
    ast.Raise: "`raise` is not supported: exceptions are not part of the language",
    ast.Assert: "`assert` is not supported; check the inputs before calling the function",
    ast.Import: "imports are not allowed inside decorated functions; import at module level",
    ast.ImportFrom: "imports are not allowed inside decorated functions; import at module level",
    ast.AsyncFunctionDef: "`async def` is not supported; use a plain nested `def`",
    ast.AsyncFor: "`async for` is not supported; use `for`",
    ast.AsyncWith: "`async with` is not supported; call functions directly",
    ast.Break: "`break` is not supported; put the exit test in a `while` condition",
    ast.Continue: "`continue` is not supported; use `if` around the rest of the body",
}
UNSUPPORTED_EXPRESSIONS: dict[type, str] = {
    ast.Yield: "generators are not supported; return a tuple or a relay.List",
    ast.YieldFrom: "generators are not supported; return a tuple or a relay.List",
    ast.Await: "`await` is not supported",
    ast.Dict: "dicts are not supported; use a tuple",
    ast.DictComp: "dict comprehensions are not supported; use a tuple or a relay.List",
    ast.SetComp: "set comprehensions are not supported; use a tuple or a relay.List",
    ast.Set: "sets are not supported; use a tuple",
    ast.GeneratorExp: "generator expressions are not supported; use a `for` loop",
    ast.ListComp: "list comprehensions are not supported; use a `for` loop or relay.map",
    ast.JoinedStr: "f-strings are not supported",
    ast.Starred: "starred expressions are not supported; write each element",
    ast.NamedExpr: "`:=` is not supported; assign in a separate statement",
}
