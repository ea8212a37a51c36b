"""``python -m fpsim.demo underflow``: fp16 gradients fall off the bottom of the format, and a
loss scale lifts them back.

A small tanh MLP is trained on :func:`fpsim.amp.underflow_task` (targets in units of 2^-8, so
every gradient is 2^-16 times that of the same problem in standardised units) under three
recipes: fp32; the low-precision format without loss scaling; and with dynamic loss scaling
(or a static scale ``--scale S``). A :class:`~fpsim.stats.GradientRecorder` compares, at every
step and element by element, the gradients each run produced with the true (fp32) gradients
for the same weights and batch. The table gives, per recipe, the share of the non-zero true
gradients that became exactly zero and the share kept only as subnormals, the final loss, the
skipped steps and the final scale; the figures show the true activation gradients over the
format's range, unscaled and scaled (the mixed-precision paper's Figure 3, redone), per layer,
the loss curves and the scale trajectory.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import textwrap
from pathlib import Path
from typing import Any

from ._common import PROG, add_output_args, positive_int, pow2, quiet_numba, save_figure

FORMATS = ("fp16", "bf16", "fp8_e5m2", "fp8_e4m3")
DEFAULTS = dict(fmt="fp16", scale=None, steps=500, seed=0, lr=3e-3, samples=4096)


@dataclasses.dataclass
class Run:
    """One recipe's training: its label in the table, the recipe, what train() returned and
    the recorder that watched its gradients."""

    label: str
    recipe: Any
    result: Any
    recorder: Any


def recipes(fmt: str = "fp16", scale: float | None = None) -> list[tuple[str, Any]]:
    """``[(label, Recipe)]``: fp32, ``fmt`` without scaling, ``fmt`` with dynamic scaling (or
    the static scale ``scale``)."""
    from fpsim.amp import recipe
    from fpsim.formats import get_format

    f = get_format(fmt)
    replace = dataclasses.replace
    base = replace(recipe("fp16"), name=f.name, autocast=f,
                   description=f"{f.name} autocast, no scaling")  # fmt: skip
    if scale is None:
        scaled = replace(base, name=f"{f.name}_dynamic", scaling="dynamic",
                         description=f"{f.name} autocast + dynamic loss scaling")  # fmt: skip
        label = f"{f.name} + dynamic scaling"
    else:
        scaled = replace(base, name=f"{f.name}_static", scaling="static", init_scale=float(scale),
                         description=f"{f.name} autocast, static loss scale {scale:g}")  # fmt: skip
        label = f"{f.name} + static scale 2^{int(math.log2(scale))}"
    return [("fp32", recipe("fp32")), (f"{f.name}, no scaling", base), (label, scaled)]


def run(
    fmt: str = "fp16",
    scale: float | None = None,
    steps: int = 500,
    seed: int = 0,
    lr: float = 3e-3,
    samples: int = 4096,
    progress: bool | None = None,
) -> list[Run]:
    """Train one fresh model per recipe (same seed: same data, initial weights and batch
    order), recording every step's gradients next to the true ones."""
    return train_all(recipes(fmt, scale), steps, seed, lr, samples, progress)


def train_all(
    pairs: list[tuple[str, Any]],
    steps: int = 500,
    seed: int = 0,
    lr: float = 3e-3,
    samples: int = 4096,
    progress: bool | None = None,
) -> list[Run]:
    """Train a fresh :func:`~fpsim.amp.underflow_model` on :func:`~fpsim.amp.underflow_task`
    under each ``(label, recipe)``, with a GradientRecorder watching every step."""
    from fpsim import amp
    from fpsim.stats import GradientRecorder

    X, Y = amp.underflow_task(samples, seed=seed)
    runs = []
    for label, rec in pairs:
        model = amp.underflow_model(seed=seed)
        recorder = GradientRecorder(model)
        result = amp.train(model, (X, Y), rec, steps=steps, lr=lr, seed=seed,
                           on_backward=recorder.on_backward, progress=progress)  # fmt: skip
        recorder.remove()
        runs.append(Run(label, rec, result, recorder))
    return runs


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def table(runs: list[Run]) -> str:
    """The printed table: per recipe, % of the non-zero true gradients lost to zero and kept
    as subnormals (activation / weight gradients), the final loss, skipped steps, final scale."""
    ref = runs[0].result.final_loss()
    w = max(len(r.label) for r in runs)
    head = (
        f"{'':{w}}  {'lost to zero':^17}  {'subnormal':^17}  {'final loss':^17}  "
        f"{'skipped':>7}  final scale\n"
        f"{'recipe':{w}}  {'activ.':>8} {'weights':>8}  {'activ.':>8} {'weights':>8}  "
        f"{'(x fp32)':^17}"
    )
    lines = [head]
    for r in runs:
        a, g = r.recorder.total("activation"), r.recorder.total("weight")
        res = r.result
        loss = res.final_loss()
        ratio = loss / ref if ref else math.nan
        scaled = r.recipe.scaling != "none"
        lines.append(
            f"{r.label:{w}}  {_pct(a.lost_fraction):>8} {_pct(g.lost_fraction):>8}  "
            f"{_pct(a.subnormal_fraction):>8} {_pct(g.subnormal_fraction):>8}  "
            f"{loss:9.4g} ({ratio:5.2f}x)  "
            f"{f'{int(res.skipped.sum())}/{res.skipped.size}':>7}  "
            f"{pow2(float(res.scaler.get_scale())) if scaled else '-'}"
        )
    return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines())


