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

import numpy as np

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
    "log1p",
    "expm1",
    "reciprocal",
    "sqrt",
    "rsqrt",
    "abs",
    "clamp",
    "maximum",
    "minimum",
    "relu",
    "gelu",
    "silu",
    "tanh",
    "sigmoid",
    "softplus",
    "matmul",
    "mm",
    "bmm",
    "baddbmm",
    "einsum",
    "linear",
    "conv1d",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "scaled_dot_product_attention",
    "sum",
    "mean",
    "max",
    "var",
    "cumsum",
    "softmax",
    "log_softmax",
    "logsumexp",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "batch_norm",
    "embedding",
    "dropout",
    "reshape",
    "transpose",
    "cat",
    "stack",
    "where",
    "masked_fill",
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


def log1p(x):
    return ops.Log1p.apply(x)


def expm1(x):
    return ops.Expm1.apply(x)


def reciprocal(x):
    return ops.Reciprocal.apply(x)


def sqrt(x):
    return ops.Sqrt.apply(x)


def rsqrt(x):
    return ops.Rsqrt.apply(x)


def abs(x):  # noqa: A001
    return ops.Abs.apply(x)


def clamp(x, min=None, max=None):  # noqa: A002
    return ops.Clamp.apply(x, min, max)


def maximum(a, b):
    """Elementwise larger value (NaN if either is NaN); a tie splits the gradient evenly."""
    return ops.Maximum.apply(*_pair(a, b))


