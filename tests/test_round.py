"""Rounding, encoding and decoding against independent oracles.

Oracles: numpy float16 and ml_dtypes (bit-exact conversions from float32), numpy's float64 ->
float16 (direct, correctly rounded), and exact rational rounding (tests/oracle.py).
"""

import math

import ml_dtypes
import numpy as np
import pytest
from oracle import NATIVE_DTYPES, NATIVE_FORMATS, TEXTBOOK, oracle_round_f32, ref_round, same_bits

import fpsim

MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down"]
ALL_FORMATS = ["fp32", "fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2", TEXTBOOK, fpsim.Format(3, 4)]


def random_f32_patterns(n, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def spread_values(n, seed, lo=-40, hi=20, dtype=np.float64):
    """Random values with log-uniform magnitudes over 2^lo..2^hi and random signs."""
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(lo, hi, n))
    return x.astype(dtype)


# ---- decode: every code ---------------------------------------------------------------------


@pytest.mark.parametrize("name", list(NATIVE_FORMATS))
def test_every_code_decodes_like_the_oracle(name):
    f = NATIVE_FORMATS[name]
    codes = np.arange(f.num_codes, dtype=np.uint16 if f.bits == 16 else np.uint8)
    want = codes.view(NATIVE_DTYPES[name]).astype(np.float32)
    got = fpsim.from_bits(codes, f)
    assert got.dtype == np.float32
    assert same_bits(got, want).all()
    # and into float64
    got64 = fpsim.from_bits(codes, f, dtype=np.float64)
    assert same_bits(got64, want.astype(np.float64)).all()


@pytest.mark.parametrize("name", list(NATIVE_FORMATS))
def test_encode_decode_round_trip_every_code(name):
    f = NATIVE_FORMATS[name]
    codes = np.arange(f.num_codes, dtype=np.uint16 if f.bits == 16 else np.uint8)
    values = fpsim.from_bits(codes, f)
    back = fpsim.to_bits(values, f)
    isnan = np.isnan(values)
    assert (back[~isnan] == codes[~isnan]).all()
    # NaN codes come back as the canonical quiet NaN, with their sign
    sign = codes[isnan] >> (f.bits - 1)
    assert (back[isnan] == (f.nan_code | (sign << (f.bits - 1)))).all()
    # and the codes equal the oracle's own bit view
    oracle_codes = values.astype(NATIVE_DTYPES[name]).view(codes.dtype)
    assert (back[~isnan] == oracle_codes[~isnan]).all()


def test_fp32_codes_sample():
    codes = np.random.default_rng(1).integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    got = fpsim.from_bits(codes, "fp32")
    assert same_bits(got, codes.view(np.float32)).all()
    nonnan = ~np.isnan(got)
    assert (fpsim.to_bits(got, "fp32")[nonnan] == codes[nonnan]).all()


# ---- round float32: a million random bit patterns ----------------------------------------------


