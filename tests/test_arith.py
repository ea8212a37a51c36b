"""fpsim.arith against independent oracles.

Oracles: exact ``fractions.Fraction`` arithmetic rounded by the definition (tests/arith_oracle.py,
no fpsim code), numpy float16 arithmetic (correctly rounded add and mul), numpy float32
arithmetic for double-rounding counterexamples, and numpy's float32/float64 matmul for the BLAS
order. The pure-Python run of the scalar code is compared with the compiled kernels too, but
never as the only check.
"""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from arith_oracle import ALL_MODES, MODES, op_oracle, reduce_reference, round_rational, round_vec
from oracle import same_bits

import fpsim
from fpsim import arith
from fpsim.kernels import scalar, scalar_ops

BUILTIN = ["fp32", "fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2"]
OPS = ["add", "sub", "mul", "div", "sqrt", "fma"]
ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}
FN = {name: getattr(arith, name) for name in OPS}
SEED = 12345


def rand62(seed, n):
    """The random bits fpsim documents for element i: scalar.random62(seed, i)."""
    return np.array([scalar.random62(seed, i) for i in range(n)], dtype=np.uint64)


def format_values(fmt, n, rng, lo_exp=None, hi_exp=None):
    """n random values of ``fmt`` (normal and subnormal, both signs), built from integers."""
    f = fpsim.get_format(fmt)
    lo_exp = f.emin - 1 if lo_exp is None else lo_exp
    hi_exp = f.emax if hi_exp is None else hi_exp
    e = rng.integers(lo_exp, hi_exp + 1, n)  # emin - 1 stands for the subnormal range
    frac = rng.integers(0, 1 << f.man_bits, n)
    sub = e < f.emin
    sig = np.where(sub, frac, frac + (1 << f.man_bits))
    exp = np.where(sub, f.emin, e) - f.man_bits
    v = np.ldexp(sig.astype(np.float64), exp)
    v = np.minimum(v, f.max)  # fn formats: the all-ones code is NaN, not a value
    return v * rng.choice([-1.0, 1.0], n)


def special_values(fmt):
    f = fpsim.get_format(fmt)
    v = [0.0, -0.0, 1.0, -1.0, f.max, -f.max, f.min_normal, f.smallest_subnormal,
         -f.smallest_subnormal, 1.5, 3.0, np.nan]  # fmt: skip
    if f.has_inf:
        v += [np.inf, -np.inf]
    return np.array(v)


