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
5. records the node when grad mode is on and an input requires grad.

In backward the engine gives ``backward`` the output gradient (a value of ``ctx.fmt``), rounds
each returned input gradient once to ``ctx.fmt``, and then -- where an input's own format
differs (an implicit promotion) -- casts it to that input's format, exactly like a cast node.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..formats import Format
from .grad_mode import is_grad_enabled
from .hooks import RemovableHandle
from .precision import _info, promote_formats, to_format

__all__ = [
    "Function",
    "registry",
    "set_dispatch_policy",
    "get_dispatch_policy",
    "register_op_observer",
    "backward",
]

#: name -> Function subclass, for every op of the engine (autocast attaches policies by name).
registry: dict[str, type[Function]] = {}

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

    The instance created for each call is the graph node (``ctx``); ``ctx.fmt`` is the compute
    format, ``ctx.out`` the stored output array, ``ctx.needs_input_grad`` one bool per argument.
    """

    name: str = ""
    forward_precision = "math"
    backward_precision = "math"
    dispatch = True

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
        """The format the op computes in: PyTorch-style promotion of the floating tensor
        inputs. Python scalars ("weak" tensors) never widen it; integer tensors are ignored;
        no floating input at all gives None (integer arithmetic in numpy)."""
        return _promote_args(args)

    @classmethod
    def output_format(cls, args: tuple, fmt: Format | None) -> Format | None:
        """The format the output is rounded to: the compute format, unless an op says
        otherwise (layer_norm's mixed-type rule)."""
        return fmt

    # ---- the one wrapper every op goes through -----------------------------------------------
    @classmethod
    def apply(cls, *args, **kwargs):
        from .tensor import Tensor

        if _policy is not None and cls.dispatch:
            args = tuple(_policy(cls.name, args))
        fmt = cls.compute_format(args, kwargs)
        ctx = cls.__new__(cls)
        ctx.fmt = fmt
        out_fmt = cls.output_format(args, fmt)
        if out_fmt is not fmt:
            ctx.out_fmt = out_fmt
        stored = cls.forward_precision == "stored"
        if fmt is None:
            xs = tuple(a.data if isinstance(a, Tensor) else a for a in args)
            out = np.asarray(cls.forward(ctx, *xs, **kwargs))
            if out.dtype.kind == "f":  # an integer op with a real result: default format fp32
                out_fmt = ctx.fmt = _default_format()
                out = to_format(out, out_fmt)
            else:
                out_fmt = None
            res = Tensor._make(out, out_fmt)
            if _observers:
                _notify("forward", cls.name, _tensors(args), (res,))
            return res
        info = _info(fmt)
        if cls.forward_precision == "raw":  # the op reads its Tensor arguments itself (cast)
            xs = args
        else:
            work = info.container if stored else info.math
            xs = tuple(_to_work(a, work) if isinstance(a, Tensor) else a for a in args)
        with np.errstate(all="ignore"):  # inf/NaN are values here, as in PyTorch: no warnings
            out = cls.forward(ctx, *xs, **kwargs)
        out_fmt = getattr(ctx, "out_fmt", fmt)
        if stored or cls.forward_precision == "raw":
            out = np.asarray(out)
            if out.dtype != _info(out_fmt).container:
                out = out.astype(_info(out_fmt).container)
        else:
            out = to_format(out, out_fmt)
        requires = is_grad_enabled() and any(
            isinstance(a, Tensor) and a.requires_grad for a in args
        )
        res = Tensor._make(out, out_fmt, requires)
        if requires:
            ctx.inputs = tuple(
                a if isinstance(a, Tensor) and a.requires_grad else None for a in args
            )
            ctx.needs_input_grad = tuple(a is not None for a in ctx.inputs)
            ctx.out = out
            ctx.out_fmt = out_fmt
            ctx.hooks = None
            ctx.retain = None
            res._ctx = ctx
        if _observers:
            _notify("forward", cls.name, _tensors(args), (res,))
        return res

    def _backward(self, grad: np.ndarray) -> list:
        """Run this node's backward: grad (a value of the output format, container dtype) ->
        one container array per input (or None), each in that input's format."""
        info = _info(self.fmt)
        mode = self.backward_precision
        g = grad if mode != "math" else grad.astype(info.math, copy=False)
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
            from .tensor import Tensor

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
    from .tensor import Tensor

    return tuple(a for a in args if isinstance(a, Tensor))


def _to_work(t, work: np.dtype) -> np.ndarray:
    if t.format is None:
        return t.data
    return t.data.astype(work, copy=False)


def _promote_args(args: tuple) -> Format | None:
    """PyTorch promotion: strong floating tensors decide; weak (Python scalar) ones only when
    there is no strong floating input (int tensor * 0.5 -> fp32)."""
    from .tensor import Tensor

    strong = []
    weak = None
    for a in args:
        if isinstance(a, Tensor) and a.format is not None:
            if a._weak:
                weak = a.format
            else:
                strong.append(a.format)
    if strong:
        return strong[0] if len(strong) == 1 else promote_formats(strong)
    if weak is not None:
        return weak
    return None


def _same_format(name: str, args: tuple) -> Format | None:
    """The compute format of matmul-like ops: every floating input must have the same one."""
    from .tensor import Tensor

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


def _add(a: np.ndarray, b: np.ndarray, fmt: Format) -> np.ndarray:
    """Sum of two gradient contributions, rounded once to the tensor's format."""
    m = _info(fmt).math
    return to_format(a.astype(m, copy=False) + b.astype(m, copy=False), fmt)


def _apply_hooks(hooks: dict | None, g: np.ndarray, fmt: Format, shape: tuple) -> np.ndarray:
    if not hooks:
        return g
    from .tensor import Tensor

    for fn in list(hooks.values()):
        r = fn(Tensor._make(g, fmt))
        if r is not None:
            r = r.data if isinstance(r, Tensor) else np.asarray(r)
            if r.shape != shape:
                raise RuntimeError(f"hook returned a gradient of shape {r.shape}, expected {shape}")
            g = to_format(r, fmt)
    return g


def backward(root, grad: Any = None) -> None:
    """Reverse-mode sweep from ``root``: accumulate gradients into the ``.grad`` of every leaf
    that requires grad (and of non-leaves that called ``retain_grad()``).

    Nodes run in reverse topological order; a node runs once, with the sum of all its incoming
    gradients (rounded to the output's format). Tensor hooks see that summed gradient and may
    replace it. Graphs are kept after backward (as ``retain_graph=True``); higher-order
    gradients (``create_graph``) are not supported.
    """
    from .tensor import Tensor

    if not root.requires_grad:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    fmt = root.format
    if grad is None:
        if root.data.size != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        g = np.ones(root.data.shape, _info(fmt).container)
    else:
        g = grad.data if isinstance(grad, Tensor) else np.asarray(grad)
        if g.shape != root.data.shape:
            raise RuntimeError(f"grad has shape {g.shape}, expected {root.data.shape}")
        g = to_format(g, fmt)

    # leaf id -> [leaf, summed gradient, whether that array is ours alone (no copy needed)]
    leaf_grads: dict[int, list] = {}
    if root._ctx is None:
        leaf_grads[id(root)] = [root, g, False]
    else:
        order = _topological(root._ctx)
        grads: dict[int, np.ndarray] = {id(root._ctx): g}
        for node in reversed(order):
            gn = grads.pop(id(node), None)
            if gn is None:
                continue
            gn = _apply_hooks(node.hooks, gn, node.out_fmt, node.out.shape)
            if node.retain is not None:
                t = node.retain()
                if t is not None:
                    t.grad = Tensor._make(gn.copy(), node.out_fmt)
            for inp, gi in zip(node.inputs, node._backward(gn), strict=False):
                if gi is None:
                    continue
                if inp._ctx is None:
                    entry = leaf_grads.get(id(inp))
                    if entry is None:
                        # a pass-through or view of the incoming gradient must be copied
                        leaf_grads[id(inp)] = [inp, gi, not np.may_share_memory(gi, gn)]
                    else:
                        entry[1], entry[2] = _add(entry[1], gi, inp.format), True
                else:
                    k = id(inp._ctx)
                    grads[k] = gi if k not in grads else _add(grads[k], gi, inp.format)
    for t, gl, owned in leaf_grads.values():
        if t._hooks:
            gl, owned = _apply_hooks(t._hooks, gl, t.format, t.data.shape), False
        if t.grad is None:
            container = _info(t.format).container
            owned = owned and gl.dtype == container and gl.flags.writeable and gl.base is None
            t.grad = Tensor._make(gl if owned else np.array(gl, dtype=container), t.format)
        else:
            acc = _add(t.grad.data, gl, t.format)
            if t.grad.data.flags.writeable and t.grad.data.shape == acc.shape:
                np.copyto(t.grad.data, acc)  # accumulate in place, as PyTorch does
            else:
                t.grad = Tensor._make(acc, t.format)


def _topological(start) -> list:
    """Nodes reachable from ``start``, inputs before the nodes that consume them (iterative)."""
    order: list = []
    visited: set[int] = set()
    stack = [(start, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for inp in node.inputs:
            if inp is not None and inp._ctx is not None and id(inp._ctx) not in visited:
                stack.append((inp._ctx, False))
    return order


def _retain_ref(t) -> weakref.ref:
    return weakref.ref(t)
