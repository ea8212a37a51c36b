"""numba CPU kernels for :mod:`fpsim.arith`, built from the scalar operations in
:mod:`fpsim.kernels.scalar` (``arith_op``, ``add_rounded``, ``round_value``, ...).

Three kernels, each parallel over independent outputs and compiled once for every format and
mode (format parameters are plain int64 arguments; ``cache=True`` keeps them on disk):

* :func:`count_not_in_format` -- how many values of an array are not values of a format (the
  input check of every operation);
* :func:`elementwise` -- one operation per element, parallel over blocks of elements;
* :func:`matmul` -- ``out[b, i, j] = sum_k A[b, i, k] * B[b, k, j]`` with every partial sum
  rounded to an accumulator format, parallel over the rows ``(b, i)``; ``sum`` and ``dot`` are
  this kernel with a column of ones or a single row. Each output element is reduced in its own
  fixed order (sequential or pairwise), so the result does not depend on the thread count.

Speed. In the default mode (round to nearest even) the kernels use the branch-free forms: the
float64 stand-in of the exact result (``scalar.stand_in_nearest``: two_sum + round-to-odd, the
product, the quotient, the root) and ``scalar.round_nearest_even_bits``, which LLVM vectorises;
the matmul kernel keeps a row of accumulators and runs the innermost loop across the columns
``j`` (independent chains), so even the strictly sequential reduction of each element
vectorises. The branch-free rounding is exact only where ``scalar.nearest_even_fast_ok(52,
1023, man_bits, bias)`` holds: fewer than 52 fraction bits and a bias of at most 1023 (a format
whose grid reaches below float64's normal range, such as ``Format(11, 10, bias=1030)``, needs
the leading bit of float64 subnormals, which that path does not look for). Every other format
and mode runs the general ``scalar.arith_op`` / ``scalar.add_rounded`` / ``scalar.round_value``
per element, which go through ``scalar.convert``. Both paths are tested against exact rational
arithmetic.

Accumulators. A partial sum and a term are float64s whose exact sum can lie beyond float64
(terms of fp64 inputs, products near 2^1024) while still being finite: ``scalar.add_rounded``
then rounds ``±F64_MAX`` in place of the float64 sum's inf, a correct stand-in because every
accumulator fpsim accepts (other than binary64, which ``add_rounded`` handles through
``scalar.add_float64``) has values below 2^1023: both overflow it in every mode. The
nearest-even fast path needs no such care -- there an overflow and an infinite input round
alike (to inf, or NaN in a finite-only format) -- except when an IEEE-style accumulator
saturates: an overflow must give max but an inf input stays inf, so that case takes the general
path.

Stochastic rounding draws ``scalar.random62(seed, index)`` with a documented index per rounding
(see :func:`matmul`), identical on the CPU, the GPU and the pure-Python reference.

All kernels take float32 or float64 arrays (one dtype per call); they compute in float64.
"""

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from . import scalar
from .record import FLOAT64, FormatRecord, unflatten

BLOCK = 16384  # elements per parallel task (elementwise kernels)
# Below this many elements one thread is faster than waking the pool: on a small or busy machine
# every parallel region also waits for its slowest thread's time slice.
PARALLEL_MIN = 1 << 20
STACK = 64  # levels of the pairwise stack: enough for 2^64 terms


@register_jitable
def _constants(fmt, subnormals, saturate):
    """``scalar.nearest_even_constants`` in float64 behind an ordinary call (inlining that
    function twice into one kernel trips a numba IR check); computed once per block, so the
    call is free."""
    return scalar.nearest_even_constants(FLOAT64, fmt, subnormals, saturate)


@register_jitable
def _rne(t, fmt, k):
    """Round the float64 ``t`` to the format, nearest even, branch-free (float64 result); ``k``
    is :func:`_constants`."""
    bits = scalar.round_nearest_even_bits(
        scalar.float64_to_bits(t), FLOAT64, fmt.man_bits, fmt.bias, k
    )
    return scalar.bits_to_float64(bits)


