"""Independent oracles for the tests: exact rational rounding with ``fractions.Fraction``.

Nothing here uses fpsim's kernels or bit tricks: a value is rounded by finding its binade with
exact comparisons, dividing by the quantum and looking at the remainder — the definition of
rounding, written as plainly as possible. A format is read only through its public properties
(``exp_bits``, ``man_bits``, ``bias``, ``emin``, ``max``, ``has_inf``, ``has_nan``, ``nan``,
``signed``, ``has_zero``, ``has_negzero``, ``has_subnormals``); where its specials and codes sit
is re-derived here from the definitions in fpsim/formats.py's docstring, never from
``Format.record``.

The rules (fpsim's documented choices, written out once):

* round to nearest, ties to the even *code*; with fraction bits that is the last fraction bit,
  with none (E8M0, P3109 p=1) the last bit of the biased exponent (0 -> code 0 is even);
* overflow: ±inf where the format has it, else NaN; ±max when saturating, when the directed
  mode points back toward zero, or when the format has neither inf nor NaN (FP4, FP6 — ±inf
  inputs too); an inf input in a format without inf but with NaN is NaN unless saturating;
* unsigned formats: a negative non-zero number (-inf included) is NaN, -0 is +0;
* a format without zero (E8M0): 0 is NaN, a positive value below the smallest value (and any
  result that rounds to 0) is the smallest value;
* no -0 (fnuz, P3109 signed, unsigned formats): every zero result is +0;
* flush-to-zero (``subnormals=False``) happens after rounding, to a zero of the input's sign;
* NaN input: NaN.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import ml_dtypes
import numpy as np

import fpsim

# The dtypes whose float32 -> format conversion is a correct, independent oracle.
NATIVE = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}
TEXTBOOK = fpsim.Format(4, 3)  # 4 exponent bits, 3 fraction bits, bias 7, IEEE style: e4m3
NATIVE_FORMATS = {**{k: fpsim.get_format(k) for k in NATIVE}, "e4m3_ieee": TEXTBOOK}
NATIVE_DTYPES = {**NATIVE, "e4m3_ieee": ml_dtypes.float8_e4m3}

# Every float dtype numpy / ml_dtypes has, by fpsim's built-in name (the 15 formats with a
# native dtype). Kept apart from NATIVE: test_round.py runs a million-pattern sweep over
# NATIVE_FORMATS that expects no documented differences (FP4/FP6 NaN, E8M0 ties), and
# tests/test_formats_today.py checks every one of these with the differences asserted.
ML_DTYPES = {
    "fp32": np.float32,
    "fp64": np.float64,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp8_e4m3_ieee": ml_dtypes.float8_e4m3,
    "fp8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "fp8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "fp8_e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz,
    "fp8_e3m4": ml_dtypes.float8_e3m4,
    "fp6_e2m3": ml_dtypes.float6_e2m3fn,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
    "e8m0": ml_dtypes.float8_e8m0fnu,
}
ML_FORMATS = {k: fpsim.get_format(k) for k in ML_DTYPES}
# ... and the ones narrower than float32 (their float32 -> format cast is the oracle)
ML_NARROW = [k for k in ML_DTYPES if k not in ("fp32", "fp64")]


def binade(a: Fraction) -> int:
    """floor(log2(a)) for a > 0, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    assert Fraction(2) ** e <= a < Fraction(2) ** (e + 1)
    return e


def smallest_value(f) -> Fraction:
    """The smallest positive value: the smallest subnormal, or 2^emin without subnormals."""
    return Fraction(2) ** (f.emin - f.man_bits) if f.has_zero else Fraction(2) ** f.emin


