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

import fpsim
from fpsim.formats import Format, bf16, fp8_e4m3, fp8_e5m2, fp16, fp32, fp64, tf32
from fpsim.inspect import Fields, all_values, compare, exact_decimal, explain, fields

E4M3_IEEE = Format(4, 3, name="e4m3_ieee")  # the textbook 8-bit format: bias 7, inf and NaN


def split_bits(code: int, f: Format) -> str:
    s = format(code, f"0{f.bits}b")
    return f"{s[0]} {s[1 : 1 + f.exp_bits]} {s[1 + f.exp_bits :]}"


def same_float(a: float, b: float) -> bool:
    """Equal including the sign of zero, and NaN equal to NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def numpy_class(v: float, f: Format) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf"
    if v == 0:
        return "zero"
    return "subnormal" if abs(v) < f.min_normal else "normal"


def exact_decimal_oracle(v: float) -> str:
    """The exact decimal of a float, by decimal.Decimal (independent of fpsim)."""
    d = format(Decimal(v), "f")
    if "." in d:
        d = d.rstrip("0").rstrip(".")
    return "-0" if d in ("-0", "-0.0") else d


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
        assert fl.cls == numpy_class(v, f), hex(code)
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
    classes = [numpy_class(v, f) for v in native]
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
