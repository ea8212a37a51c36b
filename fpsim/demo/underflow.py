"""``python -m fpsim.demo underflow``: fp16 gradients fall off the bottom of the format, and a
loss scale lifts them back.

A small tanh MLP is trained on :func:`fpsim.amp.underflow_task` (targets in units of 2^-8, so
every gradient is 2^-16 times that of the same problem in standardised units) under three
recipes: fp32; the low-precision format without loss scaling; and with dynamic loss scaling
(GradScaler from 2^16, doubling after every ``--growth-interval`` clean steps -- 100 here, so
that the growth shows within the run; PyTorch's default waits 2000) or a static scale
``--scale S``. A :class:`~fpsim.stats.GradientRecorder` compares, at every
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

from ._common import (
    PROG,
    SCALE_HELP,
    ScaleHistory,
    add_output_args,
    add_training_args,
    autocast_format_arg,
    fit_title,
    parse_args,
    pct,
    pow2,
    power_of_two_scale,
    quiet_numba,
    save_figure,
    show_progress,
    style_reference,
    tex_pow2,
    whole_number,
)

DEFAULTS = dict(fmt="fp16", scale=None, steps=500, seed=0, lr=3e-3, samples=4096,
                growth_interval=100)  # fmt: skip
BATCH = 64  # train()'s mini-batch
FINAL_WINDOW = 10  # steps averaged into the final loss
PYTORCH_GROWTH_INTERVAL = 2000  # GradScaler's default, for the text


@dataclasses.dataclass
class Run:
    """One recipe's training: its label in the table, the recipe, what train() returned and
    the recorder that watched its gradients."""

    label: str
    recipe: Any
    result: Any
    recorder: Any


def recipes(
    fmt: Any = "fp16", scale: float | None = None, growth_interval: int = 100
) -> list[tuple[str, Any]]:
    """``[(label, Recipe)]``: fp32, ``fmt`` without scaling, ``fmt`` with dynamic scaling
    (GradScaler from 2^16, x2 after ``growth_interval`` clean steps) or the static ``scale``."""
    from fpsim.amp import recipe
    from fpsim.formats import get_format

    f = get_format(fmt)
    replace = dataclasses.replace
    base = replace(recipe("fp16"), name=f.name, autocast=f,
                   description=f"{f.name} autocast, no scaling")  # fmt: skip
    if scale is None:
        scaled = replace(base, name=f"{f.name}_dynamic", scaling="dynamic",
                         growth_interval=int(growth_interval),
                         description=f"{f.name} autocast + dynamic loss scaling")  # fmt: skip
        label = f"{f.name} + dynamic scaling"
    else:
        scaled = replace(base, name=f"{f.name}_static", scaling="static", init_scale=float(scale),
                         description=f"{f.name} autocast, static loss scale {scale:g}")  # fmt: skip
        label = f"{f.name} + static scale 2^{int(math.log2(scale))}"
    return [("fp32", recipe("fp32")), (f"{f.name}, no scaling", base), (label, scaled)]


def run(
    fmt: Any = "fp16",
    scale: float | None = None,
    steps: int = 500,
    seed: int = 0,
    lr: float = 3e-3,
    samples: int = 4096,
    progress: bool | None = None,
    growth_interval: int = 100,
) -> list[Run]:
    """Train one fresh model per recipe (same seed: same data, initial weights and batch
    order), recording every step's gradients next to the true ones."""
    return train_all(recipes(fmt, scale, growth_interval), steps, seed, lr, samples, progress)


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
    from fpsim.stats import DEFAULT_FORMATS, GradientRecorder

    X, Y = amp.underflow_task(samples, seed=seed)
    # the recorders answer zone questions exactly for these formats (the figures ask about the
    # recipes' own low-precision formats, which need not be among the defaults)
    formats = (*DEFAULT_FORMATS, *(r.autocast for _, r in pairs if r.autocast is not None))
    runs = []
    for label, rec in pairs:
        model = amp.underflow_model(seed=seed)
        recorder = GradientRecorder(model, formats=formats)
        result = amp.train(model, (X, Y), rec, steps=steps, lr=lr, seed=seed, batch_size=BATCH,
                           on_backward=recorder.on_backward, progress=progress)  # fmt: skip
        recorder.remove()
        runs.append(Run(label, rec, result, recorder))
    return runs


