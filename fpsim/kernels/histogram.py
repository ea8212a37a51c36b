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
from numba import carray, njit, types
from numba.extending import intrinsic, register_jitable

LUT_BITS = 12
PREFIX_BITS = 15  # the prefix table of a wide format: 2^15 entries
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


# Counting is a chain of increments of a few counters (values cluster in a few binades), each
# waiting for the last one to the same counter; LANES copies of the table, consecutive elements
# going to different copies, break the chain (2-3x faster).
LANES = 4


RARE_BUFFER = 4096  # values the prefix table cannot place, remembered for the second loop
LANES_MIN = 1 << 14  # smaller arrays: one table


@njit(cache=True, nogil=True)
def histogram_bits(bits, exp_bits, man_bits, bias, first, thresholds, lut, shift, prefix,
                   prefix_shift, table):  # fmt: skip
    """Add every value of the 1-D integer array ``bits`` to the flat int64 ``table`` (see the
    module docstring); return the largest finite magnitude code (-1 when there is none).

    ``prefix`` (:func:`prefix_table`) gives the slot of every value by the top bits of its
    magnitude (``mag >> prefix_shift``: the exponent and a few fraction bits) and the one
    place, if any, inside that bucket where it steps (:func:`_unpack`), or -1 where that does
    not settle it (zero, subnormals, inf/NaN, a bucket holding two thresholds); such values
    are placed afterwards by :func:`slot_of`. The main loop is a load,
    a look-up and an increment, with no call: a call numba does not inline costs more than the
    whole count. fp32 takes :func:`histogram_fp32` (the same counts, faster)."""
    if exp_bits == 8 and man_bits == 23 and prefix_shift == FP32_SHIFT and bits.itemsize == 4:
        # (as int32: one compiled version, whatever integers histogram_bits is compiled for)
        return histogram_fp32(bits.view(np.int32), bias, first, thresholds, lut, shift, prefix,
                              table)  # fmt: skip
    magmask = (1 << (exp_bits + man_bits)) - 1
    lowmask = (1 << prefix_shift) - 1
    ncols = thresholds.size + 2
    nslots = table.size
    rare = np.empty(min(bits.size, RARE_BUFFER), np.int64)
    n_rare = 0
    top = -1
    n = bits.size
    if n < LANES_MIN:  # small: one table (the copies would cost more than they save)
        n_blocked = n
        for i in range(n):
            mag = np.int64(bits[i]) & magmask
            entry = prefix[mag >> prefix_shift]
            if entry < 0:
                if mag == 0:
                    table[nslots - 2] += 1
                else:
                    if n_rare < rare.size:
                        rare[n_rare] = i
                    n_rare += 1
                continue
            table[_unpack(entry, mag & lowmask)] += 1
            top = max(top, mag)
    else:
        n_blocked = n - n % LANES
        sub = np.zeros(LANES * nslots, np.int32)  # (< 2^31 per lane: a lane gets < n / LANES)
        for i0 in range(0, n_blocked, LANES):
            for u in range(LANES):
                mag = np.int64(bits[i0 + u]) & magmask
                entry = prefix[mag >> prefix_shift]
                if entry < 0:
                    if mag == 0:
                        sub[u * nslots + nslots - 2] += 1
                    else:
                        if n_rare < rare.size:
                            rare[n_rare] = i0 + u
                        n_rare += 1
                    continue
                sub[u * nslots + _unpack(entry, mag & lowmask)] += 1
                top = max(top, mag)
        for u in range(LANES):
            for j in range(nslots):
                table[j] += sub[u * nslots + j]
    # the rest: the values the prefix could not place, and the last few; all of them again
    # when there were too many to remember (written out here too: a call per value costs
    # ~0.2 us through numba's reference counting of the array arguments)
    scan_all = n_rare > rare.size
    n_rest = n - n_blocked
    for j in range(n if scan_all else n_rare + n_rest):
        if scan_all:
            i = j
            m = np.int64(bits[i]) & magmask
            if i < n_blocked and (m == 0 or prefix[m >> prefix_shift] >= 0):
                continue  # placed by the first loop
        else:
            i = rare[j] if j < n_rare else n_blocked + j - n_rare
        mag = np.int64(bits[i]) & magmask
        s = slot_of(mag, exp_bits, man_bits, bias, first, ncols, nslots, lut, shift)
        if s < 0:
            s = -1 - s + count_past(fraction_of(mag, man_bits), thresholds)
        table[s] += 1
        if s != nslots - 1:
            top = max(top, mag)
    return top


