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

import functools
import math
import numbers
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from .containers import is_torch_tensor, result_dtype, torch_apply, torch_to_numpy
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


def _mode_code(rounding: str) -> int:
    try:
        return ROUNDING_MODES[rounding]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown rounding mode {rounding!r}; choose one of {', '.join(ROUNDING_MODES)}"
        ) from None


def _flag(value: Any, name: str) -> int:
    """An on/off option (``subnormals``, ``saturate``) as the 0/1 the kernels take.

    Only real booleans (Python or numpy) and the integers 0 and 1 are accepted: ``"no"`` is a
    true value to Python, so reading it as one would silently do the opposite of what was meant.
    """
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return int(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")


def _seed_value(seed: int | None, mode: int) -> int:
    if mode != scalar.STOCHASTIC:
        return 0
    if seed is None:
        seed = int(np.random.default_rng().integers(0, 2**62))
    if not isinstance(seed, numbers.Integral) or isinstance(seed, (bool, np.bool_)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed) & ((1 << 63) - 1)


def _is_device_array(x: Any) -> bool:
    # __cuda_ndarray__ marks numba's device arrays, including the CUDA simulator's (which have
    # no __cuda_array_interface__).
    return hasattr(x, "__cuda_array_interface__") or getattr(x, "__cuda_ndarray__", False)


# ---- input kinds -------------------------------------------------------------------------------
# float64 holds every value of every format, so a float64 array is the natural container. Some
# input kinds hold numbers float64 does not: integers beyond 2^53 and exact rationals. Converting
# those to float64 first would round them once, and rounding to the format would round again --
# 2^60 + 2^36 + 1 becomes 2^60 in float64, then fp32 keeps 2^60, though the correct fp32 value is
# 2^60 + 2^37. So they are rounded from their exact value instead:
#   * Python ints (any size), numpy integer scalars, Fraction and finite Decimal scalars by the
#     exact rational rounding below (pure Python; a scalar costs microseconds);
#   * integer arrays whose values are not all exact in float64 by a kernel that splits each
#     integer into two float64s whose sum is exact and rounds that sum once
#     (scalar_ops.add_rounded).

_F64_EXACT_INT = 1 << 53  # every integer of magnitude <= 2^53 is a float64


def _is_rational_scalar(x: Any) -> bool:
    """Python ints (not bools), numpy integer scalars, Fractions and finite non-zero Decimals (a
    Decimal zero has a sign, ``Decimal('-0')``, which a Fraction would lose: float() keeps it)."""
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (numbers.Integral, Fraction)):
        return True
    return isinstance(x, Decimal) and x.is_finite() and not x.is_zero()


def _exact_fraction(x: Any) -> Fraction:
    """The exact value of a rational scalar (numpy integers become Python ints first: a Fraction
    of an ``np.int64`` would keep the fixed-width integer inside and overflow).

    A Decimal beyond 10^±400 is replaced by ±10^±400: every format lies inside float64's range
    (2^-1074 .. 2^1024), and every value beyond it rounds the same way in every mode (to ±0 or the
    smallest subnormal, to ±max or ±inf; stochastically with the same probability ceil(f 2^62)
    = 1 below), while building 10^(10^9) exactly would take forever.
    """
    if isinstance(x, numbers.Integral):
        return Fraction(int(x))
    if isinstance(x, Decimal) and abs(x.adjusted()) > 400:
        sign = -1 if x.is_signed() else 1
        return sign * (Fraction(10**400) if x.adjusted() > 0 else Fraction(1, 10**400))
    return Fraction(x)


