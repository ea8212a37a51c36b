"""The reduction of a dot product, written once: the accumulation steps and the orders of
:func:`fpsim.arith.sum`, :func:`~fpsim.arith.dot` and :func:`~fpsim.arith.matmul`, in numba's
Python subset.

Three back ends run these very lines, as they run :func:`fpsim.kernels.scalar.convert`:

* :mod:`fpsim.kernels.arith_cpu` compiles them with numba for the CPU, one call of
  :func:`reduce_row` per row of the result (rows in parallel), every step applied to all the
  row's output columns ("lanes") in one loop that the compiler vectorises;
* :mod:`fpsim.kernels.arith_cuda` compiles them as CUDA device functions, one output element
  per thread (a row of one lane);
* :func:`fpsim.arith.trace_sum` runs them uncompiled, one lane, recording every step.

The orders (``P[ORDER]``)
    ``SEQUENTIAL``: ``s = acc(t_0)``, then ``s = acc(s + t_k)`` for k = 1, 2, ...
    ``PAIRWISE``: ``P(t_0..t_{n-1}) = acc(P(first h) + P(rest))``, h the largest power of two
    below n (run as a binary counter: term k enters level 0 and merges up while the level is
    occupied; the leftovers are merged from the smallest up); one lone term is rounded.
    ``BLOCK``: the block fused multiply-add of a tensor core, see :func:`block_reduce`.
Terms are the exact products ``A[b, i, k] * B[b, k, j]`` (exact in float64 for the formats
:mod:`fpsim.arith` accepts), or rounded to the accumulator first (``P[ROUNDED]``); for a sum
(``P[UNIT_B]``) the values of A themselves.

The steps
    The accumulator addition is ``scalar_ops.add_rounded`` (two_sum, round to odd, one rounding:
    correct in every mode). Where the format and mode allow it, the CPU takes the fast forms
    of the same step: ``fastround.round_fast`` in place of ``convert``, and a plain float64 sum
    in place of two_sum + round to odd where that is innocuous (``P[FAST_ADD]`` = 1, see
    :func:`plain_add_innocuous`; elsewhere in nearest even the float64 sum checked for landing
    on a midpoint): those rows are in :mod:`fpsim.kernels.reduce_fast`. For fp32, fp16 and
    bf16 accumulators of inputs float32 holds exactly the CPU runs the sequential nearest-even
    order in float32 lanes instead (:mod:`fpsim.kernels.lanes32`). The choices are made on the
    host, once per call; every form is tested against exact rational arithmetic.

Stochastic rounding
    Output element o (flat index into the result) with K terms numbers its rounding events r
    and uses ``random62(seed, o * (2K + 1) + r)``: ``r = 2k`` rounds term k (rounded products),
    ``r = 2c + 1`` is the c-th accumulator rounding (block c, for a block FMA), ``r = 2K`` the
    final rounding to the output format.

Parameters travel as one int64 array ``P`` (one pointer: a tuple of 53 integers passed by value
through every helper made numba's compilation several times slower); :func:`pack_params`
builds it and the ``I_*`` constants name its slots. Work arrays:
``W`` (rows ``W_*``, one column per lane) and the pairwise stack ``ST`` (levels x lanes).
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .fastround import (
    fast_round_constants,
    inv_pow2_of,
    pow2_of,
    rint_f64,
    round_fast,
    round_fast_nearest_even,
    round_fast_toward_zero,
    trunc_f64,
)
from .record import FormatRecord, unflatten
from .scalar import (
    DOWN,
    NEAREST_EVEN,
    STOCHASTIC,
    TOWARD_ZERO,
    add_odd,
    bits_to_float64,
    emax_of,
    random62,
    round_value,
)
from .scalar_ops import add_rounded

# Orders.
SEQUENTIAL = 0
PAIRWISE = 1
BLOCK = 2

# Rows of the work array W (one column per lane).
W_S = 0  # the accumulator (partial sum) of each lane
W_T = 1  # the current term
W_E = 2  # block FMA: 2^E, the largest exponent of the block (as a power of two)
W_X = 3  # block FMA: the aligned block sum, an integer, in units of 2^(E - F)
W_P = 4  # block FMA: the plain float64 sum of the block's terms (inf/NaN, the sign of zero)
W_O = 5  # block FMA: the promoted (fp32) sum
W_C = 6  # block FMA: 2^(F - E), the scale of the alignment
NW = 7

STACK = 64  # pairwise levels: enough for 2^64 terms
NLOG = 4  # columns of a trace log row: kind, partial, addend, result

# Slots of the parameter tuple P (after the three format records).
NREC = len(FormatRecord._fields)
I_ACC = 0  # the accumulator format
I_OUT = NREC  # the output format
I_PROM = 2 * NREC  # block FMA: the format partial sums are promoted to
I_MODE = 3 * NREC  # rounding mode of the accumulator (non-block orders) and the output
I_SUBN = I_MODE + 1  # keep subnormal results (accumulator and output roundings)
I_SAT = I_MODE + 2  # saturate on overflow
I_SEED = I_MODE + 3
I_ORDER = I_MODE + 4
I_ROUNDED = I_MODE + 5  # round each product to the accumulator before it is added
I_UNIT_B = I_MODE + 6  # a sum: the terms are A's values (B is not read)
I_FAST_ADD = I_MODE + 7  # 0 general, 1 plain float64 sum + round_fast, 2 add_odd + round_fast
I_FAST_OUT = I_MODE + 8  # the final rounding may use round_fast
I_BLOCK = I_MODE + 9  # block FMA: products per block
I_ALIGN = I_MODE + 10  # block FMA: fraction bits kept below the block's largest exponent, -1 exact
I_ALIGN_MODE = I_MODE + 11  # 0 truncate the bits shifted out, 1 round them to nearest even
I_BMODE = I_MODE + 12  # block FMA: the rounding of the block sum into the accumulator
I_BFAST = I_MODE + 13  # block FMA: that rounding may use round_fast
I_NORMALIZE = I_MODE + 14  # a product's exponent is that of the product (1) or of a + b (0)
I_MIN_EXP = I_MODE + 15  # the alignment exponent is at least this
I_IN_SUBN = I_MODE + 16  # 0: subnormal inputs are read as zero
I_ACC_SUBN = I_MODE + 17  # 0: subnormal accumulator values are flushed to zero
I_PROMOTE = I_MODE + 18  # promote every this many terms (0: never)
I_IN_EMIN = I_MODE + 19  # exponent of the inputs' lowest binade (subnormals are read there)
I_C_EMIN = I_MODE + 20  # exponent of the accumulator's lowest binade, as the datapath reads it
I_RECORD = I_MODE + 21  # log every accumulator step (the trace)
I_HAS_C = I_MODE + 22  # block FMA: the accumulator starts at C[b, i, j] (D = A B + C), not +0
I_FAST_STOCH = I_MODE + 23  # sequential stochastic rounding may take its fast form
I_LANES32 = I_MODE + 24  # the float32-lane kernel that runs it (a lanes32 kind), 0 none
I_PROM_FAST = I_MODE + 25  # block FMA: the promotion may be the float64 sum + round_fast (CPU)
NPARAMS = I_MODE + 26


def pack_params(acc, out, mode, subnormals, saturate, seed, order, rounded, unit_b, fast_add=0,
                fast_out=0, block=None, record=False, has_c=False,
                fast_stoch=0, lanes32=0) -> np.ndarray:  # fmt: skip
    """The parameter array P (int64). ``acc``, ``out``: FormatRecords. ``block``: None, or a dict
    of the block FMA's parameters (``prom`` a FormatRecord, ``n``, ``align``, ``align_mode``,
    ``bmode``, ``bfast``, ``normalize``, ``min_exp``, ``in_subn``, ``acc_subn``,
    ``promote``, ``in_emin``, ``c_emin``, ``prom_fast``)."""
    b = block or {}
    prom = b.get("prom", acc)
    head = [int(v) for v in tuple(acc) + tuple(out) + tuple(prom)]
    rest = [mode, subnormals, saturate, seed, order, rounded, unit_b, fast_add, fast_out,
            b.get("n", 1), b.get("align", -1), b.get("align_mode", 0), b.get("bmode", mode),
            b.get("bfast", 0), b.get("normalize", 0), b.get("min_exp", -100000),
            b.get("in_subn", 1), b.get("acc_subn", 1), b.get("promote", 0),
            b.get("in_emin", -1022), b.get("c_emin", -1022), int(record), int(has_c),
            fast_stoch, lanes32, b.get("prom_fast", 0)]  # fmt: skip
    p = np.array(head + [int(v) for v in rest], dtype=np.int64)
    assert p.size == NPARAMS
    return p


def plain_add_innocuous(term_precision: int, acc_precision: int, acc_emax: int, acc_lo: int,
                        term_emax: int, term_lo: int | None = None) -> bool:  # fmt: skip
    """Whether rounding the float64 sum ``s + t`` to nearest even in the accumulator equals
    rounding the exact ``s + t`` (no two_sum needed), for every accumulator value s and term t.
    ``acc_lo``, ``term_lo``: the exponents of the smallest quantum of the accumulator and of
    the terms (every term a multiple of 2^term_lo; None: not known).

    The float64 sum differs only when ``s + t`` needs more than 53 bits, and then the two
    roundings differ only when the float64 sum lands on a midpoint of the accumulator's grid
    the exact sum is not on. With the accumulator dominant, t would have to reach a midpoint
    (half an accumulator quantum away) while having bits below 2^-53 of it: impossible when
    ``term_precision + acc_precision <= 50``. With t dominant and on a midpoint, s would have
    to be non-zero yet below half a float64 ulp of t: impossible when the accumulator's values
    span at most 48 binades (``acc_emax - acc_lo <= 48``, acc_lo the exponent of its smallest
    subnormal). Nor can a dominant t reach a midpoint it is not on when t is itself a value of
    the accumulator (``term_precision <= acc_precision``, ``term_lo >= acc_lo``, ``term_emax
    <= acc_emax``): the first argument with the roles swapped, s's precision being the
    accumulator's (``2 * acc_precision <= 50``). Terms beyond the accumulator's range overflow
    both ways. fp16 accumulators of fp16/bf16... products qualify (22 + 11 bits, 39 binades),
    and fp32 accumulators of fp16 products (fp32 values), bf16 accumulators of fp8 products;
    bf16 accumulators of fp16 products do not (260 binades, and 22-bit terms). The margins are
    deliberate; tests check these cases against exact rational arithmetic on adversarial
    inputs.
    """
    if term_precision + acc_precision > 50:
        return False
    if acc_emax - acc_lo <= 48:
        return True
    return (
        term_lo is not None
        and term_precision <= acc_precision
        and term_lo >= acc_lo
        and term_emax <= acc_emax
        and 2 * acc_precision <= 50
    )


# ---- small pieces ------------------------------------------------------------------------------
@register_jitable
def event_base(bi, i, j, nrows, ncols, K):
    """Index of the first rounding event of output element (bi, i, j): o * (2K + 1)."""
    return ((bi * nrows + i) * ncols + j) * (2 * K + 1)


@register_jitable
def rand_for(P, base, r):
    """The 62 random bits of rounding event r (0 unless the rounding is stochastic)."""
    return random62(P[I_SEED], base + r) if P[I_MODE] == STOCHASTIC else 0


@register_jitable
def block_rand(P, base, r):
    """The random bits of a block FMA's rounding event r (its own mode, ``P[I_BMODE]``)."""
    return random62(P[I_SEED], base + r) if P[I_BMODE] == STOCHASTIC else 0


