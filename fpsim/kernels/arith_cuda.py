"""numba.cuda kernels for :mod:`fpsim.arith`, built from the same scalar operations as the CPU
kernels (:mod:`fpsim.kernels.arith_cpu`), with the same contracts and results bit for bit.

* ``_ew_kernel``: one thread per element, ``out[i] = scalar_ops.arith_op(op, a[i], b[i], c[i])``;
  an operand may be a one-element array read at index 0 (a broadcast scalar).
* ``_check_kernel``: counts the elements that are not values of a format (atomic add).
* ``_matmul_kernel``: one thread per output element ``out[b, i, j]``: the thread runs
  :func:`fpsim.kernels.reduce.reduce_row` for that one element (a row of one lane, with local
  work arrays and a 64-level pairwise stack) -- the same order, steps and block FMA as the CPU
  kernels and :func:`fpsim.arith.trace_sum`. ``sum`` and ``dot`` use it with a sum's
  parameters or single rows, as on the CPU; no terms (K = 0) give +0.0.

Every rounding here is the general ``scalar.convert`` (through ``round_value``): the CPU's
branch-free nearest-even shortcut, and its limit to formats with a bias of at most 1023, do not
arise on the GPU.

Stochastic rounding uses ``scalar.random62(seed, index)`` with the same indices as the CPU
(element i; for reductions ``o * (2K + 1) + r``), so CPU and GPU agree bit for bit.

How the scalar code reaches the GPU: as in :mod:`fpsim.kernels.cuda`, every function of
``record``, ``scalar``, ``fastround`` and ``reduce`` gets a *device twin*: a function made from
the same code object whose globals are one shared namespace in which every such function name
is rebound to its twin, compiled with ``cuda.jit(device=True)``. Helpers whose Python bodies
numba cannot compile for the GPU are replaced there: ``bit_length`` (``cuda.clz``), the float64
<-> int64 bit casts ``float64_to_bits`` / ``bits_to_float64`` (libdevice ``double_as_longlong``
/ ``longlong_as_double``, a register move) and the float-valued roundings ``floor_f64``,
``ceil_f64``, ``trunc_f64``, ``rint_f64`` (numba-cuda's ``math.floor`` & co. return floats;
libdevice ``rint``). Under numba's CUDA simulator the twins are called as plain Python (the
replacements are not needed: the Python bodies run).

Nothing is compiled, and ``numba.cuda`` is not imported, until the first call.
"""

from __future__ import annotations

import math
import threading
from types import FunctionType
from typing import Any

import numpy as np
from numba import types

from ..formats import Format
from . import fastround, record, reduce, scalar, scalar_ops
from .operands import is_binary64, is_device

THREADS = 128  # threads per block

# Bound on first use (see _kernels): numba.cuda, libdevice, and the device twins.
cuda = None
libdevice = None
_arith_op = None
_round_value = None
_random62 = None
_reduce_row = None


# ---- kernels (plain Python until _kernels() hands them to cuda.jit) ----------------------------
def _ew_kernel(op, a, sa, b, sb, c, sc, out, fmt, mode, subn, sat, seed):
    i = cuda.grid(1)
    if i < out.size:
        rand = _random62(seed, i) if mode == scalar.STOCHASTIC else 0
        out[i] = _arith_op(op, np.float64(a[i * sa]), np.float64(b[i * sb]), np.float64(c[i * sc]),
                           fmt, mode, subn, sat, rand)  # fmt: skip


def _check_kernel(x, fmt, bad):
    i = cuda.grid(1)
    if i < x.size:
        v = np.float64(x[i])
        r = _round_value(v, fmt, scalar.NEAREST_EVEN, 1, 0, 0)
        if v == v and r != v:
            cuda.atomic.add(bad, 0, 1)


def _unary_kernel(which, x, out, ftz, tiny):
    i = cuda.grid(1)
    if i < x.size:
        v = np.float64(x[i])
        r = -v if which == 0 else abs(v)
        if ftz and abs(r) < tiny:
            r = math.copysign(0.0, r)
        out[i] = r


