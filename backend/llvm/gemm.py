"""A BLIS-style float32 GEMM emitted as LLVM IR (llvmlite.ir), specialised to static shapes.

One emitted kernel computes, for every batch index ``b`` (a tuple over ``spec.batch``),

    C[b][m, n] = sum_k A[b][m, k] * B[b][k, n]

where each operand is addressed through constant strides (so transposed and broadcast
operands cost nothing extra) and ``B`` may instead be produced by a custom packer
(conv2d's implicit im2col, see conv2d.py). The structure is the BLIS one:

    for jc in N step NC:                 # B panel, kept in L2
      for pc in K step KC:               # one rank-KC update
        pack B[pc:pc+kc, jc:jc+nc] -> Bp  (NR-wide micro-panels, zero padded)
        for ic in M step MC:             # A block, kept in L2
          pack A[ic:ic+mc, pc:pc+kc] -> Ap  (MR-tall micro-panels, zero padded)
          for jr in nc step NR:          # B micro-panel, kept in L1
            for ir in mc step MR:
              micro-kernel: C[MR x NR] (+)= Ap[ir] . Bp[jr]   (accumulators in registers)

The micro-kernel keeps MR x NR/VL vector accumulators (``<VL x float>``, VL = 16 with
AVX-512, else 8) in registers and issues ``llvm.fma`` on a broadcast element of A and
a vector of B per k. Edge tiles (M, N not multiples of MR, NR) run the same kernel on
zero-padded panels and write back only the valid part, so no load or store ever
leaves an operand.

Scratch: the packed buffers are stack allocas (aligned 64) sized for the shape, at most
``MC*KC + KC*NC`` floats (~640 KiB with the defaults), so concurrent calls from several
threads never share memory. Threads need the usual 8 MiB stacks.

Parallel units: the kernel computes units ``[begin, end)`` of ``batch * R`` units, where
a unit is MR rows of one batch (``split == "M"``) or NR columns (``split == "N"``,
chosen when M < N so that the threads split the large B packing instead of repeating
it). A contiguous range of units is run as one sub-GEMM per batch index, so the
blocking is as good for a chunk as for the whole problem.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import llvmlite.ir as ir

F32 = ir.FloatType()
I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PF = F32.as_pointer()
VOID = ir.VoidType()


def c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


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
        from backend.llvm.jit import host_target
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


# A B packer hook: (module, fn_name, blocking) -> a function
#   void (float* dst, float* src, i64 x0, i64 nx, i64 k0, i64 kc)
# writing ceil(nx / NR) micro-panels of kc x NR floats (columns past nx: any finite value
# or zero; they are never stored) from the operand at src (this batch entry's B).
Packer = Callable[[ir.Module, str, "Blocking"], ir.Function]


# ---- IR building helpers ----------------------------------------------------------------------


class VectorGEP(ir.Instruction):
    """``getelementptr float, float* %base, <n x iK> %idx`` (llvmlite lacks vector GEPs).

    Not ``inbounds``: lanes a masked gather leaves off may point anywhere."""

    def __init__(self, parent: ir.Block, ptr: ir.Value, index: ir.Value, name: str = ""):
        super().__init__(parent, ir.VectorType(ptr.type, index.type.count), "getelementptr",
                         [ptr, index], name)

    def descr(self, buf: list) -> None:
        ptr, idx = self.operands
        buf.append(f"getelementptr {ptr.type.pointee}, {ptr.type} {ptr.get_reference()}, "
                   f"{idx.type} {idx.get_reference()}\n")


def get_function(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    """The module's function `name` (an intrinsic shared by several templates), declared once."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, fnty, name)


def new_function(module: ir.Module, name: str, args: Sequence[ir.Type], internal: bool = True,
                 noalias: Sequence[int] = ()) -> ir.Function:
    fn = ir.Function(module, ir.FunctionType(VOID, list(args)), name)
    if internal:
        fn.linkage = "internal"
    for i in noalias:
        fn.args[i].add_attribute("noalias")
    fn.attributes.add("nounwind")
    return fn


