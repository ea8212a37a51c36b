"""Issue 11: no silent wrong answer in rounding, encoding and the format model.

Every expected value here comes from exact rational arithmetic (``arith_oracle.round_rational``:
rounding by the definition with ``fractions.Fraction``), numpy/ml_dtypes, or a value derived by
hand in the test -- never from fpsim itself.
"""

import math
import tracemalloc
from decimal import Decimal
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from arith_oracle import ALL_MODES, round_rational
from hypothesis import example, given, settings
from hypothesis import strategies as st
from oracle import same_bits

import fpsim
from fpsim.kernels.scalar import random62

# ---- 1. custom bias below the container's range ---------------------------------------------------


def _oracle(x: float, f, mode, subnormals=True, saturate=False, rand62=0) -> float:
    """The exact rounding of a float (its exact value) to f, specials included."""
    if math.isnan(x):
        return math.nan
    if math.isinf(x):
        if f.has_inf:
            return x
        return math.copysign(f.max, x) if saturate else math.nan
    return round_rational(Fraction(x), f, mode, subnormals, saturate, rand62, zero_sign=x)


def test_issue_case_bias_130_in_float32():
    f = fpsim.Format(8, 7, bias=130)
    x = np.float32(2.0**-130 * (1 + 2**-7 + 2**-9))
    # by hand: emin = 1 - 130 = -129 and x's binade -130 is below it, so x is subnormal in f
    # with the quantum 2^(emin - 7) = 2^-136; x / 2^-136 = 64 + 0.5 + 0.125 rounds to 65
    expected = 65 * 2.0**-136
    assert float(fpsim.round_to(x, f)) == expected
    assert float(fpsim.round_to(x, f, backend="python")) == expected
    assert float(fpsim.round_to(np.float32(f.smallest_subnormal), f)) == f.smallest_subnormal


@pytest.mark.parametrize("bias", [1024, 1030, 1040])
def test_bias_above_1023_in_float64(bias):
    f = fpsim.Format(11, 10, bias=bias)
    tiny = [f.smallest_subnormal, 3 * f.smallest_subnormal, f.min_normal, f.min_normal * 1.5]
    x = np.array(tiny + [v * (1 + 2.0**-12) for v in tiny] + [f.smallest_subnormal * 0.75])
    for mode in ALL_MODES[:-1]:
        got = fpsim.round_to(x, f, mode)
        want = np.array([_oracle(v, f, mode) for v in x])
        assert same_bits(got, want).all(), (mode, got, want)


# ---- the property test: every format parameter, every mode, both containers ----------------------


def _legal_biases(e: int, m: int, container, style: str) -> tuple[int, int] | None:
    """The bias range for which Format(e, m, bias, style) fits the container (emax and the
    smallest subnormal inside it): emax = 2^e - 2 - bias (fn: 2^e - 1 - bias) <= cmax and
    1 - bias - m >= cmin_sub."""
    cmax, cmin_sub = (127, -149) if container == np.float32 else (1023, -1074)
    lo = (1 << e) - (1 if style == "fn" else 2) - cmax
    hi = 1 - m - cmin_sub
    return (lo, hi) if lo <= hi else None


@st.composite
def format_and_container(draw):
    container = draw(st.sampled_from([np.float32, np.float64]))
    style = draw(st.sampled_from(["ieee", "fn"]))
    e = draw(st.integers(2, 11))
    m = draw(st.integers(1, 23 if container == np.float32 else 52))
    rng = _legal_biases(e, m, container, style)
    if rng is None:  # no bias puts this exponent width inside a float32: 7 bits always fit
        e = draw(st.integers(2, 7))
        rng = _legal_biases(e, m, container, style)
    bias = draw(st.integers(*rng))
    f = fpsim.Format(e, m, bias=bias, style=style)
    assert f.fits_in(container)
    return f, container


