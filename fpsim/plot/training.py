"""Training curves: loss per step for several recipes, and a loss scale over the steps."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

from .common import (
    PALETTE,
    _fig_ax,
    _pow2_tex,
)


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


