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

import decimal
import numbers
import warnings
from collections import namedtuple
from typing import Any

import numpy as np

from ..containers import is_torch_tensor, torch_to_numpy
from ..formats import Format, FormatLike, bf16, fp16, fp32, fp64, get_format
from . import function as _function
from .dims import wrap_dim, wrap_dims
from .grad_mode import is_grad_enabled
from .hooks import RemovableHandle
from .precision import _info, _is_int_objects, promote_formats, to_format

__all__ = [
    "Tensor",
    "tensor",
    "from_numpy",
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


def _integer_dtype(fmt: Any) -> np.dtype | None:
    """The numpy dtype of the integer tensor ``fmt`` names -- bool, or int64 for every integer
    name and dtype (``"int32"``, ``np.uint8``, ``torch.int64``: fpsim's integers are int64) --
    or None when ``fmt`` names no integer type."""
    if type(fmt).__module__ == "torch" and type(fmt).__name__ == "dtype":
        if fmt.is_floating_point or fmt.is_complex:
            return None
        return np.dtype(bool) if str(fmt) == "torch.bool" else np.dtype(np.int64)
    if isinstance(fmt, str):
        fmt = fmt.strip().lower().replace("torch.", "").replace("numpy.", "").replace("np.", "")
    if isinstance(fmt, (str, type, np.dtype)):
        try:
            kind = np.dtype(fmt).kind
        except (TypeError, ValueError):  # "fp16", "e4m3", "Format(4, 3)": not integer types
            return None
        if kind in "iub":
            return np.dtype(bool) if kind == "b" else np.dtype(np.int64)
    return None


def _resolve_format(fmt: Any) -> Format | None:
    """A float Format, or None for integer/bool tensors (``"int64"``, ``"bool"``, numpy and
    torch integer dtypes). Float formats: anything :func:`fpsim.get_format` takes (a Format, a
    name, a numpy, ml_dtypes or torch dtype)."""
    if fmt is None or isinstance(fmt, Format):
        return fmt
    if _integer_dtype(fmt) is not None:
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

    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The stored values: the array itself, sharing memory as PyTorch's ``numpy()`` (keep
        what you write into it values of the format). Its dtype is the format's container:
        float32 for fp16/bf16/fp8 values. A tensor that requires grad raises, as in PyTorch,
        unless ``force=True``.

        >>> t = tensor([1.0, 2.0], format="fp16")
        >>> a = t.numpy()
        >>> a[0] = 3.0                 # writes the tensor
        >>> t
        tensor([3., 2.], format=fp16)
        >>> tensor([1.0], requires_grad=True).numpy()
        Traceback (most recent call last):
        ...
        RuntimeError: Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.
        """  # noqa: E501
        if self.requires_grad and not force:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. "
                "Use tensor.detach().numpy() instead."
            )
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
            retain = self._ctx.retain if self._ctx is not None else None
            new = node.apply(old, value, idx)
            self.data[...] = new.data  # into the storage itself: aliases see the new values
            self._ctx, self.requires_grad = new._ctx, True
            if retain is not None:  # retain_grad() follows the tensor to its new history
                old._ctx.retain, self._ctx.retain = None, retain
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
        target = _resolve_format(get_format(fmt) if fmt is None else fmt)  # None: TypeError
        if target is None:
            return Tensor._make(self.data.astype(_integer_dtype(fmt)), None)
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
        """Smallest value (``dim=None``) or ``(values, indices)`` along ``dim``, as PyTorch."""
        values = _ops.Max.apply(self, dim, keepdim, False)
        if dim is None:
            return values
        return MaxResult(values, self.argmin(dim, keepdim))

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the largest value (the first one; a NaN counts as largest), flat or along
        ``dim``."""
        if dim is None:  # keepdim keeps every dim as size 1, as PyTorch
            idx = np.argmax(self.data, keepdims=keepdim)
        else:  # a 0-d tensor has dims 0 and -1, both at index 0
            d = wrap_dim(dim, self.ndim)
            idx = np.argmax(self.data, axis=d, keepdims=keepdim) if self.ndim else 0
        return Tensor._make(np.asarray(idx, dtype=np.int64), None)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        if dim is None:
            idx = np.argmin(self.data, keepdims=keepdim)
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
            wide = lf is not None and _info(lf).container == np.float64
            held = fp64 if wide else fp32
            if isinstance(value, numbers.Integral) and not isinstance(value, bool):
                arr = to_format(np.asarray(value), held)  # one rounding of the exact integer
            else:
                arr = np.asarray(value, dtype=held.container_dtype)
            t = Tensor._make(arr, held)
        t._weak = True
        return t
    if isinstance(value, (np.ndarray, list, tuple)):
        return tensor(value)
    raise TypeError(f"unsupported operand type for a Tensor op: {type(value).__name__}")