NOTES = """\
lost to zero: the share of the non-zero true gradients that the run produced as exactly 0,
  element by element at every step (true: the same weights and batch through an fp32 copy of
  the model, no loss scale); activ. = gradients of each Linear layer's output, weights = of
  its weight and bias.
subnormal: the share kept only as {fmt} subnormals (0 < |g x S| < {tiny}: fewer significant
  bits), judged on the values as stored, i.e. multiplied by the loss scale S.
final loss: the mean of the last 10 steps, and its ratio to fp32's."""


def _layer_names(model) -> dict[str, str]:
    """'0.2' -> 'Linear 64→64 (0.2)' for the panels."""
    out = {}
    for name, m in model.named_modules():
        if hasattr(m, "in_features") and hasattr(m, "out_features"):
            out[name] = f"{type(m).__name__} {m.in_features}→{m.out_features} ({name})"
    return out


def figure_scale(runs: list[Run]) -> float:
    """The loss scale drawn in the figures: the scaled run's last scale (a power of two)."""
    return float(runs[-1].result.scales[-1])


def figures(runs: list[Run], fmt: str, out: str | Path, stem: str = "underflow") -> list[Path]:
    """Write ``{stem}_histogram.png`` (the true activation gradients, all layers, unscaled and
    scaled), ``{stem}_layers.png`` (per layer, activation and weight gradients),
    ``{stem}_loss.png`` and ``{stem}_scale.png``; return the paths."""
    from fpsim.plot import (
        plot_histograms_side_by_side,
        plot_layer_histograms,
        plot_loss_curves,
        plot_scale_trajectory,
    )

    fp32, scaled = runs[0], runs[-1]
    S = figure_scale(runs)
    steps = len(fp32.recorder.steps)
    paths = []
    hist = fp32.recorder.total("activation").reference
    fig = plot_histograms_side_by_side(hist, fmt, scales=(1, S))
    k = int(math.log2(S))
    fig.suptitle(
        f"fp32 training's activation gradients (all layers, {steps} steps) against {fmt}'s "
        f"range: as they are, and × the loss scale $2^{{{k}}}$"
    )
    paths.append(save_figure(fig, out, f"{stem}_histogram.png"))

    names = _layer_names(fp32.result.model)
    panels = {}
    for kind, short in (("activation", "activation grads"), ("weight", "weight grads")):
        for layer, h in fp32.recorder.histograms(kind).items():
            panels[f"{names.get(layer, layer)}: {short}"] = h
    fig = plot_layer_histograms(panels, fmt, scale=S)
    fig.suptitle(f"Per layer: true gradients against {fmt}'s range, and × {pow2(S)}")
    paths.append(save_figure(fig, out, f"{stem}_layers.png"))

    fig = plot_loss_curves({r.label: r.result.losses for r in runs})
    ax = fig.axes[0]
    ref_line = ax.get_lines()[0]  # fp32: drawn dashed on top, so a curve that follows it shows
    ref_line.set(color="black", linestyle="--", linewidth=1.3, zorder=3)
    ax.legend(fontsize=9)
    ax.set_title(
        f"Training loss: {fmt} without loss scaling falls behind; with scaling it follows fp32",
        loc="left",
    )
    paths.append(save_figure(fig, out, f"{stem}_loss.png"))

    res = scaled.result
    fig = plot_scale_trajectory(res.scales, skipped=res.skipped)
    rec = scaled.recipe
    n_skip, n = int(res.skipped.sum()), len(res.skipped)
    if rec.scaling == "static":
        note = f"static, never changes; {n_skip} of {n} steps skipped"
    elif n_skip == 0 and n < rec.growth_interval:
        note = f"no overflow, and growth only after {rec.growth_interval} clean steps"
    else:
        note = f"halved at {n_skip} overflows, doubled after {rec.growth_interval} clean steps"
    fig.axes[0].set_title(f"Loss scale per step, {scaled.label}: {note}", loc="left",
                          fontsize=10)  # fmt: skip
    paths.append(save_figure(fig, out, f"{stem}_scale.png"))
    return paths


