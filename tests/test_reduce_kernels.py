"""The fast forms of the reduction steps (fpsim.kernels.fastround, fpsim.kernels.reduce).

Oracles: ``scalar.round_value`` (itself tested against ml_dtypes and exact rational rounding in
test_round.py / test_properties.py) for the float-instruction roundings, compiled and as plain
Python; exact rational arithmetic (arith_oracle) for the plain float64 sum the fp16 accumulator
takes in place of two_sum, on the inputs built to break it; and the general path, bit for bit.
"""

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

import fpsim
from fpsim import arith
from fpsim.kernels import fastround, reduce, scalar

sys.path.insert(0, str(Path(__file__).parent))
from arith_oracle import MODES, round_rational  # noqa: E402

FAST_FORMATS = ["fp16", "bf16", "fp32", "tf32", "fp8_e5m2", "e8m13",
                fpsim.Format(5, 2, name="e5m2_b3", bias=3), fpsim.Format(8, 3, name="e8m3_b200",
                                                                     bias=200)]  # fmt: skip


def fmt(f):
    return arith.E8M13 if f == "e8m13" else fpsim.get_format(f)


def same_bits(a, b) -> bool:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return bool(((a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))).all())


def probes(f, rng, n=4000):
    """Values around every interesting point of f: zeros, subnormals, binade edges, midpoints
    (exact ties) and their float64 neighbours, max and beyond, inf, NaN, random values."""
    f = fmt(f)
    top_ulp = 2.0 ** (f.emax - f.man_bits)
    pts = [0.0, f.smallest_subnormal, f.min_normal, 1.0, f.max, f.max + top_ulp / 2,
           f.max + top_ulp, 2.0 ** (f.emax + 1), 1e300, math.inf, math.nan,
           f.min_normal / 2 + f.smallest_subnormal / 2]  # fmt: skip
    q = f.smallest_subnormal
    pts += [q / 2, 3 * q / 2, q * 0.75]
    for e in range(max(f.emin - 2, -1020), min(f.emax + 2, 1020), max(1, (f.emax - f.emin) // 40)):
        base = 2.0**e
        step = base * 2.0 ** -f.man_bits
        pts += [base, base + step / 2, base + step * 1.5, base - step / 4]
    pts = np.array(pts, np.float64)
    near = np.concatenate([np.nextafter(pts, np.inf), np.nextafter(pts, -np.inf)])
    rand = rng.standard_normal(n) * np.exp2(rng.integers(f.emin - f.man_bits - 3, f.emax + 3, n))
    x = np.concatenate([pts, near, rand])
    return np.concatenate([x, -x])


@njit(cache=False, error_model="numpy")
def _apply(x, mode, k):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = fastround.round_fast(x[i], mode, k)
    return out


@pytest.mark.parametrize("f", FAST_FORMATS, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_round_fast_equals_convert(f, mode):
    F = fmt(f)
    assert fastround.fast_round_ok(F.record)
    rng = np.random.default_rng(hash((str(f), mode)) % 2**32)
    x = probes(f, rng)
    m = fpsim.ROUNDING_MODES[mode]
    for subn in (1, 0):
        for sat in (0, 1):
            k = fastround.fast_round_constants(F.record, subn, sat)
            got = _apply(x, m, k)
            want = np.array([scalar.round_value(float(v), F.record, m, subn, sat, 0) for v in x])
            assert same_bits(got, want), x[~((got == want) | (np.isnan(got) & np.isnan(want)))][:5]
            # the same lines uncompiled
            py = np.array([fastround.round_fast(float(v), m, k) for v in x[::37]])
            assert same_bits(py, want[::37])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 11), st.integers(1, 50),
       st.one_of(st.integers(-1022, -990), st.integers(990, 1023), st.integers(-1022, 1023)),
       st.sampled_from(MODES), st.integers(0, 1), st.integers(0, 1))
def test_round_fast_equals_convert_on_any_format_it_accepts(e, m, emax, mode, subn, sat):
    """Every IEEE-style format ``fast_round_ok`` accepts, not a hand-picked list: biases that put
    the whole format near float64's smallest normal (emax - m below -1022, where 2^(emax - m)
    alone is a float64 subnormal) or near its largest."""
    bias = 2**e - 2 - emax  # the IEEE-style format's largest exponent is emax
    try:
        F = fpsim.Format(e, m, bias=bias)
    except ValueError:  # beyond float64's range: no format to round to
        return
    if not fastround.fast_round_ok(F.record):
        return
    x = probes(F, np.random.default_rng(e * 1000 + m), n=300)
    md = fpsim.ROUNDING_MODES[mode]
    k = fastround.fast_round_constants(F.record, subn, sat)
    got = _apply(x, md, k)
    want = np.array([scalar.round_value(float(v), F.record, md, subn, sat, 0) for v in x])
    assert same_bits(got, want), x[~((got == want) | (np.isnan(got) & np.isnan(want)))][:5]


def test_round_fast_at_the_bottom_of_float64():
    """e2m1 with bias 1003: max = 1.5 * 2^-1001, and its float64 sum of two max values must
    overflow (a clamp of emax at -1000 once made the fast max twice the format's)."""
    F = fpsim.Format(2, 1, bias=1003)
    k = fastround.fast_round_constants(F.record, 1, 0)
    assert k[4] == 1.5 * 2.0**-1001
    x = np.array([2 * F.max, -2 * F.max, F.max])
    assert same_bits(_apply(x, fpsim.ROUNDING_MODES["nearest_even"], k), [math.inf, -math.inf,
                                                                         F.max])
    assert same_bits(_apply(x, fpsim.ROUNDING_MODES["toward_zero"], k), [F.max, -F.max, F.max])


def test_fast_round_refuses_what_it_cannot_do():
    ok = fastround.fast_round_ok
    assert not ok(fpsim.get_format("fp8_e4m3").record)  # no inf: overflow is NaN
    assert not ok(fpsim.get_format("fp8_e4m3fnuz").record)  # no -0
    assert not ok(fpsim.get_format("fp64").record)  # 52 fraction bits
    assert not ok(fpsim.Format(11, 10, bias=1030).record)  # grid below float64's normal range
    assert not ok(fpsim.get_format("e8m0").record)
    assert not ok(fpsim.Format(2, 1, bias=-1).record)  # quantum 2: x / q could underflow


# ---- the plain float64 sum of an fp16 accumulator ----------------------------------------------
def test_plain_sum_condition():
    pa = reduce.plain_add_innocuous
    f16, bf16, f32 = (fpsim.get_format(n) for n in ("fp16", "bf16", "fp32"))
    lo = lambda f: f.emin - f.man_bits  # noqa: E731
    assert pa(22, 11, f16.emax, lo(f16), 33)  # fp16 products into fp16
    assert pa(8, 11, f16.emax, lo(f16), 16)  # fp8 products
    assert not pa(16, 8, bf16.emax, lo(bf16), 255)  # bf16: 260 binades
    assert not pa(22, 24, f32.emax, lo(f32), 33)  # fp32 accumulator


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(-24, 15), st.integers(0, 2047), st.integers(-48, 31), st.integers(0, 2**22 - 1),
       st.booleans(), st.booleans())  # fmt: skip
