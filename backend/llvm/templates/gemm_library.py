"""The shape-independent half of the GEMM: compiled once per vector width and micro-tile.

Everything here takes sizes and strides at run time, so every GEMM shape shares it; the
shape-specific driver (gemm.py) only walks the batch and the parallel units. Two kinds
of LLVM module, each compiled (or read from the disk cache) on first use in a process:

* the core, per vector width VL: ``@relaydsl_gemm_v<VL>_pack`` and ``@..._block``;
* the micro-kernel of each tile (VL, MR, NR): ``@relaydsl_gemm_v<VL>m<MR>n<NR>_ukernel``,
  reading A through run-time strides: a packed micro-panel (``a_rs = 1``, ``a_ks = MR``)
  or A where it lies.

The block function is the BLIS loop nest (C(i, j) at C[i*ldc + j], A(i, p) at
A[i*a_rs + p*a_ks], B(p, j) at B[p*b_ks + j*b_xs]):

    void @relaydsl_gemm_v16_block(A, B, C, r0, r1, c0, c1, Ap, Bp, k, ldc, a_rs, a_ks,
                                  b_ks, b_xs, kc, mc, nc, mr, nr, pack_b, ukernel, a_in_place)
      for jc in [c0, c1) in blocks of <= nc:    # B panel, kept in L2
        for pc in [0, k) step kc:               # one rank-kc update
          pack_b(Bp, B, jc, nc', pc, kc', b_xs, b_ks, nr)  # NR-wide micro-panels, zero padded
          for ic in [r0, r1) in blocks of <= mc:
            pack(Ap, A, ic, mc', pc, kc', a_rs, a_ks, mr)  # MR-tall micro-panels, zero padded
            for ir in mc' step MR:              # A micro-panel, kept in L1
              for jr in nc' step NR:            # B micro-panels streamed from L2
                ukernel: C[MR x NR] (+)= Ap[ir] . Bp[jr]   (accumulators in registers)

``pack_b`` and ``ukernel`` are function pointers (conv2d passes its im2col packer as
``pack_b``); a call moves a whole panel or micro-tile, so calling through a pointer costs
nothing measurable. The MC and NC blocks hold equal numbers of micro-tiles
(not steps of MC leaving a last block of one tile). Row tiles outside, column tiles
inside: consecutive calls update C tiles side by side in the same rows, which the
hardware prefetchers follow; with the column tiles outside (BLIS's order, a B micro-panel
kept in L1), each call's C rows were ldc apart from the last call's, and GEMM 1024 ran
3-5% slower on one core of an Intel Xeon (rocketlake features, AVX-512; the loop nest
driven from C, thread CPU time, three interleaved runs).

The micro-kernel keeps MR x NR/VL vector accumulators
(``<VL x float>``) in registers and issues ``llvm.fma`` on a broadcast element of A and a
vector of B per k; it prefetches its C tile first, so that the tile's misses overlap the
k loop (C was last touched a whole kc step ago), and B's micro-panel ``B_PREFETCH`` k steps
ahead of its loads, as it streams from L2. Edge tiles (M, N not multiples of MR, NR)
run the same kernel on
zero-padded panels and write back only the valid part with masked stores, so no load or
store ever leaves an operand. With ``a_in_place``, full MR-row tiles read A in place and
only a partial last row tile is packed: with few column tiles an A element feeds few
FMAs, and packing it would cost more than it saves.

One micro-kernel serves both: a packed panel is A with strides (1, MR). Its k loop then
computes the rows' addresses (12 more integer instructions beside the 28 FMAs of a 14x32
tile), and runs as fast as a kernel with the packed strides built in: GEMM 512 0.633 and
0.644 ms against 0.638 and 0.642, GEMM 1024 and the MLP forward within their run-to-run
spread (AMD EPYC, Zen 5, benchmarks/run.py, alternating). The kernel specialised to packed
panels cost a second module per tile, ~17 ms of a cold build's CPU each (IR and LLVM).

The modules are written already vectorised, unrolled and scheduled, in SSA form, so LLVM
compiles them at speed level 0: no IR optimisation, only code generation (which runs at
its full level and does the loop strength reduction and the register allocation that
matter here). Level 1 took half of their compile time (its passes ~50 ms of the ~190 ms
of the five modules an MLP needs) for the same micro-kernel loops: the same instructions
but for the loop counter, the same cycles per iteration in llvm-mca (rocketlake); the
packer's transposing block is 316 instructions rather than 260 (99 cycles rather than 95
per 16 x 16 block: ~10k cycles of the MLP forward's ~1.5M, under 1%).
The MCJIT engine links a caller's calls to these symbols by name: a caller declares what
it uses (``declare_*``) and loads it (``load(declared_parts(module))``) before its own
module's object is loaded.
"""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import llvmlite.ir as ir

