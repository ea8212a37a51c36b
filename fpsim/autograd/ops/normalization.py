"""Normalisation: ``layer_norm``, ``rms_norm``, ``group_norm``, ``batch_norm``.

Statistics and the affine map are computed in the op's math dtype (float32 for fp32, float64
otherwise; batch_norm's statistics in float64 as PyTorch's CPU kernel accumulates them) and
the output is rounded once.

Mixed types, as PyTorch's CPU kernels: an fp16/bf16 input with fp32 parameters (the usual case
under autocast: a bf16 convolution or linear output into an fp32 norm layer) is normalised in
fp32 and the result is returned in the *input's* format, not promoted; the parameter gradients
stay fp32. ``rms_norm`` returns the input's format whatever the weight's (its composite form
ends in ``type_as(input)``).
"""

from __future__ import annotations

import numpy as np

from ...formats import Format
from ..function import Function
from ..precision import to_format
from ._common import F64, _needs


def _mixed_output(x, params, fmt: Format | None) -> Format | None:
    """The output format of a norm op: the fp16/bf16 input's own format when every given
    parameter is fp32 (the op computes in fp32), else the compute format."""
    params = [p for p in params if p is not None]
    low = getattr(x, "format", None)
    if (
        low is not None
        and low.name in ("fp16", "bf16")
        and fmt is not None
        and fmt.name == "fp32"
        and params
        and all(getattr(p, "format", None) == fmt for p in params)
    ):
        return low
    return fmt


def _check_shape(x: np.ndarray, normalized_shape: tuple, op: str) -> tuple:
    k = len(tuple(normalized_shape))
    if tuple(x.shape[x.ndim - k :]) != tuple(normalized_shape) or k > x.ndim:
        raise RuntimeError(
            f"{op}: Given normalized_shape={list(normalized_shape)}, expected input with shape "
            f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(x.shape)}"
        )
    return tuple(range(x.ndim - k, x.ndim))


class LayerNorm(Function):
    """``layer_norm(x, normalized_shape, weight, bias, eps)`` over the last dims: statistics
    (biased variance) and the affine map in the math dtype, output rounded once.

    Mixed types, as PyTorch's kernels: an fp16/bf16 input with fp32 weight and bias (the usual
    case after a low-precision linear layer, with fp32 LayerNorm parameters) is normalised in
    fp32 and the result is returned in the *input's* format, not promoted to fp32; the weight
    and bias gradients stay fp32."""

    name = "layer_norm"

    @classmethod
    def output_format(cls, args, fmt):
        return _mixed_output(args[0], args[2:4], fmt)

    @staticmethod
    def forward(ctx, x, normalized_shape, weight=None, bias=None, eps=1e-5):
        k = len(tuple(normalized_shape))
        if tuple(x.shape[x.ndim - k :]) != tuple(normalized_shape):
            raise RuntimeError(
                f"layer_norm: input shape {x.shape} does not end with {tuple(normalized_shape)}"
            )
        axes = ctx.axes = tuple(range(x.ndim - k, x.ndim))
        mu = np.mean(x, axis=axes, keepdims=True)
        d = x - mu
        var = np.mean(d * d, axis=axes, keepdims=True)
        rstd = ctx.rstd = 1 / np.sqrt(var + x.dtype.type(eps))
        xhat = ctx.xhat = d * rstd
        ctx.w = weight
        y = xhat if weight is None else xhat * weight
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx, g):
        xhat, rstd, w, axes = ctx.xhat, ctx.rstd, ctx.w, ctx.axes
        lead = tuple(range(g.ndim - len(axes)))
        needs = ctx.needs_input_grad + (False,) * (4 - len(ctx.needs_input_grad))
        gw = np.sum(g * xhat, axis=lead) if needs[2] else None
        gb = np.sum(g, axis=lead) if needs[3] else None
        gx = None
        if needs[0]:
            gh = g if w is None else g * w
            gx = rstd * (
                gh
                - np.mean(gh, axis=axes, keepdims=True)
                - xhat * np.mean(gh * xhat, axis=axes, keepdims=True)
            )
        return gx, None, gw, gb


