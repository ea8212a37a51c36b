"""fpsim.plot: every figure renders headless at its documented size, and draws the right things.

The checks read the drawn artists back (bar positions and heights, line positions, marker
offsets, texts) and compare them with facts computed here independently: binade counts with
numpy's frexp, fp16's limits as literals, representable values from the IEEE definitions.
"""

import matplotlib

matplotlib.use("Agg")

import math  # noqa: E402
import re  # noqa: E402
import struct  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from fpsim import plot as P  # noqa: E402
from fpsim.formats import Format, get_format  # noqa: E402
from fpsim.inspect import all_values  # noqa: E402
from fpsim.stats import RangeHistogram  # noqa: E402


# ---- data and independent facts ----------------------------------------------------------------
@pytest.fixture(scope="module")
def data():
    """Gradient-like values over 2^-45 .. 2^6, with exact zeros, infs and a NaN."""
    rng = np.random.default_rng(1234)
    n = 40_000
    x = rng.standard_normal(n) * 2.0 ** rng.uniform(-45, 5, n)
    x[rng.random(n) < 0.25] = 0.0
    x[:3] = [np.inf, -np.inf, np.nan]
    return x


@pytest.fixture(scope="module")
def hist(data):
    h = RangeHistogram()
    h.add(data)
    return h


def binade_counts(x: np.ndarray) -> dict[int, int]:
    """{k: number of finite non-zero values with 2^k <= |x| < 2^(k+1)}."""
    a = np.abs(x[np.isfinite(x) & (x != 0)])
    _, e = np.frexp(a)  # a = m × 2^e, 0.5 <= m < 1
    ks, counts = np.unique(e - 1, return_counts=True)
    return dict(zip(ks.tolist(), counts.tolist(), strict=True))


def lost_fraction(x: np.ndarray, scale: float, smallest_subnormal: float) -> float:
    """Share of the finite non-zero values that round to zero (|x·S| <= half the smallest
    subnormal; the tie goes to the even zero)."""
    a = np.abs(x[np.isfinite(x) & (x != 0)]) * scale
    return float(np.count_nonzero(a <= smallest_subnormal / 2) / a.size)


def drawn(fig: Figure) -> tuple[int, int]:
    fig.canvas.draw()
    return fig.canvas.get_width_height()


def by_gid(ax, gid: str) -> list:
    return [p for p in ax.patches if p.get_gid() == gid]


def bars(ax, gid: str) -> dict[float, float]:
    """{left edge: height} of the bars with this gid."""
    return {p.get_x(): p.get_height() for p in by_gid(ax, gid)}


def line_x(ax, gid: str) -> float:
    (line,) = [ln for ln in ax.lines if ln.get_gid() == gid]
    xs = np.unique(np.asarray(line.get_xdata(), dtype=float))
    assert xs.size == 1
    return float(xs[0])


def texts(fig: Figure) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# ---- range histogram ---------------------------------------------------------------------------
def test_range_histogram_fp16(hist, data):
    fig = P.plot_range_histogram(hist, "fp16")
    assert drawn(fig) == (1200, 500)
    ax = fig.axes[0]
    # fp16's limits: 2^-24, 2^-14 and 65504, on the log2 axis
    assert line_x(ax, "limit:smallest_subnormal") == -24
    assert line_x(ax, "limit:smallest_normal") == -14
    assert line_x(ax, "limit:max") == pytest.approx(math.log2(65504), abs=1e-12)
    labels = [t.get_text() for t in ax.texts if t.get_gid() == "limit_label"]
    assert any("2^{-24}" in t and "5.96e-8" in t for t in labels)
    assert any("2^{-14}" in t and "6.10e-5" in t for t in labels)
    assert any("65504" in t for t in labels)
    # one bar per binade [2^k, 2^(k+1)), from k to k+1, as tall as the count
    expected = binade_counts(data)
    got = {x: h for x, h in bars(ax, "bin").items() if h}
    assert got == {float(k): float(c) for k, c in expected.items()}
    assert all(p.get_width() == 1 for p in by_gid(ax, "bin"))
    # the zero bar: apart, left of every binade bar, labelled "0"
    (zero,) = by_gid(ax, "zero")
    assert zero.get_height() == np.count_nonzero(data == 0)
    assert zero.get_x() + zero.get_width() < min(expected) - 1
    ticks = dict(zip([t.get_text() for t in ax.get_xticklabels()], ax.get_xticks(), strict=True))
    assert ticks["0"] == pytest.approx(zero.get_x() + zero.get_width() / 2)
    # the lost fraction and the inf/NaN count are printed
    lost = lost_fraction(data, 1, 2.0**-24)
    assert 0.05 < lost < 0.6
    assert f"{100 * lost:.1f}% of non-zero values" in texts(fig)
    assert "inf/NaN (not drawn): 3" in texts(fig)
    # the zones: rounds-to-zero ends at half the smallest subnormal, 2^-25; the normal zone
    # starts where values round up to the smallest normal 2^-14: at 2^-14 - 2^-25 (the tie
    # between the largest subnormal 2^-14 - 2^-24 and 2^-14 goes to the even 2^-14)
    (sub,) = [p for p in ax.patches if p.get_gid() == "subnormal"]
    assert sub.get_x() == -25
    assert sub.get_x() + sub.get_width() == pytest.approx(-14 + math.log2(1 - 2**-11), abs=1e-12)
    assert np.float16(2.0**-14 - 2.0**-25) == 2.0**-14  # numpy agrees: the tie rounds up
    assert np.float16(2.0**-14 - 2.0**-25 - 2.0**-40) < 2.0**-14


