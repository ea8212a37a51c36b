"""``fpsim.nn.utils``: :func:`clip_grad_norm_` under PyTorch's path ``torch.nn.utils``.

The implementation is :func:`fpsim.optim.clip_grad_norm_` (each gradient's norm in its own
format, the total in the promoted format, ``coef = min(max_norm / (total + 1e-6), 1)``, every
gradient multiplied by it, even by 1); this adds PyTorch's signature (``foreach`` accepted and
ignored: fpsim has one implementation) and its warning for an empty generator.

>>> import numpy as np
>>> from fpsim import nn, tensor
>>> w = nn.Parameter(np.zeros(2))
>>> w.grad = tensor([3.0, 4.0])
>>> total = nn.utils.clip_grad_norm_([w], max_norm=1.0)
>>> total.item(), total.format.name       # the norm before clipping, an fp32 0-dim Tensor
(5.0, 'fp32')
>>> w.grad.tolist()                         # 3 and 4 times fp32(1 / (5 + 1e-6)), as torch
[0.5999999046325684, 0.7999998331069946]
"""

from __future__ import annotations

import sys
import types
import warnings

from .autograd.tensor import Tensor
from .optim import clip_grad_norm_ as _clip_grad_norm_

__all__ = ["clip_grad_norm_"]


def clip_grad_norm_(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Scale the gradients of ``parameters`` in place so that their total ``norm_type``-norm
    is at most ``max_norm``; return the total norm (before clipping) as a 0-dim Tensor.
    ``error_if_nonfinite=True``: raise RuntimeError when that norm is inf or NaN.
    ``foreach``: ignored. As ``torch.nn.utils.clip_grad_norm_``."""
    if isinstance(parameters, types.GeneratorType):
        parameters = list(parameters)  # as PyTorch: warn instead of silently doing nothing
        if not parameters:
            warnings.warn(
                "`parameters` is an empty generator, no gradient clipping will occur.",
                stacklevel=2,
            )
    return _clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite)


# `from fpsim.nn.utils import clip_grad_norm_` works as with torch although this module lives
# outside the fpsim.nn package (it imports fpsim.optim; the way os.path is registered).
sys.modules.setdefault("fpsim.nn.utils", sys.modules[__name__])
