"""``Function``: one op of the engine (forward + backward), the op registry, the dispatch-policy
hook for autocast, op observers, and the backward engine.

Writing an op
-------------
Subclass :class:`Function`, give it a unique ``name`` (it is registered under that name in
:data:`registry`) and two static methods working on numpy arrays::

    class Square(Function):
        name = "square"

        @staticmethod
        def forward(ctx, x):               # x: the stored values, as numpy (math dtype)
            ctx.x = x                      # save what backward needs on ctx
            return x * x                   # the wrapper rounds this once to ctx.fmt

        @staticmethod
        def backward(ctx, grad):           # grad: gradient of the output (math dtype)
            return (2 * ctx.x * grad,)     # one entry per positional argument (None: no grad)

    y = Square.apply(x)

``Function.apply`` does everything else, the same way for every op:

1. offers the positional arguments to the dispatch policy (:func:`set_dispatch_policy`), which
   may replace tensors by cast copies (autocast);
2. picks the *compute format* ``ctx.fmt`` (:meth:`Function.compute_format`: promotion of the
   floating inputs, or "all the same" for matmul-like ops);
3. hands each tensor argument to ``forward`` as a numpy array in the op's *math dtype*
   (float32 for fp32, float64 for every other format) -- or, for ops whose
   ``forward_precision = "stored"``, in the storage container, unconverted;
4. rounds the result once to ``ctx.fmt`` (``"stored"`` ops return values already in the format);
5. records the node when grad mode is on and an input requires grad, with the version of every
   tensor the op keeps for its backward (:data:`SAVED_FOR_BACKWARD`; a result that shares its
   input's memory -- reshape, transpose, basic indexing -- is a view sharing its version counter).

In-place writes (``fill_``, ``zero_``, ``copy_``, ``t[i] = v``) count one version of the tensor
they write; a backward that needs a kept tensor whose version has moved raises PyTorch's
"modified by an inplace operation" error instead of using the new values.

In backward the engine gives ``backward`` the output gradient (a value of ``ctx.fmt``), rounds
each returned input gradient once to ``ctx.fmt``, and then -- where an input's own format
differs (an implicit promotion) -- casts it to that input's format, exactly like a cast node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..formats import Format
from .grad_mode import is_grad_enabled
from .hooks import RemovableHandle
from .precision import _info, contains, result_format, to_format
from .registry import registry
from .tensor import Tensor, _check_views

__all__ = [
    "Function",
    "registry",
    "set_dispatch_policy",
    "get_dispatch_policy",
    "register_op_observer",
    "backward",
]

_policy: Callable[[str, tuple], tuple] | None = None
_observers: dict[int, Callable] = {}


def set_dispatch_policy(policy: Callable[[str, tuple], tuple] | None):
    """Install the dispatch policy; returns the previous one (``None``: no policy).

    ``policy(op_name, args) -> args`` is called by :meth:`Function.apply` before every op runs
    (every op in :data:`registry` except those with ``dispatch = False``: the cast op itself),
    in every thread and grad mode. ``args`` is the tuple of the op's positional arguments:
    :class:`Tensor` inputs and plain values (dims, flags, ``None`` for a missing bias, ...).
    The policy returns a tuple of the same length, typically with some tensors replaced by
    ``t.to(fmt)`` -- a cast node, so gradients flow back to each source tensor in its own
    format. It may also raise (an op that is unsafe in some mode). This is the single hook
    through which ``fpsim.amp.autocast`` attaches its per-op precision table; the policy keeps
    its own (thread-local) state and returns ``args`` unchanged when it is off.
    """
    global _policy
    prev, _policy = _policy, policy
    return prev


def get_dispatch_policy() -> Callable[[str, tuple], tuple] | None:
    """The installed dispatch policy, or None."""
    return _policy


def register_op_observer(fn: Callable[..., None]) -> RemovableHandle:
    """Call ``fn(phase, op_name, inputs, outputs)`` after every op, for tracing formats.

    ``phase`` is ``"forward"`` (inputs: the op's tensor arguments after the policy, outputs:
    ``(result,)``) or ``"backward"`` (inputs: ``(grad_output,)``, outputs: the input gradients
    as Tensors in the formats they are passed on in, ``None`` where there is none).
    Returns a handle whose ``remove()`` unregisters it.
    """
    handle = RemovableHandle(_observers)
    _observers[handle.id] = fn
    return handle


def _notify(phase: str, name: str, inputs: tuple, outputs: tuple) -> None:
    for fn in list(_observers.values()):
        fn(phase, name, inputs, outputs)


class Function:
    """Base class of every op. See the module docstring for how to write one.

    Class attributes:

    ``name``
        registry key (unique). Subclasses without their own ``name`` are not registered.
    ``forward_precision`` / ``backward_precision``
        ``"math"`` (default): arrays arrive in the math dtype and the wrapper rounds results
        once to the compute format. ``"stored"``: arrays arrive as stored (container dtype of
        the compute format) and results must already be values of the format (ops that only
        move or select values, and ops that round by themselves such as matmul). ``"raw"``:
        forward receives the Tensor arguments themselves and backward returns gradients
        already in each input's format (the cast op).
    ``dispatch``
        whether the dispatch policy sees this op (False only for the cast op).
    ``keeps_second_scalar``
        how a *scalar operand* enters the formula: a Python number, or a 0-dim tensor of a
        wider format that a dimensioned operand outranks (``fp16 [n] * fp32 0-dim`` computes in
        fp16). False (default): it is rounded to the compute format first, as PyTorch's CPU
        kernels cast every operand to the common dtype (add, sub, where, maximum, pow's
        exponent, ...). True (mul, div): as ATen's ``mul``/``div`` kernels read a scalar
        *second* operand at its original value (``original_scalar_value``), it is held at the
        op's opmath precision (float32 for every format stored in float32) and the op runs in
        that precision, its result rounded once to the format; a scalar *first* operand is
        rounded to the format like any other.

    The instance created for each call is the graph node (``ctx``); ``ctx.fmt`` is the compute
    format, ``ctx.out`` the stored output array, ``ctx.needs_input_grad`` one bool per argument.
    """

    name: str = ""
    forward_precision = "math"
    backward_precision = "math"
    dispatch = True
    keeps_second_scalar = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name:
            if name in registry:
                raise ValueError(f"an op named {name!r} is already registered")
            registry[name] = cls

    # ---- to be provided by each op -----------------------------------------------------------
    @staticmethod
    def forward(ctx, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad):  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def compute_format(cls, args: tuple, kwargs: dict) -> Format | None:
        """The format the op computes in: PyTorch's type promotion of the operands
        (:func:`~fpsim.autograd.precision.result_format`). Tensors with dimensions decide
        before 0-dim tensors, which decide before Python numbers ("weak" tensors): fp16 [n] *
        fp32 0-dim is fp16, fp16 0-dim * fp32 0-dim is fp32. Integer tensors never decide
        against a floating operand; no floating operand at all gives None (integer arithmetic
        in numpy). Ops that PyTorch runs on broadcast operands
        (:data:`BROADCAST_BEFORE_PROMOTION`) count every tensor as dimensioned."""
        return _promote_args(args, by_dim=cls.name not in BROADCAST_BEFORE_PROMOTION)

    @classmethod
    def output_format(cls, args: tuple, fmt: Format | None) -> Format | None:
        """The format the output is rounded to: the compute format, unless an op says
        otherwise (layer_norm's mixed-type rule)."""
        return fmt

    # ---- the one wrapper every op goes through -----------------------------------------------
    @classmethod
    def apply(cls, *args, **kwargs):
        if _policy is not None and cls.dispatch:
            args = tuple(_policy(cls.name, args))
        grad_on = is_grad_enabled()
        if grad_on:
            _check_views(args)
        fmt = cls.compute_format(args, kwargs)
        ctx = cls.__new__(cls)
        ctx.fmt = fmt
        out_fmt = cls.output_format(args, fmt)
        if out_fmt is not fmt:
            ctx.out_fmt = out_fmt
        stored = cls.forward_precision == "stored"
        if fmt is None:
            xs = tuple(a.data if isinstance(a, Tensor) else a for a in args)
            with np.errstate(all="ignore"):  # 1 / 0 is inf here too, without a warning
                out = np.asarray(cls.forward(ctx, *xs, **kwargs))
            if out.dtype.kind == "f":  # an integer op with a real result: default format fp32
                out_fmt = ctx.fmt = _default_format()
                out = to_format(out, out_fmt)
            else:
                out_fmt = None
            res = Tensor._make(out, out_fmt)
            _link_view(res, args)
            if _observers:
                _notify("forward", cls.name, _tensors(args), (res,))
            return res
        info = _info(fmt)
        if cls.forward_precision == "raw":  # the op reads its Tensor arguments itself (cast)
            xs = args
        else:
            work = info.container if stored else info.math
            if cls.keeps_second_scalar and _is_scalar_operand(args[1], fmt):
                # opmath: the wide scalar kept, the op evaluated in float32 (fp64: float64)
                work = ctx.work = _opmath_dtype(fmt)
            xs = tuple(
                _to_work(a, work, fmt, stored, cls.keeps_second_scalar and i == 1)
                if isinstance(a, Tensor)
                else a
                for i, a in enumerate(args)
            )
        with np.errstate(all="ignore"):  # inf/NaN are values here, as in PyTorch: no warnings
            out = cls.forward(ctx, *xs, **kwargs)
        out_fmt = getattr(ctx, "out_fmt", fmt)
        if stored or cls.forward_precision == "raw":
            out = np.asarray(out)
            if out.dtype != _info(out_fmt).container:
                out = out.astype(_info(out_fmt).container)
        else:
            out = to_format(out, out_fmt)
        requires = grad_on and any(isinstance(a, Tensor) and a.requires_grad for a in args)
        res = Tensor._make(out, out_fmt, requires)
        _link_view(res, args)
        if requires:
            ctx.inputs = tuple(
                a if isinstance(a, Tensor) and a.requires_grad else None for a in args
            )
            # the nodes the inputs came from, now: a later in-place write that records a new
            # node for an input must not reroute this node's gradient (PyTorch's edges)
            ctx._edges = tuple(None if a is None else a._ctx for a in ctx.inputs)
            ctx.needs_input_grad = tuple(a is not None for a in ctx.inputs)
            ctx.out = out
            ctx.out_fmt = out_fmt
            ctx.hooks = None
            ctx.retain = None
            ctx._saved = _save_versions(cls.name, args, ctx.needs_input_grad, res)
            res._ctx = ctx
        if _observers:
            _notify("forward", cls.name, _tensors(args), (res,))
        return res

    def _backward(self, grad: np.ndarray) -> list:
        """Run this node's backward: grad (a value of the output format, container dtype) ->
        one container array per input (or None), each in that input's format."""
        for t, counter, version in self._saved:
            if counter[0] != version:
                raise RuntimeError(_modified_message(self, t, counter[0], version))
        info = _info(self.fmt)
        mode = self.backward_precision
        work = getattr(self, "work", info.math)  # opmath for a kept scalar operand
        g = grad if mode != "math" else grad.astype(work, copy=False)
        with np.errstate(all="ignore"):
            grads = type(self).backward(self, g)
        if not isinstance(grads, tuple):
            grads = (grads,)
        out = []
        for inp, gi in zip(self.inputs, grads, strict=False):
            if inp is None or gi is None:
                out.append(None)
                continue
            gi = np.asarray(gi)
            if gi.shape != inp.data.shape:
                raise RuntimeError(
                    f"{self.name} backward returned a gradient of shape {gi.shape} for an input "
                    f"of shape {inp.data.shape}"
                )
            if mode == "raw":  # the op returned the gradient in the input's format itself
                out.append(gi)
                continue
            if mode == "math":
                gi = to_format(gi, self.fmt)  # the backward runs in the forward's format
            elif gi.dtype != info.container:
                gi = gi.astype(info.container)
            if inp.format != self.fmt:  # implicit promotion: cast back to the input's format
                gi = to_format(gi, inp.format)
            out.append(gi)
        if _observers:
            gouts = tuple(
                None if gi is None else Tensor._make(gi, inp.format)
                for inp, gi in zip(self.inputs, out, strict=False)
            )
            _notify("backward", self.name, (Tensor._make(grad, self.out_fmt),), gouts)
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__}Backward>"


