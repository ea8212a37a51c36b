"""The float-instruction form of round-to-nearest-even (:mod:`fpsim.kernels.nearest_float`), on
every format it accepts: against the exact rational definition (``oracle.ref_round``), against
the general path (``scalar.convert`` run uncompiled), and through every kernel that uses it
(``round_to``, ``to_bits``, the input check and the final rounding of ``arith``), in both
containers, with subnormal results kept or flushed and with and without saturation."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import ref_round, same_bits

import fpsim
from fpsim.kernels import arith_cpu, cpu, nearest_float, python, scalar
from fpsim.kernels.record import FLOAT32, FLOAT64

STYLES = ["ieee", "fn", "fnuz", "finite"]


@st.composite
def accepted_format(draw):
    """A format and container for which the float form claims exactness: every exponent width,
    fraction width, bias and special-value style that ``nearest_even_float_ok`` accepts."""
    container = draw(st.sampled_from([np.float32, np.float64]))
    c = FLOAT32 if container == np.float32 else FLOAT64
    e = draw(st.integers(1, 8 if container == np.float32 else 11))
    m = draw(st.integers(1, 22 if container == np.float32 else 52))
    style = draw(st.sampled_from(STYLES))
    bias = draw(st.integers(-40, c.bias))
    try:
        f = fpsim.Format(e, m, bias=bias, style=style)
    except ValueError:  # e.g. a style whose special codes leave no finite value
        f = None
    if f is None or not nearest_float.nearest_even_float_ok(c, f.record):
        f = draw(st.sampled_from([fpsim.fp16, fpsim.bf16, fpsim.fp8_e4m3, fpsim.fp8_e5m2,
                                  fpsim.get_format("fp8_e4m3fnuz"), fpsim.get_format("fp6_e2m3"),
                                  fpsim.get_format("fp4_e2m1"), fpsim.tf32]))  # fmt: skip
    assert nearest_float.nearest_even_float_ok(c, f.record)
    return f, container


def values_for(f, container, seed: int, n: int = 300) -> np.ndarray:
    """Random values over the format's range and beyond, its boundaries and their float
    neighbours, exact ties, ±0, ±inf, NaNs with payloads, and raw random bit patterns."""
    rng = np.random.default_rng(seed)
    cf = np.finfo(container)
    it = np.int32 if container == np.float32 else np.int64
    lo = max(f.emin - f.man_bits - 3, int(np.log2(float(cf.smallest_subnormal))))
    hi = min(f.emax + 2, int(np.log2(float(cf.max))))
    v = np.ldexp(1 + rng.random(n), rng.integers(lo, hi + 1, n)) * rng.choice([-1, 1], n)
    q = f.smallest_subnormal
    # ties: a format value plus half its quantum (exact in the container when m is short)
    k = rng.integers(0, 1 << min(f.man_bits, 20), n // 4)
    ex = rng.integers(max(f.emin, lo + f.man_bits + 2), max(f.emin, hi - 1) + 1, n // 4)
    ties = np.ldexp(1 + (k + 0.5) / 2.0**f.man_bits, ex)
    edges = [q, q / 2, q * 1.5, q * 0.75, f.min_normal, f.min_normal - q / 2, f.max,
             f.max * (1 + f.eps / 2), f.max * (1 + f.eps / 4), f.max * 2, 0.0, math.inf, math.nan]  # fmt: skip
    with np.errstate(over="ignore", under="ignore"):
        e = np.array(edges, np.float64)
        e = np.concatenate([e, -e, v, ties, -ties]).astype(container)
        nb = np.concatenate([np.nextafter(e, container(np.inf)), np.nextafter(e, -np.inf)])
    raw = rng.integers(np.iinfo(it).min, np.iinfo(it).max, n, dtype=it, endpoint=True)
    payload = np.array([0x7F800001, 0xFFC00123] if it == np.int32 else
                       [0x7FF0000000000001, 0xFFF0000000123456], np.uint64).astype(it)  # fmt: skip
    return np.concatenate([e, nb.astype(container), raw.view(container), payload.view(container)])


def oracle(x: np.ndarray, f, subnormals: bool, saturate: bool) -> np.ndarray:
    return np.array([ref_round(float(v), f, "nearest_even", subnormals, saturate)
                     for v in x.tolist()], x.dtype)  # fmt: skip


def canonical_nan(x: np.ndarray) -> np.ndarray:
    """The bits the kernels write for NaN: the container's canonical quiet NaN (exponent all
    ones, top fraction bit set) with the input's sign."""
    if x.dtype == np.float32:
        quiet, sign = np.int64(0x7FC00000), np.int64(1) << 31
        return (quiet | (np.signbit(x) * sign)).astype(np.uint32).view(np.int32)
    quiet, sign = np.uint64(0x7FF8000000000000), np.uint64(1) << np.uint64(63)
    return (quiet | (np.signbit(x).astype(np.uint64) * sign)).view(np.int64)


