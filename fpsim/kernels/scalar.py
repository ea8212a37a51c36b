"""The one scalar implementation of decode / round / encode, in numba's Python subset.

Everything fpsim does to a single number goes through :func:`convert`: read a bit pattern in
one *layout*, round its value to a *format*, write it as a bit pattern in another layout.

* rounding an array of float32s to bf16 is ``float32 layout -> round to bf16 -> float32 layout``;
* encoding (``to_bits``) is ``float64 layout -> round to fp16 -> fp16 layout``;
* decoding (``from_bits``) is ``fp16 layout -> round to fp64 (exact) -> float64 layout``.

A layout or a format is four integers ``(exp_bits, man_bits, bias, fn)``: ``fn = 1`` for the
finite-only style whose all-ones code is NaN (OCP FP8 E4M3), ``0`` for IEEE style.

The functions are plain Python decorated with ``register_jitable``: called from Python they run
as ordinary (slow, exact) Python — fpsim's pure-Python reference — and called from a numba CPU or
CUDA kernel they are compiled into it. So the three back ends run *the same lines*.

Integer conventions (they make the same code correct in Python and in 64-bit numba):

* A bit pattern is a **signed** integer: the pattern of a W-bit code read as a two's-complement
  W-bit integer (what an ``int32`` view of a float32 array holds). Python ints and numba int64
  agree on every operation used here on such values.
* Inside, a finite non-zero value is ``(-1)^sign × sig × 2^(e - nbits)``: ``sig`` is an integer
  significand, ``e`` the exponent of its leading bit when *normalised* (``2^nbits <= sig <
  2^(nbits+1)``). A target-format subnormal is kept unnormalised: ``e = emin``, ``sig < 2^nbits``.
"""

from numba import types
from numba.cpython.unsafe.numbers import leading_zeros
from numba.extending import overload, register_jitable

# Classes of a decoded value.
ZERO = 0
FINITE = 1
INF = 2
NAN = 3

# Rounding modes (the integers the kernels take).
NEAREST_EVEN = 0  # IEEE roundTiesToEven, the default everywhere
NEAREST_AWAY = 1  # IEEE roundTiesToAway
TOWARD_ZERO = 2  # truncation
UP = 3  # toward +inf
DOWN = 4  # toward -inf
STOCHASTIC = 5  # up with probability (discarded part) / (one quantum)

MASK32 = 0xFFFFFFFF


def bit_length(x):
    """Number of significant bits of a non-negative integer (``int.bit_length``; 0 for 0).

    In Python this is ``int.bit_length``; compiled, it is one count-leading-zeros instruction
    (see the overload below), so normalising a significand costs one shift, not a loop.
    """
    return int(x).bit_length()


@overload(bit_length, target="generic")
def _bit_length_compiled(x):
    # Compiled code only ever passes int64 here: 64 minus the count of leading zero bits.
    if isinstance(x, types.Integer) and x.bitwidth == 64 and x.signed:
        return lambda x: 64 - leading_zeros(x)
    return None


@register_jitable(inline="always")
def unpack(bits, exp_bits, man_bits, bias, fn):
    """Decode a bit pattern into ``(sign, cls, e, sig)``; value = ±sig × 2^(e - man_bits).

    Finite non-zero results are normalised: bit ``man_bits`` of ``sig`` is set.
    """
    # 1. Cut the pattern into its three fields. ``bits`` may be negative (a signed view of a
    #    pattern whose sign bit is set): an arithmetic shift then a mask still yields each field.
    sign = (bits >> (exp_bits + man_bits)) & 1
    biased = (bits >> man_bits) & ((1 << exp_bits) - 1)
    frac = bits & ((1 << man_bits) - 1)
    top = (1 << exp_bits) - 1

    # 2. Special values live in the all-ones exponent: inf and NaN for IEEE style; for the
    #    finite-only style only the all-ones code S.1111.111 is special (NaN).
    if biased == top:
        if fn == 0:
            if frac == 0:
                return sign, INF, 0, 0
            return sign, NAN, 0, 0
        if frac == (1 << man_bits) - 1:
            return sign, NAN, 0, 0

    # 3. Zero and subnormals: exponent field 0 means "0.frac × 2^(1 - bias)", no implicit 1.
    if biased == 0:
        if frac == 0:
            return sign, ZERO, 0, 0
        # Normalise: shift the fraction up until its leading 1 sits where the implicit bit of a
        # normal number would be, lowering the exponent by one per shift.
        shift = man_bits + 1 - bit_length(frac)
        return sign, FINITE, 1 - bias - shift, frac << shift

    # 4. Normal: restore the implicit leading 1 above the stored fraction.
    return sign, FINITE, biased - bias, frac | (1 << man_bits)


