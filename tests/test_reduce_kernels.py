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
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from numba import njit

import fpsim
from fpsim import arith
from fpsim.arith.reductions import _params
from fpsim.kernels import arith_cpu, fastround, lanes32, random_lanes, reduce, reduce_fast, scalar

sys.path.insert(0, str(Path(__file__).parent))
from arith_cases import (  # noqa: E402
    check_stochastic_reduction,
    fmt,
    general_block_rows,
    same_bits,
    scaled_values,
)
from arith_oracle import MODES, reduce_reference, round_rational  # noqa: E402

FAST_FORMATS = ["fp16", "bf16", "fp32", "tf32", "fp8_e5m2", "e8m13",
                fpsim.Format(5, 2, name="e5m2_b3", bias=3), fpsim.Format(8, 3, name="e8m3_b200",
                                                                     bias=200)]  # fmt: skip


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
    assert not pa(22, 24, f32.emax, lo(f32), 33)  # fp32 accumulator, terms not known
    assert pa(22, 24, f32.emax, lo(f32), 31, -48)  # fp16 products: fp32 values
    assert not pa(16, 24, f32.emax, lo(f32), 255, -266)  # bf16 products: below fp32's range
    assert pa(8, 8, bf16.emax, lo(bf16), 17, -18)  # fp8 e4m3 products into bf16
    assert not pa(22, 8, bf16.emax, lo(bf16), 31, -48)  # fp16 products: 22 bits
    assert not pa(26, 26, 127, -151, 31, -48)  # 2 * 26 > 50


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([("fp32", "fp16"), ("bf16", "fp8_e4m3"), ("bf16", "fp8_e5m2")]),
       st.integers(0, 2**31), st.integers(-60, 60), st.booleans())
def test_plain_sum_of_accumulator_values_is_exact_rounding(pair, seed, gap, neg):
    # s: a value of the accumulator; t: a product of two input values (itself a value of the
    # accumulator) at any distance from s, above or below it: the float64 sum rounded once
    # more equals the exact sum rounded once (the accumulator-dominant and term-dominant cases)
    acc, f = pair
    A, F = fmt(acc), fmt(f)
    rng = np.random.default_rng(seed)
    vals = np.asarray(fpsim.round_to(rng.standard_normal(2) * np.exp2(rng.integers(
        F.emin - F.man_bits, F.emax, 2)), F, saturate=True), np.float64)  # fmt: skip
    t = float(vals[0] * vals[1])
    s = float(fpsim.round_to(math.ldexp(rng.standard_normal(), gap) * (abs(t) or 1.0), A,
                             saturate=True))  # fmt: skip
    s = -s if neg else s
    lo = lambda g: g.emin - g.man_bits  # noqa: E731
    assert reduce.plain_add_innocuous(2 * F.precision, A.precision, A.emax, lo(A),
                                      2 * F.emax + 1, 2 * lo(F))  # fmt: skip
    k = fastround.fast_round_constants(A.record, 1, 0)
    got = fastround.round_fast_nearest_even(s + t, k)
    want = round_rational(Fraction(s) + Fraction(t), A) if s + t != 0 else s + t
    assert same_bits(got, want), (s, t, got, want)


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
    lanes = (acc != "fp32" and mode in ("nearest_even", "toward_zero", "up", "down")
             and (acc == "bf16" or mode == "nearest_even" or lanes32.f16c_modes())) or (
        acc == "fp32" and mode == "nearest_even")  # fmt: skip
    assert reduce.fast_kind(np.array(P)) == (4 if lanes else 1 if mode == "nearest_even" else 2)
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
    P[reduce.I_LANES32] = 0  # (fp16/bf16: the float32-lane kernel, test_lanes32_stochastic)
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


# ---- the float32-lane kernels (fpsim.kernels.lanes32) ------------------------------------------


@njit(cache=False, error_model="numpy")
def _lanes_round(x, kind):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = lanes32.round_f32_to_f16(x[i]) if kind == 2 else lanes32.round_f32_to_bf16(x[i])
    return out


@njit(cache=False, error_model="numpy")
def _lanes_add_odd(s, t):
    out = np.empty_like(s)
    for i in range(s.size):
        out[i] = lanes32.add_odd_f32(s[i], t[i])
    return out


def _f32_probes(rng, n=200_000):
    """Random float32 bit patterns (every exponent, subnormals, inf, NaN) and the values around
    fp16's and bf16's midpoints, max, overflow thresholds and smallest subnormals."""
    pats = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    pts = [0.0, 65504.0, 65520.0, 65536.0, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14,
           float(ml_bf16_max()), 2.0**-133, 2.0**-134, 1.0 + 2.0**-11, 1.0 + 2.0**-8,
           3.4e38, np.inf, np.nan]  # fmt: skip
    pts = np.array(pts, np.float32)
    near = np.concatenate([np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(0))])
    x = np.concatenate([pats, pts, near])
    return np.concatenate([x, -x])


