"""Correctly rounded arithmetic on single values in any format: add, sub, mul, div, sqrt, fma,
in every rounding mode (used by :mod:`fpsim.arith` through the kernels of
:mod:`fpsim.kernels.arith_cpu` and :mod:`fpsim.kernels.arith_cuda`). Like
:mod:`fpsim.kernels.scalar`, plain Python decorated with ``register_jitable``: the same lines run
uncompiled, on the CPU and on the GPU.
"""

import math

from numba.extending import register_jitable

from .record import FLOAT64
from .scalar import (
    DOWN,
    NEAREST_AWAY,
    NEAREST_EVEN,
    STOCHASTIC,
    TOWARD_ZERO,
    UP,
    ZERO,
    add_odd,
    bits_to_float64,
    emax_of,
    float64_to_bits,
    pow2,
    round_to_odd_f64,
    round_value,
    two_sum,
    unpack,
)

# ==============================================================================================
# Arithmetic: correctly rounded add, sub, mul, div, sqrt, fma (used by fpsim.arith).
#
# Every operation is "compute an exact (or exactly-as-good) float64 stand-in, then round it once
# with convert". Why each stand-in is good enough is argued in the docstring of
# fpsim/arith/elementwise.py:
#   add/sub/fma  two_sum gives the exact result as s + err; rounding s to odd (a sticky last
#                bit) then rounding once to a format with p <= 51 bits is a correct single
#                rounding in every mode (Boldo & Melquiond, "Emulation of FMA and correctly
#                rounded sums: proved algorithms using rounding to odd", IEEE TC 57(4), 2008).
#   mul          the float64 product of two p <= 25-bit significands is exact.
#   div, sqrt    float64 round-to-nearest is a correct stand-in when 53 >= 2p + 2 (the exact
#                result is never within half a float64 ulp of a format value or midpoint
#                unless it equals it; Figueroa, "When is double rounding innocuous?", 1995).
#   fp64         add/sub in binary64 itself: two_sum and one step to the neighbouring float64.
# ==============================================================================================

F64_MAX = 1.7976931348623157e308  # the largest finite float64, (2 - 2^-52) x 2^1023
F64_2_1023 = 2.0**1023  # half of 2^1024, the first power of two beyond float64

# Operation codes (the integers the arithmetic kernels take).
OP_ADD = 0
OP_SUB = 1
OP_MUL = 2
OP_DIV = 3
OP_SQRT = 4
OP_FMA = 5


@register_jitable
def zero_sum(a, b, mode):
    """The IEEE 754 (§6.3) zero of an exact sum ``a + b == 0``: +0, but -0 when rounding down,
    and -0 + -0 = -0 in every mode. Hardware round-to-nearest gives ``a + b``; for DOWN the
    negated sum of the negations has exactly the wanted sign."""
    if mode == DOWN:
        return -((-a) + (-b))
    return a + b


@register_jitable
def div_float64(a, b):
    """``a / b`` rounded to nearest in float64, with IEEE results for a zero divisor (plain
    Python would raise ZeroDivisionError there)."""
    if b == 0.0:
        if a != a or a == 0.0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


@register_jitable
def sqrt_float64(a):
    """``sqrt(a)`` rounded to nearest in float64; NaN below zero, ``sqrt(-0) = -0``."""
    if a < 0.0:
        return math.nan
    return math.sqrt(a)


@register_jitable
def scaled62(x, g, ceil):
    """``|x| * 2^(62 - g)`` rounded up (``ceil=True``) or down, as an integer, exactly.

    ``x`` is a finite float64 with ``|x| * 2^(62 - g) <= 2^62``: a distance measured in units of
    a quantum ``2^g``, scaled to the 62 bits that stochastic rounding compares with ``rand62``.
    Integer shifts on the significand, so no float underflow can spoil it.
    """
    sign, cls, e, sig = unpack(float64_to_bits(x), FLOAT64)
    if cls == ZERO:
        return 0
    sh = e - 52 + 62 - g  # |x| = sig * 2^(e - 52)
    if sh >= 0:
        return sig << sh
    if sh < -62:
        return 1 if ceil else 0  # 0 < |x| * 2^(62-g) < 1 (sig < 2^53)
    q = sig >> -sh
    if ceil and (q << -sh) != sig:
        q += 1
    return q


