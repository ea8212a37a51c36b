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
  That TwoSum is needed only where the plain float32 sum lands exactly on a midpoint of the
  accumulator's grid: elsewhere the plain sum rounds like the exact one. So the loop rounds
  the plain sum eight lanes at a time in explicit 256-bit vectors (:data:`step8_f16`,
  :data:`step8_bf16`: numba's vectoriser gives up on a loop that both rounds and flags) and
  redoes only the flagged lanes.

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


def _vec_step_codegen(kind: int):
    """LLVM code for :func:`step8_f16` / :func:`step8_bf16` (see there)."""

    def codegen(context, builder, signature, args):
        S, D, a, B, j = args
        f32, i32 = ir.FloatType(), ir.IntType(32)
        v8f, v8i = ir.VectorType(f32, 8), ir.VectorType(i32, 8)

        def ptr(ary_ty, ary):  # &ary[j] as a pointer to 8 float32
            data = context.make_array(ary_ty)(context, builder, ary).data
            return builder.bitcast(builder.gep(data, [j]), v8f.as_pointer())

        def splat(v, ty):
            return ir.Constant(ty, [v] * 8)

        s = builder.load(ptr(signature.args[0], S), align=4)
        b = builder.load(ptr(signature.args[3], B), align=4)
        va = builder.insert_element(ir.Constant(v8f, None), a, ir.Constant(i32, 0))
        va = builder.shuffle_vector(va, va, ir.Constant(v8i, [0] * 8))
        t = builder.fmul(va, b)
        x = builder.fadd(s, t)
        bits = builder.bitcast(x, v8i)
        if kind == FP16:
            r = builder.fpext(builder.fptrunc(x, ir.VectorType(ir.HalfType(), 8)), v8f)
            ab = builder.and_(bits, splat(0x7FFFFFFF, v8i))
            low = builder.and_(ab, splat(0x1FFF, v8i))
            mid = builder.icmp_unsigned("==", low, splat(0x1000, v8i))
            tiny = builder.and_(builder.icmp_unsigned("<", ab, splat(0x38800000, v8i)),
                                builder.icmp_unsigned("!=", ab, splat(0, v8i)))
            flag = builder.or_(mid, tiny)
        else:
            lsb = builder.and_(builder.lshr(bits, splat(16, v8i)), splat(1, v8i))
            rb = builder.add(bits, builder.add(lsb, splat(0x7FFF, v8i)))
            rb = builder.and_(rb, splat(0xFFFF0000 - 2**32, v8i))
            nan = builder.fcmp_unordered("uno", x, x)
            r = builder.select(nan, x, builder.bitcast(rb, v8f))
            low = builder.and_(bits, splat(0xFFFF, v8i))
            flag = builder.icmp_unsigned("==", low, splat(0x8000, v8i))
        builder.store(r, ptr(signature.args[1], D), align=4)
        return builder.zext(builder.bitcast(flag, ir.IntType(8)), i32)

    return codegen


def _vec_step(kind: int):
    def typer(typingctx, S, D, a, B, j):
        arrs = (S, D, B)
        if all(isinstance(t, types.Array) and t.ndim == 1 and t.layout == "C"
               and t.dtype == types.float32 for t in arrs) and a == types.float32 \
                and isinstance(j, types.Integer):  # fmt: skip
            return types.int32(S, D, a, B, j), _vec_step_codegen(kind)
        return None

    return intrinsic(typer)


step8_f16 = _vec_step(FP16)
step8_f16.__doc__ = """Lanes j..j+7 of one fp16 step in 256-bit vectors: x = S + a * B (float32,
eight lanes), ``D = x`` rounded to fp16 (nearest even, F16C), and a bit mask of the lanes
where x may lie on a midpoint of fp16's grid, and so may round unlike the exact sum: where fp16
is normal (|x| >= 2^-14) its grid is the float32 patterns ending in 13 zero bits, so its
midpoints are those ending in 0x1000; every nonzero |x| below 2^-14 (fp16's subnormals: rare)
is flagged too. (Whether x is exact is left to the redo: testing it here costs more, in
vector instructions, than redoing the few flagged lanes.) ``S``, ``D``, ``B``: contiguous
float32 arrays, j + 8 <= their lengths."""
step8_bf16 = _vec_step(BF16)
step8_bf16.__doc__ = """Lanes j..j+7 of one bf16 step in 256-bit vectors: x = S + a * B, ``D = x``
rounded to bf16 (nearest even on the bit pattern, as :func:`round_f32_to_bf16`), and a bit mask
of the lanes where x lies on a midpoint of bf16's grid (patterns ending in
0x8000: bf16 has float32's exponent range, so this holds for subnormals too)."""


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
    def rounded(x):
        """x rounded to the accumulator (nearest even)."""
        if kind == FP16:
            return round_f32_to_f16(x)
        return round_f32_to_bf16(x)

    @register_jitable
    def steps(S, D, Ar, B, bi, j0, n, unit):
        """For k = 1, 2, ...: ``S[j] = acc(S[j] + Ar[k] * B[bi, k, j0 + j])`` for every lane (a
        sum, ``unit``: ``+ Ar[k]``), ``D`` the work row the steps alternate with. Returns the
        row holding the result.

        fp16/bf16: the float32 sum x = fl(s + t) rounds like the exact s + t unless x lies on
        a midpoint of the accumulator's grid. Every such midpoint is a float32 number and
        rounding to float32 is monotonic, so a midpoint strictly between x and s + t would be
        nearer to s + t than x is; x can only land *on* one. So eight lanes at a time round x
        and flag the possible midpoints (:data:`step8_f16`, :data:`step8_bf16`); a flagged lane
        (rare; and most are exact ties of short sums, which the plain rounding gets right) is
        redone with the sum rounded to odd (TwoSum), one correct rounding once rounded to the
        accumulator (Boldo & Melquiond). The last n % 8 lanes, and a sum's one lane, take that
        route too. All steps in one function: a call per step would cost as much as the
        step's 256 lanes."""
        n8 = 0 if unit else n - n % 8
        for k in range(1, Ar.size):
            a = Ar[k]
            Bk = S if unit else B[bi, k, j0:j0 + n]  # (unit: not read)
            if kind == FP32:
                if unit:
                    for j in range(n):
                        D[j] = S[j] + a
                else:
                    for j in range(n):
                        D[j] = S[j] + a * Bk[j]
            else:
                for j in range(0, n8, 8):
                    hits = step8_f16(S, D, a, Bk, j) if kind == FP16 else step8_bf16(S, D, a, Bk, j)
                    if hits:
                        for q in range(j, j + 8):
                            D[q] = rounded(add_odd_f32(S[q], a * Bk[q]))
                for j in range(n8, n):
                    D[j] = rounded(add_odd_f32(S[j], a if unit else a * Bk[j]))
            S, D = D, S  # (in place, the compiler's overlap test would take its scalar loop)
        return S

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
        S = steps(S, D, Ar, B, bi, j0, m, unit)
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