class RMSNorm(Function):
    """``rms_norm(x, normalized_shape, weight, eps)``: ``x / sqrt(mean(x^2) + eps) * weight``
    over the last dims (Zhang & Sennrich 2019). ``eps=None`` is the machine epsilon of the
    input's opmath type (2^-23 for fp16, bf16 and fp32; 2^-52 for fp64), as PyTorch (resolved
    by ``F.rms_norm``). The result has the input's format."""

    name = "rms_norm"

    @classmethod
    def output_format(cls, args, fmt):
        x = args[0]
        return x.format if fmt is not None and x.format is not None else fmt

    @staticmethod
    def forward(ctx, x, normalized_shape, weight=None, eps=None):
        axes = ctx.axes = _check_shape(x, normalized_shape, "rms_norm")
        if eps is None:  # the functional form resolves it from the input's format
            raise ValueError("rms_norm: eps must be given")
        ms = np.mean(x * x, axis=axes, keepdims=True)
        r = ctx.r = 1 / np.sqrt(ms + x.dtype.type(eps))
        xhat = ctx.xhat = x * r
        ctx.w = weight
        return xhat if weight is None else xhat * weight

    @staticmethod
    def backward(ctx, g):
        xhat, r, w, axes = ctx.xhat, ctx.r, ctx.w, ctx.axes
        nx, _, nw, _ = _needs(ctx, 4)
        lead = tuple(range(g.ndim - len(axes)))
        gw = np.sum(g * xhat, axis=lead) if nw else None
        gx = None
        if nx:
            gh = g if w is None else g * w
            gx = r * (gh - xhat * np.mean(gh * xhat, axis=axes, keepdims=True))
        return gx, None, gw, None


class GroupNorm(Function):
    """``group_norm(x, num_groups, weight, bias, eps)``: x of shape (N, C, *) is split into
    ``num_groups`` groups of channels; each (sample, group) is normalised by its mean and
    biased variance; then per-channel scale and shift."""

    name = "group_norm"

    @classmethod
    def output_format(cls, args, fmt):
        return _mixed_output(args[0], args[2:4], fmt)

    @staticmethod
    def forward(ctx, x, num_groups, weight=None, bias=None, eps=1e-5):
        if x.ndim < 2:
            raise RuntimeError(f"group_norm: expected at least 2 dimensions, got {x.ndim}")
        n, c = x.shape[:2]
        if num_groups <= 0 or c % num_groups:
            raise RuntimeError(
                f"Expected number of channels in input to be divisible by num_groups, but got "
                f"input of shape {list(x.shape)} and num_groups={num_groups}"
            )
        for p, what in ((weight, "weight"), (bias, "bias")):
            if p is not None and p.shape != (c,):
                raise RuntimeError(
                    f"Expected {what} to be a vector of size equal to the number of channels "
                    f"in input, but got {what} of shape {list(p.shape)} and input of shape "
                    f"{list(x.shape)}"
                )
        xg = x.reshape(n, num_groups, -1)
        mu = np.mean(xg, axis=2, keepdims=True)
        d = xg - mu
        var = np.mean(d * d, axis=2, keepdims=True)
        rstd = ctx.rstd = 1 / np.sqrt(var + x.dtype.type(eps))
        xhat = ctx.xhat = (d * rstd).reshape(x.shape)
        ctx.w, ctx.groups = weight, num_groups
        cshape = (1, c) + (1,) * (x.ndim - 2)
        y = xhat if weight is None else xhat * weight.reshape(cshape)
        return y if bias is None else y + bias.reshape(cshape)

    @staticmethod
    def backward(ctx, g):
        xhat, rstd, w, groups = ctx.xhat, ctx.rstd, ctx.w, ctx.groups
        nx, _, nw, nb = _needs(ctx, 4)
        n, c = g.shape[:2]
        red = (0,) + tuple(range(2, g.ndim))
        gw = np.sum(g * xhat, axis=red) if nw else None
        gb = np.sum(g, axis=red) if nb else None
        gx = None
        if nx:
            gh = g if w is None else g * w.reshape((1, c) + (1,) * (g.ndim - 2))
            ghg, xg = gh.reshape(n, groups, -1), xhat.reshape(n, groups, -1)
            gxg = rstd * (
                ghg
                - np.mean(ghg, axis=2, keepdims=True)
                - xg * np.mean(ghg * xg, axis=2, keepdims=True)
            )
            gx = gxg.reshape(g.shape)
        return gx, None, gw, gb


