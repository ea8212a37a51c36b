"""The fp32 histogram kernel (fpsim.kernels.histogram.histogram_fp32, the path count_bits /
add_bits / a watch take for float32 bits) against the general per-value path (slot_of and
count_past for every value) and against an exact reference (each value's binade and its
significand compared with every cut as fractions.Fraction), over fp32 bit patterns chosen to
sit on and next to every cut of every format's cut set, exact powers of two, zeros of both
signs, subnormals, inf and NaN, in arrays whose sizes straddle the kernel's groups of eight
and its buffer of 4096 unplaced values (hypothesis)."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpsim.kernels import histogram as kh
from fpsim.stats import RangeHistogram

CUT_SETS = [("fp16",), ("bf16",), ("fp8_e4m3",), ("fp8_e5m2",),
            ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"),
            ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp32", "tf32")]  # fmt: skip
SIZES = [1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4095, 4096, 4097, 8191, 8193, 9001]


def exact_slot(mag: int, h: RangeHistogram, first: int) -> int:
    """The table slot of an fp32 magnitude code from its exact value: binade b with 2^b <= v
    < 2^(b+1), column = the number of the histogram's cuts its significand passes (an exact
    power of two: the last column), zeros and inf/NaN in the last two slots."""
    ncols = len(h._cuts) + 2
    rows = 127 - first + 1
    if mag >= 0x7F800000:
        return rows * ncols + 1
    if mag == 0:
        return rows * ncols
    e, f = mag >> 23, mag & 0x7FFFFF
    v = Fraction(f if e == 0 else (1 << 23) + f, 1 << 23) * Fraction(2) ** (max(e, 1) - 127)
    b = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** b > v:
        b -= 1
    sig = v / Fraction(2) ** b  # in [1, 2)
    if sig == 1:
        return (b - first) * ncols + ncols - 1
    passed = sum(1 for c in h._cuts if (sig > c.c if c.strict else sig >= c.c))
    return (b - first) * ncols + passed


def general_table(values, counts, thr, lut, shift, first, nslots) -> np.ndarray:
    """The same table by slot_of / count_past, value by value (the general path)."""
    table = np.zeros(nslots, np.int64)
    ncols = thr.size + 2
    for mag, c in zip(values.tolist(), counts.tolist(), strict=True):
        s = kh.slot_of(mag, 8, 23, 127, first, ncols, nslots, lut, shift)
        if s < 0:
            s = -1 - s + kh.count_past(kh.fraction_of(mag, 23), thr)
        table[s] += c
    return table


@st.composite
def fp32_bits(draw):
    cuts = draw(st.sampled_from(CUT_SETS))
    h = RangeHistogram(cuts)
    thr = kh.thresholds_for(h._cuts, 23)
    near_cut = st.builds(lambda e, t, d: (e << 23) + min(max(int(t) + d, 0), (1 << 23) - 1),
                         st.integers(1, 254), st.sampled_from(thr.tolist()),
                         st.integers(-2, 2))  # fmt: skip
    in_cut_bucket = st.builds(lambda e, t, low: (e << 23) + (int(t) >> 16 << 16) + low,
                              st.integers(1, 254), st.sampled_from(thr.tolist()),
                              st.integers(0, 2**16 - 1))  # fmt: skip
    normal = st.one_of(
        st.builds(lambda e, f: (e << 23) | f, st.integers(1, 254), st.integers(0, 2**23 - 1)),
        near_cut, near_cut, near_cut,  # on and next to a cut
        in_cut_bucket, in_cut_bucket,  # anywhere among the values sharing its prefix entry
        st.builds(lambda e: e << 23, st.integers(1, 254)),  # powers of two
    )  # fmt: skip
    special = st.one_of(
        st.integers(0, 2**31 - 1),  # anything
        st.sampled_from([0, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF]),  # 0, inf, NaNs
        st.integers(1, 2**23 - 1),  # subnormals
        st.integers(0x7F800000, 0x7FFFFFFF),  # inf, NaN
    )  # fmt: skip
    # without specials most groups of eight take the fast path; with them, the careful one
    code = st.one_of(normal, special) if draw(st.booleans()) else normal
    pool = draw(st.lists(code, min_size=1, max_size=60))
    signs = draw(st.lists(st.booleans(), min_size=1, max_size=60))
    n = draw(st.sampled_from(SIZES))
    idx = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(idx)
    mags = np.array(pool, np.int64)[rng.integers(0, len(pool), n)]
    neg = np.array(signs)[rng.integers(0, len(signs), n)]
    bits = (mags | (neg.astype(np.int64) << 31)).astype(np.uint32).view(np.int32)
    return cuts, h, bits


@settings(max_examples=60, deadline=None)
@given(fp32_bits())
def test_fp32_kernel_equals_the_general_path_and_the_exact_slots(case):
    cuts, h, bits = case
    f, thr, lut, shift, first, rows, nslots, slots, k0, prefix, pshift = h._plan("fp32")
    assert pshift == kh.FP32_SHIFT and prefix.size == 1 << 15  # the fp32 path applies
    table = np.zeros(nslots, np.int64)
    top = kh.histogram_fp32(bits, f.bias, first, thr, lut, shift, prefix, table)
    mags = bits.view(np.uint32).astype(np.int64) & 0x7FFFFFFF
    values, counts = np.unique(mags, return_counts=True)
    exact = np.zeros(nslots, np.int64)
    for m, c in zip(values.tolist(), counts.tolist(), strict=True):
        exact[exact_slot(m, h, first)] += c
    assert np.array_equal(table, exact)
    assert np.array_equal(table, general_table(values, counts, thr, lut, shift, first, nslots))
    finite = values[values < 0x7F800000]
    assert max(top, 0) == (int(finite.max()) if finite.size else 0)
    # count_bits (histogram_bits, which hands fp32 to histogram_fp32) and int32 / uint32 /
    # int64 integer views of the same bits
    for view in (bits, bits.view(np.uint32), bits.view(np.uint32).astype(np.int64)):
        c = h.count_bits(view, "fp32")
        assert np.array_equal(c.table, exact)
        fin = bits.view(np.float32)[np.isfinite(bits.view(np.float32))]
        assert c.amax == (float(np.abs(fin.astype(np.float64)).max()) if fin.size else 0.0)


@pytest.mark.parametrize("n", [8, 4096 * 8 + 24])  # every group of eight has an unplaced value
def test_fp32_groups_with_unplaced_values(n):
    """Subnormals (prefix entry -1) in every group of eight, beyond the 4096-value buffer:
    the careful path places the rest of each group, the scan of all values the subnormals."""
    rng = np.random.default_rng(n)
    mags = (rng.integers(1, 254, n) << 23) | rng.integers(0, 2**23, n)
    mags[::8] = rng.integers(1, 2**23, mags[::8].size)  # a subnormal in each group
    bits = mags.astype(np.uint32).view(np.int32)
    h = RangeHistogram(CUT_SETS[4])
    f, thr, lut, shift, first, rows, nslots, *_ = h._plan("fp32")
    values, counts = np.unique(mags, return_counts=True)
    exact = np.zeros(nslots, np.int64)
    for m, c in zip(values.tolist(), counts.tolist(), strict=True):
        exact[exact_slot(m, h, first)] += c
    assert np.array_equal(h.count_bits(bits, "fp32").table, exact)


@pytest.mark.parametrize("cuts", CUT_SETS)
def test_fp32_every_step_at_every_place_in_a_group(cuts):
    """Every fraction bucket whose prefix entry steps (a cut, or fraction 0 -> 1, inside it),
    with the values either side of the step and at the bucket's ends, in several binades,
    each at every one of the eight places of the unrolled group."""
    h = RangeHistogram(cuts)
    f, thr, lut, shift, first, rows, nslots, slots, k0, prefix, pshift = h._plan("fp32")
    entries = prefix[(127 << 7) : (128 << 7)]  # one binade's buckets (the same in every one)
    lows = []
    for fp, entry in enumerate(entries.tolist()):
        t = entry >> 40
        for low in {0, 1, 0x7FFF, 0x8000, 0xFFFF, t - 1, t, t + 1}:
            if entry >= 0 and 0 <= low <= 0xFFFF:
                lows.append((fp << 16) | low)
    mags = np.array([(e << 23) | fl for e in (1, 100, 127, 150, 254) for fl in lows], np.int64)
    assert mags.size >= 8 * 128
    mags = mags[: mags.size - mags.size % 8]
    bits = np.concatenate([np.roll(mags, k) for k in range(8)]).astype(np.uint32).view(np.int32)
    values, counts = np.unique(mags, return_counts=True)
    exact = np.zeros(nslots, np.int64)
    for m, c in zip(values.tolist(), counts.tolist(), strict=True):
        exact[exact_slot(m, h, first)] += 8 * c
    table = np.zeros(nslots, np.int64)
    top = kh.histogram_fp32(bits, f.bias, first, thr, lut, shift, prefix, table)
    assert np.array_equal(table, exact)
    assert top == values.max()
