"""Block scaling in one pass: per block, the largest magnitude, the scale, and every element
divided by the scale and rounded to the element format (numba CPU kernels; the same functions
run uncompiled as the pure-Python reference).

Two kinds of scale:

* **power of two** (MX: an E8M0 scale ``X = 2^e``): dividing by X is exact in float64, so the
  element is ``round(x · 2^-e)``, one rounding. ``e`` comes from the block's amax by one of the
  rules :data:`SCALE_RULES` names, computed from amax's bits (no ``log2``, so no float error).
* **a value of a float format** (NVFP4: an E4M3 scale ``s``, times an optional fp32 tensor
  scale ``g``): ``s = round(amax / (max_elem · g))`` in the scale format, then each element is
  ``round(x / (s · g))``. The quotients are not exact in float64; :func:`div_odd` gives the
  quotient *rounded to odd*, which a second rounding to at most 51 bits turns into the correctly
  rounded quotient, in every mode (Boldo & Melquiond, IEEE TC 57(4), 2008: the sticky last bit
  of an odd result keeps every midpoint decision right). No ``1/s`` is ever formed: fpsim's
  elements are the exact quotient rounded once, where torchao and TransformerEngine multiply by
  a float32 reciprocal (which can break E2M1 ties the other way).

A block holding NaN or ±inf gets a NaN scale, and every element of it is NaN (torchao does the
same). Elements that overflow after scaling saturate to ±max (the MX spec; NVFP4 recipes clamp).

Two kernels: :func:`_blocks`, general (every mode, every format; also the pure-Python run),
and :func:`_fast_blocks` for nearest-even and stochastic elements where :func:`fast_path_ok`
holds (every signed element format with fraction bits; stochastic: a smallest quantum <= 1),
the same results in a few float64 instructions per element (nearest even: vectorised;
stochastic: with the same random bits per element as the general kernel).
"""

import math

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from . import scalar
from .fastround import floor_f64, inv_pow2_of, pow2_of, trunc_f64
from .record import FLOAT64, unflatten

# How an MX (power-of-two) scale exponent comes from the block's amax. emax is the exponent of
# the element format's largest value, m its fraction bits, max its largest value.
FLOOR = 0  # OCP MX v1.0: floor(log2 amax) - emax (the block max may saturate)
CEIL = 1  # torchao CEIL: ceil(log2 amax) - emax
EVEN = 2  # torchao EVEN: amax rounded half-up to m fraction bits, then FLOOR
RCEIL = 3  # NVIDIA (cvt.rp.ue8m0, cuDNN): the smallest 2^e with amax / 2^e <= max (no overflow)
SCALE_RULES = {"floor": FLOOR, "ceil": CEIL, "even": EVEN, "rceil": RCEIL}

F64_MAX = 1.7976931348623157e308

POW2 = 0  # scale kinds
FLOAT = 1


@register_jitable
def mx_exponent(amax_bits, rule, elem_emax, elem_m, elem_max_sig, scale_emin, scale_emax):
    """The scale exponent e (``X = 2^e``) of a block whose largest magnitude has the float64 bit
    pattern ``amax_bits`` (finite, non-negative), by ``rule``, clamped to the exponents the scale
    format holds, ``[scale_emin, scale_emax]`` (E8M0: [-127, 127]; a custom power-of-two scale
    format its own range).

    With ``amax = sig × 2^(E - 52)`` (``2^52 <= sig < 2^53``, E = floor(log2 amax)), each rule is
    integer arithmetic on sig and E: no ``log2``, no rounding error. An all-zero block gets the
    smallest scale, ``2^scale_emin`` (E8M0: 2^-127).
    """
    if amax_bits == 0:
        return scale_emin
    _, _, E, sig = scalar.unpack(amax_bits, FLOAT64)
    e = E - elem_emax  # FLOOR: amax / 2^e lies in [2^emax, 2^(emax+1))
    if rule == CEIL:
        e += 1 if sig != (1 << 52) else 0  # not a power of two: one binade up
    elif rule == EVEN:
        # torchao adds 2^(22-m) to amax's float32 bits and keeps the exponent: amax moves to
        # the next binade when its significand rounds (half up) to 2 at m fraction bits, i.e.
        # when sig >= 2^53 - 2^(51 - m).
        e += 1 if sig >= (1 << 53) - (1 << (51 - elem_m)) else 0
    elif rule == RCEIL:
        # amax / 2^e = sig × 2^(emax - 52) must not exceed max = max_sig × 2^(emax - m).
        e += 1 if sig > (elem_max_sig << (52 - elem_m)) else 0
    return min(max(e, scale_emin), scale_emax)


