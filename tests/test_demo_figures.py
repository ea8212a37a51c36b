"""The demos' figures, as a lecturer would check them: every text inside the canvas, powers of
two written one way (mathtext), every format name one fpsim.get_format reads, legends that name
only what is drawn, curves that follow others still visible, loss axes that start at 0 where a
cut axis would exaggerate, and a loss-scale panel that shows the scaler moving.

The figures are caught as the demos save them (``save_figure`` wrapped), on short runs.
"""

from __future__ import annotations

import contextlib
import io
import re

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from fpsim.demo import (  # noqa: E402
    _common,
    accumulate,
    bf16,
    blocks,
    fp8,
    overflow,
    swamping,
    tensorcore,
    underflow,
)
from fpsim.demo import figures as figures_demo  # noqa: E402
from fpsim.demo.__main__ import main  # noqa: E402
from fpsim.formats import get_format  # noqa: E402

SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻ᵏ"
FORMAT_NAME = re.compile(
    r"(?<![\w.])(fp\d+(?:_e\dm\d)?|bf16|tf32|e\d+m\d+(?:fn)?(?:_b-?\d+)?(?:_ieee)?)(?![\w])"
    r"|Format\([^)]*\)"
)


@pytest.fixture(scope="module")
def demo_figures(tmp_path_factory):
    """{file name: Figure} of every figure `make figures` draws, caught as the demos save them
    (``save_figure`` wrapped), on short runs and a few non-default settings."""
    figs = {}
    save = _common.save_figure

    def keep(fig, out, name):
        path = save(fig, out, name)
        figs[name] = fig
        return path

    out = str(tmp_path_factory.mktemp("figures"))
    runs = [
        ["underflow", "--steps", "12", "--growth-interval", "4"],
        ["underflow", "--steps", "6", "--format", "e4m3"],
        ["overflow", "--steps", "20", "--growth-interval", "4", "--init-scale", "2^34"],
        ["swamping", "--steps", "30"],
        ["accumulate", "-n", "600"],
        ["bf16", "--steps", "4"],
        ["blocks"],
        ["tensorcore", "--ks", "64,256,2048", "--size", "2"],
        ["fp8", "--steps", "2", "--recipes", "fp8_cast,fp8_delayed"],
    ]
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()):
        for mod in (underflow, overflow, swamping, accumulate, bf16, blocks, tensorcore, fp8,
                    figures_demo):  # fmt: skip
            mp.setattr(mod, "save_figure", keep)
        for args in runs:
            assert main([*args, "--out", out, "--quiet"]) == 0
        figures_demo.static_figures(out)
    return figs


def texts(fig) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def off_view_tick_labels(fig) -> set[int]:
    """ids of the tick labels that are not drawn (outside their Axes' view, or of an Axes
    turned off): matplotlib keeps them all."""
    out = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            span = hi - lo
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                inside = lo - 1e-9 * span <= tick.get_loc() <= hi + 1e-9 * span
                if not (inside and ax.axison):  # (an Axes turned off draws no ticks)
                    out |= {id(tick.label1), id(tick.label2)}
    return out