FP32_SHIFT = 23 - (PREFIX_BITS - 8)  # fp32's prefix_shift (7 fraction bits in the prefix)


@njit(cache=True, nogil=True)
def histogram_fp32(bits, bias, first, thresholds, lut, shift, prefix, table):
    """:func:`histogram_bits` for fp32 (``exp_bits=8, man_bits=23``, ``prefix_shift=16``):
    the same counts, ~2x faster.

    The masks and shifts are literals here (a shift by a variable costs more), and the loop
    takes eight values at a time, each with its own load, look-up and increment: on the AMD
    machines this was measured on, one increment instruction that keeps hitting a few
    counters can fall into a mode where every increment waits for the one before
    (~3 ns/value instead of ~0.5, depending on where the code lands in memory); eight
    separate ones did not. A group of eight with any prefix entry of -1 takes the careful
    path, value by value; the largest magnitude is a separate pass (int32: vectorised)."""
    ncols = thresholds.size + 2
    nslots = table.size
    rare = np.empty(min(bits.size, RARE_BUFFER), np.int64)
    n_rare = 0
    n = bits.size
    n8 = n - (n & 7)
    for i in range(0, n8, 8):
        m0 = np.int64(bits[i]) & 0x7FFFFFFF
        m1 = np.int64(bits[i + 1]) & 0x7FFFFFFF
        m2 = np.int64(bits[i + 2]) & 0x7FFFFFFF
        m3 = np.int64(bits[i + 3]) & 0x7FFFFFFF
        m4 = np.int64(bits[i + 4]) & 0x7FFFFFFF
        m5 = np.int64(bits[i + 5]) & 0x7FFFFFFF
        m6 = np.int64(bits[i + 6]) & 0x7FFFFFFF
        m7 = np.int64(bits[i + 7]) & 0x7FFFFFFF
        e0 = prefix[m0 >> 16]
        e1 = prefix[m1 >> 16]
        e2 = prefix[m2 >> 16]
        e3 = prefix[m3 >> 16]
        e4 = prefix[m4 >> 16]
        e5 = prefix[m5 >> 16]
        e6 = prefix[m6 >> 16]
        e7 = prefix[m7 >> 16]
        if (e0 | e1 | e2 | e3 | e4 | e5 | e6 | e7) < 0:  # one of them is not settled
            for u in range(8):
                mag = np.int64(bits[i + u]) & 0x7FFFFFFF
                entry = prefix[mag >> 16]
                if entry >= 0:
                    table[_unpack(entry, mag & 0xFFFF)] += 1
                elif mag == 0:
                    table[nslots - 2] += 1
                else:
                    if n_rare < rare.size:
                        rare[n_rare] = i + u
                    n_rare += 1
            continue
        table[_unpack(e0, m0 & 0xFFFF)] += 1
        table[_unpack(e1, m1 & 0xFFFF)] += 1
        table[_unpack(e2, m2 & 0xFFFF)] += 1
        table[_unpack(e3, m3 & 0xFFFF)] += 1
        table[_unpack(e4, m4 & 0xFFFF)] += 1
        table[_unpack(e5, m5 & 0xFFFF)] += 1
        table[_unpack(e6, m6 & 0xFFFF)] += 1
        table[_unpack(e7, m7 & 0xFFFF)] += 1
    top32 = np.int32(-1)
    for i in range(n8):
        top32 = max(top32, np.int32(bits[i] & 0x7FFFFFFF))
    top = np.int64(top32)
    if top >= 0x7F800000:  # inf or NaN among them: the largest finite one
        top = -1
        for i in range(n8):
            mag = np.int64(bits[i]) & 0x7FFFFFFF
            if mag < 0x7F800000:
                top = max(top, mag)
    # the values the prefix could not place, and the last few (see histogram_bits)
    scan_all = n_rare > rare.size
    n_rest = n - n8
    for j in range(n if scan_all else n_rare + n_rest):
        if scan_all:
            i = j
            m = np.int64(bits[i]) & 0x7FFFFFFF
            if i < n8 and (m == 0 or prefix[m >> 16] >= 0):
                continue  # placed by the first loop
        else:
            i = rare[j] if j < n_rare else n8 + j - n_rare
        mag = np.int64(bits[i]) & 0x7FFFFFFF
        s = slot_of(mag, 8, 23, bias, first, ncols, nslots, lut, shift)
        if s < 0:
            s = -1 - s + count_past(fraction_of(mag, 23), thresholds)
        table[s] += 1
        if s != nslots - 1:
            top = max(top, mag)
    return top


