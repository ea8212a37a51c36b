"""``python -m fpsim.demo accumulate``: the accumulator's format matters more than the inputs'.

Sums and dot products of fp16 values, with every partial sum rounded to an fp16, bf16 or fp32
accumulator (:func:`fpsim.arith.sum` / :func:`~fpsim.arith.matmul`), in sequential and pairwise
order. 4096 ones: an fp16 accumulator stops at 2048 (there the spacing of fp16 values is 2, and
2048 + 1 is a tie that rounds back to the even 2048), bf16 at 256. Then a long sum of random
values, and a matrix product, against the exact result; the figure draws the running sums.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ._common import PROG, add_output_args, new_figure, positive_int, quiet_numba, save_figure

ACCUMULATORS = ("fp16", "bf16", "fp32")


def running_sum(values: np.ndarray, acc: str) -> np.ndarray:
    """Every partial sum of a sequential sum, each rounded to ``acc`` (float64 adds two values of
    these formats exactly, so rounding the float64 sum is the correctly rounded add)."""
    import fpsim

    out = np.empty(values.size)
    s = 0.0
    for i, v in enumerate(values.tolist()):
        s = float(fpsim.round_to(s + v, acc))
        out[i] = s
    return out


def random_values(n: int, seed: int) -> np.ndarray:
    """n values uniform in [0, 1), rounded to fp16."""
    import fpsim

    return fpsim.round_to(np.random.default_rng(seed).uniform(0, 1, n), "fp16")


def ones_table() -> str:
    from fpsim import arith

    ones = np.ones(4096, np.float32)
    rows = [f"{'accumulator':11}  {'sequential':>10}  {'pairwise':>8}   (exact: 4096)"]
    for acc in ACCUMULATORS:
        seq = arith.sum(ones, "fp16", acc=acc, out_fmt="fp32")
        pair = arith.sum(ones, "fp16", acc=acc, order="pairwise", out_fmt="fp32")
        rows.append(f"{acc:11}  {seq:10g}  {pair:8g}")
    return "\n".join(rows)


def random_table(values: np.ndarray) -> str:
    from fpsim import arith

    exact = float(np.sum(values.astype(np.float64)))  # exact: few bits, float64 has room
    rows = [f"{'accumulator':11}  {'sequential':>12} {'rel. error':>10}  {'pairwise':>12} "
            f"{'rel. error':>10}   (exact: {exact:.6f})"]  # fmt: skip
    for acc in ACCUMULATORS:
        cells = []
        for order in ("sequential", "pairwise"):
            s = arith.sum(values, "fp16", acc=acc, order=order, out_fmt="fp32")
            cells.append(f"{s:12.4f} {abs(s - exact) / exact:10.1e}")
        rows.append(f"{acc:11}  " + "  ".join(cells))
    return "\n".join(rows)


def matmul_table(seed: int) -> str:
    import fpsim
    from fpsim import arith

    rng = np.random.default_rng(seed)
    a = fpsim.round_to(rng.uniform(0, 1, (64, 1024)), "fp16")
    b = fpsim.round_to(rng.uniform(0, 1, (1024, 64)), "fp16")
    exact = a.astype(np.float64) @ b.astype(np.float64)  # exact: products of 11-bit values
    rows = [f"{'accumulator':11}  max relative error of (64x1024 fp16) @ (1024x64 fp16)"]
    for acc in ACCUMULATORS:
        c = arith.matmul(a, b, "fp16", acc=acc, order="sequential", out_fmt="fp32")
        rows.append(f"{acc:11}  {float(np.max(np.abs(c - exact) / exact)):.1e}")
    return "\n".join(rows)


def figure(values: np.ndarray, out: str | Path) -> Path:
    fig = new_figure((8, 4.5))
    ax = fig.add_subplot()
    n = np.arange(1, values.size + 1)
    ax.plot(n, np.cumsum(values.astype(np.float64)), color="black", ls="--", lw=1.3,
            label="exact", zorder=3)  # fmt: skip
    for acc, colour in zip(ACCUMULATORS, ("#d62728", "#ff7f0e", "#2ca02c"), strict=True):
        s = running_sum(values, acc)
        ax.plot(n, s, color=colour, lw=1.6, label=f"{acc} accumulator: ends at {s[-1]:g}")
    stalls = ((256.0, "bf16 stalls at 256 = 2^8"), (2048.0, "fp16 stalls at 2048 = 2^11"))
    for level, text in stalls:
        ax.axhline(level, color="#999999", lw=0.8, ls=":")
        ax.text(values.size * 0.99, level, text, ha="right", va="bottom", fontsize=8.5,
                color="#555555")  # fmt: skip
    ax.set_xlabel("number of terms added")
    ax.set_ylabel("running sum")
    ax.set_title(
        f"Summing {values.size} fp16 values from U(0, 1), left to right: once half the spacing "
        "of the accumulator's values\nnear the sum is at least the addend, every addition rounds "
        "back (swamping)",
        loc="left", fontsize=10,
    )  # fmt: skip
    ax.legend(fontsize=9, loc="upper left")
    ax.grid(alpha=0.3, lw=0.5)
    return save_figure(fig, out, "accumulate.png")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} accumulate",
        description="Sum and multiply fp16 values with an fp16, bf16 or fp32 accumulator, in "
        "sequential and pairwise order, against the exact result.",
    )
    parser.add_argument("-n", type=positive_int, default=10_000,
                        help="terms of the random sum (default: %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    add_output_args(parser)
    args = parser.parse_args(argv)

    import fpsim

    quiet_numba()
    print("1. 4096 ones, in fp16, summed with each accumulator:\n")
    print(ones_table())
    print("\nThe fp16 accumulator at the stall (2048 + 1 is halfway between 2048 and 2050):\n")
    print(fpsim.trace_sum([2048.0, 1.0, 1.0, 1.0], acc="fp16"))
    values = random_values(args.n, args.seed)
    print(f"\n2. {args.n} fp16 values uniform in [0, 1) (seed {args.seed}):\n")
    print(random_table(values))
    print(
        "\nPairwise order keeps partial sums of similar size, so each rounding is relatively "
        "small;\nsequential order adds small terms to an ever larger sum."
    )
    print("\n3. A matrix product, every dot product accumulated sequentially (products exact):\n")
    print(matmul_table(args.seed))
    print(
        "\nPyTorch's fp16 matmuls accumulate in fp32 (so do tensor cores); fpsim's autograd "
        "does too\n(fpsim.matmul_accumulation('input') switches to the input's format)."
    )
    if not args.no_plots:
        print(f"\nwrote {figure(values, args.out)}")
    return 0