@register_jitable
def _fast_ok(fmt):
    """Whether the branch-free nearest-even rounding is exact for this format in float64."""
    return scalar.nearest_even_fast_ok(FLOAT64, fmt)


def _record(p) -> FormatRecord:
    """A format record of Python ints (one numba type for every format)."""
    return FormatRecord(*(int(v) for v in p))


# ---- input check -------------------------------------------------------------------------------
@register_jitable
def _count_bad(s, fmt):
    """How many non-NaN elements of ``s`` are not values of the format: rounding to nearest
    changes exactly those (NaN is a value of every format)."""
    bad = 0
    if _fast_ok(fmt):
        kc = _constants(fmt, 1, 0)
        for i in range(s.size):
            v = np.float64(s[i])
            b = scalar.float64_to_bits(v)
            r = scalar.round_nearest_even_bits(b, FLOAT64, fmt.man_bits, fmt.bias, kc)
            bad += (r != b) & (v == v)
    else:
        for i in range(s.size):
            v = np.float64(s[i])
            r = scalar.round_value(v, fmt, scalar.NEAREST_EVEN, 1, 0, 0)
            bad += (scalar.float64_to_bits(r) != scalar.float64_to_bits(v)) & (v == v)
    return bad


@njit(cache=True, nogil=True, error_model="numpy")
def _count_body(x, start, stop, fmt_t):
    fmt = unflatten(fmt_t, 0)  # the record travels flat through the parallel loop
    return _count_bad(x[start:stop], fmt)


@njit(parallel=True, cache=True, error_model="numpy")
def _count_parallel(x, fmt_t):
    nblocks = (x.size + BLOCK - 1) // BLOCK
    counts = np.zeros(nblocks, np.int64)
    for b in prange(nblocks):
        counts[b] = _count_body(x, b * BLOCK, min((b + 1) * BLOCK, x.size), fmt_t)
    return counts.sum()


def count_not_in_format(x: np.ndarray, fmt_params: tuple) -> int:
    """Number of non-NaN elements of the contiguous 1-D float32/float64 array ``x`` that are not
    exactly values of the format (a FormatRecord) (any format; every float64
    is a binary64 value, so callers skip binary64)."""
    fmt = tuple(_record(fmt_params))
    if x.size >= PARALLEL_MIN:
        return int(_count_parallel(x, fmt))
    return int(_count_body(x, 0, x.size, fmt))


# ---- round to nearest even, one thread (small arrays) ------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _round_nearest_body(x, out, fmt):
    if _fast_ok(fmt):
        kc = _constants(fmt, 1, 0)
        for i in range(x.size):
            out[i] = _rne(np.float64(x[i]), fmt, kc)
    else:
        ne = scalar.NEAREST_EVEN
        for i in range(x.size):
            out[i] = scalar.round_value(np.float64(x[i]), fmt, ne, 1, 0, 0)


def round_nearest(x: np.ndarray, out: np.ndarray, fmt_params: tuple) -> None:
    """``out[i] = x[i]`` rounded to nearest even in the format, on one thread: for the arrays
    too small for the thread pool of :func:`fpsim.round_to`. ``x`` and ``out``: C-contiguous
    1-D float32/float64 arrays of one size (``out`` float64 where the format does not fit in
    float32)."""
    _round_nearest_body(x, out, _record(fmt_params))