@register_jitable(inline="always")
def round_significand(sign, e, sig, nbits, man_bits, emin, mode, rand62):
    """Round ±sig × 2^(e - nbits) (normalised) to ``man_bits`` fraction bits, exponent >= emin.

    Returns ``(e2, sig2)`` with the rounded value ±sig2 × 2^(e2 - man_bits). The exponent range is
    unbounded above (the caller checks overflow); below ``emin`` the quantum stops shrinking,
    which is exactly gradual underflow: subnormals come out with ``e2 = emin``, ``sig2 <
    2^man_bits``, and values under half the smallest subnormal round to ``sig2 = 0``.
    """
    # 5. The quantum: the value of the last bit the format keeps. A normal number keeps man_bits
    #    bits below its leading bit; below emin the format's grid is fixed at 2^(emin - man_bits).
    q = max(e, emin) - man_bits
    # Number of low bits of sig that fall below the quantum and must be rounded off.
    d = q - (e - nbits)
    if d <= 0:
        # The value already lies on the format's grid: re-express it with man_bits bits.
        return e, sig << (man_bits - nbits)

    # 6. Split sig into the kept bits and the discarded remainder ``rem``. ``half`` is the
    #    remainder of an exact tie: the guard bit (the first discarded bit) set, every sticky bit
    #    (the bits below it) clear.
    if d > 62:
        # Everything is discarded, and the remainder (< 2^53) is far below half a quantum.
        kept = 0
        rem = sig
        half = 1 << 62
    else:
        kept = sig >> d
        rem = sig & ((1 << d) - 1)
        half = 1 << (d - 1)

    # 7. Decide whether to step up to the next multiple of the quantum (away from zero).
    if mode == NEAREST_EVEN:
        # Above half: up. Exactly half (a tie): up only when that makes the kept bits even, i.e.
        # when they are odd now. Written as arithmetic, not branches, because on random data
        # this decision is a coin toss that a branch predictor cannot learn.
        kept += (rem > half) | ((rem == half) & (kept & 1))
    elif rem != 0:
        up = False
        if mode == NEAREST_AWAY:
            up = rem >= half
        elif mode == UP:
            up = sign == 0  # toward +inf: positive magnitudes grow
        elif mode == DOWN:
            up = sign == 1  # toward -inf: negative magnitudes grow
        elif mode == STOCHASTIC:
            # Up with probability rem / 2^d. rand62 is uniform on [0, 2^62), so compare it with
            # rem scaled to 62 bits (exact while d <= 62; past that the bias is below 2^-62).
            if d <= 62:
                up = rand62 < (rem << (62 - d))
            else:
                k = d - 62
                threshold = 1 if k >= 53 else (rem + (1 << k) - 1) >> k
                up = rand62 < threshold
        # TOWARD_ZERO: never up (truncation).
        if up:
            kept += 1

    # 8. Carry: rounding 1.11...1 up gives 10.00...0; renormalise into the next binade.
    if kept == (1 << (man_bits + 1)):
        kept = kept >> 1
        q += 1
    return q + man_bits, kept


@register_jitable(inline="always")
def pack(sign, cls, e, sig, nbits, exp_bits, man_bits, bias, fn):
    """Encode ±sig × 2^(e - nbits) (exactly representable) as a signed bit pattern of a layout."""
    width = exp_bits + man_bits  # bits below the sign bit
    # The sign bit has weight -2^width in a two's-complement reading of the pattern.
    sign_part = -(sign << width)
    top = (1 << exp_bits) - 1
    if cls == ZERO:
        return sign_part
    if cls == INF:
        return sign_part + (top << man_bits)
    if cls == NAN:
        # The canonical quiet NaN: IEEE style sets the top fraction bit, fn style is all ones.
        if fn == 1:
            return sign_part + (1 << width) - 1
        return sign_part + (top << man_bits) + (1 << (man_bits - 1))

    # 9. Normalise (a target-format subnormal arrives with sig < 2^nbits).
    if sig == 0:
        return sign_part
    shift = nbits + 1 - bit_length(sig)
    if shift > 0:
        sig = sig << shift
        e -= shift
    emin = 1 - bias
    if e >= emin:
        # 10a. Normal: drop the implicit 1, align the fraction to man_bits bits.
        if man_bits >= nbits:
            frac = sig << (man_bits - nbits)
        else:
            frac = sig >> (nbits - man_bits)
        frac = frac & ((1 << man_bits) - 1)
        return sign_part + ((e + bias) << man_bits) + frac
    # 10b. Subnormal: exponent field 0, fraction = value / 2^(emin - man_bits).
    shift = (e - nbits) - (emin - man_bits)
    if shift >= 0:
        frac = sig << shift
    else:
        frac = sig >> (-shift)
    return sign_part + frac


