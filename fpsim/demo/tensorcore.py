"""``python -m fpsim.demo tensorcore``: inside an FP8 matrix multiply on a tensor core.

DeepSeek-V3's technical report (arXiv 2412.19437, section 3.3.2) found that FP8 GEMMs on
H800 GPUs keep "around 14 bits" of the accumulation, giving "a maximum relative error of
nearly 2%" for K = 4096 with random matrices, and fixed it by promoting the partial sums to
FP32 registers every N_C = 128 elements. This demo multiplies random FP8 (E4M3) matrices with
K = 64 ... 16384 three ways (:mod:`fpsim.arith.accumulation`):

* ``exact_fp32``: every product added with one rounding to nearest even in fp32;
* ``h100_fp8``: the H100's FP8 block FMA (Khattak & Mikaitis): 32 exact products aligned to the
  largest exponent among them and the accumulator, 13 bits kept below it (the rest cut off),
  the block sum truncated into a 13-bit accumulator (e8m13);
* ``h100_fp8_promote128``: the same, with the partial sum added to an fp32 sum every 128
  products (DeepSeek-V3's fix),

and prints the relative error of the dot products against the exact ones (the inputs are FP8
values: every product and every partial sum below is exact in float64, so ``A @ B`` in float64
is the exact result). Two kinds of random matrices, because the report does not say which it
used: positive values (U(0, 1) rounded to E4M3), where the truncation always errs downward and
the error grows in proportion to K, and zero-mean ones (N(0, 1)), where the errors partly
cancel. Every sentence is computed from the tables.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from ._common import (
    PROG,
    add_output_args,
    fit_title,
    new_figure,
    parse_args,
    progress,
    quiet_numba,
    save_figure,
    seed_arg,
    show_progress,
    split_list,
    whole_number,
)

INPUT = "fp8_e4m3"
MODELS = ("exact_fp32", "h100_fp8", "h100_fp8_promote128")
LABELS = {
    "exact_fp32": "exact fp32 accumulation",
    "h100_fp8": "H100 FP8 model (13 bits kept)",
    "h100_fp8_promote128": "H100 FP8 model, promoted to fp32 every 128",
}
COLOURS = {"exact_fp32": "#1f77b4", "h100_fp8": "#d62728", "h100_fp8_promote128": "#2ca02c"}
KS = tuple(2**e for e in range(6, 15))  # 64 .. 16384
SIZE = 32  # the matrices are SIZE x K and K x SIZE: SIZE^2 dot products per K
MAX_K = 2**16  # float64 holds every partial sum of K <= 2^16 E4M3 products exactly
DEEPSEEK_K, DEEPSEEK_ERROR = 4096, 0.02  # "a maximum relative error of nearly 2%" at K = 4096
DISTRIBUTIONS = {
    "positive": "U(0, 1)",
    "zero-mean": "N(0, 1)",
}


def ks_arg(text: str) -> tuple[int, ...]:
    """``--ks``: comma-separated K values, each 1 .. 65536, increasing order kept."""
    parse = whole_number(1, MAX_K, "float64 holds the exact dot products of up to 2^16 E4M3 "
                         "products")  # fmt: skip
    ks = sorted({parse(t) for t in split_list(text)})
    if not ks:
        raise argparse.ArgumentTypeError("give at least one K")
    return tuple(ks)


def matrices(dist: str, size: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random ``size x k`` and ``k x size`` matrices of E4M3 values."""
    import fpsim

    rng = np.random.default_rng([seed, k, 0 if dist == "positive" else 1])
    if dist == "positive":
        a, b = rng.uniform(0, 1, (size, k)), rng.uniform(0, 1, (k, size))
    else:
        a, b = rng.standard_normal((size, k)), rng.standard_normal((k, size))
    return np.asarray(fpsim.round_to(a, INPUT)), np.asarray(fpsim.round_to(b, INPUT))


