"""Exact oracles for fpsim.arith, written from the definition of rounding, independent of fpsim.

* :func:`round_rational` rounds an exact ``fractions.Fraction`` to a format in any mode;
  stochastic rounding goes up when the given 62 random bits ``rand62 < ceil(f * 2^62)``, f the
  exact fraction of a quantum above the lower neighbour (fpsim's documented rule).
* :func:`round_sqrt` rounds ``sqrt(a)`` exactly (integer square roots, no floating point).
* :func:`op_oracle` computes an operation's exact result with Fractions and rounds it once,
  IEEE specials and signed zeros included.
* :func:`round_vec` is the same definition vectorised with numpy for values that are exact
  float64s (all fp8 sums and products), so the exhaustive fp8 tests stay fast; a test checks it
  against :func:`round_rational`.
* :func:`reduce_reference` re-implements the documented sequential and pairwise orders with
  exact rational arithmetic and the oracle rounding at every step.

Nothing here calls fpsim's kernels; formats are only read for their parameters.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

import fpsim

MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down"]
ALL_MODES = MODES + ["stochastic"]


def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def _binade(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e if _pow2(e) <= a else e - 1


def _finish(neg, k, quantum, f, mode, subnormals, saturate):
    """Scale, handle overflow and flush-to-zero, attach the sign."""
    r = k * quantum
    if r > Fraction(f.max):
        to_max = (
            saturate
            or mode == "toward_zero"
            or (mode == "up" and neg)
            or (mode == "down" and not neg)
        )
        if to_max:
            r = Fraction(f.max)
        elif f.has_inf:
            return -math.inf if neg else math.inf
        else:
            return math.nan
    if not subnormals and 0 < r < Fraction(f.min_normal):
        r = Fraction(0)
    v = float(r)  # exact: r is a format value
    return -v if neg else v


def _decide(neg, lo, cmp_half, exact, ceil62, mode, rand62):
    """The integer multiple of the quantum chosen by the mode (lo = floor of |x| / quantum)."""
    if exact:
        return lo
    if mode == "nearest_even":
        return lo + 1 if cmp_half > 0 or (cmp_half == 0 and lo % 2 == 1) else lo
    if mode == "nearest_away":
        return lo + 1 if cmp_half >= 0 else lo
    if mode == "toward_zero":
        return lo
    if mode == "up":
        return lo if neg else lo + 1
    if mode == "down":
        return lo + 1 if neg else lo
    if mode == "stochastic":
        return lo + 1 if rand62 < ceil62 else lo
    raise ValueError(mode)


def round_rational(q: Fraction, fmt, mode="nearest_even", subnormals=True, saturate=False,
                   rand62=0, zero_sign=1.0) -> float:  # fmt: skip
    """Round the exact rational ``q`` to ``fmt``; an exact zero gets the sign of zero_sign."""
    f = fpsim.get_format(fmt)
    if q == 0:
        return math.copysign(0.0, zero_sign)
    neg = q < 0
    a = abs(q)
    quantum = _pow2(max(_binade(a), f.emin) - f.man_bits)
    n = a / quantum
    lo = math.floor(n)
    rem = n - lo
    half = Fraction(1, 2)
    cmp_half = (rem > half) - (rem < half)
    ceil62 = math.ceil(rem * 2**62)
    k = _decide(neg, lo, cmp_half, rem == 0, ceil62, mode, rand62)
    return _finish(neg, k, quantum, f, mode, subnormals, saturate)


def round_sqrt(a: Fraction, fmt, mode="nearest_even", subnormals=True, saturate=False,
               rand62=0) -> float:  # fmt: skip
    """Round ``sqrt(a)`` (a >= 0 rational) to ``fmt`` exactly, with integer square roots."""
    f = fpsim.get_format(fmt)
    if a == 0:
        return 0.0
    e = _binade(a) // 2  # floor(log2(sqrt(a)))
    quantum = _pow2(max(e, f.emin) - f.man_bits)
    n2 = a / quantum**2  # (sqrt(a) / quantum)^2
    lo = math.isqrt(math.floor(n2))
    exact = Fraction(lo) ** 2 == n2
    mid2 = (Fraction(2 * lo + 1, 2)) ** 2
    cmp_half = (n2 > mid2) - (n2 < mid2)
    # ceil(frac * 2^62) with frac = sqrt(n2) - lo: ceil(sqrt(n2 * 4^62)) - lo * 2^62
    big = n2 * 4**62
    c = math.ceil(big)
    ceil62 = math.isqrt(c - 1) + 1 - lo * 2**62
    k = _decide(False, lo, cmp_half, exact, ceil62, mode, rand62)
    return _finish(False, k, quantum, f, mode, subnormals, saturate)


def op_oracle(op: str, args, fmt, mode="nearest_even", subnormals=True, saturate=False,
              rand62=0) -> float:  # fmt: skip
    """The correctly rounded result of ``op`` (add, sub, mul, div, sqrt, fma) on floats."""
    x = [float(v) for v in args]
    f = fpsim.get_format(fmt)
    kw = dict(mode=mode, subnormals=subnormals, saturate=saturate, rand62=rand62)
    if any(math.isnan(v) for v in x):
        return math.nan
    if op == "sub":
        op, x = "add", [x[0], -x[1]]
    if op == "fma":
        a, b, c = x
        if (math.isinf(a) and b == 0) or (math.isinf(b) and a == 0):
            return math.nan
        if math.isinf(a) or math.isinf(b):
            p = math.copysign(math.inf, a) * math.copysign(1.0, b)
            if math.isinf(c) and c != p:
                return math.nan
            return _special(p, f, saturate)
        if math.isinf(c):
            return _special(c, f, saturate)
        prod = Fraction(a) * Fraction(b)
        psign = math.copysign(1.0, a) * math.copysign(1.0, b)
        return _sum_oracle(prod, psign, Fraction(c), math.copysign(1.0, c), f, **kw)
    if op == "add":
        a, b = x
        if math.isinf(a) or math.isinf(b):
            if math.isinf(a) and math.isinf(b) and a != b:
                return math.nan
            return _special(a if math.isinf(a) else b, f, saturate)
        return _sum_oracle(Fraction(a), math.copysign(1.0, a), Fraction(b),
                           math.copysign(1.0, b), f, **kw)  # fmt: skip
    if op == "mul":
        a, b = x
        sign = math.copysign(1.0, a) * math.copysign(1.0, b)
        if math.isinf(a) or math.isinf(b):
            if a == 0 or b == 0:
                return math.nan
            return _special(math.copysign(math.inf, sign), f, saturate)
        return round_rational(Fraction(a) * Fraction(b), f, zero_sign=sign, **kw)
    if op == "div":
        a, b = x
        sign = math.copysign(1.0, a) * math.copysign(1.0, b)
        if math.isinf(a) and math.isinf(b) or (a == 0 and b == 0):
            return math.nan
        if math.isinf(a) or b == 0:
            return _special(math.copysign(math.inf, sign), f, saturate)
        if math.isinf(b):
            return math.copysign(0.0, sign)
        return round_rational(Fraction(a) / Fraction(b), f, zero_sign=sign, **kw)
    if op == "sqrt":
        (a,) = x
        if a < 0:
            return math.nan
        if a == 0:
            return a
        if math.isinf(a):
            return _special(a, f, saturate)
        return round_sqrt(Fraction(a), f, **kw)
    raise ValueError(op)


def _special(v: float, f, saturate: bool) -> float:
    """An infinite result: inf where the format has it, else NaN (or +-max when saturating)."""
    if f.has_inf:
        return v
    return math.copysign(f.max, v) if saturate else math.nan


def _sum_oracle(x: Fraction, xsign, y: Fraction, ysign, f, mode, **kw) -> float:
    s = x + y
    if s == 0:
        # IEEE 754 6.3: an exact zero sum is +0 except when rounding down (-0); -0 + -0 = -0.
        both_zero = x == 0 and y == 0
        if both_zero and xsign == ysign:
            return math.copysign(0.0, xsign)  # +0 + +0 = +0, -0 + -0 = -0 in every mode
        return -0.0 if mode == "down" else 0.0
    return round_rational(s, f, mode=mode, **kw)


# ---- vectorised definition for exact float64 values ---------------------------------------------
def round_vec(x: np.ndarray, fmt, mode="nearest_even", rand62=None, subnormals=True,
              saturate=False) -> np.ndarray:  # fmt: skip
    """Round float64 values (each an *exact* result) to ``fmt`` by the definition, vectorised.

    Non-finite inputs pass through (NaN; inf -> inf or NaN/max for finite-only formats). Zero
    stays as it is (its sign is the caller's business).
    """
    f = fpsim.get_format(fmt)
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    neg = np.signbit(x)
    finite = np.isfinite(a) & (a > 0)
    safe = np.where(finite, a, 1.0)
    _, E = np.frexp(safe)  # safe = m 2^E, 0.5 <= m < 1: binade E - 1
    q = np.maximum(E - 1, f.emin) - f.man_bits
    quantum = np.ldexp(1.0, q)
    n = safe / quantum  # exact (power-of-two scaling)
    lo = np.floor(n)
    rem = n - lo  # exact
    odd = np.fmod(lo, 2) == 1
    if mode == "nearest_even":
        up = (rem > 0.5) | ((rem == 0.5) & odd)
    elif mode == "nearest_away":
        up = rem >= 0.5
    elif mode == "toward_zero":
        up = np.zeros_like(rem, bool)
    elif mode == "up":
        up = (rem > 0) & ~neg
    elif mode == "down":
        up = (rem > 0) & neg
    elif mode == "stochastic":
        thresh = np.ceil(rem * 2.0**62).astype(np.uint64)  # exact: rem has <= 53 bits
        up = np.asarray(rand62, np.uint64) < thresh
    else:
        raise ValueError(mode)
    r = (lo + up) * quantum
    over = r > f.max
    if over.any():
        to_max = saturate or mode == "toward_zero"
        tm = np.full(r.shape, to_max)
        if mode == "up":
            tm = tm | neg
        if mode == "down":
            tm = tm | ~neg
        ovf = np.inf if f.has_inf else np.nan
        r = np.where(over, np.where(tm, f.max, ovf), r)
    if not subnormals:
        r = np.where(r < f.min_normal, 0.0, r)
    r = np.where(neg, -r, r)
    # pass through zeros and non-finite values
    inf_result = x if f.has_inf else (np.sign(x) * f.max if saturate else np.nan)
    special = np.where(np.isinf(x), inf_result, x)
    return np.where(finite, r, special)


# ---- reductions: the documented orders, exactly -------------------------------------------------
def reduce_reference(terms, acc, out, order="sequential", mode="nearest_even", rounded=False,
                     rand=None) -> float:  # fmt: skip
    """Sum exact terms (Fractions or floats) in the documented order with the oracle rounding.

    ``rand(r)`` gives the 62 random bits of rounding event r (stochastic mode); events are
    numbered as fpsim.arith.matmul documents: 2k for rounding term k (``rounded``), 2c + 1 for
    the c-th accumulator rounding, 2K for the final rounding.
    """
    K = len(terms)
    rnd = rand or (lambda r: 0)
    t = [Fraction(v) for v in terms]
    if rounded:
        t = [Fraction(round_rational(v, acc, mode, rand62=rnd(2 * k))) for k, v in enumerate(t)]
    count = [0]

    def acc_round(v):
        r = round_rational(v, acc, mode, rand62=rnd(2 * count[0] + 1)) if _fin(v) else v
        count[0] += 1
        return Fraction(r) if _fin(r) else r

    def plus(x, y):  # exact, or IEEE inf/NaN arithmetic once a partial sum has overflowed
        return x + y if _fin(x) and _fin(y) else float(x) + float(y)

    if K == 0:
        s = Fraction(0)
    elif order == "sequential":
        s = acc_round(t[0])
        for v in t[1:]:
            s = acc_round(plus(s, v))
    else:

        def rec(lo, hi):
            if hi - lo == 1:
                return t[lo]
            h = 1 << ((hi - lo - 1).bit_length() - 1)
            left = rec(lo, lo + h)
            right = rec(lo + h, hi)
            return acc_round(plus(left, right))

        s = rec(0, K)
        if K == 1 and not rounded:
            s = acc_round(s)
    if not _fin(s):
        return s
    return round_rational(s, out, mode, rand62=rnd(2 * K))


def _fin(v) -> bool:
    return isinstance(v, Fraction) or math.isfinite(v)


# ---- the block FMA of a tensor core, from its definition ----------------------------------------
def _exp2_floor(v: Fraction) -> int:
    """floor(log2 |v|) for v != 0."""
    return _binade(abs(v))


def _align(v: Fraction, unit: Fraction, how: str) -> int:
    """|v| in units of ``unit``, cut to an integer: truncated, or rounded to nearest even."""
    n = abs(v) / unit
    lo = math.floor(n)
    if how == "truncate":
        return lo
    rem = n - lo
    return lo + 1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1) else lo


def _ieee_add(x: float, y: float, f, mode: str, subnormals=True, rand62=0) -> float:
    return op_oracle("add", [x, y], f, mode, subnormals=subnormals, rand62=rand62)


def block_fma_reference(a, b, fmt, model, c=0.0, out="fp64", mode="nearest_even", rand=None,
                        fmt_b=None):  # fmt: skip
    """One dot product computed by the block FMA ``model`` (a fpsim.arith.BlockFMA, read for its
    parameters only), exactly as fpsim.arith.accumulation defines it: exact rational arithmetic
    for the alignment and the block sums, :func:`round_rational` for every rounding.

    ``a``, ``b``: the K inputs (floats, values of ``fmt``); ``b=None`` for a sum (the terms are
    a's values, aligned by their own exponents); ``c``: the starting accumulator; ``out``,
    ``mode``: the final rounding; ``rand(r)``: the random bits of rounding event r
    (2 * block + 1 for block roundings, 2K for the final one). ``fmt_b``: b's format when it
    is not ``fmt`` (mixed inputs, E4M3 x E5M2: each operand's subnormals are read in its own
    format's lowest binade, and flushed below its own smallest normal).
    """
    rnd = rand or (lambda r: 0)
    f = fpsim.get_format(fmt)
    fb = f if fmt_b is None else fpsim.get_format(fmt_b)
    acc = model.acc
    K = len(a)
    unit = b is None
    a = [float(v) for v in a]
    b = [1.0] * K if unit else [float(v) for v in b]
    c_emin = min(acc.emin, -126)  # the accumulator is read as a binary32 number
    F = model.align_bits
    bmode = model.rounding

    def flush_in(x: float, g=f) -> float:
        # inputs below 2^emin are read in the lowest binade (or flushed)
        if model.input_subnormals or not math.isfinite(x) or abs(Fraction(x)) >= _pow2(g.emin):
            return x
        return math.copysign(0.0, x)

    def e_in(x: float, g=f) -> int:
        return max(_exp2_floor(Fraction(x)), g.emin)

    s = float(c)
    outer = 0.0
    for blk, k0 in enumerate(range(0, K, model.block)):
        k1 = min(k0 + model.block, K)
        xs = [flush_in(v) for v in a[k0:k1]]
        ys = b[k0:k1] if unit else [flush_in(v, fb) for v in b[k0:k1]]
        if F is None:
            for x, y in zip(xs, ys, strict=True):
                s = op_oracle("fma", [x, y, s], acc, bmode, subnormals=model.acc_subnormals,
                              rand62=rnd(2 * blk + 1))  # fmt: skip
        else:
            if not model.acc_subnormals and math.isfinite(s) and abs(s) < acc.min_normal:
                s = math.copysign(0.0, s)
            # the products as floats (NaN, inf and the signs of zeros), exact where finite
            prods = []
            for x, y in zip(xs, ys, strict=True):
                p = x * y
                if math.isfinite(p):
                    q = Fraction(x) * Fraction(y)
                    if model.products == "rounded" and q != 0:
                        p = round_rational(q, acc)
                    elif q != 0:
                        p = q
                prods.append(p)
            terms = [s] + prods
            nonfinite = [t for t in terms if isinstance(t, float) and not math.isfinite(t)]
            if nonfinite:
                if any(math.isnan(t) for t in nonfinite) or len({t > 0 for t in nonfinite}) > 1:
                    s = math.nan
                else:
                    s = nonfinite[0]
            else:
                exps = []
                for p, x, y in zip(prods, xs, ys, strict=True):
                    if p == 0:
                        continue
                    if model.products == "rounded":
                        exps.append(max(_exp2_floor(Fraction(p)), c_emin))
                    elif unit:
                        exps.append(e_in(x))
                    elif model.normalize_products:
                        exps.append(max(e_in(x) + e_in(y, fb), _exp2_floor(Fraction(p))))
                    else:
                        exps.append(e_in(x) + e_in(y, fb))
                if s != 0:
                    exps.append(max(_exp2_floor(Fraction(s)), c_emin))
                if model.min_exponent is not None:
                    exps.append(model.min_exponent)
                X = 0
                if exps:
                    unit_q = _pow2(max(exps) - F)
                    for t in terms:
                        if t != 0:
                            X += (1 if t > 0 else -1) * _align(Fraction(t), unit_q,
                                                               model.align_rounding)  # fmt: skip
                if X == 0:
                    all_neg_zero = all(t == 0 and math.copysign(1.0, t) < 0 for t in terms)
                    s = -0.0 if (bmode == "down" or all_neg_zero) else 0.0
                else:
                    v = X * unit_q
                    if abs(v) >= _pow2(acc.emax + 1):
                        s = math.inf if v > 0 else -math.inf
                    else:
                        s = round_rational(v, acc, bmode, subnormals=model.acc_subnormals,
                                           rand62=rnd(2 * blk + 1))  # fmt: skip
        if model.promote_every and (k1 % model.promote_every == 0 or k1 == K):
            outer = _ieee_add(outer, s, model.promote_to, "nearest_even")
            s = 0.0
    total = outer if model.promote_every else s
    if not math.isfinite(total):
        return total if (math.isnan(total) or fpsim.get_format(out).has_inf) else math.nan
    if total == 0:
        return total
    return round_rational(Fraction(total), out, mode, rand62=rnd(2 * K))
