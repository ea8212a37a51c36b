"""Rounding a float64 to a format with floating-point instructions only: the form the reduction
kernels use in their innermost loops, where :func:`fpsim.kernels.scalar.convert` (integer
significands and branches) would cost ten times more and stop the compiler from vectorising.

The idea. A value x in binade e (2^e <= |x| < 2^(e+1)) lies on the grid of multiples of the
quantum q = 2^(max(e, emin) - m) of a format with m fraction bits (below emin the grid keeps the
spacing of the lowest binade: gradual underflow). Scaling by 1/q is exact (a power of two), so

    round(x) = R(x / q) * q,     R = trunc (toward zero), ceil (up), floor (down),
                                 trunc(u) + sign(u) [|u - trunc(u)| >= 1/2] (ties away)

is the correctly rounded result, and every step is one machine instruction: q and 1/q come from
the exponent bits of x (``2^e`` is x's pattern with the fraction cleared), R is a hardware
rounding instruction, and overflow, flush-to-zero, the sign of zero and inf/NaN are selects.
Nearest even, the common case, is cheaper still: the machine's own addition rounds to nearest
even, so ``(x + s) - s`` with s = 1.5 * 2^(e + 52 - m) is x rounded to the quantum 2^(e - m)
(:func:`round_fast_nearest_even`). The same functions run scalar in Python, vectorised on the
CPU and on the GPU.

Valid (``fast_round_ok``) for signed IEEE-style formats with subnormals (±inf, IEEE NaN, -0),
1 to 50 fraction bits, exponents within float64's normal range and a smallest quantum between
2^-1022 and 1 -- fp16, bf16, tf32, fp32, e8m13, fp8_e5m2, ... -- in every mode, stochastic
rounding included (the exact fraction of a quantum compared with the random bits in float64,
:func:`stochastic_magnitude`).
``tests/test_reduce_kernels.py`` checks it against :func:`scalar.round_value` on every mode and
edge.

``floor_f64`` and friends return a float64 everywhere (numba's CPU ``math.floor`` returns an
integer; numba-cuda's returns a float): the CUDA back end swaps their bodies for the libdevice
instructions (see :mod:`fpsim.kernels.arith_cuda`).
"""

import math

import numpy as np
from numba.extending import register_jitable

from .scalar import (
    DOWN,
    NEAREST_EVEN,
    TOWARD_ZERO,
    UP,
    bits_to_float64,
    emax_of,
    emin_of,
    float64_to_bits,
    is_ieee_style,
)

EXP_MASK = 0x7FF0000000000000  # the exponent field of a float64 pattern
EXP_2046 = 2046 << 52  # 2046 - field: the pattern of 2^-e from that of 2^e


@register_jitable
def floor_f64(x):
    """floor(x) as a float64."""
    return np.floor(x)


@register_jitable
def ceil_f64(x):
    """ceil(x) as a float64."""
    return np.ceil(x)


@register_jitable
def trunc_f64(x):
    """trunc(x) (toward zero) as a float64."""
    return np.trunc(x)


@register_jitable
def rint_f64(x):
    """x rounded to the nearest integer, ties to even, as a float64."""
    return np.rint(x)


@register_jitable
def pow2_of(x):
    """2^floor(log2|x|) for a normal float64 x (x's pattern with the sign and fraction cleared);
    0 for zero and float64 subnormals, inf for inf and NaN."""
    return bits_to_float64(float64_to_bits(x) & EXP_MASK)


@register_jitable
def inv_pow2_of(p):
    """1/p for a power of two 2^-1022 <= p <= 2^1023 given as its float64 (exact, no division);
    2^1023 for p = 0."""
    return bits_to_float64(EXP_2046 - float64_to_bits(p))


@register_jitable
def fast_round_ok(f):
    """Whether :func:`round_fast` is exact for the format ``f`` (a FormatRecord)."""
    # The smallest quantum at most 1: then x / q never underflows (q >= 1 and a float64
    # subnormal x would lose the bits that decide a directed rounding). And at least 2^-1022:
    # 1 / q (the factor x is scaled by) must not overflow, and q itself must be a normal
    # float64 (e2m2 with emin = -1022 has the quantum 2^-1024, whose inverse is inf). At the
    # top, nearest even's shifter s = 1.5 * 2^(emax + 52 - m) must stay finite (e10m1 with
    # emax = 990 would need 1.5 * 2^1041).
    return (
        is_ieee_style(f)
        and 1 <= f.man_bits <= 50
        and emin_of(f) - f.man_bits >= -1022
        and emax_of(f) - f.man_bits <= 970
        and emin_of(f) - f.man_bits <= 0
    )


