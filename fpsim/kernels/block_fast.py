"""The CPU's fused form of the block FMA of :func:`fpsim.kernels.reduce.block_reduce`: one row of
a matmul with every output column a lane, the products of a block taken four at a time.

The general form runs each of a block's steps as its own loop over the lanes, one loop per
product: the largest exponent (a load and a store of ``E`` per product and lane), then the
aligned sum (loads and stores of ``X`` and ``PS`` per product and lane). Here each pass over
the lanes takes four products at once, so that the lanes' running values are read and written
once per four products; a block of exactly four products rounded toward zero (V100, A100 TF32)
is one pass for the aligned sum and one for its rounding (:func:`block4_tz`); the rounding
toward zero is written with fewer instructions (:func:`finish_tz`); the promotion is the
float64 sum where that is exact (:func:`promote_plain`). The lanes go in tiles of
:data:`TILE`. The accumulator's part of each step and the nearest-even rounding are the general
form's own functions (``block_start``, ``align_start``, ``finish_nearest_lanes``). On a 2-core
AVX2 machine this is bound by the instructions and their latency: about 60 vector
instructions per four lanes and block of four.

Why the result is the same, bit for bit: the largest exponent is a maximum (the order of the
``max`` does not matter for numbers); the aligned sum is a sum of integers below 2^53 (checked
on the host), exact in any order; the plain float64 sum ``PS`` (which decides inf/NaN results
and the sign of a zero) is still added term by term in the order of k. Where a term is inf or
NaN, ``E`` and ``X`` may differ from the general form's, but then ``PS`` is inf or NaN and is
the block's result in both.

:func:`fused_ok` says which models it runs (every preset but ``exact_fp32``); the others, and
the trace and CUDA, run the general form. Only the CPU kernels call it; ``tests/
test_block_fast.py`` checks it bit for bit against the general form and an exact rational
reference over random models, shapes and inputs.
"""

from __future__ import annotations

import math

from numba.extending import register_jitable

from .fastround import (
    EXP_2046,
    fast_round_constants,
    inv_pow2_of,
    pow2_of,
    round_fast_nearest_even,
    trunc_f64,
)
from .record import unflatten
from .reduce import (
    BLOCK,
    I_ACC,
    I_ACC_SUBN,
    I_ALIGN,
    I_ALIGN_MODE,
    I_BFAST,
    I_BLOCK,
    I_BMODE,
    I_FAST_OUT,
    I_IN_SUBN,
    I_NORMALIZE,
    I_ORDER,
    I_PROM,
    I_PROM_FAST,
    I_PROMOTE,
    I_RECORD,
    I_ROUNDED,
    I_UNIT_B,
    W_C,
    W_E,
    W_O,
    W_P,
    W_S,
    W_T,
    W_X,
    align_start,
    block_constants,
    block_init,
    block_start,
    c_emin_pow2,
    e_start_of,
    finish_nearest_lanes,
    flush_input,
    input_pow2,
    promotes_after,
    round_out_fast,
)
from .scalar import NEAREST_EVEN, TOWARD_ZERO, bits_to_float64, float64_to_bits

TILE = 256  # lanes per tile: six work rows and four rows of B and of its exponents fit in L1
GROUP = 4  # products per pass over the lanes


@register_jitable
def fused_ok(P):
    """Whether :func:`fused_row` runs these parameters: a block FMA with finite alignment bits
    that truncate, exact products of two operands (not a sum) whose exponents are not
    normalised, the block sum rounded toward zero or to nearest even with ``round_fast``, a
    promotion (if any) that may be the float64 sum, and a final rounding by ``round_fast``.
    Every preset but ``exact_fp32`` qualifies. The rest (and the trace) run the general form,
    which alone compiles ``scalar.convert`` and two_sum for the model's roundings: the fused
    kernel compiles only the loops it runs."""
    return (P[I_ORDER] == BLOCK and P[I_ALIGN] >= 0 and P[I_ALIGN_MODE] == 0
            and P[I_ROUNDED] == 0 and P[I_UNIT_B] == 0 and P[I_RECORD] == 0
            and P[I_NORMALIZE] == 0 and P[I_BFAST] == 1
            and (P[I_BMODE] == TOWARD_ZERO or P[I_BMODE] == NEAREST_EVEN)
            and (P[I_PROMOTE] == 0 or P[I_PROM_FAST] == 1) and P[I_FAST_OUT] == 1)  # fmt: skip


