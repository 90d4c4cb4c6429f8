import sys
import threading

import pytest

from relaydsl.errors import IRError
from relaydsl.ir.expr import Let, Tuple, Var
from relaydsl.ir.visitor import COMPILER_RECURSION_LIMIT, ExprFunctor, deep_recursion
from relaydsl.op.registry import ops


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
