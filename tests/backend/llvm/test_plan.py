"""Plans: static programs, with if and loops, run as one native program, against JAX."""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.llvm.plan import BRANCH, CALL, COPY, HALT, JUMP, Buffer, Plan, Step
from relaydsl.backend.llvm.plan import place_temporaries
from relaydsl.ir.types import TensorType

RNG = np.random.default_rng(1)
ROOT = pathlib.Path(__file__).resolve().parents[3]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def build(fn):
    exe = relay.build(fn, target="llvm")
    assert exe.program.plan is not None, "expected a plan"
    return exe


@relay
def lstm(xs: Tensor[Float, (6, 1, 8)], w: Tensor[Float, (32, 8)], u: Tensor[Float, (32, 8)],
         b: Tensor[Float, 32]) -> Tensor[Float, (1, 8)]:
    h = relay.zeros(shape=(1, 8))
    c = relay.zeros(shape=(1, 8))
    for xt in xs:
        gates = relay.dense(xt, w) + relay.dense(h, u) + b
        parts = relay.split(gates, indices_or_sections=4, axis=1)
        c = relay.sigmoid(parts[1]) * c + relay.sigmoid(parts[0]) * relay.tanh(parts[2])
        h = relay.sigmoid(parts[3]) * relay.tanh(c)
    return h


