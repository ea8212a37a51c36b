"""``python -m fpsim.demo bf16``: bf16 needs no loss scaler, but keeps fewer bits.

The underflow demo's model and task under fp32, fp16 without and with loss scaling, and bf16
without a scaler. bf16 has fp32's 8 exponent bits, so the small gradients that fp16 loses are
normal bf16 numbers (none lost to zero, no scaler needed); but it has 8 significant bits to
fp16's 11, so every value it keeps is rounded 8 times more coarsely -- the gradients' median
relative error (measured by a :class:`~fpsim.stats.GradientRecorder` against the true fp32
gradients) shows it. Then a few numbers rounded to both formats.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ._common import PROG, add_output_args, exact_text, positive_int, quiet_numba, save_figure

# (label, value) rounded to fp16 and bf16
NUMBERS = (
    ("0.1", 0.1),
    ("1/3", 1 / 3),
    ("1 + 2^-9", 1 + 2.0**-9),
    ("1000.3", 1000.3),
    ("2^-30", 2.0**-30),
    ("70000", 70000.0),
)


def _err(x: float) -> str:
    return "-" if math.isnan(x) else ("0" if x == 0 else f"2^{int(math.log2(x))}")


def table(runs) -> str:
    ref = runs[0].result.final_loss()
    w = max(len(r.label) for r in runs)
    out = [
        f"{'':{w}}  {'lost to zero':^17}  {'median rel. error':^17}",
        f"{'recipe':{w}}  {'activ.':>8} {'weights':>8}  {'activ.':>8} {'weights':>8}  "
        f"{'final loss':>22}",
    ]
    for r in runs:
        a, g = r.recorder.total("activation"), r.recorder.total("weight")
        loss = r.result.final_loss()
        out.append(
            f"{r.label:{w}}  {100 * a.lost_fraction:7.2f}% {100 * g.lost_fraction:7.2f}%  "
            f"{_err(a.median_error()):>8} {_err(g.median_error()):>8}  "
            f"{loss:9.4g} ({loss / ref:5.2f}x fp32)"
        )
    return "\n".join(out)


def numbers_table() -> str:
    import fpsim

    out = [f"{'x':10}  {'fp16':>16} {'rel. error':>10}  {'bf16':>16} {'rel. error':>10}"]
    for label, x in NUMBERS:
        cells = []
        for f in ("fp16", "bf16"):
            v = float(fpsim.round_to(x, f))
            err = abs(v - x) / abs(x) if math.isfinite(v) else math.inf
            cells.append(f"{exact_text(v, 16):>16} {err:10.2e}")
        out.append(f"{label:10}  " + "  ".join(cells))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} bf16",
        description="bf16 vs fp16 on the underflow demo's model: bf16 needs no loss scaler "
        "(fp32's exponent range) but keeps 8 significant bits to fp16's 11.",
    )
    parser.add_argument("--steps", type=positive_int, default=300,
                        help="optimizer steps per recipe (default: %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    add_output_args(parser)
    args = parser.parse_args(argv)

    from fpsim.amp import recipe

    from .underflow import train_all

    quiet_numba()
    print(
        f"The underflow demo's model and task, {args.steps} steps of Adam; every gradient "
        "compared with the true (fp32) one.\n"
    )
    pairs = [("fp32", recipe("fp32")), ("fp16, no scaling", recipe("fp16")),
             ("fp16 + dynamic scaling", recipe("fp16_dynamic")),
             ("bf16, no scaler", recipe("bf16"))]  # fmt: skip
    runs = train_all(pairs, steps=args.steps, seed=args.seed)
    print(table(runs))
    print(
        "\nmedian rel. error: the binade 2^k holding the median of |g - g_true| / |g_true| over "
        "the gradients\nthat were kept (not lost to zero). bf16 loses nothing to underflow, but "
        "its gradients are\nabout 8x less precise than fp16's with a loss scale: 8 significant "
        "bits against 11."
    )
    print("\nA few numbers in both formats:\n")
    print(numbers_table())
    print(
        "\nbf16 keeps 2^-30 and 70000 (fp16: 0 and inf) but rounds 1 + 2^-9 to 1: its "
        "relative rounding\nerror can reach 2^-8 = 0.39% (fp16: 2^-11 = 0.049%)."
    )
    if not args.no_plots:
        from fpsim.plot import plot_range_histogram

        h = runs[0].recorder.total("activation").reference
        fig = plot_range_histogram(
            h, "bf16", title="The same fp32 activation gradients against bf16's range: all "
            "normal numbers, no scale needed",
        )  # fmt: skip
        path = save_figure(fig, Path(args.out), "bf16_histogram.png")
        print(f"\nwrote {path}")
    return 0
