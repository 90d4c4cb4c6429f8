"""An integer GEMM (int8/uint8 x int8, int16 x int16, summed in int32) on the CPU's dot-product
instructions, specialised to one static shape.

For every batch index ``b`` it computes, as gemm.py does for float32 (same ``GemmSpec``,
same parallel units, same BLIS loop nest),

    C[b][m, n] = sum_k A[b][m, k] * B[b][k, n]      (exact in int32, then truncated to C's type)

**Instructions** (``Isa``, chosen from the CPU's features by ``select_isa``; tests force the
others): ``avx512vnni`` (``vpdpbusd``/``vpdpwssd`` on zmm, 16 int32 lanes), ``avxvnni`` (the
same on ymm: AVX-VNNI, or AVX-512 VNNI with VL), ``generic`` (plain LLVM IR: widen, multiply,
add; whatever SIMD the CPU has, e.g. ``vpmaddwd`` on AVX2). One instruction multiplies groups
of G = 4 bytes (G = 2 int16) of A and B and adds the G products to an int32 lane. ``amx``
(int8 only, where the CPU has AMX and Linux grants its tiles: ``amx_permitted``) computes a
32 x 32 block of C in four 16 x 16 int32 tiles with ``tdpbssd`` (``tdpbusd``/``tdpbsud``
with a uint8 operand), 16 x 16 x 64 multiply-adds each; measured on an Intel Xeon with AMX,
one core, 1024^3 int8: 2.6x the AVX-512 VNNI kernel. int16, or an A without unit stride
along K, falls back to ``avx512vnni`` (which every AMX CPU has).

``vpdpbusd`` multiplies *unsigned* bytes by signed bytes. uint8 A goes in as it is; for
int8 A the packer stores ``a ^ 0x80 = a + 128`` (unsigned), and since
``sum (a + 128) b = sum a b + 128 sum b`` the B packer also stores each panel's column
sums, which the micro-kernel subtracts (shifted by 7) once per K block. ``vpdpwssd`` is
signed x signed and needs nothing of the kind.

**Accumulator overflow.** Accumulators are int32 whatever C's type: the exact sum of
products reduced mod 2^32, i.e. what NumPy and the interpreter compute in int32 (int16 x
int16 products can only reach 2^31 when both are -32768: that wraps to -2^31 there too).
An int16 (8/16 scheme) or int8 C is the int32 sum truncated, which equals the reference's
sum wrapping in int16 (arithmetic mod 2^16 commutes with truncation). So the kernel can
neither saturate nor differ from the reference: the saturating ``vpmaddubsw`` (int16
intermediate sums; the overflow OpenVINO warns of on CPUs without VNNI) is never used.

**Layouts.** K is split into blocks of KC (a multiple of G); a block's ``kq = ceil(kc/G)``
groups. A packed A micro-panel of MR rows holds element ``(q, i, g)`` at ``(q*MR + i)*G + g``
(the G elements of one row's group are one 32-bit word, broadcast to every lane); a packed
B micro-panel of NR columns ``(q, j, g)`` at ``(q*NR + j)*G + g`` (VL columns' groups are
one vector), then, with int8 A, its NR int32 column sums. Elements past K or past the
operand's rows/columns are 0. With AMX, K blocks are whole 64-byte tile rows, and A's
micro-panel is row-major instead (row i at ``i * kq*4``: a tile is 16 rows of 64 bytes).

The kernel, its packers, block loop and micro-kernel are internal functions of the caller's
module, specialised to the shape's constants (int8 models have few distinct GEMM shapes, so
unlike gemm_library.py nothing is shared between kernels)::

    define void @name(i8* noalias %out, i8* noalias %in0, i8* noalias %in1, i64 %begin, i64 %end)
"""
from __future__ import annotations

import ctypes
import functools
import platform
import sys
from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from relaydsl import settings
from relaydsl.errors import SettingError
from relaydsl.backend.llvm.templates.gemm import (
    Blocking, GemmKernel, GemmSpec, choose_split, walk_units,
)
from relaydsl.backend.llvm.templates.irgen import (
    I1, I8, I32, I64, VOID, Gen, VectorGEP, c32, c64,
)

P8 = I8.as_pointer()
ISAS = settings.INT_ISAS  # best first
_WIDTH = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32}


@dataclass(frozen=True)
class IntTypes:
    """The element types of A, B and C (NumPy names)."""

    a: str
    b: str
    c: str

    @property
    def element_bits(self) -> int:
        return _WIDTH[self.b]

    @property
    def group(self) -> int:
        """G: elements of one dot-product group (one 32-bit word)."""
        return 32 // self.element_bits

    @property
    def offset_a(self) -> bool:
        """int8 A and B through vpdpbusd: A stored + 128 (unsigned), B's column sums
        correct it."""
        return self.a == "int8" and self.b == "int8"


