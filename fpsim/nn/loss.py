"""Loss modules: ``MSELoss``, ``CrossEntropyLoss``, ``NLLLoss``, ``BCEWithLogitsLoss``,
``BCELoss``."""

from __future__ import annotations

from ..autograd import functional as F
from .module import Module

__all__ = ["MSELoss", "CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss", "BCELoss"]


class _Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)


class CrossEntropyLoss(_Loss):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100,
                 label_smoothing: float = 0.0) -> None:  # fmt: skip
        super().__init__(reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.reduction, self.ignore_index,
                               label_smoothing=self.label_smoothing)  # fmt: skip


class NLLLoss(_Loss):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.reduction, self.ignore_index)


class BCEWithLogitsLoss(_Loss):
    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.reduction)


class BCELoss(_Loss):
    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, self.reduction)


# `nn.utils.clip_grad_norm_`, PyTorch's path (a module of its own: it imports fpsim.optim).
