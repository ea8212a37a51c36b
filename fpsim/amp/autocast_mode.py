"""``autocast``: run each op in the precision PyTorch's autocast would choose for it.

>>> import fpsim
>>> from fpsim.amp import autocast, get_autocast_dtype, is_autocast_enabled
>>> x = fpsim.randn(4, 8, generator=0)
>>> w = fpsim.randn(3, 8, generator=1, requires_grad=True)      # fp32 leaves, as usual
>>> with autocast("cuda"):                    # cuda: fp16 by default
...     y = fpsim.nn.functional.linear(x, w)  # LOW: runs in fp16
...     p = y.softmax(-1)                     # FP32 on cuda: runs in fp32
...     print(is_autocast_enabled("cuda"), get_autocast_dtype("cuda").name)
True fp16
>>> y.format.name, p.format.name, is_autocast_enabled("cuda")
('fp16', 'fp32', False)
>>> p.sum().backward(); w.grad.format.name      # the cast node sends fp32 gradients back
'fp32'

How it works
------------
The engine calls one *dispatch policy* before every op (:func:`fpsim.autograd.set_dispatch_policy`;
installed the first time autocast is turned on). When autocast is on in the calling thread, the
policy looks the op's name up in the table of the active device type and casts the op's floating
tensor arguments with recorded cast nodes (``t.to(fmt)``), so each gradient flows back to its
source tensor in the source's own format:

* **LOW** -- every floating input to the autocast dtype (fp16 on "cuda", bf16 on "cpu" by
  default): matmul, mm, bmm, baddbmm, einsum, linear, conv1d, conv2d,
  scaled_dot_product_attention;
* **FP32** -- every floating input to fp32 (losses; on "cuda" also exp, log, softmax, sum,
  layer_norm, pow, ...);
* **PROMOTE** -- every floating input to the widest input format (cat, stack on "cpu");
* **native-widest** / **untouched** -- autocast does nothing; the engine's own promotion
  applies (add, mul, where, ...; relu, reshape, ...). Ops on no list are untouched;
* **error** -- ``binary_cross_entropy`` under "cuda" autocast raises (use the logits version).

float64 tensors (and every format stored in float64), integer tensors and Python numbers are
never cast. Outputs keep their format after the region. :func:`policy_table` prints the tables.

State, as in PyTorch: per device type and **thread-local** (a new thread starts with autocast
off and the default dtypes); nested regions restore the outer state exactly (enabled flag, dtype,
cache flag) on exit; usable as a context manager and a decorator. The **weight cache**: inside
the outermost region, the cast of an fp32 leaf tensor that requires grad (a parameter) to the
autocast dtype is made once and reused; other tensors are cast at every use;
``cache_enabled=False`` turns it off; leaving the outermost region clears it. An in-place update
of a weight inside the region is therefore not seen by later ops of that region (as in PyTorch).

Where fpsim differs from PyTorch
--------------------------------
* **One simulated device.** PyTorch applies ``autocast("cuda")`` only to CUDA tensors and
  ``autocast("cpu")`` only to CPU tensors. fpsim tensors have no device, so ``device_type``
  selects the *policy table and the default dtype*, and the region applies to **all** tensors.
  When regions of both device types are enabled at once, the **innermost enabled region wins**
  (the device type entered most recently and still enabled); an inner ``enabled=False`` region
  of the *other* device type changes nothing (as an inner ``autocast("cpu", enabled=False)``
  does not touch CUDA tensors in PyTorch).
* **Any narrower format as dtype (beyond PyTorch).** Besides fp16 and bf16, any Format that fp32
  holds exactly (fp8_e4m3, fp8_e5m2, tf32, ``Format(e, m)``) is accepted on both device types:
  LOW ops and their backward then run in that format. fp32, fp64 and wider formats warn and
  disable autocast on both device types (PyTorch's warning; on "cuda" it also rejects bf16 on
  GPUs without bf16 support, which fpsim does not model).
* The weight cache is keyed by (tensor, target format): a nested region with another dtype
  makes its own copy. The cache and the nesting depth are per thread.
* PROMOTE ops (``cat``, ``stack``) given a low-precision input that is not the autocast dtype
  (bf16 under fp16 autocast) promote it like any other input; PyTorch 2.13 raises
  ``RuntimeError: Unexpected floating ScalarType in at::autocast::prioritize`` there.
* Only the ops the engine has can be observed; the tables also list PyTorch's other ops
  (``addmm``, ``prod``, ...), which apply to any ``Function`` registered under those names.
  ``minimum`` is on no list and is shown native-widest like ``maximum`` (autocast leaves both
  to their own promotion); ``masked_fill`` and ``adaptive_avg_pool2d``, on no list either, are
  untouched.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

from ..autograd import function as _function
from ..autograd.precision import contains, promote_formats
from ..autograd.tensor import Tensor
from ..formats import Format, FormatLike, bf16, fp16, fp32, get_format

__all__ = [
    "autocast",
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
    "is_autocast_cache_enabled",
    "set_autocast_cache_enabled",
    "clear_autocast_cache",
    "op_policy",
    "policy_table",
    "LOW",
    "FP32",
    "PROMOTE",
    "WIDEST",
    "UNTOUCHED",
    "ERROR",
    "DEVICE_TYPES",
]

DEVICE_TYPES = ("cpu", "cuda")

# ---- the policy tables -----------------------------------------------------------------------
LOW = "LOW"  #: inputs cast to the autocast dtype
FP32 = "FP32"  #: inputs cast to fp32
PROMOTE = "PROMOTE"  #: inputs cast to the widest input format
WIDEST = "native-widest"  #: autocast does nothing; the op's own promotion gives the widest
UNTOUCHED = "untouched"  #: autocast does nothing; the op runs in its input format
ERROR = "error"  #: the op raises under autocast

_L, _F, _P, _W, _U, _E = LOW, FP32, PROMOTE, WIDEST, UNTOUCHED, ERROR

#: (fpsim op name, PyTorch name, cpu policy, cuda policy). Rows of ops the engine has come first,
#: in the order of the reference table; then PyTorch ops the engine does not have (they apply to
#: any Function registered under that name). Ops on no row are untouched.
_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("matmul", "matmul, __matmul__", _L, _L),
    ("mm", "mm", _L, _L),
    ("bmm", "bmm", _L, _L),
    ("baddbmm", "baddbmm", _L, _L),
    ("einsum", "einsum", _L, _L),
    ("linear", "linear", _L, _L),
    ("conv1d", "conv1d", _L, _L),
    ("conv2d", "conv2d", _L, _L),
    ("scaled_dot_product_attention", "scaled_dot_product_attention", _L, _L),
    ("relu", "relu", _U, _U),
    ("gelu", "gelu", _U, _U),
    ("silu", "silu", _U, _U),
    ("tanh", "tanh", _U, _U),
    ("sigmoid", "sigmoid", _U, _U),
    ("softplus", "softplus", _U, _F),
    ("softmax", "softmax", _U, _F),
    ("log_softmax", "log_softmax", _U, _F),
    ("exp", "exp", _U, _F),
    ("expm1", "expm1", _U, _F),
    ("log", "log", _U, _F),
    ("log1p", "log1p", _U, _F),
    ("sqrt", "sqrt", _U, _U),
    ("rsqrt", "rsqrt", _U, _F),
    ("reciprocal", "reciprocal", _U, _F),
    ("abs", "abs", _U, _U),
    ("clamp", "clamp", _U, _U),
    ("pow", "pow, __pow__", _U, _F),
    ("__rtruediv__", "__rtruediv__", _U, _F),
    ("sum", "sum", _U, _F),
    ("mean", "mean", _U, _U),
    ("cumsum", "cumsum", _U, _F),
    ("logsumexp", "logsumexp", _U, _F),
    ("var", "var", _U, _U),
    ("layer_norm", "layer_norm", _U, _F),
    ("rms_norm", "rms_norm", _U, _F),
    ("batch_norm", "batch_norm (eval)", _U, _U),
    ("group_norm", "group_norm", _U, _F),
    ("mse_loss", "mse_loss", _F, _F),
    ("cross_entropy", "cross_entropy", _F, _F),
    ("nll_loss", "nll_loss", _F, _F),
    ("binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits", _F, _F),
    ("binary_cross_entropy", "binary_cross_entropy", _F, _E),
    ("cat", "cat", _P, _W),
    ("stack", "stack", _P, _W),
    ("add", "add", _W, _W),
    ("sub", "sub", _W, _W),
    ("mul", "mul", _W, _W),
    ("div", "div", _W, _W),
    ("maximum", "maximum", _W, _W),
    ("minimum", "minimum", _W, _W),
    ("where", "where", _W, _W),
    ("max", "max (reduction)", _U, _U),
    ("dropout", "dropout (training)", _U, _U),
    ("embedding", "embedding", _U, _U),
    ("avg_pool2d", "avg_pool2d", _U, _U),
    ("max_pool2d", "max_pool2d", _U, _U),
    ("adaptive_avg_pool2d", "adaptive_avg_pool2d", _U, _U),
    ("masked_fill", "masked_fill", _U, _U),
    ("neg", "neg", _U, _U),
    ("reshape", "reshape", _U, _U),
    ("view", "view", _U, _U),
    ("transpose", "transpose", _U, _U),
    ("permute", "permute", _U, _U),
    ("clone", "clone", _U, _U),
    ("index", "__getitem__", _U, _U),
    # PyTorch ops fpsim's engine does not have (for Functions registered under these names)
    ("mv", "mv", _U, _L),
    ("dot", "dot", _U, _P),
    ("addmm", "addmm", _L, _L),
    ("addbmm", "addbmm", _L, _L),
    ("tensordot", "tensordot", _L, _P),
    ("conv_transpose2d", "conv_transpose2d", _L, _L),
    ("prelu", "prelu", _L, _L),
    ("prod", "prod", _F, _F),
    ("std", "std", _U, _U),
    ("norm", "norm", _U, _F),
    ("cosine_similarity", "cosine_similarity", _W, _F),
    ("l1_loss", "l1_loss", _F, _F),
    ("smooth_l1_loss", "smooth_l1_loss", _F, _F),
    ("huber_loss", "huber_loss", _F, _F),
    ("kl_div", "kl_div", _F, _F),
    ("addcmul", "addcmul", _W, _P),
    ("addcdiv", "addcdiv", _W, _P),
)

#: device type -> {op name: policy}
POLICIES: dict[str, dict[str, str]] = {
    "cpu": {r[0]: r[2] for r in _ROWS},
    "cuda": {r[0]: r[3] for r in _ROWS},
}
_TORCH_NAMES = {r[0]: r[1] for r in _ROWS}

_DEFAULT_DTYPE = {"cpu": bf16, "cuda": fp16}

_BCE_MESSAGE = (
    "fpsim.nn.functional.binary_cross_entropy and fpsim.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using "
    "fpsim.nn.functional.binary_cross_entropy_with_logits\n"
    "or fpsim.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast."
)


def op_policy(op: str, device_type: str) -> str:
    """The autocast policy of op ``op`` (a registry name) under ``device_type``:
    ``"LOW"``, ``"FP32"``, ``"PROMOTE"``, ``"native-widest"``, ``"untouched"`` or ``"error"``.

    >>> op_policy("linear", "cpu"), op_policy("softmax", "cpu"), op_policy("softmax", "cuda")
    ('LOW', 'untouched', 'FP32')
    """
    return POLICIES[_check_device(device_type)].get(op, UNTOUCHED)


def policy_table(ops: str | list[str] = "engine", device_types=DEVICE_TYPES) -> str:
    """The policy tables as text: one row per op, one column per device type.

    ``ops``: ``"engine"`` (every op in :data:`fpsim.autograd.registry`, default), ``"all"``
    (also PyTorch's ops that the engine lacks) or a list of op names.

    >>> print(policy_table(["linear", "softmax", "binary_cross_entropy"]))
    op                    PyTorch name          cpu (bf16/fp16)  cuda (fp16/bf16)
    linear                linear                LOW              LOW
    softmax               softmax               untouched        FP32
    binary_cross_entropy  binary_cross_entropy  FP32             error
    """
    known = [r[0] for r in _ROWS]
    if ops == "engine":
        reg = [n for n, f in _function.registry.items() if f.dispatch]
        names = [n for n in known if n in reg] + sorted(n for n in reg if n not in known)
    elif ops == "all":
        reg = [n for n, f in _function.registry.items() if f.dispatch]
        names = known + sorted(n for n in reg if n not in known)
    else:
        names = list(ops)
    devs = [_check_device(d) for d in device_types]
    head = ["op", "PyTorch name"] + [
        f"{d} ({'bf16/fp16' if d == 'cpu' else 'fp16/bf16'})" for d in devs
    ]
    rows = [head]
    for n in names:
        rows.append([n, _TORCH_NAMES.get(n, n)] + [op_policy(n, d) for d in devs])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


# ---- thread-local state ----------------------------------------------------------------------
class _State(threading.local):
    """Autocast state of one thread (a new thread starts with these defaults)."""

    def __init__(self) -> None:
        self.enabled = {"cpu": False, "cuda": False}
        self.dtype = dict(_DEFAULT_DTYPE)
        self.cache_enabled = True
        self.nesting = 0
        self.order: tuple[str, ...] = ("cuda", "cpu")  # most recently entered first
        self.active: str | None = None  # the device type whose table is in force
        self.saved: list[tuple] = []  # states to restore, one per open region
        self.cache: dict[tuple[int, Format], tuple[Any, Tensor]] = {}


_state = _State()


def _recompute_active(st: _State) -> None:
    st.active = next((d for d in st.order if st.enabled[d]), None)


def _check_device(device_type: Any) -> str:
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type not in DEVICE_TYPES:
        raise RuntimeError(
            f"User specified an unsupported autocast device_type '{device_type}' "
            f"(fpsim simulates {' and '.join(repr(d) for d in DEVICE_TYPES)})"
        )
    return device_type


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether autocast for ``device_type`` is on in this thread (PyTorch's
    ``torch.is_autocast_enabled(device_type)``; no argument: "cuda", as PyTorch's legacy form)."""
    return _state.enabled[_check_device(device_type)]


def set_autocast_enabled(device_type: str, enabled: bool) -> None:
    """Turn autocast for ``device_type`` on or off in this thread (what ``autocast`` does on
    entry). Turning it on makes ``device_type`` the innermost (winning) device type."""
    st = _state
    d = _check_device(device_type)
    st.enabled[d] = bool(enabled)
    if enabled:
        st.order = (d,) + tuple(x for x in st.order if x != d)
        _install()
    _recompute_active(st)


def get_autocast_dtype(device_type: str) -> Format:
    """The autocast dtype (a Format) for ``device_type`` in this thread: bf16 for "cpu" and fp16
    for "cuda" unless a region or :func:`set_autocast_dtype` chose another."""
    return _state.dtype[_check_device(device_type)]


def set_autocast_dtype(device_type: str, dtype: FormatLike) -> None:
    """Set the autocast dtype for ``device_type`` in this thread."""
    _state.dtype[_check_device(device_type)] = get_format(dtype)


def is_autocast_cache_enabled() -> bool:
    """Whether the weight cache is on in this thread (default True)."""
    return _state.cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    _state.cache_enabled = bool(enabled)


def clear_autocast_cache() -> None:
    """Drop every cached cast of this thread (done when the outermost region exits)."""
    _state.cache.clear()


def _autocast_supported(fmt: Format) -> bool:
    """Formats autocast accepts as its dtype: any format narrower than fp32 that fp32 holds,
    signed and with a zero (not a scale format such as E8M0)."""
    return fmt != fp32 and contains(fp32, fmt) and fmt.signed and fmt.has_zero


# ---- the dispatch policy ---------------------------------------------------------------------
def _eligible(a: Any) -> bool:
    """A tensor autocast may cast: floating, not a Python number, not fp64-like (container
    float32 means the format fits in fp32's container)."""
    return (
        isinstance(a, Tensor)
        and a.format is not None
        and not a._weak
        and a.data.dtype.itemsize <= 4
    )


def _cast(a: Tensor, target: Format, st: _State, cacheable: bool) -> Tensor:
    if (
        cacheable
        and a.format == fp32
        and a.requires_grad
        and a._ctx is None  # a leaf; a view of a leaf has a node (its view op), so is not one
    ):
        key = (id(a), target)
        hit = st.cache.get(key)
        if hit is not None and hit[0] is a:
            return hit[1]
        out = a.to(target)
        st.cache[key] = (a, out)
        return out
    return a.to(target)


def _dispatch(op: str, args: tuple) -> tuple:
    """The engine's dispatch policy: cast ``args`` as the active device's table says."""
    st = _state
    dev = st.active
    if dev is None:
        return args
    policy = POLICIES[dev].get(op, UNTOUCHED)
    if policy == UNTOUCHED or policy == WIDEST:
        return args
    if policy == ERROR:
        if op == "binary_cross_entropy":
            raise RuntimeError(_BCE_MESSAGE)
        raise RuntimeError(f"{op} is unsafe to autocast on device type {dev!r}")
    lowp = st.dtype[dev]
    if policy == LOW:
        target = lowp
    elif policy == FP32:
        target = fp32
    else:  # PROMOTE: the widest eligible input format
        fmts = [a.format for a in args if _eligible(a)]
        if not fmts:
            return args
        target = promote_formats(fmts)
    cacheable = st.cache_enabled and target == lowp
    if not any(_eligible(a) and a.format != target for a in args):
        return args
    return tuple(
        _cast(a, target, st, cacheable) if _eligible(a) and a.format != target else a for a in args
    )


_install_lock = threading.Lock()


def _install() -> None:
    """Install :func:`_dispatch` as the engine's dispatch policy (once; it stays installed and
    does nothing in threads where autocast is off). A policy installed before by someone else
    keeps running after autocast's casts."""
    if _function.get_dispatch_policy() is _dispatch or _function.get_dispatch_policy() is _chain:
        return
    with _install_lock:
        prev = _function.get_dispatch_policy()
        if prev is None:
            _function.set_dispatch_policy(_dispatch)
        elif prev is not _dispatch and prev is not _chain:
            global _previous
            _previous = prev
            _function.set_dispatch_policy(_chain)


_previous: Callable | None = None


def _chain(op: str, args: tuple) -> tuple:
    args = _dispatch(op, args)
    return tuple(_previous(op, args)) if _previous is not None else args


# ---- the context manager / decorator ---------------------------------------------------------
class autocast:
    """``autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``: a context
    manager and decorator, as ``torch.autocast``.

    ``device_type``: ``"cuda"`` (default dtype fp16) or ``"cpu"`` (default bf16): it selects the
    policy table and the default dtype, and the region applies to all fpsim tensors (see the
    module docstring). ``dtype``: the low-precision format of the LOW ops (fp16 and bf16 as in
    PyTorch; any format narrower than fp32 -- fp8_e4m3, fp8_e5m2, ... -- beyond PyTorch); fp32
    or wider warns and disables autocast. ``enabled=False`` turns autocast *off* inside (ops run
    in their input formats). ``cache_enabled``: the weight cache inside (default: the current
    setting, True unless changed).
    """

    def __init__(
        self,
        device_type: str,
        dtype: FormatLike | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        self.device = _check_device(device_type)
        self.fast_dtype = get_autocast_dtype(self.device) if dtype is None else get_format(dtype)
        self._cache_enabled = (
            is_autocast_cache_enabled() if cache_enabled is None else bool(cache_enabled)
        )
        if enabled and not _autocast_supported(self.fast_dtype):
            if self.device == "cpu":
                msg = (
                    "In CPU autocast, but the target dtype is not supported. Disabling "
                    "autocast.\nCPU Autocast only supports dtype of bf16, fp16 currently (fpsim "
                    "also accepts any format narrower than fp32, e.g. fp8_e4m3)."
                )
            else:
                msg = (
                    "In CUDA autocast, but the target dtype is not supported. Disabling "
                    "autocast.\nCUDA Autocast only supports dtypes of fp16, bf16 currently "
                    "(fpsim also accepts any format narrower than fp32, e.g. fp8_e4m3)."
                )
            warnings.warn(msg, stacklevel=2)
            enabled = False
        self._enabled = bool(enabled)

    def __enter__(self) -> autocast:
        st = _state
        d = self.device
        st.saved.append((d, st.enabled[d], st.dtype[d], st.cache_enabled, st.order))
        st.enabled[d] = self._enabled
        st.dtype[d] = self.fast_dtype
        st.cache_enabled = self._cache_enabled
        st.order = (d,) + tuple(x for x in st.order if x != d)
        st.nesting += 1
        if self._enabled:
            _install()
        _recompute_active(st)
        return self

    def __exit__(self, *exc) -> None:
        st = _state
        d, enabled, dtype, cache_enabled, order = st.saved.pop()
        st.enabled[d], st.dtype[d] = enabled, dtype
        st.cache_enabled, st.order = cache_enabled, order
        st.nesting -= 1
        if st.nesting == 0:
            st.cache.clear()
        _recompute_active(st)

    def __call__(self, func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(
                f"autocast used as a decorator expects a callable, got {type(func).__name__}"
            )

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorate_autocast

    def __repr__(self) -> str:
        return (
            f"autocast({self.device!r}, dtype={self.fast_dtype.name}, enabled={self._enabled}, "
            f"cache_enabled={self._cache_enabled})"
        )