@register_jitable
def two_prod(a, b):
    """Dekker's TwoProduct: ``p = fl(a × b)`` and ``err`` with ``p + err == a × b`` exactly
    (Veltkamp splitting; no FMA needed). Exact when no intermediate over- or underflows."""
    c = 134217729.0  # 2^27 + 1: splits a 53-bit significand into two halves of <= 26 bits
    t = c * a
    ah = t - (t - a)
    al = a - ah
    t = c * b
    bh = t - (t - b)
    bl = b - bh
    p = a * b
    err = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, err


@register_jitable
def div_odd(x, d):
    """``x / d`` rounded to odd in float64 (``d > 0``): rounding it once more to a format of
    at most 51 bits is the correct rounding of the exact quotient, in every mode.

    q = fl(x / d); the remainder x - q·d is exact (q·d = p + err by TwoProduct, and x - p is
    exact by Sterbenz since p is within a factor 2 of x), so its sign says on which side of q
    the exact quotient lies; round_to_odd_f64 then steps q to its odd neighbour on that side
    when q is even and inexact. TwoProduct loses err below float64's subnormals, i.e. for
    |x| < 2^-969; the kernels only divide by d >= 2^-155 (a scale of at least 2^-6 times a
    float32 tensor scale), so such a quotient is below 2^-814, far under half the smallest
    value of any element format (at least 2^-149): it rounds to 0, or to the smallest value in
    a directed mode, whichever side of q the exact value lies.
    """
    q = x / d
    p, err = two_prod(q, d)
    r = (x - p) - err  # the sign of the exact remainder x - q·d (NaN when q overflowed)
    # A quotient that underflowed to ±0 (|x / d| <= 2^-1075: a float64 x near float64's
    # subnormals) has ±2^-1074 as its odd stand-in; round_to_odd_f64 would step the pattern of
    # 0 "toward zero", to the pattern -1: a NaN.
    q = math.copysign(5e-324, x) if (q == 0.0) & (x != 0.0) else q
    # One that overflowed (a float64 x, a small d) is finite all the same: ±F64_MAX stands in
    # for it (odd, and beyond the range of every format a block holds, so it rounds as the
    # exact quotient does in every mode); inf would stay inf in a format with inf.
    q = math.copysign(F64_MAX, x) if (abs(q) == math.inf) & (abs(x) != math.inf) else q
    # scalar.round_to_odd_f64(q, r), with the step to the odd neighbour as arithmetic: a
    # select there compiles to a branch that a quotient by a scale that is not a power of two
    # takes at random (about 2x slower on random data).
    bits = scalar.float64_to_bits(q)
    step = ((r > 0.0) | (r < 0.0)) & ((bits & 1) == 0)  # inexact and even (NaN r: exact)
    outward = (r > 0.0) == (q > 0.0)  # the exact quotient lies beyond q, away from zero
    return scalar.bits_to_float64(bits + step * (2 * outward - 1))


@register_jitable
def round_fast(t, elem, k):
    """Round the float64 ``t`` to the element format, nearest even, saturating: the branch-free
    path (``k``: its constants from ``scalar.nearest_even_constants``)."""
    bits = scalar.round_nearest_even_bits(
        scalar.float64_to_bits(t), FLOAT64, elem.man_bits, elem.bias, k
    )
    return scalar.bits_to_float64(bits)


