"""fpsim.inspect against independent oracles.

Oracles: numpy's own float16/float32/float64 bit layouts (``.view``), ml_dtypes' bfloat16 and
fp8 types, ``np.nextafter`` for neighbours, ``decimal.Decimal`` (which converts a float to its
exact decimal value) for the printed digits, and plain counting for the class sizes.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import exact_decimal_oracle, numpy_class, same_float

import fpsim
from fpsim.formats import Format, bf16, fp8_e4m3, fp8_e5m2, fp16, fp32, fp64, tf32
from fpsim.inspect import (
    Fields,
    all_values,
    compare,
    describe_specials,
    exact_decimal,
    explain,
    fields,
)

E4M3_IEEE = Format(4, 3, name="e4m3_ieee")  # the textbook 8-bit format: bias 7, inf and NaN


def split_bits(code: int, f: Format) -> str:
    s = format(code, f"0{f.bits}b")
    return f"{s[0]} {s[1 : 1 + f.exp_bits]} {s[1 + f.exp_bits :]}"


# ---- every code of the small formats ------------------------------------------------------------
CODE_ORACLES = [
    (fp16, np.float16, np.uint16),
    (bf16, ml_dtypes.bfloat16, np.uint16),
    (fp8_e4m3, ml_dtypes.float8_e4m3fn, np.uint8),
    (fp8_e5m2, ml_dtypes.float8_e5m2, np.uint8),
    (E4M3_IEEE, ml_dtypes.float8_e4m3, np.uint8),
]


@pytest.mark.parametrize("f, dt, ut", CODE_ORACLES, ids=lambda p: getattr(p, "name", ""))
def test_fields_of_every_code_match_native_bit_view(f, dt, ut):
    codes = np.arange(f.num_codes, dtype=np.int64).astype(ut)
    natives = codes.view(dt)
    as64 = natives.astype(np.float64)
    # Neighbours by the native type itself: nextafter in its own dtype where numpy has one.
    native_up = np.nextafter(natives, np.array(np.inf, dt)) if dt is np.float16 else None
    native_down = np.nextafter(natives, np.array(-np.inf, dt)) if dt is np.float16 else None
    for code in range(f.num_codes):
        v = float(as64[code])
        fl = fields(natives[code], f)
        assert fl.cls == numpy_class(v, f.min_normal), hex(code)
        if math.isnan(v):
            # NaN comes back as the canonical quiet NaN, with the input's sign.
            assert fl.code == f.nan_code | (code & (1 << (f.bits - 1))), hex(code)
            assert fl.value is None and math.isnan(fl.stored)
            continue
        assert fl.code == code, hex(code)
        assert fl.bits == split_bits(code, f)
        assert int(fl.hex, 16) == code
        assert fl.sign == code >> (f.bits - 1)
        assert same_float(fl.stored, v), hex(code)
        if math.isinf(v):
            assert fl.value is None and fl.decimal == ("-inf" if v < 0 else "inf")
            continue
        assert fl.value == Fraction(v)
        assert fl.error == 0 and fl.error_ulps == 0
        if native_up is not None:
            assert same_float(fl.next_up, float(native_up[code])), hex(code)
            assert same_float(fl.next_down, float(native_down[code])), hex(code)


def test_fp16_neighbours_and_ulp_of_every_finite_value():
    vals = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    for code in range(0, 1 << 16, 3):  # a third of the codes, both signs, all classes
        v = vals[code]
        if not np.isfinite(v):
            continue
        fl = fields(v, fp16)
        up = np.nextafter(v, np.float16(np.inf))
        down = np.nextafter(v, np.float16(-np.inf))
        assert same_float(fl.next_up, float(up)) and same_float(fl.next_down, float(down))
        # ulp = the gap above |v| within the binade (for |v| < max): exact in float64.
        a = abs(v)
        if a < np.float16(65504):
            gap = Fraction(float(np.nextafter(a, np.float16(np.inf)))) - Fraction(float(a))
            assert fl.ulp == gap, hex(code)
        assert float(fl.ulp) == fpsim.ulp(float(v), fp16)


def test_fp16_class_counts():
    t = all_values(fp16)
    counts = {c: int((t["cls"] == c).sum()) for c in ("zero", "subnormal", "normal", "inf", "nan")}
    assert counts == {
        "zero": 2,
        "subnormal": 2 * 1023,
        "normal": 2 * 30 * 1024,
        "inf": 2,
        "nan": 2 * 1023,
    }


@pytest.mark.parametrize("f, dt, ut", CODE_ORACLES, ids=lambda p: getattr(p, "name", ""))
def test_all_values_matches_native_view(f, dt, ut):
    t = all_values(f)
    assert len(t) == f.num_codes
    assert (t["code"] == np.arange(f.num_codes)).all()
    native = np.arange(f.num_codes, dtype=np.int64).astype(ut).view(dt).astype(np.float64)
    np.testing.assert_array_equal(t["value"], native)  # NaN == NaN here; -0.0 checked below
    assert (np.signbit(t["value"]) == np.signbit(native)).all()
    assert [str(b) for b in t["bits"][:3]] == [split_bits(c, f) for c in range(3)]
    assert str(t["bits"][-1]) == split_bits(f.num_codes - 1, f)
    classes = [numpy_class(v, f.min_normal) for v in native]
    assert list(t["cls"]) == classes


def test_textbook_e4m3_table():
    t = all_values(E4M3_IEEE)
    assert E4M3_IEEE.bias == 7 and len(t) == 256
    finite = t["value"][np.isfinite(t["value"])]
    assert finite.max() == 240.0 and finite.min() == -240.0
    positive_sub = t["value"][(t["cls"] == "subnormal") & (t["value"] > 0)]
    assert positive_sub.min() == 1 / 512 == 2.0**-9
    assert int((t["cls"] == "nan").sum()) == 14
    assert int((t["cls"] == "inf").sum()) == 2
    assert sorted(t["value"][t["cls"] == "inf"]) == [-math.inf, math.inf]
    # ml_dtypes.float8_e4m3 is exactly this format.
    fi = ml_dtypes.finfo(ml_dtypes.float8_e4m3)
    assert float(fi.max) == 240.0 and float(fi.smallest_subnormal) == 2.0**-9


def test_fp8_e4m3_fn_table():
    t = all_values(fp8_e4m3)
    assert np.nanmax(t["value"]) == 448.0 and np.nanmin(t["value"]) == -448.0
    assert int((t["cls"] == "nan").sum()) == 2
    assert int((t["cls"] == "inf").sum()) == 0
    assert [int(c) for c in t["code"][t["cls"] == "nan"]] == [0x7F, 0xFF]
    assert str(t["bits"][0x7E]) == "0 1111 110"  # 448 lives in the all-ones exponent


@pytest.mark.parametrize(
    "f",
    [fp16, bf16, fp8_e4m3, fp8_e5m2, E4M3_IEEE, Format(2, 1), Format(3, 2, style="fn"),
     Format(5, 4, bias=20), Format(4, 5, bias=3, style="fn")],
    ids=str,
)  # fmt: skip
def test_all_values_structure(f):
    """Counting and ordering facts that hold for every format."""
    t = all_values(f)
    m, e = f.man_bits, f.exp_bits
    n = {c: int((t["cls"] == c).sum()) for c in ("zero", "subnormal", "normal", "inf", "nan")}
    assert n["zero"] == 2 and n["subnormal"] == 2 * ((1 << m) - 1)
    if f.style == "ieee":
        assert n["inf"] == 2 and n["nan"] == 2 * ((1 << m) - 1)
        assert n["normal"] == 2 * ((1 << e) - 2) * (1 << m)
    else:
        assert n["inf"] == 0 and n["nan"] == 2
        assert n["normal"] == 2 * (((1 << e) - 1) * (1 << m) - 1)
    # Positive codes: values strictly increase with the code (up to the specials).
    half = t[: f.num_codes // 2]
    vals = half["value"][~np.isnan(half["value"])]
    assert (np.diff(vals) > 0).all()
    finite = vals[np.isfinite(vals)]
    assert finite.max() == f.max and finite[1] == f.smallest_subnormal
    assert half["value"][half["cls"] == "normal"].min() == f.min_normal
    # Negative codes mirror the positive ones.
    neg = t[f.num_codes // 2 :]
    np.testing.assert_array_equal(neg["value"], -half["value"])


def test_all_values_refuses_wide_formats():
    for f in (fp32, tf32, fp64, Format(8, 8)):
        with pytest.raises(ValueError, match="at most 16 bits"):
            all_values(f)


# ---- single values ------------------------------------------------------------------------------
def test_point_one_in_fp16():
    fl = fields(0.1, "fp16")
    assert isinstance(fl, Fields)
    assert (fl.sign, fl.exponent_bits, fl.mantissa_bits) == (0, "01011", "1001100110")
    assert fl.bits == "0 01011 1001100110" and fl.code == 0x2E66 and fl.hex == "0x2e66"
    assert fl.biased_exponent == 11 and fl.exponent == -4 and fl.cls == "normal"
    assert fl.value == Fraction(0.0999755859375) == Fraction(float(np.float16(0.1)))
    assert fl.decimal == "0.0999755859375"
    assert fl.significand == Fraction(1638, 1024)
    assert fl.form == "(-1)^0 × 1.1001100110₂ × 2^-4"
    assert fl.error == Fraction(0.0999755859375) - Fraction(0.1)
    assert fl.rel_error == fl.error / Fraction(0.1)
    assert fl.error_ulps == fl.error / Fraction(1, 2**14)
    assert fl.ulp == Fraction(1, 2**14)
    assert fl.input == 0.1 and fl.rounding == "nearest_even"


def test_point_one_in_bf16_and_fp32():
    assert fields(0.1, "bf16").bits == "0 01111011 1001101"
    assert fields(0.1, "bf16").hex == "0x3dcd"
    f32 = fields(0.1, "fp32")
    assert f32.hex == "0x3dcccccd"
    assert f32.code == int(np.float32(0.1).view(np.uint32))
    assert f32.decimal == "0.100000001490116119384765625"


def test_neighbours_of_one_in_fp16():
    fl = fields(1.0, fp16)
    assert fl.next_down == 1 - 2.0**-11 and fl.next_up == 1 + 2.0**-10
    assert fl.ulp == Fraction(1, 1024) and fl.error == 0


def test_special_values():
    z = fields(-0.0, fp16)
    assert z.cls == "zero" and z.code == 0x8000 and z.decimal == "-0" and z.value == 0
    assert math.copysign(1.0, z.stored) == -1.0
    assert z.next_up == 2.0**-24 and z.next_down == -(2.0**-24)
    assert z.error == 0 and z.rel_error is None
    inf = fields(math.inf, fp16)
    assert inf.cls == "inf" and inf.code == 0x7C00 and inf.value is None and inf.error is None
    assert inf.next_down == 65504.0 and inf.next_up == math.inf
    ninf = fields(-math.inf, fp8_e5m2)
    assert ninf.code == 0xFC and ninf.next_up == -57344.0 and ninf.next_down == -math.inf
    nan = fields(math.nan, fp16)
    assert nan.cls == "nan" and nan.code == 0x7E00 and math.isnan(nan.next_up)
    # fn style: no infinity, so inf and overflow give the NaN code S.1111.111.
    assert fields(math.inf, fp8_e4m3).code == 0x7F
    over = fields(-1000.0, fp8_e4m3)
    assert over.cls == "nan" and over.code == 0xFF and over.error is None
    assert math.isnan(fields(448.0, fp8_e4m3).next_up)  # nothing lies above the largest value
    assert fields(448.0, fp8_e4m3).next_down == 416.0
    # IEEE overflow gives inf (65520 is the first value that rounds past 65504 in fp16).
    assert fields(65520.0, fp16).cls == "inf" and fields(65519.0, fp16).stored == 65504.0


def test_subnormals():
    tiny = fields(2.0**-24, fp16)
    assert tiny.cls == "subnormal" and tiny.code == 1 and tiny.exponent == -14
    assert tiny.biased_exponent == 0 and tiny.form == "(-1)^0 × 0.0000000001₂ × 2^-14"
    assert tiny.next_down == 0.0 and tiny.next_up == 2.0**-23
    neg = fields(-(2.0**-24), fp16)
    assert same_float(neg.next_up, -0.0)
    # Half the smallest subnormal is a tie: rounds to even, i.e. zero.
    assert fields(2.0**-25, fp16).cls == "zero"
    assert fields(3 * 2.0**-26, fp16).code == 1  # above half: up to the smallest subnormal
    e4 = fields(2.0**-9, fp8_e4m3)
    assert e4.cls == "subnormal" and e4.bits == "0 0000 001"


@pytest.mark.parametrize("text, value", [("0.1", 0.1), (" -1e-5 ", -1e-5), ("0x1.8p-3", 0.1875),
                                         ("-inf", -math.inf)])  # fmt: skip
def test_string_input(text, value):
    assert same_float(fields(text, fp16).input, value)


def test_bad_input():
    with pytest.raises(ValueError, match="not a number"):
        fields("abc", fp16)
    with pytest.raises(TypeError):
        fields(np.array([1.0, 2.0]), fp16)


def test_other_rounding_modes():
    assert fields(0.1, fp16, rounding="toward_zero").code == 0x2E66
    up = fields(0.1, fp16, rounding="up")
    assert up.code == 0x2E67 and up.error > 0
    assert fields(1e6, fp16, rounding="toward_zero").stored == 65504.0


# ---- random inputs ------------------------------------------------------------------------------
finite64 = st.floats(allow_nan=False, allow_infinity=False)
float32s = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(finite64)
def test_random_float64_to_fp16_matches_numpy(x):
    fl = fields(x, fp16)
    expected = np.float16(x)  # numpy converts float64 -> float16 directly, correctly rounded
    assert fl.code == int(expected.view(np.uint16))
    if fl.value is not None:
        assert fl.error == fl.value - Fraction(x)
        assert abs(fl.error_ulps) <= Fraction(1, 2)  # nearest: within half an ulp
        if x != 0:
            assert fl.rel_error == fl.error / Fraction(x)


@settings(max_examples=300, deadline=None)
@given(float32s)
def test_random_float32_to_bf16_and_fp8_match_ml_dtypes(x):
    x32 = np.float32(x)
    for f, dt, ut in [(bf16, ml_dtypes.bfloat16, np.uint16),
                      (fp8_e5m2, ml_dtypes.float8_e5m2, np.uint8)]:  # fmt: skip
        fl = fields(x32, f)
        assert fl.code == int(x32.astype(dt).view(ut)), f.name
    assert fields(x32, fp32).code == int(x32.view(np.uint32))


@settings(max_examples=200, deadline=None)
@given(finite64)
def test_fp64_is_the_identity(x):
    fl = fields(x, fp64)
    assert fl.code == int(np.float64(x).view(np.uint64))
    assert fl.error == 0 and same_float(fl.stored, x)
    assert fl.next_up == np.nextafter(x, math.inf) and fl.next_down == np.nextafter(x, -math.inf)


@settings(max_examples=200, deadline=None)
@given(finite64)
def test_decimal_digits_are_exact(x):
    for f in (fp16, fp32, fp64):
        fl = fields(x, f)
        if fl.value is not None:
            assert fl.decimal == exact_decimal_oracle(fl.stored)
            if fl.error is not None:
                with localcontext() as ctx:
                    ctx.prec = 2000  # enough for every dyadic difference of two float64s
                    err = Decimal(fl.error.numerator) / Decimal(fl.error.denominator)
                assert Decimal(exact_decimal(fl.error)) == err


def test_exact_decimal_extremes():
    assert exact_decimal(Fraction(5e-324)) == exact_decimal_oracle(5e-324)
    assert len(exact_decimal(Fraction(5e-324))) == 2 + 1074  # "0." then 1074 digits
    assert exact_decimal(Fraction(fp32.max)) == "340282346638528859811704183484516925440"
    with pytest.raises(ValueError):
        exact_decimal(Fraction(1, 3))


# ---- explain and compare ------------------------------------------------------------------------
def test_explain_point_one_fp16():
    text = explain(0.1, "fp16")
    assert "0 01011 1001100110" in text
    assert "= 0.0999755859375  (exact)" in text
    assert "0.1000000000000000055511151231257827021181583404541015625" in text
    assert "2^-14" in text and "-0.4 ulp" in text
    assert str(fields(0.1, "fp16")) == text


@pytest.mark.parametrize(
    "x, f, must",
    [(-0.0, bf16, "class        zero"), (1e-7, fp16, "class        subnormal"),
     (math.inf, fp16, "infinity"), (math.nan, fp16, "NaN"), (math.nan, fp8_e4m3, "only NaN"),
     (1e6, fp8_e4m3, "overflow"), (1e6, fp16, "overflow"), (5e-324, fp64, "(751 digits)"),
     (-1e-45, fp32, "subnormal"), (3.0, tf32, "normal"), (1.0, E4M3_IEEE, "bias 7")],
)  # fmt: skip
def test_explain_any_format_and_class(x, f, must):
    text = explain(x, f)
    assert must in text
    assert fields(x, f).bits in text


def test_compare_default_formats():
    text = compare(0.1)
    lines = text.splitlines()
    assert lines[0] == "x = 0.1"
    by_name = {ln.split()[0]: ln for ln in lines[4:]}  # x =, = exact, blank, titles
    assert list(by_name) == ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
    assert "0 01111011 10011001100110011001101" in by_name["fp32"]
    assert "0x3dcccccd" in by_name["fp32"]
    assert "0 01011 1001100110" in by_name["fp16"]
    assert "0 01111011 1001101" in by_name["bf16"]
    assert "0.0999755859375" in by_name["fp16"] and "-2.441e-05" in by_name["fp16"]


def test_compare_specials():
    assert "overflow" in compare(1e6, ["fp16"])
    assert "nan" in compare(math.nan, ["fp16", "fp8_e4m3"])
    assert "≈" in compare(1e-30, ["fp32"])  # a long exact decimal is shown rounded


# ---- every format: built-ins, P3109, unsigned, E8M0, custom ---------------------------------------
# The oracle for each code is ml_dtypes' own decoding (``np.uint8(code).view(dtype)``) where a dtype
# exists; for the other formats a decoder written here from the P3109 definitions (K bits,
# precision P) and tables of values worked out by hand.
ML_SMALL = {
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
ML_WIDE = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32, "fp64": np.float64}


def ml_value(code: int, dt) -> float:
    """ml_dtypes' (or numpy's) value of a code."""
    width = np.dtype(dt).itemsize
    ut = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    return float(np.array(code, dtype=ut).view(dt))


def p3109_value(code: int, k: int, p: int, signed: bool = True, extended: bool = True) -> float:
    """A code of IEEE P3109 binaryKpP, from the definitions (not from fpsim.Format): signed:
    sign bit on top, NaN at 2^(K-1) (where -0 would be), ±inf at 2^(K-1)-1 / 2^K-1 (extended),
    K-P exponent bits with bias 2^(K-P-1); unsigned: K-P+1 exponent bits, bias 2^(K-P), NaN at
    2^K-1, +inf at 2^K-2 (extended). P-1 trailing significand bits, subnormals at exponent 0."""
    t = p - 1
    if signed:
        if code == 1 << (k - 1):
            return math.nan
        sign, mag = code >> (k - 1), code & ((1 << (k - 1)) - 1)
        if extended and mag == (1 << (k - 1)) - 1:
            return -math.inf if sign else math.inf
        bias = 2 ** (k - p - 1)
    else:
        if code == (1 << k) - 1:
            return math.nan
        if extended and code == (1 << k) - 2:
            return math.inf
        sign, mag, bias = 0, code, 2 ** (k - p)
    e, frac = mag >> t, mag & ((1 << t) - 1)
    v = frac * 2.0 ** (1 - bias - t) if e == 0 else (1 + frac / 2**t) * 2.0 ** (e - bias)
    return -v if sign else v


P3109 = {
    "p3109_k8p3se": (8, 3, True, True),
    "p3109_k8p3sf": (8, 3, True, False),
    "p3109_k8p4se": (8, 4, True, True),
    "p3109_k8p1se": (8, 1, True, True),  # no trailing significand bits
    "p3109_k8p3ue": (8, 3, False, True),
    "p3109_k8p4uf": (8, 4, False, False),
    "p3109_k6p3se": (6, 3, True, True),
}

# Values worked out by hand from the definitions, code -> value.
HAND = {
    # binary8p3 signed extended: 5 exponent bits (bias 16), 2 fraction bits
    "p3109_k8p3se": {
        0x00: 0.0, 0x01: 2.0**-17, 0x03: 3 * 2.0**-17, 0x04: 2.0**-15, 0x40: 1.0, 0x41: 1.25,
        0x7E: 49152.0, 0x7F: math.inf, 0x80: math.nan, 0x81: -(2.0**-17), 0xC0: -1.0,
        0xFE: -49152.0, 0xFF: -math.inf,
    },
    # finite domain: 0x7F is a number, 1.75 × 2^15
    "p3109_k8p3sf": {0x7F: 57344.0, 0xFF: -57344.0, 0x80: math.nan, 0x7E: 49152.0},
    # binary8p4: 4 exponent bits (bias 8), 3 fraction bits; max 1.75 × 2^7 below inf
    "p3109_k8p4se": {0x01: 2.0**-10, 0x08: 2.0**-7, 0x40: 1.0, 0x7E: 224.0, 0x7F: math.inf},
    # binary8p1: 7 exponent bits (bias 64), no fraction: powers of two, 0 at code 0
    "p3109_k8p1se": {0x00: 0.0, 0x01: 2.0**-63, 0x40: 1.0, 0x7E: 2.0**62, 0x7F: math.inf,
                     0x80: math.nan, 0x81: -(2.0**-63)},
    # unsigned binary8p3: 6 exponent bits (bias 32), 2 fraction bits, no sign bit
    "p3109_k8p3ue": {0x00: 0.0, 0x01: 2.0**-33, 0x80: 1.0, 0x86: 3.0, 0xFD: 1.25 * 2.0**31,
                     0xFE: math.inf, 0xFF: math.nan},
    # unsigned binary8p4, finite: 5 exponent bits (bias 16), 3 fraction bits; 0xFE a number
    "p3109_k8p4uf": {0x01: 2.0**-18, 0x80: 1.0, 0xFE: 1.75 * 2.0**15, 0xFF: math.nan},
    # binary6p3 signed: 3 exponent bits (bias 2^(6-3-1) = 4), 2 fraction bits
    "p3109_k6p3se": {0x01: 2.0**-5, 0x08: 0.25, 0x10: 1.0, 0x1E: 12.0, 0x1F: math.inf,
                     0x20: math.nan, 0x3E: -12.0},
    # tf32: fp32's exponent, 10 fraction bits, 19 bits in all
    "tf32": {0x0: 0.0, 0x1: 2.0**-136, 0x1FC00: 1.0, 0x3FBFF: (2 - 2.0**-10) * 2.0**127,
             0x3FC00: math.inf, 0x3FE00: math.nan, 0x7FC00: -math.inf, 0x40000: -0.0},
    # unsigned, no inf, no NaN: every code is a number; 3 exponent bits (bias 3), 2 fraction
    "Format(3, 2, style='finite', signed=False)": {0x00: 0.0, 0x01: 2.0**-4, 0x0C: 1.0,
                                                   0x1F: 28.0},
    # unsigned fn: 4 exponent bits (bias 7), 3 fraction bits, NaN = the all-ones code
    "Format(4, 3, style='fn', signed=False)": {0x00: 0.0, 0x38: 1.0, 0x7E: 448.0,
                                               0x7F: math.nan},
    # signed E8M0-like: no zero, no subnormals, NaN = S.11111111
    "Format(8, 0, style='fn', has_subnormals=False)": {0x000: 2.0**-127, 0x07F: 1.0,
        0x0FE: 2.0**127, 0x0FF: math.nan, 0x100: -(2.0**-127), 0x1FF: -math.nan},
}  # fmt: skip

SMALL_CUSTOM = [f for f in HAND if f.startswith("Format(")]


def definition_value(code: int, f: Format) -> float:
    """A code's value from the definitions in fpsim/formats.py's docstring, read through the
    format's public properties only: an optional sign bit, exponent field E, fraction T;
    NaN: ``ieee`` all-ones E with T != 0, ``all_ones`` the all-ones magnitude, ``negzero`` the
    sign bit alone; inf (``has_inf``): IEEE all-ones E with T = 0, else the magnitude code just
    below the NaN codes (the top code when NaN is the -0 code); E = 0 subnormal when the format
    has subnormals, an ordinary binade when not."""
    e, m = f.exp_bits, f.man_bits
    w = e + m
    sign = (code >> w) & 1 if f.signed else 0
    mag = code & ((1 << w) - 1)
    big_e, t = mag >> m, mag & ((1 << m) - 1)
    top_e = big_e == (1 << e) - 1
    if (
        (f.nan == "negzero" and sign and mag == 0)
        or (f.nan == "ieee" and top_e and t != 0)
        or (f.nan == "all_ones" and mag == (1 << w) - 1)
    ):
        return -math.nan if sign else math.nan
    if f.has_inf:
        inf_mag = {"ieee": ((1 << e) - 1) << m, "all_ones": (1 << w) - 2}.get(f.nan, (1 << w) - 1)
        if mag == inf_mag:
            return -math.inf if sign else math.inf
    if big_e == 0 and f.has_subnormals:
        v = t * 2.0 ** (1 - f.bias - m)
    else:
        v = (1 + t / 2**m) * 2.0 ** (big_e - f.bias)
    return -v if sign else v


def oracle_value(name: str, code: int) -> float:
    """The independent value of a code: ml_dtypes, the P3109 definitions, or (custom formats)
    the formats' documented definitions, checked against the hand table."""
    if name in ML_SMALL:
        return ml_value(code, ML_SMALL[name])
    if name in ML_WIDE:
        return ml_value(code, ML_WIDE[name])
    if name in P3109:
        return p3109_value(code, *P3109[name])
    return definition_value(code, fpsim.get_format(name))