def test_lanes32_fp16_kernels_need_numba_to_compile_for_this_cpu(monkeypatch):
    """With numba compiling for another CPU (NUMBA_CPU_NAME=generic, a portable cache) F16C's
    instructions may not exist: the fp16 accumulators take the float64 kernels, never a
    compile error inside LLVM. (bf16 needs no conversion instruction.)"""
    from numba.core import config

    lanes32.f16_native.cache_clear()
    lanes32.f16c_modes.cache_clear()
    try:
        monkeypatch.setattr(config, "CPU_NAME", "generic")
        assert not lanes32.f16_native() and not lanes32.f16c_modes()
        assert lanes32.lanes32_kind("fp16", 22, -48, 31, True, False) == lanes32.NONE
        assert lanes32.lanes32_kind("bf16", 22, -48, 31, True, False) == lanes32.BF16
    finally:
        monkeypatch.undo()
        lanes32.f16_native.cache_clear()
        lanes32.f16c_modes.cache_clear()


def ml_bf16_max():
    return fpsim.get_format("bf16").max


@pytest.mark.skipif(not lanes32.f16_native(), reason="no float32 <-> fp16 conversion in hardware")
def test_lanes32_fp16_rounding_equals_numpy():
    x = _f32_probes(np.random.default_rng(1))
    got = _lanes_round(x, lanes32.FP16)
    want = x.astype(np.float16).astype(np.float32)  # numpy: IEEE nearest even, float32 -> fp16
    assert same_bits(got, want)


def test_lanes32_bf16_rounding_equals_ml_dtypes():
    import ml_dtypes

    x = _f32_probes(np.random.default_rng(2))
    got = _lanes_round(x, lanes32.BF16)
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert same_bits(got, want)
    assert np.isnan(got[np.isnan(x)]).all()  # every NaN stays NaN (its payload may not carry)


@pytest.mark.parametrize("acc, mode", [(a, m) for a in ("fp16", "bf16")
                                       for m in ("toward_zero", "up", "down", "nearest_even")])
def test_lanes32_roundings_equal_the_exact_definition(acc, mode):
    """Each accumulator rounding of the float32-lane kernels (fp16's directed ones: F16C's
    rounding control) on float32 patterns of every kind: against fpsim's general rounding on
    all of them, and the exact rational definition (arith_oracle.round_rational) on a sample."""
    code = fpsim.ROUNDING_MODES[mode]
    if acc == "fp16" and not (lanes32.f16c_modes() if code else lanes32.f16_native()):
        pytest.skip("no F16C: fp16 accumulators in this mode take the float64 kernels")
    kind = (lanes32.FP16 if acc == "fp16" else lanes32.BF16) + 4 * (
        [0, 0, 1, 2, 3][code])  # fmt: skip
    assert lanes32.mode_of(kind) == code
    rnd = lanes32.round_f32_to_f16 if kind == lanes32.FP16 else lanes32.ROUND_ACC[(
        lanes32.acc_of(kind), code)]  # fmt: skip

    @njit(cache=False, error_model="numpy")
    def apply(x):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = rnd(x[i])
        return out

    x = _f32_probes(np.random.default_rng(3 + code), 50_000)
    got = apply(x)
    want = np.asarray(fpsim.round_to(x.astype(np.float64), acc, rounding=mode), np.float32)
    assert same_bits(got[~np.isnan(x)], want[~np.isnan(x)])
    assert np.isnan(got[np.isnan(x)]).all()
    for i in np.flatnonzero(np.isfinite(x))[::97]:
        v = float(x[i])
        assert same_bits(got[i], round_rational(Fraction(v), acc, mode) if v != 0 else v), v


def _odd_reference(s: float, t: float) -> float:
    """s + t rounded to odd in float32, exactly: the value itself when float32 holds it, else
    of its two float32 neighbours the one with an odd last bit (beyond float32's range: inf)."""
    v = Fraction(s) + Fraction(t)
    if v == 0:
        return float(np.float32(s) + np.float32(t))  # IEEE's sign of an exact zero
    r = round_rational(v, "fp32", "toward_zero")
    if abs(r) >= fpsim.get_format("fp32").max and abs(v) > Fraction(fpsim.get_format("fp32").max):
        return float(np.float32(s) + np.float32(t))  # overflow: the float32 sum's inf
    if Fraction(r) == v:
        return r
    r32 = np.float32(r)
    if r32.view(np.uint32) & 1:
        return r
    return float(np.nextafter(r32, np.float32(math.copysign(np.inf, float(v)))))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(-40, 40))