def _default_format() -> Format:
    from ..formats import fp32

    return fp32


def _tensors(args: tuple) -> tuple:
    return tuple(a for a in args if isinstance(a, Tensor))


def _opmath_dtype(fmt: Format) -> np.dtype:
    """PyTorch's opmath for ``fmt``: float32 for every format stored in float32 (fp16, bf16,
    fp8, ...: ``at::opmath_type``), float64 for the others."""
    return np.dtype(np.float32) if _info(fmt).container == np.float32 else np.dtype(np.float64)


def _is_scalar_operand(t, fmt: Format | None) -> bool:
    """A Python number (weak tensor) or 0-dim tensor whose format the compute format ``fmt``
    does not hold: an operand that did not decide the compute format and is not a value of it."""
    if not isinstance(t, Tensor) or t.format is None or fmt is None:
        return False
    f = t.format
    return f is not fmt and f != fmt and not contains(fmt, f)


def _to_work(t, work: np.dtype, fmt: Format, stored: bool, keep_scalar: bool = False):
    """A tensor argument as the op's forward receives it (``work``: the math or container
    dtype of the compute format ``fmt``, or the opmath dtype when a scalar is kept).

    A scalar operand (:func:`_is_scalar_operand`) is rounded to ``fmt`` first, as PyTorch's
    CPU kernels cast it to the common dtype -- unless ``keep_scalar`` (the second operand of
    mul and div, see ``Function.keeps_second_scalar``): then it is held at opmath precision,
    as ATen's ``original_scalar_value``."""
    f = t.format
    if f is None:
        return t.data
    if f is not fmt and f != fmt and not contains(fmt, f):
        if keep_scalar and not stored:
            return t.data.astype(_opmath_dtype(fmt), copy=False).astype(work, copy=False)
        return to_format(t.data, fmt).astype(work, copy=False)
    return t.data.astype(work, copy=False)


