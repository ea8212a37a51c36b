"""FP8 and MX training in fpsim's own engine: Linear layers whose three GEMMs run on operands
quantized by a low-precision GEMM recipe (:mod:`fpsim.amp.recipes`: FP8 delayed / current
scaling, MXFP8, NVFP4, a plain FP8 cast).

:func:`convert_to_fp8` switches a model's :class:`fpsim.nn.Linear` layers over in one call (as
torchao's ``convert_to_float8_training``); :func:`fp8_training` does it for a ``with`` block;
:class:`fp8_autocast` turns converted layers off and on again in a region (as
TransformerEngine's ``fp8_autocast(enabled=...)``). Each converted layer holds one stateful
:class:`~fpsim.amp.recipes.Quantizer` per operand role and computes, exactly as
:func:`fpsim.torch.emulate` does for a torch model:

* forward ``y = Q_in(x) @ Q_w(W)^T + b``;
* input gradient ``dx = Q_g(dy) @ Q_w(W)``, weight gradient ``dW = Q_g(dy)^T @ Q_in(x)``;
  the bias gradient ``db = sum(dy)`` stays in high precision (as TransformerEngine's).

Block scaling runs along each GEMM's reduction dimension, so a block-scaled operand is
quantized once per GEMM it feeds (TE's "rowwise" and "columnwise" copies). The quantized
operands are float32 values; with ``accumulation="fp32"`` (the recipe's default) their products
are summed in float32. A hardware accumulation model instead (``accumulation="h100_fp8"``, any
preset of :func:`fpsim.arith.list_accumulations` or a :class:`fpsim.arith.BlockFMA`; per-tensor
and unscaled recipes only) runs the tensor core's block FMA on the FP8 elements and multiplies
the float32 result by ``fl32(scale_inv_a * scale_inv_b)``, as TransformerEngine's cuBLAS GEMMs
do (:mod:`fpsim.amp.fp8_gemm`). The bias is added in float32, and the result is rounded once to
the output format: the autocast dtype inside an :class:`~fpsim.amp.autocast` region, else the
input's format (autocast does not cast the layer's arguments: the recipe decides their
precision). Gradients leave in each input's own format. Delayed scaling rolls a layer's amax
histories at the start of its next forward call (one step = one call).

The GEMM recipe class is exported as :class:`GemmRecipe` (``fpsim.amp.GemmRecipe``, the
:class:`fpsim.amp.recipes.Recipe` class), named ones by :func:`get_gemm_recipe`, so that it is
not confused with :class:`fpsim.amp.Recipe`, the *training* recipe of :func:`fpsim.amp.train`.

GradScaler: :meth:`fpsim.amp.GradScaler.scale` refuses a loss whose graph holds a converted
layer whose gradient quantizer uses delayed scaling (the loss scale changes from step to step
while the amax history remembers gradients under the old scale, and the saturating cast hides
the overflows the scaler looks for) or a saturating unscaled cast (overflows invisible). It
allows the rest: a plain cast that overflows to inf/NaN (``fp8_cast``: one global loss scale,
the scaler's job), and current or block scaling, which divide the loss scale out again (for
a power-of-two loss scale exactly, unless a scale leaves float32's or E8M0's range).

>>> import numpy as np
>>> import fpsim
>>> from fpsim import nn
>>> lin = nn.Linear(64, 8, seed=0)
>>> layers = convert_to_fp8(lin, "fp8_current")
>>> x = fpsim.randn(4, 64, generator=0)
>>> y = lin(x); y.shape, y.format.name
((4, 8), 'fp32')
>>> q = layers[""].quantizers["input"]                 # current scaling: fl32(448 / amax)
>>> q.scale == float(np.float32(448) / np.abs(x.data).max())
True
>>> unconvert_fp8(lin), "forward" in vars(lin)
([''], False)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import nn
from ..arith.accumulation import BlockFMA
from ..autograd.engine import _topological
from ..autograd.function import Function
from ..autograd.precision import to_format
from ..autograd.tensor import Tensor
from ..formats import Format, fp32
from . import autocast_mode
from .fp8_gemm import Operand, check_model, operand_of, resolve_model, scaled_matmul
from .grad_scaler import register_scale_check
from .recipes import (
    RECIPES,
    ROLES,
    LayerQuantizers,
    Quantizer,
    Recipe,
    get_recipe,
    select_layers,
)

__all__ = [
    "GemmRecipe",
    "GEMM_RECIPES",
    "get_gemm_recipe",
    "FP8Layer",
    "FP8Layers",
    "FP8Linear",
    "convert_to_fp8",
    "unconvert_fp8",
    "fp8_training",
    "fp8_autocast",
    "is_fp8_enabled",
    "LOSS_KINDS",
]

#: The GEMM recipe class (:class:`fpsim.amp.recipes.Recipe`) under a name that does not clash
#: with :class:`fpsim.amp.Recipe` (the training recipe).
GemmRecipe = Recipe
#: The named GEMM recipes (:data:`fpsim.amp.recipes.RECIPES`).
GEMM_RECIPES = RECIPES
#: What a layer's statistics count per role (see :meth:`FP8Layer.stats`).
LOSS_KINDS = ("zero", "saturated", "nonfinite")

_ATTR = "_fpsim_fp8"


def get_gemm_recipe(recipe: Recipe | str) -> Recipe:
    """A GEMM recipe by object or name (``fp8_delayed``, ``fp8_current``, ``fp8_tensorwise``,
    ``mxfp8``, ``nvfp4``, ``fp8_cast``): :func:`fpsim.amp.recipes.get_recipe`.

    >>> get_gemm_recipe("mxfp8").weight.describe()
    'mxfp8_e4m3, block scaling (32-element blocks, rceil scales)'
    """
    return get_recipe(recipe)


# ---- switching on and off --------------------------------------------------------------------

_local = threading.local()


def is_fp8_enabled() -> bool:
    """Whether converted layers compute in their recipe in this thread (default True; off
    inside ``fp8_autocast(enabled=False)``)."""
    return getattr(_local, "enabled", True)


class fp8_autocast:  # noqa: N801 - a context manager named as TransformerEngine's
    """``with fp8_autocast(enabled=False): ...``: layers converted by :func:`convert_to_fp8`
    run as plain Linear layers inside the block (no quantization, no quantizer calls, delayed
    histories untouched); ``enabled=True`` switches them back on in a nested region. As
    TransformerEngine's ``fp8_autocast(enabled=...)``; the recipe is the one each layer was
    converted with. Thread-local; usable as a decorator too.

    >>> from fpsim import nn, randn
    >>> lin = nn.Linear(32, 4, seed=0); layers = convert_to_fp8(lin, "fp8_delayed")
    >>> with fp8_autocast(enabled=False):
    ...     _ = lin(randn(2, 32, generator=0))
    >>> layers[""].calls, is_fp8_enabled()
    (0, True)
    """

    def __init__(self, enabled: bool = True) -> None:
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"enabled must be True or False, got {enabled!r}")
        self.enabled = bool(enabled)
        self._prev: list[bool] = []

    def __enter__(self) -> fp8_autocast:
        self._prev.append(is_fp8_enabled())
        _local.enabled = self.enabled
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.enabled = self._prev.pop()

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with fp8_autocast(self.enabled):
                return fn(*args, **kwargs)

        return wrapped


# ---- one layer's state -----------------------------------------------------------------------


class FP8Layer(LayerQuantizers):
    """One converted layer: ``module``, its ``name`` in the model, the ``recipe`` and its
    ``quantizers`` (role -> :class:`~fpsim.amp.recipes.Quantizer`, holding the scales, amaxes
    and amax histories); ``calls`` counts FP8 forward calls; :meth:`state_dict` /
    :meth:`load_state_dict` (a state of another recipe is refused). With ``record`` on, every
    quantization adds to :meth:`stats`."""

    def __init__(self, module: nn.Linear, name: str, recipe: Recipe, seed: int,
                 record: bool = False) -> None:  # fmt: skip
        super().__init__(recipe, seed)
        self.module = module
        self.name = name
        #: The hardware accumulation model of the GEMMs (None: fp32 sums of the values).
        self.model = resolve_model(recipe.accumulation)
        self.record = bool(record)
        self._counts = {r: dict.fromkeys(("elements",) + LOSS_KINDS, 0) for r in ROLES}

    def quantize(self, role: str, a: np.ndarray, axis: int) -> np.ndarray:
        """``a`` quantized by the role's quantizer (float32 values; blocks along ``axis``)."""
        q = self.quantizers[role]
        out = q.quantize(a, axis=axis)
        if self.record:
            self._count(role, a, q)
        return out

    def operand(self, role: str, a: np.ndarray, axis: int) -> Operand:
        """``a`` quantized by the role's quantizer, as an :class:`~fpsim.amp.fp8_gemm.Operand`
        (values; with a model, also the elements and ``scale_inv``)."""
        values = self.quantize(role, a, axis)
        if self.model is None:
            return Operand(values, values, fp32, None)
        return operand_of(self.quantizers[role], values)

    def _count(self, role: str, a: np.ndarray, q: Quantizer) -> None:
        c = self._counts[role]
        c["elements"] += a.size
        last = q.last
        if isinstance(last, np.ndarray):  # a plain cast: no scale
            x = a.astype(np.float64)
            el = last.astype(np.float64)
            fin = np.isfinite(el)
            kinds = {
                "zero": fin & (el == 0) & (x != 0),
                "saturated": np.isfinite(x) & (np.abs(x) > q.spec.element.max),
                "nonfinite": ~fin & np.isfinite(x),
            }
        else:
            kinds = last.classify(a)
            kinds["nonfinite"] = kinds["nonfinite"] & np.isfinite(a)
        for k in LOSS_KINDS:
            c[k] += int(np.count_nonzero(kinds[k]))

    def stats(self) -> dict[str, dict[str, int]]:
        """role -> counts since the last :meth:`reset_stats` (``record=True``): ``elements``
        quantized, and of them ``zero`` (a non-zero value stored as 0: underflow),
        ``saturated`` (beyond the format's max after scaling: clipped, or for a plain cast
        overflowed) and ``nonfinite`` (a finite value that became inf/NaN)."""
        return {r: dict(c) for r, c in self._counts.items()}

    def reset_stats(self) -> None:
        for c in self._counts.values():
            for k in c:
                c[k] = 0

    def __repr__(self) -> str:
        return (f"FP8Layer({self.name or '<model>'}: {type(self.module).__name__}, "
                f"{self.recipe.name}, calls={self.calls})")  # fmt: skip


