"""Normalisation layers: ``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``BatchNorm1d``,
``BatchNorm2d`` (weights ones, biases zeros, as PyTorch)."""

from __future__ import annotations

import numpy as np

from ..autograd import functional as F
from ..autograd.tensor import Tensor, tensor
from ..formats import FormatLike
from .module import Module, Parameter

__all__ = ["LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d"]


def _shape(normalized_shape) -> tuple:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def _affine(m: Module, shape: tuple, affine: bool, bias: bool, format: FormatLike) -> None:
    """PyTorch's affine parameters of a norm layer: ``weight`` ones, ``bias`` zeros (or None)."""
    m.weight = Parameter(np.ones(shape), format) if affine else None
    m.bias = Parameter(np.zeros(shape), format) if affine and bias else None


class LayerNorm(Module):
    """Normalise over the last dims, then scale (weight, ones) and shift (bias, zeros)."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        format: FormatLike = "fp32",
    ):
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        _affine(self, self.normalized_shape, elementwise_affine, True, format)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dims (weight ones). ``eps=None``:
    the machine epsilon of the input's opmath type, as ``torch.nn.RMSNorm``."""

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        format: FormatLike = "fp32",
    ):
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        _affine(self, self.normalized_shape, elementwise_affine, False, format)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class GroupNorm(Module):
    """Normalise groups of ``num_channels // num_groups`` channels of (N, C, *) inputs."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, format: FormatLike = "fp32"):  # fmt: skip
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        _affine(self, (num_channels,), affine, True, format)

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}"


class _BatchNorm(Module):
    """Batch normalisation with running statistics, as ``torch.nn.BatchNorm*d``: buffers
    ``running_mean`` (zeros), ``running_var`` (ones) and ``num_batches_tracked`` (an int64
    counter); in training mode the batch statistics normalise and update the running ones
    (``momentum=None``: a cumulative average); in eval mode the running ones normalise."""

    _dims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 format: FormatLike = "fp32"):  # fmt: skip
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _affine(self, (num_features,), affine, True, format)
        if track_running_stats:
            self.register_buffer("running_mean", tensor(np.zeros(num_features), format))
            self.register_buffer("running_var", tensor(np.ones(num_features), format))
            self.register_buffer("num_batches_tracked", tensor(0))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._dims:
            want = " or ".join(f"{d}D" for d in self._dims)
            raise ValueError(f"expected {want} input (got {x.ndim}D input)")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.data[...] += 1
            self.num_batches_tracked._bump_version()
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(
            x,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L) inputs."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W) inputs."""

    _dims = (4,)
