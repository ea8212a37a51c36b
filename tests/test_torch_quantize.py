"""fpsim.torch.quantize: the forward pass equals ml_dtypes / numpy casts (float32 input) and the
exact Fraction rounder (other modes), block schemes and scaled casts equal scaling_oracle; the
backward pass is straight through (or rounds the gradient); dtype and device are kept."""

import math

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import scaling_oracle as so  # noqa: E402
from oracle import ref_round  # noqa: E402

from fpsim.amp.recipes import get_recipe  # noqa: E402
from fpsim.torch import quantize  # noqa: E402
from fpsim.torch.quantize import _per_tensor_on_device, quantize_with  # noqa: E402

CASTS = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
         "fp8_e5m2": ml_dtypes.float8_e5m2, "fp4_e2m1": ml_dtypes.float4_e2m1fn}  # fmt: skip


def values(seed=0, n=2000):
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        x = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 20, n)).astype(np.float32)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 65520.0]
    return x


@pytest.mark.parametrize("fmt", list(CASTS))
def test_forward_equals_ml_dtypes_casts(fmt):
    x = values(1)
    if fmt == "fp4_e2m1":
        x = x[np.isfinite(x)]  # ml_dtypes' fp4 turns NaN into -0; fpsim keeps NaN (documented)
    t = torch.from_numpy(x.copy())
    y = quantize(t, fmt)
    assert y.dtype == torch.float32 and y.shape == t.shape
    with np.errstate(all="ignore"):
        want = x.astype(CASTS[fmt]).astype(np.float32)
    got = y.numpy()
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))


@pytest.mark.parametrize("mode", ["toward_zero", "up", "down", "nearest_away"])
def test_other_modes_equal_the_fraction_rounder(mode):
    x = values(2, 300)[6:]
    y = quantize(torch.from_numpy(x.copy()), "fp8_e5m2", rounding=mode, saturate=True).numpy()
    want = [ref_round(float(v), "fp8_e5m2", mode, saturate=True) for v in x]
    assert y.tolist() == [float(np.float32(w)) for w in want]


def test_saturate_subnormals_and_stochastic():
    t = torch.tensor([500.0, -1e9, 2.0**-8, 3e-3])
    assert quantize(t, "fp8_e4m3", saturate=True).tolist() == [448.0, -448.0, 2.0**-8, 2.0**-8]
    assert quantize(t, "fp8_e4m3", subnormals=False).tolist()[2:] == [0.0, 0.0]
    x = torch.full((4000,), 1.0 + 2.0**-9)  # a quarter of the way from 1 to bf16's next value
    a = quantize(x, "bf16", rounding="stochastic", seed=7)
    b = quantize(x, "bf16", rounding="stochastic", seed=7)
    assert torch.equal(a, b) and set(a.unique().tolist()) == {1.0, 1.0078125}
    assert abs(float(a.double().mean()) - (1 + 2.0**-9)) < 6 * 2.0**-7 * math.sqrt(0.25 / 4000)


def test_dtype_and_device_are_kept_and_misfits_refused():
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        t = torch.linspace(-3, 3, 64, dtype=dt)
        y = quantize(t, "fp8_e5m2")
        assert y.dtype == dt and y.device == t.device
        want = t.float().numpy().astype(ml_dtypes.float8_e5m2).astype(np.float32)
        assert np.array_equal(y.float().numpy(), want)
    with pytest.raises(ValueError, match="do not all fit in torch.bfloat16"):
        quantize(torch.ones(3, dtype=torch.bfloat16), "fp16")
    with pytest.raises(TypeError, match="float tensors"):
        quantize(torch.ones(3, dtype=torch.int32), "fp16")
    with pytest.raises(ValueError, match="rounding mode"):
        quantize(torch.ones(3), "fp16", rounding="sideways")
    with pytest.raises(ValueError, match="stores fp4_e2m1"):
        quantize(torch.ones(32), "fp16", scheme="mxfp4")


def test_gradient_is_straight_through_or_rounded():
    x = torch.tensor(values(3, 200)[6:], requires_grad=True)
    up = torch.tensor(values(4, 200)[6:])
    quantize(x, "fp8_e4m3").backward(up)
    assert torch.equal(x.grad, up)  # straight through, bit for bit
    x.grad = None
    quantize(x, "fp16", grad="fp8_e5m2").backward(up)
    with np.errstate(all="ignore"):
        want = up.numpy().astype(ml_dtypes.float8_e5m2).astype(np.float32)
    assert np.array_equal(x.grad.numpy(), want, equal_nan=True)


def test_block_schemes_equal_the_oracle():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 64)) * 2.0 ** rng.integers(-8, 8, (3, 64))).astype(np.float32)
    y = quantize(torch.from_numpy(x.copy()), "mxfp4").numpy()
    scales, elems = so.ref_mx_quantize(x.ravel(), so.E2M1, "floor")
    want = [so.ref_mx_dequantize(scales[i // 32], [e])[0] for i, e in enumerate(elems)]
    assert y.ravel().tolist() == want
    # along axis 0, with torchao's and NVIDIA's rceil rule
    y0 = quantize(torch.from_numpy(x.T.copy()), scheme="mxfp8", axis=0,
                  scale_rounding="rceil").numpy().T  # fmt: skip
    scales, elems = so.ref_mx_quantize(x.ravel(), so.E4M3, "rceil")
    want = [so.ref_mx_dequantize(scales[i // 32], [e])[0] for i, e in enumerate(elems)]
    assert y0.ravel().tolist() == want


def test_current_scaling_and_a_recipe_quantizer():
    x = values(6, 256)[6:]
    y = quantize(torch.from_numpy(x.copy()), "fp8_e4m3", scheme="current").numpy()
    s = so.ref_current_scale(float(np.max(np.abs(x))), 448.0)
    inv = float(np.float32(1) / np.float32(s))
    want = [np.float32(so.q_to_float(so.ref_fp8_quantize(float(v), s, so.E4M3)) * inv) for v in x]
    assert y.tolist() == [float(w) for w in want]
    q = get_recipe("fp8_delayed").make_quantizer("input")
    y1 = quantize(torch.from_numpy(x.copy()), scheme=q)
    assert q.scale == 1.0 and q.amax_history[0] == np.float32(np.max(np.abs(x)))
    want = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(y1.numpy(), want)  # the first step's scale, 1: a saturating cast


@pytest.mark.parametrize("recipe, role", [("fp8_current", "input"), ("fp8_delayed", "grad_output"),
                                          ("fp8_cast", "grad_output")])  # fmt: skip
def test_the_device_path_equals_the_numpy_path(recipe, role):
    """The GPU path (torch ops + fpsim's rounding where the tensor lives) run on CPU tensors:
    the same numbers as Quantizer.quantize on a numpy view."""
    x = torch.from_numpy(values(8, 500)[6:])
    q1 = get_recipe(recipe).make_quantizer(role)
    q2 = get_recipe(recipe).make_quantizer(role)
    for _ in range(3):
        a = quantize_with(x, q1)
        if q2.per_tensor:
            b = _per_tensor_on_device(x, q2)
        else:
            from fpsim.core import round_to

            b = round_to(x, q2.spec.element, saturate=q2.spec.saturate)
            q2.next_seed()
        assert torch.equal(a, b)
        q1.update()
        q2.update()
        assert q1.scale == q2.scale
