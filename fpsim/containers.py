"""What :func:`fpsim.round_to` gives back: a result in the input's own kind of container.

The rule, in one place:

* Python numbers give a Python float; lists and tuples a float64 array.
* A numpy array or scalar of dtype ``D`` gives the same dtype ``D`` when every value of the
  format fits in it (``fpsim.Format.fits_in``: float16 holds fp8, bfloat16 holds fp8_e5m2), else
  the smallest of float16, float32, float64 that holds the format. So float16 in, fp8 out stays
  float16; float16 in, bf16 out becomes float32 (bf16's range does not fit in float16).
* A PyTorch tensor gives a PyTorch tensor on the same device, by the same dtype rule
  (``torch.bfloat16`` and the float8 dtypes included), detached from any graph. A CPU tensor is
  viewed as a numpy array without a copy (bf16 and float8 through their integer bits and
  ml_dtypes), and the result is handed back the same way. A CUDA tensor goes to the CUDA kernels
  through ``__cuda_array_interface__`` and never leaves the device (this path needs a GPU and is
  not run by the test suite on machines without one).

This module never imports PyTorch itself: a tensor is recognised by its type's module, and only
then is ``torch`` (already imported by whoever made the tensor) used.

>>> import numpy as np
>>> from fpsim import get_format
>>> result_dtype(np.dtype(np.float16), get_format("fp8_e4m3"))
dtype('float16')
>>> result_dtype(np.dtype(np.float16), get_format("bf16"))
dtype('float32')
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from .formats import Format

__all__ = ["result_dtype", "is_torch_tensor", "torch_to_numpy", "numpy_to_torch", "torch_apply"]

_STANDARD = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def result_dtype(in_dtype: np.dtype, f: Format) -> np.dtype:
    """The numpy dtype of the result of rounding ``in_dtype`` data to ``f`` (see the rule)."""
    if _is_float_dtype(in_dtype) and f.fits_in(in_dtype):
        return np.dtype(in_dtype)
    return next(d for d in _STANDARD if f.fits_in(d))


def _is_float_dtype(dt: np.dtype) -> bool:
    """numpy floats and ml_dtypes' floats (kind 'V' with a float ``finfo``)."""
    if dt.kind == "f":
        return True
    try:
        ml_dtypes.finfo(dt)
    except (TypeError, ValueError):
        return False
    return dt.kind == "V"


# ---- PyTorch ----------------------------------------------------------------------------------
def is_torch_tensor(x: Any) -> bool:
    """True for a ``torch.Tensor`` (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _dtype_pairs() -> dict:
    """torch dtype -> (numpy dtype, the same-width torch integer dtype to reinterpret through)."""
    import torch

    pairs = {
        torch.float16: (np.dtype(np.float16), None),
        torch.float32: (np.dtype(np.float32), None),
        torch.float64: (np.dtype(np.float64), None),
        torch.bfloat16: (np.dtype(ml_dtypes.bfloat16), torch.int16),
    }
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        if hasattr(torch, name) and hasattr(ml_dtypes, name):
            pairs[getattr(torch, name)] = (np.dtype(getattr(ml_dtypes, name)), torch.uint8)
    return pairs


def torch_to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor's data as a numpy array sharing its memory (made contiguous first if it is
    not), detached from autograd; bf16 and float8 are read through their integer bits."""
    t = t.detach()
    if t.device.type != "cpu":
        raise ValueError(f"expected a CPU tensor, got one on {t.device}")
    t = t.contiguous()
    pair = _dtype_pairs().get(t.dtype)
    if pair is None:
        if t.dtype.is_floating_point or t.dtype.is_complex:
            raise TypeError(f"{t.dtype} tensors are not supported")
        return t.numpy()  # integers and bool
    np_dt, via = pair
    return t.numpy() if via is None else t.view(via).numpy().view(np_dt)


def numpy_to_torch(a: np.ndarray, device: Any = "cpu") -> Any:
    """The inverse of :func:`torch_to_numpy`: a tensor sharing ``a``'s memory (then moved to
    ``device``), for float16/32/64 and ml_dtypes bfloat16/float8 arrays."""
    import torch

    if not a.flags.c_contiguous:
        a = a.copy()  # (np.ascontiguousarray would also turn a 0-d array into 1-d)
    for tdt, (np_dt, via) in _dtype_pairs().items():
        if np_dt == a.dtype:
            int_np = {torch.int16: np.int16, torch.uint8: np.uint8}.get(via)
            t = torch.from_numpy(a) if via is None else torch.from_numpy(a.view(int_np)).view(tdt)
            return t.to(device)
    raise TypeError(f"no torch dtype for numpy {a.dtype}")


def torch_apply(
    x: Any, f: Format, on_numpy: Callable[[np.ndarray], np.ndarray],
    on_device: Callable[[Any], Any],
) -> Any:  # fmt: skip
    """Round the tensor ``x`` with ``on_numpy`` (CPU: numpy in, numpy out) or ``on_device`` (CUDA:
    a float32/float64 CUDA tensor in, a CUDA array out), and return a tensor by the rule."""
    import torch

    x = x.detach()
    pairs = _dtype_pairs()
    if x.dtype in pairs:
        in_np = pairs[x.dtype][0]
    elif x.dtype.is_floating_point or x.dtype.is_complex:
        raise TypeError(f"{x.dtype} tensors are not supported")
    else:
        in_np = np.dtype(np.int64)  # integers and bool: the smallest float dtype holding f
    out_np = result_dtype(in_np, f)
    if x.device.type == "cpu":
        res = np.asarray(on_numpy(torch_to_numpy(x)))
        return numpy_to_torch(res.astype(out_np, copy=False))
    # CUDA: widen to a kernel container on the device (exact), round there, narrow back.
    work = x.to(torch.float32 if f.fits_in(np.float32) and x.element_size() <= 4 else torch.float64)
    res = torch.as_tensor(on_device(work.contiguous()), device=x.device)
    out_t = next(t for t, (d, _) in pairs.items() if d == out_np)
    return host_nans(res, res.to(out_t), out_np)  # exact: the values are the format's


def host_nans(wide: Any, narrow: Any, out_np: np.dtype) -> Any:
    """``narrow`` (the tensor ``wide`` cast to a narrower float dtype, ``out_np`` in numpy) with
    each NaN's bits set as the host's cast sets them: a GPU's narrowing makes every NaN its own
    canonical one (fp16 0x7FFF, bf16 0x7FC0: the sign lost), numpy's and ml_dtypes' casts keep
    the sign and the quiet NaN's leading payload. So a result is bit for bit the same on
    either device. In place; returns ``narrow``."""
    import torch

    if narrow.element_size() >= wide.element_size():
        return narrow
    nan = torch.isnan(wide)
    if bool(nan.any()):
        host = np.array([np.nan, -np.nan], np.float32 if wide.dtype == torch.float32
                        else np.float64).astype(out_np)  # fmt: skip
        pos, neg = (int(v) for v in host.view({1: np.uint8, 2: np.int16}[host.itemsize]))
        bits = narrow.view({1: torch.uint8, 2: torch.int16}[narrow.element_size()])
        neg_sign = torch.signbit(wide)
        bits[nan & ~neg_sign] = pos
        bits[nan & neg_sign] = neg
    return narrow
