"""fpsim.arith at the edges of float64: no silent wrong answer (issue 11).

Every expectation comes from exact rational arithmetic (tests/arith_oracle.py), a value derived by
hand in the comment next to it, or numpy's own result for the empty cases -- never from fpsim.

* A format whose grid reaches below float64's normal range (a bias above 1023) is checked and
  rounded exactly: its values are accepted as operands, sums and reductions are exact.
* Where float64 intermediates cannot be exact (products that underflow or overflow float64,
  quotients outside its normal range, sums of accumulator terms that overflow it) fpsim either
  is exact anyway or refuses the format for that operation, naming it and the reason.
* Empty reductions return +0.0 / empty arrays of numpy's shape.
* The sequential order rounds the first term alone to the accumulator (an fma chain from zero).
"""

import math
import re
from fractions import Fraction

import numpy as np
import pytest
from arith_oracle import ALL_MODES, MODES, op_oracle, reduce_reference, round_rational
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from oracle import same_bits

import fpsim
from fpsim import arith
from fpsim.kernels import scalar

SEED = 2024
F64_MAX = 1.7976931348623157e308  # (2 - 2^-52) 2^1023
FN = {"add": arith.add, "sub": arith.sub, "mul": arith.mul, "div": arith.div,
      "sqrt": arith.sqrt, "fma": arith.fma}  # fmt: skip
ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}

# Grids below float64's normal range: smallest normal 2^-1029 and 2^-1039, smallest subnormal
# 2^-1039 and 2^-1059 -- all float64 subnormals.
DEEP = [fpsim.Format(11, 10, bias=1030), fpsim.Format(11, 20, bias=1040)]


def params(f):
    return f.record


def value(f, field, frac, neg=False):
    """The value with biased exponent ``field`` and fraction ``frac``, from the definition."""
    sig = frac if field == 0 else (1 << f.man_bits) | frac
    v = math.ldexp(sig, max(field, 1) - f.bias - f.man_bits)  # exact: a float64 by construction
    return -v if neg else v


def extremes(f):
    """Zero, the smallest subnormal and its neighbours, the largest subnormal, the smallest normal,
    one, the largest value: both signs (built from the fields, not from fpsim)."""
    top = (1 << f.exp_bits) - 1 if f.style == "fn" else (1 << f.exp_bits) - 2
    top_frac = (1 << f.man_bits) - (2 if f.style == "fn" else 1)
    full = (1 << f.man_bits) - 1
    v = [value(f, 0, 1), value(f, 0, 2), value(f, 0, 3), value(f, 0, full), value(f, 1, 0),
         value(f, 1, 1), value(f, top, top_frac), value(f, top, 0)]  # fmt: skip
    if f.emin <= 0 <= f.emax:
        v.append(1.0)
    return np.array([0.0] + v + [-x for x in v])


def random_values(f, n, rng, neg=True):
    """n values of f, every exponent field equally likely (so subnormals and extremes appear)."""
    top = (1 << f.exp_bits) - 1 if f.style == "fn" else (1 << f.exp_bits) - 2
    out = []
    for _ in range(n):
        field = int(rng.integers(0, top + 1))
        frac = int(rng.integers(0, 1 << f.man_bits))
        if f.style == "fn" and field == top and frac == (1 << f.man_bits) - 1:
            frac -= 1  # S.1111.111 is NaN
        out.append(value(f, field, frac, neg and bool(rng.integers(0, 2))))
    return np.array(out)


def rand62(n, seed=SEED):
    return [scalar.random62(seed, i) for i in range(n)]


def oracle(op, args, f, mode, subnormals=True, saturate=False, seed=SEED):
    n = len(args[0])
    r = rand62(n, seed) if mode == "stochastic" else [0] * n
    return np.array([op_oracle(op, [a[i] for a in args], f, mode, subnormals, saturate, r[i])
                     for i in range(n)])  # fmt: skip


def assert_same(got, want, label=""):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    ok = same_bits(got, want)
    assert ok.all(), (label, got[~ok][:5], want[~ok][:5], np.flatnonzero(~ok)[:5])


# ---- A. formats below float64's normal range: operand check and nearest-even fast paths --------
@pytest.mark.parametrize("f", DEEP, ids=str)
def test_operand_check_accepts_every_value_below_float64_normal_range(f):
    from fpsim.kernels import arith_cpu

    rng = np.random.default_rng(1)
    # every subnormal of e11m10_b1030 (1023 of them), a sample of e11m20_b1040's, the extremes
    n_sub = (1 << f.man_bits) - 1
    fracs = range(1, n_sub + 1) if n_sub < 5000 else rng.integers(1, n_sub + 1, 4000)
    subs = np.array([value(f, 0, int(k)) for k in fracs])
    x = np.concatenate([extremes(f), subs, -subs, random_values(f, 2000, rng)])
    assert x[1] == 2.0 ** (f.emin - f.man_bits) and x[1] < 2.0**-1022  # a float64 subnormal
    for arr in (x, x.astype(np.float64)[::-1].copy()):
        assert arith_cpu.count_not_in_format(arr, params(f)) == 0
    # every public path that checks operands: in-kernel check, host check, reductions
    assert arith.add(x, np.zeros_like(x), f).shape == x.shape
    assert arith.sum(x, f, acc="fp64", out_fmt="fp64") == reduce_reference(list(x), "fp64", "fp64")
    assert arith.neg(x, f).shape == x.shape
    # and non-values are still refused: half the smallest subnormal, 1.5 times it
    ms = float(x[1])
    for bad in (ms / 2, ms * 1.5, ms * 2 ** (f.man_bits + 1) * (1 + 2.0**-30)):
        arr = np.append(x, bad)
        assert arith_cpu.count_not_in_format(arr, params(f)) == 1
        msg = re.escape(f"not {f.name} values, e.g. {bad!r}")
        with pytest.raises(ValueError, match=msg):
            arith.add(arr, arr, f)
        with pytest.raises(ValueError, match=msg):
            arith.sum(arr, f)


