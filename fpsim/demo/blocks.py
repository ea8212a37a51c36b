"""``python -m fpsim.demo blocks``: one scale per tensor, or one per block?

A gradient-like tensor with outlier channels, as transformers have: 256 rows (tokens) of 1024
channels, each row with its own magnitude (about 1e-3, spread over a few binades), and a few
channels 100 to 1000 times larger than the rest. It is quantized with fp16 (no scale), fp8
E4M3 with one per-tensor scale (TransformerEngine's current scaling), and the block formats
MXFP8 (E4M3, with the OCP floor rule and with rceil), MXFP4 and NVFP4; a table counts, element
by element (:func:`fpsim.stats.scaling_report`), what each flushed to zero, kept only as a
subnormal or saturated, the bits each spends per element, and the error of the dequantized
tensor. Every sentence printed is computed from those numbers.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from pathlib import Path

import numpy as np

from ._common import (
    PROG,
    add_output_args,
    parse_args,
    pct,
    quiet_numba,
    save_figure,
    seed_arg,
    whole_number,
)

ROWS, COLS = 256, 1024
#: The rows' magnitudes: 1e-3 times 2^N(0, ROW_SPREAD), one draw per row.
BASE, ROW_SPREAD = 1e-3, 2.0
#: Outlier channels are this many times larger (log-uniform between the two).
OUTLIER_RANGE = (100.0, 1000.0)
MAX_OUTLIERS = 64

#: The rows of the table: (label, scheme[, options]) as fpsim.stats.scaling_report takes them.
SCHEMES = (
    ("fp16, no scaling", "fp16"),
    ("fp8_e4m3, per-tensor", "fp8_e4m3/current"),
    ("mxfp8_e4m3", "mxfp8_e4m3"),
    ("mxfp8_e4m3, rceil", "mxfp8_e4m3", {"scale_rounding": "rceil"}),
    ("mxfp4", "mxfp4"),
    ("nvfp4", "nvfp4"),
)
WIDTH = 96  # the prose is wrapped at this many columns


def outlier_tensor(rows: int = ROWS, cols: int = COLS, outliers: int = 4, seed: int = 0):
    """The demo's tensor, deterministic for a seed: ``(x, channels, factors)``.

    ``x`` (float32, rows × cols): row i is ``r_i · z`` with ``z`` standard normal and the row's
    magnitude ``r_i = 1e-3 · 2^N(0, 2)``; then the ``outliers`` columns ``channels`` (sorted)
    are multiplied by ``factors`` (log-uniform in [100, 1000]).

    >>> x, ch, f = outlier_tensor(8, 64, outliers=2, seed=1)
    >>> x.shape, x.dtype, ch.tolist(), bool((f >= 100).all() and (f <= 1000).all())
    ((8, 64), dtype('float32'), [31, 41], True)
    """
    rng = np.random.default_rng(seed)
    scale = BASE * 2.0 ** rng.normal(0.0, ROW_SPREAD, (rows, 1))
    x = rng.standard_normal((rows, cols)) * scale
    channels = np.sort(rng.choice(cols, size=outliers, replace=False))
    lo, hi = np.log10(OUTLIER_RANGE[0]), np.log10(OUTLIER_RANGE[1])
    factors = 10.0 ** rng.uniform(lo, hi, outliers)
    x[:, channels] *= factors
    return x.astype(np.float32), channels, factors


# ---- the table ---------------------------------------------------------------------------------
def table(rows) -> str:
    w = max(len(r.label) for r in rows)
    out = [
        f"{'':{w}}  {'bits per':>8}  {'flushed':>8}  {'':>9}  {'':>9}  {'error':^26}",
        f"{'scheme':{w}}  {'element':>8}  {'to zero':>8}  {'subnormal':>9}  {'saturated':>9}"
        f"  {'||x-q||/||x||':>13}  {'mean |x-q|/|x|':>14}",
    ]
    for r in rows:
        out.append(
            f"{r.label:{w}}  {r.bits_per_element:8.2f}  {pct(r.zero / r.values):>8}  "
            f"{pct(r.subnormal / r.values):>9}  {pct(r.saturated / r.values):>9}  "
            f"{pct(r.norm_error):>13}  {pct(r.mean_error):>14}"
        )
    return "\n".join(out)


COLUMNS_NOTE = (
    "bits per element: the element's bits plus the scales' (one fp32 scale per tensor, one\n"
    "8-bit scale per block). flushed / subnormal / saturated: shares of all the elements,\n"
    "counted element by element. q: the dequantized tensor; ||x-q||/||x||: the Euclidean\n"
    "error, set by the largest values; mean |x-q|/|x|: every element alike (a flushed one\n"
    "counts 100%)."
)


def _by(rows):
    return {r.label: r for r in rows}


def _binades(v: float) -> str:
    return f"2^{math.log2(v):.1f}" if v > 0 else "0"


# ---- the prose: every number is one the table (or the tensor) gives ----------------------------
def tensor_note(x, channels, factors) -> str:
    a = np.abs(x.astype(np.float64))
    nz = a[a > 0]
    span = math.log2(float(nz.max()) / float(nz.min()))
    text = (f"A ({x.shape[0]}, {x.shape[1]}) float32 tensor shaped like a transformer's activation "
            f"gradients: each row (a token) has its own magnitude, {BASE:g} x 2^N(0, "
            f"{ROW_SPREAD:g}), ")  # fmt: skip
    if len(channels):
        chs = ", ".join(f"{c} (x{f:.0f})" for c, f in zip(channels, factors, strict=True))
        many = len(channels) > 1
        text += (f"and {len(channels)} channel{'s' if many else ''} {'are' if many else 'is'} "
                 f"{OUTLIER_RANGE[0]:.0f} to {OUTLIER_RANGE[1]:.0f} times larger than the rest: "
                 f"{chs}. ")  # fmt: skip
    else:
        text += "and no outlier channel. "
    text += (f"Its magnitudes run from {nz.min():.3g} to {nz.max():.4g}, {span:.1f} binades; "
             f"E4M3 holds {_e4m3_span():.1f} binades from its smallest subnormal to its max.")
    return text


def _e4m3_span() -> float:
    from fpsim.formats import fp8_e4m3

    return math.log2(fp8_e4m3.max / fp8_e4m3.smallest_subnormal)


def per_tensor_note(rows, x, channels) -> str:
    from fpsim.scaling import CurrentScaling

    r = _by(rows)["fp8_e4m3, per-tensor"]
    p = r.result
    f = r.element
    a = np.abs(x.astype(np.float64))
    amax = float(a.max())
    where = np.unravel_index(int(np.argmax(a)), a.shape)
    in_outlier = int(where[1]) in set(channels.tolist())
    text = (f"Per-tensor scaling: one scale serves every element, and the largest magnitude sets "
            f"it{' (it sits in an outlier channel)' if in_outlier else ''}: current scaling maps "
            f"amax = {amax:.4g} to E4M3's max {f.max:g} (scale {p.scale:.4g}). E4M3's smallest "
            f"normal, 2^{f.emin}, then stands for {f.min_normal * p.scale_inv:.3g} and its "
            f"smallest subnormal, 2^{f.emin - f.man_bits}, for "
            f"{f.smallest_subnormal * p.scale_inv:.3g}: the elements below fall into the "
            f"subnormals ({pct(r.subnormal / r.values)}) or to zero "
            f"({pct(r.zero / r.values)}).")  # fmt: skip
    if len(channels):
        keep = np.setdiff1d(np.arange(x.shape[1]), channels)
        rest = x[:, keep]
        q = CurrentScaling(f).quantize(rest)
        c = q.classify(rest)
        flushed = int(np.count_nonzero(c["zero"]))
        text += (f" Without the {len(channels)} outlier channel{'s' if len(channels) > 1 else ''}, "
                 f"amax would be {float(np.abs(rest).max()):.4g} and the same scaling would "
                 f"flush {pct(flushed / rest.size)} of the other elements.")  # fmt: skip
    return text


def _outlier_blocks(x, channels, block: int) -> np.ndarray:
    """A mask over the columns: those in a block (of ``block`` along a row) with an outlier."""
    cols = np.arange(x.shape[1])
    return np.isin(cols // block, np.asarray(channels) // block)


def mx_note(rows, x, channels) -> str:
    by = _by(rows)
    r, rc = by["mxfp8_e4m3"], by["mxfp8_e4m3, rceil"]
    q = r.result
    e = r.scale_exponents
    nb = q.scales.size
    cols = _outlier_blocks(x, channels, q.scheme.block_size)
    hit = int(cols.sum()) // q.scheme.block_size * x.shape[0]
    text = (f"Blocks: MXFP8 gives every {q.scheme.block_size} consecutive elements of a row their "
            f"own power-of-two (E8M0) scale, {nb:,} scales from 2^{int(e.min())} to "
            f"2^{int(e.max())}, so each block's window sits where its own values are: "
            f"{pct(r.zero / r.values)} flushed and {pct(r.subnormal / r.values)} subnormal, "
            f"for {r.bits_per_element - r.element.bits:g} bits of scale per element.")  # fmt: skip
    if len(channels):
        text += (f" An outlier now costs only the blocks that hold it: {hit:,} of the {nb:,}.")
    sat_blocks = int(np.count_nonzero(
        r.result.classify(x)["saturated"].reshape(x.shape[0], -1, q.scheme.block_size).any(-1)))
    emax_pow = 2.0 ** r.element.emax
    text += (f" The OCP rule takes the scale 2^(floor(log2 amax) - {r.element.emax}), which maps "
             f"a block's max into [{emax_pow:g}, {2 * emax_pow:g}): past {r.element.max:g}, "
             f"E4M3's max, it saturates")  # fmt: skip
    if sat_blocks:
        text += (f", here in {sat_blocks:,} blocks ({pct(r.saturated / r.values)} of the "
                 f"elements). rceil takes the smallest power of two that keeps every block max "
                 f"at or below {r.element.max:g}: {pct(rc.saturated / rc.values)} saturated, and "
                 f"the norm error goes from {pct(r.norm_error)} to {pct(rc.norm_error)}.")
    else:
        text += ", but no block did here."
    return text


def fp4_note(rows, x, channels) -> str:
    import fpsim

    by = _by(rows)
    m4, nv = by["mxfp4"], by["nvfp4"]
    f = m4.element
    vals = np.unique(np.abs(fpsim.all_values(f)["value"]))
    positive = ", ".join(f"{v:g}" for v in vals if v > 0)
    n_values = 2 * (len(vals) - 1) + 1
    lo_ratio, hi_ratio = (f.smallest_subnormal / 2) / (2 * 2.0**f.emax), (
        f.smallest_subnormal / 2) / 2.0**f.emax  # fmt: skip
    text = (f"FP4 (E2M1) has {n_values} values, 0 and ±{{{positive}}}. With the block max "
            f"mapped into [{2.0**f.emax:g}, {2 * 2.0**f.emax:g}), a value below "
            f"1/{1 / hi_ratio:.0f} to 1/{1 / lo_ratio:.0f} of its block's max is flushed: "
            f"MXFP4 flushes {pct(m4.zero / m4.values)} of the elements")  # fmt: skip
    q = m4.result
    if len(channels):
        cols = _outlier_blocks(x, channels, q.scheme.block_size)
        others = cols & ~np.isin(np.arange(x.shape[1]), channels)
        z = q.classify(x)["zero"]
        in_hit = int(np.count_nonzero(z[:, others])) / max(int(others.sum()) * x.shape[0], 1)
        in_rest = int(np.count_nonzero(z[:, ~cols])) / max(int((~cols).sum()) * x.shape[0], 1)
        text += (f": {pct(in_hit)} of the other elements in a block with an outlier, "
                 f"{pct(in_rest)} in the blocks without one.")  # fmt: skip
    else:
        text += "."
    g = nv.result.tensor_scale
    sc = nv.result.scheme.scale
    at_floor = int(np.count_nonzero(nv.result.scales == sc.min_normal))
    text += (f" NVFP4 spends {nv.bits_per_element:.2f} bits per element: blocks of "
             f"{nv.result.scheme.block_size} with an E4M3 scale, which puts a block's max close "
             f"to {f.max:g} (norm error {pct(nv.norm_error)}, MXFP4's {pct(m4.norm_error)}), "
             f"times one fp32 tensor scale g = amax / ({f.max:g} x {sc.max:g}) = {g:.4g}.")
    if at_floor:
        more = nv.zero > m4.zero
        text += (f" {'But' if more else 'Its'} E4M3 block scales stop at 2^{sc.emin} (torchao "
                 f"clamps them there): {at_floor:,} of the {nv.result.scales.size:,} blocks, "
                 f"whose max is more than {_binades(sc.max / sc.min_normal)} below the tensor's "
                 f"amax, sit at that floor with their small values flushed")  # fmt: skip
        if more:
            text += (f"; NVFP4 flushes {pct(nv.zero / nv.values)} of the elements, MXFP4, whose "
                     f"scales reach 2^-127, {pct(m4.zero / m4.values)}.")
        else:
            text += (f"; still, its finer blocks and scales flush fewer elements than MXFP4: "
                     f"{pct(nv.zero / nv.values)} against {pct(m4.zero / m4.values)}.")
    return text


def errors_note(rows) -> str:
    by = _by(rows)
    pt, mx = by["fp8_e4m3, per-tensor"], by["mxfp8_e4m3"]
    fp = by["fp16, no scaling"]
    if fp.zero <= 0.001 * fp.values and fp.saturated == 0:
        text = (f"fp16 needs no scale for this tensor ({pct(fp.zero / fp.values)} flushed) but "
                f"spends {fp.bits_per_element:g} bits. ")
    else:
        text = (f"Even fp16, at {fp.bits_per_element:g} bits, flushes "
                f"{pct(fp.zero / fp.values)} of this tensor and saturates "
                f"{pct(fp.saturated / fp.values)} without a scale. ")
    # The norm error is set by the largest values; the point of the sentence is that it can
    # rank per-tensor fp8 at or above MXFP8 while per-tensor fp8 flushed far more: only then
    # (and only when the mean error ranks them the other way) is it said.
    flushed_more = pt.zero - mx.zero >= 0.01 * pt.values
    if flushed_more and pt.norm_error <= mx.norm_error and pt.mean_error > mx.mean_error:
        text += (f"The norm error hardly sees the small values: per-tensor fp8's is "
                 f"{pct(pt.norm_error)}, MXFP8's {pct(mx.norm_error)}, though one flushed "
                 f"{pct(pt.zero / pt.values)} of the elements and the other "
                 f"{pct(mx.zero / mx.values)}; the mean relative error, where a flushed element "
                 f"counts 100%, tells them apart: {pct(pt.mean_error)} against "
                 f"{pct(mx.mean_error)}.")  # fmt: skip
    else:
        text += (f"Per-tensor fp8 and MXFP8 flush {pct(pt.zero / pt.values)} and "
                 f"{pct(mx.zero / mx.values)} of the elements; their norm errors are "
                 f"{pct(pt.norm_error)} and {pct(mx.norm_error)}, their mean relative errors "
                 f"(a flushed element counts 100%) {pct(pt.mean_error)} and "
                 f"{pct(mx.mean_error)}.")  # fmt: skip
    return text


def notes(rows, x, channels, factors) -> list[str]:
    return [per_tensor_note(rows, x, channels), mx_note(rows, x, channels),
            fp4_note(rows, x, channels), errors_note(rows)]  # fmt: skip


def figure_title(x, channels) -> str:
    n = len(channels)
    what = f"{n} outlier channel{'s' if n != 1 else ''}" if n else "no outlier channel"
    return (f"One ({x.shape[0]}, {x.shape[1]}) gradient-like tensor with {what}: no scale, one "
            "scale per tensor, one scale per block")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} blocks",
        description="One gradient-like tensor with outlier channels under fp16, per-tensor "
        "fp8 (E4M3, current scaling) and the block formats MXFP8, MXFP4 and NVFP4: what each "
        "flushes to zero, keeps as subnormals or saturates, and the bits it spends.",
    )
    parser.add_argument("--seed", type=seed_arg, default=0,
                        help="the tensor's numpy seed: 0 .. 2^32-1 (default: %(default)s)")
    parser.add_argument("--outliers", default=4,
                        type=whole_number(0, MAX_OUTLIERS, "a few channels are outliers"),
                        help=f"how many channels are {OUTLIER_RANGE[0]:.0f}-"
                        f"{OUTLIER_RANGE[1]:.0f}x larger, 0 .. {MAX_OUTLIERS} (default: "
                        "%(default)s)")  # fmt: skip
    add_output_args(parser)
    args = parse_args(parser, argv)

    from fpsim.stats import scaling_report

    quiet_numba()
    x, channels, factors = outlier_tensor(outliers=args.outliers, seed=args.seed)
    rows = scaling_report(x, SCHEMES)
    print(textwrap.fill(tensor_note(x, channels, factors), WIDTH) + "\n")
    print(table(rows))
    print("\n" + COLUMNS_NOTE)
    for para in notes(rows, x, channels, factors):
        print("\n" + textwrap.fill(para, WIDTH))
    if not args.no_plots:
        from fpsim.plot import plot_block_scaling

        fig = plot_block_scaling(x, rows=rows, title=figure_title(x, channels))
        path = save_figure(fig, Path(args.out), "blocks.png")
        print(f"\nwrote {path}")
    return 0
