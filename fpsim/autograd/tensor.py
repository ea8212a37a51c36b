"""``Tensor``: a numpy array of values plus the ``Format`` they are values of.

>>> import fpsim
>>> from fpsim.autograd import tensor
>>> x = tensor([1.0, 2.0, 0.1], format="fp16", requires_grad=True)
>>> x
tensor([1.        , 2.        , 0.09997559], format=fp16, requires_grad=True)
>>> x.dtype is fpsim.fp16, x.data.dtype
(True, dtype('float32'))
>>> y = (x * 3).sum()
>>> y.backward()
>>> x.grad
tensor([3., 3., 3.], format=fp16)
"""

from __future__ import annotations

import numbers
from collections import namedtuple
from typing import Any

import numpy as np

from ..formats import Format, FormatLike, bf16, fp16, fp32, fp64, get_format
from . import function as _function
from .dims import wrap_dim, wrap_dims
from .grad_mode import is_grad_enabled
from .hooks import RemovableHandle
from .precision import _info, to_format

__all__ = [
    "Tensor",
    "tensor",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "rand",
    "randn",
    "arange",
    "manual_seed",
    "default_generator",
]

MaxResult = namedtuple("MaxResult", ["values", "indices"])

_default_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> np.random.Generator:
    """Re-seed the default generator (used by ``randn``/``rand``/dropout/initialisation when no
    generator is given). fpsim starts seeded with 0, so runs are reproducible by default."""
    global _default_rng
    _default_rng = np.random.default_rng(seed)
    return _default_rng


def default_generator() -> np.random.Generator:
    """The generator used where none is passed (see :func:`manual_seed`)."""
    return _default_rng


def as_generator(generator: Any = None) -> np.random.Generator:
    """``None`` -> the default generator; an int -> a fresh ``default_rng(seed)``; a Generator
    -> itself."""
    if generator is None:
        return _default_rng
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, numbers.Integral):
        return np.random.default_rng(int(generator))
    raise TypeError(f"expected a seed or a numpy Generator, got {generator!r}")


def _resolve_format(fmt: Any) -> Format | None:
    """A float Format, or None for integer/bool tensors (``"int64"``, ``"bool"``, numpy ints)."""
    if fmt is None or isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str) and fmt in ("int", "int64", "long", "int32", "bool"):
        return None
    if isinstance(fmt, (type, np.dtype)) and np.dtype(fmt).kind in "iub":
        return None
    return get_format(fmt)


