"""Property tests (hypothesis): rounding is idempotent, monotone, odd-symmetric and nearest."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import same_bits

import fpsim

FORMATS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "tf32", fpsim.Format(4, 3), fpsim.Format(3, 2)]
formats = st.sampled_from(FORMATS)
finite = st.floats(allow_nan=False, allow_infinity=False)
any_float = st.floats(allow_nan=True, allow_infinity=True)
modes = st.sampled_from(["nearest_even", "nearest_away", "toward_zero", "up", "down"])


@settings(max_examples=400, deadline=None)
@given(any_float, formats, modes)
def test_idempotent(x, fmt, mode):
    r = fpsim.round_to(x, fmt, mode)
    assert same_bits(np.float64(fpsim.round_to(r, fmt, mode)), np.float64(r))
    # and every result is a value of the format: its code decodes back to it
    if not math.isnan(r):
        assert fpsim.from_bits(fpsim.to_bits(r, fmt), fmt, dtype=np.float64) == r


@settings(max_examples=400, deadline=None)
@given(finite, finite, formats, modes)
def test_monotone(x, y, fmt, mode):
    lo, hi = min(x, y), max(x, y)
    a, b = fpsim.round_to(lo, fmt, mode), fpsim.round_to(hi, fmt, mode)
    if not (math.isnan(a) or math.isnan(b)):  # fn formats: overflow is NaN
        assert a <= b


@settings(max_examples=400, deadline=None)
@given(any_float, formats)
def test_odd_symmetric(x, fmt):
    pos = np.float64(fpsim.round_to(x, fmt))
    neg = np.float64(fpsim.round_to(-x, fmt))
    assert same_bits(neg, -pos)
    # the directed modes mirror each other
    assert same_bits(
        np.float64(fpsim.round_to(-x, fmt, "up")), -np.float64(fpsim.round_to(x, fmt, "down"))
    )


@settings(max_examples=400, deadline=None)
@given(finite, formats)
def test_result_is_a_nearest_value(x, fmt):
    f = fpsim.get_format(fmt)
    r = fpsim.round_to(x, f)
    if abs(x) >= f.max or math.isnan(r):
        return
    # no representable value is closer to x than r: check r's two neighbours
    for n in (fpsim.next_up(r, f), fpsim.next_down(r, f)):
        if math.isfinite(n):
            assert abs(r - x) <= abs(n - x)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True), min_size=1, max_size=50), formats)
def test_array_equals_elementwise(xs, fmt):
    a = np.array(xs, dtype=np.float32)
    arr = fpsim.round_to(a, fmt)
    one = np.array([fpsim.round_to(v, fmt) for v in a], dtype=np.float32)
    assert same_bits(arr, one).all()