def _power_of_two(text: str) -> float:
    from ._common import scale_value

    v = scale_value(text)
    if math.frexp(v)[0] != 0.5:
        raise argparse.ArgumentTypeError(
            f"the scale must be a power of two (scaling is then exact, as GradScaler's): "
            f"1024, 2**15, ...; got {text}"
        )
    return v


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} underflow",
        description="Train a small model whose gradients underflow fp16 under fp32, the "
        "low-precision format without loss scaling, and with loss scaling; print how many of "
        "the true gradients each run lost to zero, and draw the gradient histograms over the "
        "format's range, the loss curves and the loss-scale trajectory.",
    )
    parser.add_argument("--format", default="fp16", choices=FORMATS, dest="fmt",
                        help="the low-precision format (default: %(default)s)")  # fmt: skip
    parser.add_argument("--scale", type=_power_of_two, default=None, metavar="S",
                        help="a static loss scale S (a power of two) instead of dynamic "
                        "scaling")  # fmt: skip
    parser.add_argument("--steps", type=positive_int, default=DEFAULTS["steps"],
                        help="optimizer steps per recipe (default: %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"],
                        help="data, initial weights and batch order "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("--lr", type=float, default=DEFAULTS["lr"],
                        help="Adam's learning rate (default: %(default)s)")  # fmt: skip
    add_output_args(parser)
    args = parser.parse_args(argv)

    from fpsim.formats import get_format

    quiet_numba()
    f = get_format(args.fmt)
    intro = (
        f"A 16-64-64-4 tanh MLP trained on amp.underflow_task ({DEFAULTS['samples']} samples; "
        f"targets in units of 2^-8, so every gradient is 2^-16 times that of the same problem in "
        f"standardised units) for {args.steps} steps of Adam (lr {args.lr:g}, batch 64, seed "
        f"{args.seed}), three ways. At every step each gradient is compared with the true (fp32) "
        f"one."
    )
    print(textwrap.fill(intro, 96) + "\n")
    runs = run(args.fmt, args.scale, args.steps, args.seed, args.lr)
    print(table(runs))
    print()
    print(NOTES.format(fmt=f.name, tiny=f"2^{f.emin}"))
    plain, scaled = runs[1], runs[2]
    a0, a1 = plain.recorder.total("activation"), scaled.recorder.total("activation")
    S = figure_scale(runs)
    summary = (
        f"Without scaling, {_pct(a0.lost_fraction)} of the true activation gradients became 0 "
        f"in {f.name}; multiplied by the loss scale {pow2(S)}, every exponent moves up by "
        f"{int(math.log2(S))} and {_pct(a1.lost_fraction)} are lost."
    )
    print("\n" + textwrap.fill(summary, 96))
    h = runs[0].recorder.total("activation").reference
    figure_note = (
        f"The histogram figure shows the fp32 run's activation gradients: rounded once to "
        f"{f.name}, {_pct(h.lost_fraction(f.name))} of the non-zero ones would be 0; after "
        f"x {pow2(S)}, {_pct(h.lost_fraction(f.name, S))}."
    )
    print(textwrap.fill(figure_note, 96))
    if not args.no_plots:
        default = args.fmt == "fp16" and args.scale is None
        stem = "underflow" if default else f"underflow_{args.fmt}" + ("_static" if args.scale
                                                                      else "")  # fmt: skip
        paths = figures(runs, f.name, args.out, stem)
        print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0
