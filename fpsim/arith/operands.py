"""Operands of fpsim.arith: turning inputs into checked float32/float64 arrays, choosing the
container of a result and shaping it back (internal to the package).

An operation "in fp16" takes fp16 operands: :func:`operand` checks them (a vectorised pass,
much cheaper than the operation; :func:`fpsim.kernels.operands.check_values`) and raises
``ValueError`` naming the first offending value, or rounds them to the format first when
``round_inputs=True``. Results follow :mod:`fpsim.containers`' rule (:func:`out_dtype`).
"""

from __future__ import annotations

import decimal
import numbers
from fractions import Fraction
from typing import Any

import numpy as np

from ..containers import result_dtype
from ..core import _as_container, round_to
from ..formats import Format
from ..kernels.operands import check_values, is_binary64, is_device

__all__ = [
    "is_python_scalar",
    "is_device",
    "as_array",
    "operand",
    "operands",
    "out_dtype",
    "kernel_array",
    "finish",
    "check_values",
    "is_binary64",
]


def is_python_scalar(x: Any) -> bool:
    """Python numbers (bool, int, float, Fraction, Decimal): a Python float comes out, and they
    do not decide the container (as in numpy)."""
    return isinstance(x, (int, float, Fraction, decimal.Decimal))


def as_array(x: Any, name: str) -> tuple[np.ndarray, bool]:
    """``x`` as a float32/float64 array (exactly) and whether it was a scalar."""
    try:
        return _as_container(x)
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from None
    except ValueError:
        # an integer or fraction float64 cannot hold: no format value is such a number
        raise ValueError(
            f"{name} holds a number that is not a value of any format (no float64 holds it "
            "exactly, e.g. an integer beyond 2^53 or 1/3); round it first with "
            "fpsim.round_to(x, fmt), or pass round_inputs=True"
        ) from None


def _is_exact_input(x: Any) -> bool:
    """Input whose exact value float64 may not hold: Python/numpy integers, Fraction, Decimal,
    integer arrays."""
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (numbers.Integral, Fraction, decimal.Decimal)):
        return True
    if isinstance(x, (list, tuple)):  # a list of Python ints: read as an integer array
        return np.asarray(x).dtype.kind in "iu"
    return isinstance(x, np.ndarray) and x.dtype.kind in "iu"


def operand(
    x: Any, name: str, f: Format, round_inputs: bool, check: bool = True
) -> tuple[np.ndarray, bool]:
    """One operand as a float32/float64 array, checked to hold values of ``f`` (or rounded to
    ``f`` when ``round_inputs``); also whether it was a scalar."""
    if round_inputs and _is_exact_input(x):
        # integers beyond 2^53, Fraction, Decimal: rounded once from their exact value (through
        # float64 they would be rounded twice)
        src = np.asarray(x) if isinstance(x, (list, tuple)) else x
        return np.asarray(round_to(src, f), dtype=np.float64), np.ndim(x) == 0
    arr, is_scalar = as_array(x, name)
    if round_inputs:
        src = arr if f.fits_in(arr.dtype) else arr.astype(np.float64)
        arr = np.asarray(round_to(src, f))
    elif check:
        check_values(arr, f, name)
    return arr, is_scalar


def _container(arrs: list[np.ndarray], xs: tuple, f: Format) -> np.dtype:
    """float32 when every operand that is not a Python scalar is float32 and ``f`` fits in it
    (Python scalars do not vote, as in numpy); float64 otherwise."""
    f32 = np.dtype(np.float32)
    votes = [a.dtype for a, x in zip(arrs, xs, strict=True) if not is_python_scalar(x)]
    if votes and all(v == f32 for v in votes) and f.fits_in(f32):
        return f32
    return np.dtype(np.float64)


def out_dtype(xs: tuple, f: Format) -> np.dtype:
    """The result's dtype by the rule of :mod:`fpsim.containers` (as for ``round_to``): the numpy
    operands' common dtype when every value of ``f`` fits in it, else the smallest of float16,
    float32, float64 that holds ``f``. Python numbers and lists count as float64."""
    dts = []
    for x in xs:
        if isinstance(x, (np.ndarray, np.generic)):
            dt = np.asarray(x).dtype
            dts.append(dt.newbyteorder("=") if not dt.isnative else dt)
        elif not is_python_scalar(x):
            dts.append(np.dtype(np.float64))  # lists, tuples: as round_to reads them
    if not dts:
        return np.dtype(np.float64)
    try:
        common = np.result_type(*dts)
    except TypeError:  # mixed ml_dtypes and numpy floats: no numpy promotion
        common = np.dtype(np.float64)
    return result_dtype(common, f)


def operands(
    xs: tuple, names: tuple, f: Format, round_inputs: bool, defer_check: bool = False
) -> tuple[list[np.ndarray], tuple, np.dtype, str]:
    """Check (or round) the operands, pick the container, broadcast.

    Returns the flat contiguous operands (one dtype), the broadcast shape, the container dtype
    and how to return a scalar result ("python", "numpy" or "" for arrays). With
    ``defer_check`` the operands that reach the kernel unchanged (already in the container
    dtype and full size) are left for the kernel to check in its own pass; the others are
    checked here, before a cast could hide a value that is not in the format.
    """
    arrs, scalars = [], []
    for x, name in zip(xs, names, strict=True):
        arr, is_scalar = operand(x, name, f, round_inputs=round_inputs, check=not defer_check)
        arrs.append(arr)
        scalars.append(is_scalar)
    container = _container(arrs, xs, f)
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrs))
    except ValueError:
        shapes = " ".join(str(a.shape) for a in arrs)
        raise ValueError(f"operands could not be broadcast together with shapes {shapes}") from None
    if defer_check and not round_inputs:
        for a, name in zip(arrs, names, strict=True):
            if a.dtype != container or a.shape != shape:
                check_values(a, f, name)
    flat = [kernel_array(a.astype(container, copy=False), shape).reshape(-1) for a in arrs]
    if all(scalars):
        kind = "python" if all(is_python_scalar(x) for x in xs) else "numpy"
    else:
        kind = ""
    return flat, shape, container, kind


def kernel_array(a: np.ndarray, shape: tuple | None = None) -> np.ndarray:
    """``a`` (broadcast to ``shape``) as a C-contiguous, writeable array: numba compiles one
    kernel per array type, and read-only views (``np.broadcast_to``) would be a second type."""
    if shape is not None and a.shape != shape:
        a = np.broadcast_to(a, shape)
    a = np.ascontiguousarray(a)
    return a if a.flags.writeable else a.copy()


def finish(res: np.ndarray, shape: tuple, kind: str, dtype: np.dtype | None = None) -> Any:
    """The result in its shape and dtype; a Python float or numpy scalar for scalar operands."""
    res = res.reshape(shape)
    if dtype is not None:
        res = res.astype(dtype, copy=False)  # exact: every value of the format fits
    if kind == "python":
        return float(res[()])
    if kind == "numpy":
        return res[()]
    return res
