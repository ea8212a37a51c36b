"""The explorer's JSON API: a thin layer over fpsim's inspect, core, arith and stats.

Every endpoint is a function ``params -> dict``: ``params`` maps parameter names to values (the
strings of a query string, or the values of a JSON object), the dict is the JSON answer. Every
number the page shows is computed here, by fpsim: the page only lays the answers out, so the
page and the library cannot disagree. Numbers that must stay exact travel as text (exact
decimals such as ``"0.0999755859375"``, fractions such as ``"1/3"``, codes in decimal and hex);
``stored`` is Python's ``repr`` of the stored float (``"-0.0"``, ``"inf"``, ``"nan"``), for
drawing.

Bad input raises :class:`ApiError` (the server answers it with its HTTP status and the message):
a malformed number, an unknown or impossible format (``Format(40, 3)``), a code out of range,
an unknown rounding mode, a request too large to answer (all values of a 16-bit format).

>>> r = round_value({"format": "fp16", "x": "0.1"})
>>> r["result"]["hex"], r["result"]["decimal"], r["result"]["error"]["exact"]
('0x2e66', '0.0999755859375', '-0.0000244140625')
>>> [m["decimal"] for m in r["modes"]][:3]
['0.0999755859375', '0.0999755859375', '0.0999755859375']
>>> s = round_value({"format": "fp16", "x": "1/3"})["stochastic"]
>>> [(o["decimal"], o["p"]) for o in s["outcomes"]]
[('0.333251953125', '2/3'), ('0.33349609375', '1/3')]
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np

import fpsim
from fpsim import arith
from fpsim.core import ROUNDING_MODES, from_bits, next_down, next_up, round_to, to_bits, ulp
from fpsim.formats import Format, get_format, list_formats
from fpsim.inspect import all_values, describe_specials, exact_decimal, fields, parse_number
from fpsim.stats import RangeHistogram, suggest_scale

__all__ = ["ApiError", "ENDPOINTS", "LIMITS", "call"]


class ApiError(Exception):
    """A request the API refuses, with the HTTP status to answer (400 unless said)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


# ---- limits -------------------------------------------------------------------------------------
# Every request is answered in milliseconds: the limits keep it so (and keep an exact decimal on
# the page short enough to read). fp64's smallest subnormal 2^-1074 needs 1074 bits; inputs far
# beyond every format's range round like the edge of that range, so nothing is lost by refusing
# numbers past 2^±LIMITS["binades"].
LIMITS = {
    "text": 200,  # characters of a number or a format name
    "binades": 4096,  # |log2 |x|| of a typed number
    "bits": 8192,  # bits of a typed number's numerator and denominator
    "table_bits": 8,  # all_values: formats of at most 8 bits (256 codes)
    "neighbours": 16,  # values on each side of the number line around a value
    "samples": 1_000_000,  # gradient magnitudes in the loss-scale panel
    "log2_scale": 128,  # |k| of a loss scale 2^k
}

MODE_LABELS = {
    "nearest_even": "round to nearest, ties to even",
    "nearest_away": "round to nearest, ties away from zero",
    "toward_zero": "round toward zero (truncate)",
    "up": "round up (toward +inf)",
    "down": "round down (toward -inf)",
    "stochastic": "stochastic rounding",
}
DETERMINISTIC_MODES = tuple(m for m in ROUNDING_MODES if m != "stochastic")

_REQUIRED = object()


# ---- reading parameters --------------------------------------------------------------------------
def _param(params: Mapping[str, Any], name: str, default: Any = _REQUIRED) -> Any:
    v = params.get(name, default)
    if v is _REQUIRED:
        raise ApiError(f"missing parameter {name!r}")
    return v


def _text(params: Mapping[str, Any], name: str, default: Any = _REQUIRED) -> str:
    v = _param(params, name, default)
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise ApiError(f"{name} must be text, got {v!r}")
    v = str(v)  # a JSON number is read as the text it was written as: 0.1 is one tenth
    if len(v) > LIMITS["text"]:
        raise ApiError(f"{name} is too long ({len(v)} characters; at most {LIMITS['text']})")
    return v


def _bool(params: Mapping[str, Any], name: str, default: bool) -> bool:
    v = params.get(name, default)
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(v, str) and v.lower() in ("false", "0", "no", "off"):
        return False
    raise ApiError(f"{name} must be true or false, got {v!r}")


