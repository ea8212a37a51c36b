"""The CPU's fast forms of the sequential order of :mod:`fpsim.kernels.reduce`: one row of a
matmul (or a sum) with every output column a lane, in tiles of ``LANES`` lanes, in each
deterministic mode and in stochastic rounding.

These are the same steps as :func:`fpsim.kernels.reduce.sequential_reduce` -- ``s = acc(t_0)``,
then ``s = acc(s + t_k)`` -- in the forms :func:`fpsim.kernels.reduce.fast_kind` allows for the
format and mode: rounding with float instructions (:mod:`fpsim.kernels.fastround`), the plain
float64 sum where it is innocuous, or that sum checked for a rounding midpoint
(:func:`ne_checked`), with contiguous slices of B's rows so that the lanes loop vectorises. Only
the CPU kernels (:mod:`fpsim.kernels.arith_cpu`) call them; the CUDA kernel and the teaching
trace run the general steps. ``tests/test_reduce_kernels.py`` checks them bit for bit against
the general row and exact rational arithmetic.
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .fastround import (
    fast_round_constants,
    fast_round_ok,
    pow2_of,
    round_fast,
    round_fast_down,
    round_fast_nearest_away,
    round_fast_nearest_even,
    round_fast_nearest_even_ieee,
    round_fast_stochastic_finite,
    round_fast_stochastic_split,
    round_fast_toward_zero,
    round_fast_up,
)
from .random_lanes import index_words, random_split
from .record import unflatten
from .reduce import (
    I_ACC,
    I_FAST_ADD,
    I_MODE,
    I_OUT,
    I_SAT,
    I_SEED,
    I_SUBN,
    I_UNIT_B,
    down_zero,
    event_base,
)
from .scalar import (
    DOWN,
    STOCHASTIC,
    TOWARD_ZERO,
    UP,
    add_odd,
    random62_keyed,
    random62_keys,
    round_value,
)
from .scalar_ops import add_rounded

LANES = 512  # lanes per tile of the CPU's fast kernels: their work rows stay in the L1 cache


@register_jitable
def rne_midpoint(x, k):
    """(x rounded to nearest even as :func:`round_fast_nearest_even_ieee`, whether x lies
    exactly on a midpoint of the format's grid: |x - r| = q / 2, q = 2^(e - m) the quantum of
    x's binade; x - r is exact, both being multiples of q / 2 within q of each other)."""
    ax = abs(x)
    p = min(max(pow2_of(ax), k[0]), k[7])
    s = p * k[8]
    y = (ax + s) - s
    mid = abs(ax - y) == p * (0.5 * k[3])
    y = math.inf if y > k[4] else y
    return math.copysign(y, x), mid


@register_jitable
def ne_first(D, a, Bk, m, kf, ieee):
    """``D[j] = acc(a * Bk[j])``: the first term of each lane, rounded alone (nearest even)."""
    if ieee:
        for j in range(m):
            D[j] = round_fast_nearest_even_ieee(a * Bk[j], kf)
    else:
        for j in range(m):
            D[j] = round_fast_nearest_even(a * Bk[j], kf)


@register_jitable
def ne_plain(S, a, Bk, m, kf, ieee):
    """``S[j] = acc(S[j] + a * Bk[j])`` with the float64 sum in place of the exact one (where
    :func:`plain_add_innocuous` holds)."""
    if ieee:
        for j in range(m):
            S[j] = round_fast_nearest_even_ieee(S[j] + a * Bk[j], kf)
    else:
        for j in range(m):
            S[j] = round_fast_nearest_even(S[j] + a * Bk[j], kf)


@register_jitable
def ne_checked(S, D, a, Bk, m, kf, ieee):
    """``D[j] = acc(S[j] + a * Bk[j])`` for every accumulator (nearest even), ``S`` and ``D``
    distinct. The float64 sum x = fl(s + t) rounds like the exact s + t unless x lies on a
    midpoint of the accumulator's grid: every midpoint is a float64 number and rounding to
    float64 is monotonic, so when x is not one, x and s + t lie between the same two
    midpoints (and have the same sign; x = 0 only for an exact zero, whose sign float64's sum
    gets right). The lanes where x is a midpoint (rare, and often exact anyway) are redone
    with two_sum + round to odd after the loop, which then runs on plain float arithmetic."""
    hits = 0
    if ieee:
        for j in range(m):
            r, mid = rne_midpoint(S[j] + a * Bk[j], kf)
            D[j] = r
            hits += mid
    else:
        for j in range(m):
            x = S[j] + a * Bk[j]
            D[j] = round_fast_nearest_even(x, kf)
            hits += rne_midpoint(x, kf)[1]
    if hits:
        for j in range(m):
            t = a * Bk[j]
            if rne_midpoint(S[j] + t, kf)[1]:
                D[j] = round_fast_nearest_even(add_odd(S[j], t), kf)


@register_jitable
def nearest_row(A, B, out, bi, i, j0, m, W, P):
    """``out[bi, i, j0 + j]``: the sequential reduction with exact products, nearest even, every
    step in its fast form (``P[I_FAST_ADD]`` 1: the float64 sum; 2: the float64 sum checked
    for midpoints, :func:`ne_checked`), and ``P[I_FAST_OUT]``: the CPU's kernel for the common
    case, which compiles without ``scalar.convert`` or the other modes. The lanes go in tiles
    of :data:`LANES`, each reduced over all k while its two work rows (``W[0]``, ``W[1]``)
    stay in the L1 cache. ``W``: (>= 3, >= min(m, LANES))."""
    kf = fast_round_constants(unflatten(P, I_ACC), P[I_SUBN], P[I_SAT])
    ko = fast_round_constants(unflatten(P, I_OUT), P[I_SUBN], P[I_SAT])
    ieee = P[I_SUBN] == 1 and P[I_SAT] == 0
    plain = P[I_FAST_ADD] == 1
    unit = P[I_UNIT_B] == 1
    K = A.shape[2]
    Ar = A[bi, i]
    W[2, 0] = 1.0  # a sum's "B": every term times 1 (exact)
    for t0 in range(j0, j0 + m, LANES):
        n = min(LANES, j0 + m - t0)
        S = W[0, :n]
        D = W[1, :n]
        if K > 0:
            ne_first(S, Ar[0], W[2, :1] if unit else B[bi, 0, t0:t0 + n], n, kf, ieee)
        for k in range(1, K):
            Bk = W[2, :1] if unit else B[bi, k, t0:t0 + n]
            if plain:
                ne_plain(S, Ar[k], Bk, n, kf, ieee)
            else:
                ne_checked(S, D, Ar[k], Bk, n, kf, ieee)
                S, D = D, S
        o = out[bi, i, t0:t0 + n]
        for j in range(n):
            o[j] = round_fast_nearest_even(S[j] if K > 0 else 0.0, ko)


@register_jitable
def directed_step(S, a, Bk, m, mode, kf):
    """``S[j] = acc(S[j] + a * Bk[j])`` in a directed mode or ties-away: two_sum + round to odd,
    then the mode's rounding, one loop per mode."""
    if mode == TOWARD_ZERO:
        for j in range(m):
            S[j] = round_fast_toward_zero(add_odd(S[j], a * Bk[j]), kf)
    elif mode == UP:
        for j in range(m):
            S[j] = round_fast_up(add_odd(S[j], a * Bk[j]), kf)
    elif mode == DOWN:
        for j in range(m):
            x = S[j]
            t = a * Bk[j]
            S[j] = down_zero(x, t, round_fast_down(add_odd(x, t), kf), DOWN)
    else:
        for j in range(m):
            S[j] = round_fast_nearest_away(add_odd(S[j], a * Bk[j]), kf)


@register_jitable
def directed_row(A, B, out, bi, i, j0, m, W, P):
    """:func:`nearest_row` for the directed modes and ties-away (``P[I_MODE]``), two_sum +
    round to odd at every step (``P[I_FAST_ADD]`` 2); ``W``: (>= 3, >= min(m, LANES))."""
    kf = fast_round_constants(unflatten(P, I_ACC), P[I_SUBN], P[I_SAT])
    ko = fast_round_constants(unflatten(P, I_OUT), P[I_SUBN], P[I_SAT])
    mode = P[I_MODE]
    unit = P[I_UNIT_B] == 1
    K = A.shape[2]
    Ar = A[bi, i]
    W[2, 0] = 1.0  # a sum's "B": every term times 1 (exact)
    for t0 in range(j0, j0 + m, LANES):
        n = min(LANES, j0 + m - t0)
        S = W[0, :n]
        if K > 0:
            B0 = W[2, :1] if unit else B[bi, 0, t0:t0 + n]
            a = Ar[0]
            for j in range(n):
                S[j] = round_fast(a * B0[j], mode, kf)  # the first term, rounded alone
        for k in range(1, K):
            directed_step(S, Ar[k], W[2, :1] if unit else B[bi, k, t0:t0 + n], n, mode, kf)
        o = out[bi, i, t0:t0 + n]
        for j in range(n):
            o[j] = round_fast(S[j] if K > 0 else 0.0, mode, ko)


@register_jitable
def stochastic_step(D, S, a, Bk, RH, RL, m, kf):
    """``D[j] = acc(S[j] + a * Bk[j])`` in stochastic rounding with the random bits ``RH[j],
    RL[j]`` (:func:`fpsim.kernels.random_lanes.random_split`), using the float64 sum x: right
    wherever x is the exact sum. Returns how many lanes it was not (their ``D[j]`` is then to
    be redone). x = fl(s + t) is exact iff ``x - s == t`` and ``x - t == s``: for |s| >= |t|,
    x - s is exact (Fast2Sum's lemma), so it equals t iff x = s + t, and then x - t = s
    exactly too (symmetrically for |t| > |s|); an infinite or NaN x fails one of the two
    (inf - inf, or a NaN), so ``round_fast_stochastic_finite`` only ever sees finite sums."""
    inexact = 0
    for j in range(m):
        s = S[j]
        t = a * Bk[j]
        x = s + t
        D[j] = round_fast_stochastic_finite(x, RH[j], RL[j], kf)
        inexact += not ((x - s == t) & (x - t == s))
    return inexact


@register_jitable
def stochastic_row(A, B, out, bi, i, j0, m, W, U, P):
    """``out[bi, i, j0 + j]``: the sequential reduction with exact products and stochastic
    rounding (``P[I_FAST_STOCH]``; fp16 and bf16 accumulators of terms float32 holds take
    :mod:`fpsim.kernels.lanes32_stochastic` instead), in tiles of :data:`LANES` lanes. Per
    step, the random bits of every lane first, in 32-bit integer lanes
    (:mod:`fpsim.kernels.random_lanes`), then :func:`stochastic_step` on float instructions;
    the few lanes whose float64 sum is not exact are redone with ``add_rounded`` and the same
    random bits. Event r of lane j uses ``random62(seed, event_base + r)`` as the general path
    does: the same results, bit for bit.
    ``W``: float64 (>= 5, >= min(m, LANES)); ``U``: uint32 (>= 4, the same); 2K < 2^32."""
    acc = unflatten(P, I_ACC)
    outf = unflatten(P, I_OUT)
    kf = fast_round_constants(acc, P[I_SUBN], P[I_SAT])
    ko = fast_round_constants(outf, P[I_SUBN], P[I_SAT])
    fast_out = fast_round_ok(outf)
    subn = P[I_SUBN]
    sat = P[I_SAT]
    unit = P[I_UNIT_B] == 1
    K = A.shape[2]
    stride = 2 * K + 1
    key_a, key_b = random62_keys(P[I_SEED])
    Ar = A[bi, i]
    for t0 in range(j0, j0 + m, LANES):
        n = min(LANES, j0 + m - t0)
        base0 = event_base(bi, i, t0, out.shape[1], out.shape[2], K)
        S = W[0, :n]
        D = W[1, :n]
        RH = W[2, :n]
        RL = W[3, :n]
        ONES = W[4, :n]  # a sum's "B": every term times 1 (exact)
        ONES[:] = 1.0
        index_words(base0, stride, n, key_b, U)
        if K > 0:  # the first term, rounded alone (event 1)
            random_split(RH, RL, U, key_a, key_b, 1, n)
            Bk = ONES if unit else B[bi, 0, t0:t0 + n]
            a = Ar[0]
            for j in range(n):
                S[j] = round_fast_stochastic_split(a * Bk[j], RH[j], RL[j], kf)
        for k in range(1, K):
            r = 2 * k + 1
            random_split(RH, RL, U, key_a, key_b, r, n)
            Bk = ONES if unit else B[bi, k, t0:t0 + n]
            a = Ar[k]
            if stochastic_step(D, S, a, Bk, RH, RL, n, kf):
                for j in range(n):
                    s = S[j]
                    t = a * Bk[j]
                    x = s + t
                    if not ((x - s == t) & (x - t == s)):
                        rand = random62_keyed(key_a, key_b, base0 + j * stride + r)
                        D[j] = add_rounded(s, t, acc, STOCHASTIC, subn, sat, rand)
            S, D = D, S
        stochastic_out(out[bi, i, t0:t0 + n], S, K, n, U, RH, RL, fast_out, ko, outf, subn, sat,
                       key_a, key_b, base0, stride)  # fmt: skip


@register_jitable
def stochastic_out(o, S, K, n, U, RH, RL, fast_out, ko, outf, subn, sat, key_a, key_b, base0,
                   stride):  # fmt: skip
    """The final rounding (event 2K) of a stochastic row's lanes ``j < n``: ``o[j]`` = the
    accumulator ``S[j]`` (0 for K = 0) rounded stochastically to ``outf``; with the random bits
    as :func:`fpsim.kernels.random_lanes.random_split`'s pair (into ``RH``, ``RL``) and
    ``round_fast_stochastic_split`` (``ko``) where ``fast_out``, else ``round_value``. ``U``:
    the tile's words (:func:`fpsim.kernels.random_lanes.index_words`), lane j's event 0 the
    index ``base0 + j * stride``."""
    if fast_out:
        random_split(RH, RL, U, key_a, key_b, 2 * K, n)
        for j in range(n):
            v = np.float64(S[j]) if K > 0 else 0.0
            o[j] = round_fast_stochastic_split(v, RH[j], RL[j], ko)
    else:
        for j in range(n):
            rand = random62_keyed(key_a, key_b, base0 + j * stride + 2 * K)
            v = np.float64(S[j]) if K > 0 else 0.0
            o[j] = round_value(v, outf, STOCHASTIC, subn, sat, rand)
