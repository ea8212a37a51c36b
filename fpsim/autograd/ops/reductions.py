"""Reductions: ``sum``, ``mean``, ``max``/``min``, ``var``, ``cumsum``, and the ones along one
dim that renormalise: ``softmax``, ``log_softmax``, ``logsumexp``."""

from __future__ import annotations

import numpy as np

from ..dims import wrap_dim
from ..function import Function
from ..precision import _info, acc_dtype, to_format
from ._common import F64, _axes, _count, _expand, _out


class Sum(Function):
    """Sum over ``dim`` (all by default). Accumulates in fp32 for formats stored in float32
    (PyTorch's accumulator: 4096 fp16 ones sum to 4096) and rounds once; fp64 in float64."""

    name = "sum"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x, dim=None, keepdim=False):
        axes = ctx.axes = _axes(dim, x.ndim)
        ctx.keepdim, ctx.shape = keepdim, x.shape
        if x.dtype == bool or x.dtype.kind in "iu":
            return np.sum(x, axis=axes, keepdims=keepdim)
        s = np.sum(x, axis=axes, dtype=acc_dtype(ctx.fmt), keepdims=keepdim)
        return to_format(s, ctx.fmt)

    @staticmethod
    def backward(ctx, g):
        return (_expand(g, ctx.axes, ctx.keepdim, ctx.shape),)


class Mean(Function):
    """Mean over ``dim``: the fp32-accumulated sum divided by the count in the accumulator,
    rounded once to the format."""

    name = "mean"
    forward_precision = "stored"

    @staticmethod
    def forward(ctx, x, dim=None, keepdim=False):
        if ctx.fmt is None:
            raise TypeError("mean of an integer tensor: convert it with .float() first")
        axes = ctx.axes = _axes(dim, x.ndim)
        ctx.keepdim, ctx.shape = keepdim, x.shape
        ctx.n = _count(x.shape, axes)
        acc = acc_dtype(ctx.fmt)
        s = np.sum(x, axis=axes, dtype=acc, keepdims=keepdim)
        return to_format(s / acc.type(ctx.n), ctx.fmt)

    @staticmethod
    def backward(ctx, g):
        return (_expand(g / ctx.n, ctx.axes, ctx.keepdim, ctx.shape),)


class Max(Function):
    """Largest value (all elements, or along one ``dim``); NaN if there is a NaN. Backward, as
    PyTorch: along ``dim`` the gradient goes to the element whose index is returned (the first
    maximal one, or the first NaN); over all elements it is shared evenly among the elements
    equal to the result (ties), or among the NaNs when the result is NaN."""

    name = "max"
    forward_precision = "stored"

    @staticmethod
    def forward(ctx, x, dim=None, keepdim=False, largest=True):
        # largest=False is min: its own selection, so unselected gradients are +0 as in PyTorch
        # (min as -max(-x) would hand them -0.0)
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, dim, keepdim
        if dim is None:
            out = np.max(x) if largest else np.min(x)
            # NaN == NaN is false: a NaN result would leave no element to take the gradient
            ctx.mask = np.isnan(x) if np.isnan(out) else x == out
            return out
        d = wrap_dim(dim, x.ndim)
        if x.ndim == 0:  # dim 0 (or -1) of a 0-d tensor: the value itself (a copy), index 0
            ctx.idx = None
            return np.array(x, copy=True)
        idx = np.expand_dims(np.argmax(x, axis=d) if largest else np.argmin(x, axis=d), d)
        ctx.idx, ctx.d = idx, d
        out = np.take_along_axis(x, idx, axis=d)
        return out if keepdim else np.squeeze(out, d)

    @staticmethod
    def backward(ctx, g):
        if ctx.dim is None:
            # where, not g * mask: an infinite g must leave exact zeros off the mask (PyTorch's
            # masked_fill)
            return (np.where(ctx.mask, g / np.count_nonzero(ctx.mask), 0).astype(g.dtype),)
        if ctx.idx is None:
            return (np.array(g),)
        gx = np.zeros(ctx.shape, g.dtype)
        gk = g if ctx.keepdim else np.expand_dims(g, ctx.d)
        np.put_along_axis(gx, ctx.idx, gk, axis=ctx.d)
        return (gx,)


