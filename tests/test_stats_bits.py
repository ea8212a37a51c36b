"""RangeHistogram from bit patterns (count_bits / add_bits / add_counts / zones_of, the fast
path of add for float arrays) against the general path through float64 values, and the zone
counts against an independent per-value classification with ml_dtypes / numpy casts, over
random bit patterns of every width (hypothesis), specials included."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import zones_by_cast

from fpsim.stats import RangeHistogram

FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp32")
LAYOUTS = {  # format name -> (float dtype, same-width integer dtype)
    "fp16": (np.float16, np.uint16),
    "bf16": (ml_dtypes.bfloat16, np.uint16),
    "fp32": (np.float32, np.uint32),
    "fp64": (np.float64, np.uint64),
    "fp8_e5m2": (ml_dtypes.float8_e5m2, np.uint8),
}


def general(values, formats=FORMATS):
    """The same values through the general (float64, masked-array) path of add()."""
    h = RangeHistogram(formats)
    v = np.asarray(values).astype(np.float64)
    h.add(np.ma.masked_array(v, mask=np.zeros(v.size, bool)))
    return h


def same(a: RangeHistogram, b: RangeHistogram) -> bool:
    return (np.array_equal(a.counts, b.counts) and np.array_equal(a._past, b._past)
            and np.array_equal(a.exact_powers, b.exact_powers) and a.zero == b.zero
            and a.nonfinite == b.nonfinite)  # fmt: skip


def codes(layout, draw_ints):
    fdt, idt = LAYOUTS[layout]
    bits = np.array(draw_ints, dtype=np.uint64).astype(idt)
    return bits, bits.view(fdt)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_count_bits_equals_the_general_path(layout, data):
    width = np.dtype(LAYOUTS[layout][1]).itemsize * 8
    ints = data.draw(st.lists(st.integers(0, 2**width - 1), min_size=1, max_size=300))
    bits, vals = codes(layout, ints)
    h = RangeHistogram(FORMATS)
    amax = h.add_bits(bits, layout)
    assert same(h, general(vals))
    fin = np.abs(vals[np.isfinite(vals)].astype(np.float64))
    assert amax == (fin.max() if fin.size else 0.0)
    # the fast path of add() for float arrays (fp8_e5m2 takes the general one)
    h2 = RangeHistogram(FORMATS)
    h2.add(vals)
    assert same(h2, general(vals))


@pytest.mark.parametrize("layout", ["fp16", "bf16", "fp32"])  # (fp64 x 2^k can leave float64)
@settings(max_examples=25, deadline=None)
@given(data=st.data(), k=st.integers(-40, 40))
def test_add_counts_with_a_scale_and_zones_of(layout, data, k):
    width = np.dtype(LAYOUTS[layout][1]).itemsize * 8
    ints = data.draw(st.lists(st.integers(0, 2**width - 1), min_size=1, max_size=200))
    bits, vals = codes(layout, ints)
    h = RangeHistogram(FORMATS)
    c = h.count_bits(bits, layout)
    h.add_counts(c, scale=2.0**k)
    assert same(h, general(vals.astype(np.float64) * 2.0**k))
    ref = general(vals)
    for f in FORMATS:
        assert h.zones_of(c, f, 2.0**k) == ref.zones(f, 2.0**k)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=400))
def test_zones_from_bits_equal_ml_dtypes_casts(ints):
    bits, vals = codes("fp32", ints)
    h = RangeHistogram(FORMATS)
    h.add_bits(bits, "fp32")
    for f in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
        assert h.zones(f) == zones_by_cast(vals, f)


def test_boundary_values_and_refusals():
    # the values either side of each fp16 zone boundary, as float32
    edges = np.array([2.0**-25, np.nextafter(2.0**-25, 1), 2.0**-14 - 2.0**-25,
                      np.nextafter(2.0**-14 - 2.0**-25, 0), 65519.0, 65520.0, -65520.0],
                     np.float32)  # fmt: skip
    h = RangeHistogram(("fp16",))
    assert h.add_bits(edges.view(np.int32), "fp32") == 65520.0
    assert h.zones("fp16") == zones_by_cast(edges, "fp16")
    with pytest.raises(ValueError, match="IEEE-style"):
        h.add_bits(np.zeros(3, np.uint8), "fp8_e4m3")
    with pytest.raises(TypeError, match="integers"):
        h.add_bits(np.zeros(3, np.float32), "fp32")
    tiny = np.array([1], np.uint64)  # float64's smallest subnormal: halving it leaves the range
    with pytest.raises(ValueError, match="out of float64's range"):
        h.add_counts(h.count_bits(tiny, "fp64"), scale=0.5)
    other = RangeHistogram(("bf16",))
    with pytest.raises(ValueError, match="other formats"):
        other.add_counts(h.count_bits(edges.view(np.int32), "fp32"))


@pytest.mark.parametrize("n", [9000, 40000])  # below and above the four-table threshold
def test_many_values_off_the_fast_path(n):
    """Subnormals, zeros, inf/NaN and values in a bucket holding two thresholds, in numbers
    beyond the kernel's buffer for them (4096): the same counts as the general path."""
    rng = np.random.default_rng(n)
    kinds = rng.integers(0, 5, n)
    mag = np.where(kinds == 0, rng.integers(1, 2**23, n),  # subnormal
          np.where(kinds == 1, 0,  # zero
          np.where(kinds == 2, 0x7F800000 + rng.integers(0, 2**23, n),  # inf / NaN
          np.where(kinds == 3, (rng.integers(1, 254, n) << 23) | 0x7FF000 | rng.integers(0, 2**12, n),
                   (rng.integers(1, 254, n) << 23) | rng.integers(0, 2**23, n)))))  # fmt: skip
    bits = (mag | (rng.integers(0, 2, n) << 31)).astype(np.uint32)
    vals = bits.view(np.float32)
    h = RangeHistogram(FORMATS)
    h.add_bits(bits, "fp32")
    assert same(h, general(vals))
    z = np.zeros((len(FORMATS), 6), np.int64)
    h2 = RangeHistogram(FORMATS)
    h2.add_bits(bits, "fp32", tensor_formats=FORMATS, tensor_zones=z)
    assert same(h2, general(vals))