from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.templates.irgen import (
    F32, I1, I32, I64, PF, VOID, Gen, c32, c64, get_function, new_function,
)


@dataclass(frozen=True)
class MicroTile:
    """Register blocking: an MR x NR tile of C in MR * NR/VL vector registers of VL floats."""

    vl: int
    mr: int
    nr: int

    def __post_init__(self) -> None:
        if min(self.vl, self.mr, self.nr) < 1 or self.nr % self.vl:
            raise ValueError(f"bad micro-tile {self}: NR must be a multiple of VL")

    def symbol(self, part: str) -> str:
        return f"relaydsl_gemm_v{self.vl}m{self.mr}n{self.nr}_{part}"


def core_symbol(vl: int, part: str) -> str:
    return f"relaydsl_gemm_v{vl}_{part}"


# How far ahead (in k steps) the micro-kernel prefetches B's micro-panel: GEMM 1024 on one
# core of an Intel Xeon (rocketlake features, AVX-512) ran 0.93x PyTorch's speed without,
# 0.965x with 8, 16 or 32 steps (three runs of each, alternating, interleaved with PyTorch)
B_PREFETCH = 16
CACHE_LINE_FLOATS = 16

# A packer: void (float* dst, float* src, i64 x0, i64 nx, i64 k0, i64 kc, i64 s_x, i64 s_k,
# i64 width) writes ceil(nx / width) micro-panels of kc x width floats, element (k, w) of
# panel t being src[(x0 + t*width + w)*s_x + (k0 + k)*s_k]; columns past nx are 0.
PACK_ARGS = [PF, PF, I64, I64, I64, I64, I64, I64, I64]
PACK_TYPE = ir.FunctionType(VOID, PACK_ARGS)
# The micro-kernels: void (A, Bp, kc, C, ldc, mv, nv, first, a_rs, a_ks).
UKERNEL_TYPE = ir.FunctionType(VOID, [PF, PF, I64, PF, I64, I64, I64, I1, I64, I64])

# The sub-GEMM's parameters, in order, with their types.
BLOCK_PARAMS: tuple[tuple[str, ir.Type], ...] = (
    ("a", PF), ("b", PF), ("c", PF), ("r0", I64), ("r1", I64), ("c0", I64), ("c1", I64),
    ("ap", PF), ("bp", PF), ("k", I64), ("ldc", I64), ("a_rs", I64), ("a_ks", I64),
    ("b_ks", I64), ("b_xs", I64), ("kc", I64), ("mc", I64), ("nc", I64), ("mr", I64),
    ("nr", I64), ("pack_b", PACK_TYPE.as_pointer()), ("ukernel", UKERNEL_TYPE.as_pointer()),
    ("a_in_place", I1),
)
BLOCK_TYPE = ir.FunctionType(VOID, [t for _, t in BLOCK_PARAMS])


def declare_core(module: ir.Module, vl: int, part: str) -> ir.Function:
    """The declaration of the core's ``block`` or ``pack`` in a caller's module."""
    fnty = {"block": BLOCK_TYPE, "pack": PACK_TYPE}[part]
    declared = _core_part(vl, part)
    _DECLARED[declared.name] = declared
    return get_function(module, declared.name, fnty)


def declare_ukernel(module: ir.Module, tile: MicroTile) -> ir.Function:
    """The declaration of the micro-kernel of `tile` in a caller's module."""
    part = ukernel_part(tile)
    _DECLARED[part.name] = part
    return get_function(module, part.name, UKERNEL_TYPE)