def test_range_histogram_scaled_overlay(hist, data):
    k = 15
    fig = P.plot_range_histogram(hist, "fp16", scale=2**k)
    assert drawn(fig) == (1200, 500)
    ax = fig.axes[0]
    base, scaled = bars(ax, "bin"), bars(ax, "scaled_bin")
    assert len(base) == len(scaled) > 30
    assert scaled == {x + k: h for x, h in base.items()}  # shifted by exactly log2 S
    assert any(p.get_alpha() is not None and p.get_alpha() < 1 for p in by_gid(ax, "scaled_bin"))
    shift = [t.get_text() for t in ax.texts if t.get_gid() == "shift_label"]
    assert shift and "×32768" in shift[0] and "2^{15}" in shift[0]
    (arrow,) = [c for c in ax.get_children() if isinstance(c, matplotlib.text.Annotation)]
    assert arrow.xy[0] - arrow.xyann[0] == pytest.approx(k)
    lost_scaled = lost_fraction(data, 2.0**k, 2.0**-24)
    assert f"lost to zero: {100 * lost_scaled:.1f}%" in texts(fig)


@pytest.mark.parametrize(
    "fmt, limits",
    [
        ("fp8_e4m3", (-9, -6, math.log2(448))),
        ("fp8_e5m2", (-16, -14, math.log2(57344))),
        (Format(4, 3), (-9, -6, math.log2(240))),  # not among the histogram's formats
    ],
)
def test_range_histogram_other_formats(hist, data, fmt, limits):
    fig = P.plot_range_histogram(hist, fmt, scale=2**-2)
    assert drawn(fig) == (1200, 500)
    ax = fig.axes[0]
    names = ("limit:smallest_subnormal", "limit:smallest_normal", "limit:max")
    assert [line_x(ax, n) for n in names] == pytest.approx(list(limits), abs=1e-12)
    lost = lost_fraction(data, 1, 2.0 ** limits[0])
    assert f"{100 * lost:.1f}% of non-zero values" in texts(fig)


@pytest.mark.parametrize("fmt", ["fp16", "fp8_e4m3", "bf16", Format(3, 2)])
def test_range_histogram_labels_do_not_overlap(hist, fmt):
    fig = P.plot_range_histogram(hist, fmt, scale=2**10)
    fig.canvas.draw()
    ax = fig.axes[0]
    r = fig.canvas.get_renderer()
    boxes = [
        t.get_window_extent(r)
        for t in ax.texts
        if t.get_gid() in ("limit_label", "zone_note", "shift_label") and t.get_visible()
    ]
    assert boxes
    inside = ax.get_window_extent(r)
    for i, a in enumerate(boxes):
        assert inside.x0 - 1 <= a.x0 and a.x1 <= inside.x1 + 1
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b)


def test_range_histogram_edge_cases():
    h = RangeHistogram()
    for scale in (None, 2**-5):
        assert drawn(P.plot_range_histogram(h, "fp16", scale=scale)) == (1200, 500)
    h.add(np.zeros(7))
    fig = P.plot_range_histogram(h, "bf16", scale=8)
    drawn(fig)
    assert by_gid(fig.axes[0], "zero")[0].get_height() == 7
    with pytest.raises(ValueError, match="power of two"):
        P.plot_range_histogram(h, "fp16", scale=3)


