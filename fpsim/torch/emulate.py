"""``fpsim.torch.emulate``: run a torch model's Linear and convolution layers as an FP8 / MX /
NVFP4 recipe would, on any hardware.

Each emulated layer gets one :class:`~fpsim.amp.recipes.Quantizer` per operand role of the
recipe (:mod:`fpsim.amp.recipes`) and computes its three GEMMs from quantized operands:

* forward ``y = Q_in(x) @ Q_w(W)^T + b``;
* input gradient ``dx = Q_g(dy) @ Q_w(W)`` and weight gradient ``dW = Q_g(dy)^T @ Q_in(x)``;
  the bias gradient ``db = sum(dy)`` stays in high precision (as TransformerEngine's).

Block scaling runs along each GEMM's reduction dimension, so a block-scaled operand is
quantized once per GEMM it feeds (TE's "rowwise" and "columnwise" copies): x and W along the
input features in the forward pass, dy and W along the output features for ``dx``, dy and x
along the tokens for ``dW``. Per-tensor kinds quantize each tensor once. A convolution's blocks
run along its channel dimension (the kernel positions, also summed over, are not blocked).

The products are summed by torch in float32 with autocast off inside the layer (the recipe's
``accumulation`` must be ``"fp32"``); the output takes the autocast dtype when autocast is on,
else the input's dtype. Delayed scaling updates each layer's amax history at the start of the
layer's next forward call (one step = one call). Matmuls outside modules (``q @ k.T`` in
attention) are not emulated, as TE runs them outside its FP8 GEMMs too.

>>> import torch
>>> lin = torch.nn.Linear(64, 8)
>>> layers = emulate(lin, "fp8_current")
>>> x = torch.randn(4, 64)
>>> y = lin(x); y.shape
torch.Size([4, 8])
>>> import numpy as np                       # current scaling: fl32(448 / amax)
>>> layers[""].quantizers["input"].scale == float(np.float32(448) / x.abs().max().numpy())
True
>>> unemulate(lin), "forward" in vars(lin)
([''], False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..amp.recipes import LayerQuantizers, Recipe, get_recipe, select_layers
from .quantize import quantize_with

__all__ = ["emulate", "unemulate", "emulating", "EmulatedLayer", "LAYER_TYPES"]

#: The module types emulate() replaces by default.
LAYER_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
_ATTR = "_fpsim_emulation"


class EmulatedLayer(LayerQuantizers):
    """One emulated layer: ``module``, its ``name`` in the model, the ``recipe``, and its
    ``quantizers`` (role -> :class:`~fpsim.amp.recipes.Quantizer`, with their scales and amax
    histories); ``calls`` counts forward calls."""

    def __init__(self, module: nn.Module, name: str, recipe: Recipe, seed: int) -> None:
        super().__init__(recipe, seed)
        self.module = module
        self.name = name

    def __repr__(self) -> str:
        return f"EmulatedLayer({self.name or '<model>'}: {type(self.module).__name__}, " \
               f"{self.recipe.name}, calls={self.calls})"  # fmt: skip


def _q(layer: EmulatedLayer, role: str, x: torch.Tensor, axis: int) -> torch.Tensor:
    return quantize_with(x, layer.quantizers[role], axis).float()


def _out_dtype(x: torch.Tensor) -> torch.dtype:
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return x.dtype


class _EmulatedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer):  # noqa: D102
        k = weight.shape[1]
        x2 = x.reshape(-1, k)
        qx = _q(layer, "input", x2, axis=1)  # blocks along the input features (the sum)
        qw = _q(layer, "weight", weight, axis=1)
        with torch.autocast(x.device.type, enabled=False):
            y = qx @ qw.t()
            if bias is not None:
                y = y + bias.float()
        ctx.layer = layer
        ctx.has_bias = bias is not None
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.x_shape = x.shape
        ctx.save_for_backward(x2, weight, qx, qw)
        return y.reshape(*x.shape[:-1], weight.shape[0]).to(_out_dtype(x))

    @staticmethod
    def backward(ctx, gy):  # noqa: D102
        layer = ctx.layer
        x2, weight, qx, qw = ctx.saved_tensors
        g2 = gy.reshape(-1, weight.shape[0])
        blocks = layer.recipe.grad_output.axis_matters
        with torch.autocast(gy.device.type, enabled=False):
            qg = _q(layer, "grad_output", g2, axis=1)  # dx: the sum runs over the outputs
            qw_d = _q(layer, "weight", weight, axis=0) if layer.recipe.weight.axis_matters else qw
            dx = qg @ qw_d
            qg_w = _q(layer, "grad_output", g2, axis=0) if blocks else qg  # dW: over tokens
            qx_w = _q(layer, "input", x2, axis=0) if layer.recipe.input.axis_matters else qx
            dw = qg_w.t() @ qx_w
            db = g2.float().sum(0) if ctx.has_bias else None
        xd, wd, bd = ctx.dtypes
        return (dx.reshape(ctx.x_shape).to(xd), dw.to(wd),
                None if db is None else db.to(bd), None)  # fmt: skip


_CONV_FUNCS = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_INPUT = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input,
               3: torch.nn.grad.conv3d_input}  # fmt: skip
_CONV_WEIGHT = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight,
                3: torch.nn.grad.conv3d_weight}  # fmt: skip


class _EmulatedConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer, nd, opts):  # noqa: D102
        qx = _q(layer, "input", x, axis=1)  # blocks along the input channels
        qw = _q(layer, "weight", weight, axis=1)
        with torch.autocast(x.device.type, enabled=False):
            y = _CONV_FUNCS[nd](qx, qw, None if bias is None else bias.float(), **opts)
        ctx.layer, ctx.nd, ctx.opts = layer, nd, opts
        ctx.has_bias = bias is not None
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.save_for_backward(x, weight, qx, qw)
        return y.to(_out_dtype(x))

    @staticmethod
    def backward(ctx, gy):  # noqa: D102
        layer, nd, opts = ctx.layer, ctx.nd, ctx.opts
        x, weight, qx, qw = ctx.saved_tensors
        r = layer.recipe
        with torch.autocast(gy.device.type, enabled=False):
            qg = _q(layer, "grad_output", gy, axis=1)  # dx: the sum runs over output channels
            qw_d = _q(layer, "weight", weight, axis=0) if r.weight.axis_matters else qw
            dx = _CONV_INPUT[nd](x.shape, qw_d, qg, **opts)
            qg_w = _q(layer, "grad_output", gy, axis=0) if r.grad_output.axis_matters else qg
            qx_w = _q(layer, "input", x, axis=0) if r.input.axis_matters else qx
            dw = _CONV_WEIGHT[nd](qx_w, weight.shape, qg_w, **opts)
            db = gy.float().sum(dim=[d for d in range(gy.dim()) if d != 1]) if ctx.has_bias \
                else None  # fmt: skip
        xd, wd, bd = ctx.dtypes
        return dx.to(xd), dw.to(wd), None if db is None else db.to(bd), None, None, None


def _linear_forward(module: nn.Linear, layer: EmulatedLayer):
    def forward(x: torch.Tensor) -> torch.Tensor:
        layer.begin_forward()
        return _EmulatedLinear.apply(x, module.weight, module.bias, layer)

    return forward


def _conv_forward(module: nn.Module, layer: EmulatedLayer, nd: int):
    if module.padding_mode != "zeros" or isinstance(module.padding, str):
        raise NotImplementedError(
            f"emulate: {type(module).__name__} with padding={module.padding!r}, "
            f"padding_mode={module.padding_mode!r} is not supported (numeric zero padding only)"
        )
    opts = {"stride": module.stride, "padding": module.padding, "dilation": module.dilation,
            "groups": module.groups}  # fmt: skip

    def forward(x: torch.Tensor) -> torch.Tensor:
        layer.begin_forward()
        return _EmulatedConv.apply(x, module.weight, module.bias, layer, nd, opts)

    return forward


def _selected(model: nn.Module, layers: Any) -> list[tuple[str, nn.Module]]:
    what = f"emulate handles {', '.join(t.__name__ for t in LAYER_TYPES)}"
    return select_layers(list(model.named_modules()), layers, LAYER_TYPES, what)


def emulate(model: nn.Module, recipe: Recipe | str, *, layers: Any = None,
            seed: int = 0) -> dict[str, EmulatedLayer]:  # fmt: skip
    """Make ``model``'s Linear and Conv1d/2d/3d layers (or ``layers``: module names, or types)
    compute as ``recipe`` (a name of :data:`fpsim.amp.recipes.RECIPES` or a
    :class:`~fpsim.amp.recipes.Recipe`) does. Returns ``{name: EmulatedLayer}``, whose
    quantizers hold each layer's scales and amax histories. Reversible: :func:`unemulate`.
    ``seed``: the stochastic-rounding seed of the first layer (each layer and role its own)."""
    r = get_recipe(recipe)
    if r.accumulation != "fp32":
        raise NotImplementedError(
            f"emulate sums products with torch's float32 matmul; recipe {r.name!r} asks for "
            f"accumulation={r.accumulation!r} (a hardware accumulation model of fpsim's engine)"
        )
    if not isinstance(model, nn.Module):
        raise TypeError(f"emulate takes a torch.nn.Module, got {type(model).__name__}")
    chosen = _selected(model, layers)
    if not chosen:
        raise ValueError("no Linear or Conv layers to emulate in this model")
    already = [n or "<model>" for n, m in chosen if hasattr(m, _ATTR)]
    if already:
        raise RuntimeError(f"already emulated: {already}; call unemulate(model) first")
    out: dict[str, EmulatedLayer] = {}
    for i, (name, m) in enumerate(chosen):
        layer = EmulatedLayer(m, name, r, seed + 3 * i)
        if isinstance(m, nn.Linear):
            fwd = _linear_forward(m, layer)
        else:
            fwd = _conv_forward(m, layer, {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}[type(m)])
        m.forward = fwd  # an instance attribute: Module.__call__ finds it before the class's
        setattr(m, _ATTR, layer)
        out[name] = layer
    return out


def unemulate(model: nn.Module) -> list[str]:
    """Undo :func:`emulate` on every layer of ``model``; returns the names of the layers
    restored (the quantizers' state is dropped)."""
    restored = []
    for name, m in model.named_modules():
        if hasattr(m, _ATTR):
            del m.forward
            delattr(m, _ATTR)
            restored.append(name)
    return restored


@contextlib.contextmanager
def emulating(model: nn.Module, recipe: Recipe | str, *, layers: Any = None,
              seed: int = 0) -> Iterator[dict[str, EmulatedLayer]]:  # fmt: skip
    """``with emulating(model, "mxfp8") as layers: ...``: :func:`emulate` inside, restored on
    exit (also on an exception)."""
    layers_ = emulate(model, recipe, layers=layers, seed=seed)
    try:
        yield layers_
    finally:
        unemulate(model)