def _round_rational(
    q: Fraction, f: Format, mode: int, subnormals: int, saturate: int, rand62: int
) -> float:
    """Round the exact rational ``q`` to ``f`` by the definition (the float64 of the result).

    The same rules as :func:`scalar.convert` (gradual underflow, then overflow and flush-to-zero
    after rounding; ties to the even *code*; negatives are NaN in an unsigned format, 0 is NaN
    and tiny values the smallest value in one without zero), and for stochastic rounding the
    same random-bits comparison: up when ``rand62 < ceil(fraction × 2^62)``.
    """
    if q == 0:
        return 0.0 if f.has_zero else math.nan  # an integer or rational zero has no sign: +0
    neg = q < 0
    if neg and not f.signed:
        return math.nan
    a = -q if neg else q
    # 1. The binade: 2^e <= a < 2^(e+1), found exactly from the bit lengths.
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    # 2. The quantum of the format at a (fixed at 2^(emin - man_bits) below the normal range).
    qexp = max(e, f.emin) - f.man_bits
    quantum = Fraction(2) ** qexp
    n = a / quantum
    k = n.numerator // n.denominator
    rem = n - k  # the discarded fraction of a quantum, in [0, 1)
    # 3. Step up (away from zero) or not, by the mode.
    if rem != 0:
        half = Fraction(1, 2)
        if mode == scalar.NEAREST_EVEN:
            # the lower neighbour's code is odd: its last fraction bit, or with no fraction
            # bits the last bit of its biased exponent (its code 0 when k is 0)
            odd = k % 2 == 1 if f.man_bits else (k == 1 and (qexp + f.bias) % 2 == 1)
            k += rem > half or (rem == half and odd)
        elif mode == scalar.NEAREST_AWAY:
            k += rem >= half
        elif mode == scalar.UP:
            k += not neg
        elif mode == scalar.DOWN:
            k += neg
        elif mode == scalar.STOCHASTIC:
            t = rem * (1 << 62)
            k += rand62 < -((-t.numerator) // t.denominator)  # ceil(rem × 2^62)
    mag = k * quantum
    sign = -1.0 if neg else 1.0
    # 4. Overflow, then flush-to-zero, exactly as convert applies them after rounding.
    if mag > Fraction(f.max):
        to_max = (
            saturate == 1
            or mode == scalar.TOWARD_ZERO
            or (mode == scalar.UP and neg)
            or (mode == scalar.DOWN and not neg)
            or not (f.has_inf or f.has_nan)
        )
        if to_max:
            return sign * f.max
        return sign * math.inf if f.has_inf else math.copysign(math.nan, sign)
    if mag == 0 or (subnormals == 0 and f.has_subnormals and mag < Fraction(f.min_normal)):
        if not f.has_zero:
            return sign * f.smallest_subnormal  # below the smallest value; there is no zero
        return math.copysign(0.0, sign if f.has_negzero else 1.0)
    return sign * float(mag)  # exact: every value of the format is a float64


def _native(arr: np.ndarray) -> np.ndarray:
    """``arr`` in the machine's byte order (``'>f4'`` data is still float32; no value changes)."""
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def _ints_exact_in_float64(arr: np.ndarray) -> bool:
    """True when every element of the integer array is exactly a float64 (|n| <= 2^53)."""
    if arr.size == 0 or arr.dtype.itemsize < 8:
        return True  # int8..int32 and uint8..uint32 always are
    if arr.dtype.kind == "u":
        return int(arr.max()) <= _F64_EXACT_INT
    return int(arr.max()) <= _F64_EXACT_INT and int(arr.min()) >= -_F64_EXACT_INT


def _as_container(x: Any) -> tuple[np.ndarray, bool]:
    """Turn the input into a float32/float64 ndarray exactly; report whether it was a scalar.

    Raises ``ValueError`` for integers that float64 cannot hold exactly (callers that round
    such input handle it first, see :func:`_round_exact_input`) and ``TypeError`` for input
    kinds that are not real numbers.
    """
    if is_torch_tensor(x):
        x = torch_to_numpy(x)  # a CPU tensor's memory, read as numpy (bf16/fp8 by their bits)
    is_scalar = np.isscalar(x) or (isinstance(x, np.ndarray) and x.ndim == 0)
    if isinstance(x, (Fraction, Decimal)):
        v = float(x)
        if not math.isnan(v) and not math.isinf(v) and Fraction(x) != Fraction(v):
            raise ValueError(f"{x!r} is not exactly a float64; round it with fpsim.round_to first")
        return np.asarray(v), True
    try:
        arr = _native(np.asarray(x))
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"cannot read {type(x).__name__} input as numbers: {exc}") from None
    if arr.dtype == np.float32 or arr.dtype == np.float64:
        return arr, is_scalar
    if arr.dtype.kind in "iu":
        if not _ints_exact_in_float64(arr):
            raise ValueError(
                "integer input beyond 2^53 is not exactly a float64; round it with "
                "fpsim.round_to first"
            )
        return arr.astype(np.float64), is_scalar
    if arr.dtype.kind == "b" or arr.dtype == np.float16:
        return arr.astype(np.float64), is_scalar
    if arr.dtype.kind in "fV" and arr.dtype.itemsize <= 8:
        # ml_dtypes' bfloat16/fp8 (kind 'V' in older numpy): float64 holds them exactly.
        return arr.astype(np.float64), is_scalar
    if arr.dtype.kind == "f":
        # longdouble has more precision than float64: refuse rather than round twice.
        raise TypeError(f"{arr.dtype} input is not supported; convert to float64 first")
    raise TypeError(f"expected real numbers (float or integer), got an array of {arr.dtype}")