def test_add_odd_f32_is_round_to_odd(bs, bt, shift):
    s = np.array([bs], np.uint32).view(np.float32)
    t = np.array([bt], np.uint32).view(np.float32)
    if shift and np.isfinite(t[0]):  # bring t near s's scale too, where the bits overlap
        t = (t * np.float32(2.0**shift)).astype(np.float32)
    if not (np.isfinite(s[0]) and np.isfinite(t[0])):
        return
    got = _lanes_add_odd(s, t)[0]
    assert same_bits(got, _odd_reference(float(s[0]), float(t[0]))), (s[0], t[0])


# Accumulators and input formats: which kernel each case takes is asserted, so that both the
# float32-lane kernel and the float64 nearest-even kernel (rne_midpoint, the ieee/general
# roundings) are exercised.
ACCS = ["fp16", "bf16", "fp32", "tf32", "fp8_e5m2", "e8m13"]
INS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]


def _general(a, b, f, acc, out, subn, sat, unit=False):
    """The general path's result: the same parameters with every fast form switched off."""
    P = list(_params(fmt(f), fmt(acc), fmt(out), 0, subn, sat, 0, reduce.SEQUENTIAL, 0, unit,
                     None, False))  # fmt: skip
    P[reduce.I_FAST_ADD] = P[reduce.I_FAST_OUT] = P[reduce.I_LANES32] = 0
    A = a.reshape(1, *a.shape).astype(np.float64)
    B = None if unit else b.reshape(1, *b.shape).astype(np.float64)
    res = np.empty((1, a.shape[0], 1 if unit else b.shape[1]))
    arith_cpu.matmul(A, B, res, tuple(P))
    return res[0]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ACCS), st.sampled_from(INS), st.integers(1, 4), st.integers(0, 40),
       st.integers(1, 21), st.integers(-12, 12), st.integers(0, 1), st.integers(0, 1),
       st.sampled_from([np.float32, np.float64]), st.integers(0, 2**31))
def test_fast_nearest_sequential_equals_general_and_exact(acc, f, n, K, m, scale, subn, sat,
                                                          container, seed):  # fmt: skip
    rng = np.random.default_rng(seed)
    a = scaled_values(f, rng, (n, K), scale)
    b = scaled_values(f, rng, (K, m), 0)
    if K and rng.random() < 0.2:  # an inf or a NaN in a row
        a[0, rng.integers(0, K)] = rng.choice([np.inf, -np.inf, np.nan] if fmt(f).has_inf
                                              else [np.nan])  # fmt: skip
    P = np.array(_params(fmt(f), fmt(acc), fmt("fp32"), 0, subn, sat, 0, reduce.SEQUENTIAL, 0,
                         False, None, False))  # fmt: skip
    kind = reduce.fast_kind(P)
    F = fmt(f)
    exact32 = 2 * F.precision <= 24 and 2 * (F.emin - F.man_bits) >= -149 and 2 * F.emax < 126
    want_lanes = acc in ("fp16", "bf16", "fp32") and subn and not sat and exact32
    assert kind == (4 if want_lanes else 1 if fastround.fast_round_ok(fmt(acc).record) else 0)
    got = arith.matmul(a.astype(container), b.astype(container), f, acc=acc, order="sequential",
                       out_fmt="fp32", subnormals=bool(subn), saturate=bool(sat))  # fmt: skip
    assert same_bits(got, _general(a, b, f, acc, "fp32", subn, sat))
    if subn and not sat and np.isfinite(a).all() and n * m * K <= 300:
        for i in range(n):
            for j in range(m):
                terms = [Fraction(a[i, k]) * Fraction(b[k, j]) for k in range(K)]
                want = reduce_reference(terms, acc, "fp32")
                assert got[i, j] == want or (math.isnan(got[i, j]) and math.isnan(want))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["fp16", "fp16", "bf16", "bf16", "fp32"]), st.sampled_from(INS),
       st.sampled_from(["toward_zero", "up", "down", "nearest_away"]), st.integers(0, 50),
       st.integers(1, 30), st.integers(-12, 12), st.sampled_from([(1, 0)] * 3 + [(0, 0), (1, 1)]),
       st.sampled_from([np.float32, np.float64]), st.integers(0, 2**31))  # fmt: skip
