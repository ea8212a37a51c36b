"""The one scalar implementation of decode / round / encode, in numba's Python subset.

Everything fpsim does to a single number goes through :func:`convert`: read a bit pattern in
one *layout*, round its value to a *format*, write it as a bit pattern in another layout.

* rounding an array of float32s to bf16 is ``float32 layout -> round to bf16 -> float32 layout``;
* encoding (``to_bits``) is ``float64 layout -> round to fp16 -> fp16 layout``;
* decoding (``from_bits``) is ``fp16 layout -> round to fp64 (exact) -> float64 layout``.

A layout or a format is one :class:`~fpsim.kernels.record.FormatRecord`: its field widths and
bias, whether it is signed and has subnormals, and where its special codes sit (infinity, the
NaN codes, or NaN in place of -0). ``fpsim.Format.record`` makes it.

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

from .record import FLOAT32, FLOAT64, FormatRecord  # noqa: F401  (FLOAT32: for the kernels)

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


@register_jitable
def emax_of(f):
    """Unbiased exponent of the format's largest finite value."""
    return (f.max_mag >> f.man_bits) - f.bias


@register_jitable
def max_sig_of(f):
    """Integer significand (implicit bit included) of the format's largest finite value."""
    return (f.max_mag & ((1 << f.man_bits) - 1)) | (1 << f.man_bits)


@register_jitable
def emin_of(f):
    """Exponent of the format's lowest binade: ``1 - bias`` (below it the subnormal grid keeps
    the spacing of that binade), or ``-bias`` without subnormals (E8M0's code 0 is 2^-127)."""
    return 1 - f.bias if f.has_subnormals == 1 else -f.bias


@register_jitable
def unpack(bits, f):
    """Decode a bit pattern of the format/layout ``f`` into ``(sign, cls, e, sig)``; value =
    ±sig × 2^(e - man_bits). Finite non-zero results are normalised: bit ``man_bits`` of ``sig``
    is set.
    """
    m = f.man_bits
    width = f.exp_bits + m  # the magnitude bits, below the sign bit
    # 1. Cut the pattern into sign and magnitude. ``bits`` may be negative (a signed view of a
    #    pattern whose top bit is set): an arithmetic shift then a mask still yields each field.
    sign = (bits >> width) & 1 if f.signed == 1 else 0
    mag = bits & ((1 << width) - 1)

    # 2. Special values sit at fixed magnitude codes: the NaN codes at the top (IEEE: every
    #    all-ones exponent with a non-zero fraction; OCP E4M3: only S.1111.111), infinity just
    #    below them; in the fnuz formats the one NaN is the code -0 would have.
    if mag >= f.nan_mag or (f.negzero_nan == 1 and sign == 1 and mag == 0):
        return sign, NAN, 0, 0
    if mag == f.inf_mag:
        return sign, INF, 0, 0

    biased = mag >> m
    frac = mag & ((1 << m) - 1)
    # 3. Zero and subnormals: exponent field 0 means "0.frac × 2^(1 - bias)", no implicit 1
    #    (only in a format with subnormals; in E8M0 field 0 is the binade 2^-127).
    if biased == 0 and f.has_subnormals == 1:
        if frac == 0:
            return sign, ZERO, 0, 0
        # Normalise: shift the fraction up until its leading 1 sits where the implicit bit of a
        # normal number would be, lowering the exponent by one per shift.
        shift = m + 1 - bit_length(frac)
        return sign, FINITE, 1 - f.bias - shift, frac << shift

    # 4. Normal: restore the implicit leading 1 above the stored fraction.
    return sign, FINITE, biased - f.bias, frac | (1 << m)


@register_jitable
def round_significand(sign, e, sig, nbits, f, mode, rand62):
    """Round ±sig × 2^(e - nbits) (normalised) to the format's grid: ``f.man_bits`` fraction
    bits, exponent >= its lowest binade.

    Returns ``(e2, sig2)`` with the rounded value ±sig2 × 2^(e2 - man_bits). The exponent range is
    unbounded above (the caller checks overflow); below the lowest binade the quantum stops
    shrinking, which is exactly gradual underflow: subnormals come out with ``e2 = emin``,
    ``sig2 < 2^man_bits``, and values under half the smallest subnormal round to ``sig2 = 0``.
    """
    man_bits = f.man_bits
    # 5. The quantum: the value of the last bit the format keeps. A normal number keeps man_bits
    #    bits below its leading bit; below emin the format's grid is fixed at 2^(emin - man_bits).
    q = max(e, emin_of(f)) - man_bits
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
        # Above half: up. Exactly half (a tie): up when that makes the *code* even, i.e. when
        # the lower neighbour's code is odd. With fraction bits the code's last bit is the last
        # kept bit; with none (E8M0, P3109 p=1) it is the last bit of the biased exponent,
        # q + bias for the value 1 × 2^q, and the zero below the smallest value has code 0
        # (gfloat and P3109 define ties this way; ml_dtypes' E8M0 rounds every tie up).
        odd = kept & 1 if man_bits > 0 else kept & (q + f.bias) & 1
        # Written as arithmetic, not branches: on random data this decision is a coin toss
        # that a branch predictor cannot learn.
        kept += (rem > half) | ((rem == half) & odd)
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


