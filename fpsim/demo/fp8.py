"""``python -m fpsim.demo fp8``: the tiny GPT trained in eight precision recipes side by side.

The character-level GPT of :mod:`fpsim.models` (2 layers, 4 heads, width 32) learns the
shipped sonnets, from the same initial weights and batches, in

* ``fp32``; ``bf16`` autocast; ``fp16`` autocast with dynamic loss scaling (GradScaler);
* FP8 through :func:`fpsim.amp.convert_to_fp8` (every Linear layer's three GEMMs on quantized
  operands, products summed in fp32): ``fp8_cast`` (E4M3 forward, E5M2 gradients, no
  per-tensor scale: one global dynamic loss scale, the GradScaler's), ``fp8_delayed`` (TE's
  delayed scaling from an amax history), ``fp8_current`` (per-tensor scale from each tensor's
  own amax), ``mxfp8`` (E4M3 in blocks of 32 with power-of-two scales) and ``nvfp4`` (E2M1 in
  blocks of 16, E4M3 block scales, stochastic rounding of gradients).

It prints the final loss of each against fp32's, and what each FP8/MX recipe's casts lost per
tensor kind: activations (the layers' inputs), weights and gradients (the gradient arriving at
each layer's output): the share of non-zero values stored as zero (underflow) and of values
beyond the format's largest after scaling (saturated or, for the plain cast, overflowed to
inf/NaN). Figures: the loss curves (``fp8_loss.png``) and the scales in force step by step
with the amax the delayed recipe computed them from (``fp8_scales.png``). Every sentence is
computed from the results.
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
    fit_title,
    new_figure,
    parse_args,
    quiet_numba,
    save_figure,
    seed_arg,
    split_list,
    whole_number,
)

#: name -> (training recipe of fpsim.amp.train, GEMM recipe or None, description)
RUNS = {
    "fp32": ("fp32", None, "fp32 everywhere"),
    "bf16": ("bf16", None, "bf16 autocast"),
    "fp16": ("fp16_dynamic", None, "fp16 autocast + GradScaler"),
    "fp8_cast": ("fp8_cast", "fp8_cast", "E4M3/E5M2 casts + one loss scale"),
    "fp8_delayed": ("fp32", "fp8_delayed", "per-tensor scales from the amax history"),
    "fp8_current": ("fp32", "fp8_current", "per-tensor scales from each tensor's amax"),
    "mxfp8": ("fp32", "mxfp8", "E4M3, a power-of-two scale per 32"),
    "nvfp4": ("fp32", "nvfp4", "E2M1, an E4M3 scale per 16"),
}
KINDS = {"input": "activations", "weight": "weights", "grad_output": "gradients"}
TIMES: dict[str, float] = {}
TRACKED = "blocks.0.fc"  # the layer whose scales the figure follows
STEPS, BATCH, SEQ, LR = 30, 8, 32, 3e-3
COLOURS = {"fp32": "black", "bf16": "#7f7f7f", "fp16": "#17becf", "fp8_cast": "#d62728",
           "fp8_delayed": "#1f77b4", "fp8_current": "#2ca02c", "mxfp8": "#9467bd",
           "nvfp4": "#ff7f0e"}  # fmt: skip


def runs_arg(text: str) -> tuple[str, ...]:
    names = split_list(text)
    bad = [n for n in names if n not in RUNS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown recipe(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(RUNS)}"
        )
    out = [n for n in RUNS if n in names]
    return tuple(out if "fp32" in out else ["fp32"] + out)  # fp32 is the reference


def _training_recipe(name: str):
    from fpsim import amp

    if name == "fp8_cast":  # no autocast (fp32 outside the GEMMs), a dynamic loss scale
        import dataclasses

        return dataclasses.replace(amp.recipe("fp32"), name="fp8_cast", scaling="dynamic",
                                   description="FP8 casts in the GEMMs, one dynamic loss scale")
    return amp.recipe(name)


def run_one(name: str, steps: int, seed: int) -> dict:
    """Train a fresh GPT with recipe ``name``; the losses, loss scales, skipped steps, what the
    casts lost (FP8 runs) and the tracked layer's scale and amax per step."""
    import fpsim
    from fpsim import amp, models
    from fpsim.nn import functional as F

    X, Y, vocab = fpsim.data.char_dataset(seq_len=SEQ)
    v = len(vocab)
    gpt = models.CharGPT(v, block_size=SEQ, seed=seed)
    train_name, gemm, _ = RUNS[name]
    layers = amp.convert_to_fp8(gpt, gemm, record=True, seed=seed) if gemm else None
    track: dict[str, list] = {"scale": [], "amax": [], "history_max": []}

    def on_step(st) -> None:
        if layers is None:
            return
        q = layers[TRACKED].quantizers["grad_output"]
        track["scale"].append(q.scale if q.scale is not None else math.nan)
        track["amax"].append(q.amax if q.amax is not None else math.nan)
        h = q.amax_history
        track["history_max"].append(float(h.max()) if h is not None else math.nan)

    def loss_fn(out, y):
        return F.cross_entropy(out.reshape(-1, v), y.reshape(-1))

    res = amp.train(gpt, (X, Y), _training_recipe(train_name), steps=steps, lr=LR,
                    batch_size=BATCH, seed=seed, loss_fn=loss_fn, on_step=on_step,
                    progress=False)  # fmt: skip
    out = {"losses": res.losses, "scales": res.scales, "skipped": res.skipped,
           "scaled": res.recipe.scaling != "none", "track": track}  # fmt: skip
    if layers is not None:
        out["lost"] = {}
        out["lost"] = lost_fractions(layers.stats(), gemm)
    return out