def _dtype_format(dt: np.dtype) -> Format | None:
    """The format of numpy data of dtype ``dt`` (float16 -> fp16, ml_dtypes bfloat16 -> bf16,
    float8_e4m3fn -> fp8_e4m3, float64 -> fp64, ...); None for integers and bool."""
    if dt.kind in "iub":
        return None
    try:
        return get_format(dt)
    except (TypeError, ValueError):
        raise TypeError(f"cannot make a tensor from {dt} data") from None


def _collect_formats(x: Any, found: list) -> None:
    """Append the format of each scalar kind in ``x`` (None: an integer or bool), as
    ``torch.tensor`` reads them: Python floats are fp32 (the default dtype); numpy scalars and
    arrays, fpsim and torch tensors have their dtype's format."""
    if isinstance(x, (list, tuple)):
        for tp in set(map(type, x)):  # by type: a list of a million floats is one check
            if tp is float:
                found.append(fp32)
            elif tp is int or tp is bool:
                found.append(None)
            elif issubclass(tp, np.generic):
                found.append(_dtype_format(np.dtype(tp)))
            else:
                for v in x:
                    if type(v) is tp:
                        _collect_formats(v, found)
    elif isinstance(x, Tensor):
        found.append(x.format)
    elif isinstance(x, (np.ndarray, np.generic)):
        found.append(_dtype_format(x.dtype))
    elif is_torch_tensor(x):
        found.append(_dtype_format(torch_to_numpy(x.detach().cpu()).dtype))
    elif isinstance(x, (bool, numbers.Integral)):
        found.append(None)
    elif isinstance(x, numbers.Real) or isinstance(x, decimal.Decimal):
        found.append(fp32)  # Python floats, Fractions, Decimals: the default dtype
    else:
        # None, strings, objects: PyTorch's message (numpy would turn None into NaN)
        raise RuntimeError(f"Could not infer dtype of {type(x).__name__}")


def infer_format(data: Any) -> Format | None:
    """The format ``torch.tensor(data)`` gives ``data``, in fpsim's names: numpy arrays and
    scalars and torch tensors keep their dtype (float64 -> fp64, float16 -> fp16, bfloat16 ->
    bf16, float8_e4m3fn -> fp8_e4m3); Python floats are fp32, the default dtype; a sequence
    takes the promotion of its elements' formats. None: integer or bool data (an integer
    tensor). An empty sequence is fp32.

    >>> infer_format([1.0, 2.0]).name, infer_format(np.array([1.0])).name
    ('fp32', 'fp64')
    >>> infer_format(np.float16(1.0)).name, infer_format([np.float16(1.0), 2.0]).name
    ('fp16', 'fp32')
    >>> infer_format([1, np.float16(2.0)]).name, infer_format([1, 2]) is None
    ('fp16', True)
    """
    found: list = []
    _collect_formats(data, found)
    floats = [f for f in found if f is not None]
    if floats:
        return promote_formats(floats)
    return None if found else fp32


