"""RangeHistogram zone counts against direct counts on the data, and suggest_scale."""

import ml_dtypes
import numpy as np
import pytest

import fpsim
from fpsim.stats import RangeHistogram, suggest_scale

FINFO = {
    "fp16": np.finfo(np.float16),
    "bf16": ml_dtypes.finfo(ml_dtypes.bfloat16),
    "fp8_e4m3": ml_dtypes.finfo(ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": ml_dtypes.finfo(ml_dtypes.float8_e5m2),
}


def direct_zones(x, name, scale, subnormals=True):
    """Zone counts straight from the definitions, with limits from numpy/ml_dtypes finfo."""
    fi = FINFO[name]
    xs = np.abs(x.astype(np.float64)) * scale
    tiny, normal, mx = float(fi.smallest_subnormal), float(fi.smallest_normal), float(fi.max)
    # the overflow threshold: max plus half the spacing of the top binade
    thr = mx + float(fi.eps) * 2.0 ** int(np.floor(np.log2(mx))) / 2
    # the subnormal/normal edge: from normal - tiny/2 up, values round up to the smallest normal
    # (the tie too: normal is the even neighbour), also with subnormals=False, which flushes
    # only what rounding left below normal
    edge = normal - tiny / 2
    fn = name == "fp8_e4m3"
    finite = np.isfinite(xs)
    nz = finite & (xs != 0)
    under = nz & ((xs < edge) if not subnormals else (xs <= tiny / 2))
    over = nz & ((xs > thr) if fn else (xs >= thr))
    sub = nz & ~under & (xs < edge)
    return {
        "zero": int(np.sum(finite & (xs == 0))),
        "underflow": int(under.sum()),
        "subnormal": int(sub.sum()),
        "normal": int((nz & ~under & ~sub & ~over).sum()),
        "overflow": int(over.sum()),
        "nonfinite": int((~finite).sum()),
    }


def gradient_like(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, 1.0], n) * np.exp2(rng.normal(-18, 9, n))
    x[rng.random(n) < 0.2] = 0.0
    x[:5] = [np.inf, -np.inf, np.nan, 2.0**-25, 65520.0]  # a tie at each end
    return x.astype(np.float32)


@pytest.mark.parametrize("name", list(FINFO))
@pytest.mark.parametrize("subnormals", [True, False])
def test_zones_match_direct_count(name, subnormals):
    x = gradient_like(200_000, 1)
    h = RangeHistogram()
    h.add(x)
    for k in [-8, 0, 3, 8, 15, 24]:
        assert h.zones(name, 2.0**k, subnormals) == direct_zones(x, name, 2.0**k, subnormals), k


@pytest.mark.parametrize("name", list(FINFO))
def test_underflow_and_overflow_agree_with_rounding(name):
    x = gradient_like(100_000, 2)
    h = RangeHistogram()
    h.add(x)
    for k in [0, 8, 16]:
        xs = x.astype(np.float64) * 2.0**k
        r = fpsim.round_to(xs, name)
        finite_nz = np.isfinite(xs) & (xs != 0)
        z = h.zones(name, 2.0**k)
        assert z["underflow"] == int(np.sum(finite_nz & (r == 0)))
        assert z["overflow"] == int(np.sum(finite_nz & ~np.isfinite(r)))


