"""A BLIS-style float32 GEMM: a small driver per static shape over a shared, compiled library.

One emitted kernel computes, for every batch index ``b`` (a tuple over ``spec.batch``),

    C[b][m, n] = sum_k A[b][m, k] * B[b][k, n]

where each operand is addressed through strides (so transposed and broadcast operands
cost nothing extra) and ``B`` may instead be produced by a custom packer (conv2d's
implicit im2col, see conv2d.py).

Only the driver is specialised to the shape: it walks the batch and the kernel's
parallel units with constant sizes and strides and calls the micro-tile's blocked
sub-GEMM (gemm_library.py), which packs the operands and runs the register-blocked
micro-kernel with every size and stride given at run time. That library is compiled
once per micro-tile (VL, MR, NR) and process, so a module holding eight GEMMs compiles
eight small drivers instead of eight copies of the micro-kernel and the packers::

    define void @name(float* noalias %out, float* noalias %in0, float* noalias %in1,
                      i64 %begin, i64 %end) {
      %packed_a = alloca [MC*KC x float], align 64   ; scratch sized for the shape
      %packed_b = alloca [KC*NC x float], align 64
      for batch index bi covering units [begin, end):
        call @relaydsl_gemm_v16m14n32_block(A(bi), B(bi), C(bi), rows, columns, %packed_a,
                                            %packed_b, K, ldc, strides..., @pack_b,
                                            @ukernel, a_in_place)
    }

The micro-kernel keeps MR x NR/VL vector accumulators (``<VL x float>``, VL = 16 with
AVX-512, else 8) in registers; edge tiles run the same kernel on zero-padded panels.

Scratch: the packed buffers are stack allocas (aligned 64) sized for the shape, at most
``MC*KC + KC*NC`` floats (~640 KiB with the defaults), so concurrent calls from several
threads never share memory. Threads need the usual 8 MiB stacks.

Parallel units: the kernel computes units ``[begin, end)`` of ``batch * R`` units, where
a unit is MR rows of one batch (``split == "M"``) or NR columns (``split == "N"``),
whichever gives the busiest thread the least work, its packing counted (``choose_split``):
each thread packs the whole operand the split does not divide. A contiguous range of
units is run as one sub-GEMM per batch index, so the blocking is as good for a chunk as
for the whole problem.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from relaydsl import settings
from relaydsl.backend.llvm.templates import gemm_library
from relaydsl.backend.llvm.templates.gemm_library import MicroTile
from relaydsl.backend.llvm.templates.irgen import I1, I64, PF, Gen, c64, new_function


# ---- blocking -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Blocking:
    """Register and cache blocking. MR x NR is the micro-tile (NR a multiple of VL)."""

    vl: int = 16
    mr: int = 14
    nr: int = 32
    kc: int = 256
    mc: int = 126
    nc: int = 512


def default_blocking(vector_bits: int | None = None) -> Blocking:
    if vector_bits is None:
        from relaydsl.backend.llvm.jit import host_target
        vector_bits = host_target().vector_bits
    if vector_bits >= 512:
        # 14 x 32: 28 zmm accumulators + 2 B vectors + 1 broadcast of the 32 registers.
        # B micro-panel KC x NR = 32 KiB stays in L1 (48 KiB on Zen 4/5), the A block
        # MC x KC = 126 KiB in L2 (1 MiB), the B panel KC x NC = 512 KiB in L2.
        return Blocking(vl=16, mr=14, nr=32, kc=256, mc=126, nc=512)
    if vector_bits >= 256:
        # 6 x 16 with 8-wide vectors: 12 ymm accumulators of the 16 registers.
        return Blocking(vl=8, mr=6, nr=16, kc=256, mc=120, nc=512)
    return Blocking(vl=4, mr=6, nr=8, kc=256, mc=120, nc=256)


# ---- the problem ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmSpec:
    """A batched GEMM over static shapes with element strides for every operand.

    ``a_input``/``b_input`` say which kernel argument (0 -> %in0, 1 -> %in1) holds A and B.
    ``a_strides = (row, k)``, ``b_strides = (k, col)``; C rows are ``ldc`` apart with unit
    column stride. ``*_batch_strides`` give the offset per step of each batch axis (0 where
    the operand broadcasts).
    """

    m: int
    n: int
    k: int
    a_strides: tuple[int, int]
    b_strides: tuple[int, int]
    ldc: int
    batch: tuple[int, ...] = ()
    a_batch_strides: tuple[int, ...] = ()
    b_batch_strides: tuple[int, ...] = ()
    c_batch_strides: tuple[int, ...] = ()
    a_input: int = 0
    b_input: int = 1
    split: str | None = None  # "M", "N" or None (chosen from the shape)

    @property
    def batch_size(self) -> int:
        return math.prod(self.batch)

    @property
    def flops(self) -> float:
        return 2.0 * self.batch_size * self.m * self.n * self.k


# A B packer hook: (module, fn_name, blocking) -> a gemm_library packer (PACK_TYPE)
#   void (float* dst, float* src, i64 x0, i64 nx, i64 k0, i64 kc, i64 s_x, i64 s_k, i64 width)
# writing ceil(nx / NR) micro-panels of kc x NR floats (columns past nx: any finite value
# or zero; they are never stored) from the operand at src (this batch entry's B).
Packer = Callable[[ir.Module, str, "Blocking"], ir.Function]


# ---- the driver ---------------------------------------------------------------------------------


def walk_units(g: Gen, spec: GemmSpec, split: str, mr: int, nr: int, begin: ir.Value,
               end: ir.Value, call_block: Callable[..., None]) -> None:
    """Emits the calls of ``call_block(offsets, r0, r1, c0, c1)`` computing units [begin, end)
    (of ``batch_size * units``): per batch entry the element offsets of A, B and C and the
    rows [r0, r1) and columns [c0, c1) of its units."""
    b = g.b
    units = -(-spec.m // mr) if split == "M" else -(-spec.n // nr)

    def one(bi: ir.Value | None, lo: ir.Value, hi: ir.Value) -> None:
        """Units [lo, hi) of batch entry `bi` (units [begin, end) of the only entry if None)."""
        offs = [c64(0), c64(0), c64(0)]
        rest = bi
        for d in reversed(range(len(spec.batch))):
            size = spec.batch[d]
            idx = b.srem(rest, c64(size)) if d else rest
            rest = b.sdiv(rest, c64(size))
            for o, strides in enumerate((spec.a_batch_strides, spec.b_batch_strides,
                                         spec.c_batch_strides)):
                offs[o] = g.add(offs[o], g.mul(idx, strides[d]))
        if split == "M":
            r0, r1 = g.mul(lo, mr), g.min(g.mul(hi, mr), spec.m)
            c0, c1 = c64(0), c64(spec.n)
        else:
            r0, r1 = c64(0), c64(spec.m)
            c0, c1 = g.mul(lo, nr), g.min(g.mul(hi, nr), spec.n)
        call_block(offs, r0, r1, c0, c1)

    if not spec.batch:  # straight-line code: a loop of one trip still costs LLVM time
        one(None, begin, end)
        return
    rr = c64(units)
    b_first = b.sdiv(begin, rr)
    b_stop = b.add(b.sdiv(b.sub(end, c64(1)), rr), c64(1))
    with g.loop(b_first, b_stop, name="batch") as bi:
        first_unit = b.mul(bi, rr)
        one(bi, g.max(b.sub(begin, first_unit), 0), g.min(b.sub(end, first_unit), units))


@dataclass
class GemmKernel:
    """What emit_gemm produced: the entry function and how many parallel units it has."""

    fn: ir.Function
    parallel_extent: int
    flops: float


def fit_blocking(bl: Blocking, spec: GemmSpec) -> Blocking:
    """Shrinks the micro-tile for skinny problems: NR = VL where N <= VL, and MR the
    smallest of 1, 2, 4, 8, MR (those at most MR) that covers M, so that few micro-tiles
    (each one a compiled library) serve every shape."""
    heights = sorted({h for h in (1, 2, 4, 8) if h < bl.mr} | {bl.mr})
    mr = next(h for h in heights if h >= min(bl.mr, spec.m))
    nr = bl.vl if spec.n <= bl.vl else bl.nr
    mc = max(mr, bl.mc // mr * mr)
    return Blocking(bl.vl, mr, nr, bl.kc, mc, bl.nc)


def reads_a_in_place(spec: GemmSpec, bl: Blocking) -> bool:
    # With few column tiles an A element feeds few FMAs: reading A in place beats packing it.
    return -(-spec.n // bl.nr) <= 2 and spec.m >= bl.mr


# The time of packing one float, in multiply-adds (one float lane of an FMA): 1M floats of
# a 1024 x 1024 operand packed in ~0.3 ms, A's or B's alike, on one core of an Intel Xeon
# (rocketlake features, AVX-512) that runs ~110G multiply-adds a second in its micro-kernel
PACK_COST = 32


def choose_split(spec: GemmSpec, bl: Blocking, threads: int = 1, pack_cost: float = 0.0
                 ) -> str:
    """The split of the parallel units: a forced ``spec.split``; else, with `threads` > 1
    sharing one batch entry and a `pack_cost` (``PACK_COST``), the split whose busiest
    thread does the least work (``split_work``); else M where M >= N.

    Each thread packs the whole of the operand the split does not divide (B in a split
    along M) and its share of the other once per block of the other axis (A once per NC
    columns): at 1024 x 1024 x 1024 on two threads, along M each packs 2M floats, along N
    1.5M, 8% and 5% of its multiply-adds' time. Along M, rows come in tiles of 14 (74
    tiles: 37 a thread), along N in tiles of 32 (512: 16 tiles, 8 and 8; along M 19 and 18).

    >>> spec = GemmSpec(1024, 1024, 1024, (1024, 1), (1024, 1), 1024)
    >>> choose_split(spec, Blocking()), choose_split(spec, Blocking(), 2, PACK_COST)
    ('M', 'N')
    """
    if spec.split:
        return spec.split
    shape_rule = "M" if spec.m >= spec.n else "N"
    if threads < 2 or pack_cost <= 0 or spec.batch_size >= threads:
        return shape_rule
    work = {split: split_work(spec, bl, split, threads, pack_cost) for split in "MN"}
    if work["M"] == work["N"]:
        return shape_rule
    return min(work, key=work.__getitem__)


def split_work(spec: GemmSpec, bl: Blocking, split: str, threads: int, pack_cost: float
               ) -> float:
    """The busiest thread's work in multiply-adds (of whole micro-tiles) plus its packed
    floats times `pack_cost`, one batch entry split `split` over `threads`.

    >>> spec = GemmSpec(28, 64, 10, (10, 1), (64, 1), 64)  # 2 row tiles, 2 column tiles
    >>> split_work(spec, Blocking(), "M", 2, 0.0)  # one row tile: 14 x 64 x 10
    8960.0
    """
    m_tiles, n_tiles = -(-spec.m // bl.mr), -(-spec.n // bl.nr)
    if split == "M":
        rows, cols = -(-m_tiles // threads) * bl.mr, n_tiles * bl.nr
    else:
        rows, cols = m_tiles * bl.mr, -(-n_tiles // threads) * bl.nr
    packed = rows * spec.k * -(-cols // bl.nc) + spec.k * cols
    return rows * cols * spec.k + pack_cost * packed


def micro_kernel_parts(spec: GemmSpec, bl: Blocking | None = None) -> list[gemm_library.Part]:
    """The GEMM library's micro-kernel that ``emit_gemm(..., spec, bl)`` calls (besides the
    core): a build that knows its contractions early compiles it ahead."""
    bl = fit_blocking(bl or default_blocking(), spec)
    return [gemm_library.ukernel_part(MicroTile(bl.vl, bl.mr, bl.nr))]


def emit_gemm(module: ir.Module, name: str, spec: GemmSpec, bl: Blocking | None = None,
              pack_b: Packer | None = None) -> GemmKernel:
    """Defines ``void @name(float* noalias out, float* noalias in0, float* noalias in1,
    i64 begin, i64 end)``, calling the GEMM library functions it declares (load
    ``gemm_library.declared_parts(module)`` before loading the module's object)."""
    bl = fit_blocking(bl or default_blocking(), spec)
    assert bl.nr % bl.vl == 0 and min(spec.m, spec.n, spec.k) >= 1
    split = choose_split(spec, bl, settings.num_threads(), PACK_COST)
    units = -(-spec.m // bl.mr) if split == "M" else -(-spec.n // bl.nr)
    extent = spec.batch_size * units
    nk = -(-spec.k // bl.kc)
    kc_max = -(-spec.k // nk)  # balanced K blocks
    mc_max = min(bl.mc, -(-spec.m // bl.mr) * bl.mr)
    nc_max = min(bl.nc, -(-spec.n // bl.nr) * bl.nr)
    block = gemm_library.declare_core(module, bl.vl, "block")
    ukernel = gemm_library.declare_ukernel(module, MicroTile(bl.vl, bl.mr, bl.nr))
    if pack_b is None:
        packer = gemm_library.declare_core(module, bl.vl, "pack")
    else:
        packer = pack_b(module, f"{name}.pack_b", bl)

    fn = new_function(module, name, [PF, PF, PF, I64, I64], internal=False, noalias=(0, 1, 2))
    out, in0, in1, begin, end = fn.args
    g = Gen(module, fn)
    b = g.b
    ap = g.stack(mc_max * kc_max, "packed_a")
    bp = g.stack(kc_max * nc_max, "packed_b")
    inputs = (in0, in1)
    work, skip = g.block("work"), g.block("skip")
    b.cbranch(b.icmp_signed("<", begin, end), work, skip)
    b.position_at_end(skip)
    b.ret_void()
    b.position_at_end(work)
    def call_block(offs: list[ir.Value], r0: ir.Value, r1: ir.Value, c0: ir.Value,
                   c1: ir.Value) -> None:
        args = {
            "a": g.at(inputs[spec.a_input], offs[0]), "b": g.at(inputs[spec.b_input], offs[1]),
            "c": g.at(out, offs[2]), "r0": r0, "r1": r1, "c0": c0, "c1": c1, "ap": ap, "bp": bp,
            "k": c64(spec.k), "ldc": c64(spec.ldc),
            "a_rs": c64(spec.a_strides[0]), "a_ks": c64(spec.a_strides[1]),
            "b_ks": c64(spec.b_strides[0]), "b_xs": c64(spec.b_strides[1]),
            "kc": c64(kc_max), "mc": c64(mc_max), "nc": c64(nc_max), "mr": c64(bl.mr),
            "nr": c64(bl.nr), "pack_b": packer, "ukernel": ukernel,
            "a_in_place": ir.Constant(I1, reads_a_in_place(spec, bl)),
        }
        b.call(block, [args[n] for n, _ in gemm_library.BLOCK_PARAMS])

    walk_units(g, spec, split, bl.mr, bl.nr, begin, end, call_block)
    b.ret_void()
    return GemmKernel(fn, extent, spec.flops)
