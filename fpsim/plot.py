"""Teaching figures: value ranges, gradient histograms, loss curves, bit fields, number lines.

Every function draws with matplotlib and returns the :class:`matplotlib.figure.Figure`; nothing
is shown or saved (``fig.savefig("out.png")`` is the caller's choice; in Jupyter, run
``%matplotlib inline`` once and a cell that returns a Figure displays it). Figures are made
with :class:`matplotlib.figure.Figure` and an Agg canvas, never through pyplot's global state,
so the module works headless and a notebook shows each figure once. Functions that draw a
single panel accept ``ax=`` to draw into an existing Axes instead (the Figure returned is then
that Axes' figure).

The colours mean the same thing in every figure (:data:`PALETTE`): the *zones* of a format's
number line — values that round to zero (``underflow``), ``subnormal`` values (kept, with fewer
significant bits), ``normal`` values and ``overflow`` (to inf; to NaN in the "fn" formats such
as fp8_e4m3, which have no inf) — and the data drawn over them. Powers of two are written in
mathtext (:math:`2^{-24}`) everywhere, and legends list only what is drawn.

========================================  ====================================================
:func:`plot_range_histogram`              |x| per binade over a format's zones and limits;
                                          the zero bin apart; optionally the shift by a scale
:func:`plot_histograms_side_by_side`      the same histogram under several scales
:func:`plot_layer_histograms`             small multiples, one histogram per layer
:func:`plot_loss_curves`                  loss per step for several recipes (NaN/inf: gaps)
:func:`plot_scale_trajectory`             a loss scale over the steps, skipped steps marked
:func:`plot_format_ranges`                subnormal and normal range of several formats
:func:`plot_bit_fields`                   one number's sign, exponent and mantissa bits
:func:`plot_number_line`                  every representable value, and values per binade
========================================  ====================================================

>>> import numpy as np
>>> from fpsim.stats import RangeHistogram
>>> h = RangeHistogram()
>>> h.add(np.array([0.0, 0.0, 2.0**-30, 3e-8, 1e-6, 0.5]))
>>> fig = plot_range_histogram(h, "fp16", scale=2**15)
>>> fig.canvas.get_width_height()  # 12 × 5 inches at DPI = 100
(1200, 500)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .formats import Format, FormatLike, get_format

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .stats import RangeHistogram

__all__ = [
    "PALETTE",
    "DPI",
    "plot_range_histogram",
    "plot_histograms_side_by_side",
    "plot_layer_histograms",
    "plot_loss_curves",
    "plot_scale_trajectory",
    "plot_format_ranges",
    "plot_bit_fields",
    "plot_number_line",
]

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
    """The legend text of a zone; an "fn" format has no inf, so its overflow is NaN (or the
    max, when rounding saturates)."""
    if zone == "overflow" and not f.has_inf:
        return "overflow (→ NaN; no inf in fn formats)"
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


# ---- range histograms --------------------------------------------------------------------------
def _zone_counts(hist: RangeHistogram, f: Format, k: int) -> tuple[dict, bool]:
    """Zone counts after a scale 2^k, and whether they are exact.

    ``hist.zones`` is exact for the formats the histogram was built for; for any other format
    the counts are computed here from whole binades, approximate in the three binades a zone
    boundary cuts through: half the smallest subnormal q/2 (the tie, which rounds to 0, counts
    as subnormal), the binade below the smallest normal (its values from min_normal - q/2 up
    round up to min_normal but count as subnormal) and the top binade (values past max + ulp/2
    overflow but count as normal).
    """
    try:
        return hist.zones(f, 2.0**k), True
    except ValueError:
        exps, counts = hist.bins()
        e = exps + k
        lim = _limits(f)
        under = int(counts[e < lim["underflow"]].sum())
        sub = int(counts[(e >= lim["underflow"]) & (e < f.emin)].sum())
        over = int(counts[e > f.emax].sum())
        normal = int(counts.sum()) - under - sub - over
        z = dict(zero=hist.zero, underflow=under, subnormal=sub, normal=normal, overflow=over)
        return z | {"nonfinite": hist.nonfinite}, False


def _lost(z: dict) -> float:
    nonzero = z["underflow"] + z["subnormal"] + z["normal"] + z["overflow"]
    return z["underflow"] / nonzero if nonzero else 0.0


def _hist_view(
    hists: Iterable[RangeHistogram], shifts: Iterable[int], f: Format
) -> tuple[float, float, list[str]]:
    """The log2 range to show: the data (shifted by each k) and the format's limits.

    When data and limits together span more than ``_MAX_SPAN`` binades (bf16, fp32), limits
    further than 16 binades from the data are left out; their names are returned.
    """
    lim = _limits(f)
    lo_f, hi_f = lim["underflow"] - 1, lim["overflow"] + 1
    los, his = [], []
    for h in hists:
        exps, _ = h.bins()
        if exps.size:
            for k in shifts:
                los.append(exps[0] + k)
                his.append(exps[-1] + 1 + k)
    if not los:
        return lo_f - 2, hi_f + 2, []
    d_lo, d_hi = float(min(los)), float(max(his))
    if max(d_hi, hi_f) - min(d_lo, lo_f) <= _MAX_SPAN:
        return min(d_lo, lo_f) - 2, max(d_hi, hi_f) + 2, []
    lo, hi, off = d_lo, d_hi, []
    for name in _LIMIT_NAMES:
        x = lim[name]
        if d_lo - 16 <= x <= d_hi + 16:
            lo, hi = min(lo, x - 2), max(hi, x + 2)
        else:
            off.append(name)
    return lo - 2, hi + 2, off


def _draw_zones(ax: Axes, f: Format, lo: float, hi: float) -> None:
    """Shade the zones of ``f`` over [lo, hi] (log2 |x|)."""
    for zone, (a, b) in _zone_edges(f).items():
        a, b = max(a, lo), min(b, hi)
        if b > a:
            ax.axvspan(a, b, color=PALETTE[zone], alpha=_SHADE_ALPHA, lw=0, zorder=0, gid=zone)


def _zone_edges(f: Format) -> dict[str, tuple[float, float]]:
    """Each zone's [start, end) on the log2 |x| axis: where round-to-nearest-even puts it."""
    lim = _limits(f)
    return {
        "underflow": (-math.inf, lim["underflow"]),
        "subnormal": (lim["underflow"], lim["normal"]),
        "normal": (lim["normal"], lim["overflow"]),
        "overflow": (lim["overflow"], math.inf),
    }