@pytest.mark.parametrize("name", list(NATIVE_FORMATS))
def test_round_million_random_float32_patterns(name):
    x = random_f32_patterns(1_000_000, seed=hash(name) % 1000)
    got = fpsim.round_to(x, NATIVE_FORMATS[name])
    want = oracle_round_f32(x, name)
    bad = ~same_bits(got, want)
    assert not bad.any(), (x[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("name", list(NATIVE_FORMATS))
def test_round_spread_values_and_codes(name):
    """Values spread over the whole range (most random patterns are huge or tiny)."""
    x = spread_values(300_000, seed=7, dtype=np.float32)
    f = NATIVE_FORMATS[name]
    want = oracle_round_f32(x, name)
    assert same_bits(fpsim.round_to(x, f), want).all()
    codes = fpsim.to_bits(x, f)
    want_codes = x.astype(NATIVE_DTYPES[name]).view(codes.dtype)
    nan = np.isnan(want)
    assert (codes[~nan] == want_codes[~nan]).all()


# ---- round float64: directly, never through float32 ------------------------------------------


def test_fp16_from_float64_matches_numpy_direct_conversion():
    x = np.concatenate(
        [spread_values(500_000, 3, -30, 17), np.random.default_rng(4).standard_normal(500_000)]
    )
    want = x.astype(np.float16).astype(np.float64)  # numpy's float64 -> float16 is direct
    assert same_bits(fpsim.round_to(x, "fp16"), want).all()


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_float64_against_exact_rational_rounding(fmt, mode):
    f = fpsim.get_format(fmt)
    lo, hi = f.emin - f.man_bits - 3, f.emax + 2
    x = np.concatenate([spread_values(3000, 11, lo, hi), spread_values(500, 12, -3, 3)])
    # ties and near-ties: midpoints between neighbours, nudged by a float64 ulp either way
    y = fpsim.round_to(spread_values(500, 13, lo, hi), f, "toward_zero")
    mid = y + np.copysign(fpsim.ulp(y, f) / 2, y)
    x = np.concatenate([x, mid, np.nextafter(mid, 0), np.nextafter(mid, np.inf)])
    got = fpsim.round_to(x, f, mode)
    want = np.array([ref_round(float(v), f, mode) for v in x])
    bad = ~same_bits(got, want)
    assert not bad.any(), (x[bad][:4], got[bad][:4], want[bad][:4])


@pytest.mark.parametrize("flags", [dict(subnormals=False), dict(saturate=True)])
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
def test_flush_and_saturate_against_exact_rounding(fmt, flags):
    f = fpsim.get_format(fmt)
    x = spread_values(4000, 5, f.emin - f.man_bits - 2, f.emax + 3)
    x = np.concatenate([x, [np.inf, -np.inf, np.nan, 0.0, -0.0]])
    for mode in MODES:
        got = fpsim.round_to(x, f, mode, **flags)
        want = np.array([ref_round(float(v), f, mode, **flags) for v in x])
        assert same_bits(got, want).all(), mode
        got32 = fpsim.round_to(x.astype(np.float32), f, mode, **flags)
        want32 = np.array([ref_round(float(v), f, mode, **flags) for v in x.astype(np.float32)])
        assert same_bits(got32, want32.astype(np.float32)).all(), mode


def test_double_rounding_cases_from_peers():
    # ml_dtypes rounds float64 through float32 and gets these wrong; fpsim must not.
    x = 1 + 2**-8 + 2**-35
    assert fpsim.round_to(x, "bf16") == 1.0078125 == ref_round(x, "bf16")
    assert fpsim.round_to(8.5 + 2**-40, "fp8_e4m3") == 9.0 == ref_round(8.5 + 2**-40, "fp8_e4m3")
    # an fp16 double-rounding trap: just above a tie in float64, a tie once in float32
    x = 1 + 2**-11 + 2**-40
    assert np.float32(x) == 1 + 2**-11  # float32 loses the sticky bit...
    assert fpsim.round_to(x, "fp16") == 1 + 2**-10  # ...fpsim does not


# ---- pinned special cases (every bug in peers.md) -------------------------------------------


@pytest.mark.parametrize(
    "x,want",
    [
        (65504.0, 65504.0),
        (65519.99, 65504.0),
        (65520.0, math.inf),  # the tie above the largest value rounds to "even" = overflow
        (65535.0, math.inf),
        (65536.0, math.inf),
        (100000.0, math.inf),  # pychop: [65536, 131072) -> 0
        (1e30, math.inf),  # qtorch: 1e30 -> 131008
        (3.4028234663852886e38, math.inf),  # FLT_MAX
        (-65520.0, -math.inf),
        (2.0**-24, 2.0**-24),  # smallest subnormal
        (2.0**-25, 0.0),  # exactly half of it: tie to even = 0
        (2.0**-25 + 2.0**-40, 2.0**-24),  # just above the tie
        (np.nextafter(np.float32(2.0**-25), np.float32(1)), 2.0**-24),
        (-(2.0**-25), -0.0),  # negative underflow keeps its sign
        (-(2.0**-30), -0.0),
        (1.5 * 2.0**-24, 2.0**-23),  # subnormal tie: 1.5 -> 2 (even)
        (2.5 * 2.0**-24, 2.0**-23),  # subnormal tie: 2.5 -> 2 (even)
        (1 + 2.0**-11, 1.0),  # tie between 1 and 1+2^-10: even is 1
        (1 + 3 * 2.0**-11, 1 + 2.0**-9),  # tie: odd 1+2^-10 -> even 1+2^-9
        (2048 + 1.0, 2048.0),  # ties at other binades
        (2048 + 3.0, 2052.0),
        (0.5 + 2.0**-12, 0.5),
        (-(0.5 + 3 * 2.0**-12), -(0.5 + 2.0**-10)),
        (0.0, 0.0),
        (-0.0, -0.0),
        (math.inf, math.inf),
        (-math.inf, -math.inf),
    ],
)
def test_pinned_fp16(x, want):
    for dtype in (np.float32, np.float64):
        xv = dtype(x)
        got = fpsim.round_to(xv, "fp16")
        assert same_bits(np.asarray(got), np.asarray(dtype(want))), (xv, got, want)
        # the oracles agree
        assert same_bits(np.asarray(np.float16(xv).astype(dtype)), np.asarray(dtype(want)))


def test_nan_stays_nan_in_every_format():
    nans = np.array([np.nan, -np.nan], np.float32)
    # NaN payloads that the classic bf16 add-and-mask trick turns into inf or zero
    payload = np.array([0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7F80FFFF], np.uint32).view(np.float32)
    x = np.concatenate([nans, payload])
    for fmt in ALL_FORMATS:
        assert np.isnan(fpsim.round_to(x, fmt)).all()
        assert np.isnan(fpsim.round_to(x.astype(np.float64), fmt)).all()
        for mode in MODES + ["stochastic"]:
            assert np.isnan(fpsim.round_to(x, fmt, mode, seed=1)).all()


def test_nan_sign_and_infinities_in_fn_format():
    f = fpsim.fp8_e4m3
    assert np.isnan(fpsim.round_to(np.inf, f))
    assert fpsim.round_to(-np.inf, f, saturate=True) == -448.0
    assert fpsim.round_to(464.0, f) == 448.0  # tie between 448 and (NaN-coded) 480: to even
    assert np.isnan(fpsim.round_to(465.0, f))  # above it: overflow -> NaN, as ml_dtypes
    assert float(np.float32(465).astype(ml_dtypes.float8_e4m3fn)) != 448.0
    assert fpsim.to_bits(-np.nan, f) == 0xFF


def test_signed_zeros_every_format_and_mode():
    z = np.array([0.0, -0.0])
    for fmt in ALL_FORMATS:
        for mode in MODES + ["stochastic"]:
            r = fpsim.round_to(z, fmt, mode, seed=3)
            assert same_bits(r, z).all()
            r = fpsim.round_to(z, fmt, mode, subnormals=False, seed=3)
            assert same_bits(r, z).all()


# ---- directed modes against their definitions --------------------------------------------------


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "tf32"])
def test_directed_modes_bracket(fmt):
    f = fpsim.get_format(fmt)
    x = spread_values(100_000, 21, f.emin - f.man_bits, f.emax)
    x = x[np.abs(x) < f.max]
    down = fpsim.round_to(x, f, "down")
    up = fpsim.round_to(x, f, "up")
    assert (down <= x).all() and (x <= up).all()
    exact = down == up
    assert (down[exact] == x[exact]).all()
    # nothing representable lies strictly between: up is the next value after down
    assert (fpsim.next_up(down[~exact], f) == up[~exact]).all()
    tz = fpsim.round_to(x, f, "toward_zero")
    assert (tz == np.where(x > 0, down, up)).all()
    ne = fpsim.round_to(x, f)
    assert ((ne == up) | (ne == down)).all()
    assert (np.abs(ne - x) <= np.abs(np.where(ne == up, down, up) - x)).all()


