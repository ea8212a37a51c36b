"""The formats themselves: their ranges side by side, one number's bit fields, the number line of
every representable value."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..formats import Format, FormatLike, get_format

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

from .common import (
    _SHADE_ALPHA,
    PALETTE,
    _fig_ax,
    _limits,
    _new_figure,
    _pow2_tex,
    _root_figure,
    _sci,
    _set_log2_ticks,
)


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
        if _has_subnormal_values(f):
            ax.barh(i, b - a, left=a, height=height, color=PALETTE["subnormal"], alpha=0.45,
                    gid=f"subnormal:{f.name}")  # fmt: skip
        ax.barh(i, c - b, left=b, height=height, color=PALETTE["normal"], alpha=0.85,
                gid=f"normal:{f.name}")  # fmt: skip
        ax.text(a - 1.5, i, _pow2_tex(int(a)), ha="right", va="center", fontsize=9)
        ax.text(c + 1.5, i, _sci(f.max), ha="left", va="center", fontsize=9)
        if _has_subnormal_values(f):  # else the smallest normal is the smallest value (left)
            ax.text(b, i + height / 2 + 0.05, _pow2_tex(int(b)), ha="center", va="top",
                    fontsize=7.5, color="#333333")  # fmt: skip
        digits = f.precision * math.log10(2)
        bits = "bits" if f.precision > 1 else "bit"
        ax.text(
            1.01, i, f"precision {f.precision} {bits} ({f.man_bits} stored + hidden 1)\n"
            f"≈ {digits:.1f} decimal digits · {f.emax - f.emin + 1} normal binades",
            transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=9,
        )  # fmt: skip
    ax.set_yticks(
        range(len(fs)),
        [f"{f.name}\n{int(f.signed)}·{f.exp_bits}·{f.man_bits} bits" for f in fs],
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
        loc="upper left", fontsize=8.5, ncol=2, frameon=False,
        # the same distance below the axis (about 0.34 in, under the tick labels) for any
        # number of formats, so the legend never meets the axis label
        bbox_to_anchor=(0.0, -0.07 * 4.8 / (0.9 * len(fs) + 0.3)),
    )  # fmt: skip
    ax.set_title(
        "Range vs precision: exponent bits buy range (the bar's length), mantissa bits buy "
        "precision (right)", loc="left", fontsize=11,
    )  # fmt: skip
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    return fig


def _has_subnormal_values(f: Format) -> bool:
    """Whether there are subnormals: exponent field 0 holds zero and the subnormals, and a
    fraction to tell them apart (not E8M0, nor P3109 with p=1)."""
    return f.has_subnormals and f.man_bits > 0


def _format_title(f: Format) -> str:
    """``fp8_e4m3 (no inf; NaN = S.1111.111)`` for a built-in or P3109 format;
    ``e4m3_ieee = Format(4, 3), IEEE style (inf and NaN in the top exponent)`` for a generated
    name, which readers may not know (both spellings are ones :func:`fpsim.get_format` reads).
    The specials are described from the format's properties
    (:func:`fpsim.inspect.describe_specials`)."""
    from ..formats import list_formats
    from ..inspect import describe_specials

    specials = ("" if f.signed else "unsigned; ") + describe_specials(f)
    if f.name in list_formats():
        return f"{f.name} ({specials})"
    # P3109 names say what they are; a Format(...) name is its own call text
    plain = f.name == f.call_text or f.name.startswith("p3109_")
    name = f.name if plain else f"{f.name} = {f.call_text}"
    return f"{name}, {specials}"


def _bitfield_size(f: Format) -> tuple[float, float]:
    return (round(min(max(0.4 * f.bits + 1.6, 8.0), 18.0), 1), 3.6)


def _note_text(sentence: str, x: float) -> str:
    """A sentence of :mod:`fpsim.inspect` for a figure: the input's value in place of
    ``|input|``, real minus signs, powers of two in mathtext."""
    text = sentence.replace("|input|", f"|{x!r}|").replace("-", "−")
    return re.sub(r"2\^−?\d+", lambda m: _pow2_tex(int(m.group(0)[2:].replace("−", "-"))), text)


def _ones_zeros(bits: str) -> str:
    """``all ones``, ``all zeros`` or the bits themselves (``10₂``)."""
    return "all ones" if set(bits) == {"1"} else "all zeros" if set(bits) == {"0"} else f"{bits}₂"


def _special_meanings(fl: Any) -> tuple[str, str, str]:
    """What the sign, exponent and mantissa of an inf or NaN code say, by the format's
    encoding of its specials (IEEE all-ones exponent, all-ones code, the -0 code, P3109's top
    code)."""
    f = fl.format
    sign_text = f"$(-1)^{{{fl.sign}}}$\n= {'+1' if fl.sign == 0 else '−1'}"
    if fl.cls == "inf":
        if f.nan == "ieee":
            return sign_text, "all ones", "fraction 0: infinity"
        inf = f"{'+' if fl.sign == 0 else '−'}∞ (the code just above\nthe largest finite value)"
        if f.man_bits:
            return (
                sign_text,
                _ones_zeros(fl.exponent_bits),
                f"{_ones_zeros(fl.mantissa_bits)}: {inf}",
            )
        return sign_text, f"{_ones_zeros(fl.exponent_bits)}: {inf}", ""
    if f.nan == "ieee":
        return sign_text, "all ones", "fraction ≠ 0: NaN"
    inf = "no inf" if not f.has_inf else "inf is the code below"
    if f.nan == "all_ones" and f.man_bits:
        return sign_text, "all ones", f"all ones: the only NaN\n({inf})"
    if f.nan == "all_ones":
        return sign_text, f"all ones: the only NaN ({inf})", ""
    # negzero: the sign bit alone, the code -0 would have
    exp_text = f"all zeros with sign 1:\n{fl.hex}, where −0 would be,\nis the only NaN"
    return "1: part of\nthe NaN code", exp_text, "all zeros"


def plot_bit_fields(x: Any, fmt: FormatLike = "fp16", ax: Axes | None = None) -> Figure:
    """The bit-field diagram of ``x`` rounded (nearest-even) to ``fmt``.

    One box per bit, sign first, coloured by field (sign, exponent, mantissa) with the bit value
    inside and its position below; above, each field's name and width; under each field what it
    means (sign ±, exponent field − bias, significand 1.f or 0.f), and at the bottom the value
    formula ``(-1)^s × 1.f × 2^e = value`` (exact decimal, or ≈ when very long) with the
    rounding error. Only the fields the format has are drawn: an unsigned format has no sign
    box and no ``(-1)^s``, E8M0 no mantissa (its value is ``2^e``). Uses
    :func:`fpsim.inspect.fields` (which raises ValueError for an input no code holds, such as
    NaN in FP4).

    Figure: (0.4 × bits + 1.6, clipped to 8 … 18) × 3.6 inches at :data:`DPI`.

    >>> fig = plot_bit_fields(0.1, "fp16")
    """
    from matplotlib.patches import Rectangle

    from ..inspect import fields
    from ..inspect.tables import _result_note

    fl = fields(x, fmt)
    f = fl.format
    fig, ax = _fig_ax(ax, _bitfield_size(f))
    groups = [
        ("sign", str(fl.sign), "sign"),
        ("exponent", fl.exponent_bits, f"exponent ({f.exp_bits} bits)"),
        ("mantissa", fl.mantissa_bits, f"mantissa / fraction ({f.man_bits} bits)"),
    ]
    groups = [g for g in groups if (g[0] != "sign" or f.signed) and g[1]]
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
    else:
        sign_text, exp_text, man_text = _special_meanings(fl)
    meanings = {"sign": sign_text, "exponent": exp_text, "mantissa": man_text}
    for field, (a, b) in spans.items():
        ax.text((a + b) / 2, -0.42, meanings[field], ha="center", va="top", fontsize=9,
                linespacing=1.3, gid=f"meaning:{field}")  # fmt: skip
    # the formula, then the rounding error (or what became of an input beyond the format)
    note_of = _result_note(fl)
    if fl.value is not None:
        lead = "1" if fl.cls == "normal" else "0"
        dec = fl.decimal if len(fl.decimal) <= 40 else f"≈ {fl.stored:.17g}"
        eq = "" if dec.startswith("≈") else "= "
        sign = f"(-1)^{{{fl.sign}}} \\times " if f.signed else ""
        sig = (
            f"{lead}.{fl.mantissa_bits}_2 \\times "
            if f.man_bits
            else ""
            if lead == "1"
            else "0 \\times "
        )
        formula = f"${sign}{sig}2^{{{fl.exponent}}}$  {eq}{dec.replace('-', m1)}"
        note = f"the input {fl.input!r} is stored exactly"
        if fl.error:
            note = (
                f"stored − input = {float(fl.error):+.3g}  ({float(fl.error_ulps):+.3g} ulp): "
                f"the rounding error of {fl.input!r}"
            ).replace("-", m1)
        if note_of is not None:
            note = _note_text(note_of[1], fl.input)
    else:
        formula = ("+∞" if fl.sign == 0 else "−∞") if fl.cls == "inf" else "NaN"
        note = "" if note_of is None else _note_text(note_of[1], fl.input)
    ax.text(f.bits / 2, -1.4, formula, ha="center", va="top", fontsize=12, gid="formula")
    ax.text(f.bits / 2, -1.85, note, ha="center", va="top", fontsize=9, color="#444444",
            gid="note")  # fmt: skip
    ax.set_xlim(-0.3, f.bits + 0.3)
    ax.set_ylim(-2.2, 1.75)
    ax.set_aspect("auto")
    ax.axis("off")
    unsigned = "" if f.signed else "; unsigned: no sign bit"
    ax.set_title(
        f"{fl.input!r} in {f.name}: bits {fl.bits}  ({fl.hex}, {fl.cls}){unsigned}",
        loc="left", fontsize=11,
    )  # fmt: skip
    return fig


def _binade_counts(f: Format) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exponent k, number of positive finite values in [2^k, 2^(k+1)), is_subnormal)."""
    m = f.man_bits
    sub_k = np.arange(f.emin - m, f.emin) if f.has_subnormals else np.arange(0)  # none if m=0
    sub_n = 2.0 ** (sub_k - (f.emin - m))  # 1, 2, 4, ..., 2^(m-1): spacing stays 2^(emin-m)
    norm_k = np.arange(f.emin, f.emax + 1)
    norm_n = np.full(norm_k.size, 2.0**m)
    # the top binade ends at the largest finite value (below the inf or NaN codes there)
    norm_n[-1] = f.max_significand - (1 << m) + 1
    k = np.concatenate([sub_k, norm_k])
    n = np.concatenate([sub_n, norm_n])
    return k, n, np.concatenate([np.ones(sub_k.size, bool), np.zeros(norm_k.size, bool)])