@register_jitable
def pack(sign, cls, e, sig, nbits, d):
    """Encode ±sig × 2^(e - nbits) (exactly representable) as a signed bit pattern of the
    layout ``d``."""
    m = d.man_bits
    width = d.exp_bits + m  # bits below the sign bit
    # The sign bit has weight -2^width in a two's-complement reading of the pattern.
    sign_part = -(sign << width) if d.signed == 1 else 0
    if cls == ZERO:
        return 0 if d.negzero_nan == 1 else sign_part
    if cls == INF:
        return sign_part + d.inf_mag
    if cls == NAN:
        # The canonical NaN: IEEE's quiet NaN (top fraction bit), the all-ones code, or -0's
        # code in an fnuz format. A layout without NaN never receives one (fpsim.to_bits refuses
        # NaN for such formats; the result here, +0, is unreachable from the public API).
        if d.qnan_mag >= 0:
            return sign_part + d.qnan_mag
        if d.negzero_nan == 1:
            return -(1 << width)
        return 0

    # 9. Normalise (a target-format subnormal arrives with sig < 2^nbits).
    if sig == 0:
        return sign_part
    shift = nbits + 1 - bit_length(sig)
    if shift > 0:
        sig = sig << shift
        e -= shift
    if e >= emin_of(d):
        # 10a. Normal: drop the implicit 1, align the fraction to man_bits bits.
        if m >= nbits:
            frac = sig << (m - nbits)
        else:
            frac = sig >> (nbits - m)
        frac = frac & ((1 << m) - 1)
        return sign_part + ((e + d.bias) << m) + frac
    # 10b. Subnormal: exponent field 0, fraction = value / 2^(emin - man_bits).
    shift = (e - nbits) - (1 - d.bias - m)
    if shift >= 0:
        frac = sig << shift
    else:
        frac = sig >> (-shift)
    return sign_part + frac


@register_jitable
def is_ieee_style(f):
    """True for a signed format with subnormals, ±inf and IEEE NaNs (all-ones exponent)."""
    inf = ((1 << f.exp_bits) - 1) << f.man_bits
    # negzero_nan: with man_bits=0 an fnuz-NaN format with inf (Format(8, 0, has_inf=True,
    # nan="negzero")) has inf and nan_mag where IEEE puts them, but its -0 code is NaN: not IEEE
    # (from_bits' same-exponent decode path would read that NaN as -0).
    return (
        f.signed == 1
        and f.has_subnormals == 1
        and f.inf_mag == inf
        and f.nan_mag == inf + 1
        and f.negzero_nan == 0
    )


@register_jitable
def nearest_even_fast_ok(c, f):
    """True when :func:`round_nearest_even_bits` is exact for the container ``c`` (an IEEE
    layout) and the format ``f``.

    The format must be signed with subnormals and keep at least one but fewer fraction bits
    than the container (the tie rule there is "last kept bit even"). The branch-free path reads
    a container *subnormal* as having the container's smallest exponent ``1 - c_b`` (its leading
    bit is not looked for). That is harmless while the format's own smallest exponent ``1 -
    fmt_b`` is at least as large: every container subnormal then lies in the format's fixed
    subnormal grid. A format whose grid reaches below the container's normal range (a custom
    bias above the container's, such as ``Format(8, 7, bias=130)`` in a float32) needs the
    leading bit of such inputs, so it must take :func:`convert`. The format's largest exponent
    must lie within the container's normal range: the branch-free path writes the format's
    largest value and overflow results as container patterns, which must not reach the
    container's own inf/NaN patterns.
    """
    return (
        f.signed == 1
        and f.has_subnormals == 1
        and 1 <= f.man_bits < c.man_bits
        and f.bias <= c.bias
        and emax_of(f) <= emax_of(c)
    )