def _pct(x: float) -> str:
    return pct(x)


def final_scale(run: Run) -> float:
    """The scale the last step used (the table's "final scale", the one the figures draw;
    an update after the last step would be used by no step)."""
    return float(run.result.scales[-1])


def final_loss(run: Run) -> float:
    return run.result.final_loss(FINAL_WINDOW)


def table(runs: list[Run]) -> str:
    """The printed table: per recipe, % of the non-zero true gradients lost to zero and kept
    as subnormals (activation / weight gradients), the final loss, skipped steps, final scale."""
    ref = final_loss(runs[0])
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
        loss = final_loss(r)
        ratio = loss / ref if ref and math.isfinite(ref) else math.nan
        scaled = r.recipe.scaling != "none"
        lines.append(
            f"{r.label:{w}}  {_pct(a.lost_fraction):>8} {_pct(g.lost_fraction):>8}  "
            f"{_pct(a.subnormal_fraction):>8} {_pct(g.subnormal_fraction):>8}  "
            f"{loss:9.4g} ({ratio:5.2f}x)  "
            f"{f'{int(res.skipped.sum())}/{res.skipped.size}':>7}  "
            f"{pow2(final_scale(r)) if scaled else '-'}"
        )
    return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines())


NOTES = """\
lost to zero: the share of the non-zero true gradients that the run produced as exactly 0,
  element by element at every step (true: the same weights and batch through an fp32 copy of
  the model, no loss scale); activ. = gradients of each Linear layer's output, weights = of
  its weight and bias.
subnormal: the share kept only as {fmt} subnormals (0 < |g x S| < {tiny}: fewer significant
  bits), judged on the values as stored, i.e. multiplied by the loss scale S.
final loss: the mean of the last {window} steps, and its ratio to fp32's. final scale: the loss
  scale of the last step."""


def mlp_shape(model) -> str:
    """``16-64-64-4 tanh MLP``, read off the model itself."""
    from fpsim import amp, nn

    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    sizes = [linears[0].in_features] + [m.out_features for m in linears]
    acts = {type(m).__name__.lower() for m in model.modules()
            if not isinstance(m, (nn.Linear, amp.Scale, nn.Sequential))}  # fmt: skip
    act = "/".join(sorted(acts)) + " " if acts else ""
    return f"{'-'.join(map(str, sizes))} {act}MLP"


def describe_model(model) -> str:
    """``16-64-64-4 tanh MLP`` and the output unit, read off the model itself."""
    from fpsim import amp

    unit = next(m.c for m in model.modules() if isinstance(m, amp.Scale))
    k = math.log2(unit)
    unit_text = f"2^{int(k)}" if k.is_integer() else f"{unit:g}"
    grad_text = f"2^{int(2 * k)}" if k.is_integer() else f"{unit**2:g}"
    return (
        f"A {mlp_shape(model)} whose output is multiplied by {unit_text} "
        f"(targets in units of {unit_text}, so every gradient is {grad_text} times that of the "
        "same problem in standardised units)"
    )


def layer_names(model) -> dict[str, str]:
    """``'0.2'`` -> ``'layer 2: Linear 64→64'`` for the panels (the module paths are no help
    to a reader)."""
    out = {}
    linear = [(n, m) for n, m in model.named_modules()
              if hasattr(m, "in_features") and hasattr(m, "out_features")]  # fmt: skip
    for i, (name, m) in enumerate(linear, 1):
        role = " (output)" if i == len(linear) else ""
        out[name] = f"layer {i}{role}: {type(m).__name__} {m.in_features}→{m.out_features}"
    return out