def int_types(a: str, b: str, c: str) -> IntTypes | None:
    """The supported combinations: int8 with int8, uint8 with int8 (either way round), int16
    with int16, summed into int32, int16 or int8 (the wrapped int32 sum). None otherwise.

    >>> t = int_types("int8", "int8", "int32")
    >>> (t.group, t.offset_a), int_types("int8", "int16", "int32")
    ((4, True), None)
    """
    if (a, b) not in (("int8", "int8"), ("uint8", "int8"), ("int8", "uint8"), ("int16", "int16")):
        return None
    if c not in ("int32", "int16", "int8"):
        return None
    return IntTypes(a, b, c)


@dataclass(frozen=True)
class Isa:
    """The instruction set a kernel is written for, and its register blocking."""

    name: str  # one of ISAS
    vl: int  # int32 lanes of a vector
    mr: int
    nr: int

    @property
    def register(self) -> str:
        """The vector registers its dot products use (in assembly)."""
        return "zmm" if self.vl == 16 else "ymm"

    def __post_init__(self) -> None:
        if self.name not in ISAS or self.nr % self.vl:
            raise ValueError(f"bad integer GEMM ISA {self}")


_KNOWN = {"amx": Isa("amx", 16, 32, 32),  # a 32 x 32 C block in 4 tiles, 2 A and 2 B tiles
          # 28 zmm accumulators + 2 B vectors; A's group is an embedded broadcast operand
          "avx512vnni": Isa("avx512vnni", 16, 14, 32),
          "avxvnni": Isa("avxvnni", 8, 6, 16),  # 12 ymm accumulators + 2 B + 1 broadcast
          "generic": Isa("generic", 8, 4, 16)}


def _runs(name: str, flags: set[str], vector_bits: int, amx: bool) -> bool:
    """Whether a CPU with `flags` (and `amx` granted) runs `name`'s kernels, at vectors of
    `vector_bits` (the target's chosen width: 256 on a CPU with AVX-512 means ymm)."""
    vnni512 = {"+avx512f", "+avx512vnni"} <= flags
    return {"amx": amx and vnni512 and {"+amx-tile", "+amx-int8"} <= flags,
            "avx512vnni": vnni512 and vector_bits >= 512,
            "avxvnni": "+avxvnni" in flags or {"+avx512vnni", "+avx512vl"} <= flags,
            "generic": True}[name]


def select_isa(features: str, vector_bits: int, amx: bool = False, forced: str | None = None
               ) -> Isa:
    """The best ISA a CPU with LLVM `features` (``"+avx512vnni,..."``) runs for vectors of
    `vector_bits`, AMX tiles only where `amx` (the OS granted them: ``amx_permitted``); or
    `forced` (``$RELAYDSL_INT_ISA``), which the CPU must run.

    >>> select_isa("+avx512f,+avx512vnni,+avx512vl,+avxvnni", 512).name
    'avx512vnni'
    >>> select_isa("+avx512f,+avx512vnni,+avx512vl", 256).name
    'avxvnni'
    >>> select_isa("+avx2,+fma", 256).name
    'generic'
    >>> select_isa("+avx512f,+avx512vnni,+amx-tile,+amx-int8", 512, amx=True).name
    'amx'
    """
    flags = set(features.split(","))
    if forced is not None:
        if not _runs(forced, flags, vector_bits, amx):
            runs = ", ".join(n for n in ISAS if _runs(n, flags, vector_bits, amx))
            raise SettingError(f"RELAYDSL_INT_ISA={forced!r}: this CPU (or OS) does not run "
                               f"it; it runs {runs}")
        return _KNOWN[forced]
    return _KNOWN[next(name for name in ISAS if _runs(name, flags, vector_bits, amx))]


def host_isa() -> Isa:
    """The ISA of this process's integer kernels (``select_isa`` for the host CPU)."""
    from relaydsl.backend.llvm.jit import host_target

    target = host_target()
    amx = "+amx-int8" in target.features.split(",") and amx_permitted()
    return select_isa(target.features, target.vector_bits, amx, settings.int_isa())