@register_jitable
def group_inputs(Ar, k, keep_sub, two_in_emin):
    """A's values k .. k + 3 of the row, as the model reads them (:func:`flush_input`)."""
    return (flush_input(Ar[k], keep_sub, two_in_emin),
            flush_input(Ar[k + 1], keep_sub, two_in_emin),
            flush_input(Ar[k + 2], keep_sub, two_in_emin),
            flush_input(Ar[k + 3], keep_sub, two_in_emin))  # fmt: skip


@register_jitable
def group_pow2(a0, a1, a2, a3, two_in_emin):
    """2^e of each of four inputs for the alignment (:func:`input_pow2`)."""
    return (input_pow2(a0, two_in_emin), input_pow2(a1, two_in_emin),
            input_pow2(a2, two_in_emin), input_pow2(a3, two_in_emin))  # fmt: skip


@register_jitable
def rows4(M, bi, k, t0, nl):
    """Rows k .. k + 3 of ``M[bi]``, lanes t0 .. t0 + nl."""
    return (M[bi, k, t0:t0 + nl], M[bi, k + 1, t0:t0 + nl], M[bi, k + 2, t0:t0 + nl],
            M[bi, k + 3, t0:t0 + nl])  # fmt: skip


@register_jitable
def exps_group(E, D, Ar, PB, bi, k, t0, nl, keep_sub, two_in_emin):
    """``D[j] = max(E[j], 2^e of the products k .. k + 3 of lane j)``; E and D distinct (with
    ``E[j] = max(E[j], ...)`` the compiler stores only the lanes that change, with a masked
    store that takes a dozen cycles on some x86 cores)."""
    a0, a1, a2, a3 = group_inputs(Ar, k, keep_sub, two_in_emin)
    q0, q1, q2, q3 = group_pow2(a0, a1, a2, a3, two_in_emin)
    P0, P1, P2, P3 = rows4(PB, bi, k, t0, nl)
    for j in range(nl):
        D[j] = max(E[j], max(max(q0 * P0[j], q1 * P1[j]), max(q2 * P2[j], q3 * P3[j])))


@register_jitable
def exps_one(E, D, Ar, PB, bi, k, t0, nl, keep_sub, two_in_emin):
    """``D[j] = max(E[j], 2^e of product k of lane j)``; E and D distinct."""
    a = flush_input(Ar[k], keep_sub, two_in_emin)
    q = input_pow2(a, two_in_emin)
    Pk = PB[bi, k, t0:t0 + nl]
    for j in range(nl):
        D[j] = max(E[j], q * Pk[j])


@register_jitable
def sums_group(X, PS, SC, Ar, BF, bi, k, t0, nl, keep_sub, two_in_emin):
    """Products k .. k + 3 of every lane: added in order to the plain sum ``PS``, and truncated
    to integers in units of 2^(E - F) (``SC`` = 2^(F - E); truncation is odd, so the signed
    product is cut) and added to ``X`` (exact in any order)."""
    a0, a1, a2, a3 = group_inputs(Ar, k, keep_sub, two_in_emin)
    B0, B1, B2, B3 = rows4(BF, bi, k, t0, nl)
    for j in range(nl):
        sc = SC[j]
        p0 = a0 * B0[j]
        p1 = a1 * B1[j]
        p2 = a2 * B2[j]
        p3 = a3 * B3[j]
        PS[j] = (((PS[j] + p0) + p1) + p2) + p3
        X[j] += (trunc_f64(p0 * sc) + trunc_f64(p1 * sc)) + (trunc_f64(p2 * sc)
                                                             + trunc_f64(p3 * sc))  # fmt: skip


@register_jitable
def sums_one(X, PS, SC, Ar, BF, bi, k, t0, nl, keep_sub, two_in_emin):
    """:func:`sums_group` for the one product k."""
    a = flush_input(Ar[k], keep_sub, two_in_emin)
    Bk = BF[bi, k, t0:t0 + nl]
    for j in range(nl):
        p = a * Bk[j]
        PS[j] += p
        X[j] += trunc_f64(p * SC[j])


@register_jitable
def tz_constants(F, kb):
    """Integers for :func:`finish_tz` and :func:`block4_tz`: patterns that scale a power of two by
    adding to its float64 pattern (an integer add in place of a multiply; exact while the
    result is a normal float64, as it is there): ``F << 52`` (2^E -> 2^(E - F)),
    ``EXP_2046 + (F << 52)`` (2^E -> 2^(F - E)), the pattern of 2^m plus 1023 << 52
    (2^e -> 2^(m - e)), and ``m << 52`` (2^e -> 2^(e - m)); m the accumulator's fraction bits,
    2^m = ``kb[2]``."""
    two_m = float64_to_bits(kb[2])
    return F << 52, EXP_2046 + (F << 52), two_m + (1023 << 52), two_m - (1023 << 52)


