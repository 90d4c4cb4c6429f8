"""Fused groups written by hand as primitive functions, against JAX; safety of the emitted code;
vectorisation of elementwise kernels (and the speed of the PERFORMANCE.md chain, printed)."""
from __future__ import annotations

import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.backend.llvm import codegen, jit
from relaydsl.backend.llvm.kernel import compile_primitives
from relaydsl.ir import Let, Tuple, TupleGetItem, Var
from relaydsl.ir.expr import const
from tests.backend.llvm.helpers import call, primitive, randn

jax.config.update("jax_enable_x64", True)
F = "float32"


def _groups():
    """(name, function, inputs, jax truth, rtol)."""
    x34, y4 = randn(3, 4), randn(4, seed=1)
    big = randn(64, 300, seed=2)
    data, w, bias = randn(8, 16), randn(10, 16, seed=3), randn(10, seed=4)
    img, ker, cb = randn(2, 3, 9, 9), randn(4, 3, 3, 3, seed=5), randn(4, seed=6)
    g = []

    def add(name, types, body, inputs, truth, rtol=1e-5):
        g.append((name, primitive(types, body), inputs, truth, rtol))

    add("chain", [((3, 4), F)],
        lambda x: call("relu", call("add", call("multiply", call("exp", x), const(2.0)),
                                    const(-1.0))),
        [x34], lambda x: jnp.maximum(jnp.exp(x) * 2 - 1, 0))
    add("diamond", [((3, 4), F), ((4,), F)],
        lambda x, y: (lambda a: call("add", a, call("multiply", a, a)))(
            call("tanh", call("add", x, y))),
        [x34, y4], lambda x, y: jnp.tanh(x + y) + jnp.tanh(x + y) ** 2)
    add("dense+bias_add+relu", [((8, 16), F), ((10, 16), F), ((10,), F)],
        lambda d, w_, b: call("relu", call("bias_add", call("dense", d, w_), b, axis=-1)),
        [data, w, bias], lambda d, w_, b: jnp.maximum(d @ w_.T + b, 0), 1e-4)
    add("conv2d+bias_add+tanh", [((2, 3, 9, 9), F), ((4, 3, 3, 3), F), ((4,), F)],
        lambda x, k, b: call("tanh", call("bias_add", call("conv2d", x, k, padding=1), b)),
        [img, ker, cb],
        lambda x, k, b: jnp.tanh(jax.lax.conv_general_dilated(
            x, k, (1, 1), ((1, 1), (1, 1)), precision=jax.lax.Precision.HIGHEST)
            + b[None, :, None, None]), 1e-4)
    add("sum of elementwise, last axis", [((64, 300), F)],
        lambda x: call("sum", call("multiply", call("exp", x), x), axis=1),
        [big], lambda x: jnp.sum(jnp.exp(x) * x, axis=1), 1e-4)
    add("mean over axis 0 (row reduction)", [((64, 300), F)],
        lambda x: call("mean", call("multiply", x, x), axis=0),
        [big], lambda x: jnp.mean(x * x, axis=0), 1e-4)
    add("max over axis 0 with NaN", [((5, 7), F)],
        lambda x: call("max", x, axis=0),
        [np.where(np.arange(35).reshape(5, 7) == 9, np.nan, randn(5, 7)).astype(F)],
        lambda x: jnp.max(x, axis=0))
    add("softmax then scale", [((6, 33), F)],
        lambda x: call("multiply", call("softmax", x), const(3.0)),
        [randn(6, 33)], lambda x: jax.nn.softmax(x) * 3)
    add("matmul (row order)", [((20, 30), F), ((30, 40), F)],
        lambda a, b: call("matmul", a, b), [randn(20, 30), randn(30, 40, seed=7)],
        lambda a, b: jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST), 1e-4)
    add("multi-output tuple", [((3, 4), F)],
        lambda x: Tuple([call("add", x, const(1.0)), call("exp", x), call("sum", x)]),
        [x34], lambda x: (x + 1, jnp.exp(x), jnp.sum(x)))
    add("shared subexpression in two outputs", [((3, 4), F)],
        lambda x: (lambda s: Tuple([s, call("multiply", s, s), s]))(call("sigmoid", x)),
        [x34], lambda x: (jax.nn.sigmoid(x), jax.nn.sigmoid(x) ** 2, jax.nn.sigmoid(x)))
    add("tuple projection", [((3, 4), F)],
        lambda x: TupleGetItem(Tuple([call("negative", x), call("exp", x)]), 1),
        [x34], lambda x: jnp.exp(x))
    add("let-bound body", [((3, 4), F)],
        lambda x: (lambda v: Let(v, call("exp", x), call("add", v, v)))(Var("v")),
        [x34], lambda x: 2 * jnp.exp(x))
    add("identity returns a copy", [((3, 4), F)], lambda x: x, [x34], lambda x: x)
    add("constants: array and immediate", [((3, 4), F)],
        lambda x: call("add", call("multiply", x, const(np.arange(4, dtype=F))), const(0.5)),
        [x34], lambda x: x * jnp.arange(4, dtype=F) + 0.5)
    add("0-d tensors", [((), F), ((), F)],
        lambda a, b: call("sum", call("multiply", call("add", a, b), a)),
        [np.array(1.5, F), np.array(-0.25, F)], lambda a, b: (a + b) * a)
    add("empty output", [((3, 4), F)],
        lambda x: Tuple([call("strided_slice", x, begin=(3,), end=(1,), axes=(1,)),
                         call("exp", x)]),
        [x34], lambda x: (x[:, 3:1], jnp.exp(x)))
    add("int floor division and modulo", [((6,), "int32"), ((6,), "int32")],
        lambda a, b: Tuple([call("divide", a, b), call("subtract", a, call(
            "multiply", call("divide", a, b), b))]),
        [np.array([7, -7, 7, -7, 0, 5], "int32"), np.array([2, 2, -2, -2, 3, 1], "int32")],
        lambda a, b: (a // b, a % b))
    add("casts float64 -> int8 -> float16", [((5,), "float64")],
        lambda x: call("cast", call("cast", x, dtype="int8"), dtype="float16"),
        [np.array([-3.7, 0.2, 100.9, 2.5, -0.5])],
        lambda x: x.astype(jnp.int8).astype(jnp.float16))
    add("bool logic and where", [((3, 4), F), ((3, 4), F)],
        lambda x, y: call("where", call("logical_and", call("greater", x, y),
                                        call("logical_not", call("less", x, const(-1.0)))),
                          x, y),
        [x34, randn(3, 4, seed=9)], lambda x, y: jnp.where((x > y) & ~(x < -1), x, y))
    add("uint8 arithmetic wraps", [((4,), "uint8"), ((4,), "uint8")],
        lambda a, b: call("add", call("multiply", a, b), a),
        [np.array([200, 3, 255, 0], "uint8"), np.array([2, 5, 255, 7], "uint8")],
        lambda a, b: a * b + a)
    add("float16 chain", [((7,), "float16")],
        lambda x: call("tanh", call("add", x, x)), [randn(7, dtype="float16")],
        lambda x: jnp.tanh(x + x), 2e-3)
    # rows of 7 (run rows x columns as one loop): reads by both axes, by the columns only,
    # by the rows only, and a transposed read that keeps j / 7 and j % 7
    add("short odd rows, broadcast and transposed reads",
        [((2, 3, 5, 7), F), ((3, 1, 7), F), ((5, 1), F), ((2, 3, 7, 5), F)],
        lambda x, y, z, t: call("relu", call("add", call("add", call("multiply", x, y), z),
                                                 call("transpose", t, axes=(0, 1, 3, 2)))),
        [randn(2, 3, 5, 7), randn(3, 1, 7, seed=10), randn(5, 1, seed=11),
         randn(2, 3, 7, 5, seed=12)],
        lambda x, y, z, t: jnp.maximum(x * y + z + jnp.swapaxes(t, 2, 3), 0))
    return g


GROUPS = _groups()


@pytest.fixture(scope="module")
def group_kernels():
    return compile_primitives([g[1] for g in GROUPS])


@pytest.mark.parametrize("index", range(len(GROUPS)), ids=[g[0] for g in GROUPS])
def test_fused_group_matches_jax(index, group_kernels):
    name, _, inputs, truth, rtol = GROUPS[index]
    got = group_kernels[index](*inputs)
    want = truth(*[jnp.asarray(x) for x in inputs])
    got_t = got if isinstance(got, tuple) else (got,)
    want_t = want if isinstance(want, tuple) else (want,)
    assert len(got_t) == len(want_t)
    for a, e in zip(got_t, want_t):
        e = np.asarray(e)
        assert a.shape == e.shape and a.dtype == e.dtype, (name, a.dtype, e.dtype)
        np.testing.assert_allclose(a, e, rtol=rtol, atol=1e-6, err_msg=name)


# ---- safety ------------------------------------------------------------------------------

def test_take_out_of_range_indices_match_numpy_and_do_not_crash():
    x = randn(5, 3)
    idx = np.array([[-10**9, -1, 0], [4, 5, 10**9]], "int64")
    clip = primitive([((5, 3), F), ((2, 3), "int64")], lambda a, i: call("take", a, i, axis=0))
    wrap = primitive([((5, 3), F), ((2, 3), "int64")],
                     lambda a, i: call("take", a, i, axis=0, mode="wrap"))
    flat = primitive([((5, 3), F), ((2, 3), "int64")], lambda a, i: call("take", a, i))
    k1, k2, k3 = compile_primitives([clip, wrap, flat])
    np.testing.assert_array_equal(k1(x, idx), np.take(x, idx, axis=0, mode="clip"))
    np.testing.assert_array_equal(k2(x, idx), np.take(x, idx, axis=0, mode="wrap"))
    np.testing.assert_array_equal(k3(x, idx), np.take(x, idx, mode="clip"))


def test_integer_division_by_zero_and_overflow_do_not_trap():
    a = np.array([5, -5, 0, -2**31, -2**31, 7], "int32")
    b = np.array([0, 0, 0, -1, 0, 3], "int32")
    fn = primitive([((6,), "int32"), ((6,), "int32")],
                   lambda x, y: Tuple([call("divide", x, y),
                                       call("subtract", x, call("multiply",
                                                                call("divide", x, y), y))]))
    (k,) = compile_primitives([fn])
    q, _ = k(a, b)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(q, np.floor_divide(a, b))
    assert q[3] == -2**31 and q[0] == 0


def test_padded_reads_stay_in_bounds_for_large_padding():
    x = randn(1, 1, 2, 2)
    fn = primitive([((1, 1, 2, 2), F)], lambda a: call("pad", a, pad_width=(0, 0, 0, 0, 50, 50,
                                                                            50, 50)))
    (k,) = compile_primitives([fn])
    np.testing.assert_array_equal(k(x), np.pad(x, ((0, 0), (0, 0), (50, 50), (50, 50))))


def test_nan_semantics_of_maximum_minimum_and_casts_follow_jax():
    x = np.array([np.nan, 1.0, -np.inf, np.inf, 3e9, -3e9], F)
    y = np.array([0.0, np.nan, 1.0, 2.0, 0.0, 0.0], F)
    fn = primitive([((6,), F), ((6,), F)],
                   lambda a, b: Tuple([call("maximum", a, b), call("minimum", a, b),
                                       call("cast", a, dtype="int32")]))
    (k,) = compile_primitives([fn])
    mx, mn, ci = k(x, y)
    np.testing.assert_array_equal(mx, np.maximum(x, y))
    np.testing.assert_array_equal(mn, np.minimum(x, y))
    np.testing.assert_array_equal(ci, np.asarray(jnp.asarray(x).astype(jnp.int32)))


def test_vectorised_float_to_int_casts_saturate_as_jax():
    """Whole vectors of the special values (the cast is written out, not llvm.fptosi.sat).
    (A narrower integer is the int32 saturation truncated, which JAX does not do.)"""
    special = [np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5, -2.5, 2147483520.0, -2147483648.0,
               1e19, -1e19, 127.9, -128.9, 0.0, -0.0, 7.0]
    for src, dst in [("float32", "int32"), ("float64", "int64"),
                     ("float64", "int32")]:
        x = np.array(special * 8, src)
        (k,) = compile_primitives([primitive([(x.shape, src)],
                                             lambda a, dst=dst: call("cast", a, dtype=dst))])
        np.testing.assert_array_equal(k(x), np.asarray(jnp.asarray(x).astype(dst)),
                                      err_msg=f"{src} -> {dst}")


# ---- vectorisation and speed -----------------------------------------------------------------

def _chain(n):
    return primitive([((n,), F), ((), F), ((), F)],
                     lambda x, a, b: call("multiply", call("tanh", call("add", call(
                         "multiply", a, x), b)), call("sigmoid", x)))


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads the CPU's flags there")
def test_vectors_are_as_wide_as_the_cpu_s_widest_registers(monkeypatch):
    flags = _cpu_flags()
    widest = 512 if "avx512f" in flags else 256 if "avx" in flags else 128
    monkeypatch.delenv("RELAYDSL_VECTOR_WIDTH", raising=False)
    assert jit.register_bits(jit.host_target().features) == widest
    host = jit.host_target()
    assert jit.HostTarget.of(host.triple, host.cpu, host.features).vector_bits == widest


def test_elementwise_kernel_is_vectorised(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    jit.runtime_threads()  # the runtime loaded before: only the kernel's module is seen
    seen = []
    monkeypatch.setattr(jit, "inspect_hook", lambda ir_text, asm: seen.append((ir_text, asm)))
    compile_primitives([_chain(1000)])
    (ir_text, asm), = seen
    vec = {512: "zmm", 256: "ymm", 128: "xmm"}[jit.host_target().vector_bits]
    assert "x float>" in ir_text, "the optimised IR has no float vectors"
    assert vec in asm
    assert not any(f in asm for f in ("tanhf", "expf", "logf"))  # no scalar libm calls


def _kernel_ir(tmp_path, monkeypatch, fn) -> str:
    """The LLVM IR of `fn`'s kernel as the backend hands it to LLVM (`fn` must be new to
    this process: a kernel made before is not compiled again)."""
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    jit.runtime_threads()
    texts = []
    load_or_compile = jit.load_or_compile
    monkeypatch.setattr(jit, "load_or_compile", lambda key, names, build_ir, **k: (
        texts.append(build_ir()), load_or_compile(key, names, build_ir, **k))[1])
    compile_primitives([fn])
    (text,) = texts
    return text


def test_short_odd_rows_run_as_one_loop(tmp_path, monkeypatch):
    """An elementwise stage over 28 x 28 images loops over their 784 pixels (a whole number
    of vectors), its reads at offset j, no scalar remainder per row."""
    text = _kernel_ir(tmp_path, monkeypatch, primitive(
        [((3, 4, 28, 28), "int32"), ((1, 4, 1, 1), "int32")],
        lambda x, b: call("cast", call("relu", call("add", x, b)), dtype="int8")))
    assert re.search(r'icmp slt i64 %"i2_i3", 784', text)
    x = np.arange(3 * 4 * 28 * 28, dtype=np.int32).reshape(3, 4, 28, 28) - 4000
    b = np.array([-5, 0, 7, 300], np.int32).reshape(1, 4, 1, 1)
    (k,) = compile_primitives([primitive([(x.shape, "int32"), (b.shape, "int32")],
                                         lambda x_, b_: call("relu", call("add", x_, b_)))])
    np.testing.assert_array_equal(k(x, b), np.asarray(jnp.maximum(x + b, 0)))


# Both vendors' AVX-512 server CPUs, and an AVX2 one. LLVM's own tuning prefers 256-bit vectors
# on the Intel ones; the backend must not inherit that default on any of them.
X86_CPUS = {"znver4": 512, "znver5": 512, "sapphirerapids": 512, "emeraldrapids": 512,
            "icelake-server": 512, "haswell": 256}
AVX512 = "+avx,+avx2,+fma,+avx512f,+avx512dq,+avx512bw,+avx512vl"


@pytest.mark.parametrize("cpu", sorted(X86_CPUS))
def test_the_chain_uses_the_widest_vectors_on_every_x86_cpu(tmp_path, monkeypatch, cpu):
    text = _kernel_ir(tmp_path, monkeypatch, _chain(1000 + sorted(X86_CPUS).index(cpu) + 1))
    features = AVX512 if X86_CPUS[cpu] == 512 else "+avx,+avx2,+fma"
    asm = jit.assembly(text, jit.HostTarget.of("x86_64-unknown-linux-gnu", cpu, features))
    if X86_CPUS[cpu] == 512:  # the main loop's vectors are 512-bit (a constant remainder
        # of fewer than 16 elements may take 256-bit ones)
        assert "zmm" in asm and not any("ymm" in x for x in _hottest_loop(asm))
    else:
        assert "ymm" in asm and "zmm" not in asm
    narrower = jit.HostTarget.of("x86_64-unknown-linux-gnu", cpu, features, vector_bits=256)
    assert "zmm" not in jit.assembly(text, narrower)


def _hottest_loop(asm: str) -> list[str]:
    """The instructions of the loop made most of zmm instructions (from its label down to the
    branch back to it): the vectorised main loop, not a remainder loop of scalar code."""
    lines = [line.split("#")[0].rstrip() for line in asm.splitlines()]
    labels = {line[:-1]: i for i, line in enumerate(lines) if re.fullmatch(r"\.?[\w.$]+:", line)}
    loops = []
    for i, line in enumerate(lines):
        m = re.fullmatch(r"\s+j\w+\s+(\.?[\w.$]+)", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append([x.strip() for x in lines[labels[m.group(1)] + 1:i + 1]
                          if x.strip() and not x.strip().startswith(".") and not x.endswith(":")])
    return max(loops, key=lambda body: sum("zmm" in x for x in body) / len(body))


def test_the_chain_takes_few_instructions_per_vector_on_avx512(tmp_path, monkeypatch):
    # tanh(a x + b) sigmoid(x) is bound by its instructions (backend/llvm/intrinsics.py): 63
    # per 16 elements before the shorter exp, tanh and sigmoid, 47 after (XLA: 52 per 8).
    # Compiled for an AVX-512 CPU whatever the host: the count does not depend on it.
    text = _kernel_ir(tmp_path, monkeypatch, _chain(1000 + len(X86_CPUS) + 1))
    asm = jit.assembly(text, jit.HostTarget.of("x86_64-unknown-linux-gnu", "sapphirerapids",
                                               AVX512))
    body = _hottest_loop(asm)
    assert sum("zmm" in x for x in body) > 30 and sum("vdivps" in x for x in body) == 2
    assert len(body) <= 49, "\n".join(body)


def test_the_vector_width_is_part_of_the_cache_key():
    target = jit.HostTarget.of("x86_64-unknown-linux-gnu", "sapphirerapids", AVX512)
    narrower = jit.HostTarget.of("x86_64-unknown-linux-gnu", "sapphirerapids", AVX512, 256)
    assert (target.vector_bits, narrower.vector_bits) == (512, 256)
    assert target.key != narrower.key


def test_speed_of_the_performance_chain_is_printed():
    n = 1 << 20
    (k,) = compile_primitives([_chain(n)])
    x = randn(n)
    a, b = np.array(0.7, F), np.array(0.1, F)
    out = np.empty(n, F)
    run = k.bind([x, a, b], [out])
    jf = jax.jit(lambda x, a, b: jnp.tanh(a * x + b) * jax.nn.sigmoid(x))
    xj = jnp.asarray(x)
    jf(xj, a, b).block_until_ready()
    ours, theirs = [], []
    for _ in range(30):  # interleaved, medians
        t = time.perf_counter()
        run()
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        jf(xj, a, b).block_until_ready()
        theirs.append(time.perf_counter() - t)
    o, j = np.median(ours) * 1e3, np.median(theirs) * 1e3
    print(f"\ntanh(a*x+b)*sigmoid(x), 2^20 float32: llvm {o:.3f} ms, jax.jit {j:.3f} ms "
          f"({o / j:.2f}x)")
    y = (np.float32(0.7) * x + np.float32(0.1)).astype(np.float64)
    ref = np.tanh(y) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_a_conv2d_and_its_epilogue_run_image_by_image_as_jax(dtype, monkeypatch):
    """conv2d, bias, relu (and for int8 a requantization to int8, as realize writes it): the
    kernel chains the template and the epilogue per image (codegen._chain); values as JAX's."""
    chained = []
    monkeypatch.setattr(codegen, "_chain", lambda *a, chain=codegen._chain: chained.append(a)
                        or chain(*a))
    monkeypatch.setattr(jit, "source_fingerprint", lambda: "chain-test")  # emitted, not cached
    rng = np.random.default_rng(0)
    if dtype == "int8":
        x = rng.integers(-127, 128, (9, 3, 7, 7)).astype(np.int8)
        w = rng.integers(-127, 128, (5, 3, 3, 3)).astype(np.int8)
        b = rng.integers(-900, 900, (1, 5, 1, 1)).astype(np.int32)
    else:
        x, w, b = randn(9, 3, 7, 7), randn(5, 3, 3, 3, seed=1), randn(1, 5, 1, 1, seed=2)

    def body(px, pw, pb):
        wide = {"out_dtype": "int32"} if dtype == "int8" else {}
        acc = call("relu", call("add", call("conv2d", px, pw, padding=1, **wide), pb))
        if dtype == "float32":
            return acc
        scaled = call("multiply", call("cast", acc, dtype="float32"), const(np.float32(0.01)))
        return call("cast", call("clip", call("round", scaled), a_min=-127.0, a_max=127.0),
                    dtype="int8")

    (k,) = compile_primitives([primitive([(a.shape, str(a.dtype)) for a in (x, w, b)], body)])
    assert [images for *_, images in chained] == [9]
    acc = jax.lax.conv_general_dilated(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32),
                                       (1, 1), [(1, 1), (1, 1)])  # exact: small integer sums
    acc = jnp.maximum(acc + b, 0)
    if dtype == "float32":
        np.testing.assert_allclose(k(x, w, b), acc, rtol=1e-5, atol=1e-5)
    else:
        want = jnp.clip(jnp.round(acc * np.float32(0.01)), -127, 127).astype(jnp.int8)
        np.testing.assert_array_equal(k(x, w, b), np.asarray(want))


def test_a_small_pooling_window_is_unrolled_and_its_output_rows_vectorised(tmp_path, monkeypatch):
    """A 2x2 max pool's window (four steps) is written out, so the loop over the output's
    columns is the innermost one and LLVM vectorises it (a loop of two steps would not be)."""
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    jit.runtime_threads()
    seen = []
    monkeypatch.setattr(jit, "inspect_hook", lambda ir_text, asm: seen.append(ir_text))
    shape = (3, 5, 24, 26)  # a kernel no other test compiles (seen once per process)
    (k,) = compile_primitives([primitive(
        [(shape, "float32")], lambda x: call("max_pool2d", x, pool_size=(2, 2), strides=(2, 2)))])
    (ir_text,) = seen
    assert re.search(r"@llvm\.maximum\.v\d+f32", ir_text), "the window's maximum is scalar"
    x = randn(*shape)
    want = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    np.testing.assert_array_equal(k(x), np.asarray(want))


def test_a_small_reduction_of_an_intrinsic_stays_a_loop(tmp_path, monkeypatch):
    """Written out, a 10-class softmax's sum of exp was ten copies of exp's ~30
    instructions: 11 ms more of LLVM in an MLP's gradients for no faster code. A reduction
    whose source calls an intrinsic is emitted as a loop, its IR the same size for 3 steps
    as for 12."""
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    jit.runtime_threads()
    compiled = []
    compile_object = jit._compile_object
    monkeypatch.setattr(jit, "_compile_object",
                        lambda ir_text, *a, **k: compiled.append(ir_text) or
                        compile_object(ir_text, *a, **k))
    sizes = {}
    for classes in (3, 12):
        shape = (7, classes)  # kernels no other test compiles
        (k,) = compile_primitives([primitive(
            [(shape, "float32")], lambda x: call("sum", call("exp", x), axis=[1]))])
        sizes[classes] = compiled[-1].count("\n")
        x = randn(*shape)
        np.testing.assert_allclose(k(x), np.asarray(jnp.exp(x).sum(axis=1)), rtol=1e-5)
    assert sizes[12] <= sizes[3] + 10, sizes
