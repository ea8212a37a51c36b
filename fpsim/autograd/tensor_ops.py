"""``TensorOps``: the operators and op methods of :class:`~fpsim.autograd.tensor.Tensor`.

Each is one call of the op registered under PyTorch's name (``x + y`` runs
``registry["add"]``, ``x.sum(1)`` runs ``registry["sum"]``), looked up in the leaf module
:mod:`fpsim.autograd.registry`; so neither this module nor ``tensor.py`` imports the ops, which
build on ``Tensor``. ``Tensor`` inherits these methods; ``_wrap`` (a Python number as a weak
constant) is Tensor's. Also the index helpers the indexing ops share.
"""

from __future__ import annotations

import numpy as np

from .dims import wrap_dim, wrap_dims
from .registry import op

__all__ = ["TensorOps"]


class TensorOps:
    """The operators and op methods every :class:`~fpsim.autograd.tensor.Tensor` has."""

    __slots__ = ()

    # ---- arithmetic operators ----------------------------------------------------------------
    def __add__(self, other):
        return op("add").apply(self, self._wrap(other))

    def __radd__(self, other):
        return op("add").apply(self._wrap(other), self)

    def __sub__(self, other):
        return op("sub").apply(self, self._wrap(other))

    def __rsub__(self, other):
        return op("sub").apply(self._wrap(other), self)

    def __mul__(self, other):
        return op("mul").apply(self, self._wrap(other))

    def __rmul__(self, other):
        # ``2.0 * x`` is ``x.mul(2.0)`` in PyTorch: the number is the *second* operand, which
        # mul keeps at opmath precision (see Function.keeps_second_scalar)
        return op("mul").apply(self, self._wrap(other))

    def __truediv__(self, other):
        return op("div").apply(self, self._wrap(other))

    def __rtruediv__(self, other):
        # ``2.0 / x`` is ``x.reciprocal() * 2.0`` in PyTorch (two roundings), an op of its own
        o = self._wrap(other)
        if o._weak:
            return op("__rtruediv__").apply(self, o)
        return op("div").apply(o, self)

    def __pow__(self, other):
        return op("pow").apply(self, self._wrap(other))

    def __rpow__(self, other):
        return op("pow").apply(self._wrap(other), self)

    def __neg__(self):
        return op("neg").apply(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return op("abs").apply(self)

    def __matmul__(self, other):
        return op("matmul").apply(self, self._wrap(other))

    def __rmatmul__(self, other):
        return op("matmul").apply(self._wrap(other), self)

    # ---- methods mirroring the functional ops ------------------------------------------------
    def add(self, other):
        return self + other

    def sub(self, other):
        return self - other

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def neg(self):
        return -self

    def pow(self, exponent):
        return self**exponent

    def exp(self):
        return op("exp").apply(self)

    def log(self):
        return op("log").apply(self)

    def log1p(self):
        return op("log1p").apply(self)

    def expm1(self):
        return op("expm1").apply(self)

    def reciprocal(self):
        return op("reciprocal").apply(self)

    def sqrt(self):
        return op("sqrt").apply(self)

    def rsqrt(self):
        return op("rsqrt").apply(self)

    def abs(self):
        return op("abs").apply(self)

    def clamp(self, min: float | None = None, max: float | None = None):
        return op("clamp").apply(self, min, max)

    clip = clamp

    def relu(self):
        return op("relu").apply(self)

    def gelu(self, approximate: str = "none"):
        return op("gelu").apply(self, approximate)

    def silu(self):
        return op("silu").apply(self)

    def tanh(self):
        return op("tanh").apply(self)

    def sigmoid(self):
        return op("sigmoid").apply(self)

    def matmul(self, other):
        return self @ other

    def mm(self, other):
        return op("mm").apply(self, self._wrap(other))

    def sum(self, dim=None, keepdim: bool = False):
        return op("sum").apply(self, dim, keepdim)

    def mean(self, dim=None, keepdim: bool = False):
        return op("mean").apply(self, dim, keepdim)

    def var(
        self, dim=None, correction: int = 1, keepdim: bool = False, unbiased: bool | None = None
    ):
        if unbiased is not None:
            correction = int(unbiased)
        return op("var").apply(self, dim, correction, keepdim)

    def cumsum(self, dim: int):
        return op("cumsum").apply(self, dim)

    def maximum(self, other):
        return op("maximum").apply(self, self._wrap(other))

    def minimum(self, other):
        return op("minimum").apply(self, self._wrap(other))

    def masked_fill(self, mask, value):
        m = mask if isinstance(mask, TensorOps) else self._wrap(mask)
        return op("masked_fill").apply(self, m, self._wrap(value))

    def softmax(self, dim: int = -1):
        return op("softmax").apply(self, dim)

    def log_softmax(self, dim: int = -1):
        return op("log_softmax").apply(self, dim)

    def logsumexp(self, dim=-1, keepdim: bool = False):
        return op("logsumexp").apply(self, dim, keepdim)

    def reshape(self, *shape):
        return op("reshape").apply(self, _shape_arg(shape))

    def view(self, *shape):
        return op("view").apply(self, _shape_arg(shape))

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        s = self.shape
        a = wrap_dim(start_dim, len(s), arg="start_dim")
        b = wrap_dim(end_dim, len(s), arg="end_dim")
        if a > b:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        if not s:
            return self.reshape(1)
        return self.reshape(s[:a] + (int(np.prod(s[a : b + 1])),) + s[b + 1 :])

    def squeeze(self, dim: int | tuple | None = None):
        """Drop dimensions of size 1: all of them, or those of ``dim`` (an int or a tuple) that
        have size 1."""
        s = self.shape
        if dim is None:
            return self.reshape(tuple(n for n in s if n != 1))
        if isinstance(dim, (tuple, list)):
            dims = wrap_dims(dim, len(s))
        else:
            dims = (wrap_dim(dim, len(s)),)
        keep = tuple(n for i, n in enumerate(s) if n != 1 or i not in dims)
        return self.reshape(keep) if len(keep) != len(s) else self

    def unsqueeze(self, dim: int):
        s = self.shape
        d = wrap_dim(dim, len(s) + 1)  # the new dim may follow the last one
        return self.reshape(s[:d] + (1,) + s[d:])

    def split(self, split_size, dim: int = 0) -> tuple:
        """Pieces of ``split_size`` along ``dim`` (the last may be shorter), or of the sizes in
        a list; each a view (basic indexing), as ``torch.Tensor.split``."""
        d = wrap_dim(dim, self.ndim)
        n = self.shape[d]
        if isinstance(split_size, (list, tuple)):
            if sum(split_size) != n:
                raise RuntimeError(
                    f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's "
                    f"size at dimension {d}), but got split_sizes={list(split_size)}"
                )
            sizes = list(split_size)
        else:
            sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
        out, start = [], 0
        for k in sizes:
            out.append(self[(slice(None),) * d + (slice(start, start + k),)])
            start += k
        return tuple(out)

    def transpose(self, dim0: int, dim1: int):
        return op("transpose").apply(self, dim0, dim1)

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return op("permute").apply(self, dims)  # not _shape_arg: int() would accept 1.0 and "1"

    @property
    def T(self):
        return self if self.ndim < 2 else self.permute(*reversed(range(self.ndim)))

    def t(self):
        """The transpose of a matrix; a 0-d or 1-d tensor is its own (as PyTorch)."""
        if self.ndim > 2:
            raise RuntimeError(
                f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D"
            )
        return self if self.ndim < 2 else self.transpose(0, 1)

    def clone(self):
        return op("clone").apply(self)

    def __getitem__(self, idx):
        if isinstance(idx, TensorOps) and idx.format is None and idx.data.dtype != bool:
            return op("index").apply(self, idx)  # an argument: the op records its version
        return op("index").apply(self, _index(idx))


# ---- index helpers ---------------------------------------------------------------------------


def _shape_arg(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(int(s) for s in shape)


def _index(idx):
    """An index as numpy takes it: tensors and lists inside it become arrays -- copies, so that
    a later in-place change of an index cannot reach a backward that kept it -- and bool masks
    become integer indices."""
    if isinstance(idx, tuple):
        return tuple(_index(i) for i in idx)
    if isinstance(idx, TensorOps):
        idx = idx.data
    if isinstance(idx, (list, np.ndarray)):
        idx = np.array(idx)
    if isinstance(idx, np.ndarray) and idx.dtype == bool:
        return np.nonzero(idx) if idx.ndim > 1 else np.nonzero(idx)[0]
    return idx


def _is_basic(idx) -> bool:
    """An index made only of ints, slices, None and Ellipsis: numpy (and PyTorch) return a view."""
    items = idx if isinstance(idx, tuple) else (idx,)
    return all(i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer)) for i in items)
