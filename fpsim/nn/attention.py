"""``MultiheadAttention``: a documented subset of ``torch.nn.MultiheadAttention``.

Supported: ``embed_dim``, ``num_heads``, ``dropout``, ``bias``, ``batch_first``; self- and
cross-attention with query, key and value of the same embedding size; ``attn_mask`` (bool:
True *blocks* a position, as PyTorch's module -- the opposite of
``scaled_dot_product_attention`` --, or float: added), ``key_padding_mask`` (bool, True:
ignore that key), ``is_causal`` (with an ``attn_mask``, as a hint, as PyTorch; alone, a causal
mask), ``need_weights`` / ``average_attn_weights``. Not supported: ``kdim``/``vdim``,
``add_bias_kv``, ``add_zero_attn`` (they raise). The parameters have PyTorch's names, shapes and
initialisation (``in_proj_weight`` Xavier-uniform, biases zero, ``out_proj`` a Linear), so a
state dict moves between the two.

>>> import fpsim
>>> from fpsim import nn
>>> mha = nn.MultiheadAttention(8, 2, batch_first=True, seed=0)
>>> x = fpsim.randn(3, 5, 8, generator=0)
>>> out, w = mha(x, x, x)
>>> out.shape, w.shape
((3, 5, 8), (3, 5, 5))
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd import functional as F
from ..autograd.generator import as_generator
from ..autograd.tensor import Tensor, tensor
from ..formats import FormatLike
from .init import constant_, xavier_uniform_
from .layers import Linear
from .module import Module, Parameter

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, format: FormatLike = "fp32", seed=None):  # fmt: skip
        super().__init__()
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or \
                vdim not in (None, embed_dim):  # fmt: skip
            raise NotImplementedError(
                "fpsim's MultiheadAttention supports neither kdim/vdim nor add_bias_kv/"
                "add_zero_attn"
            )
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.batch_first, self.head_dim = batch_first, embed_dim // num_heads
        g = as_generator(seed)
        self.in_proj_weight = Parameter(np.zeros((3 * embed_dim, embed_dim)), format)
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim), format) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, format=format, seed=g)
        xavier_uniform_(self.in_proj_weight, generator=g)
        if bias:
            constant_(self.in_proj_bias, 0.0)
            constant_(self.out_proj.bias, 0.0)

    def _masks(self, attn_mask, key_padding_mask, n: int, L: int, S: int, fmt):
        """One float mask (added to the scores) of shape (N or 1, H or 1, L, S), or None."""
        total = None
        for m, shape in ((attn_mask, None), (key_padding_mask, (n, 1, 1, S))):
            if m is None:
                continue
            m = m if isinstance(m, Tensor) else tensor(m)
            if m.format is None:  # bool: True blocks
                if m.data.dtype != bool:
                    raise AssertionError("only bool and floating types of masks are supported")
                add = tensor(np.where(m.data, -np.inf, 0.0), fmt)
            else:
                add = m.to(fmt)
            if shape is not None:
                add = add.reshape(shape)
            elif add.ndim == 2:
                add = add.reshape(1, 1, L, S)
            elif add.ndim == 3:  # (N * H, L, S)
                add = add.reshape(n, self.num_heads, L, S)
            total = add if total is None else total + add
        return total

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True,
                is_causal: bool = False):  # fmt: skip
        if not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        n, L, E = query.shape
        S = key.shape[1]
        H, D = self.num_heads, self.head_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        if query is key and key is value:
            qkv = F.linear(query, w, b)
            q, k, v = (qkv[..., i * E : (i + 1) * E] for i in range(3))
        else:
            bs = (None, None, None) if b is None else (b[:E], b[E : 2 * E], b[2 * E :])
            q = F.linear(query, w[:E], bs[0])
            k = F.linear(key, w[E : 2 * E], bs[1])
            v = F.linear(value, w[2 * E :], bs[2])
        q, k, v = (t.reshape(n, -1, H, D).transpose(1, 2) for t in (q, k, v))
        causal = is_causal and attn_mask is None and key_padding_mask is None
        mask = self._masks(attn_mask, key_padding_mask, n, L, S, q.format)
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = (q * (1 / math.sqrt(D))) @ k.transpose(-2, -1)
            if causal:
                mask = tensor(np.where(np.tril(np.ones((L, S), bool)), 0.0, -np.inf), q.format)
            if mask is not None:
                scores = scores + mask
            attn = scores.softmax(-1)
            weights = attn.mean(1) if average_attn_weights else attn
            out = F.dropout(attn, p, self.training) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, mask, p, causal)
        out = self.out_proj(out.transpose(1, 2).reshape(n, L, E))
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"batch_first={self.batch_first}")  # fmt: skip