def _values(f, container, seed: int, n: int = 160) -> np.ndarray:
    """Values spread over the format's range and beyond, plus every boundary and its neighbours."""
    rng = np.random.default_rng(seed)
    cfin = np.finfo(container)
    lo_exp = max(f.emin - f.man_bits - 3, int(np.log2(cfin.smallest_subnormal)))
    hi_exp = min(f.emax + 2, int(np.log2(cfin.max)))
    ex = rng.integers(lo_exp, hi_exp + 1, n)
    sig = 1 + rng.random(n)
    sig[: n // 4] = 1 + np.round(rng.random(n // 4) * 2**12) / 2**12  # short: ties happen
    v = (np.ldexp(sig, ex) * rng.choice([-1, 1], n)).astype(container)
    q = f.smallest_subnormal
    edges = [q, q / 2, q * 1.5, f.min_normal, f.min_normal - q / 2, f.max, 0.0, np.inf, np.nan]
    edges += [f.max + f.max * f.eps / 4, f.max * (1 + f.eps / 2)]
    e = np.array(edges, np.float64)
    e = e[(np.abs(e) <= cfin.max) | ~np.isfinite(e)]
    e = np.concatenate([e, -e]).astype(container)
    with np.errstate(over="ignore"):
        nb = np.concatenate([np.nextafter(e, e.dtype.type(np.inf)), np.nextafter(e, -np.inf)])
    return np.concatenate([v, e, nb.astype(container)])


def builtin_examples(seed: int, subnormals: bool, saturate: bool):
    """Hypothesis examples for every built-in format: float32-held ones in float32 (with the
    given flags), and a few in float64 (default flags), so the fast paths are always hit."""
    cases = [(f, np.float32, subnormals, saturate) for f in
             (fpsim.bf16, fpsim.tf32, fpsim.fp16, fpsim.fp8_e4m3, fpsim.fp8_e5m2, fpsim.fp32)]
    cases += [(f, np.float64, True, False)
              for f in (fpsim.bf16, fpsim.fp32, fpsim.fp64, fpsim.Format(11, 40))]  # fmt: skip

    def apply(test):
        for f, c, sub, sat in cases:
            test = example((f, c), seed if c == np.float32 else 2, sub, sat)(test)
        return test

    return apply


@settings(max_examples=60, deadline=None)
@given(format_and_container(), st.integers(0, 2**32), st.booleans(), st.booleans())
@builtin_examples(seed=3, subnormals=False, saturate=True)
def test_random_formats_every_mode_against_exact_rationals(fc, seed, subnormals, saturate):
    f, container = fc
    x = _values(f, container, seed)
    for mode in ALL_MODES:
        got = fpsim.round_to(x, f, mode, subnormals=subnormals, saturate=saturate, seed=seed)
        assert got.dtype == container
        rand = [random62(seed, i) if mode == "stochastic" else 0 for i in range(x.size)]
        want = np.array(
            [_oracle(float(v), f, mode, subnormals, saturate, r) for v, r in zip(x, rand, strict=True)],
            container,
        )
        bad = ~same_bits(got, want)
        assert not bad.any(), (f, mode, x[bad][:4], got[bad][:4], want[bad][:4])
    # the pure-Python reference takes the same general path on a few of them
    some = x[:: max(1, x.size // 12)]
    for mode in ("nearest_even", "down"):
        py = fpsim.round_to(some, f, mode, subnormals=subnormals, backend="python")
        assert same_bits(py, fpsim.round_to(some, f, mode, subnormals=subnormals)).all()


# ---- 2. integers are rounded from their exact value ----------------------------------------------

BIG_INTS = [
    2**60 + 2**36 + 1,
    2**53 + 1,
    -(2**53 + 1),
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    2**64 + 1,
    3**100,
    -(7**300),
    10**400,
    2**24 + 1,
    65519,
    65520,
    0,
]


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "fp8_e4m3", "fp64", fpsim.Format(6, 30)])
def test_python_ints_of_any_size(fmt, mode):
    f = fpsim.get_format(fmt)
    for n in BIG_INTS:
        got = fpsim.round_to(n, f, mode, seed=11)
        rand = random62(11, 0) if mode == "stochastic" else 0
        want = round_rational(Fraction(n), f, mode, rand62=rand)
        assert isinstance(got, float)
        assert same_bits(np.float64(got), np.float64(want)), (n, mode, got, want)


def test_issue_cases_integers():
    assert fpsim.round_to(np.array([2**60 + 2**36 + 1]), "fp32")[0] == 2**60 + 2**37
    assert fpsim.round_to(2**53 + 1, "fp64", rounding="up") == 2**53 + 2
    assert fpsim.round_to(np.array([2**53 + 1], np.uint64), "fp64", rounding="up")[0] == 2**53 + 2


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, ">i8"])
@pytest.mark.parametrize("mode", ALL_MODES)
def test_integer_arrays(dtype, mode):
    rng = np.random.default_rng(5)
    if np.dtype(dtype).kind == "u":
        vals = [2**64 - 1, 2**63, 2**53 + 1, 0, 1] + list(rng.integers(0, 2**64 - 1, 40, np.uint64))
    else:
        vals = [2**63 - 1, -(2**63), -(2**53) - 1, 2**53 + 3, 0, -1]
        vals += list(rng.integers(-(2**63), 2**63 - 1, 40, np.int64))
    x = np.array(vals, dtype=dtype)
    # the result: the smallest of float16/32/64 that holds the format (by hand: e5m2 fits float16)
    for fmt, dt in (("fp32", np.float32), ("bf16", np.float32), ("fp64", np.float64),
                    (fpsim.Format(5, 2), np.float16), (fpsim.Format(3, 52, bias=-60), np.float64)):
        f = fpsim.get_format(fmt)
        got = fpsim.round_to(x, f, mode, seed=3)
        assert got.dtype == dt and got.shape == x.shape
        got = got.astype(np.float64)
        rand = [random62(3, i) if mode == "stochastic" else 0 for i in range(x.size)]
        want = [round_rational(Fraction(int(v)), f, mode, rand62=r) for v, r in zip(x, rand, strict=True)]
        assert same_bits(got, np.array(want)).all(), (fmt, mode)
        # and to_bits agrees with rounding then encoding
        codes = fpsim.to_bits(x, f, mode, seed=3)
        assert same_bits(fpsim.from_bits(codes, f, dtype=np.float64), got).all()


