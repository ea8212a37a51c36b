"""``nn.init``: fill parameters in place, as ``torch.nn.init`` (plus ``generator``: a seed or
a numpy Generator; default: the global generator, see ``fpsim.manual_seed``). Each counts one
version of the tensor (PyTorch's init functions are in-place ops).

>>> from fpsim import nn
>>> w = nn.Parameter(np.zeros((2, 3)))
>>> nn.init.ones_(w).tolist()
[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd.generator import as_generator
from ..autograd.grad_mode import no_grad
from ..autograd.precision import to_format
from ..autograd.tensor import Tensor

__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "zeros_",
    "ones_",
    "constant_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
]


def _fans(shape: tuple) -> tuple[int, int]:
    if len(shape) < 2:
        raise ValueError("fan in and fan out need at least 2 dimensions")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """PyTorch's recommended gains (relu: sqrt 2, tanh: 5/3, leaky_relu: sqrt(2/(1+a^2)))."""
    if nonlinearity in ("linear", "sigmoid", "identity"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        a = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + a * a))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"unsupported nonlinearity {nonlinearity}")


def _fill(t: Tensor, values: np.ndarray) -> Tensor:
    """Write float64 samples into ``t``, rounded once to its format (no graph)."""
    with no_grad():
        t.data[...] = to_format(values, t.format)
    t._bump_version()  # PyTorch's init functions are in-place ops (uniform_, normal_, ...)
    return t


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    return _fill(t, as_generator(generator).uniform(a, b, t.shape))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    return _fill(t, as_generator(generator).normal(mean, std, t.shape))


def zeros_(t: Tensor) -> Tensor:
    return _fill(t, np.zeros(t.shape))


def constant_(t: Tensor, val: float) -> Tensor:
    return _fill(t, np.full(t.shape, float(val)))


def ones_(t: Tensor) -> Tensor:
    return _fill(t, np.ones(t.shape))


def kaiming_uniform_(
    t, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
) -> Tensor:
    """U(-bound, bound), ``bound = gain * sqrt(3 / fan)`` (He et al. 2015)."""
    fan = _fans(t.shape)[0 if mode == "fan_in" else 1]
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(
    t, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
) -> Tensor:
    """N(0, std^2), ``std = gain / sqrt(fan)``."""
    fan = _fans(t.shape)[0 if mode == "fan_in" else 1]
    return normal_(t, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def xavier_uniform_(t, gain: float = 1.0, generator=None) -> Tensor:
    """U(-a, a), ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio 2010)."""
    fan_in, fan_out = _fans(t.shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a, generator)


def xavier_normal_(t, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _fans(t.shape)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)
