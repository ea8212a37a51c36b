"""Stochastic rounding of the sequential sum with float32 lanes (fpsim.kernels.lanes32_stochastic).

Oracles: exact rational rounding (``arith_oracle.round_rational``, stochastic: up when
``rand62 < ceil(f * 2^62)``) with the documented random bits ``random62(seed, o (2K + 1) + r)``;
the general kernel (``reduce.general_row``, every fast form off), bit for bit.

The vector step decides each lane from the top 24 of the 62 random bits and flags the lanes it
cannot decide; the tests of the step check that every lane it does decide is right for *every*
value of the other 38 bits (both extremes: the rule is monotonic in them), on random bits
placed next to each lane's exact threshold.
"""

import math
import sys
from fractions import Fraction
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

import fpsim
from fpsim import arith
from fpsim.arith.reductions import _params
from fpsim.kernels import arith_cpu, lanes32, lanes32_stochastic, reduce, scalar

sys.path.insert(0, str(Path(__file__).parent))
from arith_cases import check_stochastic_reduction, fmt, kernel_ran, same_bits, scaled_values  # noqa: E402
from arith_oracle import round_rational  # noqa: E402

E7M2 = fpsim.Format(7, 2, bias=65, name="e7m2_b65")  # products down to 2^-132: bf16's tiny range
TERM_FORMATS = ["fp16", "fp8_e4m3", "fp8_e5m2", E7M2]
KERNEL = {"fp16": "_rows_lanes32_fp16_stochastic", "bf16": "_rows_lanes32_bf16_stochastic"}
REST = 2**38 - 1  # the largest value of the 38 random bits the step does not read


def _stepper(acc):
    step8 = lanes32_stochastic.STEP8[lanes32.FP16 if acc == "fp16" else lanes32.BF16]

    @njit(cache=False, error_model="numpy")
    def run(s, b3, R, a):
        n = s.size
        SD = np.zeros((2, n), np.float32)
        SD[0, :] = s
        F = np.zeros(n // 8, np.int32)
        for j in range(0, n, 8):
            F[j >> 3] = step8(SD, 0, 1, b3, 0, 0, j, R, a, j)
        return SD[1].copy(), F

    return run


STEPPERS = {acc: _stepper(acc) for acc in ("fp16", "bf16")}


def _fraction_of_quantum(v: Fraction, acc) -> Fraction:
    """The exact fraction f of a quantum by which |v| exceeds its lower neighbour in acc."""
    F = fmt(acc)
    a = abs(v)
    e = max(math.floor(math.log2(a)), F.emin) if a else F.emin
    while a and Fraction(2) ** (e + 1) <= a:  # (log2 of a Fraction can round)
        e += 1
    while a and Fraction(2) ** e > a and e > F.emin:
        e -= 1
    n = a / Fraction(2) ** (e - F.man_bits)
    return n - math.floor(n)


def _lanes(acc, f, rng, n):
    """n lanes (s, b) and one a: accumulator values s of every size and sign (powers of two
    among them, where a sum just below them changes binade), terms a * b from far below s to
    far above it, zeros of both signs, and now and then inf or NaN."""
    A, T = fmt(acc), fmt(f)
    e = rng.integers(A.emin - A.man_bits, A.emax + 1, n)
    s = np.ldexp(1.0 + rng.integers(0, 2**A.man_bits, n) / 2.0**A.man_bits, e)
    s = np.where(rng.random(n) < 0.25, np.ldexp(1.0, e), s)  # powers of two
    s = np.asarray(fpsim.round_to(s * rng.choice([-1.0, 1.0], n), A), np.float64)
    s[rng.random(n) < 0.05] = rng.choice([0.0, -0.0])
    a = float(fpsim.round_to(rng.standard_normal() * 2.0 ** rng.integers(-8, 8), T))
    a = a or 1.0
    target = s * 2.0 ** rng.integers(-40, 12, n) * rng.choice([-1.0, 1.0], n) / a
    b = np.asarray(fpsim.round_to(np.clip(target, -T.max, T.max), T, saturate=True), np.float64)
    b[rng.random(n) < 0.05] = rng.choice([0.0, -0.0])
    r = rng.random(n)
    s[r < 0.01] = np.inf
    b[(r >= 0.01) & (r < 0.02)] = np.nan
    return s, a, b


def _random_tops(s, a, b, acc, rng):
    """Top-24 random bits per lane: random, 0 or the largest, and near the edges of the band
    the step cannot decide, around the lane's exact threshold f * 2^24 and around the float32
    sum's own fraction (the band's half-width: 2^-(m + 4) + 2^-22, m the fraction bits)."""
    n = s.size
    R = rng.integers(0, 2**24, n)
    edge = 2 ** (20 - fmt(acc).man_bits) + 4  # the half-width in units of 2^-24
    kind = rng.integers(0, 6, n)
    for i in range(n):
        if not (math.isfinite(s[i]) and math.isfinite(b[i])) or kind[i] <= 1:
            continue
        v = Fraction(s[i]) + Fraction(a) * Fraction(b[i])
        if kind[i] == 2:
            R[i] = 0 if rng.random() < 0.5 else 2**24 - 1
            continue
        if kind[i] == 3:
            f = _fraction_of_quantum(v, acc)
        else:  # the fraction of the float32 sum, which the step reads
            x = float(np.float32(s[i]) + np.float32(a) * np.float32(b[i]))
            f = _fraction_of_quantum(Fraction(x), acc) if math.isfinite(x) else Fraction(0)
        step = int(rng.choice([edge, 2 * edge])) + int(rng.integers(-3, 4))
        step = step * int(rng.choice([-1, 1])) if rng.random() < 0.9 else int(rng.integers(-3, 4))
        R[i] = min(max(math.floor(f * 2**24) + step, 0), 2**24 - 1)
    return R


def _want(s, a, b, acc, rand62):
    v = Fraction(s) + Fraction(a) * Fraction(b)
    t = float(np.float32(a) * np.float32(b))
    zero_sign = -1.0 if math.copysign(1, s) < 0 and math.copysign(1, t) < 0 else 1.0
    return round_rational(v, acc, "stochastic", rand62=rand62, zero_sign=zero_sign)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["fp16", "bf16"]), st.sampled_from(TERM_FORMATS), st.integers(0, 2**31))
