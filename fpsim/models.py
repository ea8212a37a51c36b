"""Two small real models, shipped as code: a character-level GPT and a small CNN.

They are the networks mixed-precision training is learnt on (attention, convolution,
normalisation, GELU, tied embeddings), small enough to train on a CPU in seconds. Parameter
names, shapes and the computation follow the usual PyTorch code for these models (nanoGPT's
blocks; conv-BN-ReLU-pool), so a PyTorch twin with the same structure takes the same state
dict (``tests/torch_twins.py`` builds them).

* :class:`CharGPT` -- token and position embeddings, ``n_layer`` pre-norm transformer blocks
  (LayerNorm or RMSNorm, causal multi-head self-attention through
  ``scaled_dot_product_attention``, a GELU MLP), a final norm and an output layer tied to the
  token embedding; for :func:`fpsim.data.char_dataset` (the shipped sonnets).
* :class:`SmallCNN` -- (conv 3x3 - BatchNorm - ReLU - max-pool 2) twice and a linear head; for
  :func:`fpsim.data.shapes`.

>>> import fpsim
>>> from fpsim import data, models
>>> X, Y, vocab = data.char_dataset(seq_len=16)
>>> gpt = models.CharGPT(len(vocab), block_size=16, seed=0)
>>> logits = gpt(fpsim.tensor(X[:4]))
>>> logits.shape, sum(p.numel() for p in gpt.parameters())
((4, 16, 55), 27744)
>>> Xs, ys = data.shapes(8, size=16, seed=0)
>>> cnn = models.SmallCNN(seed=0)
>>> cnn(fpsim.tensor(Xs)).shape
(8, 4)
"""

from __future__ import annotations

import math

import numpy as np

from . import nn
from .autograd import functional as F
from .autograd.generator import as_generator
from .autograd.grad_mode import no_grad
from .autograd.tensor import Tensor, tensor
from .formats import FormatLike

__all__ = ["CharGPT", "SmallCNN", "CausalSelfAttention", "Block"]


def _norm(kind: str, dim: int, format: FormatLike) -> nn.Module:
    if kind == "layer":
        return nn.LayerNorm(dim, format=format)
    if kind == "rms":
        return nn.RMSNorm(dim, format=format)
    raise ValueError(f"norm must be 'layer' or 'rms', got {kind!r}")


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one Linear makes q, k and v (``qkv``), the heads attend
    through ``scaled_dot_product_attention(is_causal=True)``, a Linear (``proj``) mixes them."""

    def __init__(self, n_embd: int, n_head: int, dropout: float = 0.0,
                 format: FormatLike = "fp32") -> None:  # fmt: skip
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")
        self.n_head, self.dropout = n_head, dropout
        self.qkv = nn.Linear(n_embd, 3 * n_embd, format=format)
        self.proj = nn.Linear(n_embd, n_embd, format=format)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        h = self.n_head
        q, k, v = (
            y.reshape(b, t, h, c // h).transpose(1, 2)
            for y in self.qkv(x).split(c, dim=2)
        )  # fmt: skip
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """A pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))`` with
    ``mlp = Linear(c, 4c) - GELU - Linear(4c, c)``."""

    def __init__(self, n_embd: int, n_head: int, dropout: float = 0.0, norm: str = "layer",
                 format: FormatLike = "fp32") -> None:  # fmt: skip
        super().__init__()
        self.norm1 = _norm(norm, n_embd, format)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout, format)
        self.norm2 = _norm(norm, n_embd, format)
        self.fc = nn.Linear(n_embd, 4 * n_embd, format=format)
        self.gelu = nn.GELU()
        self.fc_proj = nn.Linear(4 * n_embd, n_embd, format=format)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.drop(self.fc_proj(self.gelu(self.fc(self.norm2(x)))))


class CharGPT(nn.Module):
    """A character-level GPT: ``logits = gpt(idx)`` for integer ``idx`` of shape (B, T), T <=
    ``block_size``; logits (B, T, vocab_size).

    Initialisation (GPT-2's): every Linear weight and both embeddings N(0, 0.02^2), the
    residual projections (``attn.proj``, ``fc_proj``) N(0, (0.02 / sqrt(2 n_layer))^2), biases
    zero; drawn from ``seed`` in parameter order. The output layer is the token embedding
    itself (tied weights: ``F.linear(h, tok_emb.weight)``). ``norm``: ``"layer"`` or ``"rms"``.
    """

    def __init__(self, vocab_size: int, block_size: int = 32, n_layer: int = 2, n_head: int = 4,
                 n_embd: int = 32, dropout: float = 0.0, norm: str = "layer",
                 format: FormatLike = "fp32", seed=0) -> None:  # fmt: skip
        super().__init__()
        self.vocab_size, self.block_size = vocab_size, block_size
        self.tok_emb = nn.Embedding(vocab_size, n_embd, format=format)
        self.pos_emb = nn.Embedding(block_size, n_embd, format=format)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(n_embd, n_head, dropout, norm, format) for _ in range(n_layer)
        )
        self.norm_f = _norm(norm, n_embd, format)
        g = as_generator(seed)
        resid = 0.02 / math.sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif name.endswith(("attn.proj.weight", "fc_proj.weight")):
                nn.init.normal_(p, 0.0, resid, generator=g)
            elif p.ndim == 2:
                nn.init.normal_(p, 0.0, 0.02, generator=g)

    def forward(self, idx) -> Tensor:
        idx = idx if isinstance(idx, Tensor) else tensor(idx)
        b, t = idx.shape
        if t > self.block_size:
            raise ValueError(f"sequence of length {t} is longer than block_size {self.block_size}")
        pos = tensor(list(range(t)))
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm_f(x), self.tok_emb.weight)

    @no_grad()
    def generate(self, idx, steps: int, temperature: float = 1.0, generator=None) -> Tensor:
        """Append ``steps`` sampled tokens to ``idx`` (B, T), one at a time."""
        g = as_generator(generator)
        ids = (idx.data if isinstance(idx, Tensor) else tensor(idx).data).copy()
        for _ in range(steps):
            logits = self(tensor(ids[:, -self.block_size :]))[:, -1].data.astype(np.float64)
            z = logits / temperature
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            nxt = np.array([g.choice(len(row), p=row) for row in p])
            ids = np.concatenate([ids, nxt[:, None]], axis=1)
        return tensor(ids)


class SmallCNN(nn.Module):
    """(conv 3x3 - BatchNorm - ReLU - max-pool 2) x 2, then a Linear head: ``logits =
    cnn(images)`` for images (N, in_channels, size, size) -> (N, num_classes). Convolutions
    without bias (BatchNorm has one), PyTorch's default initialisation from ``seed``."""

    def __init__(self, in_channels: int = 1, num_classes: int = 4, widths=(8, 16),
                 image_size: int = 16, format: FormatLike = "fp32", seed=0) -> None:  # fmt: skip
        super().__init__()
        if image_size % 4:
            raise ValueError(f"image_size must be divisible by 4, got {image_size}")
        g = as_generator(seed)
        w1, w2 = widths
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w1, 3, padding=1, bias=False, format=format, seed=g),
            nn.BatchNorm2d(w1, format=format),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(w1, w2, 3, padding=1, bias=False, format=format, seed=g),
            nn.BatchNorm2d(w2, format=format),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(w2 * (image_size // 4) ** 2, num_classes, format=format, seed=g)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x).flatten(1))
