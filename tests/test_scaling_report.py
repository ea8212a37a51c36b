"""fpsim.stats.scaling_report against an independent count: every element quantized by the exact
reference written from the specs (tests/scaling_oracle.py, Fractions) or by numpy's float16 cast,
and sorted into flushed / subnormal / saturated / non-finite by the definitions, not by fpsim's
``classify``. Errors and bits per element are recomputed from those reference values."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scaling_oracle as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fpsim import scaling
from fpsim.stats import OUTCOMES, scaling_report

F16_MAX, F16_MIN_NORMAL = 65504.0, 2.0**-14


def _counts():
    return dict.fromkeys(("zero", "subnormal", "saturated", "nonfinite"), 0)


def _tally(c, x, value, limit_exceeded, min_normal):
    """One finite x whose stored element is ``value`` (a Fraction, signed)."""
    if value == 0 and x != 0:
        c["zero"] += 1
    elif 0 < abs(value) < min_normal:
        c["subnormal"] += 1
    if limit_exceeded:
        c["saturated"] += 1


def ref_mx(x2d, elem, mode, bs=32):
    """(counts, dequantized float64 array) of an MX scheme along the last axis, by the spec."""
    c, deq = _counts(), np.empty(x2d.shape)
    for r, row in enumerate(x2d):
        for start in range(0, row.size, bs):
            blk = [float(v) for v in row[start : start + bs]]
            e, q = ref.ref_mx_quantize_block(blk, elem, mode)
            deq[r, start : start + len(blk)] = ref.ref_mx_dequantize(e, q)
            if e is None:  # a NaN/inf in the block: the whole block is NaN
                c["nonfinite"] += len(blk)
                continue
            for v, (value, _) in zip(blk, q, strict=True):
                over = abs(Fraction(v)) / Fraction(2) ** e > elem.max
                _tally(c, v, value, over, elem.min_normal)
    return c, deq


def ref_nvfp4(x2d):
    """NVFP4 as fpsim defines it: g = fl32(amax / 2688), then the exact two-level rounding."""
    finite = np.isfinite(x2d)
    amax = float(np.max(np.abs(x2d[finite]))) if finite.any() else 0.0
    g = ref.ref_nvfp4_per_tensor_scale(amax) if 0 < amax < math.inf else 1.0
    c, deq = _counts(), np.empty(x2d.shape)
    for r, row in enumerate(x2d):
        for start in range(0, row.size, 16):
            blk = [float(v) for v in row[start : start + 16]]
            pad = blk + [0.0] * (16 - len(blk))
            s8, q = ref.ref_nvfp4_quantize_block(pad, g, arith="exact")
            d = ref.ref_nvfp4_dequantize(s8, q, g, arith="exact")[: len(blk)]
            deq[r, start : start + len(blk)] = d
            if not any(math.isfinite(v) for v in blk) or isinstance(s8[0], float) or any(
                not math.isfinite(v) for v in blk
            ):
                c["nonfinite"] += len(blk)
                continue
            for v, (value, _) in zip(blk, q[: len(blk)], strict=True):
                over = abs(Fraction(v)) / (s8[0] * Fraction(g)) > ref.E2M1.max
                _tally(c, v, value, over, ref.E2M1.min_normal)
    return c, deq, g


def ref_current(x, elem):
    """TransformerEngine's current scaling: scale from amax, cast fl32(x * scale), saturating."""
    fin = np.isfinite(x)
    amax = float(np.max(np.abs(x[fin]))) if fin.any() else 0.0
    if not fin.all():
        amax = math.inf if np.isinf(x).any() and not np.isnan(x).any() else math.nan
    scale = ref.ref_current_scale(amax, float(elem.max))
    inv = float(np.float32(1) / np.float32(scale))
    c, deq = _counts(), np.empty(x.shape)
    for i, v in np.ndenumerate(x):
        value, _ = ref.ref_fp8_quantize(float(v), scale, elem)
        deq[i] = ref.q_to_float((value * Fraction(inv), _)) if not isinstance(value, float) \
            else value
        if not math.isfinite(v):
            c["nonfinite"] += 1
            continue
        y = float(np.float32(v) * np.float32(scale))
        _tally(c, float(v), value, abs(y) > elem.max, elem.min_normal)
    return c, deq


def ref_fp16(x):
    with np.errstate(over="ignore"):
        q = x.astype(np.float16).astype(np.float64)
    c = _counts()
    for v, w in zip(x.ravel(), q.ravel(), strict=True):
        if not math.isfinite(v):
            c["nonfinite"] += 1
            continue
        _tally(c, v, Fraction(w) if math.isfinite(w) else w, abs(v) > F16_MAX or
               not math.isfinite(w), F16_MIN_NORMAL)  # fmt: skip
    return c, q