def lost_fractions(stats: dict, gemm: str) -> dict:
    """role -> fractions of the quantized elements flushed to zero (``zero``) and pushed past
    the format's max (``saturated``: clipped, or overflowed to inf/NaN), from
    :meth:`fpsim.amp.FP8Layers.stats` of layers converted with the GEMM recipe ``gemm``.

    A plain cast (no scale) counts an overflow to inf/NaN both as ``saturated`` and as
    ``nonfinite``; a scaled cast keeps them apart (there only a block holding inf/NaN makes a
    finite element non-finite). Each lost element is counted once."""
    from fpsim import amp

    recipe = amp.get_gemm_recipe(gemm)
    lost = {}
    for role, c in stats.items():
        n = max(c["elements"], 1)
        plain = recipe.spec(role).scaling == "none"
        beyond = c["saturated"] + (0 if plain else c["nonfinite"])
        lost[role] = {"zero": c["zero"] / n, "saturated": beyond / n}
    return lost


def final(losses: np.ndarray, window: int) -> float:
    tail = losses[-window:]
    tail = tail[np.isfinite(tail)]
    return float(tail.mean()) if tail.size else math.nan


def gap(d: float) -> str:
    """A loss difference as the table prints it (4 decimals), or "the same to 4 decimals"."""
    return f"{d:+.4f}" if abs(d) >= 5e-5 else "the same to 4 decimals"


def pct(x: float) -> str:
    if x == 0:
        return "0"
    return "<0.01%" if x < 5e-5 else f"{100 * x:.2f}%"


def table(res: dict, window: int) -> str:
    ref = final(res["fp32"]["losses"], window)
    w = 13
    head = (f"{'recipe':12}  {'final loss':>10}  {'vs fp32':>9}  {'skipped':>7}  "
            + "  ".join(f"{KINDS[r] + ' 0/sat':>{2 * w + 1}}" for r in KINDS))  # fmt: skip
    rows = [head]
    for name, r in res.items():
        f = final(r["losses"], window)
        skipped = f"{int(r['skipped'].sum())}/{len(r['skipped'])}" if r["scaled"] else "-"
        cells = []
        for role in KINDS:
            if "lost" in r:
                lost = r["lost"][role]
                cells.append(f"{pct(lost['zero']):>{w}} {pct(lost['saturated']):>{w}}")
            else:
                cells.append(f"{'-':>{w}} {'-':>{w}}")
        d = f - ref
        rows.append(f"{name:12}  {f:>10.4f}  {(f'{d:+.4f}' if abs(d) >= 5e-5 else '0'):>9}  "
                    f"{skipped:>7}  " + "  ".join(cells))  # fmt: skip
    return "\n".join(rows)


