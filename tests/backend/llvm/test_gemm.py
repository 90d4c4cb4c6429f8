"""The GEMM templates (templates/gemm.py via contraction.py): dense, matmul, batch_matmul.

Correctness against the ops' NumPy references (in float64) over tiny, odd, prime and
model shapes, every transpose and broadcast form, and a second blocking. Run as a
script for timings: ``python -m tests.backend.llvm.test_gemm`` prints GFLOP/s of the
templates (both cores through runtime.parallel_for), NumPy and jax.jit.
"""
from __future__ import annotations

import numpy as np
import pytest

from relaydsl import settings
from relaydsl.backend.llvm.templates.gemm import (
    PACK_COST, Blocking, GemmSpec, choose_split, split_work,
)
from tests.backend.llvm.test_templates import build, check

SIZES = [1, 2, 3, 7, 13, 16, 17, 31, 33, 64, 97]

MATMUL_2D = [  # (m, n, k)
    (1, 10, 500), (1, 1, 1), (64, 10, 3), (5, 1, 9), (15, 33, 2), (29, 31, 37),
    (97, 89, 83), (257, 130, 513), (64, 512, 784), (784, 512, 64), (3, 600, 5),
]


@pytest.mark.parametrize("blocking", [None, Blocking(vl=8, mr=6, nr=16, kc=64, mc=18, nc=48)],
                         ids=["default", "small-blocks"])
def test_matmul_2d(blocking):
    shapes = MATMUL_2D if blocking is None else MATMUL_2D[::2]
    cases = [("matmul", {}, (m, k), (k, n)) for m, n, k in shapes]
    rng = np.random.default_rng(2)
    for _ in range(3):
        m, n, k = rng.choice(SIZES, 3)
        cases.append(("matmul", {}, (int(m), int(k)), (int(k), int(n))))
    check(build(cases, blocking))


def test_dense():
    cases = [("dense", {}, (m, k), (n, k)) for m, n, k in MATMUL_2D[1::2]]
    cases += [("dense", {}, (7,), (5, 7)), ("dense", {}, (2, 3, 20), (9, 20)),
              ("dense", {"units": 10}, (64, 512), (10, 512)), ("dense", {}, (1, 784), (512, 784))]
    check(build(cases))


def test_matmul_vectors_and_broadcast_batches():
    cases = [
        ("matmul", {}, (9,), (9,)),
        ("matmul", {}, (9,), (9, 4)),
        ("matmul", {}, (6, 9), (9,)),
        ("matmul", {}, (3, 6, 9), (9,)),
        ("matmul", {}, (9,), (2, 9, 5)),
        ("matmul", {}, (3, 6, 9), (9, 5)),        # folds the batch into M
        ("matmul", {}, (6, 9), (3, 9, 5)),        # A broadcasts
        ("matmul", {}, (2, 1, 6, 9), (3, 9, 5)),  # both broadcast
        ("matmul", {}, (2, 3, 6, 9), (1, 3, 9, 5)),
        ("matmul", {}, (4, 17, 40), (4, 40, 33)),
    ]
    check(build(cases))


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_batch_matmul_transposes(ta, tb):
    attrs = {"transpose_a": ta, "transpose_b": tb}
    cases = []
    for bx, by, m, n, k in [(1, 1, 1, 1, 1), (3, 3, 5, 7, 9), (2, 1, 33, 17, 40),
                            (1, 4, 15, 31, 8), (2, 2, 64, 64, 129), (5, 5, 1, 10, 50)]:
        sa = (bx, k, m) if ta else (bx, m, k)
        sb = (by, n, k) if tb else (by, k, n)
        cases.append(("batch_matmul", attrs, sa, sb))
    check(build(cases))


def _spec(m: int, n: int, k: int, batch: tuple[int, ...] = ()) -> GemmSpec:
    return GemmSpec(m, n, k, (k, 1), (n, 1), n, batch, (m * k,) * len(batch),
                    (k * n,) * len(batch), (m * n,) * len(batch))