def declared_parts(module: ir.Module) -> list[Part]:
    """The library parts `module` calls (declared with ``declare_*``), and the parts those
    call (the core's ``block`` calls its ``pack``), in an order to ``load`` them in before
    loading the module's object."""
    parts: list[Part] = []
    for name, part in _DECLARED.items():
        if name in module.globals:
            if part.kind == "block":
                parts.append(_core_part(part.vl, "pack"))
            parts.append(part)
    return list(dict.fromkeys(parts))


# ---- loading ----------------------------------------------------------------------------------

_LOCK = threading.Lock()
_LOADED: dict[str, jit.Library] = {}
_DECLARED: dict[str, Part] = {}  # every part some module declared, by symbol
_SPEED = 0  # LLVM speed level of the library modules (module docstring)
_OPTIONS = f"speed{_SPEED}|vectorize=False|unroll=False"


def _key(part: Part) -> str:
    return f"gemm-library|{part.name}|{_OPTIONS}|fast_codegen={_fast_codegen(part)}"


def _fast_codegen(part: Part) -> bool:
    """Whether `part` is generated by LLVM's -O0 code generator: the block, whose loops
    run once per micro-kernel call (~0.5 us of work and more), in 3 ms rather than 13."""
    return part.kind == "block"


def _fresh_lock() -> None:
    """In a forked child: the parent's thread that held the lock is gone (see kernel.py)."""
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock)


@dataclass(frozen=True)
class Part:
    """One library module: the exported function `name`, the core's ``pack`` or ``block``
    or the micro-kernel (``ukernel``) of `tile`."""

    name: str
    kind: str
    vl: int
    tile: MicroTile | None = None


def core_parts(vl: int) -> list[Part]:
    """The packer and the blocked sub-GEMM for vectors of `vl` floats."""
    return [_core_part(vl, kind) for kind in ("pack", "block")]


def _core_part(vl: int, kind: str) -> Part:
    return Part(core_symbol(vl, kind), kind, vl)


def ukernel_part(tile: MicroTile) -> Part:
    """The micro-kernel of `tile`."""
    return Part(tile.symbol("ukernel"), "ukernel", tile.vl, tile)


def jobs(parts: list[Part]) -> list[jit.Job]:
    """The compile jobs (``jit.compile_parallel``) of the `parts` not loaded yet; their IR is
    built by whoever compiles them. The block, the cheapest (~3 ms, the packer ~25, a
    micro-kernel ~20), comes last: the two processes sharing the jobs finish closer."""
    return [jit.Job(_key(part), functools.partial(library_ir, part), speed_level=_SPEED,
                    vectorize=False, fast_codegen=_fast_codegen(part))
            for part in sorted(parts, key=lambda part: part.kind == "block")
            if part.name not in _LOADED]


def load(parts: list[Part]) -> None:
    """Makes sure the modules of `parts` are loaded (from the disk cache without building
    their IR, else compiled)."""
    for part in parts:
        with _LOCK:
            if part.name in _LOADED:
                continue
            _LOADED[part.name] = jit.load_or_compile(
                _key(part), [part.name],
                functools.partial(library_ir, part), speed_level=_SPEED, vectorize=False,
                fast_codegen=_fast_codegen(part))


def library_ir(part: Part) -> str:
    """The LLVM IR of the module defining `part`."""
    module = ir.Module(name=part.name)
    module.triple = jit.host_target().triple
    module.data_layout = jit.data_layout()
    if part.kind == "pack":
        emit_pack(module, part.name, part.vl)
    elif part.kind == "block":
        emit_block(module, part.vl)
    else:
        assert part.tile is not None and part.kind == "ukernel"
        emit_microkernel(module, part.name, part.tile)
    return str(module)


def library(name: str) -> jit.Library:
    """The loaded library module defining `name` (after ``load``)."""
    return _LOADED[name]


# ---- the micro-kernel -------------------------------------------------------------------------


