"""Vectorisable math for the code generator: te's ``Call`` intrinsics as LLVM IR.

libm's ``expf``/``tanhf`` and LLVM's ``llvm.exp`` stay scalar calls inside a
vectorised loop (see shared/PERFORMANCE.md), so float32 ``exp``, ``log``,
``tanh`` and ``sigmoid`` are written inline, branch-free, from arithmetic,
``select`` and bit casts that the loop vectoriser widens:

* exp: Cephes ``expf``: n = round(x log2 e) (by adding 1.5 2^23: n lands in the
  sum's low bits), r = x - n ln 2 (two-part ln 2), a degree-7 polynomial, times 2^n
  built from two exponent-field halves so that denormal results round once; NaN
  passes through the arithmetic.  ~1 ulp.
* log: Cephes ``logf``: x = m 2^e with m in [sqrt(1/2), sqrt(2)), a degree-8
  polynomial in m - 1; denormals rescaled by 2^23 first.  ~1 ulp.
* tanh: the Eigen/XLA rational approximation (odd degree-13 / even degree-6) on
  x clamped to [-7.9988, 7.9988], where it reaches +-1 exactly.  a few ulp.
* sigmoid: e / (1 + e) or 1 / (1 + e) with e = exp(-|x|) (keeps the relative
  accuracy of tiny results, which 0.5 + 0.5 tanh(x/2) loses for x << 0), by an
  exp for arguments <= 0 that scales by 2^n in one step.

Each instruction counts: the elementwise chain tanh(a x + b) sigmoid(x) on 10^6
floats spends more time computing than moving memory (measured on an Intel Xeon,
AVX-512, one thread: its loop took 63 instructions per 16 elements before these forms
and takes 47, 0.78x the CPU time in cache, 0.82x on 10^6 floats; XLA's takes 52 per 8).
A reciprocal estimate with a Newton step in place of the two divisions was slower.

float16 goes through the float32 code (but ``abs`` and ``sign``, exact, stay in
float16); float64 uses LLVM intrinsics and libm (scalar, accurate). ``sqrt``,
``floor``, ``ceil``, ``round`` (to even), ``trunc`` and ``abs`` are LLVM intrinsics
with vector instructions; ``sin``, ``cos`` and ``pow`` are ``llvm.*`` calls (scalar
libm); ``tan``, ``atan`` and ``erf`` call libm.

Every routine takes the IR builder and returns the value, e.g.::

    %t = call float @llvm.fmuladd.f32(float %x, float 1.442695, float 12583166.0)
    %n = fsub float %t, 12583166.0      ; round(x log2 e); bitcast %t to i32: n + 254 + ...
    %r = call float @llvm.fmuladd.f32(float %n, float -0.693359375, float %x)

``LOWERINGS`` holds one ``Lowering`` per intrinsic of te's table
(relaydsl/te/intrinsics.py, which has every other facet of it), keyed by the
``Intrinsic`` object; tests/backend/llvm/test_intrinsics.py fails for an intrinsic
without one. The code generator calls ``lower_call``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from relaydsl.te.intrinsics import (
    ABS, ATAN, CEIL, COS, ERF, EXP, FLOOR, LEFT_SHIFT, LOG, POW, RIGHT_SHIFT, ROUND, RSQRT,
    SIGMOID, SIGN, SIN, SQRT, TAN, TANH, TRUNC, Intrinsic,
)

F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
I32 = ir.IntType(32)


def type_suffix(t: ir.Type) -> str:
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.VectorType):  # llvm.roundeven.v16f32
        return f"v{t.count}{type_suffix(t.element)}"
    raise TypeError(f"no intrinsic suffix for {t}")


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """The declaration of ``name`` (e.g. ``llvm.fmuladd.f32``), added once per module."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def call1(b: ir.IRBuilder, base: str, x: ir.Value) -> ir.Value:
    """``llvm.<base>.<type>(x)``."""
    fn = intrinsic(b.module, f"llvm.{base}.{type_suffix(x.type)}", x.type, [x.type])
    return b.call(fn, [x])


def call2(b: ir.IRBuilder, base: str, x: ir.Value, y: ir.Value) -> ir.Value:
    fn = intrinsic(b.module, f"llvm.{base}.{type_suffix(x.type)}", x.type, [x.type, x.type])
    return b.call(fn, [x, y])


def fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    """x * y + z, fused where the target has FMA (``llvm.fmuladd``)."""
    fn = intrinsic(b.module, f"llvm.fmuladd.{type_suffix(x.type)}", x.type, [x.type] * 3)
    return b.call(fn, [x, y, z])


def const(t: ir.Type, v: float) -> ir.Constant:
    return ir.Constant(t, v)