def story(res: dict, window: int) -> list[str]:
    """The sentences under the table, each read off ``res``."""
    ref = final(res["fp32"]["losses"], window)
    gaps = {n: final(r["losses"], window) - ref for n, r in res.items() if n != "fp32"}
    paras = []
    if gaps:
        finite = {n: g for n, g in gaps.items() if math.isfinite(g)}
        if finite:
            best = min(finite, key=lambda n: abs(finite[n]))
            worst = max(finite, key=lambda n: abs(finite[n]))
            text = (f"After {len(res['fp32']['losses'])} steps fp32 reaches a loss of {ref:.4f} "
                    f"(the mean of the last {window} steps). Closest to it: {best} "
                    f"({gap(finite[best])}); furthest: {worst} "
                    f"({gap(finite[worst])}).")  # fmt: skip
            if len(finite) < len(gaps):
                lost = ", ".join(n for n in gaps if n not in finite)
                text += f" No finite loss: {lost}."
            paras.append(text)
    fp8 = {n: r for n, r in res.items() if "lost" in r}
    if fp8:
        g = {n: r["lost"]["grad_output"]["zero"] for n, r in fp8.items()}
        most = max(g, key=g.get)
        text = (f"Gradients lost to underflow: {most} flushed the most, {pct(g[most])} of the "
                "non-zero gradient values its layers received")  # fmt: skip
        others = [f"{n} {pct(v)}" for n, v in g.items() if n != most]
        if others:
            text += " (" + ", ".join(others) + ")"
        text += "."
        if "fp8_cast" in fp8 and "fp8_current" in fp8:
            c, s = g["fp8_cast"], g["fp8_current"]
            if c > s:
                text += (f" A per-tensor scale keeps what one global loss scale cannot: "
                         f"fp8_current flushes {pct(s)} against fp8_cast's {pct(c)}, since each "
                         "layer's gradient is scaled to its own amax.")  # fmt: skip
            else:
                text += (f" Here fp8_cast's global loss scale flushed no more than fp8_current "
                         f"({pct(c)} against {pct(s)}).")  # fmt: skip
        paras.append(text)
        sat = {n: r["lost"]["input"]["saturated"] for n, r in fp8.items()}
        top = max(sat, key=sat.get)
        if sat[top] > 0:
            paras.append(f"Activations beyond the format's range: {top} clipped or overflowed "
                         f"{pct(sat[top])} of them.")  # fmt: skip
        else:
            paras.append("No recipe clipped or overflowed an activation.")
    if "fp8_delayed" in res:
        t = res["fp8_delayed"]["track"]
        sc = np.array(t["scale"], np.float64)
        am = np.array(t["amax"], np.float64)
        if sc.size > 1 and np.all(np.isfinite(sc)):
            changes = int(np.count_nonzero(np.diff(sc)))
            paras.append(
                f"Delayed scaling on {TRACKED}'s gradient: the scale starts at {sc[0]:g} (before "
                f"any history) and changes {changes} time(s) in {sc.size} steps; the last is "
                f"{sc[-1]:.4g}, computed from the largest amax in the history, while the last "
                f"step's own gradient amax was {am[-1]:.3g}."
            )
    return paras


def figure_loss(res: dict, out: str | Path) -> Path:
    fig = new_figure((12, 4.8))
    ax, diff = fig.subplots(1, 2)
    ref = res["fp32"]["losses"]
    for name, r in res.items():
        y = r["losses"]
        steps = np.arange(1, y.size + 1)
        kw = {"lw": 1.6 if name != "fp32" else 2.4, "color": COLOURS[name],
              "ls": "--" if name == "fp32" else "-"}  # fmt: skip
        ax.plot(steps, y, label=f"{name}: {RUNS[name][2]}", **kw)
        diff.plot(steps, y - ref, **kw)
    ax.set_ylabel("cross-entropy loss (per batch)")
    diff.set_ylabel("loss minus fp32's loss at the same step")
    for a in (ax, diff):
        a.set_xlabel("step")
        a.grid(alpha=0.3, lw=0.5)
    ax.legend(fontsize=8.5)
    fit_title(ax, "The character GPT on the sonnets: same weights and batches in each recipe",
              fontsize=9.5)  # fmt: skip
    fit_title(diff, "Each recipe against fp32, step by step", fontsize=9.5)
    return save_figure(fig, out, "fp8_loss.png")