def ref_errors(x, q):
    fin = np.isfinite(x)
    xf, qf = x[fin].astype(np.float64), q[fin]
    nz = xf != 0
    norm = math.sqrt(float(np.sum((xf - qf) ** 2))) / math.sqrt(float(np.sum(xf**2)))
    mean = float(np.mean(np.abs(xf[nz] - qf[nz]) / np.abs(xf[nz])))
    return norm, mean


def tensor(seed, rows=3, cols=70, specials=True):
    """Rows of their own magnitudes, one outlier channel, a partial last block (70 = 2*32 + 6,
    4*16 + 6), zeros, float32 subnormal-range values, and NaN/inf in the last row."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-30, 5, (rows, 1))
    x[:, 7] *= 3000.0
    x[0, 3:6] = 0.0
    x[1, 40:45] = rng.standard_normal(5) * 1e-42
    if specials:
        x[2, 10], x[2, 50] = np.nan, np.inf
    return x.astype(np.float32)


def _check(row, counts, x, deq, bits):
    assert (row.zero, row.subnormal, row.saturated, row.nonfinite) == (
        counts["zero"], counts["subnormal"], counts["saturated"], counts["nonfinite"])
    assert row.values == x.size
    assert row.nonzero == int(np.count_nonzero(np.isfinite(x) & (x != 0)))
    assert row.kept == x.size - sum(counts.values())
    assert row.bits_per_element == pytest.approx(bits, rel=1e-15)
    norm, mean = ref_errors(x.astype(np.float64), deq)
    assert row.norm_error == pytest.approx(norm, rel=1e-12)
    assert row.mean_error == pytest.approx(mean, rel=1e-12)
    fr = row.fractions()
    assert set(fr) == set(OUTCOMES) | {"nonfinite"}
    assert sum(fr.values()) == pytest.approx(1.0)


MX_CASES = [("mxfp8_e4m3", ref.E4M3, "floor"), ("mxfp8_e5m2", ref.E5M2, "floor"),
            ("mxfp6_e3m2", ref.E3M2, "ceil"), ("mxfp6_e2m3", ref.E2M3, "even"),
            ("mxfp4", ref.E2M1, "floor"), ("mxfp4", ref.E2M1, "rceil")]  # fmt: skip


@pytest.mark.parametrize(("name", "elem", "mode"), MX_CASES)
def test_mx_rows_count_what_the_spec_does(name, elem, mode):
    x = tensor(1, specials=False)
    (row,) = scaling_report(x, [(name, name, {"scale_rounding": mode})])
    counts, deq = ref_mx(x, elem, mode)
    nblocks = x.shape[0] * 3  # 70 columns: two full blocks of 32 and one of 6
    _check(row, counts, x, deq, elem.bits + nblocks * 8 / x.size)
    assert row.kind == "per-block" and row.element.bits == elem.bits
    scales = row.result.scales
    assert np.array_equal(np.sort(row.scale_exponents), np.sort(np.log2(scales.ravel())))


@pytest.mark.parametrize(("name", "elem", "mode"), MX_CASES[:1] + MX_CASES[-1:])
def test_a_nan_or_inf_block_is_counted_nonfinite_and_its_error_unbounded(name, elem, mode):
    x = tensor(1, specials=True)
    (row,) = scaling_report(x, [(name, name, {"scale_rounding": mode})])
    counts, _ = ref_mx(x, elem, mode)
    assert counts["nonfinite"] == 2 * 32  # the blocks holding the NaN (col 10), the inf (col 50)
    assert (row.zero, row.subnormal, row.saturated, row.nonfinite) == tuple(
        counts[k] for k in ("zero", "subnormal", "saturated", "nonfinite"))
    assert row.norm_error == math.inf and row.mean_error == math.inf
    assert row.scale_exponents.size == np.count_nonzero(np.isfinite(row.result.scales))


def test_nvfp4_row_counts_what_the_two_level_definition_does():
    x = tensor(2, specials=False)
    (row,) = scaling_report(x, ["nvfp4"])
    counts, deq, g = ref_nvfp4(x)
    assert row.result.tensor_scale == g
    nblocks = x.shape[0] * 5  # 70 = 4 * 16 + 6
    _check(row, counts, x, deq, 4 + (nblocks * 8 + 32) / x.size)
    assert row.kind == "per-block"


def test_per_tensor_current_and_no_scaling_rows():
    x = tensor(3, specials=False)
    rows = scaling_report(x, ["fp8_e4m3/current", "fp16"])
    counts, deq = ref_current(x, ref.E4M3)
    _check(rows[0], counts, x, deq, 8 + 32 / x.size)
    assert rows[0].label == "fp8_e4m3, current scaling" and rows[0].kind == "per-tensor"
    assert rows[0].scale_exponents.tolist() == [math.log2(rows[0].result.scale_inv)]
    counts, q = ref_fp16(x)
    _check(rows[1], counts, x, q, 16.0)
    assert rows[1].label == "fp16" and rows[1].kind == "none" and rows[1].scale_exponents.size == 0


def test_fp16_overflow_counts_as_saturated_and_nan_input_as_nonfinite():
    x = np.array([1e5, -7e4, 65519.0, 65520.0, np.nan, -np.inf, 1e-9, 0.0, -0.0, 3.0])
    (row,) = scaling_report(x, ["fp16"])
    counts, _ = ref_fp16(x)
    assert (row.zero, row.subnormal, row.saturated, row.nonfinite) == (1, 0, 4, 2) == tuple(
        counts[k] for k in ("zero", "subnormal", "saturated", "nonfinite"))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), cols=st.integers(1, 100),
       scheme=st.sampled_from(MX_CASES))  # fmt: skip
def test_any_width_and_any_tensor(seed, cols, scheme):
    name, elem, mode = scheme
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((2, cols)) * 2.0 ** rng.integers(-140, 120, (2, cols))).astype(
        np.float32)  # fmt: skip
    x[~np.isfinite(x)] = 0.0
    (row,) = scaling_report(x, [(name, name, {"scale_rounding": mode})])
    counts, _ = ref_mx(x, elem, mode)
    assert (row.zero, row.subnormal, row.saturated, row.nonfinite) == tuple(
        counts[k] for k in ("zero", "subnormal", "saturated", "nonfinite"))


def test_axis_runs_the_blocks_along_that_axis():
    x = tensor(4, specials=False)
    (a,) = scaling_report(x.T, ["mxfp4"], axis=0)
    (b,) = scaling_report(x, ["mxfp4"])
    assert (a.zero, a.subnormal, a.saturated) == (b.zero, b.subnormal, b.saturated)
    assert np.array_equal(a.result.dequantize().T, b.result.dequantize())


def test_schemes_as_objects_labels_and_options():
    x = tensor(5, specials=False)
    rec = scaling.DelayedScaling("fp8_e5m2")  # a fresh recipe: scale 1
    custom = scaling.BlockScheme("fp8_e4m3", 8, "e8m0")
    rows = scaling_report(x, [("mine", custom), rec, ("sat16", "fp16", {"saturate": True}),
                              "mxfp4"])  # fmt: skip
    assert [r.label for r in rows] == ["mine", "fp8_e5m2, delayed scaling", "sat16", "mxfp4"]
    assert rows[0].bits_per_element == pytest.approx(8 + x.shape[0] * 9 * 8 / x.size)
    counts, deq = ref_mx(x, ref.E4M3, "floor", bs=8)
    assert (rows[0].zero, rows[0].subnormal, rows[0].saturated) == (
        counts["zero"], counts["subnormal"], counts["saturated"])
    assert rows[1].result.scale == 1.0
    assert scaling_report(x, "mxfp4")[0].zero == rows[3].zero  # one scheme, not in a list


def test_bad_input_is_refused_clearly():
    with pytest.raises(TypeError, match="real numbers"):
        scaling_report(np.array(["a", "b"]))
    with pytest.raises(ValueError, match="unknown format"):
        scaling_report(np.ones(4), ["fp17"])
    with pytest.raises(TypeError, match=r"\(label, scheme\)"):
        scaling_report(np.ones(4), [("a", "fp16", "bad", 1)])
    with pytest.raises(TypeError, match="takes no options"):
        scaling_report(np.ones(4), [("a", scaling.CurrentScaling(), {"margin": 1})])


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"])
def test_the_element_max_itself_is_kept_and_one_ulp_above_saturates(name):
    """Under the floor rule a block max can exceed the element's max: exactly max · X is a
    value of the format (kept), the next float32 above it is clipped (saturated)."""
    elem = dict(zip(["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"],
                    [ref.E4M3, ref.E5M2, ref.E3M2, ref.E2M3, ref.E2M1], strict=True))[name]
    edge = np.float32(float(elem.max) * 2.0**-5)
    x = np.full(32, np.float32(2.0**-5), np.float32)
    x[3], x[9] = edge, np.nextafter(edge, np.float32(np.inf))
    (row,) = scaling_report(x, [name])
    counts, _ = ref_mx(x.reshape(1, -1), elem, "floor")
    assert counts["saturated"] == 1 and row.saturated == 1
    assert row.result.classify(x)["saturated"].nonzero()[0].tolist() == [9]