@register_jitable
def stochastic_threshold(d, e, g):
    """``ceil((d + e) * 2^(62 - g))`` for ``0 < d + e < 2^g``, exactly.

    ``d`` is the exact float64 distance from the lower neighbour to ``s`` (a multiple of the
    float64 ulp of s), ``e`` the exact remainder (``|e| <= ulp(s) / 2``). Stochastic rounding goes
    to the upper neighbour when ``rand62 < threshold``: probability ``threshold / 2^62``, the
    exact fraction ``(d + e) / 2^g`` rounded up to a multiple of 2^-62 -- the same rule
    ``round_significand`` applies to a float64 input.
    """
    dc = scaled62(d, g, True)
    df = scaled62(d, g, False)
    if e == 0.0 or dc != df:
        # d is not a whole number of 2^(g-62) units: e is below half a unit and cannot carry
        # the sum across the next integer.
        return dc
    if e > 0.0:
        return df + scaled62(e, g, True)
    return df - scaled62(e, g, False)


@register_jitable
def round_sum_stochastic(s, err, f, subnormals, saturate, rand62):
    """Stochastically round the exact value ``s + err`` (``s = fl(s + err)``, ``err != 0``) to the
    format: up (away from zero) with probability exactly ``ceil(f * 2^62) / 2^62``, where f is the
    fraction of a quantum by which the exact value exceeds its lower neighbour."""
    # 14. The two format neighbours of the exact value: round its odd stand-in toward zero and
    #     away from zero (correct for directed modes, Boldo & Melquiond).
    t = round_to_odd_f64(s, err)
    lo = round_value(t, f, TOWARD_ZERO, 1, 0, 0)
    hi = round_value(t, f, UP if t > 0.0 else DOWN, 1, 0, 0)
    overflow = math.isinf(hi) or hi != hi
    if overflow:
        # Past the largest value the next grid point (max + one quantum) is not a format value.
        g = emax_of(f) - f.man_bits
    else:
        g = unpack(float64_to_bits(hi - lo), FLOAT64)[2]  # hi - lo = 2^g, exact
    # 15. Distance of the exact value above |lo|, in the direction of growing magnitude: the
    #     float64 part |s| - |lo| is exact (Sterbenz), the remainder err keeps its exact value.
    d = abs(s) - abs(lo)
    e = err if s > 0.0 else -err
    # The quantum 2^g as a float64. g >= -1074 (the format's values are float64s), but pow2
    # builds only normal powers: below 2^-1022 (a format whose largest values are spaced that
    # finely, e.g. Format(5, 23, bias=1032)) multiply two normal ones -- exact, the product
    # being the float64 subnormal 2^g.
    q = pow2(g) if g >= -1022 else pow2(g + 64) * pow2(-64)
    if overflow and (d > q or (d == q and e >= 0.0)):
        up = True  # at or beyond max + quantum: every choice overflows
    else:
        up = rand62 < stochastic_threshold(d, e, g)
    if not up:
        r = lo
    elif overflow:
        r = lo + math.copysign(q, lo)  # max + quantum: the rounding below overflows it
    else:
        r = hi
    # 16. r is on the format's grid: this rounding is exact; it applies overflow, saturation
    #     and flush-to-zero exactly as convert does for every other mode.
    return round_value(r, f, STOCHASTIC, subnormals, saturate, 0)


