"""The CUDA back end (``fpsim.kernels.cuda``) against independent oracles and the CPU kernel.

Run in its own process (``python -m pytest tests/cudasim``): ``conftest.py`` turns on numba's
CUDA simulator unless ``NUMBA_ENABLE_CUDASIM`` is already set, so the same tests run on a real
GPU with ``NUMBA_ENABLE_CUDASIM=0``. The simulator runs every GPU thread as a Python thread, so
the arrays here are small (a few thousand elements at most).

Oracles: numpy's float16 cast and ml_dtypes' bfloat16 / float8 casts (correctly rounded, ties to
even) for round-to-nearest-even; for every other mode and option, the CPU kernel
(:func:`fpsim.round_to` on host arrays) and the pure-Python reference (``backend="python"``),
which must agree with the GPU bit for bit -- stochastic rounding included, for the same seed.
"""

import os

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

import fpsim
from fpsim import Format, bf16, fp8_e4m3, fp8_e5m2, fp16
from fpsim.kernels import cpu, scalar
from fpsim.kernels import cuda as fcuda

pytestmark = pytest.mark.cudasim

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("0", "")

E4M3_IEEE = Format(4, 3, name="e4m3_ieee")  # the textbook 8-bit format: inf and NaN, max 240

# format -> ml_dtypes / numpy dtype with exactly its semantics (the round-to-nearest oracle)
ORACLE = {
    fp16: np.dtype(np.float16),
    bf16: np.dtype(ml_dtypes.bfloat16),
    fp8_e4m3: np.dtype(ml_dtypes.float8_e4m3fn),
    fp8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    E4M3_IEEE: np.dtype(ml_dtypes.float8_e4m3),
}
FORMATS = list(ORACLE)
FMT_IDS = [f.name for f in FORMATS]
MODES = list(fpsim.ROUNDING_MODES)
INT_OF = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}


# ---- device arrays ---------------------------------------------------------------------------
class CAIArray:
    """A minimal third-party CUDA array: it only exposes ``__cuda_array_interface__`` (like CuPy
    arrays or PyTorch CUDA tensors). On a GPU it wraps a numba device array; under the simulator,
    where "device" memory is host memory, it wraps a numpy array (the pointer is a host one)."""

    def __init__(self, host, index=None):
        host = np.asarray(host)
        self._keep = host if SIMULATED else cuda.to_device(host)
        if index is not None:  # a view, e.g. a non-contiguous slice
            self._keep = self._keep[index]

    @property
    def __cuda_array_interface__(self):
        if SIMULATED:
            a = self._keep
            return {
                "shape": a.shape,
                "typestr": a.dtype.str,
                "data": (a.ctypes.data, False),
                "strides": None if a.flags.c_contiguous else a.strides,
                "version": 3,
                "stream": None,
            }
        return self._keep.__cuda_array_interface__


def on_device(x, fmt, rounding="nearest_even", subnormals=True, saturate=False, seed=None):
    """Round the host array ``x`` on the GPU through the public API; return the host copy."""
    out = fpsim.round_to(CAIArray(x), fmt, rounding, subnormals, saturate, seed)
    assert hasattr(out, "copy_to_host"), f"round_to did not dispatch to CUDA: {type(out)}"
    res = out.copy_to_host()
    assert res.dtype == x.dtype and res.shape == x.shape
    return res


# ---- comparisons -----------------------------------------------------------------------------
def _report(x, got, want, bad):
    idx = np.flatnonzero(bad)[:8]
    it = INT_OF[x.dtype]
    lines = [
        f"  x={x.flat[i]!r} ({int(x.view(it).flat[i]) & ((1 << 8 * x.itemsize) - 1):#x}): "
        f"got {got.flat[i]!r}, want {want.flat[i]!r}"
        for i in idx
    ]
    return f"{int(bad.sum())} of {x.size} differ, e.g.\n" + "\n".join(lines)


def assert_same_bits(x, got, want):
    """Identical bit patterns, NaN payloads and signed zeros included (same code, same bits)."""
    it = INT_OF[x.dtype]
    bad = got.view(it) != want.view(it)
    assert not bad.any(), _report(x, got, want, bad)


def assert_same_values(x, got, want):
    """Identical bits except that any NaN matches any NaN (oracles keep NaN payloads)."""
    it = INT_OF[x.dtype]
    gn, wn = np.isnan(got), np.isnan(want)
    bad = (gn != wn) | (~wn & (got.view(it) != want.view(it)))
    assert not bad.any(), _report(x, got, want, bad)


