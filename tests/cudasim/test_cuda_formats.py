"""The CUDA back end on the formats of the property model: FP4, FP6, E8M0, the fnuz fp8s, the
IEEE-style fp8s, P3109 (signed/unsigned, extended/finite) and a custom format.

Same set-up as test_cuda_kernels.py (run in its own process; numba's CUDA simulator unless
``NUMBA_ENABLE_CUDASIM=0``). ``round_device`` and ``convert_device`` must give the CPU kernel's
bits exactly, in every rounding mode (stochastic included, for the same seed), with and without
subnormals and saturation, for rounding, encoding (a format layout out) and decoding (a format
layout in); round to nearest even is also checked against the exact definition
(tests/oracle.py).
"""

import math
import os

import numpy as np
import pytest
from numba import cuda
from oracle import ref_decode, ref_round

import fpsim
from fpsim import Format
from fpsim.kernels import cpu
from fpsim.kernels import cuda as fcuda

pytestmark = pytest.mark.cudasim

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("0", "")

FORMATS = [
    fpsim.fp4_e2m1, fpsim.fp6_e2m3, fpsim.fp6_e3m2, fpsim.e8m0, fpsim.fp8_e4m3fnuz,
    fpsim.fp8_e5m2fnuz, fpsim.fp8_e4m3b11fnuz, fpsim.fp8_e4m3_ieee, fpsim.fp8_e3m4,
    fpsim.p3109(8, 3), fpsim.p3109(8, 1), fpsim.p3109(8, 4, signed=False),
    fpsim.p3109(8, 5, domain="finite"), fpsim.p3109(6, 2, signed=False, domain="finite"),
    Format(8, 0, has_inf=True, nan="negzero"),  # IEEE-like thresholds, NaN at -0's code
]  # fmt: skip
IDS = [f.name for f in FORMATS]
MODES = list(fpsim.ROUNDING_MODES)
INT_OF = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}
LAYOUT32, LAYOUT64 = fpsim.fp32.record, fpsim.fp64.record


def host_array(x):
    """A device copy of ``x`` (under the simulator, a host array works as one)."""
    return cuda.to_device(np.ascontiguousarray(x))


