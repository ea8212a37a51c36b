"""The sequential reduction with float32 lanes: the CPU's fastest exact form for the three
common accumulators (fp32, fp16, bf16), eight lanes to a 256-bit vector instead of four.

Where it applies (:func:`lanes32_kind`, decided on the host): sequential order, exact products,
round to nearest even (and, for fp16 and bf16, toward zero, up and down) with subnormals kept
and no saturation, and terms that float32 holds exactly (products of fp16, fp8, ... inputs: at
most 24 significant bits, all multiples of 2^-149, below 2^127). Then with s the accumulator
(a value of its format, so a float32) and t = a * b (exact in float32):

* fp32 accumulator, nearest even: ``fl32(s + t)`` *is* s + t rounded once to fp32 (IEEE
  addition: subnormals, overflow to inf, the sign of an exact zero, inf and NaN included).
* fp16 and bf16 accumulators: the plain float32 sum x = fl32(s + t), rounded to the
  accumulator in the mode (fp16: the hardware conversion float32 -> fp16 -> float32, F16C's
  ``vcvtps2ph``, whose rounding control gives the directed modes; bf16: integer rounding of
  the pattern's low 16 bits), rounds like the exact s + t unless x lies exactly on a midpoint
  of the accumulator's grid (nearest even) or on the grid (directed modes): those points are
  float32 numbers, and rounding to float32 is monotonic, so x cannot pass one. The loop
  rounds x eight lanes at a time in explicit 256-bit vectors (:func:`_vec_step`: numba's
  vectoriser gives up on a loop that both rounds and flags) and flags those lanes; a flagged
  lane is redone with ``s + t`` rounded to *odd* in float32 (TwoSum gives x and its exact
  error; an inexact x with an even last bit moves one step toward s + t), then rounded to the
  accumulator. Rounding to odd with at least two bits more than the target, then in any mode,
  is one correct rounding of the exact value (Boldo & Melquiond, "Emulation of FMA and
  correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 57(4), 2008):
  float32 has 24 bits against fp16's 11 and bf16's 8, and its exponent range covers both
  formats, subnormals included. The float64 kernels take the same route (``scalar.add_odd``).
  Round-down also flags x = 0: an exact zero sum is -0 there.

Stochastic rounding into fp16 and bf16 has its own kinds here and its kernels in
:mod:`fpsim.kernels.lanes32_stochastic` (float32 instructions only: no F16C needed).

The fp16 roundings need the CPU to convert float32 <-> fp16 in hardware (x86 F16C, or AArch64
for nearest even; the directed modes need x86's rounding control): :func:`f16_native` and
:func:`f16c_modes` say so, otherwise fp16 accumulators use the float64 kernels. Tested against
the float64 forms and exact rational arithmetic in ``tests/test_reduce_kernels.py``.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, register_jitable

from .fastround import (
    round_fast_down,
    round_fast_nearest_even,
    round_fast_toward_zero,
    round_fast_up,
)
from .scalar import DOWN, NEAREST_EVEN, STOCHASTIC, TOWARD_ZERO, UP

# Kinds (lanes32_kind): the accumulator (FP32, FP16, BF16) plus 4 x the mode's slot (0 nearest
# even, 1 toward zero, 2 up, 3 down, 4 stochastic; all but nearest even for fp16 and bf16 only;
# the stochastic kinds' kernels are in lanes32_stochastic).
NONE = 0
FP32 = 1
FP16 = 2
BF16 = 3
_SLOT_MODES = (NEAREST_EVEN, TOWARD_ZERO, UP, DOWN, STOCHASTIC)
FP16_TOWARD_ZERO, FP16_UP, FP16_DOWN = FP16 + 4, FP16 + 8, FP16 + 12
BF16_TOWARD_ZERO, BF16_UP, BF16_DOWN = BF16 + 4, BF16 + 8, BF16 + 12
FP16_STOCHASTIC, BF16_STOCHASTIC = FP16 + 16, BF16 + 16
KINDS = (FP32, FP16, BF16, FP16_TOWARD_ZERO, FP16_UP, FP16_DOWN, BF16_TOWARD_ZERO, BF16_UP,
         BF16_DOWN)  # fmt: skip
_F16C_MODE = {NEAREST_EVEN: 0, DOWN: 1, UP: 2, TOWARD_ZERO: 3}  # vcvtps2ph's rounding control


def acc_of(kind: int) -> int:
    """The accumulator of a kind (FP32, FP16 or BF16)."""
    return kind & 3


def mode_of(kind: int) -> int:
    """The rounding mode of a kind (``scalar.NEAREST_EVEN``, ``TOWARD_ZERO``, ``UP``, ``DOWN``,
    ``STOCHASTIC``)."""
    return _SLOT_MODES[kind >> 2]


@intrinsic
def round_f32_to_f16(typingctx, x):
    """float32 -> fp16 (nearest even, IEEE: subnormals, overflow to inf, -0, NaN) -> float32:
    two instructions with F16C."""
    if isinstance(x, types.Float) and x.bitwidth == 32:

        def codegen(context, builder, signature, args):
            return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

        return types.float32(x), codegen
    return None


def _f16c(builder, x, mode: int):
    """float32 (a scalar or 8 lanes) -> fp16 -> float32 in one of F16C's rounding modes
    (``vcvtps2ph``'s immediate: LLVM's own conversion rounds to nearest even only)."""
    i16, i32, f32 = ir.IntType(16), ir.IntType(32), ir.FloatType()
    scalar = not isinstance(x.type, ir.VectorType)
    v = x
    if scalar:  # the 128-bit form, on lane 0
        v = builder.insert_element(ir.Constant(ir.VectorType(f32, 4), None), x,
                                   ir.Constant(i32, 0))  # fmt: skip
    fnty = ir.FunctionType(ir.VectorType(i16, 8), [v.type, i32])
    name = "llvm.x86.vcvtps2ph.128" if scalar else "llvm.x86.vcvtps2ph.256"
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    h = builder.call(fn, [v, ir.Constant(i32, mode)])
    if scalar:
        h0 = builder.extract_element(h, ir.Constant(i32, 0))
        return builder.fpext(builder.bitcast(h0, ir.HalfType()), f32)
    return builder.fpext(builder.bitcast(h, ir.VectorType(ir.HalfType(), 8)),
                         ir.VectorType(f32, 8))  # fmt: skip


def _bf16_bits(builder, x, mode: int):
    """float32 (a scalar or 8 lanes) -> bf16 -> float32 on the bit pattern b: nearest even adds
    0x7FFF plus the last kept bit, a rounding away from zero adds 0xFFFF (up for b >= 0, down
    for b < 0), then the low 16 bits are cleared. A carry runs into the exponent exactly as
    rounding up does (a subnormal becomes normal, max becomes inf); a NaN is returned as it is
    (the addition could carry its payload into the sign, the clearing could make it inf)."""
    i32 = ir.IntType(32)
    vec = isinstance(x.type, ir.VectorType)
    ty = ir.VectorType(i32, x.type.count) if vec else i32

    def c(v):
        return ir.Constant(ty, [v] * ty.count) if vec else ir.Constant(ty, v)

    b = builder.bitcast(x, ty)
    if mode == NEAREST_EVEN:
        lsb = builder.and_(builder.lshr(b, c(16)), c(1))
        b = builder.add(b, builder.add(lsb, c(0x7FFF)))
    elif mode != TOWARD_ZERO:
        neg = builder.icmp_signed("<", b, c(0))
        away = builder.not_(neg) if mode == UP else neg
        b = builder.add(b, builder.select(away, c(0xFFFF), c(0)))
    y = builder.bitcast(builder.and_(b, c(0xFFFF0000 - 2**32)), x.type)
    return builder.select(builder.fcmp_unordered("uno", x, x), x, y)


def _round_acc_intrinsic(acc: int, mode: int):
    def typer(typingctx, x):
        if isinstance(x, types.Float) and x.bitwidth == 32:

            def codegen(context, builder, signature, args):
                if acc == FP16:
                    return _f16c(builder, args[0], _F16C_MODE[mode])
                return _bf16_bits(builder, args[0], mode)

            return types.float32(x), codegen
        return None

    return intrinsic(typer)


# float32 -> fp16 / bf16 -> float32 in each mode, as intrinsics (fp16's directed ones: x86 F16C)
ROUND_ACC = {(FP16, m): _round_acc_intrinsic(FP16, m) for m in (TOWARD_ZERO, UP, DOWN)}
ROUND_ACC.update({(BF16, m): _round_acc_intrinsic(BF16, m) for m in _SLOT_MODES[:4]})
round_f32_to_bf16 = ROUND_ACC[(BF16, NEAREST_EVEN)]  # float32 -> bf16 (nearest even) -> float32


@functools.cache
def f16_native() -> bool:
    """Whether this CPU converts float32 <-> fp16 in hardware (x86 F16C, AArch64) and numba
    compiles for it: otherwise LLVM would call a library routine numba may not link, or fail
    to select F16C's instruction (numba told to compile for another CPU, ``NUMBA_CPU_NAME``,
    e.g. ``generic`` for a portable cache: then the float64 kernels run)."""
    import platform

    from llvmlite import binding
    from numba.core import config

    if config.CPU_NAME not in (None, "host") or config.CPU_FEATURES is not None:
        return False
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return True
    try:
        return bool(binding.get_host_cpu_features().get("f16c", False))
    except Exception:  # noqa: BLE001 - an unknown CPU: take the float64 kernels
        return False


def lanes32_kind(acc_name: str, term_precision: int, term_lo: int, term_emax: int,
                 subnormals: bool, saturate: bool, mode: int = NEAREST_EVEN) -> int:  # fmt: skip
    """The float32-lane kernel for an accumulator (by format name, ``fp32``/``fp16``/``bf16``),
    a rounding mode (``scalar.NEAREST_EVEN``; ``TOWARD_ZERO``, ``UP``, ``DOWN`` or
    ``STOCHASTIC`` for fp16 and bf16) and terms of ``term_precision`` bits, multiples of
    2^term_lo, below 2^(term_emax + 1); NONE where it does not apply (the caller also requires
    the sequential order, exact products, no trace)."""
    if not subnormals or saturate or mode not in _SLOT_MODES:
        return NONE
    if term_precision > 24 or term_lo < -149 or term_emax > 126:
        return NONE  # a term float32 does not hold exactly
    slot = 4 * _SLOT_MODES.index(mode)
    if acc_name == "fp32":
        return FP32 if mode == NEAREST_EVEN else NONE  # (fp32 directed: the float64 kernels)
    if acc_name == "bf16":
        return BF16 + slot
    if acc_name == "fp16" and (mode == STOCHASTIC  # (float32 instructions only: no F16C)
                               or (f16_native() and (mode == NEAREST_EVEN or f16c_modes()))):
        return FP16 + slot
    return NONE


@functools.cache
def f16c_modes() -> bool:
    """Whether fp16's directed roundings can use x86 F16C's ``vcvtps2ph`` rounding control (the
    portable float32 -> fp16 conversion rounds to nearest even only)."""
    import platform

    return platform.machine().lower() in ("x86_64", "amd64") and f16_native()


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
    """LLVM code for ``STEP8[kind]`` (see :func:`_vec_step`)."""
    acc, mode = acc_of(kind), mode_of(kind)

    def codegen(context, builder, signature, args):
        S, D, a, B, j = args
        f32, i32 = ir.FloatType(), ir.IntType(32)
        v8f, v8i = ir.VectorType(f32, 8), ir.VectorType(i32, 8)

        def ptr(ary_ty, ary):  # &ary[j] as a pointer to 8 float32
            data = context.make_array(ary_ty)(context, builder, ary).data
            return builder.bitcast(builder.gep(data, [j]), v8f.as_pointer())

        def splat(v):
            return ir.Constant(v8i, [v] * 8)

        def eq(x, v):
            return builder.icmp_unsigned("==", x, splat(v))

        s = builder.load(ptr(signature.args[0], S), align=4)
        b = builder.load(ptr(signature.args[3], B), align=4)
        va = builder.insert_element(ir.Constant(v8f, None), a, ir.Constant(i32, 0))
        va = builder.shuffle_vector(va, va, ir.Constant(v8i, [0] * 8))
        # x = fl(s + a * b): the product is exact in float32, so one FMA gives it
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(v8f, [v8f, v8f, v8f]), "llvm.fma.v8f32")  # fmt: skip
        x = builder.call(fma, [va, b, s])
        bits = builder.bitcast(x, v8i)
        ab = builder.and_(bits, splat(0x7FFFFFFF))
        if acc == FP16:
            if mode == NEAREST_EVEN:
                r = builder.fpext(builder.fptrunc(x, ir.VectorType(ir.HalfType(), 8)), v8f)
            else:
                r = _f16c(builder, x, _F16C_MODE[mode])
            # fp16 normal (|x| >= 2^-14): its grid is the float32 patterns ending in 13 zero
            # bits, its midpoints those ending in 0x1000; below, every nonzero x is flagged:
            # 0 < ab < 0x38800000 in one signed comparison after adding 2^31 - 1 (ab = 0 goes
            # to the top, 1 to the bottom; AVX2 compares signed integers only)
            low = builder.and_(ab, splat(0x1FFF))
            tiny = builder.icmp_signed("<", builder.add(ab, splat(0x7FFFFFFF)),
                                       splat(0x387FFFFF - 2**31))  # fmt: skip
            if mode == NEAREST_EVEN:
                key = eq(low, 0x1000)
            else:  # (ab has no sign bit: a signed comparison, one instruction on AVX2)
                key = builder.and_(eq(low, 0), builder.icmp_signed(">=", ab, splat(0x38800000)))
            flag = builder.or_(key, tiny)
        else:
            r = _bf16_bits(builder, x, mode)
            # bf16's grid: the float32 patterns ending in 16 zero bits, subnormals included
            low = builder.and_(bits, splat(0xFFFF))
            flag = eq(low, 0x8000) if mode == NEAREST_EVEN else builder.and_(
                eq(low, 0), builder.icmp_unsigned("!=", ab, splat(0)))
        if mode == DOWN:  # an exact zero sum is -0 when rounding down, not the +0 x says
            flag = builder.or_(flag, eq(ab, 0))
        builder.store(r, ptr(signature.args[1], D), align=4)
        return builder.zext(builder.bitcast(flag, ir.IntType(8)), i32)

    return codegen


def _vec_step(kind: int):
    """``step8(S, D, a, B, j)``: lanes j..j+7 of one step of an fp16/bf16 kind in 256-bit
    vectors: x = S + a * B (float32, eight lanes), ``D = x`` rounded to the accumulator in the
    kind's mode (fp16: F16C's conversion; bf16: on the bit pattern), and returned, a bit mask
    of the lanes where that may differ from rounding the exact sum: in nearest even where x
    lies on a midpoint of the accumulator's grid, in the directed modes where x lies on the
    grid (then the exact sum may be just beside it), and in round-down where x is zero (an
    exact zero sum is -0 there). fp16's grid is the float32 patterns ending in 13 zero bits
    where fp16 is normal (|x| >= 2^-14; midpoints end in 0x1000); below, every nonzero x is
    flagged (fp16's subnormals: rare). bf16's is the patterns ending in 16 zero bits,
    subnormals included. Whether x is exact is left to the redo: testing it here costs more,
    in vector instructions, than redoing the few flagged lanes. ``S``, ``D``, ``B``:
    contiguous float32 arrays, j + 8 <= their lengths."""

    def typer(typingctx, S, D, a, B, j):
        arrs = (S, D, B)
        if all(isinstance(t, types.Array) and t.ndim == 1 and t.layout == "C"
               and t.dtype == types.float32 for t in arrs) and a == types.float32 \
                and isinstance(j, types.Integer):  # fmt: skip
            return types.int32(S, D, a, B, j), _vec_step_codegen(kind)
        return None

    return intrinsic(typer)


# One intrinsic per fp16/bf16 kind (see _vec_step).
STEP8 = {k: _vec_step(k) for k in KINDS if acc_of(k) != FP32}


@register_jitable
def add_odd_f32(s, t):
    """``s + t`` rounded to odd in float32 (TwoSum: the float32 sum and its exact error)."""
    x = s + t
    bb = x - s
    err = (s - (x - bb)) + (t - bb)
    return odd_f32(x, err)


def _row_of_kind(kind: int):
    """The rows function for one kind, ``kind`` a constant of its code: each kernel then compiles
    only its own loops (the others are dead code the compiler drops before vectorising).

    Each kind's functions get their own qualified names (``..._k6``): numba names a compiled
    function by its qualified name and a counter of the process that compiled it, so two kinds'
    closures compiled in two processes could get the same symbol, and a process loading both
    kernels from the on-disk cache would run one kind's code for the other (seen: round-up
    matmuls giving toward-zero results)."""

    def jit(fn):
        fn.__qualname__ = f"{fn.__qualname__}_k{kind}"
        return register_jitable(fn)

    acc, mode = acc_of(kind), mode_of(kind)
    if acc == FP16:
        rounded = round_f32_to_f16 if mode == NEAREST_EVEN else ROUND_ACC[(FP16, mode)]
    else:  # (FP32 rounds nothing; the name must still be bound for the compiler)
        rounded = ROUND_ACC[(BF16, mode)]
    step8 = STEP8.get(kind, STEP8[FP16])
    # the final rounding's own function (``round_fast(v, mode, k)`` would compile every mode)
    round_out = {NEAREST_EVEN: round_fast_nearest_even, TOWARD_ZERO: round_fast_toward_zero,
                 UP: round_fast_up, DOWN: round_fast_down}[mode]  # fmt: skip

    @jit
    def first(D, a, Bk, n):
        """``D[j] = acc(a * Bk[j])``: each lane's first term (exact) rounded alone."""
        if acc == FP32:
            for j in range(n):
                D[j] = a * Bk[j]
        else:
            for j in range(n):
                D[j] = rounded(a * Bk[j])

    @jit
    def redo(s, t):
        """``acc(s + t)`` from the sum rounded to odd in float32 (one correct rounding in any
        mode, Boldo & Melquiond), with round-down's -0 for an exact zero sum."""
        r = rounded(add_odd_f32(s, t))
        if mode == DOWN and s + t == 0:  # (a float32 sum is 0 only when it is exact)
            r = -((-s) + (-t))
        return r

    @jit
    def steps(S, D, Ar, B, bi, j0, n, unit, F):
        """For k = 1, 2, ...: ``S[j] = acc(S[j] + Ar[k] * B[bi, k, j0 + j])`` for every lane (a
        sum, ``unit``: ``+ Ar[k]``), ``D`` the work row the steps alternate with. Returns the
        row holding the result.

        fp16/bf16: the float32 sum x = fl(s + t) rounds like the exact s + t unless x lies on
        a midpoint of the accumulator's grid (nearest even) or on the grid (directed modes).
        Every such point is a float32 number and rounding to float32 is monotonic, so a point
        strictly between x and s + t would be nearer to s + t than x is; x can only land *on*
        one. So eight lanes at a time round x and flag those lanes (``STEP8``); a flagged lane
        (rare; and most are exact sums, which the plain rounding gets right) is redone with
        the sum rounded to odd (TwoSum, :func:`redo`). The last n % 8 lanes, and a sum's one
        lane, take that route too. All steps in one function: a call per step would cost as
        much as the step's 256 lanes."""
        n8 = 0 if unit else n - n % 8
        for k in range(1, Ar.size):
            a = Ar[k]
            Bk = S if unit else B[bi, k, j0:j0 + n]  # (unit: not read)
            if acc == FP32:
                if unit:
                    for j in range(n):
                        D[j] = S[j] + a
                else:
                    for j in range(n):
                        D[j] = S[j] + a * Bk[j]
            else:
                # the vectors first, their flags kept: with the redo in the same loop the
                # compiler reloaded every constant on each pass (about a third slower)
                flagged = 0
                for j in range(0, n8, 8):
                    f = step8(S, D, a, Bk, j)
                    F[j >> 3] = f
                    flagged |= f
                if flagged:
                    for j in range(0, n8, 8):
                        f = F[j >> 3]
                        while f:  # (over the set bits: a loop the compiler does not unroll)
                            q = j + trailing_zeros(f)
                            D[q] = redo(S[q], a * Bk[q])
                            f &= f - 1
                for j in range(n8, n):
                    D[j] = redo(S[j], a if unit else a * Bk[j])
            S, D = D, S  # (in place, the compiler's overlap test would take its scalar loop)
        return S

    @jit
    def row(A, B, out, bi, i, j0, m, W, F, KO, unit):
        """``out[bi, i, j0 + j]`` for j < m: the sequential reduction of lane j's terms
        ``A[bi, i, k] * B[bi, k, j0 + j]`` (a sum, ``unit``: ``A[bi, i, k]``) with float32
        lanes in the kind's mode, then one rounding to the output format
        (``fastround``'s rounding in the mode, with the constants ``KO``, an array: no format
        records to compile). ``A``, ``B``: float32; ``W``: float32 work, (3, >= m)."""
        K = A.shape[2]
        Ar = A[bi, i]
        W[2, 0] = 1.0  # a sum's "B": every term times 1 (exact)
        S = W[0, :m]
        D = W[1, :m]
        if K > 0:
            first(S, Ar[0], W[2, :1] if unit else B[bi, 0, j0:j0 + m], m)
        S = steps(S, D, Ar, B, bi, j0, m, unit, F)
        o = out[bi, i, j0:j0 + m]
        for j in range(m):
            o[j] = round_out(np.float64(S[j]) if K > 0 else 0.0, KO)

    @jit
    def rows(A, B, out, KO, unit, r0, r1):
        """Rows ``r0 <= r < r1`` of the result (row r: ``out[r // n, r % n, :]``), in tiles of
        1024 lanes (all rows of the range on a tile before the next)."""
        m = out.shape[2]
        jt = max(min(m, 1024), 1)
        W = np.empty((3, jt), np.float32)
        F = np.empty(jt // 8 + 1, np.int32)  # the vectors' flags of a step
        n = out.shape[1]
        for j0 in range(0, m, jt):
            for r in range(r0, r1):
                row(A, B, out, r // n, r % n, j0, min(jt, m - j0), W, F, KO, unit)

    return rows


# The rows function of each kind (the CPU kernels in arith_cpu wrap each in its own njit).
ROWS = {k: _row_of_kind(k) for k in KINDS}