def test_numpy_integer_scalars_keep_a_numpy_result():
    r = fpsim.round_to(np.int64(2**60 + 2**36 + 1), "fp32")
    assert isinstance(r, np.float32) and int(r) == 2**60 + 2**37


def test_fraction_and_decimal_are_rounded_exactly():
    third = Fraction(1, 3)
    for mode in ALL_MODES[:-1]:
        assert fpsim.round_to(third, "fp16", mode) == round_rational(third, "fp16", mode)
    # Decimal('0.1') is exactly 1/10, not the float 0.1
    d = fpsim.round_to(Decimal("0.1"), "fp64", "up")
    assert Fraction(d) > Fraction(1, 10) and Fraction(d) == round_rational(
        Fraction(1, 10), "fp64", "up"
    )
    # a tie that only the exact value shows: 1 + 2^-11 + 2^-80 is above the fp16 midpoint
    assert fpsim.round_to(1 + Fraction(1, 2**11) + Fraction(1, 2**80), "fp16") == 1 + 2**-10
    assert math.isnan(fpsim.round_to(Decimal("nan"), "fp16"))


def test_ulp_and_neighbours_of_big_integers():
    # float64(2^61 - 1) is 2^61, a binade too high
    assert fpsim.ulp(2**61 - 1, "fp32") == 2.0 ** (60 - 23)
    assert fpsim.ulp(np.array([2**61 - 1, -(2**61 - 1), 2**61]), "fp32").tolist() == [
        2.0**37,
        2.0**37,
        2.0**38,
    ]
    assert fpsim.next_up(2**60 + 1, "fp32") == 2**60 + 2**37
    assert fpsim.next_down(2**60 + 1, "fp32") == 2**60
    assert fpsim.next_up(np.array([2**60 + 1]), "fp32")[0] == 2**60 + 2**37