#: Ops that PyTorch runs on operands it broadcast first (``mse_loss`` calls
#: ``broadcast_tensors``), so a 0-dim operand counts as dimensioned in their promotion.
BROADCAST_BEFORE_PROMOTION = frozenset({"mse_loss"})


def _promote_args(args: tuple, by_dim: bool = True) -> Format | None:
    """The compute format of an op's arguments by PyTorch's promotion (``result_format``):
    tensors with dimensions, then 0-dim tensors, then Python numbers (weak tensors).
    ``by_dim=False`` puts every tensor in the first group."""
    groups: tuple[list, list, list] = ([], [], [])  # dimensioned, 0-dim, Python numbers
    for a in args:
        if isinstance(a, Tensor) and a.format is not None:  # integers never decide
            groups[2 if a._weak else 0 if (a.data.ndim or not by_dim) else 1].append(a.format)
    return result_format(*groups)


# ---- views and the version counter -----------------------------------------------------------


def _link_view(res, args: tuple) -> None:
    """Make ``res`` a view when its array shares memory with a tensor argument's (reshape,
    transpose, permute, basic indexing): it shares that tensor's version counter and records
    the base tensor and the base's node at this moment, as PyTorch's views do."""
    out = res.data
    owner = out.base is not None  # else only the argument's own array can be out itself
    for a in args:
        if not isinstance(a, Tensor):
            continue
        if a.data is out or (owner and a.data.size and np.may_share_memory(out, a.data)):
            res._vc = a._counter()
            base = a if a._view is None else a._view[0]
            res._view = (base, base._ctx)
            return