def emit_microkernel(module: ir.Module, name: str, tile: MicroTile) -> ir.Function:
    """``void (A, Bp, kc, C, ldc, mv, nv, first, a_rs, a_ks)``: C[:mv, :nv] = (or +=) A . Bp.

    Element (i, k) of A is at i*a_rs + k*a_ks: a packed micro-panel (strides 1, MR) or A
    where it lies (its MR rows are read whatever mv is). Bp is a micro-panel (element
    (k, j) at k*NR + j), packed or read in place (conv2d_nchwc's weight).
    """
    mr, nr, vl = tile.mr, tile.nr, tile.vl
    nvec = nr // vl
    vec = ir.VectorType(F32, vl)
    fn = new_function(module, name, UKERNEL_TYPE.args, internal=False, noalias=(0, 1, 3))
    a, bp, kc, c, ldc, mv, nv, first, a_rs, a_ks = fn.args
    fma = get_function(module, f"llvm.fma.v{vl}f32", ir.FunctionType(vec, [vec] * 3))
    g = Gen(module, fn)
    b = g.b
    tmp = g.stack(mr * nr, "tile")
    rows = [g.mul(a_rs, i) for i in range(mr)]  # A's row offsets, loop invariant
    # C's tile is read (or written) after the k loop: fetched now, its misses (C was last
    # touched a whole kc step ago, its rows ldc apart) overlap the loop's FMAs
    for i in range(mr):
        row = g.at(c, b.mul(ldc, g.min(c64(i), b.sub(mv, c64(1)))))
        g.prefetch(row, write=True, locality=3)
        # the row's last column may lie past C (a last row of nv < NR): a plain GEP, as
        # an inbounds one past the object would be poison
        g.prefetch(b.gep(row, [c64(nr - 1)]), write=True, locality=3)
    entry = b.block
    body, done = g.block("k.body"), g.block("k.end")
    b.branch(body)

    # k.body: acc[i][v] = fma(splat(A[i, k]), Bp[k, v*VL : (v+1)*VL], acc[i][v])
    b.position_at_end(body)
    k, accs = g.accumulators(entry, "k", vec, mr, nvec)
    pa = g.at(a, g.mul(k, a_ks))
    pb = g.at(bp, g.mul(k, nr))
    # B may be read in place (conv2d_nchwc's weight), so not 64-aligned
    bvs = [b.load(g.vptr(g.at(pb, v * vl), vl), align=4) for v in range(nvec)]
    # B's micro-panel streams from L2 (A's stays in L1): fetched B_PREFETCH k steps ahead
    # (past the panel's end: the next micro-panel's start, the next call's first steps)
    for v in range(0, nr, CACHE_LINE_FLOATS):
        g.prefetch(b.gep(pb, [c64(B_PREFETCH * nr + v)]))
    new = []
    for i in range(mr):
        s = g.splat(b.load(g.at(pa, rows[i]), align=4), vl)
        new.append([b.call(fma, [s, bvs[v], accs[i][v]]) for v in range(nvec)])
    k1 = b.add(k, c64(1), flags=["nsw"])
    k.add_incoming(k1, b.block)
    for i in range(mr):
        for v in range(nvec):
            accs[i][v].add_incoming(new[i][v], b.block)
    b.cbranch(b.icmp_signed("<", k1, kc), body, done)

    # k.end: a full tile is stored (or added) straight from the registers
    b.position_at_end(done)
    full = b.and_(b.icmp_signed("==", mv, c64(mr)), b.icmp_signed("==", nv, c64(nr)))
    fullb, edge = g.block("full"), g.block("edge")
    b.cbranch(full, fullb, edge)

    b.position_at_end(fullb)
    setb, addb = g.block("set"), g.block("accumulate")
    b.cbranch(first, setb, addb)
    for blk, accumulate in ((setb, False), (addb, True)):
        b.position_at_end(blk)
        for i in range(mr):
            row = g.at(c, b.mul(ldc, c64(i))) if i else c
            for v in range(nvec):
                p = g.vptr(g.at(row, v * vl), vl)
                val = new[i][v]
                if accumulate:
                    val = b.fadd(b.load(p, align=4), val)
                b.store(val, p, align=4)
        b.ret_void()

    # edge: through a stack tile, rows < mv with masked stores of the columns < nv
    b.position_at_end(edge)
    for i in range(mr):
        for v in range(nvec):
            b.store(new[i][v], g.vptr(g.at(tmp, i * nr + v * vl), vl), align=64)
    masks = [g.lane_mask(nv, vl, v * vl) for v in range(nvec)]
    with b.if_else(first) as (then, otherwise):
        for blk, accumulate in ((then, False), (otherwise, True)):
            with blk, g.loop(0, mv, name="ei" + "a" * accumulate) as i:
                row = g.at(c, b.mul(i, ldc))
                trow = g.at(tmp, g.mul(i, nr))
                for v in range(nvec):
                    val = b.load(g.vptr(g.at(trow, v * vl), vl), align=64)
                    p = g.at(row, v * vl)
                    if accumulate:
                        val = b.fadd(g.masked_load(p, masks[v], vl), val)
                    g.masked_store(val, p, masks[v], vl)
    b.ret_void()
    return fn


