"""numba CPU kernels for the sliding windows of convolution and max pooling (N, C, H, W arrays).

* :func:`im2col` -- the windows of an input as the columns of one matrix product:
  ``cols[c, i, j, n, y, x] = x[n, c, y*sh + i*dh - pt, x*sw + j*dw - pl]`` (0 outside: zero
  padding), without materialising the padded input;
* :func:`col2im` -- the reverse for gradients: every column value added back onto the input
  pixel it came from (pixels in several windows sum their contributions, in window order,
  each addition in the array's own precision);
* :func:`max_pool_forward` / :func:`max_pool_backward` -- PyTorch's CPU max-pooling loop
  (``aten/src/ATen/native/cpu/MaxPoolKernel.cpp``): in each window, read row-major, a value
  replaces the running maximum if it is larger *or NaN* (so ties keep the first maximum and
  the last NaN wins); the index of the winner is kept and the backward adds each output's
  gradient there.

Loops only, no arithmetic beyond the sums of col2im: values are moved, not rounded. Nothing is
compiled at import; the first call compiles one specialisation per dtype (float32 / float64)
and ``cache=True`` keeps it on disk.
"""

from __future__ import annotations

import math

from numba import njit


@njit(cache=True, nogil=True)
def im2col(x, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, cols):
    """Fill ``cols`` (C, kh, kw, N, oh, ow) from ``x`` (N, C, H, W)."""
    n_, c_, h, w = x.shape
    for c in range(c_):
        for i in range(kh):
            for j in range(kw):
                for n in range(n_):
                    for y in range(oh):
                        iy = y * sh + i * dh - pt
                        inside = 0 <= iy < h
                        for xo in range(ow):
                            ix = xo * sw + j * dw - pl
                            if inside and 0 <= ix < w:
                                cols[c, i, j, n, y, xo] = x[n, c, iy, ix]
                            else:
                                cols[c, i, j, n, y, xo] = 0


@njit(cache=True, nogil=True)
def col2im(cols, sh, sw, dh, dw, pt, pl, out):
    """Add ``cols`` (C, kh, kw, N, oh, ow) onto ``out`` (N, C, H, W), which starts at zero."""
    c_, kh, kw, n_, oh, ow = cols.shape
    h, w = out.shape[2], out.shape[3]
    for n in range(n_):
        for c in range(c_):
            for i in range(kh):
                for j in range(kw):
                    for y in range(oh):
                        iy = y * sh + i * dh - pt
                        if iy < 0 or iy >= h:
                            continue
                        for xo in range(ow):
                            ix = xo * sw + j * dw - pl
                            if 0 <= ix < w:
                                out[n, c, iy, ix] += cols[c, i, j, n, y, xo]


@njit(cache=True, nogil=True)
def max_pool_forward(x, kh, kw, sh, sw, dh, dw, ph, pw, out, index):
    """``out``/``index`` (N, C, oh, ow): each window's maximum and its flat position
    ``iy * W + ix`` in the input plane (PyTorch's ``indices``)."""
    n_, c_, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    for n in range(n_):
        for c in range(c_):
            for y in range(oh):
                h0 = y * sh - ph
                while h0 < 0:
                    h0 += dh
                for xo in range(ow):
                    w0 = xo * sw - pw
                    while w0 < 0:
                        w0 += dw
                    best = -math.inf
                    at = h0 * w + w0
                    for i in range(kh):
                        iy = y * sh - ph + i * dh
                        if iy < 0 or iy >= h:
                            continue
                        for j in range(kw):
                            ix = xo * sw - pw + j * dw
                            if ix < 0 or ix >= w:
                                continue
                            v = x[n, c, iy, ix]
                            if v > best or math.isnan(v):
                                best = v
                                at = iy * w + ix
                    out[n, c, y, xo] = best
                    index[n, c, y, xo] = at


@njit(cache=True, nogil=True)
def max_pool_backward(g, index, out):
    """Add ``g`` (N, C, oh, ow) onto ``out`` (N, C, H, W, zero) at the kept indices."""
    n_, c_, oh, ow = g.shape
    w = out.shape[3]
    for n in range(n_):
        for c in range(c_):
            for y in range(oh):
                for xo in range(ow):
                    k = index[n, c, y, xo]
                    out[n, c, k // w, k % w] += g[n, c, y, xo]
