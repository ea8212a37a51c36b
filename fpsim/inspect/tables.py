"""Texts about one number for people: :func:`explain` (a small table of the fields, the exact
value, the neighbours and the rounding error) and :func:`compare` (one value in several formats
side by side), both computed by :func:`fpsim.inspect.fields`."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from ..formats import Format, FormatLike, get_format
from .exact import (  # the exact facts these texts are made of
    DEFAULT_COMPARE_FORMATS,
    Fields,
    _as_exact,
    _classify,
    _field_names,
    _float_is_exact,
    _hex,
    _layout_text,
    _nan_pattern,
    _no_code_reason,
    _num_text,
    _smallest_value,
    _width,
    describe_specials,
    exact_decimal,
    fields,
)

# ---- explain -----------------------------------------------------------------------------------
_LABEL = 13  # width of the label column in explain()
_WRAP = 72  # longer text continues on the next line (long numbers are cut into chunks)
_DIGITS_MAX = 2 * _WRAP  # explain() abbreviates exact decimals longer than this


def _float_text(x: float) -> str:
    """The float as written: ``repr`` without numpy's wrapper (``0.1``, ``-0.0``, ``inf``)."""
    return repr(float(x))


def _value_text(v: float) -> str:
    """A stored float as an exact decimal (inf/nan as words)."""
    if not math.isfinite(v):
        return repr(v)
    d = exact_decimal(Fraction(v))
    return "-0" if v == 0 and math.copysign(1.0, v) < 0 else d


def _digits_text(d: str) -> str:
    """An exact decimal for explain(): in full up to _DIGITS_MAX characters, else abbreviated.

    The abbreviation keeps the leading significant digits in scientific notation and says how
    many there are (2^-1074 has 751); :func:`fields` keeps every digit in ``.decimal``.
    """
    if len(d) <= _DIGITS_MAX or d[-1:] not in "0123456789":
        return d
    sign, body = ("-", d[1:]) if d.startswith("-") else ("", d)
    whole, _, frac = body.partition(".")
    digits = (whole + frac).lstrip("0")
    exp10 = len(whole) - 1 if whole != "0" else -(len(frac) - len(frac.lstrip("0")) + 1)
    return f"{sign}{digits[0]}.{digits[1:40]}…e{exp10:+d} ({len(digits)} digits)"


def _exact_note(text: str) -> str:
    """The remark after an exact decimal in explain(): whether it was shown in full."""
    return "(abbreviated exact value)" if "…" in text else "(exact)"


def _typed_is_exact(x: float) -> bool:
    """Whether the float's shortest repr (``0.5``, ``-0.0``, ``1e+300``) is its exact value."""
    return not math.isfinite(x) or Fraction(repr(x)) == Fraction(x)


def _input_text(q: Fraction) -> str:
    """An exact input: its decimal when it has a finite one, else ``p/q``."""
    try:
        return exact_decimal(q)
    except ValueError:  # 1/3: no finite decimal expansion
        return f"{q.numerator}/{q.denominator}"


def _pow2_text(q: Fraction) -> str:
    """A power of two as ``2^k = exact decimal``."""
    k = q.numerator.bit_length() - 1 if q >= 1 else -(q.denominator.bit_length() - 1)
    return f"2^{k} = {_digits_text(exact_decimal(q))}"


def _rows(label: str, text: str) -> list[str]:
    """One table row; text longer than _WRAP continues on indented lines below."""
    chunks = textwrap.wrap(text, _WRAP, break_on_hyphens=False) or [""]
    out = [f"  {label:<{_LABEL}}{chunks[0]}"]
    out += [f"  {'':<{_LABEL}}{c}" for c in chunks[1:]]
    return out