@pytest.mark.parametrize("f", DEEP, ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "sqrt"])
def test_elementwise_below_float64_normal_range_every_mode(f, op):
    rng = np.random.default_rng(2)
    n = 300
    a = np.concatenate([extremes(f), random_values(f, n, rng)])
    b = np.concatenate([extremes(f)[::-1], random_values(f, n, rng)])
    # operands within a few binades of each other, down in the float64 subnormal range
    tiny = np.array([value(f, int(e), int(k), bool(s)) for e, k, s in zip(
        rng.integers(0, 4, n), rng.integers(0, 1 << f.man_bits, n), rng.integers(0, 2, n),
        strict=True)])  # fmt: skip
    a = np.concatenate([a, tiny])
    b = np.concatenate([b, tiny[::-1] * 0.5 + tiny])  # exact: float64 subnormal sums
    b = np.array([round_rational(Fraction(v), f) for v in b])  # back onto f's grid, exactly
    args = (np.abs(a),) if op == "sqrt" else (a, b)
    for mode in ALL_MODES:
        got = FN[op](*args, f, rounding=mode, seed=SEED)
        assert_same(got, oracle(op, args, f, mode), f"{op} {f} {mode}")
        if mode == "nearest_even":  # the flush-to-zero and saturating variants of the fast path
            got = FN[op](*args, f, rounding=mode, subnormals=False, saturate=True)
            assert_same(got, oracle(op, args, f, mode, False, True), f"{op} {f} ftz sat")


@pytest.mark.parametrize("order", ["sequential", "pairwise"])
def test_reductions_with_an_accumulator_below_float64_normal_range(order):
    acc = DEEP[1]  # e11m20_b1040: smallest subnormal 2^-1059
    rng = np.random.default_rng(3)
    # inputs e11m10_b1030 within a few binades of its smallest normal: float64 subnormals
    x = np.array([value(DEEP[0], int(e), int(k), bool(s)) for e, k, s in zip(
        rng.integers(0, 6, 40), rng.integers(0, 1 << 10, 40), rng.integers(0, 2, 40),
        strict=True)])  # fmt: skip
    for mode in MODES:
        got = arith.sum(x, DEEP[0], acc=acc, order=order, rounding=mode, out_fmt="fp64")
        assert got == reduce_reference(list(x), acc, "fp64", order, mode), mode
    # products of two Format(8, 7, bias=525) values reach 2^-1062: float64 subnormals, exact
    fin = fpsim.Format(8, 7, bias=525)
    a = random_values(fin, 3 * 7, rng).reshape(3, 7)
    b = random_values(fin, 7 * 2, rng).reshape(7, 2)
    a[:, :3] = np.array([value(fin, int(k % 3), int(k)) for k in range(9)]).reshape(3, 3)
    for products in ("exact", "rounded"):
        for mode in MODES:
            got = arith.matmul(a, b, fin, acc=acc, order=order, products=products, rounding=mode,
                               out_fmt=acc)  # fmt: skip
            for i in range(3):
                for j in range(2):
                    terms = [Fraction(a[i, k]) * Fraction(b[k, j]) for k in range(7)]
                    want = reduce_reference(terms, acc, acc, order, mode, products == "rounded")
                    assert same_bits(np.float64(got[i, j]), np.float64(want)), (products, mode)


def test_blas_output_rounding_below_float64_normal_range():
    from fpsim.kernels import arith_cpu

    f = DEEP[1]
    rng = np.random.default_rng(4)
    # float64 subnormals that are not values of f (finer than 2^-1059), and some that are
    x = np.ldexp(rng.integers(1, 1 << 40, 500).astype(np.float64), -1074)
    x = np.concatenate([x, extremes(f), [2.0**-1060, 3 * 2.0**-1060, 2.0**-1074]])
    out = np.empty_like(x)
    arith_cpu.round_nearest(x, out, params(f))
    want = [round_rational(Fraction(v), f, zero_sign=math.copysign(1, v)) for v in x]
    assert_same(out, want, "round_nearest")


# ---- B. float64 intermediates out of range: exact, or refused with the reason ----------------------
def test_products_below_float64_range_are_refused_not_wrong():
    f = fpsim.Format(11, 10)  # smallest subnormal 2^-1032: its square 2^-2064 is 0 in float64
    ms = 2.0**-1032
    assert Fraction(ms) * Fraction(ms) > 0 and ms * ms == 0.0  # the float64 product underflows
    # the exact product rounded up is the smallest subnormal; 0 would be a silent wrong answer
    assert round_rational(Fraction(ms) * Fraction(ms), f, "up") == ms
    for op, args in [("mul", (ms, ms)), ("fma", (ms, ms, 0.0)), ("div", (f.max, ms))]:
        with pytest.raises(ValueError, match=rf"{op} in e11m10 is not supported: .*float64"):
            FN[op](*args, f, rounding="up")
    for fn in (arith.matmul, arith.dot):
        with pytest.raises(ValueError, match=r"e11m10 is not supported: .*float64"):
            fn(np.array([ms]), np.array([ms]), f, acc="fp32", order="sequential")


def test_quotient_beyond_float64_is_refused_not_wrong():
    # Format(10, 5): max = 63 * 2^506, smallest subnormal 2^-515; max / min_sub = 63 * 2^1021 is
    # beyond float64 (inf), while rounding toward zero must give max
    f = fpsim.Format(10, 5)
    ms, mx = 2.0**-515, 63 * 2.0**506
    assert (mx, ms) == (f.max, f.smallest_subnormal)
    assert Fraction(mx) / Fraction(ms) > Fraction(F64_MAX) and mx / ms == math.inf
    assert round_rational(Fraction(mx) / Fraction(ms), f, "toward_zero") == mx
    with pytest.raises(ValueError, match=r"div in e10m5 is not supported: .*quotients"):
        arith.div(mx, ms, f, rounding="toward_zero")