@register_jitable
def add_float64(a, b, mode, saturate, rand62):
    """``a + b`` correctly rounded to binary64 itself in every mode (fp64 accumulators).

    Round to nearest even is the hardware sum. The other modes start from it: two_sum gives the
    exact remainder, which says on which side of ``s`` the exact sum lies, and the answer is
    ``s`` or its float64 neighbour on that side.
    """
    s, err = two_sum(a, b)
    if s == 0.0:
        return zero_sum(a, b, mode)
    if s != s:
        return s
    neg = s < 0.0
    to_max = (
        saturate == 1 or mode == TOWARD_ZERO or (mode == UP and neg) or (mode == DOWN and not neg)
    )
    if math.isinf(s):
        if math.isinf(a) or math.isinf(b):
            return s  # inf + finite: exact
        # 17. A finite sum beyond the float64 range.
        if mode == STOCHASTIC:
            # Decide in halves (exact: both addends are >= 2^970 here): the neighbours of
            # (a + b) / 2 are max/2 and 2^1023, one quantum 2^970 apart.
            h, herr = two_sum(a * 0.5, b * 0.5)
            hm = abs(h)
            e = -herr if neg else herr
            if hm > F64_2_1023 or (hm == F64_2_1023 and e >= 0.0):
                up = True  # (a + b) / 2 at or beyond 2^1023: overflow for sure
            else:
                up = rand62 < stochastic_threshold(hm - F64_MAX * 0.5, e, 970)
            if not up:
                return math.copysign(F64_MAX, s)
            return math.copysign(F64_MAX, s) if saturate == 1 else s
        return math.copysign(F64_MAX, s) if to_max else s
    if err == 0.0:
        return s
    # 18. The float64 on the far side of the exact value, one bit pattern step from s.
    outward = (err > 0.0) == (s > 0.0)
    bits = float64_to_bits(s)
    nb = bits_to_float64(bits + 1 if outward else bits - 1)
    if mode == NEAREST_EVEN:
        r = s
    elif mode == NEAREST_AWAY:
        # A tie is err exactly half the gap to nb; away from zero then means nb if outward.
        r = nb if (outward and abs(nb - s) == 2.0 * abs(err)) else s
    elif mode == TOWARD_ZERO:
        r = s if outward else nb
    elif mode == UP:
        r = nb if err > 0.0 else s
    elif mode == DOWN:
        r = nb if err < 0.0 else s
    else:  # STOCHASTIC
        lo = s if outward else nb
        if math.isinf(nb):
            g = 971  # s is the largest float64: the next grid point 2^1024 is one quantum away
        else:
            g = unpack(float64_to_bits(nb - s), FLOAT64)[2]
        e = err if s > 0.0 else -err
        up = rand62 < stochastic_threshold(abs(s) - abs(lo), e, g)
        if up:
            r = s if not outward else nb
        else:
            r = lo
    if math.isinf(r) and saturate == 1:
        return math.copysign(F64_MAX, r)
    return r


@register_jitable
def add_rounded(x, y, f, mode, subnormals, saturate, rand62):
    """``x + y`` (any two float64s) correctly rounded to the format: one rounding of the exact
    sum, in every mode. The format needs precision <= 51 bits and a largest exponent <= 1022,
    or must be binary64 itself."""
    if f.man_bits >= 52:
        r = add_float64(x, y, mode, saturate, rand62)
        # exact for a binary64 value; applies flush-to-zero
        return round_value(r, f, mode, subnormals, saturate, 0)
    s, err = two_sum(x, y)
    if math.isinf(s) and math.isfinite(x) and math.isfinite(y):
        # A finite sum beyond float64 (accumulators: fp64 terms, products near 2^1024): then
        # |x + y| >= 2^1024 - 2^970, beyond max + one quantum <= 2^1023 (emax <= 1022), so it
        # overflows in every mode -- to inf/NaN, or to max when rounding toward zero, in the
        # directed mode pointing back to zero (IEEE 754 7.4), or saturating; stochastic
        # rounding, a quantum or more past max, goes up for sure. F64_MAX, also beyond
        # max + quantum, rounds to the same result in every mode; inf would not (it stays inf
        # where max is due).
        return round_value(
            math.copysign(F64_MAX, s), f, mode, subnormals, saturate,
            rand62,
        )  # fmt: skip
    if s == 0.0:
        s = zero_sum(x, y, mode)
    if mode == STOCHASTIC and ((err > 0.0) | (err < 0.0)):
        return round_sum_stochastic(
            s, err, f, subnormals, saturate, rand62
        )
    t = round_to_odd_f64(s, err)
    return round_value(t, f, mode, subnormals, saturate, rand62)