def minimum(a, b):
    return ops.Minimum.apply(*_pair(a, b))


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


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` where ``beta * x > threshold``."""
    return ops.Softplus.apply(x, beta, threshold)


def matmul(a, b, *, acc=None):
    """``a @ b``; ``acc`` overrides the accumulator (default: ``matmul_accumulation``)."""
    return ops.MatMul.apply(a, b, acc=acc)


def mm(a, b, *, acc=None):
    return ops.MM.apply(a, b, acc=acc)


def bmm(a, b, *, acc=None):
    """Batches of matrix products: ``(b, n, m) @ (b, m, p)``."""
    return ops.BMM.apply(a, b, acc=acc)


def baddbmm(input, batch1, batch2, *, beta: float = 1.0, alpha: float = 1.0, acc=None):
    """``beta * input + alpha * (batch1 @ batch2)``, accumulated and rounded once."""
    return ops.BAddBMM.apply(input, batch1, batch2, beta, alpha, acc=acc)


def einsum(equation: str, *operands, acc=None):
    """Einstein summation, as ``torch.einsum``: ``einsum("bhqd,bhkd->bhqk", q, k)``.

    Operands are contracted pairwise from the left (PyTorch's order without opt_einsum); each
    pair is one batched matrix product through the accumulator model, rounded to the format.
    ``...`` broadcasts; labels repeated within one operand (diagonals) are not supported.

    >>> a = tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> einsum("ij,jk->ik", a, a).tolist(), einsum("ij->", a).item()
    ([[7.0, 10.0], [15.0, 22.0]], 10.0)
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum(): must provide at least one operand")
    terms, out = ops.parse_einsum(equation, tuple(np.ndim(o.data) for o in operands))
    if len(operands) == 1:
        return ops.Einsum.apply(operands[0], equation=f"{terms[0]}->{out}", acc=acc)
    res, lres = operands[0], terms[0]
    for i in range(1, len(operands)):
        later = "".join(terms[i + 1 :]) + out
        lnext = "".join(dict.fromkeys(c for c in lres + terms[i] if c in later))
        if i == len(operands) - 1:
            lnext = out
        res = ops.Einsum.apply(res, operands[i], equation=f"{lres},{terms[i]}->{lnext}", acc=acc)
        lres = lnext
    return res


def linear(input, weight, bias=None, *, acc=None):
    """``input @ weight.T + bias`` (weight ``(out_features, in_features)``), one rounding."""
    return ops.Linear.apply(input, weight, bias, acc=acc)


def _batched(x: Tensor, spatial: int, op: str):
    """``(x with a batch dim, whether one was added)``: PyTorch's conv and pool functions take
    an unbatched input with one dim fewer."""
    if x.ndim == spatial + 1:
        return x.unsqueeze(0), True
    if x.ndim != spatial + 2:
        raise RuntimeError(
            f"{op}: Expected {spatial + 1}D (unbatched) or {spatial + 2}D (batched) input, but "
            f"got input of size: {list(x.shape)}"
        )
    return x, False


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1, *,
           acc=None):  # fmt: skip
    """2-D convolution (cross-correlation, as PyTorch): input (N, C, H, W) or (C, H, W), weight
    (O, C/groups, kh, kw). ``padding``: int, pair, ``"valid"`` or ``"same"``."""
    x, added = _batched(input, 2, "conv2d")
    out = ops.Conv2d.apply(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                           groups=groups, acc=acc)  # fmt: skip
    return out.reshape(out.shape[1:]) if added else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1, *,
           acc=None):  # fmt: skip
    """1-D convolution: input (N, C, L) or (C, L), weight (O, C/groups, k)."""
    x, added = _batched(input, 1, "conv1d")
    out = ops.Conv1d.apply(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                           groups=groups, acc=acc)  # fmt: skip
    return out.reshape(out.shape[1:]) if added else out


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):  # fmt: skip
    """Largest value of each window (see :class:`fpsim.autograd.ops.MaxPool2d`)."""
    if return_indices:
        raise NotImplementedError("max_pool2d(return_indices=True) is not supported by fpsim")
    x, added = _batched(input, 2, "max_pool2d")
    out = ops.MaxPool2d.apply(x, kernel_size, stride, padding, dilation, ceil_mode)
    return out.reshape(out.shape[1:]) if added else out


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None):  # fmt: skip
    """Mean of each window (see :class:`fpsim.autograd.ops.AvgPool2d`)."""
    x, added = _batched(input, 2, "avg_pool2d")
    out = ops.AvgPool2d.apply(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override)  # fmt: skip
    return out.reshape(out.shape[1:]) if added else out


def adaptive_avg_pool2d(input, output_size):
    """Mean over PyTorch's adaptive windows, to an output of ``output_size``."""
    x, added = _batched(input, 2, "adaptive_avg_pool2d")
    out = ops.AdaptiveAvgPool2d.apply(x, output_size)
    return out.reshape(out.shape[1:]) if added else out


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False,
                                 *, generator=None):  # fmt: skip
    """``softmax(q @ k^T * scale + mask) @ v``, fused (see
    :class:`fpsim.autograd.ops.ScaledDotProductAttention`). ``attn_mask``: bool (True takes
    part) or float (added); ``generator`` draws the dropout mask."""
    if enable_gqa:
        raise NotImplementedError("scaled_dot_product_attention(enable_gqa=True) is not supported")
    args = (query, key, value) if attn_mask is None else (query, key, value, _t(attn_mask))
    return ops.ScaledDotProductAttention.apply(
        *args, dropout_p=dropout_p, is_causal=is_causal, scale=scale, generator=generator
    )


def sum(x, dim=None, keepdim: bool = False):  # noqa: A001
    return ops.Sum.apply(x, dim, keepdim)


def mean(x, dim=None, keepdim: bool = False):
    return ops.Mean.apply(x, dim, keepdim)


def max(x, dim=None, keepdim: bool = False):  # noqa: A001
    return x.max(dim, keepdim)


def var(x, dim=None, correction: int = 1, keepdim: bool = False):
    return ops.Var.apply(x, dim, correction, keepdim)


def cumsum(x, dim: int):
    """Running sum along ``dim`` (PyTorch's accumulator: float32 for 16-bit formats, float64
    for fp32 and fp64; each output rounded once)."""
    return ops.Cumsum.apply(x, dim)


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


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dims; ``eps=None``: the machine
    epsilon of the input's opmath type (float32's for fp16/bf16/fp32), as PyTorch. The result
    has the input's format."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    if eps is None:
        wide = input.format is not None and input.data.dtype == np.float64
        eps = float(np.finfo(np.float64 if wide else np.float32).eps)
    return ops.RMSNorm.apply(input, tuple(normalized_shape), weight, eps)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalise each group of ``C // num_groups`` channels of each sample; per-channel affine."""
    return ops.GroupNorm.apply(input, num_groups, weight, bias, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):  # fmt: skip
    """Per-channel normalisation of (N, C, *) by batch statistics (``training``, which also
    updates ``running_mean``/``running_var`` in place when given) or by the running ones."""
    return ops.BatchNorm.apply(input, weight, bias, running_mean=running_mean,
                               running_var=running_var, training=training, momentum=momentum,
                               eps=eps)  # fmt: skip


def embedding(input, weight, padding_idx=None):
    """Rows ``weight[input]`` (``input``: integer tensor or array). Float or bool indices, and
    indices outside ``[0, num_embeddings)``, raise as in PyTorch (no wrap-around). The row
    ``padding_idx`` (negative: counted from the end) gets no gradient."""
    if isinstance(input, Tensor) and input.format is not None:
        # refused here, naming the format, before promotion would mix it with weight's
        ops._check_embedding_indices(input.data, weight.shape[0], kind=input.format.name)
    if padding_idx is not None:
        n = weight.shape[0]
        if not -n <= padding_idx < n:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx = padding_idx % n
    return ops.Embedding.apply(input, weight, padding_idx)


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


def masked_fill(input, mask, value):
    """``value`` (a number or 0-dim tensor, rounded to input's format) where ``mask`` is true."""
    return ops.MaskedFill.apply(input, _t(mask), _t(value, input))


def mse_loss(input, target, reduction: str = "mean"):
    return ops.MSELoss.apply(input, _t(target, input), reduction)


def cross_entropy(input, target, reduction: str = "mean", ignore_index: int = -100, *,
                  label_smoothing: float = 0.0):  # fmt: skip
    """From logits ``(N, C)``, ``(C,)`` or ``(N, C, d1, ...)`` and integer class targets
    (``(N,)``, ``()`` or ``(N, d1, ...)``); ``label_smoothing`` as PyTorch's."""
    if input.ndim > 2:  # classes last, then one row per position (as PyTorch's nll_loss2d)
        c = input.shape[1]
        perm = (0,) + tuple(range(2, input.ndim)) + (1,)
        flat = input.permute(perm).reshape(-1, c)
        t = target.data if isinstance(target, Tensor) else np.asarray(target)
        if t.shape != (input.shape[0],) + input.shape[2:]:
            want = [input.shape[0], *input.shape[2:]]
            raise ValueError(f"Expected target size {want}, got {list(t.shape)}")
        out = ops.CrossEntropy.apply(flat, tensor(t.reshape(-1)), reduction, ignore_index,
                                     label_smoothing)  # fmt: skip
        return out.reshape(t.shape) if reduction == "none" else out
    return ops.CrossEntropy.apply(input, target, reduction, ignore_index, label_smoothing)


def nll_loss(input, target, reduction: str = "mean", ignore_index: int = -100):
    return ops.NLLLoss.apply(input, target, reduction, ignore_index)


def binary_cross_entropy_with_logits(input, target, reduction: str = "mean"):
    return ops.BCEWithLogits.apply(input, _t(target, input), reduction)


def binary_cross_entropy(input, target, reduction: str = "mean"):
    return ops.BCE.apply(input, _t(target, input), reduction)