def _result_note(fl: Fields) -> tuple[str, str] | None:
    """(a short tag, a sentence) when the result is not simply the nearest value of the input:
    overflow to inf or NaN, saturation to the max (a format without inf and NaN), NaN for a
    negative input of an unsigned format or for 0 in a format without zero, the smallest value
    for an input below it in a format without zero, +0 for a negative input where there is no
    -0. None otherwise (also for NaN -> NaN and inf -> inf)."""
    f, q, x = fl.format, fl.exact_input, fl.input
    mx = _num_text(f.max)
    if fl.cls == "nan":
        if q is None:
            if math.isnan(x):
                return None
            if x < 0 and not f.signed:
                return "unsigned", "unsigned: -inf has no code, it becomes NaN"
            return "no inf", f"no inf: {_float_text(x)} becomes NaN"
        if q == 0 and not f.has_zero:
            return "no zero", "no zero (no subnormals): 0 becomes NaN"
        if q < 0 and not f.signed:
            return "unsigned", "unsigned: a negative input has no code, it becomes NaN"
        if abs(q) > f.max:
            return "overflow", (
                f"overflow: |input| is beyond the largest finite value {mx} and there is no "
                "inf, so it becomes NaN"
            )
        return None
    if fl.cls == "inf":
        if q is None:
            return None
        return "overflow", (
            f"overflow: |input| is beyond the largest finite value {mx}, so it becomes {fl.decimal}"
        )
    stored = _num_text(fl.stored)
    if q is None:  # ±inf in a format without inf (and without NaN, or it would be NaN)
        return "saturated", f"no inf and no NaN: {_float_text(x)} saturates to {stored}"
    if not f.has_inf and not f.has_nan and abs(q) > f.max and abs(fl.value) == f.max:
        return "saturated", (
            f"|input| is beyond the largest value {mx} and there is no inf or NaN, so it "
            f"saturates to {stored}"
        )
    smallest = _smallest_value(f)
    if not f.has_zero and 0 < abs(q) < smallest and abs(fl.value) == smallest:
        return "no zero", (
            f"|input| is below the smallest value {_num_text(smallest)} and there is no zero, "
            f"so it becomes {stored}"
        )
    negative = q < 0 or (q == 0 and math.copysign(1.0, x) < 0)
    if fl.cls == "zero" and negative and f.signed and not f.has_negzero:
        return "no -0", (
            f"no -0 (its code {_hex(f, f.nan_code)} is NaN): the negative input rounds to +0"
        )
    return None


def _special_code_text(fl: Fields) -> str:
    """What the fields of an inf or NaN code say, by the format's encoding of its specials."""
    f = fl.format
    e_field = f"{fl.exponent_bits}₂ = {fl.biased_exponent}"
    frac = f", fraction {fl.mantissa_bits}₂" if f.man_bits else ""
    if not f.has_inf:
        inf = "no inf"
    elif f.signed:
        inf = f"±inf = {_hex(f, f.inf_code)}/{_hex(f, f.inf_code | (1 << _width(f)))}"
    else:
        inf = f"inf = {_hex(f, f.inf_code)}"
    if fl.cls == "inf":
        if f.nan == "ieee":
            return f"{e_field} (all ones) with fraction 0: infinity"
        return (
            f"{e_field}{frac}: the code just above the largest finite value is "
            f"{'-' if fl.sign else '+'}infinity"
        )
    if f.nan == "ieee":
        return f"{e_field} (all ones) with fraction != 0: NaN"
    if f.nan == "all_ones" and f.signed:
        return f"{e_field}, fraction all ones: the only NaN ({_nan_pattern(f)}; {inf})"
    if f.nan == "all_ones":
        return f"{e_field}{frac}: all ones, {f.name}'s only NaN code ({inf})"
    # negzero: the sign bit alone
    return (
        f"{e_field}{frac} with the sign bit set: {fl.hex}, the code -0 would have, is "
        f"the only NaN (no -0; {inf})"
    )


def _neighbour_text(fl: Fields, up: bool) -> str:
    """next up / next down for explain(): the exact decimal, or why there is none."""
    v = fl.next_up if up else fl.next_down
    if not math.isnan(v) or fl.cls == "nan":
        return _digits_text(_value_text(v))
    f = fl.format
    edge = _num_text(fl.stored)
    if fl.stored == 0:
        return f"none: {f.name} is unsigned, no value lies below 0"
    if abs(fl.stored) == f.max:
        extreme = "largest" if up else "lowest"
        nxt = fl.code + 1  # magnitude + 1, in either sign
        if nxt < f.num_codes and _classify(nxt, f) == "nan":
            return f"none: {edge} is the {extreme} value; the next code, {_hex(f, nxt)}, is NaN"
        return f"none: {edge} is the {extreme} value (no inf)"
    return f"none: {edge} is the smallest value (no zero)"


