"""The sequential nearest-even reduction with float32 lanes: the CPU's fastest exact form for the
three common accumulators (fp32, fp16, bf16), eight lanes to a 256-bit vector instead of four.

Where it applies (:func:`lanes32_kind`, decided on the host): sequential order, exact products,
round to nearest even with subnormals kept and no saturation, and terms that float32 holds
exactly (products of fp16, fp8, ... inputs: at most 24 significant bits, all multiples of
2^-149, below 2^127). Then with s the accumulator (a value of its format, so a float32) and
t = a * b (exact in float32):

* fp32 accumulator: ``fl32(s + t)`` *is* s + t rounded once to fp32 (IEEE addition: subnormals,
  overflow to inf, the sign of an exact zero, inf and NaN included). Nothing else to do.
* fp16 and bf16 accumulators: ``s + t`` rounded to *odd* in float32 (TwoSum gives the float32
  sum x and its exact error; an inexact x with an even last bit moves one step toward s + t),
  then rounded to the accumulator (fp16: the hardware conversion float32 -> fp16 -> float32,
  F16C's ``vcvtps2ph``; bf16: the integer round-to-nearest-even on the pattern's low 16 bits).
  Rounding to odd with at least two bits more than the target, then to nearest, is one
  correct rounding of the exact value (Boldo & Melquiond, "Emulation of FMA and correctly
  rounded sums: proved algorithms using rounding to odd", IEEE TC 57(4), 2008): float32 has
  24 bits against fp16's 11 and bf16's 8, and its exponent range covers both formats,
  subnormals included. The float64 kernels take the same route (``scalar.add_odd``).

The float32 rounding of the accumulator needs the CPU to convert float32 <-> fp16 in hardware
(x86 F16C, or AArch64): :func:`f16_native` says so, otherwise fp16 accumulators use the
float64 kernels. Tested against the float64 forms and exact rational arithmetic in
``tests/test_reduce_kernels.py``.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, register_jitable

from .fastround import round_fast_nearest_even

# Kinds (lanes32_kind).
NONE = 0
FP32 = 1
FP16 = 2
BF16 = 3


@intrinsic
def round_f32_to_f16(typingctx, x):
    """float32 -> fp16 (nearest even, IEEE: subnormals, overflow to inf, -0, NaN) -> float32:
    two instructions with F16C."""
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def codegen(context, builder, signature, args):
            return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

        return types.float32(x), codegen
    return None


@intrinsic
def round_f32_to_bf16(typingctx, x):
    """float32 -> bf16 (nearest even) -> float32 on the bit pattern: add 0x7FFF plus the last
    kept bit, clear the low 16 bits. A carry runs into the exponent exactly as rounding up
    does (a subnormal becomes normal, max becomes inf); the sign and zeros are untouched;
    a NaN is returned as it is (the addition could carry its payload into the sign)."""
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            b = builder.bitcast(args[0], i32)
            lsb = builder.and_(builder.lshr(b, ir.Constant(i32, 16)), ir.Constant(i32, 1))
            r = builder.add(b, builder.add(lsb, ir.Constant(i32, 0x7FFF)))
            r = builder.and_(r, ir.Constant(i32, 0xFFFF0000))
            y = builder.bitcast(r, ir.FloatType())
            nan = builder.fcmp_unordered("uno", args[0], args[0])
            return builder.select(nan, args[0], y)

        return types.float32(x), codegen
    return None


@intrinsic
def f32_bits(typingctx, x):
    """The float32's bit pattern as an int32 (one bitcast)."""
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(32))

        return types.int32(x), codegen
    return None


@functools.cache
def f16_native() -> bool:
    """Whether this CPU converts float32 <-> fp16 in hardware (x86 F16C, AArch64): otherwise
    LLVM would call a library routine numba may not link."""
    import platform

    from llvmlite import binding

    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return True
    try:
        return bool(binding.get_host_cpu_features().get("f16c", False))
    except Exception:  # noqa: BLE001 - an unknown CPU: take the float64 kernels
        return False


def lanes32_kind(acc_name: str, term_precision: int, term_lo: int, term_emax: int,
                 subnormals: bool, saturate: bool) -> int:  # fmt: skip
    """The float32-lane kernel for an accumulator (by format name, ``fp32``/``fp16``/``bf16``)
    and terms of ``term_precision`` bits, multiples of 2^term_lo, below 2^(term_emax + 1); NONE
    where it does not apply (the caller also requires the sequential order, exact products,
    nearest even, no trace)."""
    if not subnormals or saturate:
        return NONE
    if term_precision > 24 or term_lo < -149 or term_emax > 126:
        return NONE  # a term float32 does not hold exactly
    if acc_name == "fp32":
        return FP32
    if acc_name == "bf16":
        return BF16
    if acc_name == "fp16" and f16_native():
        return FP16
    return NONE


