"""``scaled_dot_product_attention``: ``softmax(q @ k^T * scale + mask) @ v`` as one fused op.

Like PyTorch's fused CPU kernels (and FlashAttention), the scores, the softmax and the weighted
sum of values stay inside the op: they are computed in the math dtype (float32 for fp32,
float64 for the other formats) and only the output is rounded to the format. PyTorch's
bf16/fp16 CPU kernel differs in one intermediate rounding: it rounds the unnormalised
probabilities to the low-precision format before their product with ``v``.
"""

from __future__ import annotations

import math

import numpy as np

from ..function import Function, _same_format
from ..generator import as_generator
from ._common import _unbroadcast


class ScaledDotProductAttention(Function):
    """Arguments ``(q, k, v, attn_mask=None)``; keywords ``dropout_p``, ``is_causal``,
    ``scale``, ``generator``. q: (..., L, E), k: (..., S, E), v: (..., S, Ev) -> (..., L, Ev);
    batch dims broadcast. ``attn_mask``: bool (True: the position takes part) or a float
    tensor added to the scores, broadcastable to (..., L, S). ``is_causal``: position i
    attends to positions j <= i (the top-left triangle, as PyTorch). ``scale`` defaults to
    ``1/sqrt(E)``. A query whose every key is masked gets zero weights (output 0, no gradient),
    as PyTorch's safe softmax.
    ``dropout_p`` zeroes attention weights with the given probability (mask from
    ``generator``; scale 1/(1-p))."""

    name = "scaled_dot_product_attention"

    @classmethod
    def compute_format(cls, args, kwargs):
        fmt = _same_format(cls.name, args[:3])
        mask = args[3] if len(args) > 3 else None
        mf = getattr(mask, "format", None)
        if mf is not None and mf != fmt:
            raise RuntimeError(
                f"Expected attn_mask dtype to be bool or float or to match query dtype, got "
                f"{mf.name} and {fmt.name}"
            )
        return fmt

    @staticmethod
    def forward(ctx, q, k, v, attn_mask=None, *, dropout_p=0.0, is_causal=False, scale=None,
                generator=None):  # fmt: skip
        if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
            raise RuntimeError("scaled_dot_product_attention: q, k, v need at least 2 dims")
        if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
            raise RuntimeError(
                f"scaled_dot_product_attention: shapes q {q.shape}, k {k.shape}, v {v.shape} "
                "do not fit (q, k: same last dim; k, v: same sequence length)"
            )
        if is_causal and attn_mask is not None:
            raise RuntimeError(
                "_scaled_dot_product_attention: Explicit attn_mask should not be set when "
                "is_causal=True"
            )
        m = q.dtype.type
        sc = m(1 / math.sqrt(q.shape[-1]) if scale is None else scale)
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * sc
        L, S = q.shape[-2], k.shape[-2]
        if attn_mask is not None:
            try:
                np.broadcast_shapes(attn_mask.shape, s.shape)
            except ValueError:
                raise RuntimeError(
                    f"scaled_dot_product_attention: attn_mask of shape {attn_mask.shape} does "
                    f"not broadcast to the scores' shape {s.shape}"
                ) from None
        allowed = None
        if is_causal:
            allowed = np.tril(np.ones((L, S), bool))
        elif attn_mask is not None:
            if attn_mask.dtype == bool:
                allowed = attn_mask
            else:
                s = s + attn_mask
        if allowed is not None:
            s = np.where(allowed, s, -np.inf)
        mx = np.max(s, axis=-1, keepdims=True)
        dead = mx == -np.inf  # every key masked: weights 0 (PyTorch's safe softmax), not NaN
        e = np.exp(s - np.where(dead, 0, mx))
        den = np.sum(e, axis=-1, keepdims=True)
        p = e / np.where(dead, 1, den)
        ctx.keep = None
        if dropout_p > 0:
            if not 0 <= dropout_p <= 1:
                raise ValueError(f"dropout probability has to be between 0 and 1, got {dropout_p}")
            keep = as_generator(generator).random(p.shape) >= dropout_p
            ctx.keep = keep * m(0.0 if dropout_p == 1 else 1 / (1 - dropout_p))
        pd = p if ctx.keep is None else p * ctx.keep
        ctx.q, ctx.k, ctx.v, ctx.p, ctx.pd, ctx.sc = q, k, v, p, pd, sc
        ctx.mshape = None if attn_mask is None else attn_mask.shape
        return np.matmul(pd, v)

    @staticmethod
    def backward(ctx, g):
        q, k, v, p, pd, sc = ctx.q, ctx.k, ctx.v, ctx.p, ctx.pd, ctx.sc
        need = tuple(ctx.needs_input_grad) + (False,) * (4 - len(ctx.needs_input_grad))
        gv = _unbroadcast(np.matmul(np.swapaxes(pd, -1, -2), g), v.shape) if need[2] else None
        gpd = np.matmul(g, np.swapaxes(v, -1, -2))
        gp = gpd if ctx.keep is None else gpd * ctx.keep
        gs = p * (gp - np.sum(gp * p, axis=-1, keepdims=True))
        gq = _unbroadcast(np.matmul(gs, k) * sc, q.shape) if need[0] else None
        gk = _unbroadcast(np.matmul(np.swapaxes(gs, -1, -2), q) * sc, k.shape) if need[1] else None
        gm = _unbroadcast(gs, ctx.mshape) if need[3] else None
        return gq, gk, gv, gm