def _zones_in_view(f: Format, lo: float, hi: float) -> list[str]:
    """The zones of ``f`` that show between lo and hi (their shading is drawn)."""
    return [z for z, (a, b) in _zone_edges(f).items() if min(b, hi) > max(a, lo)]


def _axes_width_in(ax: Axes, legend_outside: bool) -> float:
    """The Axes' width in inches before layout (less the room an outside legend will take)."""
    fig = _root_figure(ax)
    w = ax.get_position().width * fig.get_figwidth()
    return w * (0.85 if legend_outside else 0.95)


def _draw_limit_lines(
    ax: Axes,
    f: Format,
    view: tuple[float, float],
    xlim: tuple[float, float] | None,
    off: Sequence[str] = (),
    zone_note: str | None = None,
) -> tuple[list, int]:
    """Dashed lines at the smallest subnormal, smallest normal and max of ``f``.

    With ``xlim`` (the final x limits) the lines in ``view`` are also labelled at the top of
    the Axes, in as many rows as it takes for the labels not to overlap; the limits named in
    ``off`` (left out of the view) are written at the edge they lie beyond. Returns the
    handles of the lines in view (for a legend) and the number of label rows used.
    ``zone_note`` is written at the top left of the rounds-to-zero zone when it fits there.
    """
    lim = _limits(f)
    lo, hi = view
    handles, labels = [], []
    for name, text in _LIMIT_NAMES.items():
        x = lim[name]
        value = _limit_value(f, name)
        colour = PALETTE[_LIMIT_ZONE[name]]
        line = ax.axvline(x, color=colour, ls="--", lw=1.3, zorder=3, gid=f"limit:{name}")
        line.set_label(f"{text} {_pow2_text(value)}")
        if lo < x < hi:  # lines off the view are not drawn, so not in the legend either
            handles.append(line)
            labels.append((x, name, f"{text}\n{_pow2_text(value)}", colour))
    if xlim is None:
        return handles, 0
    # Estimated label widths in data units (about 0.55 em per character, plus the padding).
    fontsize = 8.5
    per_inch = (xlim[1] - xlim[0]) / max(_axes_width_in(ax, True), 1.0)
    rows: list[list[tuple[float, float]]] = []
    placed = []
    if zone_note is not None:
        chars = max(len(t) for t in zone_note.split("\n"))
        w = (chars * 0.55 * fontsize + 8) / 72 * per_inch
        if lo + 0.3 + w < lim["underflow"] - 0.2:
            rows.append([(lo + 0.3, lo + 0.3 + w)])
            ax.text(
                lo + 0.3, 0.975, zone_note, transform=ax.get_xaxis_transform(), ha="left",
                va="top", fontsize=fontsize, zorder=6, color="#a01010", gid="zone_note",
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec=PALETTE["underflow"], lw=0.8,
                          alpha=0.9),
            )  # fmt: skip
    for x, name, text, colour in labels:
        chars = max(len(name_line) for name_line in (_LIMIT_NAMES[name], "2^-24 = 5.96e-8"))
        w = (chars * 0.55 * fontsize + 8) / 72 * per_inch
        gap = 0.35
        right = name == "smallest_normal"  # to the right of its line; the others to the left
        if right and x + gap + w > xlim[1]:
            right = False
        if not right and x - gap - w < lo - 1:
            right = True
        a, b = (x + gap, x + gap + w) if right else (x - gap - w, x - gap)
        free = [
            i for i, spans in enumerate(rows) if all(b + 0.2 < c or a > d + 0.2 for c, d in spans)
        ]
        if free:
            row = free[0]
            rows[row].append((a, b))
        else:
            rows.append([(a, b)])
            row = len(rows) - 1
        placed.append((x, right, row, text, colour))
    for x, right, row, text, colour in placed:
        ax.text(
            x + (0.35 if right else -0.35), 0.975 - 0.115 * row, text,
            transform=ax.get_xaxis_transform(), ha="left" if right else "right", va="top",
            fontsize=fontsize, zorder=6, gid="limit_label",
            bbox=dict(boxstyle="round,pad=0.2", fc="white", ec=colour, lw=0.8, alpha=0.9),
        )  # fmt: skip
    left = [n for n in off if lim[n] < lo]
    right_off = [n for n in off if lim[n] > hi]
    for names, x, ha, arrow in ((left, lo + 0.3, "left", "←"), (right_off, xlim[1] - 0.3,
                                "right", "→")):  # fmt: skip
        if names:
            parts = [f"{_LIMIT_NAMES[n]} {_pow2_text(_limit_value(f, n))}" for n in names]
            body = "\n".join(parts)
            ax.text(
                x, 0.975, f"{arrow} off the plot:\n{body}" if ha == "left" else
                f"off the plot: {arrow}\n{body}", transform=ax.get_xaxis_transform(), ha=ha,
                va="top", fontsize=fontsize, zorder=6, color="#333333", gid="limit_label",
                bbox=dict(boxstyle="round,pad=0.25", fc="white", ec="#999999", lw=0.8, alpha=0.9),
            )  # fmt: skip
    return handles, max(len(rows), 1 if labels or off else 0)


def _draw_break(ax: Axes, x: float) -> None:
    """The axis-break mark ``//`` on the bottom spine at x (data units)."""
    from matplotlib.transforms import blended_transform_factory, offset_copy

    trans = blended_transform_factory(ax.transData, ax.transAxes)
    fig = _root_figure(ax)
    ax.plot([x - 0.45, x + 0.45], [0, 0], transform=trans, color="white", lw=3, clip_on=False,
            solid_capstyle="butt", zorder=5)  # fmt: skip
    for dx in (-3, 3):  # points
        t = offset_copy(trans, fig=fig, x=dx, y=0, units="points")
        ax.plot([x], [0], transform=t, marker=[(-1, -1.6), (1, 1.6)], ms=9, mew=1, color="black",
                clip_on=False, zorder=6, ls="none")  # fmt: skip