def _explain_fields(fl: Fields) -> str:
    f = fl.format
    exact_text = not _float_is_exact(fl.input, fl.exact_input)
    shown = _digits_text(_input_text(fl.exact_input)) if exact_text else _float_text(fl.input)
    lines = [f"{shown} in {f.name}: {_layout_text(f)}; bias {f.bias}"]
    rows: list[str] = _rows("specials", describe_specials(f))
    hint = f"   ({_field_names(f)})" if f.bits <= 32 else ""
    rows += _rows("bits", fl.bits + hint)
    rows += _rows("code", f"{fl.hex} = {fl.code}")
    rows += _rows("class", fl.cls)
    e_field = f"{fl.exponent_bits}₂ = {fl.biased_exponent}"
    if fl.cls == "normal":
        text = f"{e_field}; {fl.biased_exponent} - bias {f.bias} = {fl.exponent}"
        if fl.biased_exponent == 0:  # a format without subnormals (E8M0)
            text += " (no subnormals: field 0 is an ordinary binade)"
        rows += _rows("exponent", text)
        if f.man_bits:
            sig = f"1.{fl.mantissa_bits}₂ = {exact_decimal(fl.significand)}"
        else:
            sig = "1 (no mantissa bits: every value is a power of two)"
        rows += _rows("significand", sig)
    elif fl.cls in ("zero", "subnormal"):
        rows += _rows("exponent", f"{e_field}: no implicit 1, exponent emin = 1 - bias = {f.emin}")
        sig = f"0.{fl.mantissa_bits}₂ = {exact_decimal(fl.significand)}" if f.man_bits else "0"
        rows += _rows("significand", sig)
    else:
        rows += _rows("exponent", _special_code_text(fl))
    if fl.value is not None:
        rows += _rows("value", fl.form)
        text = _digits_text(fl.decimal)
        rows += _rows("", f"= {text}  {_exact_note(text)}")
    else:
        rows += _rows("value", fl.decimal)

    if exact_text:
        # text, an integer or a fraction that no float64 holds: it was rounded exactly
        rows += _rows("input", f"{shown}  (exact, not rounded to float64 first)")
    elif _typed_is_exact(fl.input):
        rows += _rows("input", f"{_float_text(fl.input)}  (float64, exact)")
    else:
        rows += _rows("input", f"{_float_text(fl.input)} as float64 is exactly")
        rows += _rows("", _digits_text(_value_text(fl.input)))
    note = _result_note(fl)
    if fl.error is not None:
        rel = "-" if fl.rel_error is None else f"{float(fl.rel_error):.3e}"
        rows += _rows(
            "error",
            f"stored - input ≈ {float(fl.error):.3e}  (relative {rel}, "
            f"{float(fl.error_ulps):.4g} ulp)",
        )
        rows += _rows("", f"exactly {_digits_text(_input_text(fl.error))}")
        if note is not None:
            rows += _rows("note", note[1])
    elif note is not None:
        rows += _rows("error", note[1])
    elif fl.exact_input is None:
        rows += _rows("error", "- (input is not finite)")
    else:
        rows += _rows("error", f"- (the result is {fl.decimal})")
    if fl.ulp is not None:
        rows += _rows("ulp", _pow2_text(fl.ulp))
    rows += _rows("next down", _neighbour_text(fl, up=False))
    rows += _rows("next up", _neighbour_text(fl, up=True))
    return "\n".join(lines + rows)


def _explain_no_code(x: Any, f: Format) -> str | None:
    """explain() of an input no code of ``f`` holds (NaN in FP4), or None."""
    xf, exact = _as_exact(x)
    reason = _no_code_reason(xf, exact, f)
    if reason is None:
        return None
    shown = _float_text(xf) if _float_is_exact(xf, exact) else _digits_text(_input_text(exact))
    rows = _rows("specials", describe_specials(f)) + _rows("bits", "none") + _rows("result", reason)
    return "\n".join([f"{shown} in {f.name}: {_layout_text(f)}; bias {f.bias}"] + rows)


def explain(x: Any, fmt: FormatLike, rounding: str = "nearest_even") -> str:
    """A multi-line, human-readable account of ``x`` rounded to ``fmt`` (see :func:`fields`).

    >>> print(explain(0.1, "fp16"))
    0.1 in fp16: 1 sign, 5 exponent, 10 mantissa bits; bias 15
      specials     IEEE style (inf and NaN in the top exponent)
      bits         0 01011 1001100110   (sign | exponent | mantissa)
      code         0x2e66 = 11878
      class        normal
      exponent     01011₂ = 11; 11 - bias 15 = -4
      significand  1.1001100110₂ = 1.599609375
      value        (-1)^0 × 1.1001100110₂ × 2^-4
                   = 0.0999755859375  (exact)
      input        0.1 as float64 is exactly
                   0.1000000000000000055511151231257827021181583404541015625
      error        stored - input ≈ -2.441e-05  (relative -2.441e-04, -0.4 ulp)
                   exactly -0.0000244140625000055511151231257827021181583404541015625
      ulp          2^-14 = 0.00006103515625
      next down    0.09991455078125
      next up      0.10003662109375
    """
    f = get_format(fmt)
    no_code = _explain_no_code(x, f)
    return no_code if no_code is not None else _explain_fields(fields(x, f, rounding))


