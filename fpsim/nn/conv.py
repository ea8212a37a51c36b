"""Convolution and pooling layers: ``Conv1d``, ``Conv2d``, ``MaxPool2d``, ``AvgPool2d``,
``AdaptiveAvgPool2d``.

>>> import fpsim
>>> from fpsim import nn
>>> conv = nn.Conv2d(3, 8, 3, padding=1, seed=0)
>>> conv
Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), format=fp32)
>>> conv(fpsim.randn(2, 3, 5, 5, generator=0)).shape
(2, 8, 5, 5)
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd import functional as F
from ..autograd.generator import as_generator
from ..autograd.tensor import Tensor
from ..formats import FormatLike
from .init import kaiming_uniform_, uniform_
from .module import Module, Parameter

__all__ = ["Conv1d", "Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"]


def _tuple(v, n: int) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _ConvNd(Module):
    _n = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 format: FormatLike = "fp32", seed=None, acc=None):  # fmt: skip
        super().__init__()
        if padding_mode != "zeros":
            raise NotImplementedError("fpsim's convolutions pad with zeros only")
        if in_channels % groups or out_channels % groups:
            raise ValueError("in_channels and out_channels must be divisible by groups")
        n = self._n
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _tuple(kernel_size, n), _tuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        self.dilation, self.acc = _tuple(dilation, n), acc
        shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(np.zeros(shape), format)
        self.bias = Parameter(np.zeros(out_channels), format) if bias else None
        # PyTorch's reset_parameters: kaiming_uniform(a=sqrt 5), bias U(+-1/sqrt(fan_in))
        g = as_generator(seed)
        kaiming_uniform_(self.weight, a=math.sqrt(5), generator=g)
        if self.bias is not None:
            fan_in = (in_channels // groups) * int(np.prod(self.kernel_size))
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            uniform_(self.bias, -bound, bound, g)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")  # fmt: skip
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) \
                else f", padding={self.padding}"  # fmt: skip
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s + f", format={self.weight.format.name}"


class Conv2d(_ConvNd):
    """2-D convolution, as ``torch.nn.Conv2d`` (zero padding), plus ``format``, ``seed`` and
    ``acc`` (the accumulator, as Linear's)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups, acc=self.acc)  # fmt: skip


class Conv1d(_ConvNd):
    """1-D convolution, as ``torch.nn.Conv1d``."""

    _n = 1

    def forward(self, x: Tensor) -> Tensor:
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups, acc=self.acc)  # fmt: skip


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):  # fmt: skip
        super().__init__()
        if return_indices:
            raise NotImplementedError("MaxPool2d(return_indices=True) is not supported by fpsim")
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode)  # fmt: skip

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
                f"padding={self.padding}, dilation={self.dilation}, "
                f"ceil_mode={self.ceil_mode}")  # fmt: skip


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):  # fmt: skip
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)  # fmt: skip

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, "
                f"padding={self.padding}")  # fmt: skip


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