def _horner(b: ir.IRBuilder, x: ir.Value, coeffs: list[float]) -> ir.Value:
    """coeffs[0] x^(n-1) + ... + coeffs[-1], by Horner's rule with fmuladd."""
    t = x.type
    acc = const(t, coeffs[0])
    for c in coeffs[1:]:
        acc = fma(b, acc, x, const(t, c))
    return acc


def _is_nan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", x, x)


# ---- float32 -----------------------------------------------------------------------------

_EXP_P = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1]
_SHIFTER = 12582912.0  # 1.5 * 2^23: t = y + _SHIFTER rounds y to an integer in t's low bits


def _clamp(b: ir.IRBuilder, x: ir.Value, lo: float | None, hi: float | None) -> ir.Value:
    """x clamped to [lo, hi], NaN kept (one vmaxps/vminps each: x86's max returns its second
    operand when either is NaN, and LLVM orders the operands so that it is x)."""
    t = x.type
    if lo is not None:
        x = b.select(b.fcmp_ordered("olt", x, const(t, lo)), const(t, lo), x)
    if hi is not None:
        x = b.select(b.fcmp_ordered("ogt", x, const(t, hi)), const(t, hi), x)
    return x


def _exp_reduced(b: ir.IRBuilder, x: ir.Value, bias: int, scale: float = 1.0
                 ) -> tuple[ir.Value, ir.Value]:
    """(p, bits) with exp(x) = p 2^n / scale, n = round(x log2 e), for x in [-104, 89]:
    Cephes' reduction and polynomial, p / scale in [0.7, 1.42] (`scale` a power of two: the
    coefficients scaled, the same roundings); ``bits`` is an i32 holding ``n + bias`` in
    its low bits (above them, bits that a left shift by 23 drops): the shifter trick, one
    fma where roundeven and fptosi (poison on NaN) took three instructions."""
    shifter = const(F32, _SHIFTER + bias)
    t = fma(b, x, const(F32, 1.44269504088896341), shifter)
    n = b.fsub(t, shifter)                                # exact
    r = fma(b, n, const(F32, -0.693359375), x)            # exact: C1 has 9 significant bits
    r = fma(b, n, const(F32, 2.12194440e-4), r)
    p = _horner(b, r, [c * scale for c in (*_EXP_P, 1.0, 1.0)])  # 1 + r + r^2 P(r)
    return p, b.bitcast(t, I32)


def _exponent(b: ir.IRBuilder, biased: ir.Value) -> ir.Value:
    """2^(e - 127) from an i32 whose low 8 bits are a biased exponent e in [1, 254] and whose
    bits from the 9th up are those of _SHIFTER's bits (they shift out)."""
    return b.bitcast(b.shl(biased, ir.Constant(I32, 23)), F32)


def exp_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """2^n applied in two halves 2^(n//2) 2^(n - n//2), so that a denormal result rounds
    once; NaN propagates through the arithmetic."""
    p, bits = _exp_reduced(b, _clamp(b, x, -104.0, 89.0), 254)  # n + 254 in [104, 382]
    half1 = b.ashr(bits, ir.Constant(I32, 1))             # shifter's bits / 2 + 127 + n // 2
    half2 = b.sub(bits, half1)                            # ... + 127 + n - n // 2
    return b.fmul(b.fmul(p, _exponent(b, half1)), _exponent(b, half2))


def exp_nonpositive_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """exp(x) for x <= 0 or NaN, four instructions fewer than ``exp_f32``: with n <= 0,
    (p 2^-64) 2^(n + 64) has both factors normal, and the product rounds once."""
    p, bits = _exp_reduced(b, _clamp(b, x, -104.0, None), 191, 2.0 ** -64)  # n + 191 in [41, 191]
    return b.fmul(p, _exponent(b, bits))


_LOG_P = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1]


