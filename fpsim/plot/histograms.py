"""Range histograms: |x| per binade against a format's zones and limits, under a scale, side by
side, per layer."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..formats import Format, FormatLike, get_format

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..stats import RangeHistogram
from .common import (
    _LIMIT_NAMES,
    _LIMIT_ZONE,
    _MAX_SPAN,
    _SHADE_ALPHA,
    PALETTE,
    _fig_ax,
    _limit_value,
    _limits,
    _log2_scale,
    _new_figure,
    _pow2_tex,
    _pow2_text,
    _root_figure,
    _scale_text,
    _set_log2_ticks,
    _zone_label,
)


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


