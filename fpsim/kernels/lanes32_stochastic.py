"""Stochastic rounding of the sequential sum with float32 lanes: fp16 and bf16 accumulators,
eight lanes to a 256-bit vector, for terms float32 holds exactly (the conditions of
:mod:`fpsim.kernels.lanes32`). The same results, bit for bit, as the general kernel and
``scalar.convert``'s rule: event r of lane j rounds up (away from zero) exactly when
``rand62 < ceil(f * 2^62)``, with ``rand62 = random62(seed, event_base + r)`` and f the fraction
of a quantum by which the exact |s + t| exceeds its lower neighbour on the accumulator's grid.

One step of one lane (s the accumulator, t = a * b the term), in float32, eight lanes at a time
(:func:`_step8_codegen`), m the accumulator's fraction bits (fp16 10, bf16 7):

1. x = fl(s + a * b), one FMA (t is exact in float32). Its error e = (s + t) - x is at most half
   a float32 ulp of x, and q (below) is 2^(23 - m) such ulps or more: |e / q| <= 2^-(m + 4).
   The step never computes e; it only decides where e cannot matter.
2. The binade E of |x|, clamped below at the accumulator's lowest (gradual underflow), gives
   the quantum q = 2^(E - m) and 1/q as bit patterns: u = |x| / q is exact, n = trunc(u), and
   the exact fraction of a quantum is f = (u - n) + e' / q (e' = e with x's sign taken off).
3. The random bits are compared in two parts, the top 24 first (R = (rand62 >> 38) * 2^-24, a
   float32 in [0, 1) from :func:`fpsim.kernels.random_lanes.random_top24`): with the rest
   ``rest = (rand62 mod 2^38) * 2^-62`` in [0, 2^-24), up is ``rest < D = f - R``. The float32
   ``d = fl(u - n - R)`` is within 2^-(m + 4) + 2^-25 of D, so with t_up = 2^-(m + 4) + 2^-22:
   d >= t_up means D > 2^-24 > rest: up, whatever the rest; d <= -t_up means D < 0: down.
   When u - n = 0 and e' < 0, the exact sum lies just below x, and its lower neighbour is
   a quantum (at a power of two, half a quantum) below: then f = 1 - |e'| / q' with q' >= q /
   2, and "down" (the result x) is right only while R + rest < 1 - 2^-(m + 3); hence down also
   needs d >= t_low - 1, t_low = 2^-(m + 3) + 2^-22. Everything else (about one event in
   2^(m + 2)), and a NaN d, is flagged.
4. The result (n + up) * q, overflow to inf past max, x's sign put back.

Also flagged: x infinite or NaN, and for bf16 0 < |x| < 2^-119, where 1/q would overflow
float32. A flagged lane is redone with ``scalar_ops.add_rounded`` in float64 with all 62 random
bits (``random62_keyed``): the general kernel's own step. The first term is rounded by the same
step from s = -0 (-0 + t is t, a zero's sign included). Against the float64 kernel
(:func:`fpsim.kernels.reduce_fast.stochastic_row`: two float64s of random bits per lane, and
four lanes to a vector) the 256^3 fp16 product takes less than half the time on one core (49
ms against 104, with the random bits' folded mixers); the random bits, six 32-bit multiplies
per event, are about half of it. Tested against the general kernel and exact rational
sums in ``tests/test_lanes32_stochastic.py``.

The loops over events make no array views: numba counts references to each view with atomic
operations (and the threads share B), which cost as much as the step's lanes when done per
event. Work arrays are addressed by row numbers instead.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, register_jitable

from .fastround import fast_round_constants, fast_round_ok
from .lanes32 import BF16, BF16_STOCHASTIC, FP16, FP16_STOCHASTIC, acc_of
from .random_lanes import index_words, random_top24, tile_wraps
from .reduce import I_ACC, I_OUT, I_SAT, I_SEED, I_SUBN, I_UNIT_B, event_base, unflatten
from .reduce_fast import stochastic_out
from .scalar import STOCHASTIC, random62_keyed, random62_keys
from .scalar_ops import add_rounded

# Per accumulator: fraction bits, the lowest binade the quantum is taken from (fp16: its emin,
# -14; bf16: -119, not -126, so that 1/q = 2^(7 + 119) stays a float32), the top of the flagged
# tiny range (bf16: 2^-119; fp16: none), and max.
_M = {FP16: 10, BF16: 7}
_E_LO = {FP16: -14, BF16: -119}
_TINY = {FP16: 0, BF16: (127 - 119) << 23}
_MAX = {FP16: 65504.0, BF16: float.fromhex("0x1.fep127")}


def _step8_codegen(acc: int):
    """LLVM code for :data:`STEP8` of one accumulator."""
    m, e_lo, tiny_top, maxv = _M[acc], _E_LO[acc], _TINY[acc], _MAX[acc]
    t_up = 2.0 ** -(m + 4) + 2.0**-22
    t_low = 2.0 ** -(m + 3) + 2.0**-22

    def codegen(context, builder, signature, args):
        SD, si, di, Bs, b0, b1, bj, R, a, j = args
        tys = signature.args
        f32, i32 = ir.FloatType(), ir.IntType(32)
        v8f, v8i = ir.VectorType(f32, 8), ir.VectorType(i32, 8)

        def ptr(pos, inds):  # &array_pos[inds] as a pointer to 8 float32
            ary = context.make_array(tys[pos])(context, builder, args[pos])
            p = cgutils.get_item_pointer(context, builder, tys[pos], ary, inds)
            return builder.bitcast(p, v8f.as_pointer())

        def ci(v):
            return ir.Constant(v8i, [v] * 8)

        def cf(v):
            return ir.Constant(v8f, [v] * 8)

        def as_f(v):
            return builder.bitcast(v, v8f)

        def as_i(v):
            return builder.bitcast(v, v8i)

        s = builder.load(ptr(0, [si, j]), align=4)
        b = builder.load(ptr(3, [b0, b1, bj]), align=4)
        rnd = builder.load(ptr(7, [j]), align=4)
        va = builder.insert_element(ir.Constant(v8f, None), a, ir.Constant(i32, 0))
        va = builder.shuffle_vector(va, va, ir.Constant(v8i, [0] * 8))
        # 1. x = fl(s + a * b): the product is exact in float32, so one FMA gives it
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(v8f, [v8f, v8f, v8f]), "llvm.fma.v8f32")  # fmt: skip
        x = builder.call(fma, [va, b, s])
        # 2. the quantum from |x|'s binade (clamped), u = |x| / q and its fraction
        xi = as_i(x)
        ab = builder.and_(xi, ci(0x7FFFFFFF))
        sign = builder.and_(xi, ci(-(2**31)))
        pb = builder.and_(ab, ci(0x7F800000))
        lo_pat = (127 + e_lo) << 23
        pb = builder.select(builder.icmp_signed(">", pb, ci(lo_pat)), pb, ci(lo_pat))
        inv_q = as_f(builder.sub(ci((254 + m) << 23), pb))  # 2^(m - E)
        q = as_f(builder.sub(pb, ci(m << 23)))  # 2^(E - m)
        u = builder.fmul(as_f(ab), inv_q)
        trunc = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v8f, [v8f]),
                                               "llvm.trunc.v8f32")  # fmt: skip
        n = builder.call(trunc, [u])
        # 3. d = u - n - R: up beyond t_up, down between t_low - 1 and -t_up, else flagged
        d = builder.fsub(builder.fsub(u, n), rnd)
        up = builder.fcmp_ordered(">=", d, cf(t_up))
        down = builder.and_(builder.fcmp_ordered("<=", d, cf(-t_up)),
                            builder.fcmp_ordered(">=", d, cf(t_low - 1.0)))  # fmt: skip
        flag = builder.not_(builder.or_(up, down))  # (d NaN: flagged)
        flag = builder.or_(flag, builder.icmp_signed(">=", ab, ci(0x7F800000)))  # inf, NaN
        if tiny_top:  # 0 < ab < tiny_top in one signed comparison (see lanes32's fp16 flag)
            flag = builder.or_(flag, builder.icmp_signed(
                "<", builder.add(ab, ci(0x7FFFFFFF)), ci(tiny_top - 1 - 2**31)))
        # 4. (n + up) q, overflow, the sign
        y = builder.fmul(builder.fadd(n, builder.select(up, cf(1.0), cf(0.0))), q)
        y = builder.select(builder.fcmp_ordered(">", y, cf(maxv)), cf(math.inf), y)
        r = as_f(builder.or_(as_i(y), sign))
        builder.store(r, ptr(0, [di, j]), align=4)
        return builder.zext(builder.bitcast(flag, ir.IntType(8)), i32)

    return codegen


def _step8(acc: int):
    """``step8(SD, si, di, Bs, b0, b1, bj, R, a, j)``: lanes j..j+7 of one stochastic step,
    ``SD[di, j + i] = acc(SD[si, j + i] + a * Bs[b0, b1, bj + i])`` rounded stochastically with
    the random bits' top 24 in ``R[j + i]`` (see the module's docstring); returns a bit mask of
    the lanes to redo exactly. C-contiguous float32 arrays (SD 2D, Bs 3D, R 1D), 8 elements
    from the indices in each."""

    def typer(typingctx, SD, si, di, Bs, b0, b1, bj, R, a, j):
        def f32(t, nd):
            return isinstance(t, types.Array) and t.ndim == nd and t.layout == "C" \
                and t.dtype == types.float32  # fmt: skip

        ints = (si, di, b0, b1, bj, j)
        if f32(SD, 2) and f32(Bs, 3) and f32(R, 1) and a == types.float32 \
                and all(isinstance(t, types.Integer) for t in ints):  # fmt: skip
            return types.int32(SD, si, di, Bs, b0, b1, bj, R, a, j), _step8_codegen(acc)
        return None

    return intrinsic(typer)


STEP8 = {FP16: _step8(FP16), BF16: _step8(BF16)}


def _rows_of(kind: int):
    """The rows function of one stochastic kind (its accumulator a constant of its code)."""
    step8 = STEP8[acc_of(kind)]

    def jit(fn):  # each kind's own symbols (see lanes32._row_of_kind)
        fn.__qualname__ = f"{fn.__qualname__}_k{kind}"
        return register_jitable(fn)

    @jit
    def redo(SD, si, di, Bs, b0, b1, bj, a, f, j, n, P, key_a, key_b, base, stride, r):
        """Lanes ``j + i`` (i a set bit of f, j + i < n) redone exactly: ``add_rounded`` in
        float64 with all 62 random bits, the general kernel's step (their terms at
        ``Bs[b0, b1, bj + i]``)."""
        accf = unflatten(P, I_ACC)
        while f:
            i = trailing_zeros(f)
            f &= f - 1
            if j + i < n:
                rand = random62_keyed(key_a, key_b, base + (j + i) * stride + r)
                t = np.float64(a * Bs[b0, b1, bj + i])  # (exact in float32 too)
                SD[di, j + i] = add_rounded(np.float64(SD[si, j + i]), t, accf, STOCHASTIC,
                                            P[I_SUBN], P[I_SAT], rand)  # fmt: skip

    @jit
    def row(A, Bs, unit, out, bi, i, j0, n, SD, R, TAIL, U, F, RHL, fast_out, KO, P, key_a,
            key_b):  # fmt: skip
        """Lanes ``j < n`` of ``out[bi, i, j0 + j]``: the sequential reduction of the terms
        ``A[bi, i, k] * Bs[bi, k, j0 + j]`` (a sum, ``unit``: ``Bs`` the ones, (1, 1, >= j0 +
        n)) with every step rounded stochastically, then the final rounding to the output
        format (event 2K, ``reduce_fast.stochastic_out``; ``fast_out``: whether
        ``fast_round_ok`` holds for it, ``KO`` its ``fast_round_constants``; ``RHL``: (2, >= n)
        float64 work)."""
        K = A.shape[2]
        nr, m = out.shape[1], out.shape[2]
        stride = 2 * K + 1
        base = event_base(bi, i, j0, nr, m, K)
        index_words(base, stride, n, key_b, U)
        wraps = tile_wraps(U, n, 2 * K)
        n8 = n - n % 8
        bB = 0 if unit else bi
        for j in range(n):
            SD[0, j] = -0.0  # the first term's step: -0 + t is t
        si = 0
        for k in range(K):
            r = 2 * k + 1
            a = A[bi, i, k]
            kb = 0 if unit else k
            random_top24(R, U, key_a, key_b, r, n, wraps)
            flagged = 0
            for j in range(0, n8, 8):
                f = step8(SD, si, 1 - si, Bs, bB, kb, j0 + j, R, a, j)
                F[j >> 3] = f
                flagged |= f
            if n8 < n:  # the last lanes' terms through TAIL (the rest of its 8 lanes zero)
                for j in range(n - n8):
                    TAIL[0, 0, j] = Bs[bB, kb, j0 + n8 + j]
                f = step8(SD, si, 1 - si, TAIL, 0, 0, 0, R, a, n8) & ((1 << (n - n8)) - 1)
                F[n8 >> 3] = f
                flagged |= f
            if flagged:
                for j in range(0, n8, 8):
                    if F[j >> 3]:
                        redo(SD, si, 1 - si, Bs, bB, kb, j0 + j, a, F[j >> 3], j, n, P, key_a,
                             key_b, base, stride, r)  # fmt: skip
                if n8 < n and F[n8 >> 3]:
                    redo(SD, si, 1 - si, TAIL, 0, 0, 0, a, F[n8 >> 3], n8, n, P, key_a, key_b,
                         base, stride, r)  # fmt: skip
            si = 1 - si
        stochastic_out(out[bi, i, j0:j0 + n], SD[si], K, n, U, RHL[0], RHL[1], fast_out, KO,
                       unflatten(P, I_OUT), P[I_SUBN], P[I_SAT], key_a, key_b, base, stride)

    @jit
    def rows(A, B, out, P, r0, r1):
        """Rows ``r0 <= r < r1`` of the result (row r: ``out[r // nr, r % nr, :]``), in tiles of
        up to 1024 lanes. ``A``, ``B``: float32 (B unread for a sum)."""
        m = out.shape[2]
        nr = out.shape[1]
        jt = max(min(m, 1024), 1)
        w = (jt + 7) // 8 * 8
        SD = np.zeros((2, w), np.float32)  # the accumulators, the steps alternating rows
        R = np.zeros(w, np.float32)  # the random bits' top 24 of a step
        TAIL = np.zeros((1, 1, 8), np.float32)
        U = np.zeros((4, w), np.uint32)  # the tile's random words (random_lanes)
        F = np.empty(w // 8, np.int32)  # the vectors' flags of a step
        RHL = np.empty((2, w))
        outf = unflatten(P, I_OUT)
        KO = fast_round_constants(outf, P[I_SUBN], P[I_SAT])
        fast_out = fast_round_ok(outf)
        unit = P[I_UNIT_B] == 1
        Bs = np.ones((1, 1, m), np.float32) if unit else B  # (a sum's terms: A times 1)
        key_a, key_b = random62_keys(P[I_SEED])
        for j0 in range(0, m, jt):
            n = min(jt, m - j0)
            for r in range(r0, r1):
                row(A, Bs, unit, out, r // nr, r % nr, j0, n, SD, R, TAIL, U, F, RHL, fast_out,
                    KO, P, key_a, key_b)  # fmt: skip

    return rows


ROWS = {k: _rows_of(k) for k in (FP16_STOCHASTIC, BF16_STOCHASTIC)}