def errors(a: np.ndarray, b: np.ndarray) -> dict[str, dict[str, float]]:
    """{model: {"max": largest relative error of a dot product, "median": median, "norm":
    normwise relative error ||C - C_exact|| / ||C_exact||}}."""
    from fpsim import arith

    exact = a @ b  # exact: E4M3 products are multiples of 2^-18 below 2^18, K <= 2^16
    out = {}
    for name in MODELS:
        c = np.asarray(arith.matmul(a, b, INPUT, accumulation=name, out_fmt="fp32"), np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(c - exact) / np.abs(exact)
        rel = rel[np.isfinite(rel)]
        out[name] = {
            "max": float(rel.max()) if rel.size else 0.0,
            "median": float(np.median(rel)) if rel.size else 0.0,
            "norm": float(np.linalg.norm(c - exact) / np.linalg.norm(exact)),
        }
    return out


def run(ks, size: int, seed: int, bar: bool = False) -> dict[str, dict[int, dict]]:
    """{distribution: {K: errors(...)}}."""
    res: dict[str, dict[int, dict]] = {d: {} for d in DISTRIBUTIONS}
    with progress(len(ks) * len(DISTRIBUTIONS), "dot products", bar) as b:
        for dist in DISTRIBUTIONS:
            for k in ks:
                res[dist][k] = errors(*matrices(dist, size, k, seed))
                b.update(1)
    return res


def table(res: dict[int, dict], measure: str) -> str:
    """Rows K, columns the models, the relative error ``measure`` (0 printed as 0: exact)."""
    w = 22
    head = f"{'K':>6}  " + "  ".join(f"{m:>{w}}" for m in MODELS)
    rows = [head]
    for k, by_model in res.items():
        cells = [by_model[m][measure] for m in MODELS]
        rows.append(f"{k:>6}  " + "  ".join(f"{(f'{v:.2e}' if v else '0'):>{w}}" for v in cells))
    return "\n".join(rows)


def pct(x: float) -> str:
    """A relative error as a percentage with 3 significant digits."""
    return f"{100 * x:.3g}%"


def crossing(res: dict[int, dict], model: str, measure: str, level: float) -> float | None:
    """The K at which the error first reaches ``level``, interpolated in log-log between the
    two Ks around it (None if it never does, or already does at the first K)."""
    pts = [(k, v[model][measure]) for k, v in res.items()]
    for (k0, e0), (k1, e1) in zip(pts, pts[1:], strict=False):
        if e0 < level <= e1 and e0 > 0:
            t = (math.log(level) - math.log(e0)) / (math.log(e1) - math.log(e0))
            return math.exp(math.log(k0) + t * (math.log(k1) - math.log(k0)))
    return None


def growth_per_doubling(res: dict[int, dict], model: str, measure: str) -> float | None:
    """The average factor by which the error grows when K doubles (a log-log fit)."""
    pts = [(math.log2(k), math.log2(v[model][measure])) for k, v in res.items()
           if v[model][measure] > 0]  # fmt: skip
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    slope = float(np.polyfit(x, y, 1)[0])
    return 2.0**slope


def story(res: dict[str, dict[int, dict]]) -> list[str]:
    """The paragraphs printed under the tables: every number read off ``res``."""
    from fpsim.arith import get_accumulation

    pos, zero = res["positive"], res["zero-mean"]
    ks = list(pos)
    k0, k1 = ks[0], ks[-1]
    paras = []
    worst_exact = max(v["exact_fp32"]["max"] for v in pos.values())
    g = growth_per_doubling(pos, "h100_fp8", "max")
    text = (f"Positive inputs: with exact fp32 accumulation the largest relative error of a dot "
            f"product stays at or below {pct(worst_exact)}. The 13-bit model's grows from "
            f"{pct(pos[k0]['h100_fp8']['max'])} at K = {k0} to {pct(pos[k1]['h100_fp8']['max'])} "
            f"at K = {k1}")  # fmt: skip
    if g is not None and len(ks) > 2:
        text += (f", by a factor of about {g:.2f} per doubling of K: every product is cut to the "
                 "grid of the running sum (13 bits below its leading bit), always toward zero, "
                 "and the grid coarsens as the sum grows")  # fmt: skip
    prom = [v["h100_fp8_promote128"]["max"] for v in pos.values()]
    text += (f". Promoted to fp32 every 128 products it stays between {pct(min(prom))} and "
             f"{pct(max(prom))}: each group of 128 starts again from zero, where the grid is "
             "fine.")  # fmt: skip
    paras.append(text)
    if DEEPSEEK_K in pos:
        e = pos[DEEPSEEK_K]["h100_fp8"]["max"]
        ez = zero[DEEPSEEK_K]["h100_fp8"]["norm"]
        text = (f"DeepSeek-V3 reports a maximum relative error of nearly 2% at K = {DEEPSEEK_K}. "
                f"Here the model's is {pct(e)} for positive inputs")  # fmt: skip
        if e > DEEPSEEK_ERROR:
            text += f", {e / DEEPSEEK_ERROR:.1f} times more"
            k2 = crossing(pos, "h100_fp8", "max", DEEPSEEK_ERROR)
            if k2 is not None:
                text += f" (2% is reached near K = {round(k2, -2):.0f})"
        else:
            text += f", {DEEPSEEK_ERROR / e:.1f} times less" if e > 0 else ""
        text += (f", and {pct(ez)} (normwise) for zero-mean inputs, whose errors partly cancel. "
                 "The report does not say which random matrices it used, nor how the relative "
                 "error was measured (per element, or of the whole matrix)")  # fmt: skip
        lo, hi = sorted((e, ez))
        if lo < DEEPSEEK_ERROR < hi:
            text += ": its 2% lies between the two cases."
        else:
            text += "."
        text += (" The shape is the report's: the error grows with K, and promotion every 128 "
                 "elements removes the growth.")  # fmt: skip
        m = get_accumulation("h100_fp8")
        text += (f" (The model keeps {m.align_bits} bits below each block's largest exponent, "
                 f"{m.align_bits + 1} significant bits with the leading one, and a "
                 f"{m.acc.man_bits}-bit accumulator: the report's \"around 14 bits\".)")
        paras.append(text)
    zn = [v["h100_fp8"]["norm"] for v in zero.values()]
    zp = [v["h100_fp8_promote128"]["norm"] for v in zero.values()]
    paras.append(
        f"Zero-mean inputs, normwise relative error ||C - C_exact|| / ||C_exact||: the 13-bit "
        f"model's goes from {pct(zn[0])} at K = {k0} to {pct(zn[-1])} at K = {k1}; promoted, "
        f"from {pct(zp[0])} to {pct(zp[-1])}. (Per element the relative error of a dot product "
        "that nearly cancels to zero can be anything: the largest is not a useful measure "
        "there.)"
    )  # fmt: skip
    return paras


def figure(res: dict[str, dict[int, dict]], size: int, out: str | Path) -> Path:
    fig = new_figure((12, 4.8))
    axes = fig.subplots(1, 2)
    for ax, (dist, measure, ylabel) in zip(
        axes,
        [("positive", "max", "largest relative error of a dot product"),
         ("zero-mean", "norm", r"normwise relative error $\|C - C_{exact}\| / \|C_{exact}\|$")],
        strict=True,
    ):  # fmt: skip
        data = res[dist]
        ks = np.array(list(data))
        for model in MODELS:
            y = np.array([data[k][model][measure] for k in data])
            shown = y > 0  # a log axis cannot show an exact 0
            label = LABELS[model]
            if not shown.all():
                exact = ks[~shown]
                label += (f" (exact at K = {exact[0]})" if exact.size == 1 else
                          f" (exact at K = {exact[0]} .. {exact[-1]})")  # fmt: skip
            ax.plot(ks[shown], y[shown], marker="o", ms=4, lw=1.8, color=COLOURS[model],
                    label=label)  # fmt: skip
        if dist == "positive" and DEEPSEEK_K >= ks[0] and DEEPSEEK_K <= ks[-1]:
            ax.plot([DEEPSEEK_K], [DEEPSEEK_ERROR], marker="*", ms=14, color="black", ls="none",
                    label='DeepSeek-V3: "nearly 2%" at K = 4096')  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("K (products per dot product)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, lw=0.5, which="both")
        ax.legend(fontsize=8.5, loc="upper left")
        what = DISTRIBUTIONS[dist]
        fit_title(ax, f"Inputs from {what} rounded to E4M3: {size * size} dot products for each "
                  f"K ({size} x K times K x {size})", fontsize=9.5)  # fmt: skip
    return save_figure(fig, out, "tensorcore.png")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} tensorcore",
        description="FP8 (E4M3) matrix products as an H100 tensor core computes them (13 bits "
        "kept, truncation), with DeepSeek-V3's promotion to fp32 every 128 products, and with "
        "exact fp32 accumulation: the relative error against the exact product as K grows.",
    )
    parser.add_argument("--ks", type=ks_arg, default=KS, metavar="K,K,...",
                        help="inner dimensions, each 1 .. 65536 (default: 64,128,...,16384)")
    parser.add_argument("--size", type=whole_number(1, 256, "each K multiplies size x K by "
                        "K x size"), default=SIZE,
                        help="rows of A and columns of B, at most 256 (default: %(default)s)")
    parser.add_argument("--seed", type=seed_arg, default=0,
                        help="the random matrices: 0 .. 2^32-1 (default: %(default)s)")
    add_output_args(parser)
    args = parse_args(parser, argv)

    quiet_numba()
    res = run(args.ks, args.size, args.seed, show_progress(args.quiet))
    n = args.size * args.size
    print(f"1. Positive inputs: {args.size} x K and K x {args.size} matrices of U(0, 1) values "
          f"rounded to E4M3 (seed {args.seed}); the largest relative error of the {n} dot "
          "products (0.02 = 2%):\n")  # fmt: skip
    print(table(res["positive"], "max"))
    print("\n2. Zero-mean inputs: N(0, 1) rounded to E4M3; normwise relative error:\n")
    print(table(res["zero-mean"], "norm"))
    print()
    for para in story(res):
        print(_fill(para) + "\n")
    if not args.no_plots:
        print(f"wrote {figure(res, args.size, args.out)}")
    return 0


def _fill(text: str) -> str:
    import textwrap

    return textwrap.fill(text, 96)
