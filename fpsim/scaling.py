"""Scaled formats: block formats (OCP MX, NVFP4) and per-tensor FP8 scaling recipes.

A narrow format such as FP8 E4M3 (max 448) or FP4 E2M1 (max 6) cannot hold a gradient tensor's
range on its own; a *scale* moves the values into range first and is stored beside them.

**Block formats** (:func:`quantize`): every ``block_size`` consecutive elements along ``axis``
share one scale.

* OCP MX v1.0 (``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp6_e3m2``, ``mxfp6_e2m3``, ``mxfp4``): blocks
  of 32, an E8M0 scale ``X = 2^e`` (a power of two, so dividing by it is exact), elements
  ``round(x / X)`` saturated to the element's max. The spec's rule for e is ``floor(log2 amax) -
  emax_elem`` (``scale_rounding="floor"``); torchao's ``"ceil"`` and ``"even"`` and NVIDIA's
  ``"rceil"`` (the smallest X with no element overflow) are the alternatives.
* NVFP4 (``nvfp4``): blocks of 16 E2M1 elements, an E4M3 block scale ``s``, and a float32
  per-tensor scale ``g = amax(x) / (6 · 448)`` on top: ``s = round(amax_block / (6 g))``
  (clamped to [2^-6, 448], as torchao does), elements ``round(x / (s g))``. ``"nearest_even"``
  (torchao, TransformerEngine) or ``"up"`` (cuDNN's "round_up(amax/vmax)") rounds s.
* Any ``BlockScheme(element, block_size, scale)`` you build: a scale format without fraction
  bits (E8M0) works like MX, any other like NVFP4.

Every division is exact or rounded once, correctly (see :mod:`fpsim.kernels.block`), and
:meth:`ScaledTensor.dequantize` returns exactly the values the elements and scales represent. A
block holding NaN or ±inf gets a NaN scale and dequantizes to NaN (torchao's choice; the MX
spec leaves the other elements undefined). A last block shorter than ``block_size`` (an axis
length that is not a multiple) behaves as if padded with zeros, which change neither its amax
nor its other elements.

**Per-tensor recipes** (:class:`CurrentScaling`, :class:`DelayedScaling`): one float32 scale for
the whole tensor, ``q = fp8(fl32(x · scale))`` saturated, dequantized as ``q · fl32(1/scale)``,
with TransformerEngine's definitions of the scale (see each class).

>>> import numpy as np
>>> x = np.array([1000.0, 300.0, -2.5, 0.01] + [0.0] * 28, np.float32)
>>> q = quantize(x, "mxfp8_e4m3")
>>> q.scales.tolist(), q.dequantize()[:4].tolist()
([2.0], [896.0, 288.0, -2.5, 0.01171875])
>>> quantize(x, "mxfp8_e4m3", scale_rounding="rceil").dequantize()[:4].tolist()
[1024.0, 288.0, -2.5, 0.0078125]
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from .core import ROUNDING_MODES, round_to, to_bits
from .formats import (
    Format,
    FormatLike,
    e8m0,
    fp4_e2m1,
    fp6_e2m3,
    fp6_e3m2,
    fp8_e4m3,
    fp8_e5m2,
    fp32,
    get_format,
)
from .kernels import block as kblock
from .kernels import scalar

__all__ = [
    "BlockScheme",
    "SCHEMES",
    "get_scheme",
    "quantize",
    "ScaledTensor",
    "PerTensorScaled",
    "quantize_per_tensor",
    "CurrentScaling",
    "DelayedScaling",
]

FLT_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class BlockScheme:
    """A block-scaled format: ``block_size`` elements of ``element`` share one ``scale`` value.

    A scale format without fraction bits (E8M0) makes the scale a power of two (OCP MX); any
    other (E4M3 for NVFP4) a value of that format. ``tensor_scale=True`` adds NVFP4's float32
    per-tensor scale on top of a float block scale.

    >>> BlockScheme(fp4_e2m1, 32, e8m0) == SCHEMES["mxfp4"]
    True
    """

    element: Format
    block_size: int
    scale: Format
    tensor_scale: bool = False
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "element", get_format(self.element))
        object.__setattr__(self, "scale", get_format(self.scale))
        el, sc, bs = self.element, self.scale, self.block_size
        if isinstance(bs, (bool, np.bool_)) or not isinstance(bs, numbers.Integral) or bs < 1:
            raise ValueError(f"block_size must be a positive integer, got {bs!r}")
        object.__setattr__(self, "block_size", int(bs))
        if not (el.signed and el.has_zero and el.container_dtype == np.float32):
            raise ValueError(
                f"element format {el.name}: must be signed, have a zero and fit in float32"
            )
        if sc.man_bits == 0 and not (sc.emin >= -1022 and sc.emax <= 1023):
            raise ValueError(f"scale format {sc.name} does not fit float64's normal range")
        if sc.man_bits > 0 and (sc.container_dtype != np.float32 or not sc.has_zero):
            raise ValueError(f"scale format {sc.name}: must fit in float32 and have a zero")
        if self.tensor_scale and sc.man_bits == 0:
            raise ValueError("a per-tensor scale is for float block scales (NVFP4), not E8M0")
        if not self.name:
            extra = "+fp32" if self.tensor_scale else ""
            object.__setattr__(self, "name", f"{el.name}/{bs}x{sc.name}{extra}")

    @property
    def pow2(self) -> bool:
        """True when the scale is a power of two (an E8M0-like scale format)."""
        return self.scale.man_bits == 0

    @property
    def scale_roundings(self) -> tuple[str, ...]:
        """The ``scale_rounding`` values this scheme accepts (the first is the default)."""
        return ("floor", "ceil", "even", "rceil") if self.pow2 else ("nearest_even", "up")


SCHEMES: dict[str, BlockScheme] = {
    s.name: s
    for s in (
        BlockScheme(fp8_e4m3, 32, e8m0, name="mxfp8_e4m3"),
        BlockScheme(fp8_e5m2, 32, e8m0, name="mxfp8_e5m2"),
        BlockScheme(fp6_e3m2, 32, e8m0, name="mxfp6_e3m2"),
        BlockScheme(fp6_e2m3, 32, e8m0, name="mxfp6_e2m3"),
        BlockScheme(fp4_e2m1, 32, e8m0, name="mxfp4"),
        BlockScheme(fp4_e2m1, 16, fp8_e4m3, tensor_scale=True, name="nvfp4"),
    )
}


def get_scheme(scheme: BlockScheme | str) -> BlockScheme:
    """A scheme by object or name (``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp6_e3m2``, ``mxfp6_e2m3``,
    ``mxfp4``, ``nvfp4``; ``mxfp8`` means ``mxfp8_e4m3``)."""
    if isinstance(scheme, BlockScheme):
        return scheme
    if isinstance(scheme, str):
        key = scheme.strip().lower()
        key = {"mxfp8": "mxfp8_e4m3", "mxfp4_e2m1": "mxfp4", "mxfp6": "mxfp6_e3m2"}.get(key, key)
        if key in SCHEMES:
            return SCHEMES[key]
    raise ValueError(
        f"unknown block scheme {scheme!r}; known: {', '.join(SCHEMES)}, or "
        "BlockScheme(element, block_size, scale)"
    )


@dataclass(frozen=True, eq=False)
class ScaledTensor:
    """A block-quantized tensor: element values, one scale per block, the layout.

    ``elements`` (float32, the input's shape): the element values, each a value of
    ``scheme.element`` (NaN in a NaN block). ``scales`` (float64; the input's shape with the
    block axis cut to one entry per block): each block's scale value (2^e for MX, the E4M3
    value s for NVFP4; NaN for a block holding NaN or inf). ``tensor_scale``: NVFP4's float32
    per-tensor scale g (None without one). The value of element i is ``elements[i] ·
    scale[block(i)] · g``.
    """

    scheme: BlockScheme
    axis: int
    elements: np.ndarray
    scales: np.ndarray
    tensor_scale: float | None
    scale_rounding: str
    rounding: str

    @property
    def shape(self) -> tuple[int, ...]:
        return self.elements.shape

    def block_scales(self) -> np.ndarray:
        """Each element's block scale (times the tensor scale), in the elements' shape."""
        bs = self.scheme.block_size
        n = self.elements.shape[self.axis]
        s = np.repeat(self.scales, bs, axis=self.axis)
        s = np.take(s, np.arange(n), axis=self.axis)
        return s * self.tensor_scale if self.tensor_scale is not None else s

    def dequantize(self, dtype: Any = np.float64) -> np.ndarray:
        """The represented values, exactly, as float64 (element × scale × tensor scale: few
        significant bits each, so the products are exact); ``dtype=np.float32``: each rounded
        once to float32 (exact unless it leaves float32's range).

        >>> quantize(np.array([3.0, -0.2] * 16, np.float32), "mxfp4").dequantize()[:2].tolist()
        [3.0, -0.25]
        """
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"dtype must be float32 or float64, got {dt}")
        el, ax, bs = self.elements, self.axis, self.scheme.block_size
        n = el.shape[ax]
        moved = np.moveaxis(el, ax, -1) if el.ndim else el
        if el.size and el.ndim and moved.flags.c_contiguous and el.dtype == np.float32:
            # the layout quantize writes: one pass of the kernel, the same products and
            # rounding as the numpy expressions below
            rows = el.size // n
            sc = np.ascontiguousarray(np.moveaxis(self.scales, ax, -1)).reshape(rows, -1)
            out = np.empty((rows, n), dt)
            g = 1.0 if self.tensor_scale is None else float(self.tensor_scale)
            kblock.dequantize_blocks(moved.reshape(rows, n), sc, g, bs, out)
            return np.moveaxis(out.reshape(moved.shape), -1, ax)
        with np.errstate(invalid="ignore", over="ignore"):
            if n % bs:  # a short last block: the scales repeated element by element
                return (el.astype(np.float64) * self.block_scales()).astype(dt, copy=False)
            # whole blocks: the block axis split in two, the scales broadcast along the block
            blocked = el.reshape(el.shape[:ax] + (n // bs, bs) + el.shape[ax + 1 :])
            s = self.scales if self.tensor_scale is None else self.scales * self.tensor_scale
            s = np.expand_dims(s, ax + 1)
            if dt == np.float32 and self.tensor_scale is None and self.scheme.pow2:
                # a power-of-two scale (exact in float32, 2^-127 included): the float32
                # product is the exact one rounded once, as the float64 route gives
                out = blocked * s.astype(np.float32)
            else:
                out = (blocked.astype(np.float64) * s).astype(dt, copy=False)
        return out.reshape(el.shape)

    @property
    def scale_codes(self) -> np.ndarray:
        """The scales' codes in the scale format (E8M0: 127 + e; 0xFF for a NaN block)."""
        return to_bits(self.scales, self.scheme.scale)

    @property
    def element_codes(self) -> np.ndarray:
        """The elements' codes. In a NaN block of an element format without NaN (FP4, FP6)
        the elements carry no value (the scale's NaN code marks the block): code 0 there."""
        el = self.elements
        if not self.scheme.element.has_nan:
            el = np.where(np.isnan(el), np.float32(0.0), el)
        return to_bits(el, self.scheme.element)

    @property
    def scale_exponents(self) -> np.ndarray:
        """log2 of each power-of-two scale (MX), as float64 (NaN for a NaN block)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log2(self.scales)

    def classify(self, x: Any) -> dict[str, np.ndarray]:
        """What quantizing did to each element of the original ``x`` (boolean masks):
        ``"zero"`` (a non-zero finite x stored as 0: flushed), ``"subnormal"`` (stored as a
        subnormal of the element format: fewer significant bits), ``"saturated"`` (beyond the
        element's max after scaling: clipped), ``"nonfinite"`` (in a NaN block)."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape != self.shape:
            raise ValueError(f"x has shape {x.shape}, the quantized tensor {self.shape}")
        el = self.elements.astype(np.float64)
        finite = np.isfinite(el)
        with np.errstate(invalid="ignore", over="ignore"):
            limit = self.scheme.element.max * self.block_scales()
            mag = np.abs(el)
        return {
            "zero": finite & (el == 0) & (x != 0),
            "subnormal": finite & (mag > 0) & (mag < self.scheme.element.min_normal),
            "saturated": finite & (np.abs(x) > limit),
            "nonfinite": ~finite,
        }

    def __repr__(self) -> str:
        g = "" if self.tensor_scale is None else f", tensor_scale={self.tensor_scale!r}"
        return (
            f"ScaledTensor({self.scheme.name}, shape={self.shape}, axis={self.axis}, "
            f"{self.scales.size} blocks, scale_rounding={self.scale_rounding!r}{g})"
        )


# ---- quantize --------------------------------------------------------------------------------
def _as_float_array(x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype in (np.float32, np.float64):
        return a
    if a.dtype.kind == "f" and a.dtype.itemsize > 8:
        raise TypeError(f"{a.dtype} input is not supported; convert to float64 first")
    if a.dtype.kind in "biuf" or a.dtype.kind == "V":
        b = a.astype(np.float64)
        if a.dtype.kind in "iu" and a.size and np.abs(b).max() > 2.0**53:
            raise ValueError("integers beyond 2^53 are not exact in float64; round them first")
        return b
    raise TypeError(f"expected real numbers, got an array of {a.dtype}")


def _axis(axis: Any, ndim: int) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"axis must be an integer, got {axis!r}")
    if ndim == 0:
        raise ValueError("block quantization needs an array of at least one dimension")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimensions")
    return int(axis) % ndim


def _tensor_scale_of(x: np.ndarray, scheme: BlockScheme) -> float:
    """NVFP4's per-tensor scale g = fl32(amax / (max_elem · max_scale)), rounded once from the
    exact quotient; 1 when amax is 0 or not finite (TransformerEngine: S_enc = 1 then). NaN is
    ignored in amax, as fmaxf does."""
    amax = kblock.amax_ignoring_nan(np.ascontiguousarray(x).reshape(-1))
    if amax == 0.0 or not math.isfinite(amax):
        return 1.0
    g = Fraction(amax) / (Fraction(scheme.element.max) * Fraction(scheme.scale.max))
    g32 = float(round_to(g, fp32))
    if math.isinf(g32):  # only a float64 x gets here: amax above FLT_MAX · max · max_scale
        raise ValueError(
            f"{scheme.name}: amax(x) = {amax!r} is too large for a float32 tensor scale "
            f"(amax / {scheme.element.max * scheme.scale.max:g} exceeds float32's max); pass "
            "tensor_scale=<a float32 value> or tensor_scale=False"
        )
    return g32 if g32 > 0 else float(fp32.smallest_subnormal)


def quantize(
    x: Any,
    scheme: BlockScheme | str,
    *,
    axis: int = -1,
    scale_rounding: str | None = None,
    rounding: str = "nearest_even",
    tensor_scale: float | bool | None = None,
    seed: int | None = None,
    backend: str = "cpu",
) -> ScaledTensor:
    """Quantize ``x`` to a block-scaled format (see the module docstring).

    ``x``: a float32/float64 array (other real dtypes are converted exactly); blocks run along
    ``axis``. ``scheme``: a name from :data:`SCHEMES` or a :class:`BlockScheme`.
    ``scale_rounding``: MX ``"floor"`` (default, the OCP rule), ``"ceil"``, ``"even"``,
    ``"rceil"``; float scales ``"nearest_even"`` (default) or ``"up"``. ``rounding``: the
    elements' rounding mode (any of :data:`fpsim.ROUNDING_MODES`; ``stochastic`` uses
    ``seed``). ``tensor_scale`` (float-scale schemes): None for the scheme's default (NVFP4:
    computed from amax(x); a ValueError where that exceeds float32, which only a float64 x
    can reach), False for none (single-level NVFP4), or a positive float32 value.
    ``backend="python"`` runs the same code uncompiled (slow; for tests).

    >>> q = quantize(np.linspace(-1, 1, 64), "mxfp4")
    >>> q.scales.tolist(), sorted(set(np.abs(q.elements).tolist()))
    ([0.25, 0.25], [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0])
    """
    sch = get_scheme(scheme)
    arr = _as_float_array(x)
    ax = _axis(axis, arr.ndim)
    roundings = sch.scale_roundings
    sr = roundings[0] if scale_rounding is None else scale_rounding
    if sr not in roundings:
        raise ValueError(
            f"scale_rounding for {sch.name} must be one of {', '.join(roundings)}, got {sr!r}"
        )
    if rounding not in ROUNDING_MODES:
        raise ValueError(
            f"unknown rounding mode {rounding!r}; choose one of {', '.join(ROUNDING_MODES)}"
        )
    if backend not in ("cpu", "python"):
        raise ValueError(f"backend must be 'cpu' or 'python', got {backend!r}")
    mode = ROUNDING_MODES[rounding]
    seed_v = 0
    if mode == scalar.STOCHASTIC:
        if seed is None:
            seed = int(np.random.default_rng().integers(0, 2**62))
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        seed_v = int(seed) & ((1 << 63) - 1)

    # The per-tensor scale (float-scale schemes only).
    g: float | None
    if tensor_scale is None:
        g = _tensor_scale_of(arr, sch) if sch.tensor_scale else None
    elif tensor_scale is False:
        g = None
    else:
        if sch.pow2:
            raise ValueError(f"{sch.name} has power-of-two block scales; no tensor scale")
        if isinstance(tensor_scale, bool) or not isinstance(tensor_scale, numbers.Real):
            raise TypeError(f"tensor_scale must be a float, False or None, got {tensor_scale!r}")
        g = float(tensor_scale)
        if not (0 < g < math.inf) or float(np.float32(g)) != g:
            raise ValueError(f"tensor_scale must be a positive finite float32 value, got {g!r}")

    moved = np.moveaxis(arr, ax, -1)
    n = moved.shape[-1] if moved.ndim else 1
    rows = int(np.prod(moved.shape[:-1], dtype=np.int64))
    x2 = np.ascontiguousarray(moved.reshape(rows, n))
    out = np.empty(x2.shape, np.float32)
    nb = (n + sch.block_size - 1) // sch.block_size
    scales = np.empty((rows, nb), np.float64)
    if sch.pow2:
        srule = kblock.SCALE_RULES[sr]
    else:
        srule = scalar.NEAREST_EVEN if sr == "nearest_even" else scalar.UP
    flat = (
        tuple(sch.element.record) + tuple(sch.scale.record)
        + (kblock.POW2 if sch.pow2 else kblock.FLOAT, srule, mode, seed_v, sch.block_size)
    )  # fmt: skip
    if x2.size:
        kblock.quantize_blocks(x2, out, scales, flat, 1.0 if g is None else g,
                               sch.element.max, sch.scale.min_normal, backend)  # fmt: skip
    elements = np.moveaxis(out.reshape(moved.shape), -1, ax)
    scales_nd = np.moveaxis(scales.reshape(moved.shape[:-1] + (nb,)), -1, ax)
    return ScaledTensor(sch, ax, elements, scales_nd, g, sr, rounding)


# ---- per-tensor scaling (TransformerEngine's FP8 recipes) -------------------------------------
@dataclass(frozen=True, eq=False)
class PerTensorScaled:
    """A tensor quantized with one float32 scale: ``elements`` (float32 values of ``fmt``) are
    ``fmt(fl32(x · scale))``; the represented value is ``elements · scale_inv`` with
    ``scale_inv = fl32(1 / scale)`` (TransformerEngine's ``scale_inv``)."""

    fmt: Format
    scale: float
    scale_inv: float
    elements: np.ndarray

    def dequantize(self, dtype: Any = np.float64) -> np.ndarray:
        """The represented values, exactly, as float64; ``dtype=np.float32``: each rounded once
        to float32 (the float32 product of the element and the float32 ``scale_inv``)."""
        if np.dtype(dtype) == np.float32:
            with np.errstate(over="ignore", invalid="ignore"):
                return self.elements * np.float32(self.scale_inv)
        if np.dtype(dtype) != np.float64:
            raise ValueError(f"dtype must be float32 or float64, got {np.dtype(dtype)}")
        return self.elements.astype(np.float64) * self.scale_inv

    def classify(self, x: Any) -> dict[str, np.ndarray]:
        """As :meth:`ScaledTensor.classify`, for the one scale."""
        x = np.asarray(x, dtype=np.float64)
        el = self.elements.astype(np.float64)
        finite = np.isfinite(el)
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = np.abs(x.astype(np.float32) * np.float32(self.scale)).astype(np.float64)
        return {
            "zero": finite & (el == 0) & (x != 0),
            "subnormal": finite & (np.abs(el) > 0) & (np.abs(el) < self.fmt.min_normal),
            "saturated": finite & (scaled > self.fmt.max),
            "nonfinite": ~finite,
        }


def quantize_per_tensor(x: Any, fmt: FormatLike, scale: float, *, rounding: str = "nearest_even",
                        seed: int | None = None) -> PerTensorScaled:  # fmt: skip
    """TransformerEngine's FP8 cast: ``q = fmt(fl32(x · scale))``, saturating (NaN stays NaN),
    with the float32 ``scale``. ``rounding``: the cast's mode (round to nearest even, as TE's
    SATFINITE cast; ``"stochastic"`` with ``seed``, as TE's NVFP4 gradients).

    >>> quantize_per_tensor([1000.0, 0.01], "fp8_e4m3", 0.5).dequantize().tolist()  # 500 -> 448
    [896.0, 0.01171875]
    """
    f = get_format(fmt)
    s = np.float32(scale)
    if not (0 < float(s) < math.inf) or float(s) != float(scale):
        raise ValueError(f"scale must be a positive finite float32 value, got {scale!r}")
    x32 = np.asarray(_as_float_array(x), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        y = x32 * s  # float32 product, as TE computes it
    el = round_to(y, f, rounding, saturate=True, seed=seed)
    inv = float(np.float32(1.0) / s)  # __frcp_rn: the reciprocal rounded to float32
    return PerTensorScaled(f, float(s), inv, np.asarray(el, np.float32))


def _amax(x: Any) -> float:
    a = np.abs(np.asarray(_as_float_array(x), np.float64))
    if a.size == 0:
        return 0.0
    return float(np.max(a))  # NaN propagates (torch.amax does)


def _check_fmt_name(fmt: FormatLike) -> Format:
    f = get_format(fmt)
    if not (f.signed and f.has_zero) or f.container_dtype != np.float32:
        raise ValueError(f"{f.name} is not a format for scaled tensor values")
    return f


class CurrentScaling:
    """Per-tensor *current* scaling (TransformerEngine ``Float8CurrentScaling``): the scale of
    each tensor comes from its own amax, ``scale = fl32(fmt.max / amax) / 2^margin``.

    As TE's ``compute_scale_from_amax``: amax below ``amax_epsilon`` is raised to it; amax 0,
    inf or NaN gives scale 1; an infinite scale becomes FLT_MAX; ``power_of_2`` rounds the scale
    down to a power of two (clears its fraction bits). ``margin`` (not in TE's current scaling)
    divides by 2^margin, as delayed scaling does.

    >>> r = CurrentScaling("fp8_e4m3")
    >>> r.compute_scale(3.5), r.quantize([3.5, -1.0]).dequantize().tolist()
    (128.0, [3.5, -1.0])
    """

    def __init__(self, fmt: FormatLike = "fp8_e4m3", *, margin: int = 0,
                 power_of_2: bool = False, amax_epsilon: float = 0.0) -> None:  # fmt: skip
        self.fmt = _check_fmt_name(fmt)
        if isinstance(margin, bool) or not isinstance(margin, numbers.Integral) or margin < 0:
            raise ValueError(f"margin must be a non-negative integer, got {margin!r}")
        if not (isinstance(amax_epsilon, numbers.Real) and 0 <= amax_epsilon < math.inf):
            raise ValueError(f"amax_epsilon must be a finite number >= 0, got {amax_epsilon!r}")
        self.margin = int(margin)
        self.power_of_2 = bool(power_of_2)
        self.amax_epsilon = float(amax_epsilon)

    def compute_scale(self, amax: float) -> float:
        """The float32 scale for a tensor whose largest magnitude is ``amax``."""
        a = np.float32(amax)
        if a < np.float32(self.amax_epsilon):
            a = np.float32(self.amax_epsilon)
        if not math.isfinite(float(a)) or a == 0:
            return 1.0
        with np.errstate(over="ignore", divide="ignore"):
            s = np.float32(self.fmt.max) / a  # __fdiv_rn
            s = s / np.float32(2.0**self.margin)
        if math.isinf(float(s)):
            s = np.float32(FLT_MAX)
        if self.power_of_2:
            s = (np.array([s], np.float32).view(np.uint32) & np.uint32(0xFF800000)).view(
                np.float32
            )[0]
        return float(s)

    def quantize(self, x: Any) -> PerTensorScaled:
        return quantize_per_tensor(x, self.fmt, self.compute_scale(_amax(x)))

    def state_dict(self) -> dict:
        return {"format": self.fmt.name, "margin": self.margin, "power_of_2": self.power_of_2,
                "amax_epsilon": self.amax_epsilon}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        new = CurrentScaling(
            state["format"], margin=state["margin"], power_of_2=state["power_of_2"],
            amax_epsilon=state["amax_epsilon"],
        )  # fmt: skip
        self.__dict__.update(new.__dict__)


class DelayedScaling:
    """Per-tensor *delayed* scaling (TransformerEngine ``DelayedScaling``): a tensor is cast with
    the scale computed from the amax *history* of earlier steps.

    Each :meth:`quantize` casts with the current ``scale`` and records the tensor's amax in
    ``amax_history[0]`` (the max of this step's casts). :meth:`update` (once per step, after
    the casts) does TE's ``_default_get_amax_and_update_history`` and ``_default_sf_compute``:
    amax = max of the history (``"max"``) or its newest entry (``"most_recent"``); the history
    rolls (entry i takes entry i+1, the last takes the newest, slot 0 is cleared); the scale
    becomes ``fl32(fl32(fmt.max / amax) / 2^margin)``, kept unchanged when amax is 0 or not
    finite, FLT_MAX when infinite.

    >>> r = DelayedScaling("fp8_e4m3", amax_history_len=4)
    >>> r.quantize([2.0, -7.0]).dequantize().tolist(), r.scale   # scale 1 on the first step
    ([2.0, -7.0], 1.0)
    >>> r.update(); r.scale
    64.0
    """

    def __init__(self, fmt: FormatLike = "fp8_e4m3", *, margin: int = 0,
                 amax_history_len: int = 1024, amax_compute_algo: str = "max") -> None:  # fmt: skip
        self.fmt = _check_fmt_name(fmt)
        if isinstance(margin, bool) or not isinstance(margin, numbers.Integral) or margin < 0:
            raise ValueError(f"margin must be a non-negative integer, got {margin!r}")
        n = amax_history_len
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"amax_history_len must be a positive integer, got {n!r}")
        if amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(
                f"amax_compute_algo must be 'max' or 'most_recent', got {amax_compute_algo!r}"
            )
        self.margin = int(margin)
        self.amax_compute_algo = amax_compute_algo
        self.amax_history = np.zeros(int(n), np.float32)
        self.scale = 1.0

    def quantize(self, x: Any) -> PerTensorScaled:
        q = quantize_per_tensor(x, self.fmt, self.scale)
        self.record_amax(_amax(x))
        return q

    def record_amax(self, amax: float) -> None:
        """Record a cast tensor's amax in this step's slot, ``amax_history[0]`` (the max of the
        step's casts; NaN sticks), as :meth:`quantize` does."""
        a = np.float32(amax)
        h0 = self.amax_history[0]
        self.amax_history[0] = a if (a > h0 or np.isnan(a)) else h0

    def update(self) -> None:
        h = self.amax_history
        if self.amax_compute_algo == "max":
            amax = np.float32(np.nan) if np.isnan(h).any() else h.max()
        else:
            amax = h[0]
        self.amax_history = np.roll(h, -1)
        self.amax_history[0] = 0.0
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            sf = (np.float32(self.fmt.max) / amax) / np.float32(2.0**self.margin)
        if not (amax > 0) or not np.isfinite(amax):
            sf = np.float32(self.scale)
        if np.isinf(sf):
            sf = np.float32(FLT_MAX)
        self.scale = float(sf)

    def state_dict(self) -> dict:
        return {"format": self.fmt.name, "margin": self.margin,
                "amax_compute_algo": self.amax_compute_algo,
                "amax_history": self.amax_history.tolist(), "scale": self.scale}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        new = DelayedScaling(state["format"], margin=state["margin"],
                             amax_history_len=len(state["amax_history"]),
                             amax_compute_algo=state["amax_compute_algo"])  # fmt: skip
        new.amax_history[:] = np.asarray(state["amax_history"], np.float32)
        new.scale = float(np.float32(state["scale"]))
        self.__dict__.update(new.__dict__)
