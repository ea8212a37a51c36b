"""``python -m fpsim.demo bf16``: bf16 needs no loss scaler, but keeps fewer bits.

The underflow demo's model and task under fp32, fp16 without and with loss scaling, and bf16
without a scaler. bf16 has fp32's 8 exponent bits, so the small gradients that fp16 loses are
normal bf16 numbers (none lost to zero, no scaler needed); but it has 8 significant bits to
fp16's 11, so every value it keeps is rounded 8 times more coarsely -- the gradients' median
relative error (measured by a :class:`~fpsim.stats.GradientRecorder` against the true fp32
gradients) shows it. Then a few numbers rounded to both formats. Every sentence printed is
computed from the runs and the numbers.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from pathlib import Path

from ._common import (
    PROG,
    add_output_args,
    add_training_args,
    exact_text,
    parse_args,
    pct,
    quiet_numba,
    save_figure,
    show_progress,
)

# (label, value) rounded to fp16 and bf16
NUMBERS = (
    ("0.1", 0.1),
    ("1/3", 1 / 3),
    ("1 + 2^-9", 1 + 2.0**-9),
    ("1000.3", 1000.3),
    ("2^-30", 2.0**-30),
    ("70000", 70000.0),
)
LABELS = ("fp32", "fp16, no scaling", "fp16 + dynamic scaling", "bf16, no scaler")
FINAL_WINDOW = 10


def _err(x: float) -> str:
    return "-" if math.isnan(x) else ("0" if x == 0 else f"2^{int(math.log2(x))}")


def table(runs) -> str:
    ref = runs[0].result.final_loss(FINAL_WINDOW)
    w = max(len(r.label) for r in runs)
    out = [
        f"{'':{w}}  {'lost to zero':^17}  {'median rel. error':^17}",
        f"{'recipe':{w}}  {'activ.':>8} {'weights':>8}  {'activ.':>8} {'weights':>8}  "
        f"{'final loss':>22}",
    ]
    for r in runs:
        a, g = r.recorder.total("activation"), r.recorder.total("weight")
        loss = r.result.final_loss(FINAL_WINDOW)
        ratio = f"{loss / ref:5.2f}x" if ref and math.isfinite(ref) else "    -"
        out.append(
            f"{r.label:{w}}  {pct(a.lost_fraction):>8} {pct(g.lost_fraction):>8}  "
            f"{_err(a.median_error()):>8} {_err(g.median_error()):>8}  "
            f"{loss:9.4g} ({ratio} fp32)"
        )
    return "\n".join(out)


def runs_note(runs) -> str:
    """bf16 against fp16, in words: every number is one of the table's."""
    from fpsim.formats import bf16, fp16

    by = {r.label: r for r in runs}
    b, plain, scaled = by["bf16, no scaler"], by["fp16, no scaling"], by["fp16 + dynamic scaling"]
    lost = {r.label: pct(r.recorder.total("activation").lost_fraction) for r in runs}
    text = (f"bf16 lost {lost[b.label]} of the activation gradients to zero, fp16 without a "
            f"scale {lost[plain.label]}, fp16 with one {lost[scaled.label]}.")
    eb, es = b.recorder.total("activation").median_error(), scaled.recorder.total(
        "activation").median_error()  # fmt: skip
    if eb > 0 and es > 0 and math.isfinite(eb) and math.isfinite(es):
        k = int(math.log2(eb)) - int(math.log2(es))
        how = (f"{2**k}x larger" if k > 0 else f"{2**-k}x smaller" if k < 0 else "the same")
        text += (f" The median relative error of bf16's activation gradients, {_err(eb)}, is "
                 f"{how} than fp16's with a scale, {_err(es)}")  # fmt: skip
        text += (f": bf16 keeps {bf16.precision} significant bits to fp16's {fp16.precision}."
                 if k > 0 else ".")  # fmt: skip
    return text


def number_rows() -> list[tuple[str, float, float, float]]:
    """(label, x, x in fp16, x in bf16) for :data:`NUMBERS`."""
    import fpsim

    return [(label, x, float(fpsim.round_to(x, "fp16")), float(fpsim.round_to(x, "bf16")))
            for label, x in NUMBERS]  # fmt: skip


def _rel(v: float, x: float) -> float:
    return abs(v - x) / abs(x) if math.isfinite(v) else math.inf