def _int(params: Mapping[str, Any], name: str, default: Any, lo: int, hi: int) -> int:
    v = _param(params, name, default)
    try:
        if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
            raise ValueError
        n = int(v) if not isinstance(v, str) else int(v.strip(), 0)
    except (TypeError, ValueError):
        raise ApiError(f"{name} must be an integer, got {v!r}") from None
    if not lo <= n <= hi:
        raise ApiError(f"{name} must be in {lo}..{hi}, got {n}")
    return n


def _float(params: Mapping[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    v = params.get(name, default)
    try:
        if isinstance(v, bool):
            raise ValueError
        x = float(v)
    except (TypeError, ValueError):
        raise ApiError(f"{name} must be a number, got {v!r}") from None
    if not lo <= x <= hi:  # NaN fails too
        raise ApiError(f"{name} must be in {lo:g}..{hi:g}, got {v!r}")
    return x


def _format(params: Mapping[str, Any]) -> Format:
    text = _text(params, "format", "fp16").strip()
    try:
        return get_format(text)
    except (TypeError, ValueError) as exc:
        raise ApiError(f"format {text!r}: {exc}") from None


def _rounding(params: Mapping[str, Any]) -> dict:
    """rounding, subnormals, saturate and seed, as round_to takes them."""
    mode = _text(params, "rounding", "nearest_even")
    if mode not in ROUNDING_MODES:
        raise ApiError(f"unknown rounding mode {mode!r}; choose one of {', '.join(ROUNDING_MODES)}")
    return {
        "rounding": mode,
        "subnormals": _bool(params, "subnormals", True),
        "saturate": _bool(params, "saturate", False),
        "seed": _int(params, "seed", 0, 0, 2**62),
    }


# A number's size is checked on its text before it is built: "2**-100000" or "1e-99999" are
# valid numbers whose exact value takes a moment to build and a page of digits to show.
_EXPONENTS = (
    (re.compile(r"^[+-]?\s*(\d+)\s*(?:\*\*|\^)\s*([+-]?\d+)$"), "power"),
    (re.compile(r"[eE]([+-]?\d+)$"), "decimal"),
    (re.compile(r"[pP]([+-]?\d+)$"), "hex"),
)


def _number(params: Mapping[str, Any], name: str, default: Any = _REQUIRED) -> Fraction | float:
    """A typed number, read exactly (fpsim.inspect.parse_number): a Fraction, or a float for
    inf, NaN and -0."""
    text = _text(params, name, default)
    t = text.strip().replace("_", "")
    for pattern, kind in _EXPONENTS:
        m = pattern.search(t)
        if not m:
            continue
        if kind == "power":
            base, exp = int(m.group(1)), int(m.group(2))
            size = abs(exp) * max(base.bit_length(), 1)
        else:
            exp = int(m.group(1))
            size = abs(exp) * (4 if kind == "decimal" else 1)  # 10^k has about 3.3 k bits
        if size > LIMITS["bits"]:
            raise ApiError(f"{name} = {text!r} is too large or too small for the explorer")
        break
    if "0x" in t.lower() and len(t) > 40:
        raise ApiError(f"{name} = {text!r}: a hex number of at most 40 characters, please")
    try:
        v = parse_number(text)
    except (TypeError, ValueError) as exc:
        raise ApiError(f"{name}: {exc}") from None
    if isinstance(v, Fraction) and v != 0:
        if max(v.numerator.bit_length(), v.denominator.bit_length()) > LIMITS["bits"]:
            raise ApiError(f"{name} = {text!r} has too many digits for the explorer")
        if abs(_binade(abs(v))) > LIMITS["binades"]:
            raise ApiError(
                f"{name} = {text!r} lies beyond 2^±{LIMITS['binades']}, far outside every format"
            )
    return v


def _code(params: Mapping[str, Any], f: Format) -> int:
    """A code of ``f``: ``bits`` (a string of 0/1, spaces allowed) or ``code`` (decimal or 0x
    hex)."""
    if "bits" in params:
        b = _text(params, "bits").replace(" ", "")
        if len(b) != f.bits or set(b) - {"0", "1"}:
            raise ApiError(f"bits must be {f.bits} characters 0 or 1 for {f.name}, got {b!r}")
        return int(b, 2)
    return _int(params, "code", _REQUIRED, 0, f.num_codes - 1)


# ---- exact numbers as text -----------------------------------------------------------------------
def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def _binade(q: Fraction) -> int:
    """floor(log2 q) for q > 0, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    return e - 1 if _pow2(e) > q else e


def exact_text(q: Fraction) -> str:
    """Every digit of q when its decimal expansion ends (``0.1``, ``-0.0000244140625``), else
    ``p/q`` (``1/3``)."""
    try:
        return exact_decimal(q)
    except ValueError:
        return f"{q.numerator}/{q.denominator}"


def approx_text(q: Fraction, digits: int = 4, sci: bool = True) -> str:
    """q to ``digits`` significant digits: ``-2.441e-5`` (``sci``), or ``0.333333`` (``%g``)."""
    if q == 0:
        return "0"
    with localcontext() as ctx:
        ctx.prec = digits + 10
        d = Decimal(q.numerator) / Decimal(q.denominator)
        return f"{d:.{digits - 1}e}" if sci else f"{d:.{digits}g}"


def _pow2_text(q: Fraction) -> str:
    """A power of two as ``2^k``."""
    k = q.numerator.bit_length() - 1 if q >= 1 else -(q.denominator.bit_length() - 1)
    return f"2^{k}"


def _is_pow2(q: Fraction) -> bool:
    n, d = q.numerator, q.denominator
    return n > 0 and n & (n - 1) == 0 and d & (d - 1) == 0


def _short(q: Fraction, decimal: str) -> str:
    """A value for a crowded place (a table cell, a label): the exact decimal when it is short,
    else ``2^k`` for a power of two, else 6 significant digits (``1.79769e+308``)."""
    if len(decimal) <= 16:
        return decimal
    sign = "-" if q < 0 else ""
    return f"{sign}{_pow2_text(abs(q))}" if _is_pow2(abs(q)) else approx_text(q, 6)


def _number_text(v: float) -> dict:
    """A float of a format: its repr (for drawing), its exact decimal and a short form."""
    if math.isnan(v):
        return {"stored": "nan", "decimal": "nan", "short": "nan"}
    if math.isinf(v):
        d = "-inf" if v < 0 else "inf"
        return {"stored": repr(v), "decimal": d, "short": d}
    q = Fraction(v)
    d = "-0" if v == 0 and math.copysign(1, v) < 0 else exact_decimal(q)
    return {"stored": repr(v), "decimal": d, "short": _short(q, d)}


def _limit(v: float) -> dict:
    """A limit of a format (max, min_normal, ...): exact decimal, short form and, if a power of
    two, 2^k."""
    out = _number_text(v)
    if _is_pow2(Fraction(v)):
        out["pow2"] = _pow2_text(Fraction(v))
    return out


# ---- one code ------------------------------------------------------------------------------------
def _hex(f: Format, code: int) -> str:
    return f"0x{code:0{(f.bits + 3) // 4}x}"


def _field_list(f: Format, code: int) -> list[dict]:
    s = format(code, f"0{f.bits}b")
    sign = int(f.signed)
    out = []
    if f.signed:
        out.append({"name": "sign", "bits": s[:1]})
    out.append({"name": "exponent", "bits": s[sign : sign + f.exp_bits],
                "biased": int(s[sign : sign + f.exp_bits], 2)})  # fmt: skip
    if f.man_bits:
        out.append({"name": "mantissa", "bits": s[sign + f.exp_bits :]})
    return out


def _neighbour(v: float, f: Format, up: bool, here: float) -> dict:
    """next_up / next_down as text, or why there is none."""
    if not math.isnan(v):
        code = int(to_bits(v, f))
        return {**_number_text(v), "hex": _hex(f, code), "code": str(code)}
    if math.isnan(here):
        why = "NaN has no neighbours"
    elif up and here == f.max:
        why = f"{_number_text(here)['decimal']} is the largest value (no inf)"
    elif not up and here == -f.max:
        why = f"{_number_text(here)['decimal']} is the lowest value (no -inf)"
    else:
        why = f"no value of {f.name} lies below {_number_text(here)['decimal']}"
    return {"none": why}


def describe_code(f: Format, code: int) -> dict:
    """Everything the page shows about one code of ``f`` (computed by fpsim.inspect.fields)."""
    value = float(from_bits(np.uint64(code), f, dtype=np.float64))
    out: dict[str, Any] = {
        "format": f.name,
        "code": str(code),
        "hex": _hex(f, code),
        "bits": format(code, f"0{f.bits}b"),
        "fields": _field_list(f, code),
        **_number_text(value),
    }
    if math.isnan(value):
        canonical = f.nan_code
        note = "NaN: not a number; its exponent and mantissa bits carry no value"
        if canonical is not None and code & ~(1 << (f.bits - 1)) != canonical:
            note += f" (fpsim writes the canonical NaN {_hex(f, canonical)}; payloads are not kept)"
        out.update(cls="nan", form="nan", integer_form=None, ulp=None, exponent=None,
                   explain=note, next_down={"none": "NaN has no neighbours"},
                   next_up={"none": "NaN has no neighbours"})  # fmt: skip
        return out
    fl = fields(value, f)
    if fl.code != code:
        raise ApiError(f"internal: {_hex(f, code)} decodes to {value!r}, which encodes as {fl.hex}",
                       500)  # fmt: skip
    integer_form = None
    if fl.value is not None:
        m_int = fl.significand * (1 << f.man_bits)  # the significand as an integer: value = M × ulp
        e_int = fl.exponent - f.man_bits
        signed_m = -int(m_int) if fl.sign else int(m_int)
        integer_form = {"m": str(signed_m), "e": e_int, "text": f"{signed_m} × 2^{e_int}"}
    out.update(
        cls=fl.cls,
        form=fl.form,
        integer_form=integer_form,
        exponent=fl.exponent,
        ulp=None if fl.ulp is None else {"decimal": exact_decimal(fl.ulp),
                                         "pow2": _pow2_text(fl.ulp)},  # fmt: skip
        next_down=_neighbour(fl.next_down, f, False, value),
        next_up=_neighbour(fl.next_up, f, True, value),
        explain=str(fl),
    )
    return out


# ---- the input and its rounding ----------------------------------------------------------------
def _input_info(text: str, x: Fraction | float) -> dict:
    if isinstance(x, float):  # inf, nan, -0.0
        d = _number_text(x)["decimal"]
        return {"text": text, "exact": d, "float64": repr(x), "float64_decimal": d,
                "float64_is_exact": True}  # fmt: skip
    try:
        xf = float(x)
    except OverflowError:
        xf = math.inf if x > 0 else -math.inf
    return {
        "text": text,
        "exact": exact_text(x),
        "approx": approx_text(x, 6, sci=False),
        "float64": repr(xf),
        "float64_decimal": _number_text(xf)["decimal"],
        "float64_is_exact": math.isfinite(xf) and Fraction(xf) == x,
    }


def _error(value: float, x: Fraction | float, f: Format) -> dict | None:
    """stored - input, exactly, and in ulps of the format at the input (None unless both are
    finite numbers)."""
    if not isinstance(x, Fraction) or not math.isfinite(value):
        return None
    err = Fraction(value) - x
    u = Fraction(ulp(x, f))  # the quantum of the binade holding the exact input
    return {
        "exact": exact_text(err),
        "approx": approx_text(err),
        "ulps": approx_text(err / u, 4, sci=False),
        "relative": None if x == 0 else approx_text(err / x),
    }


def _rounded(x: Fraction | float, f: Format, mode: str, subnormals: bool, saturate: bool,
             seed: int) -> dict:  # fmt: skip
    """x rounded to f in one mode: the code's description and the error, or why there is no
    code (NaN in a format without NaN)."""
    try:
        code = int(to_bits(x, f, mode, subnormals, saturate, seed))
    except ValueError as exc:
        return {"mode": mode, "no_code": str(exc)}
    d = describe_code(f, code)
    value = float(from_bits(np.uint64(code), f, np.float64))
    return {"mode": mode, **d, "error": _error(value, x, f)}


def _stochastic(x: Fraction | float, f: Format, subnormals: bool, saturate: bool) -> dict | None:
    """The two results stochastic rounding can give, each with its probability.

    x lies between two points of the format's grid, ``k q`` and ``(k + 1) q`` (q the quantum
    of x's binade): rounding goes away from zero with probability ``p = frac(|x| / q)``, the
    part of a quantum x lies beyond the point toward zero. fpsim draws 62 random bits r and goes
    away when ``r < ceil(p 2^62)``: probability ``ceil(p 2^62) / 2^62``, p rounded up to a
    multiple of 2^-62. The results themselves are those of the directed modes (overflow and
    flushing apply to them as to any result): away from zero as ``up``/``down`` give it, toward
    zero as ``toward_zero`` does, unless that grid point too lies past the largest value (then
    both outcomes overflow alike).
    """
    if not isinstance(x, Fraction) or x == 0:
        return None
    a = abs(x)
    q = _pow2(max(_binade(a), f.emin) - f.man_bits)
    n = a / q
    p = n - n.numerator // n.denominator  # the fraction of a quantum beyond the lower point
    if p == 0:
        return None  # on the grid: no randomness
    away_mode = "up" if x > 0 else "down"
    away = round_to(x, f, away_mode, subnormals, saturate)
    toward_zero_point = (n.numerator // n.denominator) * q
    if toward_zero_point > Fraction(f.max):
        toward = away  # both grid points are past max: both overflow as stochastic does
    else:
        toward = round_to(x, f, "toward_zero", subnormals, saturate)
    n62 = -((-p.numerator * 2**62) // p.denominator)  # ceil(p 2^62)
    outcomes = [(toward, 1 - p, 2**62 - n62), (away, p, n62)]
    if x < 0:
        outcomes.reverse()  # lower value first
    merged: list[dict] = []
    for v, prob, n in outcomes:
        entry = {
            **_number_text(v),
            "p": exact_text(prob),
            "p_approx": approx_text(prob, 6, sci=False),
            "p_fpsim": exact_text(Fraction(n, 2**62)),
            "p_fpsim_bits": f"{n}/2^62",
        }
        try:
            entry["hex"] = _hex(f, int(to_bits(v, f)))
        except ValueError:
            entry["hex"] = None
        if merged and merged[-1]["stored"] == entry["stored"]:
            # one result either way (both overflow, or both flush to the same zero)
            last = merged[-1]
            last.update(p="1", p_approx="1", p_fpsim="1", p_fpsim_bits="2^62/2^62")
            continue
        merged.append(entry)
    return {
        "fraction": exact_text(p),
        "outcomes": merged,
        "note": (
            f"x lies {exact_text(p)} of a quantum ({_pow2_text(q)}) beyond the grid point "
            f"toward zero, so it rounds away from zero with probability {exact_text(p)} (fpsim "
            "draws 62 random bits: its probabilities are multiples of 2^-62, N/2^62)."
        ),
    }


def _flag_notes(x: Fraction | float, f: Format, opts: dict, result: float) -> list[str]:
    """What subnormals=False or saturate=True changed, found by rounding without them."""
    notes = []
    if not opts["subnormals"]:
        plain = round_to(x, f, opts["rounding"], True, opts["saturate"], opts["seed"])
        if plain != result and result == 0:
            notes.append(
                f"subnormals=False: the subnormal result {_number_text(plain)['decimal']} is "
                f"flushed to {_number_text(result)['decimal']}"
            )
    if opts["saturate"]:
        plain = round_to(x, f, opts["rounding"], opts["subnormals"], False, opts["seed"])
        if not (math.isnan(plain) and math.isnan(result)) and plain != result:
            notes.append(
                f"saturate=True: the result {_number_text(plain)['decimal']} (overflow) "
                f"becomes {_number_text(result)['decimal']}"
            )
    return notes


def round_value(params: Mapping[str, Any]) -> dict:
    """``x`` (text, read exactly) rounded to ``format``: in the chosen mode (``result``), in
    every deterministic mode (``modes``), and the outcomes of stochastic rounding with their
    exact probabilities (``stochastic``, None when x is on the grid or not finite)."""
    f = _format(params)
    opts = _rounding(params)
    text = _text(params, "x")
    x = _number(params, "x")
    result = _rounded(x, f, opts["rounding"], opts["subnormals"], opts["saturate"], opts["seed"])
    sub, sat = opts["subnormals"], opts["saturate"]
    modes = [_rounded(x, f, m, sub, sat, 0) for m in DETERMINISTIC_MODES]
    for m in modes:
        m["label"] = MODE_LABELS[m["mode"]]
    value = round_to(x, f, **opts)
    # fpsim.explain's account of the typed number: it knows the rounding mode but not the two
    # options, so it is given with the default options only
    account = None
    if opts["subnormals"] and not opts["saturate"] and opts["rounding"] != "stochastic":
        account = fpsim.explain(x, f, opts["rounding"])
        if "no_code" not in result:
            result["explain"] = account
    return {
        "format": f.name,
        "input": _input_info(text, x),
        **opts,
        "result": result,
        "modes": modes,
        "stochastic": _stochastic(x, f, opts["subnormals"], opts["saturate"]),
        "notes": _flag_notes(x, f, opts, value),
        "explain": account,
    }


# ---- formats -------------------------------------------------------------------------------------
def _format_info(f: Format) -> dict:
    dtype = f.dtype
    e_q = f.emin - f.man_bits
    has_zero = f.has_zero
    return {
        "name": f.name,
        "call": f.call_text,
        "bits": f.bits,
        "exp_bits": f.exp_bits,
        "man_bits": f.man_bits,
        "bias": f.bias,
        "signed": f.signed,
        "has_inf": f.has_inf,
        "nan": f.nan,
        "has_subnormals": f.has_subnormals,
        "has_zero": has_zero,
        "has_negzero": f.has_negzero,
        "style": f.style,
        "precision": f.precision,
        "emin": f.emin,
        "emax": f.emax,
        "num_codes": str(f.num_codes),
        "specials": describe_specials(f),
        "dtype": None if dtype is None else str(dtype),
        "max": _limit(f.max),
        "min_normal": _limit(f.min_normal),
        "smallest_subnormal": _limit(f.smallest_subnormal) if has_zero else None,
        "eps": _limit(f.eps),
        "small": f.bits <= LIMITS["table_bits"],
        # log2 of the zone boundaries of round to nearest (for drawing the loss-scale panel)
        "log2_smallest": e_q if has_zero else f.emin,
        "log2_min_normal": f.emin,
        "log2_max": math.log2(f.max),
    }


def formats(params: Mapping[str, Any]) -> dict:
    """Every registered format, the rounding modes, and the limits the server keeps."""
    return {
        "formats": [_format_info(get_format(n)) for n in list_formats()],
        "rounding_modes": [{"mode": m, "label": MODE_LABELS[m]} for m in ROUNDING_MODES],
        "styles": ["ieee", "fn", "fnuz", "finite"],
        "examples": ["p3109_k8p3se", "p3109_k8p4se", "e5m10_b20", "Format(4, 3, bias=5)",
                     "Format(3, 2, style='fn')"],  # fmt: skip
        "limits": LIMITS,
        "version": fpsim.__version__,
    }


def format_info(params: Mapping[str, Any]) -> dict:
    """One format's layout, properties and limits (``format``: any name get_format reads,
    ``Format(...)`` text included)."""
    return _format_info(_format(params))


def code_info(params: Mapping[str, Any]) -> dict:
    """One code of ``format`` (``code`` or ``bits``): fields, class, exact value, ulp,
    neighbours."""
    f = _format(params)
    return describe_code(f, _code(params, f))


def values(params: Mapping[str, Any]) -> dict:
    """Every code of a format of at most 8 bits (fpsim.inspect.all_values), by code."""
    f = _format(params)
    if f.bits > LIMITS["table_bits"]:
        raise ApiError(
            f"all values are listed for formats of at most {LIMITS['table_bits']} bits "
            f"(256 codes); {f.name} has {f.bits} bits ({f.num_codes} codes): use the number line "
            "around a value instead"
        )
    rows = []
    for r in all_values(f):
        code, v = int(r["code"]), float(r["value"])
        rows.append({"code": str(code), "hex": _hex(f, code), "bits": str(r["bits"]),
                     "cls": str(r["cls"]), **_number_text(v)})  # fmt: skip
    return {"format": f.name, "values": rows}


def neighbours(params: Mapping[str, Any]) -> dict:
    """The values around a code (``code`` or ``bits``), ``count`` on each side, in order: the
    number line around a value, walked with fpsim.next_down / next_up."""
    f = _format(params)
    code = _code(params, f)
    count = _int(params, "count", 8, 1, LIMITS["neighbours"])
    v = float(from_bits(np.uint64(code), f, dtype=np.float64))
    if math.isnan(v):
        return {"format": f.name, "values": [], "index": None}
    below, above = [], []
    for out, step in ((below, next_down), (above, next_up)):
        w = v
        for _ in range(count):
            w = float(step(w, f))
            if math.isnan(w) or (math.isinf(w) and math.isinf(v)):
                break
            out.append(w)
            if math.isinf(w):
                break
    line = [*reversed(below), v, *above]
    if v == 0:  # ±0 are one point of the line; show the one of this code
        line = [w for w in line if w != 0 or w is v]
    rows = [{**_number_text(w), "hex": _hex(f, int(to_bits(w, f)))} for w in line]
    return {"format": f.name, "values": rows, "index": len(below)}


# ---- arithmetic ----------------------------------------------------------------------------------
_OPS: dict[str, tuple[str, int]] = {
    "+": ("add", 2), "-": ("sub", 2), "*": ("mul", 2), "/": ("div", 2), "fma": ("fma", 3),
    "sqrt": ("sqrt", 1),
}  # fmt: skip


def _exact_result(op: str, xs: list[float]) -> tuple[Fraction | None, str]:
    """The exact result of the operation on the (rounded) operands, and its text."""
    if not all(math.isfinite(v) for v in xs):
        return None, "not finite: IEEE 754 defines the result"
    q = [Fraction(v) for v in xs]
    if op == "/" and q[1] == 0:
        return None, "division by zero: IEEE 754 defines the result"
    if op == "sqrt":
        if q[0] < 0:
            return None, "square root of a negative number: NaN"
        n, d = q[0].numerator, q[0].denominator
        rn, rd = math.isqrt(n), math.isqrt(d)
        if rn * rn == n and rd * rd == d:
            r = Fraction(rn, rd)
            return r, exact_text(r)
        return None, f"irrational (≈ {approx_text(Fraction(math.sqrt(xs[0])), 17)})"
    r = {"+": lambda: q[0] + q[1], "-": lambda: q[0] - q[1], "*": lambda: q[0] * q[1],
         "/": lambda: q[0] / q[1], "fma": lambda: q[0] * q[1] + q[2]}[op]()  # fmt: skip
    return r, exact_text(r)


def arithmetic(params: Mapping[str, Any]) -> dict:
    """``a op b`` (``op``: + - * / fma sqrt; fma computes ``a * b + c``) in ``format``, with
    the operands first rounded to the format (nearest even), the result computed by fpsim.arith
    (one rounding, in the chosen mode) and fpsim.explain_op's account of the rounding."""
    f = _format(params)
    opts = _rounding(params)
    op = _text(params, "op", "+").strip()
    if op not in _OPS:
        raise ApiError(f"unknown op {op!r}; choose one of {' '.join(_OPS)}")
    name, arity = _OPS[op]
    operands, notes = [], []
    for label in "abc"[:arity]:
        x = _number(params, label)
        v = round_to(x, f)  # nearest even: the operand as a value of the format
        if isinstance(x, Fraction) and (not math.isfinite(v) or Fraction(v) != x):
            notes.append(
                f"{label} = {_text(params, label)} is not a value of {f.name}: rounded to nearest "
                f"(ties to even) first, to {_number_text(v)['decimal']}"
            )
        try:
            code = int(to_bits(v, f))
        except ValueError as exc:
            raise ApiError(f"{label}: {exc}") from None
        operands.append({"name": label, "text": _text(params, label), **describe_code(f, code)})
    xs = [float(from_bits(np.uint64(int(o["code"])), f, np.float64)) for o in operands]
    fn: Callable = getattr(arith, name)
    kwargs = {k: opts[k] for k in ("rounding", "subnormals", "saturate", "seed")}
    try:
        value = float(fn(*xs, f, **kwargs))
        b = None if arity == 1 else (xs[1] if arity == 2 else (xs[1], xs[2]))
        account = fpsim.explain_op(xs[0], op, b, f, opts["rounding"], subnormals=opts["subnormals"],
                                   saturate=opts["saturate"], seed=opts["seed"])  # fmt: skip
    except (ValueError, TypeError) as exc:
        raise ApiError(f"{f.name}: {exc}") from None
    exact, exact_shown = _exact_result(op, xs)
    try:
        result = describe_code(f, int(to_bits(value, f)))
    except ValueError as exc:  # NaN in a format without NaN (sqrt(-1) in fp4)
        result = {"no_code": str(exc), **_number_text(value)}
    result["error"] = _error(value, exact, f) if exact is not None else None
    return {
        "format": f.name,
        "op": op,
        **opts,
        "operands": operands,
        "exact": exact_shown,
        "result": result,
        "explain": account,
        "notes": notes,
    }


# ---- loss scaling --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def _histogram(f: Format, center: float, spread: float, n: int, seed: int) -> RangeHistogram:
    """The histogram of ``n`` gradient magnitudes: log2|g| ~ Normal(center, spread) (a
    log-normal distribution), drawn with numpy's default_rng(seed)."""
    rng = np.random.default_rng(seed)
    g = np.exp2(center + spread * rng.standard_normal(n))
    h = RangeHistogram(formats=(f,))
    h.add(g)
    return h


def _zone_texts(h: RangeHistogram, f: Format, scale: float, subnormals: bool) -> dict:
    z = h.zones(f, scale, subnormals)
    n = h.count
    return {k: {"count": v, "fraction": exact_text(Fraction(v, n)),
                "percent": f"{100 * v / n:.3f}%"} for k, v in z.items()}  # fmt: skip


def loss_scale(params: Mapping[str, Any]) -> dict:
    """Gradient magnitudes (log-normal: ``log2|g| ~ Normal(center, spread)``, ``n`` of them,
    ``seed``) against ``format``'s zones, unscaled and multiplied by ``2^log2_scale``: the zone
    counts of fpsim.stats.RangeHistogram (round to nearest even; ``subnormals`` as chosen)."""
    f = _format(params)
    if not f.has_zero:
        raise ApiError(f"{f.name} has no zero, so nothing underflows: the loss-scale panel needs "
                       "a format with a zero")  # fmt: skip
    k = _int(params, "log2_scale", 0, -LIMITS["log2_scale"], LIMITS["log2_scale"])
    center = _float(params, "center", -28.0, -200.0, 200.0)
    spread = _float(params, "spread", 3.0, 0.1, 20.0)
    n = _int(params, "n", 100_000, 1, LIMITS["samples"])
    seed = _int(params, "seed", 0, 0, 2**62)
    subnormals = _bool(params, "subnormals", True)
    h = _histogram(f, center, spread, n, seed)
    exps, counts = h.bins()
    try:
        best = suggest_scale(h, f, subnormals)
        suggestion = {"lo": best.lo, "hi": best.hi, "underflow_percent":
                      f"{100 * best.underflow_fraction:.3f}%"}  # fmt: skip
    except ValueError as exc:
        suggestion = {"none": str(exc)}
    overflow_to = "±max (saturated)" if not (f.has_inf or f.has_nan) else (
        "±inf" if f.has_inf else "NaN")  # fmt: skip
    return {
        "format": f.name,
        "log2_scale": k,
        "scale": f"2^{k}",
        "n": n,
        "bins": [{"log2": int(e), "count": int(c)} for e, c in zip(exps, counts, strict=True)],
        "zones": _zone_texts(h, f, 2.0**k, subnormals),
        "unscaled": _zone_texts(h, f, 1.0, subnormals),
        "suggested": suggestion,
        "boundaries": {
            "underflow_below": f"{_pow2_text(_pow2(f.emin - f.man_bits - 1))} (half the smallest "
            "subnormal)" if subnormals else f"{_pow2_text(_pow2(f.emin))} (the smallest normal, "
            "less half a subnormal step: flushed below)",
            "normal_from": _pow2_text(_pow2(f.emin)),
            "max": _number_text(f.max)["short"],
            "overflow_to": overflow_to,
        },
        "format_info": _format_info(f),
    }


# ---- dispatch ------------------------------------------------------------------------------------
ENDPOINTS: dict[str, Callable[[Mapping[str, Any]], dict]] = {
    "formats": formats,
    "format": format_info,
    "code": code_info,
    "round": round_value,
    "values": values,
    "neighbours": neighbours,
    "arith": arithmetic,
    "lossscale": loss_scale,
}


def call(endpoint: str, params: Mapping[str, Any]) -> dict:
    """Answer one request: ``ENDPOINTS[endpoint](params)``; ApiError for a bad request (404
    for an unknown endpoint)."""
    fn = ENDPOINTS.get(endpoint)
    if fn is None:
        raise ApiError(f"unknown endpoint {endpoint!r}; known: {', '.join(ENDPOINTS)}", 404)
    if not isinstance(params, Mapping):
        raise ApiError("the request body must be a JSON object of parameters")
    return fn(params)