def test_next_up_down_edges():
    f = fpsim.fp16
    assert fpsim.next_up(65504.0, f) == np.inf
    assert fpsim.next_down(-65504.0, f) == -np.inf
    assert fpsim.next_up(-np.inf, f) == -65504.0
    assert fpsim.next_up(np.inf, f) == np.inf
    assert fpsim.next_up(0.0, f) == 2.0**-24
    assert fpsim.next_down(0.0, f) == -(2.0**-24)
    assert same_bits(np.float32(fpsim.next_up(-(2.0**-24), f)), np.float32(-0.0))
    assert fpsim.next_up(1.0, f) == 1 + 2.0**-10
    assert fpsim.next_down(1.0, f) == 1 - 2.0**-11
    assert fpsim.next_up(1.0001, f) == 1 + 2.0**-10  # not representable: the next one above
    assert np.isnan(fpsim.next_up(448.0, "fp8_e4m3"))  # nothing above the largest value
    assert np.isnan(fpsim.next_up(np.nan, f))
    # every fp16 value: next_up agrees with numpy's nextafter on float16
    v = fpsim.from_bits(np.arange(0x7C00, dtype=np.uint16), f).astype(np.float16)
    assert (fpsim.next_up(v.astype(np.float32), f) == np.nextafter(v, np.float16(np.inf))).all()
    assert (
        fpsim.next_down(-v.astype(np.float32), f) == np.nextafter(-v, np.float16(-np.inf))
    ).all()


