"""numba.cuda kernels for the two core steps of dynamic loss scaling, the GPU twins of
:mod:`fpsim.kernels.amp_cpu` (same contracts, same results bit for bit, except the payload of a
NaN gradient: ``NaN * inv_scale`` is the canonical NaN ``0x7fffffff`` in a GPU's float32
multiply, while x86 keeps the payload -- the same difference as between PyTorch's own CPU and
CUDA kernels, which this mirrors).

* ``_unscale_kernel``: one thread per element of one gradient (PyTorch's
  ``_amp_foreach_non_finite_check_and_unscale_`` launches one multi-tensor kernel over the list;
  here the host loops over the list, one launch per tensor). A thread that meets inf/NaN in the
  *scaled* value writes ``found_inf[0] = 1`` (every such thread writes the same value, so the
  race is benign, exactly as in PyTorch's kernel), then stores ``v * inv_scale[0]`` in the
  array's own precision.
* ``_update_kernel``: a single thread applies ``_amp_update_scale_`` to the one-element float32
  ``scale`` and int32 ``growth_tracker`` (float64 factor arithmetic, growth only to a finite
  value). Scale, tracker and found_inf stay on the device: no host synchronisation, as in
  PyTorch.

The update rule is :func:`fpsim.kernels.amp_scalar.next_scale`, the function the CPU kernel
compiles, made a CUDA device function (it calls nothing, so no device twins are needed). Nothing
is compiled, and ``numba.cuda`` is not imported, until the first call (see
:mod:`fpsim.kernels.cuda` for why); under ``NUMBA_ENABLE_CUDASIM=1`` they run in numba's CUDA
simulator (the test-suite's ``tests/cudasim/test_cuda_amp.py``).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from . import amp_scalar

THREADS = 256  # threads per block

cuda = None  # numba.cuda, bound on first use (the simulator swaps it per launch)
_next_scale = None  # amp_scalar.next_scale as a device function, bound on first use


def _unscale_kernel(grad, found_inf, inv_scale):
    i = cuda.grid(1)
    if i < grad.size:
        v = grad[i]
        if not math.isfinite(v):
            found_inf[0] = 1.0
        inv = inv_scale[0]
        if inv != 1:
            grad[i] = v * inv


def _update_kernel(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                   growth_interval):  # fmt: skip
    if cuda.grid(1) == 0:
        scale[0], growth_tracker[0] = _next_scale(
            scale[0], growth_tracker[0], found_inf[0], growth_factor, backoff_factor,
            growth_interval,
        )  # fmt: skip


_compiled: dict | None = None
_lock = threading.Lock()


def _kernels() -> dict:
    global _compiled, cuda, _next_scale
    with _lock:
        if _compiled is None:
            from .cuda import _numba_cuda, _simulated

            numba_cuda = _numba_cuda()
            cuda = numba_cuda
            # the simulator runs the Python function itself; a GPU gets a device function
            rule = amp_scalar.next_scale
            _next_scale = rule if _simulated() else numba_cuda.jit(device=True)(rule)
            _compiled = {
                "unscale": numba_cuda.jit(cache=True)(_unscale_kernel),
                "update": numba_cuda.jit(cache=True)(_update_kernel),
            }
    return _compiled


def _device(x: Any, name: str, dtypes: tuple, size: int | None = None):
    from .cuda import _as_device_array

    d = _as_device_array(x)
    if np.dtype(d.dtype) not in dtypes:
        raise TypeError(f"{name}: expected a CUDA array of {' or '.join(map(str, dtypes))}, "
                        f"got {d.dtype}")  # fmt: skip
    if not d.is_c_contiguous():
        raise ValueError(f"{name}: the CUDA array must be C-contiguous")
    if size is not None and d.size != size:
        raise ValueError(f"{name}: expected {size} element(s), got {d.size}")
    return d


_F32 = (np.dtype(np.float32),)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_I32 = (np.dtype(np.int32),)


def non_finite_check_and_unscale(grads, found_inf, inv_scale) -> None:
    """``_amp_foreach_non_finite_check_and_unscale_`` on the GPU: ``grads`` a list of
    C-contiguous float32/float64 CUDA arrays (anything with ``__cuda_array_interface__``),
    unscaled in place; ``found_inf`` and ``inv_scale`` one-element float32 CUDA arrays."""
    k = _kernels()["unscale"]
    fi = _device(found_inf, "found_inf", _F32, 1)
    inv = _device(inv_scale, "inv_scale", _F32, 1)
    for j, g in enumerate(grads):
        d = _device(g, f"grads[{j}]", _FLOATS)
        n = int(d.size)
        if n:
            k[(n + THREADS - 1) // THREADS, THREADS](d.reshape(n), fi, inv)


def update_scale(scale, growth_tracker, found_inf, growth_factor: float, backoff_factor: float,
                 growth_interval: int):  # fmt: skip
    """``_amp_update_scale_`` on the GPU (one thread); returns ``scale``."""
    k = _kernels()["update"]
    s = _device(scale, "scale", _F32, 1)
    t = _device(growth_tracker, "growth_tracker", _I32, 1)
    fi = _device(found_inf, "found_inf", _F32, 1)
    k[1, 1](s, t, fi, float(growth_factor), float(backoff_factor), int(growth_interval))
    return scale