class Var(Function):
    """Variance over ``dim`` with ``correction`` (1: unbiased, PyTorch's default); two-pass
    formula in the math dtype (float64 for low precision), rounded once."""

    name = "var"

    @staticmethod
    def forward(ctx, x, dim=None, correction=1, keepdim=False):
        axes = ctx.axes = _axes(dim, x.ndim)
        ctx.keepdim, ctx.shape = keepdim, x.shape
        n = _count(x.shape, axes)
        ctx.denom = max(n - correction, 0)
        d = ctx.d = x - x.mean(axis=axes, keepdims=True)
        return np.sum(d * d, axis=axes, keepdims=keepdim) / x.dtype.type(ctx.denom)

    @staticmethod
    def backward(ctx, g):
        ge = _expand(g, ctx.axes, ctx.keepdim, ctx.shape)
        return (ge * ctx.d * (2 / g.dtype.type(ctx.denom)),)


class Cumsum(Function):
    """Running sum along ``dim``, as PyTorch's CPU kernel: one sequential accumulator of type
    ``acc_type`` -- float32 for fp16/bf16 and every format stored in float32, float64 for fp32
    and fp64 --, each output rounded once from it. Backward: the reversed running sum of the
    gradient, the same way."""

    name = "cumsum"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def _acc(fmt):
        return np.float32 if _info(fmt).container == np.float32 and not _info(fmt).native else F64

    @staticmethod
    def forward(ctx, x, dim):
        d = ctx.d = wrap_dim(dim, x.ndim)
        if x.ndim == 0:
            return np.array(x, copy=True)
        if ctx.fmt is None:
            return np.cumsum(x, axis=d)
        return to_format(np.cumsum(x, axis=d, dtype=Cumsum._acc(ctx.fmt)), ctx.fmt)

    @staticmethod
    def backward(ctx, g):
        if g.ndim == 0:
            return (np.array(g),)
        d = ctx.d
        rev = np.flip(np.cumsum(np.flip(g, d), axis=d, dtype=Cumsum._acc(ctx.fmt)), d)
        return (to_format(rev, ctx.fmt),)


def _softmax_axis(dim, ndim: int) -> tuple:
    """The numpy axis of a softmax over ``dim`` (one int, checked): ``()`` for a 0-d tensor,
    whose only element is its own softmax group."""
    d = wrap_dim(dim, ndim)
    return (d,) if ndim else ()


class Softmax(Function):
    name = "softmax"

    @staticmethod
    def forward(ctx, x, dim=-1):
        dim = ctx.dim = _softmax_axis(dim, x.ndim)
        e = np.exp(x - np.max(x, axis=dim, keepdims=True))
        return e / np.sum(e, axis=dim, keepdims=True)

    @staticmethod
    def backward(ctx, g):
        y = _out(ctx, g)
        return (y * (g - np.sum(g * y, axis=ctx.dim, keepdims=True)),)


class LogSoftmax(Function):
    name = "log_softmax"

    @staticmethod
    def forward(ctx, x, dim=-1):
        dim = ctx.dim = _softmax_axis(dim, x.ndim)
        z = x - np.max(x, axis=dim, keepdims=True)
        return z - np.log(np.sum(np.exp(z), axis=dim, keepdims=True))

    @staticmethod
    def backward(ctx, g):
        y = _out(ctx, g)
        return (g - np.exp(y) * np.sum(g, axis=ctx.dim, keepdims=True),)


class LogSumExp(Function):
    name = "logsumexp"

    @staticmethod
    def forward(ctx, x, dim=-1, keepdim=False):
        # dim=() reduces every dim, as sum's (PyTorch's own logsumexp means the same -- it
        # computes a 0-d output shape -- but its kernel then fails on tensors of 1 dim or more)
        axes = ctx.axes = _axes(dim, x.ndim)
        ctx.keepdim, ctx.x = keepdim, x
        m = np.max(x, axis=axes, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        s = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
        return s if keepdim else np.squeeze(s, axes)

    @staticmethod
    def backward(ctx, g):
        y = _out(ctx, g)
        if not ctx.keepdim:
            y, g = np.expand_dims(y, ctx.axes), np.expand_dims(g, ctx.axes)
        return (g * np.exp(ctx.x - y),)