@functools.cache
def amx_permitted() -> bool:
    """Whether this process may use AMX tiles: Linux grants them on request
    (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, once per process); elsewhere,
    or where the kernel refuses, no."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(158, 0x1023, 18) == 0  # SYS_arch_prctl, ..._PERM, XTILEDATA
    except (OSError, AttributeError):
        return False




AMX_MIN_M, AMX_MIN_K = 32, 128


def amx_pays(spec: GemmSpec) -> bool:
    """Whether AMX tiles beat AVX-512 VNNI on a GEMM of `spec`'s shape, for the ISA chosen
    by default (a forced ``$RELAYDSL_INT_ISA=amx`` is obeyed). AMX computes 32-row blocks
    with K padded to whole 64-byte tile rows: with fewer than AMX_MIN_M rows (a conv2d of 16
    output channels) or AMX_MIN_K depth (a 1x1 or 1-channel conv2d) most of each tile is
    padding. Measured one thread each, Intel Xeon with AMX, batch 100 int8 conv2d 3x3:
    16 -> 16 channels at 28x28 (M 16, K 144) AMX 2.5x slower than VNNI, 32 -> 64 at 7x7
    (M 64, K 288) 2x faster, 16 -> 32 at 14x14 (M 32, K 144) even.

    >>> from relaydsl.backend.llvm.templates.gemm import GemmSpec
    >>> conv = GemmSpec(m=16, n=784, k=144, a_strides=(144, 1), b_strides=(784, 1), ldc=784)
    >>> amx_pays(conv), amx_pays(GemmSpec(m=64, n=49, k=288, a_strides=(288, 1),
    ...                                   b_strides=(49, 1), ldc=49))
    (False, True)
    """
    return spec.m >= AMX_MIN_M and spec.k >= AMX_MIN_K


@dataclass(frozen=True)
class IntBlocking:
    """Cache blocking in elements: KC a multiple of G."""

    kc: int
    mc: int
    nc: int


def default_blocking(isa: Isa, types: IntTypes) -> IntBlocking:
    # KC x NR B micro-panel: 16 KiB in L1; MC x KC A block ~64 KiB and KC x NC B block
    # 512 KiB in L2 (2 MiB on Intel Xeons with AMX, 1 MiB on Zen 4/5)
    kc = 512 if types.element_bits == 8 else 256
    return IntBlocking(kc=kc, mc=isa.mr * max(1, 126 // isa.mr) if isa.name != "amx" else 128,
                       nc=1024)


# How a packer reads one micro-panel: ``rows(gen, src, x_t, nvalid, W)`` (src the operand's
# iE* for this batch entry, the panel's W columns starting at x_t, nvalid of them real) emits
# the set-up and returns ``row(k, k_in)``, which emits the read of the panel's elements at
# depth k as a <W x iE> vector: 0 in the lanes past nvalid or where k_in (an i1) is false,
# which it never reads. conv2d's implicit im2col is one (conv2d.py); strided operands another.
PanelRows = Callable[[Gen, ir.Value, ir.Value, ir.Value, int],
                     Callable[[ir.Value, ir.Value], ir.Value]]


def emit_int_gemm(module: ir.Module, name: str, spec: GemmSpec, types: IntTypes,
                  isa: Isa | None = None, blocking: IntBlocking | None = None,
                  rows_b: PanelRows | None = None) -> GemmKernel:
    """Defines ``void @name(i8* noalias out, i8* noalias in0, i8* noalias in1, i64 begin,
    i64 end)`` computing units [begin, end) of the returned kernel's ``parallel_extent``."""
    if isa is None:
        isa = host_isa()
        if isa.name == "amx" and settings.int_isa() is None and not amx_pays(spec):
            isa = _KNOWN["avx512vnni"]
    if isa.name == "amx" and (types.element_bits != 8 or spec.a_strides[1] != 1):
        # tiles of int8 only, A's rows read in place; every AMX CPU has AVX-512 VNNI
        isa = _KNOWN["avx512vnni"]
    bl = blocking or default_blocking(isa, types)
    g_ = types.group
    if bl.kc % g_ or min(spec.m, spec.n, spec.k) < 1:
        raise ValueError(f"bad integer GEMM blocking {bl} for {types}")
    mr, nr = isa.mr, isa.nr
    split = choose_split(spec, _as_float_blocking(isa))
    units = -(-spec.m // mr) if split == "M" else -(-spec.n // nr)
    nk = -(-spec.k // bl.kc)
    # balanced K blocks of whole groups (AMX: whole tiles of 64 bytes per row)
    step = 64 if isa.name == "amx" else g_
    kc_max = _ceil(_ceil(spec.k, nk), step) * step
    mc_max = min(bl.mc, -(-spec.m // mr) * mr)
    nc_max = min(bl.nc, -(-spec.n // nr) * nr)
    parts = _Parts(module, name, spec, types, isa, kc_max, rows_b)
    a_panel = kc_max * mr * 4 // types.group  # bytes of one packed micro-panel
    b_panel = kc_max * nr * 4 // types.group + (4 * nr if parts.offset else 0)
    block = parts.block(mc_max, nc_max)

    fn = _function(module, name, [P8, P8, P8, I64, I64], internal=False)
    out, in0, in1, begin, end = fn.args
    g = Gen(module, fn)
    b = g.b
    ap = g.stack(mc_max // mr * a_panel, "packed_a", I8)
    bp = g.stack(nc_max // nr * b_panel, "packed_b", I8)
    inputs = (in0, in1)
    ea, eb, ec = (_WIDTH[t] // 8 for t in (types.a, types.b, types.c))
    work, skip = g.block("work"), g.block("skip")
    b.cbranch(b.icmp_signed("<", begin, end), work, skip)
    b.position_at_end(skip)
    b.ret_void()
    b.position_at_end(work)

    def call_block(offs: list[ir.Value], r0: ir.Value, r1: ir.Value, c0: ir.Value,
                   c1: ir.Value) -> None:
        b.call(block, [g.at(inputs[spec.a_input], g.mul(offs[0], ea)),
                       g.at(inputs[spec.b_input], g.mul(offs[1], eb)),
                       g.at(out, g.mul(offs[2], ec)), r0, r1, c0, c1, ap, bp])

    walk_units(g, spec, split, mr, nr, begin, end, call_block)
    b.ret_void()
    return GemmKernel(fn, spec.batch_size * units, spec.flops)


def _ceil(x: int, y: int) -> int:
    return -(-x // y)


def _as_float_blocking(isa: Isa) -> Blocking:
    return Blocking(vl=isa.vl, mr=isa.mr, nr=isa.nr)


def _function(module: ir.Module, name: str, args: list[ir.Type], internal: bool = True
              ) -> ir.Function:
    fn = ir.Function(module, ir.FunctionType(VOID, args), name)
    if internal:
        fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg in fn.args:
        if isinstance(arg.type, ir.PointerType):
            arg.add_attribute("noalias")
    return fn


def _int(dtype: str) -> ir.IntType:
    return ir.IntType(_WIDTH[dtype])


class _Parts:
    """The kernel's internal functions: packers, micro-kernel, block loop."""

    def __init__(self, module: ir.Module, name: str, spec: GemmSpec, types: IntTypes, isa: Isa,
                 kc_max: int, rows_b: PanelRows | None):
        self.module, self.name, self.spec, self.types, self.isa = module, name, spec, types, isa
        self.kc_max = kc_max
        self.rows_b = rows_b
        self.et = _int(types.b)  # A and B have the same width
        self.e = types.element_bits // 8

    # ---- the dot product of one group -----------------------------------------------------

    def dot(self, b: ir.IRBuilder, acc: ir.Value, a: ir.Value, bv: ir.Value) -> ir.Value:
        """acc[l] + sum_g a[l, g] * bv[l, g]: `a`, `bv` are <VL*G x iE>, acc <VL x i32>."""
        isa, types = self.isa, self.types
        vl, g_ = isa.vl, types.group
        acc_t = ir.VectorType(I32, vl)
        op_t = ir.VectorType(self.et, vl * g_)
        if isa.name != "generic":
            op = "vpdpbusd" if types.element_bits == 8 else "vpdpwssd"
            bits = 32 * vl
            fn = _declare(self.module, f"llvm.x86.avx512.{op}.{bits}",
                          ir.FunctionType(acc_t, [acc_t, op_t, op_t]))
            # the unsigned operand first: uint8 A or B as it is, int8 A + 128 (offset_a)
            return b.call(fn, [acc, bv, a] if types.b == "uint8" else [acc, a, bv])
        wide = ir.VectorType(I32, vl * g_)

        def ext(x: ir.Value, dtype: str) -> ir.Value:
            return b.zext(x, wide) if dtype == "uint8" else b.sext(x, wide)

        prod = b.mul(ext(a, types.a), ext(bv, types.b))
        for j in range(g_):
            lanes = ir.Constant(ir.VectorType(I32, vl), [lane * g_ + j for lane in range(vl)])
            acc = b.add(acc, b.shuffle_vector(prod, ir.Constant(wide, ir.Undefined), lanes))
        return acc

    @property
    def offset(self) -> bool:
        """Whether A is stored + 128 and B carries column sums (vpdpbusd with int8 A)."""
        return self.types.offset_a and self.isa.name in ("avx512vnni", "avxvnni")

    def groups(self, b: ir.IRBuilder, kc: ir.Value) -> ir.Value:
        """kq: the groups of a K block of kc (AMX: whole tiles of 16 groups, zero-padded)."""
        step = 64 if self.isa.name == "amx" else self.types.group
        return b.mul(b.sdiv(b.add(kc, c64(step - 1)), c64(step)), c64(step // self.types.group))

    # ---- packing ----------------------------------------------------------------------------

    def packer(self, which: str) -> ir.Function:
        """``void (dst, src, x0, nx, k0, kc)``: ceil(nx/W) micro-panels of rows (A) or columns
        (B) [x0, x0+nx), depth [k0, k0+kc), zero-padded to W and to whole groups."""
        spec, g_ = self.spec, self.types.group
        width = self.isa.mr if which == "a" else self.isa.nr
        s_x, s_k = spec.a_strides if which == "a" else spec.b_strides[::-1]
        custom = self.rows_b if which == "b" else None
        fn = _function(self.module, f"{self.name}.pack_{which}", [P8, P8, I64, I64, I64, I64])
        dst, src, x0, nx, k0, kc = fn.args
        g = Gen(self.module, fn)
        b = g.b
        et = self.et
        esrc = b.bitcast(src, et.as_pointer())
        kq = self.groups(b, kc)
        if which == "a" and self.isa.name == "amx":
            self._pack_rows(g, dst, src, x0, nx, k0, kc, kq, s_x)
            b.ret_void()
            return fn
        # bytes of a micro-panel per row (A) or column (B): its groups, and a column's sum
        per_x = b.add(b.mul(kq, c64(4)), c64(4 if which == "b" and self.offset else 0))
        xor = which == "a" and self.offset
        with g.loop(0, nx, width, "t") as t:
            d = g.at(dst, b.mul(t, per_x))
            nvalid = g.min(b.sub(nx, t), width)
            x_t = b.add(x0, t)
            fast = custom is None and s_k == 1
            if fast:  # whole groups are contiguous in the source: one 32-bit word each
                full = b.and_(b.icmp_signed("==", nvalid, c64(width)),
                              b.icmp_signed("==", kc, b.mul(kq, c64(g_))))
                words, elements = g.block("words"), g.block("elements")
                join = g.block("join")
                b.cbranch(full, words, elements)
                b.position_at_end(words)
                wdst = b.bitcast(d, I32.as_pointer())
                with g.loop(0, kq, name="wq") as q, g.loop(0, width, name="ww") as w:
                    off = g.add(g.mul(g.add(x_t, w), s_x), g.add(k0, b.mul(q, c64(g_))))
                    word = b.load(b.bitcast(g.at(esrc, off), I32.as_pointer()), align=1)
                    if xor:
                        word = b.xor(word, c32(-0x7F7F7F80))  # 0x80808080
                    b.store(word, g.at(wdst, g.add(g.mul(q, width), w)), align=4)
                b.branch(join)
                b.position_at_end(elements)
            rows = (custom or self._strided_rows(s_x, s_k))(g, esrc, x_t, nvalid, width)
            op_t = ir.VectorType(et, width * g_)
            with g.loop(0, kq, name="q") as q:
                group = []
                for j in range(g_):
                    k = b.add(b.mul(q, c64(g_)), c64(j))
                    group.append(rows(b.add(k0, k), b.icmp_signed("<", k, kc)))
                val = _interleave(b, group)
                if xor:
                    val = b.xor(val, ir.Constant(op_t, [0x80] * (width * g_)))
                # by bytes: the alloc size of a vector of W*G != 2^n elements is rounded up
                b.store(val, b.bitcast(g.at(d, b.mul(q, c64(4 * width))), op_t.as_pointer()),
                        align=1)
            if fast:
                b.branch(join)
                b.position_at_end(join)
            if which == "b" and self.offset:
                self._column_sums(g, d, kq)
        b.ret_void()
        return fn

    def _strided_rows(self, s_x: int, s_k: int) -> PanelRows:
        """The rows of a strided operand: element (x, k) at ``src[x*s_x + k*s_k]``, a masked
        load of W elements where s_x is 1, else a masked gather."""
        et = self.et

        def rows(g: Gen, src: ir.Value, x_t: ir.Value, nvalid: ir.Value, width: int):
            b = g.b
            valid = g.lane_mask(nvalid, width)
            vec = ir.VectorType(et, width)
            zero = ir.Constant(vec, [0] * width)
            mask_t = ir.VectorType(I1, width)
            if s_x == 1:
                load = _declare(g.module, f"llvm.masked.load.v{width}i{et.width}.p0",
                                ir.FunctionType(vec, [vec.as_pointer(), I32, mask_t, vec]))
            else:
                vp = ir.VectorType(et.as_pointer(), width)
                load = _declare(g.module, f"llvm.masked.gather.v{width}i{et.width}.v{width}p0",
                                ir.FunctionType(vec, [vp, I32, mask_t, vec]))
                lanes = ir.Constant(ir.VectorType(I64, width), list(range(width)))
                cols = b.mul(b.add(g.splat(x_t, width), lanes),
                             ir.Constant(ir.VectorType(I64, width), [s_x] * width))

            def row(k: ir.Value, kin: ir.Value) -> ir.Value:
                mask = b.and_(valid, g.splat(kin, width))
                base = g.add(x_t, g.mul(k, s_k))
                if s_x == 1:
                    ptr = b.bitcast(g.at(src, base), vec.as_pointer())
                    return b.call(load, [ptr, c32(1), mask, zero])
                idx = b.add(cols, g.splat(g.mul(k, s_k), width))
                ptrs = VectorGEP(b.block, src, idx)
                b._insert(ptrs)
                return b.call(load, [ptrs, c32(1), mask, zero])
            return row

        return rows

    def _pack_rows(self, g: Gen, dst: ir.Value, src: ir.Value, x0: ir.Value, nx: ir.Value,
                   k0: ir.Value, kc: ir.Value, kq: ir.Value, s_x: int) -> None:
        """AMX's A panels: MR rows of kq*4 bytes each (A's rows, k contiguous in the source,
        zero past kc and past nx), 64 bytes at a time with masked loads."""
        b, width = g.b, self.isa.mr
        vec = ir.VectorType(I8, 64)
        load = _declare(g.module, "llvm.masked.load.v64i8.p0",
                        ir.FunctionType(vec, [vec.as_pointer(), I32, ir.VectorType(I1, 64), vec]))
        row_bytes = b.mul(kq, c64(4))
        with g.loop(0, nx, width, "t") as t, g.loop(0, width, name="i") as i, \
                g.loop(0, row_bytes, 64, "kk") as kk:
            live = b.icmp_signed("<", b.add(t, i), nx)
            mask = b.and_(g.lane_mask(b.sub(kc, kk), 64), g.splat(live, 64))
            x = b.select(live, b.add(x0, b.add(t, i)), x0)
            ptr = g.at(src, g.add(g.mul(x, s_x), b.add(k0, kk)))
            val = b.call(load, [b.bitcast(ptr, vec.as_pointer()), c32(1), mask,
                                ir.Constant(vec, [0] * 64)])
            out = g.at(dst, b.add(b.mul(b.add(t, i), row_bytes), kk))
            b.store(val, b.bitcast(out, vec.as_pointer()), align=1)

    def _tile_config(self) -> ir.GlobalVariable:
        """The 64-byte AMX configuration: palette 1, tiles 0-7 of 16 rows x 64 bytes."""
        name = f"{self.name}.tilecfg"
        data = [1] + [0] * 15 + [64, 0] * 8 + [0] * 16 + [16] * 8 + [0] * 8
        ty = ir.ArrayType(I8, 64)
        var = ir.GlobalVariable(self.module, ty, name)
        var.global_constant = True
        var.linkage = "internal"
        var.align = 64
        var.initializer = ir.Constant(ty, data)
        return var

    def _column_sums(self, g: Gen, panel: ir.Value, kq: ir.Value) -> None:
        """sum over k of each of the panel's NR columns, as int32 after its kq*NR groups (the
        dot product with unsigned ones, on the kernel's own instruction)."""
        b = g.b
        vl, nr, g_ = self.isa.vl, self.isa.nr, self.types.group
        acc_t = ir.VectorType(I32, vl)
        op_t = ir.VectorType(self.et, vl * g_)
        ones = ir.Constant(op_t, [1] * (vl * g_))
        sums = b.bitcast(g.at(panel, b.mul(kq, c64(nr * g_ * self.e))), acc_t.as_pointer())
        for v in range(nr // vl):
            b.store(ir.Constant(acc_t, [0] * vl), g.at(sums, v), align=4)
        with g.loop(0, kq, name="sq") as q:
            row = b.bitcast(g.at(panel, b.mul(q, c64(nr * g_ * self.e))), op_t.as_pointer())
            for v in range(nr // vl):
                p = g.at(sums, v)
                b.store(self.dot(b, b.load(p, align=4), ones, b.load(g.at(row, v), align=4)),
                        p, align=4)

    # ---- the micro-kernel ---------------------------------------------------------------------

    def microkernel(self) -> ir.Function:
        """``void (Ap, Bp, kq, C, mv, nv, first)``: C[:mv, :nv] = (or +=) Ap . Bp over kq groups
        (C's row stride: ldc elements)."""
        isa = self.isa
        fn = _function(self.module, f"{self.name}.ukernel", [P8, P8, I64, P8, I64, I64, I1])
        ap, bp, kq, c, mv, nv, first = fn.args
        g = Gen(self.module, fn)
        tmp = g.stack(isa.mr * isa.nr, "tile", I32)
        if isa.name == "amx":
            final = self._tile_products(g, ap, bp, kq, tmp)
        else:
            final = self._vector_products(g, ap, bp, kq)
        self._store(g, final, c, mv, nv, first, tmp)
        return fn

    def _vector_products(self, g: Gen, ap: ir.Value, bp: ir.Value, kq: ir.Value
                         ) -> list[list[ir.Value]]:
        """The MR x NR/VL accumulator vectors of Ap . Bp, on vector dot products."""
        isa, b = self.isa, g.b
        mr, nr, vl, g_ = isa.mr, isa.nr, isa.vl, self.types.group
        nvec = nr // vl
        acc_t = ir.VectorType(I32, vl)
        op_t = ir.VectorType(self.et, vl * g_)
        entry = b.block
        body, done = g.block("k.body"), g.block("k.end")
        b.cbranch(b.icmp_signed(">", kq, c64(0)), body, done)
        b.position_at_end(body)
        q, accs = g.accumulators(entry, "q", acc_t, mr, nvec)
        zero = ir.Constant(acc_t, [0] * vl)
        pa = b.bitcast(g.at(ap, b.mul(q, c64(mr * 4))), I32.as_pointer())
        pb = b.bitcast(g.at(bp, b.mul(q, c64(nr * 4))), op_t.as_pointer())
        bvs = [b.load(g.at(pb, v), align=4 * vl) for v in range(nvec)]
        new = []
        for i in range(mr):
            word = g.splat(b.load(g.at(pa, i), align=4), vl)
            a = b.bitcast(word, op_t)
            new.append([self.dot(b, accs[i][v], a, bvs[v]) for v in range(nvec)])
        q1 = b.add(q, c64(1), flags=["nsw"])
        q.add_incoming(q1, b.block)
        for i in range(mr):
            for v in range(nvec):
                accs[i][v].add_incoming(new[i][v], b.block)
        b.cbranch(b.icmp_signed("<", q1, kq), body, done)

        b.position_at_end(done)
        final = []
        for i in range(mr):
            row = []
            for v in range(nvec):
                phi = b.phi(acc_t)
                phi.add_incoming(zero, entry)
                phi.add_incoming(new[i][v], body)
                row.append(phi)
            final.append(row)
        if self.offset:  # subtract 128 * column sums (stored after the kq*NR groups)
            sums = b.bitcast(g.at(bp, b.mul(kq, c64(nr * 4))), acc_t.as_pointer())
            seven = ir.Constant(acc_t, [7] * vl)
            corr = [b.shl(b.load(g.at(sums, v), align=4), seven) for v in range(nvec)]
            final = [[b.sub(row[v], corr[v]) for v in range(nvec)] for row in final]
        return final

    def _tile_products(self, g: Gen, ap: ir.Value, bp: ir.Value, kq: ir.Value, tmp: ir.Value
                       ) -> list[list[ir.Value]]:
        """Ap . Bp on AMX tiles (C in tiles 0-3, A in 4-5, B in 6-7; the block function loaded
        their configuration), stored to `tmp` (MR x NR int32) and read back as vectors.

        A's panel is MR rows of kq*4 bytes (a tile: 16 rows at 64-byte steps of k), B's the
        usual kq rows of NR groups (a tile: 16 groups of 16 columns)."""
        b, module = g.b, self.module
        mr, nr, vl = self.isa.mr, self.isa.nr, self.isa.vl
        tile = ir.IntType(8)

        def intrinsic(name: str, args: list[ir.Type]) -> ir.Function:
            return _declare(module, f"llvm.x86.{name}", ir.FunctionType(VOID, args))

        load = intrinsic("tileloadd64", [tile, P8, I64])
        store = intrinsic("tilestored64", [tile, P8, I64])
        zero = intrinsic("tilezero", [tile])
        dot = intrinsic({("int8", "int8"): "tdpbssd", ("uint8", "int8"): "tdpbusd",
                         ("int8", "uint8"): "tdpbsud"}[(self.types.a, self.types.b)],
                        [tile] * 3)
        for t in range(4):
            b.call(zero, [ir.Constant(tile, t)])
        a_row = b.mul(kq, c64(4))  # bytes between A's rows
        with g.loop(0, kq, 16, "kt") as q:
            for t in range(2):
                b.call(load, [ir.Constant(tile, 4 + t),
                              g.at(ap, b.add(b.mul(a_row, c64(16 * t)), b.mul(q, c64(4)))), a_row])
                b.call(load, [ir.Constant(tile, 6 + t), g.at(bp, b.add(b.mul(q, c64(nr * 4)),
                                                                     c64(64 * t))), c64(nr * 4)])
            for i in range(2):
                for j in range(2):
                    b.call(dot, [ir.Constant(tile, 2 * i + j), ir.Constant(tile, 4 + i),
                                 ir.Constant(tile, 6 + j)])
        raw = b.bitcast(tmp, P8)
        for i in range(2):
            for j in range(2):
                b.call(store, [ir.Constant(tile, 2 * i + j), g.at(raw, 16 * i * nr * 4 + 64 * j),
                               c64(nr * 4)])
        acc_t = ir.VectorType(I32, vl)
        return [[b.load(b.bitcast(g.at(tmp, i * nr + v * vl), acc_t.as_pointer()), align=64)
                 for v in range(nr // vl)] for i in range(mr)]

    def _store(self, g: Gen, final: list[list[ir.Value]], c: ir.Value, mv: ir.Value,
               nv: ir.Value, first: ir.Value, tmp: ir.Value) -> None:
        """C[:mv, :nv] = (or, unless `first`, +=) the accumulators, narrowed to C's type."""
        isa, types, spec, b = self.isa, self.types, self.spec, g.b
        mr, nr, vl = isa.mr, isa.nr, isa.vl
        nvec = nr // vl
        acc_t = ir.VectorType(I32, vl)
        ct = _int(types.c)
        out_t = ir.VectorType(ct, vl)
        ldc = spec.ldc
        cp = b.bitcast(c, ct.as_pointer())

        def narrow(x: ir.Value) -> ir.Value:
            return x if ct.width == 32 else b.trunc(x, out_t)

        full = b.and_(b.icmp_signed("==", mv, c64(mr)), b.icmp_signed("==", nv, c64(nr)))
        fullb, edge = g.block("full"), g.block("edge")
        b.cbranch(full, fullb, edge)
        b.position_at_end(fullb)
        setb, addb = g.block("set"), g.block("accumulate")
        b.cbranch(first, setb, addb)
        for blk, accumulate in ((setb, False), (addb, True)):
            b.position_at_end(blk)
            for i in range(mr):
                for v in range(nvec):
                    p = b.bitcast(g.at(cp, i * ldc + v * vl), out_t.as_pointer())
                    val = narrow(final[i][v])
                    if accumulate:
                        val = b.add(b.load(p, align=1), val)
                    b.store(val, p, align=1)
            b.ret_void()

        b.position_at_end(edge)  # through a stack tile: rows < mv, columns < nv
        for i in range(mr):
            for v in range(nvec):
                b.store(final[i][v], b.bitcast(g.at(tmp, i * nr + v * vl), acc_t.as_pointer()),
                        align=64)
        keep = b.select(first, ir.Constant(ct, 0), ir.Constant(ct, -1))  # old C kept or not
        with g.loop(0, mv, name="ei") as i, g.loop(0, nv, name="ej") as j:
            p = g.at(cp, g.add(g.mul(i, ldc), j))
            val = b.load(g.at(tmp, g.add(g.mul(i, nr), j)), align=4)
            if ct.width != 32:
                val = b.trunc(val, ct)
            b.store(b.add(b.and_(b.load(p, align=1), keep), val), p, align=1)
        b.ret_void()

    # ---- the blocked sub-GEMM ----------------------------------------------------------------

    def block(self, mc_max: int, nc_max: int) -> ir.Function:
        """``void (A, B, C, r0, r1, c0, c1, Ap, Bp)``: C[r0:r1, c0:c1] = A[r0:r1] . B[:, c0:c1]
        (the operands' element 0 at A, B, C; their strides from the spec)."""
        spec, isa, types = self.spec, self.isa, self.types
        mr, nr = isa.mr, isa.nr
        pack_a, pack_b, ukernel = self.packer("a"), self.packer("b"), self.microkernel()
        fn = _function(self.module, f"{self.name}.block", [P8, P8, P8, I64, I64, I64, I64, P8, P8])
        a, bb, c, r0, r1, c0, c1, ap, bp = fn.args
        g = Gen(self.module, fn)
        b = g.b
        ec = _WIDTH[types.c] // 8
        kc_max, k = self.kc_max, spec.k
        if isa.name == "amx":  # this thread's tile configuration, released at the end
            b.call(_declare(self.module, "llvm.x86.ldtilecfg", ir.FunctionType(VOID, [P8])),
                   [b.bitcast(self._tile_config(), P8)])
        with g.loop(c0, c1, nc_max, "jc") as jc:
            nc = g.min(b.sub(c1, jc), nc_max)
            with g.loop(0, k, kc_max, "pc") as pc:
                kc = g.min(b.sub(c64(k), pc), kc_max)
                kq = self.groups(b, kc)
                first = b.icmp_signed("==", pc, c64(0))
                b.call(pack_b, [bp, bb, jc, nc, pc, kc])
                a_stride = b.mul(kq, c64(mr * 4))
                b_stride = b.add(b.mul(kq, c64(nr * 4)), c64(4 * nr if self.offset else 0))
                with g.loop(r0, r1, mc_max, "ic") as ic:
                    mc = g.min(b.sub(r1, ic), mc_max)
                    b.call(pack_a, [ap, a, ic, mc, pc, kc])
                    with g.loop(0, nc, nr, "jr") as jr:
                        nv = g.min(b.sub(nc, jr), nr)
                        bpanel = g.at(bp, b.mul(b.sdiv(jr, c64(nr)), b_stride))
                        with g.loop(0, mc, mr, "ir") as ir_:
                            mv = g.min(b.sub(mc, ir_), mr)
                            row = b.add(ic, ir_)
                            coff = g.add(g.mul(row, spec.ldc), b.add(jc, jr))
                            b.call(ukernel, [g.at(ap, b.mul(b.sdiv(ir_, c64(mr)), a_stride)),
                                             bpanel, kq, g.at(c, g.mul(coff, ec)), mv, nv, first])
        if isa.name == "amx":
            b.call(_declare(self.module, "llvm.x86.tilerelease", ir.FunctionType(VOID, [])), [])
        b.ret_void()
        return fn


def _interleave(b: ir.IRBuilder, rows: list[ir.Value]) -> ir.Value:
    """G vectors of W elements as one of W*G: element (j, g) at j*G + g (rows[g][j])."""
    g_, w = len(rows), rows[0].type.count
    while len(rows) > 1:  # concatenated: rows[g][j] at g*W + j
        n = rows[0].type.count
        both = ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n)))
        rows = [b.shuffle_vector(rows[i], rows[i + 1], both) for i in range(0, len(rows), 2)]
    order = ir.Constant(ir.VectorType(I32, g_ * w),
                        [g * w + j for j in range(w) for g in range(g_)])
    return b.shuffle_vector(rows[0], ir.Constant(rows[0].type, ir.Undefined), order)


def _declare(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    existing = module.globals.get(name)
    return existing if existing is not None else ir.Function(module, fnty, name)



