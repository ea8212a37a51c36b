"""Convolutions: ``conv2d`` and ``conv1d`` (stride, padding, dilation, groups), as one matrix
product per group over the unfolded input (im2col).

The product goes through the engine's accumulator model (:func:`~fpsim.autograd.precision.
_matmul_values`: fp32 accumulation by default) and the bias is added to the accumulator, so a
bf16 convolution is ``round_bf16(sum in fp32 + bias)``: one rounding per output, as oneDNN's
bf16 kernels and tensor cores. The input gradient sums each input pixel's contributions from
every window it falls in (col2im) in the accumulator too, and rounds once. The unfolding and
folding loops are numba kernels (:mod:`fpsim.kernels.window`).

>>> import numpy as np
>>> from fpsim.autograd import tensor
>>> from fpsim.nn import functional as F
>>> x = tensor(np.arange(16.0).reshape(1, 1, 4, 4))
>>> F.conv2d(x, tensor(np.ones((1, 1, 2, 2))), stride=2).tolist()
[[[[10.0, 18.0], [42.0, 50.0]]]]
"""

from __future__ import annotations

import numpy as np

from ...kernels import window
from ..function import Function, _same_format
from ..precision import _info, _matmul_values, resolve_accumulator, to_format


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def conv_padding(padding, kernel: tuple[int, int], dilation: tuple[int, int],
                 stride: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:  # fmt: skip
    """``((top, bottom), (left, right))`` from PyTorch's ``padding`` argument: an int, a pair,
    ``"valid"`` (none) or ``"same"`` (output size = input size; stride 1 only; an odd total
    padding puts the extra row/column at the bottom/right, as PyTorch)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding != "same":
            raise ValueError(
                f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}"
            )
        if stride != (1, 1):
            raise ValueError("padding='same' is not supported for strided convolutions")
        out = []
        for k, d in zip(kernel, dilation, strict=True):
            total = d * (k - 1)
            out.append((total // 2, total - total // 2))
        return out[0], out[1]
    ph, pw = _pair(padding, "padding")
    if ph < 0 or pw < 0:
        raise RuntimeError("negative padding is not supported")
    return (ph, ph), (pw, pw)


class Conv2d(Function):
    """``conv2d(x, weight, bias, stride, padding, dilation, groups)``: x (N, C, H, W), weight
    (O, C/groups, kh, kw), bias (O,) or None -> (N, O, oh, ow), ``oh = (H + pad_h - dh*(kh-1)
    - 1) // sh + 1``. All operands must have the same format (autocast casts them: LOW)."""

    name = "conv2d"
    forward_precision = backward_precision = "stored"

    @classmethod
    def compute_format(cls, args, kwargs):
        return _same_format(cls.name, args)

    @staticmethod
    def forward(ctx, x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1, acc=None):
        fmt = ctx.fmt
        acc = ctx.acc = resolve_accumulator(acc, fmt)
        if x.ndim != 4 or w.ndim != 4:
            raise RuntimeError(
                f"conv2d: expected 4-D input and weight (batched), got {x.ndim}-D and {w.ndim}-D"
            )
        n, c, h, wd = x.shape
        o, cg, kh, kw = w.shape
        if groups < 1 or c % groups or o % groups or cg * groups != c:
            raise RuntimeError(
                f"Given groups={groups}, weight of size {list(w.shape)}, expected input"
                f"{list(x.shape)} to have {cg * groups} channels, but got {c} channels instead"
            )
        if b is not None and b.shape != (o,):
            raise RuntimeError(f"conv2d: bias of shape {list(b.shape)}, expected [{o}]")
        s, d = _pair(stride, "stride"), _pair(dilation, "dilation")
        if min(s) < 1 or min(d) < 1:
            raise RuntimeError("conv2d: stride and dilation must be positive")
        (pt, pb), (pl, pr) = conv_padding(padding, (kh, kw), d, s)
        hp, wp = h + pt + pb, wd + pl + pr
        oh, ow = (hp - d[0] * (kh - 1) - 1) // s[0] + 1, (wp - d[1] * (kw - 1) - 1) // s[1] + 1
        if oh < 1 or ow < 1:
            raise RuntimeError(
                f"Calculated output size: ({o}x{oh}x{ow}). Output size is too small "
                f"(input {h}x{wd} after padding {hp}x{wp}, kernel {kh}x{kw}, dilation {d})"
            )
        g, og, kk, nl = groups, o // groups, cg * kh * kw, n * oh * ow
        # the windows as (C, kh, kw, N, oh, ow) -> (groups, C/g*kh*kw, N*oh*ow): one GEMM each
        cols = np.empty((c, kh, kw, n, oh, ow), x.dtype)
        window.im2col(np.ascontiguousarray(x), kh, kw, s[0], s[1], d[0], d[1], pt, pl, oh, ow,
                      cols)  # fmt: skip
        cols = cols.reshape(g, kk, nl)
        wm = w.reshape(g, og, kk)
        ctx.cols, ctx.wm, ctx.geom = cols, wm, (x.shape, w.shape, s, d, (pt, pb, pl, pr), g)
        if b is None:
            out = _matmul_values(wm, cols, fmt, acc)
        else:
            m = _matmul_values(wm, cols, acc, acc)  # the accumulator's values
            bias = b.reshape(g, og, 1)
            if _info(acc).native:
                out = to_format(m + bias.astype(m.dtype, copy=False), fmt)
            else:
                out = to_format(to_format(m.astype(np.float64) + bias, acc), fmt)
        out = out.reshape(o, n, oh, ow)
        return np.ascontiguousarray(np.transpose(out, (1, 0, 2, 3)))

    @staticmethod
    def backward(ctx, g):
        fmt, acc = ctx.fmt, ctx.acc
        (n, c, h, wd), (o, cg, kh, kw), s, d, (pt, pb, pl, pr), groups = ctx.geom
        oh, ow = g.shape[2:]
        need = tuple(ctx.needs_input_grad) + (False,) * (3 - len(ctx.needs_input_grad))
        og = o // groups
        gm = np.transpose(g, (1, 0, 2, 3)).reshape(groups, og, n * oh * ow)
        gx = gw = gb = None
        if need[2]:
            ones = np.ones((groups, n * oh * ow, 1), g.dtype)
            gb = _matmul_values(gm, ones, fmt, acc).reshape(o)
        if need[1]:
            gw = _matmul_values(gm, np.swapaxes(ctx.cols, 1, 2), fmt, acc).reshape(o, cg, kh, kw)
        if need[0]:
            # the columns' gradient in the accumulator, summed back onto the pixels (col2im)
            gc = _matmul_values(np.swapaxes(ctx.wm, 1, 2), gm, acc, acc)
            info = _info(acc)
            work = info.container if info.native else np.float64
            gc = np.ascontiguousarray(gc.reshape(c, kh, kw, n, oh, ow), dtype=work)
            gxp = np.zeros((n, c, h, wd), work)
            window.col2im(gc, s[0], s[1], d[0], d[1], pt, pl, gxp)
            if not info.native:  # the sum rounded once to the accumulator format
                gxp = to_format(gxp, acc)
            gx = to_format(gxp, fmt)
        return gx, gw, gb


class Conv1d(Conv2d):
    """``conv1d(x, weight, bias, stride, padding, dilation, groups)``: x (N, C, L), weight
    (O, C/groups, k); computed as a conv2d of height 1 (as PyTorch does)."""

    name = "conv1d"

    @staticmethod
    def forward(ctx, x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1, acc=None):
        if x.ndim != 3 or w.ndim != 3:
            raise RuntimeError(
                f"conv1d: expected 3-D input and weight (batched), got {x.ndim}-D and {w.ndim}-D"
            )

        def one(v, name):
            if isinstance(v, (tuple, list)):
                if len(v) != 1:
                    raise ValueError(f"{name} must be an int or a 1-tuple, got {v!r}")
                v = v[0]
            return v

        p = one(padding, "padding")
        out = Conv2d.forward(
            ctx, x[:, :, None, :], w[:, :, None, :], b,
            stride=(1, one(stride, "stride")), padding=p if isinstance(p, str) else (0, p),
            dilation=(1, one(dilation, "dilation")), groups=groups, acc=acc,
        )  # fmt: skip
        return out[:, :, 0, :]

    @staticmethod
    def backward(ctx, g):
        gx, gw, gb = Conv2d.backward(ctx, g[:, :, None, :])
        return (
            None if gx is None else gx[:, :, 0, :],
            None if gw is None else gw[:, :, 0, :],
            gb,
        )