@register_jitable
def nearest_even_constants(c, f, subnormals, saturate):
    """The container patterns :func:`round_nearest_even_bits` needs, computed once per array.

    Returns ``(max_pat, ovf_pat, inf_pat, nan_pat, low_pat, keep_zero_sign)``: the container
    patterns (magnitude only) of the format's largest value, of the result of an overflow, of
    the result for an infinite input, of NaN, and of the smallest result kept (the smallest
    normal when flushing subnormals, else the smallest subnormal); and 0 when the format has no
    -0 (fnuz), 1 otherwise.
    """
    c_m = c.man_bits
    max_pat = ((emax_of(f) + c.bias) << c_m) | (
        (max_sig_of(f) - (1 << f.man_bits)) << (c_m - f.man_bits)
    )
    c_inf = c.inf_mag
    nan_pat = c.qnan_mag  # the container's canonical quiet NaN
    has_inf = f.inf_mag >= 0
    has_nan = f.nan_mag < (1 << (f.exp_bits + f.man_bits)) or f.negzero_nan == 1
    # Overflow: saturating, or in a format with neither inf nor NaN (FP4, FP6), gives ±max;
    # otherwise inf where there is one, else NaN (OCP E4M3, fnuz).
    if saturate == 1 or not (has_inf or has_nan):
        ovf_pat = max_pat
    elif has_inf:
        ovf_pat = c_inf
    else:
        ovf_pat = nan_pat
    # An infinite input stays infinite where the format has inf; else it overflows.
    inf_pat = c_inf if has_inf else ovf_pat
    low_pat = (emin_of(f) + c.bias) << c_m if subnormals == 0 else 1
    return max_pat, ovf_pat, inf_pat, nan_pat, low_pat, 1 - f.negzero_nan


@register_jitable
def round_nearest_even_bits(bits, c, fmt_m, fmt_b, k):
    """Round a container pattern (float32/float64 layout ``c``) to the format, ties to even,
    and return the container pattern of the result: the same answer as :func:`convert` with
    ``mode=NEAREST_EVEN`` and src = dst = the container, for *every* input — written without a
    branch so that a compiler can vectorise it (``x if c else y`` becomes a select). ``k`` is
    :func:`nearest_even_constants`. Valid only where :func:`nearest_even_fast_ok` holds
    (callers check it once per array).
    """
    max_pat, ovf_pat, inf_pat, nan_pat, low_pat, keep_zero_sign = k
    c_e = c.exp_bits
    c_m = c.man_bits
    c_b = c.bias
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
    # 8. A format without -0 (fnuz) turns every zero into +0.
    sign_part = sign_part if (pat != 0) | (keep_zero_sign == 1) else 0
    return sign_part + pat


@register_jitable
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


@register_jitable
def container_to_code(r, c, f):
    """The format's code (its two's-complement reading, as :func:`pack` writes it) of the
    container pattern ``r`` of a value already rounded to the format, such as
    :func:`round_nearest_even_bits` returns; branch-free, so that encoding vectorises like
    rounding. Valid where :func:`nearest_even_fast_ok` holds (the format's exponents lie within
    the container's).
    """
    c_m = c.man_bits
    fmt_m = f.man_bits
    width = f.exp_bits + fmt_m
    # 1. The container fields; sig has the implicit bit, e_c is the exponent of that bit.
    mag = r & ((1 << (c.exp_bits + c_m)) - 1)
    sign = (r >> (c.exp_bits + c_m)) & 1
    biased = mag >> c_m
    sig = (mag & ((1 << c_m) - 1)) | ((1 if biased != 0 else 0) << c_m)
    e_c = max(biased, 1) - c.bias
    d = c_m - fmt_m
    # 2. A normal of the format: drop the fraction bits the format lacks (they are zero) and
    #    move the exponent field from the container's bias to the format's.
    normal = (mag >> d) + ((f.bias - c.bias) << fmt_m)
    # 3. A subnormal of the format: the fraction is the value over the subnormal quantum.
    shift = (1 - f.bias - fmt_m) - (e_c - c_m)
    sub = sig >> min(shift, 63)
    code = normal if e_c >= 1 - f.bias else sub
    # 4. Zero, infinity and NaN (the canonical NaN, as pack writes it: in an fnuz format the
    #    code of -0, whatever the sign).
    is_nan = mag > c.inf_mag
    code = 0 if mag == 0 else code
    code = f.inf_mag if mag == c.inf_mag else code
    code = f.qnan_mag if is_nan else code
    signed = code - (sign << width)
    fnuz_nan = is_nan & (f.negzero_nan == 1)
    return -(1 << width) if fnuz_nan else signed