@pytest.mark.parametrize("name", list(ML_SMALL) + list(P3109) + list(HAND))
def test_the_definition_oracle_agrees_with_ml_dtypes_p3109_and_hand_tables(name):
    """The oracle for custom formats reproduces every independent source there is."""
    f = fpsim.get_format(name)
    codes = range(f.num_codes) if f.bits <= 9 else HAND[name]
    for code in codes:
        if name in HAND and code in HAND[name]:
            assert same_float(definition_value(code, f), HAND[name][code]), (name, hex(code))
        if name in ML_SMALL or name in P3109:
            assert same_float(definition_value(code, f), oracle_value(name, code)), hex(code)


def oracle_bits(code: int, f: Format) -> str:
    """sign, exponent and mantissa, each only where the format has it."""
    s = format(code, f"0{f.bits}b")
    sign, rest = (s[:1], s[1:]) if f.signed else ("", s)
    parts = [sign, rest[: f.exp_bits], rest[f.exp_bits :]]
    return " ".join(p for p in parts if p)


def check_code(name: str, f: Format, code: int, v: float) -> None:
    """fields() of the code's value agrees with the oracle value v of the code."""
    fl = fields(v, f)
    assert fl.cls == numpy_class(v, f.min_normal), (name, hex(code))
    sign_bit = 1 << (f.bits - 1)
    if math.isnan(v):
        # NaN comes back as the canonical NaN: the input's sign kept where NaN has two signs
        two_signs = f.signed and f.nan in ("ieee", "all_ones")
        neg = math.copysign(1.0, v) < 0
        assert fl.code == f.nan_code | (sign_bit if two_signs and neg else 0), (name, hex(code))
        assert fl.value is None and math.isnan(fl.stored) and fl.decimal == "nan"
        return
    assert fl.code == code, (name, hex(code), fl.code)
    assert fl.bits == oracle_bits(code, f), (name, hex(code))
    assert int(fl.hex, 16) == code
    assert fl.sign == (code >> (f.bits - 1) if f.signed else 0)
    assert same_float(fl.stored, v), (name, hex(code))
    if math.isinf(v):
        assert fl.value is None and fl.decimal == ("-inf" if v < 0 else "inf")
        return
    assert fl.value == Fraction(v) and fl.error == 0 and fl.error_ulps == 0
    assert fl.decimal == exact_decimal_oracle(v)