def _blocks(x, out, scales, blk0, blk1, flat, g, elem_max, scale_min):
    """Quantize blocks ``blk0 .. blk1 - 1`` of the 2-D array ``x`` (blocks along its rows).

    ``flat``: (element record, scale record, kind, rule or scale rounding mode, element
    rounding mode, seed, block size) as one flat int tuple. ``out`` (float32, x's shape) gets
    the element values, ``scales`` (float64, rows × blocks per row) the block scales: 2^e, or
    the scale-format value s (the tensor scale ``g`` is applied on top), or NaN.
    """
    elem = unflatten(flat, 0)
    sfmt = unflatten(flat, 10)
    s_emin, s_emax = scalar.emin_of(sfmt), scalar.emax_of(sfmt)  # the scale exponents held
    kind, srule, mode, seed, bs = flat[20], flat[21], flat[22], flat[23], flat[24]
    n = x.shape[1]
    nb = (n + bs - 1) // bs
    fast = mode == scalar.NEAREST_EVEN and scalar.nearest_even_fast_ok(FLOAT64, elem)
    k = scalar.nearest_even_constants(FLOAT64, elem, 1, 1)
    emax = scalar.emax_of(elem)
    max_sig = scalar.max_sig_of(elem)
    stoch = mode == scalar.STOCHASTIC
    mag_mask = (1 << 63) - 1
    fscales = np.empty(0)
    fbits = np.empty(0, np.int64)
    if kind == FLOAT:
        fscales, fbits = _float_scales(x, blk0, blk1, nb, bs, sfmt, srule, g, elem_max,
                                       scale_min)  # fmt: skip
    for blk in range(blk0, blk1):
        row = blk // nb
        lo = (blk % nb) * bs
        hi = min(lo + bs, n)
        xr = x[row, lo:hi]
        o = out[row, lo:hi]
        # 1. The block's largest magnitude, as the largest magnitude bit pattern: patterns of
        #    non-negative floats are ordered like their values, and an integer max vectorises.
        #    A pattern at or above inf's is inf or NaN.
        if kind == FLOAT:
            mbits = fbits[blk - blk0]
        else:
            mbits = 0
            for i in range(hi - lo):
                mbits = max(mbits, scalar.float64_to_bits(np.float64(xr[i])) & mag_mask)
        if mbits >= 0x7FF0000000000000:
            scales[row, blk % nb] = math.nan
            for i in range(hi - lo):
                o[i] = math.nan
            continue
        base = row * n + lo  # flat index of the block's first element (stochastic streams)
        if kind == POW2:
            # 2. MX: X = 2^e; x / X is exact.
            e = mx_exponent(mbits, srule, emax, elem.man_bits, max_sig, s_emin, s_emax)
            scales[row, blk % nb] = scalar.pow2(e)
            inv = scalar.pow2(-e)
            # x · 2^-e overflows float64 only for a float64 x near its max and a scale format
            # whose range stops short of amax: the exact quotient is finite, so ±F64_MAX stands
            # in for it (it saturates as the quotient does; inf would stay inf in e5m2)
            if fast:
                for i in range(hi - lo):  # branch-free: vectorised
                    t = np.float64(xr[i]) * inv
                    t = math.copysign(F64_MAX, t) if abs(t) == math.inf else t
                    o[i] = round_fast(t, elem, k)
            else:
                for i in range(hi - lo):
                    rand = scalar.random62(seed, base + i) if stoch else 0
                    t = np.float64(xr[i]) * inv
                    t = math.copysign(F64_MAX, t) if abs(t) == math.inf else t
                    o[i] = scalar.round_value(t, elem, mode, 1, 1, rand)
        else:
            # 3. A float scale (NVFP4): see _float_scales, which computed it for every block.
            sv = fscales[blk - blk0]
            scales[row, blk % nb] = sv
            d = sv * g  # exact: both have few significant bits
            if fast:
                for i in range(hi - lo):
                    o[i] = round_fast(div_odd(np.float64(xr[i]), d), elem, k)
            else:
                for i in range(hi - lo):
                    rand = scalar.random62(seed, base + i) if stoch else 0
                    t = div_odd(np.float64(xr[i]), d)
                    o[i] = scalar.round_value(t, elem, mode, 1, 1, rand)


@register_jitable
def _float_scales(x, blk0, blk1, nb, bs, sfmt, srule, g, elem_max, scale_min):
    """The float block scales of blocks blk0 .. blk1 - 1 (see :func:`_float_scale_values`) and
    each block's largest magnitude as a float64 bit pattern (NaN blocks: at or above inf's)."""
    n = x.shape[1]
    m = blk1 - blk0
    amax = np.empty(m)
    mbits = np.empty(m, np.int64)
    for j in range(m):
        blk = blk0 + j
        row = blk // nb
        lo = (blk % nb) * bs
        hi = min(lo + bs, n)
        xr = x[row, lo:hi]  # a 1-D slice indexed from 0: the loop vectorises (not x[row, i])
        mb = 0
        for i in range(xr.size):
            mb = max(mb, scalar.float64_to_bits(np.float64(xr[i])) & ((1 << 63) - 1))
        mbits[j] = mb
        amax[j] = scalar.bits_to_float64(min(mb, 0x7FF0000000000000))  # NaN blocks: see caller
    return _float_scale_values(amax, sfmt, srule, g, elem_max, scale_min), mbits


@register_jitable
def _float_scale_values(amax, sfmt, srule, g, elem_max, scale_min):
    """The float block scales ``s = round(amax / (max · g))`` in the scale format of blocks
    whose largest magnitudes are ``amax`` (float64, finite or inf), clamped below at the scale
    format's smallest normal (torchao clamps its E4M3 scale to finfo.tiny = 2^-6, an all-zero
    block included; NaN blocks are handled by the caller). One loop over the blocks: the scale
    arithmetic (a division, a rounding) then runs vectorised across blocks instead of once per
    block between the element loops."""
    m = amax.size
    out = np.empty(m)
    den = elem_max * g
    if srule == scalar.NEAREST_EVEN and scalar.nearest_even_fast_ok(FLOAT64, sfmt):
        ks = scalar.nearest_even_constants(FLOAT64, sfmt, 1, 1)
        for j in range(m):
            s = round_fast(div_odd(amax[j], den), sfmt, ks)
            s = scale_min if s < scale_min else s
            out[j] = s
    else:
        for j in range(m):
            s = scalar.round_value(div_odd(amax[j], den), sfmt, srule, 1, 1, 0)
            s = scale_min if s < scale_min else s
            out[j] = s
    return out