def figure_scales(res: dict, out: str | Path) -> Path:
    fig = new_figure((12, 4.8))
    left, right = fig.subplots(1, 2)
    for name, r in res.items():
        if name in ("fp8_delayed", "fp8_current"):
            s = np.array(r["track"]["scale"], np.float64)
            left.plot(np.arange(1, s.size + 1), np.log2(s), color=COLOURS[name], lw=1.8,
                      label=f"{name}: per-tensor scale of {TRACKED}'s gradient")  # fmt: skip
        elif r["scaled"]:
            s = np.asarray(r["scales"], np.float64)
            left.plot(np.arange(1, s.size + 1), np.log2(s), color=COLOURS[name], lw=1.8,
                      ls=":", label=f"{name}: the global loss scale")  # fmt: skip
    left.set_xlabel("step")
    left.set_ylabel("log2(scale)")
    left.grid(alpha=0.3, lw=0.5)
    left.legend(fontsize=8.5)
    fit_title(left, "The scales in force at each step", fontsize=9.5)
    if "fp8_delayed" in res:
        t = res["fp8_delayed"]["track"]
        am = np.array(t["amax"], np.float64)
        hm = np.array(t["history_max"], np.float64)
        steps = np.arange(1, am.size + 1)
        right.semilogy(steps, am, color=COLOURS["fp8_delayed"], marker="o", ms=3, lw=1.2,
                       label="the step's own gradient amax")  # fmt: skip
        right.semilogy(steps, hm, color="black", lw=1.2, ls="--",
                       label="largest amax in the history (the next scale's)")  # fmt: skip
        right.legend(fontsize=8.5)
    right.set_xlabel("step")
    right.set_ylabel("amax")
    right.grid(alpha=0.3, lw=0.5, which="both")
    fit_title(right, f"fp8_delayed: the amax history of {TRACKED}'s gradient", fontsize=9.5)
    return save_figure(fig, out, "fp8_scales.png")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} fp8",
        description="The tiny GPT trained in fp32, bf16, fp16 + GradScaler and five FP8/MX "
        "recipes (fpsim.amp.convert_to_fp8): final losses, what each recipe's casts lost per "
        "tensor kind, the loss curves and the scales step by step.",
    )
    parser.add_argument("--steps", type=whole_number(1, 100_000), default=STEPS,
                        help="optimizer steps per recipe (default: %(default)s)")  # fmt: skip
    parser.add_argument("--recipes", type=runs_arg, default=tuple(RUNS), metavar="NAME,...",
                        help=f"which to run, of {', '.join(RUNS)} (fp32 always runs: it is the "
                        "reference; default: all)")  # fmt: skip
    parser.add_argument("--seed", type=seed_arg, default=0,
                        help="initial weights and batch order (default: %(default)s)")
    add_output_args(parser)
    args = parse_args(parser, argv)

    quiet_numba()
    import time

    res = {}
    for name in args.recipes:
        t0 = time.perf_counter()
        res[name] = run_one(name, args.steps, args.seed)
        TIMES[name] = time.perf_counter() - t0
    window = min(10, args.steps)
    print(f"The character GPT (2 layers, width 32) on the sonnets, {args.steps} steps of Adam "
          f"(lr {LR:g}, batches of {BATCH} x {SEQ} characters, seed {args.seed}). Final loss: "
          f"the mean of the last {window} steps. Lost: the share of the values each FP8/MX "
          "recipe cast in its GEMMs stored as zero (underflow) and beyond the format's range "
          "after scaling (saturated or overflowed).\n")  # fmt: skip
    print(table(res, window))
    print()
    for para in story(res, window):
        print(textwrap.fill(para, 96) + "\n")
    if not args.no_plots:
        print(f"wrote {figure_loss(res, args.out)}")
        print(f"wrote {figure_scales(res, args.out)}")
    return 0