class BatchNorm(Function):
    """``batch_norm(x, weight, bias, running_mean=, running_var=, training=, momentum=, eps=)``
    over x of shape (N, C, *): per channel, statistics over the batch and spatial dims.

    Training: the batch mean and biased variance normalise (sums accumulated in float64, as
    PyTorch's CPU kernel does for fp32); the running statistics, when given, are updated in
    place as PyTorch does -- ``running_mean = m * mean + (1 - m) * running_mean`` and
    ``running_var = m * unbiased_var + (1 - m) * running_var``, in the running tensors' format
    (no graph; each counts a version). Evaluation: the running statistics normalise. The
    output is ``x * a + b`` per channel with ``a = invstd * weight``, ``b = bias - mean * a``
    (PyTorch's form), rounded once. Backward: PyTorch's formula (``dotp = sum((x - mean) *
    g)``, ``gx = (g - mean(g) - (x - mean) * dotp * invstd^2 / n) * invstd * w`` in training,
    ``g * invstd * w`` in evaluation)."""

    name = "batch_norm"

    @classmethod
    def output_format(cls, args, fmt):
        return _mixed_output(args[0], args[1:3], fmt)

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, *, running_mean=None, running_var=None,
                training=False, momentum=0.1, eps=1e-5):  # fmt: skip
        if x.ndim < 2:
            raise ValueError(f"expected 2D or more input (got {x.ndim}D input)")
        c = x.shape[1]
        axes = ctx.axes = (0,) + tuple(range(2, x.ndim))
        n = ctx.n = x.size // c if c else 0
        cshape = ctx.cshape = (1, c) + (1,) * (x.ndim - 2)
        m = x.dtype.type
        if training:
            if n <= 1:
                raise ValueError(
                    "Expected more than 1 value per channel when training, got input size "
                    f"{list(x.shape)}"
                )
            x64 = x.astype(F64)
            mean64 = np.mean(x64, axis=axes)
            var_sum = np.sum((x64 - mean64.reshape(cshape)) ** 2, axis=axes).astype(x.dtype)
            mean = mean64.astype(x.dtype)
            invstd = (1 / np.sqrt((var_sum / m(n)).astype(F64) + eps)).astype(x.dtype)
            if running_mean is not None:
                _update_running(running_mean, mean, momentum, None)
            if running_var is not None:
                _update_running(running_var, var_sum / m(n - 1), momentum, F64)
        else:
            if running_mean is None or running_var is None:
                raise RuntimeError("running_mean must be defined in evaluation mode")
            mean = running_mean.data.astype(x.dtype)
            rv = running_var.data.astype(F64)
            invstd = (1 / np.sqrt(rv + eps)).astype(x.dtype)
        ctx.mean, ctx.invstd, ctx.w, ctx.x, ctx.training = mean, invstd, weight, x, training
        a = invstd if weight is None else invstd * weight
        b = -mean * a if bias is None else bias - mean * a
        return x * a.reshape(cshape) + b.reshape(cshape)

    @staticmethod
    def backward(ctx, g):
        nx, nw, nb = _needs(ctx, 3)
        cs, axes, n = ctx.cshape, ctx.axes, ctx.n
        m = g.dtype.type
        xc = ctx.x - ctx.mean.reshape(cs)
        dotp = np.sum(xc.astype(F64) * g, axis=axes)
        sum_g = np.sum(g, axis=axes)
        w = np.ones_like(ctx.invstd) if ctx.w is None else ctx.w
        gx = None
        if nx:
            invstd = ctx.invstd.reshape(cs)
            if ctx.training:
                k = (dotp.astype(g.dtype) * ctx.invstd * ctx.invstd / m(n)).reshape(cs)
                grad_mean = (sum_g / m(n)).reshape(cs)
                gx = (g - grad_mean - xc * k) * invstd * w.reshape(cs)
            else:
                gx = g * invstd * w.reshape(cs)
        gw = (dotp * ctx.invstd).astype(g.dtype) if nw else None
        return gx, gw, sum_g if nb else None


def _update_running(t, batch_stat: np.ndarray, momentum: float, wide) -> None:
    """``t = momentum * batch_stat + (1 - momentum) * t`` in place, in ``t``'s format: float32
    arithmetic for fp32 running statistics (PyTorch's ``param_t``), with the batch term in
    float64 where PyTorch's is (``wide``: the unbiased variance); one rounding for other
    formats."""
    fmt = t.format
    if fmt is not None and fmt.name == "fp32":
        mom = np.float32(momentum)
        keep = (np.float32(1) - mom) * t.data
        if wide is None:
            new = mom * batch_stat.astype(np.float32) + keep
        else:
            new = (F64(mom) * batch_stat.astype(F64) + keep.astype(F64)).astype(np.float32)
    else:
        new = momentum * batch_stat.astype(F64) + (1 - momentum) * t.data.astype(F64)
    t.data[...] = to_format(new, fmt)
    t._bump_version()
