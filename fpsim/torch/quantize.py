"""``fpsim.torch.quantize``: round a torch tensor to a format, a block scheme or a scaled FP8
cast, inside autograd.

The forward pass rounds with fpsim's kernels (CPU tensors through a zero-copy numpy view, CUDA
tensors with the numba CUDA kernels on the device); the backward pass hands the gradient
through unchanged (the straight-through estimator), or rounds it too (``grad=``).

>>> import torch
>>> x = torch.tensor([0.1, 1e-8, 70000.0], requires_grad=True)
>>> y = quantize(x, "fp16")
>>> y.tolist()
[0.0999755859375, 0.0, inf]
>>> y.sum().backward(); x.grad.tolist()          # straight through
[1.0, 1.0, 1.0]
>>> quantize(torch.tensor([3.0, -0.2] * 16), "mxfp4")[:2].tolist()
[3.0, -0.25]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..amp.recipes import Quantizer, QuantizerSpec
from ..core import ROUNDING_MODES, round_to
from ..formats import FormatLike, get_format
from ..scaling import BlockScheme, get_scheme
from ._tensors import FORMAT_OF, format_name, from_numpy_like, values_of

__all__ = ["quantize", "quantize_with"]


def _np_dtype(t: torch.Tensor) -> np.dtype:
    import ml_dtypes

    name = FORMAT_OF[t.dtype]
    return np.dtype({"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32,
                     "fp64": np.float64}.get(name, np.float32))  # fmt: skip


def _round_tensor(x: torch.Tensor, fmt: Any, rounding: str, subnormals: bool, saturate: bool,
                  seed: int | None) -> torch.Tensor:  # fmt: skip
    """Round every element of ``x`` to ``fmt``; the result in x's dtype and device. Refuses a
    format whose values x's dtype cannot all hold (that would round a second time)."""
    f = get_format(fmt)
    if not f.fits_in(_np_dtype(x)):
        raise ValueError(
            f"{f.name} values do not all fit in {x.dtype}: quantize a float32 tensor "
            f"(x.float()) to round to {f.name}"
        )
    out = round_to(x.detach(), f, rounding, subnormals, saturate, seed)
    return out.to(dtype=x.dtype)  # exact: every value of f is one of x's dtype


def _per_tensor_on_device(x: torch.Tensor, q: Quantizer) -> torch.Tensor:
    """A per-tensor (current / delayed) cast done with torch ops and fpsim's rounding, where x
    lives (the GPU path; the same numbers as :meth:`Quantizer.quantize`): amax, the recipe's
    scale, ``fmt(fl32(x · scale))`` saturated, times ``fl32(1 / scale)`` in float32."""
    x32 = x.detach().float()
    amax = float(x32.abs().amax()) if x32.numel() else 0.0  # NaN propagates, as torch.amax
    s = q.tensor_scale(amax)
    y = x32 * torch.tensor(s, dtype=torch.float32, device=x.device)
    el = round_to(y, q.spec.element, q.spec.rounding, saturate=True, seed=q.next_seed())
    return el.float() * torch.tensor(q.scale_inv, dtype=torch.float32, device=x.device)


def quantize_with(x: torch.Tensor, q: Quantizer, axis: int = -1) -> torch.Tensor:
    """``x`` quantized by a recipe :class:`~fpsim.amp.recipes.Quantizer` (dequantized, in x's
    dtype and device; no autograd). Blocks run along ``axis``.

    CPU tensors go through :meth:`Quantizer.quantize` on a numpy view. On a GPU, plain casts
    and per-tensor scaling run on the device (amax by torch, rounding by fpsim's CUDA kernel);
    block schemes are quantized on the host (one copy each way). A result narrower than
    float32 (fp16/bf16 input) is the float32 result rounded to x's dtype by torch's cast."""
    spec = q.spec
    if x.device.type != "cpu" and spec.scaling in ("current", "delayed"):
        out = _per_tensor_on_device(x, q)
    elif x.device.type != "cpu" and spec.scaling == "none":
        q.amax = float(x.detach().abs().amax()) if x.numel() else 0.0
        out = round_to(x.detach().float(), spec.element, spec.rounding,
                       saturate=spec.saturate, seed=q.next_seed())  # fmt: skip
    else:
        a = values_of(x)
        if a.dtype not in (np.float32, np.float64):
            a = a.astype(np.float32)  # fp16 / bf16 / fp8: exact
        return from_numpy_like(q.quantize(a, axis=axis), x)
    return out.to(dtype=x.dtype)