@settings(max_examples=25, deadline=None)
@given(accepted_format(), st.integers(0, 2**32), st.booleans(), st.booleans())
def test_float_form_equals_definition_and_general_path(fc, seed, subnormals, saturate):
    f, container = fc
    x = values_for(f, container, seed)
    want = oracle(x, f, subnormals, saturate)
    kf = nearest_float.nearest_even_float_constants(f.record, int(subnormals), int(saturate))
    # 1. the function itself, run as Python (the same lines the kernels compile)
    got = np.array([nearest_float.round_nearest_even_float(float(v), kf) for v in x.tolist()],
                   np.float64).astype(container)  # fmt: skip
    assert same_bits(got, want).all() or _only_nan_sign(got, want)
    # 2. round_to and to_bits, compiled, against the general path (scalar.convert in Python),
    #    bit for bit, NaNs included (the canonical quiet NaN with the input's sign)
    it = np.int32 if container == np.float32 else np.int64
    c = FLOAT32 if container == np.float32 else FLOAT64
    for dst in (c, f.record):
        params = (c, f.record, dst, scalar.NEAREST_EVEN, int(subnormals), int(saturate), 0)
        fast = np.empty(x.size, np.int64 if dst is f.record else it)
        general = np.empty_like(fast)
        cpu.convert_array(x.view(it), fast, params)
        python.convert_array(x.view(it), general, params)
        # (to_bits refuses NaN for a format without NaN: no code to compare there)
        ok = (fast == general) | (np.isnan(x) & (dst is f.record) & (not f.has_nan))
        assert ok.all(), (f, container, x[~ok][:4])
    rounded = np.asarray(fpsim.round_to(x, f, subnormals=subnormals, saturate=saturate))
    assert same_bits(rounded, want).all() or _only_nan_sign(rounded, want)
    nan = np.isnan(x)
    assert (rounded.view(it)[nan] == canonical_nan(x[nan])).all()


def _only_nan_sign(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal except NaN payloads (the oracle's NaN is Python's; the sign is checked apart)."""
    nan = np.isnan(want)
    ok = same_bits(got, want) | (nan & np.isnan(got) & (np.signbit(got) == np.signbit(want)))
    return bool(ok.all())


@settings(max_examples=25, deadline=None)
@given(accepted_format(), st.integers(0, 2**32))
def test_input_check_and_final_rounding_of_arith(fc, seed):
    """count_not_in_format counts exactly the non-NaN values the definition moves, and the
    one-thread final rounding of a matmul (round_nearest) is the definition's, on float64 and
    float32 input."""
    f, container = fc
    x = values_for(f, container, seed)
    want = oracle(x, f, True, False)
    moved = int(np.sum(~same_bits(want, x) & ~np.isnan(x)))
    assert arith_cpu.count_not_in_format(np.ascontiguousarray(x), f.record) == moved
    if not f.fits_in(np.float64):
        return
    out = np.empty(x.size)
    arith_cpu.round_nearest(x, out, f.record)
    assert _only_nan_sign(out, want.astype(np.float64))


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz",
                                  "fp6_e3m2", "fp4_e2m1", "tf32"])  # fmt: skip
def test_every_float32_pattern_sample_against_ml_dtypes(name):
    """A dense sample of float32 patterns (every 997th of all 2^32) rounded by round_to equals
    ml_dtypes' own float32 -> format conversion (an independent implementation), NaN aside."""
    f = fpsim.get_format(name)
    dt = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
          "fp8_e5m2": ml_dtypes.float8_e5m2, "fp8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
          "fp6_e3m2": ml_dtypes.float6_e3m2fn, "fp4_e2m1": ml_dtypes.float4_e2m1fn,
          "tf32": None}[name]  # fmt: skip
    bits = np.arange(0, 1 << 32, 997, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    got = np.asarray(fpsim.round_to(x, f))
    if dt is None:  # tf32: the definition (a slower oracle) on a sub-sample
        sub = x[::4001]
        assert _only_nan_sign(np.asarray(fpsim.round_to(sub, f)), oracle(sub, f, True, False))
        return
    want = x.astype(dt).astype(np.float32)
    keep = ~np.isnan(x)  # fp6/fp4 have no NaN: ml_dtypes writes -0/+0 for it (documented)
    g, w = got[keep], want[keep]
    assert (same_bits(g, w) | (np.isnan(g) & np.isnan(w))).all()


def test_refuses_what_it_cannot_do():
    """The float form's limits (the kernels then take the integer form or convert)."""
    ok = nearest_float.nearest_even_float_ok
    assert ok(FLOAT32, fpsim.fp16.record) and ok(FLOAT64, fpsim.fp32.record)
    assert not ok(FLOAT32, fpsim.fp32.record)  # as many fraction bits as the container
    assert not ok(FLOAT64, fpsim.Format(11, 51).record)  # 51 > 50 fraction bits
    assert not ok(FLOAT64, fpsim.Format(11, 10).record)  # shifter 1.5 * 2^(1023 + 42): inf
    assert not ok(FLOAT32, fpsim.Format(8, 7, bias=130).record)  # grid below float32's normals
    assert not ok(FLOAT32, fpsim.get_format("e8m0").record)  # unsigned, no subnormals


@pytest.mark.parametrize("f", [fpsim.Format(11, 51), fpsim.Format(11, 10), fpsim.Format(11, 40),
                               fpsim.Format(11, 30, bias=1024, style="fn")], ids=str)  # fmt: skip
def test_formats_the_float_form_refuses_take_the_integer_form(f):
    """The input check and the final rounding of formats beyond the float form (51 fraction
    bits; a shifter past float64's range) still match the definition, through the integer
    form or scalar.convert."""
    assert not nearest_float.nearest_even_float_ok(FLOAT64, f.record)
    x = values_for(f, np.float64, 3)
    want = oracle(x, f, True, False)
    moved = int(np.sum(~same_bits(want, x) & ~np.isnan(x)))
    assert arith_cpu.count_not_in_format(x, f.record) == moved
    out = np.empty(x.size)
    arith_cpu.round_nearest(x, out, f.record)
    assert _only_nan_sign(out, want)
    got = np.asarray(fpsim.round_to(x, f))
    assert _only_nan_sign(got, want)