@register_jitable
def _unpack(entry, low):
    """The slot of a value from its prefix-table entry and the low bits of its magnitude: the
    entry packs two slots, below and from a threshold on the low bits (bits 0-19, 20-39), and
    that threshold (bits 40 up). A select, no multiply, no sign: ~4x faster than stepping."""
    return (entry >> 20) & 0xFFFFF if low >= (entry >> 40) else entry & 0xFFFFF


@njit(cache=True, nogil=True)
def histogram_bits_small(bits, magmask, slots, table):
    """:func:`histogram_bits` for formats of at most 16 bits: ``slots[mag]`` is every
    magnitude's slot (:func:`slot_table`)."""
    nslots = table.size
    nonfinite = nslots - 1
    sub = np.zeros(LANES * nslots, np.int64)
    top = -1
    n = bits.size
    for i0 in range(0, n, LANES):
        for u in range(LANES):
            i = i0 + u
            if i >= n:
                break
            mag = np.int64(bits[i]) & magmask
            s = slots[mag]
            sub[u * nslots + s] += 1
            if s != nonfinite:
                top = max(top, mag)
    for u in range(LANES):
        for j in range(nslots):
            table[j] += sub[u * nslots + j]
    return top


@njit(cache=True, nogil=True)
def fold(table, ncols, k0, offset, counts, pow2, past, bound_rows, bound_cuts, out):
    """Add one array's slot table (see the module docstring; ``k0``: the column of the cuts an
    exact power of two passes) to a histogram's per-binade arrays, its row r going to index
    ``offset + r`` of ``counts`` / ``pow2`` and of ``past[i]`` (values past cut i); and answer
    ``out[q]`` = the array's values past cut ``bound_cuts[q]`` in row ``bound_rows[q]`` or above
    (a row below the table: every value; above it: none). Returns False, changing nothing, when
    a row holding values would fall outside the histogram."""
    rows = (table.size - 2) // ncols
    n = ncols - 2  # cuts
    # Only the rows between the first and the last non-zero slot hold values (a tensor
    # spans some tens of fp32's 277 binades): find them by scanning in from both ends, and
    # sum only those rows (this runs once per tensor a watch records)
    first_nz = 0
    while first_nz < rows * ncols and table[first_nz] == 0:
        first_nz += 1
    last_nz = rows * ncols - 1
    while last_nz >= first_nz and table[last_nz] == 0:
        last_nz -= 1
    lo, hi = rows, -1  # no values: an empty range
    if last_nz >= first_nz:
        lo, hi = first_nz // ncols, last_nz // ncols
    above = np.zeros(rows + 1, np.int64)  # above[r]: the values in rows r and up
    for r in range(hi, lo - 1, -1):
        t = 0
        for j in range(ncols):
            t += table[r * ncols + j]
        above[r] = above[r + 1] + t
    for r in range(lo):
        above[r] = above[lo]
    if hi >= 0 and (offset + lo < 0 or offset + hi >= counts.size):
        return False
    for r in range(lo, hi + 1):
        base = r * ncols
        i = offset + r
        p2 = table[base + ncols - 1]
        counts[i] += above[r] - above[r + 1]
        pow2[i] += p2
        acc = 0
        for j in range(n, 0, -1):  # past cut j - 1: at least j cuts passed
            acc += table[base + j] + (p2 if j == k0 else 0)
            past[j - 1, i] += acc
    for q in range(bound_rows.size):
        r = bound_rows[q]
        if r >= rows:
            out[q] = 0
        elif r < 0:
            out[q] = above[0]
        else:
            v = above[r + 1]
            base = r * ncols
            for j in range(bound_cuts[q] + 1, n + 1):
                v += table[base + j] + (table[base + ncols - 1] if j == k0 else 0)
            out[q] = v
    return True


