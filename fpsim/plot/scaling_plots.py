"""Scaled formats: one tensor under no scale, one scale per tensor and one scale per block --
where each scheme's representable window lies, what it flushed, kept as subnormals or
saturated, and where the block scales went."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..stats import ScalingRow

from .common import PALETTE, _new_figure, _set_log2_ticks

#: The outcomes drawn in the stacked bars, left to right, with their palette colour and legend.
_OUTCOME_STYLE = (
    ("zero", "underflow", "flushed to 0"),
    ("subnormal", "subnormal", "subnormal"),
    ("saturated", "overflow", "saturated"),
    ("nonfinite", "zero", "NaN / inf"),
    ("kept", "normal", "kept"),
)
#: One colour per block scheme in the scale-exponent histogram (none of them is a zone colour).
_SCHEME_COLOURS = ("#17becf", "#8c564b", "#e377c2", "#bcbd22", "#1f77b4", "#7f7f7f")
_VIEW_MARGIN = 10  # binades of window shown beyond the data on each side


def _window(row: ScalingRow, log_scale: float) -> tuple[float, float, float]:
    """(smallest subnormal, smallest normal, max) of the element format times 2^log_scale, on
    the log2 axis."""
    f = row.element
    return (math.log2(f.smallest_subnormal) + log_scale, math.log2(f.min_normal) + log_scale,
            math.log2(f.max) + log_scale)  # fmt: skip


def _row_scale(row: ScalingRow) -> float:
    """The log2 scale of a row's drawn window: the per-tensor scale, 0 without one, the median
    block's scale for a block scheme."""
    e = row.scale_exponents
    if row.kind == "none" or e.size == 0:
        return 0.0
    if row.kind == "per-tensor":
        return float(e[0])
    return float(np.sort(e)[(e.size - 1) // 2])  # a block's own scale (the lower median)


def _draw_window(ax: Axes, y: float, a: float, b: float, c: float, h: float, sub: bool) -> None:
    if sub and b > a:
        ax.barh(y, b - a, left=a, height=h, color=PALETTE["subnormal"], alpha=0.55, zorder=2,
                gid="window:subnormal")  # fmt: skip
    ax.barh(y, c - b, left=b, height=h, color=PALETTE["normal"], alpha=0.85, zorder=2,
            gid="window:normal")  # fmt: skip


def _below(n: int) -> float:
    """The y (axes fraction) under the x label of a bottom panel with n rows: legends go there."""
    return -(0.62 / (0.55 * n + 0.9)) * 1.0


def _count_ticks(ax: Axes) -> None:
    """Counts on a log axis written out: 1, 10, 100, 1,000, 10,000."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else ""))


def _pct_short(x: float) -> str:
    """``19.6%``, ``0.83%``, ``0.014%``, ``<0.001%``, ``0%``."""
    if x == 0:
        return "0%"
    p = 100 * x
    if p >= 10:
        return f"{p:.1f}%"
    if p >= 0.001:
        return f"{p:.2g}%" if p < 1 else f"{p:.2f}%"
    return "<0.001%"


def plot_block_scaling(
    x: Any,
    schemes: Sequence[Any] | None = None,
    *,
    rows: Sequence[ScalingRow] | None = None,
    axis: int = -1,
    title: str | None = None,
) -> Figure:
    """One tensor under several scaling schemes, in four panels.

    * top left: |x| per binade (one bar per ``[2^k, 2^(k+1))``; exact zeros counted in the
      title), the values the schemes must hold;
    * bottom left, on the same log₂ axis: each scheme's *representable window*, from its
      smallest subnormal (orange part) over the normal numbers (green) to its max. Unscaled,
      the format's own; per-tensor, shifted by the one scale; per-block, the window of the
      median block, over a grey band spanning the windows of all blocks (each block's window
      sits where its own scale puts it);
    * bottom right, one bar per scheme (the rows of the left panel): the shares of elements
      flushed to 0, kept only as subnormals, saturated, and kept, from the exact counts of
      :func:`fpsim.stats.scaling_report`; the non-kept shares are written beside the bar;
    * top right: how many blocks got each scale exponent (log₂ of the scale the elements are
      multiplied by; NVFP4's E4M3 scale times its tensor scale, binned per binade), one colour
      per block scheme, the per-tensor scales as dashed lines. Drawn only when some scheme has
      blocks.

    ``schemes``: as :func:`fpsim.stats.scaling_report` takes them (default
    :data:`fpsim.stats.DEFAULT_SCALING_SCHEMES`); or pass ``rows``, a report already made for
    ``x`` (then ``schemes`` and ``axis`` are not used).

    Figure: 14 × (5.4 + 0.55 × number of schemes) inches at :data:`DPI`.

    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(0, 1e-3, (8, 64)); x[:, 3] *= 500
    >>> fig = plot_block_scaling(x, ["fp16", "fp8_e4m3/current", "mxfp8_e4m3", "mxfp4"])
    >>> len(fig.axes), fig.canvas.get_width_height()
    (4, (1400, 760))
    """
    from matplotlib.patches import Patch

    from ..stats import DEFAULT_SCALING_SCHEMES, RangeHistogram, scaling_report

    if rows is None:
        rows = scaling_report(x, DEFAULT_SCALING_SCHEMES if schemes is None else schemes,
                              axis=axis)  # fmt: skip
    rows = list(rows)
    if not rows:
        raise ValueError("no schemes to draw")
    hist = RangeHistogram(formats=())
    hist.add(x)
    exps, counts = hist.bins()
    n = len(rows)
    blocky = [r for r in rows if r.kind == "per-block" and r.scale_exponents.size]

    fig = _new_figure((14, 5.4 + 0.55 * n))
    gs = fig.add_gridspec(2, 2, width_ratios=(1.55, 1), height_ratios=(3.0, 0.55 * n + 0.9))
    ax_hist = fig.add_subplot(gs[0, 0])
    ax_win = fig.add_subplot(gs[1, 0], sharex=ax_hist)
    ax_bar = fig.add_subplot(gs[1, 1], sharey=ax_win)
    ax_sc = fig.add_subplot(gs[0, 1]) if blocky else None

    # -- the view: the data, and the windows drawn, at most _VIEW_MARGIN binades beyond it
    if exps.size:
        d_lo, d_hi = float(exps[0]), float(exps[-1] + 1)
    else:
        d_lo, d_hi = -1.0, 1.0
    w_lo, w_hi = d_lo, d_hi
    for r in rows:
        a, _, c = _window(r, _row_scale(r))
        w_lo, w_hi = min(w_lo, a), max(w_hi, c)
        if r.kind == "per-block" and r.scale_exponents.size:
            w_lo = min(w_lo, _window(r, float(r.scale_exponents.min()))[0])
            w_hi = max(w_hi, _window(r, float(r.scale_exponents.max()))[2])
    lo = max(w_lo, d_lo - _VIEW_MARGIN) - 1
    hi = min(w_hi, d_hi + _VIEW_MARGIN) + 1

    # -- top left: |x| per binade (log counts: a few outliers are a few hundred values)
    bars = ax_hist.bar(exps, counts, width=1.0, align="edge", color=PALETTE["data"],
                       ec="white", lw=0.4, zorder=2)  # fmt: skip
    for p in bars:
        p.set_gid("bin")
    zeros = f"; {hist.zero:,} exact zeros not drawn" if hist.zero else ""
    ax_hist.set_title(f"|x| per binade: {hist.count:,} values{zeros}", loc="left", fontsize=11)
    ax_hist.set_yscale("log")
    if counts.size:
        ax_hist.set_ylim(0.6, float(counts.max()) * 3)
    ax_hist.set_ylabel("values (log axis)")
    _count_ticks(ax_hist)
    ax_hist.grid(axis="y", alpha=0.3, lw=0.6)
    ax_hist.set_axisbelow(True)
    ax_hist.tick_params(axis="x", labelbottom=False)

    # -- bottom left: the windows
    h = 0.56
    for i, r in enumerate(rows):
        sub = r.element.has_subnormals and r.element.man_bits > 0
        if r.kind == "per-block" and r.scale_exponents.size:
            a0 = _window(r, float(r.scale_exponents.min()))[0]
            c1 = _window(r, float(r.scale_exponents.max()))[2]
            ax_win.barh(i, c1 - a0, left=a0, height=h + 0.22, color="#bbbbbb", alpha=0.45,
                        zorder=1, gid="window:all_blocks")  # fmt: skip
        a, b, c = _window(r, _row_scale(r))
        _draw_window(ax_win, i, a, b, c, h, sub)
    for side in ("top", "right"):
        ax_win.spines[side].set_visible(False)
    ax_win.set_yticks(range(n), [f"{r.label}\n{r.bits_per_element:.2f} bits/element"
                                 for r in rows], fontsize=9)  # fmt: skip
    ax_win.set_ylim(n - 0.45, -0.55)
    ax_win.set_xlim(lo, hi)
    _set_log2_ticks(ax_win, lo, hi)
    ax_win.set_xlabel("|x|   (log₂ axis)")
    ax_win.grid(axis="x", alpha=0.3, lw=0.6)
    ax_win.set_axisbelow(True)
    ax_win.set_title("What each scheme can represent (per block: the median block's window)",
                     loc="left", fontsize=11)  # fmt: skip
    handles = [Patch(color=PALETTE["subnormal"], alpha=0.55, label="subnormal"),
               Patch(color=PALETTE["normal"], alpha=0.85, label="normal")]  # fmt: skip
    if blocky:
        handles.append(Patch(color="#bbbbbb", alpha=0.45, label="all blocks' windows together"))
    ax_win.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, _below(n)),
                  fontsize=8, ncol=len(handles), frameon=False)  # fmt: skip

    # -- bottom right: what happened to the elements
    drawn = set()
    for i, r in enumerate(rows):
        fr = r.fractions()
        left = 0.0
        for key, colour, _label in _OUTCOME_STYLE:
            w = 100 * fr[key]
            if w > 0:
                ax_bar.barh(i, w, left=left, height=h, color=PALETTE[colour],
                            alpha=0.85 if key == "kept" else 1.0, zorder=2,
                            gid=f"outcome:{key}")  # fmt: skip
                drawn.add(key)
            left += w
        lost = [f"{word} {_pct_short(fr[key])}"
                for key, word in (("zero", "flushed"), ("subnormal", "subn."),
                                  ("saturated", "sat."), ("nonfinite", "NaN"))
                if key != "nonfinite" or fr[key]]  # fmt: skip
        ax_bar.text(101.5, i, "\n".join([" · ".join(lost[:2]), " · ".join(lost[2:])]),
                    va="center", ha="left", fontsize=8, gid="outcome_text")  # fmt: skip
    ax_bar.set_xlim(0, 100)
    ax_bar.set_xticks([0, 25, 50, 75, 100], ["0", "25%", "50%", "75%", "100%"])
    ax_bar.tick_params(axis="y", labelleft=False, length=0)
    ax_bar.set_xlabel("share of the elements")
    for side in ("top", "right"):
        ax_bar.spines[side].set_visible(False)
    ax_bar.set_title("What quantizing did to each element", loc="left", fontsize=11)
    ax_bar.legend(
        handles=[Patch(color=PALETTE[c], label=lab) for k, c, lab in _OUTCOME_STYLE
                 if k in drawn],
        loc="upper left", bbox_to_anchor=(0.0, _below(n)), ncol=5, fontsize=8, frameon=False,
    )  # fmt: skip

    # -- top right: the scale exponents
    if ax_sc is not None:
        all_e = np.concatenate([np.floor(r.scale_exponents) for r in blocky])
        e_lo, e_hi = int(all_e.min()), int(all_e.max())
        edges = np.arange(e_lo, e_hi + 2)
        top = 0.0
        for j, r in enumerate(blocky):
            c, _ = np.histogram(np.floor(r.scale_exponents), bins=edges)
            share = 100 * c / r.scale_exponents.size
            top = max(top, float(share.max()))
            ax_sc.stairs(np.where(share > 0, share, np.nan), edges, baseline=None,
                         color=_SCHEME_COLOURS[j % len(_SCHEME_COLOURS)], lw=1.8,
                         label=f"{r.label} ({r.scale_exponents.size:,} blocks)",
                         gid=f"scales:{r.label}")  # fmt: skip
        ax_sc.set_yscale("log")
        smallest = min(100 / r.scale_exponents.size for r in blocky)
        ax_sc.set_ylim(smallest / 2, top * 200)  # room for the legend above the curves
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        ax_sc.yaxis.set_major_locator(FixedLocator([0.001, 0.01, 0.1, 1, 10, 100]))
        ax_sc.yaxis.set_minor_locator(NullLocator())
        ax_sc.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
        for r in rows:
            if r.kind == "per-tensor" and r.scale_exponents.size:
                ax_sc.axvline(float(r.scale_exponents[0]), color="black", ls="--", lw=1.1,
                              label=f"{r.label} (one scale)", gid="per_tensor_scale")  # fmt: skip
        s_lo = min([e_lo] + [float(r.scale_exponents[0]) for r in rows
                             if r.kind == "per-tensor"]) - 1  # fmt: skip
        s_hi = max([e_hi + 1] + [float(r.scale_exponents[0]) for r in rows
                                 if r.kind == "per-tensor"]) + 1  # fmt: skip
        ax_sc.set_xlim(s_lo, s_hi)
        _set_log2_ticks(ax_sc, s_lo, s_hi)
        ax_sc.set_xlabel("the scale that multiplies the elements back (log₂ axis)")
        ax_sc.set_ylabel("share of the scheme's blocks")
        ax_sc.grid(axis="y", alpha=0.3, lw=0.6)
        ax_sc.set_axisbelow(True)
        leg = ax_sc.legend(fontsize=7.5, loc="upper left", ncol=2, columnspacing=1.0,
                           handlelength=1.5, frameon=True, framealpha=0.92, edgecolor="none")
        leg.set_zorder(5)
        ax_sc.set_title("Each block's scale follows its own range", loc="left", fontsize=11)
    if title:
        fig.suptitle(title, fontsize=12)
    return fig