@register_jitable
def code_to_container_same_range(code, fmt_e, fmt_m, c_m):
    """Decode a code of an IEEE-style format that shares the container's exponent field (bf16,
    tf32 in a float32): the value's container pattern is the code's fields with ``c_m - fmt_m``
    zero bits appended to the fraction. NaN becomes the canonical quiet NaN, as in
    :func:`convert`. Branch-free."""
    width = fmt_e + fmt_m
    mag = code & ((1 << width) - 1)
    sign = (code >> width) & 1
    inf = ((1 << fmt_e) - 1) << fmt_m
    mag = (inf | (1 << (fmt_m - 1))) if mag > inf else mag
    return (sign << (width + c_m - fmt_m)) | (mag << (c_m - fmt_m))


@register_jitable
def convert(bits, src, fmt, dst, mode, subnormals, saturate, rand62):
    """Read ``bits`` in the layout ``src``, round to the format ``fmt``, write in the layout
    ``dst`` (each a :class:`~fpsim.kernels.record.FormatRecord`).

    ``subnormals=0`` flushes results below the smallest normal to signed zero (after rounding
    with gradual underflow). Overflow gives ±inf where the format has it, else NaN, or ±max
    when ``saturate=1``, when the rounding direction points back toward zero (IEEE 754 §7.4) or
    when the format has neither inf nor NaN (FP4, FP6; ±inf inputs too). A format without a sign
    bit turns negative numbers into NaN (-0 into +0); one without zero (E8M0) turns 0 into NaN
    and positive values below its smallest value into that value (as ml_dtypes does).
    """
    emin = emin_of(fmt)
    emax = emax_of(fmt)
    max_sig = max_sig_of(fmt)
    has_inf = fmt.inf_mag >= 0
    has_nan = fmt.nan_mag < (1 << (fmt.exp_bits + fmt.man_bits)) or fmt.negzero_nan == 1

    sign, cls, e, sig = unpack(bits, src)
    nbits = fmt.man_bits

    # 11. Values the format has no room for: negatives in an unsigned format are NaN.
    if fmt.signed == 0 and sign == 1 and cls != NAN:
        if cls == ZERO:
            sign = 0  # -0 is 0
        else:
            cls = NAN
    was_zero = cls == ZERO

    if cls == INF:
        if not has_inf:
            # No infinity: the largest value when saturating or when there is no NaN either
            # (FP4/FP6 saturate), else NaN.
            if saturate == 1 or not has_nan:
                cls = FINITE
                e = emax
                sig = max_sig
            else:
                cls = NAN
    elif cls == FINITE:
        e, sig = round_significand(sign, e, sig, src.man_bits, fmt, mode, rand62)
        if sig == 0:
            cls = ZERO  # underflow to a signed zero
        elif e > emax or (e == emax and sig > max_sig):
            # 12. Overflow. Round-to-nearest goes to infinity; a directed mode that rounds
            #     toward zero for this sign stops at the largest finite value.
            to_max = (
                saturate == 1
                or mode == TOWARD_ZERO
                or (mode == UP and sign == 1)
                or (mode == DOWN and sign == 0)
                or not (has_inf or has_nan)
            )
            if to_max:
                e = emax
                sig = max_sig
            elif has_inf:
                cls = INF
            else:
                cls = NAN
        elif subnormals == 0 and (e < emin or sig < (1 << fmt.man_bits)):
            cls = ZERO  # flush-to-zero: a subnormal result becomes ±0

    if cls == ZERO:
        if fmt.has_subnormals == 0:
            # 13. A format without zero (E8M0): 0 itself is NaN; a positive value that rounded
            #     below the smallest value becomes that value.
            if was_zero:
                cls = NAN
            else:
                cls = FINITE
                e = emin
                sig = 1 << fmt.man_bits
        elif fmt.negzero_nan == 1:
            sign = 0  # no -0 in an fnuz format
    return pack(sign, cls, e, sig, nbits, dst)


@register_jitable
def hash32(x):
    """A 32-bit integer mixer (Wellons' lowbias32): every input bit affects every output bit."""
    x = x & MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    x = x ^ (x >> 16)
    return x


@register_jitable
def random62(seed, index):
    """62 random bits for element ``index``: a counter-based generator, so the result depends
    only on (seed, index) — identical on the CPU, the GPU and in pure Python, in any order."""
    a, b = random62_keys(seed)
    return random62_keyed(a, b, index)


@register_jitable
def random62_keys(seed):
    """The two 32-bit keys :func:`random62` derives from the seed (computed once per loop)."""
    return hash32(seed ^ 0x9E3779B9), hash32((seed >> 32) ^ 0x85EBCA6B)


@register_jitable
def random62_keyed(a, b, index):
    """:func:`random62` from the seed's keys ``(a, b) = random62_keys(seed)``."""
    lo = hash32(hash32((index & MASK32) ^ a) ^ b)
    hi = hash32(lo ^ hash32(((index >> 32) & MASK32) ^ b) ^ 0xC2B2AE35)
    return ((hi & 0x3FFFFFFF) << 32) | lo