def test_mul_fma_exact_over_the_whole_accepted_range():
    # Format(10, 5): products reach down to 2^-1030 (a float64 subnormal, but exact: >= 2^-1074)
    # and up to max^2 = 63^2 2^1012 < 2^1024 -- every product is exact in float64
    f = fpsim.Format(10, 5)
    ms, mx = f.smallest_subnormal, f.max
    assert arith.mul(ms, ms, f, rounding="up") == ms  # exact 2^-1030 rounds up to 2^-515
    assert arith.mul(ms, ms, f) == 0.0 and arith.mul(-ms, ms, f, rounding="down") == -ms
    assert arith.mul(mx, mx, f, rounding="toward_zero") == mx and arith.mul(mx, mx, f) == math.inf
    assert arith.fma(mx, mx, -mx, f, rounding="down") == mx  # max^2 - max, far beyond max
    assert arith.fma(ms, ms, ms, f, rounding="up") == 2 * ms  # ms + 2^-1030: above ms
    assert arith.fma(ms, -ms, ms, f, rounding="toward_zero") == 0.0  # just below ms
    rng = np.random.default_rng(5)
    for op in ("mul", "fma", "sqrt"):
        args = tuple(np.concatenate([extremes(f), random_values(f, 200, rng)])
                     for _ in range(ARITY[op]))  # fmt: skip
        if op == "sqrt":
            args = (np.abs(args[0]),)
        for mode in ALL_MODES:
            got = FN[op](*args, f, rounding=mode, seed=SEED)
            assert_same(got, oracle(op, args, f, mode), f"{op} {mode}")


@pytest.mark.parametrize("f", [fpsim.Format(11, 10), DEEP[0], fpsim.Format(11, 23, bias=1052)],
                         ids=str)  # fmt: skip
def test_sqrt_exact_for_every_exponent_range(f):
    # a root halves the exponent: sqrt of any float64 lies in [2^-537, 2^512), float64's normal
    # range, so fl64(sqrt(a)) is a correct stand-in whatever the format's range (p <= 25)
    rng = np.random.default_rng(6)
    a = np.abs(np.concatenate([extremes(f), random_values(f, 300, rng)]))
    for mode in ALL_MODES:
        assert_same(arith.sqrt(a, f, rounding=mode, seed=SEED), oracle("sqrt", (a,), f, mode),
                    f"sqrt {f} {mode}")  # fmt: skip


def test_div_exact_for_any_bias_with_up_to_9_exponent_bits():
    # Format(9, 10, bias=600): values 2^-609 .. 2^-89; quotients 2^-520 .. 2^520, all normal
    f = fpsim.Format(9, 10, bias=600)
    rng = np.random.default_rng(7)
    a = np.concatenate([extremes(f), random_values(f, 300, rng)])
    b = np.concatenate([extremes(f)[::-1], random_values(f, 300, rng)])
    for mode in ALL_MODES:
        assert_same(arith.div(a, b, f, rounding=mode, seed=SEED),
                    oracle("div", (a, b), f, mode), f"div {mode}")  # fmt: skip


# Formats whose largest values are spaced below float64's normal range (2^-1022): stochastic
# rounding of a sum near max measures the distance past max in quanta that are float64
# subnormals (scalar.pow2 builds only normal powers of two: a garbage quantum once gave NaN or
# max/2 here).
TINY_SPACING = [
    fpsim.Format(5, 23, bias=1032),  # max (2 - 2^-23) 2^-1002, spacing 2^-1025, min_sub 2^-1054
    fpsim.Format(5, 23, bias=1032, style="fn"),  # max (2 - 2^-22) 2^-1001, spacing 2^-1024
    fpsim.Format(2, 1, bias=1074, style="fn"),  # max 2^-1071, spacing 2^-1072, min_sub 2^-1074
    fpsim.Format(4, 10, bias=1060),  # max (2 - 2^-10) 2^-1046, spacing 2^-1056
]


def spacing_at_max(f):
    return Fraction(2) ** (f.emax - f.man_bits)


def near_max_pairs(f, n, rng):
    """Values of the top two binades with small values whose last bit is 2^(emin - man_bits)
    (odd fractions): sums that float64 cannot hold (TwoSum's error is not 0) near max."""
    top = (1 << f.exp_bits) - 1 if f.style == "fn" else (1 << f.exp_bits) - 2
    full = (1 << f.man_bits) - (2 if f.style == "fn" else 1)
    big = [value(f, top - int(rng.integers(0, 2)), int(rng.integers(0, full + 1)))
           for _ in range(n)]  # fmt: skip
    odd = [value(f, int(rng.integers(0, 2)), int(rng.integers(0, 1 << f.man_bits)) | 1)
           for _ in range(n)]  # fmt: skip
    sign = np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
    return np.array(big) * sign, np.array(odd) * sign * np.where(rng.integers(0, 4, n), 1, -1)