def test_ulp_matches_numpy_spacing():
    # every finite fp16 value below the largest (np.spacing(65504) is inf: the gap to overflow;
    # fpsim's ulp is the quantum of the top binade, 32)
    v = fpsim.from_bits(np.arange(0x7BFF, dtype=np.uint16), "fp16").astype(np.float16)
    assert (fpsim.ulp(v, "fp16") == np.spacing(v).astype(np.float64)).all()
    assert fpsim.ulp(65504, "fp16") == 32.0
    v32 = np.abs(random_f32_patterns(10_000, 5))
    v32 = v32[np.isfinite(v32)]
    assert (fpsim.ulp(v32, "fp32") == np.spacing(v32).astype(np.float64)).all()
    assert np.isnan(fpsim.ulp(np.inf, "fp16"))


# ---- stochastic rounding ----------------------------------------------------------------------


def test_stochastic_is_one_of_the_neighbours_and_reproducible():
    x = spread_values(50_000, 8, -20, 10)
    for fmt in ["fp16", "bf16", "fp8_e5m2"]:
        r = fpsim.round_to(x, fmt, "stochastic", seed=42)
        down, up = fpsim.round_to(x, fmt, "down"), fpsim.round_to(x, fmt, "up")
        assert ((r == down) | (r == up)).all()
        assert same_bits(r, fpsim.round_to(x, fmt, "stochastic", seed=42)).all()
        assert not same_bits(r, fpsim.round_to(x, fmt, "stochastic", seed=43)).all()


@pytest.mark.parametrize("frac", [0.25, 0.5, 0.75, 1 / 1024])
def test_stochastic_frequency_and_unbiased(frac):
    # x = 1 + frac ulp in fp16: rounds up with probability frac
    n = 400_000
    x = np.full(n, 1 + frac * 2.0**-10)
    r = fpsim.round_to(x, "fp16", "stochastic", seed=2024)
    p_up = np.mean(r > 1)
    sigma = math.sqrt(frac * (1 - frac) / n)
    assert abs(p_up - frac) < 5 * sigma + 1e-12
    # the mean is the input, within the same statistical error (unbiased in expectation)
    assert abs(r.mean() - x[0]) < 5 * sigma * 2.0**-10 + 1e-15


def test_stochastic_subnormals_and_tiny_values():
    # a value far below the smallest subnormal still rounds up with its tiny probability
    n = 200_000
    x = np.full(n, 0.3 * 2.0**-24)
    p = np.mean(fpsim.round_to(x, "fp16", "stochastic", seed=5) > 0)
    assert abs(p - 0.3) < 5 * math.sqrt(0.3 * 0.7 / n)


# ---- API behaviour -------------------------------------------------------------------------


def test_container_dtype_shape_and_scalars():
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    r = fpsim.round_to(a, "bf16")
    assert r.dtype == np.float32 and r.shape == (3, 4)
    assert fpsim.round_to(a.T, "bf16").shape == (4, 3)  # non-contiguous input
    assert isinstance(fpsim.round_to(0.1, "fp16"), float)
    assert fpsim.round_to(0.1, "fp16") == float(np.float16(0.1))
    assert isinstance(fpsim.round_to(np.float32(0.1), "fp16"), np.float32)
    assert fpsim.round_to([1, 2, 3], "fp8_e4m3").dtype == np.float64
    assert fpsim.round_to(np.float16(0.1), "bf16") == float(ml_dtypes.bfloat16(np.float16(0.1)))