# A local array's shape must be a compile-time constant on the GPU: a module attribute
# (``reduce.NW``) is typed as a plain int64 there, a global of this module as a literal. (The
# simulator accepts either, so only a real GPU showed it.)
_NW = reduce.NW
_STACK = reduce.STACK


def _matmul_kernel(A, B, C, out, P, LOG):
    o = cuda.grid(1)
    n = out.shape[1]
    m = out.shape[2]
    if o >= out.shape[0] * n * m:
        return
    W = cuda.local.array((_NW, 1), types.float64)
    ST = cuda.local.array((_STACK, 1), types.float64)
    _reduce_row(A, B, C, out, o // (n * m), (o // m) % n, o % m, 1, W, ST, LOG, P)


# ---- GPU replacements for scalar helpers with Python-only bodies -------------------------------
def _bit_length_gpu(x):
    return 64 - cuda.clz(np.int64(x))


def _float64_to_bits_gpu(x):
    return libdevice.double_as_longlong(x)


def _bits_to_float64_gpu(b):
    return libdevice.longlong_as_double(b)


def _floor_gpu(x):
    return math.floor(x)


def _ceil_gpu(x):
    return math.ceil(x)


def _trunc_gpu(x):
    return math.trunc(x)


def _rint_gpu(x):
    return libdevice.rint(x)


_GPU_REPLACEMENTS = {
    "bit_length": _bit_length_gpu,
    "float64_to_bits": _float64_to_bits_gpu,
    "bits_to_float64": _bits_to_float64_gpu,
    "floor_f64": _floor_gpu,
    "ceil_f64": _ceil_gpu,
    "trunc_f64": _trunc_gpu,
    "rint_f64": _rint_gpu,
}

# The modules whose functions get device twins, in one shared namespace (reduce calls fastround,
# scalar and scalar_ops; they call record's and each other's functions by their plain names).
_TWIN_MODULES = (record, scalar, scalar_ops, fastround, reduce)


def _device_twins(numba_cuda, simulated: bool) -> dict:
    """Device twins of every function of the modules in ``_TWIN_MODULES`` (see the module
    docstring)."""
    ns: dict = {}
    for mod in _TWIN_MODULES:
        ns.update(vars(mod))
    for mod in _TWIN_MODULES:
        for name, obj in vars(mod).items():
            if isinstance(obj, FunctionType) and obj.__module__ == mod.__name__:
                twin = FunctionType(
                    obj.__code__, ns, obj.__name__, obj.__defaults__, obj.__closure__
                )
                twin.__qualname__ = obj.__qualname__
                ns[name] = twin if simulated else numba_cuda.jit(device=True)(twin)
    if not simulated:
        for name, fn in _GPU_REPLACEMENTS.items():
            ns[name] = numba_cuda.jit(device=True)(fn)
    return ns


_compiled: dict | None = None
_lock = threading.Lock()


def _kernels() -> dict:
    """The cuda.jit dispatchers, made (not yet compiled) on first use."""
    global _compiled, cuda, libdevice, _arith_op, _round_value, _random62, _reduce_row
    with _lock:
        if _compiled is None:
            from .cuda import _numba_cuda, _simulated

            numba_cuda = _numba_cuda()
            simulated = _simulated()
            twins = _device_twins(numba_cuda, simulated)
            cuda = numba_cuda
            if not simulated:
                from numba.cuda import libdevice as _libdevice

                libdevice = _libdevice
            _arith_op = twins["arith_op"]
            _round_value = twins["round_value"]
            _random62 = twins["random62"]
            _reduce_row = twins["reduce_row"]
            _compiled = {
                "ew": numba_cuda.jit(cache=True)(_ew_kernel),
                "check": numba_cuda.jit(cache=True)(_check_kernel),
                "unary": numba_cuda.jit(cache=True)(_unary_kernel),
                "matmul": numba_cuda.jit(cache=True)(_matmul_kernel),
            }
    return _compiled


def _launch(name: str, n: int, *args) -> None:
    if n:
        _kernels()[name][(n + THREADS - 1) // THREADS, THREADS](*args)


# ---- host side ---------------------------------------------------------------------------------
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _device(x: Any, name: str):
    """A numba device array viewing ``x`` (C-contiguous float32/float64), or TypeError."""
    from .cuda import _as_device_array

    d = _as_device_array(x)
    if np.dtype(d.dtype) not in _FLOATS:
        raise TypeError(f"{name}: expected a float32 or float64 CUDA array, got {d.dtype}")
    if not d.is_c_contiguous():
        raise ValueError(f"{name}: the CUDA array must be C-contiguous")
    return d


def count_not_in_format(d, f: Format) -> int:
    """Number of non-NaN elements of the device array ``d`` that are not values of ``f``."""
    if is_binary64(f) or d.size == 0:
        return 0
    _kernels()
    bad = cuda.to_device(np.zeros(1, np.int64))
    flat = d.reshape(d.size)
    _launch("check", d.size, flat, f.record, bad)
    return int(bad.copy_to_host()[0])


def _checked(d, f: Format, name: str, round_inputs: bool):
    """The device operand, checked to hold values of ``f`` (or rounded to ``f``)."""
    if round_inputs:
        from .cuda import round_device

        if not f.fits_in(np.dtype(d.dtype)):
            raise ValueError(f"{name}: {f.name} values do not fit in {d.dtype}")
        return round_device(d, f, scalar.NEAREST_EVEN, 1, 0, 0)
    count = count_not_in_format(d, f)
    if count:
        raise ValueError(
            f"{name} holds {count} value(s) that are not {f.name} values (on the device); "
            f"operations in {f.name} take {f.name} values: round them first with "
            f"fpsim.round_to(x, {f.name!r}), or pass round_inputs=True"
        )
    return d


def elementwise(op, xs, names, f: Format, mode, subn, sat, seed, round_inputs):
    """The GPU version of fpsim.arith's elementwise operations (same checks and results).

    Device operands must share one shape; the others are scalars, already checked by the
    caller and given as one-element float64 host arrays (broadcast). Returns a numba device
    array (float32 when every device operand is float32 and ``f`` fits)."""
    _kernels()
    shape = None
    devs: list = []
    for x, name in zip(xs, names, strict=True):
        if is_device(x):
            d = _checked(_device(x, name), f, name, round_inputs)
            if shape is not None and tuple(d.shape) != shape:
                raise ValueError(
                    f"device operands must have one shape (no broadcasting on the GPU), got "
                    f"{shape} and {tuple(d.shape)}"
                )
            shape = tuple(d.shape)
            devs.append((d, name))
        else:
            devs.append((None, name))
    dts = [np.dtype(d.dtype) for d, _ in devs if d is not None]
    f32 = np.dtype(np.float32)
    container = f32 if all(dt == f32 for dt in dts) and f.fits_in(f32) else np.dtype(np.float64)
    n = int(np.prod(shape)) if shape else 1
    ops = []
    for (d, _), x in zip(devs, xs, strict=True):
        if d is None:
            ops.append((cuda.to_device(np.asarray(x, np.float64).reshape(1)), 0))
        else:
            ops.append((d.reshape(n), 1))
    while len(ops) < 3:
        ops.append(ops[0])
    out = cuda.device_array(n, dtype=container)
    (a, sa), (b, sb), (c, sc) = ops
    _launch("ew", n, op, a, sa, b, sb, c, sc, out, f.record, mode, subn, sat, seed)
    return out.reshape(shape)


def unary_exact(x, f: Format, which: str, round_inputs: bool, subnormals: int = 1):
    """neg / abs of a device array of ``f`` values (exact; flush-to-zero when asked)."""
    _kernels()
    d = _checked(_device(x, "x"), f, "x", round_inputs)
    out = cuda.device_array(d.size, dtype=d.dtype)
    flat = d.reshape(d.size)
    _launch("unary", d.size, 0 if which == "neg" else 1, flat, out, 1 - subnormals, f.min_normal)
    return out.reshape(tuple(d.shape))


def _reduce(A, B, C, out, P) -> None:
    log = cuda.to_device(np.zeros((1, reduce.NLOG)))
    _launch("matmul", out.size, A, B, C, out, cuda.to_device(np.asarray(P, np.int64)), log)


def sum_device(x, f, out_f, axis, P, round_inputs):
    """fpsim.arith.sum on a device array: ``axis=None`` (a Python float) or the last axis (a
    device array). ``P``: the kernel's parameters (a sum's: ``unit_b``)."""
    _kernels()
    d = _checked(_device(x, "x"), f, "x", round_inputs)
    shape = tuple(d.shape)
    if axis is None:
        M, N, rest = 1, d.size, ()
    elif len(shape) and axis in (-1, len(shape) - 1):
        N = shape[-1]
        rest = shape[:-1]
        M = int(np.prod(rest)) if rest else 1
    else:
        raise NotImplementedError(
            "on the GPU, sum reduces all elements (axis=None) or the last axis"
        )
    A = d.reshape(1, M, N)
    dummy = cuda.to_device(np.zeros((1, 1, 1)))
    f32 = np.dtype(np.float32)
    container = f32 if np.dtype(d.dtype) == f32 and out_f.fits_in(f32) else np.dtype(np.float64)
    out = cuda.device_array((1, M, 1), dtype=container)
    _reduce(A, dummy, dummy, out, P)
    if axis is None:
        return float(out.copy_to_host().reshape(-1)[0])
    return out.reshape(rest)


def matmul_device(a, b, f, out_f, P, round_inputs):
    """fpsim.arith.matmul on device arrays: 1-D, 2-D or 3-D (equal batch sizes, no batch
    broadcasting). Returns a device array (a Python float for two 1-D vectors)."""
    _kernels()
    da = _checked(_device(a, "a"), f, "a", round_inputs)
    db = _checked(_device(b, "b"), f, "b", round_inputs)
    sa, sb = tuple(da.shape), tuple(db.shape)
    if not (1 <= len(sa) <= 3 and 1 <= len(sb) <= 3):
        raise ValueError(f"matmul on the GPU takes 1-D to 3-D arrays, got {sa} and {sb}")
    a3 = (1, 1) + sa if len(sa) == 1 else ((1,) + sa if len(sa) == 2 else sa)
    b3 = (1,) + sb + (1,) if len(sb) == 1 else ((1,) + sb if len(sb) == 2 else sb)
    if a3[2] != b3[1]:
        raise ValueError(f"matmul: shapes {sa} and {sb} do not align: {a3[2]} != {b3[1]}")
    if a3[0] != b3[0]:
        raise ValueError(
            f"matmul on the GPU needs equal batch sizes (no broadcasting), got {sa} and {sb}"
        )
    A = da.reshape(*a3)
    B = db.reshape(*b3)
    f32 = np.dtype(np.float32)
    both32 = np.dtype(da.dtype) == f32 and np.dtype(db.dtype) == f32
    container = f32 if both32 and out_f.fits_in(f32) else np.dtype(np.float64)
    out = cuda.device_array((a3[0], a3[1], b3[2]), dtype=container)
    _reduce(A, B, cuda.to_device(np.zeros((1, 1, 1))), out, P)
    shape = (a3[0],) if 3 in (len(sa), len(sb)) else ()
    shape += (a3[1],) if len(sa) > 1 else ()
    shape += (b3[2],) if len(sb) > 1 else ()
    if shape == ():
        return float(out.copy_to_host().reshape(-1)[0])
    return out.reshape(shape)