def numbers_table(rows=None) -> str:
    out = [f"{'x':10}  {'fp16':>16} {'rel. error':>10}  {'bf16':>16} {'rel. error':>10}"]
    for label, x, h, b in rows or number_rows():
        cells = [f"{exact_text(v, 16):>16} {_rel(v, x):10.2e}" for v in (h, b)]
        out.append(f"{label:10}  " + "  ".join(cells))
    return "\n".join(out)


def numbers_note(rows) -> str:
    """What the numbers table shows: what bf16 keeps that fp16 cannot, what it rounds more
    coarsely, and each format's largest relative rounding error."""
    from fpsim.formats import bf16, fp16

    def shown(v: float) -> str:
        return exact_text(v, 16)

    keeps = [(label, h) for label, _, h, b in rows
             if (h == 0 or not math.isfinite(h)) and b != 0 and math.isfinite(b)]  # fmt: skip
    coarser = [(label, b) for label, x, h, b in rows
               if math.isfinite(h) and h != 0 and _rel(b, x) > _rel(h, x)]  # fmt: skip
    parts = []
    if keeps:
        parts.append(f"bf16 keeps {' and '.join(lab for lab, _ in keeps)} (fp16: "
                     f"{' and '.join(shown(h) for _, h in keeps)})")  # fmt: skip
    if coarser:
        parts.append(f"rounds {', '.join(f'{lab} to {shown(b)}' for lab, b in coarser)} more "
                     "coarsely than fp16")  # fmt: skip
    text = (" but ".join(parts) + ". ") if parts else ""  # (a format name: no capital)
    ub, uh = 2.0**-bf16.precision, 2.0**-fp16.precision
    return text + (f"Round to nearest errs by at most half an ulp: a relative error up to "
                   f"2^-{bf16.precision} = {100 * ub:.2g}% in bf16, 2^-{fp16.precision} = "
                   f"{100 * uh:.2g}% in fp16.")  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} bf16",
        description="bf16 vs fp16 on the underflow demo's model: bf16 needs no loss scaler "
        "(fp32's exponent range) but keeps 8 significant bits to fp16's 11.",
    )
    add_training_args(parser, steps=300, seed=0, lr=3e-3)
    add_output_args(parser)
    args = parse_args(parser, argv)

    from fpsim.amp import recipe

    from .underflow import train_all

    quiet_numba()
    print(
        f"The underflow demo's model and task, {args.steps} steps of Adam (lr {args.lr:g}, seed "
        f"{args.seed}); every gradient compared with the true (fp32) one.\n"
    )
    pairs = list(zip(LABELS, (recipe("fp32"), recipe("fp16"), recipe("fp16_dynamic"),
                              recipe("bf16")), strict=True))  # fmt: skip
    runs = train_all(pairs, steps=args.steps, seed=args.seed, lr=args.lr,
                     progress=show_progress(args.quiet))  # fmt: skip
    print(table(runs))
    print(
        "\nmedian rel. error: the binade 2^k holding the median of |g - g_true| / |g_true| over "
        "the gradients\nthat were kept (not lost to zero). final loss: the mean of the last "
        f"{min(FINAL_WINDOW, args.steps)} steps."
    )
    print("\n" + textwrap.fill(runs_note(runs), 96))
    print("\nA few numbers in both formats:\n")
    rows = number_rows()
    print(numbers_table(rows))
    print("\n" + textwrap.fill(numbers_note(rows), 96))
    if not args.no_plots:
        from fpsim.plot import plot_range_histogram

        h = runs[0].recorder.total("activation").reference
        z = h.zones("bf16")
        nonzero = z["underflow"] + z["subnormal"] + z["normal"] + z["overflow"]
        if nonzero and z["normal"] == nonzero:
            what = "all normal numbers, no scale needed"
        else:
            what = ", ".join(f"{100 * z[k] / max(nonzero, 1):.2g}% {k}"
                             for k in ("underflow", "subnormal", "normal", "overflow") if z[k])
        fig = plot_range_histogram(
            h, "bf16", title=f"The same fp32 activation gradients against bf16's range: {what}"
        )
        path = save_figure(fig, Path(args.out), "bf16_histogram.png")
        print(f"\nwrote {path}")
    return 0
