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
from collections import namedtuple
from typing import Any

import numpy as np

from ..containers import is_torch_tensor, torch_to_numpy
from ..formats import Format, FormatLike, bf16, fp16, fp32, fp64, get_format
from . import engine
from .dims import wrap_dim
from .dtypes import _dtype_format, _integer_dtype, _ints_fit_int64, _resolve_format
from .generator import as_generator, default_generator, manual_seed
from .grad_mode import is_grad_enabled
from .hooks import RemovableHandle
from .precision import _info, _is_int_objects, promote_formats, to_format
from .registry import op
from .tensor_ops import TensorOps, _index, _is_basic

__all__ = ["Tensor", "tensor", "infer_format", "as_generator", "manual_seed", "default_generator"]

MaxResult = namedtuple("MaxResult", ["values", "indices"])

class Tensor(TensorOps):
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
        for the formats gradients take). ``gradient`` is required for non-scalar tensors.
        Graphs are kept after backward (as ``retain_graph=True``)."""
        if not self.requires_grad:
            raise RuntimeError(
                "element 0 of tensors does not require grad and does not have a grad_fn"
            )
        _check_views((self,))
        if gradient is None:
            if self.data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = np.ones(self.data.shape, _info(self.format).container)
        else:
            g = gradient.data if isinstance(gradient, Tensor) else np.asarray(gradient)
            if g.shape != self.data.shape:
                raise RuntimeError(f"grad has shape {g.shape}, expected {self.data.shape}")
            g = to_format(g, self.format)
        engine.backward(self, g, Tensor)

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
            self._ctx.retain = engine.retain_ref(self)

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
        return self._write(0, ..., op("zero_"))

    def fill_(self, value: Any) -> Tensor:
        """Set every element to ``value`` (a number, or a 0-dim tensor), rounded to the format."""
        self._check_inplace()
        return self._write(value, ..., op("fill_"))

    def copy_(self, src: Any) -> Tensor:
        """Copy values in (rounded to this tensor's format), broadcasting like PyTorch."""
        self._check_inplace()
        return self._write(src, ..., op("copy_"))

    def _convert_value(self, v: Any) -> np.ndarray:
        arr = v.data if isinstance(v, Tensor) else np.asarray(v)
        if self.format is None:
            return arr.astype(self.data.dtype)
        return to_format(arr, self.format)

    def __setitem__(self, idx, value) -> None:
        """``t[idx] = value``, rounded to the format; recorded like :meth:`copy_`."""
        i = _index(idx)
        self._check_inplace(through_view=_is_basic(i))
        self._write(value, i, op("index_put_"))

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
        return op("cast").apply(self, target, rounding=rounding, seed=seed)

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

    # ---- operands (the operators and op methods are TensorOps') -------------------------------
    def _wrap(self, other: Any) -> Tensor:
        """``other`` as an operand: tensors pass, numbers become weak constants."""
        return other if isinstance(other, Tensor) else _constant(other, self)

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

    # ---- reductions that return indices ----------------------------------------------------
    def max(self, dim: int | None = None, keepdim: bool = False):
        """Largest value (``dim=None``) or ``(values, indices)`` along ``dim``, as PyTorch."""
        values = op("max").apply(self, dim, keepdim)
        if dim is None:
            return values
        return MaxResult(values, self.argmax(dim, keepdim))

    def min(self, dim: int | None = None, keepdim: bool = False):
        """Smallest value (``dim=None``) or ``(values, indices)`` along ``dim``, as PyTorch."""
        values = op("max").apply(self, dim, keepdim, False)
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


# ---- construction ----------------------------------------------------------------------------



_VIEW_WRITE = (
    "fpsim does not record an in-place operation on a view of a tensor when either requires "
    "grad (PyTorch rewrites the base's history, CopySlices). Write into the base tensor "
    "instead (t[idx] = value), or build the new values out of place."
)

_STALE_VIEW = (
    "a view is used after its base tensor was modified by a recorded in-place operation: "
    "PyTorch would rebuild the view's history from the modified base, fpsim does not. Take the "
    "view again after the in-place operation (or modify the base under no_grad)."
)


def _check_views(args: tuple) -> None:
    """Refuse a view whose base got a new history from an in-place write after the view was
    taken: its own history would route gradients through the base's old values."""
    for a in args:
        if isinstance(a, Tensor) and a._view is not None and a._view[0]._ctx is not a._view[1]:
            raise RuntimeError(_STALE_VIEW)

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