SMALL_NAMES = list(ML_SMALL) + list(P3109) + SMALL_CUSTOM


@pytest.mark.parametrize("name", SMALL_NAMES)
def test_fields_of_every_code_of_every_small_format(name):
    f = fpsim.get_format(name)
    assert f.bits <= 9
    for code in range(f.num_codes):
        check_code(name, f, code, oracle_value(name, code))


@pytest.mark.parametrize("name", list(HAND))
def test_fields_of_hand_derived_codes(name):
    f = fpsim.get_format(name)
    for code, v in HAND[name].items():
        if name in P3109:  # the definitions' decoder agrees with the hand-worked values
            assert same_float(p3109_value(code, *P3109[name]), v), (name, hex(code))
        check_code(name, f, code, v)


@pytest.mark.parametrize("name", list(ML_WIDE))
def test_fields_of_sampled_codes_of_wide_formats(name):
    f = fpsim.get_format(name)
    rng = np.random.default_rng(3109)
    specials = [0, 1, f.inf_code, f.nan_code, f.num_codes - 1, 1 << (f.bits - 1)]
    for code in specials + [int(c) for c in rng.integers(0, f.num_codes, 500, dtype=np.uint64)]:
        check_code(name, f, code, ml_value(code, ML_WIDE[name]))


def sorted_values(name: str, f: Format) -> list[float]:
    """The oracle's distinct non-NaN values of a format (-0 counted as 0), ascending."""
    vals = {oracle_value(name, c) for c in range(f.num_codes)}
    return sorted({0.0 if v == 0 else v for v in vals if not math.isnan(v)})


