"""Python's scoping read off the AST (scoping.py): what a block assigns, whether it returns,
and the walk of a function's own scope; each asked of nested blocks in time linear in them."""
import ast
import importlib.util

import numpy as np

from relaydsl.frontend.translate.scoping import (
    always_returns, assigned_names, contains_return, walk_no_defs,
)

BLOCK = '''
if a:
    x = 1
    def g():
        hidden = 2
        return hidden
elif b:
    for i in range(3):
        y, x = i, i
else:
    match z:
        case (p, q):
            w = lambda r: r
            return p
        case _:
            return 0
'''


def test_assigned_names_in_order_not_inside_nested_functions():
    stmts = ast.parse(BLOCK).body
    assert assigned_names(stmts) == ["x", "g", "i", "y", "p", "q", "w"]


def test_a_return_counts_unless_it_is_a_nested_functions():
    stmts = ast.parse(BLOCK).body
    assert contains_return(stmts)
    only_nested = ast.parse("def g():\n    return 1\nx = 2\n").body
    assert not contains_return(only_nested)
    assert contains_return(ast.parse("for i in y:\n    try:\n        pass\n"
                                     "    except E:\n        return i\n").body)


def test_always_returns_follows_every_branch():
    assert not always_returns(ast.parse(BLOCK).body)  # the `if a` branch falls through
    every = ast.parse("if a:\n    return 1\nelif b:\n    return 2\nelse:\n    return 3\n").body
    assert always_returns(every)
    assert not always_returns([])


def test_the_walk_of_a_scope_skips_functions_and_lambdas_and_keeps_order():
    tree = ast.parse("x = f(lambda v: v + inner, y)\ndef g():\n    return hidden\n")
    names = [n.id for s in tree.body for n in walk_no_defs(s) if isinstance(n, ast.Name)]
    assert names == ["x", "f", "y"]
    assert [type(n).__name__ for n in walk_no_defs(tree.body[0])][:3] == \
        ["Assign", "Name", "Store"]


def elif_function(n: int) -> str:
    lines = ["from relaydsl import relay, Tensor, Float, Int", "",
             "def f(x: Tensor[Float, (3,)], k: Tensor[Int, ()]) -> Tensor[Float, (3,)]:",
             "    if k == 0:", "        y = x + 0.0"]
    for i in range(1, n):
        lines += [f"    elif k == {i}:", f"        y = x + {float(i)}"]
    return "\n".join([*lines, "    else:", "        y = x", "    return y", ""])


def test_an_elif_chain_translates_in_work_linear_in_its_length(tmp_path, monkeypatch):
    """Each elif asks what the rest of the chain assigns and whether it returns: answered
    from the rest's statements' remembered facts, not by walking it again (600 branches
    took 20 s to decorate; cubic)."""
    from relaydsl import relay

    steps = [0]
    for owner, name in ((ast, "iter_child_nodes"), (ast.NodeVisitor, "generic_visit")):
        original = getattr(owner, name)

        def counted(*args, _original=original):
            steps[0] += 1
            return _original(*args)
        monkeypatch.setattr(owner, name, counted)
    work = {}
    for n in (60, 120):
        path = tmp_path / f"chain{n}.py"
        path.write_text(elif_function(n))
        spec = importlib.util.spec_from_file_location(f"chain{n}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        steps[0] = 0
        f = relay(module.f)
        work[n] = steps[0]
        x = np.array([1.0, -2.0, 0.5], np.float32)
        for k in (0, n - 1, n):
            np.testing.assert_allclose(f.build("interp")(x, np.int64(k)),
                                       x + (k if k < n else 0.0), rtol=1e-6)
    assert work[120] < 2.5 * work[60], work