FLT_MAX = float(np.finfo(np.float32).max)
FLT_ROUNDS_TO_INF = FLT_MAX + 2.0**103  # float64 values from here up round to inf in float32


@register_jitable
def current_scale_exponent(fmax, amax):
    """k such that 2^k is TransformerEngine's current scale with power-of-two scales for a
    tensor whose largest magnitude is ``amax``: ``fl32(fmax / fl32(amax))`` (``fmax`` a float32
    value; an inf quotient becomes FLT_MAX) with its fraction bits cleared; k = 0 (scale 1) when
    amax is 0 (also once in float32), inf or NaN. The quotient is formed in float64 and rounded
    to float32 once more: for a quotient that is the correctly rounded float32 result (float64
    has more than 2 x 24 + 2 bits, so the double rounding is innocuous)."""
    if not (amax > 0.0) or amax >= FLT_ROUNDS_TO_INF:  # also NaN; an inf amax in float32
        return 0
    a = np.float64(np.float32(amax))
    if a == 0.0:  # below float32's range (a float64 amax): TE's fp32 amax is 0, scale 1
        return 0
    q = fmax / a
    q32 = np.float64(np.float32(q)) if q <= FLT_MAX else FLT_MAX
    if q32 > FLT_MAX:
        q32 = FLT_MAX
    _, e = math.frexp(q32)
    return e - 1


@njit(cache=True, nogil=True)
def add_table(table, ncols, k0, first, offset, counts, pow2, past, amax, bound_b, bound_cuts,
              fmax, zones):  # fmt: skip
    """:func:`fold` one array's slot table into a histogram's arrays (``offset``: the index of
    row 0), and add to ``zones[f]`` (ZONES order: zero, underflow, subnormal, normal, overflow,
    nonfinite) the array's own zone counts in format f after its power-of-two current scale
    (:func:`current_scale_exponent` of ``fmax[f]`` and ``amax``); ``bound_b[f, z]`` /
    ``bound_cuts[f, z]``: the binade and cut of f's zero, normal and overflow boundaries.
    Returns False, changing nothing, when a row would fall outside the histogram."""
    nf = fmax.size
    rows_q = np.empty(3 * nf, np.int64)
    cuts_q = np.empty(3 * nf, np.int64)
    for f in range(nf):
        k = current_scale_exponent(fmax[f], amax)
        for z in range(3):
            rows_q[3 * f + z] = bound_b[f, z] - k - first
            cuts_q[3 * f + z] = bound_cuts[f, z]
    out = np.zeros(3 * nf, np.int64)
    if not fold(table, ncols, k0, offset, counts, pow2, past, rows_q, cuts_q, out):
        return False
    zero = table[table.size - 2]
    nonfinite = table[table.size - 1]
    nonzero = 0
    for j in range(table.size - 2):
        nonzero += table[j]
    for f in range(nf):
        p_zero, p_normal, p_over = out[3 * f], out[3 * f + 1], out[3 * f + 2]
        zones[f, 0] += zero
        zones[f, 1] += nonzero - p_zero
        zones[f, 2] += p_zero - p_normal
        zones[f, 3] += p_normal - p_over
        zones[f, 4] += p_over
        zones[f, 5] += nonfinite
    return True