@pytest.mark.parametrize("bad", [1 + 2j, "0.1", object(), np.array(["a"]), np.longdouble(1) / 3])
def test_refused_input_kinds(bad):
    with pytest.raises(TypeError):
        fpsim.round_to(bad, "fp16")


def test_big_endian_float32_stays_float32():
    x = np.array([0.1, -3.3, 65519.0], dtype=">f4")
    got = fpsim.round_to(x, "fp16")
    assert got.dtype == np.float32
    want = x.astype(np.float32).astype(np.float16).astype(np.float32)
    assert same_bits(got, want).all()
    be64 = np.array([0.1], dtype=">f8")
    assert fpsim.round_to(be64, "bf16").dtype == np.float64


# ---- 9. the format model refuses what it cannot mean ---------------------------------------------


def test_format_fields_must_be_integers():
    with pytest.raises(TypeError, match="bias must be an integer, got 15.5"):
        fpsim.Format(5, 10, bias=15.5)
    with pytest.raises(TypeError, match="bias must be an integer, got '15'"):
        fpsim.Format(5, 10, bias="15")
    with pytest.raises(TypeError, match="exp_bits must be an integer"):
        fpsim.Format(5.0, 10)
    with pytest.raises(TypeError, match="man_bits must be an integer"):
        fpsim.Format(5, True)
    f = fpsim.Format(np.int64(5), np.int32(10), bias=np.int16(15))
    assert f == fpsim.fp16 and type(f.bias) is int and f.max == 65504.0


def test_zero_fraction_bits_need_a_nan_encoding_without_fraction():
    # IEEE NaN is an all-ones exponent with a non-zero fraction: impossible without fraction bits
    with pytest.raises(ValueError, match="nan='ieee' needs man_bits >= 1"):
        fpsim.Format(8, 0)
    # E8M0-style formats say where their NaN is
    assert fpsim.Format(8, 0, style="fn", has_subnormals=False, signed=False) == fpsim.e8m0


def test_get_format_none_is_an_error():
    with pytest.raises(TypeError, match="a format is required"):
        fpsim.get_format(None)
    with pytest.raises(TypeError, match="a format is required"):
        fpsim.round_to(0.1, None)


@pytest.mark.parametrize("option", ["subnormals", "saturate"])
@pytest.mark.parametrize("value", ["no", "False", 2, 0.5, None])
def test_option_types(option, value):
    with pytest.raises(TypeError, match=f"{option} must be True or False"):
        fpsim.round_to(0.1, "fp16", **{option: value})
    with pytest.raises(TypeError, match=f"{option} must be True or False"):
        fpsim.to_bits(0.1, "fp16", **{option: value})


def test_option_values_accepted():
    for v in (True, False, np.bool_(True), 0, 1):
        fpsim.round_to(0.1, "fp16", subnormals=v, saturate=v)


# ---- 10. to_bits / from_bits write their output directly -----------------------------------------

CODECS = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp32": np.float32,
}


@pytest.mark.parametrize("name", list(CODECS))
def test_to_bits_matches_the_native_codes(name):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(5000) * 2.0 ** rng.integers(-20, 20, 5000)).astype(np.float32)
    x[:4] = [0.0, -0.0, np.inf, -np.inf]
    native = x.astype(CODECS[name])
    want = native.view(f"u{native.itemsize}")
    got = fpsim.to_bits(x, name)
    ok = ~np.isnan(native.astype(np.float32))  # NaN payloads are not compared
    assert got.dtype == want.dtype and (got[ok] == want[ok]).all()
    back = fpsim.from_bits(want, name, dtype=np.float64)
    assert same_bits(back, native.astype(np.float64)).all()