@register_jitable
def fast_round_constants(f, subnormals, saturate):
    """The float64 constants the fast roundings need for the format ``f``: ``(2^emin, 2^-emin,
    2^m, 2^-m, max, flush, saturate, 2^emax, 1.5 * 2^(52 - m))``; ``flush`` is the smallest
    normal when subnormal results are flushed to zero, else 0. (For a format where
    :func:`fast_round_ok` fails the exponents are clamped into float64's range: the constants
    are then never used.)"""
    emin = min(max(emin_of(f), -1022), 1023)
    m = min(f.man_bits, 60)
    emax = min(max(emax_of(f), -1022), 1023)
    two_emin = bits_to_float64((emin + 1023) << 52)
    inv_two_emin = bits_to_float64((1023 - emin) << 52)
    two_m = bits_to_float64((m + 1023) << 52)
    inv_two_m = bits_to_float64((1023 - m) << 52)
    two_emax = bits_to_float64((emax + 1023) << 52)
    # max = 1.f * 2^emax, formed as (significand * 2^-m) * 2^emax: both factors and the
    # product are normal float64 numbers whenever emax >= -1022, so it is exact even where
    # 2^(emax - m) alone would be a float64 subnormal (emax = -1001 for e2m1 with bias 1003).
    max_sig = (f.max_mag & ((1 << m) - 1)) | (1 << m)
    maxv = (max_sig * inv_two_m) * two_emax
    flush = two_emin if subnormals == 0 else 0.0
    magic = 1.5 * bits_to_float64((min(max(52 - m, -1022), 1023) + 1023) << 52)
    return (two_emin, inv_two_emin, two_m, inv_two_m, maxv, flush, saturate * 1.0, two_emax,
            magic)  # fmt: skip


@register_jitable
def _scaled(x, k):
    """(x / q, q): x in units of its quantum q = 2^(e - m) (both exact), e the binade of x within
    [emin, emax] (from the exponent bits of x; beyond emax x / q only grows, and overflows)."""
    p = min(max(pow2_of(x), k[0]), k[7])  # the binade, within the format's [emin, emax]
    return x * (inv_pow2_of(p) * k[2]), p * k[3]


@register_jitable
def _finish(x, y, to_max, k):
    """Overflow (to inf, or to max when saturating or when the direction points back to zero),
    flush-to-zero (after rounding, as convert), the sign of zero (that of x), and inf/NaN inputs
    passed unchanged (IEEE-style formats keep both)."""
    maxv, flush = k[4], k[5]
    big = maxv if to_max else math.inf
    y = big if abs(y) > maxv else y
    y = 0.0 if abs(y) < flush else y
    y = math.copysign(y, x)
    return x if (x - x) != 0.0 else y


# One function per mode: the hot loops call these with no mode test inside, so that each loop
# compiles to straight vector code (the option tests are selects, not branches).
@register_jitable
def round_fast_nearest_even(x, k):
    """Nearest even by the machine's own rounding: with s = 1.5 * 2^(e + 52 - m) (e the binade
    of x, within [emin, emax]) the float64 sum x + s has exactly the quantum 2^(e - m) as its
    last place (|x| < 2^(e + 51 - m) for m <= 50), so ``(x + s) - s`` is x rounded to nearest
    even on the format's grid. inf and NaN pass (s stays finite); values beyond the range end
    above max and overflow. Branch-free: saturation and flush-to-zero are selects (``k[5]`` is 0
    when subnormals are kept, and then flushes nothing)."""
    p = min(max(pow2_of(x), k[0]), k[7])
    s = p * k[8]
    y = (x + s) - s
    big = k[4] if k[6] == 1.0 else math.inf
    y = big if abs(y) > k[4] else y
    y = 0.0 if abs(y) < k[5] else y  # flush-to-zero (after rounding)
    y = math.copysign(y, x)
    return x if (x - x) != 0.0 else y  # an infinite input stays infinite; only overflow saturates


@register_jitable
def round_fast_nearest_even_ieee(x, k):
    """:func:`round_fast_nearest_even` with IEEE's defaults (subnormal results kept, overflow to
    inf: ``k`` made with ``subnormals=1, saturate=0``), in fewer instructions: the rounding of
    |x|, then x's sign put back (a zero result keeps it; inf and NaN pass: |x| + s - s is
    inf or NaN, and inf > max)."""
    ax = abs(x)
    p = min(max(pow2_of(ax), k[0]), k[7])
    s = p * k[8]
    y = (ax + s) - s
    y = math.inf if y > k[4] else y
    return math.copysign(y, x)


@register_jitable
def round_fast_toward_zero(x, k):
    u, q = _scaled(x, k)
    return _finish(x, trunc_f64(u) * q, True, k)


@register_jitable
def round_fast_up(x, k):
    u, q = _scaled(x, k)
    return _finish(x, ceil_f64(u) * q, (k[6] == 1.0) | (x < 0.0), k)