@pytest.mark.parametrize("f", TINY_SPACING, ids=str)
def test_stochastic_sums_where_the_spacing_at_max_is_below_float64_normal_range(f):
    assert spacing_at_max(f) < Fraction(2) ** -1022 and f.smallest_subnormal >= 2.0**-1074
    rng = np.random.default_rng(8)
    mx, ms, mn = f.max, f.smallest_subnormal, f.min_normal
    # every pair of extremes, sums near max that float64 cannot hold, random values
    grid = pairs(f, 2, "add")
    big, odd = near_max_pairs(f, 200, rng)
    a = np.concatenate([grid[0], big, [mx, -mx, mx], random_values(f, 200, rng)])
    b = np.concatenate([grid[1], odd, [ms, -ms, -ms], random_values(f, 200, rng)])
    for op in ("add", "sub"):
        for mode in ALL_MODES:
            for seed in (SEED, 7):
                got = FN[op](a, b, f, rounding=mode, seed=seed)
                assert_same(got, oracle(op, (a, b), f, mode, seed=seed), f"{op} {f} {mode}")
            for kw in (dict(saturate=True), dict(subnormals=False)):
                got = FN[op](a, b, f, rounding=mode, seed=SEED, **kw)
                assert_same(got, oracle(op, (a, b), f, mode, **kw), f"{op} {f} {mode} {kw}")
    # reductions with fp64 terms: any float64 next to f's values (sums float64 cannot hold, above
    # max, below it, and beyond float64 itself)
    terms = [ms, -ms, mn + ms, 2.0**-1074, -(2.0**-1073), 1.0, -1.0, F64_MAX, mx * (1 + 2.0**-40),
             float(np.ldexp(3.0, f.emax - f.man_bits - 3)), -mx / 3, -mx]  # fmt: skip
    rows = np.array([[mx, t] for t in terms] + [[-mx, -t] for t in terms]
                    + [[t, mx] for t in terms])  # fmt: skip
    # the stochastic path of an inexact sum (TwoSum's error not 0), beyond max and below it
    # (format values with p <= 24 bits this close to 2^-1022 mostly add exactly in float64)
    sums = [*zip(a, b, strict=True), *rows]
    inexact = [scalar.two_sum(u, v)[1] != 0 for u, v in sums]
    over = [abs(Fraction(u) + Fraction(v)) > Fraction(mx) for u, v in sums]
    assert any(i and o for i, o in zip(inexact, over, strict=True))
    if mx > 2.0**-1022:  # else every sum below max is a float64 subnormal: exact
        assert any(i and not o for i, o in zip(inexact, over, strict=True))
    stride = 2 * rows.shape[1] + 1  # rounding events per output row (arith.matmul's numbering)
    for order in ("sequential", "pairwise"):
        for mode in ALL_MODES:
            got = arith.sum(rows, "fp64", acc=f, order=order, axis=-1, rounding=mode, seed=SEED,
                            out_fmt="fp64")  # fmt: skip
            for o, row in enumerate(rows):
                rand = lambda r, o=o: scalar.random62(SEED, o * stride + r)  # noqa: E731
                want = reduce_ieee([exact_term(v) for v in row], f, "fp64", order, mode, rand=rand)
                assert same_bits(np.float64(got[o]), np.float64(want)), (order, mode, row)
            for row in rows[::3]:
                t = arith.trace_sum(row, acc=f, order=order, rounding=mode, seed=SEED)
                rand = lambda r: scalar.random62(SEED, r)  # noqa: E731
                want = reduce_ieee([exact_term(v) for v in row], f, f, order, mode, rand=rand)
                assert same_bits(np.float64(t.result), np.float64(want)), (order, mode, row)
                one = arith.sum(row, "fp64", acc=f, order=order, rounding=mode, seed=SEED,
                                out_fmt=f)  # fmt: skip
                assert same_bits(np.float64(t.result), np.float64(one))


def binomial_ok(count, n, p):
    """``count`` successes of n trials is within 5 standard deviations of n p."""
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def stochastic_up_probability(exact, f):
    """fpsim's documented probability of rounding |exact| (above max) up: ceil(f 2^62) / 2^62,
    f the fraction of a quantum past max, computed exactly."""
    frac = (abs(exact) - Fraction(f.max)) / spacing_at_max(f)
    assert 0 < frac < 1
    return Fraction(math.ceil(frac * 2**62), 2**62)


@pytest.mark.parametrize("style", ["ieee", "fn"])
def test_stochastic_overflow_frequency_where_the_spacing_at_max_is_below_float64_normal(style):
    # Format(5, 23, bias=1032): spacing at max 2^-1025 (ieee) or 2^-1024 (fn), min_normal 2^-1031,
    # min_sub 2^-1054. y = min_normal + min_sub lies 2^-6 + 2^-29 (ieee) or 2^-7 + 2^-30 (fn) of a
    # quantum past max: stochastic rounding overflows (inf / NaN) with exactly that probability,
    # else gives max (a garbage quantum made it NaN or max/2 every time).
    f = fpsim.Format(5, 23, bias=1032, style=style)
    mx, mn, ms = f.max, f.min_normal, f.smallest_subnormal
    y = mn + ms
    p = stochastic_up_probability(Fraction(mx) + Fraction(y), f)
    assert p == (Fraction(1, 64) + Fraction(1, 2**29) if style == "ieee"
                 else Fraction(1, 128) + Fraction(1, 2**30))  # fmt: skip
    ovf = math.inf if style == "ieee" else math.nan
    # elementwise: 32 seeds, 2 x 2048 elements each (element i uses random62(seed, i))
    n, ups = 0, 0
    for seed in range(32):
        for sign in (1.0, -1.0):
            r = arith.add(np.full(2048, sign * mx), np.full(2048, sign * y), f,
                          rounding="stochastic", seed=seed)  # fmt: skip
            up = ~np.isfinite(r)
            assert (r[~up] == sign * mx).all()
            if style == "ieee":
                assert (r[up] == sign * ovf).all()
            n, ups = n + r.size, ups + int(up.sum())
    assert binomial_ok(ups, n, float(p)), (ups, n, float(p))
    # accumulation with fp64 terms, max + (2^-1031 + 2^-1074): float64 cannot hold the sum
    t = 2.0**-1031 + 2.0**-1074
    assert scalar.two_sum(mx, t)[1] != 0
    p = stochastic_up_probability(Fraction(mx) + Fraction(t), f)
    rows = np.tile([mx, t], (1 << 16, 1))
    ups, n = 0, 0
    for seed in (1, 2):
        for order in ("sequential", "pairwise"):
            r = arith.sum(rows, "fp64", acc=f, order=order, axis=-1, rounding="stochastic",
                          seed=seed, out_fmt="fp64")  # fmt: skip
            up = ~np.isfinite(r)
            assert (r[~up] == mx).all()
            n, ups = n + r.size, ups + int(up.sum())
    assert binomial_ok(ups, n, float(p)), (ups, n, float(p))
    # trace_sum, one seed at a time
    traces = [arith.trace_sum([mx, t], acc=f, rounding="stochastic", seed=s) for s in range(3000)]
    ups = sum(not math.isfinite(tr.result) for tr in traces)
    assert binomial_ok(ups, 3000, float(p)), (ups, float(p))