# ---- compare -----------------------------------------------------------------------------------
_STORED_MAX = 30  # longer exact decimals are shown rounded (marked ≈) in compare()


def _short_value(fl: Fields) -> str:
    if fl.value is None:
        return fl.decimal
    if len(fl.decimal) <= _STORED_MAX:
        return fl.decimal
    return f"≈{fl.stored:.17g}"


def compare(x: Any, formats: Iterable[FormatLike] = DEFAULT_COMPARE_FORMATS) -> str:
    """``x`` rounded (nearest-even) to several formats, side by side: bits, stored value, errors.

    Stored values are exact decimals (rounded, marked ≈, when longer than 30 characters); the
    errors are stored - input (absolute), that over the input (relative), and in ulps of the input.

    >>> print(compare(1/3, ["fp16", "fp8_e5m2"]))
    x = 0.3333333333333333
      = 0.333333333333333314829616256247390992939472198486328125  (the exact float64 value)
    <BLANKLINE>
    format    bits (sign exponent mantissa)  hex     stored value     abs error   rel error    ulps
    fp16      0 01101 0101010101             0x3555  0.333251953125  -8.138e-05  -2.441e-04  -0.333
    fp8_e5m2  0 01101 01                     0x35    0.3125          -2.083e-02  -6.250e-02  -0.333
    """
    xf, exact = _as_exact(x)
    head = f"x = {_float_text(xf)}"
    if not _float_is_exact(xf, exact):
        # Text, a big integer or a fraction, rounded from its exact value (not through float64).
        typed = x.strip() if isinstance(x, str) else _digits_text(_input_text(exact))
        head = f"x = {typed}  (rounded from its exact value, not through float64)"
        head += f"\n  float64 would hold {_digits_text(_value_text(xf))}"
    elif not _typed_is_exact(xf):
        # The decimal the user typed is not what is rounded: the float64 nearest to it is.
        text = _digits_text(_value_text(xf))
        head += f"\n  = {text}  (the exact float64 value)"
    titles = ("format", "bits (sign exponent mantissa)", "hex", "stored value",
              "abs error", "rel error", "ulps")  # fmt: skip
    rows, notes = [], []
    for fmt in formats:
        f = get_format(fmt)
        no_code = _no_code_reason(xf, exact, f)
        if no_code is not None:
            rows.append((f.name, "(no code)", "-", "-", "no code", "", ""))
            notes.append(f"{f.name}: {no_code}")
            continue
        fl = fields(xf if _float_is_exact(xf, exact) else exact, f)
        note = _result_note(fl)
        if fl.error is not None:
            rel = "-" if fl.rel_error is None else f"{float(fl.rel_error):+.3e}"
            errs = (f"{float(fl.error):+.3e}", rel, f"{float(fl.error_ulps):+.3f}")
        elif note is not None:
            errs = (note[0], "", "")
        else:
            errs = ("-", "-", "-")
        if note is not None:
            notes.append(f"{f.name}: {note[1]}")
        rows.append((fl.format.name, fl.bits, fl.hex, _short_value(fl)) + errs)
        if not f.signed or not f.man_bits:
            missing = " and ".join(
                ([] if f.signed else ["no sign bit"]) + ([] if f.man_bits else ["no mantissa bits"])
            )
            fields_left = "exponent mantissa" if f.man_bits else "the exponent alone"
            notes.append(f"{f.name} has {missing}: its bits are {fields_left}")
    widths = [max(len(r[i]) for r in [titles, *rows]) for i in range(len(titles))]
    numeric = (False, False, False, False, True, True, True)  # right-align the error columns

    def line(cells: tuple[str, ...]) -> str:
        parts = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(cells, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    notes = list(dict.fromkeys(notes))  # once per format
    return "\n".join(
        [head, "", line(titles)] + [line(r) for r in rows] + ["", *notes] * bool(notes)
    )
