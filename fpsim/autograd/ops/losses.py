"""Losses: ``mse_loss``, ``cross_entropy`` (with ``ignore_index`` and ``label_smoothing``),
``nll_loss``, ``binary_cross_entropy_with_logits``, ``binary_cross_entropy``. Each runs in
its inputs' format (autocast runs them in fp32) and reduces in the math dtype."""

from __future__ import annotations

import numpy as np

from ..function import Function
from ._common import _sigmoid, _unbroadcast

_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss: np.ndarray, reduction: str, count=None) -> np.ndarray:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if reduction == "none":
        return loss
    s = np.sum(loss)
    if reduction == "sum":
        return s
    return s / loss.dtype.type(loss.size if count is None else count)


def _reduced_grad(g: np.ndarray, shape: tuple, reduction: str, count=None) -> np.ndarray:
    """d(reduced loss)/d(elementwise loss), broadcast to the elementwise shape."""
    if reduction == "none":
        return g
    n = int(np.prod(shape)) if count is None else count
    if reduction == "mean":
        g = g / g.dtype.type(n)
    return np.broadcast_to(g, shape)


class MSELoss(Function):
    name = "mse_loss"

    @staticmethod
    def forward(ctx, x, t, reduction="mean"):
        d = ctx.d = x - t
        ctx.reduction, ctx.shapes = reduction, (np.shape(x), np.shape(t))
        return _reduce(d * d, reduction)

    @staticmethod
    def backward(ctx, g):
        d = ctx.d
        gd = 2 * d * _reduced_grad(g, d.shape, ctx.reduction)
        nx, nt = ctx.needs_input_grad[:2]
        return (
            _unbroadcast(gd, ctx.shapes[0]) if nx else None,
            _unbroadcast(-gd, ctx.shapes[1]) if nt else None,
        )


def _class_targets(x: np.ndarray, t, ignore_index: int):
    t = np.asarray(t)
    if t.dtype.kind not in "iu":
        raise TypeError(f"expected integer class targets, got {t.dtype}")
    x2 = x[None, :] if x.ndim == 1 else x
    if x2.ndim != 2:
        raise ValueError(f"expected logits of shape (N, C) or (C,), got {x.shape}")
    t2 = t.reshape(-1)
    if t2.shape[0] != x2.shape[0]:
        raise ValueError(f"expected {x2.shape[0]} targets, got {t.shape}")
    valid = t2 != ignore_index
    # a negative target other than ignore_index is an error too (not a class counted from the
    # end); PyTorch names the first bad target
    bad = valid & ((t2 < 0) | (t2 >= x2.shape[1]))
    if bad.any():
        raise IndexError(f"Target {t2[np.argmax(bad)]} is out of bounds.")
    tt = np.where(valid, t2, 0)
    return x2, tt, valid


class CrossEntropy(Function):
    """``cross_entropy(logits, targets)``: ``logsumexp(x_i) - x_i[t_i]`` from (N, C) logits and
    integer targets; ``reduction`` mean (over targets != ignore_index) / sum / none.

    ``label_smoothing`` ε mixes in the uniform distribution, as PyTorch:
    ``(1 - ε) * nll + ε / C * smooth`` with ``smooth_i = -sum_c log p_ic`` (0 for ignored
    targets), each term reduced the same way (mean: divided by the number of counted targets).
    Backward: ``(p - (1 - ε) * onehot - ε / C)`` times the reduced gradient."""

    name = "cross_entropy"

    @staticmethod
    def forward(ctx, x, t, reduction="mean", ignore_index=-100, label_smoothing=0.0):
        if not 0.0 <= label_smoothing <= 1.0:
            raise RuntimeError(
                f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}"
            )
        x2, tt, valid = _class_targets(x, t, ignore_index)
        z = x2 - np.max(x2, axis=1, keepdims=True)
        lse = np.log(np.sum(np.exp(z), axis=1, keepdims=True))
        rows = np.arange(x2.shape[0])
        loss = (lse[:, 0] - z[rows, tt]) * valid
        ctx.z, ctx.lse, ctx.tt, ctx.valid, ctx.xshape = z, lse, tt, valid, x.shape
        ctx.reduction, ctx.count, ctx.ls = reduction, int(valid.sum()), label_smoothing
        out = _reduce(loss, reduction, ctx.count)
        if label_smoothing > 0:
            c = x2.shape[1]
            smooth = (c * lse[:, 0] - np.sum(z, axis=1)) * valid  # -sum_c log p_ic
            k = x2.dtype.type(label_smoothing)
            out = (1 - k) * out + _reduce(smooth, reduction, ctx.count) * (k / c)
        return out.reshape(()) if (x.ndim == 1 and reduction == "none") else out

    @staticmethod
    def backward(ctx, g):
        p = np.exp(ctx.z - ctx.lse)
        k = p.dtype.type(ctx.ls)
        if ctx.ls > 0:
            p -= k / p.shape[1]
        p[np.arange(p.shape[0]), ctx.tt] -= 1 - k
        gl = _reduced_grad(
            g.reshape(-1) if ctx.reduction == "none" else g,
            ctx.valid.shape,
            ctx.reduction,
            ctx.count,
        )
        gx = p * (gl * ctx.valid)[:, None]
        return gx.reshape(ctx.xshape), None


