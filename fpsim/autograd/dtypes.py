"""Names of number types, as the engine reads them: which argument names an integer tensor
type, which a float Format, and the format of numpy data.

>>> _resolve_format("int32") is None, _resolve_format("bf16").name
(True, 'bf16')
>>> _dtype_format(np.dtype(np.float16)).name
'fp16'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..formats import Format, get_format


def _integer_dtype(fmt: Any) -> np.dtype | None:
    """The numpy dtype of the integer tensor ``fmt`` names -- bool, or int64 for every integer
    name and dtype (``"int32"``, ``np.uint8``, ``torch.int64``: fpsim's integers are int64) --
    or None when ``fmt`` names no integer type."""
    if type(fmt).__module__ == "torch" and type(fmt).__name__ == "dtype":
        if fmt.is_floating_point or fmt.is_complex:
            return None
        return np.dtype(bool) if str(fmt) == "torch.bool" else np.dtype(np.int64)
    if isinstance(fmt, str):
        fmt = fmt.strip().lower().replace("torch.", "").replace("numpy.", "").replace("np.", "")
    if isinstance(fmt, (str, type, np.dtype)):
        try:
            kind = np.dtype(fmt).kind
        except (TypeError, ValueError):  # "fp16", "e4m3", "Format(4, 3)": not integer types
            return None
        if kind in "iub":
            return np.dtype(bool) if kind == "b" else np.dtype(np.int64)
    return None


def _resolve_format(fmt: Any) -> Format | None:
    """A float Format, or None for integer/bool tensors (``"int64"``, ``"bool"``, numpy and
    torch integer dtypes). Float formats: anything :func:`fpsim.get_format` takes (a Format, a
    name, a numpy, ml_dtypes or torch dtype)."""
    if fmt is None or isinstance(fmt, Format):
        return fmt
    if _integer_dtype(fmt) is not None:
        return None
    return get_format(fmt)


def _dtype_format(dt: np.dtype) -> Format | None:
    """The format of numpy data of dtype ``dt`` (float16 -> fp16, ml_dtypes bfloat16 -> bf16,
    float8_e4m3fn -> fp8_e4m3, float64 -> fp64, ...); None for integers and bool."""
    if dt.kind in "iub":
        return None
    try:
        return get_format(dt)
    except (TypeError, ValueError):
        raise TypeError(f"cannot make a tensor from {dt} data") from None


def _ints_fit_int64(arr: np.ndarray) -> bool:
    """True when every integer of ``arr`` (an integer or object array) is an int64."""
    if arr.dtype.kind == "i":
        return True
    i64 = np.iinfo(np.int64)
    return all(i64.min <= int(v) <= i64.max for v in (arr.min(), arr.max()))
