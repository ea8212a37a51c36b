"""FP8 layers on a hardware accumulation model (fpsim.amp.fp8_gemm, convert_to_fp8(...,
accumulation=...)).

Oracles: the operands quantized independently (ml_dtypes casts of fl32(x * scale), TE's
current scaling computed by hand); each GEMM recomputed from the definition of the block FMA in
exact rational arithmetic (tests/arith_oracle.py, block_fma_reference, run on the quantized
*elements*, each operand in its own format), then the scales applied in float32 as cuBLAS /
CUTLASS do: fl32(acc * fl32(scale_inv_a * scale_inv_b)), the bias added in float32.
"""

import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import fpsim
from fpsim import amp, arith, nn
from fpsim.amp.fp8_gemm import Operand, common_format, scaled_matmul
from fpsim.arith import BlockFMA

sys.path.insert(0, str(Path(__file__).parent))
from arith_oracle import ALL_MODES, block_fma_reference  # noqa: E402

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
FMT = {E4M3: "fp8_e4m3", E5M2: "fp8_e5m2"}


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def data(shape, seed, lo, hi):
    g = np.random.default_rng(seed)
    return (g.standard_normal(shape) * 2.0 ** g.integers(lo, hi, shape)).astype(np.float32)


def ref_current(x, dtype):
    """TE current scaling by hand: s = fl32(max / amax), elements cast(clip(fl32(x * s))),
    scale_inv = fl32(1 / s)."""
    fmax = np.float32(float(ml_dtypes.finfo(dtype).max))
    s = fmax / np.float32(np.max(np.abs(x)))
    el = np.clip(x * s, -fmax, fmax).astype(dtype).astype(np.float32)
    return el, np.float32(1) / s


def ref_gemm(a_el, a_dt, sa, b_el, b_dt, sb, model):
    """(n, K) @ (K, m): the block FMA of ``model`` on the elements, exactly, rounded to fp32,
    then multiplied by fl32(sa * sb) in float32."""
    acc = np.empty((a_el.shape[0], b_el.shape[1]), np.float32)
    for i in range(acc.shape[0]):
        for j in range(acc.shape[1]):
            acc[i, j] = block_fma_reference(a_el[i], b_el[:, j], FMT[a_dt], model, out="fp32",
                                            fmt_b=FMT[b_dt])  # fmt: skip
    if sa is None:
        return acc
    return acc * np.float32(np.float32(sa) * np.float32(sb))


CUSTOM = BlockFMA(block=8, align_bits=6, rounding="nearest_even", acc="fp32", name="narrow8")


@pytest.mark.parametrize(
    "model",
    ["h100_fp8", "h100_fp8_promote128", "b200_fp8", "b200_fp8_mma_sync", "exact_fp32", CUSTOM],
    ids=lambda m: m if isinstance(m, str) else m.name,
)
def test_fp8_current_layer_equals_the_block_fma_reference(model):
    # K = 40 (forward: two blocks of 32), 6 (input gradient), 34 (weight gradient: tokens);
    # wide ranges, so that both E4M3 and E5M2 hold subnormals and zeros
    n, k, m = 34, 40, 6
    w, b = data((m, k), 1, -10, 2), data((m,), 2, -4, 2)
    x, gy = data((n, k), 3, -14, 4), data((n, m), 4, -30, 2)
    lin = nn.Linear(k, m, seed=0)
    lin.weight.data[...] = w
    lin.bias.data[...] = b
    layers = amp.convert_to_fp8(lin, "fp8_current", accumulation=model)
    xt = fpsim.tensor(x, requires_grad=True)
    y = lin(xt)
    y.backward(fpsim.tensor(gy))

    ex, sx = ref_current(x, E4M3)
    ew, sw = ref_current(w, E4M3)
    eg, sg = ref_current(gy, E5M2)
    mdl = arith.get_accumulation(model)
    assert np.any((ex != 0) & (np.abs(ex) < 2.0**-6))  # E4M3 subnormals
    assert np.any((eg != 0) & (np.abs(eg) < 2.0**-14))  # E5M2 subnormals
    y_ref = ref_gemm(ex, E4M3, sx, ew.T, E4M3, sw, mdl) + b
    dx_ref = ref_gemm(eg, E5M2, sg, ew, E4M3, sw, mdl)
    dw_ref = ref_gemm(eg.T, E5M2, sg, ex, E4M3, sx, mdl)
    assert np.array_equal(bits(y.data), bits(y_ref))
    assert np.array_equal(bits(xt.grad.data), bits(dx_ref))
    assert np.array_equal(bits(lin.weight.grad.data), bits(dw_ref))
    assert np.array_equal(lin.bias.grad.data, gy.sum(0, dtype=np.float32))
    q = layers[""].quantizers
    assert (q["input"].scale_inv, q["grad_output"].scale_inv) == (float(sx), float(sg))