class FP8Layers(dict):
    """``{name: FP8Layer}`` for a converted model, with the state of them all."""

    def state_dict(self) -> dict:
        """name -> :meth:`FP8Layer.state_dict` (the recipe state: scales, amax histories)."""
        return {n: layer.state_dict() for n, layer in self.items()}

    def load_state_dict(self, state: dict) -> None:
        """Load the recipe state of every layer; the layer names must match."""
        if set(state) != set(self):
            raise ValueError(
                f"the state has layers {sorted(state)}, the converted model {sorted(self)}"
            )
        for n, layer in self.items():
            layer.load_state_dict(state[n])

    def stats(self) -> dict[str, dict[str, int]]:
        """role -> counts summed over the layers (see :meth:`FP8Layer.stats`)."""
        out = {r: dict.fromkeys(("elements",) + LOSS_KINDS, 0) for r in ROLES}
        for layer in self.values():
            for r, c in layer.stats().items():
                for k, v in c.items():
                    out[r][k] += v
        return out

    def reset_stats(self) -> None:
        for layer in self.values():
            layer.reset_stats()


# ---- the op ----------------------------------------------------------------------------------


def _autocast_format() -> Format | None:
    st = autocast_mode._state
    return None if st.active is None else st.dtype[st.active]


class FP8Linear(Function):
    """``fp8_linear(x, weight, bias, layer)``: a Linear whose GEMMs run on operands quantized
    by ``layer`` (an :class:`FP8Layer`); see the module docstring. Not seen by autocast's
    dispatch policy (the recipe decides each operand's precision)."""

    name = "fp8_linear"
    forward_precision = backward_precision = "raw"
    dispatch = False

    @classmethod
    def compute_format(cls, args, kwargs):
        return fp32  # the products are summed in float32

    @classmethod
    def output_format(cls, args, fmt):
        return _autocast_format() or args[0].format

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Tensor | None, layer: FP8Layer):
        k = w.shape[1]
        if x.shape[-1] != k:
            raise RuntimeError(
                f"fp8_linear: mat1 and mat2 shapes cannot be multiplied "
                f"({int(np.prod(x.shape[:-1]))}x{x.shape[-1]} and {k}x{w.shape[0]})"
            )
        x2 = x.data.reshape(-1, k)
        qx = layer.operand("input", x2, axis=1)  # blocks along the input features (the sum)
        qw = layer.operand("weight", w.data, axis=1)
        y = scaled_matmul(qx, qw.T, layer.model)
        if b is not None:
            y = y + b.data.astype(np.float32)
        ctx.layer, ctx.xfmt, ctx.wfmt = layer, x.format, w.format
        ctx.bfmt = None if b is None else b.format
        ctx.x2, ctx.w, ctx.qx, ctx.qw, ctx.xshape = x2, w.data, qx, qw, x.shape
        return to_format(y, getattr(ctx, "out_fmt", ctx.fmt)).reshape(x.shape[:-1] + (w.shape[0],))

    @staticmethod
    def backward(ctx, g):
        layer, r = ctx.layer, ctx.layer.recipe
        g2 = g.reshape(-1, ctx.w.shape[0])
        nx, nw, nb = ctx.needs_input_grad[:3]
        qg = layer.operand("grad_output", g2, axis=1)  # dx: the sum runs over the outputs
        qw_d = layer.operand("weight", ctx.w, axis=0) if r.weight.axis_matters else ctx.qw
        dx = scaled_matmul(qg, qw_d, layer.model)
        blocks = r.grad_output.axis_matters
        qg_w = layer.operand("grad_output", g2, axis=0) if blocks else qg  # dW: over tokens
        qx_w = layer.operand("input", ctx.x2, axis=0) if r.input.axis_matters else ctx.qx
        dw = scaled_matmul(qg_w.T, qx_w, layer.model)
        gx = to_format(dx, ctx.xfmt).reshape(ctx.xshape) if nx else None
        gw = to_format(dw, ctx.wfmt) if nw else None
        gb = None
        if nb:
            gb = to_format(np.sum(g2.astype(np.float32), axis=0, dtype=np.float32), ctx.bfmt)
        return gx, gw, gb, None