# ---- elementwise -------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _ew_body(op, a, b, c, out, start, stop, fmt_t, mode, subn, sat, seed, nchk):
    """out[i] = op(a[i], b[i], c[i]) rounded to the format, for start <= i < stop.

    Returns how many of the first ``nchk`` operands' elements are not values of the format (the
    input check, fused into the same pass; 0 when ``nchk == 0``).
    """
    fmt = unflatten(fmt_t, 0)  # the record travels flat through the parallel loop
    x = a[start:stop]
    y = b[start:stop]
    z = c[start:stop]
    o = out[start:stop]
    n = x.size
    bad = 0
    if nchk >= 1:
        bad += _count_bad(x, fmt)
    if nchk >= 2:
        bad += _count_bad(y, fmt)
    if nchk >= 3:
        bad += _count_bad(z, fmt)
    if mode == scalar.NEAREST_EVEN and _fast_ok(fmt):
        kc = _constants(fmt, subn, sat)
        # One loop per operation (the operation is loop-invariant): each is branch-free and
        # vectorises.
        if (op == scalar.OP_ADD or op == scalar.OP_SUB) and fmt.man_bits <= 24:
            # Nearest-even only: when both operands are p-bit values and 53 >= 2p + 2, rounding
            # to nearest in float64 and then again to p bits equals rounding the exact sum once
            # (Figueroa, "When is double rounding innocuous?", SIGNUM 1995): the float64 sum is
            # a correct stand-in, with no TwoSum needed. (Directed and stochastic modes, and
            # sums of operands of other formats -- accumulators -- still need round-to-odd.)
            sgn = 1.0 if op == scalar.OP_ADD else -1.0
            for i in range(n):
                t = np.float64(x[i]) + sgn * np.float64(y[i])
                o[i] = _rne(t, fmt, kc)
        elif op == scalar.OP_ADD:
            for i in range(n):
                t = scalar.add_odd(np.float64(x[i]), np.float64(y[i]))
                o[i] = _rne(t, fmt, kc)
        elif op == scalar.OP_SUB:
            for i in range(n):
                t = scalar.add_odd(np.float64(x[i]), -np.float64(y[i]))
                o[i] = _rne(t, fmt, kc)
        elif op == scalar.OP_MUL:
            for i in range(n):
                t = np.float64(x[i]) * np.float64(y[i])
                o[i] = _rne(t, fmt, kc)
        elif op == scalar.OP_FMA:
            for i in range(n):
                t = scalar.add_odd(np.float64(x[i]) * np.float64(y[i]), np.float64(z[i]))
                o[i] = _rne(t, fmt, kc)
        elif op == scalar.OP_DIV:
            for i in range(n):
                t = scalar.div_float64(np.float64(x[i]), np.float64(y[i]))
                o[i] = _rne(t, fmt, kc)
        else:
            for i in range(n):
                t = scalar.sqrt_float64(np.float64(x[i]))
                o[i] = _rne(t, fmt, kc)
        return bad
    for i in range(n):
        rand = scalar.random62(seed, start + i) if mode == scalar.STOCHASTIC else 0
        o[i] = scalar.arith_op(
            op,
            np.float64(x[i]),
            np.float64(y[i]),
            np.float64(z[i]),
            fmt,
            mode,
            subn,
            sat,
            rand,
        )
    return bad


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _ew_parallel(op, a, b, c, out, fmt_t, mode, subn, sat, seed, nchk):
    nblocks = (a.size + BLOCK - 1) // BLOCK
    bad = np.zeros(nblocks, np.int64)
    for blk in prange(nblocks):
        bad[blk] = _ew_body(
            op,
            a,
            b,
            c,
            out,
            blk * BLOCK,
            min((blk + 1) * BLOCK, a.size),
            fmt_t,
            mode,
            subn,
            sat,
            seed,
            nchk,
        )
    return bad.sum()


def elementwise(op: int, a, b, c, out, fmt_params: tuple, mode, subnormals, saturate, seed,
                check: int = 0) -> int:  # fmt: skip
    """``out[i] = op(a[i], b[i], c[i])`` correctly rounded to the format.

    ``a, b, c, out``: C-contiguous 1-D arrays of one dtype (float32 or float64) and one size
    (pass ``a`` for operands an operation does not use). ``op``: ``scalar.OP_*``.
    ``fmt_params``: the format's FormatRecord. Element ``i`` of a stochastic rounding
    uses ``random62(seed, i)``, as :func:`fpsim.round_to` does. ``check``: how many of the
    operands ``a, b, c`` to check, in the same pass, for values that are not values of the
    format (not for binary64, whose values every float64 is); returns the number found (the
    results are then meaningless).
    """
    args = (int(op), a, b, c, out, tuple(_record(fmt_params)))
    args += (int(mode), int(subnormals), int(saturate), int(seed), int(check))
    if a.size >= PARALLEL_MIN:
        return int(_ew_parallel(*args))
    return int(_ew_body(*args[:5], 0, a.size, *args[5:]))


