"""Native code for whole programs (backend/llvm/native/): data types, closures, references
and recursion run without Python between kernels, with the values of JAX and the
interpreter; errors stop a run cleanly (issue 14, item 1)."""
from __future__ import annotations

import signal
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.interpreter import InterpreterError
from relaydsl.backend.target import get_target
from relaydsl.transform.graph_normal_form import ToGraphNormalForm
from tests.backend.llvm.helpers import residual_chain, run_with_sigints
from tests.frontend.test_references import counter

RNG = np.random.default_rng(14)
W = (RNG.standard_normal((4, 4)) * 0.5).astype(np.float32)


@relay.adt
class Tree:
    Leaf: Tensor[Float, (1, 4)]
    Node: (Tree, Tree)


@relay
def encode(t: Tree) -> Tensor[Float, (1, 4)]:
    match t:
        case Tree.Leaf(x):
            return relay.tanh(x @ W)
        case Tree.Node(left, right):
            return relay.tanh((encode(left) + encode(right)) @ W)


def leaf():
    return Tree.Leaf(RNG.standard_normal((1, 4)).astype(np.float32))


def random_tree(n: int):
    if n == 1:
        return leaf()
    k = int(RNG.integers(1, n))
    return Tree.Node(random_tree(k), random_tree(n - k))


def jax_encode(t, w):
    if t.name == "Leaf":
        return jnp.tanh(t.fields[0] @ w)
    return jnp.tanh((jax_encode(t.fields[0], w) + jax_encode(t.fields[1], w)) @ w)


def native(fn):
    exe = relay.build(fn, target="llvm")
    assert exe.program.path == "native", exe.program.path
    return exe