@register_jitable
def log_step(LOG, P, n, kind, partial, addend, result):
    """Record accumulator step n for the trace: kind 0 rounds a first term alone, 1 adds."""
    if P[I_RECORD] == 1:
        LOG[n, 0] = kind
        LOG[n, 1] = partial
        LOG[n, 2] = addend
        LOG[n, 3] = result


@register_jitable
def load_terms(A, B, P, bi, i, k, j0, m, T):
    """T[j] = the exact term k of lane j: A[bi, i, k] * B[bi, k, j0 + j] (a sum: A's value)."""
    a = A[bi, i, k]
    if P[I_UNIT_B] == 1:
        for j in range(m):
            T[j] = a
    else:
        for j in range(m):
            T[j] = a * B[bi, k, j0 + j]


@register_jitable
def round_terms(P, acc, T, m, k, base0, stride):
    """Round each term to the accumulator (``products="rounded"``): event 2k."""
    mode = P[I_MODE]
    for j in range(m):
        rand = rand_for(P, base0 + j * stride, 2 * k)
        T[j] = round_value(T[j], acc, mode, P[I_SUBN], P[I_SAT], rand)


@register_jitable
def acc_add(P, acc, x, y, rand, kf):
    """The accumulator step: ``x + y`` rounded once to the accumulator (every mode)."""
    fa = P[I_FAST_ADD]
    if fa == 1:
        return round_fast(x + y, P[I_MODE], kf)
    if fa == 2:
        return down_zero(x, y, round_fast(add_odd(x, y), P[I_MODE], kf), P[I_MODE])
    return add_rounded(x, y, acc, P[I_MODE], P[I_SUBN], P[I_SAT], rand)