def _saves_pow(args: tuple) -> tuple:
    # ``x ** 2.0`` keeps x; ``2.0 ** x`` and ``x ** y`` also keep the exponent and the result
    if len(args) > 1 and getattr(args[1], "_weak", False):
        return ((0, None),)
    return ((0, None), (1, None), ("out", None))


def _saves_max(args: tuple) -> tuple:
    # ``max()`` keeps its input and result; ``max(dim)`` only its (integer) indices
    return ((0, None), ("out", None)) if len(args) < 2 or args[1] is None else ()


_INPUT = ((0, None),)
_RESULT = (("out", None),)
_CROSS = ((0, (1,)), (1, (0,)))  # each operand is kept for the other's gradient
_BOTH = ((0, None), (1, None))
_NOTHING = ("add", "sub", "neg", "sum", "mean", "reshape", "view", "transpose", "permute", "clone",
            "cat", "stack", "cast", "dropout", "fill_", "zero_", "copy_", "index_put_",
            "cumsum")  # fmt: skip

#: Which tensors each op keeps for its backward, as PyTorch's (``derivatives.yaml``, checked
#: against a live PyTorch by tests/test_autograd_inplace_promotion.py): ``(slot, when)`` pairs,
#: slot a positional argument index or ``"out"`` (the result), ``when`` None (always) or the
#: argument indices of which one must require grad; or a function of the arguments giving
#: those pairs. An op missing here keeps every tensor argument and its result. The version of
#: each kept tensor is recorded when the op runs; backward raises if it changed since.
SAVED_FOR_BACKWARD: dict[str, Any] = {
    "mul": _CROSS,
    "div": ((0, (1,)), (1, (0, 1))),
    "__rtruediv__": (),  # reciprocal(x) * number: PyTorch keeps 1/x, an intermediate
    "pow": _saves_pow,
    "exp": _RESULT,
    "log": _INPUT,
    "log1p": _INPUT,
    "expm1": _RESULT,
    "reciprocal": _RESULT,
    "maximum": _BOTH,
    "minimum": _BOTH,
    "softplus": _INPUT,
    "sqrt": _RESULT,
    "rsqrt": _RESULT,
    "abs": _INPUT,
    "clamp": _INPUT,
    "relu": _RESULT,
    "gelu": _INPUT,
    "silu": _INPUT,
    "tanh": _RESULT,
    "sigmoid": _RESULT,
    "matmul": _CROSS,
    "mm": _CROSS,
    "linear": _CROSS,
    "bmm": _CROSS,
    "baddbmm": ((1, (2,)), (2, (1,))),
    "einsum": _CROSS,
    "conv1d": _BOTH,
    "conv2d": _BOTH,
    "max_pool2d": _INPUT,
    "avg_pool2d": _INPUT,
    "adaptive_avg_pool2d": _INPUT,
    "scaled_dot_product_attention": ((0, None), (1, None), (2, None), ("out", None)),
    # the weight alone requiring grad: PyTorch's composite form keeps x * rstd, not x
    "rms_norm": ((0, (0,)), (2, (0,))),
    "group_norm": ((0, None), (2, None)),
    "batch_norm": _BOTH,
    "max": _saves_max,
    "var": _INPUT,
    "softmax": _RESULT,
    "log_softmax": _RESULT,
    "logsumexp": ((0, None), ("out", None)),
    "layer_norm": ((0, None), (2, None), (3, None)),
    "embedding": ((0, (1,)),),
    "masked_fill": ((1, None),),
    "index": ((1, (0,)),),
    "where": ((0, (1, 2)),),
    "mse_loss": ((0, None), (1, None)),
    "cross_entropy": ((1, None),),
    "nll_loss": ((0, None), (1, None)),
    "binary_cross_entropy_with_logits": ((0, None), (1, None)),
    "binary_cross_entropy": ((0, None), (1, None)),
    **dict.fromkeys(_NOTHING, ()),
}