def _draw_values_line(ax: Axes, f: Format, zoom: bool) -> None:
    """All non-negative finite values of a <= 8-bit format as ticks on a linear axis."""
    from ..inspect import all_values

    t = all_values(f)
    sign_clear = t["code"] < (1 << (f.exp_bits + f.man_bits)) if f.signed else True
    t = t[sign_clear & np.isin(t["cls"], ["zero", "subnormal", "normal"])]
    prefix = "zoom" if zoom else "values"
    if zoom:
        t = t[t["value"] <= 4 * f.min_normal]
    for cls, label in (("zero", "zero"), ("subnormal", "subnormal"), ("normal", "normal")):
        v = t["value"][t["cls"] == cls]
        if not v.size:  # E8M0 has no zero and no subnormals: nothing to draw or list
            continue
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
        step = 2.0 ** (f.emin - f.man_bits)  # the smallest binade's spacing
        subs = _has_subnormal_values(f)
        notes = [
            (1.5 * f.min_normal, f"spacing {_pow2_tex(int(math.log2(step)))}"),
            (3 * f.min_normal, f"spacing {_pow2_tex(int(math.log2(step)) + 1)}"),
        ]
        if subs:
            ax.axvspan(0, f.min_normal, color=PALETTE["subnormal"], alpha=_SHADE_ALPHA, lw=0)
            notes.insert(
                0, (f.min_normal / 2, f"subnormals: spacing {_pow2_tex(int(math.log2(step)))}")
            )
        else:
            gap = "no subnormals" if f.has_zero else "no zero,\nno subnormals"
            notes.insert(0, (f.min_normal / 2, gap))
        for xpos, text in notes:
            ax.text(xpos, 0.45, text, ha="center", va="bottom", fontsize=8.5)
        ax.set_xticks(
            [0, f.min_normal, 2 * f.min_normal, 4 * f.min_normal],
            ["0"] + [_pow2_tex(f.emin + i) for i in range(3)],
        )
        smallest = _pow2_tex(f.emin)
        if subs:
            what = (
                "the subnormals continue the smallest binade's spacing down to 0 (gradual "
                "underflow)"
            )
        elif f.has_zero:  # P3109 p=1: exponent field 0 has no fraction to hold subnormals
            what = f"no mantissa bits, so no subnormals: nothing lies between 0 and {smallest}"
        else:
            what = f"no zero and no subnormals: the smallest value is {smallest}, nothing below it"
        ax.set_title(f"zoom on [0, {_pow2_tex(f.emin + 2)}]: {what}", loc="left", fontsize=10)
    else:
        ax.set_xlim(-0.02 * f.max, f.max * 1.03)
        if f.max >= 1e6:  # E8M0: ticks as 1.7e38, not an offset text that meets the next panel
            from matplotlib.ticker import FuncFormatter

            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _sci(v)))
        which = "non-negative" if f.has_zero else "positive"
        ax.set_title(
            f"every {which} finite {f.name} value on a linear axis ({len(t)} values): "
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
    values = "values" if m else "value"
    top = "" if n[-1] == 2**m else f" ({int(n[-1])} in the top one)"
    for is_sub, zone in ((True, "subnormal"), (False, "normal")):
        sel = sub == is_sub
        if not sel.any():
            continue  # no subnormals (E8M0)
        counts = "1, 2, 4, …" if m >= 3 else ", ".join(str(int(c)) for c in n[sel])
        label = (
            f"subnormal binades: {counts} {'values' if m > 1 else 'value'}"
            if is_sub
            else f"normal binades: {_pow2_tex(m)} = {2**m} {values} each{top}"
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
    ulp = f"$2^{{k-{m}}}$" if m else "$2^k$"
    # inside the bars in white; above them in black where they are too short (one value each)
    y, colour = (2.0 ** (m / 2), "white") if m else (2.0, "black")
    ax.text(
        mid, y, f"in each binade [$2^k$, $2^{{k+1}}$): {2**m} {values},"
        f" spacing (ulp) {ulp}", ha="center", va="center", color=colour, fontsize=9.5,
        fontweight="bold", clip_on=True,
    )  # fmt: skip
    zero = "+0 not shown" if f.has_zero else "no zero"
    ax.set_xlabel(f"|x|   (log₂ axis: one bar per binade [$2^k$, $2^{{k+1}}$); {zero})",
                  fontsize=9)  # fmt: skip
    ax.set_ylabel("values per binade (log₂)", fontsize=9)
    if _has_subnormal_values(f):
        below = "subnormals keep the smallest gap"
    elif f.has_zero:
        below = f"no subnormals between 0 and {_pow2_tex(f.emin)}"
    else:
        below = f"no subnormals, no zero below {_pow2_tex(f.emin)}"
    ax.set_title(
        f"{f.name}: values per binade — the same count in every normal binade, so the gap "
        f"doubles each binade; {below}",
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
