"""Scaled formats: what each scaling keeps, element by element. :func:`scaling_report` quantizes
a tensor with block schemes (MX, NVFP4), per-tensor recipes or plain formats and counts, from
each scheme's own ``classify``, what was flushed to zero, kept as a subnormal, saturated, or
kept."""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field as dataclasses_field
from typing import Any

import numpy as np

from ..formats import Format, get_format

__all__ = ["scaling_report", "ScalingRow", "DEFAULT_SCALING_SCHEMES", "OUTCOMES"]

#: What :func:`scaling_report` compares by default: fp16 without a scale, fp8 E4M3 with one
#: per-tensor scale (TransformerEngine's current scaling), and the block formats MXFP8 (E4M3),
#: MXFP4 and NVFP4.
DEFAULT_SCALING_SCHEMES = ("fp16", "fp8_e4m3/current", "mxfp8_e4m3", "mxfp4", "nvfp4")

#: The outcomes :class:`ScalingRow` counts; every non-zero finite element has exactly one.
OUTCOMES = ("zero", "subnormal", "saturated", "kept")


@dataclass(frozen=True)
class ScalingRow:
    """What quantizing one tensor with one scheme did to it (a row of :func:`scaling_report`).

    ``label``: the scheme as given (``"mxfp4"``, ``"fp8_e4m3, current scaling"``, ...);
    ``kind``: ``"none"`` (rounded as is), ``"per-tensor"`` or ``"per-block"``; ``element``: the
    format the values are stored in; ``bits_per_element``: its bits plus the scales' bits
    spread over the elements (one float32 per tensor, one scale per block).

    Counts, each from the scheme's ``classify`` (exact, element by element): ``values`` (all
    elements), ``nonzero`` (the finite non-zero ones), ``zero`` (non-zero, stored as 0:
    flushed), ``subnormal`` (stored as a subnormal of the element format: fewer significant
    bits), ``saturated`` (beyond the element's max after scaling: clipped to it, or, unscaled,
    overflowed to inf/NaN), ``nonfinite`` (inf/NaN in x, or in a block holding one). ``kept``
    is what is left: stored as a normal number (or an exact zero that was zero).

    Errors, over the finite elements of x, with ``q`` the dequantized tensor: ``norm_error`` =
    ||x - q|| / ||x|| (Euclidean: set by the largest values) and ``mean_error`` = the mean of
    |x - q| / |x| over the non-zero elements (every flushed element counts 1: set by the
    many small ones). ``scale_exponents``: log2 of every scale the dequantization multiplies
    by (one per block, times the tensor scale for NVFP4; one for a per-tensor scale, its
    ``scale_inv``; none without scaling). ``result``: what the scheme's quantize returned
    (a :class:`~fpsim.scaling.ScaledTensor`, a :class:`~fpsim.scaling.PerTensorScaled`, or the
    rounded array).
    """

    label: str
    kind: str
    element: Format
    bits_per_element: float
    values: int
    nonzero: int
    zero: int
    subnormal: int
    saturated: int
    nonfinite: int
    norm_error: float
    mean_error: float
    scale_exponents: np.ndarray = dataclasses_field(repr=False, compare=False)
    result: Any = dataclasses_field(repr=False, compare=False)

    @property
    def kept(self) -> int:
        """Elements stored as normal numbers (or zeros that were zero)."""
        return self.values - self.zero - self.subnormal - self.saturated - self.nonfinite

    def fractions(self) -> dict[str, float]:
        """``zero``, ``subnormal``, ``saturated``, ``kept`` (and ``nonfinite``) as shares of all
        the elements; they add up to 1."""
        n = max(self.values, 1)
        return {k: getattr(self, k) / n for k in OUTCOMES + ("nonfinite",)}