@register_jitable
def down_zero(x, y, r, mode):
    """The result r of ``x + y``, with IEEE's -0 for an exact zero sum when rounding down (the
    float64 sum says +0; every other mode agrees with it)."""
    if mode == DOWN:
        return -((-x) + (-y)) if x + y == 0.0 else r
    return r


@register_jitable
def merge_lanes(P, acc, X, Y, Z, m, base0, stride, r, kf):
    """``Z[j] = acc(X[j] + Y[j])`` for every lane (event r): the accumulator step of the pairwise
    order, in one branch-free loop when the fast forms apply."""
    fa = P[I_FAST_ADD]
    mode = P[I_MODE]
    if fa != 0 and mode == NEAREST_EVEN:
        for j in range(m):
            Z[j] = round_fast_nearest_even(add_odd(X[j], Y[j]), kf)
    elif fa != 0 and mode != DOWN:
        for j in range(m):
            Z[j] = round_fast(add_odd(X[j], Y[j]), mode, kf)
    else:
        for j in range(m):
            rand = rand_for(P, base0 + j * stride, r)
            Z[j] = acc_add(P, acc, X[j], Y[j], rand, kf)


@register_jitable
def acc_round(P, acc, x, rand, kf):
    """A lone term rounded to the accumulator."""
    if P[I_FAST_ADD] != 0:
        return round_fast(x, P[I_MODE], kf)
    return round_value(x, acc, P[I_MODE], P[I_SUBN], P[I_SAT], rand)