@register_jitable(inline="always")
def nearest_even_constants(c_e, c_m, c_b, fmt_e, fmt_m, fmt_b, fmt_fn, subnormals, saturate):
    """The container patterns :func:`round_nearest_even_bits` needs, computed once per array.

    Returns ``(max_pat, ovf_pat, inf_pat, nan_pat, low_pat)``: the container patterns (magnitude
    only) of the format's largest value, of the result of an overflow, of the result for an
    infinite input, of NaN, and of the smallest result kept (the smallest normal when flushing
    subnormals, else the smallest subnormal).
    """
    top = (1 << fmt_e) - 1
    emin = 1 - fmt_b
    emax = top - fmt_b if fmt_fn == 1 else top - 1 - fmt_b
    max_frac = (1 << fmt_m) - 2 if fmt_fn == 1 else (1 << fmt_m) - 1
    max_pat = ((emax + c_b) << c_m) | (max_frac << (c_m - fmt_m))
    c_inf = ((1 << c_e) - 1) << c_m
    nan_pat = c_inf | (1 << (c_m - 1))  # the container's canonical quiet NaN
    if saturate == 1:
        ovf_pat = max_pat
    elif fmt_fn == 1:
        ovf_pat = nan_pat
    else:
        ovf_pat = c_inf
    if fmt_fn == 0:
        inf_pat = c_inf
    elif saturate == 1:
        inf_pat = max_pat
    else:
        inf_pat = nan_pat
    low_pat = (emin + c_b) << c_m if subnormals == 0 else 1
    return max_pat, ovf_pat, inf_pat, nan_pat, low_pat


@register_jitable(inline="always")
def round_nearest_even_bits(
    bits, c_e, c_m, c_b, fmt_m, fmt_b, max_pat, ovf_pat, inf_pat, nan_pat, low_pat
):
    """Round a container pattern (float32/float64 layout) to the format, ties to even, and
    return the container pattern of the result: the same answer as :func:`convert` with
    ``mode=NEAREST_EVEN`` and src = dst = the container, for *every* input — written without a
    branch so that a compiler can vectorise it (``x if c else y`` becomes a select). The
    container must have more fraction bits than the format (``c_m > fmt_m``).
    """
    # 1. Split off the sign; the magnitude pattern is ordered like |x|.
    mag = bits & ((1 << (c_e + c_m)) - 1)
    sign_part = bits - mag
    c_top = (1 << c_e) - 1
    biased = mag >> c_m
    frac = mag & ((1 << c_m) - 1)
    # 2. Unpack: |x| = sig × 2^(e - c_m); a container subnormal (biased 0) has exponent 1 - bias
    #    and no implicit bit.
    sig = frac | ((1 if biased != 0 else 0) << c_m)
    e = max(biased, 1) - c_b
    # 3. The quantum 2^q of the format at |x|: fmt_m bits below the leading bit, but never
    #    below the subnormal spacing 2^(emin - fmt_m). d = how many low bits of sig go.
    q = max(e, 1 - fmt_b) - fmt_m
    d = min(q - (e - c_m), c_m + 2)  # past c_m + 2 everything is below half a quantum anyway
    # 4. Round half to even: add just under half a quantum, plus one if the kept part is odd.
    kept = (sig + (1 << (d - 1)) - 1 + ((sig >> d) & 1)) >> d
    # 5. Re-encode kept × 2^q as a container pattern. Its leading bit is 2^(q + n - 1), with
    #    n = bit_length(kept); shifting kept so that bit lands on the implicit-bit position and
    #    adding (exponent - 1) << c_m lets that leading 1 complete the exponent field.
    n = bit_length(kept)
    normal_pat = ((q + n + c_b - 2) << c_m) + (kept << (c_m + 1 - n))
    sub_pat = kept << min(q + c_b + c_m - 1, 63)  # a container subnormal: kept × 2^q / 2^(1-b-m)
    pat = normal_pat if q + n - 1 >= 1 - c_b else sub_pat
    pat = 0 if kept == 0 else pat
    # 6. Range: below the smallest kept value flush to zero; above the largest, overflow.
    pat = 0 if pat < low_pat else pat
    pat = ovf_pat if pat > max_pat else pat
    # 7. Special inputs: infinity and NaN (the container's all-ones exponent).
    pat = (inf_pat if frac == 0 else nan_pat) if biased == c_top else pat
    return sign_part + pat


