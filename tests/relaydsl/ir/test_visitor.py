import sys
import threading

from relaydsl.ir.visitor import COMPILER_RECURSION_LIMIT, deep_recursion


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