_blocks_jit = njit(cache=True, nogil=True)(_blocks)

CHUNK = 512  # blocks per parallel task
PARALLEL_MIN = 1 << 16  # elements below which one thread is faster


@njit(parallel=True, cache=True, nogil=True)
def _blocks_parallel(x, out, scales, nblocks, flat, g, elem_max, scale_min):
    ntasks = (nblocks + CHUNK - 1) // CHUNK
    for t in prange(ntasks):
        _blocks_jit(x, out, scales, t * CHUNK, min((t + 1) * CHUNK, nblocks), flat, g,
                    elem_max, scale_min)  # fmt: skip


# ---- the fast path: nearest even, element formats the shifter rounding handles --------------
# Where the elements round to nearest even (saturating, as block scaling always does), the
# per-element work is a handful of float64 instructions (round_saturating) instead of
# scalar.round_nearest_even_bits' integer unpack / repack; and the kernel runs in three flat
# passes over a chunk of blocks (every block's amax from the integer bit patterns, every
# block's scale, then every element) so that each inner loop is straight-line code that LLVM
# vectorises. It computes the same quotient t as _blocks (x · 2^-e, or x / d), and rounds t
# with a function equal to scalar.round_value(t, elem, NEAREST_EVEN, 1, 1) for every float64
# t it can see; see fast_path_ok for where that holds.


def fast_path_ok(elem, mode) -> bool:
    """Whether the fast kernel :func:`_fast_blocks` rounds elements of ``elem`` (a
    FormatRecord) in the rounding ``mode`` exactly as ``scalar.round_value(t, elem, mode,
    subnormals=1, saturate=1, rand62)`` does for every float64 t it can see: nearest even by
    :func:`round_saturating`, stochastic by :func:`round_stochastic_saturating`.

    Nearest even. The shifter ``(a + s) - s`` (s = 1.5 · 2^(e + 52 - m), e = binade of a within
    [emin, emax]) rounds a to the multiple of the quantum 2^(e - m) nearest, ties to the even
    multiple, when a < 2^(e + 51 - m) (m <= 50); the even multiple is the even code only when
    the code's last bit is the last fraction bit (m >= 1: with no fraction bits, a tie between
    2^e and 2^(e+1) goes to the even *exponent*, which the shifter does not know). Gradual
    underflow is the clamp at emin, which needs subnormals (a format without them flushes).
    2^emin, the quantum 2^(emin - m) and s at emax must be normal, finite float64 numbers.
    Signed formats only (the result keeps t's sign; +0 for a format without -0). Saturation is
    always on in block scaling: a result above max is max, even in a format with inf, as
    scalar.convert saturates a finite value. (Blocks holding inf or NaN never reach the
    rounding.)

    Stochastic. u = |t| / q (q the quantum of t's binade within [emin, emax]) is exact when
    q is a normal float64 at most 1 (1/q is then a power of two >= 1, and scaling up loses no
    bit, even of a float64 subnormal t); its fraction u - trunc(u) is exact, and so is that
    fraction times 2^62, the 62-bit threshold ``scalar.round_significand`` compares the
    random bits with. So, beyond the conditions above: the smallest quantum 2^(emin - m)
    <= 1.
    """
    m = elem.man_bits
    ok = (
        elem.signed == 1
        and elem.has_subnormals == 1
        and 1 <= m <= 50
        and scalar.emin_of(elem) - m >= -1022
        and scalar.emax_of(elem) + 52 - m <= 1022
    )
    if mode == scalar.STOCHASTIC:
        return ok and scalar.emin_of(elem) - m <= 0
    return ok and mode == scalar.NEAREST_EVEN


def saturating_constants(elem) -> tuple:
    """``(2^emin, 2^emax, 1.5 · 2^(52 - m), max, zero)`` of the element format (a
    FormatRecord) for :func:`round_saturating`: ``zero`` is +0.0 for a format without -0
    (adding it turns -0 into +0) and -0.0 otherwise (adding -0.0 changes no value, -0
    included)."""
    m = elem.man_bits
    emin, emax = scalar.emin_of(elem), scalar.emax_of(elem)
    maxv = scalar.max_sig_of(elem) * 2.0 ** (emax - m)
    zero = 0.0 if elem.negzero_nan == 1 else -0.0
    return (2.0**emin, 2.0**emax, 1.5 * 2.0 ** (52 - m), maxv, zero)


