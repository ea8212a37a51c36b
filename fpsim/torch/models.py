"""A tiny character-level GPT in PyTorch, and batches of the sonnets shipped in
:mod:`fpsim.data`: the model of ``python -m fpsim.demo torch``, lesson 12 and the watch
benchmark.

>>> import torch
>>> model = TinyGPT(vocab_size=sonnet_vocab_size(), seed=0)
>>> x, y = next(sonnet_batches(batch_size=4, seq_len=16, seed=0))
>>> x.shape, y.shape, x.dtype
(torch.Size([4, 16]), torch.Size([4, 16]), torch.int64)
>>> model(x).shape, sonnet_vocab_size()
(torch.Size([4, 16, 55]), 55)
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..data import char_dataset

__all__ = ["TinyGPT", "Block", "CausalSelfAttention", "sonnet_batches", "sonnet_vocab_size"]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one Linear for q, k, v, one for the output."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_head ({n_head})")
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        hs = c // self.n_head
        q, k, v = (z.view(b, t, self.n_head, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x)) with a GELU MLP."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    """A character-level GPT: token and position embeddings, ``n_layer`` blocks, a final
    LayerNorm and a linear head (weights tied to the token embedding). Deterministic for a
    ``seed``. Defaults: 2 layers, d_model 64, 4 heads, context 32 (about 110k parameters for
    the sonnets' vocabulary)."""

    def __init__(self, vocab_size: int, d_model: int = 64, n_head: int = 4, n_layer: int = 2,
                 block_size: int = 32, seed: int = 0) -> None:  # fmt: skip
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.block_size = block_size
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
                elif name.endswith("bias"):
                    p.zero_()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.block_size:
            raise ValueError(f"sequence of {t} tokens; the context is {self.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the next-character predictions (computed in float32)."""
        logits = self(idx)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def sonnet_vocab_size() -> int:
    """The number of distinct characters in the shipped sonnets."""
    return len(char_dataset(seq_len=2)[2].chars)


def sonnet_batches(
    batch_size: int = 16, seq_len: int = 32, seed: int = 0, device: str | torch.device = "cpu"
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Endless ``(x, y)`` batches of next-character windows from the sonnets (int64 tensors of
    shape ``(batch_size, seq_len)``; y is x shifted by one character), drawn with a seeded
    generator (windows start every 3 characters)."""
    X, Y, _ = char_dataset(seq_len=seq_len, stride=3)
    rng = np.random.default_rng(seed)
    while True:
        idx = rng.integers(0, len(X), batch_size)
        yield (torch.from_numpy(X[idx]).to(device), torch.from_numpy(Y[idx]).to(device))