class Tensor:
    """An array of values of one number format, with reverse-mode gradient support.

    ``data`` (numpy) holds the values in the format's container (float32 for every format that
    fits, float64 otherwise; int64/bool for integer tensors, whose ``format`` is None); every
    element is exactly representable in ``format``. Build tensors with :func:`fpsim.tensor`.
    """

    __slots__ = (
        "data",
        "format",
        "requires_grad",
        "grad",
        "_ctx",
        "_hooks",
        "_weak",
        "_vc",
        "_view",
        "__weakref__",
    )
    __array_ufunc__ = None  # numpy defers to our reflected operators (ndarray + Tensor)
    __hash__ = object.__hash__  # identity, although == is elementwise (as in PyTorch)

    def __init__(self, data: Any, format: FormatLike | None = None, requires_grad: bool = False):
        t = tensor(data, format=format, requires_grad=requires_grad)
        self.data, self.format = t.data, t.format
        self.requires_grad = t.requires_grad
        self.grad = None
        self._ctx = None
        self._hooks = None
        self._weak = False
        self._vc = None
        self._view = None

    @classmethod
    def _make(cls, data: np.ndarray, fmt: Format | None, requires_grad: bool = False) -> Tensor:
        """Wrap an array that already holds values of ``fmt`` (no rounding, no copy)."""
        t = object.__new__(cls)
        t.data = data
        t.format = fmt
        t.requires_grad = requires_grad
        t.grad = None
        t._ctx = None
        t._hooks = None
        t._weak = False
        t._vc = None  # the version counter, made on first use (see _version)
        t._view = None  # (base tensor, the base's node then) for a view of another tensor
        return t

    # ---- basic properties --------------------------------------------------------------------
    @property
    def dtype(self) -> Format | np.dtype:
        """The Format (``x.dtype == fpsim.fp16``); the numpy dtype for integer/bool tensors."""
        return self.format if self.format is not None else self.data.dtype

    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def dim(self) -> int:
        return self.data.ndim

    def size(self, dim: int | None = None):
        """The shape, or the length of dimension ``dim`` (checked: a 0-d tensor has none)."""
        if dim is None:
            return self.data.shape
        return self.data.shape[wrap_dim(dim, self.data.ndim, wrap_scalar=False)]

    def numel(self) -> int:
        return int(self.data.size)

    def __len__(self) -> int:
        if self.data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.data.shape[0]

    def is_floating_point(self) -> bool:
        return self.format is not None

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    @property
    def grad_fn(self):
        """The node that made this tensor (None for leaves)."""
        return self._ctx

    def numpy(self) -> np.ndarray:
        """The stored values (the array itself, not a copy: keep them values of the format)."""
        return self.data

    def item(self) -> float | int | bool:
        if self.data.size != 1:
            raise ValueError(
                f"only one-element tensors can be converted to a number, got {self.shape}"
            )
        return self.data.reshape(()).item()

    def tolist(self):
        return self.data.tolist()

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise RuntimeError(
                "the truth value of a tensor with more than one element is ambiguous"
            )
        return bool(self.item())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        extra = [
            f"format={self.format.name}" if self.format is not None else f"dtype={self.data.dtype}"
        ]
        if self._ctx is not None:
            extra.append(f"grad_fn={self._ctx!r}")
        elif self.requires_grad:
            extra.append("requires_grad=True")
        return f"tensor({body}, {', '.join(extra)})"

    # ---- autograd ----------------------------------------------------------------------------
    def backward(self, gradient: Any = None, retain_graph: bool | None = None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (see the package docstring
        for the formats gradients take). ``gradient`` is required for non-scalar tensors."""
        _function.backward(self, gradient)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad and self.format is None:
            raise RuntimeError("only floating point tensors can require gradients")
        if not self.is_leaf and not requires_grad:
            raise RuntimeError("you can only change requires_grad flags of leaf variables")
        self.requires_grad = requires_grad
        return self

    def detach(self) -> Tensor:
        """The same values (shared storage and version counter), cut from the graph."""
        t = Tensor._make(self.data, self.format)
        t._vc = self._counter()
        return t

    def retain_grad(self) -> None:
        """Keep ``.grad`` of this non-leaf tensor after backward (no-op on leaves)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that has requires_grad=False")
        if self._ctx is not None:
            self._ctx.retain = _function._retain_ref(self)

    def register_hook(self, fn) -> RemovableHandle:
        """Call ``fn(grad)`` with this tensor's gradient during backward (the sum of all its
        contributions, in this tensor's format); a returned tensor/array replaces the gradient.
        Returns a handle with ``.remove()``."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._ctx is not None:
            if self._ctx.hooks is None:
                self._ctx.hooks = {}
            hooks = self._ctx.hooks
        else:
            if self._hooks is None:
                self._hooks = {}
            hooks = self._hooks
        handle = RemovableHandle(hooks)
        hooks[handle.id] = fn
        return handle

    # ---- in-place operations and the version counter ----------------------------------------
    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's storage has had, as PyTorch's ``_version``:
        one counter shared by a tensor, its views and its ``detach()``-ed aliases. Every
        in-place method counts one. Writes to the ``data`` array itself are not counted (as
        writes through PyTorch's ``.data``); code that stands for a PyTorch in-place op (an
        optimizer step, an initialiser) counts its write with :meth:`_bump_version`. An op
        records the version of each tensor it keeps for its backward; the backward raises if
        one has changed since."""
        return 0 if self._vc is None else self._vc[0]

    def _counter(self) -> list:
        """The version counter: a one-element list, shared by every view of one storage."""
        if self._vc is None:
            self._vc = [0]
        return self._vc

    def _bump_version(self) -> None:
        """Count one in-place write made to ``data`` directly (PyTorch's optimizers and
        ``nn.init`` write through in-place ops, which count)."""
        self._counter()[0] += 1

    def _check_inplace(self, through_view: bool = False) -> None:
        """PyTorch's refusals of an in-place write in grad mode: into a leaf that requires grad
        (``through_view``: reached by basic indexing, which is a view in PyTorch), or into a
        view of one."""
        if not is_grad_enabled():
            return
        if self.requires_grad and self._ctx is None:
            what = "a view of a leaf Variable" if through_view else "a leaf Variable"
            raise RuntimeError(f"{what} that requires grad is being used in an in-place operation.")
        if self._view is not None and self._view[0].requires_grad and self._view[0]._ctx is None:
            raise RuntimeError(
                "a view of a leaf Variable that requires grad is being used in an in-place "
                "operation."
            )

    def _write(self, value: Any, idx: Any, node: type) -> Tensor:
        """THE in-place write ``self[idx] = value`` (``idx`` ``...``: every element), rounded to
        this tensor's format; every in-place method goes through here.

        In grad mode, when this tensor requires grad or ``value`` is a tensor that does, the
        write is recorded as ``node`` (a new history for this tensor, as PyTorch's in-place
        ops): gradients reach ``value`` from the written positions and the old history from
        the others. Nodes recorded before keep pointing at the old history. Counts one version.
        """
        src = value if isinstance(value, Tensor) else None
        if (
            is_grad_enabled()
            and self.format is not None
            and (self.requires_grad or (src is not None and src.requires_grad))
        ):
            if self._view is not None:
                raise RuntimeError(_VIEW_WRITE)
            old = Tensor._make(self.data, self.format, self.requires_grad)
            old._ctx, old._vc = self._ctx, self._counter()
            new = node.apply(old, value, idx)
            self.data[...] = new.data  # into the storage itself: aliases see the new values
            self._ctx, self.requires_grad = new._ctx, True
        else:
            self.data[idx] = self._convert_value(value)
        self._bump_version()
        return self

    def zero_(self) -> Tensor:
        self._check_inplace()
        return self._write(0, ..., Zero)

    def fill_(self, value: Any) -> Tensor:
        """Set every element to ``value`` (a number, or a 0-dim tensor), rounded to the format."""
        self._check_inplace()
        return self._write(value, ..., Fill)

    def copy_(self, src: Any) -> Tensor:
        """Copy values in (rounded to this tensor's format), broadcasting like PyTorch."""
        self._check_inplace()
        return self._write(src, ..., Copy)

    def _convert_value(self, v: Any) -> np.ndarray:
        arr = v.data if isinstance(v, Tensor) else np.asarray(v)
        if self.format is None:
            return arr.astype(self.data.dtype)
        return to_format(arr, self.format)

    def __setitem__(self, idx, value) -> None:
        """``t[idx] = value``, rounded to the format; recorded like :meth:`copy_`."""
        i = _index(idx)
        self._check_inplace(through_view=_ops._is_basic(i))
        self._write(value, i, IndexPut)

    # ---- format conversion (cast nodes) ------------------------------------------------------
    def to(
        self, fmt: FormatLike, rounding: str = "nearest_even", seed: int | None = None
    ) -> Tensor:
        """Convert to another format: a *cast node*. Its forward rounds each value once to
        ``fmt`` (``rounding``/``seed`` as in :func:`fpsim.round_to`); its backward casts the
        incoming gradient to this (the source) tensor's format. Same format: returns self.
        ``"int64"``/``"bool"`` give integer tensors (truncation, no gradient)."""
        target = _resolve_format(fmt)
        if target is None:
            np_dt = np.dtype(bool) if fmt == "bool" or fmt is bool else np.dtype(np.int64)
            return Tensor._make(self.data.astype(np_dt), None)
        if target == self.format and rounding == "nearest_even":
            return self
        return _ops.Cast.apply(self, target, rounding=rounding, seed=seed)

    def half(self) -> Tensor:
        return self.to(fp16)

    def bfloat16(self) -> Tensor:
        return self.to(bf16)

    def float(self) -> Tensor:
        return self.to(fp32)

    def double(self) -> Tensor:
        return self.to(fp64)

    def long(self) -> Tensor:
        return self.to("int64")

    def bool(self) -> Tensor:
        return self.to("bool")

    def type_as(self, other: Tensor) -> Tensor:
        return self.to(other.format if other.format is not None else other.data.dtype)

    # ---- arithmetic operators ----------------------------------------------------------------
    def _wrap(self, other: Any) -> Tensor:
        return other if isinstance(other, Tensor) else _constant(other, self)

    def __add__(self, other):
        return _ops.Add.apply(self, self._wrap(other))

    def __radd__(self, other):
        return _ops.Add.apply(self._wrap(other), self)

    def __sub__(self, other):
        return _ops.Sub.apply(self, self._wrap(other))

    def __rsub__(self, other):
        return _ops.Sub.apply(self._wrap(other), self)

    def __mul__(self, other):
        return _ops.Mul.apply(self, self._wrap(other))

    def __rmul__(self, other):
        return _ops.Mul.apply(self._wrap(other), self)

    def __truediv__(self, other):
        return _ops.Div.apply(self, self._wrap(other))

    def __rtruediv__(self, other):
        return _ops.RDiv.apply(self._wrap(other), self)

    def __pow__(self, other):
        return _ops.Pow.apply(self, self._wrap(other))

    def __rpow__(self, other):
        return _ops.Pow.apply(self._wrap(other), self)

    def __neg__(self):
        return _ops.Neg.apply(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _ops.Abs.apply(self)

    def __matmul__(self, other):
        return _ops.MatMul.apply(self, self._wrap(other))

    def __rmatmul__(self, other):
        return _ops.MatMul.apply(self._wrap(other), self)

    # comparisons: no gradient, bool tensors
    def _compare(self, other, op) -> Tensor:
        o = other.data if isinstance(other, Tensor) else np.asarray(other)
        return Tensor._make(np.asarray(op(self.data, o)), None)

    def __eq__(self, other):  # type: ignore[override]
        return self._compare(other, np.equal)

    def __ne__(self, other):  # type: ignore[override]
        return self._compare(other, np.not_equal)

    def __lt__(self, other):
        return self._compare(other, np.less)

    def __le__(self, other):
        return self._compare(other, np.less_equal)

    def __gt__(self, other):
        return self._compare(other, np.greater)

    def __ge__(self, other):
        return self._compare(other, np.greater_equal)

    def __invert__(self):
        if self.format is not None:
            raise TypeError("~ is only defined for integer and bool tensors")
        return Tensor._make(np.invert(self.data), None)

    def __and__(self, other):
        return self._compare(other, np.logical_and if self.data.dtype == bool else np.bitwise_and)

    def __or__(self, other):
        return self._compare(other, np.logical_or if self.data.dtype == bool else np.bitwise_or)

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
        return _ops.Exp.apply(self)

    def log(self):
        return _ops.Log.apply(self)

    def sqrt(self):
        return _ops.Sqrt.apply(self)

    def rsqrt(self):
        return _ops.Rsqrt.apply(self)

    def abs(self):
        return _ops.Abs.apply(self)

    def clamp(self, min: float | None = None, max: float | None = None):
        return _ops.Clamp.apply(self, min, max)

    clip = clamp

    def relu(self):
        return _ops.ReLU.apply(self)

    def gelu(self, approximate: str = "none"):
        return _ops.GELU.apply(self, approximate)

    def silu(self):
        return _ops.SiLU.apply(self)

    def tanh(self):
        return _ops.Tanh.apply(self)

    def sigmoid(self):
        return _ops.Sigmoid.apply(self)

    def matmul(self, other):
        return self @ other

    def mm(self, other):
        return _ops.MM.apply(self, self._wrap(other))

    def sum(self, dim=None, keepdim: bool = False):
        return _ops.Sum.apply(self, dim, keepdim)

    def mean(self, dim=None, keepdim: bool = False):
        return _ops.Mean.apply(self, dim, keepdim)

    def var(
        self, dim=None, correction: int = 1, keepdim: bool = False, unbiased: bool | None = None
    ):
        if unbiased is not None:
            correction = int(unbiased)
        return _ops.Var.apply(self, dim, correction, keepdim)

    def max(self, dim: int | None = None, keepdim: bool = False):
        """Largest value (``dim=None``) or ``(values, indices)`` along ``dim``, as PyTorch."""
        values = _ops.Max.apply(self, dim, keepdim)
        if dim is None:
            return values
        return MaxResult(values, self.argmax(dim, keepdim))

    def min(self, dim: int | None = None, keepdim: bool = False):
        if dim is None:
            return -((-self).max())
        values = -((-self).max(dim, keepdim).values)
        return MaxResult(values, self.argmin(dim, keepdim))

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the largest value (the first one; a NaN counts as largest), flat or along
        ``dim``."""
        if dim is None:
            idx = np.argmax(self.data)
        else:  # a 0-d tensor has dims 0 and -1, both at index 0
            d = wrap_dim(dim, self.ndim)
            idx = np.argmax(self.data, axis=d, keepdims=keepdim) if self.ndim else 0
        return Tensor._make(np.asarray(idx, dtype=np.int64), None)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        if dim is None:
            idx = np.argmin(self.data)
        else:
            d = wrap_dim(dim, self.ndim)
            idx = np.argmin(self.data, axis=d, keepdims=keepdim) if self.ndim else 0
        return Tensor._make(np.asarray(idx, dtype=np.int64), None)

    def softmax(self, dim: int = -1):
        return _ops.Softmax.apply(self, dim)

    def log_softmax(self, dim: int = -1):
        return _ops.LogSoftmax.apply(self, dim)

    def logsumexp(self, dim=-1, keepdim: bool = False):
        return _ops.LogSumExp.apply(self, dim, keepdim)

    def reshape(self, *shape):
        return _ops.Reshape.apply(self, _shape_arg(shape))

    def view(self, *shape):
        return _ops.View.apply(self, _shape_arg(shape))

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

    def transpose(self, dim0: int, dim1: int):
        return _ops.Transpose.apply(self, dim0, dim1)

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return _ops.Permute.apply(self, dims)  # not _shape_arg: int() would accept 1.0 and "1"

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
        return _ops.Clone.apply(self)

    def __getitem__(self, idx):
        if isinstance(idx, Tensor) and idx.format is None and idx.data.dtype != bool:
            return _ops.Index.apply(self, idx)  # an argument: the op records its version
        return _ops.Index.apply(self, _index(idx))


# ---- construction ----------------------------------------------------------------------------


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
    if isinstance(idx, Tensor):
        idx = idx.data
    if isinstance(idx, (list, np.ndarray)):
        idx = np.array(idx)
    if isinstance(idx, np.ndarray) and idx.dtype == bool:
        return np.nonzero(idx) if idx.ndim > 1 else np.nonzero(idx)[0]
    return idx


def _constant(value: Any, like: Tensor) -> Tensor:
    """An operand that is not a Tensor. Python scalars are *weak*: they never widen the compute
    format (fp16 tensor * 0.1 stays fp16) and are held in the op's "opmath" precision: float32
    for every format stored in float32 (as PyTorch does), float64 otherwise. numpy arrays
    become ordinary tensors (:func:`tensor`)."""
    if isinstance(value, (numbers.Number, np.number, np.bool_)) and not isinstance(value, complex):
        lf = like.format
        if isinstance(value, (bool, np.bool_, numbers.Integral)) and lf is None:
            # with an integer or bool tensor a bool stays bool and an integer is int64: a bool
            # tensor + 3 is int64 (PyTorch's promotion), not the bool True
            dt = bool if isinstance(value, (bool, np.bool_)) else np.int64
            t = Tensor._make(np.asarray(value, dtype=dt), None)
        else:
            container = (
                np.float64 if lf is not None and _info(lf).container == np.float64 else np.float32
            )
            t = Tensor._make(
                np.asarray(value, dtype=container), fp64 if container == np.float64 else fp32
            )
        t._weak = True
        return t
    if isinstance(value, (np.ndarray, list, tuple)):
        return tensor(value)
    raise TypeError(f"unsupported operand type for a Tensor op: {type(value).__name__}")


def tensor(data: Any, format: FormatLike | None = None, requires_grad: bool = False) -> Tensor:
    """Make a tensor: the values of ``data`` rounded once (nearest even) to ``format``.

    ``format=None`` infers: floating data -> fp32 (the default format, also for float64 numpy
    input, as ``torch.tensor`` of a Python float list), integer/bool data -> an integer tensor
    (``format`` None). Pass ``"int64"`` or ``"bool"`` for integer tensors explicitly.

    >>> tensor([0.1, 1e5], format="fp16")
    tensor([0.09997559,        inf], format=fp16)
    >>> tensor([2, 0, 1])
    tensor([2, 0, 1], dtype=int64)
    """
    if isinstance(data, Tensor):
        arr = data.data
        if format is None:
            format = data.format if data.format is not None else arr.dtype
    else:
        arr = np.asarray(data)
    if arr.dtype.kind not in "iubf":  # ml_dtypes bfloat16/float8 arrays: float64 holds them
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"cannot make a tensor from {arr.dtype} data") from None
    fmt = (None if arr.dtype.kind in "iub" else fp32) if format is None else _resolve_format(format)
    if fmt is None:
        if arr.dtype.kind not in "iub":
            raise TypeError(f"integer tensor from {arr.dtype} data: pass a float format")
        values = np.array(arr, dtype=arr.dtype if arr.dtype == bool else np.int64)
    else:
        values = np.array(to_format(arr, fmt), copy=True)
    t = Tensor._make(values, fmt)
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*shape, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    return tensor(np.zeros(_shape_arg(shape)), format, requires_grad)


def ones(*shape, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    return tensor(np.ones(_shape_arg(shape)), format, requires_grad)


def full(shape, value: float, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    return tensor(np.full(_shape_arg((shape,)), float(value)), format, requires_grad)


def zeros_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return tensor(np.zeros(t.shape), t.dtype, requires_grad)


def ones_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return tensor(np.ones(t.shape), t.dtype, requires_grad)


def randn(
    *shape, format: FormatLike = "fp32", generator: Any = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal samples (drawn in float64 from ``generator``, then rounded once)."""
    g = as_generator(generator)
    return tensor(g.standard_normal(_shape_arg(shape)), format, requires_grad)


def rand(
    *shape, format: FormatLike = "fp32", generator: Any = None, requires_grad: bool = False
) -> Tensor:
    """Uniform [0, 1) samples (drawn in float64 from ``generator``, then rounded once)."""
    g = as_generator(generator)
    return tensor(g.random(_shape_arg(shape)), format, requires_grad)


def arange(start, end=None, step=1, format: FormatLike | None = None) -> Tensor:
    """Like ``torch.arange``: integers give an int64 tensor unless a format is given."""
    arr = np.arange(start, end, step) if end is not None else np.arange(start)
    return tensor(arr, format)


# ---- in-place writes as graph nodes ----------------------------------------------------------

_VIEW_WRITE = (
    "fpsim does not record an in-place operation on a view of a tensor when either requires "
    "grad (PyTorch rewrites the base's history, CopySlices). Write into the base tensor "
    "instead (t[idx] = value), or build the new values out of place."
)


class _Write(_function.Function):
    """An in-place write recorded in the graph: arguments ``(old, src, idx)``, the result is
    ``old`` with ``src`` (a tensor or a number, rounded once to ``old``'s format) written at
    ``idx``. Backward: ``old`` gets the gradient where its values were kept (0 where they were
    overwritten); ``src`` the gradient of the positions written, summed over broadcasting in
    the format and then cast to ``src``'s own format (as PyTorch). Keeps no tensor."""

    forward_precision = backward_precision = "raw"
    dispatch = False  # autocast never casts a write: it is in the written tensor's format

    @classmethod
    def compute_format(cls, args: tuple, kwargs: dict) -> Format | None:
        return args[0].format

    @staticmethod
    def forward(ctx, old, src, idx):
        arr = src.data if isinstance(src, Tensor) else np.asarray(src)
        ctx.idx, ctx.src_shape = idx, arr.shape
        ctx.src_fmt = src.format if isinstance(src, Tensor) else None
        out = np.array(old.data, copy=True)
        out[idx] = to_format(arr, ctx.fmt)
        return out

    @staticmethod
    def backward(ctx, g):
        n_old, n_src = ctx.needs_input_grad[:2]
        g_old = g_src = None
        if n_old:
            g_old = np.array(g, copy=True)
            g_old[ctx.idx] = 0
        if n_src:
            part = np.asarray(g[ctx.idx])
            if part.shape != ctx.src_shape:
                summed = _ops._unbroadcast(part.astype(_info(ctx.fmt).math), ctx.src_shape)
                part = to_format(summed, ctx.fmt)
            g_src = to_format(part, ctx.src_fmt)
        return g_old, g_src, None


class Fill(_Write):
    name = "fill_"


class Zero(_Write):
    name = "zero_"


class Copy(_Write):
    name = "copy_"


class IndexPut(_Write):
    name = "index_put_"


from . import ops as _ops  # noqa: E402  (ops import Tensor from this module)