def test_side_by_side(hist, data):
    fig = P.plot_histograms_side_by_side(hist, "fp16", scales=(1, 2**15))
    assert drawn(fig) == (1150, 520)
    a, b = fig.axes
    assert a.get_ylim() == b.get_ylim()  # shared y
    assert bars(b, "bin") == {x + 15: h for x, h in bars(a, "bin").items()}
    assert line_x(b, "limit:smallest_subnormal") == -24
    assert f"{100 * lost_fraction(data, 2**15, 2.0**-24):.1f}%" in b.get_title()
    assert f"{100 * lost_fraction(data, 1, 2.0**-24):.1f}%" in a.get_title()
    fig3 = P.plot_histograms_side_by_side(hist, "fp8_e5m2", scales=(1, 8, 2**20))
    assert drawn(fig3) == (1700, 520) and len(fig3.axes) == 3


def test_layer_histograms(data):
    parts = np.array_split(data, 4)
    hists = {}
    for i, part in enumerate(parts):
        h = RangeHistogram()
        h.add(part * 2.0 ** (-3 * i))
        hists[f"layer{i}"] = h
    fig = P.plot_layer_histograms(hists, "fp16", scale=2**12)
    assert drawn(fig) == (1260, 680)  # 3 columns × 2 rows
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 4
    for i, (ax, part) in enumerate(zip(visible, parts, strict=True)):
        assert ax.get_title().startswith(f"layer{i}")
        expected = binade_counts(part * 2.0 ** (-3 * i))
        assert {x: h for x, h in bars(ax, "bin").items() if h} == {
            float(k): float(c) for k, c in expected.items()
        }
        assert bars(ax, "scaled_bin") == {x + 12: h for x, h in bars(ax, "bin").items()}
    assert len({ax.get_xlim() for ax in visible}) == 1  # one x range for all


# ---- training curves ---------------------------------------------------------------------------
def test_loss_curves():
    good = [2.0, 1.5, 1.0, 0.8, 0.7]
    bad = [2.0, 1.6, math.inf, math.nan, 0.9]
    fig = P.plot_loss_curves({"fp32": good, "fp16": bad})
    assert drawn(fig) == (800, 450)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    lines = {ln.get_gid(): ln for ln in ax.lines}
    np.testing.assert_array_equal(lines["loss:fp32"].get_ydata(), good)
    y = np.asarray(lines["loss:fp16"].get_ydata(), dtype=float)
    assert np.isnan(y[2]) and np.isnan(y[3])  # gaps
    np.testing.assert_array_equal(y[[0, 1, 4]], [2.0, 1.6, 0.9])
    (mark,) = [ln for ln in ax.lines if ln.get_gid() == "diverged"]
    assert list(mark.get_xdata()) == [2]
    assert "from step 2" in texts(fig)
    # a non-positive loss: linear axis
    fig = P.plot_loss_curves({"a": [1.0, -0.5]}, log=True)
    drawn(fig)
    assert fig.axes[0].get_yscale() == "linear"
    assert P.plot_loss_curves({"a": [3, 2]}, log=False).axes[0].get_yscale() == "linear"


def test_scale_trajectory():
    scales = [2.0**16, 2.0**15, 2.0**15, 2.0**16, 2.0**14]
    fig = P.plot_scale_trajectory(scales, skipped=[0, 3])
    assert drawn(fig) == (800, 400)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.yaxis.get_transform().base == 2
    lines = {ln.get_gid(): ln for ln in ax.lines}
    np.testing.assert_array_equal(lines["scale"].get_ydata(), scales)
    sk = lines["skipped"]
    assert list(sk.get_xdata()) == [0, 3] and list(sk.get_ydata()) == [2.0**16, 2.0**16]
    assert sk.get_marker() == "x" and matplotlib.colors.same_color(sk.get_color(), "#d62728")
    mask = [True, False, False, True, False]
    sk2 = [ln for ln in P.plot_scale_trajectory(scales, skipped=mask).axes[0].lines]
    assert list(next(ln for ln in sk2 if ln.get_gid() == "skipped").get_xdata()) == [0, 3]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "$2^{16}$" in labels