# ---- reductions: matmul, dot, sum ----------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def _matmul_row(
    A, B, out, bi, i, acc_t, out_t,
    mode, subn, sat, seed, pairwise, rounded, unit_b,
):  # fmt: skip
    """Row ``out[bi, i, :]``: every column j reduced in the same fixed order (see matmul)."""
    acc = unflatten(acc_t, 0)  # the records travel flat through the parallel loop
    outf = unflatten(out_t, 0)
    K = A.shape[2]
    m = 1 if unit_b else B.shape[2]
    S = np.empty(m)  # the running accumulator of each column j
    T = np.empty(m)  # the current term of each column
    # The fast path rounds a float64 sum that overflowed like an infinite input: right unless
    # an IEEE-style accumulator saturates (overflow -> max, inf -> inf): see the module docstring.
    fast = mode == scalar.NEAREST_EVEN and _fast_ok(acc) and not (sat and acc.inf_mag >= 0)
    stoch = mode == scalar.STOCHASTIC
    stride = 2 * K + 1  # rounding events per output element (see matmul's docstring)
    base = (bi * A.shape[1] + i) * m  # flat index of out[bi, i, 0]
    kc = _constants(acc, subn, sat)
    if pairwise:
        stack = np.empty((STACK, m))
    else:
        stack = np.empty((1, 1))
    cnt = 0  # accumulator roundings done so far (the same count for every column)
    for k in range(K):
        # 1. The terms of step k: the exact products A[i, k] * B[k, j] (exact in float64),
        #    rounded to the accumulator first when products are "rounded".
        a = np.float64(A[bi, i, k])
        if unit_b:  # a sum: the terms are A's values themselves (B is a column of ones)
            T[0] = a
        else:
            brow = B[bi, k]
            for j in range(m):
                T[j] = a * np.float64(brow[j])
        if rounded:
            if fast:
                for j in range(m):
                    T[j] = _rne(T[j], acc, kc)
            else:
                for j in range(m):
                    rand = scalar.random62(seed, (base + j) * stride + 2 * k) if stoch else 0
                    T[j] = scalar.round_value(
                        T[j], acc, mode, subn, sat, rand
                    )
        if not pairwise:
            # 2a. Sequential: S = round(S + T), left to right; the first term is rounded alone.
            if k == 0:
                if fast:
                    for j in range(m):
                        S[j] = _rne(T[j], acc, kc)
                else:
                    for j in range(m):
                        rand = scalar.random62(seed, (base + j) * stride + 1) if stoch else 0
                        S[j] = scalar.round_value(
                            T[j], acc, mode, subn, sat, rand
                        )
            elif fast:
                for j in range(m):
                    t = scalar.add_odd(S[j], T[j])
                    S[j] = _rne(t, acc, kc)
            else:
                for j in range(m):
                    r = (base + j) * stride + 2 * k + 1
                    rand = scalar.random62(seed, r) if stoch else 0
                    S[j] = scalar.add_rounded(
                        S[j], T[j], acc, mode, subn, sat, rand
                    )
            cnt = k + 1
        else:
            # 2b. Pairwise, as a binary counter: term k enters level 0; while the level holds a
            #     partial sum of the same size, merge the two (rounded) and carry one level up.
            lvl = 0
            c = k
            while c & 1:
                if fast:
                    for j in range(m):
                        t = scalar.add_odd(stack[lvl, j], T[j])
                        T[j] = _rne(t, acc, kc)
                else:
                    for j in range(m):
                        rand = (
                            scalar.random62(seed, (base + j) * stride + 2 * cnt + 1) if stoch else 0
                        )
                        T[j] = scalar.add_rounded(
                            stack[lvl, j], T[j], acc, mode, subn, sat, rand
                        )  # fmt: skip
                cnt += 1
                c >>= 1
                lvl += 1
            for j in range(m):
                stack[lvl, j] = T[j]
    if pairwise and K > 0:
        # 3. The leftover blocks (one per set bit of K, largest first in the data) are merged
        #    from the smallest (rightmost) up: the sum of the first 2^a terms plus the pairwise
        #    sum of the rest -- recursive halving at the largest power of two below the length.
        have = False
        for lvl in range(STACK):
            if (K >> lvl) & 1:
                if not have:
                    for j in range(m):
                        S[j] = stack[lvl, j]
                    have = True
                else:
                    for j in range(m):
                        rand = (
                            scalar.random62(seed, (base + j) * stride + 2 * cnt + 1) if stoch else 0
                        )
                        S[j] = scalar.add_rounded(
                            stack[lvl, j], S[j], acc, mode, subn, sat, rand
                        )  # fmt: skip
                    cnt += 1
        if K == 1 and not rounded:
            # A single exact term is a partial sum too: round it to the accumulator.
            for j in range(m):
                rand = scalar.random62(seed, (base + j) * stride + 1) if stoch else 0
                S[j] = scalar.round_value(S[j], acc, mode, subn, sat, rand)
    if K == 0:
        for j in range(m):
            S[j] = 0.0
    # 4. One final rounding to the output format.
    for j in range(m):
        rand = scalar.random62(seed, (base + j) * stride + 2 * K) if stoch else 0
        out[bi, i, j] = scalar.round_value(S[j], outf, mode, subn, sat, rand)


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _matmul_parallel(
    A, B, out, acc_t, out_t,
    mode, subn, sat, seed, pairwise, rounded, unit_b,
):  # fmt: skip
    nrows = A.shape[0] * A.shape[1]
    for r in prange(nrows):
        _matmul_row(
            A, B, out, r // A.shape[1], r % A.shape[1], acc_t,
            out_t, mode, subn, sat, seed, pairwise, rounded, unit_b,
        )  # fmt: skip