def _outcome_masks(x: np.ndarray, q: np.ndarray, f: Format) -> dict[str, np.ndarray]:
    """classify() for a tensor rounded without a scale: as the scaled ones' (``q`` the stored
    values, ``f`` their format), an overflow to inf/NaN counting as saturated."""
    fin_x = np.isfinite(x)
    fin_q = np.isfinite(q)
    mag = np.abs(q)
    with np.errstate(invalid="ignore"):
        return {
            "zero": fin_x & fin_q & (q == 0) & (x != 0),
            "subnormal": fin_x & fin_q & (mag > 0) & (mag < f.min_normal),
            "saturated": fin_x & ((np.abs(x) > f.max) | ~fin_q),
            "nonfinite": ~fin_x,
        }


def _scaling_spec(spec: Any) -> tuple[str | None, Any, dict]:
    """``spec`` -> (label or None, the scheme / format / recipe, options)."""
    if isinstance(spec, tuple):
        if len(spec) == 2 and isinstance(spec[0], str):
            return spec[0], spec[1], {}
        if len(spec) == 3 and isinstance(spec[0], str) and isinstance(spec[2], dict):
            return spec[0], spec[1], dict(spec[2])
        raise TypeError(
            "a scheme given as a tuple is (label, scheme) or (label, scheme, options); "
            f"got {spec!r}"
        )
    return None, spec, {}