@pytest.mark.parametrize("name", SMALL_NAMES)
def test_neighbours_of_every_code_of_every_small_format(name):
    """next_up / next_down: the next value of the sorted set of values; NaN where there is none
    (above the max of a format without inf, below the smallest value of an unsigned format or
    of E8M0); ±inf stays ±inf; a negative value steps up to -0, or to +0 without -0."""
    f = fpsim.get_format(name)
    vals = sorted_values(name, f)
    has_negzero = any(oracle_value(name, c) == 0 and math.copysign(1, oracle_value(name, c)) < 0
                      for c in range(f.num_codes))  # fmt: skip
    for code in range(f.num_codes):
        v = oracle_value(name, code)
        if math.isnan(v):
            continue
        fl = fields(v, f)
        up = math.inf if v == math.inf else min((w for w in vals if w > v), default=math.nan)
        down = -math.inf if v == -math.inf else max((w for w in vals if w < v), default=math.nan)
        if up == 0:
            up = -0.0 if has_negzero else 0.0
        assert same_float(fl.next_up, up), (name, hex(code), fl.next_up, up)
        assert same_float(fl.next_down, down), (name, hex(code), fl.next_down, down)


@pytest.mark.parametrize("name", SMALL_NAMES)
def test_all_values_of_every_small_format(name):
    f = fpsim.get_format(name)
    t = all_values(f)
    expected = np.array([oracle_value(name, c) for c in range(f.num_codes)])
    assert len(t) == f.num_codes and (t["code"] == np.arange(f.num_codes)).all()
    np.testing.assert_array_equal(t["value"], expected)  # NaN == NaN here
    number = ~np.isnan(expected)
    assert (np.signbit(t["value"][number]) == np.signbit(expected[number])).all()
    assert list(t["cls"]) == [numpy_class(v, f.min_normal) for v in expected]
    assert [str(b) for b in t["bits"]] == [oracle_bits(c, f) for c in range(f.num_codes)]
    # the sorted set of (non-NaN) values is the oracle's
    got = sorted(set(t["value"][~np.isnan(t["value"])].tolist()))
    assert got == sorted(set(expected[~np.isnan(expected)].tolist()))


