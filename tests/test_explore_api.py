"""The explorer's JSON API (fpsim.explore.api) against independent oracles: exact Fraction
rounding and decoding from the definitions (tests/oracle.py), numpy float16 / ml_dtypes, numpy's
float16 arithmetic, and Decimal's exact reading of a float. Bad requests get a 4xx with a clear
message (tests/test_explore_server.py checks the same through HTTP)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import ML_DTYPES, numpy_class, ref_decode, ref_encode, ref_round_exact, ref_values
from oracle import exact_decimal_oracle as dec
from oracle import same_float as same

import fpsim
from fpsim.explore import api
from fpsim.explore.api import ApiError

MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down")


def frac_text(q: Fraction) -> str:
    """q as the API writes it: every digit when the decimal ends (d = 2^a 5^b: q = n 10^k / 10^k
    with k = max(a, b)), else p/q."""
    n, d = q.numerator, q.denominator
    a = b = 0
    while d % 2 == 0:
        d, a = d // 2, a + 1
    while d % 5 == 0:
        d, b = d // 5, b + 1
    if d != 1:
        return f"{q.numerator}/{q.denominator}"
    k = max(a, b)
    digits = str(abs(n) * 10**k // q.denominator).rjust(k + 1, "0")
    whole, frac = digits[: len(digits) - k], digits[len(digits) - k :].rstrip("0")
    return ("-" if n < 0 else "") + (f"{whole}.{frac}" if frac else whole)


def stored(s: str) -> float:
    return float(s)  # "inf", "-0.0", "nan" read back as Python writes them


# The typed texts and their exact values, worked out here without fpsim's parser.
INPUTS = {
    "0.1": Fraction(1, 10),
    "1/3": Fraction(1, 3),
    "-7/3": Fraction(-7, 3),
    "65520": Fraction(65520),
    "65519.99": Fraction(6551999, 100),
    "2**-25": Fraction(1, 2**25),
    "-2**-25": Fraction(-1, 2**25),
    "1e-8": Fraction(1, 10**8),
    "448": Fraction(448),
    "500": Fraction(500),
    "1e5": Fraction(10**5),
    "0x1.8p-3": Fraction(3, 16),
    "1.00048828125000000001": Fraction(100048828125000000001, 10**20),
    "3": Fraction(3),
    "-0.0": -0.0,
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
}
FORMATS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp6_e3m2", "fp4_e2m1", "e8m0",
           "p3109_k8p3se", "Format(4, 3, bias=5)", "tf32"]  # fmt: skip


def expected_error(v: float, x) -> str | None:
    if not isinstance(x, Fraction) or not math.isfinite(v):
        return None
    return frac_text(Fraction(v) - x)


def check_rounded(entry: dict, x, fmt: str, mode: str, subnormals: bool, saturate: bool) -> None:
    f = fpsim.get_format(fmt)
    want = ref_round_exact(x, f, mode, subnormals, saturate)
    if math.isnan(want) and not f.has_nan:
        assert "no code" in entry["no_code"] or "no NaN" in entry["no_code"], entry
        return
    assert "no_code" not in entry, entry
    assert same(stored(entry["stored"]), want), (fmt, mode, x, entry["stored"], want)
    assert entry["decimal"] == ("-0" if same(want, -0.0) else dec(want))
    code = int(entry["code"])
    assert entry["hex"] == f"0x{code:0{(f.bits + 3) // 4}x}"
    assert entry["bits"] == format(code, f"0{f.bits}b")
    if not math.isnan(want):
        assert code == ref_encode(want, f)
    else:
        assert math.isnan(ref_decode(code, f))
    err = entry["error"]
    assert (err and err["exact"]) == expected_error(want, x) or (err is None and expected_error(want, x) is None)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("text", list(INPUTS))
def test_round_every_mode_against_the_fraction_oracle(text, fmt):
    x = INPUTS[text]
    r = api.call("round", {"format": fmt, "x": text})
    assert r["input"]["text"] == text
    if isinstance(x, Fraction):
        assert r["input"]["exact"] == frac_text(x)
        assert r["input"]["float64_is_exact"] == (Fraction(float(x)) == x)
        assert r["input"]["float64_decimal"] == dec(float(x))
    assert [m["mode"] for m in r["modes"]] == list(MODES)
    for entry in r["modes"]:
        check_rounded(entry, x, fmt, entry["mode"], True, False)
    check_rounded(r["result"], x, fmt, "nearest_even", True, False)


@pytest.mark.parametrize("subnormals,saturate", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("fmt", ["fp16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "p3109_k8p3se"])
def test_round_options_against_the_oracle(fmt, subnormals, saturate):
    for text in ("2**-25", "-1e-8", "65520", "500", "1e5", "-inf", "0.1", "3e-7", "7e4"):
        x = INPUTS[text] if text in INPUTS else Fraction(text)
        for mode in MODES:
            r = api.call("round", {"format": fmt, "x": text, "rounding": mode,
                                   "subnormals": subnormals, "saturate": saturate})  # fmt: skip
            check_rounded(r["result"], x, fmt, mode, subnormals, saturate)
            for entry in r["modes"]:
                check_rounded(entry, x, fmt, entry["mode"], subnormals, saturate)


def test_round_notes_say_what_the_options_changed():
    r = api.call("round", {"format": "fp16", "x": "2**-20", "subnormals": "false"})
    assert r["result"]["decimal"] == "0"
    assert r["notes"] == [f"subnormals=False: the subnormal result {dec(2.0**-20)} is flushed to 0"]
    r = api.call("round", {"format": "fp16", "x": "1e5", "saturate": "true"})
    assert r["result"]["decimal"] == "65504"
    assert r["notes"] == ["saturate=True: the result inf (overflow) becomes 65504"]


@settings(max_examples=150, deadline=None)
@given(
    num=st.integers(-(2**70), 2**70),
    den=st.integers(1, 2**70),
    fmt=st.sampled_from(FORMATS),
    mode=st.sampled_from(MODES),
    subnormals=st.booleans(),
    saturate=st.booleans(),
)
def test_round_random_fractions_against_the_oracle(num, den, fmt, mode, subnormals, saturate):
    x = Fraction(num, den)
    r = api.call("round", {"format": fmt, "x": f"{num}/{den}", "rounding": mode,
                           "subnormals": subnormals, "saturate": saturate})  # fmt: skip
    check_rounded(r["result"], x, fmt, mode, subnormals, saturate)


# ---- codes ---------------------------------------------------------------------------------------
def ml_value(fmt: str, code: int) -> float:
    """The value of a code by ml_dtypes / numpy (its own decoding, not fpsim's)."""
    dt = np.dtype(ML_DTYPES[fmt])
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
    return float(np.array([code], width).view(dt).astype(np.float64)[0])


def ml_class(fmt: str, v: float) -> str:
    return numpy_class(v, float(ml_dtypes.finfo(ML_DTYPES[fmt]).smallest_normal))


# 6-bit and 4-bit ml_dtypes are stored one per byte: their codes are the low bits
CODE_FORMATS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3_ieee", "fp8_e4m3fnuz",
                "fp8_e5m2fnuz", "fp8_e4m3b11fnuz", "fp8_e3m4", "fp6_e2m3", "fp6_e3m2",
                "fp4_e2m1", "e8m0"]  # fmt: skip