def oracle_round(x, fmt):
    """Round-to-nearest-even by numpy / ml_dtypes: a cast to the format and back."""
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(ORACLE[fmt]).astype(x.dtype)


# ---- inputs ----------------------------------------------------------------------------------
def pinned_values(fmt):
    """Specials and boundary cases of the format, as Python floats (all exact in float32)."""
    m, emin, emax = fmt.man_bits, fmt.emin, fmt.emax
    f32max = float(np.finfo(np.float32).max)
    f32tiny = float(np.finfo(np.float32).smallest_subnormal)
    v = [
        0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan,
        65504.0, 65519.99, 65520.0, -65520.0, 65536.0,
        2.0**-24, 2.0**-25, float(np.nextafter(np.float32(2.0**-25), np.float32(1))), -(2.0**-25),
        f32max, -f32max, f32tiny, -f32tiny, 1.0, -1.0, 0.1, 1 / 3,
        fmt.max, -fmt.max, fmt.min_normal, fmt.smallest_subnormal, fmt.smallest_subnormal / 2,
        448.0, 464.0, 480.0, 240.0, 248.0, 57344.0, 61440.0, 3.3895313892515355e38,
    ]  # fmt: skip
    # Ties (exact midpoints between neighbours) in several binades, kept part even and odd,
    # and the float32 neighbours on either side of each tie.
    for e in sorted({emin, emin + 1, -1, 0, 1, emax - 1, emax}):
        for s in (1 << m, (1 << m) + 1, (1 << m) + 2, (1 << (m + 1)) - 2, (1 << (m + 1)) - 1):
            t = (s + 0.5) * 2.0 ** (e - m)
            if t < f32max:
                t32 = np.float32(t)
                v += [t, -t, float(np.nextafter(t32, np.float32(0))),
                      float(np.nextafter(t32, np.float32(np.inf)))]  # fmt: skip
    # Ties in the subnormal range, half the smallest subnormal included (a tie with zero).
    for k in range(4):
        t = (k + 0.5) * 2.0 ** (emin - m)
        v += [t, -t]
    return v


def float32_inputs(fmt, n_random=768, seed=0):
    """Pinned cases, random bit patterns, and random values across the format's range."""
    rng = np.random.default_rng(seed)
    pinned = np.array(pinned_values(fmt), dtype=np.float32)
    patterns = rng.integers(0, 1 << 32, n_random, dtype=np.uint64).astype(np.uint32)
    exps = rng.integers(fmt.emin - fmt.man_bits - 3, fmt.emax + 2, n_random)
    inrange = np.ldexp(1 + rng.random(n_random), exps) * rng.choice([-1.0, 1.0], n_random)
    with np.errstate(over="ignore"):
        inrange = inrange.astype(np.float32)
    return np.concatenate([pinned, patterns.view(np.float32), inrange])


def float64_inputs(fmt, n_random=384, seed=1):
    rng = np.random.default_rng(seed)
    pinned = np.array(pinned_values(fmt), dtype=np.float64)
    m = fmt.man_bits
    extra = np.array([
        1e300, -1e300, 1e-300, 2.0**-1074, np.finfo(np.float64).max,
        # double-rounding traps: a tie once rounded to float32, not a tie in float64
        1 + 2.0**-(m + 1) + 2.0**-40, 1 + 2.0**-(m + 1) - 2.0**-40,
        -(1 + 2.0**-(m + 1) + 2.0**-45), (1 + 3 * 2.0**-(m + 1) + 2.0**-50) * 2.0**fmt.emin,
    ])  # fmt: skip
    patterns = rng.integers(0, 1 << 63, n_random, dtype=np.int64).view(np.float64)
    patterns = patterns * rng.choice([-1.0, 1.0], n_random)
    exps = rng.integers(fmt.emin - fmt.man_bits - 3, fmt.emax + 2, n_random)
    inrange = np.ldexp(1 + rng.random(n_random), exps) * rng.choice([-1.0, 1.0], n_random)
    return np.concatenate([pinned, extra, patterns, inrange])


# ---- round to nearest even: the independent oracles ------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
def test_float32_nearest_even_matches_oracle_and_cpu(fmt):
    x = float32_inputs(fmt)
    got = on_device(x, fmt)
    assert_same_values(x, got, oracle_round(x, fmt))
    assert_same_bits(x, got, fpsim.round_to(x, fmt))


def test_pinned_fp16_cases():
    above = np.nextafter(np.float32(2.0**-25), np.float32(1))  # just above half the tiniest
    x = np.array([65504, 65519.99, 65520, 2.0**-24, 2.0**-25, above, -(2.0**-25)], np.float32)
    got = on_device(x, fp16)
    want = np.array([65504, 65504, np.inf, 2.0**-24, 0.0, 2.0**-24, -0.0], dtype=np.float32)
    assert_same_bits(x, got, want)