# ==============================================================================================
# Float64 bit views, and the error-free steps the arithmetic builds on (TwoSum, rounding to
# odd). The operations themselves (add, sub, mul, div, sqrt, fma) are in scalar_ops.py.
# ==============================================================================================

import struct  # noqa: E402

from llvmlite import ir  # noqa: E402
from numba.extending import intrinsic  # noqa: E402


def float64_to_bits(x):
    """The IEEE binary64 bit pattern of ``x`` as a signed int64 (two's-complement reading).

    In Python: ``struct``; compiled: one LLVM ``bitcast`` (the overload below), which costs
    nothing and vectorises. ``bits_to_float64`` is the inverse.
    """
    return struct.unpack("<q", struct.pack("<d", x))[0]


def bits_to_float64(b):
    """The float64 whose bit pattern is the signed int64 ``b`` (inverse of float64_to_bits)."""
    return struct.unpack("<d", struct.pack("<q", b))[0]


@intrinsic
def _f64_as_i64(typingctx, x):
    if isinstance(x, types.Float):

        def codegen(context, builder, signature, args):
            v = args[0]
            if x.bitwidth < 64:
                v = builder.fpext(v, ir.DoubleType())  # float32 -> float64 is exact
            return builder.bitcast(v, ir.IntType(64))

        return types.int64(x), codegen
    return None


@intrinsic
def _i64_as_f64(typingctx, b):
    if isinstance(b, types.Integer) and b.bitwidth == 64:

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.DoubleType())

        return types.float64(b), codegen
    return None


@overload(float64_to_bits, target="generic")
def _float64_to_bits_compiled(x):
    if isinstance(x, types.Float):
        return lambda x: _f64_as_i64(x)
    return None


@overload(bits_to_float64, target="generic")
def _bits_to_float64_compiled(b):
    if isinstance(b, types.Integer) and b.bitwidth == 64:
        return lambda b: _i64_as_f64(b)
    return None


@register_jitable
def pow2(k):
    """2^k as a float64, exactly, for a normal exponent -1022 <= k <= 1023 (built from bits)."""
    return bits_to_float64((k + 1023) << 52)


@register_jitable
def round_value(x, f, mode, subnormals, saturate, rand62):
    """Round the float64 ``x`` to the format ``f``; the result is a float64 (exactly a format
    value, or NaN).

    ``convert`` from the float64 layout to the float64 layout, through the format.
    """
    bits = convert(float64_to_bits(x), FLOAT64, f, FLOAT64, mode, subnormals, saturate, rand62)
    return bits_to_float64(bits)


@register_jitable
def two_sum(a, b):
    """Knuth's TwoSum: ``s = fl(a + b)`` and ``err`` with ``s + err == a + b`` exactly.

    Six float64 operations, no branch, no condition on the order of |a| and |b|. Exact whenever
    ``s`` does not overflow (then ``err`` is NaN).
    """
    # 12. The rounded sum, then recover what rounding removed from each addend.
    s = a + b
    bb = s - a  # the part of s that came from b
    err = (a - (s - bb)) + (b - bb)
    return s, err


@register_jitable
def round_to_odd_f64(s, err):
    """Round the exact value ``s + err`` (``s = fl(s + err)``) to *odd* in float64.

    Rounding to odd keeps ``s`` when it is exact, and otherwise picks, of the two float64
    neighbours of the exact value, the one whose last significand bit is 1: that bit then acts
    as a sticky bit recording "something non-zero was here". A later rounding to a format with
    at most 51 bits of precision sees the right side of every midpoint and so gives the correct
    single rounding of the exact value, in every rounding mode (Boldo & Melquiond 2008).
    Branch-free.
    """
    # 13. s's neighbour toward the exact value is one step of the bit pattern: +1 moves away
    #     from zero (for either sign: the pattern orders magnitudes), -1 toward zero.
    bits = float64_to_bits(s)
    inexact = (err > 0.0) | (err < 0.0)  # NaN (an overflowed s) counts as exact
    even = (bits & 1) == 0
    outward = (err > 0.0) == (s > 0.0)  # the exact value lies beyond s, away from zero
    step = 1 if outward else -1
    return bits_to_float64(bits + step) if (inexact & even) else s


@register_jitable
def add_odd(a, b):
    """``a + b`` rounded to odd in float64 (exact sum when it fits): the add/sub stand-in."""
    s, err = two_sum(a, b)
    return round_to_odd_f64(s, err)