# ---- packing ------------------------------------------------------------------------------------


def emit_pack(module: ir.Module, name: str, vl: int) -> ir.Function:
    """The packer (PACK_TYPE) for any panel width at most VL or a multiple of VL.

    A full panel whose source runs along x (s_x == 1) is copied as vectors along x; one
    whose source runs along k (s_k == 1) is moved VL x VL at a time through registers
    (``_pack_transposed``). Any other panel (the last, partial one, or an operand with no
    unit stride) is zeroed and then filled element by element.
    """
    fn = new_function(module, name, PACK_ARGS, internal=False, noalias=(0, 1))
    dst, src, x0, nx, k0, kc, s_x, s_k, width = fn.args
    g = Gen(module, fn)
    b = g.b
    with g.loop(0, nx, width, "t") as t:
        d = g.at(dst, b.mul(t, kc))
        base = g.at(src, g.add(g.mul(g.add(x0, t), s_x), g.mul(k0, s_k)))
        nvalid = g.min(b.sub(nx, t), width)
        full = b.icmp_signed("==", nvalid, width)
        along_x, not_x = g.block("along_x"), g.block("not_x")
        along_k, other = g.block("along_k"), g.block("other")
        join = g.block("join")
        b.cbranch(b.and_(full, b.icmp_signed("==", s_x, c64(1))), along_x, not_x)

        b.position_at_end(along_x)  # d[k*W + w] = base[k*s_k + w], VL columns at a time
        with g.loop(0, kc, name="k") as k:
            row = g.at(base, g.mul(k, s_k))
            drow = g.at(d, g.mul(k, width))
            with g.loop(0, width, vl, "wx") as w0:
                mask = g.lane_mask(b.sub(width, w0), vl)
                g.masked_store(g.masked_load(g.at(row, w0), mask, vl), g.at(drow, w0), mask, vl)
        b.branch(join)

        b.position_at_end(not_x)
        b.cbranch(b.and_(full, b.icmp_signed("==", s_k, c64(1))), along_k, other)
        b.position_at_end(along_k)
        _pack_transposed(g, d, base, kc, width, s_x, vl)
        b.branch(join)

        b.position_at_end(other)
        with g.loop(0, b.mul(kc, width), name="z") as z:
            b.store(ir.Constant(F32, 0.0), g.at(d, z), align=4)
        with g.loop(0, kc, name="ke") as k:
            row = g.at(base, g.mul(k, s_k))
            drow = g.at(d, g.mul(k, width))
            with g.loop(0, nvalid, name="we") as w:
                b.store(b.load(g.at(row, g.mul(w, s_x)), align=4), g.at(drow, w), align=4)
        b.branch(join)
        b.position_at_end(join)
    b.ret_void()
    return fn


