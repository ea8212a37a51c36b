"""Layers: ``Linear``, ``Embedding``, ``Dropout``, the activations, ``Identity``,
``Flatten`` and the ``MLP`` helper."""

from __future__ import annotations

import math

import numpy as np

from ..autograd import functional as F
from ..autograd.generator import as_generator
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from ..formats import FormatLike
from .init import kaiming_normal_, kaiming_uniform_, normal_, uniform_, xavier_uniform_
from .module import Module, Parameter, Sequential

__all__ = [
    "Linear",
    "Embedding",
    "Dropout",
    "ReLU",
    "GELU",
    "SiLU",
    "Softplus",
    "Tanh",
    "Sigmoid",
    "Identity",
    "Flatten",
    "MLP",
]


class Linear(Module):
    """``y = x @ W.T + b`` with ``W: (out_features, in_features)``.

    ``init="torch"`` (default) is PyTorch's: W ~ U(+-1/sqrt(in)) (kaiming_uniform with a=sqrt 5)
    and b ~ U(+-1/sqrt(in)); ``"kaiming"`` (He normal, for ReLU nets) and ``"xavier"`` (Glorot
    uniform) are the alternatives, bias zero. ``seed``: an int or numpy Generator. ``acc``:
    the matmul accumulator for this layer (default: the global setting, fp32)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        format: FormatLike = "fp32",
        seed=None,
        init: str = "torch",
        acc=None,
    ):
        super().__init__()
        self.in_features, self.out_features, self.acc = in_features, out_features, acc
        g = as_generator(seed)
        self.weight = Parameter(np.zeros((out_features, in_features)), format)
        self.bias = Parameter(np.zeros(out_features), format) if bias else None
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0.0
        if init == "torch":
            kaiming_uniform_(self.weight, a=math.sqrt(5), generator=g)
            if self.bias is not None:
                uniform_(self.bias, -bound, bound, g)
        elif init == "kaiming":
            kaiming_normal_(self.weight, nonlinearity="relu", generator=g)
        elif init == "xavier":
            xavier_uniform_(self.weight, generator=g)
        else:
            raise ValueError(f"init must be 'torch', 'kaiming' or 'xavier', got {init!r}")

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias, acc=self.acc)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, format={self.weight.format.name}"
        )


class Embedding(Module):
    """A table of ``num_embeddings`` vectors; ``emb(indices)`` looks rows up. Init N(0, 1) (the
    row ``padding_idx``, if given, zero; it gets no gradient), as PyTorch."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        format: FormatLike = "fp32",
        seed=None,
        *,
        padding_idx: int | None = None,
    ):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(np.zeros((num_embeddings, embedding_dim)), format)
        normal_(self.weight, 0.0, 1.0, as_generator(seed))
        if padding_idx is not None:
            with no_grad():
                self.weight.data[padding_idx] = 0

    def forward(self, idx) -> Tensor:
        return F.embedding(idx, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, format={self.weight.format.name}"


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode; identity in eval mode. The
    masks come from the module's own generator (``seed``: int or Generator), or from the global
    generator (``fpsim.manual_seed``) when ``seed`` is None: reproducible either way."""

    def __init__(self, p: float = 0.5, seed=None) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.generator = None if seed is None else as_generator(seed)

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return "" if self.approximate == "none" else f"approximate={self.approximate!r}"


class SiLU(Module):
    def forward(self, x):
        return F.silu(x)


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class Identity(Module):
    def forward(self, x):
        return x


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


_ACTIVATIONS = {"relu": ReLU, "gelu": GELU, "silu": SiLU, "tanh": Tanh, "sigmoid": Sigmoid,
                "softplus": Softplus}  # fmt: skip


class MLP(Sequential):
    """``MLP([in, h1, ..., out])``: Linear layers with an activation between them (none after
    the last). ``activation``: a name (relu, gelu, silu, tanh, sigmoid) or a Module class.
    ``seed``: one int/Generator drawing every layer's initial weights in order."""

    def __init__(
        self,
        sizes,
        activation: str | type = "relu",
        seed=0,
        format: FormatLike = "fp32",
        bias: bool = True,
        init: str = "torch",
    ):
        if len(sizes) < 2:
            raise ValueError("MLP needs at least [in_features, out_features]")
        act = _ACTIVATIONS[activation] if isinstance(activation, str) else activation
        g = as_generator(seed) if seed is not None else None
        layers: list[Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            layers.append(Linear(a, b, bias=bias, format=format, seed=g, init=init))
            if i < len(sizes) - 2:
                layers.append(act())
        super().__init__(*layers)