class _Quantize(torch.autograd.Function):
    """Forward: ``forward_fn(x)``; backward: the gradient as it is (straight through), or
    ``backward_fn(grad)``."""

    @staticmethod
    def forward(ctx, x, forward_fn, backward_fn):  # noqa: D102
        ctx.backward_fn = backward_fn
        return forward_fn(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        g = grad if ctx.backward_fn is None else ctx.backward_fn(grad)
        return g, None, None


def _spec_for(fmt: Any, scheme: Any, rounding: str, scale_rounding: str | None,
              saturate: bool) -> QuantizerSpec | None:  # fmt: skip
    """The QuantizerSpec of a scaled quantization, or None for plain rounding to ``fmt``."""
    if isinstance(scheme, (BlockScheme, str)) and scheme not in ("current", "delayed"):
        sch = get_scheme(scheme)
        if fmt is not None and get_format(fmt) != sch.element:
            raise ValueError(f"{sch.name} stores {sch.element.name} elements, not {fmt}")
        return QuantizerSpec(sch.name, "block", scale_rounding=scale_rounding, rounding=rounding)
    if scheme in ("current", "delayed"):
        if fmt is None:
            raise ValueError(f"scheme={scheme!r} needs the element format: quantize(t, 'fp8_e4m3')")
        return QuantizerSpec(get_format(fmt).name, scheme, rounding=rounding)
    if scheme is not None:
        raise TypeError(
            "scheme must be None, a block scheme (name or BlockScheme), 'current', 'delayed' or a "
            f"recipe Quantizer, got {scheme!r}"
        )
    if isinstance(fmt, str):
        try:
            sch = get_scheme(fmt)
        except ValueError:
            return None
        return QuantizerSpec(sch.name, "block", scale_rounding=scale_rounding, rounding=rounding)
    return None


def quantize(
    t: torch.Tensor,
    fmt: FormatLike | str | None = None,
    rounding: str = "nearest_even",
    scheme: Any = None,
    *,
    axis: int = -1,
    scale_rounding: str | None = None,
    subnormals: bool = True,
    saturate: bool = False,
    seed: int | None = None,
    grad: FormatLike | None = None,
    grad_rounding: str = "nearest_even",
) -> torch.Tensor:
    """``t`` rounded to ``fmt`` (or quantized by ``scheme``), as a tensor of t's dtype on t's
    device, differentiable: the gradient passes straight through, or is rounded to ``grad``.

    * ``quantize(t, "fp16")``: every element rounded to fp16 (``rounding``: any of
      :data:`fpsim.ROUNDING_MODES`, ``"stochastic"`` with ``seed``; ``subnormals=False``
      flushes; ``saturate=True`` clips at ±max instead of overflowing). The format must fit t's
      dtype (fp16 values do not all fit bf16: quantize ``t.float()`` then).
    * ``quantize(t, "mxfp4")`` or ``scheme="mxfp4"`` (any :data:`fpsim.scaling.SCHEMES` name or a
      :class:`~fpsim.scaling.BlockScheme`): block-scaled along ``axis`` with ``scale_rounding``,
      dequantized.
    * ``quantize(t, "fp8_e4m3", scheme="current")``: one float32 scale from t's amax
      (TransformerEngine's current scaling), saturating cast, dequantized.
    * ``scheme=quantizer``: a stateful recipe :class:`~fpsim.amp.recipes.Quantizer`.

    Scaled results are float32 values (see :class:`~fpsim.amp.recipes.Quantizer`), rounded to
    t's dtype when that is narrower. ``grad``: None (straight through, the default) or a format
    the incoming gradient is rounded to (``grad_rounding``), e.g. ``"fp8_e5m2"``.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"quantize takes a torch.Tensor, got {type(t).__name__}")
    format_name(t)  # refuses integer and complex tensors
    if rounding not in ROUNDING_MODES or grad_rounding not in ROUNDING_MODES:
        bad = rounding if rounding not in ROUNDING_MODES else grad_rounding
        modes = ", ".join(ROUNDING_MODES)
        raise ValueError(f"unknown rounding mode {bad!r}; choose one of {modes}")
    if isinstance(scheme, Quantizer):
        if fmt is not None:
            raise ValueError("give either fmt or a recipe Quantizer as scheme, not both")
        q = scheme

        def fwd(x):
            return quantize_with(x, q, axis)
    else:
        spec = _spec_for(fmt, scheme, rounding, scale_rounding, saturate)
        if spec is None:
            if fmt is None:
                raise ValueError("quantize needs a format: quantize(t, 'fp16')")
            f = get_format(fmt)

            def fwd(x):
                return _round_tensor(x, f, rounding, subnormals, saturate, seed)
        else:
            q = Quantizer(spec, "input", 0 if seed is None else seed)

            def fwd(x):
                return quantize_with(x, q, axis)

    bwd = None
    if grad is not None:
        g = get_format(grad)

        def bwd(gr):
            return _round_tensor(gr, g, grad_rounding, True, False, None)

    return _Quantize.apply(t, fwd, bwd)
