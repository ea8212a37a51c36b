"""``python -m fpsim.demo accumulate``: the accumulator's format matters more than the inputs'.

Sums and dot products of fp16 values, with every partial sum rounded to an fp16, bf16 or fp32
accumulator (``--acc``; :func:`fpsim.arith.sum` / :func:`~fpsim.arith.matmul`), in sequential
and pairwise order. 4096 ones: an fp16 accumulator stops at 2048 (there the spacing of fp16
values is 2, and 2048 + 1 is a tie that rounds back to the even 2048), bf16 at 256. Then a long
sum of random values, and a matrix product, against the exact result; the figure draws the
running sums. Every sentence printed is computed from the sums (which accumulator stalls, and
where, is read off the table).
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
    format_arg,
    new_figure,
    parse_args,
    progress,
    quiet_numba,
    save_figure,
    seed_arg,
    show_progress,
    split_list,
    tex_pow2,
    whole_number,
)

ACCUMULATORS = ("fp16", "bf16", "fp32")
INPUT = "fp16"  # the inputs' format
ONES = 4096
MATMUL = (64, 1024, 64)  # (m, k, n)
#: -n's limit: the figure's running sums round one term at a time in Python (about 10 µs a
#: term per accumulator), so 10^6 terms take about half a minute.
MAX_TERMS = 10**6
COLOURS = ("#d62728", "#ff7f0e", "#2ca02c", "#1f77b4", "#9467bd", "#8c564b")


def accumulators_arg(text: str) -> tuple:
    """``--acc``: comma-separated formats (any spelling fpsim.get_format reads), 1 to 6."""
    names = split_list(text)
    if not names:
        raise argparse.ArgumentTypeError("give at least one accumulator format")
    fmts = list(dict.fromkeys(format_arg(t) for t in names))
    if len(fmts) > len(COLOURS):
        raise argparse.ArgumentTypeError(f"at most {len(COLOURS)} accumulators (one colour "
                                         f"each in the figure); got {len(fmts)}")  # fmt: skip
    return tuple(fmts)


def running_sum(values: np.ndarray, acc, bar=None) -> np.ndarray:
    """Every partial sum of a sequential sum, each rounded to ``acc`` (float64 adds two values of
    these formats exactly, so rounding the float64 sum is the correctly rounded add)."""
    import fpsim

    out = np.empty(values.size)
    s = 0.0
    for i, v in enumerate(values.tolist()):
        s = float(fpsim.round_to(s + v, acc))
        out[i] = s
        if bar is not None and i % 1000 == 999:
            bar.update(1000)
    if bar is not None:
        bar.update(values.size % 1000)
    return out


def random_values(n: int, seed: int) -> np.ndarray:
    """n values uniform in [0, 1), rounded to fp16."""
    import fpsim

    return fpsim.round_to(np.random.default_rng(seed).uniform(0, 1, n), INPUT)


def ones_sums(accs) -> dict[str, tuple[float, float]]:
    """{accumulator name: (sequential, pairwise)} sums of ONES ones."""
    from fpsim import arith

    ones = np.ones(ONES, np.float32)
    return {a.name: (float(arith.sum(ones, INPUT, acc=a, out_fmt=a)),
                     float(arith.sum(ones, INPUT, acc=a, order="pairwise", out_fmt=a)))
            for a in accs}  # fmt: skip


def ones_table(sums: dict[str, tuple[float, float]]) -> str:
    w = max(11, *(len(a) for a in sums))
    rows = [f"{'accumulator':{w}}  {'sequential':>10}  {'pairwise':>8}   (exact: {ONES})"]
    for acc, (seq, pair) in sums.items():
        rows.append(f"{acc:{w}}  {seq:10g}  {pair:8g}")
    return "\n".join(rows)


def spacing_above(x: float, acc) -> float:
    """The gap from ``x`` (a positive value of ``acc``) to the next value of ``acc``."""
    k = max(math.floor(math.log2(x)), acc.emin)
    return 2.0 ** (k - acc.man_bits)


def stall_note(sums: dict[str, tuple[float, float]], accs) -> tuple[str, object | None]:
    """Which accumulators stop short of the exact sum of ones, and why (read off the sums); the
    one whose stall is traced next, if any."""
    by_name = {a.name: a for a in accs}
    short = [(a, s) for a, (s, _) in sums.items() if math.isfinite(s) and s < ONES]
    broken = [(a, order, v) for a, both in sums.items()
              for order, v in zip(("sequentially", "pairwise"), both, strict=True)
              if not math.isfinite(v)]  # fmt: skip
    if short:
        stops = [f"the {a} accumulator stops at {v:g}" for a, v in short]
        text = "Sequentially, " + ", ".join(stops[:-1]) + (" and " if len(stops) > 1 else "")
        text += stops[-1]
        name, v = short[0]
        acc = by_name[name]
        gap = spacing_above(v, acc)
        if gap == 2:
            text += (f": at {v:g} the spacing of {name} values is 2, so {v:g} + 1 is halfway "
                     f"between {v:g} and {v + 2:g}, a tie, which goes to the even {v:g}.")
        elif gap > 2:
            text += (f": at {v:g} the spacing of {name} values is {gap:g}, so {v:g} + 1 is less "
                     f"than half a step up and rounds back to {v:g}.")  # fmt: skip
        else:  # pragma: no cover - a sum of ones stops only where the spacing is 2 or more
            text += "."
        parts = [text]
    else:
        acc, parts = None, []
    for a, order, v in broken:
        parts.append(f"{order.capitalize()}, the {a} accumulator ends at {v}: a partial sum "
                     f"went past its largest value, {by_name[a].max:g}.")  # fmt: skip
    exact = [a for a, (v, _) in sums.items() if v == ONES]
    if exact:
        parts.append(f"The {', '.join(exact)} accumulator{'s' * (len(exact) > 1)} reach"
                     f"{'es' * (len(exact) == 1)} {ONES} exactly.")  # fmt: skip
    return " ".join(parts), acc


def random_sums(values: np.ndarray, accs) -> tuple[float, dict]:
    """The exact sum, and {accumulator name: {order: sum}}."""
    from fpsim import arith

    exact = math.fsum(values.astype(np.float64).tolist())  # exact: few bits, float64 has room
    sums = {a.name: {o: float(arith.sum(values, INPUT, acc=a, order=o, out_fmt=a))
                     for o in ("sequential", "pairwise")} for a in accs}  # fmt: skip
    return exact, sums


def _rel(s: float, exact: float) -> float:
    return abs(s - exact) / exact if exact else math.nan


def random_table(exact: float, sums: dict) -> str:
    w = max(11, *(len(a) for a in sums))
    rows = [f"{'accumulator':{w}}  {'sequential':>12} {'rel. error':>10}  {'pairwise':>12} "
            f"{'rel. error':>10}   (exact: {exact:.6f})"]  # fmt: skip
    for acc, by_order in sums.items():
        cells = [f"{s:12.4f} {_rel(s, exact):10.1e}" for s in by_order.values()]
        rows.append(f"{acc:{w}}  " + "  ".join(cells))
    return "\n".join(rows)


def order_note(exact: float, sums: dict) -> str:
    """Which order was the more accurate, per accumulator (the table's rel. errors)."""
    groups: dict[str, list[str]] = {"better": [], "same": [], "worse": []}
    broken = []
    for acc, by_order in sums.items():
        bad = [o for o, v in by_order.items() if not math.isfinite(v)]
        if bad:
            broken.append(f"the {acc} accumulator's {' and '.join(bad)} sum ended at "
                          f"{by_order[bad[0]]} (it overflowed)")  # fmt: skip
            continue
        seq = float(f"{_rel(by_order['sequential'], exact):.1e}")
        pair = float(f"{_rel(by_order['pairwise'], exact):.1e}")
        key = "same" if seq == pair else ("better" if pair < seq else "worse")
        groups[key].append(f"{acc} ({pair:.1e} against {seq:.1e})")
    parts = []
    if groups["better"]:
        parts.append("pairwise order was more accurate than sequential with " +
                     ", ".join(groups["better"]))  # fmt: skip
    if groups["same"]:
        parts.append("as accurate with " + ", ".join(groups["same"]))
    if groups["worse"]:
        parts.append("less accurate with " + ", ".join(groups["worse"]))
    parts += broken
    text = "; ".join(parts)
    return (text[0].upper() + text[1:] + ". Pairwise order keeps partial sums of similar size, "
            "so each rounding is relatively small; sequential order adds small terms to an ever "
            "larger sum.")  # fmt: skip


def matmul_errors(seed: int, accs) -> dict[str, float]:
    """{accumulator name: max relative error} of a sequential (m x k) @ (k x n) fp16 product."""
    import fpsim
    from fpsim import arith

    m, k, n = MATMUL
    rng = np.random.default_rng(seed)
    a = fpsim.round_to(rng.uniform(0, 1, (m, k)), INPUT)
    b = fpsim.round_to(rng.uniform(0, 1, (k, n)), INPUT)
    exact = a.astype(np.float64) @ b.astype(np.float64)  # exact: products of 11-bit values
    out = {}
    for acc in accs:
        c = arith.matmul(a, b, INPUT, acc=acc, order="sequential", out_fmt=acc)
        with np.errstate(invalid="ignore", over="ignore"):
            out[acc.name] = float(np.max(np.abs(c.astype(np.float64) - exact) / exact))
    return out


def matmul_table(errors: dict[str, float]) -> str:
    m, k, n = MATMUL
    w = max(11, *(len(a) for a in errors))
    rows = [f"{'accumulator':{w}}  max relative error of ({m}x{k} {INPUT}) @ ({k}x{n} {INPUT})"]
    for acc, e in errors.items():
        rows.append(f"{acc:{w}}  {e:.1e}")
    return "\n".join(rows)


def stall_level(s: np.ndarray) -> float | None:
    """The value a running sum got stuck at for (at least) its last tenth, if it did."""
    tail = s[-max(1, s.size // 10):]
    if s.size >= 20 and np.all(tail == tail[0]) and math.isfinite(tail[0]):
        return float(tail[0])
    return None


def figure(values: np.ndarray, out: str | Path, accs=None, bar: bool = False) -> Path:
    accs = accs or [format_arg(a) for a in ACCUMULATORS]
    fig = new_figure((8, 4.5))
    ax = fig.add_subplot()
    n = np.arange(1, values.size + 1)
    ax.plot(n, np.cumsum(values.astype(np.float64)), color="black", ls=(0, (4, 3)), lw=1.1,
            label="exact", zorder=10)  # fmt: skip
    stalls: dict[float, list[str]] = {}
    with progress(values.size * len(accs), "running sums", bar) as b:
        for i, (acc, colour) in enumerate(zip(accs, COLOURS, strict=False)):
            s = running_sum(values, acc, b)
            # where the sums agree the curves lie on each other: each is drawn narrower than the
            # one before and on top of it, so all show as nested bands around the exact dashes
            ax.plot(n, s, color=colour, lw=1.8 + 1.6 * (len(accs) - 1 - i), zorder=2 + i,
                    solid_capstyle="butt",
                    label=f"{acc.name} accumulator: ends at {s[-1]:g}")  # fmt: skip
            level = stall_level(s)
            if level is not None:
                stalls.setdefault(level, []).append(acc.name)
    for level, names in stalls.items():
        ax.axhline(level, color="#999999", lw=0.8, ls=":")
        power = f" = {tex_pow2(level)}" if tex_pow2(level).startswith("$") else ""
        ax.annotate(f"{', '.join(names)} stall{'s' * (len(names) == 1)} at {level:g}{power}",
                    xy=(values.size * 0.99, level), xytext=(0, 6), textcoords="offset points",
                    ha="right", va="bottom", fontsize=8.5, color="#555555")  # fmt: skip
    ax.set_xlabel("number of terms added")
    ax.set_ylabel("running sum")
    fit_title(ax, f"Summing {values.size} {INPUT} values from U(0, 1), left to right: once half "
              "the spacing of the accumulator's values near the sum is at least the addend, every "
              "addition rounds back (swamping)")  # fmt: skip
    ax.legend(fontsize=9, loc="upper left")
    ax.grid(alpha=0.3, lw=0.5)
    return save_figure(fig, out, "accumulate.png")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} accumulate",
        description="Sum and multiply fp16 values with an fp16, bf16 or fp32 accumulator, in "
        "sequential and pairwise order, against the exact result.",
    )
    parser.add_argument("-n", type=whole_number(1, MAX_TERMS, "the figure's running sums round "
                        "one term at a time, about 30 µs a term for three accumulators"),
                        default=10_000, help="terms of the random sum, at most 10^6: the "
                        "figure's running sums round one term at a time (default: "
                        "%(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=seed_arg, default=0,
                        help="the random values: 0 .. 2^32-1 (default: %(default)s)")
    parser.add_argument("--acc", type=accumulators_arg, default=ACCUMULATORS, metavar="FORMATS",
                        help="comma-separated accumulator formats, any names fpsim.get_format "
                        "reads (up to 6; default: fp16,bf16,fp32)")  # fmt: skip
    add_output_args(parser)
    args = parse_args(parser, argv)
    accs = [format_arg(a) if isinstance(a, str) else a for a in args.acc]

    import fpsim
    from fpsim.autograd.precision import get_matmul_accumulation

    quiet_numba()
    print(f"1. {ONES} ones, in {INPUT}, summed with each accumulator:\n")
    sums = ones_sums(accs)
    print(ones_table(sums))
    note, traced = stall_note(sums, accs)
    print("\n" + _fill(note))
    if traced is not None:
        s = sums[traced.name][0]
        print(f"\nThe {traced.name} accumulator at the stall:\n")
        print(fpsim.trace_sum([s, 1.0, 1.0, 1.0], acc=traced))
    values = random_values(args.n, args.seed)
    print(f"\n2. {args.n} {INPUT} values uniform in [0, 1) (seed {args.seed}):\n")
    exact, rsums = random_sums(values, accs)
    print(random_table(exact, rsums))
    print("\n" + _fill(order_note(exact, rsums)))
    print("\n3. A matrix product, every dot product accumulated sequentially (products exact):\n")
    errors = matmul_errors(args.seed, accs)
    print(matmul_table(errors))
    lib = get_matmul_accumulation()
    lib = lib if isinstance(lib, str) else lib.name
    print("\n" + _fill(
        f"PyTorch's fp16 matmuls accumulate in fp32 (so do tensor cores); fpsim's autograd "
        f"accumulates in {lib} (fpsim.matmul_accumulation('input') switches to the input's "
        "format)."))  # fmt: skip
    if not args.no_plots:
        print(f"\nwrote {figure(values, args.out, accs, show_progress(args.quiet))}")
    return 0


def _fill(text: str) -> str:
    import textwrap

    return textwrap.fill(text, 96)
