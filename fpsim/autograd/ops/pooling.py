"""Pooling over the last two dims of (N, C, H, W) tensors: ``max_pool2d``, ``avg_pool2d``,
``adaptive_avg_pool2d``. Output sizes, padding, ``ceil_mode`` and divisors follow PyTorch's
CPU kernels; autocast leaves pooling in its input format.

>>> import numpy as np
>>> from fpsim.autograd import tensor
>>> from fpsim.nn import functional as F
>>> x = tensor(np.arange(16.0).reshape(1, 1, 4, 4))
>>> F.max_pool2d(x, 2).tolist(), F.avg_pool2d(x, 2).tolist()
([[[[5.0, 7.0], [13.0, 15.0]]]], [[[[2.5, 4.5], [10.5, 12.5]]]])
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...kernels import window
from ..function import Function
from .convolution import _pair


def _windows(xp: np.ndarray, k: tuple, s: tuple, d: tuple, out_hw: tuple) -> np.ndarray:
    """View of the padded input (N, C, Hp, Wp) as (N, C, kh, kw, oh, ow): element
    ``[n, c, i, j, y, x] = xp[n, c, y*sh + i*dh, x*sw + j*dw]`` (no copy)."""
    n, c = xp.shape[:2]
    s0, s1, s2, s3 = xp.strides
    shape = (n, c, k[0], k[1], out_hw[0], out_hw[1])
    strides = (s0, s1, s2 * d[0], s3 * d[1], s2 * s[0], s3 * s[1])
    return as_strided(xp, shape, strides, writeable=False)


def pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape``: with ``ceil_mode`` the last window may hang over the
    end, but must start inside the input or its left padding."""
    num = size + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _geometry(x: np.ndarray, kernel_size, stride, padding, dilation, ceil_mode, op: str):
    if x.ndim != 4:
        raise RuntimeError(f"{op}: expected a 4-D (N, C, H, W) input, got {x.ndim}-D")
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or stride == () or stride == [] else _pair(stride, "stride")
    p, d = _pair(padding, "padding"), _pair(dilation, "dilation")
    if min(k) < 1 or min(s) < 1 or min(d) < 1:
        raise RuntimeError(f"{op}: kernel_size, stride and dilation must be positive")
    if p[0] > (d[0] * (k[0] - 1) + 1) // 2 or p[1] > (d[1] * (k[1] - 1) + 1) // 2:
        raise RuntimeError(
            f"{op}: pad should be at most half of effective kernel size, but got pad={p}, "
            f"kernel_size={k} and dilation={d}"
        )
    h, w = x.shape[2:]
    oh = pool_output_size(h, k[0], s[0], p[0], d[0], ceil_mode)
    ow = pool_output_size(w, k[1], s[1], p[1], d[1], ceil_mode)
    if oh < 1 or ow < 1:
        raise RuntimeError(f"{op}: Output size is too small ({oh}x{ow})")
    # padding at the end too, so that every window of a ceil_mode output is inside the array
    eh = max(0, (oh - 1) * s[0] + d[0] * (k[0] - 1) + 1 - (h + 2 * p[0]))
    ew = max(0, (ow - 1) * s[1] + d[1] * (k[1] - 1) + 1 - (w + 2 * p[1]))
    return k, s, p, d, (oh, ow), (eh, ew)


def _tiles(shape: tuple, k, s, p, d, extra) -> bool:
    """Whether the windows tile the input exactly (stride = kernel, no padding or dilation):
    then windows are a reshape of the input, and their gradients one back."""
    h, w = shape[2:]
    return (tuple(k) == tuple(s) and tuple(p) == (0, 0) and tuple(d) == (1, 1)
            and tuple(extra) == (0, 0) and h % k[0] == 0 and w % k[1] == 0)  # fmt: skip