@njit(cache=True, nogil=True)
def count_and_add(bits, exp_bits, man_bits, bias, first, thresholds, lut, shift, prefix,
                  prefix_shift, slots, k0, shift_k, emin_row, counts, pow2, past, bound_b,
                  bound_cuts, fmax, zones):  # fmt: skip
    """:func:`histogram_bits` (or :func:`histogram_bits_small` when ``slots`` is not empty)
    and :func:`add_table` in one compiled call: count ``bits``, add the counts to a histogram's
    arrays shifted by ``shift_k`` binades (row 0 at index ``first + shift_k - emin_row``) and
    the array's own per-tensor-scaled zones to ``zones``. Returns ``(ok, amax, zeros,
    inf/NaN)``: ``amax`` the largest finite magnitude (exact; 0.0 without one); ``ok`` False
    when a row would leave the histogram (nothing is added then). Everything comes back in
    one tuple: this runs once per tensor a watch records, where each Python-side step counts."""
    ncols = thresholds.size + 2
    nslots = ((1 << exp_bits) - 1 - bias - first) * ncols + 2  # rows up to emax, then specials
    table = np.zeros(nslots, np.int64)
    if slots.size:
        top = histogram_bits_small(bits, (1 << (exp_bits + man_bits)) - 1, slots, table)
    else:
        top = histogram_bits(bits, exp_bits, man_bits, bias, first, thresholds, lut, shift,
                             prefix, prefix_shift, table)  # fmt: skip
    amax = 0.0
    if top > 0:  # the value of the magnitude code: exact in float64
        e = top >> man_bits
        m = top & ((1 << man_bits) - 1)
        amax = math.ldexp(float(m + (1 << man_bits)) if e else float(m),
                          max(e, 1) - bias - man_bits)  # fmt: skip
    ok = add_table(table, ncols, k0, first, first + shift_k - emin_row, counts, pow2, past,
                   amax, bound_b, bound_cuts, fmax, zones)  # fmt: skip
    return ok, amax, table[nslots - 2], table[nslots - 1]


def _pointer_to(width):
    """An intrinsic: an int64 address as a pointer to ``width``-bit integers."""
    ptr = types.CPointer({16: types.int16, 32: types.int32, 64: types.int64}[width])

    @intrinsic
    def at(typingctx, address):
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(ptr))

        return ptr(types.int64), codegen

    return at


_int16_at, _int32_at, _int64_at = _pointer_to(16), _pointer_to(32), _pointer_to(64)


# count_and_add of the n codes stored from an address on, contiguous and in native byte order:
# what fpsim.torch.watch does with a CPU tensor's memory (Tensor.data_ptr()), without making a
# numpy view of it for each tensor (a few microseconds each, ~90 tensors a step). The caller
# keeps that memory alive and unchanged during the call. One function per width, so that the
# first call compiles only the width it reads.
@njit(cache=True, nogil=True)
def count_and_add_at16(address, n, exp_bits, man_bits, bias, first, thresholds, lut, shift,
                       prefix, prefix_shift, slots, k0, shift_k, emin_row, counts, pow2, past,
                       bound_b, bound_cuts, fmax, zones):  # fmt: skip
    """:func:`count_and_add` of the ``n`` 16-bit codes from ``address`` on."""
    bits = carray(_int16_at(address), n)
    return count_and_add(bits, exp_bits, man_bits, bias, first, thresholds, lut, shift, prefix,
                         prefix_shift, slots, k0, shift_k, emin_row, counts, pow2, past, bound_b,
                         bound_cuts, fmax, zones)  # fmt: skip


