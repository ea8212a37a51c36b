"""Round to nearest even with float instructions: the fast form of the default rounding, for the
array kernels (``round_to``, ``to_bits``, every simulated operation's result and input check).

:func:`fpsim.kernels.scalar.round_nearest_even_bits` rounds a container pattern with integer
operations; written without branches it vectorises, but its per-element variable shifts and
count-leading-zeros cost about ten times a copy on an AVX2 machine. The machine's own float64
addition rounds to nearest even, which does the same work in four instructions:

1. ``p = 2^e`` is |x| with its fraction bits cleared, clamped to the format's binades
   ``[2^emin, 2^emax]`` (below ``2^emin`` the grid keeps the lowest binade's spacing: gradual
   underflow);
2. ``s = 1.5 × 2^(e + 52 - m)`` (``m``: the format's fraction bits): ``|x| + s`` lies in
   ``[2^(e+52-m), 2^(e+53-m))`` whenever ``|x| < 2^(e+1)`` and ``m <= 50``, a binade whose last
   place is exactly the format's quantum ``2^(e-m)`` at |x|; so the float64 sum rounds |x| to the
   format's grid, ties to even, and ``(|x| + s) - s`` is that rounded value, exactly;
3. beyond the largest binade the sum only grows: the result exceeds the format's max and becomes
   the overflow value (inf, NaN or max, as the format and ``saturate`` say);
4. the flush of subnormal results, infinite and NaN inputs, and the sign (a format without -0
   turns zeros into +0) are selects.

Every step is a float instruction or a select, so the loops vectorise (about 1.3 ns per element
against 4-13 for the integer form). Valid where :func:`nearest_even_float_ok` holds: the bit form's
conditions (:func:`~fpsim.kernels.scalar.nearest_even_fast_ok`: a signed format with subnormals,
fewer fraction bits than the container, its exponents inside the container's) and at most 50
fraction bits with a finite shifter. It returns exactly what ``round_nearest_even_bits`` (and
``scalar.convert``) return, NaN as the container's canonical quiet NaN with the input's sign;
``tests/test_nearest_float.py`` checks that on every format it accepts.

A float32 container is read as float64 (exact) and written back by a float32 conversion, exact
because every value of such a format is a float32 value.
"""

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload, register_jitable

from .scalar import (
    bits_to_float64,
    emax_of,
    emin_of,
    float64_to_bits,
    max_sig_of,
    nearest_even_fast_ok,
    pow2,
)

EXP_MASK = 0x7FF0000000000000  # the exponent field of a float64 pattern
QNAN = 0x7FF8000000000000  # float64's canonical quiet NaN (float32's after conversion)


@register_jitable
def nearest_even_float_ok(c, f):
    """Whether :func:`round_nearest_even_float` is exact for the container ``c`` and the format
    ``f`` (FormatRecords): ``nearest_even_fast_ok``, at most 50 fraction bits (step 2), and a
    shifter ``1.5 × 2^(emax + 52 - m)`` below float64's overflow."""
    return nearest_even_fast_ok(c, f) and f.man_bits <= 50 and emax_of(f) - f.man_bits <= 970


@register_jitable
def nearest_even_float_constants(f, subnormals, saturate):
    """The float64 constants of :func:`round_nearest_even_float` for the format ``f``:
    ``(2^emin, 2^emax, 1.5 × 2^(52 - m), max, overflow result, result for ±inf, smallest result
    kept, 1.0 if zeros keep their sign)``. Overflow gives max when saturating or in a format
    with neither inf nor NaN (FP4, FP6), else inf where the format has it, else NaN; an
    infinite input stays infinite where the format has inf, else it overflows (the rules of
    ``scalar.nearest_even_constants``). Needs :func:`nearest_even_float_ok`."""
    m = f.man_bits
    emin = emin_of(f)
    emax = emax_of(f)
    # max = 1.f × 2^emax as (significand × 2^-m) × 2^emax: both factors and the product are
    # normal float64 numbers, so it is exact
    maxv = (max_sig_of(f) * pow2(-m)) * pow2(emax)
    has_inf = f.inf_mag >= 0
    has_nan = f.nan_mag < (1 << (f.exp_bits + f.man_bits)) or f.negzero_nan == 1
    if saturate == 1 or not (has_inf or has_nan):
        ovf = maxv
    elif has_inf:
        ovf = math.inf
    else:
        ovf = math.nan
    inf_res = math.inf if has_inf else ovf
    low = pow2(emin) if subnormals == 0 else 0.0
    return (pow2(emin), pow2(emax), 1.5 * pow2(52 - m), maxv, ovf, inf_res, low,
            1.0 - f.negzero_nan)  # fmt: skip


