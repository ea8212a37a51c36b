"""Elementwise ops: arithmetic (``+ - * /``, ``number / x``, ``**``), unary math (exp, log,
log1p, expm1, sqrt, rsqrt, reciprocal, abs, clamp), ``maximum``/``minimum``, ``where`` and
``masked_fill``.

Scalar operands (a Python number, or a wider 0-dim tensor outranked by a dimensioned one) are
rounded to the op's format before the op runs, except the second operand of ``mul`` and
``div``, which keeps its value at opmath precision (``Function.keeps_second_scalar``), as
PyTorch's CPU kernels do: ``bf16([2.296875]) + 1.1`` adds bf16(1.1) = 1.1015625 and gives
3.40625, while ``bf16([2.296875]) * 1.1`` multiplies by float32(1.1).
"""

from __future__ import annotations

import numpy as np

from ...formats import fp32
from ..function import Function, _promote_args
from ..precision import to_format
from ._common import _needs, _opmath, _out, _unbroadcast


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
    """``a * b``. A scalar second operand (a Python number, or a wider 0-dim tensor) keeps
    its value at opmath precision and the product is formed there, then rounded once (ATen's
    mul kernel); a scalar first operand is rounded to the format first."""

    name = "mul"
    keeps_second_scalar = True

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
    """``a / b``; scalar operands as in :class:`Mul` (a scalar divisor keeps its value)."""

    name = "div"
    keeps_second_scalar = True

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


class RDiv(Function):
    """``number / x``, as PyTorch's ``Tensor.__rtruediv__``: ``x.reciprocal() * number``, two
    roundings -- the reciprocal rounded to the format, then the product with the number held at
    opmath precision (ATen's mul with a scalar second operand), rounded once more. Arguments
    ``(x, number)``. Its own name because autocast treats it apart ("cuda": fp32). The backward
    follows PyTorch's two nodes: ``g1 = round(g * number)``, then ``-round(g1 * round(r * r))``.
    """

    name = "__rtruediv__"
    keeps_second_scalar = True

    @staticmethod
    def forward(ctx, x, s):
        if ctx.fmt is None:  # integers: reciprocal gives fp32 (the default dtype), as PyTorch
            x, s = x.astype(np.float32), np.float32(s)
        elif x.dtype.kind in "iub":  # an integer tensor under a float number: its float values
            x = x.astype(np.asarray(s).dtype)
        r = ctx.r = to_format(np.reciprocal(x), ctx.fmt or fp32).astype(x.dtype, copy=False)
        ctx.s = s
        return r * s

    @staticmethod
    def backward(ctx, g):
        fmt, r = ctx.fmt, ctx.r
        g1 = to_format(g * ctx.s, fmt).astype(g.dtype, copy=False)
        rr = to_format(r * r, fmt).astype(g.dtype, copy=False)
        return -(g1 * rr), None


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
    """``a ** b``; the exponent is usually a Python number, rounded to the format first (as
    PyTorch's ``pow(Tensor, Scalar)`` kernels: ``bf16 ** 1.1`` raises to 1.1015625)."""

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


class Log1p(Function):
    """``log(1 + x)``, accurate for small x (numpy's ``log1p``)."""

    name = "log1p"

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return np.log1p(x)

    @staticmethod
    def backward(ctx, g):
        return (g / (1 + ctx.x),)


class Expm1(Function):
    """``exp(x) - 1``, accurate for small x; backward from the stored result: ``g * (y + 1)``."""

    name = "expm1"

    @staticmethod
    def forward(ctx, x):
        return np.expm1(x)

    @staticmethod
    def backward(ctx, g):
        return (g * (_out(ctx, g) + 1),)


class Reciprocal(Function):
    """``1 / x``; backward from the stored result: ``-g * y * y``."""

    name = "reciprocal"

    @staticmethod
    def forward(ctx, x):
        return np.reciprocal(x)

    @staticmethod
    def backward(ctx, g):
        y = _out(ctx, g)
        return (-g * (y * y),)


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


class _MaxMin(Function):
    """``maximum(a, b)`` / ``minimum(a, b)``, elementwise with broadcasting and promotion (a
    scalar operand is rounded to the format first); NaN if either is NaN. Backward as PyTorch
    (``derivatives.yaml``): a tie sends half the gradient to each side, NaN sends it to both."""

    largest = True

    @staticmethod
    def forward(ctx, a, b):
        ctx.a, ctx.b = a, b
        return np.maximum(a, b) if ctx.largest else np.minimum(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.a, ctx.b
        na, nb = ctx.needs_input_grad
        half = np.where(a == b, g / 2, g)
        lose_a, lose_b = (a < b, a > b) if ctx.largest else (a > b, a < b)
        return (
            _unbroadcast(np.where(lose_a, 0, half), np.shape(a)) if na else None,
            _unbroadcast(np.where(lose_b, 0, half), np.shape(b)) if nb else None,
        )


class Maximum(_MaxMin):
    name = "maximum"


class Minimum(_MaxMin):
    name = "minimum"
    largest = False


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


class MaskedFill(Function):
    """``masked_fill(x, mask, value)``: ``value`` where the bool ``mask`` (broadcast to x's
    shape) is true. The result has x's format; ``value`` (a Python number or a 0-dim tensor) is
    rounded to it. Gradients: x gets ``g`` off the mask; a 0-dim tensor value gets the sum of
    ``g`` over the mask."""

    name = "masked_fill"

    @classmethod
    def compute_format(cls, args, kwargs):
        return args[0].format

    @staticmethod
    def forward(ctx, x, mask, value):
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise RuntimeError(
                f"masked_fill_ only supports boolean masks, but got mask with dtype {mask.dtype}"
            )
        if np.ndim(value) != 0:
            raise RuntimeError(
                "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{np.ndim(value)} dimension(s)."
            )
        if np.broadcast_shapes(mask.shape, x.shape) != x.shape:
            raise RuntimeError(
                f"The size of the mask {mask.shape} must be broadcastable to the input "
                f"{x.shape} without changing its shape"
            )
        ctx.mask = np.broadcast_to(mask, x.shape)
        return np.where(ctx.mask, value, x)

    @staticmethod
    def backward(ctx, g):
        nx, _, nv = _needs(ctx, 3)
        return (
            np.where(ctx.mask, 0, g) if nx else None,
            None,
            np.sum(g, where=ctx.mask) if nv else None,
        )
