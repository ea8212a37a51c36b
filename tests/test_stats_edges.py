"""RangeHistogram zones at their edges, against an independent oracle.

The oracle is ``oracle.ref_round``: rounding by the definition, in exact rational arithmetic
(``fractions.Fraction``), never fpsim's kernels nor its stats. A value's zone is read off what
ref_round makes of the exact ``x × 2^k``: ``zero`` (x == 0), ``underflow`` (rounds to ±0),
``subnormal`` (rounds to a subnormal), ``normal``, ``overflow`` (inf, or NaN in a finite-only
format), ``nonfinite`` (inf or NaN already).
"""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import ref_round

import fpsim
from fpsim.formats import Format
from fpsim.stats import ZONES, RangeHistogram, suggest_scale

# the small formats: every style, m = 1, and a bias other than the default
SMALL = [Format(3, 2), Format(4, 3), Format(2, 1), Format(3, 1, style="fn"), Format(4, 2, bias=3),
         Format(5, 4, style="fn", bias=20)]  # fmt: skip
FORMATS = [fpsim.get_format(n) for n in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")] + SMALL


def oracle_zone(x, k: int, fmt, subnormals: bool) -> str:
    """The zone of the exact value x × 2^k (x a float or an int), by ref_round."""
    f = fpsim.get_format(fmt)
    if isinstance(x, float) and not math.isfinite(x):
        return "nonfinite"
    if x == 0:
        return "zero"
    s = Fraction(x) * Fraction(2) ** k
    # ref_round takes a float. x × 2^k is one unless it left float64's range; the formats here
    # lie far inside that range, so such a value is plainly lost or plainly too big.
    assert 2.0**-1000 < f.smallest_subnormal and f.max < 2.0**1000
    if abs(s) >= 2**1000:
        return "overflow"
    if abs(s) < Fraction(2) ** -1000:
        return "underflow"
    # a float when exact (ref_round's argument), else the Fraction itself (big integers),
    # which ref_round handles by the same exact steps
    xs = float(s) if Fraction(float(s)) == s else s
    r = ref_round(xs, f, "nearest_even", subnormals=subnormals)
    if math.isnan(r) or math.isinf(r):
        return "overflow"
    if r == 0:
        return "underflow"
    return "subnormal" if abs(r) < f.min_normal else "normal"


def oracle_zones(values, k: int, fmt, subnormals: bool) -> dict:
    z = dict.fromkeys(ZONES, 0)
    for v in values:
        z[oracle_zone(v, k, fmt, subnormals)] += 1
    return z


def edges(f: Format) -> list[Fraction]:
    """The values where round-to-nearest-even changes zone, and the limits next to them."""
    q = Fraction(2) ** (f.emin - f.man_bits)  # the smallest subnormal, the subnormal spacing
    top = Fraction(2) ** (f.emax - f.man_bits)  # ulp(max)
    mx = Fraction(f.max)
    return [q / 2, q, 3 * q / 2, Fraction(f.min_normal) - q / 2, Fraction(f.min_normal) - q,
            Fraction(f.min_normal), mx, mx + top / 2, mx + top, Fraction(2) ** (f.emax + 1)]  # fmt: skip


def near_edges(f: Format, k: int, dtype, steps: int = 2) -> np.ndarray:
    """Each edge of f divided by 2^k, in dtype, and its neighbours up to ``steps`` away."""
    out = []
    for e in edges(f):
        with np.errstate(over="ignore"):
            v = dtype(float(e * Fraction(2) ** -k))
        lo = hi = v
        out.append(v)
        for _ in range(steps):
            lo, hi = np.nextafter(lo, dtype(0)), np.nextafter(hi, dtype(np.inf))
            out += [lo, hi]
    return np.array(out, dtype)


def zones_of(x, fmt, k=0, subnormals=True, formats=None) -> dict:
    h = RangeHistogram(formats=formats or (fmt,))
    h.add(x)
    return h.zones(fmt, 2.0**k, subnormals)


# ---- the case ---------------------------------------------------------------------------
def test_just_below_min_normal_without_subnormals_is_normal():
    """round_to flushes *after* rounding: a value in [min_normal - min_sub/2, min_normal) rounds
    up to min_normal and is kept, with or without subnormals."""
    f = fpsim.get_format("fp16")
    v = f.min_normal - f.smallest_subnormal / 2  # 2^-14 - 2^-25, a tie: to the even 2^-14
    below = np.nextafter(v, 0.0)
    assert fpsim.round_to(v, f, subnormals=False) == f.min_normal  # the behaviour to match
    assert fpsim.round_to(below, f, subnormals=False) == 0.0
    assert fpsim.round_to(below, f) == f.min_normal - f.smallest_subnormal
    for subnormals in (False, True):
        z = zones_of(np.array([v, np.nextafter(v, 1.0)]), "fp16", subnormals=subnormals)
        assert z["normal"] == 2 and z["underflow"] == z["subnormal"] == 0, (subnormals, z)
    assert zones_of(np.array([below]), "fp16", subnormals=False)["underflow"] == 1
    assert zones_of(np.array([below]), "fp16", subnormals=True)["subnormal"] == 1
    # and the same after a scale: v × 2^-10 is moved back up by 2^10
    z = zones_of(np.array([v * 2.0**-10]), "fp16", k=10, subnormals=False)
    assert z["normal"] == 1


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
@pytest.mark.parametrize("subnormals", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_edge_and_its_neighbours(fmt, subnormals, dtype):
    """Every zone edge of every format, its float neighbours, both signs, under three scales."""
    for k in (0, 7, -5):
        x = near_edges(fmt, k, dtype)
        x = np.concatenate([x, -x, [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(dtype)
        want = oracle_zones([float(v) for v in x], k, fmt, subnormals)
        assert zones_of(x, fmt, k, subnormals) == want, (k, want)


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_zones_match_round_to(fmt):
    """The same, against fpsim.round_to of the scaled float64 values (its documented rules)."""
    for subnormals in (True, False):
        for k in (0, 3, -9):
            x = near_edges(fmt, k, np.float64, steps=3)
            xs = x * 2.0**k  # exact here: nowhere near float64's limits
            r = fpsim.round_to(xs, fmt, subnormals=subnormals)
            want = {
                "zero": 0,
                "underflow": int(np.sum(r == 0)),
                "subnormal": int(np.sum((r != 0) & (np.abs(r) < fmt.min_normal))),
                "normal": int(np.sum(np.isfinite(r) & (np.abs(r) >= fmt.min_normal))),
                "overflow": int(np.sum(~np.isfinite(r))),
                "nonfinite": 0,
            }
            assert zones_of(x, fmt, k, subnormals) == want, (subnormals, k)


# ---- a property test: random data crowded around every edge, any format and scale --------------
@st.composite
def edge_data(draw):
    f = draw(st.sampled_from(FORMATS))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    k = draw(st.integers(-40, 40))
    width = 32 if dtype is np.float32 else 64
    near = near_edges(f, k, dtype, steps=3)
    picks = draw(st.lists(st.sampled_from(near.tolist()), max_size=60))
    wild = draw(st.lists(st.floats(width=width), max_size=15))
    signs = draw(st.lists(st.booleans(), min_size=len(picks), max_size=len(picks)))
    picks = [-v if s else v for v, s in zip(picks, signs, strict=True)]
    x = np.array(picks + wild, dtype=dtype)
    return f, x, k, draw(st.booleans())


@settings(max_examples=500, deadline=None)
@given(edge_data())
def test_zones_equal_exact_rounding(case):
    """Random float32/float64 data crowded around a format's edges (as scaled by 2^-k), plus
    any floats at all: the zones at 2^k and its neighbours are the oracle's, with and without
    subnormals, for a histogram holding every format at once (the cuts shared among them)."""
    f, x, k, subnormals = case
    h = RangeHistogram(formats=FORMATS)
    h.add(x)
    values = [float(v) for v in x]
    for kk in (k, k + 1, k - 1, 0):
        assert h.zones(f, 2.0**kk, subnormals) == oracle_zones(values, kk, f, subnormals), kk
    assert h.count == x.size


# ---- integers: exact, even past 2^53 --------------------------------------------------------------
BIG = [Format(2, 1, bias=-60), Format(2, 52, bias=-52), Format(3, 52, style="fn", bias=-56),
       Format(4, 12, bias=-48)]  # fmt: skip


@pytest.mark.parametrize("fmt", BIG, ids=str)
@pytest.mark.parametrize("subnormals", [True, False])
def test_integers_are_exact(fmt, subnormals):
    """int64 / uint64 values are not rounded to float64 on the way in."""
    vals = set()
    for e in edges(fmt):
        if e.denominator == 1 and e < 2**64:
            vals |= {int(e) + d for d in range(-3, 4) if 0 < int(e) + d < 2**64}
    vals |= {2**63 - 1, 2**63, 2**64 - 1, 2**53 + 1, 1, 0}
    u = np.array(sorted(vals), np.uint64)
    assert zones_of(u, fmt, 0, subnormals) == oracle_zones([int(v) for v in u], 0, fmt, subnormals)
    s = np.array(sorted(v for v in vals if v <= 2**63), dtype=object)
    s = -s  # down to -2^63
    i = s.astype(np.int64)
    want = oracle_zones([int(v) for v in s], 0, fmt, subnormals)
    assert zones_of(i, fmt, 0, subnormals) == want
    assert zones_of(i.astype(">i8"), fmt, 0, subnormals) == want
    for k in (-3, 2):
        want = oracle_zones([int(v) for v in u], k, fmt, subnormals)
        assert zones_of(u, fmt, k, subnormals) == want, k


def test_int64_min_and_small_integer_types():
    h = RangeHistogram(formats=("fp16",))
    h.add(np.array([-(2**63)], np.int64))
    e, c = h.bins()
    assert e.tolist() == [63] and c.tolist() == [1] and h.exact_powers[63 + 1074] == 1
    for dt in (np.int8, np.uint16, np.int32, np.bool_, ml_dtypes.int4):
        x = np.array([0, 1, 3, 7], dt) if dt is not np.bool_ else np.array([0, 1, 1, 1], dt)
        assert zones_of(x, "fp16")["normal"] == 3, dt


# ---- input types ----------------------------------------------------------------------------------
def test_big_endian_and_narrow_floats_keep_their_values():
    x = np.array([2.0**-25, 2.0**-25 + 2.0**-40, 65519.0, 65520.0, -0.0, np.inf], np.float32)
    want = zones_of(x, "fp16")
    assert want == {"zero": 1, "underflow": 1, "subnormal": 1, "normal": 1, "overflow": 1,
                    "nonfinite": 1}  # fmt: skip
    for dt in (">f4", ">f8", "<f4", "=f8"):
        assert zones_of(x.astype(dt), "fp16") == want, dt
    h = RangeHistogram()
    h.add(x.astype(">f4"))
    e, c = h.bins()
    assert e.tolist() == list(range(-25, 16)) and (c[0], c[-1], c.sum()) == (2, 2, 4)
    narrow = (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
    for dt in (np.float16, *narrow, ml_dtypes.float4_e2m1fn):
        y = np.array([2.0**-14, 2.0**-24, 2.0**-26, 3.0, 448.0], dt)
        want = oracle_zones([float(v) for v in y], 0, "fp16", True)
        assert zones_of(y, "fp16") == want, dt
    y = np.array([2.0**-25, 2.0**-24, 65504.0], ">f2")
    assert zones_of(y, "fp16") == oracle_zones([float(v) for v in y], 0, "fp16", True)


def test_masked_arrays_count_only_unmasked_values():
    x = np.ma.masked_array([1.0, np.inf, 2.0**-30, 0.0], mask=[False, True, False, True])
    z = zones_of(x, "fp16")
    assert z == {"zero": 0, "underflow": 1, "subnormal": 0, "normal": 1, "overflow": 0,
                 "nonfinite": 0}  # fmt: skip
    h = RangeHistogram()
    h.add(np.ma.masked_array([1.0, 2.0]))  # no mask: every value
    h.add(np.ma.masked)
    assert h.count == 2


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_matrix_and_other_containers_are_plain_arrays():
    m = np.matrix([[1.0, 2.0**-30], [np.nan, 0.0]])
    z = zones_of(m, "fp16")
    assert (z["normal"], z["underflow"], z["nonfinite"], z["zero"]) == (1, 1, 1, 1)
    assert zones_of([[1.0, 2.0**-30], [np.nan, 0.0]], "fp16") == z
    assert zones_of(3.0, "fp16")["normal"] == 1
    assert zones_of(fpsim.tensor([1.0, 2.0**-30]), "fp16")["underflow"] == 1


@pytest.mark.parametrize(
    "x, name",
    [
        (np.array([1 + 2j]), "complex128"),
        (np.array([1.0, 2.0], dtype=object), "object"),
        ([1.0, None], "object"),
        (np.array(["1.0"]), "<U3"),
        (np.array([(1.0, 2.0)], dtype=[("a", "f4"), ("b", "f4")]), "('a', '<f4')"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64[D]"),
        (np.array([1.0], dtype=np.longdouble), str(np.dtype(np.longdouble))),
        ([2**70], "object"),
        (np.array([1 + 2j]).astype(ml_dtypes.complex32), "complex32"),
    ],
)
def test_non_real_input_is_a_type_error(x, name):
    h = RangeHistogram()
    with pytest.raises(TypeError, match="dtype") as info:
        h.add(x)
    assert name in str(info.value)
    if "complex" in name:
        assert "abs(x)" in str(info.value)
    assert h.count == 0


# ---- formats ----------------------------------------------------------------------------------
def test_a_format_must_be_the_one_registered_under_its_name():
    h = RangeHistogram(formats=(Format(4, 3, name="mine"),))
    h.add([1.0])
    with pytest.raises(ValueError, match="mine"):
        h.zones(Format(5, 2, name="mine"))
    with pytest.raises(ValueError, match="mine"):
        RangeHistogram(formats=(Format(4, 3, name="mine"), Format(5, 2, name="mine")))


def test_lost_fraction_and_suggest_scale_follow_subnormals():
    f = fpsim.get_format("fp16")
    h = RangeHistogram(formats=("fp16",))
    below = np.nextafter(f.min_normal - f.smallest_subnormal / 2, 0.0)
    h.add([f.min_normal - f.smallest_subnormal / 2, below, 2.0**-20, 1.0])
    assert h.lost_fraction("fp16") == 0.0
    assert h.lost_fraction("fp16", subnormals=False) == 0.5
    # without subnormals 2^-20 needs 2^6 to reach 2^-14, and 1.0 × 2^15 = 32768 still fits
    s = suggest_scale(h, "fp16", subnormals=False)
    assert (s.lo, s.hi, s.underflow) == (6, 15, 0)