def figures(runs: list[Run], fmt, out: str | Path, stem: str = "underflow") -> list[Path]:
    """Write ``{stem}_histogram.png`` (the true activation gradients, all layers, unscaled and
    scaled), ``{stem}_layers.png`` (per layer, activation and weight gradients),
    ``{stem}_loss.png`` and ``{stem}_scale.png``; return the paths."""
    from fpsim.formats import get_format
    from fpsim.plot import (
        plot_histograms_side_by_side,
        plot_layer_histograms,
        plot_loss_curves,
        plot_scale_trajectory,
    )

    f = get_format(fmt)
    fp32, plain, scaled = runs[0], runs[1], runs[-1]
    S = final_scale(scaled)
    steps = len(fp32.recorder.steps)
    paths = []
    hist = fp32.recorder.total("activation").reference
    fig = plot_histograms_side_by_side(hist, f, scales=(1, S))
    fig.suptitle(
        f"fp32 training's activation gradients (all layers, {steps} steps) against {f.name}'s "
        f"range: as they are, and × the final loss scale {tex_pow2(S)}"
    )
    paths.append(save_figure(fig, out, f"{stem}_histogram.png"))

    names = layer_names(fp32.result.model)
    panels = {}
    for kind, short in (("activation", "activation grads"), ("weight", "weight grads")):
        for layer, h in fp32.recorder.histograms(kind).items():
            panels[f"{names.get(layer, layer)}, {short}"] = h
    fig = plot_layer_histograms(panels, f, scale=S)
    fig.suptitle(f"Per layer: true gradients against {f.name}'s range, and × {tex_pow2(S)}")
    paths.append(save_figure(fig, out, f"{stem}_layers.png"))

    fig = plot_loss_curves({r.label: r.result.losses for r in runs})
    ax = fig.axes[0]
    style_reference(ax)
    ref, lo, hi = final_loss(fp32), final_loss(plain), final_loss(scaled)
    fit_title(ax, f"Training loss (final: fp32 {ref:.3g}; {plain.label} {lo:.3g}; "
                  f"{scaled.label} {hi:.3g})")  # fmt: skip
    paths.append(save_figure(fig, out, f"{stem}_loss.png"))

    res, rec = scaled.result, scaled.recipe
    fig = plot_scale_trajectory(res.scales, skipped=res.skipped)
    if rec.scaling == "dynamic":
        how = (f"GradScaler from {tex_pow2(rec.init_scale)}, ×2 after {rec.growth_interval} "
               "clean steps")  # fmt: skip
        if rec.growth_interval != PYTORCH_GROWTH_INTERVAL:
            how += f" (PyTorch's default: {PYTORCH_GROWTH_INTERVAL}, too slow to show here)"
        how += ", ×½ at an overflow"
    else:
        how = "a static scale"
    fit_title(fig.axes[0], f"Loss scale per step, {scaled.label}: {how}\n"
              f"{ScaleHistory.of(res).story(tex=True)}")  # fmt: skip
    paths.append(save_figure(fig, out, f"{stem}_scale.png"))
    return paths


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} underflow",
        description="Train a small model whose gradients underflow fp16 under fp32, the "
        "low-precision format without loss scaling, and with loss scaling; print how many of "
        "the true gradients each run lost to zero, and draw the gradient histograms over the "
        "format's range, the loss curves and the loss-scale trajectory.",
    )
    parser.add_argument("--format", default="fp16", type=autocast_format_arg, dest="fmt",
                        help="the low-precision (autocast) format, any name fpsim.get_format "
                        "reads: fp16, bf16, e5m2, e4m3, e4m3_ieee, 'Format(4, 3)', ...; it must "
                        "be narrower than fp32 and held by it (default: %(default)s)")  # fmt: skip
    parser.add_argument("--scale", type=power_of_two_scale, default=None, metavar="S",
                        help=f"a static loss scale S instead of dynamic scaling: {SCALE_HELP}")
    parser.add_argument("--growth-interval", type=whole_number(1, 10**6), default=None,
                        metavar="N", help="dynamic scaling doubles the scale after N clean steps "
                        f"(default: {DEFAULTS['growth_interval']}, so that the growth shows "
                        f"within the run; PyTorch's is {PYTORCH_GROWTH_INTERVAL})")  # fmt: skip
    add_training_args(parser, DEFAULTS["steps"], DEFAULTS["seed"], DEFAULTS["lr"])
    add_output_args(parser)
    args = parse_args(parser, argv)
    if args.scale is not None and args.growth_interval is not None:
        parser.error("--growth-interval: only dynamic scaling grows the scale; with a static "
                     "--scale give one or the other")  # fmt: skip
    gi = DEFAULTS["growth_interval"] if args.growth_interval is None else args.growth_interval

    from fpsim import amp

    quiet_numba()
    f = args.fmt
    intro = (
        f"{describe_model(amp.underflow_model(seed=args.seed))}, trained on "
        f"amp.underflow_task ({DEFAULTS['samples']} samples) for {args.steps} steps of Adam "
        f"(lr {args.lr:g}, batch {BATCH}, seed {args.seed}), three ways. At every step each "
        "gradient is compared with the true (fp32) one."
    )
    print(textwrap.fill(intro, 96) + "\n")
    runs = run(f, args.scale, args.steps, args.seed, args.lr, DEFAULTS["samples"],
               progress=show_progress(args.quiet), growth_interval=gi)  # fmt: skip
    print(table(runs))
    print()
    print(NOTES.format(fmt=f.name, tiny=f"2^{f.emin}", window=min(FINAL_WINDOW, args.steps)))
    print("\n" + textwrap.fill(summary(runs, f), 96))
    if not args.no_plots:
        default = f.name == "fp16" and args.scale is None
        stem = "underflow" if default else f"underflow_{f.name}" + ("_static" if args.scale
                                                                    else "")  # fmt: skip
        paths = figures(runs, f, args.out, stem)
        print("\n" + textwrap.fill(figure_note(runs, f), 96))
        print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