@register_jitable
def _grid(a, two_emin, two_emax, magic):
    """Steps 1 and 2: the magnitude ``a`` rounded to the format's grid, ties to even. (Selects,
    not min/max: numba's float min/max test for NaN and vectorise worse.)"""
    p = bits_to_float64(float64_to_bits(a) & EXP_MASK)
    p = two_emin if p < two_emin else p
    p = two_emax if p > two_emax else p
    s = p * magic
    return (a + s) - s


@register_jitable
def not_in_format_float(x, k):
    """Whether the float64 ``x`` is *not* a value of the format of the constants ``k`` (made
    with subnormals kept, no saturation): what rounding to nearest would change (its bits), NaN
    being a value of every format. Fewer selects than rounding: the input check of every
    operation runs it on each operand.

    >>> from fpsim import fp16
    >>> k = nearest_even_float_constants(fp16.record, 1, 0)
    >>> [not_in_format_float(v, k) for v in (1 + 2.0**-10, 1 + 2.0**-11, 65504.0, 65536.0)]
    [False, True, False, True]
    """
    two_emin, two_emax, magic, maxv, ovf, inf_res, low, keep_zero_sign = k
    a = abs(x)
    y = _grid(a, two_emin, two_emax, magic)
    # off the grid, or beyond max -- except an infinity the format keeps (inf_res is then inf;
    # else it is max or NaN, which an infinite a never equals)
    bad = ((y != a) | (a > maxv)) & (a != inf_res) & (x == x)
    # -0 where the format has no -0 (fnuz): rounding makes it +0, another bit pattern
    return bad | ((a == 0.0) & (keep_zero_sign == 0.0) & (math.copysign(1.0, x) < 0.0))


@register_jitable
def round_nearest_even_float(x, k):
    """The float64 ``x`` rounded to nearest even in the format of the constants ``k``
    (:func:`nearest_even_float_constants`), as a float64; see the module docstring.

    >>> from fpsim import fp16
    >>> round_nearest_even_float(1 + 2.0**-11, nearest_even_float_constants(fp16.record, 1, 0))
    1.0
    """
    two_emin, two_emax, magic, maxv, ovf, inf_res, low, keep_zero_sign = k
    a = abs(x)
    y = _grid(a, two_emin, two_emax, magic)  # 1., 2.
    y = ovf if y > maxv else y  # 3.
    y = 0.0 if y < low else y  # 4.
    y = inf_res if a == math.inf else y
    y = bits_to_float64(QNAN) if a != a else y
    return math.copysign(y, x) if (y != 0.0) | (keep_zero_sign == 1.0) else y


# ---- the float32 container's bits, for the kernels that work on bit patterns --------------------
@register_jitable
def float_container(itemsize, c):
    """Whether integer patterns of ``itemsize`` bytes in the layout ``c`` are float32 or
    float64 patterns (what :func:`container_value` and :func:`container_bits` read and write)."""
    if itemsize == 4:
        return c.exp_bits == 8 and c.man_bits == 23 and c.bias == 127
    return itemsize == 8 and c.exp_bits == 11 and c.man_bits == 52 and c.bias == 1023


def container_value(b):
    """The float64 value of a float32 (an ``np.int32`` pattern) or float64 (``np.int64``)
    container pattern, the element of an integer view. Compiled: a bitcast (and an exact
    float32 -> float64 extension)."""
    if isinstance(b, np.int32):
        return float(np.int32(b).view(np.float32))
    return bits_to_float64(int(b))


def container_bits(y, like):
    """The pattern of the float64 ``y`` in the container of the pattern ``like``: float32
    (``like`` an ``np.int32``; ``y`` must be a float32 value) or float64 (``np.int64``)."""
    if isinstance(like, np.int32):
        return np.float32(y).view(np.int32)
    return np.int64(float64_to_bits(y))


@intrinsic
def _i32_as_f64(typingctx, b):
    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.FloatType()), ir.DoubleType())

    return types.float64(types.int32), codegen


@intrinsic
def _f64_as_i32(typingctx, y):
    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.FloatType()), ir.IntType(32))

    return types.int32(types.float64), codegen


@overload(container_value, target="generic")
def _container_value_compiled(b):
    if isinstance(b, types.Integer) and b.bitwidth == 32:
        return lambda b: _i32_as_f64(b)
    if isinstance(b, types.Integer) and b.bitwidth == 64:
        return lambda b: bits_to_float64(b)
    if isinstance(b, types.Integer):  # no float container: never called (see float_container)
        return lambda b: math.nan
    return None


@overload(container_bits, target="generic")
def _container_bits_compiled(y, like):
    if isinstance(like, types.Integer) and like.bitwidth == 32:
        return lambda y, like: _f64_as_i32(y)
    if isinstance(like, types.Integer) and like.bitwidth == 64:
        return lambda y, like: float64_to_bits(y)
    if isinstance(like, types.Integer):  # no float container: never called
        return lambda y, like: like
    return None