@pytest.mark.parametrize("name", list(ML_SMALL))
def test_all_values_is_the_sorted_set_of_ml_dtypes_values(name):
    f = fpsim.get_format(name)
    dt = ML_SMALL[name]
    native = np.arange(f.num_codes, dtype=np.uint8).view(dt).astype(np.float64)
    t = all_values(f)
    v = t["value"]
    assert np.array_equal(np.unique(v[~np.isnan(v)]), np.unique(native[~np.isnan(native)]))


def test_unsigned_and_mantissa_free_layouts():
    e8 = fields(0.1, "e8m0")
    assert e8.bits == "01111100" and e8.mantissa_bits == "" and e8.sign == 0
    assert e8.form == "2^-3" and e8.value == Fraction(1, 8) and e8.cls == "normal"
    bottom = fields(2.0**-127, "e8m0")
    assert bottom.code == 0 and bottom.cls == "normal" and bottom.exponent == -127
    u = fields(3.0, "p3109_k8p3ue")
    assert u.bits == "100001 10" and u.form == "1.10₂ × 2^1" and u.code == 0x86
    z = fields(0.0, "p3109_k8p1se")
    assert z.bits == "0 0000000" and z.form == "(-1)^0 × 0 × 2^-63"
    assert fields(2.0, "p3109_k8p1se").form == "(-1)^0 × 2^1"
    # fnuz: no -0; -0.0 and tiny negatives are +0, and 0x80 is NaN
    for x in (-0.0, -1e-5):
        fl = fields(x, "fp8_e4m3fnuz")
        assert fl.code == 0 and same_float(fl.stored, 0.0)
    assert fields(math.nan, "fp8_e4m3fnuz").code == 0x80
    assert fields(math.nan, "p3109_k8p3se").bits == "1 00000 00"