@pytest.mark.parametrize("order", ["sequential", "pairwise"])
@pytest.mark.parametrize("mode", MODES)
def test_sum_whose_float64_partial_sum_overflows(order, mode):
    # Two fp64 terms of 2^1023 (or more) have an exact sum beyond float64; in the accumulator
    # (largest value < 2^1023) that sum overflows in every mode: toward zero (and the directed
    # mode pointing back) must give the accumulator's max, not the inf of the float64 sum.
    accs = ["fp32", fpsim.Format(11, 20, bias=1024)]  # the latter: max = (2 - 2^-20) 2^1022
    x = [F64_MAX, F64_MAX, -(2.0**1023)]
    for acc in accs:
        for xs in (x, [-v for v in x]):
            want = reduce_reference(xs, acc, acc, order, mode)
            got = arith.sum(xs, "fp64", acc=acc, order=order, rounding=mode, out_fmt=acc)
            assert same_bits(np.float64(got), np.float64(want)), (acc, xs[0], got, want)
    # saturation: every partial sum of these positive terms is beyond max, so each is max
    pos = [F64_MAX, F64_MAX, 2.0**1023]
    for acc in accs:
        got = arith.sum(pos, "fp64", acc=acc, order=order, rounding=mode, saturate=True,
                        out_fmt=acc)  # fmt: skip
        assert got == fpsim.get_format(acc).max, acc


@pytest.mark.parametrize("order", ["sequential", "pairwise"])
def test_matmul_products_whose_float64_sum_overflows(order):
    # Format(10, 5) products reach 63^2 2^1012 ~ 2^1023.96: two of them overflow float64
    f = fpsim.Format(10, 5)
    mx = f.max
    a = np.array([[mx, mx, mx], [mx, -mx, mx], [-mx, mx, -mx]])
    b = np.array([[mx], [mx], [-mx]])
    for acc in ("fp32", fpsim.Format(11, 20, bias=1024)):  # the latter: max ~ 2^1023
        for mode in ALL_MODES:
            got = arith.matmul(a, b, f, acc=acc, order=order, rounding=mode, seed=SEED,
                               out_fmt=acc)  # fmt: skip
            for i in range(3):
                terms = [Fraction(a[i, k]) * Fraction(b[k, 0]) for k in range(3)]
                want = reduce_reference(terms, acc, acc, order, mode, rand=lambda r, i=i:
                                        scalar.random62(SEED, i * 7 + r))  # fmt: skip
                assert same_bits(np.float64(got[i, 0]), np.float64(want)), (acc, mode, i)
            # saturating: row 0's partial sums are all beyond max (positive): max, in any mode
            sat = arith.matmul(a[:1], np.full((3, 1), mx), f, acc=acc, order=order, rounding=mode,
                               seed=SEED, saturate=True, out_fmt=acc)  # fmt: skip
            assert sat[0, 0] == fpsim.get_format(acc).max


def test_trace_sum_agrees_when_the_float64_sum_overflows():
    t = arith.trace_sum([F64_MAX, F64_MAX], acc="fp32", order="pairwise", rounding="toward_zero")
    assert t.result == np.finfo(np.float32).max and t[0].rounded == np.finfo(np.float32).max


@pytest.mark.parametrize("acc", ["fp32", "fp8_e4m3"])
def test_trace_sum_goes_on_past_an_overflowed_partial_sum(acc):
    # once a partial sum is inf (or NaN in a finite-only accumulator) the later steps are IEEE
    # arithmetic on it; the trace records them (it used to fail converting inf to a Fraction)
    for x in ([1e300, 1e300, 1.0, -math.inf, 2.0], [1e300, 1e300, 1.0, 2.0]):
        for order in ("sequential", "pairwise"):
            t = arith.trace_sum(x, acc=acc, order=order, out_fmt="fp64")
            terms = [Fraction(v) if math.isfinite(v) else v for v in x]
            want = reduce_ieee(terms, acc, "fp64", order, "nearest_even")
            assert same_bits(np.float64(t.result), np.float64(want)), (x, order)
            total = arith.sum(x, "fp64", acc=acc, order=order)
            assert same_bits(np.float64(t.result), np.float64(total)), (x, order)
            notes = [s.note for s in t]
            assert "overflow" in notes and "inf/nan" in notes, (x, order, notes)
            assert "inf/nan" in str(t)  # the table prints


# ---- B. property: every format, value, op and mode: exact, or a justified refusal --------------
def legal_bias(e, m, style):
    """The biases Format accepts: emax <= 1023 and smallest subnormal >= 2^-1074."""
    top = (1 << e) - 1 if style == "fn" else (1 << e) - 2
    return top - 1023, 1075 - m


@st.composite
def formats(draw):
    e = draw(st.one_of(st.integers(2, 11), st.sampled_from([9, 10, 11])))
    m = draw(st.integers(1, 23))
    style = draw(st.sampled_from(["ieee", "fn"]))
    lo, hi = legal_bias(e, m, style)
    default = (1 << (e - 1)) - 1
    top = (1 << e) - 1 if style == "fn" else (1 << e) - 2
    # biases that put the smallest subnormal at 2^-537 / 2^-538 or the largest exponent at
    # 511 / 512 / 1022 / 1023: both sides of every documented limit
    edges = [1 - m + 537, 1 - m + 538] + [top - x for x in (511, 512, 1022, 1023)]
    bias = draw(st.one_of(st.just(default), st.integers(lo, hi), st.sampled_from([lo, hi]),
                          st.sampled_from(edges)))  # fmt: skip
    bias = min(max(bias, lo), hi)  # the default bias is not legal for every e11 format
    return fpsim.Format(e, m, bias=bias, style=style)


