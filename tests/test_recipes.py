"""fpsim.amp.recipes: the named recipes are TransformerEngine's and torchao's definitions
(reference notes §1-3), and every quantizer kind equals the exact reference of
tests/scaling_oracle.py (Fraction arithmetic, TE's fp32 steps) or an ml_dtypes cast."""

import json
import math

import ml_dtypes
import numpy as np
import pytest
import scaling_oracle as so
from hypothesis import given, settings
from hypothesis import strategies as st

from fpsim.amp.recipes import RECIPES, ROLES, Quantizer, QuantizerSpec, Recipe, get_recipe

E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def spread(seed, shape, lo=-20, hi=10):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)).astype(np.float32)


# ---- the named recipes: the definitions in the notes ------------------------------------------
def test_named_recipes_match_their_sources():
    d = get_recipe("fp8_delayed")  # TE DelayedScaling(): HYBRID, margin 0, 1024, "max"
    assert [d.spec(r).format for r in ROLES] == ["fp8_e4m3", "fp8_e4m3", "fp8_e5m2"]
    assert all(d.spec(r).scaling == "delayed" and d.spec(r).amax_history_len == 1024
               and d.spec(r).amax_compute_algo == "max" and d.spec(r).margin == 0 for r in ROLES)
    c = get_recipe("fp8_current")  # TE Float8CurrentScaling: HYBRID, eps 0, no pow2
    assert [c.spec(r).format for r in ROLES] == ["fp8_e4m3", "fp8_e4m3", "fp8_e5m2"]
    assert all(c.spec(r).amax_epsilon == 0 and not c.spec(r).power_of_2 for r in ROLES)
    t = get_recipe("fp8_tensorwise")  # torchao: e4m3 input/weight, e5m2 grad, EPS = 1e-12
    assert [t.spec(r).format for r in ROLES] == ["fp8_e4m3", "fp8_e4m3", "fp8_e5m2"]
    assert all(t.spec(r).amax_epsilon == 1e-12 for r in ROLES)
    m = get_recipe("mxfp8")  # TE MXFP8BlockScaling: E4M3 everywhere, 32-blocks, cvt.rp
    assert all(m.spec(r).scheme.block_size == 32 and m.spec(r).element.name == "fp8_e4m3"
               and m.spec(r).scale_rounding == "rceil" for r in ROLES)
    n = get_recipe("nvfp4")
    assert all(n.spec(r).scheme.block_size == 16 and n.spec(r).scheme.tensor_scale for r in ROLES)
    assert n.grad_output.rounding == "stochastic" and n.input.rounding == "nearest_even"
    cast = get_recipe("fp8_cast")
    assert [cast.spec(r).scaling for r in ROLES] == ["none"] * 3 and not cast.input.saturate
    assert all(r.accumulation == "fp32" for r in RECIPES.values())
    assert get_recipe(" MXFP8 ") is m


def test_recipe_round_trips_through_json_and_text():
    for r in RECIPES.values():
        assert Recipe.from_dict(json.loads(json.dumps(r.to_dict()))) == r
        text = str(r)
        assert r.name in text and all(role in text for role in ROLES)
    r = get_recipe("fp8_current").replace(name="mine", accumulation="h100_fp8")
    assert r.accumulation == "h100_fp8" and r.input == RECIPES["fp8_current"].input


