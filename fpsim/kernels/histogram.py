"""Range histograms straight from float bit patterns, in one pass (numba CPU kernel; the CUDA
kernel in :mod:`fpsim.kernels.histogram_cuda` runs the same :func:`slot_of`).

What :class:`fpsim.stats.RangeHistogram` needs from each value is its binade ``b`` (``2^b <=
|x| < 2^(b+1)``), whether ``|x|`` is a power of two, and how many of the histogram's sorted
significand cuts its significand ``1.f`` lies past. For an IEEE-style binary float (fp16,
bf16, fp32, fp64: exponent field all ones = inf/NaN, field 0 = zero and subnormals) all three
come from the bits: ``b`` is the exponent field minus the bias (a subnormal is normalised by
its leading one), and a cut ``c`` becomes an integer threshold on the fraction field ``f``
(past ``c`` iff ``f >= t``, computed exactly from ``c`` for the field's width). No float
arithmetic on the values and no conversion: bf16 and fp16 are read as their 16-bit integers.

Each value adds 1 to one *slot* of a flat table: ``row × (n + 2) + col`` with ``row = b -
first`` (``first``: the binade of the format's smallest subnormal; fp32 has 277 rows) and
``col`` the number of the n cuts passed, or ``n + 1`` for an exact power of two; the last two
slots count zeros and inf/NaN. The number of cuts passed is looked up by the fraction's top
(at most 12) bits; only a fraction whose bucket holds a threshold compares further. For
formats of at most 16 bits the whole slot is one look-up by the magnitude code
(:func:`slot_table`), so the loop is a load and an increment.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit
from numba.extending import register_jitable

LUT_BITS = 12
SMALL_FORMAT_BITS = 16  # magnitudes of at most 15 bits: one look-up table of every slot


@register_jitable
def count_past(f, thresholds):
    """How many of the sorted ``thresholds`` the fraction ``f`` reaches (no data-dependent
    branch: random fractions would mispredict it)."""
    k = 0
    for j in range(thresholds.size):
        k += f >= thresholds[j]
    return k


@register_jitable
def slot_of(mag, exp_bits, man_bits, bias, first, ncols, nslots, lut, shift):
    """The table slot of a value from its magnitude code (its bits without the sign), or
    ``-1 - k`` when the cuts' count needs the exact comparison (a threshold inside its
    fraction's bucket): the caller then adds ``count_past`` (see :func:`slot_exact`).

    No loop here: numba inlines it (a loop over the thresholds array made each call ~50x
    slower, through the array's reference counting on every call)."""
    e = mag >> man_bits
    f = mag & ((1 << man_bits) - 1)
    if e == (1 << exp_bits) - 1:
        return nslots - 1  # inf / NaN
    if mag == 0:
        return nslots - 2
    if e == 0:  # subnormal: 0.f × 2^(1 - bias); normalise by the leading one of f
        _, n = math.frexp(float(f))  # f's bit length, exactly (f < 2^52 is exact in float64)
        b = 1 - bias - man_bits + n - 1
        f = (f << (man_bits - n + 1)) & ((1 << man_bits) - 1)
    else:
        b = e - bias
    base = (b - first) * ncols
    if f == 0:
        return base + ncols - 1  # an exact power of two (it passes no cut)
    k = lut[f >> shift]
    if k < 0:
        return -1 - base  # the caller counts the cuts exactly
    return base + k


@register_jitable
def fraction_of(mag, man_bits):
    """The normalised fraction field of a finite non-zero magnitude code."""
    f = mag & ((1 << man_bits) - 1)
    if mag >> man_bits == 0:
        _, n = math.frexp(float(f))
        f = (f << (man_bits - n + 1)) & ((1 << man_bits) - 1)
    return f


@njit(cache=True, nogil=True)
def histogram_bits(bits, exp_bits, man_bits, bias, first, thresholds, lut, shift, table):
    """Add every value of the 1-D integer array ``bits`` to the flat int64 ``table`` (see the
    module docstring); return the largest finite magnitude code (-1 when there is none)."""
    top = -1
    magmask = (1 << (exp_bits + man_bits)) - 1
    ncols = thresholds.size + 2
    nslots = table.size
    emax_field = (1 << exp_bits) - 1
    fmask = (1 << man_bits) - 1
    for i in range(bits.size):
        mag = np.int64(bits[i]) & magmask
        e = mag >> man_bits
        if e == 0 or e == emax_field:  # zero, subnormal, inf/NaN: the general path
            s = slot_of(mag, exp_bits, man_bits, bias, first, ncols, nslots, lut, shift)
            if s < 0:
                s = -1 - s + count_past(fraction_of(mag, man_bits), thresholds)
        else:  # a normal number: slot_of's last lines, inline (the common case, ~5x faster)
            f = mag & fmask
            base = (e - bias - first) * ncols
            k = lut[f >> shift]
            if f == 0:
                s = base + ncols - 1
            elif k < 0:
                s = base + count_past(f, thresholds)
            else:
                s = base + k
        table[s] += 1
        if s != nslots - 1 and mag > top:
            top = mag
    return top


@njit(cache=True, nogil=True)
def histogram_bits_small(bits, magmask, slots, table):
    """:func:`histogram_bits` for formats of at most 16 bits: ``slots[mag]`` is every
    magnitude's slot (:func:`slot_table`)."""
    top = -1
    nonfinite = table.size - 1
    for i in range(bits.size):
        mag = np.int64(bits[i]) & magmask
        s = slots[mag]
        table[s] += 1
        if s != nonfinite and mag > top:
            top = mag
    return top


def thresholds_for(cuts, man_bits: int) -> np.ndarray:
    """The integer fraction-field thresholds of sorted significand cuts (objects with
    ``int_cut(b)``: the smallest integer past ``c × 2^b``) for a ``man_bits``-bit field: a
    fraction f is past cut i iff ``f >= t[i]`` (``t[i] = 2^man_bits``: none is)."""
    return np.array([c.int_cut(man_bits) - (1 << man_bits) for c in cuts], np.int64)


@functools.lru_cache(maxsize=64)
def lookup(thresholds: tuple[int, ...], man_bits: int) -> tuple[np.ndarray, int]:
    """``(lut, shift)``: for each bucket of fractions with the same top ``man_bits - shift``
    bits, the number of thresholds every fraction in it reaches, or ``-1 - n`` when they differ
    (a threshold inside the bucket)."""
    bits = min(man_bits, LUT_BITS)
    shift = man_bits - bits
    t = np.array(thresholds, np.int64)
    lo = np.arange(1 << bits, dtype=np.int64) << shift
    hi = lo + (1 << shift) - 1
    k_lo = np.searchsorted(t, lo, side="right")
    k_hi = np.searchsorted(t, hi, side="right")
    lut = np.where(k_lo == k_hi, k_lo, -1 - k_lo).astype(np.int64)
    lut.flags.writeable = False
    return lut, shift


@njit(cache=True)
def _all_slots(exp_bits, man_bits, bias, first, thresholds, lut, shift, nslots, out):
    ncols = thresholds.size + 2
    for mag in range(out.size):
        s = slot_of(mag, exp_bits, man_bits, bias, first, ncols, nslots, lut, shift)
        if s < 0:
            s = -1 - s + count_past(fraction_of(mag, man_bits), thresholds)
        out[mag] = s


@functools.lru_cache(maxsize=64)
def slot_table(exp_bits: int, man_bits: int, bias: int, first: int, thresholds: tuple[int, ...],
               nslots: int) -> np.ndarray:  # fmt: skip
    """Every magnitude code's slot, for a format of at most 16 bits (made by
    :func:`slot_of` itself)."""
    thr = np.array(thresholds, np.int64)
    lut, shift = lookup(thresholds, man_bits)
    out = np.empty(1 << (exp_bits + man_bits), np.int64)
    _all_slots(exp_bits, man_bits, bias, first, thr, lut, shift, nslots, out)
    out.flags.writeable = False
    return out