# ---- converting a model ----------------------------------------------------------------------


def _forward(module: nn.Linear, layer: FP8Layer):
    plain = type(module).forward

    def forward(x: Tensor) -> Tensor:
        if not is_fp8_enabled():
            return plain(module, x)
        if not isinstance(x, Tensor):
            raise TypeError(f"fp8_linear: expected a Tensor input, got {type(x).__name__}")
        layer.begin_forward()
        return FP8Linear.apply(x, module.weight, module.bias, layer)

    return forward


def _selected(model: nn.Module, layers: Any) -> list[tuple[str, nn.Module]]:
    return select_layers(list(model.named_modules()), layers, (nn.Linear,),
                         "convert_to_fp8 converts Linear layers")  # fmt: skip


def convert_to_fp8(model: nn.Module, recipe: Recipe | str, *, layers: Any = None, seed: int = 0,
                   record: bool = False, accumulation: str | BlockFMA | None = None,
                   ) -> FP8Layers:  # fmt: skip
    """Make ``model``'s :class:`~fpsim.nn.Linear` layers (or ``layers``: a list of module
    names) compute as ``recipe`` does (a name of :data:`GEMM_RECIPES` or a
    :class:`GemmRecipe`). Returns :class:`FP8Layers` (``{name: FP8Layer}``), whose quantizers
    hold each layer's scales and amax histories, with ``state_dict``/``load_state_dict``.
    ``seed``: the stochastic-rounding seed of the first layer (each layer and role its own, as
    :func:`fpsim.torch.emulate` numbers them). ``record``: count what each quantization loses
    (:meth:`FP8Layers.stats`). ``accumulation``: replaces the recipe's -- ``"fp32"``, or a
    hardware model (a preset name of :func:`fpsim.arith.list_accumulations`, e.g.
    ``"h100_fp8"``, or a :class:`fpsim.arith.BlockFMA`): the GEMMs then run its block FMA on
    the FP8 elements and scale the float32 result (:mod:`fpsim.amp.fp8_gemm`). A model needs
    per-tensor or unscaled operands (not ``mxfp8``/``nvfp4``: ``NotImplementedError``) in
    formats it describes (``ValueError``). Reversible: :func:`unconvert_fp8`.

    Layers that are not Linear modules -- a tied output layer calling ``F.linear`` with an
    embedding's weight, the attention scores inside ``scaled_dot_product_attention`` -- stay
    in high precision, as TransformerEngine's and torchao's do."""
    r = get_recipe(recipe)
    if accumulation is not None:
        r = r.replace(accumulation=accumulation)
    _check_accumulation(r)
    if not isinstance(model, nn.Module):
        raise TypeError(f"convert_to_fp8 takes an fpsim.nn.Module, got {type(model).__name__}")
    chosen = _selected(model, layers)
    if not chosen:
        raise ValueError("no Linear layers to convert in this model")
    already = [n or "<model>" for n, m in chosen if _ATTR in vars(m)]
    if already:
        raise RuntimeError(f"already converted: {already}; call unconvert_fp8(model) first")
    out = FP8Layers()
    for i, (name, m) in enumerate(chosen):
        layer = FP8Layer(m, name, r, seed + 3 * i, record)
        object.__setattr__(m, "forward", _forward(m, layer))  # found before the class's
        object.__setattr__(m, _ATTR, layer)
        out[name] = layer
    return out


