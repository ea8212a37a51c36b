"""The two core steps of dynamic loss scaling, as functions shaped like PyTorch's private ops.

``GradScaler`` is built on exactly these two calls (PyTorch's is built on
``torch._amp_foreach_non_finite_check_and_unscale_`` and ``torch._amp_update_scale_``):

>>> import numpy as np
>>> from fpsim.amp.functional import (amp_foreach_non_finite_check_and_unscale_,
...                                   amp_update_scale_)
>>> g = [np.array([1024.0, 2048.0], np.float32), np.array([np.inf, 4.0], np.float32)]
>>> found_inf = np.zeros(1, np.float32)
>>> amp_foreach_non_finite_check_and_unscale_(g, found_inf, np.array([2.0**-10], np.float32))
>>> g[0], g[1], found_inf        # unscaled even though an inf was found
(array([1., 2.], dtype=float32), array([       inf, 0.00390625], dtype=float32), array([1.], \
dtype=float32))
>>> scale, tracker = np.array([1024.0], np.float32), np.zeros(1, np.int32)
>>> amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2000)    # inf: back off
array([512.], dtype=float32)

Arguments may be numpy arrays, fpsim Tensors (gradients of any format: the product is taken in
the container's precision -- float32, as PyTorch's opmath for fp32/bf16/fp16 -- and then rounded
once to the tensor's format) or CUDA arrays (anything with ``__cuda_array_interface__``, run by
:mod:`fpsim.kernels.amp_cuda`). Host arrays run the numba CPU kernels of
:mod:`fpsim.kernels.amp_cpu`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..autograd.precision import _info, to_format
from ..autograd.tensor import Tensor
from ..core import _is_device_array

__all__ = ["amp_foreach_non_finite_check_and_unscale_", "amp_update_scale_"]


def _host(x: Any, name: str, dtype, size: int = 1) -> np.ndarray:
    a = x.data if isinstance(x, Tensor) else x
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.size != size:
        raise TypeError(f"{name} must be a {size}-element {np.dtype(dtype)} array")
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError(f"{name} must be a writeable contiguous array")
    return a.reshape(size)


def _unscale_array(a: np.ndarray, found_inf: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """Run the CPU kernel on ``a`` in place (via a contiguous copy when needed); returns the
    array that holds the result."""
    from ..kernels import amp_cpu

    if a.dtype not in (np.float32, np.float64):
        raise TypeError(f"gradients must be float32 or float64 arrays, got {a.dtype}")
    if a.flags.c_contiguous and a.flags.writeable:
        amp_cpu.non_finite_check_and_unscale(a.reshape(-1), found_inf, inv)
        return a
    work = np.ascontiguousarray(a).copy()
    amp_cpu.non_finite_check_and_unscale(work.reshape(-1), found_inf, inv)
    if a.flags.writeable:
        np.copyto(a, work)
        return a
    return work


def amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale) -> None:
    """For each gradient: set ``found_inf[0] = 1`` if it holds inf or NaN, then multiply it by
    ``inv_scale[0]`` in place (PyTorch's ``_amp_foreach_non_finite_check_and_unscale_``).

    ``grads``: a list of float32/float64 numpy arrays or fpsim Tensors (or CUDA arrays);
    ``found_inf``, ``inv_scale``: one-element float32 arrays (CUDA arrays for CUDA gradients).
    The check is made on the values *before* the multiplication; ``found_inf`` is never reset.
    """
    grads = list(grads)
    if grads and all(_is_device_array(g) for g in grads):
        from ..kernels import amp_cuda

        amp_cuda.non_finite_check_and_unscale(grads, found_inf, inv_scale)
        return
    fi = _host(found_inf, "found_inf", np.float32)
    inv = _host(inv_scale, "inv_scale", np.float32)
    for g in grads:
        if isinstance(g, Tensor):
            if g.format is None:
                raise TypeError("cannot unscale an integer tensor")
            out = _unscale_array(g.data, fi, inv)
            if not _info(g.format).native and inv[0] != 1:
                out = to_format(out, g.format)  # PyTorch: float32 opmath, one rounding back
            if out is not g.data:
                if g.data.flags.writeable:
                    np.copyto(g.data, out)
                else:
                    g.data = out
        elif isinstance(g, np.ndarray):
            _unscale_array(g, fi, inv)
        else:
            raise TypeError(f"expected arrays or Tensors, got {type(g).__name__}")


def amp_update_scale_(scale, growth_tracker, found_inf, growth_factor: float,
                      backoff_factor: float, growth_interval: int):  # fmt: skip
    """PyTorch's ``_amp_update_scale_``: update the one-element float32 ``scale`` and int32
    ``growth_tracker`` in place from ``found_inf[0]``; returns ``scale``.

    * ``found_inf[0] != 0``: ``scale = float32(float64(scale) * backoff_factor)``, tracker 0;
    * otherwise the tracker counts successful steps; when it reaches ``growth_interval`` the
      scale becomes ``float32(float64(scale) * growth_factor)`` *if that is finite* (else it
      stays) and the tracker restarts at 0.
    """
    if _is_device_array(scale):
        from ..kernels import amp_cuda

        return amp_cuda.update_scale(
            scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval
        )
    from ..kernels import amp_cpu

    s = _host(scale, "scale", np.float32)
    t = _host(growth_tracker, "growth_tracker", np.int32)
    fi = _host(found_inf, "found_inf", np.float32)
    amp_cpu.update_scale(
        s, t, fi, float(growth_factor), float(backoff_factor), int(growth_interval)
    )
    return scale