def ref_code_parity(r: Fraction, f) -> int:
    """The last bit of the code that the non-negative grid value ``r`` has (or would have, with
    an unbounded exponent range: the value just past max has a code too): ``E << man_bits | frac``
    with E the biased exponent field, frac the stored fraction; 0 for zero."""
    if r == 0:
        return 0
    e = binade(r)
    if f.has_zero and e < f.emin:  # a subnormal: field 0, frac = r / smallest subnormal
        frac = r / Fraction(2) ** (f.emin - f.man_bits)
        assert frac.denominator == 1
        return int(frac) & 1
    frac = (r / Fraction(2) ** e - 1) * 2**f.man_bits
    assert frac.denominator == 1
    code = ((e + f.bias) << f.man_bits) | int(frac)
    return code & 1


def ref_round_exact(a_in, fmt, mode="nearest_even", subnormals=True, saturate=False):
    """Round an exact value (a float, an int or a Fraction) (with its sign: ``-0.0`` is negative zero) by the
    definition. Returns a Python float (the format's value, ±inf or NaN)."""
    f = fpsim.get_format(fmt)
    if isinstance(a_in, float) and math.isnan(a_in):
        return a_in  # NaN, its sign kept (to_bits writes it)
    neg = math.copysign(1.0, a_in) < 0 if isinstance(a_in, float) else a_in < 0
    is_inf = isinstance(a_in, float) and math.isinf(a_in)
    zero_in = not is_inf and a_in == 0
    if not f.signed and neg:
        if not zero_in:
            return -math.nan  # a negative number in an unsigned format (no sign bit to keep)
        neg = False  # -0 is 0
    sgn = -1.0 if neg else 1.0
    # NaN results carry the sign of the input (the sign bit of the NaN code to_bits writes)
    nan = math.copysign(math.nan, sgn)
    if is_inf:
        if f.has_inf:
            return a_in
        if saturate or not f.has_nan:
            return sgn * f.max
        return nan
    if zero_in:
        if not f.has_zero:
            return nan  # E8M0: no zero
        return -0.0 if (neg and f.has_negzero) else 0.0
    a = abs(Fraction(a_in))
    if not f.has_zero and a < smallest_value(f):
        return sgn * float(smallest_value(f))  # E8M0: nothing lies below its smallest value
    e = binade(a)
    q = max(e, f.emin) - f.man_bits
    quantum = Fraction(2) ** q
    n = a / quantum
    lo = n.numerator // n.denominator
    rem = n - lo
    if rem == 0:
        k = lo
    elif mode == "nearest_even":
        if rem != Fraction(1, 2):
            k = lo + 1 if rem > Fraction(1, 2) else lo
        else:  # a tie: the neighbour whose code is even (exactly one of the two is)
            p_lo = ref_code_parity(lo * quantum, f)
            p_hi = ref_code_parity((lo + 1) * quantum, f)
            assert p_lo != p_hi, (a_in, f)
            k = lo if p_lo == 0 else lo + 1
    elif mode == "nearest_away":
        k = lo + 1 if rem >= Fraction(1, 2) else lo
    elif mode == "toward_zero":
        k = lo
    elif mode == "up":
        k = lo if neg else lo + 1
    elif mode == "down":
        k = lo + 1 if neg else lo
    else:
        raise ValueError(mode)
    r = k * quantum
    if r > Fraction(f.max):
        to_max = (
            saturate
            or mode == "toward_zero"
            or (mode == "up" and neg)
            or (mode == "down" and not neg)
            or not (f.has_inf or f.has_nan)
        )
        if to_max:
            return sgn * f.max
        return sgn * math.inf if f.has_inf else nan
    if f.has_zero and not subnormals and r < Fraction(f.min_normal):
        r = Fraction(0)  # flush to zero, after rounding
    if r == 0:
        if not f.has_zero:
            return sgn * float(smallest_value(f))  # E8M0: below its smallest value
        return -0.0 if (neg and f.has_negzero) else 0.0
    v = float(r)  # exact: r is representable in the format, which fits in float64
    return -v if neg else v