@register_jitable
def arith_op(op, a, b, c, f, mode, subnormals, saturate, rand62):
    """One correctly rounded operation on float64 operands, result rounded once to the format.

    ``op``: OP_ADD (a + b), OP_SUB (a - b), OP_MUL (a * b), OP_DIV (a / b), OP_SQRT (sqrt(a); b
    and c unused), OP_FMA (a * b + c). Preconditions (checked by fpsim.arith): the operands are
    values of a format with precision p <= 25 for mul/div/sqrt/fma (p <= 51, or binary64, for
    add/sub), and the format's exponent range keeps the float64 intermediates normal.
    """
    if op == OP_MUL:
        # 19. The float64 product is exact: round it once.
        return round_value(a * b, f, mode, subnormals, saturate, rand62)
    if op == OP_DIV:
        # 20. Round-to-nearest in float64 is a correct stand-in for the exact quotient.
        q = div_float64(a, b)
        return round_value(q, f, mode, subnormals, saturate, rand62)
    if op == OP_SQRT:
        r = sqrt_float64(a)
        return round_value(r, f, mode, subnormals, saturate, rand62)
    # 21. add, sub, fma: the exact sum of two float64s (fma: the exact product and c).
    if op == OP_FMA:
        x = a * b
        y = c
    elif op == OP_SUB:
        x = a
        y = -b
    else:
        x = a
        y = b
    return add_rounded(x, y, f, mode, subnormals, saturate, rand62)


@register_jitable
def stand_in_nearest(op, a, b, c):
    """The float64 whose round-to-nearest-even to the format equals that of the exact result:
    the branch-free front half of ``arith_op`` for the default mode (kernels vectorise it)."""
    if op == OP_MUL:
        return a * b
    if op == OP_DIV:
        return div_float64(a, b)
    if op == OP_SQRT:
        return sqrt_float64(a)
    if op == OP_FMA:
        return add_odd(a * b, c)
    if op == OP_SUB:
        return add_odd(a, -b)
    return add_odd(a, b)


@register_jitable
def add(a, b, f, mode, subnormals, saturate, rand62):
    """``a + b`` correctly rounded to the format (float64 result)."""
    return arith_op(
        OP_ADD, a, b, 0.0, f, mode, subnormals, saturate, rand62
    )


@register_jitable
def sub(a, b, f, mode, subnormals, saturate, rand62):
    """``a - b`` correctly rounded to the format (float64 result)."""
    return arith_op(
        OP_SUB, a, b, 0.0, f, mode, subnormals, saturate, rand62
    )


@register_jitable
def mul(a, b, f, mode, subnormals, saturate, rand62):
    """``a * b`` correctly rounded to the format (float64 result)."""
    return arith_op(
        OP_MUL, a, b, 0.0, f, mode, subnormals, saturate, rand62
    )


@register_jitable
def div(a, b, f, mode, subnormals, saturate, rand62):
    """``a / b`` correctly rounded to the format (float64 result)."""
    return arith_op(
        OP_DIV, a, b, 0.0, f, mode, subnormals, saturate, rand62
    )


@register_jitable
def sqrt(a, f, mode, subnormals, saturate, rand62):
    """``sqrt(a)`` correctly rounded to the format (float64 result)."""
    return arith_op(
        OP_SQRT, a, 0.0, 0.0, f, mode, subnormals, saturate, rand62
    )


@register_jitable
def fma(a, b, c, f, mode, subnormals, saturate, rand62):
    """``a * b + c`` with one rounding to the format (float64 result)."""
    return arith_op(
        OP_FMA, a, b, c, f, mode, subnormals, saturate, rand62
    )
