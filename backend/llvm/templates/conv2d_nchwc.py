"""conv2d_nchwc (data NCHW{i}c, weight OIHW{i}i{o}o) as direct convolution on the GEMM
library's micro-kernel, with no packing.

In the blocked layouts one output row's out-channel block is a sum of small GEMMs read in
place. For image ``n``, out-channel block ``ob``, output row ``oy``, in-channel block ``c``
and kernel row ``ky`` (input row ``iy = oy*sh + ky - top``), with ``k = kx*i + ci``:

    out[n, ob, oy, ox, :]  +=  sum_k  data[n, c, iy, ox*sw - left, k]  *  weight[ob, c, ky, k, :]

The data's ``(kx, ci)`` elements of one pixel's window are ``KW*i`` consecutive floats
(dilation 1), and one output pixel's are ``sw*i`` floats after the previous one's: A of the
micro-kernel (``a_rs = sw*i``, ``a_ks = 1``), read where it lies. The
weight's ``[ob, c, ky]`` slice is ``KW*i`` rows of ``o`` contiguous floats: exactly a
packed B micro-panel when ``o`` is the micro-tile's NR. So a tile of MR output pixels by
``o`` channels is ``C/i * KH`` calls of the micro-kernel, its accumulators in registers
within a call (the first call sets the tile, the others add to it).

Padding: a kernel row outside the image contributes nothing, so ``ky`` runs over the rows
inside it. A tile whose windows leave the row on the left or right (the first and last
tiles of a padded row, or a last tile of fewer than MR pixels) reads a copy of its input
span instead, zero outside the image, built on the stack for each call (a few hundred
floats against ``MR * o * KW * i`` multiply-adds).

Parallel units: one per (image, out-channel block, output row), which is the output's own
order, so a unit writes ``OW * o`` consecutive floats.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from relaydsl.backend.llvm.templates import gemm_library
from relaydsl.backend.llvm.templates.gemm import default_blocking
from relaydsl.backend.llvm.templates.gemm_library import MicroTile
from relaydsl.backend.llvm.templates.irgen import I1, I8, I64, PF, Gen, c64, new_function


@dataclass(frozen=True)
class BlockedConv:
    """A conv2d_nchwc call's static geometry (dilation 1)."""

    batch: int
    in_blocks: int  # C / i
    h: int
    w: int
    in_block: int  # i
    out_blocks: int  # O / o
    kh: int
    kw: int
    out_block: int  # o
    oh: int
    ow: int
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right

    @property
    def units(self) -> int:
        return self.batch * self.out_blocks * self.oh

    @property
    def flops(self) -> float:
        return 2.0 * self.units * self.ow * self.out_block * self.in_blocks * self.in_block \
            * self.kh * self.kw