class Gen:
    """An IRBuilder over one function, with counted loops and small arithmetic helpers."""

    def __init__(self, module: ir.Module, fn: ir.Function):
        self.module, self.fn = module, fn
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._n = 0

    def block(self, hint: str) -> ir.Block:
        self._n += 1
        return self.fn.append_basic_block(f"{hint}{self._n}")

    @contextmanager
    def loop(self, start: ir.Value | int, stop: ir.Value | int, step: int = 1,
             name: str = "i") -> Iterator[ir.Value]:
        """``for (i = start; i < stop; i += step)`` (signed)."""
        b = self.b
        start, stop = self.val(start), self.val(stop)
        pre = b.block
        header, body, done = self.block(name + ".head"), self.block(name + ".body"), self.block(name + ".end")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name)
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, stop), body, done)
        b.position_at_end(body)
        yield i
        nxt = b.add(i, c64(step), name=name + ".next", flags=["nsw"])
        i.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(done)

    @staticmethod
    def val(v: ir.Value | int) -> ir.Value:
        return c64(v) if isinstance(v, int) else v

    def min(self, x: ir.Value | int, y: ir.Value | int) -> ir.Value:
        x, y = self.val(x), self.val(y)
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def max(self, x: ir.Value | int, y: ir.Value | int) -> ir.Value:
        x, y = self.val(x), self.val(y)
        return self.b.select(self.b.icmp_signed(">", x, y), x, y)

    def mul(self, x: ir.Value, k: int) -> ir.Value:
        if k == 0:
            return c64(0)
        return x if k == 1 else self.b.mul(x, c64(k), flags=["nsw"])

    def add(self, x: ir.Value | int, y: ir.Value | int) -> ir.Value:
        if isinstance(y, int) and y == 0:
            return self.val(x)
        if isinstance(x, int) and x == 0:
            return self.val(y)
        return self.b.add(self.val(x), self.val(y), flags=["nsw"])

    def at(self, ptr: ir.Value, offset: ir.Value | int) -> ir.Value:
        if isinstance(offset, int) and offset == 0:
            return ptr
        return self.b.gep(ptr, [self.val(offset)], inbounds=True)

    def vptr(self, ptr: ir.Value, vl: int) -> ir.Value:
        return self.b.bitcast(ptr, ir.VectorType(F32, vl).as_pointer())

    def splat(self, x: ir.Value, n: int) -> ir.Value:
        vt = ir.VectorType(x.type, n)
        v = self.b.insert_element(ir.Constant(vt, ir.Undefined), x, c32(0))
        mask = ir.Constant(ir.VectorType(I32, n), [0] * n)
        return self.b.shuffle_vector(v, ir.Constant(vt, ir.Undefined), mask)

    def stack(self, n_floats: int, name: str) -> ir.Value:
        """A 64-byte aligned stack buffer of `n_floats` floats, allocated in the entry block."""
        b = self.b
        here = b.block
        with b.goto_entry_block():
            b.position_at_start(self.fn.entry_basic_block)
            buf = b.alloca(ir.ArrayType(F32, max(1, n_floats)), name=name)
            buf.align = 64
            ptr = b.bitcast(buf, PF)
        assert here is b.block
        return ptr


# ---- the micro-kernel -------------------------------------------------------------------------