@pytest.mark.parametrize("code_dtype", [np.uint8, np.int16, np.int64, np.uint64, ">u2"])
def test_from_bits_reads_any_integer_dtype(code_dtype):
    codes = np.arange(256, dtype=np.uint8).astype(code_dtype)
    got = fpsim.from_bits(codes, "fp8_e5m2", dtype=np.float64)
    want = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float64)
    assert same_bits(got, want).all()


def test_narrow_formats_codes_have_no_stray_high_bits():
    for f, width in ((fpsim.Format(3, 2), 6), (fpsim.Format(4, 2), 7), (fpsim.tf32, 19)):
        codes = np.arange(1 << min(width, 12), dtype=np.uint32)
        codes[-1] = (1 << width) - 1  # the all-ones code: the largest negative NaN or value
        vals = fpsim.from_bits(codes, f, dtype=np.float64)
        back = fpsim.to_bits(vals, f)
        finite = ~np.isnan(vals)
        assert (back < (1 << width)).all()
        assert (back[finite] == codes[finite]).all()
        # the sign bit of a negative value is bit width - 1, computed by hand
        assert int(fpsim.to_bits(-1.0, f)) == (1 << (width - 1)) | (f.bias << f.man_bits)


def test_fp64_codes_with_the_sign_bit_set():
    x = np.array([-1.5, -0.0, -np.inf, 2.0])
    codes = fpsim.to_bits(x, "fp64")
    assert codes.dtype == np.uint64 and (codes == x.view(np.uint64)).all()
    assert same_bits(fpsim.from_bits(codes, "fp64"), x).all()


def test_to_bits_allocates_only_its_output():
    x = np.linspace(-1000, 1000, 2_000_000, dtype=np.float32)
    for fmt, itemsize in (("fp16", 2), ("fp8_e4m3", 1), ("tf32", 4)):
        fpsim.from_bits(fpsim.to_bits(x, fmt), fmt)  # compile outside the measurement
        tracemalloc.start()
        codes = fpsim.to_bits(x, fmt)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out_bytes = x.size * itemsize
        assert codes.nbytes == out_bytes
        assert peak < out_bytes + 64 * 1024, (fmt, peak, out_bytes)
        tracemalloc.start()
        vals = fpsim.from_bits(codes, fmt)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < vals.nbytes + 64 * 1024, (fmt, peak, vals.nbytes)


# ---- encoding and decoding fast paths against an independent field-by-field oracle ---------------


def _code_oracle(v: float, f) -> int | None:
    """The code of the format value v, field by field with exact arithmetic (None for NaN)."""
    if math.isnan(v):
        return None
    sign = int(math.copysign(1.0, v) < 0) << (f.exp_bits + f.man_bits)
    a = abs(Fraction(v)) if math.isfinite(v) else None
    if a is None:
        return sign | (f.max_exp_field << f.man_bits)
    if a == 0:
        return sign
    if a >= Fraction(f.min_normal):
        e = a.numerator.bit_length() - a.denominator.bit_length()
        e -= Fraction(2) ** e > a
        frac = (a / Fraction(2) ** e - 1) * (1 << f.man_bits)
        assert frac.denominator == 1
        return sign | ((e + f.bias) << f.man_bits) | int(frac)
    frac = a / Fraction(2) ** (f.emin - f.man_bits)
    assert frac.denominator == 1
    return sign | int(frac)


def _value_oracle(code: int, f) -> float:
    """The value of a code, field by field (NaN for the NaN codes)."""
    m, e = f.man_bits, f.exp_bits
    s = -1.0 if code >> (e + m) else 1.0
    biased = (code >> m) & ((1 << e) - 1)
    frac = code & ((1 << m) - 1)
    if biased == f.max_exp_field:
        if f.style == "ieee":
            return s * math.inf if frac == 0 else math.nan
        if frac == (1 << m) - 1:
            return math.nan
    if biased == 0:
        return s * float(Fraction(frac) * Fraction(2) ** (f.emin - m))
    return s * float((1 + Fraction(frac, 1 << m)) * Fraction(2) ** (biased - f.bias))


