"""int8 conv2d (NCHW int8/uint8 data, a constant OIHW int8 weight, int32 result) as direct
convolution on AVX-512 VNNI, the weight packed at build time.

The implicit-im2col integer GEMM (conv2d.py + igemm.py) gathers each image byte once per
kernel tap into B panels that only 16 to 64 output channels then reuse: on the ResNet-8 of
benchmarks/quantization.py its packing costs more than its dot products. Here each image is
rearranged once into ``vpdpbusd``'s operand layout, and every tap reads it in place:

**The image** (per image, on the stack): its channels in groups of 4, the 4 bytes of one
pixel one 32-bit word (the 4 byte products that ``vpdpbusd`` sums into one int32 lane), the
image padded and split into ``sh x sw`` stride phases, each phase a plane of ``Hq x Wq``
words (``Hq = ceil(Hp/sh)``, ``Wq = ceil(Wp/sw)`` of the padded ``Hp x Wp``)::

    P[(cq*sh + y%sh)*sw + x%sw][y//sh][x//sw] = word(data[4cq:4cq+4, y - top, x - left])

int8 data is stored + 128 (``x ^ 0x80``, unsigned, as ``vpdpbusd`` multiplies unsigned bytes
by signed ones), the padding as 128 (the stored 0); uint8 data as it is, padding 0.

A stem's few channels would leave most of each word 0 (1 channel: 3 of 4 bytes): where it
makes fewer groups, the kernel's columns are folded into the channels instead (``folded``:
group bytes (c, kx), the data's channel c read kx columns on, a kernel 1 column wide).

**Output pixels on the lanes, "wide"**: output pixel (oy, ox) is lane ``p = oy*Wq + ox`` of a
grid ``Wq`` wide (columns ``ox >= OW`` are computed and dropped). Tap (ky, kx) of pixel p is
then word ``p + (ky//sh)*Wq + kx//sw`` of plane (cq, ky%sh, kx%sw): 16 consecutive pixels'
words are one 64-byte load, whatever the stride, across row boundaries. So

    acc[oc][p..p+15] += vpdpbusd(P[plane][p + d .. p + d + 15], broadcast(Wt[oc][cq, ky, kx]))

over (cq, ky, kx), for a micro-tile of MR output channels by NV vectors of pixels in
registers (each pixel vector loaded once for MR channels, each weight word broadcast from
memory for NV vectors). The weight, a constant of the kernel, is packed here at build time
into ``Wt[oc/MR][cq][ky][kx][MR][4]`` (zero past the channels) with, for int8 data, the
correction ``128 * sum(weight[oc])`` subtracted once per tile (``sum (x + 128) w = sum x w +
128 sum w``; padding stored as 128 is the 0 it stands for).

**The store**: a vector's valid lanes (``ox < OW``) are consecutive in the NCHW output, so it
is compressed (``vpcompressd``, in registers) and stored under a mask of its first lanes.
With an epilogue (``emit_int_conv(..., epilogue)``, epilogue.py: the bias, requantisation,
relu or residual add fusion put after the conv2d), the compressed vector goes through it
in registers first, its reads of other buffers at the same pixels loaded under the same
mask, and the epilogue's result (int8, say) is what is stored: the int32 sums never are.

Parallel units: an image's MR output channels, image-major (as conv2d's GEMM's, so codegen's
``_chain`` runs the requantisation epilogue image by image while the result is in cache); a
call packs an image where it starts one, or starts amid one. Only where the integer
ISA is AVX-512 VNNI or AMX (every AMX CPU has it); other CPUs keep the implicit GEMM.

    define void @name(i8* noalias %out, i8* noalias %data, i8* noalias %weight,
                      i64 %begin, i64 %end)      ; %weight unused: packed into @name.weight
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import llvmlite.ir as ir
import numpy as np

from relaydsl.te.tensor import Tensor

from relaydsl.backend.llvm.epilogue import Epilogue, EpilogueEmitter, lanes_type
from relaydsl.backend.llvm.exprgen import memory_type
from relaydsl.backend.llvm.templates.conv2d import ConvGeometry
from relaydsl.backend.llvm.templates.irgen import (
    I1, I8, I32, I64, Gen, c32, c64, get_function, new_function,
)

VL = 16  # int32 lanes of a zmm
MR = 8  # output channels of a micro-tile
MAX_IMAGE_BYTES = 512 * 1024  # the packed image lives on the stack (threads have MiBs)


@dataclass(frozen=True, eq=False)
class IntConv(ConvGeometry):
    """An int8 conv2d's geometry (batched, groups 1, dilation 1), its data type and its
    constant weight."""

    data_dtype: str = "int8"  # int8 (stored + 128) or uint8
    weight: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0, 0), np.int8),
                               repr=False)  # int8 (cout, cin, kh, kw)
    # > 1: the data's kernel columns folded into the channels (int_conv): this conv's channel
    # c*folded + kx is the data's channel c shifted kx columns left, its kernel 1 wide
    folded: int = 1

    # by identity, not ConvGeometry's fields: the same geometry with another weight is
    # another kernel
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def groups4(self) -> int:
        return -(-self.cin // 4)

    @property
    def plane(self) -> tuple[int, int]:
        """Hq, Wq: a stride phase's rows and words per row."""
        (sh, sw), (top, left, bottom, right) = self.strides, self.pads
        return -(-(self.h + top + bottom) // sh), -(-(self.w + left + right) // sw)

    @property
    def wide_pixels(self) -> int:
        return self.oh * self.plane[1]

    @property
    def vectors(self) -> int:
        """NV: pixel vectors per micro-tile, the fewest lanes past the wide grid's end
        (MR x NV accumulators: at most 32 zmm with the NV pixel vectors)."""
        return min((1, 2, 3), key=lambda nv: (-(-self.wide_pixels // (VL * nv)) * nv, -nv))

    def image_words(self) -> int:
        """Words of the packed image, with the slack the last tiles' loads read past it."""
        hq, wq = self.plane
        sh, sw = self.strides
        nr = VL * self.vectors
        reach = -(-self.wide_pixels // nr) * nr + (self.kh - 1) // sh * wq + (self.kw - 1) // sw
        planes = self.groups4 * sh * sw
        return planes * hq * wq + max(0, reach - hq * wq) + VL

    @property
    def units(self) -> int:
        """Parallel units: (image, MR output channels), image-major."""
        return (self.batch or 1) * -(-self.cout // MR)

    @property
    def flops(self) -> float:
        macs = self.cout * self.oh * self.ow * self.cin * self.kh * self.kw
        return 2.0 * (self.batch or 1) * macs

    def packed_weight(self) -> tuple[np.ndarray, np.ndarray]:
        """``Wt[oc/MR][cq][ky][kx][MR][4]`` (int8) and per padded channel the int32
        correction subtracted from its sums (128 * its weights' sum for int8 data)."""
        tiles = -(-self.cout // MR)
        w = np.zeros((tiles * MR, self.groups4 * 4, self.kh, self.kw), np.int8)
        w[:self.cout, :self.cin] = self.weight
        packed = w.reshape(tiles, MR, self.groups4, 4, self.kh, self.kw).transpose(0, 2, 4, 5, 1, 3)
        offset = 128 if self.data_dtype == "int8" else 0
        corr = offset * w.astype(np.int64).sum(axis=(1, 2, 3))
        return np.ascontiguousarray(packed), corr.astype(np.int32)


def int_conv(batch: int, cin: int, h: int, w: int, weight: np.ndarray, oh: int, ow: int,
             strides: tuple[int, int], pads: tuple[int, int, int, int], data_dtype: str
             ) -> IntConv | None:
    """The direct int8 conv2d of this geometry, or None where it does not apply (another
    data or weight type, a packed image too large for the stack).

    >>> conv = int_conv(2, 3, 8, 8, np.ones((16, 3, 3, 3), np.int8), 8, 8, (1, 1), (1, 1, 1, 1),
    ...                 "int8")
    >>> conv.plane, conv.vectors, conv.packed_weight()[1][:2]
    ((10, 10), 1, array([3456, 3456], dtype=int32))
    """
    if data_dtype not in ("int8", "uint8") or weight.dtype != np.int8:
        return None
    cout, wc, kh, kw = weight.shape
    if wc != cin or min(strides) < 1 or min(pads) < 0:
        return None
    folded = 1
    if -(-cin * kw // 4) < -(-cin // 4) * kw:  # a stem's 1 or 2 channels: fewer groups
        # each column of the window a channel of its own, the 4 bytes of a group 4 (c, kx)
        folded, weight = kw, weight.transpose(0, 1, 3, 2).reshape(cout, cin * kw, kh, 1)
        cin, kw = cin * kw, 1
    conv = IntConv(batch, cin, h, w, cout, kh, kw, oh, ow, tuple(strides), tuple(pads), (1, 1),
                   1, data_dtype, np.ascontiguousarray(weight), folded)
    return conv if 4 * conv.image_words() <= MAX_IMAGE_BYTES else None


def emit_int_conv(module: ir.Module, name: str, conv: IntConv,
                  epilogue: Epilogue | None = None) -> ir.Function:
    """Defines ``void @name(i8* out, i8* data, i8* weight, i64 begin, i64 end)`` computing
    units [begin, end) of ``conv.units`` (int32 results), the weight read from its packed
    copy. With an `epilogue` (epilogue.py; its uniform axes the image and the channel), the
    epilogue's values instead, in its type, and its ``reads`` are pointers after the weight:
    ``(i8* out, i8* data, i8* weight, T0* read0, ..., i64 begin, i64 end)``."""
    packed, corr = conv.packed_weight()
    wt = _global(module, f"{name}.weight", ir.ArrayType(I8, packed.size),
                 bytearray(packed.tobytes()))
    ct = _global(module, f"{name}.corr", ir.ArrayType(I32, corr.size), [int(v) for v in corr])
    p8 = I8.as_pointer()
    extra = [memory_type(x.dtype).as_pointer() for x in (epilogue.reads if epilogue else ())]
    fn = new_function(module, name, [p8, p8, p8, *extra, I64, I64], internal=False,
                      noalias=range(3 + len(extra)))
    out, data, _, *reads = fn.args[:-2]
    begin, end = fn.args[-2:]
    g = Gen(module, fn)
    b = g.b
    image = g.stack(conv.image_words(), "image", I32)
    tile = _tile_function(module, name, conv, epilogue)
    wbase = b.bitcast(wt, p8)
    cbase = b.bitcast(ct, I32.as_pointer())
    out_t = memory_type(epilogue.tensor.dtype) if epilogue else I32
    out_image = b.bitcast(out, out_t.as_pointer())
    nr = VL * conv.vectors
    tiles_p = -(-conv.wide_pixels // nr)
    a_tile = conv.groups4 * conv.kh * conv.kw * MR * 4  # bytes of one channel tile's weight
    tiles_o = -(-conv.cout // MR)
    with g.loop(begin, end, name="u") as u:
        n, ot = b.sdiv(u, c64(tiles_o)), b.srem(u, c64(tiles_o))
        with b.if_then(b.or_(b.icmp_signed("==", u, begin), b.icmp_signed("==", ot, c64(0)))):
            image_bytes = conv.cin // conv.folded * conv.h * conv.w
            _pack_image(g, image, g.at(data, g.mul(n, image_bytes)), conv)
        with g.loop(0, tiles_p, name="pt") as pt:
            b.call(tile, [image, g.at(wbase, g.mul(ot, a_tile)), g.at(cbase, g.mul(ot, MR)),
                          out_image, b.mul(ot, c64(MR)), b.mul(pt, c64(nr)), n, *reads])
    b.ret_void()
    return fn


def _global(module: ir.Module, name: str, ty: ir.ArrayType, data: object) -> ir.GlobalVariable:
    var = ir.GlobalVariable(module, ty, name)
    var.global_constant = True
    var.linkage = "internal"
    var.align = 64
    var.initializer = ir.Constant(ty, data)
    return var


def _pack_image(g: Gen, image: ir.Value, src: ir.Value, conv: IntConv) -> None:
    """Fills `image` (i32*) from one NCHW image at `src` (i8*): the padding value everywhere,
    then per channel group, source row and 16 phase columns, 4 masked loads of 16*sw bytes
    (one per channel), each phase's lanes picked out and the 4 channels interleaved into 16
    words, stored under a mask of the plane's columns::

        %row_g = call <16*sw x i8> @llvm.masked.load(...)      ; channel 4cq+g, 16 columns
        %w     = shufflevector ... ; lane 4j+g = %row_g[j*sw + px]  (then ^ 0x80 for int8)
        call void @llvm.masked.store.v64i8(<64 x i8> %w, ...)
    """
    b = g.b
    (sh, sw), (top, left, _, _) = conv.strides, conv.pads
    hq, wq = conv.plane
    words = conv.image_words()
    fill = 0x80 if conv.data_dtype == "int8" else 0
    memset = g.module.declare_intrinsic("llvm.memset", [I8.as_pointer(), I64])
    raw = b.bitcast(image, I8.as_pointer())
    b.call(memset, [raw, ir.Constant(I8, fill), c64(4 * words), ir.Constant(I1, 0)])
    span = VL * sw
    wide = ir.VectorType(I8, span)
    wmask = ir.VectorType(I1, span)
    load = get_function(g.module, f"llvm.masked.load.v{span}i8.p0",
                        ir.FunctionType(wide, [wide.as_pointer(), I32, wmask, wide]))
    vec = ir.VectorType(I8, 4 * VL)
    store = get_function(g.module, "llvm.masked.store.v64i8.p0",
                         ir.FunctionType(ir.VoidType(), [vec, vec.as_pointer(), I32,
                                                         ir.VectorType(I1, 4 * VL)]))
    zero = ir.Constant(wide, [0] * span)
    lanes = ir.Constant(ir.VectorType(I32, span), list(range(span)))
    words4 = ir.Constant(ir.VectorType(I32, 4 * VL), [j // 4 for j in range(4 * VL)])
    xor = ir.Constant(vec, [fill] * (4 * VL))
    channels = conv.cin // conv.folded  # the data's
    with g.loop(0, conv.groups4, name="cq") as cq, g.loop(0, conv.h, name="y") as y, \
            g.loop(0, wq, VL, name="x0") as x0:
        start = b.sub(b.mul(x0, c64(sw)), c64(left))  # source column of lane 0
        rows = []
        for k in range(4):
            c = b.add(b.mul(cq, c64(4)), c64(k))
            shift = start
            if conv.folded > 1:  # channel c is the data's c // folded, c % folded columns on
                shift = b.add(start, b.urem(c, c64(conv.folded)))
                c = b.udiv(c, c64(conv.folded))
            sx = b.add(lanes, g.splat(b.trunc(shift, I32), span))
            real = b.and_(b.icmp_signed(">=", sx, g.splat(c32(0), span)),
                          b.icmp_signed("<", sx, g.splat(c32(conv.w), span)))
            if channels % 4 or conv.folded > 1:  # channels past the data's: any value
                ok = b.icmp_signed("<", c, c64(channels))  # (their weights are 0), none read
                real = b.and_(real, g.splat(ok, span))
                c = b.select(ok, c, c64(0))
            offset = b.add(b.mul(b.add(b.mul(c, c64(conv.h)), y), c64(conv.w)), shift)
            ptr = b.gep(src, [offset])  # may point outside the image: those lanes are masked
            rows.append(b.call(load, [b.bitcast(ptr, wide.as_pointer()), c32(1), real, zero]))
        yp = b.add(y, c64(top))
        py, yq = b.srem(yp, c64(sh)), b.sdiv(yp, c64(sh))
        live = b.icmp_signed("<", words4, g.splat(b.trunc(b.sub(c64(wq), x0), I32), 4 * VL))
        both = [b.shuffle_vector(rows[k], rows[k + 1], ir.Constant(
            ir.VectorType(I32, 2 * span), list(range(2 * span)))) for k in (0, 2)]
        for px in range(sw):
            # lane 4j+k: channel k's column j*sw + px (channel k at k*span of the four)
            full = b.shuffle_vector(both[0], both[1], ir.Constant(
                ir.VectorType(I32, 4 * VL),
                [k * span + j * sw + px for j in range(VL) for k in range(4)]))
            if fill:
                full = b.xor(full, xor)
            plane = b.add(b.mul(b.add(b.mul(cq, c64(sh)), py), c64(sw)), c64(px))
            word = b.add(b.add(b.mul(plane, c64(hq * wq)), b.mul(yq, c64(wq))), x0)
            dst = b.bitcast(g.at(image, word), vec.as_pointer())
            b.call(store, [full, dst, c32(4), live])


def _tile_function(module: ir.Module, name: str, conv: IntConv, epilogue: Epilogue | None
                   ) -> ir.Function:
    """``void @name.tile(i32* image, i8* wt, i32* corr, T* out, i64 oc0, i64 p0, i64 n,
    T0* read0, ...)``: output channels [oc0, oc0+MR) by wide pixels [p0, p0 + NV*16) of
    image n (out: the whole result's, of the epilogue's type T or int32)."""
    p8, p32 = I8.as_pointer(), I32.as_pointer()
    reads = epilogue.reads if epilogue else ()
    out_t = memory_type(epilogue.tensor.dtype) if epilogue else I32
    fn = new_function(module, f"{name}.tile",
                      [p32, p8, p32, out_t.as_pointer(), I64, I64, I64,
                       *[memory_type(x.dtype).as_pointer() for x in reads]],
                      noalias=[0, 1, 2, 3, *range(7, 7 + len(reads))])
    fn.attributes.add("alwaysinline")
    image, wt, corr, out, oc0, p0, n, *pointers = fn.args
    ptr = dict(zip(reads, pointers))
    g = Gen(module, fn)
    b = g.b
    nv = conv.vectors
    (sh, sw) = conv.strides
    hq, wq = conv.plane
    acc_t = ir.VectorType(I32, VL)
    op_t = ir.VectorType(I8, 4 * VL)
    dot = get_function(module, "llvm.x86.avx512.vpdpbusd.512",
                       ir.FunctionType(acc_t, [acc_t, op_t, op_t]))
    taps = [(ky, kx) for ky in range(conv.kh) for kx in range(conv.kw)]
    entry = b.block
    body, done = g.block("cq.body"), g.block("cq.end")
    b.branch(body)
    b.position_at_end(body)
    cq, accs = g.accumulators(entry, "cq", acc_t, MR, nv)
    new = [list(row) for row in accs]
    a_cq = b.mul(cq, c64(len(taps) * MR * 4))
    for t, (ky, kx) in enumerate(taps):
        plane = b.add(b.mul(cq, c64(sh * sw)), c64((ky % sh) * sw + kx % sw))
        word = b.add(b.add(b.mul(plane, c64(hq * wq)), p0), c64(ky // sh * wq + kx // sw))
        bvs = [b.load(b.bitcast(g.at(image, b.add(word, c64(VL * v))), op_t.as_pointer()),
                      align=4) for v in range(nv)]
        a_tap = b.bitcast(g.at(wt, b.add(a_cq, c64(t * MR * 4))), p32)
        for i in range(MR):
            a = b.bitcast(g.splat(b.load(g.at(a_tap, i), align=4), VL), op_t)
            for v in range(nv):
                new[i][v] = b.call(dot, [new[i][v], bvs[v], a])
    cq1 = b.add(cq, c64(1), flags=["nsw"])
    cq.add_incoming(cq1, b.block)
    for i in range(MR):
        for v in range(nv):
            accs[i][v].add_incoming(new[i][v], b.block)
    b.cbranch(b.icmp_signed("<", cq1, c64(conv.groups4)), body, done)
    b.position_at_end(done)
    emitter = EpilogueEmitter(module, b, ptr, epilogue) if epilogue else None
    _store(g, new, corr, out, oc0, p0, n, conv, emitter)
    b.ret_void()
    return fn


def _store(g: Gen, accs: list[list[ir.Value]], corr: ir.Value, out: ir.Value, oc0: ir.Value,
           p0: ir.Value, n: ir.Value, conv: IntConv, epilogue: EpilogueEmitter | None) -> None:
    """Each accumulator row minus its channel's correction, its valid lanes compressed to
    the front (as the NCHW result holds them), through the epilogue if there is one (in
    registers: its reads of the same pixels are loads of as many lanes from the same
    place), stored at their NCHW place (a masked store of the first lanes)::

        %c = call <16 x i32> @llvm.x86.avx512.mask.compress.v16i32(%acc, undef, %valid)
        %r = call <16 x i8> @llvm.masked.load.v16i8(%residual + %at, 1, %first, zeroinitializer)
        ... the epilogue of %c and %r ...
        call void @llvm.masked.store.v16i8(%e, %out + %at, 1, %first)  ; %first: popcount lanes
    """
    b = g.b
    _, wq = conv.plane
    acc_t = ir.VectorType(I32, VL)
    mask_t = ir.VectorType(I1, VL)
    compress = get_function(g.module, "llvm.x86.avx512.mask.compress.v16i32",
                            ir.FunctionType(acc_t, [acc_t, acc_t, mask_t]))
    ctpop = g.module.declare_intrinsic("llvm.ctpop", [ir.IntType(VL)])
    lanes = ir.Constant(acc_t, list(range(VL)))
    plane_px = conv.oh * conv.ow
    contiguous = wq == conv.ow
    places = []
    for v in range(len(accs[0])):
        p = b.add(p0, c64(VL * v))
        ps = b.add(lanes, g.splat(b.trunc(p, I32), VL))
        valid = b.icmp_signed("<", ps, g.splat(c32(conv.wide_pixels), VL))
        if not contiguous:
            valid = b.and_(valid, b.icmp_unsigned("<", b.urem(ps, g.splat(c32(wq), VL)),
                                                  g.splat(c32(conv.ow), VL)))
        oy, ox = b.sdiv(p, c64(wq)), b.srem(p, c64(wq))
        at = b.add(b.mul(oy, c64(conv.ow)), g.min(ox, conv.ow))  # its first valid lane's place
        count = b.call(ctpop, [b.bitcast(valid, ir.IntType(VL))])
        first = b.icmp_signed("<", lanes, g.splat(b.zext(count, I32), VL))
        places.append((valid, at, first))
    for i, row in enumerate(accs):
        oc = b.add(oc0, c64(i))
        live, skip = g.block("row"), g.block("next")
        b.cbranch(b.icmp_signed("<", oc, c64(conv.cout)), live, skip)
        b.position_at_end(live)
        fix = g.splat(b.load(g.at(corr, i), align=4), VL)
        row_at = b.mul(b.add(b.mul(n, c64(conv.cout)), oc), c64(plane_px))  # (n, oc, 0, 0)
        if epilogue is not None:
            epilogue.begin_row([n, oc])
        for acc, (valid, at, first) in zip(row, places):
            val = b.sub(acc, fix)
            if not contiguous:
                val = b.call(compress, [val, ir.Constant(acc_t, ir.Undefined), valid])
            place = b.add(row_at, at)
            if epilogue is not None:
                val = epilogue.apply(val, partial(_lane_read, g, epilogue.ptr, place, first))
            g.masked_store(val, g.at(out, place), first, VL)
        b.branch(skip)
        b.position_at_end(skip)


def _lane_read(g: Gen, ptr: dict[Tensor, ir.Value], place: ir.Value, first: ir.Value,
               x: Tensor) -> ir.Value:
    """Buffer x's elements of a vector's valid pixels (at `place` in NCHW, as many as the
    `first` lanes), in the lanes the compressed results hold them."""
    return g.masked_load(g.at(ptr[x], place), first, VL, lanes_type(x.dtype).element)


__all__ = ["IntConv", "emit_int_conv", "int_conv"]