def _check_accumulation(r: Recipe) -> None:
    """Refuse a hardware model with block-scaled operands or formats it does not describe."""
    m = resolve_model(r.accumulation)
    if m is None:
        return
    blocked = [role for role in ROLES if r.spec(role).scaling == "block"]
    if blocked:
        raise NotImplementedError(
            f"recipe {r.name!r} scales {', '.join(blocked)} in blocks; an accumulation model "
            f"({m.name!r}) runs only per-tensor-scaled or unscaled FP8 GEMMs: the tensor core "
            "applies block scales inside the MMA, per K block, and where they enter relative to "
            "the alignment and the accumulator is not described by the models fpsim has. Use "
            "accumulation='fp32' with block-scaled recipes"
        )
    check_model(m, [r.spec(role).element for role in ROLES])


def unconvert_fp8(model: nn.Module) -> list[str]:
    """Undo :func:`convert_to_fp8` on every layer of ``model``; returns the names of the layers
    restored (their recipe state is dropped)."""
    restored = []
    for name, m in model.named_modules():
        if _ATTR in vars(m):
            del m.__dict__["forward"]
            del m.__dict__[_ATTR]
            restored.append(name)
    return restored


@contextlib.contextmanager
def fp8_training(model: nn.Module, recipe: Recipe | str, *, layers: Any = None, seed: int = 0,
                 record: bool = False, accumulation: str | BlockFMA | None = None,
                 ) -> Iterator[FP8Layers]:  # fmt: skip
    """``with fp8_training(model, "mxfp8") as layers: ...``: :func:`convert_to_fp8` inside,
    restored on exit (also on an exception)."""
    out = convert_to_fp8(model, recipe, layers=layers, seed=seed, record=record,
                         accumulation=accumulation)  # fmt: skip
    try:
        yield out
    finally:
        unconvert_fp8(model)