def inputs(f: Format, dtype, seed: int = 0) -> np.ndarray:
    """Every other value of the format, ties between neighbours and the float neighbours of
    ties, max and beyond, the smallest value and half of it, signed zeros, infinities, NaNs, and
    random values across the range: a few hundred."""
    rng = np.random.default_rng(seed)
    v = np.array([ref_decode(c, f) for c in range(f.num_codes)])
    v = np.unique(v[np.isfinite(v)])
    mids = (v[1:] + v[:-1]) / 2
    mids = rng.choice(mids, min(mids.size, 48), replace=False)
    tiny = f.smallest_subnormal
    edge = [f.max, f.max * 1.25, f.max * 2, 1e30, tiny, tiny / 2, tiny * 0.75, f.min_normal,
            0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.0, 0.75, -1.0]  # fmt: skip
    rand = rng.choice([-1.0, 1.0], 64) * np.exp2(
        rng.uniform(f.emin - f.man_bits - 3, f.emax + 2, 64)
    )
    x = np.concatenate([v[::2], -v[1::4], mids, -mids[:16], edge, [-e for e in edge[:8]], rand])
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    near = np.concatenate([np.nextafter(x[: v.size // 2 + mids.size], dtype(0)),
                           np.nextafter(x[: v.size // 2 + mids.size], dtype(np.inf))])  # fmt: skip
    return np.concatenate([x, near[::3]])


def assert_same_bits(x, got, want):
    it = INT_OF[x.dtype]
    bad = got.view(it) != want.view(it)
    idx = np.flatnonzero(bad)[:6]
    detail = [(x[i], got[i], want[i]) for i in idx]
    assert not bad.any(), f"{int(bad.sum())} of {x.size} differ, e.g. {detail}"


def on_device(x, f, mode="nearest_even", subnormals=True, saturate=False, seed=0):
    out = fcuda.round_device(host_array(x), f, fpsim.ROUNDING_MODES[mode], int(subnormals),
                             int(saturate), seed)  # fmt: skip
    return out.copy_to_host()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("f", FORMATS, ids=IDS)
def test_round_device_nearest_even_matches_cpu_and_the_definition(f, dtype):
    x = inputs(f, dtype)
    got = on_device(x, f)
    assert_same_bits(x, got, fpsim.round_to(x, f))
    want = np.array([ref_round(float(v), f) for v in x]).astype(dtype)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert_same_bits(x[~nan], got[~nan], want[~nan])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f", FORMATS, ids=IDS)
def test_round_device_every_mode_matches_cpu(f, mode):
    x = inputs(f, np.float32, seed=1)
    seed = 4242 if mode == "stochastic" else 0
    got = on_device(x, f, mode, seed=seed)
    assert_same_bits(
        x, got, fpsim.round_to(x, f, mode, seed=seed if mode == "stochastic" else None)
    )


@pytest.mark.parametrize("subnormals, saturate", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "stochastic"])
@pytest.mark.parametrize("f", [fpsim.fp4_e2m1, fpsim.e8m0, fpsim.fp8_e5m2fnuz, fpsim.p3109(8, 3),
                               fpsim.p3109(8, 2, signed=False)], ids=lambda f: f.name)  # fmt: skip
def test_round_device_flags_match_cpu(f, mode, subnormals, saturate):
    x = inputs(f, np.float64, seed=2)
    seed = 99 if mode == "stochastic" else None
    got = on_device(x, f, mode, subnormals, saturate, seed=seed or 0)
    assert_same_bits(x, got, fpsim.round_to(x, f, mode, subnormals, saturate, seed=seed))


@pytest.mark.parametrize("f", FORMATS, ids=IDS)
def test_convert_device_encodes_and_decodes_like_the_cpu_kernel(f):
    # encode: float64 layout -> round to f -> f's layout (codes, as int64)
    x = inputs(f, np.float64, seed=3)
    # A format without NaN has no code for NaN (fpsim.to_bits refuses it): leave NaN inputs out
    enc = ~np.isnan(x) if not f.has_nan else np.ones(x.size, bool)
    x = x[enc]
    src = x.view(np.int64)
    for mode, seed in ((fpsim.ROUNDING_MODES["nearest_even"], 0),
                       (fpsim.ROUNDING_MODES["down"], 0),
                       (fpsim.ROUNDING_MODES["stochastic"], 77)):  # fmt: skip
        params = (LAYOUT64, f.record, f.record, mode, 1, 0, seed)
        want = np.empty_like(src)
        cpu.convert_array(src, want, params)
        d_out = cuda.device_array(src.size, np.int64)
        fcuda.convert_device(host_array(src), d_out, params)
        got = d_out.copy_to_host()
        np.testing.assert_array_equal(got, want)
    # the nearest-even codes are fpsim.to_bits'
    params = (LAYOUT64, f.record, f.record, 0, 1, 0, 0)
    d_out = cuda.device_array(src.size, np.int64)
    fcuda.convert_device(host_array(src), d_out, params)
    codes = d_out.copy_to_host() & ((1 << f.bits) - 1)
    np.testing.assert_array_equal(codes, fpsim.to_bits(x, f).astype(np.int64))
    # decode every code into float32 and float64 layouts
    codes = np.arange(f.num_codes, dtype=np.int64)
    for layout, dt in ((LAYOUT32, np.float32), (LAYOUT64, np.float64)):
        params = (f.record, layout, layout, 0, 1, 0, 0)
        d_out = cuda.device_array(codes.size, INT_OF[np.dtype(dt)])
        fcuda.convert_device(host_array(codes), d_out, params)
        got = d_out.copy_to_host().view(dt)
        want = np.array([ref_decode(int(c), f) for c in codes]).astype(dt)
        nan = np.isnan(want)
        assert (np.isnan(got) == nan).all()
        assert_same_bits(want[~nan], got[~nan], want[~nan])
        assert_same_bits(want, got, fpsim.from_bits(codes, f, dtype=dt))


def test_documented_choices_on_the_device():
    """The choices tests/test_formats_today.py pins, computed on the GPU."""
    x = np.array([3.0, 0.75, 1.5 * 2.0**127, 2.0**-140, 0.0, -1.0], np.float32)
    got = on_device(x, fpsim.e8m0)
    want = np.array([2.0, 0.5, 2.0**127, 2.0**-127, np.nan, np.nan], np.float32)
    assert ((got == want) | (np.isnan(got) & np.isnan(want))).all()
    x = np.array([np.nan, np.inf, -np.inf, 100.0, -0.0], np.float32)
    got = on_device(x, fpsim.fp4_e2m1)
    assert math.isnan(got[0]) and list(got[1:4]) == [6.0, -6.0, 6.0] and np.signbit(got[4])
    got = on_device(np.array([-0.0, -1e-30], np.float32), fpsim.fp8_e4m3fnuz)
    assert not np.signbit(got).any() and (got == 0).all()