def test_fast_directed_sequential_equals_general(acc, f, mode, K, m, scale, flags, container,
                                                 seed):  # fmt: skip
    """The directed modes (and ties-away) on random values: float32 lanes where they apply
    (fp16/bf16 accumulators, subnormals kept, no saturation, terms float32 holds: the draws
    lean that way), the float64 directed kernel elsewhere, each bit for bit against the
    general path."""
    subn, sat = flags
    rng = np.random.default_rng(seed)
    a = scaled_values(f, rng, (2, K), scale)
    b = scaled_values(f, rng, (K, m), 0)
    if K and rng.random() < 0.2:
        a[0, rng.integers(0, K)] = rng.choice([np.inf, -np.inf, np.nan] if fmt(f).has_inf
                                              else [np.nan])  # fmt: skip
    code = fpsim.ROUNDING_MODES[mode]
    P = list(_params(fmt(f), fmt(acc), fmt("fp32"), code, subn, sat, 0, reduce.SEQUENTIAL, 0,
                     False, None, False))  # fmt: skip
    F = fmt(f)
    exact32 = 2 * F.precision <= 24 and 2 * (F.emin - F.man_bits) >= -149 and 2 * F.emax < 126
    lanes = (acc != "fp32" and mode != "nearest_away" and subn and not sat and exact32
             and (acc == "bf16" or lanes32.f16c_modes()))  # fmt: skip
    assert reduce.fast_kind(np.array(P)) == (4 if lanes else 2)
    got = arith.matmul(a.astype(container), b.astype(container), f, acc=acc, order="sequential",
                       rounding=mode, out_fmt="fp32", subnormals=bool(subn),
                       saturate=bool(sat))  # fmt: skip
    P[reduce.I_FAST_ADD] = P[reduce.I_FAST_OUT] = P[reduce.I_LANES32] = 0
    out = np.empty((1, 2, m))
    arith_cpu.matmul(a.reshape(1, 2, K), b.reshape(1, K, m), out, tuple(P))
    assert same_bits(got, out[0])


@pytest.mark.parametrize("acc", ["fp16", "bf16", "fp32", "tf32"])
@pytest.mark.parametrize("f", ["fp16", "bf16", "fp8_e4m3"])
def test_fast_nearest_sum_and_tiles(acc, f):
    """Sums (the terms are the values themselves), and products over more lanes than one tile
    (several panels of B per row)."""
    rng = np.random.default_rng(11)
    x = scaled_values(f, rng, (3, 600), 0)
    got = arith.sum(x, f, acc=acc, order="sequential", axis=1, out_fmt="fp32")
    assert same_bits(got, _general(x, None, f, acc, "fp32", 1, 0, unit=True)[:, 0])
    for i in range(3):
        assert got[i] == reduce_reference([Fraction(v) for v in x[i]], acc, "fp32")
    a = scaled_values(f, rng, (2, 50), -2)
    b = scaled_values(f, rng, (50, 2 * reduce_fast.LANES + 77), 0)
    got = arith.matmul(a, b, f, acc=acc, order="sequential", out_fmt="fp32")
    assert same_bits(got, _general(a, b, f, acc, "fp32", 1, 0))


@pytest.mark.parametrize("f, acc, s, t, want", [
    # s tiny, t on a midpoint of the accumulator: the float sum lands on the midpoint, the exact
    # one is just off it (the case that breaks rounding the float32/float64 sum)
    ("fp16", "fp16", 2.0**-24, (3.0, 683.0), 2050.0),  # 2049 + 2^-24 -> 2050
    ("fp16", "bf16", -(2.0**-48), (7.0, 37.0), 258.0),  # 259 - 2^-48 -> 258
    ("bf16", "bf16", -(2.0**-100), (7.0, 37.0), 258.0),  # float64 kernel: rne_midpoint
])  # fmt: skip
def test_fast_nearest_sequential_breaks_no_tie(f, acc, s, t, want):
    a = np.array([[math.sqrt(abs(s)), t[0]]])
    b = np.array([[math.copysign(math.sqrt(abs(s)), s)], [t[1]]])
    got = arith.matmul(a, b, f, acc=acc, order="sequential", out_fmt="fp32")
    assert got[0, 0] == want
    assert got[0, 0] == reduce_reference([Fraction(s), Fraction(t[0] * t[1])], acc, "fp32")


# ---- the block FMA on the CPU: B's flush and exponents computed once (block_row_pre) -----------
_BLOCK_MODELS = [m for m in arith.PRESETS.values() if m.align_bits is not None] + [
    arith.BlockFMA(block=4, align_bits=5, align_rounding="nearest_even", rounding="nearest_even",
                   acc="fp16", input_subnormals=False, acc_subnormals=False),
    arith.BlockFMA(block=3, align_bits=9, rounding="up", acc="bf16", promote_every=6),
    arith.BlockFMA(block=5, align_bits=11, rounding="down", acc="fp32", normalize_products=True,
                   min_exponent=-20),
]  # fmt: skip


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_BLOCK_MODELS), st.integers(1, 3), st.integers(0, 70), st.integers(1, 13),
       st.integers(-10, 10), st.booleans(), st.integers(0, 2**31))
