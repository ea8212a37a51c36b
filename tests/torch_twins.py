"""PyTorch twins of ``fpsim.models`` (written here, independently, in plain torch.nn): the same
structure and parameter names, so ``twin.load_state_dict(state_of(fpsim_model))`` gives both
the same weights. Used by tests/test_models.py and benchmarks/bench_train.py."""

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for y in self.qkv(x).split(c, dim=2))  # fmt: skip
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, norm):
        super().__init__()
        Norm = nn.LayerNorm if norm == "layer" else nn.RMSNorm
        self.norm1 = Norm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.norm2 = Norm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.fc_proj = nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.drop(self.fc_proj(self.gelu(self.fc(self.norm2(x)))))


class CharGPT(nn.Module):
    def __init__(self, vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=32, norm="layer"):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(0.0)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, norm) for _ in range(n_layer))
        self.norm_f = nn.LayerNorm(n_embd) if norm == "layer" else nn.RMSNorm(n_embd)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(t)))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm_f(x), self.tok_emb.weight)  # tied output layer


class SmallCNN(nn.Module):
    def __init__(self, in_channels=1, num_classes=4, widths=(8, 16), image_size=16):
        super().__init__()
        w1, w2 = widths
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w1, 3, padding=1, bias=False), nn.BatchNorm2d(w1), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(w1, w2, 3, padding=1, bias=False), nn.BatchNorm2d(w2), nn.ReLU(),
            nn.MaxPool2d(2),
        )  # fmt: skip
        self.head = nn.Linear(w2 * (image_size // 4) ** 2, num_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def twin_of(model):
    """The torch twin of an ``fpsim.models`` model, with its weights and buffers."""
    from fpsim import models

    if isinstance(model, models.CharGPT):
        blocks = model.blocks
        first = blocks[0]
        twin = CharGPT(model.vocab_size, model.block_size, len(blocks), first.attn.n_head,
                       model.tok_emb.embedding_dim,
                       "layer" if type(first.norm1).__name__ == "LayerNorm" else "rms")  # fmt: skip
    elif isinstance(model, models.SmallCNN):
        convs = [m for m in model.features if type(m).__name__ == "Conv2d"]
        size = int(np.sqrt(model.head.in_features / convs[1].out_channels)) * 4
        twin = SmallCNN(convs[0].in_channels, model.head.out_features,
                        (convs[0].out_channels, convs[1].out_channels), size)  # fmt: skip
    else:
        raise TypeError(f"no twin for {type(model).__name__}")
    state = {k: torch.from_numpy(np.array(v.data)) for k, v in model.state_dict().items()}
    twin.load_state_dict(state)
    return twin
