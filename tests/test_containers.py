"""The result container rule of round_to (fpsim.containers): numpy dtypes, Python numbers, torch.

``fits`` is checked by brute force against numpy/ml_dtypes casts of every value of the format
(computed field by field with exact fractions), independently of ``Format.fits_in``.
"""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpsim

FLOATS = [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
          ml_dtypes.float8_e4m3, np.float32, np.float64]  # fmt: skip
SMALL = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", fpsim.Format(3, 2), fpsim.Format(4, 3),
         fpsim.Format(5, 3, bias=20), fpsim.Format(6, 4, style="fn")]  # fmt: skip


def every_value(f) -> list[float]:
    """Every finite value and ±inf (if any) of a format of <= 16 bits, from the fields."""
    out = []
    for biased in range(f.max_exp_field + 1):
        for frac in range(1 << f.man_bits):
            if biased == f.max_exp_field and f.style == "ieee":
                continue
            if biased == f.max_exp_field and frac == (1 << f.man_bits) - 1:
                continue  # fn: the NaN code
            if biased == 0:
                v = Fraction(frac) * Fraction(2) ** (f.emin - f.man_bits)
            else:
                v = (1 + Fraction(frac, 1 << f.man_bits)) * Fraction(2) ** (biased - f.bias)
            out += [float(v), -float(v)]
    return out + ([math.inf, -math.inf] if f.style == "ieee" else [])


def holds(dtype, f) -> bool:
    f = fpsim.get_format(f)
    d = np.dtype(dtype)
    if f.bits > 16:  # fp32, tf32 and fp64, by hand: only float64 holds fp64, float32 the others
        return d.itemsize == 8 or (d == np.float32 and f.name != "fp64")
    v = np.array(every_value(f))
    with np.errstate(all="ignore"):
        back = v.astype(dtype).astype(np.float64)
    return bool((back == v).all())


@pytest.mark.parametrize("f", SMALL, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_fits_in_by_brute_force(dtype, f):
    assert fpsim.get_format(f).fits_in(dtype) == holds(dtype, f)


@pytest.mark.parametrize("f", SMALL + ["fp32", "tf32", "fp64"], ids=str)
@pytest.mark.parametrize("dtype", FLOATS + [np.int64, np.int8, np.uint16, np.bool_, ">f4", ">f2"],
                         ids=lambda d: np.dtype(d).str)  # fmt: skip
def test_numpy_result_dtype_rule(dtype, f):
    f = fpsim.get_format(f)
    x = np.array([0, 1, 3, 7], dtype=dtype)
    r = fpsim.round_to(x, f)
    d = np.dtype(dtype).newbyteorder("=")
    standard = [np.float16, np.float32, np.float64]
    if d.kind in "fV" and holds(d, f):
        want = d  # the input dtype holds every value of the format
    else:  # the smallest standard float that holds it
        want = next(np.dtype(s) for s in standard if holds(s, f))
    assert r.dtype == want
    assert (r.astype(np.float64) == x.astype(np.float64)).all()  # 0, 1, 3, 7 are exact


def test_values_follow_the_oracle_in_narrow_containers():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(2000) * 2.0 ** rng.integers(-12, 12, 2000)).astype(np.float16)
    r = fpsim.round_to(x, "fp8_e4m3")
    assert r.dtype == np.float16
    want = x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float16)
    assert ((r == want) | (np.isnan(r) & np.isnan(want))).all()
    b = x.astype(ml_dtypes.bfloat16)
    rb = fpsim.round_to(b, "fp8_e5m2")
    assert rb.dtype == ml_dtypes.bfloat16
    assert (rb.astype(np.float32) == b.astype(np.float32).astype(ml_dtypes.float8_e5m2).astype(np.float32)).all()


def test_python_numbers_and_lists():
    assert isinstance(fpsim.round_to(0.1, "fp16"), float)
    assert isinstance(fpsim.round_to(3, "fp16"), float)
    assert fpsim.round_to([0.1, 1], "fp16").dtype == np.float64
    assert isinstance(fpsim.round_to(np.float16(0.1), "fp8_e4m3"), np.float16)
    assert isinstance(fpsim.round_to(np.int64(2**60 + 2**36 + 1), "fp32"), np.float32)
    assert fpsim.round_to(np.float32(0.1), "fp64") == np.float32(0.1)  # float32 in, fp64: float64