@register_jitable
def finish_tz(x, e, ps, tzc, kb, top, flush):
    """One lane of :func:`fpsim.kernels.reduce.block_finish` rounding toward zero with
    ``round_fast`` (``kb``: the accumulator's constants, ``tzc``: :func:`tz_constants`): the
    aligned sum ``v = x * 2^(E - F)`` (``e`` = 2^E) cut to the accumulator's grid, with the
    rules of ``block_special``, in fewer instructions:

    * the powers of two scaled by integer adds to their patterns (2^(E - F) >= 2^-1022 since
      E >= F - 1022; the binade p of v is clamped to the format's [emin, emax], and
      ``fast_round_ok`` with emax <= 1021 keeps 2^(m - p) and the quantum p 2^-m normal);
    * the cut ``trunc(v 2^(m - p)) 2^(p - m)`` keeps v's sign (truncation is odd), and so do
      the steps after it: a value whose binade is 2^(emax + 1) or more becomes +-inf (the
      exponent overflows: a multiply by inf, the cut value being nonzero there) and, where
      ``flush`` (the accumulator flushes subnormals), one below the flush threshold ``kb[5]``
      becomes +-0 (a multiply by 0). Below 2^(emax + 1) the cut never passes max: the fused
      kernel takes IEEE-style accumulators only (``fast_round_ok``), whose max is the top of
      the grid, so no clamp to max;
    * no test for an infinite or NaN v: the host bounds the terms, so x is inf or NaN only when
      a term is, and then ``ps`` is too, and is the result.
    """
    cf, _, kinv, km = tzc
    v = x * bits_to_float64(float64_to_bits(e) - cf)
    pv = pow2_of(v)
    pb = float64_to_bits(min(max(pv, kb[0]), kb[7]))  # the binade, within [emin, emax]
    y = trunc_f64(v * bits_to_float64(kinv - pb)) * bits_to_float64(pb - km)
    y = y * (math.inf if pv >= top else 1.0)
    if flush:
        y = y * (0.0 if abs(y) < kb[5] else 1.0)
    y = (ps if ps == 0.0 else 0.0) if x == 0.0 else y  # exact zero: -0 only if all terms are
    return ps if (ps - ps) != 0.0 else y


@register_jitable
def block4_tz(S, X, E, PS, Ar, BF, PB, bi, k, t0, nl, keep_sub, two_in_emin, two_c_emin,
              e_start, tzc, kb, top):  # fmt: skip
    """A whole block of four products k .. k + 3 in two passes over the lanes: ``S[j]`` = the
    accumulator after the block, for the common case of :func:`fused_row` (truncating
    alignment, the products' exponents not normalised, rounding toward zero with
    ``round_fast``). The same steps as ``block_start``, :func:`exps_group`, ``align_start``
    and :func:`sums_group` in the first pass (into ``X``, ``E``, ``PS``), :func:`finish_tz`
    in the second; the accumulator c is cut like a product (``trunc(c * 2^(F - E))``:
    truncation is odd; the sign of a zero X does not matter), and 2^(F - E) is formed from
    2^E's pattern. Two passes, not one: one lane's whole block is a chain of about twenty
    dependent operations, longer than the core can overlap from one lane to the next (in one
    pass the V100 model ran 6-10% slower, with every value in registers)."""
    sf = tzc[1]
    a0, a1, a2, a3 = group_inputs(Ar, k, keep_sub, two_in_emin)
    q0, q1, q2, q3 = group_pow2(a0, a1, a2, a3, two_in_emin)
    P0, P1, P2, P3 = rows4(PB, bi, k, t0, nl)
    B0, B1, B2, B3 = rows4(BF, bi, k, t0, nl)
    for j in range(nl):
        c = S[j]
        pc = 0.0 if c == 0.0 else max(pow2_of(c), two_c_emin)
        e = max(max(pc, e_start), max(max(q0 * P0[j], q1 * P1[j]), max(q2 * P2[j], q3 * P3[j])))
        sc = bits_to_float64(sf - float64_to_bits(e))
        p0 = a0 * B0[j]
        p1 = a1 * B1[j]
        p2 = a2 * B2[j]
        p3 = a3 * B3[j]
        ps = (((c + p0) + p1) + p2) + p3
        x = (trunc_f64(c * sc) + trunc_f64(p0 * sc)) + trunc_f64(p1 * sc)
        x += trunc_f64(p2 * sc) + trunc_f64(p3 * sc)
        X[j] = x
        E[j] = e
        PS[j] = ps
    for j in range(nl):
        S[j] = finish_tz(X[j], E[j], PS[j], tzc, kb, top, False)  # (quad: subnormals kept)