@settings(max_examples=40, deadline=None)
@given(format_and_container(), st.integers(0, 2**32), st.booleans(), st.booleans())
@builtin_examples(seed=1, subnormals=True, saturate=False)
def test_to_bits_fast_and_general_paths_against_fields(fc, seed, subnormals, saturate):
    f, container = fc
    x = _values(f, container, seed)
    for mode in ("nearest_even", "up", "stochastic"):
        kw = dict(subnormals=subnormals, saturate=saturate, seed=seed)
        codes = fpsim.to_bits(x, f, mode, **kw)
        vals = fpsim.round_to(x, f, mode, **kw)
        for c, v in zip(codes.tolist(), vals.tolist(), strict=True):
            want = _code_oracle(v, f)
            if want is None:
                assert math.isnan(_value_oracle(c, f))
            else:
                assert c == want, (f, mode, v, hex(c), hex(want))
        # the general path (the pure-Python convert) gives the same codes, element for element
        # (the whole array: stochastic rounding draws element i's bits from (seed, i))
        assert (fpsim.to_bits(x, f, mode, backend="python", **kw) == codes).all()


@pytest.mark.parametrize(
    "f", [fpsim.fp16, fpsim.bf16, fpsim.fp8_e4m3, fpsim.Format(3, 2), fpsim.Format(6, 5, bias=40),
          fpsim.Format(4, 3, bias=3, style="fn"), fpsim.Format(8, 3, bias=130)],
    ids=str,
)  # fmt: skip
def test_from_bits_every_code(f):
    codes = np.arange(1 << f.bits, dtype=np.uint32)
    codes = np.concatenate([codes, codes[::-1]])  # larger than the table: the table path
    for dt in (np.float32, np.float64):
        if not f.fits_in(dt):
            continue
        got = fpsim.from_bits(codes, f, dtype=dt)
        want = np.array([_value_oracle(c, f) for c in codes.tolist()], dt)
        assert same_bits(got, want).all()
        # NaN codes decode to the container's canonical quiet NaN with the code's sign
        nan = np.isnan(want)
        it = np.uint32 if dt == np.float32 else np.uint64
        quiet = np.array([np.nan], dt).view(it)[0]
        sign = it(1) << it(8 * np.dtype(dt).itemsize - 1)
        assert ((got.view(it)[nan] & ~sign) == quiet).all()


# ---- inspect: text and big integers are read exactly ------------------------------------------

from fpsim import inspect as fi  # noqa: E402


def test_text_is_rounded_from_its_exact_value():
    # 1 + 2^-11 + 10^-20: just above the fp16 midpoint 1 + 2^-11 between 1 and 1 + 2^-10, so it
    # rounds up; its float64 is the midpoint itself, a tie that rounds to even (down, to 1)
    text = "1.00048828125000000001"
    assert float(text) == 1 + 2**-11
    fl = fi.fields(text, "fp16")
    assert fl.code == 0x3C01 and fl.value == 1 + Fraction(1, 1024)
    assert fl.exact_input == Fraction(text)
    assert fl.error == 1 + Fraction(1, 1024) - Fraction(text)
    assert "exact, not rounded to float64 first" in fi.explain(text, "fp16")
    assert int(fpsim.to_bits(float(text), "fp16")) == 0x3C00  # the float64 route: one lower


def test_fractions_and_big_integers_in_fields():
    fl = fi.fields("1/3", "fp16")
    assert fl.value == Fraction(0.333251953125)
    assert fl.error == Fraction(0.333251953125) - Fraction(1, 3)
    assert "-1/12288" in fi.explain("1/3", "fp16")  # 2731/8192 - 1/3, by hand
    fl = fi.fields(2**70 + 1, "fp32")
    assert fl.value == 2**70 and fl.error == -1
    assert fi.fields(10**400, "fp16").cls == "inf"
    head = fi.compare("0.1", ["fp16"]).splitlines()[0]
    assert head == "x = 0.1  (rounded from its exact value, not through float64)"