def log_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    small = b.fcmp_ordered("olt", x, const(F32, 1.1754943508222875e-38))
    xs = b.select(small, b.fmul(x, const(F32, 8388608.0)), x)
    bits = b.bitcast(xs, I32)
    e_int = b.sub(b.and_(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0xFF)),
                  ir.Constant(I32, 126))
    e_int = b.sub(e_int, b.select(small, ir.Constant(I32, 23), ir.Constant(I32, 0)))
    m = b.bitcast(b.or_(b.and_(bits, ir.Constant(I32, 0x807FFFFF)), ir.Constant(I32, 0x3F000000)),
                  F32)                                     # in [0.5, 1)
    lt = b.fcmp_ordered("olt", m, const(F32, 0.707106781186547524))
    e = b.sitofp(b.sub(e_int, b.zext(lt, I32)), F32)
    m = b.fsub(b.select(lt, b.fadd(m, m), m), const(F32, 1.0))
    z = b.fmul(m, m)
    y = b.fmul(b.fmul(_horner(b, m, _LOG_P), m), z)
    y = fma(b, e, const(F32, -2.12194440e-4), y)
    y = fma(b, z, const(F32, -0.5), y)
    r = b.fadd(m, y)
    r = fma(b, e, const(F32, 0.693359375), r)
    inf = const(F32, float("inf"))
    r = b.select(b.fcmp_ordered("oeq", x, inf), inf, r)
    r = b.select(b.fcmp_ordered("oeq", x, const(F32, 0.0)), const(F32, float("-inf")), r)
    bad = b.or_(b.fcmp_ordered("olt", x, const(F32, 0.0)), _is_nan(b, x))
    return b.select(bad, const(F32, float("nan")), r)


_TANH_ALPHA = [-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
               5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
               4.89352455891786e-03]
_TANH_BETA = [1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
              4.89352518554385e-03]