def _scatter(gwin: np.ndarray, shape: tuple, k, s, d, pad, extra) -> np.ndarray:
    """Add window gradients (N, C, oh, ow, kh, kw) back onto the padded input, crop it."""
    n, c, h, w = shape
    oh, ow = gwin.shape[2:4]
    if _tiles(shape, k, s, pad, d, extra):
        return np.ascontiguousarray(gwin.transpose(0, 1, 2, 4, 3, 5)).reshape(shape)
    gxp = np.zeros((n, c, h + 2 * pad[0] + extra[0], w + 2 * pad[1] + extra[1]), gwin.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            y0, x0 = i * d[0], j * d[1]
            gxp[:, :, y0 : y0 + s[0] * (oh - 1) + 1 : s[0],
                x0 : x0 + s[1] * (ow - 1) + 1 : s[1]] += gwin[..., i, j]  # fmt: skip
    return gxp[:, :, pad[0] : pad[0] + h, pad[1] : pad[1] + w]


class MaxPool2d(Function):
    """``max_pool2d(x, kernel_size, stride=kernel_size, padding=0, dilation=1,
    ceil_mode=False)``: the largest value of each window (padding never wins). PyTorch's CPU
    loop (:func:`fpsim.kernels.window.max_pool_forward`): a tie goes to the first maximal
    element of the window (row-major), a NaN wins, and of several NaNs the last. Backward: each
    output's gradient goes to the element it selected (added up where windows overlap)."""

    name = "max_pool2d"
    forward_precision = "stored"

    @staticmethod
    def forward(ctx, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        k, s, p, d, (oh, ow), _ = _geometry(
            x, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d"
        )
        out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
        idx = ctx.idx = np.empty(out.shape, np.int64)
        window.max_pool_forward(np.ascontiguousarray(x), k[0], k[1], s[0], s[1], d[0], d[1],
                                p[0], p[1], out, idx)  # fmt: skip
        ctx.shape = x.shape
        return out

    @staticmethod
    def backward(ctx, g):
        gx = np.zeros(ctx.shape, g.dtype)
        window.max_pool_backward(np.ascontiguousarray(g), ctx.idx, gx)
        return (gx, None, None, None, None, None)


class AvgPool2d(Function):
    """``avg_pool2d(x, kernel_size, stride=kernel_size, padding=0, ceil_mode=False,
    count_include_pad=True, divisor_override=None)``: the sum of each window divided by its
    divisor -- ``divisor_override``, else the window's size clipped to the padded input
    (``count_include_pad``) or to the input itself -- in the math dtype, rounded once."""

    name = "avg_pool2d"

    @staticmethod
    def forward(ctx, x, kernel_size, stride=None, padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):  # fmt: skip
        if divisor_override is not None and divisor_override == 0:
            raise RuntimeError("avg_pool2d: divisor must be not zero")
        k, s, p, d, (oh, ow), (eh, ew) = _geometry(
            x, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d"
        )
        h, w = x.shape[2:]
        xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0] + eh), (p[1], p[1] + ew)))
        win = _windows(np.ascontiguousarray(xp), k, s, d, (oh, ow))
        total = np.sum(win, axis=(2, 3))
        if divisor_override is not None:
            div = np.full((oh, ow), float(divisor_override))
        else:
            div = np.outer(
                _divisors(h, oh, k[0], s[0], p[0], count_include_pad),
                _divisors(w, ow, k[1], s[1], p[1], count_include_pad),
            )
        ctx.div = div.astype(x.dtype)
        ctx.geom = (x.shape, k, s, d, p, (eh, ew))
        return total / ctx.div

    @staticmethod
    def backward(ctx, g):
        shape, k, s, d, p, extra = ctx.geom
        share = (g / ctx.div)[..., None, None]
        gwin = np.broadcast_to(share, g.shape + k)
        return (_scatter(gwin, shape, k, s, d, p, extra),) + (None,) * 6


def _divisors(size: int, out: int, k: int, s: int, p: int, include_pad: bool) -> np.ndarray:
    """Per output position along one dim, the window length PyTorch divides by."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    pool = end - start
    start, end = np.maximum(start, 0), np.minimum(end, size)
    return (pool if include_pad else end - start).astype(np.float64)


class AdaptiveAvgPool2d(Function):
    """``adaptive_avg_pool2d(x, output_size)``: output cell ``(i, j)`` averages the rows
    ``floor(i*H/oh) .. ceil((i+1)*H/oh)`` and the columns likewise (PyTorch's windows), in the
    math dtype, rounded once. ``output_size``: an int or a pair (None: the input's size)."""

    name = "adaptive_avg_pool2d"

    @staticmethod
    def forward(ctx, x, output_size):
        if x.ndim != 4:
            raise RuntimeError(f"adaptive_avg_pool2d: expected a 4-D input, got {x.ndim}-D")
        h, w = x.shape[2:]
        oh, ow = (output_size, output_size) if not isinstance(output_size, (tuple, list)) \
            else tuple(output_size)  # fmt: skip
        oh, ow = h if oh is None else int(oh), w if ow is None else int(ow)
        if oh < 1 or ow < 1:
            raise RuntimeError(f"adaptive_avg_pool2d: output size must be positive, got {oh, ow}")
        rows = [(i * h // oh, math.ceil((i + 1) * h / oh)) for i in range(oh)]
        cols = [(j * w // ow, math.ceil((j + 1) * w / ow)) for j in range(ow)]
        ctx.cells, ctx.shape = (rows, cols), x.shape
        out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
        for i, (r0, r1) in enumerate(rows):
            for j, (c0, c1) in enumerate(cols):
                out[:, :, i, j] = np.sum(x[:, :, r0:r1, c0:c1], axis=(2, 3)) / x.dtype.type(
                    (r1 - r0) * (c1 - c0)
                )
        return out

    @staticmethod
    def backward(ctx, g):
        rows, cols = ctx.cells
        gx = np.zeros(ctx.shape, g.dtype)
        for i, (r0, r1) in enumerate(rows):
            for j, (c0, c1) in enumerate(cols):
                share = g[:, :, i, j] / g.dtype.type((r1 - r0) * (c1 - c0))
                gx[:, :, r0:r1, c0:c1] += share[:, :, None, None]
        return gx, None