# ---- sequential and pairwise ---------------------------------------------------------------
@register_jitable
def sequential_reduce(A, B, P, acc, bi, i, j0, m, S, T, base0, stride, LOG):
    """S[j] = the sequential sum of lane j's terms, every partial sum rounded to acc (every
    mode; the general form of each step, or the fast forms ``P[I_FAST_ADD]`` allows)."""
    K = A.shape[2]
    kf = fast_round_constants(acc, P[I_SUBN], P[I_SAT])
    for k in range(K):
        load_terms(A, B, P, bi, i, k, j0, m, T)
        if P[I_ROUNDED] == 1:
            round_terms(P, acc, T, m, k, base0, stride)
        x0 = S[0]
        if k == 0:
            # The first term is rounded to the accumulator alone (event 1).
            for j in range(m):
                S[j] = acc_round(P, acc, T[j], rand_for(P, base0 + j * stride, 1), kf)
            log_step(LOG, P, 0, 0, 0.0, T[0], S[0])
        else:
            for j in range(m):
                rand = rand_for(P, base0 + j * stride, 2 * k + 1)
                S[j] = acc_add(P, acc, S[j], T[j], rand, kf)
            log_step(LOG, P, k, 1, x0, T[0], S[0])


@register_jitable
def pairwise_reduce(A, B, P, acc, bi, i, j0, m, S, T, ST, base0, stride, LOG):
    """S[j] = the pairwise sum of lane j's terms (recursive halving at the largest power of two
    below the length), every partial sum rounded to acc."""
    K = A.shape[2]
    kf = fast_round_constants(acc, P[I_SUBN], P[I_SAT])
    cnt = 0  # accumulator roundings done so far (the same count in every lane)
    for k in range(K):
        load_terms(A, B, P, bi, i, k, j0, m, T)
        if P[I_ROUNDED] == 1:
            round_terms(P, acc, T, m, k, base0, stride)
        # Term k enters level 0; while the level holds a partial sum of the same size, merge
        # the two (one rounding) and carry one level up: a binary counter.
        lvl = 0
        c = k
        while c & 1:
            x0 = ST[lvl, 0]
            y0 = T[0]
            merge_lanes(P, acc, ST[lvl], T, T, m, base0, stride, 2 * cnt + 1, kf)
            log_step(LOG, P, cnt, 1, x0, y0, T[0])
            cnt += 1
            c >>= 1
            lvl += 1
        for j in range(m):
            ST[lvl, j] = T[j]
    if K == 0:
        return
    # The leftover partial sums (one per set bit of K, the largest first in the data) merge
    # from the smallest (rightmost) up.
    have = False
    for lvl in range(STACK):
        if (K >> lvl) & 1:
            if not have:
                for j in range(m):
                    S[j] = ST[lvl, j]
                have = True
            else:
                x0 = ST[lvl, 0]
                y0 = S[0]
                merge_lanes(P, acc, ST[lvl], S, S, m, base0, stride, 2 * cnt + 1, kf)
                log_step(LOG, P, cnt, 1, x0, y0, S[0])
                cnt += 1
    if K == 1 and P[I_ROUNDED] == 0:
        # A single exact term is a partial sum too: round it to the accumulator (event 1).
        y0 = S[0]
        for j in range(m):
            S[j] = acc_round(P, acc, S[j], rand_for(P, base0 + j * stride, 1), kf)
        log_step(LOG, P, 0, 0, 0.0, y0, S[0])


# ---- the block FMA ---------------------------------------------------------------------------
@register_jitable
def input_pow2(x, two_in_emin):
    """2^e of an input x for the alignment: e = floor(log2|x|), at least the inputs' lowest
    binade (a subnormal input is read there, with a leading 0); 0 for zero (it adds nothing).
    (inf and NaN give something meaningless: their block's result is decided by the plain sum.)"""
    return 0.0 if x == 0.0 else max(pow2_of(x), two_in_emin)


@register_jitable
def flush_input(x, keep_subnormals, two_in_emin):
    """A subnormal input read as (signed) zero when the model flushes them (a select; NaN and
    inf compare false, and pass)."""
    return math.copysign(0.0, x) if (not keep_subnormals) & (abs(x) < two_in_emin) else x


@register_jitable
def block_special(r, v, X, PS, bmode, top):
    """The block result ``r`` (v rounded) with the model's rules applied as selects: inf/NaN
    terms (their IEEE sum PS), an exact zero (+0; -0 rounding down or when every term was -0),
    and overflow (|v| >= 2^(emax + 1): ±inf in every mode). See :func:`block_round`."""
    neg_zero = (bmode == DOWN) | ((PS == 0.0) & (math.copysign(1.0, PS) < 0.0))
    r = math.copysign(math.inf, v) if abs(v) >= top else r
    r = (-0.0 if neg_zero else 0.0) if X == 0.0 else r
    return PS if (PS - PS) != 0.0 else r