@pytest.mark.parametrize("fmt", CODE_FORMATS)
def test_code_values_classes_and_ulps_against_ml_dtypes(fmt):
    f = fpsim.get_format(fmt)
    rng = np.random.default_rng(0)
    codes = range(f.num_codes) if f.bits <= 8 else rng.integers(0, f.num_codes, 300).tolist()
    for code in codes:
        d = api.call("code", {"format": fmt, "code": str(code)})
        v = ml_value(fmt, code)
        assert same(stored(d["stored"]), v) and d["decimal"] == dec(v), (fmt, code)
        assert d["hex"] == f"0x{code:0{(f.bits + 3) // 4}x}" and d["code"] == str(code)
        assert "".join(x["bits"] for x in d["fields"]) == format(code, f"0{f.bits}b")
        cls = ml_class(fmt, v) if f.has_subnormals else ("nan" if math.isnan(v) else "normal")
        assert d["cls"] == cls, (fmt, code)
        if math.isfinite(v):
            # ulp: the quantum of the binade (the subnormal one below the normal range)
            a = abs(Fraction(v))
            e = a.numerator.bit_length() - a.denominator.bit_length() if a else f.emin
            if a and Fraction(2) ** e > a:
                e -= 1
            u = Fraction(2) ** (max(e, f.emin) - f.man_bits)
            assert d["ulp"]["decimal"] == frac_text(u)
            m = int(d["integer_form"]["m"])
            assert Fraction(m) * Fraction(2) ** d["integer_form"]["e"] == Fraction(v)
            assert Fraction(2) ** d["integer_form"]["e"] == u


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp4_e2m1", "e8m0",
                                 "p3109_k8p3se", "fp6_e2m3"])  # fmt: skip
