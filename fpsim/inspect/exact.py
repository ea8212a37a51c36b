"""The exact facts about one number in a format: its bit fields, exact value, neighbours and
rounding error (:class:`Fields`, :func:`fields`), numbers read exactly from text
(:func:`parse_number`), the special codes of a format in words (:func:`describe_specials`) and
every code of a small format (:func:`all_values`). Exact integer and
:class:`fractions.Fraction` arithmetic on the code :func:`fpsim.core.to_bits` gives."""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from ..core import from_bits, to_bits
from ..formats import Format, FormatLike, get_format

DEFAULT_COMPARE_FORMATS = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


# ---- exact helpers -----------------------------------------------------------------------------
def _pow2(k: int) -> Fraction:
    """2^k as an exact Fraction, for any integer k (negative included)."""
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def exact_decimal(q: Fraction) -> str:
    """All digits of a dyadic rational ``n / 2^k`` (or any ``n / (2^a 5^b)``) in positional
    decimal notation.

    Multiplying top and bottom by ``5^k`` turns the denominator into ``10^k``, so the value has
    exactly ``k`` digits after the point (fewer once trailing zeros are dropped).

    >>> exact_decimal(Fraction(1, 1024)), exact_decimal(Fraction(-3, 2)), exact_decimal(Fraction(0))
    ('0.0009765625', '-1.5', '0')
    """
    n, d = q.numerator, q.denominator
    # d = 2^a × 5^b has a finite decimal expansion with k = max(a, b) digits after the point
    # (every binary value is such; so is a decimal typed as text, such as 0.1 = 1/(2 × 5)).
    a = (d & -d).bit_length() - 1
    rest, b = d >> a, 0
    while rest % 5 == 0:
        rest, b = rest // 5, b + 1
    if rest != 1:
        raise ValueError(f"{q} has no finite decimal expansion")
    k = max(a, b)
    sign = "-" if n < 0 else ""
    digits = str(abs(n) * (10**k // d)).rjust(k + 1, "0")  # abs(q) = digits / 10^k
    whole, frac = digits[: len(digits) - k], digits[len(digits) - k :].rstrip("0")
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def _width(f: Format) -> int:
    """The magnitude bits (exponent and fraction), below the sign bit if there is one."""
    return f.exp_bits + f.man_bits


def _split(code: int, f: Format) -> tuple[int, int, int]:
    """(sign, biased exponent field, fraction field) of a code; sign 0 in an unsigned format."""
    w = _width(f)
    sign = (code >> w) & 1 if f.signed else 0
    return sign, (code >> f.man_bits) & f.max_exp_field, code & ((1 << f.man_bits) - 1)


def _classify(code: int, f: Format) -> str:
    """The class of a code: "zero", "subnormal", "normal", "inf" or "nan".

    Where the specials sit is read from the format's record: magnitude codes (the code without
    its sign bit) at or above ``nan_mag`` are NaN (IEEE: all-ones exponent with a non-zero
    fraction; OCP E4M3/E8M0: the all-ones code), ``inf_mag`` is infinity (IEEE: all-ones
    exponent, fraction 0; P3109: the top code), and in the ``negzero`` encoding (fnuz, P3109)
    the sign bit alone -- the code -0 would have -- is the one NaN. Exponent field 0 holds zero
    and the subnormals, unless the format has none (E8M0: an ordinary binade).
    """
    r = f.record
    w = _width(f)
    mag = code & ((1 << w) - 1)
    if r.negzero_nan and code == 1 << w:
        return "nan"
    if mag >= r.nan_mag:
        return "nan"
    if mag == r.inf_mag:
        return "inf"
    if f.has_subnormals and mag >> f.man_bits == 0:
        return "zero" if mag == 0 else "subnormal"
    return "normal"


def _magnitude(biased: int, frac: int, f: Format) -> Fraction:
    """Exact |value| of a finite code: 1.f × 2^(E - bias), or 0.f × 2^emin when E == 0 (in a
    format with subnormals)."""
    if biased == 0 and f.has_subnormals:
        # No implicit bit; the exponent stays at emin = 1 - bias (not 0 - bias): this is what
        # makes the subnormals continue the spacing of the smallest binade (gradual underflow).
        return frac * _pow2(f.emin - f.man_bits)
    return ((1 << f.man_bits) | frac) * _pow2(biased - f.bias - f.man_bits)


def _decode(code: int, f: Format) -> float:
    """The value of a code as a (float64-exact) Python float, inf and NaN included."""
    sign, biased, frac = _split(code, f)
    cls = _classify(code, f)
    if cls == "nan":
        return math.nan
    mag = math.inf if cls == "inf" else float(_magnitude(biased, frac, f))
    return -mag if sign else mag


def _top_mag(f: Format) -> int:
    """The largest magnitude code that is a value: +inf's, or the largest finite one's."""
    return f.record.inf_mag if f.has_inf else f.record.max_mag


def _neighbours(code: int, cls: str, f: Format) -> tuple[float, float]:
    """(next_down, next_up) of a code, by stepping the code's magnitude by one.

    Codes of one sign are ordered like the magnitudes they encode (that is why the exponent sits
    above the fraction), so the next value away from zero is ``magnitude code + 1`` and the next
    toward zero ``magnitude code - 1``. Where no value lies that way the neighbour is NaN: above
    the largest finite value of a format without inf (the next code is NaN, or there is none),
    below the smallest value of an unsigned format (0, or E8M0's 2^-127: it has no zero).
    """
    if cls == "nan":
        return math.nan, math.nan
    w = _width(f)
    neg = f.signed and bool((code >> w) & 1)
    mag = code & ((1 << w) - 1)

    def value(mg: int) -> float:
        return _decode(mg, f) if 0 <= mg <= _top_mag(f) else math.nan

    if cls == "zero":  # from 0 the steps go to the smallest subnormal (of either sign)
        tiny = value(1)
        return (-tiny if f.signed else math.nan), tiny
    if cls == "inf":  # nothing lies beyond ±inf
        edge = value(mag - 1)
        return (-math.inf, -edge) if neg else (edge, math.inf)
    outward = value(mag + 1)
    inward = value(mag - 1)  # 0.0 when mag == 1; NaN below E8M0's smallest value
    if mag == 0 and f.signed:  # no zero (no subnormals), signed: the step crosses to -smallest
        inward = -value(0)
    if neg:
        # next_up of a negative value moves toward zero (-0.0 last, +0.0 where there is no -0)
        return -outward, (-inward if inward or f.has_negzero else 0.0)
    return inward, outward


def _binade(q: Fraction) -> int:
    """floor(log2(q)) for q > 0, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    return e - 1 if _pow2(e) > q else e


def _input_ulp(x: Fraction, f: Format) -> Fraction:
    """ulp at the exact input x: 2^(e - man_bits), e the exponent of |x|'s leading bit in
    [emin, emax].

    Measured at the *input* (not the rounded value), round-to-nearest errors are always within
    half an ulp, also when x rounds up across a power of two into the next binade.
    """
    lead = min(max(_binade(abs(x)), f.emin), f.emax) if x != 0 else f.emin  # 0: subnormal grid
    return _pow2(lead - f.man_bits)


# ---- texts about a format, computed from its properties ------------------------------------------
def _hex(f: Format, code: int) -> str:
    """A code in hex with as many digits as the format needs (fp16: ``0x7c00``, fp4: ``0x7``)."""
    return f"0x{code:0{(f.bits + 3) // 4}x}"


def _num_text(v: float) -> str:
    """A value for a sentence: ``448``, ``-6``, ``0.5``, ``2^-127``, ``3.4028234663852886e+38``."""
    if math.isfinite(v) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    mant, e = math.frexp(abs(v))
    if mant == 0.5 and abs(e - 1) > 16:
        return f"{'-' if v < 0 else ''}2^{e - 1}"
    return repr(float(v))


def _bits_text(f: Format, sign: str, exp: str, man: str) -> str:
    """The fields the format has, space separated: ``'0 01011 1001100110'``, E8M0 ``'01111111'``."""
    return " ".join(([sign] if f.signed else []) + [exp] + ([man] if f.man_bits else []))


def _field_names(f: Format) -> str:
    """``sign | exponent | mantissa``, naming the fields a format lacks (E8M0:
    ``exponent; no sign bit, no mantissa bits``)."""
    names = (["sign"] if f.signed else []) + ["exponent"] + (["mantissa"] if f.man_bits else [])
    missing = ([] if f.signed else ["no sign bit"]) + ([] if f.man_bits else ["no mantissa bits"])
    return " | ".join(names) + (f"; {', '.join(missing)}" if missing else "")


def _form_text(f: Format, sign: int, lead: int, man: str, exponent: int) -> str:
    """``(-1)^0 × 1.1001100110₂ × 2^-4``; no sign factor in an unsigned format, and a power of
    two alone without mantissa bits (E8M0: ``2^-4``)."""
    s = f"(-1)^{sign} × " if f.signed else ""
    if man:
        return f"{s}{lead}.{man}₂ × 2^{exponent}"
    return f"{s}2^{exponent}" if lead else f"{s}0 × 2^{exponent}"  # no mantissa: 0 is zero


def _layout_text(f: Format) -> str:
    """``1 sign, 5 exponent, 10 mantissa bits``; ``unsigned (no sign bit), 8 exponent bits, no
    mantissa bits``."""
    sign = "1 sign" if f.signed else "unsigned (no sign bit)"
    if f.man_bits:
        return f"{sign}, {f.exp_bits} exponent, {f.man_bits} mantissa bits"
    return f"{sign}, {f.exp_bits} exponent bits, no mantissa bits"


def _nan_pattern(f: Format) -> str:
    """The all-ones NaN of a signed format as ``S.1111.111`` (S: either sign)."""
    return ".".join(["S", "1" * f.exp_bits] + (["1" * f.man_bits] if f.man_bits else []))


def describe_specials(f: Format) -> str:
    """What a format has besides its finite numbers, in words computed from its properties.

    >>> describe_specials(get_format("fp16")), describe_specials(get_format("fp8_e4m3"))
    ('IEEE style (inf and NaN in the top exponent)', 'no inf; NaN = S.1111.111')
    >>> describe_specials(get_format("fp8_e4m3fnuz")), describe_specials(get_format("fp4_e2m1"))
    ('no inf; NaN = the code 0x80 (no -0)', 'no inf, no NaN: overflow saturates to ±6')
    >>> describe_specials(get_format("e8m0")), describe_specials(get_format("p3109_k8p3se"))
    ('no zero, no subnormals; no inf; NaN = 0xff', '±inf = 0x7f/0xff; NaN = the code 0x80 (no -0)')
    """
    parts = [] if f.has_zero else ["no zero, no subnormals"]
    pm = "±" if f.signed else ""
    if f.has_inf and f.nan == "ieee":
        return "; ".join(parts + ["IEEE style (inf and NaN in the top exponent)"])
    if not f.has_inf and not f.has_nan:
        return "; ".join(parts + [f"no inf, no NaN: overflow saturates to {pm}{_num_text(f.max)}"])
    if not f.has_inf:
        parts.append("no inf")
    elif f.signed:
        sign_bit = 1 << (f.bits - 1)
        parts.append(f"±inf = {_hex(f, f.inf_code)}/{_hex(f, f.inf_code | sign_bit)}")
    else:
        parts.append(f"inf = {_hex(f, f.inf_code)}")
    if f.nan == "ieee":
        parts.append("NaN = exponent all ones, fraction ≠ 0")
    elif f.nan == "all_ones":
        parts.append(f"NaN = {_nan_pattern(f)}" if f.signed else f"NaN = {_hex(f, f.nan_code)}")
    elif f.nan == "negzero":
        parts.append(f"NaN = the code {_hex(f, f.nan_code)} (no -0)")
    else:
        parts.append("no NaN")
    return "; ".join(parts)


def _no_code_reason(xf: float, exact: Fraction | None, f: Format) -> str | None:
    """Why no code of ``f`` holds the input (NaN in a format without NaN; a negative number in
    an unsigned format without NaN), or None when one does."""
    if f.has_nan:
        return None
    if exact is None and math.isnan(xf):
        return (
            "no NaN, so no code holds NaN: round_to keeps NaN (its float result is NaN) and "
            "to_bits has no code to give"
        )
    if not f.signed and (exact < 0 if exact is not None else xf < 0):
        return (
            "unsigned and no NaN, so no code holds a negative number: round_to gives NaN (a "
            "float NaN) and to_bits has no code to give"
        )
    return None


def _smallest_value(f: Format) -> float:
    """The smallest positive value (E8M0, without zero or subnormals: its code 0)."""
    return f.smallest_subnormal if f.has_subnormals else f.min_normal


# ---- fields ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fields:
    """Everything about one value rounded to one format (made by :func:`fields`).

    Bit fields: ``sign`` (0/1; 0 in an unsigned format, which has no sign bit),
    ``exponent_bits`` and ``mantissa_bits`` (strings of 0/1; the mantissa is ``""`` in a format
    without mantissa bits such as E8M0), ``code`` (the unsigned integer) and ``hex``. Exponent:
    ``biased_exponent`` (the field as an integer) and ``exponent`` (unbiased; ``emin`` for zero
    and subnormals, None for inf/NaN). ``cls``: "zero", "subnormal", "normal", "inf" or "nan".
    Value: ``value`` (exact Fraction, None for inf/NaN), ``stored`` (the same as a float, with
    -0.0/inf/nan), ``decimal`` (all digits), ``form`` (``(-1)^s × 1.f₂ × 2^e``), ``significand``
    (exact). Spacing: ``ulp`` (Fraction, at the stored value; None for inf/NaN), ``next_down``
    and ``next_up`` (floats; NaN where no value lies that way: above the max of a format without
    inf, below the smallest value of an unsigned format or of E8M0). The input: ``exact_input``
    (its exact value as a Fraction, None for inf/NaN) and ``input`` (the float64 nearest to it,
    the same number for float input). Rounding error of the exact input: ``error = value -
    exact_input`` (Fraction), ``rel_error = error / exact_input`` and ``error_ulps = error /
    ulp(exact_input)``, each None where it is not a finite number.
    """

    format: Format
    input: float
    exact_input: Fraction | None
    rounding: str
    sign: int
    exponent_bits: str
    mantissa_bits: str
    code: int
    hex: str
    biased_exponent: int
    exponent: int | None
    cls: str
    value: Fraction | None
    stored: float
    decimal: str
    significand: Fraction | None
    form: str
    ulp: Fraction | None
    next_down: float
    next_up: float
    error: Fraction | None
    rel_error: Fraction | None
    error_ulps: Fraction | None

    @property
    def bits(self) -> str:
        """The code as ``"sign exponent mantissa"``, e.g. ``'0 01011 1001100110'``; only the
        fields the format has (E8M0, unsigned with no mantissa bits: ``'01111111'``)."""
        return _bits_text(self.format, str(self.sign), self.exponent_bits, self.mantissa_bits)

    def __str__(self) -> str:
        # the table explain() prints; its text helpers live with explain (imported on use, so
        # this module stays below fpsim.inspect.tables)
        from .tables import _explain_fields

        return _explain_fields(self)


def _as_exact(x: Any) -> tuple[float, Fraction | None]:
    """One number as (the float64 nearest to it, its exact value or None for inf/NaN)."""
    if isinstance(x, str):
        x = parse_number(x)
    if np.ndim(x) != 0:
        raise TypeError(
            "fields()/explain() take one number; use all_values() or round_to() for arrays"
        )
    if isinstance(x, (bool, np.bool_)):
        x = int(x)
    if isinstance(x, numbers.Integral):
        q = Fraction(int(x))
    elif isinstance(x, Fraction) or (isinstance(x, Decimal) and x.is_finite() and not x.is_zero()):
        q = Fraction(x)
    else:
        try:
            xf = float(x)
        except (TypeError, ValueError):
            raise TypeError(f"expected one real number, got {x!r}") from None
        if isinstance(x, (complex, np.complexfloating)):
            raise TypeError(f"expected one real number, got {x!r}")
        if isinstance(x, np.floating) and np.dtype(type(x)).itemsize > 8:
            raise TypeError(f"{np.dtype(type(x))} input is not supported; convert to float64")
        return xf, (Fraction(xf) if math.isfinite(xf) else None)
    try:
        return float(q), q
    except OverflowError:
        return (math.inf if q > 0 else -math.inf), q


def _float_is_exact(xf: float, exact: Fraction | None) -> bool:
    """Whether the float64 ``xf`` is the input itself (always so for inf and NaN)."""
    return exact is None or (math.isfinite(xf) and exact == Fraction(xf))


_POWER = re.compile(r"^([+-]?)\s*(\d+)\s*(?:\*\*|\^)\s*([+-]?\d+)$")


_HEX = re.compile(r"^([+-]?)0x([0-9a-f]*)(?:\.([0-9a-f]*))?(?:p([+-]?\d+))?$")


def _parse_hex(t: str) -> Fraction:
    """A hex float (``0x1.8p-3``) as an exact Fraction, however many digits (float.fromhex
    would round them to float64 first)."""
    m = _HEX.match(t.lower())
    if not m or not (m.group(2) or m.group(3)):
        raise ValueError(t)
    sign, whole, frac, exp = m.group(1), m.group(2) or "", m.group(3) or "", int(m.group(4) or 0)
    if abs(exp) > 100_000:
        raise ValueError("exponent too large")
    v = Fraction(int(whole + frac, 16), 16 ** len(frac)) * Fraction(2) ** exp
    return -v if sign == "-" else v


def parse_number(text: str) -> Fraction | float:
    """The exact number a text means: a Fraction for finite numbers, a float for inf and NaN.

    Accepted: decimals (``"0.1"``, ``"-1e-5"``), fractions (``"1/3"``), integer powers
    (``"2**-25"``, ``"2^-25"``), hex floats (``"0x1.8p-3"``), ``"inf"`` and ``"nan"``;
    anything else is a ``ValueError``.

    >>> parse_number("0.1"), parse_number("1/3"), parse_number("-2**-3"), parse_number("0x1.8p1")
    (Fraction(1, 10), Fraction(1, 3), Fraction(-1, 8), Fraction(3, 1))
    >>> parse_number("nan"), parse_number("-0.0")
    (nan, -0.0)
    """
    if not isinstance(text, str):
        raise TypeError(f"expected text, got {type(text).__name__}")
    t = text.strip().replace("_", "")
    low = t.lower().lstrip("+-")
    if low in ("inf", "infinity", "nan"):
        return float(t)
    m = _POWER.match(t)
    try:
        if m:
            base, exp = int(m.group(2)), int(m.group(3))
            if abs(exp) > 100_000 or base > 2**64:
                raise ValueError("too large")
            v = Fraction(base) ** exp
            v = -v if m.group(1) == "-" else v
        elif "0x" in low:
            v = _parse_hex(t)
        else:
            e = re.search(r"[eE]([+-]?\d+)$", t)
            if e and abs(int(e.group(1))) > 100_000:
                # Fraction would build 10^exponent exactly: refuse rather than hang
                raise ValueError("exponent too large")
            v = Fraction(t)
        # A zero keeps the sign it was typed with ("-0.0" is negative zero): a float then.
        return -0.0 if v == 0 and t.startswith("-") else v
    except (ValueError, ZeroDivisionError, OverflowError):
        raise ValueError(
            f"not a number: {text!r} (write a decimal, a fraction such as 1/3, a power such as "
            "2**-25, a hex float, inf or nan)"
        ) from None


def fields(x: Any, fmt: FormatLike, rounding: str = "nearest_even") -> Fields:
    """The bit fields and exact facts of ``x`` rounded to ``fmt`` (default: nearest-even).

    ``x`` is one number (Python/numpy scalar, or a string such as ``"0.1"`` or ``"0x1p-3"``),
    taken as a float64; ``fmt`` any format (name, alias or :class:`~fpsim.formats.Format`).
    Every format works: unsigned ones (no sign bit in ``bits``), E8M0 (no mantissa, no zero),
    fnuz and P3109 (NaN at ``0x80``, no -0), FP4/FP6 (no inf, no NaN: overflow saturates). An
    input no code holds -- NaN in a format without NaN, a negative number in an unsigned one
    without NaN -- raises ValueError saying so (:func:`explain` prints it).

    >>> f = fields(0.1, "fp16")
    >>> f.bits, f.code, f.cls, f.exponent, f.value
    ('0 01011 1001100110', 11878, 'normal', -4, Fraction(819, 8192))
    >>> f.form, f.ulp, f.next_down, f.next_up
    ('(-1)^0 × 1.1001100110₂ × 2^-4', Fraction(1, 16384), 0.09991455078125, 0.10003662109375)
    >>> float(f.error), float(f.error_ulps)
    (-2.441406250000555e-05, -0.40000000000009095)
    >>> fields(-0.0, "bf16").bits, fields(1e-7, "fp16").cls, fields(1000, "e4m3").cls
    ('1 00000000 0000000', 'subnormal', 'nan')
    >>> fields(0.1, "e8m0").bits, fields(-0.0, "fp8_e4m3fnuz").hex, fields(1e9, "fp4_e2m1").stored
    ('01111100', '0x00', 6.0)
    """
    f = get_format(fmt)
    xf, exact = _as_exact(x)
    no_code = _no_code_reason(xf, exact, f)
    if no_code is not None:
        raise ValueError(f"{f.name}: {no_code}")
    # A float is rounded as itself (its sign of zero included), anything else from its exact value.
    code = int(to_bits(xf if _float_is_exact(xf, exact) else exact, f, rounding))

    # 1. Cut the code into its fields (the sign bit on top, if any, then exponent, then fraction).
    m = f.man_bits
    sign, biased, frac = _split(code, f)
    cls = _classify(code, f)
    exp_str = format(biased, f"0{f.exp_bits}b")
    man_str = format(frac, f"0{m}b") if m else ""

    # 2. Exact value: normal 1.f × 2^(E - bias); zero/subnormal 0.f × 2^emin.
    sgn = "-" if sign else ""
    if cls in ("inf", "nan"):
        exponent = significand = value = ulp = None
        stored = math.nan if cls == "nan" else (-math.inf if sign else math.inf)
        decimal = "nan" if cls == "nan" else f"{sgn}inf"
        form = decimal
    else:
        lead = 0 if cls in ("zero", "subnormal") else 1
        exponent = f.emin if lead == 0 else biased - f.bias
        significand = Fraction((lead << m) | frac, 1 << m)
        value = (-1 if sign else 1) * significand * _pow2(exponent)
        stored = float(value) if value else (-0.0 if sign else 0.0)
        decimal = sgn + exact_decimal(abs(value))
        form = _form_text(f, sign, lead, man_str, exponent)
        # The spacing of the grid around the value: one unit of the last mantissa bit.
        ulp = _pow2(exponent - m)
    next_down, next_up = _neighbours(code, cls, f)

    # 3. Rounding error against the exact input (only when both ends are finite).
    error = rel_error = error_ulps = None
    if value is not None and exact is not None:
        error = value - exact
        rel_error = error / exact if exact != 0 else None
        error_ulps = error / _input_ulp(exact, f)

    return Fields(
        format=f, input=xf, exact_input=exact, rounding=rounding, sign=sign, exponent_bits=exp_str,
        mantissa_bits=man_str, code=code, hex=_hex(f, code),
        biased_exponent=biased, exponent=exponent, cls=cls, value=value, stored=stored,
        decimal=decimal, significand=significand, form=form, ulp=ulp, next_down=next_down,
        next_up=next_up, error=error, rel_error=rel_error, error_ulps=error_ulps,
    )  # fmt: skip


# ---- all_values --------------------------------------------------------------------------------
def all_values(fmt: FormatLike) -> np.ndarray:
    """Every code of a format of at most 16 bits, as a numpy structured array sorted by code.

    Columns: ``code`` (uint16), ``bits`` (``"s eeee mmm"``: the fields the format has, so
    ``"eeeeeeee"`` for E8M0), ``cls`` (as in :func:`fields`) and ``value`` (float64; NaN codes
    give nan). Wider formats raise ValueError (fp32 has 4 billion).

    >>> t = all_values("fp8_e4m3")
    >>> len(t), str(t[0x7E]["bits"]), float(t[0x7E]["value"]), int((t["cls"] == "nan").sum())
    (256, '0 1111 110', 448.0, 2)
    """
    f = get_format(fmt)
    if f.bits > 16:
        raise ValueError(
            f"all_values() lists formats of at most 16 bits; {f.name} has {f.bits} bits "
            f"({f.num_codes} codes)"
        )
    m, r = f.man_bits, f.record
    w = _width(f)
    codes = np.arange(f.num_codes, dtype=np.int64)
    mag = codes & ((1 << w) - 1)
    # Classes from the magnitude code, vectorised (the same rules as _classify).
    is_nan = (mag >= r.nan_mag) | ((codes == 1 << w) if r.negzero_nan else False)
    is_inf = ~is_nan & (mag == r.inf_mag)
    low = (mag >> m == 0) if f.has_subnormals else np.zeros(codes.shape, bool)
    cls = np.select(
        [is_nan, is_inf, low & (mag == 0), low],
        ["nan", "inf", "zero", "subnormal"],
        default="normal",
    )
    table = np.zeros(
        f.num_codes,
        dtype=[
            ("code", np.uint16),
            ("bits", f"U{f.bits + 2}"),
            ("cls", "U9"),
            ("value", np.float64),
        ],
    )
    table["code"] = codes
    s = int(f.signed)
    strings = [format(c, f"0{f.bits}b") for c in range(f.num_codes)]
    table["bits"] = [_bits_text(f, b[:s], b[s : s + f.exp_bits], b[s + f.exp_bits :])
                     for b in strings]  # fmt: skip
    table["cls"] = cls
    # The values are the simulator's own decoding of each code (exact in float64).
    table["value"] = from_bits(codes.astype(np.uint64), f, dtype=np.float64)
    return table