@register_jitable
def finish_tz_lanes(S, X, E, PS, m, tzc, kb, top):
    """``S[j]`` = lane j's block result rounded toward zero (:func:`finish_tz`)."""
    flush = kb[5] != 0.0
    for j in range(m):
        S[j] = finish_tz(X[j], E[j], PS[j], tzc, kb, top, flush)


@register_jitable
def promote_plain(P, S, O, m, k1, K, kp):
    """:func:`fpsim.kernels.reduce.promote_lanes` where ``P[I_PROM_FAST]`` allows the float64 sum
    ``O + S`` rounded by ``round_fast_nearest_even`` (``kp``: the promoted format's constants,
    subnormals kept, no saturation): innocuous double rounding, see
    :func:`fpsim.kernels.reduce.plain_add_innocuous`."""
    if promotes_after(P, k1, K):
        for j in range(m):
            O[j] = round_fast_nearest_even(O[j] + S[j], kp)
            S[j] = 0.0


@register_jitable
def fused_row(A, BF, PB, C, out, bi, i, W, P):
    """``out[bi, i, :]``: the block FMA of ``P`` (:func:`fpsim.kernels.reduce.block_reduce`)
    for the parameters :func:`fused_ok` accepts: a block of exactly four products in two
    passes (:func:`block4_tz`) where the rounding is toward zero and accumulators are not
    flushed, else the products :data:`GROUP` at a time; in tiles of :data:`TILE` lanes.
    ``BF``, ``PB``: B's values as the model reads them and their exponents
    (:func:`fpsim.kernels.reduce.block_operand`); ``W``: (NW, >= min(m, TILE))."""
    acc = unflatten(P, I_ACC)
    K = A.shape[2]
    M = out.shape[2]
    n = P[I_BLOCK]
    keep_sub = P[I_IN_SUBN] == 1
    two_in_emin, two_f, kb, top = block_constants(P, acc)
    kp = fast_round_constants(unflatten(P, I_PROM), 1, 0)
    tz = P[I_BMODE] == TOWARD_ZERO  # else nearest even (fused_ok)
    tzc = tz_constants(P[I_ALIGN], kb)
    two_mf = inv_pow2_of(two_f)
    quad = tz and P[I_ACC_SUBN] == 1  # block4_tz does not flush c
    two_c_emin = c_emin_pow2(P)
    e_start = e_start_of(P)
    Ar = A[bi, i]
    for t0 in range(0, M, TILE):
        nl = min(TILE, M - t0)
        S = W[W_S, :nl]
        E = W[W_E, :nl]
        D = W[W_T, :nl]  # E's partner: the exponent passes write D from E, then swap them
        X = W[W_X, :nl]
        PS = W[W_P, :nl]
        O = W[W_O, :nl]
        SC = W[W_C, :nl]
        block_init(C, P, bi, i, t0, nl, S, O)
        for k0 in range(0, K, n):
            k1 = min(k0 + n, K)
            if quad and k1 - k0 == GROUP:
                block4_tz(S, X, E, PS, Ar, BF, PB, bi, k0, t0, nl, keep_sub, two_in_emin,
                          two_c_emin, e_start, tzc, kb, top)  # fmt: skip
            else:
                block_start(P, acc, S, E, PS, nl)
                k = k0
                while k + GROUP <= k1:
                    exps_group(E, D, Ar, PB, bi, k, t0, nl, keep_sub, two_in_emin)
                    E, D = D, E
                    k += GROUP
                while k < k1:
                    exps_one(E, D, Ar, PB, bi, k, t0, nl, keep_sub, two_in_emin)
                    E, D = D, E
                    k += 1
                align_start(S, E, X, SC, nl, two_f, False)
                k = k0
                while k + GROUP <= k1:
                    sums_group(X, PS, SC, Ar, BF, bi, k, t0, nl, keep_sub, two_in_emin)
                    k += GROUP
                while k < k1:
                    sums_one(X, PS, SC, Ar, BF, bi, k, t0, nl, keep_sub, two_in_emin)
                    k += 1
                if tz:
                    finish_tz_lanes(S, X, E, PS, nl, tzc, kb, top)
                else:
                    finish_nearest_lanes(S, X, E, PS, nl, two_mf, kb, top)
            promote_plain(P, S, O, nl, k1, K, kp)
        if P[I_PROMOTE] == 0:
            for j in range(nl):
                O[j] = S[j]
        round_out_fast(out, O, bi, i, t0, nl, P)