def _draw_range_hist(
    ax: Axes,
    hist: RangeHistogram,
    f: Format,
    *,
    shift: int = 0,
    overlay: int | None = None,
    view: tuple[float, float, list[str]] | None = None,
    labels: bool = True,
    ymax: float | None = None,
    data_label: str = "values",
) -> dict[str, Any]:
    """Draw one range histogram into ``ax``; return its handles and numbers.

    ``shift``: the binades drawn are those of the values × 2^shift (side-by-side panels);
    ``overlay``: also draw the values × 2^overlay (second colour) with the shift annotated;
    ``view``: (lo, hi, limits off the plot) as from :func:`_hist_view`; ``labels``: label the
    limit lines at the top of the Axes (else only the legend names them).
    """
    exps, counts = hist.bins()
    if view is None:
        shifts = [shift] if overlay is None else [shift, shift + overlay]
        view = _hist_view([hist], shifts, f)
    lo, hi, off = view
    # The zero bar sits left of a gap with an axis break; about 0.22 inch wide, at least 2 binades.
    per_inch = (hi - lo) / max(_axes_width_in(ax, labels), 1.0)
    zw = max(2.0, 0.22 * per_inch)
    zero_x = lo - 2.5 - zw / 2  # its centre
    xlim = (zero_x - zw / 2 - 0.1 * zw - 0.5, hi)
    total = max(hist.count, 1)
    z, exact = _zone_counts(hist, f, shift)
    out: dict[str, Any] = {"zones": z, "exact": exact, "lost": _lost(z)}
    approx = "" if exact else "≈"

    _draw_zones(ax, f, lo, hi)
    note = f"rounds to 0 in {f.name}:\n{approx}{_pct(out['lost'])} of non-zero values"
    lines, nrows = _draw_limit_lines(
        ax, f, (lo, hi), xlim if labels else None, off if labels else (),
        zone_note=note if labels and z["underflow"] else None,
    )  # fmt: skip

    main_colour = PALETTE["data"] if shift == 0 else PALETTE["scaled"]
    bars = ax.bar(
        exps + shift, counts, width=1.0, align="edge", color=main_colour, ec="white", lw=0.4,
        zorder=2, label=data_label,
    )  # fmt: skip
    for p in bars:
        p.set_gid("bin")
    zero = ax.bar(
        [zero_x], [hist.zero], width=zw, color=PALETTE["zero"], ec="white", lw=0.4, zorder=2,
        label="exact zeros",
    )  # fmt: skip
    zero[0].set_gid("zero")
    from matplotlib.patches import Patch

    # legend handles of their own: a bar container with no bars has no colour to show
    handles = [Patch(color=main_colour, label=data_label)] if counts.size else []
    if hist.zero:  # no zeros: the bar has no height, so no legend entry either
        handles.append(Patch(color=PALETTE["zero"], label="exact zeros"))

    # The y range leaves headroom for the labels; it is set by the binade bars, so a zero bar
    # far taller than them is cut at the top (marked, with its count written in it).
    tallest = int(counts.max()) if counts.size else max(hist.zero, 1)
    top = ymax if ymax is not None else tallest * (1.5 + 0.17 * max(nrows - 1, 0))
    if overlay is not None:
        k = overlay
        sbars = ax.bar(
            exps + shift + k, counts, width=1.0, align="edge", color=PALETTE["scaled"],
            alpha=0.55, ec="white", lw=0.4, zorder=2.5, label=f"{data_label} {_scale_text(k)}",
        )  # fmt: skip
        for p in sbars:
            p.set_gid("scaled_bin")
        handles.append(Patch(color=PALETTE["scaled"], alpha=0.55, label=sbars.get_label()))
        zs, exact_s = _zone_counts(hist, f, shift + k)
        out |= {"zones_scaled": zs, "lost_scaled": _lost(zs), "exact": exact and exact_s}
        if counts.size and k != 0:
            peak = float(exps[int(np.argmax(counts))] + shift) + 0.5
            y = tallest * 1.1
            ax.annotate(
                "", xy=(peak + k, y), xytext=(peak, y),
                arrowprops=dict(arrowstyle="-|>", color="black", lw=1.5, mutation_scale=14),
                zorder=7,
            )  # fmt: skip
            sign = "+" if k > 0 else "−"
            text = f"{_scale_text(k)}: every exponent {sign} {abs(k)}"
            half = (len(text) - 8) * 0.55 * 9.5 / 72 * per_inch / 2  # (mathtext counted short)
            xt = min(max(peak + k / 2, lo + half), hi - half)
            ax.text(
                xt, y + 0.04 * top, text,
                ha="center", va="bottom", fontsize=9.5, zorder=7, gid="shift_label",
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85),
            )  # fmt: skip

    ax.set_ylim(0, top)
    share = f"{100 * hist.zero / total:.0f}%"
    if hist.zero > top:
        ax.plot([zero_x], [top * 0.86], marker=[(-1, -0.5), (1, 0.5)], ms=16, mew=3,
                color="white", ls="none", zorder=3)  # fmt: skip
        ax.text(zero_x, top * 0.8, f"{hist.zero:,} ({share})", rotation=90, ha="center",
                va="top", fontsize=8, color="white", zorder=6, fontweight="bold")  # fmt: skip
    else:
        ax.text(zero_x, hist.zero + top * 0.01, share, ha="center", va="bottom", fontsize=8,
                color=PALETTE["zero"], zorder=6)  # fmt: skip
    ax.set_xlim(*xlim)
    _set_log2_ticks(ax, lo + 1, hi, extra=[(zero_x, "0")])
    _draw_break(ax, lo - 1.25)
    ax.axvline(lo - 1.25, color="#bbbbbb", lw=0.8, ls=":", zorder=1)
    ax.set_xlabel("|x|   (log₂ axis: one bar per binade [$2^k$, $2^{k+1}$); exact zeros apart)")
    ax.set_ylabel("number of values")
    from matplotlib.ticker import FuncFormatter

    # counts written out (1,000,000), not as 1.0 under a "1e6" in the corner
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.grid(axis="y", alpha=0.3, lw=0.6)
    ax.set_axisbelow(True)
    out |= {"handles": handles, "lines": lines, "view": (lo, hi)}
    return out


def _zone_handles(f: Format, view: tuple[float, float]) -> list:
    """Legend patches for the zones of ``f`` shaded in ``view`` (lo, hi), and no others."""
    from matplotlib.patches import Patch

    return [
        Patch(color=PALETTE[z], alpha=2.5 * _SHADE_ALPHA, label=_zone_label(z, f), gid=z)
        for z in _zones_in_view(f, *view)
    ]


def _pct(x: float) -> str:
    """A percentage that never rounds to a misleading 0% or 100%: 0.9999 is "99.99%"."""
    if x == 0 or x == 1:
        return f"{100 * x:.0f}%"
    if x < 0.001:
        return f"{100 * x:.2g}%"
    if x > 0.999:
        text = f"{100 * x:.2f}"
        return f"{text}%" if float(text) < 100 else ">99.99%"
    return f"{100 * x:.1f}%"


