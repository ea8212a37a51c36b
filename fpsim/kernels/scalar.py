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

from numba.extending import register_jitable

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
        e = 1 - bias
        while frac < (1 << man_bits):
            frac = frac << 1
            e -= 1
        return sign, FINITE, e, frac

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
    while sig < (1 << nbits):
        sig = sig << 1
        e -= 1
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
def fast_path_limits(src_e, src_m, src_b, fmt_e, fmt_m, fmt_b, fmt_fn):
    """Where :func:`round_nearest_even_bits` applies: magnitude patterns in ``[lowest, highest]``.

    That is, container values from the format's smallest normal to its largest finite value, so
    the result is a normal number of the format (no subnormal grid, no overflow). Returns an
    empty range (1, 0) when the container has no more fraction bits than the format.
    """
    d = src_m - fmt_m
    if d <= 0:
        return 1, 0
    top = (1 << fmt_e) - 1
    emin = 1 - fmt_b
    emax = top - fmt_b if fmt_fn == 1 else top - 1 - fmt_b
    max_frac = (1 << fmt_m) - 2 if fmt_fn == 1 else (1 << fmt_m) - 1
    lowest = (emin + src_b) << src_m
    highest = ((emax + src_b) << src_m) | (max_frac << d)
    return lowest, highest


@register_jitable(inline="always")
def round_nearest_even_bits(bits, src_e, src_m, fmt_m):
    """Round a container pattern to ``fmt_m`` fraction bits, ties to even — valid only for
    magnitudes inside :func:`fast_path_limits`.

    The magnitude bits of an IEEE pattern are ordered like the values, and the exponent field
    sits just above the fraction. So rounding the fraction is integer arithmetic on the pattern:
    add just under half a quantum, plus one when the last kept bit is odd (so an exact tie
    carries exactly when the kept part is odd: ties to even), then clear the ``d`` discarded
    bits. A carry out of the fraction increments the exponent field, which is exactly the right
    answer (1.11..1 × 2^e rounds up to 1.0 × 2^(e+1)). No branch: compilers vectorise it.
    """
    d = src_m - fmt_m
    mag = bits & ((1 << (src_e + src_m)) - 1)
    r = ((mag + (1 << (d - 1)) - 1 + ((mag >> d) & 1)) >> d) << d
    return bits - mag + r  # put the sign part back


@register_jitable(inline="always")
def convert(bits,
            src_e, src_m, src_b, src_fn,
            fmt_e, fmt_m, fmt_b, fmt_fn,
            dst_e, dst_m, dst_b, dst_fn,
            mode, subnormals, saturate, rand62):  # fmt: skip
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

    # 0. Fast path (same answer, fewer steps) for the commonest case; see fast_path_limits.
    if mode == NEAREST_EVEN and src_fn == 0 and src_e == dst_e and src_m == dst_m and src_b == dst_b:
        lowest, highest = fast_path_limits(src_e, src_m, src_b, fmt_e, fmt_m, fmt_b, fmt_fn)
        mag = bits & ((1 << (src_e + src_m)) - 1)
        if lowest <= mag and mag <= highest:
            return round_nearest_even_bits(bits, src_e, src_m, fmt_m)

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
            to_max = (saturate == 1 or mode == TOWARD_ZERO
                      or (mode == UP and sign == 1) or (mode == DOWN and sign == 0))  # fmt: skip
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