def test_h100_fp8_differs_from_fp32_where_the_reference_says():
    """The model is not the fp32 path in disguise: on data whose sums cancel, h100_fp8's
    13-bit accumulator gives other forward outputs than float32 BLAS on the dequantized values,
    and each is the reference's."""
    n, k, m = 4, 64, 4
    w, x = data((m, k), 5, -2, 2), data((n, k), 6, -2, 2)
    outs = {}
    for acc in ("fp32", "h100_fp8"):
        lin = nn.Linear(k, m, bias=False, seed=0)
        lin.weight.data[...] = w
        amp.convert_to_fp8(lin, "fp8_current", accumulation=acc)
        outs[acc] = lin(fpsim.tensor(x)).data
    ex, sx = ref_current(x, E4M3)
    ew, sw = ref_current(w, E4M3)
    deq = (ex * sx) @ (ew * sw).T
    assert np.array_equal(outs["fp32"], deq)
    h100 = ref_gemm(ex, E4M3, sx, ew.T, E4M3, sw, arith.get_accumulation("h100_fp8"))
    assert np.array_equal(outs["h100_fp8"], h100)
    assert np.count_nonzero(outs["fp32"] != outs["h100_fp8"]) > 0


@pytest.mark.parametrize("recipe", ["fp8_delayed", "fp8_cast", "fp8_tensorwise"])
def test_other_per_tensor_recipes_scale_after_the_block_fma(recipe):
    """Delayed scaling (second step: the history's scale), a plain cast (no scale: the model's
    sum is the output) and torchao's tensorwise recipe, forward and input gradient."""
    n, k, m = 6, 40, 4
    w, x, gy = data((m, k), 7, -6, 2), data((n, k), 8, -8, 3), data((n, m), 9, -12, -2)
    lin = nn.Linear(k, m, bias=False, seed=0)
    lin.weight.data[...] = w
    layers = amp.convert_to_fp8(lin, recipe, accumulation="h100_fp8")
    lin(fpsim.tensor(x))  # delayed scaling: the first step records amaxes
    xt = fpsim.tensor(x, requires_grad=True)
    y = lin(xt)
    y.backward(fpsim.tensor(gy))
    q = layers[""].quantizers
    mdl = arith.get_accumulation("h100_fp8")
    refs = []
    for t, role, dt in ((x, "input", E4M3), (w, "weight", E4M3), (gy, "grad_output", E5M2)):
        if recipe == "fp8_cast":
            refs.append((t.astype(dt).astype(np.float32), None))
        else:
            s = np.float32(q[role].scale)
            fmax = np.float32(float(ml_dtypes.finfo(dt).max))
            el = np.clip(t * s, -fmax, fmax).astype(dt).astype(np.float32)
            refs.append((el, np.float32(1) / s))
    (ex, sx), (ew, sw), (eg, sg) = refs
    assert np.array_equal(bits(y.data), bits(ref_gemm(ex, E4M3, sx, ew.T, E4M3, sw, mdl)))
    assert np.array_equal(bits(xt.grad.data), bits(ref_gemm(eg, E5M2, sg, ew, E4M3, sw, mdl)))