class NLLLoss(Function):
    """``nll_loss(log_probs, targets)``: ``-log_probs[i, t_i]``, reduced like cross_entropy."""

    name = "nll_loss"

    @staticmethod
    def forward(ctx, x, t, reduction="mean", ignore_index=-100):
        x2, tt, valid = _class_targets(x, t, ignore_index)
        loss = -x2[np.arange(x2.shape[0]), tt] * valid
        ctx.tt, ctx.valid, ctx.xshape, ctx.x2shape = tt, valid, x.shape, x2.shape
        ctx.reduction, ctx.count = reduction, int(valid.sum())
        out = _reduce(loss, reduction, ctx.count)
        return out.reshape(()) if (x.ndim == 1 and reduction == "none") else out

    @staticmethod
    def backward(ctx, g):
        gl = _reduced_grad(
            g.reshape(-1) if ctx.reduction == "none" else g,
            ctx.valid.shape,
            ctx.reduction,
            ctx.count,
        )
        gx = np.zeros(ctx.x2shape, g.dtype)
        gx[np.arange(gx.shape[0]), ctx.tt] = -gl * ctx.valid
        return gx.reshape(ctx.xshape), None


class BCEWithLogits(Function):
    """``max(x, 0) - x*y + log1p(exp(-|x|))``: binary cross-entropy from logits (stable)."""

    name = "binary_cross_entropy_with_logits"

    @staticmethod
    def forward(ctx, x, y, reduction="mean"):
        ctx.x, ctx.y, ctx.reduction = x, y, reduction
        loss = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))
        ctx.shape = loss.shape
        return _reduce(loss, reduction)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.x, ctx.y
        gl = _reduced_grad(g, ctx.shape, ctx.reduction)
        nx, ny = ctx.needs_input_grad[:2]
        return (
            _unbroadcast((_sigmoid(x) - y) * gl, np.shape(x)) if nx else None,
            _unbroadcast(-x * gl, np.shape(y)) if ny else None,
        )


class BCE(Function):
    """``-(y log p + (1-y) log(1-p))`` from probabilities, each log clamped at -100 (PyTorch).
    Unsafe under fp16 autocast (autocast for "cuda" refuses it)."""

    name = "binary_cross_entropy"

    @staticmethod
    def forward(ctx, p, y, reduction="mean"):
        logp = np.maximum(np.log(p), -100)
        log1mp = np.maximum(np.log(1 - p), -100)
        ctx.p, ctx.y, ctx.logs, ctx.reduction = p, y, (logp, log1mp), reduction
        loss = -(y * logp + (1 - y) * log1mp)
        ctx.shape = loss.shape
        return _reduce(loss, reduction)

    @staticmethod
    def backward(ctx, g):
        p, y = ctx.p, ctx.y
        logp, log1mp = ctx.logs
        gl = _reduced_grad(g, ctx.shape, ctx.reduction)
        npp, ny = ctx.needs_input_grad[:2]
        eps = g.dtype.type(1e-12)
        gp = gl * (p - y) / np.maximum((1 - p) * p, eps) if npp else None
        gy = gl * (log1mp - logp) if ny else None
        return (
            None if gp is None else _unbroadcast(gp, np.shape(p)),
            None if gy is None else _unbroadcast(gy, np.shape(y)),
        )