# ---- torch ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("tdt, fmt, want", [
    ("bfloat16", "fp8_e4m3", "bfloat16"), ("bfloat16", "fp16", "float16"),
    ("float16", "fp8_e5m2", "float16"), ("float16", "bf16", "float32"),
    ("float32", "bf16", "float32"), ("float32", "fp64", "float64"),
    ("float64", "fp16", "float64"), ("int64", "fp32", "float32"),
])  # fmt: skip
def test_torch_in_torch_out(torch, tdt, fmt, want):
    rng = np.random.default_rng(1)
    v = rng.standard_normal(64) * 2.0 ** rng.integers(-10, 10, 64)
    if tdt == "int64":
        v = np.round(v * 1000)
    t = torch.tensor(v, dtype=getattr(torch, tdt), requires_grad=tdt != "int64")
    r = fpsim.round_to(t, fmt)
    assert isinstance(r, torch.Tensor) and r.dtype == getattr(torch, want)
    assert r.device == t.device and not r.requires_grad and r.shape == t.shape
    # the values: the oracle rounding (numpy/ml_dtypes) of the tensor's exact values
    exact = t.detach().to(torch.float64).numpy()
    oracle = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp16": np.float16, "fp8_e5m2": ml_dtypes.float8_e5m2,
              "bf16": ml_dtypes.bfloat16, "fp64": np.float64, "fp32": np.float32}[fmt]  # fmt: skip
    with np.errstate(all="ignore"):
        src = exact if fmt in ("fp64", "fp32") or tdt == "int64" else exact.astype(np.float32)
        want_vals = src.astype(oracle).astype(np.float64)
    got = r.to(torch.float64).numpy()
    assert ((got == want_vals) | (np.isnan(got) & np.isnan(want_vals))).all()


@pytest.mark.parametrize("tdt, np_dt, ints", [
    ("float16", np.float16, "int16"), ("bfloat16", ml_dtypes.bfloat16, "int16"),
    ("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "uint8"),
])  # fmt: skip
def test_host_nans_gives_each_nan_the_hosts_bits(torch, tdt, np_dt, ints):
    """The GPU branch of torch_apply narrows on the device, where every NaN becomes the GPU's
    canonical one (sign lost: seen on an H100); host_nans sets the bits numpy / ml_dtypes give
    (the sign kept), so results agree bit for bit across devices. Here the device's NaNs are
    imitated on the CPU by overwriting them."""
    from fpsim.containers import host_nans

    if not hasattr(torch, tdt):
        pytest.skip(f"this torch has no {tdt}")
    for wide_dt in (torch.float32, torch.float64):
        wide = torch.tensor([1.5, math.nan, -math.nan, -0.0, 0.25, -math.nan], dtype=wide_dt)
        narrow = wide.to(getattr(torch, tdt))
        bits = narrow.view(getattr(torch, ints))
        bits[torch.isnan(wide)] = 0x7F  # a canonical NaN of its own, without the sign
        got = host_nans(wide, narrow, np.dtype(np_dt))
        want = wide.numpy().astype(np_dt)
        assert np.array_equal(got.view(getattr(torch, ints)).numpy(), want.view(ints))
        assert (want.view(ints)[[2, 5]] != want.view(ints)[1]).all()  # the sign is in the bits


def test_torch_zero_dim_and_no_copy_view(torch):
    from fpsim.containers import torch_to_numpy

    t = torch.tensor(0.1, dtype=torch.float64)
    r = fpsim.round_to(t, "fp16")
    assert r.shape == () and r.dtype == torch.float64 and r.item() == float(np.float16(0.1))
    b = torch.randn(8).to(torch.bfloat16)
    a = torch_to_numpy(b)
    assert a.dtype == ml_dtypes.bfloat16 and a.ctypes.data == b.data_ptr()  # a view, no copy


# ---- the same rule for fpsim.arith's results --------------------------------------------------


@pytest.mark.parametrize("f", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp32"], ids=str)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_arith_results_follow_the_rule(dtype, f):
    from fpsim import arith

    x = np.array([1, 0.5, 3, 0.25], dtype=dtype)
    d = np.dtype(dtype)
    want = d if holds(d, f) else next(np.dtype(s) for s in (np.float16, np.float32, np.float64)
                                      if holds(s, f))  # fmt: skip
    for r in (arith.add(x, x, f), arith.mul(x, 2.0, f), arith.neg(x, f),
              arith.matmul(x.reshape(2, 2), x.reshape(2, 2), f, acc="fp32", order="sequential"),
              arith.sum(x.reshape(2, 2), f, axis=0)):  # fmt: skip
        assert r.dtype == want
    # values: small exact sums and products of these numbers, by hand
    assert arith.add(x, x, f).astype(np.float64).tolist() == [2, 1, 6, 0.5]