def _quantize_one(x: np.ndarray, spec: Any, axis: int):
    """Quantize x with one spec: -> (label, kind, element format, bits/element, a function
    giving the dequantized values, masks, log2 scales, result)."""
    from .. import scaling

    label, what, opts = _scaling_spec(spec)
    if isinstance(what, str) and what.strip().lower().endswith(("/current", "/delayed")):
        name, how = what.strip().rsplit("/", 1)
        what = (scaling.CurrentScaling if how.lower() == "current" else scaling.DelayedScaling)(
            name, **opts
        )
        opts = {}
    if isinstance(what, (scaling.CurrentScaling, scaling.DelayedScaling)):
        if opts:
            raise TypeError(f"a per-tensor recipe takes no options here, got {opts!r}")
        how = "current" if isinstance(what, scaling.CurrentScaling) else "delayed"
        p = what.quantize(x)
        masks = p.classify(x)
        bits = what.fmt.bits + 32 / max(x.size, 1)
        logs = np.array([math.log2(p.scale_inv)])
        return (label or f"{what.fmt.name}, {how} scaling", "per-tensor", what.fmt, bits,
                p.dequantize, masks, logs, p)  # fmt: skip
    scheme = None
    if isinstance(what, scaling.BlockScheme):
        scheme = what
    elif isinstance(what, str):
        try:
            scheme = scaling.get_scheme(what)
        except ValueError:
            scheme = None
    if scheme is not None:
        q = scaling.quantize(x, scheme, axis=axis, **opts)
        masks = q.classify(x)
        nblocks = q.scales.size
        extra = 32 if q.tensor_scale is not None else 0
        bits = scheme.element.bits + (nblocks * scheme.scale.bits + extra) / max(x.size, 1)
        eff = q.scales * (q.tensor_scale if q.tensor_scale is not None else 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log2(eff[np.isfinite(eff) & (eff > 0)]).ravel()
        name = scheme.name
        if opts.get("scale_rounding") not in (None, scheme.scale_roundings[0]):
            name += f", {opts['scale_rounding']}"
        return label or name, "per-block", scheme.element, bits, q.dequantize, masks, logs, q
    from ..core import round_to

    f = get_format(what)  # raises ValueError naming the known formats
    r = np.asarray(round_to(x, f, **opts))
    q64 = r.astype(np.float64)
    return (label or f.name, "none", f, float(f.bits), lambda: q64, _outcome_masks(x, q64, f),
            np.zeros(0), r)  # fmt: skip


def _errors(x: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(||x - q|| / ||x||, mean |x - q| / |x| over non-zero x), over the finite x."""
    fin = np.isfinite(x)
    xf, qf = x[fin], q[fin]
    if xf.size == 0:
        return 0.0, 0.0
    m = float(np.max(np.abs(xf)))
    with np.errstate(over="ignore", invalid="ignore"):
        if m == 0:
            norm = 0.0 if np.all(qf == 0) else math.inf
        else:  # divided by the amax first: no overflow in the squares
            d, xs = (xf - qf) / m, xf / m
            norm = float(np.sqrt(np.sum(d * d)) / np.sqrt(np.sum(xs * xs)))
        nz = xf != 0
        rel = np.abs(xf[nz] - qf[nz]) / np.abs(xf[nz])
    mean = float(np.mean(rel)) if rel.size else 0.0
    return (math.inf if math.isnan(norm) else norm), (math.inf if math.isnan(mean) else mean)


def scaling_report(x: Any, schemes: Any = DEFAULT_SCALING_SCHEMES, *, axis: int = -1,
                   errors: bool = True) -> list[ScalingRow]:  # fmt: skip
    """Quantize ``x`` with each scheme and count, element by element, what was flushed to zero,
    kept only as a subnormal, saturated, or kept: one :class:`ScalingRow` per scheme.

    A scheme is a block scheme (a name of :data:`fpsim.scaling.SCHEMES` or a
    :class:`~fpsim.scaling.BlockScheme`; blocks run along ``axis``), a per-tensor recipe
    (:class:`~fpsim.scaling.CurrentScaling` / :class:`~fpsim.scaling.DelayedScaling`, or
    ``"fp8_e4m3/current"``, ``"fp8_e5m2/delayed"``: a fresh recipe, whose delayed scale is
    then 1), or a format (``"fp16"``: :func:`fpsim.round_to` without any scale). ``(label,
    scheme)`` names the row; ``(label, scheme, options)`` passes options on: to
    :func:`fpsim.scaling.quantize` (``{"scale_rounding": "rceil"}``), the recipe's constructor
    or :func:`fpsim.round_to` (``{"saturate": True}``).

    The counts come from ``classify`` of the quantized tensor, so they are exact.
    ``errors=False`` leaves the two errors out (NaN), for speed. ``x`` is read
    as float64 (float32 input exactly); the per-tensor recipes see its float32 values, as
    TransformerEngine casts them.

    >>> import numpy as np
    >>> x = np.array([6.0, 0.1, 0.01, 1e-5] * 8)  # one block of 32
    >>> for r in scaling_report(x, ["mxfp4", "fp8_e4m3/current", "fp16"]):
    ...     print(f"{r.label:26} {r.bits_per_element:5.2f} bits  zero {r.zero:2}  "
    ...           f"subnormal {r.subnormal:2}  saturated {r.saturated}")
    mxfp4                       4.25 bits  zero 24  subnormal  0  saturated 0
    fp8_e4m3, current scaling   9.00 bits  zero  8  subnormal  0  saturated 0
    fp16                       16.00 bits  zero  0  subnormal  8  saturated 0
    """
    if isinstance(schemes, str) or not isinstance(schemes, (list, tuple)):
        schemes = [schemes]
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"scaling_report expects real numbers, got an array of {a.dtype}")
    xd = a.astype(np.float64)
    rows = []
    for spec in schemes:
        label, kind, f, bits, deq, masks, logs, res = _quantize_one(a, spec, axis)
        norm, mean = _errors(xd, deq()) if errors else (math.nan, math.nan)
        fin = np.isfinite(xd)
        zero, sub, sat = (masks[k] & fin for k in ("zero", "subnormal", "saturated"))
        nonfinite = (masks["nonfinite"] | ~fin) & ~(zero | sub | sat)
        rows.append(ScalingRow(
            label=label, kind=kind, element=f, bits_per_element=float(bits), values=int(xd.size),
            nonzero=int(np.count_nonzero(fin & (xd != 0))),
            zero=int(np.count_nonzero(zero)), subnormal=int(np.count_nonzero(sub)),
            saturated=int(np.count_nonzero(sat)), nonfinite=int(np.count_nonzero(nonfinite)),
            norm_error=norm, mean_error=mean, scale_exponents=logs, result=res,
        ))  # fmt: skip
    return rows