def test_step_decides_only_what_every_rest_of_the_bits_agrees_on(acc, f, seed):
    """Every lane the vector step leaves unflagged equals the exact stochastic rounding of
    s + a * b for the rest of the random bits at 0 and at 2^38 - 1, with the top 24 set next to
    each lane's threshold; lanes whose float32 sum is infinite or NaN are flagged; and on random
    bits few lanes are flagged (the fast path does its work)."""
    rng = np.random.default_rng(seed)
    n = 8 * 40
    s, a, b = _lanes(acc, f, rng, n)
    R = _random_tops(s, a, b, acc, rng)
    got, F = STEPPERS[acc](s.astype(np.float32), b.astype(np.float32).reshape(1, 1, n),
                           (R * 2.0**-24).astype(np.float32), np.float32(a))  # fmt: skip
    flags = np.array([(F[i >> 3] >> (i & 7)) & 1 for i in range(n)], bool)
    x = s.astype(np.float32) + np.float32(a) * b.astype(np.float32)
    assert flags[~np.isfinite(x)].all()
    decided = 0
    for i in np.flatnonzero(~flags):
        lo = _want(s[i], a, b[i], acc, int(R[i]) << 38)
        hi = _want(s[i], a, b[i], acc, (int(R[i]) << 38) | REST)
        assert same_bits(got[i], lo) and same_bits(got[i], hi), (s[i], a, b[i], R[i], got[i])
        decided += 1
    assert decided > n // 3


@pytest.mark.parametrize("acc", ["fp16", "bf16"])
def test_step_flags_few_lanes_on_random_bits(acc):
    """On random top bits the step flags about one lane in 2^(m + 2) (m the accumulator's
    fraction bits), plus the bf16 sums below 2^-119: here, none of those."""
    rng = np.random.default_rng(5)
    n = 8 * 4000
    s = np.asarray(fpsim.round_to(rng.standard_normal(n) * 4, acc), np.float64)
    b = np.asarray(fpsim.round_to(rng.standard_normal(n), "fp16"), np.float64)
    R = rng.integers(0, 2**24, n) * 2.0**-24
    _, F = STEPPERS[acc](s.astype(np.float32), b.astype(np.float32).reshape(1, 1, n),
                         R.astype(np.float32), np.float32(0.75))  # fmt: skip
    flagged = sum(bin(int(v)).count("1") for v in F)
    assert flagged < n * 2.0 ** -(fmt(acc).man_bits + 2) * 4