def matmul(A, B, out, acc_params, out_params, mode, subnormals, saturate, seed, pairwise, rounded):
    """``out[b, i, j] = round_out(reduce_k A[b, i, k] * B[b, k, j])``, every partial sum rounded
    to the accumulator format.

    ``A``: (nb, n, K), ``B``: (nb, K, m) or None (a column of ones: a row sum of A), both
    C-contiguous float64; ``out``: (nb, n, m) float64. ``acc_params``/``out_params``:
    FormatRecords. ``pairwise``: 0 sequential, 1 pairwise. ``rounded``: 1
    rounds each product to the accumulator before it is added, 0 adds the exact product (fused,
    as tensor cores do).

    Order. Sequential: ``s = acc(p_0)``, then ``s = acc(s + p_k)`` for k = 1, 2, ...; pairwise:
    ``P(p_0..p_{n-1}) = acc(P(first h) + P(rest))`` with h the largest power of two below n, a
    lone term being rounded only when it is the whole reduction. Then ``round_out(s)``.

    Stochastic rounding: the rounding events of output element o (flat index into ``out``) use
    ``random62(seed, o * (2K + 1) + r)`` with ``r = 2k`` for rounding product k, ``r = 2c + 1``
    for the c-th accumulator rounding (in the order performed) and ``r = 2K`` for the final one.
    """
    unit_b = B is None
    if unit_b:
        B = np.ones((1, 1, 1))
    m = out.shape[2]
    args = (A, B, out, tuple(_record(acc_params)), tuple(_record(out_params)))
    args += (int(mode), int(subnormals), int(saturate), int(seed), bool(pairwise), bool(rounded))
    args += (unit_b,)
    if A.shape[0] * A.shape[1] > 1 and A.shape[0] * A.shape[1] * A.shape[2] * m >= PARALLEL_MIN:
        _matmul_parallel(*args)
    else:
        for bi in range(A.shape[0]):
            for i in range(A.shape[1]):
                _matmul_row(*args[:3], bi, i, *args[3:])
