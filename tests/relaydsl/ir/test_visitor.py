import sys
import threading

import pytest

from relaydsl.errors import IRError
from relaydsl.ir.expr import Let, Tuple, TupleGetItem, Var
from relaydsl.ir.visitor import (
    COMPILER_RECURSION_LIMIT, ExprFunctor, ExprFunctorWithArgs, FreeVarSets, deep_recursion,
    free_vars, post_order,
)
from relaydsl.op.registry import ops
from tests.relaydsl.ir.programs import ALL_PROGRAMS


def test_deep_recursion_raises_the_limit_and_restores_it():
    before = sys.getrecursionlimit()
    with deep_recursion():
        assert sys.getrecursionlimit() == max(before, COMPILER_RECURSION_LIMIT)
        with deep_recursion(10 * COMPILER_RECURSION_LIMIT):
            assert sys.getrecursionlimit() == 10 * COMPILER_RECURSION_LIMIT
        assert sys.getrecursionlimit() >= COMPILER_RECURSION_LIMIT  # an inner exit never lowers
    assert sys.getrecursionlimit() == before


def test_one_thread_leaving_does_not_lower_the_limit_under_another():
    before = sys.getrecursionlimit()
    inside, leave = threading.Event(), threading.Event()

    def other():
        with deep_recursion():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    with deep_recursion():
        pass
    assert sys.getrecursionlimit() >= COMPILER_RECURSION_LIMIT  # `other` is still inside
    leave.set()
    thread.join()
    assert sys.getrecursionlimit() == before


# ---- ExprFunctor: a memoised function of expressions ---------------------------------------

class _Size(ExprFunctor[int]):
    """The number of distinct op calls under a node, counting each call each time seen."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def visit_constant(self, c):
        return 0

    def visit_call(self, call):
        self.calls += 1
        return 1 + sum(self.visit(a) for a in call.args)


def test_a_functor_computes_a_shared_node_once_and_binds_lets():
    x = Var("x")
    shared = ops.exp(x)
    f = _Size()
    f.bound[x] = 0
    assert f.visit(ops.add(shared, shared)) == 3  # the value counts both paths...
    assert f.calls == 2  # ...the shared call was computed once
    y = Var("y")
    assert _bound_size(Let(y, ops.exp(x), ops.add(y, y)), x) == 3


def _bound_size(e, x):
    f = _Size()
    f.bound[x] = 0
    return f.visit(e)


def test_a_functor_walks_a_long_let_chain_without_recursion():
    x = Var("x")
    body, v = x, x
    lets = []
    for i in range(20_000):
        w = Var(f"v{i}")
        lets.append((w, ops.negative(v)))
        v = w
    body = v
    for w, value in reversed(lets):
        body = Let(w, value, body)
    assert _bound_size(body, x) == 20_000


def test_a_functor_refuses_a_node_kind_it_does_not_handle_and_a_free_variable():
    x = Var("x")
    with pytest.raises(IRError, match="_Size: unsupported Tuple node"):
        _bound_size(Tuple([x]), x)
    with pytest.raises(IRError, match="unsupported Var node"):
        _Size().visit(ops.exp(x))


def test_a_functors_memo_is_keyed_by_the_node_itself():
    x = Var("x")
    shared = ops.exp(x)
    root = ops.add(shared, shared)
    f = _Size()
    f.bound[x] = 0
    f.visit(root)
    assert list(f.memo) == [x, shared, root]  # each node once, in the order computed
    assert f.memo[shared] == 1 and f.memo[root] == 3


# ---- ExprFunctorWithArgs: extra arguments passed through, no memo ---------------------------

class _Paths(ExprFunctorWithArgs[[str, dict], list]):
    """Each variable occurrence's access path from the root (``root[0][1]``), looked up in an
    environment of names: a result that depends on the arguments, not only on the node."""

    def __init__(self):
        self.visits = 0

    def visit_var(self, v, path, env):
        self.visits += 1
        return [f"{env[v]}@{path}"]

    def visit_tuple(self, t, path, env):
        return [p for i, f in enumerate(t.fields) for p in self.visit(f, f"{path}[{i}]", env)]

    def visit_tuple_getitem(self, t, path, env):
        return self.visit(t.tuple_value, f"{path}.{t.index}", env=env)


def test_a_functor_with_args_passes_them_through_positionally_and_by_keyword():
    x, y = Var("x"), Var("y")
    e = Tuple([x, TupleGetItem(Tuple([y, x]), 1)])
    assert _Paths().visit(e, "r", {x: "a", y: "b"}) == ["a@r[0]", "b@r[1].1[0]", "a@r[1].1[1]"]


def test_a_functor_with_args_keeps_no_memo_a_shared_node_is_visited_per_use():
    x = Var("x")
    shared = Tuple([x])
    f = _Paths()
    assert f.visit(Tuple([shared, shared]), "r", {x: "a"}) == ["a@r[0][0]", "a@r[1][0]"]
    assert f.visits == 2 and not hasattr(f, "memo")


def test_a_functor_with_args_refuses_a_node_kind_it_does_not_handle():
    x = Var("x")
    with pytest.raises(IRError, match="_Paths: unsupported Call node"):
        _Paths().visit(Tuple([ops.exp(x)]), "r", {x: "a"})
    with pytest.raises(IRError, match="_Paths: unsupported int node"):
        _Paths().visit(3, "r", {})  # not an expression at all


# ---- FreeVarSets: free_vars for many nodes, each computed once ---------------------------------

@pytest.mark.parametrize("name", [name for name, _ in ALL_PROGRAMS])
def test_free_var_sets_agree_with_free_vars_on_every_subexpression(name):
    mod = dict(ALL_PROGRAMS)[name]()
    sets = FreeVarSets()
    for fn in mod.functions.values():
        nodes = []
        post_order(fn, nodes.append)
        for e in nodes:
            assert sets(e) == frozenset(free_vars(e)), e
