"""The public array API: round values to a format, and move between values and bit codes.

Values are stored in ordinary float32 or float64 numpy arrays (the *container*); after
:func:`round_to` every element is exactly representable in the target format. Bit codes
(:func:`to_bits` / :func:`from_bits`) are unsigned integers in the format's own layout.

>>> import numpy as np, fpsim
>>> fpsim.round_to(np.float32(0.1), "fp16")
np.float32(0.099975586)
>>> hex(int(fpsim.to_bits(0.1, "bf16")))
'0x3dcd'
>>> float(fpsim.from_bits(0x3C00, "fp16"))
1.0

Back ends: numba CPU kernels for numpy input, numba CUDA kernels for arrays that expose
``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors, numba device arrays), and the
uncompiled pure-Python reference on request (``backend="python"``).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .formats import Format, FormatLike, fp32, fp64, get_format
from .kernels import scalar

__all__ = [
    "ROUNDING_MODES",
    "round_to",
    "to_bits",
    "from_bits",
    "next_up",
    "next_down",
    "ulp",
]

ROUNDING_MODES: dict[str, int] = {
    "nearest_even": scalar.NEAREST_EVEN,
    "nearest_away": scalar.NEAREST_AWAY,
    "toward_zero": scalar.TOWARD_ZERO,
    "up": scalar.UP,
    "down": scalar.DOWN,
    "stochastic": scalar.STOCHASTIC,
}

# The container layouts: IEEE float32 and float64, read through same-width signed int views.
_CONTAINER = {
    np.dtype(np.float32): (fp32, np.int32),
    np.dtype(np.float64): (fp64, np.int64),
}


def _layout(f: Format) -> tuple[int, int, int, int]:
    e, m, bias, _, _, fn = f.kernel_params
    return (e, m, bias, fn)


def _mode_code(rounding: str) -> int:
    try:
        return ROUNDING_MODES[rounding]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown rounding mode {rounding!r}; choose one of {', '.join(ROUNDING_MODES)}"
        ) from None


def _seed_value(seed: int | None, mode: int) -> int:
    if mode != scalar.STOCHASTIC:
        return 0
    if seed is None:
        seed = int(np.random.default_rng().integers(0, 2**62))
    if not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed) & ((1 << 63) - 1)


def _is_device_array(x: Any) -> bool:
    # __cuda_ndarray__ marks numba's device arrays, including the CUDA simulator's (which have
    # no __cuda_array_interface__).
    return hasattr(x, "__cuda_array_interface__") or getattr(x, "__cuda_ndarray__", False)


def _as_container(x: Any) -> tuple[np.ndarray, bool]:
    """Turn the input into a float32/float64 ndarray; report whether it was a scalar."""
    is_scalar = np.isscalar(x) or (isinstance(x, np.ndarray) and x.ndim == 0)
    arr = np.asarray(x)
    if arr.dtype == np.float32 or arr.dtype == np.float64:
        return arr, is_scalar
    if arr.dtype.kind in "iub" or arr.dtype == np.float16 or arr.dtype.kind == "V":
        return arr.astype(np.float64), is_scalar
    if arr.dtype.kind == "f":
        # Other float dtypes (ml_dtypes bfloat16/fp8, longdouble): float64 holds them exactly,
        # except longdouble, which we refuse rather than round twice.
        if arr.dtype.itemsize > 8:
            raise TypeError(f"{arr.dtype} input is not supported; convert to float64 first")
        return arr.astype(np.float64), is_scalar
    raise TypeError(f"expected float32 or float64 values, got an array of {arr.dtype}")


def _check_fits(f: Format, container: np.dtype) -> None:
    if not f.fits_in(container):
        raise ValueError(
            f"{f.name} values do not all fit in {container}; pass float64 input to round to it"
        )


def _run(src: np.ndarray, dst: np.ndarray, params: tuple, backend: str) -> None:
    if backend == "cpu":
        from .kernels import cpu

        cpu.convert_array(src, dst, params)
    elif backend == "python":
        from .kernels import python

        python.convert_array(src, dst, params)
    else:
        raise ValueError(f"backend must be 'cpu', 'python' or 'cuda', got {backend!r}")


def round_to(
    x: Any,
    fmt: FormatLike,
    rounding: str = "nearest_even",
    subnormals: bool = True,
    saturate: bool = False,
    seed: int | None = None,
    *,
    backend: str = "auto",
) -> Any:
    """Round every value of ``x`` to the nearest value of ``fmt`` (by the rounding mode).

    ``x``: a Python/numpy scalar or a float32/float64 array (other numeric input is converted to
    float64 exactly). The result has the same container dtype and shape; each element is exactly
    representable in ``fmt``. float64 input is rounded directly, never through float32.

    * ``rounding``: ``nearest_even`` (IEEE default), ``nearest_away``, ``toward_zero``, ``up``,
      ``down`` or ``stochastic`` (up with probability equal to the discarded fraction of a
      quantum; reproducible for a given ``seed``: element ``i`` uses random bits derived from
      ``(seed, i)`` only).
    * ``subnormals=False``: results below the smallest normal become ±0 (flush to zero, after
      rounding).
    * overflow gives ±inf, or NaN for finite-only formats such as fp8_e4m3 (as ml_dtypes does),
      unless ``saturate=True`` (±max). Directed modes that round toward zero give ±max.
    * NaN stays NaN; ±0 and ±inf keep their sign (inf becomes NaN in a finite-only format).

    >>> round_to(65519.99, "fp16"), round_to(65520.0, "fp16")
    (65504.0, inf)
    >>> round_to(2.0**-25, "fp16"), round_to(-(2.0**-25 + 2.0**-40), "fp16")
    (0.0, -5.960464477539063e-08)
    >>> round_to(500.0, "fp8_e4m3"), round_to(500.0, "fp8_e4m3", saturate=True)
    (nan, 448.0)
    """
    f = get_format(fmt)
    mode = _mode_code(rounding)
    if _is_device_array(x) and backend in ("auto", "cuda"):
        from .kernels import cuda

        return cuda.round_device(
            x, f, mode, int(subnormals), int(saturate), _seed_value(seed, mode)
        )
    arr, is_scalar = _as_container(x)
    container, int_dt = _CONTAINER[arr.dtype]
    _check_fits(f, arr.dtype)
    src = np.ascontiguousarray(arr).reshape(-1).view(int_dt)
    out = np.empty_like(src)
    lay = _layout(container)
    params = (
        lay + _layout(f) + lay + (mode, int(subnormals), int(saturate), _seed_value(seed, mode))
    )
    _run(src, out, params, "cpu" if backend in ("auto", "cuda") else backend)
    res = out.view(arr.dtype).reshape(arr.shape)
    if is_scalar:
        return float(res[()]) if isinstance(x, (float, int)) else res[()]
    return res


def _code_dtype(f: Format) -> np.dtype:
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if f.bits <= np.dtype(dt).itemsize * 8:
            return np.dtype(dt)
    raise AssertionError("unreachable: formats are at most 64 bits")


def to_bits(
    x: Any,
    fmt: FormatLike,
    rounding: str = "nearest_even",
    subnormals: bool = True,
    saturate: bool = False,
    seed: int | None = None,
    *,
    backend: str = "cpu",
) -> Any:
    """The bit codes of ``x`` rounded to ``fmt``, as unsigned integers (uint8/16/32/64).

    Rounding follows :func:`round_to` (same arguments). NaN becomes the format's canonical quiet
    NaN with the input's sign (payloads are not kept).

    >>> [hex(int(to_bits(v, f))) for v, f in [(1.0, "fp16"), (-0.0, "bf16"), (448, "e4m3")]]
    ['0x3c00', '0x8000', '0x7e']
    """
    f = get_format(fmt)
    mode = _mode_code(rounding)
    arr, is_scalar = _as_container(x)
    container, int_dt = _CONTAINER[arr.dtype]
    src = np.ascontiguousarray(arr).reshape(-1).view(int_dt)
    out = np.empty(src.shape, np.int64)
    params = (
        _layout(container)
        + _layout(f)
        + _layout(f)
        + (mode, int(subnormals), int(saturate), _seed_value(seed, mode))
    )
    _run(src, out, params, backend)
    # The kernel writes the signed (two's-complement) reading of each code; keep the low bits.
    codes = (out & ((1 << f.bits) - 1) if f.bits < 64 else out).astype(_code_dtype(f))
    codes = codes.reshape(arr.shape)
    return codes[()] if is_scalar else codes


def from_bits(codes: Any, fmt: FormatLike, dtype: Any = None, *, backend: str = "cpu") -> Any:
    """The values of bit codes of ``fmt``, in ``dtype`` (default: float32 when every value of the
    format fits, else float64). Codes must be integers in ``[0, 2^bits)``.

    >>> from_bits([0x7BFF, 0x0001, 0xFC00, 0x7E00], "fp16").tolist()
    [65504.0, 5.960464477539063e-08, -inf, nan]
    """
    f = get_format(fmt)
    c = np.asarray(codes)
    is_scalar = c.ndim == 0
    if c.dtype.kind not in "iu":
        raise TypeError(f"codes must be integers, got {c.dtype}")
    if c.size and (int(c.min()) < 0 or (f.bits < 64 and int(c.max()) >= (1 << f.bits))):
        raise ValueError(f"codes out of range for the {f.bits}-bit format {f.name}")
    dt = np.dtype(dtype) if dtype is not None else f.container_dtype
    if dt not in _CONTAINER:
        raise ValueError(f"dtype must be float32 or float64, got {dt}")
    _check_fits(f, dt)
    container, int_dt = _CONTAINER[dt]
    # Sign-extend the code into a signed int64 (the two's-complement reading pack/unpack use).
    src = np.ascontiguousarray(c).reshape(-1).astype(np.uint64).view(np.int64)
    if f.bits < 64:
        sign = np.int64(1 << (f.bits - 1))
        src = (src ^ sign) - sign
    out = np.empty(src.shape, int_dt)
    params = _layout(f) + _layout(container) + _layout(container) + (0, 1, 0, 0)
    _run(src, out, params, backend)
    res = out.view(dt).reshape(c.shape)
    return res[()] if is_scalar else res


def _step(x: Any, fmt: FormatLike, direction: int) -> Any:
    f = get_format(fmt)
    arr, is_scalar = _as_container(x)
    if not f.fits_in(arr.dtype):
        arr = arr.astype(np.float64)
    # 1. The representable value on the near side of x (x itself when representable).
    y = np.asarray(round_to(arr, f, "down" if direction > 0 else "up"))
    # 2. One code further. Codes of one sign are ordered like magnitudes, so the step changes
    #    the magnitude by one code: outward (+1) when the sign agrees with the direction.
    codes = np.asarray(to_bits(y, f)).astype(np.uint64)
    sign_bit = np.uint64(1 << (f.bits - 1))
    neg = (codes & sign_bit) != 0
    mag = codes & (sign_bit - np.uint64(1))
    outward = (direction > 0) != neg
    one = np.uint64(1)
    mag2 = np.where(outward, mag + one, np.maximum(mag, one) - one)
    # From ±0 the step goes to the smallest subnormal of the direction's sign.
    neg2 = np.where(mag == 0, direction < 0, neg)
    mag2 = np.where(mag == 0, one, mag2)
    new = np.where(neg2, mag2 | sign_bit, mag2).astype(np.uint64)
    # Past the largest finite value the next code is inf (ieee) or the NaN code (fn): no value.
    res = np.asarray(from_bits(new, f, dtype=y.dtype))
    res = np.where(np.isinf(y) & outward, y, res)  # nothing lies beyond ±inf
    res = np.where(np.isnan(y), np.nan, res).astype(y.dtype)
    if is_scalar:
        return float(res[()]) if isinstance(x, (float, int)) else res[()]
    return res


def next_up(x: Any, fmt: FormatLike) -> Any:
    """The smallest value of ``fmt`` greater than ``x`` (+inf past the largest finite value;
    NaN where the format has no infinity).

    >>> next_up(1.0, "fp16"), next_up(0.0, "fp16") == 2**-24, next_up(65504.0, "fp16")
    (1.0009765625, True, inf)
    """
    return _step(x, fmt, +1)


def next_down(x: Any, fmt: FormatLike) -> Any:
    """The largest value of ``fmt`` less than ``x``.

    >>> next_down(1.0, "fp16")
    0.99951171875
    """
    return _step(x, fmt, -1)


def ulp(x: Any, fmt: FormatLike) -> Any:
    """The unit in the last place at ``x``: the quantum 2^(e - man_bits) of the binade holding
    |x|, with e clipped to [emin, emax] (so the subnormal spacing below the normal range). Like
    ``np.spacing`` for representable positive x. NaN for inf and NaN.

    >>> ulp(1.0, "fp16"), ulp(65504, "fp16"), ulp(0.0, "fp16") == 2.0**-24
    (0.0009765625, 32.0, True)
    """
    f = get_format(fmt)
    a = np.abs(np.asarray(x, dtype=np.float64))
    _, e = np.frexp(a)  # a = m × 2^e with 0.5 <= m < 1, so the leading bit is 2^(e-1)
    lead = np.clip(np.where(a == 0, f.emin, e - 1), f.emin, f.emax)
    res = np.ldexp(1.0, lead - f.man_bits)
    res = np.where(np.isfinite(a), res, np.nan)
    return float(res) if np.ndim(res) == 0 else res