def _round_exact_input(
    x: Any, f: Format, mode: int, subnormals: int, saturate: int, seed: int, backend: str
) -> Any:
    """Round input that float64 cannot hold exactly, from its exact value; None for other input.

    Returns a Python float for Python ints, Fractions and Decimals, a numpy float64 scalar for
    numpy integer scalars, and a float64 array for integer arrays with values beyond 2^53.
    """
    if _is_rational_scalar(x):
        rand = scalar.random62(seed, 0) if mode == scalar.STOCHASTIC else 0
        return _round_rational(_exact_fraction(x), f, mode, subnormals, saturate, rand)
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "iu" or _ints_exact_in_float64(x):
        return None
    arr = _native(x)
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty(flat.shape, np.float64)
    if backend == "python" or (f.man_bits >= 51 and f != fp64):
        # scalar_ops.add_rounded is exact for p <= 51 (round to odd needs two spare bits) or
        # binary64 itself: 52- and 53-bit formats take the exact rational path.
        for i, v in enumerate(flat.tolist()):
            rand = scalar.random62(seed, i) if mode == scalar.STOCHASTIC else 0
            out[i] = _round_rational(Fraction(v), f, mode, subnormals, saturate, rand)
    else:
        from .kernels import cpu

        cpu.round_integers(flat, out, (f.record, mode, subnormals, saturate, seed))
    return out.reshape(arr.shape)


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

    ``x``: a Python/numpy scalar or array. float32 and float64 arrays (either byte order) give a
    result of the same dtype and shape; every other input is rounded from its *exact* value and
    gives float64: integers of any size (Python ints, int64/uint64 arrays), ``Fraction`` and
    ``Decimal``, bool, float16 and the ml_dtypes floats. float64 input is rounded directly, never
    through float32. Refused with ``TypeError``: complex, strings, objects, ``np.longdouble``
    (more precise than float64). Masked arrays and ``np.matrix`` are read as plain arrays (the
    mask is dropped). Each element of the result is exactly representable in ``fmt``.

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
    >>> round_to(2**60 + 2**36 + 1, "fp32") == 2**60 + 2**37  # from the exact integer
    True
    """
    f = get_format(fmt)
    mode = _mode_code(rounding)
    sub, sat = _flag(subnormals, "subnormals"), _flag(saturate, "saturate")
    seed_v = _seed_value(seed, mode)
    if backend not in ("auto", "cpu", "python", "cuda"):
        raise ValueError(f"backend must be 'auto', 'cpu', 'python' or 'cuda', got {backend!r}")
    if is_torch_tensor(x):

        def on_device(d: Any) -> Any:
            from .kernels import cuda

            return cuda.round_device(d, f, mode, sub, sat, seed_v)

        def on_numpy(a: np.ndarray) -> np.ndarray:
            return round_to(a, f, rounding, sub, sat, seed_v, backend=backend)

        return torch_apply(x, f, on_numpy, on_device)
    if _is_device_array(x) and backend in ("auto", "cuda"):
        from .kernels import cuda

        return cuda.round_device(x, f, mode, sub, sat, seed_v)
    exact = _round_exact_input(x, f, mode, sub, sat, seed_v, backend)
    if exact is not None:
        return _in_kind_of(x, exact, f)
    arr, _ = _as_container(x)
    if not f.fits_in(arr.dtype):
        arr = arr.astype(np.float64)  # widening is exact; the result dtype follows the rule
    container, int_dt = _CONTAINER[arr.dtype]
    src = np.ascontiguousarray(arr).reshape(-1).view(int_dt)
    out = np.empty_like(src)
    lay = container.record
    params = (lay, f.record, lay, mode, sub, sat, seed_v)
    _run(src, out, params, "cpu" if backend in ("auto", "cuda") else backend)
    return _in_kind_of(x, out.view(arr.dtype).reshape(arr.shape), f)


def _in_kind_of(x: Any, res: Any, f: Format) -> Any:
    """The rounded values ``res`` in the kind of container ``x`` came in (fpsim.containers)."""
    if isinstance(x, (numbers.Number, Decimal)) and not isinstance(x, np.generic):
        return float(res) if np.ndim(res) == 0 else res  # Python numbers: a Python float
    if isinstance(x, (np.ndarray, np.generic)):
        out = result_dtype(_native(np.asarray(x)).dtype, f)
        r = np.asarray(res).astype(out, copy=False)
        return r[()] if isinstance(x, np.generic) else r
    return res  # lists, tuples, other array-likes: float64 (float32 for float32 scalars)


def _signed_view(a: np.ndarray) -> np.ndarray:
    """The same memory read as signed integers of the same width (no copy)."""
    return a.view(np.dtype(f"i{a.dtype.itemsize}")) if a.dtype.kind == "u" else a


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

    Rounding follows :func:`round_to` (same arguments, same input kinds). NaN becomes the
    format's canonical quiet NaN with the input's sign (payloads are not kept). The kernel
    writes the codes straight into the result: no intermediate array larger than it.

    >>> [hex(int(to_bits(v, f))) for v, f in [(1.0, "fp16"), (-0.0, "bf16"), (448, "e4m3")]]
    ['0x3c00', '0x8000', '0x7e']
    """
    f = get_format(fmt)
    mode = _mode_code(rounding)
    sub, sat = _flag(subnormals, "subnormals"), _flag(saturate, "saturate")
    seed_v = _seed_value(seed, mode)
    if backend not in ("cpu", "python"):
        raise ValueError(f"backend must be 'cpu' or 'python', got {backend!r}")
    exact = _round_exact_input(x, f, mode, sub, sat, seed_v, backend)
    if exact is not None:
        # Already rounded: encoding a value of the format is exact in any mode.
        x, mode, sub, sat, seed_v = exact, scalar.NEAREST_EVEN, 1, 0, 0
    arr, is_scalar = _as_container(x)
    if not f.has_nan:
        _refuse_unencodable(arr, f)
    if not f.fits_in(arr.dtype):
        arr = arr.astype(np.float64)  # exact; the kernels' fast paths need the format inside
    container, int_dt = _CONTAINER[arr.dtype]
    src = np.ascontiguousarray(arr).reshape(-1).view(int_dt)
    # The kernel stores each code's two's-complement reading into a signed view of the unsigned
    # result: the store keeps exactly the low ``bits`` bits, which are the code.
    out = np.empty(src.shape, _code_dtype(f))
    params = (container.record, f.record, f.record, mode, sub, sat, seed_v)
    if backend == "python":
        # Pure Python stores Python ints, which numpy range-checks: an unsigned format's code
        # with its top bit set (E8M0's 0x80..0xFF) does not fit the signed view that compiled
        # code wraps into. Collect int64 codes and wrap them on the copy instead.
        wide = np.empty(src.shape, np.int64)
        _run(src, wide, params, backend)
        _signed_view(out)[...] = wide.astype(_signed_view(out).dtype)
    else:
        _run(src, _signed_view(out), params, backend)
    if f.bits < 8 * out.itemsize:
        # A format narrower than its code dtype (fp6 in uint8, tf32 in uint32): the store
        # sign-extended a negative code into the spare high bits; clear them, in place.
        np.bitwise_and(out, out.dtype.type((1 << f.bits) - 1), out=out)
    codes = out.reshape(arr.shape)
    return codes[()] if is_scalar else codes


