"""The llvm executor: native code, per call signature, and the dispatching executor.

Every result is compared with JAX (forward with jax.numpy, gradients with jax.grad).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.backend.llvm.executor import compile_program
from relaydsl.backend.llvm.kernel import compile_primitive
from relaydsl.backend.llvm.native import NativeProgram
from relaydsl.backend.llvm.native.frames import frame
from relaydsl import Float, Int, Tensor, relay, relay_model
from relaydsl.ir.parser import parse
from relaydsl.ir.expr import Function
from relaydsl.ir.visitor import post_order
from relaydsl.transform.fuse_ops import is_primitive
from relaydsl.transform.pipeline import CompileOptions
from relaydsl.typing import infer_types

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- native code ------------------------------------------------------------------------

@relay
def mlp(x: Tensor[Float, (8, 16)], w1: Tensor[Float, (16, 32)], b1: Tensor[Float, 32],
        w2: Tensor[Float, (32, 4)]) -> Tensor[Float, (8, 4)]:
    h = relay.relu(relay.matmul(x, w1) + b1)
    return relay.softmax(relay.matmul(h, w2))


def mlp_jax(x, w1, b1, w2):
    return jax.nn.softmax(jnp.maximum(x @ w1 + b1, 0) @ w2, axis=-1)


def test_a_first_order_program_runs_as_native_code():
    exe = relay.build(mlp, target="llvm")
    assert exe.program.path == "native"
    args = (rand(8, 16), rand(16, 32), rand(32), rand(32, 4))
    np.testing.assert_allclose(exe(*args), mlp_jax(*args), rtol=1e-5, atol=1e-6)
    # the arena is reused; results are fresh arrays each call
    first = exe(*args)
    second = exe(*[a * 2 for a in args])
    np.testing.assert_allclose(first, mlp_jax(*args), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second, mlp_jax(*[a * 2 for a in args]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_every_opt_level_computes_the_same(opt_level):
    args = (rand(8, 16), rand(16, 32), rand(32), rand(32, 4))
    out = relay.build(mlp, target="llvm", opt_level=opt_level)(*args)
    np.testing.assert_allclose(out, mlp_jax(*args), rtol=1e-5, atol=1e-6)


def test_build_rejects_bad_options():
    with pytest.raises(ValueError, match="opt_level"):
        relay.build(mlp, target="llvm", opt_level=7)
    with pytest.raises(TypeError, match="no option fast"):
        relay.build(mlp, target="llvm", fast=True)
    with pytest.raises(ValueError, match="unknown target 'gpu'"):
        relay.build(mlp, target="gpu")


def test_wrong_arguments_are_caught_before_any_kernel_runs():
    exe = relay.build(mlp, target="llvm")
    good = (rand(8, 16), rand(16, 32), rand(32), rand(32, 4))
    with pytest.raises(TypeError, match="w1"):
        exe(good[0], rand(16, 31), good[2], good[3])
    with pytest.raises(TypeError, match="x"):
        exe(good[0].astype(np.int32), *good[1:])
    # a non-contiguous view is fine: it is copied, not read out of bounds
    wide = rand(8, 32)
    np.testing.assert_allclose(exe(wide[:, ::2], *good[1:]), mlp_jax(wide[:, ::2], *good[1:]),
                               rtol=1e-5, atol=1e-6)


def test_tuple_results_and_outputs_that_are_inputs():
    @relay
    def pair(x: Tensor[Float, 5], y: Tensor[Float, 5]) -> tuple[Tensor[Float, 5], Tensor[Float, 5]]:
        return (relay.exp(x) + y, y)

    x, y = rand(5), rand(5)
    a, b = relay.build(pair, target="llvm")(x, y)
    np.testing.assert_allclose(a, np.exp(x) + y, rtol=1e-6)
    np.testing.assert_array_equal(b, y)
    b[0] = 100.0  # the result is the caller's own array, not the argument
    assert y[0] != 100.0


def _chain(n):
    text = "def @main(%x: Tensor[(64, 64), float32]) {\n"
    prev = "%x"
    for i in range(n):
        text += f"  %{i} = tanh({prev});\n"
        prev = f"%{i}"
    text += f"  {prev}\n}}"
    return infer_types(parse(text))


def test_a_long_chain_runs_in_a_small_frame():
    program = compile_program(_chain(40), "main", CompileOptions(0))  # no fusion: 40 kernels
    assert program.native.kernel_calls == 40
    assert frame(program.mod["main"]).size <= 2 * 64 * 64 * 4
    x = rand(64, 64)
    expected = x
    for _ in range(40):
        expected = np.tanh(expected)
    np.testing.assert_allclose(program(x), expected, rtol=1e-5, atol=1e-6)


# ---- the dispatching executor -----------------------------------------------------------------

@relay
def power_loop(x: Tensor[Float, (3, 3)], n: Int) -> Tensor[Float, (3, 3)]:
    acc = relay.ones_like(x)
    i = 0
    while i < n:
        acc = relay.matmul(acc, x) * 0.5 + relay.tanh(acc)
        i = i + 1
    return acc


def test_a_while_loop_runs_as_native_code():
    exe = relay.build(power_loop, target="llvm")
    assert exe.program.path == "native"
    x = rand(3, 3)
    expected = jnp.ones((3, 3), jnp.float32)
    for _ in range(5):
        expected = (expected @ x) * 0.5 + jnp.tanh(expected)
    np.testing.assert_allclose(exe(x, np.int32(5)), expected, rtol=1e-5, atol=1e-5)


@relay
def rec_sum(xs: Tensor[Float, ("n", 4)]) -> Tensor[Float, 4]:
    total = relay.zeros_like(xs[0])
    for row in xs:
        total = total + relay.sigmoid(row)
    return total


def test_symbolic_shapes_compile_per_argument_shape():
    exe = relay.build(rec_sum, target="llvm")
    for n in (1, 3, 7):
        xs = rand(n, 4)
        np.testing.assert_allclose(exe(xs), np.asarray(jax.nn.sigmoid(xs)).sum(0),
                                   rtol=1e-5, atol=1e-6)


def test_closures_returned_to_python_run_compiled():
    @relay
    def adder(a: Tensor[Float, 3]):
        def scale(b: Tensor[Float, 3]) -> Tensor[Float, 3]:
            return relay.exp(a) * b
        return scale

    a, b = rand(3), rand(3)
    f = relay.build(adder, target="llvm")(a)
    np.testing.assert_allclose(f(b), np.exp(a) * b, rtol=1e-6)


# ---- training on llvm: gradients against jax.grad -------------------------------------------

@relay_model
def small_mlp(x: Tensor[Float, (16, 20)]) -> Tensor[Float, (16, 5)]:
    return relay.linear(relay.tanh(relay.linear(x, num_hidden=12)), num_hidden=5)


@relay
def small_loss(x: Tensor[Float, (16, 20)], y: Tensor[Float, (16, 5)]) -> Float:
    logits = small_mlp(x)
    return relay.mean(relay.sum(-y * relay.log_softmax(logits), axis=1))


def test_model_gradients_on_llvm_match_jax_grad(monkeypatch):
    import relaydsl.backend.target

    monkeypatch.setattr(relaydsl.backend.target, "DEFAULT_TARGET", "llvm")
    model = relay.create_model(small_mlp, seed=3, init="glorot")
    x = rand(16, 20)
    y = np.eye(5, dtype=np.float32)[RNG.integers(0, 5, 16)]
    grads = relay.grad(model, small_loss, (x, y))
    names = sorted(model.params)

    def loss(params):
        p = dict(zip(names, params))
        h = jnp.tanh(x @ p["linear_0.weight"].T + p["linear_0.bias"])
        logits = h @ p["linear_1.weight"].T + p["linear_1.bias"]
        return jnp.mean(jnp.sum(-y * jax.nn.log_softmax(logits), axis=1))

    expected = jax.grad(loss)([jnp.asarray(model.params[n]) for n in names])
    for n, e in zip(names, expected):
        np.testing.assert_allclose(grads[n], e, rtol=1e-4, atol=1e-6, err_msg=n)


@relay
def poly_mlp(x: Tensor[Float, ("n", 16)], w: Tensor[Float, (16, 4)]) -> Tensor[Float, ("n", 4)]:
    return relay.tanh(relay.matmul(x, w)) * 2.0


def test_a_shape_polymorphic_program_gets_native_code_for_its_first_signature_then_one_generic(
        monkeypatch):
    from relaydsl.backend.llvm import executor

    monkeypatch.setattr(executor, "HOT_CALLS", 3)
    exe = relay.build(poly_mlp, target="llvm")
    assert exe.program.path == "run-time shapes"
    w = rand(16, 4)
    for n in (1, 5, 5, 9, 5):
        x = rand(n, 16)
        np.testing.assert_allclose(exe(x, w), np.tanh(x @ w) * 2.0, rtol=1e-5, atol=1e-6)
    compiled = exe.program._compiled  # the first signature, and one called 3 times
    assert sorted(key[0][0][0] for key in compiled) == [1, 5]
    assert all(isinstance(p, NativeProgram) for p in compiled.values())
    assert isinstance(exe.program._generic_native, NativeProgram)  # n = 9 ran there


def test_only_the_latest_signatures_are_counted_toward_getting_hot(monkeypatch):
    from relaydsl.backend.llvm import executor

    monkeypatch.setattr(executor, "_MAX_COUNTED", 3)
    exe = relay.build(poly_mlp, target="llvm")
    w = rand(16, 4)
    for n in range(1, 12):
        x = rand(n, 16)
        np.testing.assert_allclose(exe(x, w), np.tanh(x @ w) * 2.0, rtol=1e-5, atol=1e-6)
    assert len(exe.program._calls) <= 4


# ---- transposed operands read in place ----------------------------------------------------

@relay
def transposed_operands(g: Tensor[Float, (24, 40)], x: Tensor[Float, (24, 56)],
                        w: Tensor[Float, (56, 40)], s: Tensor[Float, (40, 40)]):
    return (relay.matmul(relay.transpose(g), x),        # A = gᵀ (the dense weight gradient)
            relay.dense(x, relay.transpose(w)),          # B = (wᵀ)ᵀ
            relay.matmul(s, relay.transpose(s)),         # square, B transposed
            relay.matmul(relay.transpose(x), g) + 1.0)   # with an epilogue


def test_a_transposed_operand_is_read_in_place_by_the_gemm():
    exe = relay.build(transposed_operands, target="llvm")
    g, x, w, s = rand(24, 40), rand(24, 56), rand(56, 40), rand(40, 40)
    got = exe(g, x, w, s)
    want = (g.T @ x, x @ w, s @ s.T, x.T @ g + 1.0)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    program = exe.program
    primitives: list[Function] = []
    post_order(program.mod[program.entry], lambda e: primitives.append(e)
               if isinstance(e, Function) and is_primitive(e) else None)
    assert program.native.kernel_calls == 4 and len(primitives) == 4
    # each kernel is the GEMM alone (plus an epilogue stage): no transpose is ever computed
    stages = [len(compile_primitive(f).stages) for f in primitives]
    assert all(n <= 2 for n in stages) and stages.count(1) == 3


@relay
def saturated_units(x: Tensor[Float, (4, 256)]) -> Float:
    return relay.sum(relay.tanh(x * 3.0))


def test_the_gradient_through_saturated_tanh_units_is_zero_as_in_jax():
    # issue 11: 1 - tanh(x)^2 was 4.8e-7 per saturated unit on llvm; summed, 1.3e-4 off
    x = np.random.default_rng(0).uniform(4.0, 50.0, (4, 256)).astype(np.float32)
    x[::2] *= -1
    value, (dx,) = relay.grad(saturated_units)(x)
    want = jax.grad(lambda v: jnp.sum(jnp.tanh(v * 3.0)))(x)
    np.testing.assert_array_equal(dx, want)
    assert not dx.any()
    np.testing.assert_allclose(value, jnp.sum(jnp.tanh(x * 3.0)), rtol=1e-6)


@pytest.mark.parametrize("reduction, want", [
    (relay.sum, lambda x: jnp.sum(x, axis=0)),
    (relay.prod, lambda x: jnp.prod(x, axis=0)),
    (relay.mean, lambda x: jnp.mean(x, axis=0)),
])
def test_a_reduction_over_an_empty_axis_gives_its_identity_as_in_jax(reduction, want):
    # issue 11: an empty last batch; llvm failed with "extent must be a positive int, got 0"
    @relay
    def over_rows(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, 3]:
        return reduction(x, axis=0)

    x = np.zeros((0, 3), np.float32)
    np.testing.assert_array_equal(over_rows(x), want(x))
    np.testing.assert_array_equal(over_rows.build("interp")(x), want(x))
    ones = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(over_rows(ones), want(ones))


def test_max_over_an_empty_axis_is_an_error_as_in_jax():
    @relay
    def row_max(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, 3]:
        return relay.max(x, axis=0)

    with pytest.raises(ValueError, match=r"max over an empty axis .* has no identity"):
        row_max(np.zeros((0, 3), np.float32))


# ---- locals ascribed relay.Any dims (issue 11, item 3) ---------------------------------

@relay
def ascribed_any(x: Tensor[Float, ("n", 3)]) -> Float:
    y: Tensor[Float, (relay.Any, 3)] = relay.tanh(x)
    return relay.sum(y * y)


@relay
def ascribed_any_in_a_closure(x: Tensor[Float, (2, 3)]) -> Float:
    def inner(z):
        y: Tensor[Float, (relay.Any, 3)] = z
        return relay.sum(relay.tanh(y) * relay.tanh(y))
    return inner(x)


@relay
def ascribed_any_kernel(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 3)]:
    y: Tensor[Float, (relay.Any, 3)] = relay.tanh(x)  # a kernel of static inputs, result ?
    return y * y


def test_a_kernel_whose_result_is_ascribed_any_dims_runs_on_llvm():
    x = rand(2, 3)
    np.testing.assert_allclose(relay.build(ascribed_any_kernel, target="llvm")(x),
                               jnp.tanh(x) ** 2, rtol=1e-5)


@pytest.mark.parametrize("f", [ascribed_any, ascribed_any_in_a_closure],
                         ids=lambda f: f.__name__)
def test_a_local_ascribed_any_dims_runs_and_differentiates_on_llvm(f, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", "llvm")
    x = rand(2, 3)
    expected = jax.value_and_grad(lambda v: jnp.sum(jnp.tanh(v) ** 2))(x)
    np.testing.assert_allclose(relay.build(f, target="llvm")(x), expected[0], rtol=1e-5)
    value, (dx,) = relay.grad(f)(x)
    np.testing.assert_allclose(value, expected[0], rtol=1e-5)
    np.testing.assert_allclose(dx, expected[1], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_child_forked_while_a_generic_program_builds_can_build_its_own(monkeypatch):
    """One thread builds an executor's generic native code (slowly, here) when the process
    forks: the child builds another executor's. A functools.cached_property (Python 3.11)
    held one lock over both, and the child waited forever."""
    import os
    import threading
    import time
    from relaydsl.backend.llvm import executor

    first = relay.build(poly_mlp, target="llvm").program
    second = relay.build(poly_mlp, target="llvm").program
    building, native = threading.Event(), executor.Program._native

    def slow_native(self, mod):
        if self is first:
            building.set()
            time.sleep(1.0)
        return native(self, mod)
    monkeypatch.setattr(executor.Program, "_native", slow_native)
    thread = threading.Thread(target=lambda: first._generic_native)
    thread.start()
    building.wait(30)
    pid = os.fork()
    if pid == 0:
        import signal
        signal.alarm(60)  # a hung child ends with SIGALRM
        x, w = rand(7, 16), rand(16, 4)
        ok = isinstance(second._generic_native, NativeProgram) and np.allclose(
            second._generic_native(x, w), np.tanh(x @ w) * 2.0, rtol=1e-5, atol=1e-6)
        os._exit(0 if ok else 1)
    thread.join(60)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert isinstance(first._generic_native, NativeProgram)
