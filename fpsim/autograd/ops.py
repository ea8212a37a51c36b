"""Every op of the engine, as a :class:`~fpsim.autograd.function.Function` subclass.

Each op is registered under its ``name`` in :data:`fpsim.autograd.registry`. Forward and
backward are plain numpy formulas; the rounding to the op's format is done by
``Function.apply`` (``"math"`` ops) or inside the op (``"stored"`` ops: those that only move
values, and the matmul-like ops, which round through ``precision._matmul_values``). Ops
whose backward needs the forward *result* read the stored (rounded) result ``ctx.out``, as
PyTorch does: exp, sqrt, rsqrt, tanh, sigmoid, pow (exponent gradient), softmax, log_softmax,
logsumexp. The others differentiate at the stored inputs.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from ..formats import Format, fp32, fp64
from .dims import reduction_axes, wrap_dim, wrap_dims
from .function import Function, _promote_args, _same_format
from .precision import (
    _info,
    _matmul_values,
    acc_dtype,
    resolve_accumulator,
    to_format,
)
from .tensor import as_generator

F64 = np.float64

# ---- helpers ---------------------------------------------------------------------------------


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


# ---- elementwise arithmetic ------------------------------------------------------------------


class Add(Function):
    name = "add"

    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = (np.shape(a), np.shape(b))
        return np.add(a, b)

    @staticmethod
    def backward(ctx, g):
        na, nb = ctx.needs_input_grad
        return (
            _unbroadcast(g, ctx.shapes[0]) if na else None,
            _unbroadcast(g, ctx.shapes[1]) if nb else None,
        )


class Sub(Function):
    name = "sub"

    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = (np.shape(a), np.shape(b))
        return np.subtract(a, b)

    @staticmethod
    def backward(ctx, g):
        na, nb = ctx.needs_input_grad
        return (
            _unbroadcast(g, ctx.shapes[0]) if na else None,
            _unbroadcast(-g, ctx.shapes[1]) if nb else None,
        )


class Mul(Function):
    name = "mul"

    @staticmethod
    def forward(ctx, a, b):
        ctx.a, ctx.b = a, b
        return np.multiply(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.a, ctx.b
        na, nb = ctx.needs_input_grad
        return (
            _unbroadcast(g * b, np.shape(a)) if na else None,
            _unbroadcast(g * a, np.shape(b)) if nb else None,
        )


class Div(Function):
    name = "div"

    @staticmethod
    def forward(ctx, a, b):
        ctx.a, ctx.b = a, b
        return np.true_divide(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.a, ctx.b
        na, nb = ctx.needs_input_grad
        return (
            _unbroadcast(g / b, np.shape(a)) if na else None,
            _unbroadcast(-g * a / (b * b), np.shape(b)) if nb else None,
        )


class RDiv(Div):
    """``scalar / tensor`` (its own name because autocast treats it apart: cuda runs it in fp32)."""

    name = "__rtruediv__"


class Neg(Function):
    name = "neg"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x):
        return np.negative(x)

    @staticmethod
    def backward(ctx, g):
        return (np.negative(g),)


class Pow(Function):
    """``a ** b``; the exponent is usually a Python number (weak scalar)."""

    name = "pow"

    @staticmethod
    def forward(ctx, a, b):
        ctx.a, ctx.b = a, b
        return np.power(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.a, ctx.b
        na, nb = ctx.needs_input_grad
        ga = gb = None
        if na:
            ga = _unbroadcast(np.where(b == 0, 0, g * b * np.power(a, b - 1)), np.shape(a))
        if nb:
            gb = np.where((a == 0) & (b >= 0), 0, g * _out(ctx, g) * np.log(a))
            gb = _unbroadcast(gb, np.shape(b))
        return ga, gb


# ---- unary math ------------------------------------------------------------------------------


class Exp(Function):
    name = "exp"

    @staticmethod
    def forward(ctx, x):
        return np.exp(x)

    @staticmethod
    def backward(ctx, g):
        return (g * _out(ctx, g),)


class Log(Function):
    name = "log"

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return np.log(x)

    @staticmethod
    def backward(ctx, g):
        return (g / ctx.x,)


class Sqrt(Function):
    name = "sqrt"

    @staticmethod
    def forward(ctx, x):
        return np.sqrt(x)

    @staticmethod
    def backward(ctx, g):
        return (g / (2 * _out(ctx, g)),)


class Rsqrt(Function):
    name = "rsqrt"

    @staticmethod
    def forward(ctx, x):
        return 1 / np.sqrt(x)

    @staticmethod
    def backward(ctx, g):
        y = _out(ctx, g)
        return (-0.5 * g * y * y * y,)


class Abs(Function):
    name = "abs"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return np.abs(x)

    @staticmethod
    def backward(ctx, g):
        return (g * np.sign(ctx.x).astype(g.dtype),)


class Clamp(Function):
    """``clamp(x, min, max)`` with Python-number bounds (either may be None)."""

    name = "clamp"
    backward_precision = "stored"

    @staticmethod
    def forward(ctx, x, lo=None, hi=None):
        if lo is None and hi is None:  # PyTorch's refusal (it would be the identity, an alias)
            raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
        lo_v = None if lo is None else _opmath(lo, ctx.fmt, x.dtype)
        hi_v = None if hi is None else _opmath(hi, ctx.fmt, x.dtype)
        mask = np.ones(x.shape, bool)
        out = x
        if lo_v is not None:
            mask &= x >= lo_v
            out = np.maximum(out, lo_v)
        if hi_v is not None:
            mask &= x <= hi_v
            out = np.minimum(out, hi_v)
        ctx.mask = mask
        return out

    @staticmethod
    def backward(ctx, g):
        return (g * ctx.mask,)


# ---- activations -----------------------------------------------------------------------------


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
    """``x * Phi(x)`` (``approximate="none"``, erf form) or the tanh approximation."""

    name = "gelu"

    @staticmethod
    def forward(ctx, x, approximate="none"):
        ctx.x, ctx.approximate = x, approximate
        if approximate == "tanh":
            k = math.sqrt(2 / math.pi)
            return 0.5 * x * (1 + np.tanh(k * (x + 0.044715 * x * x * x)))
        if approximate != "none":
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        return x * (0.5 * (1 + _erf()(x * (1 / math.sqrt(2)))))

    @staticmethod
    def backward(ctx, g):
        x = ctx.x
        if ctx.approximate == "tanh":
            k = math.sqrt(2 / math.pi)
            t = np.tanh(k * (x + 0.044715 * x * x * x))
            d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
            return (g * d,)
        cdf = 0.5 * (1 + _erf()(x * (1 / math.sqrt(2))))
        pdf = np.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))
        return (g * (cdf + x * pdf),)


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


# ---- matrix products -------------------------------------------------------------------------


class MatMul(Function):
    """``a @ b`` with numpy's matmul rules (1-D operands, broadcast batch dimensions).

    Both operands must have the same format (no promotion, as in PyTorch). The product is
    accumulated in the matmul accumulator (fp32 by default, see ``matmul_accumulation``) and
    rounded once to the format; the backward products likewise."""

    name = "matmul"
    forward_precision = backward_precision = "stored"

    @classmethod
    def compute_format(cls, args, kwargs):
        return _same_format(cls.name, args)

    @staticmethod
    def forward(ctx, a, b, acc=None):
        fmt = ctx.fmt
        ctx.acc = resolve_accumulator(acc, fmt)
        if a.ndim == 0 or b.ndim == 0:
            raise RuntimeError("matmul: both arguments need at least 1 dimension")
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        ctx.a2, ctx.b2, ctx.shapes = a2, b2, (a.shape, b.shape)
        out = _matmul_values(a2, b2, fmt, ctx.acc)
        if b.ndim == 1:
            out = out[..., 0]
        if a.ndim == 1:
            out = out[..., 0, :] if b.ndim != 1 else out[..., 0]
        return out

    @staticmethod
    def backward(ctx, g):
        fmt, acc = ctx.fmt, ctx.acc
        (sa, sb), a2, b2 = ctx.shapes, ctx.a2, ctx.b2
        g2 = g
        if len(sb) == 1:
            g2 = g2[..., None]
        if len(sa) == 1:
            g2 = np.expand_dims(g2, -2)
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = _matmul_values(g2, np.swapaxes(b2, -1, -2), fmt, acc)
            ga = _sum_to(ga, a2.shape, fmt).reshape(sa)
        if ctx.needs_input_grad[1]:
            gb = _matmul_values(np.swapaxes(a2, -1, -2), g2, fmt, acc)
            gb = _sum_to(gb, b2.shape, fmt).reshape(sb)
        return ga, gb


def _sum_to(g: np.ndarray, shape: tuple, fmt: Format) -> np.ndarray:
    """Sum broadcast batch dimensions away (math dtype), rounding once to ``fmt``."""
    if g.shape == tuple(shape):
        return g
    return to_format(_unbroadcast(g.astype(_info(fmt).math), shape), fmt)


class MM(MatMul):
    """``mm(a, b)``: 2-D @ 2-D only."""

    name = "mm"

    @staticmethod
    def forward(ctx, a, b, acc=None):
        if a.ndim != 2 or b.ndim != 2:
            raise RuntimeError(f"mm: expected 2-D matrices, got {a.ndim}-D and {b.ndim}-D")
        return MatMul.forward(ctx, a, b, acc)


class Linear(Function):
    """``linear(x, weight, bias) = x @ weight.T + bias`` (weight: ``(out, in)``).

    The product is accumulated in the accumulator format (fp32 by default), the bias is added
    to the accumulator, and the sum is rounded once to the format (as cuBLAS's fp32 epilogue).
    Backward: ``grad_x = g @ W``, ``grad_W = g.T @ x``, ``grad_b = ones @ g``, each through the
    same matmul (same accumulator), rounded once to the format."""

    name = "linear"
    forward_precision = backward_precision = "stored"

    @classmethod
    def compute_format(cls, args, kwargs):
        return _same_format(cls.name, args)

    @staticmethod
    def forward(ctx, x, w, b=None, acc=None):
        fmt = ctx.fmt
        acc = ctx.acc = resolve_accumulator(acc, fmt)
        x2 = x.reshape(-1, x.shape[-1])
        ctx.x2, ctx.w, ctx.xshape = x2, w, x.shape
        if b is None:
            out = _matmul_values(x2, w.T, fmt, acc)
        else:
            m = _matmul_values(x2, w.T, acc, acc)  # the accumulator's values
            if _info(acc).native:
                s = m + b.astype(m.dtype, copy=False)
            else:
                s = to_format(m.astype(F64) + b, acc)
            out = to_format(s, fmt)
        return out.reshape(x.shape[:-1] + (w.shape[0],))

    @staticmethod
    def backward(ctx, g):
        fmt, acc = ctx.fmt, ctx.acc
        g2 = g.reshape(-1, g.shape[-1])
        nx, nw, nb = (ctx.needs_input_grad + (False,))[:3]
        gx = _matmul_values(g2, ctx.w, fmt, acc).reshape(ctx.xshape) if nx else None
        gw = _matmul_values(g2.T, ctx.x2, fmt, acc) if nw else None
        gb = None
        if nb:
            ones = np.ones((1, g2.shape[0]), g2.dtype)
            gb = _matmul_values(ones, g2, fmt, acc)[0]
        return gx, gw, gb


# ---- reductions ------------------------------------------------------------------------------


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
        x = args[0]
        params = [a for a in args[2:4] if a is not None]
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


# ---- lookup, dropout, shapes -----------------------------------------------------------------


def _check_embedding_indices(idx: np.ndarray, rows: int, kind: str | None = None) -> None:
    """Refuse what PyTorch's embedding refuses: non-integer indices, and indices outside
    ``[0, rows)`` (numpy would count a negative one from the end)."""
    if idx.dtype.kind not in "iu":
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {kind or idx.dtype} instead (while checking arguments "
            "for embedding)"
        )
    if idx.size and (idx.min() < 0 or idx.max() >= rows):
        raise IndexError("index out of range in self")


class Embedding(Function):
    """``embedding(indices, weight)``: rows of ``weight``; an index outside
    ``[0, num_embeddings)`` raises IndexError, as in PyTorch. The weight gradient adds the
    gradients of repeated indices (in the math dtype), rounded once."""

    name = "embedding"
    forward_precision = "stored"

    @staticmethod
    def forward(ctx, idx, weight):
        idx = np.asarray(idx)
        _check_embedding_indices(idx, weight.shape[0])
        ctx.idx, ctx.wshape = idx, weight.shape
        return weight[idx]

    @staticmethod
    def backward(ctx, g):
        gw = np.zeros(ctx.wshape, g.dtype)
        np.add.at(gw, ctx.idx.reshape(-1), g.reshape(-1, ctx.wshape[-1]))
        return None, gw


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


class Reshape(Function):
    name = "reshape"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x, shape):
        ctx.shape = x.shape
        return np.reshape(x, shape)

    @staticmethod
    def backward(ctx, g):
        return (np.reshape(g, ctx.shape),)


class View(Reshape):
    name = "view"


class Transpose(Function):
    name = "transpose"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x, dim0, dim1):
        ctx.dims = (wrap_dim(dim0, x.ndim, arg="dim0"), wrap_dim(dim1, x.ndim, arg="dim1"))
        if x.ndim == 0:  # dims 0 and -1 of a 0-d tensor: nothing to swap
            return x
        return np.swapaxes(x, *ctx.dims)

    @staticmethod
    def backward(ctx, g):
        return (np.swapaxes(g, *ctx.dims) if g.ndim else g,)


class Permute(Function):
    name = "permute"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x, dims):
        if len(dims) != x.ndim:
            raise RuntimeError(
                "permute(): number of dimensions in the tensor input does not match the length "
                f"of the desired ordering of dimensions i.e. input.dim() = {x.ndim} is not "
                f"equal to len(dims) = {len(dims)}"
            )
        try:
            ctx.dims = wrap_dims(tuple(dims), x.ndim)
        except RuntimeError:
            raise RuntimeError("permute(): duplicate dims are not allowed.") from None
        return np.transpose(x, ctx.dims)

    @staticmethod
    def backward(ctx, g):
        return (np.transpose(g, np.argsort(ctx.dims)),)


class Clone(Function):
    name = "clone"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, x):
        return np.array(x, copy=True)

    @staticmethod
    def backward(ctx, g):
        return (g,)


def _is_basic(idx) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer)) for i in items)


class Index(Function):
    """``x[idx]``: slicing and integer-array indexing. Backward scatters the gradient back,
    adding the contributions of repeated indices (math dtype), rounded once."""

    name = "index"
    forward_precision = "stored"

    @staticmethod
    def forward(ctx, x, idx):
        ctx.idx, ctx.shape = idx, x.shape
        return np.asarray(x[idx])

    @staticmethod
    def backward(ctx, g):
        gx = np.zeros(ctx.shape, g.dtype)
        if _is_basic(ctx.idx):
            gx[ctx.idx] = g
        else:
            np.add.at(gx, ctx.idx, g)
        return gx, None


class Cat(Function):
    """``cat(tensors, dim)``; mixed formats promote (as PyTorch's cat)."""

    name = "cat"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, *xs, dim=0):
        for i, x in enumerate(xs):
            if x.ndim == 0:
                raise RuntimeError(
                    f"zero-dimensional tensor (at position {i}) cannot be concatenated"
                )
        dim = ctx.dim = wrap_dim(dim, xs[0].ndim if xs else 1)
        ctx.splits = np.cumsum([x.shape[dim] for x in xs])[:-1]
        return np.concatenate(xs, axis=dim)

    @staticmethod
    def backward(ctx, g):
        return tuple(np.split(g, ctx.splits, axis=ctx.dim))


class Stack(Function):
    name = "stack"
    forward_precision = backward_precision = "stored"

    @staticmethod
    def forward(ctx, *xs, dim=0):
        # the new dim may come after the last one: ndim + 1 places, as unsqueeze
        dim = wrap_dim(dim, (xs[0].ndim if xs else 0) + 1)
        ctx.dim, ctx.n = dim, len(xs)
        return np.stack(xs, axis=dim)

    @staticmethod
    def backward(ctx, g):
        return tuple(np.take(g, i, axis=ctx.dim) for i in range(ctx.n))


class Where(Function):
    """``where(cond, a, b)``: ``a`` where cond is true, else ``b`` (broadcasting)."""

    name = "where"

    @classmethod
    def compute_format(cls, args, kwargs):
        return _promote_args(args[1:])

    @staticmethod
    def forward(ctx, cond, a, b):
        c = ctx.cond = np.asarray(cond).astype(bool, copy=False)
        ctx.shapes = (np.shape(a), np.shape(b))
        return np.where(c, a, b)

    @staticmethod
    def backward(ctx, g):
        _, na, nb = ctx.needs_input_grad
        c = ctx.cond
        return (
            None,
            _unbroadcast(np.where(c, g, 0), ctx.shapes[0]) if na else None,
            _unbroadcast(np.where(c, 0, g), ctx.shapes[1]) if nb else None,
        )


# ---- casts -----------------------------------------------------------------------------------


class Cast(Function):
    """The cast node ``x.to(fmt)``: forward rounds once to ``fmt``; backward casts the incoming
    gradient (a value of ``fmt``) to the SOURCE tensor's format. Never offered to the dispatch
    policy (the policy itself casts with it)."""

    name = "cast"
    forward_precision = backward_precision = "raw"
    dispatch = False

    @classmethod
    def compute_format(cls, args, kwargs):
        return args[1]

    @staticmethod
    def forward(ctx, x, fmt, rounding="nearest_even", seed=None):
        ctx.src = x.format
        return to_format(x.data, fmt, rounding=rounding, seed=seed)

    @staticmethod
    def backward(ctx, g):
        return (to_format(g, ctx.src), None)


# ---- losses ----------------------------------------------------------------------------------

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
    integer targets; ``reduction`` mean (over targets != ignore_index) / sum / none."""

    name = "cross_entropy"

    @staticmethod
    def forward(ctx, x, t, reduction="mean", ignore_index=-100):
        x2, tt, valid = _class_targets(x, t, ignore_index)
        z = x2 - np.max(x2, axis=1, keepdims=True)
        lse = np.log(np.sum(np.exp(z), axis=1, keepdims=True))
        rows = np.arange(x2.shape[0])
        loss = (lse[:, 0] - z[rows, tt]) * valid
        ctx.z, ctx.lse, ctx.tt, ctx.valid, ctx.xshape = z, lse, tt, valid, x.shape
        ctx.reduction, ctx.count = reduction, int(valid.sum())
        out = _reduce(loss, reduction, ctx.count)
        return out.reshape(()) if (x.ndim == 1 and reduction == "none") else out

    @staticmethod
    def backward(ctx, g):
        p = np.exp(ctx.z - ctx.lse)
        p[np.arange(p.shape[0]), ctx.tt] -= 1
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
