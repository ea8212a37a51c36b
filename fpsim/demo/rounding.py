"""``python -m fpsim.demo rounding``: the rounding modes side by side, ties to even, and why
stochastic rounding is unbiased.

A table rounds chosen values (ties between two fp16 neighbours, values just off a tie, a
subnormal tie, the tie above the largest value) in every mode of :func:`fpsim.round_to`; the
stochastic column is the mean of many independent roundings. Then one tie explained
(:func:`fpsim.explain_op`), and a running sum of small updates: round-to-nearest swamps them
all, rounding up overshoots, stochastic rounding keeps the sum right on average. The values and
their notes are facts about fp16; every sentence about the results is computed from them.
"""

from __future__ import annotations

import argparse
import math
import textwrap

import numpy as np

from ._common import (
    PROG,
    add_quiet_arg,
    counted,
    exact_text,
    parse_args,
    quiet_numba,
    seed_arg,
    show_progress,
    whole_number,
)

MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down")
DRIFT_MODES = ("nearest_even", "toward_zero", "up", "stochastic")
UPDATE = 2.0**-12  # the running sum's update: a quarter of fp16's spacing above 1
MAX_DRAWS = 10**7  # one float64 array of --draws values per row: 80 MB at the limit
MAX_UPDATES = 10**6  # rounded one at a time in Python, four modes: about a minute at the limit

# (label, value, why it is interesting), for fp16; exact binary values, so the ties are exact
VALUES = (
    ("1 + 2^-11", 1 + 2.0**-11, "halfway between 1 and 1 + 2^-10: a tie; 1 is even"),
    ("1 + 3*2^-11", 1 + 3 * 2.0**-11, "halfway between 1 + 2^-10 and 1 + 2^-9: the upper is even"),
    ("1 + 2^-11 + 2^-20", 1 + 2.0**-11 + 2.0**-20, "just above the first tie: not a tie"),
    ("-(1 + 2^-11)", -(1 + 2.0**-11), "a negative tie: up/down differ from toward zero/away"),
    ("2049", 2049.0, "the spacing is 2 from 2048 up: 2049 is a tie, 2048 is even"),
    ("2051", 2051.0, "a tie between 2050 and 2052; 2052 is even"),
    ("0.1", 0.1, "not a tie: the float64 nearest 0.1"),
    ("2^-25", 2.0**-25, "half the smallest subnormal 2^-24: a tie between 0 and 2^-24"),
    ("65520", 65520.0, "halfway between max 65504 and 65536 (= inf): nearest gives inf"),
)
HEADERS = {"nearest_even": "nearest even", "nearest_away": "nearest away",
           "toward_zero": "toward zero", "up": "up", "down": "down"}  # fmt: skip


def _num(v: float) -> str:
    return exact_text(v, 16)


def stochastic_means(fmt: str, draws: int, seed: int) -> dict[str, float]:
    """{label: the mean of ``draws`` stochastic roundings of the value}."""
    import fpsim

    out = {}
    for label, x, _ in VALUES:
        sr = fpsim.round_to(np.full(draws, x), fmt, rounding="stochastic", seed=seed)
        out[label] = float(np.mean(sr))
    return out


def modes_table(fmt: str, draws: int, seed: int, means: dict[str, float] | None = None) -> str:
    import fpsim

    means = stochastic_means(fmt, draws, seed) if means is None else means
    header = ["x"] + [HEADERS[m] for m in MODES] + ["stochastic (mean)"]
    cells = []
    for label, x, _ in VALUES:
        row = [_num(fpsim.round_to(x, fmt, rounding=m)) for m in MODES]
        row.append(f"{means[label]:.7g}")
        cells.append([label] + row)
    widths = [max(len(r[i]) for r in cells + [header]) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True)))  # fmt: skip

    lines = [line(header)] + [line(r) for r in cells]
    lines.append("")
    lines += [f"  {label:>{widths[0]}}: {why}" for label, _, why in VALUES]
    return "\n".join(lines)


def stochastic_note(fmt: str, draws: int, means: dict[str, float]) -> str:
    """How far the stochastic means came from x, in ulps of x's neighbours (from the table)."""
    import fpsim

    devs, off = [], []
    for label, x, _ in VALUES:
        m = means[label]
        lo, hi = (float(fpsim.round_to(x, fmt, rounding=r)) for r in ("down", "up"))
        if not math.isfinite(m):
            off.append(f"{label} ({m:g})")
        elif math.isfinite(hi) and hi > lo:  # (x itself, when exact, has no spread to measure)
            devs.append(abs(float(f"{m:.7g}") - x) / (hi - lo))
    text = (f"Over {draws} draws the stochastic means lie within {max(devs, default=0):.2g} ulp "
            f"of x (a mean of {draws} draws spreads by at most about "
            f"{0.5 / math.sqrt(draws):.2g} ulp)")
    if off:
        text += (f"; not {', '.join(off)}: a draw that rounds up past the largest finite value "
                 "gives inf, and so does the mean")  # fmt: skip
    return text + "."