@pytest.mark.parametrize(
    "text, value",
    [("0.1", Fraction(1, 10)), ("-1e-5", Fraction(-1, 100000)), ("1/3", Fraction(1, 3)),
     ("2**-25", Fraction(1, 2**25)), ("2^10", Fraction(1024)), ("-2**-3", Fraction(-1, 8)),
     ("0x1.8p-3", Fraction(3, 16)), (" 65520 ", Fraction(65520))],
)  # fmt: skip
def test_parse_number(text, value):
    assert fi.parse_number(text) == value


def test_parse_number_specials_and_errors():
    assert math.isnan(fi.parse_number("nan")) and fi.parse_number("-inf") == -math.inf
    z = fi.parse_number("-0.0")
    assert z == 0 and math.copysign(1.0, z) < 0
    for bad in ("", "abc", "1/0", "0.1.2", "2**999999999", "1e"):
        with pytest.raises(ValueError, match="not a number"):
            fi.parse_number(bad)


@pytest.mark.parametrize("f", [fpsim.fp16, fpsim.bf16, fpsim.fp8_e4m3, fpsim.tf32, fpsim.Format(3, 2),
                               fpsim.Format(6, 9, bias=20)], ids=str)  # fmt: skip
@pytest.mark.parametrize("container", [np.float32, np.float64])
def test_encode_kernel_contract_fast_equals_general(f, container):
    """convert_array writes the same two's-complement code readings (full-width int64 dst) on
    its branch-free encode path as the general pure-Python convert."""
    from fpsim.kernels import cpu, python

    if not f.fits_in(container):
        return
    x = _values(f, container, 5)
    it = np.int32 if container == np.float32 else np.int64
    c = fpsim.fp32.record if container == np.float32 else fpsim.fp64.record
    params = (c, f.record, f.record, 0, 1, 0, 0)
    src = x.view(it)
    fast, general = np.empty(x.size, np.int64), np.empty(x.size, np.int64)
    cpu.convert_array(src, fast, params)
    python.convert_array(src, general, params)
    assert (fast == general).all()


def test_arith_operands_are_read_exactly():
    from fpsim import arith

    # round_inputs rounds the exact integer once: 2^60 + 2^37 in fp32 (by hand, as above)
    assert arith.add(2**60 + 2**36 + 1, 0.0, "fp32", round_inputs=True) == 2**60 + 2**37
    assert arith.mul(Fraction(1, 3), 3, "fp16", round_inputs=True) == float(
        round_rational(3 * Fraction(round_rational(Fraction(1, 3), "fp16")), "fp16")
    )
    arr = np.array([2**60 + 2**36 + 1, 1], dtype=np.int64)
    assert arith.add(arr, 0.0, "fp32", round_inputs=True).tolist() == [2**60 + 2**37, 1.0]
    # without round_inputs such an operand is refused, not silently rounded through float64
    for bad in (2**60 + 1, Fraction(1, 3), arr):
        with pytest.raises(ValueError, match="not a value of any format"):
            arith.add(bad, 0.0, "fp32")


# ---- found in review: each value below is derived by hand ---------------------------------------


def test_from_bits_codes_in_a_narrower_unsigned_dtype():
    # 0x80 as an fp16 code is the subnormal 0x80 * 2^-24 = 2^-17 (not a sign bit)
    assert float(fpsim.from_bits(np.uint8(0x80), "fp16")) == 2.0**-17
    assert (fpsim.from_bits(np.full(100_000, 0x80, np.uint8), "fp16") == 2.0**-17).all()
    assert float(fpsim.from_bits(np.uint16(0x8000), "fp32")) == 0x8000 * 2.0**-149
    assert float(fpsim.from_bits(np.uint32(0x80000000), "fp64")) == 0x80000000 * 2.0**-1074
    assert float(fpsim.from_bits(np.uint8(0x80), "fp16", backend="python")) == 2.0**-17