def test_neighbours_against_the_sorted_values(fmt):
    """next_down / next_up of every code, and the number line around it, against the sorted
    list of every value (decoded from the definitions)."""
    f = fpsim.get_format(fmt)
    vals = ref_values(f)
    order = sorted({v for v, _ in vals if v != 0 or True})  # distinct values, -0 == +0 merged
    for code in range(f.num_codes):
        v = ref_decode(code, f)
        d = api.call("code", {"format": fmt, "code": code})
        if math.isnan(v):
            assert d["next_up"] == {"none": "NaN has no neighbours"}
            continue
        i = order.index(v)
        below = order[i - 1] if i > 0 else None
        above = order[i + 1] if i + 1 < len(order) else None
        if math.isinf(v):  # IEEE 754's nextUp(+inf) = +inf, nextDown(-inf) = -inf
            below, above = (below, v) if v > 0 else (v, above)
        for key, want in (("next_down", below), ("next_up", above)):
            got = d[key]
            if want is None:
                assert "none" in got, (fmt, code, key, got)
            else:
                assert stored(got["stored"]) == want, (fmt, code, key, got, want)
                assert int(got["code"]) == ref_encode(want, f) or want == 0
        line = api.call("neighbours", {"format": fmt, "code": code, "count": 3})
        got = [stored(x["stored"]) for x in line["values"]]
        lo, hi = max(i - 3, 0), i + 4
        want_line = order[lo:hi]
        if math.isinf(v):  # nothing beyond ±inf
            want_line = order[lo : i + 1] if v > 0 else order[i:hi]
        assert got == want_line, (fmt, code, got, want_line)
        assert got[line["index"]] == v


def test_neighbours_of_fp16_against_numpy_nextafter():
    h = np.float16
    for code in [0x0000, 0x8000, 0x0001, 0x3C00, 0x2E66, 0x7BFF, 0x7C00, 0xFBFF]:
        v = np.array([code], np.uint16).view(h)[0]
        r = api.call("neighbours", {"format": "fp16", "code": code, "count": 4})
        got = [stored(x["stored"]) for x in r["values"]]
        i = r["index"]
        w = v
        for k in range(1, 5):
            if np.isinf(w) and w > 0:
                break
            w = np.nextafter(w, h(np.inf))
            assert got[i + k] == float(w), (code, k)
            if np.isinf(w):
                break
        w = v
        for k in range(1, 5):
            if np.isinf(w) and w < 0:
                break
            w = np.nextafter(w, h(-np.inf))  # numpy steps over -0 as fpsim does: one zero
            assert got[i - k] == float(w), (code, -k)
            if np.isinf(w):
                break


def test_nan_codes_and_bits_parameter():
    d = api.call("code", {"format": "fp16", "code": "0x7e01"})
    assert d["cls"] == "nan" and d["decimal"] == "nan" and "0x7e00" in d["explain"]
    d = api.call("code", {"format": "fp16", "bits": "0 01111 0000000000"})
    assert d["decimal"] == "1" and d["integer_form"]["text"] == "1024 × 2^-10"
    d = api.call("code", {"format": "fp8_e4m3fnuz", "code": 0x80})
    assert d["cls"] == "nan"  # the code -0 would have
    d = api.call("code", {"format": "e8m0", "code": 0})
    assert d["decimal"] == dec(2.0**-127) and d["cls"] == "normal"