def test_split_counts_the_packing_each_thread_repeats():
    bl = Blocking(vl=16, mr=14, nr=32, kc=256, mc=126, nc=512)
    # 1024^3 on two threads: along M 37 row tiles (518 rows) each, all of B packed and
    # the thread's A once per 512 columns; along N 16 column tiles (512) each, all of A
    # once and half of B; work in whole tiles (74 row tiles of 14 are 1036 rows)
    along_m = 518 * 1024 * 1024 + 32 * (518 * 1024 * 2 + 1024 * 1024)
    along_n = 1036 * 512 * 1024 + 32 * (1036 * 1024 + 1024 * 512)
    assert split_work(_spec(1024, 1024, 1024), bl, "M", 2, 32) == along_m
    assert split_work(_spec(1024, 1024, 1024), bl, "N", 2, 32) == along_n
    assert choose_split(_spec(1024, 1024, 1024), bl, 2, PACK_COST) == "N"
    assert choose_split(_spec(1, 1024, 1024), bl, 2, PACK_COST) == "N"
    assert choose_split(_spec(1024, 1, 1024), bl, 2, PACK_COST) == "M"
    assert choose_split(_spec(2048, 256, 256), bl, 2, PACK_COST) == "M"
    # one thread, or a batch to share out, or no packing cost: the shape decides
    assert choose_split(_spec(1024, 1024, 1024), bl) == "M"
    assert choose_split(_spec(1024, 1024, 1024, (2,)), bl, 2, PACK_COST) == "M"
    assert choose_split(_spec(100, 300, 50), bl, 2, 0.0) == "N"
    forced = GemmSpec(1024, 1024, 1024, (1024, 1), (1024, 1), 1024, split="M")
    assert choose_split(forced, bl, 2, PACK_COST) == "M"


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_matmul_on_any_thread_count(monkeypatch, threads):
    # the split depends on the thread count: every choice computes the same product, in
    # any chunks of its units
    monkeypatch.setattr(settings, "num_threads", lambda: threads)
    for kern in build([("matmul", {}, (m, k), (k, n)) for m, n, k in
                       [(130, 129, 40), (257, 300, 17), (29, 200, 33), (200, 29, 33)]]):
        a = np.random.default_rng(threads).standard_normal(kern.sa).astype(np.float32)
        b = np.random.default_rng(7).standard_normal(kern.sb).astype(np.float32)
        ext = kern.info.parallel_extent
        splits = [(i * ext // threads, (i + 1) * ext // threads) for i in range(threads)]
        np.testing.assert_allclose(kern(a, b, splits=splits), a.astype(np.float64) @ b,
                                   rtol=1e-4, atol=1e-4 * np.sqrt(kern.sa[-1]))


def test_long_contraction():
    check(build([("matmul", {}, (3, 5000), (5000, 20)), ("dense", {}, (20, 3000), (17, 3000))]),
              rtol=1e-4)


# ---- timings (python -m tests.backend.llvm.test_gemm) ----------------------------------------


def _bench(fn, reps=30):
    import time
    fn()
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main() -> None:
    import os

    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')} "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')} "
          f"threads={settings.num_threads()}")
    shapes = [  # (label, op, attrs, shape a, shape b)
        ("gemm 512", "matmul", {}, (512, 512), (512, 512)),
        ("gemm 1024", "matmul", {}, (1024, 1024), (1024, 1024)),
        ("mlp 64x784 @ 784x512", "matmul", {}, (64, 784), (784, 512)),
        ("mlp dense 64x784 . 512x784^T", "dense", {}, (64, 784), (512, 784)),
        ("mlp 64x512 @ 512x512", "matmul", {}, (64, 512), (512, 512)),
        ("mlp dense 64x512 . 10x512^T", "dense", {}, (64, 512), (10, 512)),
        ("bwd 784x64 @ 64x512", "matmul", {}, (784, 64), (64, 512)),
        ("bwd x^T dy (batch_matmul ta)", "batch_matmul", {"transpose_a": True},
         (1, 64, 784), (1, 64, 512)),
        ("bwd 64x512 @ 512x784", "matmul", {}, (64, 512), (512, 784)),
        ("lenet fc 1x500 . 10x500^T", "dense", {}, (1, 500), (10, 500)),
    ]
    kernels = build([(op, attrs, sa, sb) for _, op, attrs, sa, sb in shapes])
    rng = np.random.default_rng(0)
    print(f"{'shape':34} {'ours':>8} {'numpy':>8} {'jax':>8}  GFLOP/s (ours 1 thread)")
    for (label, op, _, sa, sb), kern in zip(shapes, kernels):
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float32)
        _time_row(label, op, kern, a, b)


def _time_row(label: str, op: str, kern, a: np.ndarray, b: np.ndarray) -> None:
    """One row of the table: our kernel (all threads, and one), NumPy's and JAX's product."""
    import jax
    import jax.numpy as jnp

    from relaydsl.backend.llvm import runtime

    out = np.empty(kern.out_shape, np.float32)
    args = (out.ctypes.data, a.ctypes.data, b.ctypes.data)
    ext = kern.info.parallel_extent

    def ours():
        runtime.parallel_for(lambda s, e: kern.fn(*args, s, e), ext)

    def ours1():
        kern.fn(*args, 0, ext)

    if op == "dense":
        npf = lambda: np.matmul(a, b.T)  # noqa: E731
        jf = jax.jit(lambda x, y: x @ y.T)
    elif op == "batch_matmul":
        npf = lambda: np.matmul(a.transpose(0, 2, 1), b)  # noqa: E731
        jf = jax.jit(lambda x, y: jnp.matmul(x.transpose(0, 2, 1), y))
    else:
        npf = lambda: np.matmul(a, b)  # noqa: E731
        jf = jax.jit(jnp.matmul)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    jaxf = lambda: jf(ja, jb).block_until_ready()  # noqa: E731
    best = {"ours": [], "numpy": [], "jax": [], "ours1": []}
    for _ in range(3):  # interleaved rounds, medians of each, best round
        for key, f in (("ours", ours), ("numpy", npf), ("jax", jaxf), ("ours1", ours1)):
            best[key].append(_bench(f))
    fl = kern.info.flops / 1e9
    t = {k: min(v) for k, v in best.items()}
    print(f"{label:34} {fl / t['ours']:8.1f} {fl / t['numpy']:8.1f} {fl / t['jax']:8.1f}  "
          f"({fl / t['ours1']:.1f})   {t['ours'] * 1e3:.3f} ms vs jax {t['jax'] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
