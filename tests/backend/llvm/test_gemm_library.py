"""backend/llvm/templates/gemm_library.py: the GEMM parts every shape shares, compiled once.

Each test uses a micro-tile no other test uses, so that it sees the library's modules
being compiled (or not) in this process whatever ran before.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.templates import gemm_library
from relaydsl.backend.llvm.templates.gemm import Blocking, GemmSpec, fit_blocking, reads_a_in_place
from relaydsl.backend.llvm.templates.gemm_library import MicroTile
from tests.backend.llvm.test_templates import build, check, reference

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _compiled() -> int:
    return jit.stats["compiled"]


def test_two_shapes_share_one_compiled_library(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    bl = Blocking(vl=8, mr=5, nr=24, kc=32, mc=15, nc=48)
    before = _compiled()
    first = build([("matmul", {}, (37, 29), (29, 70))], bl)
    # the kernel module, the tile's micro-kernel and (unless another test loaded them) the core
    assert before + 2 <= _compiled() <= before + 4
    before = _compiled()
    second = build([("dense", {}, (23, 100), (61, 100)),
                    ("batch_matmul", {"transpose_a": True}, (2, 40, 9), (2, 40, 50))], bl)
    assert _compiled() == before + 1  # only the new shapes' module: drivers over the library
    check(first + second)


def test_one_micro_kernel_serves_packed_and_in_place_a(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    bl = Blocking(vl=8, mr=3, nr=8, kc=16, mc=9, nc=32)
    tile = MicroTile(8, 3, 8)
    wide = GemmSpec(20, 40, 17, (17, 1), (40, 1), 40)
    narrow = GemmSpec(20, 9, 17, (17, 1), (9, 1), 9)
    assert not reads_a_in_place(wide, fit_blocking(bl, wide))
    packed = build([("matmul", {}, (20, 17), (17, 40))], bl)  # 5 column tiles: A is packed
    assert tile.symbol("ukernel") in gemm_library._LOADED
    before = _compiled()
    assert reads_a_in_place(narrow, fit_blocking(bl, narrow))
    in_place = build([("matmul", {}, (20, 17), (17, 9)), ("dense", {}, (31, 70), (5, 70))], bl)
    assert _compiled() == before + 1  # only the shapes' module: the micro-kernel is shared
    check(packed + in_place)


def test_blocks_of_equal_tile_counts_cover_ragged_ranges():
    # MC of 3 row tiles over 10 (the last one row) splits them 2+3+2+3; NC = 60 holds two
    # 24-wide column tiles, so 6 column tiles (the last one column) run as 3 blocks of 2;
    # a chunk of units starts and ends mid-range
    bl = Blocking(vl=8, mr=4, nr=24, kc=16, mc=14, nc=60)
    kernels = build([("matmul", {}, (37, 23), (23, 121)), ("dense", {}, (121, 40), (37, 40))], bl)
    check(kernels)
    rng = np.random.default_rng(1)
    for kern in kernels:
        a = rng.standard_normal(kern.sa).astype(np.float32)
        b = rng.standard_normal(kern.sb).astype(np.float32)
        extent = kern.info.parallel_extent
        got = kern(a, b, splits=[(0, 3), (3, extent - 1), (extent - 1, extent)])
        np.testing.assert_allclose(got, reference(kern.op, kern.attrs, a, b), rtol=1e-4,
                                   atol=1e-4)


def test_micro_tile_heights_come_from_a_short_ladder():
    bl = Blocking()  # MR = 14
    heights = {fit_blocking(bl, GemmSpec(m=m, n=64, k=8, a_strides=(8, 1), b_strides=(64, 1),
                                         ldc=64)).mr for m in range(1, 40)}
    assert heights == {1, 2, 4, 8, 14}
    assert fit_blocking(bl, GemmSpec(m=10, n=9, k=3, a_strides=(3, 1), b_strides=(9, 1),
                                     ldc=9)) == Blocking(16, 14, 16, 256, 126, 512)


@pytest.mark.parametrize("vl", [8, 16])
@pytest.mark.parametrize("strides", ["rows", "columns", "neither"])
def test_packer_any_strides_and_widths(strides, vl):
    """The shared packer against a NumPy model, for widths below, at and above VL (16 lanes:
    AVX-512's transposing permutes)."""
    import ctypes

    if vl == 16 and "+avx512f" not in jit.host_target().features:
        pytest.skip("16-lane vectors need AVX-512")
    gemm_library.load(gemm_library.core_parts(vl))
    name = gemm_library.core_symbol(vl, "pack")
    fn = gemm_library.library(name).function(name, None,
                                             [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 7)
    rng = np.random.default_rng(0)
    nx_total, k_total = 45, 37
    src = rng.standard_normal((nx_total, k_total)).astype(np.float32)  # (x, k), row-major
    s_x, s_k = {"rows": (k_total, 1), "columns": (1, nx_total),
                "neither": (4 * k_total, 2)}[strides]
    if strides == "columns":
        src = np.ascontiguousarray(src.T)  # (k, x): x runs along memory
        view = src.T
    elif strides == "neither":
        src = np.repeat(np.repeat(src, 2, axis=0), 2, axis=1)  # every other element
        view = src[::2, ::2]
    else:
        view = src
    for width in (3, vl, 14, 2 * vl):
        for x0, nx, k0, kc in ((0, 45, 0, 37), (5, 17, 3, 9), (2, width, 20, 17)):
            panels = -(-nx // width)
            dst = np.full((panels, kc, width), np.nan, np.float32)
            fn(dst.ctypes.data, src.ctypes.data, x0, nx, k0, kc, s_x, s_k, width)
            want = np.zeros((panels * width, kc), np.float32)
            want[:nx] = view[x0:x0 + nx, k0:k0 + kc]
            want = want.reshape(panels, width, kc).transpose(0, 2, 1)
            np.testing.assert_array_equal(dst, want, err_msg=f"{strides} {width} {x0, nx, k0}")


def test_fresh_process_loads_the_library_from_disk(tmp_path):
    script = (
        "import numpy as np\n"
        "from relaydsl.backend.llvm import jit\n"
        "from relaydsl.backend.llvm.templates.gemm import Blocking\n"
        "from tests.backend.llvm.test_templates import build, check, reference\n"
        "bl = Blocking(vl=8, mr=7, nr=16, kc=64, mc=21, nc=64)\n"
        "check(build([('matmul', {}, (30, 20), (20, 40)),\n"
        "             ('matmul', {}, (9, 20), (20, 20))], bl))\n"
        "print(jit.stats['compiled'], jit.stats['disk_hits'])\n"
    )
    env = {**os.environ, "RELAYDSL_CACHE_DIR": str(tmp_path)}

    def run() -> list[str]:
        out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    compiled, hits = run()
    # the test module (never cached), pack, block and the micro-kernel
    assert (compiled, hits) == ("4", "0")
    assert run() == ["1", "3"]  # the library comes from the disk


@pytest.mark.parametrize("cpu", ["znver4", "znver5", "sapphirerapids", "emeraldrapids",
                                 "icelake-server"])
def test_the_16_lane_library_compiles_for_both_vendors_avx512_cpus(cpu):
    """The packer's transposing permutes (vpermi2ps through an index table) and the
    micro-kernel's FMAs, as LLVM makes them for each vendor's AVX-512 server CPUs."""
    target = jit.HostTarget.of("x86_64-unknown-linux-gnu", cpu,
                               "+avx,+avx2,+fma,+avx512f,+avx512dq,+avx512bw,+avx512vl")
    pack = jit.assembly(gemm_library.library_ir(gemm_library.core_parts(16)[0]), target)
    assert re.search(r"vperm[it]2ps\s+%zmm", pack), "the 16x16 transpose is not vpermi2ps"
    kernel = jit.assembly(gemm_library.library_ir(gemm_library.ukernel_part(
        MicroTile(16, 14, 32))), target)
    assert len(re.findall(r"vfmadd\d+ps\s+[^\n]*%zmm", kernel)) >= 28  # the 14 x 32 tile