@register_jitable
def block_round(bmode, acc, X, E, PS, F, rand, bfast, kb, top, acc_subn):
    """The block's result in the accumulator: the aligned sum ``X * 2^(E - F)`` rounded with the
    model's rounding ``bmode``; ``PS`` the plain sum of the block's terms decides inf/NaN and
    the sign of a zero; ``top = 2^(emax + 1)`` of the accumulator."""
    if (PS - PS) != 0.0:
        return PS  # an infinite or NaN term (accumulator included): IEEE's sum of them
    if X == 0.0:
        # An exact zero: +0, -0 when rounding down or when every term was -0 (IEEE 754 6.3).
        neg = (bmode == DOWN) | ((PS == 0.0) & (math.copysign(1.0, PS) < 0.0))
        return -0.0 if neg else 0.0
    v = X * (E * bits_to_float64((1023 - F) << 52))  # exact: an integer times a power of two
    if abs(v) >= top:
        # The block sum needs an exponent beyond the accumulator's: it overflows to inf in every
        # rounding mode (no IEEE "largest finite" for round-toward-zero: the hardware's
        # exponent overflows, as in Khattak & Mikaitis's models).
        return math.copysign(math.inf, v)
    if bfast:
        return round_fast(v, bmode, kb)
    return round_value(v, acc, bmode, acc_subn, 0, rand)


@register_jitable
def block_reduce(A, B, C, P, acc, prom, bi, i, j0, m, W, base0, stride, PB, pre):
    """The block fused multiply-add of a tensor core, applied to every block of ``P[I_BLOCK]``
    consecutive terms of each lane (the last block may be shorter: zero padding adds nothing).

    For each block, with c the accumulator (starting at +0, or at ``C[bi, i, j]``):

    1. E = the largest exponent among the block's non-zero products and c, where a product's
       exponent is ``e_a + e_b`` (its significand then lies in [1, 4): not normalised; with
       ``P[I_NORMALIZE]`` the product's own exponent), inputs below their lowest binade are
       read there, and E is at least ``P[I_MIN_EXP]``;
    2. every product and c is *aligned*: its magnitude, in units of 2^(E - F), cut to an
       integer (truncated, or rounded to nearest even); F = ``P[I_ALIGN]``;
    3. the aligned integers are added with their signs, exactly (no rounding, no
       normalisation inside the sum), and the sum rounded once into the accumulator with
       ``P[I_BMODE]``; a sum beyond the accumulator's range is ±inf, an exact zero +0
       (-0 rounding down, or when every term is -0), and inf/NaN terms give IEEE's sum of
       them;
    4. every ``P[I_PROMOTE]`` terms (and at the end) the accumulator is added to a wider
       partial sum in ``prom`` (round to nearest even) and restarts at +0.

    ``pre`` (the CPU): B's values come already flushed (:func:`flush_input`) and ``PB`` holds
    their :func:`input_pow2`, computed once for all rows; the plain loops then read them.
    Otherwise (CUDA, the trace) ``PB`` is unused. (The CPU runs the presets and most models in
    the fused form of :mod:`fpsim.kernels.block_fast` instead, the same steps regrouped.)

    ``P[I_ALIGN] = -1`` is exact alignment (one term per block): ``c + p`` correctly rounded.
    The aligned sum is an integer below 2^53 (checked on the host), and every scaling is by a
    power of two in float64's normal range, so each step above is exact in float64. Powers of
    two stand in for exponents (2^E, compared with max), so that the lane loops are plain
    float arithmetic that vectorises.
    """
    K = A.shape[2]
    S = W[W_S]
    E = W[W_E]
    X = W[W_X]
    PS = W[W_P]
    O = W[W_O]
    SC = W[W_C]
    # Every parameter in a local: the lane loops then read nothing from P (an array the
    # compiler cannot prove unchanged by the loops' stores).
    n = P[I_BLOCK]
    F = P[I_ALIGN]
    unit = P[I_UNIT_B] == 1
    keep_sub = P[I_IN_SUBN] == 1
    acc_subn = P[I_ACC_SUBN]
    rounded = P[I_ROUNDED] == 1
    normalize = P[I_NORMALIZE] == 1
    nearest_align = P[I_ALIGN_MODE] == 1
    bmode = P[I_BMODE]
    two_in_emin, two_f, kb, top = block_constants(P, acc)
    block_init(C, P, bi, i, j0, m, S, O)
    nblk = 0
    for k0 in range(0, K, n):
        k1 = min(k0 + n, K)
        if F < 0:
            # Exact alignment: one correctly rounded addition per term.
            for k in range(k0, k1):
                a = flush_input(A[bi, i, k], keep_sub, two_in_emin)
                for j in range(m):
                    b = 1.0 if unit else flush_input(B[bi, k, j0 + j], keep_sub, two_in_emin)
                    rand = block_rand(P, base0 + j * stride, 2 * nblk + 1)
                    S[j] = add_rounded(S[j], a * b, acc, bmode, acc_subn, 0, rand)
        else:
            # 1. The accumulator's part: flushed when subnormal (if the model flushes), its
            #    exponent (that of c read in the datapath's binary32-like format), and the
            #    starting values of the block's largest exponent and plain sum.
            block_start(P, acc, S, E, PS, m)
            # The products' exponents: 2^(e_a + e_b), or the product's own.
            for k in range(k0, k1):
                a = flush_input(A[bi, i, k], keep_sub, two_in_emin)
                pa = input_pow2(a, two_in_emin)
                if normalize or rounded:
                    for j in range(m):
                        b = 1.0 if unit else flush_input(B[bi, k, j0 + j], keep_sub, two_in_emin)
                        p = a * b
                        if rounded:
                            p = round_value(p, acc, NEAREST_EVEN, 1, 0, 0)
                            pe = 0.0 if p == 0.0 else max(pow2_of(p), c_emin_pow2(P))
                        elif unit:
                            pe = pa  # a single operand: |a| < 2 pa, nothing to normalise
                        else:
                            pe = pa * input_pow2(b, two_in_emin)
                            pe = pe + pe if abs(p) >= pe + pe else pe
                        E[j] = max(E[j], pe)
                elif pa == 0.0:
                    continue  # a zero: its products take no part in the alignment
                elif unit:
                    for j in range(m):
                        E[j] = max(E[j], pa)
                elif pre:
                    PBk = PB[bi, k, j0:j0 + m]
                    for j in range(m):
                        E[j] = max(E[j], pa * PBk[j])
                else:
                    for j in range(m):
                        pb = input_pow2(flush_input(B[bi, k, j0 + j], keep_sub, two_in_emin),
                                        two_in_emin)  # fmt: skip
                        E[j] = max(E[j], pa * pb)
            # 2. Align: every magnitude in units of 2^(E - F), cut to an integer; c first.
            align_start(S, E, X, SC, m, two_f, nearest_align)
            # 3. Add the aligned products, exactly; keep their plain sum for inf/NaN and zeros.
            #    (X goes wrong for inf/NaN terms, but their plain sum then decides the result.)
            for k in range(k0, k1):
                a = flush_input(A[bi, i, k], keep_sub, two_in_emin)
                if pre and not (rounded or unit):
                    # trunc and rint are odd functions: cut p * 2^(F - E) itself, sign and all.
                    Bk = B[bi, k, j0:j0 + m]
                    if nearest_align:
                        for j in range(m):
                            p = a * Bk[j]
                            PS[j] += p
                            X[j] += rint_f64(p * SC[j])
                    else:
                        for j in range(m):
                            p = a * Bk[j]
                            PS[j] += p
                            X[j] += trunc_f64(p * SC[j])
                elif rounded or nearest_align or unit:
                    for j in range(m):
                        b = 1.0 if unit else flush_input(B[bi, k, j0 + j], keep_sub, two_in_emin)
                        p = a * b
                        if rounded:
                            p = round_value(p, acc, NEAREST_EVEN, 1, 0, 0)
                        PS[j] += p
                        u = abs(p) * SC[j]
                        X[j] += math.copysign(rint_f64(u) if nearest_align else trunc_f64(u), p)
                else:
                    for j in range(m):
                        p = a * flush_input(B[bi, k, j0 + j], keep_sub, two_in_emin)
                        PS[j] += p
                        X[j] += math.copysign(trunc_f64(abs(p) * SC[j]), p)
            # 4. One rounding into the accumulator (event 2 * block + 1).
            block_finish(P, acc, S, X, E, PS, m, base0, stride, nblk, kb, top)
        nblk += 1
        # 5. Promotion of the partial sum to the wider format, every P[I_PROMOTE] terms.
        promote_lanes(P, prom, S, O, m, k1, K)
    if P[I_PROMOTE] == 0:
        for j in range(m):
            O[j] = S[j]