def float64_witness(f, op):
    """Why ``op`` in ``f`` cannot go through float64, shown on two extreme values with exact
    rational arithmetic (None when no such witness exists): the refusal's justification. The
    same in every rounding mode (stochastic included: a quantum below 2^-1022 is no reason)."""
    ms, mx = Fraction(f.smallest_subnormal), Fraction(f.max)
    tiny = Fraction(2) ** -1022
    if op in ("mul", "fma", "matmul"):
        if f.smallest_subnormal * f.smallest_subnormal != ms * ms:
            return "min_sub^2 is not exact in float64"
        if not math.isfinite(f.max * f.max):
            return "max^2 overflows float64"
    if op == "div":
        if ms / mx < tiny:
            return "min_sub / max is below float64's normal range"
        if mx / ms > Fraction(F64_MAX):
            return "max / min_sub overflows float64"
    if op in ("add", "sub", "acc") and not math.isfinite(f.max + f.max):
        return "max + max overflows float64"
    return None


def pairs(f, arity, op):
    """Every tuple of the extreme values of f (sqrt: their magnitudes)."""
    v = extremes(f)
    if op == "sqrt":
        return (np.abs(v),)
    grid = np.meshgrid(*([v] * arity), indexing="ij")
    return tuple(g.reshape(-1) for g in grid)


# (format, accepted?) on both sides of each documented limit; bias = 1 - emin
BOUNDARIES = {
    "mul": [(fpsim.Format(10, 5, bias=533), True),  # lo = -537: min_sub^2 = 2^-1074
            (fpsim.Format(10, 5, bias=534), False),  # lo = -538: min_sub^2 = 2^-1076 -> 0
            (fpsim.Format(10, 5), True),  # emax = 511: max^2 < 2^1024
            (fpsim.Format(10, 5, bias=510), False),  # emax = 512: max^2 -> inf
            (fpsim.Format(9, 23, bias=515), True), (fpsim.Format(9, 23, bias=516), False),
            (fpsim.Format(2, 1, bias=-509, style="fn"), False),  # emax = 512
            (fpsim.Format(2, 1, bias=-508, style="fn"), True)],
    "div": [(fpsim.Format(9, 23, bias=-511), True), (fpsim.Format(9, 23, bias=1051), True),
            (fpsim.Format(9, 1, style="fn"), True), (fpsim.Format(10, 1), False),
            (fpsim.Format(10, 1, style="fn"), False), (fpsim.Format(10, 23, bias=1051), False)],
    "add": [(fpsim.Format(11, 23, bias=1024), True),  # emax = 1022
            (fpsim.Format(11, 23), False),  # emax = 1023: max + max -> inf
            (fpsim.Format(11, 23, bias=1052), True)],  # smallest subnormal 2^-1074
}  # fmt: skip
BOUNDARIES["fma"] = BOUNDARIES["mul"]
BOUNDARIES["sub"] = BOUNDARIES["add"]
BOUNDARIES["sqrt"] = [(f, True) for f, _ in BOUNDARIES["mul"] + BOUNDARIES["div"]]


@pytest.mark.parametrize("op", list(FN))
def test_accepted_exponent_ranges_are_exactly_the_documented_ones(op):
    for f, accepted in BOUNDARIES[op]:
        args = pairs(f, ARITY[op], op)
        if not accepted:
            assert float64_witness(f, op) is not None, f
            with pytest.raises(ValueError, match=f"{op}.* in {f.name} is not supported"):
                FN[op](*args, f)
            continue
        assert float64_witness(f, op) is None, f
        for mode in ALL_MODES:
            got = FN[op](*args, f, rounding=mode, seed=SEED)
            assert_same(got, oracle(op, args, f, mode), f"{op} {f} {mode}")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(formats(), st.sampled_from(list(FN)), st.sampled_from(ALL_MODES), st.integers(0, 2**32),
       st.booleans())  # fmt: skip
@example(TINY_SPACING[1], "add", "stochastic", 3, False)  # spacing 2^-1024 at max
@example(TINY_SPACING[0], "sub", "stochastic", 5, False)
def test_every_format_value_op_and_mode_is_exact_or_refused(f, op, mode, seed, flags):
    rng = np.random.default_rng(seed)
    # every pair of extreme values (min_sub * min_sub, max / min_sub, max + max, ...; fma: with
    # a random extreme as c), then random values of every exponent
    grid = pairs(f, min(ARITY[op], 2), op)
    if op == "fma":
        grid += (rng.permutation(np.resize(extremes(f), grid[0].size)),)
    n = 24
    args = [np.concatenate([g, random_values(f, n, rng)]) for g in grid]
    if op == "sqrt":
        args[0] = np.abs(args[0])
    kw = dict(subnormals=not flags, saturate=flags) if mode != "stochastic" else {}
    witness = float64_witness(f, op)
    try:
        got = FN[op](*args, f, rounding=mode, seed=seed, **kw)
    except ValueError as exc:
        assert f.name in str(exc) and op in str(exc), exc
        assert witness is not None, f"{op} in {f} refused without cause: {exc}"
        return
    # accepted exactly where float64 holds every intermediate: the documented range
    assert witness is None, f"{op} in {f} accepted though {witness}"
    want = oracle(op, args, f, mode, seed=seed, **kw)
    assert_same(got, want, f"{op} {f!r} {mode} {kw}")