def emit_microkernel(module: ir.Module, name: str, bl: Blocking,
                     a_strides: tuple[int, int] | None = None) -> ir.Function:
    """``void (Ap, Bp, kc, C, ldc, mv, nv, first)``: C[:mv, :nv] = (or +=) Ap . Bp.

    Ap is a packed micro-panel (element (i, k) at k*MR + i), or with `a_strides`
    = (row, k) the unpacked A itself (then every call must have mv == MR).
    """
    mr, nr, vl = bl.mr, bl.nr, bl.vl
    a_rs, a_ks = a_strides if a_strides is not None else (1, mr)
    nv_ = nr // vl
    vec = ir.VectorType(F32, vl)
    fn = new_function(module, name, [PF, PF, I64, PF, I64, I64, I64, I1], noalias=(0, 1, 3))
    fn.attributes.add("noinline")
    a, bp, kc, c, ldc, mv, nv, first = fn.args
    fma = get_function(module, f"llvm.fma.v{vl}f32", ir.FunctionType(vec, [vec] * 3))
    g = Gen(module, fn)
    b = g.b
    tmp = g.stack(mr * nr, "tile")
    entry = b.block
    body, done = g.block("k.body"), g.block("k.end")
    b.branch(body)
    b.position_at_end(body)
    k = b.phi(I64, "k")
    k.add_incoming(c64(0), entry)
    zero = ir.Constant(vec, [0.0] * vl)
    accs = [[b.phi(vec, f"acc{i}_{v}") for v in range(nv_)] for i in range(mr)]
    for row in accs:
        for acc in row:
            acc.add_incoming(zero, entry)
    pa = g.at(a, g.mul(k, a_ks))
    pb = g.at(bp, g.mul(k, nr))
    bvs = [b.load(g.vptr(g.at(pb, v * vl), vl), align=64) for v in range(nv_)]
    new = []
    for i in range(mr):
        s = g.splat(b.load(g.at(pa, i * a_rs), align=4), vl)
        new.append([b.call(fma, [s, bvs[v], accs[i][v]]) for v in range(nv_)])
    k1 = b.add(k, c64(1), flags=["nsw"])
    k.add_incoming(k1, b.block)
    for i in range(mr):
        for v in range(nv_):
            accs[i][v].add_incoming(new[i][v], b.block)
    b.cbranch(b.icmp_signed("<", k1, kc), body, done)

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
            for v in range(nv_):
                p = g.vptr(g.at(row, v * vl), vl)
                val = new[i][v]
                if accumulate:
                    val = b.fadd(b.load(p, align=4), val)
                b.store(val, p, align=4)
        b.ret_void()

    b.position_at_end(edge)
    for i in range(mr):
        for v in range(nv_):
            b.store(new[i][v], g.vptr(g.at(tmp, i * nr + v * vl), vl), align=64)
    with g.loop(0, mv, name="ei") as i:
        row = g.at(c, b.mul(i, ldc))
        trow = g.at(tmp, g.mul(i, nr))
        with g.loop(0, nv, name="ej") as j:
            x = b.load(g.at(trow, j), align=4)
            p = g.at(row, j)
            with b.if_else(first) as (then, otherwise):
                with then:
                    b.store(x, p, align=4)
                with otherwise:
                    b.store(b.fadd(b.load(p, align=4), x), p, align=4)
    b.ret_void()
    return fn


# ---- packing ------------------------------------------------------------------------------------