@register_jitable
def round_fast_down(x, k):
    u, q = _scaled(x, k)
    return _finish(x, floor_f64(u) * q, (k[6] == 1.0) | (x > 0.0), k)


@register_jitable
def round_fast_nearest_away(x, k):
    u, q = _scaled(x, k)
    t = trunc_f64(u)  # u - t is exact; u + 1/2 would not be (0.5 - 2^-54 + 0.5 rounds to 1)
    r = t + math.copysign(1.0, u) if abs(u - t) >= 0.5 else t
    return _finish(x, r * q, k[6] == 1.0, k)


@register_jitable
def stochastic_magnitude(a, rh, rl, k):
    """The float64 ``a >= 0`` (its exact value) rounded stochastically to the grid of the
    constants ``k``, before overflow and flush-to-zero: one quantum up when ``rand62 <
    ceil(f * 2^62)``, f the fraction of a quantum by which ``a`` exceeds its lower neighbour
    -- ``scalar.convert``'s rule -- with the 62 random bits given as ``rh = hi30 * 2^-30`` and
    ``rl = lo32 * 2^-62`` (:func:`stochastic_split`).

    Why the comparison is ``rl < fl(f - rh)``. u = a / q is exact (a power-of-two scaling),
    and so is f = u - trunc(u). For the integer rand62, rand62 < ceil(f 2^62) iff rand62 <
    f 2^62 iff rl < D = f - rh (exact reals). If D >= 2^-30 or D < 0, its rounding d keeps
    that side of 2^-30 and of 0 (both are float64s; rounding is monotonic), and rl, a
    multiple of 2^-62 in [0, 2^-30), compares alike with D and d. If 0 <= D < 2^-30, rh (a
    multiple of 2^-30) is f with its bits below 2^-30 cleared, so D is exact. Float
    instructions only (no float-to-int64 conversion, which AVX2 lacks): the loops
    vectorise."""
    p = min(max(pow2_of(a), k[0]), k[7])  # the binade, within the format's [emin, emax]
    u = a * (inv_pow2_of(p) * k[2])
    n = trunc_f64(u)
    up = rl < (u - n) - rh
    return (n + 1.0 if up else n) * (p * k[3])


@register_jitable
def stochastic_split(rand62):
    """The 62 random bits as the two float64s of :func:`stochastic_magnitude`: ``(hi30 *
    2^-30, lo32 * 2^-62)`` (both exact)."""
    return (rand62 >> 32) * 9.313225746154785e-10, (rand62 & 0xFFFFFFFF) * 2.168404344971009e-19


@register_jitable
def round_fast_stochastic_split(x, rh, rl, k):
    """Stochastic rounding of the float64 ``x`` (its exact value) with the random bits split
    as :func:`stochastic_split` gives them: overflow, flush-to-zero, the sign of zero and
    inf/NaN as :func:`round_fast_toward_zero` (stochastic rounding overflows to inf unless
    saturating)."""
    return _finish(x, stochastic_magnitude(abs(x), rh, rl, k), k[6] == 1.0, k)


@register_jitable
def round_fast_stochastic_finite(x, rh, rl, k):
    """:func:`round_fast_stochastic_split` for a finite ``x``, in fewer instructions (inf and
    NaN are not passed through: the reduction's step sends them to its exact step)."""
    y = stochastic_magnitude(abs(x), rh, rl, k)
    big = k[4] if k[6] == 1.0 else math.inf
    y = big if y > k[4] else y
    y = 0.0 if y < k[5] else y  # flush-to-zero (after rounding)
    return math.copysign(y, x)


@register_jitable
def round_fast_stochastic(x, rand62, k):
    """Stochastic rounding of the float64 ``x`` (its exact value): away from zero with
    probability ``ceil(f * 2^62) / 2^62``, f the fraction of a quantum by which |x| exceeds its
    lower neighbour -- ``scalar.convert``'s rule, so the same random bits give the same result
    (the integer ``rand62``; :func:`round_fast_stochastic_split` is the same rounding)."""
    rh, rl = stochastic_split(rand62)
    return round_fast_stochastic_split(x, rh, rl, k)


@register_jitable
def round_fast(x, mode, k):
    """Round the float64 ``x`` to the format of the constants ``k`` (:func:`fast_round_constants`)
    in the deterministic ``mode``: the result of ``scalar.round_value`` for every input, where
    :func:`fast_round_ok` holds."""
    if mode == NEAREST_EVEN:
        return round_fast_nearest_even(x, k)
    if mode == TOWARD_ZERO:
        return round_fast_toward_zero(x, k)
    if mode == UP:
        return round_fast_up(x, k)
    if mode == DOWN:
        return round_fast_down(x, k)
    return round_fast_nearest_away(x, k)