DETERMINISTIC = [md for md in ALL_MODES if md != "stochastic"]


@st.composite
def fp8_models(draw):
    block = draw(st.integers(1, 40))
    exact = block == 1 and draw(st.booleans())
    return BlockFMA(
        block=block,
        align_bits=None if exact else draw(st.integers(0, 30)),
        align_rounding=draw(st.sampled_from(["truncate", "nearest_even"])),
        rounding=draw(st.sampled_from(DETERMINISTIC)),
        acc=draw(st.sampled_from(["fp32", "fp32", arith.E8M13, "bf16", "fp16"])),
        normalize_products=draw(st.booleans()),
        products=draw(st.sampled_from(["exact", "exact", "rounded"])),
        min_exponent=draw(st.one_of(st.none(), st.none(), st.integers(-140, -10))),
        input_subnormals=draw(st.booleans()),
        acc_subnormals=draw(st.booleans()),
        promote_every=draw(st.one_of(st.none(), st.integers(1, 3).map(lambda j: j * block))),
    )


def fp8_values(dt, n, rng):
    """n values of an FP8 format, every code equally likely (subnormals, zeros of both signs,
    the largest values, NaN, E5M2's infinities)."""
    return rng.integers(0, 256, n).astype(np.uint8).view(dt).astype(np.float32)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fp8_models(), st.sampled_from([(E4M3, E5M2), (E5M2, E4M3), (E4M3, E4M3), (E5M2, E5M2)]),
       st.integers(0, 40), st.integers(0, 2**32), st.booleans())  # fmt: skip
@example(arith.get_accumulation("h100_fp8"), (E5M2, E4M3), 40, 3, False)
@example(arith.get_accumulation("b200_fp8_mma_sync"), (E4M3, E5M2), 33, 4, True)
def test_element_gemm_equals_the_reference_for_any_fp8_pair(model, dts, K, seed, specials):
    """Mixed formats run in one common format with one operand shifted by a power of two:
    equal to the definition with each operand read in its own format, or refused."""
    rng = np.random.default_rng(seed)
    da, db = dts
    a = fp8_values(da, 2 * K, rng).reshape(2, K)
    b = fp8_values(db, K * 2, rng).reshape(K, 2)
    if not specials:
        a, b = np.nan_to_num(a, nan=1.0, posinf=2.0, neginf=-2.0), np.nan_to_num(b, nan=0.5)
        b = np.clip(b, -57344.0, 57344.0)
    fa, fb = fpsim.get_format(FMT[da]), fpsim.get_format(FMT[db])
    try:
        got = scaled_matmul(Operand(a, a, fa, None), Operand(b, b, fb, None), model)
    except ValueError as exc:  # refused only where the shift could reach the model's limits
        lo = fa.emin + fb.emin - (model.align_bits or 0) - 2
        assert da is not db and "cannot multiply" in str(exc)
        assert model.acc.emin > lo or (model.min_exponent or -1000) > lo
        return
    want = ref_gemm(a, da, None, b, db, None, model)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(bits(np.where(nan, 0, got)), bits(np.where(nan, 0, want)))


def test_common_format_holds_both_formats_shifted():
    f, sa, sb = common_format(fpsim.get_format("fp8_e4m3"), fpsim.get_format("fp8_e5m2"))
    e4 = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float64)
    e5 = np.arange(256, dtype=np.uint8).view(E5M2).astype(np.float64)
    for v, s in ((e4, sa), (e5, sb)):
        fin = v[np.isfinite(v)] * 2.0**s
        assert np.array_equal(np.asarray(fpsim.round_to(fin, f)), fin)
    assert f.emin == -6 and (sa, sb) == (0, 8)


