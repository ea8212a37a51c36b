"""Helpers shared by the op modules: broadcasting and reduction bookkeeping, Python numbers at
opmath precision, the stored forward result, sigmoid and erf in numpy."""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from ...formats import Format, fp32, fp64
from ..dims import reduction_axes
from ..precision import _info, to_format

F64 = np.float64
F32 = np.float32


def _unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` over the dimensions that broadcasting added or stretched, back to ``shape``."""
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


def _sum_to(g: np.ndarray, shape: tuple, fmt: Format) -> np.ndarray:
    """Sum broadcast batch dimensions away (math dtype), rounding once to ``fmt``."""
    if g.shape == tuple(shape):
        return g
    return to_format(_unbroadcast(g.astype(_info(fmt).math), shape), fmt)


def _axes(dim, ndim: int) -> tuple:
    """The sorted axes a reduction over ``dim`` (None / int / list of ints) runs on, checked as
    PyTorch checks them (:func:`~fpsim.autograd.dims.reduction_axes`): an out-of-range or
    repeated dim raises instead of wrapping around."""
    return reduction_axes(dim, ndim)


def _expand(g: np.ndarray, axes: tuple, keepdim: bool, shape: tuple) -> np.ndarray:
    """Broadcast a reduced gradient back over the reduced axes (a writable copy)."""
    if not keepdim:
        g = np.expand_dims(g, axes)
    return np.array(np.broadcast_to(g, shape))


def _count(shape: tuple, axes: tuple) -> int:
    return int(np.prod([shape[a] for a in axes])) if axes else 1


def _opmath(value: float, fmt: Format, dtype) -> np.generic:
    """A Python number as the op sees it: in fp32 for formats stored in float32 (PyTorch's
    opmath), in float64 otherwise; then in the math dtype ``dtype``. An integer is rounded once
    from its exact value (``np.float32(2**60 + 2**36 + 1)`` would round it twice)."""
    wide = _info(fmt).container == F64
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        held = to_format(np.asarray(value), fp64 if wide else fp32)[()]
    else:
        held = (np.float64 if wide else np.float32)(value)
    return np.dtype(dtype).type(held)


def _out(ctx, like: np.ndarray) -> np.ndarray:
    """The stored (rounded) forward result, in the dtype of ``like``."""
    return ctx.out.astype(like.dtype, copy=False)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _erf_scalar(x):
    return math.erf(x)


@functools.lru_cache(maxsize=1)
def _erf():
    """A numba ufunc for erf (numpy has none); compiled on first use, cached on disk."""
    import numba

    return numba.vectorize(["float64(float64)", "float32(float32)"], cache=True)(_erf_scalar)


def _needs(ctx, n: int) -> tuple:
    """The first ``n`` entries of ``ctx.needs_input_grad``, padded with False (trailing
    optional arguments that were not passed)."""
    return (tuple(ctx.needs_input_grad) + (False,) * n)[:n]