# ---- formats -----------------------------------------------------------------------------------
def test_format_ranges():
    names = ("fp32", "bf16", "fp16", "fp8_e5m2", "fp8_e4m3")
    fig = P.plot_format_ranges(names)
    assert drawn(fig) == (1200, 610)
    ax = fig.axes[0]
    # (smallest subnormal, smallest normal, max) by definition of each format
    facts = {
        "fp32": (-149, -126, (2 - 2**-23) * 2.0**127),
        "bf16": (-133, -126, (2 - 2**-7) * 2.0**127),
        "fp16": (-24, -14, 65504.0),
        "fp8_e5m2": (-16, -14, 57344.0),
        "fp8_e4m3": (-9, -6, 448.0),
    }
    for name, (sub, norm, mx) in facts.items():
        (s,) = by_gid(ax, f"subnormal:{name}")
        (n,) = by_gid(ax, f"normal:{name}")
        assert (s.get_x(), s.get_x() + s.get_width()) == pytest.approx((sub, norm))
        assert (n.get_x(), n.get_x() + n.get_width()) == pytest.approx((norm, math.log2(mx)))
    t = texts(fig)
    assert "65504" in t and "448" in t and "precision 11 bits" in t and "precision 8 bits" in t


def test_bit_fields():
    fig = P.plot_bit_fields(0.1, "fp16")
    assert drawn(fig) == (800, 360)
    ax = fig.axes[0]
    bits = "".join(t.get_text() for t in ax.texts if t.get_gid() == "bitval")
    assert f"{bits[0]} {bits[1:6]} {bits[6:]}" == "0 01011 1001100110"
    fields = [p.get_gid() for p in ax.patches if (p.get_gid() or "").startswith("bit:")]
    assert fields == ["bit:sign"] + ["bit:exponent"] * 5 + ["bit:mantissa"] * 10
    colours = {p.get_gid(): p.get_facecolor() for p in ax.patches}
    for field in ("sign", "exponent", "mantissa"):
        assert matplotlib.colors.same_color(colours[f"bit:{field}"], P.PALETTE[field])
    (formula,) = [t.get_text() for t in ax.texts if t.get_gid() == "formula"]
    assert "1.1001100110_2" in formula and "2^{-4}" in formula and "0.0999755859375" in formula
    meaning = {t.get_gid(): t.get_text() for t in ax.texts}
    assert "11 − bias 15 = −4" in meaning["meaning:exponent"]
    # other classes and widths render too
    sizes = {"fp32": (1440, 360), "fp8_e4m3": (800, 360), "fp16": (800, 360)}
    for x, fmt in [(1e-7, "fp16"), (np.inf, "fp16"), (1000, "fp8_e4m3"), (-(2.0**-149), "fp32")]:
        assert drawn(P.plot_bit_fields(x, fmt)) == sizes[fmt]
    assert P.plot_bit_fields(0.0, "fp64").canvas.get_width_height() == (1800, 360)  # capped


def test_number_line_small_format():
    f = Format(4, 3)  # IEEE style: exponent 15 is inf/NaN
    fig = P.plot_number_line(f)
    assert drawn(fig) == (1200, 750)
    ax = fig.axes[0]
    offsets = {c.get_gid(): c.get_offsets()[:, 0] for c in ax.collections}
    # non-negative finite values: exponent fields 0..14 × 8 fractions = 120 (with +0);
    # 7 subnormals (exponent 0, fraction 1..7) spaced 2^-9; 14 × 8 = 112 normals up to 240
    assert sum(len(v) for v in offsets.values()) == 120
    assert len(offsets["values:zero"]) == 1 and offsets["values:zero"][0] == 0
    np.testing.assert_array_equal(np.sort(offsets["values:subnormal"]), np.arange(1, 8) / 2**9)
    normal = np.sort(offsets["values:normal"])
    assert len(normal) == 112 and normal[0] == 2.0**-6 and normal[-1] == 240
    # values per binade: 1, 2, 4 in the subnormal binades, then 8 in each of 14 normal ones
    dens = fig.axes[2]
    sub, nor = bars(dens, "binade:subnormal"), bars(dens, "binade:normal")
    assert sub == {-9.0: 1, -8.0: 2, -7.0: 4}
    assert nor == {float(k): 8 for k in range(-6, 8)}


def test_number_line_binade_counts_match_all_values():
    for name in ("fp16", "fp8_e4m3", "fp8_e5m2"):
        t = all_values(name)
        v = t["value"][t["code"] < 2 ** (get_format(name).bits - 1)]  # sign bit clear
        v = v[np.isfinite(v) & (v > 0)]
        expected = binade_counts(v)
        fig = P.plot_number_line(name, log=True)
        assert drawn(fig) == (1200, 360)
        ax = fig.axes[0]
        got = bars(ax, "binade:subnormal") | bars(ax, "binade:normal")
        assert got == {float(k): float(c) for k, c in expected.items()}
    assert len(P.plot_number_line("fp16").axes) == 1  # wide: per binade only
    assert len(P.plot_number_line("fp32").axes) == 1
    with pytest.raises(ValueError, match="at most 8 bits"):
        P.plot_number_line("fp16", log=False)