def test_a_recursive_match_over_a_tree_runs_natively_with_jaxs_values():
    exe = native(encode)
    for n in (1, 2, 7, 30):
        t = random_tree(n)
        np.testing.assert_allclose(exe(t), jax_encode(t, W), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(exe(t), relay.build(encode, target="interp")(t),
                                   rtol=1e-5, atol=1e-6)


@relay
def tower(h: Tensor[Float, (1, 4)], w: Tensor[Float, (4, 4)], k: Int) -> Tensor[Float, (1, 4)]:
    if k == 0:
        return h
    return h + tower(relay.tanh(h @ w), w, k - 1)


@relay
def tower_loss(x: Tensor[Float, (1, 4)], w: Tensor[Float, (4, 4)], k: Int) -> Float:
    out = tower(x, w, k)
    return relay.sum(out * out)


@relay
def tower_grad(x: Tensor[Float, (1, 4)], w: Tensor[Float, (4, 4)], k: Int
               ) -> tuple[Float, tuple[Tensor[Float, (1, 4)], Tensor[Float, (4, 4)], Int]]:
    return relay.grad(tower_loss)(x, w, k)


def jax_tower(h, w, k):
    return h if k == 0 else h + jax_tower(jnp.tanh(h @ w), w, k - 1)


def test_the_gradient_program_runs_natively_closures_and_references_included():
    step = native(tower_grad)
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    loss, (dx, dw, _) = step(x, W, np.int32(5))
    value, (jdx, jdw) = jax.value_and_grad(
        lambda x, w: jnp.sum(jax_tower(x, w, 5) ** 2), argnums=(0, 1))(x, W)
    np.testing.assert_allclose(loss, value, rtol=1e-5)
    np.testing.assert_allclose(dx, jdx, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(dw, jdw, rtol=1e-4, atol=1e-6)


@relay
def doubled(xs: relay.List[Tensor[Float, (3,)]]) -> relay.List[Tensor[Float, (3,)]]:
    return relay.map(lambda v: v * 2.0, xs)


def test_lists_cross_both_ways_and_closures_run_inside():
    exe = native(doubled)
    xs = [RNG.standard_normal(3).astype(np.float32) for _ in range(5)]
    out = exe(xs)
    items = []
    while out.name == "Cons":
        items.append(out.fields[0])
        out = out.fields[1]
    np.testing.assert_allclose(np.stack(items), 2 * np.stack(xs), rtol=1e-6)


def test_references_captured_by_a_closure_in_a_loop():
    assert int(native(counter)(np.int32(3))) == 34


@relay
def ones(n: Int) -> relay.List[Tensor[Float, (64,)]]:
    xs = relay.Nil()
    for i in range(n):
        xs = relay.Cons(relay.ones(shape=(64,)) * relay.cast(i, "float32"), xs)
    return xs


@relay
def total(xs: relay.List[Tensor[Float, (64,)]]) -> Tensor[Float, (64,)]:
    return relay.foldl(lambda acc, v: acc + v, relay.zeros(shape=(64,)), xs)


def test_a_run_that_outgrows_the_arena_gets_more_memory_and_the_next_one_a_bigger_arena():
    exe = native(ones)
    before = exe.program.native._arena_bytes
    xs = exe(np.int32(3000))  # 3000 tensors of 256 bytes: more than the first arena
    assert exe.program.native._arena_bytes > before
    np.testing.assert_allclose(native(total)(xs), np.full(64, sum(range(3000))), rtol=1e-6)
    grown = exe.program.native._arena_bytes
    exe(np.int32(3000))
    assert exe.program.native._arena_bytes == grown


def test_a_tail_recursive_fold_over_a_long_list_runs_in_constant_stack():
    xs = [np.full(64, 0.5, np.float32)] * 50_000
    np.testing.assert_allclose(native(total)(xs), np.full(64, 25_000.0), rtol=1e-6)


@relay
def depth(n: Int) -> Int:
    if n == 0:
        return 0
    return 1 + depth(n - 1)


def test_recursion_deeper_than_the_stack_is_an_error_not_a_crash():
    exe = native(depth)
    assert int(exe(np.int32(1000))) == 1000
    with pytest.raises(InterpreterError, match="recursion is too deep"):
        exe(np.int32(10_000_000))
    assert int(exe(np.int32(10))) == 10  # the program still works


@relay
def first(xs: relay.List[Tensor[Float, (3,)]]) -> Tensor[Float, (3,)]:
    return relay.hd(xs)


def test_a_match_without_a_matching_clause_stops_the_run_with_its_location():
    exe = native(first)
    np.testing.assert_allclose(exe([np.ones(3, np.float32)]), np.ones(3))
    with pytest.raises(InterpreterError, match="no clause of the match"):
        exe([])


def test_a_tensor_of_the_wrong_shape_inside_a_data_value_is_refused():
    exe = native(encode)
    with pytest.raises(TypeError, match=r"\(1, 4\)"):
        exe(Tree.Node(leaf(), Tree.Leaf(np.zeros((2, 4), np.float32))))


def test_threads_calling_one_program_at_once_get_their_own_results():
    exe = native(encode)
    trees = [random_tree(n) for n in (3, 8, 13, 21)]
    expected = [np.asarray(jax_encode(t, W)) for t in trees]
    errors: list[BaseException] = []

    def work(t, want):
        try:
            for _ in range(30):
                np.testing.assert_allclose(exe(t), want, rtol=1e-5, atol=1e-6)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=pair) for pair in zip(trees, expected)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


SCRIPT = '''
import numpy as np
from relaydsl import Float, Tensor, relay

@relay
def endless(x: Tensor[Float, (4,)]) -> Tensor[Float, (4,)]:
    cell = relay.ref(x)
    while relay.sum(relay.ref_read(cell)) > -1.0:
        relay.ref_write(cell, relay.ref_read(cell) * 0.5 + 1.0)
    return relay.ref_read(cell)

assert endless.build().program.path == "native"
print("ready", flush=True)
endless(np.ones(4, np.float32))
'''


@pytest.mark.slow
def test_ctrl_c_stops_an_endless_native_loop(tmp_path):
    lines, stderr, code = run_with_sigints(SCRIPT, tmp_path)
    assert lines == ["ready"]
    assert code == -signal.SIGINT and stderr.rstrip().endswith("KeyboardInterrupt"), stderr


@relay
def scaled_head(xs: relay.List[Tensor[Float, ("n",)]], k: Tensor[Float, ("n",)]
                ) -> Tensor[Float, ("n",)]:
    match xs:
        case relay.Cons(h, _):
            return relay.exp(h) * k
        case _:
            return k


def test_data_values_of_symbolic_shape_get_native_code_for_the_first_signature():
    exe = relay.build(scaled_head, target="llvm")
    assert exe.program.path == "run-time shapes"
    for n in (3, 5, 3):
        x, k = RNG.standard_normal(n).astype(np.float32), np.full(n, 2.0, np.float32)
        np.testing.assert_allclose(exe([x], k), np.exp(x) * 2.0, rtol=1e-6)
        np.testing.assert_allclose(exe([], k), k)
    compiled = exe.program._compiled  # n = 3; an empty list and n = 5 on generic code
    assert len(compiled) == 1 and all(p.describe().endswith("native code between them")
                                      for p in compiled.values())


def test_a_call_taking_more_memory_than_its_budget_stops_with_a_memory_error(monkeypatch):
    from relaydsl.backend.llvm.native import program as native_module

    exe = native(ones)
    monkeypatch.setattr(native_module, "_MEMORY_BUDGET", 4 << 20)
    with pytest.raises(MemoryError, match="more than 4 MiB in one call"):
        exe(np.int32(40_000))  # 40,000 tensors of 256 bytes
    monkeypatch.undo()
    assert list_length(exe(np.int32(40_000))) == 40_000


def list_length(xs) -> int:
    n = 0
    while xs.name == "Cons":
        n, xs = n + 1, xs.fields[1]
    return n


def test_a_run_stopped_by_an_error_does_not_grow_the_arena(monkeypatch):
    from relaydsl.backend.llvm.native import program as native_module

    exe = native(ones)
    before = exe.program.native._arena_bytes
    monkeypatch.setattr(native_module, "_MEMORY_BUDGET", 1 << 20)
    with pytest.raises(MemoryError):
        exe(np.int32(200_000))  # 51 MB: beyond any arena an earlier test grew
    assert exe.program.native._arena_bytes == before


# ---- closures returned to Python -------------------------------------------------------------

@relay
def make_scaler(s: Tensor[Float, (3,)]):
    k = relay.exp(s)  # computed by the call, captured by the closure

    def scale(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
        return relay.tanh(x * k) + k
    return scale


@relay
def make_counter(start: Tensor[Float, ()]):
    cell = relay.ref(start)

    def bump(step: Tensor[Float, ()]) -> Tensor[Float, ()]:
        relay.ref_write(cell, relay.ref_read(cell) + step)  # a value of this later call
        return relay.ref_read(cell)
    return bump


def test_a_closure_returned_to_python_runs_natively_and_keeps_its_memory():
    import gc

    assert native(make_scaler).program.path == "native"
    s = np.array([0.1, -0.2, 0.3], np.float32)
    first, x = make_scaler(s), np.ones(3, np.float32)
    others = [make_scaler(s * i) for i in range(3)]  # calls that reuse the arena
    np.testing.assert_allclose(first(x), np.tanh(x * np.exp(s)) + np.exp(s), rtol=1e-6)
    del others
    gc.collect()
    np.testing.assert_allclose(first(2 * x), np.tanh(2 * x * np.exp(s)) + np.exp(s),
                               rtol=1e-6)
    assert native(make_counter).program.path == "native"
    counters = [make_counter(np.float32(10 * i)) for i in range(2)]
    expected = relay.build(make_counter, target="interp")(np.float32(0))
    for step in (1.0, 2.0, 3.5):
        make_scaler(s)  # more arena reuse between the calls
        got = [float(c(np.float32(step))) for c in counters]
        total = float(expected(np.float32(step)))
        assert got == [total, total + 10]


@relay
def repeat_tanh(x: Tensor[Float, (32, 32)], n: Int) -> Tensor[Float, (32, 32)]:
    i = 0
    while i < n:
        x = relay.tanh(relay.matmul(x, x)) * 0.5
        i = i + 1
    return x


@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_child_forked_while_another_thread_runs_the_program_runs_it_too():
    """The parent's thread is inside native code (its state, the thread pool busy) when the
    child is forked: the child's own calls run (its pool forgotten: inline), with JAX's
    values."""
    import os

    exe = native(repeat_tanh)
    x = (np.random.default_rng(5).standard_normal((32, 32)) * 0.2).astype(np.float32)
    want = jnp.asarray(x)
    for _ in range(3):
        want = jnp.tanh(want @ want) * 0.5
    want = np.asarray(want)  # the child must not touch JAX: its threads are not forked
    busy = threading.Thread(target=exe, args=(x, np.int32(200_000)))
    busy.start()
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a deadlock ends the child with SIGALRM
        ok = np.allclose(exe(x, np.int32(3)), want, rtol=1e-5, atol=1e-6)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    busy.join()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


B = W[0].copy()


@relay
def scale_by_constants(x: Tensor[Float, (4, 4)]) -> Tensor[Float, (4, 4)]:
    return relay.matmul(x, W) + B


@relay
def scale_by_constants_again(x: Tensor[Float, (4, 4)]) -> Tensor[Float, (4, 4)]:
    return relay.matmul(x, W) + B


def test_native_code_holds_no_address_and_equal_programs_share_it(monkeypatch):
    """Kernels' entries, constants and the resolver are read from the link table: the LLVM
    text names none of the process's addresses, so an equal program (another function of
    the same body) is the same text and shares the compiled module."""
    from relaydsl.backend.llvm import jit
    from relaydsl.backend.llvm.native import program as native_module

    texts: list[str] = []
    library = native_module._library
    monkeypatch.setattr(native_module, "_library",
                        lambda text, finite: (texts.append(text), library(text, finite))[1])
    first = native(scale_by_constants)
    compiled = jit.stats["compiled"]
    second = native(scale_by_constants_again)
    assert jit.stats["compiled"] == compiled  # kernels and native code: nothing new
    assert texts[0] == texts[1]
    assert first.program.native._function == second.program.native._function
    links = first.program.native._links
    assert len(links) >= 3  # the resolver, the kernel, a constant
    assert not any(str(int(a)) in texts[0] for a in links if a)
    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    for exe in (first, second):
        np.testing.assert_allclose(exe(x), jnp.asarray(x) @ W + B, rtol=1e-5, atol=1e-6)


def test_a_residual_chain_deeper_than_graph_form_inlines_lowers_each_node_once():
    # 110 blocks of tanh(conv + conv + x) and 8 negations: 1320 nodes deep, each block's
    # input shared by two kernels; A-normal form binds it once (issue 24)
    blocks = 110
    mod, x, want = residual_chain(blocks, negations=8)
    exe = get_target("llvm").build(mod, "main", {})
    assert exe.native is not None
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-5)
    assert 2 * blocks <= exe.native.kernel_calls <= 2 * blocks + 2  # + the float64 round trip


def test_graph_form_is_refused_by_the_native_lowering_with_the_functions_name():
    from relaydsl.backend.llvm.native import NativeProgram
    from relaydsl.errors import IRError
    from relaydsl.transform.pass_infra import PassContext

    mod, x, want = residual_chain(3)
    with pytest.raises(IRError, match=r"A-normal form.*ToANormalForm.*@main"), \
            PassContext(disabled_pass=["ToANormalForm"]):
        get_target("llvm").build(mod, "main", {})
    exe = get_target("llvm").build(mod, "main", {})
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(IRError, match="@main has a Call"):  # what the hybrid fallback gave
        NativeProgram(ToGraphNormalForm()(exe.mod), "main")