# ---- the lane loops --------------------------------------------------------------------------
@intrinsic
def odd_f32(typingctx, x, err):
    """The float32 ``x = fl(v)`` (nearest even) rounded to odd, from the exact error
    ``err = v - x``: an inexact x with an even last bit moves one step (of the bit pattern, which
    orders magnitudes) toward v -- away from zero when err and x have the same sign. An
    infinite x (err NaN) stays, as does an exact one (err = +-0)."""
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            b = builder.bitcast(args[0], i32)
            e = builder.bitcast(args[1], i32)
            inexact = builder.fcmp_ordered("one", args[1], ir.Constant(ir.FloatType(), 0.0))
            last = builder.and_(b, ir.Constant(i32, 1))
            even = builder.icmp_unsigned("==", last, ir.Constant(i32, 0))
            sign = builder.ashr(builder.xor(b, e), ir.Constant(i32, 31))  # 0 same sign, else -1
            step = builder.or_(sign, ir.Constant(i32, 1))  # +1 away from zero, -1 toward it
            moved = builder.add(b, step)
            odd = builder.select(builder.and_(inexact, even), moved, b)
            return builder.bitcast(odd, ir.FloatType())

        return types.float32(x, err), codegen
    return None


@register_jitable
def add_odd_f32(s, t):
    """``s + t`` rounded to odd in float32 (TwoSum: the float32 sum and its exact error)."""
    x = s + t
    bb = x - s
    err = (s - (x - bb)) + (t - bb)
    return odd_f32(x, err)


def _row_of_kind(kind: int):
    """The rows function for one kind, ``kind`` a constant of its code: each kernel then compiles
    only its own loops (the others are dead code the compiler drops before vectorising)."""

    @register_jitable
    def first(D, a, Bk, n):
        """``D[j] = acc(a * Bk[j])``: each lane's first term rounded alone (one rounding)."""
        if kind == FP16:
            for j in range(n):
                D[j] = round_f32_to_f16(a * Bk[j])
        elif kind == BF16:
            for j in range(n):
                D[j] = round_f32_to_bf16(a * Bk[j])
        else:
            for j in range(n):
                D[j] = a * Bk[j]

    @register_jitable
    def step(S, D, a, Bk, n):
        """``D[j] = acc(S[j] + a * Bk[j])`` for every lane (``S``, ``D`` distinct)."""
        if kind == FP16:
            for j in range(n):
                D[j] = round_f32_to_f16(add_odd_f32(S[j], a * Bk[j]))
        elif kind == BF16:
            for j in range(n):
                D[j] = round_f32_to_bf16(add_odd_f32(S[j], a * Bk[j]))
        else:
            for j in range(n):
                D[j] = S[j] + a * Bk[j]

    @register_jitable
    def row(A, B, out, bi, i, j0, m, W, KO, unit):
        """``out[bi, i, j0 + j]`` for j < m: the sequential nearest-even reduction of lane j's
        terms ``A[bi, i, k] * B[bi, k, j0 + j]`` (a sum, ``unit``: ``A[bi, i, k]``) with float32
        lanes, then one rounding to the output format (``fastround.round_fast_nearest_even``
        with the constants ``KO``, an array: no format records to compile). ``A``, ``B``:
        float32; ``W``: float32 work, (3, >= m)."""
        K = A.shape[2]
        Ar = A[bi, i]
        W[2, 0] = 1.0  # a sum's "B": every term times 1 (exact)
        S = W[0, :m]
        D = W[1, :m]
        if K > 0:
            first(S, Ar[0], W[2, :1] if unit else B[bi, 0, j0:j0 + m], m)
        for k in range(1, K):
            step(S, D, Ar[k], W[2, :1] if unit else B[bi, k, j0:j0 + m], m)
            S, D = D, S  # (in place, the compiler's overlap test would take its scalar loop)
        o = out[bi, i, j0:j0 + m]
        for j in range(m):
            o[j] = round_fast_nearest_even(np.float64(S[j]) if K > 0 else 0.0, KO)

    @register_jitable
    def rows(A, B, out, KO, unit, r0, r1):
        """Rows ``r0 <= r < r1`` of the result (row r: ``out[r // n, r % n, :]``), in tiles of
        1024 lanes (all rows of the range on a tile before the next)."""
        m = out.shape[2]
        jt = max(min(m, 1024), 1)
        W = np.empty((3, jt), np.float32)
        n = out.shape[1]
        for j0 in range(0, m, jt):
            for r in range(r0, r1):
                row(A, B, out, r // n, r % n, j0, min(jt, m - j0), W, KO, unit)

    return rows


rows_fp32 = _row_of_kind(FP32)
rows_fp16 = _row_of_kind(FP16)
rows_bf16 = _row_of_kind(BF16)
