"""numba.cuda array kernels built from :mod:`fpsim.kernels.scalar`.

What runs where
    :func:`convert_device` and :func:`round_device` run on the host: they check the input, make
    integer views and launch one kernel, ``_convert_kernel``, on the GPU. The kernel gives each
    thread one element (a 1-D grid of ``THREADS``-thread blocks) and that thread runs
    ``scalar.convert`` (and ``scalar.random62`` for stochastic rounding): the same Python lines
    that :mod:`fpsim.kernels.cpu` compiles for the CPU and :mod:`fpsim.kernels.python` runs
    uncompiled, so all back ends agree bit for bit (stochastic rounding included: element ``i``
    always uses ``random62(seed, i)``, whatever thread or CPU core handles it).

How the scalar code reaches the GPU: device twins
    The scalar functions are ``register_jitable`` overloads for numba's CPU target, and a few of
    them lean on CPU-only intrinsics (count-leading-zeros, float/int bit casts) that numba-cuda
    0.30 cannot type inside a kernel (with ``inline="always"`` it could not type any of them:
    "No implementation of function and_ ... omitted(default=Undefined)"). So
    :func:`_device_twins` builds, for every function of
    ``scalar``, a new function object from the *same code object* whose globals are a copy of
    scalar's with each function name rebound to its twin, and compiles it with
    ``cuda.jit(device=True)``. The kernel calls the twins of ``convert`` and ``random62``; NVVM
    inlines the whole call tree. ``scalar.bit_length``, whose compiled form is a CPU-only
    overload, becomes one ``clz`` instruction on the GPU (:data:`_GPU_REPLACEMENTS`).

Why integer views
    ``scalar.convert`` works on bit patterns, not on float values. A C-contiguous float32
    (float64) array is reinterpreted, without a copy, as a flat ``int32`` (``int64``) array of
    the same bytes, exactly as :mod:`fpsim.kernels.cpu` does on the host. Each thread reads
    ``int(src[i])`` (the signed two's-complement pattern) and stores the signed pattern
    ``convert`` returns, which always lies in the range of the destination's integer type. Every
    format is a record of int64 kernel arguments, so the kernel is compiled once per
    (source, destination) integer dtype pair and serves every format and rounding mode;
    ``cache=True`` keeps the compiled kernel on disk between sessions. (numba's cache is keyed
    on this file only: after editing ``scalar.py``, clear ``fpsim/kernels/__pycache__``.)

Nothing here is compiled, and ``numba.cuda`` is not even imported, until the first call: fpsim
imports on machines without CUDA, and importing ``numba.cuda`` fixes once and for all whether
numba's CUDA *simulator* is used (``NUMBA_ENABLE_CUDASIM=1`` must be set before that import).

The simulator
    With ``NUMBA_ENABLE_CUDASIM=1`` numba runs the kernel as plain Python, one Python thread per
    CUDA thread, on arrays that live in host memory. It executes the very same Python lines as
    the GPU build (the kernel body and the twins, i.e. scalar's code objects), only uncompiled,
    which is how the test-suite checks the CUDA path on machines without a GPU. Two things
    differ: the twins are called directly rather than through the simulator's device-function
    shim (same code, 4x faster), and ``bit_length`` keeps its Python body. The simulator's
    device arrays do not expose ``__cuda_array_interface__`` and it has no
    ``cuda.as_cuda_array``; :func:`_as_device_array` bridges both (an interface pointer is a
    host pointer there).
"""

from __future__ import annotations

import threading
from types import FunctionType
from typing import Any

import numpy as np

from ..formats import get_format
from . import scalar
from .record import FLOAT32, FLOAT64, FormatRecord

THREADS = 256  # threads per block

# Bound by :func:`_kernel` before the kernel is first compiled or run (left as None so importing
# this module never imports numba.cuda): ``cuda`` is the ``numba.cuda`` module, read by the kernel
# body as a global (the simulator swaps it for its fake per-launch module); ``_convert`` and
# ``_random62`` are the CUDA device twins of ``scalar.convert`` and ``scalar.random62``.
cuda = None
_convert = None
_random62 = None

# The container layouts (format records) and the same-width signed integer views.
_CONTAINERS = {
    np.dtype(np.float32): (FLOAT32, np.dtype(np.int32)),
    np.dtype(np.float64): (FLOAT64, np.dtype(np.int64)),
}
_INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _convert_kernel(src, dst, src_f, fmt, dst_f, mode, subnormals, saturate, seed):
    """One thread per element: ``dst[i] = scalar.convert(src[i], ...)``."""
    i = cuda.grid(1)
    if i < src.size:
        rand = _random62(seed, i) if mode == scalar.STOCHASTIC else 0
        dst[i] = _convert(int(src[i]), src_f, fmt, dst_f, mode, subnormals, saturate, rand)


def _bit_length_gpu(x):
    """``scalar.bit_length`` on the GPU: one count-leading-zeros instruction (x is int64)."""
    return 64 - cuda.clz(np.int64(x))


# scalar helpers whose Python body numba cannot compile (scalar gives the CPU a compiled
# ``@overload`` for them instead): their GPU replacements. The simulator keeps the Python body.
_GPU_REPLACEMENTS = {"bit_length": _bit_length_gpu}