def plot_range_histogram(
    hist: RangeHistogram,
    fmt: FormatLike = "fp16",
    scale: float | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """The histogram of |x| per binade over the range of ``fmt`` (the paper's Figure 3, redone).

    Drawn on a log₂|x| axis: one bar per binade ``[2^k, 2^(k+1))`` (bar from k to k+1) with the
    count of values in it; the exact zeros as a separate grey bar at the left, past an axis
    break, labelled "0" and with their share of all values; the zones of ``fmt`` shaded (rounds
    to zero: |x| <= half the smallest subnormal; subnormal; normal; overflow) and dashed lines
    at its smallest subnormal, smallest normal and max, labelled as 2^k and in decimal (fp16:
    2^-24, 2^-14, 65504). A side box gives the fraction of the non-zero values lost to zero, the
    subnormal and overflow fractions and the count of inf/NaN values (not drawn).

    ``scale=S`` (a power of two, as loss scales are) overlays the values × S in a second,
    semi-transparent colour: the same bars moved right by log₂ S, an arrow marks the shift and
    the box gives the new fractions. ``ax``: draw into this Axes (the legend goes to its right).

    Figure: 12 × 5 inches at :data:`DPI` (1200 × 500 pixels).

    >>> import numpy as np; from fpsim.stats import RangeHistogram
    >>> h = RangeHistogram(); h.add(np.array([0.0, 2.0**-30, 1e-6, 0.5]))
    >>> fig = plot_range_histogram(h, "fp16", scale=2**10, title="demo")
    """
    f = get_format(fmt)
    fig, ax = _fig_ax(ax, (12, 5))
    k = None if scale is None else _log2_scale(scale)
    view = _hist_view([hist], [0] if k is None else [0, k], f)
    info = _draw_range_hist(ax, hist, f, overlay=k, view=view)

    ax.set_title(title or f"|x| per binade against {f.name}'s range", loc="left", fontsize=12)
    ax.legend(
        handles=info["handles"] + _zone_handles(f, info["view"]) + info["lines"],
        loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, frameon=False,
        title=f"{f.name}: 1 sign · {f.exp_bits} exponent · {f.man_bits} mantissa bits",
        title_fontsize=9,
    )  # fmt: skip
    z = info["zones"]
    approx = "" if info["exact"] else "≈"
    rows = [
        f"{hist.count:,} values; {hist.zero:,} exactly 0",
        f"lost to zero in {f.name}: {approx}{_pct(info['lost'])}",
        "   of the non-zero values",
        f"subnormal: {approx}{_pct(_frac(z, 'subnormal'))}, overflow: {z['overflow']:,}",
    ]
    if k is not None:
        zs = info["zones_scaled"]
        rows += [
            f"after {_scale_text(k)}:",
            f"   lost to zero: {approx}{_pct(info['lost_scaled'])}",
            f"   subnormal: {approx}{_pct(_frac(zs, 'subnormal'))}, overflow: {zs['overflow']:,}",
        ]
    rows.append(f"inf/NaN (not drawn): {hist.nonfinite:,}")
    ax.text(
        1.015, 0.0, "\n".join(rows), transform=ax.transAxes, ha="left", va="bottom",
        fontsize=8.5, linespacing=1.35, gid="stats",
        bbox=dict(boxstyle="round,pad=0.4", fc="#f7f7f7", ec="#cccccc"),
    )  # fmt: skip
    return fig


def _frac(z: dict, zone: str) -> float:
    nonzero = z["underflow"] + z["subnormal"] + z["normal"] + z["overflow"]
    return z[zone] / nonzero if nonzero else 0.0


def plot_histograms_side_by_side(
    hist: RangeHistogram,
    fmt: FormatLike = "fp16",
    scales: Sequence[float] = (1, 2**15),
) -> Figure:
    """The same histogram under each scale in ``scales``, one panel each, y axis shared.

    Each panel draws the values × S (S a power of two) over the zones and limits of ``fmt`` as
    in :func:`plot_range_histogram` (unscaled in the data colour, scaled in the scaled colour);
    the panel title gives the scale and the fraction of non-zero values lost to zero and
    overflowing. All panels show the same log₂ range, so the shift is visible as a move.

    Figure: (5.5 × len(scales) + 0.5) × 5.2 inches at :data:`DPI`.

    >>> import numpy as np; from fpsim.stats import RangeHistogram
    >>> h = RangeHistogram(); h.add(np.array([0.0, 2.0**-30, 1e-6, 0.5]))
    >>> len(plot_histograms_side_by_side(h, "fp16", scales=(1, 8, 2**15)).axes)
    3
    """
    f = get_format(fmt)
    ks = [_log2_scale(s) for s in scales]
    if not ks:
        raise ValueError("scales must not be empty")
    fig = _new_figure((5.5 * len(ks) + 0.5, 5.2))
    axes = fig.subplots(1, len(ks), sharey=True, squeeze=False)[0]
    view = _hist_view([hist], ks, f)
    _, counts = hist.bins()
    ymax = (int(counts.max()) if counts.size else max(hist.zero, 1)) * 1.5
    info = {}
    for ax, k in zip(axes, ks, strict=True):
        info = _draw_range_hist(ax, hist, f, shift=k, view=view, ymax=ymax, labels=False)
        z = info["zones"]
        approx = "" if info["exact"] else "≈"
        ax.set_title(
            f"values {_scale_text(k)}\nlost to zero: {approx}{_pct(info['lost'])}"
            f" · subnormal: {approx}{_pct(_frac(z, 'subnormal'))} · overflow: {z['overflow']:,}",
            fontsize=10,
        )
        ax.set_xlabel("|x| (log₂; one bar per binade)")
        if ax is not axes[0]:
            ax.set_ylabel("")
    from matplotlib.patches import Patch

    bars = []  # only what some panel draws
    if 0 in ks and hist.count > hist.zero + hist.nonfinite:
        bars.append(Patch(color=PALETTE["data"], label="values (×1)"))
    if any(ks) and hist.count > hist.zero + hist.nonfinite:
        bars.append(Patch(color=PALETTE["scaled"], label="values × scale"))
    if hist.zero:
        bars.append(Patch(color=PALETTE["zero"], label="exact zeros"))
    fig.legend(
        handles=bars + _zone_handles(f, info["view"]) + info["lines"],
        loc="outside lower center", ncol=5, fontsize=8.5, frameon=False,
    )  # fmt: skip
    fig.suptitle(f"The same values under different scales, against {f.name}'s range")
    return fig


def plot_layer_histograms(
    hists: Mapping[str, RangeHistogram],
    fmt: FormatLike = "fp16",
    scale: float | None = None,
) -> Figure:
    """Small multiples: one range histogram per layer (the keys are the panel titles).

    Each panel is a compact :func:`plot_range_histogram` (bars per binade, zero bar apart,
    ``fmt``'s zones and limit lines) titled with the layer name and the fraction of its non-zero
    values lost to zero; with ``scale`` the scaled values are overlaid and their loss added.
    All panels share the log₂ x range, three per row.

    Figure: (4.2 × columns) × (2.9 × rows + 1.0) inches at :data:`DPI`.

    >>> import numpy as np; from fpsim.stats import RangeHistogram
    >>> a, b = RangeHistogram(), RangeHistogram()
    >>> a.add(np.array([0.0, 1e-9, 1e-3])); b.add(np.array([2.0**-20, 0.5]))
    >>> len(plot_layer_histograms({"fc1": a, "fc2": b}, "fp16", scale=2**12).axes)
    2
    """
    f = get_format(fmt)
    if not hists:
        raise ValueError("no histograms to plot")
    k = None if scale is None else _log2_scale(scale)
    n = len(hists)
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig = _new_figure((4.2 * ncols, 2.9 * nrows + 1.0))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    view = _hist_view(hists.values(), [0] if k is None else [0, k], f)
    info = {}
    for ax, (name, h) in zip(axes, hists.items(), strict=False):
        info = _draw_range_hist(ax, h, f, overlay=k, view=view, labels=False)
        text = f"{name}\nlost to zero: {_pct(info['lost'])}"
        if k is not None:
            text += f" → {_pct(info['lost_scaled'])} after ×{_pow2_tex(k)}"
        ax.set_title(text, fontsize=9.5)
        ax.set_xlabel("|x| (log₂)", fontsize=8)
        ax.set_ylabel("count", fontsize=8)
        ax.tick_params(labelsize=7.5)
        for t in ax.texts:
            if t.get_gid() == "shift_label":
                t.set_visible(False)  # the arrow alone; the title says the scale
    for ax in axes[n:]:
        ax.set_visible(False)
    # every panel draws its own data and zeros: the legend names what any of them drew
    from matplotlib.patches import Patch

    handles = []
    if any(h.count > h.zero + h.nonfinite for h in hists.values()):
        handles.append(Patch(color=PALETTE["data"], label="values"))
        if k is not None:
            handles.append(Patch(color=PALETTE["scaled"], alpha=0.55,
                                 label=f"values {_scale_text(k)}"))  # fmt: skip
    if any(h.zero for h in hists.values()):
        handles.append(Patch(color=PALETTE["zero"], label="exact zeros"))
    zones = _zone_handles(f, info["view"])
    fig.legend(
        handles=handles + zones + info["lines"], loc="outside lower center",
        ncol=min(6, len(handles) + len(zones)), fontsize=8, frameon=False,
    )  # fmt: skip
    fig.suptitle(f"Per layer: |x| per binade against {f.name}'s range")
    return fig


# ---- training curves ---------------------------------------------------------------------------
def plot_loss_curves(
    curves: Mapping[str, Sequence[float]],
    ax: Axes | None = None,
    log: bool = True,
) -> Figure:
    """One loss curve per recipe (the keys are the legend labels), loss against step.

    NaN and ±inf losses are left out of the line (a gap), and the first such step of a recipe
    is marked by a triangle on the top edge in the recipe's colour, its legend label saying
    where it diverged. ``log``: log y axis (linear when some finite loss is <= 0).

    Figure: 8 × 4.5 inches at :data:`DPI`.

    >>> fig = plot_loss_curves({"fp32": [2.0, 1.0, 0.5], "fp16": [2.0, float("nan"), 0.6]})
    """
    from matplotlib.transforms import blended_transform_factory

    fig, ax = _fig_ax(ax, (8, 4.5))
    finite_all = []
    marks = []
    for name, values in curves.items():
        y = np.asarray(values, dtype=np.float64).ravel()
        bad = ~np.isfinite(y)
        y = np.where(bad, np.nan, y)
        steps = np.arange(y.size)
        label = name
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            label = f"{name} (NaN/inf from step {first})"
        (line,) = ax.plot(steps, y, lw=1.6, label=label, gid=f"loss:{name}")
        finite_all.append(y[~bad])
        if bad.any():
            marks.append((first, line.get_color()))
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    for first, colour in marks:
        ax.plot(
            [first], [1.0], marker="v", ms=9, color=colour, transform=trans, clip_on=False,
            ls="none", gid="diverged",
        )  # fmt: skip
    finite = np.concatenate(finite_all) if finite_all else np.zeros(0)
    if log and finite.size and finite.min() > 0:
        from matplotlib.ticker import FuncFormatter, NullFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        if math.log10(finite.max() / finite.min()) < 2:  # few decades: label 2, 3, 5 × 10^k too

            def minor(v: float, _: Any) -> str:
                lead = round(v / 10 ** math.floor(math.log10(v)))
                return f"{v:g}" if lead in (2, 3, 5) else ""

            ax.yaxis.set_minor_formatter(FuncFormatter(minor))
        else:
            ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("step")
    ax.set_ylabel("loss" + (" (log scale)" if ax.get_yscale() == "log" else ""))
    ax.set_title("Training loss per recipe", loc="left")
    ax.grid(alpha=0.3, which="both", lw=0.5)
    if curves:
        ax.legend(fontsize=9)
    return fig


def plot_scale_trajectory(
    scales: Sequence[float],
    skipped: Sequence[int] | Sequence[bool] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """The loss scale used at each step, on a log₂ y axis, skipped steps marked by red ×.

    ``scales[i]`` is the scale of step i (drawn as a step function: it holds until it changes).
    ``skipped``: the indices of the steps whose gradients held inf/NaN (the update was skipped
    and the scale backed off), or a boolean per step.

    Figure: 8 × 4 inches at :data:`DPI`.

    >>> fig = plot_scale_trajectory([2.0**16, 2.0**15, 2.0**15, 2.0**16], skipped=[0])
    """
    from matplotlib.ticker import FuncFormatter, LogLocator

    fig, ax = _fig_ax(ax, (8, 4))
    s = np.asarray(scales, dtype=np.float64).ravel()
    steps = np.arange(s.size)
    ax.step(steps, s, where="post", color=PALETTE["data"], lw=1.8, label="loss scale", gid="scale")
    idx = np.zeros(0, np.int64)
    if skipped is not None:
        sk = np.asarray(skipped)
        if sk.dtype == bool:
            if sk.size != s.size:
                raise ValueError("a boolean `skipped` needs one entry per step")
            idx = np.flatnonzero(sk)
        else:
            idx = sk.astype(np.int64).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= s.size):
            raise ValueError("skipped step index out of range")
        ax.plot(
            idx, s[idx], ls="none", marker="x", ms=9, mew=2.2, color=PALETTE["skipped"],
            label=f"skipped step: inf/NaN gradients ({idx.size})" if idx.size else "_none",
            gid="skipped", zorder=4,
        )  # fmt: skip
        if not idx.size:  # nothing to mark: say so instead of a legend entry for no markers
            ax.text(0.99, 0.03, "no step skipped", transform=ax.transAxes, ha="right",
                    va="bottom", fontsize=9, color="#555555", gid="no_skips")  # fmt: skip
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(LogLocator(base=2, numticks=12))
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda v, _: _pow2_tex(round(math.log2(v))) if v > 0 else "")
    )
    finite = s[np.isfinite(s) & (s > 0)]
    if finite.size:
        ax.set_ylim(finite.min() / 2.5, finite.max() * 2.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss scale S (log₂ axis)")
    ax.set_title(
        "Loss scale per step: halved on overflow (step skipped), grown after good steps",
        loc="left",
    )
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(fontsize=9, loc="best")
    return fig


# ---- formats -----------------------------------------------------------------------------------
def plot_format_ranges(
    formats: Sequence[FormatLike] = ("fp32", "bf16", "fp16", "fp8_e5m2", "fp8_e4m3"),
    ax: Axes | None = None,
) -> Figure:
    """Range vs precision: one horizontal bar per format over log₂|x|.

    Each bar runs from the smallest subnormal to the max: the subnormal part (from
    2^(emin − man_bits) to 2^emin) light orange, the normal part (2^emin to max) green; the
    smallest subnormal is written at the left end, the max at the right end, the smallest
    normal under the boundary. At the right, each format's precision: significand bits (stored
    mantissa + the implicit 1), about how many decimal digits, and how many binades the normal
    range spans. The y labels give the bit layout (sign · exponent · mantissa).

    Figure: 12 × (0.9 × len(formats) + 1.6) inches at :data:`DPI`.

    >>> fig = plot_format_ranges(("fp16", "bf16"))
    """
    fs = [get_format(x) for x in formats]
    fig, ax = _fig_ax(ax, (12, 0.9 * len(fs) + 1.6))
    height = 0.5
    for i, f in enumerate(fs):
        lim = _limits(f)
        a, b, c = lim["smallest_subnormal"], lim["smallest_normal"], lim["max"]
        ax.barh(i, b - a, left=a, height=height, color=PALETTE["subnormal"], alpha=0.45,
                gid=f"subnormal:{f.name}")  # fmt: skip
        ax.barh(i, c - b, left=b, height=height, color=PALETTE["normal"], alpha=0.85,
                gid=f"normal:{f.name}")  # fmt: skip
        ax.text(a - 1.5, i, _pow2_tex(int(a)), ha="right", va="center", fontsize=9)
        ax.text(c + 1.5, i, _sci(f.max), ha="left", va="center", fontsize=9)
        ax.text(b, i + height / 2 + 0.05, _pow2_tex(int(b)), ha="center", va="top", fontsize=7.5,
                color="#333333")  # fmt: skip
        digits = f.precision * math.log10(2)
        ax.text(
            1.01, i, f"precision {f.precision} bits ({f.man_bits} stored + hidden 1)\n"
            f"≈ {digits:.1f} decimal digits · {f.emax - f.emin + 1} normal binades",
            transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=9,
        )  # fmt: skip
    ax.set_yticks(
        range(len(fs)),
        [f"{f.name}\n1·{f.exp_bits}·{f.man_bits} bits" for f in fs],
    )
    ax.set_ylim(len(fs) - 0.4, -0.8)
    los = [_limits(f)["smallest_subnormal"] for f in fs]
    his = [_limits(f)["max"] for f in fs]
    lo, hi = min(los) - 16, max(his) + 26
    ax.set_xlim(lo, hi)
    _set_log2_ticks(ax, lo, hi)
    ax.axvline(0, color="#555555", lw=0.8, ls=":", zorder=0)
    ax.text(0, -0.62, "1", ha="center", va="center", fontsize=8, color="#555555")
    ax.set_xlabel("|x|   (log₂ axis)")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Patch(color=PALETTE["subnormal"], alpha=0.45, label="subnormal (fewer bits)"),
            Patch(color=PALETTE["normal"], alpha=0.85, label="normal (full precision)"),
        ],
        loc="upper left", fontsize=8.5, ncol=2, frameon=False, bbox_to_anchor=(0.0, -0.07),
    )  # fmt: skip
    ax.set_title(
        "Range vs precision: exponent bits buy range (the bar's length), mantissa bits buy "
        "precision (right)", loc="left", fontsize=11,
    )  # fmt: skip
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    return fig