# The steps of block_reduce that do not read the products, shared with the CPU's fused form
# (fpsim.kernels.block_fast).
@register_jitable
def block_constants(P, acc):
    """(2^in_emin, 2^F, the round_fast constants of the accumulator, 2^(emax + 1) of it)."""
    F = P[I_ALIGN]
    two_in_emin = bits_to_float64((P[I_IN_EMIN] + 1023) << 52)
    two_f = bits_to_float64((F + 1023) << 52) if F >= 0 else 1.0
    kb = fast_round_constants(acc, P[I_ACC_SUBN], 0)
    top = bits_to_float64((emax_of(acc) + 1 + 1023) << 52)
    return two_in_emin, two_f, kb, top


@register_jitable
def c_emin_pow2(P):
    """2^(the accumulator's lowest binade, as the datapath reads it)."""
    return bits_to_float64((P[I_C_EMIN] + 1023) << 52)


@register_jitable
def e_start_of(P):
    """The least 2^E of a block: 2^min_exp, and at least 2^(F - 1022) (the scale 2^(F - E)
    stays a normal float64)."""
    return bits_to_float64((max(P[I_MIN_EXP], P[I_ALIGN] - 1022) + 1023) << 52)


@register_jitable
def block_init(C, P, bi, i, j0, m, S, O):
    """The accumulators' start (+0, or ``C[bi, i, j]``) and the promoted sums' (+0)."""
    for j in range(m):
        S[j] = C[bi, i, j0 + j] if P[I_HAS_C] == 1 else 0.0
        O[j] = 0.0