def micro_tile(out_block: int, ow: int, vector_bits: int | None = None) -> MicroTile | None:
    """The micro-tile computing `out_block` channels of up to MR pixels: NR = `out_block`,
    and as many pixels as the host's GEMM tile has accumulators for (no more than a row
    has); None where `out_block` is not a whole number of vectors."""
    bl = default_blocking(vector_bits)
    if out_block % bl.vl:
        return None
    registers = bl.mr * (bl.nr // bl.vl)
    mr = min(registers // (out_block // bl.vl), ow)
    return MicroTile(bl.vl, mr, out_block) if mr >= 1 else None


def emit_blocked_conv(module: ir.Module, name: str, conv: BlockedConv, tile: MicroTile
                      ) -> ir.Function:
    """Defines ``void @name(float* out, float* data, float* weight, i64 begin, i64 end)``
    computing output rows (units) ``[begin, end)``, calling the micro-kernel of
    `tile` (a GEMM library part it declares)."""
    ukernel = gemm_library.declare_ukernel(module, tile)
    (sh, sw), (top, left) = conv.strides, conv.pads[:2]
    i, o, mr = conv.in_block, conv.out_block, tile.mr
    kc = conv.kw * i  # one kernel row's (kx, ci) elements
    span = (mr - 1) * sw + conv.kw  # input pixels a tile's windows cover
    memcpy = module.declare_intrinsic("llvm.memcpy", [I8.as_pointer(), I8.as_pointer(), I64])
    memset = module.declare_intrinsic("llvm.memset", [I8.as_pointer(), I64])

    fn = new_function(module, name, [PF, PF, PF, I64, I64], internal=False, noalias=(0, 1, 2))
    out, data, weight, begin, end = fn.args
    g = Gen(module, fn)
    b = g.b
    edge = g.stack(span * i, "edge")

    def bytes_(p: ir.Value) -> ir.Value:
        return b.bitcast(p, I8.as_pointer())

    def zero(p: ir.Value, floats: int) -> None:
        if floats > 0:
            b.call(memset, [bytes_(p), ir.Constant(I8, 0), c64(4 * floats), ir.Constant(I1, 0)])

    with g.loop(begin, end, name="unit") as unit:
        n = b.sdiv(unit, c64(conv.out_blocks * conv.oh))
        ob = b.srem(b.sdiv(unit, c64(conv.oh)), c64(conv.out_blocks))
        oy = b.srem(unit, c64(conv.oh))
        iy0 = b.sub(b.mul(oy, c64(sh)), c64(top))
        ky_lo = g.max(b.sub(c64(0), iy0), 0)
        ky_hi = g.min(b.sub(c64(conv.h), iy0), conv.kh)
        row = g.at(out, b.mul(unit, c64(conv.ow * o)))
        with b.if_then(b.icmp_signed(">=", ky_lo, ky_hi)):  # every tap in the padding
            zero(row, conv.ow * o)
        with g.loop(0, conv.in_blocks, name="c") as c, g.loop(ky_lo, ky_hi, name="ky") as ky:
            first = b.and_(b.icmp_signed("==", c, c64(0)), b.icmp_signed("==", ky, ky_lo))
            image = b.add(b.mul(n, c64(conv.in_blocks)), c)
            src = g.at(data, b.mul(b.add(b.mul(image, c64(conv.h)), b.add(iy0, ky)),
                                   c64(conv.w * i)))
            panel = b.add(b.mul(b.add(b.mul(ob, c64(conv.in_blocks)), c), c64(conv.kh)), ky)
            bp = g.at(weight, b.mul(panel, c64(kc * o)))
            def tile(ox: int | ir.Value, a: ir.Value) -> None:
                b.call(ukernel, [a, bp, c64(kc), g.at(row, g.mul(ox, o)), c64(o),
                                 g.min(b.sub(c64(conv.ow), g.val(ox)), mr), c64(o), first,
                                 c64(sw * i), c64(1)])

            inside = [ox for ox in range(0, conv.ow, mr)
                      if ox * sw - left >= 0 and ox * sw - left + span <= conv.w]
            for ox in range(0, conv.ow, mr):
                if inside and ox == inside[0]:  # the tiles read in place, in a loop
                    with g.loop(ox, inside[-1] + 1, mr, "ox") as x:
                        tile(x, g.at(src, b.mul(b.sub(b.mul(x, c64(sw)), c64(left)), c64(i))))
                if ox in inside:
                    continue
                ix = ox * sw - left  # the first input column of the tile's windows
                lo = min(max(0, -ix), span)
                hi = max(lo, min(span, conv.w - ix))
                zero(edge, lo * i)  # the span inside the image, zeros around it
                if hi > lo:
                    b.call(memcpy, [bytes_(g.at(edge, lo * i)), bytes_(g.at(src, (ix + lo) * i)),
                                    c64(4 * (hi - lo) * i), ir.Constant(I1, 0)])
                zero(g.at(edge, hi * i), (span - hi) * i)
                tile(ox, edge)
    b.ret_void()
    return fn


__all__ = ["BlockedConv", "emit_blocked_conv", "micro_tile"]