def test_block_fma_cpu_equals_generic_block_row(model, n, K, m, scale, with_c, seed):
    f = (model.inputs or ("fp16",))[0]
    rng = np.random.default_rng(seed)
    a = scaled_values(f, rng, (n, K), scale)
    b = scaled_values(f, rng, (K, m), -scale // 2)
    if K and rng.random() < 0.2:
        a[0, rng.integers(0, K)] = rng.choice([np.inf, np.nan] if fmt(f).has_inf else [np.nan])
    c = None
    if with_c:
        c = np.asarray(fpsim.round_to(rng.standard_normal((n, m)) * 4, model.acc), np.float64)
    got = arith.matmul(a, b, f, accumulation=model, c=c, out_fmt="fp32")
    from fpsim.arith.reductions import _seed_for

    P = np.array(_params(fmt(f), model.acc, fmt("fp32"), 0, 1, 0, _seed_for(None, 0, model),
                         reduce.SEQUENTIAL, 0, False, model, False, has_c=c is not None))  # fmt: skip
    C = np.zeros((1, 1, 1)) if c is None else np.ascontiguousarray(c.reshape(1, n, m))
    want = np.empty((1, n, m))
    general_block_rows(a.reshape(1, n, K), np.ascontiguousarray(b.reshape(1, K, m)), C, want, P)
    assert same_bits(got, want[0])


# ---- float32 lanes: plain sums that land on a midpoint of the accumulator's grid ---------------
def _tricky_lanes(acc, mode, rng, m, e):
    """A 1 x 2 by 2 x m product of fp16 values, [1, a1] @ [s; b], whose lanes j compute
    s_j + t_j: s_j (the first term, a value of acc) and t_j = a1 * b_j. Where the float32 sum
    lands on a midpoint of acc's grid (nearest even) or on the grid (directed modes) while the
    exact sum does not (the case the kernel's redo is for), rounding the float32 sum would go
    the wrong way.

    * e >= 1: t_j = u * w_j * 2^(E - p) is itself such a point (p acc's precision; u * w_j an
      odd integer in [2^p, 2^(p+1)) for a midpoint, any in [2^(p-1), 2^p) for a grid point;
      a1 = u * 2^ea), around 2^e, and s_j = +-2^(E - p - c) is tiny: below half a float32 ulp
      of t_j (c > 16) the float32 sum is exactly t_j, above it is not.
    * e < 1 (fp16: its subnormal range): t_j = +-2^-24 (1 + 2^-18) (grid) or its half
      (midpoint) = +-481 * 545 * 2^-42 (or -43), s_j = k * 2^-24 (a subnormal of fp16): the
      float32 sum is s_j +- t_j without its last bit when s_j >= 2^-19.
    Every lane's sign varies, a tenth of the lanes are random, and in round-down a tenth
    cancel exactly (s_j = -t_j, whose sum is -0 there)."""
    p = 11 if acc == "fp16" else 8
    mid = mode == "nearest_even"
    s, b = np.empty(m), np.empty(m)
    if e >= 1:
        u = int(rng.integers(1, 23)) * 2 + 1
        ea = -int(math.floor(math.log2(u)))  # a1 = u * 2^ea in [1, 2)
        a1 = u * 2.0**ea
        lo, hi = (2**p, 2 ** (p + 1) - 1) if mid else (2 ** (p - 1), 2**p - 1)
        for j in range(m):
            E = min(e + int(rng.integers(0, 3)), 15 if acc == "fp16" else 14)
            w = int(rng.integers(-(-lo // u), hi // u + 1))
            w = w | 1 if mid else w
            sign = rng.choice([-1.0, 1.0])
            b[j] = sign * w * 2.0 ** (E - p - ea)  # t = sign * u * w * 2^(E - p)
            c = int(rng.integers(12, E + 13 if acc == "fp16" else E + 16))
            s[j] = rng.choice([-1.0, 1.0]) * 2.0 ** (E - p - c)
            if mode == "down" and rng.random() < 0.1 and not mid:
                s[j] = -a1 * b[j]  # an exact zero sum (t is a value of acc here)
    else:
        a1 = 481 * 2.0**-20
        for j in range(m):
            b[j] = rng.choice([-1.0, 1.0]) * 545 * 2.0 ** (-23 if mid else -22)
            s[j] = rng.choice([-1.0, 1.0]) * int(rng.integers(1, 1024)) * 2.0**-24
    noise = rng.random(m) < 0.1
    s[noise] = rng.standard_normal(int(noise.sum())) * 2.0**e
    s = np.asarray(fpsim.round_to(fpsim.round_to(s, "fp16"), acc), np.float64)
    assert np.array_equal(np.asarray(fpsim.round_to(b, "fp16"), np.float64), b)
    return np.array([[1.0, a1]]), np.stack([s, b])


def _check_tricky_lanes(acc, mode, a, b):
    """The product (float32 lanes) against the exact sequential sum; returns how many lanes
    had a float32 sum on a midpoint (nearest even) or grid point (directed) of acc with an
    inexact sum (the case the redo is for)."""
    code = fpsim.ROUNDING_MODES[mode]
    P = np.array(_params(fmt("fp16"), fmt(acc), fmt("fp32"), code, 1, 0, 0, reduce.SEQUENTIAL,
                         0, False, None, False))  # fmt: skip
    kind = (lanes32.FP16 if acc == "fp16" else lanes32.BF16) + 4 * [0, 0, 1, 2, 3][code]
    assert reduce.fast_kind(P) == 4 and P[reduce.I_LANES32] == kind
    got = arith.matmul(a.astype(np.float32), b.astype(np.float32), "fp16", acc=acc,
                       order="sequential", out_fmt="fp32", rounding=mode)  # fmt: skip
    tricky = 0
    for j in range(b.shape[1]):
        terms = [Fraction(a[0, 0]) * Fraction(b[0, j]), Fraction(a[0, 1]) * Fraction(b[1, j])]
        # the first term is a value of acc (exact); the second step's rounding, with its sign
        # (reduce_reference's Fractions would lose the sign of a zero result), is the result:
        # fp16 and bf16 values are fp32 values
        v = terms[0] + terms[1]
        if v != 0:
            want = round_rational(v, acc, mode)
        elif terms[0] != 0 or terms[1] != 0:  # IEEE: an exact zero sum of opposite terms is
            want = -0.0 if mode == "down" else 0.0  # -0 in round-down, else +0
        else:  # two zeros: -0 only for two -0s, or in round-down for any -0
            neg = [math.copysign(1.0, float(b[0, j])) < 0,
                   math.copysign(1.0, float(a[0, 1] * b[1, j])) < 0]  # fmt: skip
            want = -0.0 if (any(neg) if mode == "down" else all(neg)) else 0.0
        assert same_bits(got[0, j], want), (j, b[:, j], got[0, j], want)
        x = float(np.float32(b[0, j]) + np.float32(a[0, 1]) * np.float32(b[1, j]))  # float32's
        up, down = (fpsim.round_to(x, acc, rounding=r) for r in ("up", "down"))
        if mode == "nearest_even":
            point = up != down and fpsim.round_to(x, acc) != fpsim.round_to(
                x, acc, rounding="nearest_away")  # fmt: skip
        else:
            point = up == down and x != 0
        tricky += bool(point and Fraction(x) != terms[0] + terms[1])
    return tricky


LANE_MODES = ["nearest_even", "toward_zero", "up", "down"]


def _lanes_kernel_here(acc, mode) -> bool:
    """Whether this CPU runs acc's float32-lane kernel in this mode (fp16 needs F16C: its
    conversion for nearest even, its rounding control for the directed modes)."""
    return acc != "fp16" or (lanes32.f16_native() if mode == "nearest_even"
                             else lanes32.f16c_modes())  # fmt: skip


def _skip_without_f16c(acc, mode):
    if not _lanes_kernel_here(acc, mode):
        pytest.skip("no float32 <-> fp16 conversion in hardware in this mode: the float64 "
                    "kernels run")


@pytest.mark.parametrize("acc", ["fp16", "bf16"])
@pytest.mark.parametrize("mode", LANE_MODES)
@pytest.mark.parametrize("e", [12, 5, 1, 0])
def test_lanes32_sums_on_the_grid_are_redone(acc, mode, e):
    """Lanes in the eight-lane vector steps and in the tail (m = 45): the float32 sum lands on a
    midpoint (nearest even) or a grid point (directed modes) with an inexact exact sum in many
    of them, and each must round like the exact sum. (e = 0: fp16's subnormal range, where
    the kernel redoes every nonzero lane.)"""
    _skip_without_f16c(acc, mode)
    a, b = _tricky_lanes(acc, mode, np.random.default_rng(100 + e), 45, e)
    assert _check_tricky_lanes(acc, mode, a, b) >= 5


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["fp16", "bf16"]), st.sampled_from(LANE_MODES), st.integers(1, 40),
       st.integers(0, 14), st.integers(0, 2**31))
def test_lanes32_tricky_lanes_equal_the_exact_sum(acc, mode, m, e, seed):
    assume(_lanes_kernel_here(acc, mode))  # (not a silent pass on a CPU without F16C)
    a, b = _tricky_lanes(acc, mode, np.random.default_rng(seed), m, e)
    _check_tricky_lanes(acc, mode, a, b)


# ---- stochastic rounding's fast form (random_lanes, fastround's split form, stochastic_row) -----
@njit(cache=False, error_model="numpy")
def _random_lanes(seed, base0, stride, n, r):
    U = np.empty((4, n), np.uint32)
    RH = np.empty(n)
    RL = np.empty(n)
    R = np.empty(n, np.float32)
    R2 = np.empty(n, np.float32)
    key_a, key_b = scalar.random62_keys(seed)
    random_lanes.index_words(base0, stride, n, key_b, U)
    random_lanes.random_split(RH, RL, U, key_a, key_b, r, n)
    wraps = random_lanes.tile_wraps(U, n, r)
    random_lanes.random_top24(R, U, key_a, key_b, r, n, wraps)
    random_lanes.random_top24(R2, U, key_a, key_b, r, n, True)  # (the general form)
    return RH, RL, R, R2, wraps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from([0, 1, -1, 2**32, 2**63 - 1,
                                                                    -2**63, 0x9E3779B9])),
       st.integers(0, 2**30),
       st.one_of(st.integers(0, 2**32 - 1), st.integers(2**32 - 2**16, 2**32 - 1)),
       st.one_of(st.integers(1, 64), st.integers(1, 2**21)), st.integers(1, 40),
       st.one_of(st.integers(0, 64), st.integers(0, 2**32 - 1)))  # fmt: skip
