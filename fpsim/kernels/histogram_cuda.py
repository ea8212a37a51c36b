"""The range-histogram count on a GPU: :func:`fpsim.kernels.histogram.classify` run by one
CUDA thread per element (grid-stride), adding into a small table in device memory with atomic
adds; only that table (a few thousand counters) is copied back.

The input never leaves the device: any object with ``__cuda_array_interface__`` (a PyTorch
CUDA tensor viewed as integers -- bf16 as ``int16``, since the interface has no bf16 type --,
CuPy, a numba device array) is wrapped as a numba device array without a copy
(:func:`fpsim.kernels.cuda._as_device_array`, which also takes the CUDA simulator's arrays).
As in :mod:`fpsim.kernels.cuda`, nothing is compiled and ``numba.cuda`` is not imported until
the first call; the kernel is the same Python code as the CPU's (the simulator runs it as is).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import cuda as kcuda
from . import histogram as khist

THREADS = 256
MAX_BLOCKS = 1024  # grid-stride beyond this: fewer threads contending for the same counters

cuda = None  # numba.cuda, bound on first use (read by the kernel body as a global)
_slot_of = None
_count_past = None
_fraction_of = None
_compiled = None
_lock = threading.Lock()


def _histogram_kernel(bits, exp_bits, man_bits, bias, first, thresholds, lut, shift, table,
                      top):  # fmt: skip
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    magmask = (1 << (exp_bits + man_bits)) - 1
    ncols = thresholds.size + 2
    nslots = table.size
    for i in range(start, bits.size, stride):
        mag = np.int64(bits[i]) & magmask
        s = _slot_of(mag, exp_bits, man_bits, bias, first, ncols, nslots, lut, shift)
        if s < 0:
            s = -1 - s + _count_past(_fraction_of(mag, man_bits), thresholds)
        cuda.atomic.add(table, s, 1)
        if s != nslots - 1:
            cuda.atomic.max(top, 0, mag)


def _kernel():
    global cuda, _slot_of, _count_past, _fraction_of, _compiled
    with _lock:
        if _compiled is None:
            numba_cuda = kcuda._numba_cuda()
            cuda = numba_cuda
            fns = (khist.slot_of, khist.count_past, khist.fraction_of)
            if not kcuda._simulated():  # (the simulator runs the Python functions themselves)
                fns = tuple(numba_cuda.jit(device=True)(fn) for fn in fns)
            _slot_of, _count_past, _fraction_of = fns
            _compiled = numba_cuda.jit(cache=True)(_histogram_kernel)
    return _compiled


def histogram_bits_device(bits: Any, f: Any, exp_bits: int, man_bits: int, bias: int,
                          first: int, thresholds: np.ndarray, lut: np.ndarray, shift: int,
                          table: np.ndarray) -> int:  # fmt: skip
    """As :func:`fpsim.kernels.histogram.histogram_bits` (same arguments after the format
    ``f``), for integer codes in GPU memory: adds into the host array ``table`` and returns the
    largest finite magnitude code (-1 if none)."""
    d = kcuda._as_device_array(bits)
    if np.dtype(d.dtype).kind not in "iu":
        raise TypeError(f"bits must be integers, got a device array of {d.dtype}")
    if np.dtype(d.dtype).itemsize * 8 < f.bits:
        raise TypeError(f"{f.name} codes need {f.bits} bits, got {d.dtype}")
    if not d.is_c_contiguous():
        raise ValueError("the device array must be C-contiguous")
    n = int(d.size)
    if n == 0:
        return -1
    flat = d.reshape(n)
    numba_cuda = kcuda._numba_cuda()
    table_d = numba_cuda.to_device(np.zeros_like(table))
    top_d = numba_cuda.to_device(np.full(1, -1, np.int64))
    thr_d, lut_d = (numba_cuda.to_device(np.ascontiguousarray(a, np.int64))
                    for a in (thresholds, lut))  # fmt: skip
    blocks = min((n + THREADS - 1) // THREADS, MAX_BLOCKS)
    _kernel()[blocks, THREADS](flat, int(exp_bits), int(man_bits), int(bias), int(first),
                               thr_d, lut_d, int(shift), table_d, top_d)  # fmt: skip
    table += table_d.copy_to_host()
    return int(top_d.copy_to_host()[0])
