"""Issue 22, item 4: the visitor (ir/visitor.py's ExprFunctor family) is the one way to walk
an expression. A function that branches by hand on the kind of node, ``if isinstance(e,
Call): ... elif isinstance(e, Let): ...`` over five kinds or more, is a walk written again,
with its own memo and its own idea of which children to visit; it belongs on a functor,
with a method per kind."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
KINDS = {"Var", "GlobalVar", "Constant", "Op", "Constructor", "Call", "Let", "Function",
         "Tuple", "TupleGetItem", "If", "Match", "Grad", "RefCreate", "RefRead", "RefWrite"}

# Branching on kinds that is not a walk, each with its reason.
NOT_WALKS = {
    # the definition of a node's children, which every walk (the visitor's too) uses
    ("relaydsl/ir/visitor.py", "children"),
    # renders a leaf (variable, global, op, constructor, constant): no children to walk
    ("relaydsl/ir/printer.py", "atom"),
    # a functor's method choosing how to call by the callee's kind
    ("backend/llvm/native/functions.py", "visit_call"),
    # matches one fixed let pattern (read, add, write), without walking
    ("backend/llvm/native/accumulations.py", "_match_accumulation"),
}


def kinds_branched_on(fn: ast.AST) -> set[str]:
    """The node classes `fn` tests one at a time with isinstance (a tuple of classes is a
    predicate such as "is atomic", not a branch per kind)."""
    found: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                n.func.id == "isinstance" and len(n.args) == 2 and \
                isinstance(n.args[1], ast.Name) and n.args[1].id in KINDS:
            found.add(n.args[1].id)
    return found


def hand_written_walks(root: Path = ROOT) -> list[str]:
    walks = []
    for package in ("relaydsl", "frontend", "backend"):
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            for fn in ast.walk(ast.parse(path.read_text())):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        (where, fn.name) not in NOT_WALKS:
                    kinds = kinds_branched_on(fn)
                    if len(kinds) >= 5:
                        walks.append(f"{where}:{fn.lineno} {fn.name} on {sorted(kinds)}")
    return walks


def test_no_function_walks_expressions_by_hand():
    assert hand_written_walks() == []


def test_a_walk_by_hand_is_found(tmp_path):
    walk = ("def size(e):\n"
            "    if isinstance(e, Call): return 1 + sum(size(a) for a in e.args)\n"
            "    if isinstance(e, Let): return size(e.value) + size(e.body)\n"
            "    if isinstance(e, Tuple): return sum(size(f) for f in e.fields)\n"
            "    if isinstance(e, TupleGetItem): return size(e.tuple_value)\n"
            "    if isinstance(e, If): return size(e.cond)\n"
            "    return 1\n")
    assert len(kinds_branched_on(ast.parse(walk))) == 5
    (tmp_path / "relaydsl").mkdir()
    (tmp_path / "relaydsl" / "size.py").write_text(walk)
    assert hand_written_walks(tmp_path) == ["relaydsl/size.py:1 size on "
                                    "['Call', 'If', 'Let', 'Tuple', 'TupleGetItem']"]