def lstm_jax(xs, w, u, b):
    def step(carry, xt):
        h, c = carry
        i, f, g, o = jnp.split(xt @ w.T + h @ u.T + b, 4, axis=1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return (jax.nn.sigmoid(o) * jnp.tanh(c), c), None
    zeros = jnp.zeros((1, 8), jnp.float32)
    return jax.lax.scan(step, (zeros, zeros), xs)[0][0]


def test_an_lstm_over_a_sequence_matches_lax_scan_and_calls_are_independent():
    exe = build(lstm)
    first = (rand(6, 1, 8), rand(32, 8), rand(32, 8), rand(32))
    second = (rand(6, 1, 8), rand(32, 8), rand(32, 8), rand(32))
    out1 = exe(*first)
    out2 = exe(*second)  # the arena is reused: results must be fresh arrays
    np.testing.assert_allclose(out1, lstm_jax(*first), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out2, lstm_jax(*second), rtol=1e-5, atol=1e-6)


@relay
def nested(x: Tensor[Float, (3, 3)], n: Int, m: Int) -> Tensor[Float, (3, 3)]:
    acc = x
    for _ in range(n):
        for _ in range(m):
            acc = relay.tanh(relay.matmul(acc, x)) + 0.1
        acc = acc * 0.5
    return acc


def test_nested_loops_with_runtime_trip_counts():
    exe = build(nested)
    x = rand(3, 3)
    for n, m in [(0, 0), (1, 0), (0, 4), (3, 2)]:
        want = jnp.asarray(x)
        for _ in range(n):
            for _ in range(m):
                want = jnp.tanh(want @ x) + 0.1
            want = want * 0.5
        np.testing.assert_allclose(exe(x, np.int32(n), np.int32(m)), want, rtol=1e-5, atol=1e-6)


@relay
def fibonacci_pair(a: Tensor[Float, 4], b: Tensor[Float, 4], n: Int) -> Tensor[Float, 4]:
    i = 0
    while i < n:
        a, b = b, a + b   # the tail call swaps its parameters
        i = i + 1
    return a


def test_a_loop_that_swaps_its_parameters():
    exe = build(fibonacci_pair)
    a, b = rand(4), rand(4)
    for n in (0, 1, 2, 7):
        x, y = a, b
        for _ in range(n):
            x, y = y, x + y
        np.testing.assert_allclose(exe(a, b, np.int32(n)), x, rtol=1e-6)


@relay
def halve_until_small(x: Tensor[Float, 5]) -> tuple[Tensor[Float, 5], Int]:
    steps = 0
    while relay.max(relay.abs(x)) > 1.0:
        x = x * 0.5
        steps = steps + 1
    return x, steps


def test_a_data_dependent_while_loop():
    exe = build(halve_until_small)
    for scale in (0.5, 3.0, 1000.0):
        x = rand(5) * scale
        want, steps = np.asarray(x), 0
        while np.abs(want).max() > 1.0:
            want, steps = want * np.float32(0.5), steps + 1
        got, got_steps = exe(x)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert int(got_steps) == steps


@relay
def pick(x: Tensor[Float, 4], flag: Tensor[Float, ()]) -> Tensor[Float, 4]:
    if flag > 0.0:
        y = relay.exp(x)
    else:
        y = relay.tanh(x) * 2.0
    return y


def test_an_if_as_the_result():
    exe = build(pick)
    x = rand(4)
    np.testing.assert_allclose(exe(x, np.float32(1.0)), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(exe(x, np.float32(-1.0)), np.tanh(x) * 2, rtol=1e-6)


def test_programs_with_closures_or_lists_run_as_native_code_not_a_plan():
    @relay
    def total(xs: Tensor[Float, (3, 2)]) -> Tensor[Float, 2]:
        return relay.foldl(lambda acc, r: acc + r, relay.zeros(shape=(2,)),
                           relay.Cons(xs[0], relay.Cons(xs[1], relay.Nil())))

    exe = relay.build(total, target="llvm")
    assert not exe.program.uses_plan and exe.program.path == "native"
    xs = rand(3, 2)
    np.testing.assert_allclose(exe(xs), xs[0] + xs[1], rtol=1e-6)


@relay
def running_sum(xs: Tensor[Float, ("n", 4)]) -> Tensor[Float, 4]:
    total = relay.zeros(shape=(4,))
    for row in xs:
        total = total + relay.sigmoid(row)
    return total


def test_a_shape_polymorphic_loop_gets_a_plan_per_signature():
    exe = relay.build(running_sum, target="llvm")
    for n in (1, 5, 2, 5):
        xs = rand(n, 4)
        np.testing.assert_allclose(exe(xs), np.asarray(jax.nn.sigmoid(xs)).sum(0),
                                   rtol=1e-5, atol=1e-6)
    plans = exe.program._compiled
    assert sorted(k[0][0][0] for k in plans) == [1, 2, 5]
    assert exe.program.uses_plan and all(isinstance(p, Plan) for p in plans.values())


# ---- memory: liveness over the instructions --------------------------------------------------

def test_an_lstm_shares_its_arena_between_values_of_disjoint_lifetimes():
    plan = build(lstm).program.plan
    temps = sum(b.nbytes for b in plan.buffers if b.kind == "temp")
    assert plan.arena_bytes < temps


def test_a_value_carried_around_a_loop_stays_live_across_the_back_edge():
    t = TensorType((100,), "float32")
    # 0: input, 1: bool input; 2 = f(0) before the loop, read after it; 3, 4 in the loop
    buffers = [Buffer(t, "input"), Buffer(TensorType((), "bool"), "input")] + \
        [Buffer(t, "temp") for _ in range(3)] + [Buffer(t, "output")]
    steps = [Step(None, [0], [2]), Step(None, [0], [3]), Step(None, [3], [4]),
             Step(None, [2, 4], [5])]
    code = [CALL, 0,                    # 0: t2 = f(x)
            BRANCH, 1, 11,              # 2: loop while the flag is set
            CALL, 1, CALL, 2,           # 5: t3 = g(x); t4 = h(t3)
            JUMP, 2,                    # 9: back edge
            CALL, 3, HALT]              # 11: out = k(t2, t4)
    place_temporaries(buffers, code, steps)
    t2, t3, t4 = (buffers[i].value for i in (2, 3, 4))
    assert not np.shares_memory(t2, t3) and not np.shares_memory(t2, t4)
    assert not np.shares_memory(t3, t4)  # a kernel never writes over what it reads


def test_a_copy_from_a_dying_value_may_share_its_memory():
    t = TensorType((10,), "float32")
    buffers = [Buffer(t, "input")] + [Buffer(t, "temp") for _ in range(2)] + \
        [Buffer(t, "output")]
    steps = [Step(None, [0], [1]), Step(None, [2], [3])]
    total = place_temporaries(buffers, [CALL, 0, COPY, 2, 1, 40, CALL, 1, HALT], steps)
    assert total == 64 and np.shares_memory(buffers[1].value, buffers[2].value)


@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_lock_held_at_a_fork_does_not_deadlock_the_child():
    exe = build(pick)
    x = rand(4)
    plan = exe.program.plan
    with plan._lock:  # as if another thread were inside the plan
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # a deadlock ends the child with SIGALRM
            ok = np.allclose(exe(x, np.float32(1.0)), np.exp(x), rtol=1e-6)
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


# ---- Ctrl-C ------------------------------------------------------------------------------

SIGINT_SCRIPT = '''
import signal, sys, time
import numpy as np
from relaydsl import Float, Tensor, relay

@relay
def endless(x: Tensor[Float, (4,)]) -> Tensor[Float, (4,)]:
    while relay.sum(x) > -1.0:
        x = x * 0.5 + 1.0
    return x

@relay
def halve(x: Tensor[Float, (4,)]) -> Tensor[Float, (4,)]:
    while relay.sum(x) > 1.0:
        x = x * 0.5
    return x

x = np.ones(4, np.float32)
assert endless.build().program.plan is not None  # the loop runs natively
np.testing.assert_array_equal(halve(x), np.full(4, 0.25, np.float32))

def wait_for_sigint(what):
    print("ready", what, flush=True)
    try:
        if what == "loop":
            endless(x)
        else:
            time.sleep(30)
    except KeyboardInterrupt:
        print("stopped", what, flush=True)
'''


def run_with_sigints(script: str, folder: pathlib.Path, timeout: float = 60
                     ) -> tuple[list[str], str, int]:
    """Runs `script` (from a file in `folder`: decorated functions need their source); sends
    a SIGINT ~1 s after each line it prints that starts "ready"."""
    path = folder / "script.py"
    # Python's own SIGINT handler, as an interactive user has it: a shell running the suite
    # in the background (``pytest &``) starts it, and so this child, with SIGINT ignored.
    path.write_text("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                    + script)
    proc = subprocess.Popen([sys.executable, str(path)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(timeout, proc.kill)  # a hang fails the test, not the suite
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("ready"):
                time.sleep(1.0)
                proc.send_signal(signal.SIGINT)
        stderr = proc.stderr.read()
        proc.wait()
    finally:
        timer.cancel()
    return lines, stderr, proc.returncode


def test_ctrl_c_stops_an_endless_loop_on_llvm(tmp_path):
    # issue 11, item 9: SIGINT was ignored while a loop ran natively
    start = time.monotonic()
    lines, stderr, code = run_with_sigints(SIGINT_SCRIPT + "print('ready', flush=True)\n"
                                                           "endless(x)\n", tmp_path)
    assert lines == ["ready"]
    assert code == -signal.SIGINT and stderr.rstrip().endswith("KeyboardInterrupt"), stderr
    assert time.monotonic() - start < 30


def test_after_ctrl_c_pythons_sigint_handling_is_back(tmp_path):
    lines, stderr, code = run_with_sigints(SIGINT_SCRIPT + '''
wait_for_sigint("loop")
np.testing.assert_array_equal(halve(x), np.full(4, 0.25, np.float32))  # runs on
wait_for_sigint("sleep")  # Python's own handler is installed again: the sleep is stopped
seen = []
signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
wait_for_sigint("loop")  # a Python handler is called; the loop cut short still raises
print("handled", seen == [signal.SIGINT], flush=True)
''', tmp_path)
    assert code == 0, stderr
    assert lines == ["ready loop", "stopped loop", "ready sleep", "stopped sleep",
                     "ready loop", "stopped loop", "handled True"]


def test_a_child_forked_during_an_interruptible_run_gets_pythons_sigint_handling(tmp_path):
    # the native handler is installed while the main thread runs a loop; a child forked then
    # by another thread must not inherit it (Ctrl-C would never reach its Python)
    lines, stderr, code = run_with_sigints(SIGINT_SCRIPT + '''
import os, threading

def fork_child():
    time.sleep(0.5)  # the main thread is inside the loop
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)
            os._exit(1)
        except KeyboardInterrupt:
            os._exit(0)
    print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)

threading.Thread(target=fork_child).start()
wait_for_sigint("loop")
''', tmp_path)
    assert code == 0, stderr
    assert lines == ["ready loop", "child 0", "stopped loop"]
