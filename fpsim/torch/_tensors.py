"""Torch tensors as fpsim reads them: their format, their bits without a copy, on CPU or GPU.

A CPU tensor's memory is viewed as a numpy array (:func:`fpsim.containers.torch_to_numpy`;
bf16 and fp8 through their integer bits). A CUDA tensor is viewed as integers of its width
(``t.view(torch.int16)`` for fp16/bf16: ``__cuda_array_interface__`` has no bf16 type) and
handed to fpsim's numba CUDA kernels through that interface, so it never leaves the device. The
CUDA simulator's tests call the same functions with numba device arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..containers import torch_to_numpy

#: torch float dtypes -> fpsim format names (the formats whose values the dtype holds exactly).
FORMAT_OF = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.float64: "fp64",
}
for _name, _fmt in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _name):
        FORMAT_OF[getattr(torch, _name)] = _fmt

_INT_OF = {2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.uint8}
#: the formats whose bit patterns the histogram kernels read directly (IEEE style)
_BITS_FORMATS = ("fp16", "bf16", "fp32", "fp64", "fp8_e5m2")
#: Tensor.numpy() reads these: their memory is viewed as the integers of their width
_NUMPY_INTS = {torch.float16: np.dtype(np.int16), torch.float32: np.dtype(np.int32),
               torch.float64: np.dtype(np.int64)}  # fmt: skip


def format_name(t: torch.Tensor) -> str:
    """The fpsim format of a float tensor's dtype; TypeError for other dtypes."""
    name = FORMAT_OF.get(t.dtype)
    if name is None:
        raise TypeError(f"fpsim reads float tensors (fp16, bf16, fp32, fp64, fp8), not {t.dtype}")
    return name


def is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in FORMAT_OF


def bits_of(t: torch.Tensor) -> tuple[Any, str] | None:
    """``(integer bits, format name)`` of a float tensor, without copying a contiguous one:
    a numpy integer view for a CPU tensor, an integer torch view (with
    ``__cuda_array_interface__``) for a CUDA tensor. None for formats the histogram kernels do
    not read from bits (fp8 E4M3)."""
    name = FORMAT_OF.get(t.dtype) or format_name(t)
    if name not in _BITS_FORMATS:
        return None
    ints = _NUMPY_INTS.get(t.dtype)  # (this runs per recorded tensor: few torch calls)
    if ints is not None and t.is_cpu and t.is_contiguous():
        return t.detach().numpy().reshape(-1).view(ints), name  # the tensor's memory
    ints = t.detach().contiguous().view(_INT_OF[t.element_size()]).reshape(-1)
    return (ints.numpy() if ints.device.type == "cpu" else ints), name


def values_of(t: torch.Tensor) -> np.ndarray:
    """The tensor's values as a host numpy array (its own dtype where numpy has one; a copy
    only for a GPU tensor or a non-contiguous one)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return torch_to_numpy(t)


def from_numpy_like(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """``a`` as a tensor of ``like``'s dtype and device (rounded to that dtype by torch's cast
    when it is narrower than ``a``'s)."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(device=like.device, dtype=like.dtype)
