"""conv2d (NCHW data, OIHW weight) as an implicit GEMM on gemm.py's micro-kernel.

Per image ``n`` and group ``g`` the convolution is one GEMM

    out[n, g*Og:(g+1)*Og, :, :] (Og x OH*OW) = weight[g] (Og x Cg*KH*KW) . col (Cg*KH*KW x OH*OW)

with ``col[(c, ky, kx), (oy, ox)] = data[n, g*Cg + c, oy*sh + ky*dh - top, ox*sw + kx*dw - left]``
(0 outside the image). The output block is contiguous in NCHW, so C needs no copy.
``col`` is never materialised: the B packer builds each NR-wide micro-panel straight
from the image with ``llvm.masked.gather`` whose mask drops columns past the end and
taps in the padding, so padding reads as 0 and no load leaves the image.

The GEMM batch is (N, groups) (just groups for a single CHW example): the weight
broadcasts over N, data and output advance by whole group blocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from relaydsl.backend.llvm.templates.gemm import Blocking, GemmSpec
from relaydsl.backend.llvm.templates.gemm_library import PACK_ARGS
from relaydsl.backend.llvm.templates.irgen import (
    F32, I1, I32, I64, PF, Gen, VectorGEP, c32, c64, get_function,
    new_function,
)


@dataclass(frozen=True)
class ConvGeometry:
    batch: int | None  # None: a single CHW example
    cin: int
    h: int
    w: int
    cout: int
    kh: int
    kw: int
    oh: int
    ow: int
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]
    groups: int

    @property
    def cg(self) -> int:
        return self.cin // self.groups

    @property
    def og(self) -> int:
        return self.cout // self.groups

    @property
    def padded(self) -> bool:
        """Whether some tap can fall outside the image (then the packer checks bounds)."""
        (sh, sw), (dh, dw) = self.strides, self.dilation
        top, left = self.pads[:2]
        return (top > 0 or left > 0
                or (self.oh - 1) * sh + (self.kh - 1) * dh - top >= self.h
                or (self.ow - 1) * sw + (self.kw - 1) * dw - left >= self.w)

    def window_origins(self, b: ir.IRBuilder, pixels: ir.Value,
                       vconst: Callable[[int], ir.Constant]
                       ) -> tuple[ir.Value, ir.Value, ir.Value]:
        """For a vector of output pixels (row-major over oh x ow), each window's first input
        row and column (negative in the top or left padding) and their offset in the image:
        what both im2col packers (float and integer) read from."""
        (sh, sw), (top, left) = self.strides, self.pads[:2]
        oy = b.udiv(pixels, vconst(self.ow))
        ox = b.sub(pixels, b.mul(oy, vconst(self.ow)))
        iy0 = b.sub(b.mul(oy, vconst(sh)), vconst(top))
        ix0 = b.sub(b.mul(ox, vconst(sw)), vconst(left))
        return iy0, ix0, b.add(b.mul(iy0, vconst(self.w)), ix0)

    def tap_offsets(self, b: ir.IRBuilder, depth: ir.Value
                    ) -> tuple[ir.Value, ir.Value, ir.Value]:
        """For an int32 depth of ``col`` (channel, ky, kx, row-major), the tap's dilated row
        and column offsets and its offset in one image group: the other half of what both
        im2col packers read from."""
        khw = self.kh * self.kw
        c = b.udiv(depth, c32(khw))
        r = b.sub(depth, b.mul(c, c32(khw)))
        ky = b.udiv(r, c32(self.kw))
        kx = b.sub(r, b.mul(ky, c32(self.kw)))
        dh, dw = self.dilation
        dy, dx = b.mul(ky, c32(dh)), b.mul(kx, c32(dw))
        return dy, dx, b.add(b.add(b.mul(c, c32(self.h * self.w)), b.mul(dy, c32(self.w))), dx)

    def gemm_spec(self) -> GemmSpec:
        kg = self.cg * self.kh * self.kw
        p = self.oh * self.ow
        hw = self.h * self.w
        if self.batch is None:
            batch = (self.groups,)
            a_bs, b_bs, c_bs = (self.og * kg,), (self.cg * hw,), (self.og * p,)
        else:
            batch = (self.batch, self.groups)
            a_bs = (0, self.og * kg)
            b_bs = (self.cin * hw, self.cg * hw)
            c_bs = (self.cout * p, self.og * p)
        return GemmSpec(m=self.og, n=p, k=kg, a_strides=(kg, 1), b_strides=(p, 1), ldc=p,
                        batch=batch, a_batch_strides=a_bs, b_batch_strides=b_bs,
                        c_batch_strides=c_bs, a_input=1, b_input=0)


def emit_im2col_packer(geo: ConvGeometry):
    """A gemm.emit_gemm `pack_b` hook building col micro-panels from one image group; the
    GEMM library's sub-GEMM calls it through a pointer."""

    def emit(module: ir.Module, name: str, bl: Blocking) -> ir.Function:
        vl, nr = bl.vl, bl.nr
        vi = ir.VectorType(I32, vl)
        vf = ir.VectorType(F32, vl)
        vm = ir.VectorType(I1, vl)
        vp = ir.VectorType(PF, vl)
        gather = get_function(module, f"llvm.masked.gather.v{vl}f32.v{vl}p0",
                              ir.FunctionType(vf, [vp, I32, vm, vf]))
        fn = new_function(module, name, PACK_ARGS, noalias=(0, 1))
        dst, src, x0, nx, k0, kc = fn.args[:6]  # the strides (s_x, s_k) do not apply
        g = Gen(module, fn)
        b = g.b
        check = geo.padded
        zero = ir.Constant(vf, [0.0] * vl)

        def splat(x: ir.Value) -> ir.Value:
            return g.splat(x, vl)

        def vconst(v: int) -> ir.Constant:
            return ir.Constant(vi, [v] * vl)

        x1 = b.trunc(b.add(x0, nx), I32)
        with g.loop(0, nx, nr, "t") as t:
            d = g.at(dst, b.mul(t, kc))
            p_start = b.trunc(b.add(x0, t), I32)
            lanes = []
            for v in range(nr // vl):
                p = b.add(splat(b.add(p_start, c32(v * vl))), ir.Constant(vi, list(range(vl))))
                valid = b.icmp_signed("<", p, splat(x1))
                pc = b.select(valid, p, vconst(0))
                iy0, ix0, base = geo.window_origins(b, pc, vconst)
                lanes.append((valid, iy0, ix0, base))
            with g.loop(0, kc, name="k") as k:
                dy, dx, off = geo.tap_offsets(b, b.trunc(b.add(k0, k), I32))
                drow = g.at(d, b.mul(k, c64(nr)))
                for v, (valid, iy0, ix0, base) in enumerate(lanes):
                    mask = valid
                    if check:
                        iy = b.add(iy0, splat(dy))
                        ix = b.add(ix0, splat(dx))
                        inside = b.and_(b.icmp_unsigned("<", iy, vconst(geo.h)),
                                        b.icmp_unsigned("<", ix, vconst(geo.w)))
                        mask = b.and_(mask, inside)
                    idx = b.add(base, splat(off))  # masked-off lanes are never read
                    ptrs = VectorGEP(b.block, src, idx)
                    b._insert(ptrs)
                    val = b.call(gather, [ptrs, c32(4), mask, zero])
                    b.store(val, g.vptr(g.at(drow, v * vl), vl), align=64)
        b.ret_void()
        return fn

    return emit


MAX_SEGMENTS = 8  # output rows a panel may span for strided loads; beyond, a gather


def int_im2col_rows(geo: ConvGeometry):
    """An igemm.emit_int_gemm `rows_b` hook (igemm.PanelRows): a micro-panel's columns of
    ``col`` at one depth, read from one image group (0 in the padding, never read there).

    Stride 1 over rows as wide as the image: one masked load. Otherwise the panel's pixels
    fall in a few output rows (segments); in segment r pixel lane l reads ``A_r + l*sw``,
    so each segment is one masked load of W*sw elements whose every sw-th lane is kept
    (the float packer's per-lane gather of bytes would be W scalar loads)::

        %seg.r = call <W*sw x i8> @llvm.masked.load(ptr src + A_r, mask: lanes l*sw of r's)
        %row   = or (shufflevector %seg.r, [0, sw, 2sw, ...]) over r
    """

    def rows(g: Gen, src: ir.Value, x_t: ir.Value, nvalid: ir.Value, width: int):
        b = g.b
        et = src.type.pointee
        vi = ir.VectorType(I32, width)
        vec = ir.VectorType(et, width)
        mask_t = ir.VectorType(I1, width)
        gather = get_function(g.module, f"llvm.masked.gather.v{width}i{et.width}.v{width}p0",
                              ir.FunctionType(vec, [ir.VectorType(src.type, width), I32, mask_t,
                                                    vec]))
        top, left = geo.pads[:2]
        # stride 1 and as wide as the image ("same" 3x3, 1x1): pixel p's tap (c, ky, kx) is at
        # p + c*H*W + ky*dh*W + kx*dw - top*W - left, so a panel's `width` pixels read
        # contiguous elements (those in the padding masked off)
        contiguous = geo.strides == (1, 1) and geo.w == geo.ow
        load = get_function(g.module, f"llvm.masked.load.v{width}i{et.width}.p0",
                            ir.FunctionType(vec, [vec.as_pointer(), I32, mask_t, vec]))

        def splat(x: ir.Value) -> ir.Value:
            return g.splat(x, width)

        def vconst(v: int) -> ir.Constant:
            return ir.Constant(vi, [v] * width)

        valid = g.lane_mask(nvalid, width)
        p = b.add(splat(b.trunc(x_t, I32)), ir.Constant(vi, list(range(width))))
        pc = b.select(valid, p, vconst(0))
        iy0, ix0, base = geo.window_origins(b, pc, vconst)
        zero = ir.Constant(vec, [0] * width)

        (sh, sw), ow = geo.strides, geo.ow
        segments = min(geo.oh, (width - 1) // ow + 2)
        wide = ir.VectorType(et, width * sw)
        wide_mask = ir.VectorType(I1, width * sw)
        load_wide = get_function(g.module, f"llvm.masked.load.v{width * sw}i{et.width}.p0",
                                 ir.FunctionType(wide, [wide.as_pointer(), I32, wide_mask,
                                                        wide]))
        lanes = ir.Constant(vi, list(range(width)))
        oy_t = b.udiv(b.trunc(x_t, I32), c32(ow))  # the panel's first output row
        spread = ir.Constant(ir.VectorType(I32, width * sw),  # lane l to l*sw, the rest off
                             [j // sw if j % sw == 0 else width for j in range(width * sw)])
        falses = ir.Constant(mask_t, [0] * width)
        pick = ir.Constant(vi, [lane * sw for lane in range(width)])

        def strided(mask: ir.Value, off: ir.Value) -> ir.Value:
            out: ir.Value = zero
            for r in range(segments):
                oy = b.add(oy_t, c32(r))
                first = b.sub(b.mul(oy, c32(ow)), b.trunc(x_t, I32))  # lane of its pixel 0
                mine = b.and_(b.icmp_signed(">=", lanes, splat(first)),
                              b.icmp_signed("<", lanes, splat(b.add(first, c32(ow)))))
                seg_mask = b.shuffle_vector(b.and_(mask, mine), falses, spread)
                # A_r = (oy*sh - top)*W - left - first*sw + off
                start = b.add(b.sub(b.mul(b.sub(b.mul(oy, c32(sh)), c32(top)), c32(geo.w)),
                                    b.add(c32(left), b.mul(first, c32(sw)))), off)
                ptr = b.gep(src, [b.sext(start, I64)])  # may point outside: lanes masked
                seg = b.call(load_wide, [b.bitcast(ptr, wide.as_pointer()), c32(1), seg_mask,
                                         ir.Constant(wide, [0] * (width * sw))])
                out = b.or_(out, b.shuffle_vector(seg, ir.Constant(wide, ir.Undefined), pick))
            return out

        def row(k: ir.Value, k_in: ir.Value) -> ir.Value:
            dy, dx, off = geo.tap_offsets(b, b.trunc(k, I32))
            mask = b.and_(valid, splat(k_in))
            if geo.padded:
                inside = b.and_(b.icmp_unsigned("<", b.add(iy0, splat(dy)), vconst(geo.h)),
                                b.icmp_unsigned("<", b.add(ix0, splat(dx)), vconst(geo.w)))
                mask = b.and_(mask, inside)
            if contiguous:  # lane l at start + l: a masked load, no gather
                start = b.add(b.trunc(x_t, I32), b.sub(off, c32(top * geo.w + left)))
                ptr = b.gep(src, [b.sext(start, I64)])  # may point before src: lanes masked
                return b.call(load, [b.bitcast(ptr, vec.as_pointer()), c32(1), mask, zero])
            if segments <= MAX_SEGMENTS:
                return strided(mask, off)
            ptrs = VectorGEP(b.block, src, b.add(base, splat(off)))
            b._insert(ptrs)
            return b.call(gather, [ptrs, c32(1), mask, zero])

        return row

    return rows