@pytest.mark.parametrize("kwargs, match", [
    (dict(format="fp8_e4m3", scaling="wild"), "scaling must be"),
    (dict(format="mxfp4", scaling="current"), "block scheme"),
    (dict(format="fp8_e4m3", scaling="current", amax_history_len=4), "delayed scaling"),
    (dict(format="fp8_e4m3", scaling="delayed", power_of_2=True), "current scaling"),
    (dict(format="fp8_e4m3", scaling="none", margin=1), "margin"),
    (dict(format="fp8_e4m3", scaling="current", scale_rounding="floor"), "block scaling"),
    (dict(format="mxfp4", scaling="block", scale_rounding="up"), "scale_rounding"),
    (dict(format="fp8_e4m3", scaling="current", saturate=False), "saturate"),
    (dict(format="fp8_e4m3", scaling="delayed", amax_compute_algo="mean"), "amax_compute_algo"),
    (dict(format="fp8_e4m3", rounding="sideways"), "rounding mode"),
    (dict(format="e8m0", scaling="none"), "not a format for GEMM"),
    (dict(format="fp17"), "unknown format"),
])  # fmt: skip
def test_bad_specs_are_refused(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        QuantizerSpec(**kwargs)


def test_misuse_is_refused():
    with pytest.raises(ValueError, match="role"):
        get_recipe("fp8_current").make_quantizer("bias")
    with pytest.raises(ValueError, match="unknown recipe"):
        get_recipe("fp9")
    q = get_recipe("mxfp8").make_quantizer("input")
    with pytest.raises(ValueError, match="per-tensor scale"):
        q.tensor_scale(1.0)
    with pytest.raises(ValueError, match="out of range"):
        q.quantize(np.ones((2, 32)), axis=2)
    with pytest.raises(ValueError, match="dtype"):
        q.quantize(np.ones(32), dtype=np.float16)


# ---- current scaling: TE's compute_scale_from_amax and SATFINITE cast --------------------------
@pytest.mark.parametrize("recipe, role", [("fp8_current", "input"), ("fp8_current", "grad_output"),
                                          ("fp8_tensorwise", "weight")])  # fmt: skip
@pytest.mark.parametrize("seed", range(4))
def test_current_scaling_equals_the_reference(recipe, role, seed):
    q = get_recipe(recipe).make_quantizer(role)
    spec = q.spec
    elem = so.E4M3 if spec.format == "fp8_e4m3" else so.E5M2
    x = spread(seed, (6, 40))
    if seed == 3:
        x[0, :3] = [np.nan, 1e30, -0.0]
    got = q.quantize(x, dtype=np.float64)
    amax = float(np.max(np.abs(x.astype(np.float64))))
    s = so.ref_current_scale(amax, elem.max, eps=spec.amax_epsilon)
    assert q.scale == s
    inv = float(np.float32(1) / np.float32(s))
    want = [so.q_to_float(so.ref_fp8_quantize(float(v), s, elem)) * inv for v in x.ravel()]
    np.testing.assert_array_equal(got.ravel(), np.array(want))
    got32 = get_recipe(recipe).make_quantizer(role).quantize(x)  # float32: rounded once
    np.testing.assert_array_equal(got32.ravel(), np.array(want, np.float64).astype(np.float32))


def test_torchao_epsilon_keeps_a_zero_tensor_finite():
    q = get_recipe("fp8_tensorwise").make_quantizer("input")
    out = q.quantize(np.zeros(8, np.float32))
    assert q.scale == float(np.float32(E4M3_MAX) / np.float32(1e-12)) and not out.any()
    assert get_recipe("fp8_current").make_quantizer("input").tensor_scale(0.0) == 1.0  # TE


# ---- delayed scaling: history roll and scale update over steps --------------------------------
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_scaling_follows_te_over_steps(algo):
    spec = QuantizerSpec("fp8_e5m2", "delayed", amax_history_len=3, amax_compute_algo=algo,
                         margin=1)  # fmt: skip
    q = Quantizer(spec, "grad_output")
    hist, scale = [0.0, 0.0, 0.0], 1.0
    for step in range(7):
        x = spread(step, (4, 16), -8 + 2 * step, 2 + 2 * step)
        got = q.quantize(x, dtype=np.float64)
        want = [so.q_to_float(so.ref_fp8_quantize(float(v), scale, so.E5M2)) for v in x.ravel()]
        inv = float(np.float32(1) / np.float32(scale))
        np.testing.assert_array_equal(got.ravel(), np.array(want) * inv)
        hist[0] = max(hist[0], float(np.max(np.abs(x))))
        assert q.amax_history.tolist() == [float(np.float32(v)) for v in hist]
        q.update()
        hist, _, scale = so.ref_delayed_scaling_update(hist, scale, E5M2_MAX, margin=1, algo=algo)
        assert q.scale == scale and q.amax_history.tolist() == hist


def test_state_dict_resumes_the_same_trajectory():
    a = get_recipe("fp8_delayed").make_quantizer("input")
    for step in range(3):
        a.quantize(spread(step, 64))
        a.update()
    b = get_recipe("fp8_delayed").make_quantizer("input")
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for step in range(3, 6):
        x = spread(step, 64)
        np.testing.assert_array_equal(a.quantize(x), b.quantize(x))
        a.update()
        b.update()
        assert a.scale == b.scale
    c = get_recipe("fp8_current").make_quantizer("input")
    with pytest.raises(ValueError, match="quantizer for"):
        c.load_state_dict(a.state_dict())


# ---- block scaling along an axis --------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_mxfp8_blocks_run_along_the_axis(axis):
    q = get_recipe("mxfp8").make_quantizer("weight")
    x = spread(7, (64, 96))
    got = q.quantize(x, axis=axis, dtype=np.float64)
    moved = np.moveaxis(x, axis, -1)
    want = []
    for row in moved:
        scales, elems = so.ref_mx_quantize(row, so.E4M3, "rceil")
        want.append([so.ref_mx_dequantize(scales[i // 32], [e])[0] for i, e in enumerate(elems)])
    np.testing.assert_array_equal(np.moveaxis(got, axis, -1), np.array(want))


def test_nvfp4_equals_the_exact_two_level_reference():
    spec = QuantizerSpec("nvfp4", "block")
    x = spread(3, (4, 32))
    got = Quantizer(spec).quantize(x, dtype=np.float64)
    amax = float(np.max(np.abs(x)))
    pts = float(np.float32(amax / (448 * 6)))  # exact quotient rounded once (fpsim's rule)
    for r in range(4):
        for b in range(2):
            blk = [float(v) for v in x[r, 16 * b : 16 * b + 16]]
            s8, el = so.ref_nvfp4_quantize_block(blk, pts, arith="exact")
            want = so.ref_nvfp4_dequantize(s8, el, pts, arith="exact")
            np.testing.assert_array_equal(got[r, 16 * b : 16 * b + 16], want)


def test_stochastic_rounding_is_seeded_and_unbiased():
    spec = QuantizerSpec("mxfp4", "block", rounding="stochastic")
    x = np.full(32, 1.25, np.float32)  # halfway between e2m1's 1.0 and 1.5 (scale 1)
    x[0] = 6.0
    outs = [Quantizer(spec, seed=5).quantize(x) for _ in range(2)]
    np.testing.assert_array_equal(outs[0], outs[1])  # same seed, same draws
    q = Quantizer(spec, seed=5)
    draws = np.concatenate([q.quantize(x)[1:] for _ in range(40)])  # the call count moves on
    assert set(np.unique(draws)) == {1.0, 1.5}
    assert abs(draws.mean() - 1.25) < 0.03  # 1240 draws: sd of the mean 0.007


# ---- a plain cast: ml_dtypes ------------------------------------------------------------------
def test_fp8_cast_is_the_ml_dtypes_cast():
    r = get_recipe("fp8_cast")
    x = spread(9, 500, -30, 20)
    x[:4] = [np.inf, -np.nan, 1e6, -0.0]
    with np.errstate(all="ignore"):
        for role, dt in (("input", ml_dtypes.float8_e4m3fn), ("grad_output", ml_dtypes.float8_e5m2)):
            got = r.make_quantizer(role).quantize(x)
            want = x.astype(dt).astype(np.float32)
            assert np.array_equal(got, want, equal_nan=True)
            assert np.array_equal(np.signbit(got), np.signbit(want))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1,
                max_size=40))  # fmt: skip
def test_current_scaling_property(values):
    x = np.array(values, np.float32)
    q = get_recipe("fp8_current").make_quantizer("input")
    got = q.quantize(x, dtype=np.float64)
    amax = float(np.max(np.abs(x.astype(np.float64))))
    s = so.ref_current_scale(amax, E4M3_MAX)
    inv = float(np.float32(1) / np.float32(s))
    want = [so.q_to_float(so.ref_fp8_quantize(float(v), s, so.E4M3)) * inv for v in x]
    assert got.tolist() == want or all(
        (a == b) or (math.isnan(a) and math.isnan(b)) for a, b in zip(got.tolist(), want, strict=True)
    )