def transpose_square(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The transpose of an n x n block held as n vectors of n lanes (n a power of 2):
    log2(n) rounds of n two-source permutes (``_permutes``)."""
    n = len(rows)
    rows = list(rows)
    halves = [n >> r for r in range(1, n.bit_length())]  # n/2, n/4, ..., 1
    permute = _permutes(b, [([j if not j & h else n + j - h for j in range(n)],
                             [j + h if not j & h else n + j for j in range(n)]) for h in halves])
    for r, h in enumerate(halves):
        for i in range(n):
            if not i & h:
                rows[i], rows[i + h] = permute(r, rows[i], rows[i + h])
    return rows


def _permutes(b: ir.IRBuilder, rounds: list[tuple[list[int], list[int]]]
              ) -> Callable[[int, ir.Value, ir.Value], tuple[ir.Value, ir.Value]]:
    """permute(r, x, y): the two vectors that round r's (lo, hi) indices pick from x and y.

    With 16 lanes (AVX-512) each is a ``vpermi2ps`` whose indices are loaded from a table
    LLVM cannot see into: with constant shuffles, the instruction selector's search for
    cheaper shuffle sequences over the 4 dependent rounds took 7 of the packer's 21 ms of
    code generation, for no measurable gain in packing speed (AMD EPYC, Zen 5).
    """
    n = len(rounds[0][0])
    index_t = ir.VectorType(I32, n)
    if n != 16:
        return lambda r, x, y: tuple(b.shuffle_vector(x, y, ir.Constant(index_t, indices))
                                     for indices in rounds[r])
    module = b.module
    table_t = ir.ArrayType(index_t, 2 * len(rounds))
    table = ir.GlobalVariable(module, table_t, module.get_unique_name("transpose_indices"))
    table.linkage = "internal"  # and writable: a constant's loads would be folded
    table.align = 64
    table.initializer = ir.Constant(table_t, [ir.Constant(index_t, indices)
                                              for pair in rounds for indices in pair])
    indices = [b.load(b.gep(table, [c32(0), c32(i)]), align=64) for i in range(2 * len(rounds))]
    vector = ir.VectorType(F32, n)
    vpermi2 = get_function(module, "llvm.x86.avx512.vpermi2var.ps.512",
                           ir.FunctionType(vector, [vector, index_t, vector]))
    return lambda r, x, y: (b.call(vpermi2, [x, indices[2 * r], y]),
                            b.call(vpermi2, [x, indices[2 * r + 1], y]))


def _pack_transposed(g: Gen, d: ir.Value, base: ir.Value, kc: ir.Value, width: ir.Value,
                     s_x: ir.Value, vl: int) -> None:
    """d[k*W + w] = base[w*s_x + k] for a full panel, VL x VL blocks transposed in registers.

    A block holds VL k's by min(VL, W - w0) columns: rows past the columns, and lanes past
    the k's of the last block, are masked off (read as 0, never loaded) and the stores
    masked to match, so every block runs the same code. A mask is an integer's low bits
    (``_low_bits``) chosen by a scalar compare: ~3 ms less IR building and code generation
    than vector compares and ands.
    """
    b = g.b
    none = ir.Constant(ir.IntType(vl), 0)
    with g.loop(0, kc, vl, "kk") as kk:
        krem = b.sub(kc, kk)
        k_lanes = _low_bits(g, krem, vl)
        k_rows = [b.icmp_signed("<", c64(j), krem) for j in range(vl)]
        with g.loop(0, width, vl, "wt") as w0:
            wn = b.sub(width, w0)
            w_lanes = _low_bits(g, wn, vl)
            corner = b.gep(base, [b.add(kk, b.mul(w0, s_x))])  # may point past A: see masks
            rows = []
            for w in range(vl):
                mask = _lanes(b, b.select(b.icmp_signed("<", c64(w), wn), k_lanes, none))
                rows.append(g.masked_load(b.gep(corner, [b.mul(s_x, c64(w))]), mask, vl))
            drow = g.at(d, b.add(b.mul(kk, width), w0))
            for j, col in enumerate(transpose_square(b, rows)):
                mask = _lanes(b, b.select(k_rows[j], w_lanes, none))
                g.masked_store(col, b.gep(drow, [b.mul(width, c64(j))]), mask, vl)


def _low_bits(g: Gen, count: ir.Value, vl: int) -> ir.Value:
    """An iVL whose low min(max(count, 0), VL) bits are set (VL <= 16)."""
    b = g.b
    shift = b.trunc(g.min(g.max(count, 0), vl), I32)
    return b.trunc(b.sub(b.shl(c32(1), shift), c32(1)), ir.IntType(vl))


def _lanes(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """The ``<VL x i1>`` lane mask of an iVL's bits (lane l is bit l)."""
    return b.bitcast(bits, ir.VectorType(I1, bits.type.width))


# ---- the blocked sub-GEMM -------------------------------------------------------------------


def emit_block(module: ir.Module, vl: int) -> ir.Function:
    """``@relaydsl_gemm_v<VL>_block`` (BLOCK_PARAMS): C[r0:r1, c0:c1] = A[r0:r1] . B[:, c0:c1]."""
    pack = declare_core(module, vl, "pack")
    fn = new_function(module, core_symbol(vl, "block"), [t for _, t in BLOCK_PARAMS],
                      internal=False, noalias=(7, 8))
    p = dict(zip((n for n, _ in BLOCK_PARAMS), fn.args))
    a, c, ap, bp, ldc, mr, nr = p["a"], p["c"], p["ap"], p["bp"], p["ldc"], p["mr"], p["nr"]
    g = Gen(module, fn)
    b = g.b
    # all ones where A is read in place, else 0: an `and` rather than a select or a branch,
    # which LLVM would unswitch, duplicating the loop nest for nothing
    in_place = b.sext(p["a_in_place"], I64)
    with _blocks(g, p["c0"], p["c1"], p["nc"], nr, "jc") as (jc, nc), \
            g.loop(0, p["k"], p["kc"], "pc") as pc:
        kc = g.min(b.sub(p["k"], pc), p["kc"])
        first = b.icmp_signed("==", pc, c64(0))
        b.call(p["pack_b"], [bp, p["b"], jc, nc, pc, kc, p["b_xs"], p["b_ks"], nr])
        with _blocks(g, p["r0"], p["r1"], p["mc"], mr, "ic") as (ic, mc):
            # in place: full row tiles read A where it lies; only the partial one is packed
            mfull = b.and_(b.mul(b.sdiv(mc, mr), mr), in_place)
            with b.if_then(b.icmp_signed("<", mfull, mc)):
                b.call(pack, [ap, a, b.add(ic, mfull), b.sub(mc, mfull), pc, kc,
                              p["a_rs"], p["a_ks"], mr])
            # a row tile's A micro-panel stays in L1 while B's micro-panels stream from L2,
            # and consecutive calls update C tiles side by side in the same rows
            with g.loop(0, mfull, mr, "id") as id_:
                row = b.add(ic, id_)
                a_in = g.at(a, g.add(g.mul(row, p["a_rs"]), g.mul(pc, p["a_ks"])))
                crow = g.at(c, g.add(g.mul(row, ldc), jc))
                with g.loop(0, nc, nr, "jd") as jr:
                    b.call(p["ukernel"], [a_in, g.at(bp, b.mul(jr, kc)), kc, g.at(crow, jr), ldc,
                                         mr, g.min(b.sub(nc, jr), nr), first, p["a_rs"],
                                         p["a_ks"]])
            with g.loop(mfull, mc, mr, "ir") as ir_:
                mv = g.min(b.sub(mc, ir_), mr)
                apanel = g.at(ap, b.mul(b.sub(ir_, mfull), kc))
                crow = g.at(c, g.add(g.mul(b.add(ic, ir_), ldc), jc))
                with g.loop(0, nc, nr, "jr") as jr:
                    b.call(p["ukernel"], [apanel, g.at(bp, b.mul(jr, kc)), kc, g.at(crow, jr),
                                      ldc, mv, g.min(b.sub(nc, jr), nr), first, c64(1), mr])
    b.ret_void()
    return fn


@contextmanager
def _blocks(g: Gen, lo: ir.Value, hi: ir.Value, block: ir.Value, tile: ir.Value, name: str
            ) -> Iterator[tuple[ir.Value, ir.Value]]:
    """A loop over [lo, hi) in as few blocks of at most `block` as whole `tile`s allow, of
    equal sizes (whole tiles each but the last, their tile counts differing by at most one):
    yields each block's start and size. Steps of `block` would leave a thread's 37 row
    tiles in blocks of 9 a last block of one tile, whose B micro-panels are then brought
    into L1 for one micro-kernel call each.
    """
    b = g.b
    one = c64(1)
    tiles = b.sdiv(b.add(b.sub(hi, lo), b.sub(tile, one)), tile)
    per_block = g.max(b.sdiv(block, tile), 1)
    count = b.sdiv(b.add(tiles, b.sub(per_block, one)), per_block)

    def start(i: ir.Value) -> ir.Value:
        return g.min(b.add(lo, b.mul(b.sdiv(b.mul(i, tiles), count), tile)), hi)

    with g.loop(0, count, name=name + "b") as i:
        first = start(i)
        yield first, b.sub(start(b.add(i, one)), first)