def test_bad_input_errors():
    with pytest.raises(ValueError, match="unknown rounding mode 'nearest'"):
        fpsim.round_to(1.0, "fp16", "nearest")
    with pytest.raises(ValueError, match="unknown format"):
        fpsim.round_to(1.0, "fp12")
    # float32 input, a format float32 cannot hold: the result widens to float64 (the rule of
    # fpsim.containers), with the exact value
    wide = fpsim.round_to(np.array([1.0, 2.0**-1030], np.float32), fpsim.Format(11, 10))
    assert wide.dtype == np.float64 and wide.tolist() == [1.0, 0.0]  # 2^-1030 is not a float32
    with pytest.raises(TypeError, match="expected real numbers .* got an array of <U1"):
        fpsim.round_to(np.array(["a"]), "fp16")
    with pytest.raises(ValueError, match="seed"):
        fpsim.round_to(1.0, "fp16", "stochastic", seed=-1)
    with pytest.raises(ValueError, match="out of range"):
        fpsim.from_bits(0x10000, "fp16")
    with pytest.raises(TypeError, match="integers"):
        fpsim.from_bits(1.5, "fp16")


# ---- the pure-Python reference runs the same code as the compiled kernel ---------------------


@pytest.mark.parametrize("mode", MODES + ["stochastic"])
def test_python_reference_equals_cpu_kernel(mode):
    x32 = np.concatenate(
        [random_f32_patterns(1500, 9), spread_values(1500, 10, -30, 20, np.float32)]
    )
    x64 = np.concatenate([spread_values(1500, 11, -30, 20), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    for fmt in ["fp16", "bf16", "fp8_e4m3", TEXTBOOK]:
        for x in (x32, x64):
            for flags in ({}, {"subnormals": False}, {"saturate": True}):
                a = fpsim.round_to(x, fmt, mode, seed=7, **flags)
                b = fpsim.round_to(x, fmt, mode, seed=7, backend="python", **flags)
                assert same_bits(a, b).all()
        codes = fpsim.to_bits(x32, fmt, mode, seed=7)
        assert (codes == fpsim.to_bits(x32, fmt, mode, seed=7, backend="python")).all()
        assert same_bits(
            fpsim.from_bits(codes, fmt), fpsim.from_bits(codes, fmt, backend="python")
        ).all()


def test_vectorised_nearest_even_equals_general_routine():
    """The branch-free nearest-even path and scalar.convert give the same bits."""
    from fpsim.kernels import scalar

    x = np.concatenate(
        [random_f32_patterns(3000, 12), spread_values(3000, 13, -140, 128, np.float32)]
    )
    bits = x.view(np.int32)
    for fmt in ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", TEXTBOOK, "tf32"]:
        f = fpsim.get_format(fmt)
        c32, r = fpsim.fp32.record, f.record
        if f.exp_bits == 8 and f.bias == 127:  # bf16, tf32: the add-and-mask form too
            for v in bits:
                fast = scalar.round_nearest_even_same_range(int(v), 8, 23, f.man_bits)
                slow = scalar.convert(int(v), c32, r, c32, 0, 1, 0, 0)
                assert fast == slow or (np.isnan(np.int32(fast).view(np.float32)) and np.isnan(np.int32(slow).view(np.float32)))
        for sub in (0, 1):
            for sat in (0, 1):
                consts = scalar.nearest_even_constants(c32, r, sub, sat)
                for v in bits:
                    fast = scalar.round_nearest_even_bits(int(v), c32, f.man_bits, f.bias, consts)
                    slow = scalar.convert(int(v), c32, r, c32, scalar.NEAREST_EVEN, sub, sat, 0)
                    assert fast == slow or (np.isnan(np.int32(fast).view(np.float32))
                                            and np.isnan(np.int32(slow).view(np.float32)))  # fmt: skip