# ---- common behaviour --------------------------------------------------------------------------
def test_into_given_axes(hist):
    fig = Figure(figsize=(10, 8))
    axes = fig.subplots(2, 3).ravel()
    calls = [
        lambda ax: P.plot_range_histogram(hist, "fp16", ax=ax),
        lambda ax: P.plot_loss_curves({"a": [1, 0.5]}, ax=ax),
        lambda ax: P.plot_scale_trajectory([1.0, 2.0], ax=ax),
        lambda ax: P.plot_format_ranges(ax=ax),
        lambda ax: P.plot_bit_fields(1.0, "bf16", ax=ax),
        lambda ax: P.plot_number_line("fp8_e4m3", ax=ax),
    ]
    for ax, call in zip(axes, calls, strict=True):
        assert call(ax) is fig
        assert ax.has_data() or ax.texts or ax.collections


def make_all(hist) -> dict:
    return {
        "range_histogram": (P.plot_range_histogram(hist, "fp16", scale=2**15), (1200, 500)),
        "side_by_side": (P.plot_histograms_side_by_side(hist, "fp16"), (1150, 520)),
        "layers": (P.plot_layer_histograms({"a": hist, "b": hist}, "fp16"), (840, 390)),
        "loss": (P.plot_loss_curves({"a": [1, 0.5, math.nan]}), (800, 450)),
        "scale": (P.plot_scale_trajectory([4.0, 2.0, 2.0], skipped=[0]), (800, 400)),
        "ranges": (P.plot_format_ranges(), (1200, 610)),
        "bits": (P.plot_bit_fields(0.1, "fp16"), (800, 360)),
        "number_line": (P.plot_number_line("fp8_e4m3"), (1200, 750)),
    }


def test_every_function_saves_a_png_of_the_right_size(hist, tmp_path):
    before = plt.get_fignums()
    for name, (fig, size) in make_all(hist).items():
        path = tmp_path / f"{name}.png"
        fig.savefig(path)
        assert png_size(path) == size, name
    assert plt.get_fignums() == before  # no pyplot figures created (nothing to show or leak)


def test_palette_is_shared():
    for key in ("zero", "underflow", "subnormal", "normal", "overflow", "data", "scaled"):
        assert matplotlib.colors.is_color_like(P.PALETTE[key])
    assert len({P.PALETTE[k] for k in ("underflow", "subnormal", "normal", "overflow")}) == 4


# ---- legends name only what is drawn; one notation for powers of two --------------------------
def legend_texts(fig) -> list[str]:
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [t.get_text() for leg in legends for t in leg.get_texts()]


def test_legend_lists_only_drawn_zones_lines_and_zeros():
    h = RangeHistogram()
    h.add(2.0 ** np.arange(-30, -20, 0.25))  # far from bf16's limits, no zeros
    fig = P.plot_range_histogram(h, "bf16")
    drawn(fig)
    assert legend_texts(fig) == ["values", "normal (full precision)"]
    shaded = {p.get_gid() for p in fig.axes[0].patches} & {"underflow", "subnormal", "overflow"}
    assert not shaded
    # with zeros and fp16's limits in view, they are all listed
    h.add(np.zeros(5))
    fig = P.plot_range_histogram(h, "fp16")
    drawn(fig)
    labels = legend_texts(fig)
    assert "exact zeros" in labels and "rounds to 0" in labels
    assert sum("smallest" in t or t.startswith("max") for t in labels) == 3
    # side by side and per layer: the same rule
    h2 = RangeHistogram()
    h2.add(2.0 ** np.arange(-30, -20, 0.25))
    for fig in (P.plot_histograms_side_by_side(h2, "bf16", scales=(1,)),
                P.plot_layer_histograms({"a": h2}, "bf16")):  # fmt: skip
        drawn(fig)
        labels = legend_texts(fig)
        assert "exact zeros" not in labels and "values × scale" not in labels
        assert "rounds to 0" not in labels and not any("smallest" in t for t in labels)


def test_fn_formats_overflow_to_nan_not_inf(hist):
    fig = P.plot_range_histogram(hist, "fp8_e4m3")
    labels = legend_texts(fig)
    assert "overflow (→ NaN; no inf)" in labels
    assert not any("→ inf" in t for t in labels)
    assert "overflow (→ inf)" in legend_texts(P.plot_range_histogram(hist, "fp8_e5m2"))


