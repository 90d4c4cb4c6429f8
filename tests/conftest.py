"""Settings for the whole suite: the IR verifier runs after every pass of every build
(relaydsl/transform/verify.py), so a pass that builds bad IR fails the test that ran it."""
import gc
import os

os.environ.setdefault("RELAYDSL_VERIFY_IR", "1")


def pytest_sessionfinish(session, exitstatus):
    """JAX's garbage-collection callback goes before the worker winds down (issue 26, item
    12). pytest collects garbage several times at the end of a session, and with JAX's
    callback each collection also asks XLA to collect; on a loaded machine a pytest-xdist
    worker then takes more than 5 s to stop, and execnet stops it with a SIGINT
    (_terminate_execution), whose KeyboardInterrupt lands in that callback, where Python can
    only print it: "PytestUnraisableExceptionWarning ... _xla_gc_callback ...
    KeyboardInterrupt" in the suite's output."""
    gc.callbacks[:] = [cb for cb in gc.callbacks
                       if not getattr(cb, "__module__", "").startswith("jax")]


def pytest_collection_modifyitems(config, items):
    """The tests marked slow run first. pytest-xdist hands tests to its workers in this order,
    so a 90-second test that came last would leave the other worker idle while it runs:
    started first, it overlaps with the many short ones (the suite must stay under 10
    minutes on 2 cores). The order is the same in every worker, as xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