def _device_twins(numba_cuda, simulated: bool) -> dict:
    """CUDA device functions made from the code objects of every function in ``scalar``.

    Each twin runs the very same code object as its ``scalar`` original; only the globals it
    reads are a copy of scalar's in which every function name is bound to its twin. So a
    ``scalar.convert`` twin calls the ``unpack`` / ``pack`` ... twins, and numba-cuda compiles the
    whole call tree as ordinary CUDA device functions (which NVVM inlines) rather than through
    the CPU ``register_jitable`` overloads (see the module docstring).
    """
    ns = dict(vars(scalar))
    for name, obj in vars(scalar).items():
        if isinstance(obj, FunctionType) and obj.__module__ == scalar.__name__:
            twin = FunctionType(obj.__code__, ns, obj.__name__, obj.__defaults__, obj.__closure__)
            twin.__qualname__ = obj.__qualname__
            twin.__doc__ = obj.__doc__
            # The simulator would only wrap a device function in a (slow) call shim that runs
            # the same Python: call the twin directly there.
            ns[name] = twin if simulated else numba_cuda.jit(device=True)(twin)
    if not simulated:
        for name, fn in _GPU_REPLACEMENTS.items():
            if name in ns:
                ns[name] = numba_cuda.jit(device=True)(fn)
    return ns


_compiled = None
_lock = threading.Lock()


def _kernel():
    """The ``cuda.jit`` dispatcher of ``_convert_kernel``, made on first use."""
    global _compiled, cuda, _convert, _random62
    with _lock:
        if _compiled is None:
            numba_cuda = _numba_cuda()
            twins = _device_twins(numba_cuda, _simulated())
            cuda = numba_cuda
            _convert = twins["convert"]
            _random62 = twins["random62"]
            _compiled = numba_cuda.jit(cache=True)(_convert_kernel)
    return _compiled


def _numba_cuda():
    """``numba.cuda``, imported now (not when fpsim is imported), with a clear error if absent."""
    try:
        from numba import cuda as numba_cuda
    except ImportError as exc:
        raise ImportError(
            "fpsim's CUDA back end needs numba-cuda: pip install 'fpsim[cuda]' "
            f"(importing numba.cuda failed: {exc})"
        ) from exc
    return numba_cuda


def _simulated() -> bool:
    """True when numba.cuda is the CUDA simulator (decided when numba.cuda was imported)."""
    numba_cuda = _numba_cuda()
    config = getattr(numba_cuda, "config", None)
    if config is None:  # older numba-cuda: the setting lives in numba's own config
        from numba import config
    return bool(getattr(config, "ENABLE_CUDASIM", 0))


def _as_device_array(x: Any) -> Any:
    """A numba device array viewing the data of ``x`` (no copy).

    ``x``: any object with ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors, numba device
    arrays) or, under the simulator, a simulator device array.
    """
    numba_cuda = _numba_cuda()
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


def _typed(params: tuple) -> tuple:
    """Python ints (int64 kernel arguments) and records of them: one kernel type for all."""
    return tuple(
        FormatRecord(*(int(v) for v in p)) if isinstance(p, tuple) else int(p) for p in params
    )


def convert_device(src_bits: Any, dst_bits: Any, params: tuple) -> None:
    """Run ``scalar.convert`` on every element of ``src_bits`` into ``dst_bits``, on the GPU.

    Same contract as :func:`fpsim.kernels.cpu.convert_array`: ``src_bits`` and ``dst_bits`` are
    C-contiguous 1-D int32/int64 device arrays (anything with ``__cuda_array_interface__``) of
    equal size, ``params`` is ``(src_layout, fmt, dst_layout, mode, subnormals, saturate,
    seed)``, each layout and the format a :class:`~fpsim.kernels.record.FormatRecord`. Returns
    when the kernel is queued on the default stream (reading ``dst_bits`` back, e.g.
    ``copy_to_host``, waits for it).
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
    if len(params) != 7:
        raise ValueError(
            "params must be (src_layout, fmt, dst_layout, mode, subnormals, saturate, seed), "
            f"got {len(params)} items"
        )
    _launch(src, dst, _typed(params))


def round_device(x: Any, fmt: Any, mode: int, subnormals: int, saturate: int, seed: int) -> Any:
    """Round every element of the float32/float64 device array ``x`` to ``fmt``, on the GPU.

    ``x``: a C-contiguous device array of any shape (anything with ``__cuda_array_interface__``).
    ``fmt``: a :class:`fpsim.Format` (or its name). ``mode``, ``subnormals``, ``saturate`` and
    ``seed`` are the integers :func:`fpsim.round_to` passes to the CPU kernel. Returns a new numba
    device array of the same dtype and shape; ``x`` is left unchanged. Raises ``TypeError`` for
    an object that is not a CUDA array or not float32/float64, ``ValueError`` for a
    non-C-contiguous array or a format whose values do not all fit in the array's dtype.
    """
    fmt = get_format(fmt)
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
    shape = tuple(d.shape)
    n = int(d.size)
    out = _numba_cuda().device_array(n, dtype=int_dt)
    if n:
        src = d.reshape(n).view(int_dt)
        params = (layout, fmt.record, layout, mode, subnormals, saturate, seed)
        _launch(src, out, _typed(params))
    return out.view(dtype).reshape(shape)