def _format_title(f: Format) -> str:
    """``fp8_e4m3`` for a built-in format; ``e4m3_ieee = Format(4, 3), IEEE style (inf and
    NaN in the top exponent)`` for a generated name, which readers may not know (both spellings
    are ones :func:`fpsim.get_format` reads)."""
    from .formats import list_formats

    if f.name in list_formats():
        return f.name
    default_bias = (1 << (f.exp_bits - 1)) - 1
    args = [str(f.exp_bits), str(f.man_bits)]
    if f.bias != default_bias:
        args.append(f"bias={f.bias}")
    if f.style != "ieee":
        args.append(f"style={f.style!r}")
    specials = "inf and NaN in the top exponent" if f.has_inf else "no inf; all ones is NaN"
    style = "IEEE style" if f.style == "ieee" else "fn style"
    return f"{f.name} = Format({', '.join(args)}), {style} ({specials})"


def _bitfield_size(f: Format) -> tuple[float, float]:
    return (round(min(max(0.4 * f.bits + 1.6, 8.0), 18.0), 1), 3.6)


def plot_bit_fields(x: Any, fmt: FormatLike = "fp16", ax: Axes | None = None) -> Figure:
    """The bit-field diagram of ``x`` rounded (nearest-even) to ``fmt``.

    One box per bit, sign first, coloured by field (sign, exponent, mantissa) with the bit value
    inside and its position below; above, each field's name and width; under each field what it
    means (sign ±, exponent field − bias, significand 1.f or 0.f), and at the bottom the value
    formula ``(-1)^s × 1.f × 2^e = value`` (exact decimal, or ≈ when very long) with the
    rounding error. Uses :func:`fpsim.inspect.fields`.

    Figure: (0.4 × bits + 1.6, clipped to 8 … 18) × 3.6 inches at :data:`DPI`.

    >>> fig = plot_bit_fields(0.1, "fp16")
    """
    from matplotlib.patches import Rectangle

    from .inspect import fields

    fl = fields(x, fmt)
    f = fl.format
    fig, ax = _fig_ax(ax, _bitfield_size(f))
    groups = [
        ("sign", str(fl.sign), "sign"),
        ("exponent", fl.exponent_bits, f"exponent ({f.exp_bits} bits)"),
        ("mantissa", fl.mantissa_bits, f"mantissa / fraction ({f.man_bits} bits)"),
    ]
    small = f.bits > 24
    pos = 0
    spans = {}
    for field, bits, _ in groups:
        spans[field] = (pos, pos + len(bits))
        for b in bits:
            ax.add_patch(
                Rectangle(
                    (pos, 0), 1, 1, fc=PALETTE[field], ec="#333333", lw=1.0, gid=f"bit:{field}"
                )  # fmt: skip
            )
            ax.text(pos + 0.5, 0.5, b, ha="center", va="center",
                    fontsize=9 if small else 13, family="monospace", gid="bitval")  # fmt: skip
            if f.bits <= 32:
                ax.text(pos + 0.5, -0.12, str(f.bits - 1 - pos), ha="center", va="top",
                        fontsize=6.5, color="#666666")  # fmt: skip
            pos += 1
    # field names above, with a bracket
    for field, _, name in groups:
        a, b = spans[field]
        ax.plot([a + 0.05, a + 0.05, b - 0.05, b - 0.05], [1.12, 1.22, 1.22, 1.12],
                color="#333333", lw=1)  # fmt: skip
        text = name if (b - a) > 3 or field == "sign" else name.split(" ")[0]
        ax.text((a + b) / 2, 1.3, text, ha="center", va="bottom", fontsize=9.5)
    # what each field means
    sign_text = f"$(-1)^{{{fl.sign}}}$\n= {'+1' if fl.sign == 0 else '−1'}"
    m1 = "−"  # a real minus sign reads better than a hyphen
    if fl.cls == "normal":
        exp_text = (
            f"{fl.exponent_bits}₂ = {fl.biased_exponent}\n"
            f"e = {fl.biased_exponent} − bias {f.bias} = {str(fl.exponent).replace('-', m1)}"
        )
        man_text = f"1.f = 1.{fl.mantissa_bits}₂\n= {float(fl.significand)!r}"
        if f.man_bits > 4:
            man_text = f"significand {man_text.replace(chr(10), ' (hidden 1)' + chr(10), 1)}"
    elif fl.cls in ("zero", "subnormal"):
        exp_text = f"all zeros: no hidden 1,\ne = emin = {str(f.emin).replace('-', m1)}"
        man_text = f"0.f = 0.{fl.mantissa_bits}₂\n= {float(fl.significand)!r}"
        if f.man_bits > 4:
            man_text = f"significand {man_text}"
    elif fl.cls == "inf":
        exp_text, man_text = "all ones", "fraction 0: infinity"
    elif f.style == "ieee":
        exp_text, man_text = "all ones", "fraction ≠ 0: NaN"
    else:
        exp_text, man_text = "all ones", "all ones: the only NaN\n(fn style has no inf)"
    meanings = {"sign": sign_text, "exponent": exp_text, "mantissa": man_text}
    for field, (a, b) in spans.items():
        ax.text((a + b) / 2, -0.42, meanings[field], ha="center", va="top", fontsize=9,
                linespacing=1.3, gid=f"meaning:{field}")  # fmt: skip
    # the formula, then the rounding error
    if fl.value is not None:
        lead = "1" if fl.cls == "normal" else "0"
        dec = fl.decimal if len(fl.decimal) <= 40 else f"≈ {fl.stored:.17g}"
        eq = "" if dec.startswith("≈") else "= "
        formula = (
            f"$(-1)^{{{fl.sign}}} \\times {lead}.{fl.mantissa_bits}_2 \\times 2^{{{fl.exponent}}}$"
            f"  {eq}{dec.replace('-', m1)}"
        )
        note = f"the input {fl.input!r} is stored exactly"
        if fl.error:
            note = (
                f"stored − input = {float(fl.error):+.3g}  ({float(fl.error_ulps):+.3g} ulp): "
                f"the rounding error of {fl.input!r}"
            ).replace("-", m1)
    else:
        formula = ("+∞" if fl.sign == 0 else "−∞") if fl.cls == "inf" else "NaN"
        note = ""
        if math.isfinite(fl.input):
            note = f"|{fl.input!r}| is beyond the largest finite {f.name} value, {_sci(f.max)}"
    ax.text(f.bits / 2, -1.4, formula, ha="center", va="top", fontsize=12, gid="formula")
    ax.text(f.bits / 2, -1.85, note, ha="center", va="top", fontsize=9, color="#444444")
    ax.set_xlim(-0.3, f.bits + 0.3)
    ax.set_ylim(-2.2, 1.75)
    ax.set_aspect("auto")
    ax.axis("off")
    ax.set_title(
        f"{fl.input!r} in {f.name}: bits {fl.bits}  ({fl.hex}, {fl.cls})", loc="left", fontsize=11
    )
    return fig