def reduce_ieee(terms, acc, out, order, mode, rounded=False, rand=lambda r: 0):
    """arith_oracle.reduce_reference with IEEE signed zeros and infinite rounded terms: exact
    non-zero values are Fractions; zeros (with their sign), inf and NaN are floats."""
    f = fpsim.get_format(acc)

    def rnd(v, fmt, r):
        if isinstance(v, Fraction):
            v = round_rational(v, fmt, mode, rand62=rand(r))
        elif math.isinf(v) and not fpsim.get_format(fmt).has_inf:
            v = math.nan  # no infinity in a finite-only format
        return Fraction(v) if math.isfinite(v) and v != 0 else v

    def fin(v):
        return not isinstance(v, float) or math.isfinite(v)

    def plus(x, y):
        if not (fin(x) and fin(y)):
            return float(x) + float(y)
        s = Fraction(x) + Fraction(y)
        if s != 0:
            return s
        if x == 0 and y == 0 and math.copysign(1, x) == math.copysign(1, y):
            return float(x)  # -0 + -0 = -0, +0 + +0 = +0 in every mode
        return -0.0 if mode == "down" else 0.0  # IEEE 754 6.3

    t = [rnd(v, acc, 2 * k) if rounded else v for k, v in enumerate(terms)]
    count = [0]

    def acc_round(v):
        count[0] += 1
        return rnd(v, f, 2 * count[0] - 1)

    K = len(t)
    if order == "sequential":
        s = acc_round(t[0])
        for v in t[1:]:
            s = acc_round(plus(s, v))
    else:

        def rec(lo, hi):
            if hi - lo == 1:
                return t[lo]
            h = 1 << ((hi - lo - 1).bit_length() - 1)
            left = rec(lo, lo + h)
            return acc_round(plus(left, rec(lo + h, hi)))

        s = rec(0, K)
        if K == 1 and not rounded:
            s = acc_round(s)
    return float(rnd(s, out, 2 * K))


def exact_term(x, y=1.0):
    """The exact product x * y: a Fraction, or a float zero with the product's sign."""
    p = Fraction(x) * Fraction(y)
    return p if p != 0 else math.copysign(1, x) * math.copysign(1, y) * 0.0


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(formats(), formats(), st.sampled_from(MODES + ["stochastic"]), st.integers(0, 2**32),
       st.sampled_from(["sequential", "pairwise"]), st.sampled_from(["exact", "rounded"]),
       st.integers(1, 9))  # fmt: skip
@example(fpsim.Format(5, 10), TINY_SPACING[1], "stochastic", 11, "sequential", "exact", 5)
@example(fpsim.Format(5, 10), TINY_SPACING[0], "stochastic", 12, "pairwise", "rounded", 7)
@example(TINY_SPACING[1], TINY_SPACING[0], "stochastic", 13, "sequential", "exact", 9)
def test_reductions_every_format_exact_or_refused(f, acc, mode, seed, order, products, K):
    rng = np.random.default_rng(seed)
    a = np.concatenate([extremes(f), random_values(f, K, rng)])[rng.permutation(K + 17)][:K]
    b = np.concatenate([extremes(f), random_values(f, K, rng)])[rng.permutation(K + 17)][:K]
    # and the largest terms, whose float64 partial sums may overflow: max^2 + max^2 (dot) and
    # max + max (sum), then back toward the range
    big = np.array([f.max, f.max, -f.max, f.max])
    rand = lambda r: scalar.random62(seed, r)  # noqa: E731  (output 0: index r)
    dot_ok = float64_witness(f, "matmul") is None and float64_witness(acc, "acc") is None
    for x, y in [(a, b), (big, big[::-1] * np.sign(big[::-1]))]:
        try:
            got = arith.dot(x, y, f, acc=acc, order=order, products=products, rounding=mode,
                            seed=seed, out_fmt="fp64")  # fmt: skip
        except ValueError as exc:
            assert "not supported" in str(exc) and not dot_ok, exc
            continue
        assert dot_ok, f"dot in {f} with acc {acc} accepted though float64 is not exact"
        terms = [exact_term(u, v) for u, v in zip(x, y, strict=True)]
        want = reduce_ieee(terms, acc, "fp64", order, mode, products == "rounded", rand)
        assert same_bits(np.float64(got), np.float64(want)), (x, y, got, want)
    sum_ok = float64_witness(acc, "acc") is None
    for x in (a, big):
        try:
            got = arith.sum(x, f, acc=acc, order=order, rounding=mode, seed=seed, out_fmt="fp64")
        except ValueError as exc:
            assert "not supported" in str(exc) and not sum_ok, exc
            continue
        assert sum_ok, f"sum with acc {acc} accepted though float64 is not exact"
        want = reduce_ieee([exact_term(v) for v in x], acc, "fp64", order, mode, rand=rand)
        assert same_bits(np.float64(got), np.float64(want)), (x, got, want)


# ---- C. empty reductions: numpy's shapes, +0.0 -------------------------------------------------
ACC_ORDERS = [("fp16", "sequential"), ("fp16", "pairwise"), ("fp32", None), ("fp32", "sequential"),
              ("fp32", "pairwise"), ("fp32", "blas"), ("fp64", "blas"), ("bf16", "pairwise"),
              ("fp64", "sequential")]  # fmt: skip
EMPTY_MATMULS = [((2, 0), (0, 3)), ((0, 4), (4, 3)), ((2, 4), (4, 0)), ((0, 0), (0, 0)),
                 ((0,), (0,)), ((0,), (0, 3)), ((2, 0), (0,)), ((3, 2, 0), (0, 5)),
                 ((0, 2, 3), (3, 4)), ((1, 0), (2, 0, 3))]  # fmt: skip


def positive_zeros(r):
    r = np.asarray(r)
    return bool((r == 0).all() and not np.signbit(r).any())