def test_no_code_for_nan_in_formats_without_nan():
    for name in ("fp4_e2m1", "fp6_e2m3", "fp6_e3m2"):
        with pytest.raises(ValueError, match="no NaN, so no code holds NaN"):
            fields(math.nan, name)
        assert math.isnan(fpsim.round_to(math.nan, name))  # what the sentence says
    with pytest.raises(ValueError, match="unsigned and no NaN"):
        fields(-1.0, "Format(3, 2, style='finite', signed=False)")


def test_overflow_and_special_inputs_follow_round_to():
    """Every input explain() describes lands where round_to puts it."""
    cases = {"fp4_e2m1": 6.0, "fp6_e3m2": 28.0, "fp6_e2m3": 7.5}
    for name, mx in cases.items():
        assert fields(math.inf, name).stored == mx and fields(-math.inf, name).stored == -mx
        assert fields(1e9, name).stored == mx == fpsim.round_to(1e9, name)
    assert fields(0.0, "e8m0").cls == "nan" and math.isnan(fpsim.round_to(0.0, "e8m0"))
    assert fields(-1.0, "e8m0").cls == "nan" and fields(1e-60, "e8m0").stored == 2.0**-127
    assert fields(500, "fp8_e4m3fnuz").code == 0x80
    assert fields(1e9, "p3109_k8p3se").cls == "inf" and fields(1e9, "p3109_k8p3sf").cls == "nan"