@example(seed=0, hi=0, lo=2**32 - 7, stride=1, n=20, r=0)  # lanes cross 2^32
@example(seed=2**63 - 1, hi=2**30, lo=2**32 - 100, stride=3, n=9, r=90)  # the events cross it
@example(seed=-1, hi=5, lo=0, stride=2**21, n=40, r=2**32 - 1)  # the largest event offset
def test_random_split_equals_random62(seed, hi, lo, stride, n, r):
    """The vector forms of the random bits (32-bit lanes, the high word's hash selected per
    lane; the two float64 halves, and the top 24 bits as float32s) against
    ``scalar.random62`` run as plain Python: any int64 seed (high bits set, negative, 0),
    indices below and above 2^32 and tiles whose indices cross a multiple of 2^32, between
    lanes or between events; and ``tile_wraps`` against its definition."""
    base0 = hi * 2**32 + lo
    RH, RL, R, R2, wraps = _random_lanes(seed, base0, stride, n, r)
    want = [scalar.random62(seed, base0 + j * stride + r) for j in range(n)]
    assert list(RH) == [float(w >> 32) * 2.0**-30 for w in want]  # both exact: no rounding
    assert list(RL) == [float(w & 0xFFFFFFFF) * 2.0**-62 for w in want]
    assert list(R) == list(R2) == [float(w >> 38) * 2.0**-24 for w in want]
    lows = [(base0 + j * stride) % 2**32 for j in range(n)]
    assert wraps == any(x + r >= 2**32 for x in lows)