def _refuse_unencodable(arr: np.ndarray, f: Format) -> None:
    """A format without NaN (FP4, FP6) has no code for NaN, nor, if unsigned, for negatives,
    nor, if it has no zero (``Format(8, 0, style="finite", has_subnormals=False)``), for 0:
    round_to makes those NaN."""
    bad = np.isnan(arr)
    if not f.signed:
        bad |= arr < 0
    if not f.has_zero:
        # 0 rounds to NaN where there is no zero; without this the NaN would be written as the
        # code 0 (the smallest value)
        bad |= arr == 0
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0]) if arr.ndim else ()
        v = arr[where]
        what = "NaN" if np.isnan(v) else ("zero" if v == 0 else "a negative number")
        raise ValueError(
            f"{f.name} has no NaN, so no code for {what} (at index {where}); round_to keeps NaN "
            "as the container's NaN, to_bits cannot"
        )


def from_bits(codes: Any, fmt: FormatLike, dtype: Any = None, *, backend: str = "cpu") -> Any:
    """The values of bit codes of ``fmt``, in ``dtype`` (default: float32 when every value of the
    format fits, else float64). Codes must be integers in ``[0, 2^bits)``, of any integer dtype;
    the kernel reads them in place and writes the values straight into the result.

    >>> from_bits([0x7BFF, 0x0001, 0xFC00, 0x7E00], "fp16").tolist()
    [65504.0, 5.960464477539063e-08, -inf, nan]
    """
    f = get_format(fmt)
    if backend not in ("cpu", "python"):
        raise ValueError(f"backend must be 'cpu' or 'python', got {backend!r}")
    c = _native(np.asarray(codes))
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
    # unpack reads the fields with shifts and masks, so an unsigned code (not sign-extended)
    # decodes the same as its two's-complement reading.
    if c.dtype.kind == "u" and c.dtype.itemsize * 8 < f.bits:
        # uint8 codes of a 16-bit format: a signed view would sign-extend 0x80 into the sign
        # bit; widen them (zero-extended) to the format's code dtype first
        c = c.astype(_code_dtype(f))
    src = _signed_view(np.ascontiguousarray(c).reshape(-1))
    out = np.empty(src.shape, int_dt)
    same_range = f.exp_bits == container.exp_bits and f.bias == container.bias
    if backend == "cpu" and f.bits <= 16 and src.size > (1 << f.bits) and not same_range:
        # Decoding is a table look-up for narrow formats (the table: every code, decoded by
        # the same kernel); it runs at memory speed.
        from .kernels import cpu

        cpu.decode_table(src, _decode_table(f, dt), out)
    else:
        params = (f.record, container.record, container.record, 0, 1, 0, 0)
        _run(src, out, params, backend)
    res = out.view(dt).reshape(c.shape)
    return res[()] if is_scalar else res