@pytest.mark.parametrize("acc,order", ACC_ORDERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_empty_matmul_is_numpy_shaped_and_positive_zero(acc, order, dtype):
    for sa, sb in EMPTY_MATMULS:
        a, b = np.zeros(sa, dtype), np.zeros(sb, dtype)
        want = np.matmul(a, b)
        modes = ["nearest_even"] if order == "blas" else ALL_MODES
        for mode in modes:
            got = arith.matmul(a, b, "fp16", acc=acc, order=order, rounding=mode, seed=1)
            assert np.shape(got) == want.shape, (sa, sb)
            if want.ndim == 0:
                assert type(got) is float and got == 0.0 and not math.copysign(1, got) < 0
            else:
                assert got.dtype == dtype and positive_zeros(got), (sa, sb, mode)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_empty_dot_sum_and_trace_are_positive_zero(mode):
    for order in ("sequential", "pairwise"):
        for products in ("exact", "rounded"):
            d = arith.dot([], [], "fp16", order=order, products=products, rounding=mode, seed=1)
            assert type(d) is float and d == 0.0 and math.copysign(1, d) == 1
        s = arith.sum([], "fp16", acc="fp16", order=order, rounding=mode, seed=1)
        assert type(s) is float and math.copysign(1, s) == 1 and s == 0.0
        t = arith.trace_sum([], acc="fp16", order=order, rounding=mode, seed=1)
        assert len(t) == 0 and t.result == 0.0 and math.copysign(1, t.result) == 1


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0), (2, 0, 4), (0, 0)])
def test_empty_sum_along_every_axis_like_numpy(shape):
    x = np.zeros(shape, np.float32)
    for axis in [None] + list(range(len(shape))) + [-1]:
        want = np.sum(x, axis=axis)
        for order in ("sequential", "pairwise"):
            got = arith.sum(x, "fp16", acc="fp16", order=order, axis=axis, rounding="down")
            assert np.shape(got) == want.shape, (axis, order)
            if want.ndim == 0:  # fpsim: a 0-d result is a Python float
                assert type(got) is float
            else:
                assert got.dtype == np.float32
            assert positive_zeros(got)


# ---- D. the sequential order rounds the first term alone ------------------------------------------
def test_sequential_order_rounds_the_first_term_alone():
    # terms 1 + 2^-11 and 2^-11 (fp32 values), accumulator fp16 (spacing 2^-10 at 1):
    #   acc = fp16(1 + 2^-11) = 1 (a tie, to even); acc = fp16(1 + 2^-11) = 1      -> 1.0
    #   the other reading, fp16(1 + 2^-11 + 2^-11) = 1 + 2^-10 exactly             -> 1.0009765625
    x = [1 + 2.0**-11, 2.0**-11]
    terms = [Fraction(v) for v in x]
    first_alone = round_rational(Fraction(round_rational(terms[0], "fp16")) + terms[1], "fp16")
    both_unrounded = round_rational(terms[0] + terms[1], "fp16")
    assert (first_alone, both_unrounded) == (1.0, 1 + 2.0**-10)
    kw = dict(acc="fp16", out_fmt="fp32")
    assert arith.dot(x, [1.0, 1.0], "fp32", **kw) == first_alone  # exact products, fused
    assert arith.dot(x, [1.0, 1.0], "fp32", products="rounded", **kw) == first_alone
    assert arith.sum(x, "fp32", **kw) == first_alone
    assert arith.matmul([x], [[1.0], [1.0]], "fp32", order="sequential", **kw)[0, 0] == first_alone
    t = arith.trace_sum(x, **kw)
    assert [s.rounded for s in t] == [1.0, 1.0] and t[0].partial is None and t[0].note == "rounded"
    assert t.result == first_alone
    # pairwise: the first addition takes both terms unrounded
    assert arith.dot(x, [1.0, 1.0], "fp32", order="pairwise", **kw) == both_unrounded
    assert arith.sum(x, "fp32", order="pairwise", **kw) == both_unrounded
    tp = arith.trace_sum(x, order="pairwise", **kw)
    assert len(tp) == 1 and tp[0].partial == x[0] and tp.result == both_unrounded
    # and the documentation says so
    assert "rounded to the accumulator alone" in arith.__doc__


@pytest.mark.parametrize("acc", ["input", "fp32"])
@pytest.mark.parametrize("m, k, n", [(3, 0, 2), (0, 4, 2), (3, 4, 0)])
def test_autograd_matmul_of_empty_operands(acc, m, k, n):
    # numpy's answer for the shapes and the empty sum (+0.0); gradients of the same shapes
    a = fpsim.zeros(m, k, format="fp16", requires_grad=True)
    b = fpsim.zeros(k, n, format="fp16", requires_grad=True)
    with fpsim.matmul_accumulation(acc):
        c = a @ b
    want = np.zeros((m, k), np.float32) @ np.zeros((k, n), np.float32)
    assert c.shape == want.shape and c.format.name == "fp16"
    assert (c.detach().numpy() == 0).all() and not np.signbit(c.detach().numpy()).any()
    c.sum().backward()
    assert a.grad.shape == (m, k) and b.grad.shape == (k, n)


@pytest.mark.parametrize("name", ["fp8_e4m3fnuz", "fp8_e5m2fnuz"])
def test_negative_zero_is_refused_by_formats_without_it(name):
    """-0.0 is not a value of an fnuz format (its code is NaN; round_to gives +0.0): the check
    refuses it with a message naming it and where it is, on both containers (it used to fail
    with an IndexError while building that message, found in review)."""
    assert float(np.copysign(1.0, fpsim.round_to(-0.0, name))) == 1.0  # the definition: +0
    for dt in (np.float32, np.float64):
        x = np.array([[1.0, 0.0], [-0.0, 2.0]], dt)
        with pytest.raises(ValueError, match=re.escape("e.g. -0.0 at index (1, 0)")):
            arith.add(x, np.ones_like(x), name)
        with pytest.raises(ValueError, match=re.escape("e.g. -0.0 at index (1, 0)")):
            arith.matmul(x, np.ones_like(x), name)
    assert arith.add(np.array([0.0]), np.array([1.0]), name).tolist() == [1.0]