def test_to_bits_of_float32_for_formats_beyond_float32s_range():
    fn = fpsim.Format(8, 7, style="fn")  # max: exponent field 255, fraction 1111110: code 0x7ffe
    assert int(fpsim.to_bits(np.float32(np.inf), fn, saturate=True)) == 0x7FFE
    assert int(fpsim.to_bits(np.float32(-np.inf), fn, saturate=True)) == 0xFFFE
    # bias 100: float32's max (2 - 2^-23) 2^127 rounds to 2^128, exponent field 228: 0x7200
    assert int(fpsim.to_bits(np.float32(3.4028235e38), fpsim.Format(8, 7, bias=100))) == 0x7200
    for f in (fn, fpsim.Format(8, 7, bias=100), fpsim.Format(8, 10, bias=120)):
        x = np.array([3.4028235e38, -np.inf, 1.5, 2.0**-140], np.float32)
        for kw in ({}, {"saturate": True}):
            assert (fpsim.to_bits(x, f, **kw) == fpsim.to_bits(x.astype(np.float64), f, **kw)).all()


def test_integer_arrays_to_52_bit_precision_formats():
    n = 5088248615046932034
    f = fpsim.Format(11, 51)
    for mode in ALL_MODES[:-1]:
        want = round_rational(Fraction(n), f, mode)
        assert fpsim.round_to(np.array([n]), f, mode)[0] == want == fpsim.round_to(n, f, mode)


def test_decimal_zero_keeps_its_sign_and_huge_exponents_do_not_hang():
    assert math.copysign(1.0, fpsim.round_to(Decimal("-0"), "fp16")) == -1.0
    assert int(fpsim.to_bits(Decimal("-0.000"), "bf16")) == 0x8000
    assert fi.fields(Decimal("-0"), "fp16").hex == "0x8000"
    assert fpsim.round_to(Decimal("1e-999999999"), "fp16") == 0.0
    assert fpsim.round_to(Decimal("1e-999999999"), "fp16", "up") == 2.0**-24
    assert fpsim.round_to(Decimal("-1e999999999"), "fp16", "toward_zero") == -65504.0
    assert fpsim.round_to(Decimal("1e999999999"), "fp16") == math.inf
    with pytest.raises(ValueError, match="not a number"):
        fi.parse_number("1e1000000000")


def test_hex_text_is_read_exactly():
    # 1 + 2^-11 + 2^-56 lies above the fp16 tie at 1 + 2^-11: rounds up; float64 would drop 2^-56
    assert fi.parse_number("0x1.00200000000001p0") == 1 + Fraction(1, 2**11) + Fraction(1, 2**56)
    assert fi.fields("0x1.00200000000001p0", "fp16").hex == "0x3c01"
    assert fi.fields("0x1p-1100", "fp16", "up").hex == "0x0001"
    assert fi.parse_number("0x1p2000") == Fraction(2) ** 2000
    assert fi.fields("-0**5", "fp16").hex == "0x8000"


def test_neighbours_follow_the_container_rule_and_torch_tensors_are_read():
    # next_up(1, fp8_e4m3) = 1 + 2^-3 (3 fraction bits), in float16: e4m3's values fit float16
    r = fpsim.next_up(np.float16([1.0]), "fp8_e4m3")
    assert r.dtype == np.float16 and r[0] == 1.125
    assert isinstance(fpsim.next_down(2.0, "fp16"), float)
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    assert fpsim.to_bits(t, "bf16").tolist() == [0x3F80, 0xC000]  # bf16 1.0 and -2.0, by hand


def test_arith_python_numbers_give_python_floats_and_int_lists_round_exactly():
    from fpsim import arith

    for r in (arith.add(True, 0.0, "fp16"), arith.add(Fraction(1, 3), 0.0, "fp16", round_inputs=True),
              arith.neg(Decimal("0.1"), "fp16", round_inputs=True)):  # fmt: skip
        assert type(r) is float
    assert arith.add(Fraction(1, 3), 0.0, "fp16", round_inputs=True) == round_rational(Fraction(1, 3), "fp16")
    assert arith.add([2**60 + 2**36 + 1], [0], "fp32", round_inputs=True).tolist() == [2**60 + 2**37]