@pytest.mark.parametrize("layout", ["fp16", "bf16", "fp32", "fp64"])
@settings(max_examples=25, deadline=None)
@given(data=st.data(), k=st.integers(-20, 20), reps=st.sampled_from([1, 3, 40]))
def test_adder_at_an_address_equals_the_array_adder(layout, data, k, reps):
    """bits_adder(at_address=True) (what a watch does with a CPU tensor's memory) against the
    same adder given the numpy array, on random bit patterns with specials (both then against
    the general path through float64 values, scaled by 2^k)."""
    width = np.dtype(LAYOUTS[layout][1]).itemsize * 8
    k = 0 if layout == "fp64" else k  # (fp64 x 2^k can leave float64)
    specials = [0, 1 << (width - 1), 1]  # +0, -0, the smallest subnormal
    ints = data.draw(st.lists(st.one_of(st.integers(0, 2**width - 1), st.sampled_from(specials)),
                              min_size=1, max_size=120))  # fmt: skip
    bits, vals = codes(layout, ints * reps)
    by_array, at_address = RangeHistogram(FORMATS), RangeHistogram(FORMATS)
    z1, z2 = np.zeros((2, len(FORMATS), 6), np.int64)
    a1 = by_array.bits_adder(layout, FORMATS)(bits, k, z1)
    a2 = at_address.bits_adder(layout, FORMATS, at_address=True)(bits.ctypes.data, bits.size,
                                                                 k, z2)  # fmt: skip
    assert a1 == a2 and np.array_equal(z1, z2) and same(by_array, at_address)
    assert same(at_address, general(vals.astype(np.float64) * 2.0**k))
    with pytest.raises(ValueError, match="16-, 32- or 64-bit"):
        at_address.bits_adder("fp8_e5m2", FORMATS, at_address=True)