def test_scales_multiply_the_accumulator_once_after_their_float32_product():
    """fl32(acc * fl32(sa * sb)), not fl32(fl32(acc * sa) * sb): 3 * (1 + 2^-12)^2 separates
    them (exactly 3 + 3 * 2^-11 + 3 * 2^-24)."""
    one = np.ones((1, 1), np.float32)
    a = Operand(one * 3, one * 3, fpsim.get_format("fp8_e4m3"), 1 + 2.0**-12)
    b = Operand(one, one, fpsim.get_format("fp8_e4m3"), 1 + 2.0**-12)
    got = float(scaled_matmul(a, b, arith.get_accumulation("h100_fp8"))[0, 0])
    s = np.float32(np.float32(1 + 2.0**-12) * np.float32(1 + 2.0**-12))  # 1 + 2^-11
    assert float(s) == 1 + 2.0**-11
    assert got == float(np.float32(3) * s) == 3 + 3 * 2.0**-11
    assert got != float(np.float32(np.float32(3 * (1 + 2.0**-12)) * np.float32(1 + 2.0**-12)))


def test_fp32_default_is_unchanged_and_explicit():
    w, x = data((4, 40), 10, -4, 2), data((3, 40), 11, -4, 2)
    ys = []
    for kw in ({}, {"accumulation": "fp32"}):
        lin = nn.Linear(40, 4, bias=False, seed=0)
        lin.weight.data[...] = w
        layers = amp.convert_to_fp8(lin, "fp8_current", **kw)
        assert layers[""].model is None and layers[""].recipe.accumulation == "fp32"
        ys.append(lin(fpsim.tensor(x)).data)
    ex, sx = ref_current(x, E4M3)
    ew, sw = ref_current(w, E4M3)
    assert np.array_equal(ys[0], (ex * sx) @ (ew * sw).T) and np.array_equal(ys[0], ys[1])


def test_bad_accumulations_are_refused():
    lin = nn.Linear(32, 4, seed=0)
    for recipe in ("mxfp8", "nvfp4"):
        with pytest.raises(NotImplementedError, match="block"):
            amp.convert_to_fp8(lin, recipe, accumulation="b200_fp8")
    with pytest.raises(ValueError, match="accumulation must be"):
        amp.convert_to_fp8(lin, "fp8_current", accumulation="fp16")
    with pytest.raises(ValueError, match="describes fp16"):
        amp.convert_to_fp8(lin, "fp8_current", accumulation="h100_fp16")
    narrow = BlockFMA(block=4, align_bits=10, acc="fp16", name="fp16acc")
    with pytest.raises(ValueError, match="cannot multiply fp8_e4m3 by fp8_e5m2"):
        amp.convert_to_fp8(lin, "fp8_current", accumulation=narrow)
    stoch = BlockFMA(block=4, align_bits=10, rounding="stochastic", name="sr")
    with pytest.raises(ValueError, match="stochastic"):
        amp.convert_to_fp8(lin, "fp8_current", accumulation=stoch)
    assert "forward" not in vars(lin)  # nothing converted
    with pytest.raises(ValueError, match="accumulation must be"):
        amp.get_gemm_recipe("fp8_current").replace(accumulation=3)


def test_recipe_keeps_a_model_through_its_state():
    preset = arith.get_accumulation("h100_fp8")
    r = amp.get_gemm_recipe("fp8_current").replace(accumulation=preset)
    assert r.accumulation == "h100_fp8"  # a preset is kept by name
    custom = preset.replace(promote_every=64, name="h100_fp8_promote64")
    r2 = amp.get_gemm_recipe("fp8_delayed").replace(accumulation=custom)
    assert "accumulate in h100_fp8_promote64" in str(r2)
    d = json.loads(json.dumps(r2.to_dict()))
    assert amp.GemmRecipe.from_dict(d) == r2
    lin = nn.Linear(32, 4, seed=0)
    layers = amp.convert_to_fp8(lin, r2)
    lin(fpsim.randn(2, 32, generator=0))
    state = json.loads(json.dumps(layers.state_dict()))
    lin2 = nn.Linear(32, 4, seed=0)
    layers2 = amp.convert_to_fp8(lin2, "fp8_delayed", accumulation=custom)
    layers2.load_state_dict(state)
    assert layers2[""].model == custom and layers2[""].calls == 1