@register_jitable
def block_start(P, acc, S, E, PS, m):
    """Step 1, the accumulator's part: c flushed when subnormal (if the model flushes), its
    exponent (that of c read in the datapath's binary32-like format), and the starting values
    of the block's largest exponent ``E`` (at least 2^min_exp) and plain sum ``PS``."""
    flush_c = P[I_ACC_SUBN] == 0
    acc_min_normal = bits_to_float64((1 - acc.bias + 1023) << 52)
    two_c_emin = c_emin_pow2(P)
    e_start = e_start_of(P)
    if flush_c:
        for j in range(m):
            c = S[j]
            S[j] = math.copysign(0.0, c) if abs(c) < acc_min_normal else c
    # (S is not stored in the loop below: a store of S[j] or its flushed value would be a
    # masked store, a dozen cycles on some x86 cores.)
    for j in range(m):
        c = S[j]
        pc = 0.0 if c == 0.0 else max(pow2_of(c), two_c_emin)
        E[j] = max(pc, e_start)
        PS[j] = c


@register_jitable
def align_start(S, E, X, SC, m, two_f, nearest_align):
    """Step 2, the accumulator's part: ``SC = 2^(F - E)``, and ``X`` = c in units of 2^(E - F),
    cut to an integer (truncated, or rounded to nearest even)."""
    for j in range(m):
        SC[j] = inv_pow2_of(E[j]) * two_f
        c = S[j]
        u = abs(c) * SC[j]
        X[j] = math.copysign(rint_f64(u) if nearest_align else trunc_f64(u), c)


@register_jitable
def block_finish(P, acc, S, X, E, PS, m, base0, stride, nblk, kb, top):
    """Step 4: ``S[j]`` = the aligned block sum rounded once into the accumulator (event
    2 * nblk + 1; see :func:`block_round`), the common modes in branch-free loops."""
    bmode = P[I_BMODE]
    bfast = P[I_BFAST] == 1
    F = P[I_ALIGN]
    acc_subn = P[I_ACC_SUBN]
    two_mf = bits_to_float64((1023 - F) << 52)
    if bfast and bmode == TOWARD_ZERO:
        for j in range(m):
            v = X[j] * (E[j] * two_mf)
            r = round_fast_toward_zero(v, kb)
            S[j] = block_special(r, v, X[j], PS[j], bmode, top)
    elif bfast and bmode == NEAREST_EVEN:
        finish_nearest_lanes(S, X, E, PS, m, two_mf, kb, top)
    else:
        for j in range(m):
            rand = block_rand(P, base0 + j * stride, 2 * nblk + 1)
            S[j] = block_round(bmode, acc, X[j], E[j], PS[j], F, rand, bfast, kb, top,
                               acc_subn)  # fmt: skip


@register_jitable
def finish_nearest_lanes(S, X, E, PS, m, two_mf, kb, top):
    """:func:`block_finish` rounding to nearest even with ``round_fast`` (``two_mf`` = 2^-F)."""
    for j in range(m):
        v = X[j] * (E[j] * two_mf)
        r = round_fast_nearest_even(v, kb)
        S[j] = block_special(r, v, X[j], PS[j], NEAREST_EVEN, top)


@register_jitable
def promote_lanes(P, prom, S, O, m, k1, K):
    """Step 5, after the block ending at term k1: every ``P[I_PROMOTE]`` terms and at the end,
    ``O += S`` rounded to nearest even in ``prom`` and S restarts at +0 (without promotion
    the caller sets O = S at the end)."""
    if promotes_after(P, k1, K):
        for j in range(m):
            O[j] = add_rounded(O[j], S[j], prom, NEAREST_EVEN, 1, 0, 0)
            S[j] = 0.0


@register_jitable
def promotes_after(P, k1, K):
    """Whether the partial sum is promoted after the block ending at term k1 (of K): every
    ``P[I_PROMOTE]`` terms (0: never) and at the end."""
    promote = P[I_PROMOTE]
    return promote > 0 and (k1 % promote == 0 or k1 == K)


# ---- one row of the result ---------------------------------------------------------------------
@register_jitable
def fast_kind(P):
    """Which fast sequential kernel runs these parameters: 1 nearest even, 2 another
    deterministic mode, 3 stochastic rounding, 4 float32 lanes (:mod:`fpsim.kernels.lanes32`:
    nearest even, and fp16/bf16 accumulators in the directed modes; ``P[I_LANES32]`` names the
    kind, accumulator and mode), 5 float32 lanes in stochastic rounding (fp16/bf16,
    :mod:`fpsim.kernels.lanes32_stochastic`), 0 none (another order, rounded products, a log,
    or no fast form)."""
    if P[I_ORDER] != SEQUENTIAL or P[I_ROUNDED] != 0 or P[I_RECORD] != 0:
        return 0
    if P[I_LANES32] != 0 and P[I_MODE] == STOCHASTIC:
        return 5
    if P[I_LANES32] != 0 and P[I_FAST_OUT] == 1:
        return 4
    if P[I_FAST_STOCH] == 1:
        return 3
    if P[I_FAST_ADD] == 0 or P[I_FAST_OUT] == 0:
        return 0
    return 1 if P[I_MODE] == NEAREST_EVEN else 2