def operands(fmt, op, n, seed):
    """Random operand tuples for ``op``: mixtures that exercise rounding (close exponents, near
    cancellation, ties) plus specials."""
    f = fpsim.get_format(fmt)
    rng = np.random.default_rng(seed)
    a = format_values(f, n, rng)
    b = format_values(f, n, rng)
    c = format_values(f, n, rng)
    third = n // 3
    if op in ("add", "sub"):
        # b within p + 2 binades of a: the sum really rounds
        k = rng.integers(-(f.precision + 2), 2, third)
        b[:third] = fpsim.round_to(a[:third] * np.ldexp(1.0, k) * rng.uniform(1, 2, third), f)
    if op == "fma":
        # c close to -a*b: the product's low bits decide
        c[:third] = -np.asarray(fpsim.round_to(a[:third] * b[:third], f))
    if op in ("mul", "div", "fma", "sqrt"):
        # moderate exponents too, so results are mostly in range
        half = (f.emin // 2, f.emax // 2)
        a[third : 2 * third] = format_values(f, third, rng, *half)
        b[third : 2 * third] = format_values(f, third, rng, *half)
    if op == "sqrt":
        a = np.abs(a)
        a[:5] = [-1.0, -0.0, 0.0, 4.0, 2.0]
    sp = special_values(f)
    m = len(sp)
    a[-m:] = sp
    b[-m:] = np.roll(sp, 3)
    c[-m:] = np.roll(sp, 5)
    return (a, b, c)[: ARITY[op]]


def oracle_array(op, args, fmt, mode, rand=None, subnormals=True, saturate=False):
    n = len(args[0])
    out = np.empty(n)
    for i in range(n):
        r = int(rand[i]) if rand is not None else 0
        out[i] = op_oracle(op, [a[i] for a in args], fmt, mode, subnormals, saturate, r)
    return out


def assert_same(got, want, args=None, label=""):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    ok = same_bits(got, want)
    if not ok.all():
        idx = np.flatnonzero(~ok)[:6]
        lines = [f"{label}: {int((~ok).sum())} of {ok.size} differ"]
        for i in idx:
            ops = "" if args is None else ", ".join(repr(float(a[i])) for a in args)
            lines.append(f"  ({ops}): got {got[i]!r}, want {want[i]!r}")
        raise AssertionError("\n".join(lines))


# ---- elementwise vs exact rational arithmetic: every format, op and mode ------------------------
@pytest.mark.parametrize("fmt", BUILTIN)
@pytest.mark.parametrize("op", OPS)
def test_elementwise_matches_exact_rational_rounding(fmt, op):
    n = 240
    args = operands(fmt, op, n, seed=hash((fmt, op)) % 2**32)
    for mode in ALL_MODES:
        got = FN[op](*args, fmt, rounding=mode, seed=SEED)
        rand = rand62(SEED, n) if mode == "stochastic" else None
        # stochastic div/sqrt decide from fl64(q) (documented): they could differ from the
        # exact decision only when rand62 falls within 2^(p-54) of a quantum of the exact
        # threshold, a chance below 2^-29 per sample -- so these samples must all agree
        want = oracle_array(op, args, fmt, mode, rand)
        assert_same(got, want, args, f"{op} {fmt} {mode}")


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3"])
def test_flush_to_zero_and_saturation_match_oracle(fmt):
    n = 200
    for op in ("add", "mul", "div", "fma"):
        args = operands(fmt, op, n, seed=7)
        for mode in ("nearest_even", "toward_zero", "up"):
            got = FN[op](*args, fmt, rounding=mode, subnormals=False, saturate=True)
            want = oracle_array(op, args, fmt, mode, subnormals=False, saturate=True)
            assert_same(got, want, args, f"{op} {fmt} {mode} ftz+sat")


@pytest.mark.parametrize("op", ["add", "sub"])
def test_fp64_add_sub_every_mode(op):
    rng = np.random.default_rng(3)
    n = 400
    a = rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))
    b = -a * (1 + rng.standard_normal(n) * 2.0 ** rng.integers(-60, 0, n))  # cancellation
    b[: n // 2] = rng.standard_normal(n // 2) * np.exp2(rng.integers(-80, 80, n // 2))
    b[:20] = a[:20] * 2.0**-53  # ties and near ties
    b[20:40] = a[20:40] * (2.0**-53 + 2.0**-80)
    a[-6:] = [1.7976931348623157e308, 1.7976931348623157e308, -1.7976931348623157e308, 0.0, -0.0,
              -0.0]  # fmt: skip
    b[-6:] = [1.7976931348623157e308, 2.0**970, -(2.0**971), -0.0, -0.0, 0.0]
    b2 = b if op == "add" else -b  # a - (-b) = a + b: the same cancellations for sub
    for mode in ALL_MODES:
        for sat in (False, True):
            got = FN[op](a, b2, "fp64", rounding=mode, seed=SEED, saturate=sat)
            rand = rand62(SEED, n) if mode == "stochastic" else None
            want = oracle_array(op, (a, b2), "fp64", mode, rand, saturate=sat)
            assert_same(got, want, (a, b2), f"fp64 {op} {mode} sat={sat}")


def test_vectorised_oracle_agrees_with_fraction_oracle():
    rng = np.random.default_rng(5)
    for fmt in ("fp8_e4m3", "fp8_e5m2", "fp16"):
        x = format_values(fmt, 300, rng) * rng.uniform(0.5, 2, 300)
        x = np.concatenate([x, [2.5, 3.5, -2.5, 1 + 2.0**-11]])
        r = rand62(9, x.size)
        for mode in ALL_MODES:
            vec = round_vec(x, fmt, mode, rand62=r)
            ref = [
                round_rational(
                    Fraction(v), fmt, mode, rand62=int(ri), zero_sign=math.copysign(1, v)
                )
                for v, ri in zip(x, r, strict=True)
            ]
            assert_same(vec, ref, (x,), f"oracles {fmt} {mode}")


# ---- exhaustive over all fp8 pairs -----------------------------------------------------------------
@pytest.mark.parametrize("fmt,dtype", [("fp8_e4m3", ml_dtypes.float8_e4m3fn),
                                       ("fp8_e5m2", ml_dtypes.float8_e5m2)])  # fmt: skip
@pytest.mark.parametrize("op", ["add", "mul"])
def test_exhaustive_fp8_pairs_every_mode(fmt, dtype, op):
    # every code, decoded by ml_dtypes (not by fpsim)
    v = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    a = np.repeat(v, 256)
    b = np.tile(v, 256)
    with np.errstate(invalid="ignore", over="ignore"):
        exact = a + b if op == "add" else a * b  # exact in float64 (checked below)
    fin = np.isfinite(exact)
    sample = np.flatnonzero(fin)[::97]
    for i in sample:  # float64 holds fp8 sums and products exactly
        want = Fraction(a[i]) + Fraction(b[i]) if op == "add" else Fraction(a[i]) * Fraction(b[i])
        assert Fraction(exact[i]) == want
    r = rand62(SEED, a.size)
    for mode in ALL_MODES:
        got = FN[op](a, b, fmt, rounding=mode, seed=SEED)
        want = round_vec(exact, fmt, mode, rand62=r)
        if op == "add":
            # exact zero sums: +0, -0 when rounding down or for -0 + -0 (IEEE 754 6.3)
            z = exact == 0
            sa, sb = np.signbit(a), np.signbit(b)
            both_pos_zero = (a == 0) & (b == 0) & ~sa & ~sb
            neg0 = (sa & sb) | ((mode == "down") & ~both_pos_zero)
            want = np.where(z, np.where(neg0, -0.0, 0.0), want)
        assert_same(got, want, (a, b), f"{op} {fmt} {mode}")


# ---- fp16 add/mul vs numpy float16 on a million pairs ----------------------------------------------
@pytest.mark.parametrize("op", ["add", "mul"])
def test_fp16_million_pairs_vs_numpy_float16(op):
    rng = np.random.default_rng(11)
    n = 1_000_000
    a16 = rng.integers(0, 1 << 16, n, dtype=np.uint64).astype(np.uint16).view(np.float16)
    b16 = rng.integers(0, 1 << 16, n, dtype=np.uint64).astype(np.uint16).view(np.float16)
    # half the pairs with close exponents, so that the sum really rounds
    b16[: n // 2] = (a16[: n // 2].astype(np.float32) * rng.uniform(-2, 2, n // 2)).astype(
        np.float16
    )
    with np.errstate(all="ignore"):
        want = (a16 + b16) if op == "add" else (a16 * b16)
    got = FN[op](a16.astype(np.float32), b16.astype(np.float32), "fp16")
    assert got.dtype == np.float32
    assert_same(got, want.astype(np.float32), (a16, b16), f"fp16 {op} vs numpy")


# ---- fma: cases where two roundings differ from one ---------------------------------------------------
@pytest.mark.parametrize("fmt,dt", [("fp32", np.float32), ("fp16", np.float16)])
def test_fma_single_rounding_where_double_rounding_differs(fmt, dt):
    rng = np.random.default_rng(17)
    n = 4000
    a = format_values(fmt, n, rng, -8, 8)
    b = format_values(fmt, n, rng, -8, 8)
    prod = np.asarray(fpsim.round_to(a * b, fmt))
    c = -prod  # a*b + c is the product's rounding error: lost entirely by two roundings
    c[n // 2 :] = np.asarray(
        fpsim.round_to(-prod[n // 2 :] * (1 + rng.uniform(-2, 2, n - n // 2) * 2.0**-8), fmt)
    )
    with np.errstate(all="ignore"):
        two = (a.astype(dt) * b.astype(dt) + c.astype(dt)).astype(np.float64)  # two roundings
    got = arith.fma(a, b, c, fmt)
    want = oracle_array("fma", (a, b, c), fmt, "nearest_even")
    assert_same(got, want, (a, b, c), f"fma {fmt}")
    differ = ~same_bits(two, want)
    assert differ.sum() > 500, differ.sum()  # plenty of cases where double rounding is wrong
    assert not same_bits(got[differ], two[differ]).any()


def test_fma_textbook_case():
    x = 1 + 2.0**-10  # x*x = 1 + 2^-9 + 2^-20: fp16 rounds the product to 1 + 2^-9
    assert arith.fma(x, x, -(1 + 2.0**-9), "fp16") == 2.0**-20
    assert arith.add(arith.mul(x, x, "fp16"), -(1 + 2.0**-9), "fp16") == 0.0
    y = np.float32(1 + 2.0**-23)
    assert arith.fma(y, y, np.float32(-(1 + 2.0**-22)), "fp32") == np.float32(2.0**-46)


# ---- the exact expectations of the course material ----------------------------------------------------
def test_one_plus_0_0001_in_fp16_and_fp32():
    u16 = fpsim.round_to(0.0001, "fp16")
    assert arith.add(1.0, u16, "fp16") == 1.0  # below half an ulp (2^-11)
    assert u16 < 2.0**-11
    assert arith.add(1.0, 0.0001, "fp16", round_inputs=True) == 1.0
    u32 = fpsim.round_to(0.0001, "fp32")
    assert arith.add(1.0, u32, "fp32") == 1.000100016593933  # fp32 keeps it
    assert arith.add(1.0, u32, "fp32") > 1.0


def test_sum_of_4096_ones():
    ones = np.ones(4096, np.float32)
    assert arith.sum(ones, "fp16", acc="fp16") == 2048.0
    assert arith.sum(ones, "fp16", acc="fp32") == 4096.0
    assert arith.sum(ones, "fp16", acc="bf16") == 256.0
    # the documented case where the orders differ: pairwise only adds equal partial sums
    assert arith.sum(ones, "fp16", acc="fp16", order="pairwise") == 4096.0
    assert arith.sum(ones, "fp16", acc="bf16", order="pairwise") == 4096.0


def test_fp16_weight_updates():
    assert arith.add(1.0, 2.0**-12, "fp16") == 1.0  # a quarter ulp: lost
    assert arith.add(1.0, 2.0**-11, "fp16") == 1.0  # half an ulp: tie, rounds to even (1.0)
    assert arith.add(1.0, 3 * 2.0**-12, "fp16") == 1 + 2.0**-10  # three quarters: up
    w = np.ones(3, np.float32)
    upd = np.array([2.0**-12, 2.0**-11, 3 * 2.0**-12], np.float32)
    assert arith.add(w, upd, "fp16").tolist() == [1.0, 1.0, 1 + 2.0**-10]


def test_float64_non_associativity():
    assert arith.add(arith.add(1e20, -1e20, "fp64"), 3.14, "fp64") == 3.14
    assert arith.add(1e20, arith.add(-1e20, 3.14, "fp64"), "fp64") == 0.0


def test_round_half_to_even_at_two_fraction_bits():
    # "2 fraction bits" = a grid of 1/4 on [2, 4). A binary float with man_bits m has spacing
    # 2^(1-m) on [2, 4) (one of its bits is spent on the 2^0 place), so the grid 1/4 is
    # m = 3: Format(4, 3) (the textbook 8-bit format; fp8_e4m3 has the same grid there).
    f = fpsim.Format(4, 3)
    cases = {2 + 3 / 32: 2.0, 2 + 3 / 16: 2.25, 2 + 7 / 8: 3.0, 2 + 5 / 8: 2.5}
    for x, want in cases.items():
        assert fpsim.round_to(x, f) == want
        assert fpsim.round_to(x, "fp8_e4m3") == want
        # the same rounding as the result of an addition: 2 + frac, both exact in the format
        assert arith.add(2.0, x - 2, f) == want
        assert round_rational(Fraction(x), f) == want  # and the oracle agrees


# ---- reductions: orders, accumulators, the pairwise bound ----------------------------------------------
def test_sequential_and_pairwise_match_the_documented_order():
    rng = np.random.default_rng(23)
    for n in [1, 2, 3, 5, 8, 13, 31, 64, 100]:
        x = format_values("fp16", n, rng, -4, 4)
        for acc in ("fp16", "bf16", "fp8_e5m2"):
            for order in ("sequential", "pairwise"):
                for mode in MODES:
                    got = arith.sum(x, "fp16", acc=acc, order=order, rounding=mode,
                                    out_fmt="fp32")  # fmt: skip
                    want = reduce_reference(list(x), acc, "fp32", order, mode)
                    assert got == want, (n, acc, order, mode, got, want)


def test_reduction_stochastic_indices_match_documentation():
    rng = np.random.default_rng(29)
    K = 21
    a = format_values("bf16", 3 * K, rng, -3, 3).reshape(3, K)
    b = format_values("bf16", K * 2, rng, -3, 3).reshape(K, 2)
    for order in ("sequential", "pairwise"):
        for products in ("exact", "rounded"):
            got = arith.matmul(a, b, "bf16", acc="fp8_e5m2", order=order, products=products,
                               rounding="stochastic", seed=SEED, out_fmt="fp16")  # fmt: skip
            for i in range(3):
                for j in range(2):
                    o = i * 2 + j
                    terms = [Fraction(a[i, k]) * Fraction(b[k, j]) for k in range(K)]
                    want = reduce_reference(
                        terms, "fp8_e5m2", "fp16", order, "stochastic", products == "rounded",
                        rand=lambda r, o=o: scalar.random62(SEED, o * (2 * K + 1) + r),
                    )  # fmt: skip
                    assert got[i, j] == want, (order, products, i, j)


@pytest.mark.parametrize("products", ["exact", "rounded"])
def test_matmul_matches_reference_every_mode(products):
    rng = np.random.default_rng(31)
    a = format_values("fp16", 4 * 9, rng, -5, 5).reshape(4, 9)
    b = format_values("fp16", 9 * 5, rng, -5, 5).reshape(9, 5)
    for acc in ("fp16", "bf16", "fp32"):
        for mode in MODES:
            for order in ("sequential", "pairwise"):
                got = arith.matmul(a, b, "fp16", acc=acc, products=products, order=order,
                                   rounding=mode, out_fmt="fp32")  # fmt: skip
                for i in range(4):
                    for j in range(5):
                        terms = [Fraction(a[i, k]) * Fraction(b[k, j]) for k in range(9)]
                        want = reduce_reference(terms, acc, "fp32", order, mode,
                                                products == "rounded")  # fmt: skip
                        assert got[i, j] == want, (acc, mode, order, i, j)


def test_pairwise_error_bound_and_sequential_difference():
    rng = np.random.default_rng(37)
    n = 20000
    x = np.asarray(fpsim.round_to(rng.uniform(0, 1, n), "fp16"))
    exact = sum(Fraction(v) for v in x)
    u = 2.0**-11  # unit roundoff of fp16
    absum = float(np.sum(np.abs(x)))
    levels = math.ceil(math.log2(n))
    gamma = lambda k: k * u / (1 - k * u)  # noqa: E731
    pw = arith.sum(x, "fp16", acc="fp16", order="pairwise", out_fmt="fp64")
    sq = arith.sum(x, "fp16", acc="fp16", order="sequential", out_fmt="fp64")
    assert abs(Fraction(pw) - exact) <= gamma(levels) * absum
    # sequential stalls (swamping): far outside the pairwise bound on the same data
    assert abs(Fraction(sq) - exact) > gamma(levels) * absum
    assert sq != pw


def test_sum_axis_and_shapes():
    rng = np.random.default_rng(41)
    x = np.asarray(fpsim.round_to(rng.uniform(-4, 4, (3, 4, 5)), "fp16")).astype(np.float32)
    for axis in (0, 1, 2, -1):
        got = arith.sum(x, "fp16", acc="fp32", axis=axis)
        assert got.shape == np.sum(x, axis=axis).shape and got.dtype == np.float32
        moved = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
        want = [reduce_reference([float(v) for v in r], "fp32", "fp16") for r in moved]
        assert got.reshape(-1).tolist() == want
    assert isinstance(arith.sum(x, "fp16"), float)
    assert arith.sum([], "fp16") == 0.0
    with pytest.raises(ValueError, match="out of bounds"):
        arith.sum(x, "fp16", axis=3)


def test_dot_and_matmul_shapes_like_numpy():
    rng = np.random.default_rng(43)
    a = np.asarray(fpsim.round_to(rng.uniform(-2, 2, (2, 3, 4, 5)), "fp16"))
    b = np.asarray(fpsim.round_to(rng.uniform(-2, 2, (3, 5, 6)), "fp16"))
    v = np.asarray(fpsim.round_to(rng.uniform(-2, 2, 5), "fp16"))
    cases = [(a, b), (a, v), (v, b), (a[0, 0], b[0]), (v, v), (a[0, 0, 0], a[0, 0].T)]
    for x, y in cases:
        for order in ("sequential", "pairwise", None):
            # an fp64 accumulator is exact here: fp16 products, five terms, float64 range
            got = arith.matmul(x, y, "fp16", acc="fp64", order=order, out_fmt="fp64")
            want = np.matmul(x, y)
            assert np.shape(got) == want.shape
            np.testing.assert_array_equal(got, want)
            got32 = arith.matmul(x, y, "fp16", acc="fp32", order=order, out_fmt="fp32")
            assert np.shape(got32) == want.shape
    assert isinstance(arith.dot(v, v, "fp16"), float)
    x = [1.0] * 3000
    assert arith.dot(x, x, "fp16", acc="fp16") == 2048.0
    assert arith.dot(x, x, "fp16", acc="fp32") == 3000.0


def test_shape_errors():
    a = np.ones((2, 3))
    with pytest.raises(ValueError, match="do not align"):
        arith.matmul(a, np.ones((4, 2)), "fp16", order="sequential")
    with pytest.raises(ValueError, match="do not align"):
        arith.matmul(a, np.ones((4, 2)), "fp16")  # the BLAS path explains the same way
    with pytest.raises(ValueError, match="broadcast"):
        arith.add(np.ones(3), np.ones(4), "fp16")
    with pytest.raises(ValueError, match="1-D"):
        arith.dot(a, a, "fp16")
    with pytest.raises(ValueError, match="lengths"):
        arith.dot(np.ones(3), np.ones(4), "fp16")
    with pytest.raises(ValueError, match="at least one dimension"):
        arith.matmul(1.0, a, "fp16", order="sequential")


# ---- BLAS order: "fp32 accumulate, BLAS order" -----------------------------------------------------
def test_blas_order_equals_sequential_when_partial_sums_are_exact():
    rng = np.random.default_rng(47)
    a = rng.integers(-8, 9, (64, 96)).astype(np.float32)  # small integers: every sum exact
    b = rng.integers(-8, 9, (96, 80)).astype(np.float32)
    blas = arith.matmul(a, b, "fp16", acc="fp32", order="blas", out_fmt="fp32")
    seq = arith.matmul(a, b, "fp16", acc="fp32", order="sequential", out_fmt="fp32")
    default = arith.matmul(a, b, "fp16", acc="fp32", out_fmt="fp32")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert (blas == seq).all() and (blas == exact).all() and (default == exact).all()
    assert blas.dtype == np.float32


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3"])
def test_blas_order_within_the_fp32_error_bound(fmt):
    rng = np.random.default_rng(53)
    K = 512
    a = np.asarray(fpsim.round_to(rng.standard_normal((32, K)), fmt)).astype(np.float32)
    b = np.asarray(fpsim.round_to(rng.standard_normal((K, 24)), fmt)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)  # exact: 2p + log2 K bits < 53
    bound = (K * 2.0**-24 / (1 - K * 2.0**-24)) * (np.abs(a).astype(np.float64) @ np.abs(b))
    for order in ("blas", "sequential", "pairwise"):
        got = arith.matmul(a, b, fmt, acc="fp32", order=order, out_fmt="fp32")
        assert (np.abs(got - exact) <= bound).all(), order
    # and rounded to the output format once
    got16 = arith.matmul(a, b, fmt, acc="fp32", order="blas")
    blas32 = arith.matmul(a, b, fmt, acc="fp32", order="blas", out_fmt="fp32")
    assert (got16 == fpsim.round_to(blas32, fmt)).all()


def test_blas_order_for_fp32_inputs_is_numpy_float32():
    rng = np.random.default_rng(59)
    K = 300
    a = rng.standard_normal((16, K)).astype(np.float32)
    b = rng.standard_normal((K, 8)).astype(np.float32)
    got = arith.matmul(a, b, "fp32", acc="fp32")  # default order: blas
    assert got.dtype == np.float32 and (got == a @ b).all()
    exact = np.array([[sum(Fraction(float(a[i, k])) * Fraction(float(b[k, j])) for k in range(K))
                       for j in range(8)] for i in range(16)], dtype=object)  # fmt: skip
    gamma = (K + 1) * 2.0**-24 / (1 - (K + 1) * 2.0**-24)
    bound = gamma * (np.abs(a).astype(np.float64) @ np.abs(b))
    err = np.abs((got.astype(object) - exact).astype(np.float64))
    assert (err <= bound).all()


def test_blas_order_refused_where_it_is_not_fp32_accumulate():
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="acc='fp32'"):
        arith.matmul(a, a, "fp16", acc="fp16", order="blas")
    with pytest.raises(ValueError, match="nearest even"):
        arith.matmul(a, a, "fp16", acc="fp32", order="blas", rounding="stochastic")
    with pytest.raises(ValueError, match="fit in float32"):
        arith.matmul(a, a, fpsim.Format(9, 10), acc="fp32", order="blas")
    # the default falls back to the exact sequential kernel there
    assert arith.matmul(a, a, fpsim.Format(9, 10), acc="fp32").tolist() == [[2.0, 2.0]] * 2
    assert arith.matmul(a, a, "fp16", acc="fp16").tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert arith.matmul(a, a, "fp16", acc="fp64").tolist() == [[2.0, 2.0], [2.0, 2.0]]


# ---- input checks, containers, errors -------------------------------------------------------------
def test_inputs_must_be_format_values():
    with pytest.raises(ValueError, match=r"not fp16 values, e\.g\. 0\.1"):
        arith.add(1.0, 0.1, "fp16")
    with pytest.raises(ValueError, match="round_inputs=True"):
        arith.matmul(np.full((2, 2), 0.1), np.ones((2, 2)), "bf16")
    with pytest.raises(ValueError, match="not fp8_e4m3 values"):
        arith.add(np.inf, 1.0, "fp8_e4m3")  # no infinity in a finite-only format
    with pytest.raises(ValueError, match="index"):
        arith.sum(np.array([1.0, 2.0, 1e-9]), "fp16")
    # a Python scalar must be checked before it is cast to a float32 container
    with pytest.raises(ValueError, match="not fp16 values"):
        arith.add(np.ones(2, np.float32), 1.0000000001, "fp16")
    with pytest.raises(ValueError, match="not bf16 values"):
        arith.mul(np.ones(3, np.float32), np.float32(1.01), "bf16")
    with pytest.raises(ValueError, match="not fp16 values"):
        arith.fma(
            np.ones(3, np.float32), np.ones(3, np.float32), np.full(3, 0.1, np.float32), "fp16"
        )
    assert math.isnan(arith.add(np.nan, 1.0, "fp16"))  # NaN is fine
    assert arith.add(np.inf, 1.0, "fp16") == np.inf
    assert arith.add(0.1, 0.2, "fp16", round_inputs=True) == fpsim.round_to(
        fpsim.round_to(0.1, "fp16") + fpsim.round_to(0.2, "fp16"), "fp16"
    )


def test_unsupported_formats_and_arguments():
    with pytest.raises(ValueError, match="p <= 25"):
        arith.mul(1.0, 1.0, "fp64")
    with pytest.raises(ValueError, match="p <= 25"):
        arith.sqrt(2.0, fpsim.Format(8, 30))
    with pytest.raises(ValueError, match="normal range"):
        arith.div(1.0, 2.0, fpsim.Format(10, 5))
    with pytest.raises(ValueError, match="at most 51 bits"):
        arith.add(1.0, 1.0, fpsim.Format(11, 51))
    with pytest.raises(ValueError, match="unknown format"):
        arith.add(1.0, 1.0, "fp17")
    with pytest.raises(ValueError, match="unknown rounding"):
        arith.add(1.0, 1.0, "fp16", rounding="odd")
    with pytest.raises(ValueError, match="unknown order"):
        arith.sum([1.0], "fp16", order="random")
    with pytest.raises(ValueError, match="products"):
        arith.matmul(np.ones((1, 1)), np.ones((1, 1)), "fp16", products="fused")
    with pytest.raises(ValueError, match="accumulation in fp64x|at most 51 bits"):
        arith.sum([1.0], "fp16", acc=fpsim.Format(11, 51))


def test_containers_and_scalars():
    x32 = np.array([1.0, 2.0], np.float32)
    assert arith.add(x32, 1.0, "fp16").dtype == np.float32  # Python scalars do not vote
    assert arith.add(x32, np.ones(2), "fp16").dtype == np.float64
    assert arith.add(x32, x32, "fp64").dtype == np.float64  # fp64 does not fit in float32
    assert type(arith.add(1.0, 2.0, "fp16")) is float
    r = arith.add(np.float32(1.0), np.float32(2.0), "fp16")
    assert isinstance(r, np.float32) and r == 3.0
    assert arith.mul(np.ones((2, 1)), np.ones(3), "bf16").shape == (2, 3)
    assert arith.add(np.zeros((0, 3)), 1.0, "fp16").shape == (0, 3)


def test_neg_abs_and_signed_zeros():
    assert math.copysign(1, arith.neg(0.0, "fp16")) == -1
    assert arith.abs(np.array([-2.5, 3.0, -0.0]), "bf16").tolist() == [2.5, 3.0, 0.0]
    tiny = np.float32(2.0**-20)  # an fp16 subnormal
    assert math.copysign(1, arith.neg(tiny, "fp16", subnormals=False)) == -1
    assert arith.neg(tiny, "fp16", subnormals=False) == 0 and arith.neg(tiny, "fp16") == -tiny
    assert math.copysign(1, arith.sub(1.0, 1.0, "fp16")) == 1
    assert math.copysign(1, arith.sub(1.0, 1.0, "fp16", rounding="down")) == -1
    assert math.copysign(1, arith.add(-0.0, -0.0, "fp16")) == -1
    assert math.copysign(1, arith.mul(-0.0, 3.0, "fp16")) == -1
    assert math.copysign(1, arith.sqrt(-0.0, "fp16")) == -1
    assert math.copysign(1, arith.fma(-1.0, 0.0, 0.0, "fp16")) == 1
    assert math.copysign(1, arith.fma(-1.0, 0.0, -0.0, "fp16")) == -1


# ---- stochastic rounding: frequencies ------------------------------------------------------------
def test_stochastic_add_frequency_and_mean():
    n = 200_000
    a = np.ones(n)
    b = np.full(n, 2.0**-12 + 2.0**-14)  # 0.3125 of an fp16 ulp above 1
    r = arith.add(a, b, "fp16", rounding="stochastic", seed=99)
    p = float(np.mean(r > 1))
    assert abs(p - 0.3125) < 5 * math.sqrt(0.3125 * 0.6875 / n)
    assert set(np.unique(r)) == {1.0, 1 + 2.0**-10}


# ---- the scalar code, uncompiled, agrees with the kernels -------------------------------------------
def test_pure_python_scalar_code_equals_cpu_kernels():
    rng = np.random.default_rng(59)
    for fmt in ("fp16", "bf16", "fp8_e5m2", "fp32"):
        f = fpsim.get_format(fmt)
        params = f.record
        for op in OPS:
            args = operands(fmt, op, 60, seed=rng.integers(1 << 30))
            code = getattr(scalar_ops, f"OP_{op.upper()}")
            for mode in ALL_MODES:
                got = FN[op](*args, fmt, rounding=mode, seed=SEED)
                m = fpsim.ROUNDING_MODES[mode]
                full = list(args) + [args[0]] * (3 - len(args))
                py = [scalar_ops.arith_op(code, *(float(x[i]) for x in full), params, m, 1, 0,
                                          scalar.random62(SEED, i) if m == scalar.STOCHASTIC
                                          else 0)
                      for i in range(60)]  # fmt: skip
                assert_same(got, py, args, f"python {op} {fmt} {mode}")


# ---- teaching helpers -------------------------------------------------------------------------------
def test_explain_op_shows_exact_value_neighbours_decision_and_error():
    text = arith.explain_op(1.0, "+", 2.0**-11, "fp16")
    assert "exact result   1.00048828125" in text
    assert "1.0 < exact < 1.0009765625" in text
    assert "tie" in text and "even" in text
    assert "-0.5 ulp" in text
    text = arith.explain_op(1.0, "+", 3 * 2.0**-12, "fp16")
    assert "above the midpoint" in text and "1.0009765625   (error" in text
    text = arith.explain_op(2.0, "sqrt", None, "fp16", rounding="down")
    assert "irrational" in text and "toward -inf: 1.4140625" in text
    text = arith.explain_op(1.5, "fma", (1.5, -2.0), "fp8_e4m3")
    assert "0.25" in text
    assert "overflow" in arith.explain_op(60000.0, "*", 2.0, "fp16")
    assert "representable" in arith.explain_op(1.0, "/", 4.0, "bf16")
    with pytest.raises(ValueError, match="unknown op"):
        arith.explain_op(1.0, "pow", 2.0, "fp16")
    with pytest.raises(ValueError, match="not fp16 values"):
        arith.explain_op(0.1, "+", 1.0, "fp16")


@pytest.mark.parametrize("order", ["sequential", "pairwise"])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "stochastic"])
def test_trace_sum_steps_agree_with_sum_and_exact_arithmetic(order, mode):
    rng = np.random.default_rng(61)
    x = np.asarray(fpsim.round_to(rng.uniform(0, 8, 37), "fp16"))
    t = arith.trace_sum(x, "fp16", "fp16", order=order, rounding=mode, seed=SEED)
    assert t.result == arith.sum(x, "fp16", acc="fp16", order=order, rounding=mode, seed=SEED)
    assert len(t) == (len(x) if order == "sequential" else len(x) - 1)
    for s in t:
        left = Fraction(s.partial) if s.partial is not None else 0
        assert s.exact == left + Fraction(s.addend)
        assert s.error == Fraction(s.rounded) - s.exact
        if mode != "stochastic":
            assert s.rounded == round_rational(s.exact, "fp16", mode)
    assert "accumulator fp16" in str(t)