@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
def test_float64_input_matches_cpu_and_python_reference(fmt):
    x = float64_inputs(fmt)
    got = on_device(x, fmt)
    assert_same_bits(x, got, fpsim.round_to(x, fmt))
    assert_same_bits(x, got, fpsim.round_to(x, fmt, backend="python"))
    if fmt is fp16:  # numpy's float64 -> float16 cast is correctly rounded, directly
        assert_same_values(x, got, oracle_round(x, fmt))


# ---- every mode and option: bit-identical to the CPU kernel ----------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
def test_rounding_modes_match_cpu(fmt, mode):
    x = float32_inputs(fmt, n_random=192, seed=MODES.index(mode))
    seed = 12345 if mode == "stochastic" else None
    got = on_device(x, fmt, mode, seed=seed)
    assert_same_bits(x, got, fpsim.round_to(x, fmt, mode, seed=seed))


@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "stochastic"])
@pytest.mark.parametrize("subnormals, saturate", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("fmt", [fp16, fp8_e4m3, E4M3_IEEE], ids=["fp16", "fp8_e4m3", "e4m3"])
def test_subnormals_and_saturate_match_cpu(fmt, subnormals, saturate, mode):
    x = float32_inputs(fmt, n_random=96, seed=7)
    got = on_device(x, fmt, mode, subnormals, saturate, seed=99)
    want = fpsim.round_to(x, fmt, mode, subnormals, saturate, seed=99)
    assert_same_bits(x, got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stochastic_float64_and_multiblock_indexing(dtype):
    """Element i uses random62(seed, i): several blocks, both containers, two seeds."""
    x = np.linspace(-3, 3, 3 * fcuda.THREADS + 17).astype(dtype) + dtype(1 / 3)
    runs = {}
    for seed in (1, 2**62 + 5):
        got = on_device(x, bf16, "stochastic", seed=seed)
        assert_same_bits(x, got, fpsim.round_to(x, bf16, "stochastic", seed=seed))
        down = fpsim.round_to(x, bf16, "down")
        up = fpsim.round_to(x, bf16, "up")
        assert np.all((got == down) | (got == up))
        runs[seed] = got
    assert not np.array_equal(runs[1], runs[2**62 + 5])


def test_python_reference_agrees_for_stochastic_float64():
    x = float64_inputs(fp8_e5m2, n_random=64)
    got = on_device(x, fp8_e5m2, "stochastic", seed=2024)
    assert_same_bits(x, got, fpsim.round_to(x, fp8_e5m2, "stochastic", seed=2024, backend="python"))


# ---- the low-level entry point ---------------------------------------------------------------
LAYOUT32, LAYOUT64 = fpsim.fp32.record, fpsim.fp64.record


def _layout(f):
    return f.record


def test_convert_device_encode_decode_match_cpu():
    """to_bits / from_bits style conversions (format layout in or out) through convert_device."""
    x = float64_inputs(fp8_e4m3, n_random=128)
    src = x.view(np.int64)
    # encode: float64 layout -> round to fp8_e4m3 -> fp8_e4m3 layout (int64 out)
    enc = (LAYOUT64, _layout(fp8_e4m3), _layout(fp8_e4m3))
    for mode, seed in ((scalar.NEAREST_EVEN, 0), (scalar.STOCHASTIC, 77)):
        params = (*enc, mode, 1, 0, seed)
        want = np.empty_like(src)
        cpu.convert_array(src, want, params)
        d_out = cuda.device_array(src.size, np.int64)
        fcuda.convert_device(cuda.to_device(src), d_out, params)
        np.testing.assert_array_equal(d_out.copy_to_host(), want)
    # decode every fp16 code (as signed 16-bit patterns) into float32 (int32 out)
    codes = np.arange(-(1 << 15), 1 << 15, 7, dtype=np.int64)
    params = (_layout(fp16), LAYOUT32, LAYOUT32, 0, 1, 0, 0)
    d_out = cuda.device_array(codes.size, np.int32)
    fcuda.convert_device(CAIArray(codes), d_out, params)
    got = d_out.copy_to_host().view(np.float32)
    want = codes.astype(np.uint16).view(np.float16).astype(np.float32)
    assert_same_values(want, got, want)


def test_convert_device_rejects_bad_arrays():
    a = cuda.to_device(np.zeros(4, np.int32))
    params = (LAYOUT32, _layout(fp16), LAYOUT32, 0, 1, 0, 0)
    with pytest.raises(TypeError, match="int32 or int64"):
        fcuda.convert_device(cuda.to_device(np.zeros(4, np.float32)), a, params)
    with pytest.raises(ValueError, match="differ in size"):
        fcuda.convert_device(a, cuda.to_device(np.zeros(5, np.int32)), params)
    with pytest.raises(ValueError, match="1-D"):
        fcuda.convert_device(cuda.to_device(np.zeros((2, 2), np.int32)), a, params)
    with pytest.raises(ValueError, match="params must be"):
        fcuda.convert_device(a, a, params[:-1])


# ---- round_device / round_to dispatch ---------------------------------------------------------
def test_round_device_numba_array_shapes():
    rng = np.random.default_rng(3)
    for shape in [(3, 5, 7), (1,), (), (0,), (2, 0)]:
        x = rng.standard_normal(shape).astype(np.float32)
        d = cuda.to_device(x)
        out = fcuda.round_device(d, fp16, scalar.NEAREST_EVEN, 1, 0, 0)
        res = out.copy_to_host()
        assert res.shape == x.shape and res.dtype == np.float32
        assert_same_values(x, res, oracle_round(x, fp16))
        np.testing.assert_array_equal(d.copy_to_host(), x)  # input untouched


def test_round_device_accepts_format_names():
    x = np.array([1 / 3, 65520.0], np.float32)
    res = fcuda.round_device(CAIArray(x), "half", scalar.NEAREST_EVEN, 1, 0, 0).copy_to_host()
    assert_same_bits(x, res, x.astype(np.float16).astype(np.float32))


def test_round_to_dispatches_cuda_array_interface():
    x = np.array([[0.1, -2.5e-8], [70000.0, np.nan]], np.float64)
    out = fpsim.round_to(CAIArray(x), "fp16", "toward_zero")
    assert not isinstance(out, np.ndarray)  # a device array, not a host result
    res = out.copy_to_host()
    assert res.shape == (2, 2) and res.dtype == np.float64
    assert_same_bits(x, res, fpsim.round_to(x, "fp16", "toward_zero"))


def test_round_to_dispatches_numba_device_array():
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    out = fpsim.round_to(cuda.to_device(x), fp8_e5m2)
    assert not isinstance(out, np.ndarray)  # a device array
    assert_same_bits(x, out.copy_to_host(), fpsim.round_to(x, fp8_e5m2))


def test_round_to_device_errors():
    x32 = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="fit in float32"):  # 11 exponent bits: float64 only
        fpsim.round_to(CAIArray(x32), Format(11, 4))
    res = fpsim.round_to(CAIArray(x32.astype(np.float64)), Format(11, 4)).copy_to_host()
    np.testing.assert_array_equal(res, np.ones(8))
    with pytest.raises(TypeError, match="float32 or float64"):
        fpsim.round_to(CAIArray(np.ones(8, np.int32)), fp16)
    with pytest.raises(TypeError, match="float32 or float64"):
        fpsim.round_to(CAIArray(np.ones(8, np.float16)), fp16)
    with pytest.raises(ValueError, match="rounding mode"):
        fpsim.round_to(CAIArray(x32), fp16, "sideways")
    with pytest.raises(ValueError, match="seed"):
        fpsim.round_to(CAIArray(x32), fp16, "stochastic", seed=-1)
    with pytest.raises(ValueError, match="unknown format"):
        fpsim.round_to(CAIArray(x32), "fp17")
    with pytest.raises(TypeError, match="CUDA array"):
        fcuda.round_device(x32, fp16, scalar.NEAREST_EVEN, 1, 0, 0)


def test_round_device_rejects_non_contiguous():
    d = cuda.to_device(np.arange(16, dtype=np.float32).reshape(4, 4))
    with pytest.raises(ValueError, match="C-contiguous"):
        fcuda.round_device(d[:, ::2], fp16, scalar.NEAREST_EVEN, 1, 0, 0)
    with pytest.raises(ValueError, match="C-contiguous"):
        fpsim.round_to(CAIArray(np.arange(16, dtype=np.float32), np.s_[::2]), fp16)


def test_importing_fpsim_does_not_import_numba_cuda():
    """fpsim (and its kernels.cuda module) must import without touching numba.cuda."""
    import subprocess
    import sys

    code = (
        "import sys, fpsim, fpsim.kernels.cuda, fpsim.kernels.cpu; "
        "assert 'numba.cuda' not in sys.modules, 'numba.cuda imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