@register_jitable(inline="always")
def round_nearest_even_same_range(bits, c_e, c_m, fmt_m):
    """:func:`round_nearest_even_bits` for a format with the container's own exponent field
    (bf16 and tf32 in a float32): the classic "add and mask" needs no range handling then.

    The magnitude bits of an IEEE pattern are ordered like the values and the exponent field
    sits just above the fraction, so rounding the fraction to ``fmt_m`` bits is: add just under
    half a quantum, plus one when the last kept bit is odd (so an exact tie carries only from an
    odd kept part: ties to even), then clear the ``d`` discarded bits. A carry out of the
    fraction bumps the exponent — exactly right, up to the largest value, past which it lands
    on the infinity pattern, which is right too. Subnormals share the container's grid. Only
    NaN needs care: the addition could carry its payload into inf (the bug of the classic bf16
    trick), so NaN gets the canonical quiet NaN. Valid with subnormals kept, no saturation.
    """
    mag = bits & ((1 << (c_e + c_m)) - 1)
    d = c_m - fmt_m
    r = ((mag + (1 << (d - 1)) - 1 + ((mag >> d) & 1)) >> d) << d
    inf = ((1 << c_e) - 1) << c_m
    r = (inf | (1 << (c_m - 1))) if mag > inf else r
    return bits - mag + r


@register_jitable(inline="always")
def convert(
    bits,
    src_e,
    src_m,
    src_b,
    src_fn,
    fmt_e,
    fmt_m,
    fmt_b,
    fmt_fn,
    dst_e,
    dst_m,
    dst_b,
    dst_fn,
    mode,
    subnormals,
    saturate,
    rand62,
):
    """Read ``bits`` in the src layout, round to the format, write in the dst layout.

    ``subnormals=0`` flushes results below the smallest normal to signed zero (after rounding
    with gradual underflow). Overflow gives ±inf (IEEE style) or NaN (fn style), or ±max when
    ``saturate=1`` or when the rounding direction points back toward zero (IEEE 754 §7.4).
    """
    top = (1 << fmt_e) - 1
    # The format's limits: emin = 1 - bias; emax and the largest significand depend on style.
    emin = 1 - fmt_b
    if fmt_fn == 1:
        emax = top - fmt_b
        max_sig = (1 << (fmt_m + 1)) - 2  # S.1111.111 is NaN, so the top fraction is 1...10
    else:
        emax = top - 1 - fmt_b
        max_sig = (1 << (fmt_m + 1)) - 1

    sign, cls, e, sig = unpack(bits, src_e, src_m, src_b, src_fn)
    nbits = fmt_m

    if cls == INF:
        if fmt_fn == 1:
            # No infinity in a finite-only format: NaN, or the largest value when saturating.
            if saturate == 1:
                cls = FINITE
                e = emax
                sig = max_sig
            else:
                cls = NAN
    elif cls == FINITE:
        e, sig = round_significand(sign, e, sig, src_m, fmt_m, emin, mode, rand62)
        if sig == 0:
            cls = ZERO  # underflow to a signed zero
        elif e > emax or (e == emax and sig > max_sig):
            # 11. Overflow. Round-to-nearest goes to infinity; a directed mode that rounds
            #     toward zero for this sign stops at the largest finite value.
            to_max = (
                saturate == 1
                or mode == TOWARD_ZERO
                or (mode == UP and sign == 1)
                or (mode == DOWN and sign == 0)
            )
            if to_max:
                e = emax
                sig = max_sig
            elif fmt_fn == 1:
                cls = NAN
            else:
                cls = INF
        elif subnormals == 0 and (e < emin or sig < (1 << fmt_m)):
            cls = ZERO  # flush-to-zero: a subnormal result becomes ±0
    return pack(sign, cls, e, sig, nbits, dst_e, dst_m, dst_b, dst_fn)


@register_jitable(inline="always")
def hash32(x):
    """A 32-bit integer mixer (Wellons' lowbias32): every input bit affects every output bit."""
    x = x & MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    x = x ^ (x >> 16)
    return x


@register_jitable(inline="always")
def random62(seed, index):
    """62 random bits for element ``index``: a counter-based generator, so the result depends
    only on (seed, index) — identical on the CPU, the GPU and in pure Python, in any order."""
    a = hash32(seed ^ 0x9E3779B9)
    b = hash32((seed >> 32) ^ 0x85EBCA6B)
    lo = hash32(hash32((index & MASK32) ^ a) ^ b)
    hi = hash32(lo ^ hash32(((index >> 32) & MASK32) ^ b) ^ 0xC2B2AE35)
    return ((hi & 0x3FFFFFFF) << 32) | lo