@register_jitable
def round_out(out, R, bi, i, j0, m, P, base0, stride, K):
    """The final rounding of every lane to the output format (event 2K)."""
    outf = unflatten(P, I_OUT)
    mode = P[I_MODE]
    if P[I_FAST_OUT] == 1:
        round_out_fast(out, R, bi, i, j0, m, P)
    else:
        for j in range(m):
            rand = rand_for(P, base0 + j * stride, 2 * K)
            out[bi, i, j0 + j] = round_value(R[j], outf, mode, P[I_SUBN], P[I_SAT], rand)


@register_jitable
def round_out_fast(out, R, bi, i, j0, m, P):
    """:func:`round_out` where ``P[I_FAST_OUT]`` allows ``round_fast`` (a deterministic mode)."""
    ko = fast_round_constants(unflatten(P, I_OUT), P[I_SUBN], P[I_SAT])
    mode = P[I_MODE]
    for j in range(m):
        out[bi, i, j0 + j] = round_fast(R[j], mode, ko)


@register_jitable
def general_row(A, B, out, bi, i, j0, m, W, ST, LOG, P):
    """``out[bi, i, j0 + j]`` for j < m in the sequential or pairwise order (``P[I_ORDER]``)."""
    acc = unflatten(P, I_ACC)
    K = A.shape[2]
    stride = 2 * K + 1
    base0 = event_base(bi, i, j0, out.shape[1], out.shape[2], K)
    S = W[W_S]
    T = W[W_T]
    if P[I_ORDER] == PAIRWISE:
        pairwise_reduce(A, B, P, acc, bi, i, j0, m, S, T, ST, base0, stride, LOG)
    else:
        sequential_reduce(A, B, P, acc, bi, i, j0, m, S, T, base0, stride, LOG)
    if K == 0:
        for j in range(m):
            S[j] = 0.0  # the empty sum: +0 in every mode
    round_out(out, S, bi, i, j0, m, P, base0, stride, K)


@register_jitable
def block_row(A, B, C, out, bi, i, j0, m, W, P):
    """``out[bi, i, j0 + j]`` for j < m with the block FMA of ``P`` (:func:`block_reduce`)."""
    block_row_pre(A, B, B, C, out, bi, i, j0, m, W, P, False)


@register_jitable
def block_row_pre(A, BF, PB, C, out, bi, i, j0, m, W, P, pre):
    """:func:`block_row`; on the CPU (``pre``) ``BF`` = B's values flushed as the model reads
    them and ``PB`` their :func:`input_pow2` (see :func:`block_operand`), computed once for all
    rows."""
    acc = unflatten(P, I_ACC)
    prom = unflatten(P, I_PROM)
    K = A.shape[2]
    stride = 2 * K + 1
    base0 = event_base(bi, i, j0, out.shape[1], out.shape[2], K)
    block_reduce(A, BF, C, P, acc, prom, bi, i, j0, m, W, base0, stride, PB, pre)
    round_out(out, W[W_O], bi, i, j0, m, P, base0, stride, K)


@register_jitable
def block_operand(B, BF, PB, P):
    """``BF``, ``PB`` (B's shape) for :func:`block_row_pre`, once for all rows: B's values with
    subnormals read as zero when the model flushes them (:func:`flush_input`), and 2^e of each
    for the alignment (:func:`input_pow2`: 0 for zero, at least the inputs' lowest binade)."""
    keep_sub = P[I_IN_SUBN] == 1
    two_in_emin = bits_to_float64((P[I_IN_EMIN] + 1023) << 52)
    b, bf, pb = B.reshape(-1), BF.reshape(-1), PB.reshape(-1)
    for q in range(b.size):
        v = flush_input(b[q], keep_sub, two_in_emin)
        bf[q] = v
        pb[q] = input_pow2(v, two_in_emin)


@register_jitable
def reduce_row(A, B, C, out, bi, i, j0, m, W, ST, LOG, P):
    """``out[bi, i, j0 + j]`` for j < m: lane j reduced in the order ``P[I_ORDER]``, then rounded
    once to the output format (event 2K). ``A``: (nb, n, K); ``B``: (nb, K, M) (unused for a
    sum); ``C``: (nb, n, M) starting accumulators of a block FMA (read when ``P[I_HAS_C]``);
    ``W``: (NW, >= m) work; ``ST``: (levels, >= m) pairwise stack; ``LOG``: trace rows.

    The CUDA kernel and :func:`fpsim.arith.trace_sum` run this (with the general form of every
    step); the CPU calls ``reduce_fast``'s ``nearest_row``, ``directed_row`` or
    ``stochastic_row``, ``block_fast.fused_row``, or :func:`general_row` or
    :func:`block_row_pre` directly, so that each
    of its kernels compiles only what it runs -- the same steps, in their fast forms where
    :func:`fast_kind` allows.
    """
    if P[I_ORDER] == BLOCK:
        block_row(A, B, C, out, bi, i, j0, m, W, P)
    else:
        general_row(A, B, out, bi, i, j0, m, W, ST, LOG, P)