# ---- all values ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp8_e3m4", "fp6_e3m2", "fp4_e2m1", "e8m0",
                                 "fp8_e4m3b11fnuz"])  # fmt: skip
def test_values_table_against_ml_dtypes(fmt):
    r = api.call("values", {"format": fmt})
    f = fpsim.get_format(fmt)
    assert len(r["values"]) == f.num_codes
    for code, row in enumerate(r["values"]):
        v = ml_value(fmt, code)
        assert row["code"] == str(code) and same(stored(row["stored"]), v) and row["decimal"] == dec(v)
        assert row["bits"].replace(" ", "") == format(code, f"0{f.bits}b")


def test_values_refuses_wide_formats():
    with pytest.raises(ApiError, match=r"at most 8 bits \(256 codes\); fp16 has 16 bits \(65536 codes\)"):
        api.call("values", {"format": "fp16"})


# ---- stochastic rounding -------------------------------------------------------------------------
STOCHASTIC_CASES = [
    ("fp16", "1/3", {}),
    ("fp16", "-1/3", {}),
    ("fp16", "0.1", {}),
    ("fp16", "65520", {}),                      # up: overflow to inf
    ("fp16", "70000", {}),                      # both grid points past max
    ("fp16", "0x3p-26", {}),                    # below the smallest subnormal: 0 or 2^-24
    ("fp16", "0x3p-25", {"subnormals": False}),  # both neighbours subnormal: flushed
    ("fp8_e4m3", "460", {}),                    # 448 or NaN (no inf)
    ("fp8_e4m3", "460", {"saturate": True}),
    ("fp8_e4m3fnuz", "-2**-12", {}),            # 0 (no -0: +0) or -2^-10
    ("e8m0", "3", {}),
    ("e8m0", "2**-130", {}),                    # no zero: the smallest value either way
    ("fp4_e2m1", "5.5", {}),
    ("bf16", "1.00390625", {}),                 # halfway
]


def exact_of(text: str) -> Fraction:
    if text.startswith("0x"):
        a, b = text[2:].split("p")
        return Fraction(int(a, 16)) * Fraction(2) ** int(b)
    if text.startswith("2**") or text.startswith("-2**"):
        return (-1 if text[0] == "-" else 1) * Fraction(2) ** int(text.split("**")[1])
    return Fraction(text)


@pytest.mark.parametrize("fmt,text,opts", STOCHASTIC_CASES)
def test_stochastic_outcomes_and_exact_probabilities(fmt, text, opts):
    """The outcomes are the oracle's toward-zero and away-from-zero results; the probability of
    going away is the fraction of a quantum beyond the grid point toward zero, exactly; and
    fpsim's stochastic rounding gives exactly these outcomes at these rates."""
    f = fpsim.get_format(fmt)
    x = exact_of(text)
    sub, sat = opts.get("subnormals", True), opts.get("saturate", False)
    r = api.call("round", {"format": fmt, "x": text, "rounding": "stochastic", **opts})
    s = r["stochastic"]
    # the oracle: the grid points around |x| (unbounded above), then what rounding makes of them
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = Fraction(2) ** (max(e, f.emin) - f.man_bits)
    k = math.floor(a / q)
    p_away = a / q - k
    toward = ref_round_exact(x, f, "toward_zero", sub, sat)
    away = ref_round_exact(x, f, "up" if x > 0 else "down", sub, sat)
    if k * q > Fraction(f.max):
        toward = away  # past max both overflow alike
    want = [(toward, 1 - p_away), (away, p_away)]
    if x < 0:
        want.reverse()
    if same(want[0][0], want[1][0]) or (math.isnan(want[0][0]) and math.isnan(want[1][0])):
        want = [(want[0][0], Fraction(1))]
    got = [(stored(o["stored"]), Fraction(o["p"])) for o in s["outcomes"]]
    assert len(got) == len(want), (got, want)
    for (gv, gp), (wv, wp) in zip(got, want, strict=True):
        assert same(gv, wv) and gp == wp, (got, want)
    assert s["fraction"] == frac_text(p_away)
    n62 = math.ceil(p_away * 2**62)
    if len(want) == 2:
        fp = [Fraction(o["p_fpsim"]) for o in s["outcomes"]]
        assert fp == ([1 - Fraction(n62, 2**62), Fraction(n62, 2**62)][:: -1 if x < 0 else 1])
    # fpsim's own stochastic rounding, over many seeds: only these outcomes, at these rates
    draws = [fpsim.round_to(x, f, "stochastic", sub, sat, seed=s) for s in range(600)]
    for w, p in want:
        hits = sum(same(d, w) or (math.isnan(d) and math.isnan(w)) for d in draws)
        sd = math.sqrt(600 * float(p) * (1 - float(p))) + 1e-9
        assert abs(hits - 600 * float(p)) <= 5 * sd + 1, (w, hits, float(p))
    assert sum(any(same(d, w) or (math.isnan(d) and math.isnan(w)) for w, _ in want) for d in draws) == 600


