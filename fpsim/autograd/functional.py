"""The ops as functions, with PyTorch's names and signatures (``torch`` / ``torch.nn.functional``).

Also reachable as ``fpsim.nn.functional``.

>>> from fpsim.autograd import tensor
>>> from fpsim.nn import functional as F
>>> x = tensor([[2.0, 0.5, -1.0]], requires_grad=True)
>>> loss = F.cross_entropy(x, tensor([0]))
>>> round(loss.item(), 6)
0.241311
>>> loss.backward(); x.grad.format.name
'fp32'
"""

from __future__ import annotations

from typing import Any

from . import ops
from .tensor import Tensor, _constant, tensor

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "pow",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "abs",
    "clamp",
    "relu",
    "gelu",
    "silu",
    "tanh",
    "sigmoid",
    "matmul",
    "mm",
    "linear",
    "sum",
    "mean",
    "max",
    "var",
    "softmax",
    "log_softmax",
    "logsumexp",
    "layer_norm",
    "embedding",
    "dropout",
    "reshape",
    "transpose",
    "cat",
    "stack",
    "where",
    "mse_loss",
    "cross_entropy",
    "nll_loss",
    "binary_cross_entropy_with_logits",
    "binary_cross_entropy",
]


def _t(x: Any, like: Tensor | None = None) -> Tensor:
    """A Tensor operand: tensors pass; Python numbers are weak constants; arrays -> tensor()."""
    if isinstance(x, Tensor):
        return x
    if like is not None:
        return _constant(x, like)
    return tensor(x)


def _pair(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    if isinstance(a, Tensor):
        return a, _t(b, a)
    if isinstance(b, Tensor):
        return _t(a, b), b
    return tensor(a), tensor(b)


def add(a, b):
    return ops.Add.apply(*_pair(a, b))


def sub(a, b):
    return ops.Sub.apply(*_pair(a, b))


def mul(a, b):
    return ops.Mul.apply(*_pair(a, b))


def div(a, b):
    return ops.Div.apply(*_pair(a, b))


def neg(x):
    return ops.Neg.apply(x)


def pow(a, exponent):  # noqa: A001 - PyTorch's name
    return ops.Pow.apply(*_pair(a, exponent))


def exp(x):
    return ops.Exp.apply(x)


def log(x):
    return ops.Log.apply(x)


def sqrt(x):
    return ops.Sqrt.apply(x)


def rsqrt(x):
    return ops.Rsqrt.apply(x)


def abs(x):  # noqa: A001
    return ops.Abs.apply(x)


def clamp(x, min=None, max=None):  # noqa: A002
    return ops.Clamp.apply(x, min, max)


def relu(x):
    return ops.ReLU.apply(x)


def gelu(x, approximate: str = "none"):
    return ops.GELU.apply(x, approximate)


def silu(x):
    return ops.SiLU.apply(x)


def tanh(x):
    return ops.Tanh.apply(x)


def sigmoid(x):
    return ops.Sigmoid.apply(x)


def matmul(a, b, *, acc=None):
    """``a @ b``; ``acc`` overrides the accumulator (default: ``matmul_accumulation``)."""
    return ops.MatMul.apply(a, b, acc=acc)


def mm(a, b, *, acc=None):
    return ops.MM.apply(a, b, acc=acc)


def linear(input, weight, bias=None, *, acc=None):
    """``input @ weight.T + bias`` (weight ``(out_features, in_features)``), one rounding."""
    return ops.Linear.apply(input, weight, bias, acc=acc)


def sum(x, dim=None, keepdim: bool = False):  # noqa: A001
    return ops.Sum.apply(x, dim, keepdim)


def mean(x, dim=None, keepdim: bool = False):
    return ops.Mean.apply(x, dim, keepdim)


def max(x, dim=None, keepdim: bool = False):  # noqa: A001
    return x.max(dim, keepdim)


def var(x, dim=None, correction: int = 1, keepdim: bool = False):
    return ops.Var.apply(x, dim, correction, keepdim)


def softmax(x, dim: int = -1):
    return ops.Softmax.apply(x, dim)


def log_softmax(x, dim: int = -1):
    return ops.LogSoftmax.apply(x, dim)


def logsumexp(x, dim=-1, keepdim: bool = False):
    return ops.LogSumExp.apply(x, dim, keepdim)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return ops.LayerNorm.apply(input, tuple(normalized_shape), weight, bias, eps)


def embedding(input, weight):
    """Rows ``weight[input]`` (``input``: integer tensor or array). Float or bool indices, and
    indices outside ``[0, num_embeddings)``, raise as in PyTorch (no wrap-around)."""
    if isinstance(input, Tensor) and input.format is not None:
        # refused here, naming the format, before promotion would mix it with weight's
        ops._check_embedding_indices(input.data, weight.shape[0], kind=input.format.name)
    return ops.Embedding.apply(input, weight)


def dropout(x, p: float = 0.5, training: bool = True, generator=None):
    """Identity unless ``training`` and ``p > 0``; the mask comes from ``generator`` (a numpy
    Generator or seed; default: the global one, see ``fpsim.manual_seed``)."""
    if not training or p == 0:
        return x
    return ops.Dropout.apply(x, p, generator)


def reshape(x, shape):
    return x.reshape(shape)


def transpose(x, dim0: int, dim1: int):
    return ops.Transpose.apply(x, dim0, dim1)


def cat(tensors, dim: int = 0):
    """Concatenate along ``dim``; mixed formats promote."""
    return ops.Cat.apply(*[_t(x) for x in tensors], dim=dim)


def stack(tensors, dim: int = 0):
    return ops.Stack.apply(*[_t(x) for x in tensors], dim=dim)


def where(condition, a, b):
    """``a`` where ``condition`` holds, else ``b`` (Python numbers are weak constants)."""
    a, b = _pair(a, b)
    return ops.Where.apply(condition, a, b)


def mse_loss(input, target, reduction: str = "mean"):
    return ops.MSELoss.apply(input, _t(target, input), reduction)


def cross_entropy(input, target, reduction: str = "mean", ignore_index: int = -100):
    """From logits ``(N, C)`` (or ``(C,)``) and integer class targets."""
    return ops.CrossEntropy.apply(input, target, reduction, ignore_index)


def nll_loss(input, target, reduction: str = "mean", ignore_index: int = -100):
    return ops.NLLLoss.apply(input, target, reduction, ignore_index)


def binary_cross_entropy_with_logits(input, target, reduction: str = "mean"):
    return ops.BCEWithLogits.apply(input, _t(target, input), reduction)


def binary_cross_entropy(input, target, reduction: str = "mean"):
    return ops.BCE.apply(input, _t(target, input), reduction)
