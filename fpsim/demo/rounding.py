"""``python -m fpsim.demo rounding``: the rounding modes side by side, ties to even, and why
stochastic rounding is unbiased.

A table rounds chosen values (ties between two fp16 neighbours, values just off a tie, a
subnormal tie, the tie above the largest value) in every mode of :func:`fpsim.round_to`; the
stochastic column is the mean of many independent roundings. Then one tie explained
(:func:`fpsim.explain_op`), and a running sum of small updates: round-to-nearest swamps them
all, rounding up overshoots, stochastic rounding keeps the sum right on average.
"""

from __future__ import annotations

import argparse

import numpy as np

from ._common import PROG, exact_text, positive_int, quiet_numba

MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down")

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


def modes_table(fmt: str, draws: int, seed: int) -> str:
    import fpsim

    header = ["x"] + [HEADERS[m] for m in MODES] + ["stochastic (mean)"]
    cells = []
    for label, x, _ in VALUES:
        row = [_num(fpsim.round_to(x, fmt, rounding=m)) for m in MODES]
        sr = fpsim.round_to(np.full(draws, x), fmt, rounding="stochastic", seed=seed)
        row.append(f"{np.mean(sr):.7g}")
        cells.append([label] + row)
    widths = [max(len(r[i]) for r in cells + [header]) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True)))  # fmt: skip

    lines = [line(header)] + [line(r) for r in cells]
    lines.append("")
    lines += [f"  {label:>{widths[0]}}: {why}" for label, _, why in VALUES]
    return "\n".join(lines)


def drift_table(fmt: str, n: int, seed: int) -> tuple[str, dict[str, float]]:
    """``1.0`` plus ``n`` updates of ``2^-12``, each sum rounded in ``fmt`` in each mode."""
    import fpsim

    u = 2.0**-12
    exact = 1.0 + n * u
    results = {}
    for mode in ("nearest_even", "toward_zero", "up", "stochastic"):
        s = 1.0
        for i in range(n):
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
    parser.add_argument("--draws", type=positive_int, default=10_000,
                        help="stochastic roundings averaged per value "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("-n", type=positive_int, default=1000,
                        help="small updates in the running sum (default: %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    args = parser.parse_args(argv)

    import fpsim

    f = fpsim.fp16  # the notes and the chosen values are about fp16's grid
    quiet_numba()
    print(
        f"1. Values rounded to {f.name} in each mode (stochastic: the mean of {args.draws} "
        "independent roundings):\n"
    )
    print(modes_table(f.name, args.draws, args.seed))
    print(
        "\nnearest_even (IEEE's default) sends a tie to the neighbour whose last bit is 0, so "
        "ties go up\nand down equally often; nearest_away always goes away from zero. Stochastic "
        "rounding goes\nup with probability equal to the distance from the lower neighbour, in "
        "ulps: on average it\nreturns x itself.\n"
    )
    print(fpsim.explain_op(2048.0, "+", 1.0, f.name))
    print(f"\n2. 1.0 plus {args.n} updates of 2^-12 (a quarter of the spacing above 1 in fp16), "
          f"each sum rounded to {f.name}:\n")  # fmt: skip
    text, _ = drift_table(f.name, args.n, args.seed)
    print(text)
    print(
        "\nRound-to-nearest swamps every update (1 + 2^-12 rounds back to 1) and rounding up "
        "turns each\ninto a whole ulp; stochastic rounding is right on average, which is why it "
        "is used for\nlow-precision weights and accumulators."
    )
    return 0