def _save_versions(name: str, args: tuple, needs: tuple, res) -> tuple:
    """``(tensor or None for the result, its version counter, the version now)`` for each
    tensor the op keeps for its backward (see :data:`SAVED_FOR_BACKWARD`)."""
    spec = SAVED_FOR_BACKWARD.get(name)
    if spec is None:
        spec = tuple((i, None) for i in range(len(args))) + (("out", None),)
    elif callable(spec):
        spec = spec(args)
    saved = []
    for slot, when in spec:
        if when is not None and not any(needs[i] for i in when if i < len(needs)):
            continue
        t = res if slot == "out" else (args[slot] if slot < len(args) else None)
        if not isinstance(t, Tensor) or t._weak:  # Python numbers cannot be modified
            continue
        counter = t._counter()
        saved.append((None if slot == "out" else t, counter, counter[0]))
    return tuple(saved)


def _type_string(fmt: Format | None, data: np.ndarray) -> str:
    """A tensor's type as PyTorch's message prints it (``torch.FloatTensor``, ...)."""
    from ..formats import bf16, fp16, fp32, fp64

    if fmt is None:
        names = {"int64": "torch.LongTensor", "bool": "torch.BoolTensor"}
        return names.get(str(data.dtype), f"numpy.{data.dtype}")
    for f, name in ((fp32, "torch.FloatTensor"), (fp16, "torch.HalfTensor"),
                    (bf16, "CPUBFloat16Type"), (fp64, "torch.DoubleTensor")):  # fmt: skip
        if fmt == f:
            return name
    return f"fpsim.{fmt.name}"


def _modified_message(node, t, now: int, then: int) -> str:
    """PyTorch's error for a kept tensor (``t``; None: the node's result) whose version moved."""
    if t is None:
        fmt, data, maker = node.out_fmt, node.out, node
    else:
        fmt, data, maker = t.format, t.data, t._ctx
    shape = ", ".join(str(n) for n in data.shape)
    which = "" if maker is None else f", which is output 0 of {type(maker).__name__},"
    return (
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{_type_string(fmt, data)} [{shape}]]{which} is at version {now}; expected "
        f"version {then} instead. Hint: the backward of {type(node).__name__} needs the values "
        "it saw; clone() the tensor before modifying it in place, or modify it after backward."
    )


def _same_format(name: str, args: tuple) -> Format | None:
    """The compute format of matmul-like ops: every floating input must have the same one."""
    fmts = [a.format for a in args if isinstance(a, Tensor) and a.format is not None]
    for f in fmts[1:]:
        if f != fmts[0]:
            raise RuntimeError(
                f"{name}: expected both operands to have the same format, got {fmts[0].name} "
                f"and {f.name} (cast one with .to(...), or run the op under autocast)"
            )
    if len(fmts) < sum(isinstance(a, Tensor) for a in args):
        raise RuntimeError(f"{name}: expected floating-point operands")
    return fmts[0] if fmts else None


# ---- the backward engine ---------------------------------------------------------------------


def backward(root, grad: Any = None) -> None:
    """``root.backward(grad)``: the reverse sweep (:mod:`fpsim.autograd.engine`)."""
    root.backward(grad)