@register_jitable
def round_saturating(t, k):
    """The finite float64 ``t`` rounded to nearest even in the element format of the constants
    ``k`` (:func:`saturating_constants`), saturating to ±max; branch-free. Exact where
    :func:`fast_path_ok` holds. (The kernels never pass ±inf: x · 2^-e is finite, and
    :func:`div_odd` gives ±F64_MAX for a quotient that overflowed.)"""
    two_emin, two_emax, magic, maxv, zero = k
    a = abs(t)
    s = min(max(pow2_of(a), two_emin), two_emax) * magic  # 1.5 * 2^(e + 52 - m)
    y = min((a + s) - s, maxv)  # a rounded to the quantum 2^(e - m) by the addition's own
    # nearest even; beyond the range (a >= 2^(emax + 1) lands there too) max
    return math.copysign(y, t) + zero


def stochastic_constants(elem) -> tuple:
    """``(2^emin, 2^emax, 2^m, 2^-m, max, zero)`` of the element format (a FormatRecord) for
    :func:`round_stochastic_saturating` (``zero``: as in :func:`saturating_constants`)."""
    m = elem.man_bits
    two_emin, two_emax, _, maxv, zero = saturating_constants(elem)
    return (two_emin, two_emax, 2.0**m, 2.0**-m, maxv, zero)


TWO_52 = 4503599627370496.0  # 2^52: an integer below it is the low bits of 2^52 + it
TWO_52_BITS = 0x4330000000000000


@register_jitable
def round_stochastic_saturating(t, rand62, kst):
    """The float64 ``t`` rounded stochastically to the element format of the constants ``kst``
    (:func:`stochastic_constants`), saturating to ±max: away from zero when ``rand62 <
    ceil(f · 2^62)``, f the fraction of a quantum by which |t| exceeds its lower neighbour
    (probability ``ceil(f · 2^62) / 2^62``) -- ``scalar.round_significand``'s rule, so the same
    random bits give the same result. Exact where :func:`fast_path_ok` holds for stochastic
    rounding; branch-free float instructions (and integer ones on the random bits), no
    float-to-integer conversion: the loop vectorises.

    u = |t| / q (q = 2^(e - m), e the binade of |t| within [emin, emax]) is exact, as are its
    fraction u - trunc(u) and y = that fraction · 2^62 (scalings up by powers of two). For the
    integer rand62 = hi · 2^32 + lo, rand62 < ceil(y) iff rand62 < y iff hi < floor(y / 2^32),
    or hi equals it and lo < the exact rest: every comparison is between float64s that hold
    their values exactly (hi < 2^30 and lo < 2^32, read as floats by the 2^52 trick). A NaN t
    (the elements of a NaN block, overwritten by the caller) gives NaN."""
    two_emin, two_emax, two_m, inv_two_m, maxv, zero = kst
    a = abs(t)
    p = min(max(pow2_of(a), two_emin), two_emax)
    u = a * (inv_pow2_of(p) * two_m)  # |t| in quanta, exactly
    n = trunc_f64(u)
    z = (u - n) * 1073741824.0  # y / 2^32 = f · 2^30, exactly
    zh = floor_f64(z)
    zl = (z - zh) * 4294967296.0  # y - zh · 2^32, exactly
    hi = scalar.bits_to_float64(TWO_52_BITS | (rand62 >> 32)) - TWO_52
    lo = scalar.bits_to_float64(TWO_52_BITS | (rand62 & 0xFFFFFFFF)) - TWO_52
    up = (hi < zh) | ((hi == zh) & (lo < zl))
    r = min((n + up) * (p * inv_two_m), maxv)  # one quantum up when up; beyond max: max
    return math.copysign(r, t) + zero  # + zero: +0 for a format without -0


def recip_ok(dtype, elem, sfmt) -> bool:
    """Whether :func:`round_quotient` may quantize float-scale elements of ``elem`` under
    scales of ``sfmt`` (FormatRecords): float32 x and ``m + m_s <= 22`` (fraction bits).

    Why. v = x / d, d = s · g (s of the scale format: at most m_s + 1 significant bits; g a
    float32; d = D · 2^c with D < 2^(m_s + 25)); x = X · 2^a (X odd, < 2^24). A midpoint M of
    the element grid (where nearest even changes its result) is Mi · 2^b, Mi odd and < 2^(m +
    2). If v != M, x - M·d is a non-zero multiple of 2^min(a, b + c), so |v - M| >= M ·
    2^-(m + m_s + 27) (or v · 2^-24): at least M · 2^-49. t = fl(x · fl(1 / d)) is within
    v · 2^-51.9 of v, so t and v lie on the same side of every midpoint and round alike.
    If v is a midpoint (or a grid point), t rounded to the half-quantum grid is v itself,
    and h · d == |x| is exact (at most m + m_s + 27 <= 53 bits), so the check picks h.
    """
    return dtype == np.float32 and elem.man_bits + sfmt.man_bits <= 22