# ---- GradScaler --------------------------------------------------------------------------------


def _refusal(spec) -> str | None:
    if spec.scaling == "delayed":
        return ("its gradients use delayed scaling: the loss scale changes from step to step "
                "while the amax history remembers gradients under the old scale, and the "
                "saturating cast hides the overflows the scaler looks for")  # fmt: skip
    if spec.scaling == "none" and spec.saturate:
        return "its gradients are cast with saturation: the scaler cannot see an overflow"
    return None


def _check_scaled_outputs(outputs: Any) -> None:
    """GradScaler.scale's check: refuse a loss computed through FP8 layers whose gradient
    quantizer a loss scale does not make sense for (see the module docstring)."""
    tensors: list[Tensor] = []

    def collect(v: Any) -> None:
        if isinstance(v, Tensor):
            tensors.append(v)
        elif isinstance(v, (list, tuple)):
            for u in v:
                collect(u)

    collect(outputs)
    seen: set[int] = set()
    for t in tensors:
        if t._ctx is None:
            continue
        for node in _topological(t._ctx):
            if isinstance(node, FP8Linear) and id(node.layer) not in seen:
                seen.add(id(node.layer))
                why = _refusal(node.layer.recipe.grad_output)
                if why:
                    layer = node.layer
                    raise RuntimeError(
                        f"GradScaler with the FP8 recipe {layer.recipe.name!r} (layer "
                        f"{layer.name or '<model>'!r}): {why}. Train without a GradScaler "
                        "(the per-tensor scales do its work), or use a recipe whose gradient "
                        "cast overflows visibly (fp8_cast) or is scaled per tensor or block "
                        "(fp8_current, mxfp8, nvfp4)."
                    )


register_scale_check(_check_scaled_outputs)
