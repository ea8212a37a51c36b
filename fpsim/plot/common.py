"""What every figure shares: the palette, the figure size unit (DPI), zone names, the
limits of a format on a log2 axis, tick placement and small text helpers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..formats import Format

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


#: One colour per meaning, shared by every figure.
PALETTE: dict[str, str] = {
    # zones of a format's number line (shaded lightly behind data, solid in range bars)
    "zero": "#7f7f7f",  # exact zeros
    "underflow": "#d62728",  # rounds to zero
    "subnormal": "#ff7f0e",  # kept with fewer significant bits
    "normal": "#2ca02c",  # full precision
    "overflow": "#9467bd",  # becomes inf (or NaN)
    # data
    "data": "#1f77b4",  # values as recorded (unscaled)
    "scaled": "#e6007e",  # the same values multiplied by a loss scale
    "skipped": "#d62728",  # a step skipped because of inf/NaN gradients
    # bit fields
    "sign": "#8fb8e8",
    "exponent": "#9fd39a",
    "mantissa": "#f4a3a3",
}

#: Resolution of every figure made here: pixel size = figsize (inches) × DPI.
DPI = 100

_ZONE_LABEL = {
    "underflow": "rounds to 0",
    "subnormal": "subnormal (fewer bits)",
    "normal": "normal (full precision)",
    "overflow": "overflow (→ inf)",
}


def _zone_label(zone: str, f: Format) -> str:
    """The legend text of a zone, from the format's properties: without inf, overflow is NaN
    (or the max, when rounding saturates), and without NaN either (FP4, FP6) the max; without
    zero (E8M0), what would round to 0 becomes the smallest value."""
    if zone == "overflow" and not f.has_inf:
        if f.has_nan:
            return "overflow (→ NaN; no inf)"
        return f"overflow (→ {'±' if f.signed else ''}max; no inf, no NaN)"
    if zone == "underflow" and not f.has_zero:
        return "→ the smallest value (no zero)"
    return _ZONE_LABEL[zone]


_SHADE_ALPHA = 0.13
_MAX_SPAN = 90  # binades: wider views leave far-away format limits off the plot


# ---- small helpers -----------------------------------------------------------------------------
def _new_figure(figsize: tuple[float, float]) -> Figure:
    """A Figure with an Agg canvas (headless, no pyplot state) and constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _root_figure(ax: Axes) -> Figure:
    try:
        return ax.get_figure(root=True)  # matplotlib >= 3.10 (subfigures)
    except TypeError:  # pragma: no cover - older matplotlib
        fig = ax.figure
        return getattr(fig, "figure", fig) or fig


def _fig_ax(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return _root_figure(ax), ax
    fig = _new_figure(figsize)
    return fig, fig.add_subplot()


def _pow2_tex(k: int) -> str:
    """``$2^{-24}$``."""
    return f"$2^{{{int(k)}}}$"


def _sci(v: float, digits: int = 3) -> str:
    """A short decimal: ``65504``, ``0.5``, ``5.96e-8``, ``3.39e38``."""
    if v == 0:
        return "0"
    if float(v).is_integer() and abs(v) < 1e6:
        return str(int(v))
    if 1e-3 <= abs(v) < 1e6:
        return f"{v:.{digits}g}"
    mant, exp = f"{v:.{digits - 1}e}".split("e")
    return f"{mant}e{int(exp)}"


def _pow2_text(v: float) -> str:
    """``2^-24 ≈ 5.96e-8`` for a power of two, ``65504 ≈ 2^16`` otherwise (mathtext)."""
    m, e = math.frexp(v)
    if m == 0.5:
        k = e - 1
        dec = _sci(v)
        return f"{_pow2_tex(k)} {'=' if float(dec) == v else '≈'} {dec}"
    return f"{_sci(v)} ≈ {_pow2_tex(round(math.log2(v)))}"


def _log2_scale(scale: float) -> int:
    """The exponent k of a power-of-two scale 2^k (ValueError for anything else)."""
    s = float(scale)
    if not (s > 0 and math.isfinite(s)):
        raise ValueError(f"scale must be a positive finite power of two, got {scale!r}")
    m, e = math.frexp(s)
    if m != 0.5:
        raise ValueError(f"scale must be a power of two (a shift of the binades), got {scale!r}")
    return e - 1


def _scale_text(k: int) -> str:
    """``×32768 (2^15)`` or ``×1/8 (2^-3)``."""
    s = f"{2**k}" if k >= 0 else f"1/{2**-k}"
    return f"×{s} ({_pow2_tex(k)})"


def _limits(f: Format) -> dict[str, float]:
    """Positions (log2 |x|) of a format's limits and zone boundaries."""
    ulp_max = 2.0 ** (f.emax - f.man_bits)
    return {
        "underflow": float(f.emin - f.man_bits - 1),  # half the smallest subnormal: ties to 0
        "smallest_subnormal": float(f.emin - f.man_bits),
        # values from min_normal - q/2 (q the smallest subnormal) round up to min_normal: the
        # normal zone starts there, a hair below 2^emin
        "normal": math.log2(f.min_normal - f.smallest_subnormal / 2),
        "smallest_normal": float(f.emin),
        "max": math.log2(f.max),
        "overflow": math.log2(f.max + ulp_max / 2),  # round-to-nearest goes to inf from here
    }


_LIMIT_NAMES = {
    "smallest_subnormal": "smallest subnormal",
    "smallest_normal": "smallest normal",
    "max": "max",
}
_LIMIT_ZONE = {"smallest_subnormal": "subnormal", "smallest_normal": "normal", "max": "overflow"}


def _limit_value(f: Format, name: str) -> float:
    return {"smallest_subnormal": f.smallest_subnormal, "smallest_normal": f.min_normal}.get(
        name, f.max
    )


def _tick_step(span: float, max_ticks: int = 14) -> int:
    for step in (1, 2, 4, 8, 16, 32, 64, 128):
        if span / step <= max_ticks:
            return step
    return 256


def _set_log2_ticks(ax: Axes, lo: float, hi: float, extra: Sequence[tuple[float, str]] = ()):
    """Ticks ``2^k`` every few binades on a log2 axis, plus extra (position, label) ticks."""
    step = _tick_step(hi - lo)
    first = math.ceil(lo / step) * step
    ks = [k for k in range(first, int(math.floor(hi)) + 1, step)]
    pos = [float(k) for k in ks] + [p for p, _ in extra]
    labels = [_pow2_tex(k) for k in ks] + [t for _, t in extra]
    ax.set_xticks(pos, labels)
