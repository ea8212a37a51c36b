"""numba.cuda array kernels built from :mod:`fpsim.kernels.scalar`.

What runs where
    :func:`convert_device` and :func:`round_device` run on the host: they check the input, make
    integer views and launch one kernel, ``_convert_kernel``, on the GPU. The kernel gives each
    thread one element (a 1-D grid of ``THREADS``-thread blocks) and that thread calls
    ``scalar.convert`` (and ``scalar.random62`` for stochastic rounding). Those functions are
    the *same* ``register_jitable`` Python functions that :mod:`fpsim.kernels.cpu` compiles for
    the CPU and :mod:`fpsim.kernels.python` runs uncompiled, so all back ends run the same lines
    and agree bit for bit (stochastic rounding included: element ``i`` always uses
    ``random62(seed, i)``, whatever thread or CPU core handles it).

Why integer views
    ``scalar.convert`` works on bit patterns, not on float values. A C-contiguous float32
    (float64) array is reinterpreted, without a copy, as a flat ``int32`` (``int64``) array of
    the same bytes, exactly as :mod:`fpsim.kernels.cpu` does on the host. Each thread reads
    ``int(src[i])`` (a signed two's-complement pattern widened to int64), and writes back the
    signed pattern ``convert`` returns, which always lies in the range of the destination's
    integer type. Every format parameter is a plain int64 kernel argument, so the kernel is
    compiled once per (source, destination) integer dtype pair and serves every format and
    rounding mode; ``cache=True`` keeps the compiled code on disk between sessions.

Nothing here is compiled, and ``numba.cuda`` is not even imported, until the first call: fpsim
imports on machines without CUDA, and importing ``numba.cuda`` fixes once and for all whether
numba's CUDA *simulator* is used (the environment variable ``NUMBA_ENABLE_CUDASIM=1`` must be set
before that import).

The simulator
    With ``NUMBA_ENABLE_CUDASIM=1`` numba runs the kernel as plain Python, one Python thread per
    CUDA thread, on arrays that live in host memory. It executes the very same Python lines as the
    GPU build (kernel body, ``scalar.convert``, ``scalar.random62``), only uncompiled, which is
    how the test-suite checks the CUDA path on machines without a GPU. The simulator's device
    arrays do not expose ``__cuda_array_interface__``, and it has no ``cuda.as_cuda_array``;
    :func:`_as_device_array` bridges both (an interface pointer is a host pointer there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import scalar

THREADS = 256  # threads per block

# Bound to the ``numba.cuda`` module by :func:`_kernel` before the kernel is first compiled or
# run: the kernel body reads it as a global (``cuda.grid``), and the simulator swaps it for its
# fake per-launch module. Left as None so that importing this module never imports numba.cuda.
cuda = None

# The container layouts (exp_bits, man_bits, bias, fn) and the same-width signed integer views.
_CONTAINERS = {
    np.dtype(np.float32): ((8, 23, 127, 0), np.dtype(np.int32)),
    np.dtype(np.float64): ((11, 52, 1023, 0), np.dtype(np.int64)),
}
_INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _convert_kernel(src, dst,
                    src_e, src_m, src_b, src_fn, fmt_e, fmt_m, fmt_b, fmt_fn,
                    dst_e, dst_m, dst_b, dst_fn, mode, subnormals, saturate, seed):  # fmt: skip
    """One thread per element: ``dst[i] = convert(src[i])``."""
    i = cuda.grid(1)
    if i < src.size:
        rand = scalar.random62(seed, i) if mode == scalar.STOCHASTIC else 0
        dst[i] = scalar.convert(int(src[i]),
                                src_e, src_m, src_b, src_fn, fmt_e, fmt_m, fmt_b, fmt_fn,
                                dst_e, dst_m, dst_b, dst_fn, mode, subnormals, saturate, rand)  # fmt: skip


_compiled = None


def _kernel():
    """The ``cuda.jit`` dispatcher of ``_convert_kernel``, made on first use."""
    global _compiled, cuda
    if _compiled is None:
        from numba import cuda as numba_cuda

        cuda = numba_cuda
        _compiled = numba_cuda.jit(cache=True)(_convert_kernel)
    return _compiled


def _simulated() -> bool:
    """True when numba.cuda is the CUDA simulator (decided when numba.cuda was imported)."""
    from numba import cuda as numba_cuda

    config = getattr(numba_cuda, "config", None)
    if config is None:  # older numba-cuda: the setting lives in numba's own config
        from numba import config
    return bool(getattr(config, "ENABLE_CUDASIM", 0))


def _as_device_array(x: Any) -> Any:
    """A numba device array viewing the data of ``x`` (no copy).

    ``x``: any object with ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors, numba device
    arrays) or, under the simulator, a simulator device array.
    """
    from numba import cuda as numba_cuda

    if not _simulated():
        if not hasattr(x, "__cuda_array_interface__"):
            raise TypeError(f"expected a CUDA array (__cuda_array_interface__), got {type(x)}")
        return numba_cuda.as_cuda_array(x)

    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    if isinstance(x, FakeCUDAArray):
        return x
    desc = getattr(x, "__cuda_array_interface__", None)
    if desc is None:
        raise TypeError(f"expected a CUDA array (__cuda_array_interface__), got {type(x)}")
    if desc.get("mask") is not None:
        raise ValueError("masked CUDA arrays are not supported")

    class _Host:  # the simulator's "device" memory is host memory: view it through numpy
        __array_interface__ = {
            "shape": tuple(desc["shape"]),
            "typestr": desc["typestr"],
            "data": tuple(desc["data"]),
            "strides": desc.get("strides"),
            "version": 3,
        }

    return FakeCUDAArray(np.asarray(_Host()))


def _launch(src: Any, dst: Any, params: tuple) -> None:
    n = src.size
    if n == 0:
        return
    blocks = (n + THREADS - 1) // THREADS
    _kernel()[blocks, THREADS](src, dst, *params)


def convert_device(src_bits: Any, dst_bits: Any, params: tuple) -> None:
    """Run ``scalar.convert`` on every element of ``src_bits`` into ``dst_bits``, on the GPU.

    Same contract as :func:`fpsim.kernels.cpu.convert_array`: ``src_bits`` and ``dst_bits`` are
    C-contiguous 1-D int32/int64 device arrays (anything with ``__cuda_array_interface__``) of
    equal size, ``params`` is ``src_layout + fmt + dst_layout + (mode, subnormals, saturate,
    seed)``, each layout ``(exp_bits, man_bits, bias, fn)``. Returns when the kernel is queued
    on the default stream (reading ``dst_bits`` back, e.g. ``copy_to_host``, waits for it).
    """
    src = _as_device_array(src_bits)
    dst = _as_device_array(dst_bits)
    for name, a in (("src_bits", src), ("dst_bits", dst)):
        if np.dtype(a.dtype) not in _INT_DTYPES:
            raise TypeError(f"{name} must hold int32 or int64 bit patterns, got {a.dtype}")
        if a.ndim != 1 or not a.is_c_contiguous():
            raise ValueError(f"{name} must be a contiguous 1-D array, got shape {a.shape}")
    if src.size != dst.size:
        raise ValueError(f"src_bits and dst_bits differ in size ({src.size} != {dst.size})")
    params = tuple(int(p) for p in params)
    if len(params) != 16:
        raise ValueError(f"params must be 16 integers, got {len(params)}")
    _launch(src, dst, params)


def round_device(
    x: Any, fmt: Any, mode: int, subnormals: int, saturate: int, seed: int
) -> Any:
    """Round every element of the float32/float64 device array ``x`` to ``fmt``, on the GPU.

    ``x``: a C-contiguous device array of any shape (anything with ``__cuda_array_interface__``).
    ``fmt``: a :class:`fpsim.Format`; ``mode``, ``subnormals``, ``saturate`` and ``seed`` are the
    integers :func:`fpsim.round_to` passes to the CPU kernel. Returns a new numba device array of
    the same dtype and shape; ``x`` is left unchanged.
    """
    from numba import cuda as numba_cuda

    d = _as_device_array(x)
    dtype = np.dtype(d.dtype)
    if dtype not in _CONTAINERS:
        raise TypeError(f"expected a float32 or float64 CUDA array, got {dtype}")
    if not d.is_c_contiguous():
        raise ValueError(
            "the CUDA array must be C-contiguous (make a contiguous copy first, e.g. "
            "cupy.ascontiguousarray(x) or x.contiguous())"
        )
    if not fmt.fits_in(dtype):
        raise ValueError(
            f"{fmt.name} values do not all fit in {dtype}; pass float64 input to round to it"
        )
    layout, int_dt = _CONTAINERS[dtype]
    e, m, bias, _, _, fn = fmt.kernel_params
    shape = tuple(d.shape)
    n = int(d.size)
    out = numba_cuda.device_array(n, dtype=int_dt)
    if n:
        src = d.reshape(n).view(int_dt)
        params = layout + (e, m, bias, fn) + layout + (mode, subnormals, saturate, seed)
        _launch(src, out, tuple(int(p) for p in params))
    return out.view(dtype).reshape(shape)