def ref_round(x: float, fmt, mode: str = "nearest_even", subnormals: bool = True,
              saturate: bool = False) -> float:  # fmt: skip
    """Round the float ``x`` to ``fmt`` by the definition, with exact rational arithmetic (an
    exact ``Fraction`` or int is rounded from its exact value)."""
    if not isinstance(x, (Fraction, int)):
        x = float(x)
    return ref_round_exact(x, fmt, mode, subnormals, saturate)


# ---- codes -----------------------------------------------------------------------------------


def _width(f) -> int:
    return f.exp_bits + f.man_bits  # the magnitude bits, below the sign bit


def ref_is_nan_mag(mag: int, f) -> bool:
    """Whether the magnitude code ``mag`` is NaN for either sign (the fnuz NaN, the code of -0,
    is not a magnitude: see :func:`ref_decode`)."""
    w, m = _width(f), f.man_bits
    if f.nan == "ieee":  # all-ones exponent, non-zero fraction
        return (mag >> m) == (1 << f.exp_bits) - 1 and (mag & ((1 << m) - 1)) != 0
    if f.nan == "all_ones":
        return mag == (1 << w) - 1
    return False


def ref_inf_mag(f) -> int | None:
    """The magnitude code of infinity: the largest non-NaN magnitude code, where there is one."""
    if not f.has_inf:
        return None
    w = _width(f)
    if f.nan == "ieee":
        return ((1 << f.exp_bits) - 1) << f.man_bits
    if f.nan == "all_ones":
        return (1 << w) - 2
    return (1 << w) - 1


def ref_decode(code: int, fmt) -> float:
    """The value of a code of ``fmt``, from the definitions (a Python float; NaN for NaN codes).

    Sign bit on top (signed formats only), then ``exp_bits`` exponent bits, ``man_bits`` fraction
    bits. Field 0 with subnormals: ``0.f × 2^(1 - bias)``; otherwise ``1.f × 2^(E - bias)``.
    NaN: IEEE — all-ones exponent with a non-zero fraction; 'all_ones' — the all-ones magnitude;
    'negzero' — the sign bit alone. Infinity (has_inf): the largest non-NaN magnitude code.
    """
    f = fpsim.get_format(fmt)
    code = int(code)
    w, m = _width(f), f.man_bits
    assert 0 <= code < (1 << (w + int(f.signed)))
    neg = f.signed and (code >> w) & 1 == 1
    mag = code & ((1 << w) - 1)
    if ref_is_nan_mag(mag, f) or (f.nan == "negzero" and neg and mag == 0):
        return math.nan
    sgn = -1.0 if neg else 1.0
    if mag == ref_inf_mag(f):
        return sgn * math.inf
    E, frac = mag >> m, mag & ((1 << m) - 1)
    if E == 0 and f.has_subnormals:
        v = Fraction(frac, 1 << m) * Fraction(2) ** (1 - f.bias)
    else:
        v = (1 + Fraction(frac, 1 << m)) * Fraction(2) ** (E - f.bias)
    return sgn * float(v)


def ref_nan_code(f, negative: bool = False) -> int | None:
    """The canonical NaN code: IEEE's quiet NaN (top fraction bit) or the all-ones magnitude,
    with the input's sign where there is a sign bit; the sign bit alone in an fnuz format."""
    w = _width(f)
    sign = (1 << w) if (negative and f.signed) else 0
    if f.nan == "ieee":
        return sign | (((1 << f.exp_bits) - 1) << f.man_bits) | (1 << (f.man_bits - 1))
    if f.nan == "all_ones":
        return sign | ((1 << w) - 1)
    if f.nan == "negzero":
        return 1 << w
    return None


def ref_values(fmt) -> list[tuple[float, int]]:
    """Every (value, code) of a narrow format (NaN codes left out), sorted by value; -0 before +0."""
    f = fpsim.get_format(fmt)
    out = []
    for c in range(1 << f.bits):
        v = ref_decode(c, f)
        if not math.isnan(v):
            out.append((v, c))
    out.sort(key=lambda vc: (vc[0], math.copysign(1.0, vc[0])))
    return out