def test_scale_trajectory_without_skips_has_no_marker_entry():
    fig = P.plot_scale_trajectory([2.0**16] * 3 + [2.0**17] * 3, skipped=[])
    drawn(fig)
    ax = fig.axes[0]
    assert legend_texts(fig) == ["loss scale"]
    assert [t.get_text() for t in ax.texts if t.get_gid() == "no_skips"] == ["no step skipped"]


def test_generated_format_names_are_explained():
    fig = P.plot_number_line(Format(4, 3))
    title = fig.get_suptitle()
    assert "e4m3_ieee = Format(4, 3)" in title
    for name in ("e4m3_ieee", "Format(4, 3)"):
        assert get_format(name) == Format(4, 3)  # both spellings read back
    title = P.plot_number_line("fp8_e4m3").get_suptitle()
    assert title == "The number line of fp8_e4m3 (no inf; NaN = S.1111.111)"


def test_powers_of_two_in_mathtext_only(hist):
    figs = [P.plot_range_histogram(hist, "fp16", scale=2**10), P.plot_bit_fields(0.1, "fp16"),
            P.plot_number_line("fp8_e4m3"), P.plot_format_ranges(),
            P.plot_scale_trajectory([4.0, 2.0], skipped=[0])]  # fmt: skip
    for fig in figs:
        for t in fig.findobj(matplotlib.text.Text):
            plain = re.sub(r"\$[^$]*\$", "", t.get_text())
            assert "2^" not in plain and not set(plain) & set("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻ᵏ"), t.get_text()


# ---- every format: FP4, FP6, E8M0 (unsigned, no mantissa, no zero), fnuz, P3109 --------------------
NEW_FORMATS = ("fp4_e2m1", "fp6_e3m2", "e8m0", "fp8_e4m3fnuz", "p3109_k8p3se")
ML = {
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "e8m0": ml_dtypes.float8_e8m0fnu,
    "fp8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
}


def nonnegative_values(name: str) -> np.ndarray:
    """The format's non-negative finite values, sorted: by ml_dtypes, or for binary8p3 (P3109,
    signed, extended) from its definition: bias 16, 2 fraction bits, subnormals k × 2^-17,
    normals (1 + j/4) × 2^e for e = -15..15, the top code 0x7F being +inf."""
    if name in ML:
        v = np.arange(256 if name != "fp4_e2m1" else 16, dtype=np.uint8)
        if name == "fp6_e3m2":
            v = v[:64]
        v = v.view(ML[name]).astype(np.float64)
        return np.unique(v[np.isfinite(v) & (v >= 0)])
    assert name == "p3109_k8p3se"
    vals = [k * 2.0**-17 for k in range(4)]
    vals += [(1 + j / 4) * 2.0**e for e in range(-15, 16) for j in range(4)][:-1]
    return np.array(vals)


def bit_gids(ax) -> list[str]:
    return [p.get_gid() for p in ax.patches if (p.get_gid() or "").startswith("bit:")]


def ax_texts(ax) -> dict[str, str]:
    return {t.get_gid(): t.get_text() for t in ax.texts if t.get_gid()}


@pytest.mark.parametrize("name", NEW_FORMATS)
def test_new_formats_render_to_png(name, tmp_path):
    f = get_format(name)
    inputs = [0.1, -1e-5, 448.0, 500.0, math.inf, -math.inf, 0.0]
    if f.has_nan:
        inputs.append(math.nan)
    for i, x in enumerate(inputs):
        path = tmp_path / f"bits_{name}_{i}.png"
        P.plot_bit_fields(x, name).savefig(path)
        assert path.is_file() and png_size(path) == (800, 360)
    path = tmp_path / f"number_line_{name}.png"
    P.plot_number_line(name).savefig(path)
    assert path.is_file() and png_size(path) == (1200, 750)


def test_bit_fields_draw_only_the_fields_a_format_has():
    fig = P.plot_bit_fields(0.1, "e8m0")  # unsigned, no mantissa bits
    ax = fig.axes[0]
    assert bit_gids(ax) == ["bit:exponent"] * 8
    t = ax_texts(ax)
    assert "meaning:sign" not in t and "meaning:mantissa" not in t
    assert t["formula"] == "$2^{-3}$  = 0.125" and "124 − bias 127 = −3" in t["meaning:exponent"]
    assert "(-1)" not in texts(fig) and "unsigned: no sign bit" in ax.get_title(loc="left")
    ax = P.plot_bit_fields(3.0, "p3109_k8p3ue").axes[0]  # unsigned with a mantissa
    assert bit_gids(ax) == ["bit:exponent"] * 6 + ["bit:mantissa"] * 2
    assert ax_texts(ax)["formula"] == "$1.10_2 \\times 2^{1}$  = 3"
    ax = P.plot_bit_fields(6.0, "fp4_e2m1").axes[0]
    assert bit_gids(ax) == ["bit:sign"] + ["bit:exponent"] * 2 + ["bit:mantissa"]
    bits = "".join(t.get_text() for t in ax.texts if t.get_gid() == "bitval")
    assert bits == "0111"