@njit(cache=True, nogil=True)
def count_and_add_at32(address, n, exp_bits, man_bits, bias, first, thresholds, lut, shift,
                       prefix, prefix_shift, slots, k0, shift_k, emin_row, counts, pow2, past,
                       bound_b, bound_cuts, fmax, zones):  # fmt: skip
    """:func:`count_and_add` of the ``n`` 32-bit codes from ``address`` on."""
    bits = carray(_int32_at(address), n)
    return count_and_add(bits, exp_bits, man_bits, bias, first, thresholds, lut, shift, prefix,
                         prefix_shift, slots, k0, shift_k, emin_row, counts, pow2, past, bound_b,
                         bound_cuts, fmax, zones)  # fmt: skip


@njit(cache=True, nogil=True)
def count_and_add_at64(address, n, exp_bits, man_bits, bias, first, thresholds, lut, shift,
                       prefix, prefix_shift, slots, k0, shift_k, emin_row, counts, pow2, past,
                       bound_b, bound_cuts, fmax, zones):  # fmt: skip
    """:func:`count_and_add` of the ``n`` 64-bit codes from ``address`` on."""
    bits = carray(_int64_at(address), n)
    return count_and_add(bits, exp_bits, man_bits, bias, first, thresholds, lut, shift, prefix,
                         prefix_shift, slots, k0, shift_k, emin_row, counts, pow2, past, bound_b,
                         bound_cuts, fmax, zones)  # fmt: skip


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


@functools.lru_cache(maxsize=64)
def prefix_table(exp_bits: int, man_bits: int, bias: int, first: int,
                 thresholds: tuple[int, ...]) -> tuple[np.ndarray, int]:  # fmt: skip
    """``(prefix, prefix_shift)`` for :func:`histogram_bits`: for every top ``exp_bits + m``
    bits of a magnitude (its exponent and m = PREFIX_BITS - exp_bits fraction bits), the
    packed entry of :func:`_unpack`: the slot of the bucket's smallest fraction and the one
    step inside the bucket (a threshold, or the jump from an exact power of two, fraction 0,
    to fraction 1 in the bucket of fraction 0); -1 where that does not settle it (exponent
    field 0 or all ones, two steps in one bucket, a threshold beyond the 23 bits of the entry,
    a table of 2^20 slots or more)."""
    m = max(0, min(man_bits, PREFIX_BITS - exp_bits))
    pshift = man_bits - m
    ncols = len(thresholds) + 2
    t = np.array(thresholds, np.int64)
    never = (1 << 23) - 1  # (below and from it, the same slot: where it lies does not matter)
    out = np.full(1 << (exp_bits + m), -1, np.int64)
    if (((1 << exp_bits) - 1 - bias - first) * ncols + 2) >= 1 << 20:
        return out, pshift  # slots do not fit the entry: every value takes the slow path
    for fp in range(1 << m):  # per fraction bucket (the same in every binade)
        lo_f = fp << pshift
        hi_f = lo_f + (1 << pshift) - 1
        k_lo = int(np.searchsorted(t, lo_f, side="right"))
        inside = t[(t > lo_f) & (t <= hi_f)] - lo_f  # thresholds on the low bits
        if fp == 0:  # fraction 0 is a power of two (its own column); fraction 1 is not
            k1 = int(np.searchsorted(t, 1, side="right"))
            inside = inside[inside > 1]
            col, d, thr = ncols - 1, k1 - (ncols - 1), 1
            if inside.size:
                continue
        elif inside.size == 0:
            col, d, thr = k_lo, 0, never
        elif inside.size == 1 and inside[0] < never:
            col, d, thr = k_lo, 1, int(inside[0])
        else:
            continue
        if thr > never:
            continue
        e = np.arange(1, (1 << exp_bits) - 1, dtype=np.int64)  # normal exponent fields
        slot = (e - bias - first) * ncols + col
        out[(e << m) | fp] = slot | ((slot + d) << 20) | (thr << 40)
    out.flags.writeable = False
    return out, pshift


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