@pytest.mark.parametrize("name", list(FINFO))
@pytest.mark.parametrize("subnormals", [True, False])
def test_every_zone_agrees_with_rounding(name, subnormals):
    """Each zone is what round_to makes of the scaled value, the subnormal/normal edge included:
    values from min_normal - tiny/2 up round *up* to min_normal (also without subnormals)."""
    fi = FINFO[name]
    normal, tiny = float(fi.smallest_normal), float(fi.smallest_subnormal)
    edge = [normal - tiny / 2, np.nextafter(normal - tiny / 2, 0), normal - tiny, tiny / 2]
    x = np.concatenate([gradient_like(100_000, 4), np.array(edge, np.float32)])
    h = RangeHistogram()
    h.add(x)
    for k in [0, -4, 8, 16]:
        xs = x.astype(np.float64) * 2.0**k
        r = np.abs(fpsim.round_to(xs, name, subnormals=subnormals))
        fin = np.isfinite(xs)
        nz = fin & (xs != 0)
        want = {
            "zero": int(np.sum(fin & (xs == 0))),
            "underflow": int(np.sum(nz & (r == 0))),
            "subnormal": int(np.sum(nz & (r > 0) & (r < normal))),
            "normal": int(np.sum(nz & np.isfinite(r) & (r >= normal))),
            "overflow": int(np.sum(nz & ~np.isfinite(r))),
            "nonfinite": int(np.sum(~fin)),
        }
        assert h.zones(name, 2.0**k, subnormals) == want, k


def test_streaming_equals_one_shot():
    x = gradient_like(50_000, 3)
    one, many = RangeHistogram(), RangeHistogram()
    one.add(x)
    for chunk in np.array_split(x, 17):
        many.add(chunk)
    for name in FINFO:
        assert one.zones(name, 8.0) == many.zones(name, 8.0)
    assert (one.bins()[1] == many.bins()[1]).all()
    merged = RangeHistogram()
    merged.merge(one)
    merged.merge(many)
    assert merged.count == 2 * x.size


def test_bins_are_binary_exponents():
    h = RangeHistogram()
    h.add([0.75, 1.0, 1.5, 2.0, -3.0, 2.0**-30, 0.0])
    e, c = h.bins()
    got = dict(zip(e.tolist(), c.tolist(), strict=True))
    assert got[-1] == 1 and got[0] == 2 and got[1] == 2 and got[-30] == 1
    assert sum(c) == 6 and h.zero == 1 and h.count == 7


def test_fractions_and_lost_fraction():
    h = RangeHistogram()
    h.add([0.0, 2.0**-30, 2.0**-10, 1.0])
    f = h.fractions("fp16")
    assert f["zero"] == 0.25 and f["underflow"] == 0.25 and sum(f.values()) == 1.0
    assert h.lost_fraction("fp16") == 1 / 3
    assert h.lost_fraction("fp16", scale=2.0**8) == 0.0


def test_errors():
    h = RangeHistogram(formats=("fp16",))
    h.add([1.0])
    with pytest.raises(ValueError, match="power of two"):
        h.zones("fp16", scale=1000.0)
    with pytest.raises(ValueError, match="formats="):
        h.zones("bf16")
    with pytest.raises(ValueError, match="positive"):
        h.zones("fp16", scale=-2.0)


def test_suggest_scale_constructed():
    h = RangeHistogram()
    # smallest 2^-30 needs k >= 6 to reach fp16's subnormals; largest 2^10 overflows at k >= 6
    h.add([2.0**-30, 2.0**10])
    s = suggest_scale(h, "fp16")
    # 2^10 * 2^5 = 32768 fits, 2^10 * 2^6 = 65536 overflows: k <= 5. Then 2^-30 * 2^5 = 2^-25 is
    # a tie that rounds to zero: one value is lost at every allowed k, down to k = -34 where
    # 2^10 * 2^-35 = 2^-25 would be lost too.
    assert (s.lo, s.hi, s.underflow, s.underflow_fraction) == (-34, 5, 1, 0.5)
    h2 = RangeHistogram()
    h2.add([2.0**-30, 2.0**-20, 1.0])
    s2 = suggest_scale(h2, "fp16")
    assert (s2.lo, s2.hi, s2.underflow) == (6, 15, 0) and s2.scales == (64.0, 32768.0)
    # bf16 has fp32's range: no scale needed, a wide range works
    s3 = suggest_scale(h2, "bf16")
    assert s3.underflow == 0 and s3.lo <= 0 <= s3.hi
    h3 = RangeHistogram()
    h3.add([1e300])
    with pytest.raises(ValueError, match="overflows"):
        suggest_scale(h3, "fp16")