@pytest.mark.parametrize(
    "x, name, formula, musts",
    [(500.0, "fp4_e2m1", "= 6", ["saturates to 6"]),
     (-math.inf, "fp4_e2m1", "= −6", ["−inf saturates to −6"]),
     (0.0, "e8m0", "NaN", ["no zero", "0 becomes NaN", "the only NaN"]),
     (2.0**-130, "e8m0", "2^{-127}", ["$2^{-127}$ and there is no zero"]),
     (500.0, "fp8_e4m3fnuz", "NaN", ["0x80, where −0 would be", "no inf, so it becomes NaN"]),
     (-1e-5, "fp8_e4m3fnuz", "= 0", ["no −0 (its code 0x80 is NaN)"]),
     (math.inf, "p3109_k8p3se", "+∞", ["+∞ (the code just above"]),
     (math.nan, "p3109_k8p3se", "NaN", ["0x80, where −0 would be"])],
)  # fmt: skip
def test_bit_fields_say_what_the_special_rules_did(x, name, formula, musts):
    fig = P.plot_bit_fields(x, name)
    t = texts(fig)
    assert formula in ax_texts(fig.axes[0])["formula"]
    for must in musts:
        assert must in t, (must, t)
    for text in fig.findobj(matplotlib.text.Text):  # one notation for powers of two
        assert "2^" not in re.sub(r"\$[^$]*\$", "", text.get_text()), text.get_text()


def test_bit_fields_refuse_an_input_without_a_code():
    with pytest.raises(ValueError, match="no NaN"):
        P.plot_bit_fields(math.nan, "fp4_e2m1")


@pytest.mark.parametrize("name", NEW_FORMATS)
def test_number_line_of_new_formats(name):
    fig = P.plot_number_line(name)
    drawn(fig)
    line, zoom, dens = fig.axes
    offsets = {c.get_gid(): c.get_offsets()[:, 0] for c in line.collections}
    expected = nonnegative_values(name)
    got = np.sort(np.concatenate(list(offsets.values())))
    np.testing.assert_array_equal(got, expected)
    assert ("values:zero" in offsets) == (name != "e8m0")
    assert ("values:subnormal" in offsets) == (name != "e8m0")
    # values per binade: the oracle's positive values counted by frexp
    counts = binade_counts(expected)
    bars_drawn = bars(dens, "binade:subnormal") | bars(dens, "binade:normal")
    assert bars_drawn == {float(k): float(c) for k, c in counts.items()}
    if name == "e8m0":
        assert not by_gid(dens, "binade:subnormal") and set(bars_drawn.values()) == {1.0}
        assert "no zero and no subnormals" in zoom.get_title(loc="left")
        assert "e8m0 (unsigned; no zero, no subnormals; no inf; NaN = 0xff)" in fig.get_suptitle()
    if name == "p3109_k8p3se":  # the top binade holds 3 values: 0x7F is +inf
        assert bars_drawn[15.0] == 3 and "(3 in the top one)" in legend_texts(fig)[-1]
        assert "±inf = 0x7f/0xff; NaN = the code 0x80 (no -0)" in fig.get_suptitle()
    if name == "fp4_e2m1":
        assert "no inf, no NaN: overflow saturates to ±6" in fig.get_suptitle()
    for text in fig.findobj(matplotlib.text.Text):  # one notation for powers of two
        assert "2^" not in re.sub(r"\$[^$]*\$", "", text.get_text()), text.get_text()


def test_overflow_zone_of_a_format_without_inf_or_nan(hist):
    labels = legend_texts(P.plot_range_histogram(hist, "fp4_e2m1"))
    assert "overflow (→ ±max; no inf, no NaN)" in labels
    assert not any("→ NaN" in t or "→ inf" in t for t in labels)