def _binade_counts(f: Format) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exponent k, number of positive finite values in [2^k, 2^(k+1)), is_subnormal)."""
    m = f.man_bits
    sub_k = np.arange(f.emin - m, f.emin)
    sub_n = 2.0 ** (sub_k - (f.emin - m))  # 1, 2, 4, ..., 2^(m-1): spacing stays 2^(emin-m)
    norm_k = np.arange(f.emin, f.emax + 1)
    norm_n = np.full(norm_k.size, 2.0**m)
    if f.style == "fn":
        norm_n[-1] -= 1  # the all-ones code is NaN
    k = np.concatenate([sub_k, norm_k])
    n = np.concatenate([sub_n, norm_n])
    return k, n, np.concatenate([np.ones(sub_k.size, bool), np.zeros(norm_k.size, bool)])


def _draw_values_line(ax: Axes, f: Format, zoom: bool) -> None:
    """All non-negative finite values of a <= 8-bit format as ticks on a linear axis."""
    from .inspect import all_values

    t = all_values(f)
    t = t[(t["code"] < (1 << (f.bits - 1))) & np.isin(t["cls"], ["zero", "subnormal", "normal"])]
    prefix = "zoom" if zoom else "values"
    if zoom:
        t = t[t["value"] <= 4 * f.min_normal]
    for cls, label in (("zero", "zero"), ("subnormal", "subnormal"), ("normal", "normal")):
        v = t["value"][t["cls"] == cls]
        ax.scatter(
            v, np.zeros(v.size), marker="|", s=260 if cls != "zero" else 400, lw=1.4,
            color=PALETTE[cls], label=f"{label} ({v.size})", gid=f"{prefix}:{cls}", zorder=3,
        )  # fmt: skip
    ax.axhline(0, color="#999999", lw=0.8, zorder=1)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_ylim(-1, 1)
    if zoom:
        hi = 4 * f.min_normal
        ax.set_xlim(-0.02 * hi, hi * 1.02)
        step = f.smallest_subnormal
        ax.axvspan(0, f.min_normal, color=PALETTE["subnormal"], alpha=_SHADE_ALPHA, lw=0)
        notes = [
            (f.min_normal / 2, f"subnormals: spacing {_pow2_tex(int(math.log2(step)))}"),
            (1.5 * f.min_normal, f"spacing {_pow2_tex(int(math.log2(step)))}"),
            (3 * f.min_normal, f"spacing {_pow2_tex(int(math.log2(step)) + 1)}"),
        ]
        for xpos, text in notes:
            ax.text(xpos, 0.45, text, ha="center", va="bottom", fontsize=8.5)
        ax.set_xticks(
            [0, f.min_normal, 2 * f.min_normal, 4 * f.min_normal],
            ["0"] + [_pow2_tex(f.emin + i) for i in range(3)],
        )
        ax.set_title(
            f"zoom on [0, {_pow2_tex(f.emin + 2)}]: the subnormals continue the smallest "
            "binade's spacing down to 0 (gradual underflow)", loc="left", fontsize=10,
        )  # fmt: skip
    else:
        ax.set_xlim(-0.02 * f.max, f.max * 1.03)
        ax.set_title(
            f"every non-negative finite {f.name} value on a linear axis ({len(t)} values): "
            "dense near 0, sparse near max", loc="left", fontsize=10,
        )  # fmt: skip
        ax.annotate(
            f"max {_sci(f.max)}", xy=(f.max, 0), xytext=(f.max, 0.55), ha="right", fontsize=8.5,
            arrowprops=dict(arrowstyle="-", color="#555555", lw=0.8),
        )  # fmt: skip
        ax.legend(loc="upper left", fontsize=8.5, frameon=False, ncol=3)
    ax.set_xlabel("x (linear axis)", fontsize=9)


def _draw_binade_density(ax: Axes, f: Format) -> None:
    """Bars: the number of positive finite values of ``f`` in each binade, log₂ axes."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    k, n, sub = _binade_counts(f)
    m = f.man_bits
    for is_sub, zone in ((True, "subnormal"), (False, "normal")):
        sel = sub == is_sub
        label = (
            "subnormal binades: 1, 2, 4, … values"
            if is_sub
            else f"normal binades: {_pow2_tex(m)} = {2**m} values each"
        )
        bars = ax.bar(
            k[sel], n[sel], width=1.0, align="edge", color=PALETTE[zone], ec="white", lw=0.4,
            label=label, alpha=0.85,
        )  # fmt: skip
        for p in bars:
            p.set_gid(f"binade:{zone}")
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(LogLocator(base=2, numticks=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _pow2_tex(round(math.log2(v)))))
    ax.set_ylim(0.7, 2.0 ** (m + 0.5 + 0.25 * max(m, 4)))
    lo, hi = float(k[0]) - 1, float(k[-1]) + 2
    ax.set_xlim(lo, hi)
    _set_log2_ticks(ax, lo, hi)
    # how far apart the values are, written on the bars
    mid = (f.emin + f.emax + 1) / 2
    ax.text(
        mid, 2.0 ** (m / 2), f"in each binade [$2^k$, $2^{{k+1}}$): {2**m} values,"
        f" spacing (ulp) $2^{{k-{m}}}$", ha="center", va="center", color="white", fontsize=9.5,
        fontweight="bold", clip_on=True,
    )  # fmt: skip
    ax.set_xlabel("|x|   (log₂ axis: one bar per binade [$2^k$, $2^{k+1}$); +0 not shown)",
                  fontsize=9)
    ax.set_ylabel("values per binade (log₂)", fontsize=9)
    ax.set_title(
        f"{f.name}: values per binade — the same count in every normal binade, so the gap "
        "doubles each binade; subnormals keep the smallest gap",
        loc="left", fontsize=10,
    )  # fmt: skip
    ax.legend(loc="upper left", fontsize=8.5, frameon=False, ncol=2)
    ax.grid(axis="y", alpha=0.3, lw=0.5)


