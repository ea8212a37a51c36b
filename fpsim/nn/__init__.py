"""Neural-network building blocks on the fpsim engine, shaped like ``torch.nn``.

==============  ==============================================================================
module          what
==============  ==============================================================================
module          ``Module`` (parameters, buffers, children, train/eval, state_dict,
                ``.to(fmt)``/``.half()``, forward hooks), ``Parameter``, ``Sequential``,
                ``ModuleList``
init            ``nn.init``: Kaiming / Xavier / uniform / normal with a seed or numpy Generator
layers          ``Linear``, ``Embedding``, ``Dropout``, activations, ``Identity``, ``Flatten``,
                the ``MLP`` helper
normalization   ``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``BatchNorm1d``, ``BatchNorm2d``
conv            ``Conv1d``, ``Conv2d``, ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d``
attention       ``MultiheadAttention`` (a documented subset)
loss            ``MSELoss``, ``CrossEntropyLoss``, ``NLLLoss``, ``BCEWithLogitsLoss``, ``BCELoss``
==============  ==============================================================================

``fpsim.nn.functional`` holds the ops as functions; ``fpsim.nn.utils.clip_grad_norm_`` is at
PyTorch's path. Parameter names, shapes and default initialisations are PyTorch's, so a
state dict moves between an fpsim model and its PyTorch twin.

>>> from fpsim import nn
>>> from fpsim.autograd import randn
>>> model = nn.MLP([2, 16, 16, 2], seed=0)
>>> model
MLP(
  (0): Linear(in_features=2, out_features=16, bias=True, format=fp32)
  (1): ReLU()
  (2): Linear(in_features=16, out_features=16, bias=True, format=fp32)
  (3): ReLU()
  (4): Linear(in_features=16, out_features=2, bias=True, format=fp32)
)
>>> model(randn(5, 2, generator=0)).shape
(5, 2)
>>> sum(p.numel() for p in model.parameters()), model.half()[0].weight.format.name
(354, 'fp16')
"""

from .. import nn_utils as utils  # ``nn.utils.clip_grad_norm_``, PyTorch's path
from ..autograd import functional
from . import init
from .attention import MultiheadAttention
from .conv import AdaptiveAvgPool2d, AvgPool2d, Conv1d, Conv2d, MaxPool2d
from .init import (  # noqa: F401  (also at fpsim.nn's top level, as before the split)
    calculate_gain,
    constant_,
    kaiming_normal_,
    kaiming_uniform_,
    normal_,
    ones_,
    uniform_,
    xavier_normal_,
    xavier_uniform_,
    zeros_,
)
from .layers import (
    GELU,
    MLP,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    Linear,
    ReLU,
    Sigmoid,
    SiLU,
    Softplus,
    Tanh,
)
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from .module import Module, ModuleList, Parameter, Sequential
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm

__all__ = [
    "Module",
    "Parameter",
    "Sequential",
    "ModuleList",
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
    "LayerNorm",
    "RMSNorm",
    "GroupNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "MaxPool2d",
    "AvgPool2d",
    "AdaptiveAvgPool2d",
    "MultiheadAttention",
    "MSELoss",
    "CrossEntropyLoss",
    "NLLLoss",
    "BCEWithLogitsLoss",
    "BCELoss",
    "init",
    "functional",
    "utils",
]