@register_jitable
def round_quotient(x, r, d, k):
    """x / d rounded to nearest even in the element format, saturating, from ``r = fl(1 / d)``
    with no division (valid where :func:`recip_ok` holds): round(fl(x · r)), unless the
    quotient is exactly a point h of the half-quantum grid (then h · d == |x|), where it is
    round(h): the ties an approximate quotient would break either way. (h lies in the binade of
    fl(x · r) or at its top, 2^(e+1), a multiple of the quantum: s rounds it exactly.)"""
    two_emin, two_emax, magic, maxv, zero = k
    a = abs(x * r)
    p = min(max(pow2_of(a), two_emin), two_emax)
    s = p * magic  # 1.5 * 2^(e + 52 - m): rounds to the quantum 2^(e - m)
    s2 = p * (0.5 * magic)  # rounds to half the quantum
    h = (a + s2) - s2
    a = h if h * d == abs(x) else a  # exactly h: round h itself (a tie goes to even)
    y = (a + s) - s
    y = maxv if y > maxv else y
    return math.copysign(y, x) + zero


def _fast_blocks(x, xi, out, scales, blk0, blk1, n, flat, g, elem_max, scale_min, k, ks,
                 inf_bits, recip, kst):  # fmt: skip
    """Quantize blocks ``blk0 .. blk1 - 1`` of the rows of length ``n`` of the flat
    C-contiguous ``x`` (``xi``: the same memory as signed integers of x's width, ``inf_bits``
    the pattern of inf there) into the flat ``out`` and ``scales`` (one per block), as
    :func:`_blocks` does, where :func:`fast_path_ok` holds for the element format and the
    mode ``flat[22]``, nearest even or stochastic (``k``: the element format's
    :func:`saturating_constants`, ``kst`` its :func:`stochastic_constants`). ``ks``: the scale
    format's, or an empty tuple where a float scale must take the general rounding.

    Stochastic rounding draws element i's 62 random bits as the general kernel does,
    ``scalar.random62(seed, i)`` with i the element's flat index in x (row · n + column), so
    the results are the same bit for bit.

    ``recip``: a float-scale element is :func:`round_quotient` (a multiplication by 1/d) instead
    of ``round(div_odd(x, d))`` (see there for when that is the same).

    Every inner loop runs over a fresh 1-D slice of one block: LLVM then vectorises it even
    with a run-time trip count (indexing the whole array from lo to hi, it does not, and runs
    the loop 2-3 times slower). No integer division per block (tens of cycles each): the
    blocks' positions are stepped along the rows.
    """
    elem = unflatten(flat, 0)
    sfmt = unflatten(flat, 10)
    s_emin, s_emax = scalar.emin_of(sfmt), scalar.emax_of(sfmt)  # the scale exponents held
    kind, srule, mode, seed, bs = flat[20], flat[21], flat[22], flat[23], flat[24]
    nb = (n + bs - 1) // bs
    m = blk1 - blk0
    emax = scalar.emax_of(elem)
    max_sig = scalar.max_sig_of(elem)
    mask = inf_bits | (inf_bits - 1)  # every bit but the sign
    # 1. Every block's largest magnitude pattern: patterns of non-negative floats are ordered
    #    like their values, and an integer max vectorises (a float one does not: its order of
    #    comparisons is fixed); a pattern at or above inf's marks a block holding inf or NaN.
    mbits = np.empty(m, xi.dtype)
    start = np.empty(m, np.int64)
    end = np.empty(m, np.int64)
    row = blk0 // nb
    col = blk0 - row * nb
    for j in range(m):
        lo = row * n + col * bs
        hi = min(lo + bs, row * n + n)
        start[j] = lo
        end[j] = hi
        xs = xi[lo:hi]
        mb = 0
        for i in range(xs.size):
            mb = max(mb, xs[i] & mask)
        mbits[j] = mb
        col += 1
        if col == nb:
            col = 0
            row += 1
    amax_x = mbits.view(x.dtype)
    # 2. Every block's scale, and what its elements are multiplied (MX) or divided (float
    #    scales) by; NaN for a block holding inf or NaN.
    factor = np.empty(m)
    if kind == POW2:
        for j in range(m):
            e = mx_exponent(scalar.float64_to_bits(np.float64(amax_x[j])), srule, emax,
                            elem.man_bits, max_sig, s_emin, s_emax)  # fmt: skip
            nan = mbits[j] >= inf_bits
            scales[blk0 + j] = math.nan if nan else scalar.pow2(e)
            factor[j] = math.nan if nan else scalar.pow2(-e)
    else:
        amax = np.empty(m)
        for j in range(m):
            amax[j] = min(np.float64(amax_x[j]), math.inf)  # NaN blocks: any value, see below
        if len(ks) == 5:  # nearest even, a scale format round_saturating handles
            den = elem_max * g
            sv = np.empty(m)
            for j in range(m):
                sv[j] = max(round_saturating(div_odd(amax[j], den), ks), scale_min)
        else:
            sv = _float_scale_values(amax, sfmt, srule, g, elem_max, scale_min)
        for j in range(m):
            nan = mbits[j] >= inf_bits
            scales[blk0 + j] = math.nan if nan else sv[j]
            factor[j] = math.nan if nan else sv[j] * g  # exact: both have few significant bits
    # 3. Every element, in one flat loop over the chunk (its blocks are consecutive in the
    #    flat array, a short last block of a row included): per-block loops of 16 or 32
    #    elements run mostly in their scalar remainder. Each element's factor is spread into
    #    ``fe`` first (a chunk of float64s, in L2). x · 2^-e is exact and finite (e is at
    #    least floor(log2 amax) - emax, or -127 when that is below), as is div_odd's
    #    quotient. A NaN block's elements are garbage here, and NaN after the loop.
    base = start[0]
    size = end[m - 1] - base
    fe = np.empty(size)
    xs = x[base : base + size]
    os = out[base : base + size]
    if mode == scalar.STOCHASTIC:
        for j in range(m):
            fe[start[j] - base : end[j] - base] = factor[j]
        ka, kb = scalar.random62_keys(seed)
        if kind == POW2:
            for i in range(size):
                rand = scalar.random62_keyed(ka, kb, base + i)
                os[i] = round_stochastic_saturating(np.float64(xs[i]) * fe[i], rand, kst)
        else:
            for i in range(size):
                rand = scalar.random62_keyed(ka, kb, base + i)
                os[i] = round_stochastic_saturating(div_odd(np.float64(xs[i]), fe[i]), rand,
                                                    kst)  # fmt: skip
    elif kind == POW2:
        for j in range(m):
            fe[start[j] - base : end[j] - base] = factor[j]
        for i in range(size):
            os[i] = round_saturating(np.float64(xs[i]) * fe[i], k)
    elif recip:
        re = np.empty(size)  # fl(1 / d): one division per block
        for j in range(m):
            fe[start[j] - base : end[j] - base] = factor[j]
            re[start[j] - base : end[j] - base] = 1.0 / factor[j]
        for i in range(size):
            os[i] = round_quotient(np.float64(xs[i]), re[i], fe[i], k)
    else:
        for j in range(m):
            fe[start[j] - base : end[j] - base] = factor[j]
        for i in range(size):
            os[i] = round_saturating(div_odd(np.float64(xs[i]), fe[i]), k)
    for j in range(m):
        if factor[j] != factor[j]:
            out[start[j] : end[j]] = math.nan