def test_random_split_detects_a_flipped_bit():
    """The comparison above is sharp: the bits of a neighbouring index differ."""
    RH, RL, *_ = _random_lanes(7, 2**32 - 2, 1, 4, 0)
    assert list(RL) != [float(scalar.random62(7, 2**32 - 2 + j + 1) & 0xFFFFFFFF) * 2.0**-62
                        for j in range(4)]  # fmt: skip


@njit(cache=False, error_model="numpy")
def _apply_stochastic_finite(x, rand, k):
    out = np.empty_like(x)
    for i in range(x.size):
        rh, rl = fastround.stochastic_split(rand[i])
        out[i] = fastround.round_fast_stochastic_finite(x[i], rh, rl, k)
    return out


def _thresholds(x, F):
    """ceil(f * 2^62) for each finite non-zero x (f its fraction of a quantum of F, exactly)."""
    thr = np.zeros(x.size, np.int64)
    for i, v in enumerate(x):
        if math.isfinite(v) and v != 0:
            a = Fraction(abs(float(v)))
            e = max(math.floor(math.log2(a)), F.emin)
            n = a / Fraction(2) ** (e - F.man_bits)
            thr[i] = math.ceil((n - math.floor(n)) * 2**62)
    return thr


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.filter_too_much])
@given(st.integers(2, 11), st.integers(1, 50),
       st.one_of(st.integers(-1022, -990), st.integers(990, 1023), st.integers(-1022, 1023)),
       st.integers(0, 1), st.integers(0, 1), st.integers(0, 2**32))  # fmt: skip
def test_round_fast_stochastic_on_any_format_it_accepts(e, m, emax, subn, sat, seed):
    """Stochastic rounding with the random bits split in two floats (the one float comparison
    ``rl < f - rh``), plain and finite-only, against ``scalar.round_value`` on every IEEE-style
    format ``fast_round_ok`` accepts, with random bits drawn at random and set at each value's
    threshold ceil(f * 2^62) and one either side, where one unit decides."""
    bias = 2**e - 2 - emax
    try:
        F = fpsim.Format(e, m, bias=bias)
    except ValueError:  # beyond float64's range
        assume(False)
    assume(fastround.fast_round_ok(F.record))
    rng = np.random.default_rng(seed)
    x = probes(F, rng, n=200)
    thr = _thresholds(x, F)
    S = fpsim.ROUNDING_MODES["stochastic"]
    k = fastround.fast_round_constants(F.record, subn, sat)
    fin = np.isfinite(x)
    for rand in (rng.integers(0, 2**62, x.size), np.maximum(thr - 1, 0), thr,
                 np.minimum(thr + 1, 2**62 - 1)):  # fmt: skip
        rand = rand.astype(np.int64)
        want = np.array([scalar.round_value(float(v), F.record, S, subn, sat, int(r))
                         for v, r in zip(x, rand, strict=True)])  # fmt: skip
        assert same_bits(_apply_stochastic(x, rand, k), want)
        assert same_bits(_apply_stochastic_finite(x[fin], rand[fin], k), want[fin])