def emit_pack_strided(module: ir.Module, name: str, width: int, s_x: int, s_k: int,
                      vl: int = 16) -> ir.Function:
    """``void (dst, src, x0, nx, k0, kc)``: micro-panels dst[t][k][w] = src[(x0+t*W+w)*s_x + (k0+k)*s_k].

    Columns w past nx read as 0 (and are never loaded). Serves A (x = rows, W = MR) and a
    strided B (x = columns, W = NR). A full panel whose source runs along k (s_k == 1, a
    transposition) is moved VL x VL at a time through registers when W is a multiple of VL.
    """
    fn = new_function(module, name, [PF, PF, I64, I64, I64, I64], noalias=(0, 1))
    dst, src, x0, nx, k0, kc = fn.args
    g = Gen(module, fn)
    b = g.b
    with g.loop(0, nx, width, "t") as t:
        d = g.at(dst, b.mul(t, kc))
        base = g.at(src, g.add(g.mul(g.add(x0, t), s_x), g.mul(k0, s_k)))
        nvalid = g.min(b.sub(nx, t), width)
        fullb, edgeb, join = g.block("full"), g.block("edge"), g.block("join")
        b.cbranch(b.icmp_signed("==", nvalid, c64(width)), fullb, edgeb)

        b.position_at_end(fullb)
        if s_k == 1 and s_x != 1 and width % vl == 0:
            _pack_transposed(g, d, base, kc, width, s_x, vl)
        else:
            with g.loop(0, kc, name="k") as k:
                row = g.at(base, g.mul(k, s_k))
                drow = g.at(d, g.mul(k, width))
                if s_x == 1:
                    x = b.load(g.vptr(row, width), align=4)
                    b.store(x, g.vptr(drow, width), align=4)
                else:
                    for w in range(width):
                        b.store(b.load(g.at(row, w * s_x), align=4), g.at(drow, w), align=4)
        b.branch(join)

        b.position_at_end(edgeb)  # the last, partial panel: zeros, then the valid columns
        with g.loop(0, b.mul(kc, c64(width)), name="z") as z:
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
    log2(n) rounds of n two-source shuffles (each one vpermt2ps on AVX-512)."""
    n = len(rows)
    rows = list(rows)
    h = n // 2
    while h:
        lo_mask = ir.Constant(ir.VectorType(I32, n), [l if not l & h else n + l - h for l in range(n)])
        hi_mask = ir.Constant(ir.VectorType(I32, n), [l + h if not l & h else n + l for l in range(n)])
        for i in range(n):
            if i & h:
                continue
            a, c = rows[i], rows[i + h]
            rows[i] = b.shuffle_vector(a, c, lo_mask)
            rows[i + h] = b.shuffle_vector(a, c, hi_mask)
        h //= 2
    return rows


def _pack_transposed(g: Gen, d: ir.Value, base: ir.Value, kc: ir.Value, width: int,
                     s_x: int, vl: int) -> None:
    """dst[k][w] = base[w*s_x + k] for a full panel: VL x VL blocks transposed in registers."""
    b = g.b
    kmain = b.mul(b.sdiv(kc, c64(vl)), c64(vl))
    with g.loop(0, kmain, vl, "kk") as kk:
        drow = g.at(d, b.mul(kk, c64(width)))
        for w0 in range(0, width, vl):
            rows = [b.load(g.vptr(g.at(base, g.add(kk, (w0 + w) * s_x)), vl), align=4)
                    for w in range(vl)]
            for j, col in enumerate(transpose_square(b, rows)):
                b.store(col, g.vptr(g.at(drow, j * width + w0), vl), align=64)
    with g.loop(kmain, kc, name="kr") as k:
        drow = g.at(d, b.mul(k, c64(width)))
        for w in range(width):
            b.store(b.load(g.at(base, g.add(k, w * s_x)), align=4), g.at(drow, w), align=4)


# ---- the driver ---------------------------------------------------------------------------------


@dataclass
class GemmKernel:
    """What emit_gemm produced: the entry function and how many parallel units it has."""

    fn: ir.Function
    parallel_extent: int
    flops: float


def fit_blocking(bl: Blocking, spec: GemmSpec) -> Blocking:
    """Shrinks the micro-tile for skinny problems (M < MR: MR = M; N <= VL: NR = VL)."""
    mr = min(bl.mr, spec.m)
    nr = bl.vl if spec.n <= bl.vl else bl.nr
    mc = max(mr, bl.mc // mr * mr)
    return Blocking(bl.vl, mr, nr, bl.kc, mc, bl.nc)


def choose_split(spec: GemmSpec, bl: Blocking) -> str:
    if spec.split:
        return spec.split
    return "M" if spec.m >= spec.n else "N"


def emit_gemm(module: ir.Module, name: str, spec: GemmSpec, bl: Blocking | None = None,
              pack_b: Callable[[ir.Module, str, Blocking], ir.Function] | None = None
              ) -> GemmKernel:
    """Defines ``void @name(float* noalias out, float* noalias in0, float* noalias in1, i64 begin, i64 end)``."""
    bl = fit_blocking(bl or default_blocking(), spec)
    assert bl.nr % bl.vl == 0 and min(spec.m, spec.n, spec.k) >= 1
    split = choose_split(spec, bl)
    units = -(-spec.m // bl.mr) if split == "M" else -(-spec.n // bl.nr)
    extent = spec.batch_size * units
    nk = -(-spec.k // bl.kc)
    kc_max = -(-spec.k // nk)  # balanced K blocks
    mc_max = min(bl.mc, -(-spec.m // bl.mr) * bl.mr)
    nc_max = min(bl.nc, -(-spec.n // bl.nr) * bl.nr)

    ukr = emit_microkernel(module, f"{name}.ukernel", bl)
    # With few column tiles an A element feeds few FMAs: reading A in place beats packing it.
    direct = (emit_microkernel(module, f"{name}.ukernel_direct", bl, spec.a_strides)
              if -(-spec.n // bl.nr) <= 2 and spec.m >= bl.mr else None)
    pa = emit_pack_strided(module, f"{name}.pack_a", bl.mr, *spec.a_strides, vl=bl.vl)
    if pack_b is None:
        pb = emit_pack_strided(module, f"{name}.pack_b", bl.nr, spec.b_strides[1],
                               spec.b_strides[0], vl=bl.vl)
    else:
        pb = pack_b(module, f"{name}.pack_b", bl)
    sub = _emit_subgemm(module, f"{name}.block", spec, bl, ukr, pa, pb, kc_max, mc_max, direct)

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
    rr = c64(units)
    b_first = b.sdiv(begin, rr)
    b_stop = b.add(b.sdiv(b.sub(end, c64(1)), rr), c64(1))
    with g.loop(b_first, b_stop, name="batch") as bi:
        first_unit = b.mul(bi, rr)
        lo = g.max(b.sub(begin, first_unit), 0)
        hi = g.min(b.sub(end, first_unit), units)
        offs = [c64(0), c64(0), c64(0)]
        rest = bi
        for d in reversed(range(len(spec.batch))):
            size = spec.batch[d]
            idx = b.srem(rest, c64(size)) if d else rest
            rest = b.sdiv(rest, c64(size))
            for o, strides in enumerate((spec.a_batch_strides, spec.b_batch_strides,
                                         spec.c_batch_strides)):
                offs[o] = g.add(offs[o], g.mul(idx, strides[d]))
        a_ptr = g.at(inputs[spec.a_input], offs[0])
        b_ptr = g.at(inputs[spec.b_input], offs[1])
        c_ptr = g.at(out, offs[2])
        if split == "M":
            r0, r1 = g.mul(lo, bl.mr), g.min(g.mul(hi, bl.mr), spec.m)
            c0, c1 = c64(0), c64(spec.n)
        else:
            r0, r1 = c64(0), c64(spec.m)
            c0, c1 = g.mul(lo, bl.nr), g.min(g.mul(hi, bl.nr), spec.n)
        b.call(sub, [a_ptr, b_ptr, c_ptr, r0, r1, c0, c1, ap, bp])
    b.ret_void()
    return GemmKernel(fn, extent, spec.flops)


def _emit_subgemm(module: ir.Module, name: str, spec: GemmSpec, bl: Blocking, ukr: ir.Function,
                  pack_a: ir.Function, pack_b: ir.Function, kc_max: int, mc_max: int,
                  direct: ir.Function | None = None) -> ir.Function:
    """``void (A, B, C, r0, r1, c0, c1, Ap, Bp)``: C[r0:r1, c0:c1] = A[r0:r1] . B[:, c0:c1]."""
    fn = new_function(module, name, [PF, PF, PF, I64, I64, I64, I64, PF, PF])
    a, bm, c, r0, r1, c0, c1, ap, bp = fn.args
    for arg in (ap, bp):
        arg.add_attribute("noalias")
    g = Gen(module, fn)
    b = g.b
    with g.loop(c0, c1, bl.nc, "jc") as jc:
        nc = g.min(b.sub(c1, jc), bl.nc)
        with g.loop(0, spec.k, kc_max, "pc") as pc:
            kc = g.min(b.sub(c64(spec.k), pc), kc_max)
            first = b.icmp_signed("==", pc, c64(0))
            b.call(pack_b, [bp, bm, jc, nc, pc, kc])
            with g.loop(r0, r1, mc_max, "ic") as ic:
                mc = g.min(b.sub(r1, ic), mc_max)
                if direct is None:
                    b.call(pack_a, [ap, a, ic, mc, pc, kc])
                    mfull = c64(0)
                else:  # pack only the partial row tile, at the front of Ap
                    mfull = b.mul(b.sdiv(mc, c64(bl.mr)), c64(bl.mr))
                    with b.if_then(b.icmp_signed("<", mfull, mc)):
                        b.call(pack_a, [ap, a, b.add(ic, mfull), b.sub(mc, mfull), pc, kc])
                with g.loop(0, nc, bl.nr, "jr") as jr:
                    nv = g.min(b.sub(nc, jr), bl.nr)
                    bpanel = g.at(bp, b.mul(jr, kc))
                    ccol = g.at(c, b.add(jc, jr))
                    if direct is not None:
                        with g.loop(0, mfull, bl.mr, "id") as ir_:
                            row = b.add(ic, ir_)
                            crow = g.at(ccol, g.mul(row, spec.ldc))
                            pa_ = g.at(a, g.add(g.mul(row, spec.a_strides[0]),
                                                g.mul(pc, spec.a_strides[1])))
                            b.call(direct, [pa_, bpanel, kc, crow, c64(spec.ldc), c64(bl.mr), nv,
                                            first])
                    with g.loop(mfull, mc, bl.mr, "ir") as ir_:
                        mv = g.min(b.sub(mc, ir_), bl.mr)
                        crow = g.at(ccol, g.mul(b.add(ic, ir_), spec.ldc))
                        b.call(ukr, [g.at(ap, b.mul(b.sub(ir_, mfull), kc)), bpanel, kc, crow,
                                     c64(spec.ldc), mv, nv, first])
    b.ret_void()
    return fn