def plot_number_line(
    fmt: FormatLike = "fp8_e4m3", ax: Axes | None = None, log: bool | None = None
) -> Figure:
    """The representable non-negative values of ``fmt``.

    Two views: (1) *linear*: every non-negative finite value as a tick on a linear axis, zero
    grey, subnormals orange, normals green, with a zoom on ``[0, 4 × smallest normal]`` that
    shows the subnormals' even spacing — only for formats of at most 8 bits; (2) *log*: the
    number of values per binade on a log₂ axis (2^man_bits per normal binade, 1, 2, 4, … per
    subnormal binade), which is how wider formats are drawn.

    ``log=None`` (default): all views that apply (a figure with the linear view, the zoom and
    the binade counts for <= 8 bits; the binade counts alone for wider formats); ``log=False``:
    the linear view only; ``log=True``: the binade counts only. With ``ax`` a single view is
    drawn into it (linear for <= 8 bits unless ``log=True``).

    Figure: 12 × 7.5 inches (three panels) or 12 × 3.6 (one panel) at :data:`DPI`.

    >>> fig = plot_number_line("fp8_e4m3")
    >>> len(fig.axes)
    3
    """
    f = get_format(fmt)
    small = f.bits <= 8
    if log is False and not small:
        raise ValueError(
            f"a linear number line of every value needs a format of at most 8 bits; {f.name} "
            f"has {f.bits} (use log=True: values per binade)"
        )
    if ax is not None:
        fig = _root_figure(ax)
        if small and not log:
            _draw_values_line(ax, f, zoom=False)
        else:
            _draw_binade_density(ax, f)
        return fig
    if log is None and small:
        fig = _new_figure((12, 7.5))
        axes = fig.subplots(3, 1, height_ratios=[1, 1, 1.6])
        _draw_values_line(axes[0], f, zoom=False)
        _draw_values_line(axes[1], f, zoom=True)
        _draw_binade_density(axes[2], f)
        fig.suptitle(f"The number line of {_format_title(f)}", fontsize=12)
        return fig
    fig = _new_figure((12, 3.6))
    ax = fig.add_subplot()
    if log is False:
        _draw_values_line(ax, f, zoom=False)
    else:
        _draw_binade_density(ax, f)
    return fig