def _custom_acc(e, m, emax):
    try:
        F = fpsim.Format(e, m, bias=2**e - 2 - emax)
    except ValueError:
        return None
    return F if fastround.fast_round_ok(F.record) else None


@settings(max_examples=70, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(st.sampled_from(ACCS), st.tuples(st.integers(2, 11), st.integers(1, 50),
                                                   st.integers(-60, 200))),
       st.sampled_from(INS), st.integers(1, 3),
       st.one_of(st.sampled_from([0, 1, 2]), st.integers(3, 30)),
       st.one_of(st.sampled_from([1, 2, reduce_fast.LANES - 1, reduce_fast.LANES,
                                  reduce_fast.LANES + 1]), st.integers(1, 40)),
       st.integers(-12, 12), st.integers(0, 1), st.integers(0, 1),
       st.sampled_from([np.float32, np.float64]), st.sampled_from([None, "fp32", "fp8_e4m3", "acc"]),
       st.one_of(st.integers(0, 2**63 - 1), st.sampled_from([0, 2**63 - 1, 2**32])),
       st.booleans(), st.integers(0, 2**31))  # fmt: skip
def test_fast_stochastic_equals_general_and_exact(acc, f, n, K, m, scale, subn, sat, container,
                                                  out, seed, unit, data_seed):  # fmt: skip
    """The stochastic fast kernel (random bits in 32-bit lanes, float-only rounding, tiles of
    LANES lanes) against the general kernel bit for bit, and against exact rational sums with
    the documented random bits ``random62(seed, o (2K + 1) + r)``: accumulators of every
    shape fast_round_ok accepts, subnormals and saturation on and off, float32 and float64
    containers, K = 0 and 1, lane counts around a tile, sums, ±0, subnormals, max, inf, NaN.
    Each run checks which row kernel it went through. (fp16 and bf16 accumulators of terms
    float32 holds take the float32-lane kernel, tested in test_lanes32_stochastic: switched
    off here, so that this kernel is tested on them too.)"""
    with mock.patch("fpsim.arith.reductions.lanes32_kind", return_value=lanes32.NONE):
        _fast_stochastic_case(acc, f, n, K, m, scale, subn, sat, container, out, seed, unit,
                              data_seed)  # fmt: skip


def _fast_stochastic_case(acc, f, n, K, m, scale, subn, sat, container, out, seed, unit,
                          data_seed):  # fmt: skip
    if isinstance(acc, tuple):
        acc = _custom_acc(*acc)
        assume(acc is not None)
    check_stochastic_reduction(acc, f, n, K, m, scale, subn, sat, container, out, seed, unit,
                               data_seed, 3, "_rows_stochastic")  # fmt: skip


_CACHE_SCRIPT = """
import sys, numpy as np
from fpsim import arith
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
for acc, mode in (m.split(":") for m in sys.argv[3:]):
    r = arith.matmul(a, b, "fp16", acc=acc, order="sequential", rounding=mode, out_fmt="fp32")
    print(acc, mode, r.astype(np.float64).tobytes().hex())
"""


def test_lanes32_kinds_compiled_in_different_processes_stay_apart(tmp_path):
    """numba names a compiled function by its qualified name and a per-process counter, so the
    kinds' closures compiled by different processes into one on-disk cache once got the same
    symbols: a process loading several kernels from the cache then ran one kind's code for
    another (round-up giving toward-zero results). Each kind compiled alone in its own process,
    then all loaded together from that cache, must give the exact sequential sums."""
    import os
    import subprocess

    kinds = ["fp16:up", "fp16:toward_zero", "bf16:down"]
    if not lanes32.f16c_modes():
        kinds = ["bf16:up", "bf16:toward_zero", "bf16:down"]
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((2, 60)) * 8).astype(np.float16).astype(np.float32)
    b = (rng.standard_normal((60, 9)) * 8).astype(np.float16).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)

    def run(*args):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
        out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, str(tmp_path / "a.npy"),
                              str(tmp_path / "b.npy"), *args], env=env, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        return {tuple(line.split()[:2]): line.split()[2] for line in out.splitlines()}

    for k in kinds:  # each kind compiled alone, into the one cache
        run(k)
    together = run(*reversed(kinds))  # all of them loaded from it
    for k in kinds:
        acc, mode = k.split(":")
        got = np.frombuffer(bytes.fromhex(together[acc, mode]), np.float64).reshape(2, 9)
        for i in range(2):
            for j in range(9):
                terms = [Fraction(float(a[i, q])) * Fraction(float(b[q, j])) for q in range(60)]
                assert got[i, j] == reduce_reference(terms, acc, "fp32", mode=mode), (k, i, j)