def tanh_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Eigen's rational approximation with FMA, x P(x^2) / Q(x^2) on x clamped to
    [-clamp, clamp]: there it is exactly +-1 (beyond it, tanh rounds to 1 within an ulp),
    as it must be from 9.010914 on, where float32 rounds tanh to 1 (1 - tanh^2, the
    gradient of a saturated unit, is then 0, as JAX's). x times P/Q, not x P over Q, so
    that a denormal x loses no digits to x P; the clamps keep NaN."""
    xc = _clamp(b, x, -_TANH_CLAMP, _TANH_CLAMP)
    x2 = b.fmul(xc, xc)
    return b.fmul(xc, b.fdiv(_horner(b, x2, _TANH_ALPHA), _horner(b, x2, _TANH_BETA)))


# Where the approximation, evaluated with fused multiply-adds, reaches 1.0 (Eigen's).
_TANH_CLAMP = 7.99881172180175781


# ---- float32 or float64 ------------------------------------------------------------------


def exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """float32 inline (it vectorises); float64 ``llvm.exp`` (libm's, scalar, accurate)."""
    return exp_f32(b, x) if isinstance(x.type, ir.FloatType) else call1(b, "exp", x)


def log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return log_f32(b, x) if isinstance(x.type, ir.FloatType) else call1(b, "log", x)


def tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return tanh_f32(b, x) if isinstance(x.type, ir.FloatType) else _libm(b, "tanh", x)


def sigmoid(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e = exp(-|x|); (x < 0 ? e : 1) / (1 + e): no overflow, tiny results keep their digits."""
    t = x.type
    minus_abs = b.fsub(const(t, -0.0), call1(b, "fabs", x))
    e = exp_nonpositive_f32(b, minus_abs) if isinstance(t, ir.FloatType) else exp(b, minus_abs)
    num = b.select(b.fcmp_ordered("olt", x, const(t, 0.0)), e, const(t, 1.0))
    return b.fdiv(num, b.fadd(const(t, 1.0), e))


def rsqrt(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fdiv(const(x.type, 1.0), call1(b, "sqrt", x))


def float_sign(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """-1, 0 or 1; NaN stays NaN (NumPy)."""
    t = x.type
    one = const(t, 1.0)
    pos = b.select(b.fcmp_ordered("ogt", x, const(t, 0.0)), one, const(t, 0.0))
    s = b.select(b.fcmp_ordered("olt", x, const(t, 0.0)), const(t, -1.0), pos)
    return b.select(_is_nan(b, x), x, s)


def _libm(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    fn = intrinsic(b.module, name, x.type, [x.type])
    return b.call(fn, [x])


def libm(name: str) -> Callable[[ir.IRBuilder, ir.Value], ir.Value]:
    """libm's ``name`` on float64, ``name`` + "f" on float32 (for functions LLVM has no
    intrinsic of)."""
    return lambda b, x: _libm(b, name + "f" if isinstance(x.type, ir.FloatType) else name, x)


def llvm_unary(base: str) -> Callable[[ir.IRBuilder, ir.Value], ir.Value]:
    """``llvm.<base>.<type>(x)``."""
    return lambda b, x: call1(b, base, x)


# ---- integers (``unsigned``: the operands are uint8) ------------------------------------------


def int_abs(b: ir.IRBuilder, x: ir.Value, *, unsigned: bool) -> ir.Value:
    """abs of the minimum wraps, as NumPy's does."""
    if unsigned:
        return x
    zero = ir.Constant(x.type, 0)
    return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)


def int_sign(b: ir.IRBuilder, x: ir.Value, *, unsigned: bool) -> ir.Value:
    zero = ir.Constant(x.type, 0)
    gt = b.zext(b.icmp_unsigned("!=", x, zero) if unsigned else b.icmp_signed(">", x, zero),
                x.type)
    if unsigned:
        return gt
    return b.sub(gt, b.zext(b.icmp_signed("<", x, zero), x.type))


# The shifts are NumPy's: a count outside 0 .. bits-1 (negative ones too) shifts every bit
# out, where LLVM's shl/ashr/lshr would give poison.

def _bits(t: ir.Type) -> int:
    """The width of an integer type or of a vector's integer elements."""
    return (t.element if isinstance(t, ir.VectorType) else t).width


def left_shift(b: ir.IRBuilder, x: ir.Value, count: ir.Value, *, unsigned: bool) -> ir.Value:
    """The same signed or unsigned."""
    zero = ir.Constant(x.type, 0)
    in_range = b.icmp_unsigned("<", count, ir.Constant(x.type, _bits(x.type)))
    return b.select(in_range, b.shl(x, b.select(in_range, count, zero)), zero)


def right_shift(b: ir.IRBuilder, x: ir.Value, count: ir.Value, *, unsigned: bool) -> ir.Value:
    zero = ir.Constant(x.type, 0)
    in_range = b.icmp_unsigned("<", count, ir.Constant(x.type, _bits(x.type)))
    if unsigned:
        return b.select(in_range, b.lshr(x, b.select(in_range, count, zero)), zero)
    return b.ashr(x, b.select(in_range, count, ir.Constant(x.type, _bits(x.type) - 1)))


# ---- one lowering per te intrinsic -----------------------------------------------------------


@dataclass(frozen=True)
class Lowering:
    """How one te intrinsic becomes LLVM IR: ``on_float(b, *operands)`` on float32 or
    float64 operands, ``on_int(b, *operands, unsigned=...)`` on integers (None: the
    intrinsic's dtype rule admits none). float16 operands are widened to float32 and the
    result rounded back, unless ``widens_half`` is False: the result is then exact, and
    the half type's own instructions compute it. ``vectors``: the same instructions, lane by
    lane, on vector operands (<16 x float>: a template's epilogue in registers, epilogue.py);
    not where a float32 scalar gets code of its own (exp's polynomial) or libm is called."""

    on_float: Callable[..., ir.Value] | None = None
    on_int: Callable[..., ir.Value] | None = None
    widens_half: bool = True
    vectors: bool = True


LOWERINGS: dict[Intrinsic, Lowering] = {
    EXP: Lowering(exp, vectors=False),
    LOG: Lowering(log, vectors=False),
    SQRT: Lowering(llvm_unary("sqrt")),
    RSQRT: Lowering(rsqrt),
    TANH: Lowering(tanh, vectors=False),
    SIGMOID: Lowering(sigmoid, vectors=False),
    SIN: Lowering(llvm_unary("sin"), vectors=False),  # scalar libm calls
    COS: Lowering(llvm_unary("cos"), vectors=False),
    TAN: Lowering(libm("tan"), vectors=False),
    ATAN: Lowering(libm("atan"), vectors=False),
    ERF: Lowering(libm("erf"), vectors=False),
    FLOOR: Lowering(llvm_unary("floor")),
    CEIL: Lowering(llvm_unary("ceil")),
    ROUND: Lowering(llvm_unary("roundeven")),
    TRUNC: Lowering(llvm_unary("trunc")),
    POW: Lowering(lambda b, x, y: call2(b, "pow", x, y), vectors=False),
    ABS: Lowering(llvm_unary("fabs"), int_abs, widens_half=False),
    SIGN: Lowering(float_sign, int_sign, widens_half=False),
    LEFT_SHIFT: Lowering(on_int=left_shift),
    RIGHT_SHIFT: Lowering(on_int=right_shift),
}


def lower_call(b: ir.IRBuilder, intrinsic: Intrinsic, args: list[ir.Value], dtype: str
               ) -> ir.Value:
    """``intrinsic`` applied to ``args``, operands of the te dtype ``dtype``."""
    lowering = LOWERINGS[intrinsic]
    if dtype.startswith("float") and lowering.on_float is not None:
        if dtype == "float16" and lowering.widens_half:
            wide = [b.fpext(a, F32) for a in args]
            return b.fptrunc(lowering.on_float(b, *wide), F16)
        return lowering.on_float(b, *args)
    if not dtype.startswith("float") and lowering.on_int is not None:
        return lowering.on_int(b, *args, unsigned=dtype == "uint8")
    raise TypeError(f"intrinsic {intrinsic.name} is not defined on {dtype}")