def assert_texts_inside(name, fig):
    """Every text drawn lies inside the canvas (tick labels off the view are not drawn)."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    w, h = fig.bbox.width, fig.bbox.height
    hidden = off_view_tick_labels(fig)
    for t in texts(fig):
        if id(t) in hidden:
            continue
        b = t.get_window_extent(r)
        assert b.x0 >= -1 and b.x1 <= w + 1 and b.y0 >= -1 and b.y1 <= h + 1, (
            name, t.get_text(), b.bounds, (w, h))  # fmt: skip


def test_every_text_is_inside_the_canvas(demo_figures):
    for name, fig in demo_figures.items():
        assert_texts_inside(name, fig)


def test_one_notation_for_powers_of_two(demo_figures):
    """mathtext ($2^{-24}$) everywhere: no plain 2^-24 and no unicode superscripts."""
    for name, fig in demo_figures.items():
        for t in texts(fig):
            plain = re.sub(r"\$[^$]*\$", "", t.get_text())
            assert "2^" not in plain and not set(plain) & set(SUPERSCRIPTS), (name, t.get_text())


def test_every_format_name_shown_is_one_get_format_reads(demo_figures):
    seen = set()
    for fig in demo_figures.values():
        for t in texts(fig):
            for m in FORMAT_NAME.finditer(t.get_text()):
                get_format(m.group(0))  # raises for a name the library would not read
                seen.add(m.group(0))
    assert {"fp16", "bf16", "fp8_e4m3", "e4m3_ieee", "Format(4, 3)"} <= seen


def legend_labels(fig) -> list[str]:
    out = []
    for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        out += [t.get_text() for t in leg.get_texts()]
    return out


def test_legends_name_only_what_is_drawn(demo_figures):
    # bf16's histogram: no zeros, nothing near bf16's limits: data and the normal zone only
    labels = legend_labels(demo_figures["bf16_histogram.png"])
    assert labels == ["values", "normal (full precision)"]
    # fp8_e4m3 has no inf: its overflow is NaN
    labels = legend_labels(demo_figures["underflow_fp8_e4m3_histogram.png"])
    assert not any("→ inf" in lab for lab in labels)
    assert any("overflow (→ NaN" in lab for lab in labels)
    for name, fig in demo_figures.items():
        labels = legend_labels(fig)
        assert "exact zeros" not in labels or name.startswith("underflow"), name
        if "exact zeros" in labels:  # only where some histogram has zeros
            assert any(p.get_gid() == "zero" and p.get_height() > 0
                       for ax in fig.axes for p in ax.patches), name  # fmt: skip
        for ax in fig.axes:  # every line in a legend has points
            leg = ax.get_legend()
            if leg is None:
                continue
            for line in ax.get_lines():
                if line.get_label() in [t.get_text() for t in leg.get_texts()]:
                    assert np.asarray(line.get_xdata()).size, (name, line.get_label())


def test_curves_that_follow_the_reference_stay_visible(demo_figures):
    """The reference (fp32, or the exact sum) is thin, dashed and on top; the curves under it
    are wider, so a curve that follows it shows around the dashes."""
    for name in ("underflow_loss.png", "overflow_loss.png", "swamping_loss.png",
                 "accumulate.png"):  # fmt: skip
        for ax in demo_figures[name].axes:
            lines = [ln for ln in ax.get_lines() if ln.get_label()[:1] != "_"]
            ref = [ln for ln in lines if ln.get_label() in ("fp32", "exact")]
            if not ref:
                continue
            (ref,) = ref
            assert ref.get_linestyle() in ("--", ":", "-.") or ref.get_dashes() is not None
            assert ref.get_linestyle() != "-"
            for ln in lines:
                if ln is not ref and ln.get_linestyle() == "-":
                    assert ln.get_linewidth() > ref.get_linewidth(), (name, ln.get_label())
                    assert ln.get_zorder() < ref.get_zorder(), (name, ln.get_label())


def test_swamping_loss_axis_starts_at_zero(demo_figures):
    ax = demo_figures["swamping_loss.png"].axes[0]
    assert ax.get_ylim()[0] == 0


def test_underflow_scale_panel_shows_the_scaler_moving(demo_figures):
    ax = demo_figures["underflow_scale.png"].axes[0]
    (line,) = [ln for ln in ax.get_lines() if ln.get_gid() == "scale"]
    y = np.asarray(line.get_ydata())
    assert y[-1] > y[0]  # grown, every 4 clean steps
    title = ax.get_title(loc="left")
    assert "×2 after 4 clean steps" in title and "doubled" in title
    assert "PyTorch's default: 2000" in title
    assert "no step skipped" in [t.get_text() for t in ax.texts]


def test_layer_panels_have_readable_names(demo_figures):
    titles = [ax.get_title() for ax in demo_figures["underflow_layers.png"].axes if ax.get_title()]
    assert titles and all(t.startswith("layer ") for t in titles)
    assert not any(re.search(r"\(\d+\.\d+\)", t) for t in titles)  # no module paths like (0.2)


def test_the_committed_figure_names_are_the_demos(demo_figures):
    made = set(demo_figures)
    for files in figures_demo.DEMO_FIGURES.values():
        assert set(files) <= made
    assert set(figures_demo.STATIC_FIGURES) <= made