def drift_table(fmt: str, n: int, seed: int, bar: bool = False) -> tuple[str, dict[str, float]]:
    """``1.0`` plus ``n`` updates of ``UPDATE``, each sum rounded in ``fmt`` in each mode."""
    import fpsim

    u = UPDATE
    exact = 1.0 + n * u
    results = {}
    for mode in DRIFT_MODES:
        s = 1.0
        for i in counted(range(n), n, mode, bar):
            kw = {"seed": seed * 1_000_003 + i} if mode == "stochastic" else {}
            s = float(fpsim.round_to(s + u, fmt, rounding=mode, **kw))
        results[mode] = s
    lines = [f"{'mode':13}  {'result':>14}  {'error':>10}   (exact: 1 + {n} x 2^-12 = {exact!r})"]
    for mode, s in results.items():
        lines.append(f"{mode:13}  {s!r:>14}  {s - exact:+10.4g}")
    return "\n".join(lines), results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} rounding",
        description="The rounding modes of fpsim.round_to side by side (ties to even and its "
        "alternatives, the directed modes, stochastic rounding), and what each does to a long "
        "run of small updates.",
    )
    parser.add_argument("--draws", type=whole_number(1, MAX_DRAWS, "one float64 array of that "
                        "size per value: 80 MB at the limit"), default=10_000,
                        help="stochastic roundings averaged per value, at most 10^7 "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("-n", type=whole_number(1, MAX_UPDATES, "each update is rounded one at "
                        "a time in Python, in four modes: about a minute at the limit"),
                        default=1000, help="small updates in the running sum, at most 10^6 "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=seed_arg, default=0,
                        help="the stochastic roundings: 0 .. 2^32-1 (default: %(default)s)")
    add_quiet_arg(parser)
    args = parse_args(parser, argv)

    import fpsim

    f = fpsim.fp16  # the notes and the chosen values are about fp16's grid
    quiet_numba()
    print(
        f"1. Values rounded to {f.name} in each mode (stochastic: the mean of {args.draws} "
        "independent roundings):\n"
    )
    means = stochastic_means(f.name, args.draws, args.seed)
    print(modes_table(f.name, args.draws, args.seed, means))
    print(
        "\nnearest_even (IEEE's default) sends a tie to the neighbour whose last bit is 0, so "
        "ties go up\nand down equally often; nearest_away always goes away from zero. Stochastic "
        "rounding goes\nup with probability equal to the distance from the lower neighbour, in "
        "ulps: on average it\nreturns x itself."
    )
    print(textwrap.fill(stochastic_note(f.name, args.draws, means), 96) + "\n")
    print(fpsim.explain_op(2048.0, "+", 1.0, f.name))
    print(f"\n2. 1.0 plus {args.n} updates of 2^-12 (a quarter of the spacing above 1 in fp16), "
          f"each sum rounded to {f.name}:\n")  # fmt: skip
    text, results = drift_table(f.name, args.n, args.seed, show_progress(args.quiet))
    print(text)
    print("\n" + textwrap.fill(drift_note(f, args.n, results), 96))
    return 0


def drift_note(f, n: int, results: dict[str, float]) -> str:
    """What each mode did to the running sum (the table's numbers)."""
    exact = 1.0 + n * UPDATE
    parts = []
    for mode, name in (("nearest_even", "round-to-nearest"), ("toward_zero", "rounding toward "
                                                                          "zero")):  # fmt: skip
        if results[mode] == 1.0:
            parts.append(f"{name} kept none of the {n} updates (1 + 2^-12 rounds back to 1)")
        else:
            parts.append(f"{name} ended at {results[mode]!r}")
    up = results["up"]
    s = 1.0  # rounding up turns each update into one ulp of the sum: check that it did
    for _ in range(n):
        s += 2.0 ** (math.floor(math.log2(s)) - f.man_bits)
    whole = " (each update became a whole ulp of the sum)" if s == up else ""
    parts.append(f"rounding up ended at {up!r}, {up - exact:+.4g} from the exact sum{whole}")
    sr = results["stochastic"]
    errors = {m: abs(v - exact) for m, v in results.items()}
    best = min(errors, key=errors.get)
    text = "; ".join(parts) + (f". Stochastic rounding ended at {sr!r}, {sr - exact:+.4g} from the "
                               "exact sum")  # fmt: skip
    if best == "stochastic":
        text += (": the smallest error of the four. It is right on average, which is why it is "
                 "used for low-precision weights and accumulators.")  # fmt: skip
    else:
        text += f"; here {best} came closer."
    return text[0].upper() + text[1:]
