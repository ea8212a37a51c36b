"""Activations (relu, gelu -- erf and tanh forms --, silu, tanh, sigmoid, softplus) and
dropout. Each is elementwise; on "cpu" autocast leaves them in their input format."""

from __future__ import annotations

import math

import numpy as np

from ..function import Function
from ..generator import as_generator
from ._common import _erf, _opmath, _out, _sigmoid


class ReLU(Function):
    name = "relu"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x):
        return np.maximum(x, 0)

    @staticmethod
    def backward(ctx, g):
        return (g * (ctx.out > 0),)


class GELU(Function):
    """``x * Phi(x)`` (``approximate="none"``, erf form) or the tanh approximation. The
    forward keeps ``Phi(x)`` (or the tanh) for the backward, which needs it again."""

    name = "gelu"

    @staticmethod
    def forward(ctx, x, approximate="none"):
        ctx.x, ctx.approximate = x, approximate
        if approximate == "tanh":
            k = math.sqrt(2 / math.pi)
            t = ctx.t = np.tanh(k * (x + 0.044715 * x * x * x))
            return 0.5 * x * (1 + t)
        if approximate != "none":
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        cdf = ctx.cdf = 0.5 * (1 + _erf()(x * (1 / math.sqrt(2))))
        return x * cdf

    @staticmethod
    def backward(ctx, g):
        x = ctx.x
        if ctx.approximate == "tanh":
            k = math.sqrt(2 / math.pi)
            t = ctx.t
            d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
            return (g * d,)
        d = x * x  # g * (Phi(x) + x * phi(x)), in place: one temporary, not five
        d *= -0.5
        np.exp(d, out=d)
        d *= x
        d *= 1 / math.sqrt(2 * math.pi)
        d += ctx.cdf
        d *= g
        return (d,)


class SiLU(Function):
    name = "silu"

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x * _sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        x = ctx.x
        s = _sigmoid(x)
        return (g * s * (1 + x * (1 - s)),)


class Tanh(Function):
    name = "tanh"

    @staticmethod
    def forward(ctx, x):
        return np.tanh(x)

    @staticmethod
    def backward(ctx, g):
        y = _out(ctx, g)
        return (g * (1 - y * y),)


class Sigmoid(Function):
    name = "sigmoid"

    @staticmethod
    def forward(ctx, x):
        return _sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        y = _out(ctx, g)
        return (g * y * (1 - y),)


class Softplus(Function):
    """``softplus(x, beta=1, threshold=20) = log1p(exp(beta * x)) / beta``, and ``x`` itself
    where ``beta * x > threshold`` (PyTorch's formula; beta and threshold held at opmath
    precision). Backward: ``g * z / (z + 1)`` with ``z = exp(beta * x)`` (``g`` past the
    threshold)."""

    name = "softplus"

    @staticmethod
    def forward(ctx, x, beta=1.0, threshold=20.0):
        b = ctx.beta = _opmath(beta, ctx.fmt, x.dtype)
        t = _opmath(threshold, ctx.fmt, x.dtype)
        bx = x * b
        ctx.x, ctx.linear = x, bx > t
        return np.where(ctx.linear, x, np.log1p(np.exp(bx)) / b)

    @staticmethod
    def backward(ctx, g):
        z = np.exp(ctx.x * ctx.beta)
        return (np.where(ctx.linear, g, g * z / (z + 1)),)


class Dropout(Function):
    """Zero each element with probability ``p`` (mask drawn from ``generator``), scale the
    rest by ``1/(1-p)``: ``x * (mask / (1 - p))`` in the math dtype (PyTorch's ``x * noise``),
    rounded once."""

    name = "dropout"

    @staticmethod
    def forward(ctx, x, p=0.5, generator=None):
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        keep = as_generator(generator).random(x.shape) >= p
        scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
        ctx.mult = keep * x.dtype.type(scale)
        return x * ctx.mult

    @staticmethod
    def backward(ctx, g):
        return (g * ctx.mult,)
