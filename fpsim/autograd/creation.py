"""Making tensors: ``from_numpy`` (shared memory), and the factories ``zeros``, ``ones``,
``full``, ``zeros_like``, ``ones_like``, ``randn``, ``rand``, ``arange`` (``tensor`` itself is in
:mod:`fpsim.autograd.tensor`).

>>> zeros(2, format="bf16"), full((2,), 0.1, format="fp16")
(tensor([0., 0.], format=bf16), tensor([0.09997559, 0.09997559], format=fp16))
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import numpy as np

from ..formats import Format, FormatLike, fp32, get_format
from .generator import as_generator
from .tensor import Tensor, infer_format, tensor
from .tensor_ops import _shape_arg

__all__ = [
    "from_numpy",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "rand",
    "randn",
    "arange",
]


_NOT_WRITABLE = (
    "The given NumPy array is not writable, and fpsim writes tensors in place through their "
    "arrays (in-place ops, optimizer steps). Writing to this tensor will raise. You may want to "
    "copy the array to protect its data or make it writable before converting it to a tensor."
)


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor that shares ``ndarray``'s memory, as ``torch.from_numpy``: writing into either
    changes the other. The format is the dtype's: float32 -> fp32, float64 -> fp64; int64 and
    bool arrays give integer tensors.

    Other dtypes raise ``TypeError``: fpsim keeps fp16, bf16 and fp8 values in float32 arrays
    and integers in int64 ones, so a float16 (ml_dtypes, int32, ...) array cannot be shared
    (``torch.from_numpy`` takes float16 and every integer width); :func:`tensor` copies such
    an array, with the format of its dtype. A non-native byte order raises ``ValueError`` and a
    read-only array warns, as in PyTorch.

    >>> a = np.array([1.0, 2.0], dtype=np.float32)
    >>> t = from_numpy(a)
    >>> a[0] = -1.0
    >>> t
    tensor([-1.,  2.], format=fp32)
    """
    if not isinstance(ndarray, np.ndarray):
        tp = type(ndarray)
        name = tp.__name__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__name__}"
        raise TypeError(f"expected np.ndarray (got {name})")
    dt = ndarray.dtype
    if not dt.isnative:
        raise ValueError(
            "given numpy array has byte order different from the native byte order. "
            "Conversion between byte orders is currently not supported."
        )
    if dt == np.float32 or dt == np.float64:
        fmt: Format | None = get_format(dt)
    elif dt == np.int64 or dt == np.bool_:
        fmt = None
    else:
        raise TypeError(
            f"can't convert np.ndarray of type {dt.type.__module__}.{dt.type.__name__}. The only "
            "supported types are: float64, float32, int64, and bool. (fpsim keeps fp16, bf16 "
            "and fp8 values in float32 arrays and integers in int64 ones; fpsim.tensor(array) "
            "copies an array of any other dtype, in the format of its dtype.)"
        )
    if not ndarray.flags.writeable:
        warnings.warn(_NOT_WRITABLE, UserWarning, stacklevel=2)
    return Tensor._make(ndarray, fmt)



def _default(format: FormatLike | None) -> FormatLike:
    """``format=None`` of a factory: fp32, the default dtype (the float64 samples and fills
    below are not fp64 data)."""
    return fp32 if format is None else format


def zeros(*shape, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    return tensor(np.zeros(_shape_arg(shape)), _default(format), requires_grad)


def ones(*shape, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    return tensor(np.ones(_shape_arg(shape)), _default(format), requires_grad)


def full(shape, value: float, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    """``value`` everywhere, rounded once (an integer from its exact value); ``format=None``:
    the value's own (a Python float: fp32, an int: an int64 tensor), as ``torch.full``."""
    v = value.item() if isinstance(value, Tensor) else value
    fmt = infer_format(v) if format is None else format
    fill = v if isinstance(v, (numbers.Integral, np.bool_)) else float(v)
    return tensor(np.full(_shape_arg((shape,)), fill), fmt, requires_grad)


def zeros_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return tensor(np.zeros(t.shape), t.dtype, requires_grad)


def ones_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return tensor(np.ones(t.shape), t.dtype, requires_grad)


def randn(
    *shape, format: FormatLike = "fp32", generator: Any = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal samples (drawn in float64 from ``generator``, then rounded once)."""
    g = as_generator(generator)
    return tensor(g.standard_normal(_shape_arg(shape)), _default(format), requires_grad)


def rand(
    *shape, format: FormatLike = "fp32", generator: Any = None, requires_grad: bool = False
) -> Tensor:
    """Uniform [0, 1) samples (drawn in float64 from ``generator``, then rounded once)."""
    g = as_generator(generator)
    return tensor(g.random(_shape_arg(shape)), _default(format), requires_grad)


def arange(start, end=None, step=1, format: FormatLike | None = None) -> Tensor:
    """Like ``torch.arange``: integers give an int64 tensor, floats fp32 (the default dtype),
    unless a format is given."""
    arr = np.arange(start, end, step) if end is not None else np.arange(start)
    return tensor(arr, _default(format) if arr.dtype.kind == "f" else format)