def summary(runs: list[Run], f) -> str:
    """What the table says, in words; every number is one of the table's."""
    plain, scaled = runs[1], runs[2]
    a0, a1 = plain.recorder.total("activation"), scaled.recorder.total("activation")
    h = ScaleHistory.of(scaled.result)
    if h.scaling == "static":
        how = f"with the static loss scale {pow2(h.first)}"
    elif h.grew or h.backed_off:
        how = (f"with dynamic loss scaling (the scale went from {pow2(h.first)} to "
               f"{pow2(h.final)})")  # fmt: skip
    else:
        how = f"with dynamic loss scaling (the scale stayed at {pow2(h.first)})"
    text = (
        f"Without scaling, {_pct(a0.lost_fraction)} of the non-zero true activation gradients "
        f"became 0 in {f.name}; {how}, {_pct(a1.lost_fraction)} did."
    )
    lo, hi = int(math.log2(h.lowest)), int(math.log2(h.highest))
    if hi <= 0:
        text += f" A scale of 2^{hi} or less lifts no gradient's exponent."
    elif lo == hi:
        text += f" Multiplying by 2^{lo} adds {lo} to every gradient's exponent in {f.name}."
    else:
        text += f" The scale, 2^{lo} to 2^{hi}, adds {lo} to {hi} to every gradient's exponent."
    if a1.lost_fraction >= a0.lost_fraction:
        text += " Scaling did not lower the share lost."
    skipped = int(scaled.result.skipped.sum())
    if skipped:
        text += f" {skipped} of its {scaled.result.skipped.size} steps overflowed and were skipped."
    return text


def figure_note(runs: list[Run], f) -> str:
    """The histogram figure's numbers: the fp32 run's activation gradients rounded once."""
    h = runs[0].recorder.total("activation").reference
    S = final_scale(runs[-1])
    return (
        f"The histogram figure shows the fp32 run's activation gradients: rounded once to "
        f"{f.name}, {_pct(h.lost_fraction(f))} of the non-zero ones would be 0; after "
        f"x {pow2(S)}, {_pct(h.lost_fraction(f, S))}."
    )