def test_no_stochastic_section_on_the_grid():
    assert api.call("round", {"format": "fp16", "x": "0.5"})["stochastic"] is None
    assert api.call("round", {"format": "fp16", "x": "nan"})["stochastic"] is None


# ---- arithmetic ----------------------------------------------------------------------------------
fp16_values = st.integers(0, 0xFFFF).map(lambda c: float(np.array([c], np.uint16).view(np.float16)[0])).filter(math.isfinite)


@settings(max_examples=120, deadline=None)
@given(a=fp16_values, b=fp16_values, op=st.sampled_from(["+", "-", "*", "/"]))
def test_arith_fp16_against_numpy_float16(a, b, op):
    """numpy computes float16 arithmetic in float32 and rounds once more; float32 has
    24 >= 2 × 11 + 2 bits, so that is the correctly rounded fp16 result (the oracle)."""
    r = api.call("arith", {"format": "fp16", "a": repr(a), "op": op, "b": repr(b)})
    x, y = np.float16(a), np.float16(b)
    with np.errstate(all="ignore"):
        want = float({"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op])
    assert same(stored(r["result"]["stored"]), want), (a, op, b, r["result"]["stored"], want)
    # explain_op's account ends with the same result
    assert re.search(r"(result +|the result, )" + re.escape(r["result"]["stored"]) + r"(\s|$)",
                     r["explain"].splitlines()[-1]), r["explain"]  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(
    a=st.fractions(min_value=-300, max_value=300, max_denominator=2**12),
    b=st.fractions(min_value=-300, max_value=300, max_denominator=2**12),
    c=st.fractions(min_value=-300, max_value=300, max_denominator=2**12),
    op=st.sampled_from(["+", "-", "*", "/", "fma"]),
    fmt=st.sampled_from(["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "p3109_k8p3se"]),
    mode=st.sampled_from(MODES),
)
def test_arith_against_the_fraction_oracle(a, b, c, op, fmt, mode):
    """Operands rounded to nearest (the oracle), the exact result of the operation rounded once
    in the chosen mode (the oracle again)."""
    f = fpsim.get_format(fmt)
    ra, rb, rc = (ref_round_exact(v, f) for v in (a, b, c))
    params = {"format": fmt, "a": str(a), "op": op, "b": str(b), "c": str(c), "rounding": mode}
    r = api.call("arith", params)
    assert [stored(o["stored"]) for o in r["operands"]][:2] == [ra, rb] or any(map(math.isnan, (ra, rb)))
    if not all(map(math.isfinite, (ra, rb, rc))):
        return
    xa, xb, xc = Fraction(ra), Fraction(rb), Fraction(rc)
    if op == "/" and xb == 0:
        return
    exact = {"+": xa + xb, "-": xa - xb, "*": xa * xb, "/": xa / xb if xb else None,
             "fma": xa * xb + xc}[op]  # fmt: skip
    want = ref_round_exact(exact, f, mode)
    if exact == 0:  # an exact zero result has the sign IEEE 754 gives it: compare magnitudes
        assert stored(r["result"]["stored"]) == 0
    else:
        assert same(stored(r["result"]["stored"]), want), (a, op, b, c, fmt, mode, r["result"])
    assert r["exact"] == frac_text(exact)
    if math.isfinite(want) and not (math.isnan(want)):
        assert r["result"]["error"]["exact"] == frac_text(Fraction(want) - exact)


def test_arith_notes_explain_and_refusals():
    r = api.call("arith", {"format": "fp16", "a": "2048", "op": "+", "b": "1"})
    assert r["result"]["decimal"] == "2048" and r["exact"] == "2049"
    assert "tie -> the neighbour with an even last bit: 2048.0" in r["explain"]
    r = api.call("arith", {"format": "fp16", "a": "0.1", "op": "*", "b": "10"})
    assert r["notes"] == [f"a = 0.1 is not a value of fp16: rounded to nearest (ties to even) "
                          f"first, to {dec(float(np.float16(0.1)))}"]  # fmt: skip
    assert r["result"]["stored"] == repr(float(np.float16(np.float16(0.1) * np.float16(10))))
    r = api.call("arith", {"format": "fp16", "a": "2", "op": "sqrt"})
    assert r["result"]["stored"] == repr(float(np.sqrt(np.float16(2)))) and "irrational" in r["exact"]
    r = api.call("arith", {"format": "fp16", "a": "1", "op": "fma", "b": "1", "c": "2**-11"})
    assert r["exact"] == "1.00048828125" and r["result"]["decimal"] == "1"
    with pytest.raises(ApiError, match="fp64"):  # products are not exact in float64
        api.call("arith", {"format": "fp64", "a": "1", "op": "*", "b": "3"})
    with pytest.raises(ApiError, match="unknown op"):
        api.call("arith", {"format": "fp16", "a": "1", "op": "%", "b": "3"})


# ---- loss scaling --------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [0, 8, 16, 24, 40])
@pytest.mark.parametrize("subnormals", [True, False])
def test_loss_scale_zones_against_numpy_float16(k, subnormals):
    """The documented recipe (log2|g| ~ Normal(center, spread), numpy default_rng(seed)),
    scaled by 2^k and cast to numpy's float16 (a correctly rounded float64 -> half cast): the
    zone counts must be what the cast gives, value by value."""
    center, spread, n, seed = -26.0, 4.0, 20_000, 3
    r = api.call("lossscale", {"format": "fp16", "log2_scale": k, "center": center,
                               "spread": spread, "n": n, "seed": seed,
                               "subnormals": subnormals})  # fmt: skip
    g = np.exp2(center + spread * np.random.default_rng(seed).standard_normal(n))
    with np.errstate(over="ignore"):
        y = np.abs((g * 2.0**k).astype(np.float16))
    sub = (y > 0) & (y < 2.0**-14)
    want = {
        "underflow": int(np.sum(y == 0)) + (0 if subnormals else int(np.sum(sub))),
        "subnormal": int(np.sum(sub)) if subnormals else 0,
        "normal": int(np.sum(np.isfinite(y) & (y >= 2.0**-14))),
        "overflow": int(np.sum(np.isinf(y))),
    }
    got = {z: r["zones"][z]["count"] for z in want}
    assert got == want
    assert r["zones"]["underflow"]["fraction"] == frac_text(Fraction(want["underflow"], n))
    unscaled = np.abs(g.astype(np.float16))
    assert r["unscaled"]["underflow"]["count"] == int(np.sum(unscaled == 0)) + (
        0 if subnormals else int(np.sum((unscaled > 0) & (unscaled < 2.0**-14))))
    assert sum(b["count"] for b in r["bins"]) == n
    # the bins: floor(log2 |g|), exactly
    e = np.frexp(g)[1] - 1
    want_bins = dict(zip(*np.unique(e, return_counts=True), strict=True))
    assert {b["log2"]: b["count"] for b in r["bins"] if b["count"]} == {int(a): int(c) for a, c in want_bins.items()}


def test_loss_scale_suggestion_keeps_overflow_at_zero():
    r = api.call("lossscale", {"format": "fp16", "center": -28, "spread": 3})
    lo, hi = r["suggested"]["lo"], r["suggested"]["hi"]
    for k in (lo, hi):
        assert api.call("lossscale", {"format": "fp16", "log2_scale": k})["zones"]["overflow"]["count"] == 0
    assert api.call("lossscale", {"format": "fp16", "log2_scale": hi + 1})["zones"]["overflow"]["count"] > 0


# ---- bad requests --------------------------------------------------------------------------------
BAD = [
    ("round", {"format": "fp16", "x": "0.1.2"}, "not a number"),
    ("round", {"format": "fp16", "x": "abc"}, "not a number"),
    ("round", {"format": "fp16"}, "missing parameter 'x'"),
    ("round", {"format": "Format(40, 3)", "x": "1"}, "exp_bits must be in 1..11"),
    ("round", {"format": "fp17", "x": "1"}, "unknown format 'fp17'"),
    ("round", {"format": "fp16", "x": "2**-100000"}, "too large or too small"),
    ("round", {"format": "fp16", "x": "1e-99999"}, "too large or too small"),
    ("round", {"format": "fp16", "x": "3**5000"}, "too large or too small"),
    ("round", {"format": "fp16", "x": "1" * 300}, "too long"),
    ("round", {"format": "fp16", "x": "1", "rounding": "banker"}, "unknown rounding mode"),
    ("round", {"format": "fp16", "x": "1", "subnormals": "maybe"}, "subnormals must be true or false"),
    ("round", {"format": "fp16", "x": "1", "seed": "-1"}, "seed must be in"),
    ("code", {"format": "fp16", "code": "70000"}, "code must be in 0..65535"),
    ("code", {"format": "fp16", "code": "0x1g"}, "code must be an integer"),
    ("code", {"format": "fp16", "bits": "0101"}, "bits must be 16 characters"),
    ("values", {"format": "bf16"}, "at most 8 bits"),
    ("neighbours", {"format": "fp16", "code": "1", "count": "1000"}, "count must be in 1..16"),
    ("lossscale", {"format": "e8m0"}, "has no zero"),
    ("lossscale", {"format": "fp16", "n": "100000000"}, "n must be in"),
    ("lossscale", {"format": "fp16", "log2_scale": "1000"}, "log2_scale must be in"),
    ("lossscale", {"format": "fp16", "spread": "nan"}, "spread must be in"),
    ("arith", {"format": "fp16", "a": "1", "op": "+"}, "missing parameter 'b'"),
]


@pytest.mark.parametrize("endpoint,params,message", BAD)
def test_bad_requests_are_refused_with_a_clear_message(endpoint, params, message):
    with pytest.raises(ApiError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        api.call(endpoint, params)
    assert info.value.status == 400


def test_unknown_endpoint_is_404():
    with pytest.raises(ApiError) as info:
        api.call("nosuch", {})
    assert info.value.status == 404 and "known: formats" in info.value.message


def test_formats_lists_every_registered_format_with_its_limits():
    r = api.call("formats", {})
    names = [f["name"] for f in r["formats"]]
    assert names == fpsim.list_formats()
    for f in r["formats"]:
        g = fpsim.get_format(f["name"])
        dt = ML_DTYPES.get(f["name"])
        if dt is not None and f["name"] not in ("fp32", "fp64"):
            fi = ml_dtypes.finfo(dt)
            assert f["max"]["decimal"] == dec(float(fi.max))
            assert f["min_normal"]["decimal"] == dec(float(fi.smallest_normal))
            assert f["eps"]["decimal"] == dec(float(fi.eps))
        assert f["bits"] == g.bits and f["call"] == g.call_text
    assert [m["mode"] for m in r["rounding_modes"]] == list(fpsim.ROUNDING_MODES)
    # every name the page offers as an example is a format
    for name in r["examples"]:
        api.call("format", {"format": name})


def test_short_forms_for_crowded_places():
    """Table cells and labels show long values as 2^k or 6 significant digits (the exact
    decimal stays in `decimal`)."""
    rows = api.call("values", {"format": "e8m0"})["values"]
    assert rows[0]["short"] == "2^-127" and rows[0]["decimal"] == frac_text(Fraction(1, 2**127))
    assert rows[127]["short"] == "1" and rows[254]["short"] == "2^127"
    info = api.call("format", {"format": "fp64"})
    assert info["max"]["short"] == "1.79769e+308" and Fraction(info["max"]["decimal"]) == Fraction(np.finfo(np.float64).max)
    assert api.call("format", {"format": "fp16"})["max"]["short"] == "65504"