# error_model="numpy": a float division by zero gives inf/NaN instead of raising, so numba
# emits no zero test before each division and LLVM vectorises div_odd's loop (4x faster). The
# fast kernel never divides by zero: every divisor is a scale of at least the scale format's
# smallest normal times a positive float32 tensor scale (> 2^-300), or NaN (NaN blocks).
_fast_blocks_jit = njit(cache=True, nogil=True, error_model="numpy")(_fast_blocks)


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _fast_parallel(x, xi, out, scales, nblocks, n, flat, g, elem_max, scale_min, k, ks,
                   inf_bits, recip, kst):  # fmt: skip
    ntasks = (nblocks + CHUNK - 1) // CHUNK
    for t in prange(ntasks):
        _fast_blocks_jit(x, xi, out, scales, t * CHUNK, min((t + 1) * CHUNK, nblocks), n, flat,
                         g, elem_max, scale_min, k, ks, inf_bits, recip, kst)  # fmt: skip


FAST_PATH = True  # tests switch it off to run the general kernel compiled


def quantize_blocks(x: np.ndarray, out: np.ndarray, scales: np.ndarray, flat: tuple, g: float,
                    elem_max: float, scale_min: float, backend: str = "cpu") -> None:  # fmt: skip
    """Quantize every block of the C-contiguous 2-D float32/float64 ``x`` into ``out`` and
    ``scales``: by the fast kernel :func:`_fast_blocks` where :func:`fast_path_ok` holds (and
    ``backend="cpu"``, ``FAST_PATH``), else by the general :func:`_blocks`
    (``backend="python"`` runs it uncompiled)."""
    bs = flat[24]
    nblocks = x.shape[0] * ((x.shape[1] + bs - 1) // bs)
    flat = tuple(int(v) for v in flat)
    args = (flat, float(g), float(elem_max), float(scale_min))
    elem = unflatten(flat, 0)
    if backend == "python":
        _blocks(x, out, scales, 0, nblocks, *args)
    elif FAST_PATH and fast_path_ok(elem, flat[22]):
        sfmt = unflatten(flat, 10)
        recip = flat[22] == scalar.NEAREST_EVEN and recip_ok(x.dtype, elem, sfmt)
        it = np.int32 if x.dtype == np.float32 else np.int64
        inf_bits = it(0x7F800000) if it is np.int32 else it(0x7FF0000000000000)
        xf = x.reshape(-1)
        fargs = (out.reshape(-1), scales.reshape(-1))
        ks = saturating_constants(sfmt) if fast_path_ok(sfmt, flat[21]) else ()
        more = (x.shape[1], *args, saturating_constants(elem), ks, inf_bits, recip,
                stochastic_constants(elem))  # fmt: skip
        if x.size >= PARALLEL_MIN:
            _fast_parallel(xf, xf.view(it), *fargs, nblocks, *more)
        else:
            _fast_blocks_jit(xf, xf.view(it), *fargs, 0, nblocks, *more)
    elif x.size >= PARALLEL_MIN:
        _blocks_parallel(x, out, scales, nblocks, *args)
    else:
        _blocks_jit(x, out, scales, 0, nblocks, *args)


# ---- dequantization ----------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def dequantize_blocks(el, scales, g, bs, out):
    """``out[r, i] = el[r, i] · (scales[r, i // bs] · g)``, the products taken in float64 and
    stored in out's dtype (float32: rounded once to nearest even): the 2-D float32 elements
    ``el`` (rows × n) of blocks of ``bs`` along the rows, their float64 ``scales`` (rows ×
    blocks) and the tensor scale ``g`` (1.0 for none). One pass, no temporaries (numpy's
    ``(el.astype(float64) * scales_per_element).astype(out.dtype)`` takes four)."""
    n = el.shape[1]
    for r in range(el.shape[0]):
        er = el[r]
        orow = out[r]
        for j in range(scales.shape[1]):
            f = scales[r, j] * g
            lo = j * bs
            hi = min(lo + bs, n)
            e = er[lo:hi]  # fresh 1-D slices: the loop vectorises
            o = orow[lo:hi]
            for i in range(hi - lo):
                o[i] = np.float64(e[i]) * f


# ---- the largest magnitude of a whole tensor (NVFP4's per-tensor scale) -----------------------
def _amax_chunk(xi, lo, hi, inf_bits):
    """The largest magnitude bit pattern of xi[lo:hi] (1-D signed-integer view of floats),
    NaN ignored (as fmaxf does): a magnitude pattern above inf's is NaN."""
    s = xi[lo:hi]
    mask = inf_bits | (inf_bits - 1)  # every bit but the sign
    m = 0
    for i in range(s.size):
        b = s[i] & mask
        m = max(m, b if b <= inf_bits else 0)
    return m


_amax_chunk_jit = njit(cache=True, nogil=True)(_amax_chunk)


@njit(parallel=True, cache=True, nogil=True)
def _amax_parallel(xi, nchunks, size, inf_bits):
    part = np.zeros(nchunks, np.int64)
    for c in prange(nchunks):
        part[c] = _amax_chunk_jit(xi, c * size, min((c + 1) * size, xi.size), inf_bits)
    return part.max()


def amax_ignoring_nan(x: np.ndarray) -> float:
    """max |x| over the C-contiguous 1-D float32/float64 ``x``, NaN ignored (0.0 if empty or
    all NaN; inf if x holds ±inf). Works on the bit patterns of the same width (an integer max
    over 8 float32 lanes at a time)."""
    it = np.int32 if x.dtype == np.float32 else np.int64
    xi = x.view(it)
    inf_bits = it(0x7F800000) if it is np.int32 else it(0x7FF0000000000000)
    if x.size >= PARALLEL_MIN:
        size = 1 << 16
        bits = _amax_parallel(xi, (x.size + size - 1) // size, size, inf_bits)
    else:
        bits = _amax_chunk_jit(xi, 0, x.size, inf_bits)
    return float(np.array(bits, it).view(x.dtype))