SPECIALS_TEXT = {
    "fp16": "IEEE style (inf and NaN in the top exponent)",
    "fp8_e4m3": "no inf; NaN = S.1111.111",
    "fp8_e4m3fnuz": "no inf; NaN = the code 0x80 (no -0)",
    "fp8_e5m2fnuz": "no inf; NaN = the code 0x80 (no -0)",
    "fp4_e2m1": "no inf, no NaN: overflow saturates to ±6",
    "fp6_e2m3": "no inf, no NaN: overflow saturates to ±7.5",
    "fp6_e3m2": "no inf, no NaN: overflow saturates to ±28",
    "e8m0": "no zero, no subnormals; no inf; NaN = 0xff",
    "p3109_k8p3se": "±inf = 0x7f/0xff; NaN = the code 0x80 (no -0)",
    "p3109_k8p3sf": "no inf; NaN = the code 0x80 (no -0)",
    "p3109_k8p3ue": "inf = 0xfe; NaN = 0xff",
    "Format(3, 2, style='finite', signed=False)": "no inf, no NaN: overflow saturates to 28",
}


@pytest.mark.parametrize("name, text", SPECIALS_TEXT.items())
def test_describe_specials(name, text):
    f = fpsim.get_format(name)
    assert describe_specials(f) == text
    # and what it says about overflow is what round_to does
    big = fpsim.round_to(1e300, f)
    if "saturates" in text:
        assert big == f.max
    elif f.has_inf:
        assert big == math.inf
    else:
        assert math.isnan(big)