def same_bits(a, b) -> np.ndarray:
    """Elementwise: equal bit patterns, or both NaN (NaN payloads are not compared)."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    it = {4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return (a.view(it) == b.view(it)) | (np.isnan(a) & np.isnan(b))


def oracle_round_f32(x32: np.ndarray, name: str) -> np.ndarray:
    """float32 -> format -> float32 through numpy/ml_dtypes (correct for float32 input)."""
    with np.errstate(all="ignore"):
        dt = NATIVE_DTYPES[name] if name in NATIVE_DTYPES else ML_DTYPES[name]
        return x32.astype(dt).astype(np.float32)


def ref_encode(v: float, fmt) -> int:
    """The code of the value ``v`` of ``fmt`` (a float that ref_round returned), from the
    definitions: NaN -> :func:`ref_nan_code` with v's sign, ±inf -> the inf code."""
    f = fpsim.get_format(fmt)
    w, m = _width(f), f.man_bits
    neg = math.copysign(1.0, v) < 0
    if math.isnan(v):
        code = ref_nan_code(f, neg)
        assert code is not None, f"{f.name} has no NaN code"
        return code
    sign = (1 << w) if neg else 0
    assert f.signed or not neg
    if math.isinf(v):
        return sign | ref_inf_mag(f)
    a = abs(Fraction(v))
    if a == 0:
        assert f.has_zero and (f.has_negzero or not neg)
        return sign
    e = binade(a)
    if f.has_zero and e < f.emin:
        frac, E = a / Fraction(2) ** (f.emin - m), 0
    else:
        frac, E = (a / Fraction(2) ** e - 1) * 2**m, e + f.bias
    assert frac.denominator == 1 and 0 <= frac < 2**m and 0 <= E < (1 << f.exp_bits)
    return sign | (E << m) | int(frac)


# ---- floats as text and as classes (independent of fpsim) ----------------------------------------


def same_float(a: float, b: float) -> bool:
    """Equal including the sign of zero, and NaN equal to NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def numpy_class(v: float, smallest_normal: float) -> str:
    """"zero", "subnormal", "normal", "inf" or "nan" of a value, given the smallest normal."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf"
    if v == 0:
        return "zero"
    return "subnormal" if abs(v) < smallest_normal else "normal"


def exact_decimal_oracle(v: float) -> str:
    """The exact decimal of a float, by decimal.Decimal (independent of fpsim): every digit,
    ``-0`` for negative zero, ``nan``, ``inf`` and ``-inf`` for the rest."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    d = format(Decimal(v), "f")
    if "." in d:
        d = d.rstrip("0").rstrip(".")
    return "-0" if d in ("-0", "-0.0") else d


def zones_by_cast(x32: np.ndarray, fmt: str) -> dict:
    """The zones of RangeHistogram (zero, underflow, subnormal, normal, overflow, nonfinite) of
    float32 values in fp16 / bf16 / fp8_e4m3 / fp8_e5m2, counted by a numpy / ml_dtypes cast
    (correct for float32 input): independent of fpsim's classifier."""
    dt = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
          "fp8_e5m2": ml_dtypes.float8_e5m2}[fmt]  # fmt: skip
    tiny = float(ml_dtypes.finfo(dt).smallest_normal)
    with np.errstate(all="ignore"):
        r = x32.astype(dt).astype(np.float64)
    fin = np.isfinite(x32)
    nz = fin & (x32 != 0)
    return {
        "zero": int(np.count_nonzero(fin & (x32 == 0))),
        "underflow": int(np.count_nonzero(nz & (r == 0))),
        "subnormal": int(np.count_nonzero(nz & (r != 0) & (np.abs(r) < tiny))),
        "normal": int(np.count_nonzero(nz & np.isfinite(r) & (np.abs(r) >= tiny))),
        "overflow": int(np.count_nonzero(nz & ~np.isfinite(r))),
        "nonfinite": int(np.count_nonzero(~fin)),
    }