def test_trace_sum_lost_bits_and_swamping():
    t = arith.trace_sum([2048.0, 1.0, 3.0, 0.5], acc="fp16")
    assert [s.note for s in t] == ["exact", "swamped", "rounded", "swamped"]
    assert (t[1].lost_bits, t[1].addend_bits) == (1, 1)
    assert (t[2].lost_bits, t[2].addend_bits) == (1, 2)  # 3 = 11b: its 2^0 bit is below 2
    assert t.result == 2052.0
    long = arith.trace_sum(np.ones(100), acc="fp16").table(max_rows=12)
    assert "..." in long and len(long.splitlines()) < 20


# ---- the multi-threaded paths (large inputs) ------------------------------------------------------
def test_parallel_kernels_agree_with_oracles():
    from fpsim.kernels import arith_cpu

    rng = np.random.default_rng(67)
    n = arith_cpu.PARALLEL_MIN + 12345  # above the threshold: the thread-pool kernels run
    a16 = rng.standard_normal(n).astype(np.float16)
    b16 = (rng.standard_normal(n) * 8).astype(np.float16)
    got = arith.add(a16.astype(np.float32), b16.astype(np.float32), "fp16")
    assert_same(got, (a16 + b16).astype(np.float32), (a16, b16), "parallel add")
    bad = a16.astype(np.float32)
    bad[-3] = 0.1  # found by the parallel input check, in the last block
    with pytest.raises(ValueError, match=r"not fp16 values, e\.g\. 0\.1"):
        arith.mul(bad, bad, "fp16")
    # matmul: rows spread over threads, each reduced in the same fixed order
    A = format_values("fp16", 64 * 256, rng, -3, 3).reshape(64, 256)
    B = format_values("fp16", 256 * 64, rng, -3, 3).reshape(256, 64)
    for order in ("sequential", "pairwise"):
        got = arith.matmul(A, B, "fp16", acc="fp16", order=order, out_fmt="fp32")
        for i, j in [(0, 0), (17, 63), (63, 5)]:
            terms = [Fraction(A[i, k]) * Fraction(B[k, j]) for k in range(256)]
            assert got[i, j] == reduce_reference(terms, "fp16", "fp32", order)
        one_row = arith.matmul(A[40:41], B, "fp16", acc="fp16", order=order, out_fmt="fp32")
        assert (one_row[0] == got[40]).all()


def test_trace_sum_lost_bits_only_when_rounded():
    # 2047 + 1 = 2048 is exact in fp16 (nothing lost); 2048 + 1 = 2049 is a tie that rounds to
    # the even 2048, so the addend's one significant bit is lost (swamped)
    t = fpsim.trace_sum([2047.0, 1.0, 1.0], acc="fp16")
    assert [s.lost_bits for s in t] == [0, 0, 1]
    assert [s.rounded for s in t] == [2047.0, 2048.0, 2048.0]
    assert t[2].note == "swamped"