def tensor(data: Any, format: FormatLike | None = None, requires_grad: bool = False) -> Tensor:
    """Make a tensor: the values of ``data`` rounded once (nearest even) to ``format``.

    ``data``: numbers, (nested) lists, numpy arrays (ml_dtypes bfloat16/float8 included), fpsim
    or torch tensors (read without going through Python lists). ``format=None`` infers it as
    ``torch.tensor`` infers the dtype (:func:`infer_format`): a list of Python floats is fp32,
    a numpy float64 array fp64, float16 data fp16, a torch bfloat16 tensor bf16; integer/bool
    data gives an integer tensor (``format`` None; fpsim's integers are int64 or bool). Any
    format :func:`fpsim.get_format` takes works, torch and numpy dtypes included; ``"int64"``,
    ``"bool"`` (or their dtypes) make integer tensors explicitly. Integers are rounded from
    their exact values, however large.

    >>> tensor([0.1, 1e5], format="fp16")
    tensor([0.09997559,        inf], format=fp16)
    >>> tensor(np.array([0.5], dtype=np.float16))
    tensor([0.5], format=fp16)
    >>> tensor([2, 0, 1])
    tensor([2, 0, 1], dtype=int64)
    >>> tensor([2**60 + 2**36 + 1], format="fp32").item() == 2**60 + 2**37
    True
    """
    if isinstance(data, Tensor):
        arr, inferred = data.data, data.format
    elif is_torch_tensor(data):
        arr = torch_to_numpy(data.detach().cpu())  # its memory; the rounding below copies
        inferred = _dtype_format(arr.dtype)
    elif isinstance(data, (np.ndarray, np.generic)):
        arr = np.asarray(data)
        inferred = _dtype_format(arr.dtype) if format is None else None
    else:  # numbers and sequences: their elements decide, as in torch.tensor
        arr, inferred = np.asarray(data), infer_format(data)
        if inferred is None and arr.dtype.kind not in "iub":
            # Python ints that no numpy integer holds (numpy makes them float64, rounded, or
            # objects): kept as Python ints, rounded below from their exact values
            arr = np.array(data, dtype=object)
    fmt = inferred if format is None else _resolve_format(format)
    ints = _is_int_objects(arr)
    if arr.dtype.kind not in "iubf" and not ints:
        try:  # ml_dtypes bfloat16/float8 arrays, Fractions, Decimals: float64 holds them
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"cannot make a tensor from {arr.dtype} data") from None
    if fmt is None:
        if arr.dtype.kind not in "iub" and not ints:
            raise TypeError(f"integer tensor from {arr.dtype} data: pass a float format")
        if arr.dtype != bool and arr.size and not _ints_fit_int64(arr):
            raise RuntimeError("Overflow when unpacking long")  # fpsim's integers are int64
        want = None if format is None else _integer_dtype(format)  # "bool" of ints: bools
        values = np.array(arr, dtype=want or (bool if arr.dtype == bool else np.int64))
    else:
        values = np.array(to_format(arr, fmt), copy=True)
    t = Tensor._make(values, fmt)
    if requires_grad:
        t.requires_grad_(True)
    return t