def test_plain_sum_into_fp16_is_exact_rounding(es, fs, et, ft, neg_s, neg_t):
    # s: an fp16 value; t: an fp16 product (22 significant bits) placed at any exponent: the
    # float64 sum rounded to fp16 equals the exact sum rounded once, ties and tiny addends
    # included (the cases that break double rounding for wide accumulators)
    s = math.ldexp(fs, es - 10) if es > -24 else math.ldexp(fs % 1024, -24)
    s = float(fpsim.round_to(-s if neg_s else s, "fp16"))
    t = math.ldexp(ft | (1 << 21), et - 21)
    t = -t if neg_t else t
    if abs(t) > 2.0**32:
        return
    k = fastround.fast_round_constants(fpsim.get_format("fp16").record, 1, 0)
    got = fastround.round_fast_nearest_even(s + t, k)
    want = round_rational(Fraction(s) + Fraction(t), "fp16") if s + t != 0 else s + t
    assert same_bits(got, want), (s, t, got, want)


@pytest.mark.parametrize("acc", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("mode", MODES)
def test_fast_sequential_path_equals_general_path(acc, mode):
    rng = np.random.default_rng(7)
    a = np.asarray(fpsim.round_to(rng.standard_normal((5, 300)) * 8, "fp16"))
    b = np.asarray(fpsim.round_to(rng.standard_normal((300, 37)) * 8, "fp16"))
    a[0, :3] = [np.inf, -0.0, 0.0]
    a[1, 5] = np.nan
    b[7, 2] = 60000.0
    got = arith.matmul(a, b, "fp16", acc=acc, order="sequential", rounding=mode, out_fmt="fp32")
    from fpsim.arith.reductions import _params
    from fpsim.kernels import arith_cpu

    f16, A_fmt, f32 = (fpsim.get_format(n) for n in ("fp16", acc, "fp32"))
    P = list(_params(f16, A_fmt, f32, fpsim.ROUNDING_MODES[mode], 1, 0, 0, 0, 0, False, None,
                     False))  # fmt: skip
    assert P[reduce.I_FAST_ADD] != 0  # the fast form ran above
    P[reduce.I_FAST_ADD] = P[reduce.I_FAST_OUT] = 0
    out = np.empty((1, 5, 37))
    arith_cpu.matmul(a.reshape(1, 5, 300), b.reshape(1, 300, 37), out, tuple(P))
    assert same_bits(got, out[0])


@njit(cache=False, error_model="numpy")
def _apply_stochastic(x, rand, k):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = fastround.round_fast_stochastic(x[i], rand[i], k)
    return out


@pytest.mark.parametrize("f", FAST_FORMATS, ids=str)
def test_round_fast_stochastic_equals_convert(f):
    """Same random bits, same result as convert; the bits are drawn at random and also put
    right at each value's threshold ceil(frac * 2^62) (computed here with Fractions), where
    one more or one less decides."""
    F = fmt(f)
    rng = np.random.default_rng(hash(str(f)) % 2**32)
    x = probes(f, rng, 2000)
    finite = np.isfinite(x)
    thr = np.zeros(x.size, np.int64)
    for i, v in enumerate(x):
        if finite[i] and v != 0:
            a = Fraction(abs(float(v)))
            e = max(math.floor(math.log2(a)), F.emin)
            q = Fraction(2) ** (e - F.man_bits)
            frac = a / q - math.floor(a / q)
            thr[i] = math.ceil(frac * 2**62)
    S = fpsim.ROUNDING_MODES["stochastic"]
    for rand in (rng.integers(0, 2**62, x.size), np.maximum(thr - 1, 0), thr,
                 np.minimum(thr + 1, 2**62 - 1)):  # fmt: skip
        rand = rand.astype(np.int64)
        for subn, sat in ((1, 0), (0, 1)):
            k = fastround.fast_round_constants(F.record, subn, sat)
            got = _apply_stochastic(x, rand, k)
            want = np.array([scalar.round_value(float(v), F.record, S, subn, sat, int(r))
                             for v, r in zip(x, rand, strict=True)])  # fmt: skip
            assert same_bits(got, want), x[~((got == want) | (np.isnan(got) & np.isnan(want)))][:5]


@pytest.mark.parametrize("acc", ["fp16", "bf16", "fp32"])
def test_fast_stochastic_sequential_path_equals_general_path(acc):
    rng = np.random.default_rng(8)
    a = np.asarray(fpsim.round_to(rng.standard_normal((4, 200)) * np.exp2(rng.integers(-30, 8,
                   (4, 200))), "fp16"))  # fmt: skip
    b = np.asarray(fpsim.round_to(rng.standard_normal((200, 9)) * 4, "fp16"))
    a[0, :2] = [np.inf, -0.0]
    from fpsim.arith.reductions import _params
    from fpsim.kernels import arith_cpu

    f16, A_fmt, f32 = (fpsim.get_format(n) for n in ("fp16", acc, "fp32"))
    mode = fpsim.ROUNDING_MODES["stochastic"]
    P = list(_params(f16, A_fmt, f32, mode, 1, 0, 77, 0, 0, False, None, False))
    assert reduce.fast_kind(np.array(P)) == 3
    fast = np.empty((1, 4, 9))
    arith_cpu.matmul(a.reshape(1, 4, 200), b.reshape(1, 200, 9), fast, tuple(P))
    P[reduce.I_FAST_STOCH] = 0
    general = np.empty((1, 4, 9))
    arith_cpu.matmul(a.reshape(1, 4, 200), b.reshape(1, 200, 9), general, tuple(P))
    assert same_bits(fast, general)
    got = arith.matmul(a, b, "fp16", acc=acc, order="sequential", rounding="stochastic", seed=77,
                       out_fmt="fp32")  # fmt: skip
    assert same_bits(got, fast[0])
