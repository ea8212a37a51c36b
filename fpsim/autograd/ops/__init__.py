"""Every op of the engine, as a :class:`~fpsim.autograd.function.Function` subclass, one module
per concept:

================  =====================================================================
module            ops
================  =====================================================================
elementwise       add, sub, mul, div, __rtruediv__, neg, pow, exp, log, log1p, expm1,
                  reciprocal, sqrt, rsqrt, abs, clamp, maximum, minimum, where, masked_fill
activations       relu, gelu (erf and tanh), silu, tanh, sigmoid, softplus, dropout
matmul            matmul, mm, bmm, baddbmm, linear, einsum
reductions        sum, mean, max (and min), var, cumsum, softmax, log_softmax, logsumexp
normalization     layer_norm, rms_norm, group_norm, batch_norm
convolution       conv2d, conv1d
pooling           max_pool2d, avg_pool2d, adaptive_avg_pool2d
attention         scaled_dot_product_attention
shape             reshape, view, transpose, permute, clone, index, cat, stack, embedding,
                  cast, and the in-place writes fill_, zero_, copy_, index_put_
losses            mse_loss, cross_entropy, nll_loss, binary_cross_entropy(_with_logits)
================  =====================================================================

Each op is registered under its ``name`` in :data:`fpsim.autograd.registry`. Forward and
backward are plain numpy formulas; the rounding to the op's format is done by
``Function.apply`` (``"math"`` ops) or inside the op (``"stored"`` ops: those that only move
values, and the matmul-like ops, which round through ``precision._matmul_values``). Ops whose
backward needs the forward *result* read the stored (rounded) result ``ctx.out``, as PyTorch
does: exp, expm1, reciprocal, sqrt, rsqrt, tanh, sigmoid, pow (exponent gradient), softmax,
log_softmax, logsumexp. The others differentiate at the stored inputs.
"""

from .activations import GELU, Dropout, ReLU, Sigmoid, SiLU, Softplus, Tanh
from .attention import ScaledDotProductAttention
from .convolution import Conv1d, Conv2d
from .elementwise import (
    Abs,
    Add,
    Clamp,
    Div,
    Exp,
    Expm1,
    Log,
    Log1p,
    MaskedFill,
    Maximum,
    Minimum,
    Mul,
    Neg,
    Pow,
    RDiv,
    Reciprocal,
    Rsqrt,
    Sqrt,
    Sub,
    Where,
)
from .losses import BCE, BCEWithLogits, CrossEntropy, MSELoss, NLLLoss
from .matmul import BMM, MM, BAddBMM, Einsum, Linear, MatMul, parse_einsum
from .normalization import BatchNorm, GroupNorm, LayerNorm, RMSNorm
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .reductions import Cumsum, LogSoftmax, LogSumExp, Max, Mean, Softmax, Sum, Var
from .shape import (
    Cast,
    Cat,
    Clone,
    Copy,
    Embedding,
    Fill,
    Index,
    IndexPut,
    Permute,
    Reshape,
    Stack,
    Transpose,
    View,
    Zero,
    _check_embedding_indices,
)

__all__ = [
    "Add", "Sub", "Mul", "Div", "RDiv", "Neg", "Pow", "Exp", "Log", "Log1p", "Expm1",
    "Reciprocal", "Sqrt", "Rsqrt", "Abs", "Clamp", "Maximum", "Minimum", "Where", "MaskedFill",
    "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softplus", "Dropout",
    "MatMul", "MM", "BMM", "BAddBMM", "Linear", "Einsum", "parse_einsum",
    "Sum", "Mean", "Max", "Var", "Cumsum", "Softmax", "LogSoftmax", "LogSumExp",
    "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm",
    "Conv2d", "Conv1d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "ScaledDotProductAttention",
    "Reshape", "View", "Transpose", "Permute", "Clone", "Index", "Cat", "Stack", "Embedding",
    "Cast", "Fill", "Zero", "Copy", "IndexPut",
    "MSELoss", "CrossEntropy", "NLLLoss", "BCEWithLogits", "BCE",
    "_check_embedding_indices",
]  # fmt: skip