_NOT_WRITABLE = (
    "The given NumPy array is not writable, and fpsim writes tensors in place through their "
    "arrays (in-place ops, optimizer steps). Writing to this tensor will raise. You may want to "
    "copy the array to protect its data or make it writable before converting it to a tensor."
)


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor that shares ``ndarray``'s memory, as ``torch.from_numpy``: writing into either
    changes the other. The format is the dtype's: float32 -> fp32, float64 -> fp64; int64 and
    bool arrays give integer tensors.

    Other dtypes raise ``TypeError``: fpsim keeps fp16, bf16 and fp8 values in float32 arrays
    and integers in int64 ones, so a float16 (ml_dtypes, int32, ...) array cannot be shared
    (``torch.from_numpy`` takes float16 and every integer width); :func:`tensor` copies such
    an array, with the format of its dtype. A non-native byte order raises ``ValueError`` and a
    read-only array warns, as in PyTorch.

    >>> a = np.array([1.0, 2.0], dtype=np.float32)
    >>> t = from_numpy(a)
    >>> a[0] = -1.0
    >>> t
    tensor([-1.,  2.], format=fp32)
    """
    if not isinstance(ndarray, np.ndarray):
        tp = type(ndarray)
        name = tp.__name__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__name__}"
        raise TypeError(f"expected np.ndarray (got {name})")
    dt = ndarray.dtype
    if not dt.isnative:
        raise ValueError(
            "given numpy array has byte order different from the native byte order. "
            "Conversion between byte orders is currently not supported."
        )
    if dt == np.float32 or dt == np.float64:
        fmt: Format | None = get_format(dt)
    elif dt == np.int64 or dt == np.bool_:
        fmt = None
    else:
        raise TypeError(
            f"can't convert np.ndarray of type {dt.type.__module__}.{dt.type.__name__}. The only "
            "supported types are: float64, float32, int64, and bool. (fpsim keeps fp16, bf16 "
            "and fp8 values in float32 arrays and integers in int64 ones; fpsim.tensor(array) "
            "copies an array of any other dtype, in the format of its dtype.)"
        )
    if not ndarray.flags.writeable:
        warnings.warn(_NOT_WRITABLE, UserWarning, stacklevel=2)
    return Tensor._make(ndarray, fmt)


def _ints_fit_int64(arr: np.ndarray) -> bool:
    """True when every integer of ``arr`` (an integer or object array) is an int64."""
    if arr.dtype.kind == "i":
        return True
    i64 = np.iinfo(np.int64)
    return all(i64.min <= int(v) <= i64.max for v in (arr.min(), arr.max()))


def _default(format: FormatLike | None) -> FormatLike:
    """``format=None`` of a factory: fp32, the default dtype (the float64 samples and fills
    below are not fp64 data)."""
    return fp32 if format is None else format


def zeros(*shape, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    return tensor(np.zeros(_shape_arg(shape)), _default(format), requires_grad)


def ones(*shape, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    return tensor(np.ones(_shape_arg(shape)), _default(format), requires_grad)


def full(shape, value: float, format: FormatLike = "fp32", requires_grad: bool = False) -> Tensor:
    """``value`` everywhere, rounded once (an integer from its exact value); ``format=None``:
    the value's own (a Python float: fp32, an int: an int64 tensor), as ``torch.full``."""
    v = value.item() if isinstance(value, Tensor) else value
    fmt = infer_format(v) if format is None else format
    fill = v if isinstance(v, (numbers.Integral, np.bool_)) else float(v)
    return tensor(np.full(_shape_arg((shape,)), fill), fmt, requires_grad)


def zeros_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return tensor(np.zeros(t.shape), t.dtype, requires_grad)


def ones_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return tensor(np.ones(t.shape), t.dtype, requires_grad)


def randn(
    *shape, format: FormatLike = "fp32", generator: Any = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal samples (drawn in float64 from ``generator``, then rounded once)."""
    g = as_generator(generator)
    return tensor(g.standard_normal(_shape_arg(shape)), _default(format), requires_grad)


def rand(
    *shape, format: FormatLike = "fp32", generator: Any = None, requires_grad: bool = False
) -> Tensor:
    """Uniform [0, 1) samples (drawn in float64 from ``generator``, then rounded once)."""
    g = as_generator(generator)
    return tensor(g.random(_shape_arg(shape)), _default(format), requires_grad)


def arange(start, end=None, step=1, format: FormatLike | None = None) -> Tensor:
    """Like ``torch.arange``: integers give an int64 tensor, floats fp32 (the default dtype),
    unless a format is given."""
    arr = np.arange(start, end, step) if end is not None else np.arange(start)
    return tensor(arr, _default(format) if arr.dtype.kind == "f" else format)


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