@functools.lru_cache(maxsize=64)
def _decode_table(f: Format, dt: np.dtype) -> np.ndarray:
    """The container bit patterns of every code of ``f`` (at most 16 bits), in code order."""
    container, int_dt = _CONTAINER[dt]
    codes = np.arange(1 << f.bits, dtype=np.int64)
    table = np.empty(codes.shape, int_dt)
    params = (f.record, container.record, container.record, 0, 1, 0, 0)
    _run(codes, table, params, "cpu")
    table.flags.writeable = False
    return table


def _step(x: Any, fmt: FormatLike, direction: int) -> Any:
    f = get_format(fmt)
    # 1. The representable value on the near side of x (x itself when representable), rounded
    #    from x's exact value (an integer beyond 2^53 is not first rounded to float64).
    near = "down" if direction > 0 else "up"
    y = _round_exact_input(x, f, _mode_code(near), 1, 0, 0, "cpu")
    if y is None:
        arr, _ = _as_container(x)
        if not f.fits_in(arr.dtype):
            arr = arr.astype(np.float64)
        y = round_to(arr, f, near)
    y = np.asarray(y)
    # x beyond the format's last value on the near side (no value at or below x for next_up):
    # the answer is that last value. Rounding toward it would not find it where the format has
    # no infinity (fn/fnuz overflow to NaN, FP4 saturates to -max, whose next_up is not -max),
    # nor below 0 in an unsigned format or below E8M0's smallest value. x is compared through
    # its float64 rounded away from that value (exact for floats; monotone for big integers).
    if f.has_inf:
        lowest = -np.inf if f.signed else (0.0 if f.has_zero else f.smallest_subnormal)
        highest = np.inf
    else:
        lowest = -f.max if f.signed else (0.0 if f.has_zero else f.smallest_subnormal)
        highest = f.max
    with np.errstate(invalid="ignore"):
        xd = np.asarray(round_to(x, fp64, near), dtype=np.float64)
        beyond = xd < lowest if direction > 0 else xd > highest
    no_value = np.isnan(y) & ~beyond
    # 2. One code further. Codes of one sign are ordered like magnitudes, so the step changes
    #    the magnitude by one code: outward (+1) when the sign agrees with the direction. (NaN
    #    and beyond-range entries step from max, a value of every format, and are replaced below:
    #    a format without NaN has no code for NaN.)
    codes = np.asarray(to_bits(np.where(np.isnan(y) | beyond, f.max, y), f)).astype(np.uint64)
    width = f.exp_bits + f.man_bits
    one = np.uint64(1)
    sign_bit = np.uint64(1 << width) if f.signed else np.uint64(0)
    neg = (codes & sign_bit) != 0
    mag = codes & np.uint64((1 << width) - 1)
    outward = (direction > 0) != neg
    is_zero = (mag == 0) & f.has_zero
    mag2 = np.where(outward, mag + one, np.maximum(mag, one) - one)
    # From ±0 the step goes to the smallest positive value of the direction's sign.
    neg2 = np.where(is_zero, direction < 0, neg)
    mag2 = np.where(is_zero, one, mag2)
    # Inward from the smallest value of a format without zero (E8M0) crosses to the other sign.
    cross = (mag == 0) & ~outward & (not f.has_zero)
    neg2 = np.where(cross, ~neg, neg2)
    # Where there is no -0 (fnuz, unsigned), stepping in to zero gives +0.
    neg2 = np.where((mag2 == 0) & ~cross & (not f.has_negzero), False, neg2)
    # No value: past the largest finite value (inf where the format has it, else NaN), below
    # zero in an unsigned format, beyond ±inf. (Past max the magnitude may leave the code
    # range, as in an unsigned format without NaN: decode a harmless code there.)
    past_max = (mag2 > np.uint64(f.record.max_mag)) & ~np.isinf(y)
    new = np.where(neg2, mag2 | sign_bit, mag2).astype(np.uint64)
    new = np.where(past_max, np.uint64(0), new)
    res = np.asarray(from_bits(new, f, dtype=y.dtype))
    beyond_max = np.inf if f.has_inf else np.nan
    res = np.where(past_max, np.where(neg2, -beyond_max, beyond_max), res)
    res = np.where(neg2 & (not f.signed), np.nan, res)
    res = np.where(np.isinf(y) & outward, y, res)  # nothing lies beyond ±inf
    res = np.where(no_value, np.nan, res)
    res = np.where(beyond, lowest if direction > 0 else highest, res).astype(y.dtype)
    return _in_kind_of(x, res, f)


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
    >>> ulp(2**61 - 1, "fp32") == 2.0**(60 - 23)  # the binade of the exact integer, not 2^61's
    True
    """
    f = get_format(fmt)
    lead = _leading_exponent(x)
    a = np.abs(np.asarray(x if lead is None else 0.0, dtype=np.float64))
    if lead is None:
        _, e = np.frexp(a)  # a = m × 2^e with 0.5 <= m < 1, so the leading bit is 2^(e-1)
        lead = np.where(a == 0, f.emin, e - 1)
    lead = np.clip(lead, f.emin, f.emax)
    res = np.ldexp(1.0, lead - f.man_bits)
    res = np.where(np.isfinite(a), res, np.nan)
    return float(res) if np.ndim(res) == 0 else res


def _leading_exponent(x: Any) -> Any:
    """floor(log2 |x|) for exact input kinds (integers, Fraction, Decimal), where float64 could
    round x up into the next binade (2^61 - 1 becomes 2^61); None for other input. Zero gives
    a very small exponent (the caller clips it to emin)."""
    if _is_rational_scalar(x):
        q = abs(_exact_fraction(x))
        if q == 0:
            return -(1 << 20)
        e = q.numerator.bit_length() - q.denominator.bit_length()
        return e - 1 if Fraction(2) ** e > q else e
    if isinstance(x, np.ndarray) and x.dtype.kind in "iu":
        # Exact bit lengths, vectorised: the top 53 bits of a 64-bit magnitude are exact in
        # float64, and frexp gives their bit length.
        n = _native(x).astype(np.int64 if x.dtype.kind == "i" else np.uint64)
        if n.dtype == np.int64:
            mag = np.where(n < 0, (~n).view(np.uint64) + np.uint64(1), n.view(np.uint64))
        else:
            mag = n
        big = mag >= np.uint64(_F64_EXACT_INT)
        _, e = np.frexp(np.where(big, mag >> np.uint64(11), mag).astype(np.float64))
        lead = np.where(big, e - 1 + 11, e - 1)
        return np.where(mag == 0, -(1 << 20), lead)
    return None