@pytest.mark.parametrize(
    "x, name, musts",
    [
        (math.nan, "fp4_e2m1", ["no inf, no NaN: overflow saturates to ±6", "bits         none",
                                "round_to keeps NaN"]),
        (math.inf, "fp4_e2m1", ["no inf and no NaN: inf saturates to 6", "0 11 1"]),
        (-math.inf, "fp6_e3m2", ["no inf and no NaN: -inf saturates to -28"]),
        (500, "fp4_e2m1", ["beyond the largest value 6 and there is no inf or NaN, so it",
                           "saturates to 6", "none: 6 is the largest value (no inf)"]),
        (0.1, "e8m0", ["unsigned (no sign bit), 8 exponent bits, no mantissa bits; bias 127",
                       "no zero, no subnormals; no inf; NaN = 0xff", "01111100   (exponent; no "
                       "sign bit, no mantissa bits)", "significand  1 (no mantissa bits",
                       "value        2^-3"]),
        (0.0, "e8m0", ["no zero (no subnormals): 0 becomes NaN", "class        nan"]),
        (-2.0, "e8m0", ["unsigned: a negative input has no code, it becomes NaN"]),
        (2.0**-130, "e8m0", ["below the smallest value 2^-127 and there is no zero",
                             "none: 2^-127 is the smallest value (no zero)"]),
        (2.0**127, "e8m0", ["none: 2^127 is the largest value; the next code, 0xff, is NaN"]),
        (math.nan, "fp8_e4m3fnuz", ["NaN = the code 0x80 (no -0)", "0x80, the code -0 would",
                                    "only NaN"]),
        (-1e-5, "fp8_e4m3fnuz", ["no -0 (its code 0x80 is NaN): the negative input rounds to +0"]),
        (500, "fp8_e4m3fnuz", ["largest finite value 240 and there is no", "inf, so it becomes NaN"]),
        (240, "fp8_e4m3fnuz", ["none: 240 is the largest value; the next code, 0x80, is NaN"]),
        (math.inf, "p3109_k8p3se", ["±inf = 0x7f/0xff", "class        inf", "0 11111 11",
                                    "the code just above the largest finite value", "+infinity"]),
        (1e6, "p3109_k8p3se", ["overflow: |input| is beyond the largest finite value 49152, so",
                               "becomes inf"]),
        (3.0, "p3109_k8p3ue", ["unsigned (no sign bit), 6 exponent, 2 mantissa bits; bias 32",
                               "100001 10   (exponent | mantissa; no sign bit)"]),
        (0.0, "p3109_k8p3ue", ["none: p3109_k8p3ue is unsigned, no value lies below 0"]),
        (math.nan, "fp8_e4m3", ["no inf; NaN = S.1111.111", "only NaN (S.1111.111; no inf)"]),
    ],
)  # fmt: skip
def test_explain_states_the_special_rules(x, name, musts):
    text = explain(x, name)
    for must in musts:
        assert must in text, (must, text)
    assert "style" not in text or "IEEE style" in text


@pytest.mark.parametrize("name", SMALL_NAMES + ["fp16", "bf16", "tf32"])
def test_explain_and_compare_never_fail(name):
    """Every value of the format and the awkward inputs: explain() and compare() say something
    (and what fields() returns is in the text)."""
    f = fpsim.get_format(name)
    inputs = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e300, -1e300, 1e-300, -1e-300, 0.1, -3]
    if f.bits <= 8:
        inputs += [v for v in all_values(f)["value"].tolist() if not math.isnan(v)]
    for x in inputs:
        text = explain(x, f)
        try:
            fl = fields(x, f)
        except ValueError as exc:
            assert str(exc).split(": ", 1)[1] in text.replace("\n" + " " * 15, " ")
            continue
        assert fl.bits in text and fl.hex in text
    assert f.name in compare(1.5, [f, "fp16"])


def test_compare_new_formats():
    text = compare(448, ["fp4_e2m1", "e8m0", "fp8_e4m3fnuz", "p3109_k8p3se"])
    rows = {ln.split()[0]: ln for ln in text.splitlines()[3:7]}
    assert "0 11 1" in rows["fp4_e2m1"] and "0x7" in rows["fp4_e2m1"]
    assert "10001000" in rows["e8m0"] and "512" in rows["e8m0"]
    assert "1 0000 000" in rows["fp8_e4m3fnuz"] and "overflow" in rows["fp8_e4m3fnuz"]
    assert "0 11000 11" in rows["p3109_k8p3se"] and "+0.000e+00" in rows["p3109_k8p3se"]
    assert "fp4_e2m1: |input| is beyond the largest value 6" in text
    assert "e8m0 has no sign bit and no mantissa bits: its bits are the exponent alone" in text
    assert "fp8_e4m3fnuz: overflow" in text
    nan = compare(math.nan, ["fp4_e2m1", "fp16"])
    assert "(no code)" in nan and "fp4_e2m1: no NaN, so no code holds NaN" in nan
    assert compare(0.1, ["fp16", "bf16"]).count("\n") == 5  # no notes for ordinary rounding