@pytest.mark.parametrize("acc, e", [("fp16", 5), ("fp16", -14), ("bf16", 3), ("bf16", -100)])
def test_step_at_a_power_of_two_with_the_sum_just_below(acc, e):
    """s = 2^e and a term far below it, negative: the float32 sum is s itself, but the exact sum
    lies in the binade below, where the quantum is half (above the lowest binade). Decided
    lanes must round like the exact sum for every random top, from 0 to 2^24 - 1."""
    n = 8 * 64
    A = fmt(acc)
    s = np.full(n, 2.0**e)
    a = -1.0
    b = np.full(n, 2.0 ** (e - A.man_bits - 20))
    R = np.linspace(0, 2**24 - 1, n).astype(np.int64)
    R[:8] = [0, 1, 2, 3, 2**24 - 4, 2**24 - 3, 2**24 - 2, 2**24 - 1]
    got, F = STEPPERS[acc](s.astype(np.float32), b.astype(np.float32).reshape(1, 1, n),
                           (R * 2.0**-24).astype(np.float32), np.float32(a))  # fmt: skip
    flags = [(F[i >> 3] >> (i & 7)) & 1 for i in range(n)]
    for i in range(n):
        if not flags[i]:
            for rest in (0, REST):
                assert got[i] == _want(s[i], a, b[i], acc, (int(R[i]) << 38) | rest), (i, R[i])
    assert flags[7] == 1  # (the top bits at their largest cannot decide it)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["fp16", "bf16"]), st.sampled_from(TERM_FORMATS), st.integers(1, 3),
       st.one_of(st.sampled_from([0, 1, 2]), st.integers(3, 40)),
       st.one_of(st.sampled_from([1, 7, 8, 9, 16, 17]), st.integers(1, 40)),
       st.integers(-30, 12), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([None, "fp32", "fp8_e4m3", "acc"]),
       st.one_of(st.integers(0, 2**63 - 1), st.sampled_from([0, 2**63 - 1, 2**32])),
       st.booleans(), st.integers(0, 2**31))  # fmt: skip
def test_kernel_equals_general_and_exact(acc, f, n, K, m, scale, container, out, seed, unit,
                                         data_seed):  # fmt: skip
    """The whole kernel (random bits, vector steps, the last n % 8 lanes, the flagged lanes'
    redo, the final rounding to any output format) against the general kernel bit for bit,
    and against exact rational sums with the documented random bits: fp16 and bf16
    accumulators, terms from fp8 to fp16 products (and a custom format whose products reach
    bf16's tiny range), sums, K = 0 and 1, lane counts around the vectors' 8, sizes from
    bf16's smallest to overflow, float32 and float64 containers, an inf or NaN in a row."""
    check_stochastic_reduction(acc, f, n, K, m, scale, 1, 0, container, out, seed, unit,
                               data_seed, 5, KERNEL[acc])  # fmt: skip


@pytest.mark.parametrize("acc", ["fp16", "bf16"])
def test_kernel_on_tiles_and_tails(acc):
    """1025 and 1031 columns: a full tile of 1024 lanes, then a tile of 1 or 7 (the tail
    through TAIL), every one equal to the general kernel."""
    rng = np.random.default_rng(11)
    kw = dict(acc=acc, order="sequential", rounding="stochastic", seed=3)
    for m in (1025, 1031):
        a = scaled_values("fp16", rng, (2, 30), -3)
        b = scaled_values("fp16", rng, (30, m), 0)
        got, ran = kernel_ran(lambda a=a, b=b: arith.matmul(a, b, "fp16", **kw))
        assert ran == [KERNEL[acc]]
        P = list(_params(fmt("fp16"), fmt(acc), fmt("fp16"), fpsim.ROUNDING_MODES["stochastic"],
                         1, 0, 3, reduce.SEQUENTIAL, 0, False, None, False))  # fmt: skip
        P[reduce.I_FAST_STOCH] = P[reduce.I_LANES32] = 0
        general = np.empty((1, 2, m))
        arith_cpu.matmul(a.reshape(1, 2, 30), b.reshape(1, 30, m), general, tuple(P))
        assert same_bits(np.asarray(got, np.float64), general[0])


def test_kind_needs_no_f16c_and_refuses_what_it_cannot_do():
    """fp16's stochastic kind uses float32 instructions only: it runs without F16C. It needs
    terms float32 holds exactly, subnormals kept and no saturation."""
    S = scalar.STOCHASTIC
    with mock.patch.object(lanes32, "f16_native", return_value=False):
        assert lanes32.lanes32_kind("fp16", 22, -48, 31, True, False, S) == lanes32.FP16_STOCHASTIC
    assert lanes32.lanes32_kind("bf16", 22, -48, 31, True, False, S) == lanes32.BF16_STOCHASTIC
    assert lanes32.lanes32_kind("fp32", 22, -48, 31, True, False, S) == lanes32.NONE
    assert lanes32.lanes32_kind("fp16", 22, -48, 31, False, False, S) == lanes32.NONE
    assert lanes32.lanes32_kind("fp16", 22, -48, 31, True, True, S) == lanes32.NONE
    assert lanes32.lanes32_kind("bf16", 16, -266, 255, True, False, S) == lanes32.NONE
    assert lanes32.lanes32_kind("fp16", 25, -48, 31, True, False, S) == lanes32.NONE