def test_format_ranges_of_new_formats():
    fig = P.plot_format_ranges(("fp4_e2m1", "e8m0", "p3109_k8p3se"))
    drawn(fig)
    ax = fig.axes[0]
    assert not by_gid(ax, "subnormal:e8m0")  # no subnormals: the bar starts at 2^-127
    (n,) = by_gid(ax, "normal:e8m0")
    assert (n.get_x(), n.get_x() + n.get_width()) == pytest.approx((-127, 127))
    (s,) = by_gid(ax, "subnormal:p3109_k8p3se")
    assert (s.get_x(), s.get_x() + s.get_width()) == pytest.approx((-17, -15))
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["fp4_e2m1\n1·2·1 bits", "e8m0\n0·8·0 bits", "p3109_k8p3se\n1·5·2 bits"]
    assert "precision 1 bit (0 stored + hidden 1)" in texts(fig)


# ---- plot_block_scaling: the drawn windows, shares and scales, from facts computed here --------
def _bars(ax, gid):
    return [p for p in ax.patches if p.get_gid() == gid]


def test_block_scaling_draws_the_windows_the_shares_and_the_scales():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 64)) * 1e-3).astype(np.float32)
    x[:, 5] *= 700.0
    x[0, 8:12] = 1e-9  # fp16 flushes these (below 2^-25)
    fig = P.plot_block_scaling(x, ["fp16", "fp8_e4m3/current", "mxfp4"])
    ax_hist, ax_win, ax_bar, ax_sc = fig.axes
    # top left: |x| per binade, counted with frexp
    _, e = np.frexp(np.abs(x[x != 0]).astype(np.float64))
    want = {int(k) - 1: int(c) for k, c in zip(*np.unique(e, return_counts=True), strict=True)}
    got = {round(p.get_x()): round(p.get_height()) for p in _bars(ax_hist, "bin")
           if p.get_height()}
    assert got == want
    # bottom left: the windows. fp16 as it is: 2^-24 .. 2^-14 subnormal, 2^-14 .. 65504 normal
    sub = sorted(_bars(ax_win, "window:subnormal"), key=lambda p: p.get_y())
    nor = sorted(_bars(ax_win, "window:normal"), key=lambda p: p.get_y())
    assert (sub[0].get_x(), sub[0].get_x() + sub[0].get_width()) == (-24, -14)
    assert nor[0].get_x() == -14 and nor[0].get_x() + nor[0].get_width() == pytest.approx(
        math.log2(65504))
    # per-tensor E4M3 (TE current scaling): the window moves by log2 of fl32(1 / fl32(448/amax))
    amax = np.float32(np.max(np.abs(x)))
    inv = np.float32(1) / (np.float32(448) / amax)
    assert nor[1].get_x() == pytest.approx(-6 + math.log2(inv), abs=1e-12)
    assert nor[1].get_x() + nor[1].get_width() == pytest.approx(math.log2(448 * float(inv)))
    # MXFP4: the median block's window; the blocks' scales are 2^(floor(log2 amax_blk) - 2)
    blk = np.abs(x.astype(np.float64)).reshape(8, 2, 32).max(axis=2).ravel()
    scale_e = np.floor(np.log2(blk)) - 2
    med = np.sort(scale_e)[(scale_e.size - 1) // 2]
    assert nor[2].get_x() == 0 + med and nor[2].get_width() == pytest.approx(math.log2(6))
    # bottom right: the stacked shares add up to 100 and the flushed share of fp16 is its count
    for i in range(3):
        row = [p for p in ax_bar.patches if round(p.get_y() + p.get_height() / 2) == i]
        assert sum(p.get_width() for p in row) == pytest.approx(100)
    with np.errstate(under="ignore"):
        flushed16 = np.count_nonzero((x.astype(np.float16) == 0) & (x != 0)) / x.size
    fp16_zero = [p for p in _bars(ax_bar, "outcome:zero") if round(p.get_y() + 0.28) == 0]
    assert flushed16 > 0
    assert sum(p.get_width() for p in fp16_zero) == pytest.approx(100 * flushed16)
    # top right: one stairs line for the one block scheme, its shares over the exponents
    (st,) = [a for a in ax_sc.patches if a.get_gid() == "scales:mxfp4"]
    vals, edges = st.get_data()[:2]
    counts = np.nan_to_num(vals) / 100 * scale_e.size
    assert dict(zip(edges[:-1].astype(int), np.round(counts).astype(int), strict=True)) == {
        int(k): int(np.count_nonzero(scale_e == k)) for k in range(int(edges[0]),
                                                                 int(edges[-1]))}  # fmt: skip
    plt.close(fig)


def test_block_scaling_refuses_no_schemes():
    with pytest.raises(ValueError, match="no schemes"):
        P.plot_block_scaling(np.ones(32), [])
