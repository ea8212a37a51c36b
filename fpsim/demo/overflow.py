"""``python -m fpsim.demo overflow``: a loss scale that is too large.

The underflow demo's model and task in fp16, with dynamic loss scaling started far too high
(2^40) and a short growth interval: the scaled gradients overflow to inf, the step is skipped
and the scale halved, until they fit; then the scale grows again every ``--growth-interval``
clean steps, overflows, backs off -- the sawtooth. Next to it, a *static* scale that is too
large: every step overflows and is skipped, so the model never trains. A
:class:`~fpsim.stats.GradientRecorder` on the dynamic run collects the true gradients, and
:func:`~fpsim.stats.suggest_scale` says which scales would have been safe.
"""

from __future__ import annotations

import argparse
import dataclasses
import textwrap
from pathlib import Path

import numpy as np

from ._common import (
    PROG,
    add_output_args,
    log2_text,
    positive_int,
    quiet_numba,
    save_figure,
    scale_value,
)


@dataclasses.dataclass
class Runs:
    reference: object  # fp32 TrainResult
    dynamic: object
    static: object
    nonfinite: list[int]  # per step of the dynamic run: inf/NaN values among the gradients
    values: int  # gradients per step
    recorder: object


def run(init_scale=2.0**40, growth_interval=50, steps=300, seed=0, lr=3e-3, samples=4096,
        progress=None) -> Runs:  # fmt: skip
    from fpsim import amp, nn
    from fpsim.stats import GradientRecorder

    X, Y = amp.underflow_task(samples, seed=seed)
    kw = dict(steps=steps, lr=lr, seed=seed, progress=progress)
    ref = amp.train(amp.underflow_model(seed=seed), (X, Y), "fp32", **kw)
    dyn_recipe = dataclasses.replace(amp.recipe("fp16_dynamic"), init_scale=float(init_scale),
                                     growth_interval=int(growth_interval))  # fmt: skip
    model = amp.underflow_model(seed=seed)
    # the Linear layers and the final Scale: its output gradient (the loss's input) is the
    # largest of the model, 2^8 times the last Linear's, and the first to overflow
    recorder = GradientRecorder(model, layers=(nn.Linear, amp.Scale))
    nonfinite: list[int] = []
    sizes: list[int] = []

    def on_backward(state) -> None:
        grads = state.named_grads(unscaled=False).values()  # as stored: scaled
        nonfinite.append(sum(int(np.count_nonzero(~np.isfinite(g))) for g in grads))
        sizes.append(sum(g.size for g in grads))
        recorder.on_backward(state)

    dyn = amp.train(model, (X, Y), dyn_recipe, on_backward=on_backward, **kw)
    recorder.remove()
    static = amp.train(amp.underflow_model(seed=seed), (X, Y),
                       amp.recipe("fp16_static", scale=init_scale), **kw)  # fmt: skip
    return Runs(ref, dyn, static, nonfinite, sizes[0] if sizes else 0, recorder)


def step_log(r: Runs, head: int = 14) -> str:
    """The first steps of the dynamic run, one line each, then the later overflows."""
    res = r.dynamic
    lines = [f"{'step':>5}  {'scale':>6}  {'inf/NaN gradients':>18}  {'skipped':>7}  loss"]
    first_good = int(np.argmin(res.skipped)) if not res.skipped.all() else len(res.skipped)
    shown = range(min(len(res.scales), max(head, first_good + 2)))
    for i in shown:
        lines.append(
            f"{i:>5}  {log2_text(res.scales[i]):>6}  {r.nonfinite[i]:>8,} of {r.values:<7,}"
            f"  {'yes' if res.skipped[i] else 'no':>7}  {res.losses[i]:.4g}"
        )
    later = [i for i in np.flatnonzero(res.skipped) if i >= len(shown)]
    if later:
        lines.append("  ...")
        lines.append(
            "later overflows (step: scale): "
            + ", ".join(f"{i}: {log2_text(res.scales[i])}" for i in later)
        )
    return "\n".join(lines)


def table(r: Runs, init_scale: float, growth_interval: int) -> str:
    ref = r.reference.final_loss()
    rows = [
        ("fp32", r.reference, "-"),
        (f"fp16, dynamic from {log2_text(init_scale)} (growth every {growth_interval})",
         r.dynamic, log2_text(float(r.dynamic.scaler.get_scale()))),
        (f"fp16, static {log2_text(init_scale)}", r.static,
         log2_text(float(r.static.scaler.get_scale()))),
    ]  # fmt: skip
    w = max(len(name) for name, _, _ in rows)
    out = [f"{'recipe':{w}}  {'skipped':>7}  {'final scale':>11}  final loss"]
    for name, res, scale in rows:
        loss = res.final_loss()
        out.append(
            f"{name:{w}}  {f'{int(res.skipped.sum())}/{res.skipped.size}':>7}  {scale:>11}  "
            f"{loss:.4g} ({loss / ref:.2f}x fp32)"
        )
    return "\n".join(out)


def figures(r: Runs, out: str | Path, init_scale: float, growth_interval: int) -> list[Path]:
    from fpsim.plot import plot_loss_curves, plot_scale_trajectory

    res = r.dynamic
    fig = plot_scale_trajectory(res.scales, skipped=res.skipped)
    fig.axes[0].set_title(
        f"Loss scale from {log2_text(init_scale)}, x2 after {growth_interval} clean steps: "
        "halved at each overflow (step skipped), then the sawtooth",
        loc="left", fontsize=10,
    )  # fmt: skip
    paths = [save_figure(fig, out, "overflow_scale.png")]
    fig = plot_loss_curves({
        "fp32": r.reference.losses,
        f"fp16, dynamic from {log2_text(init_scale)}": res.losses,
        f"fp16, static {log2_text(init_scale)}: every step skipped": r.static.losses,
    })  # fmt: skip
    ax = fig.axes[0]
    ax.get_lines()[0].set(color="black", linestyle="--", linewidth=1.3, zorder=3)
    ax.legend(fontsize=9)
    ax.set_title("Training loss: a static scale that always overflows never trains", loc="left")
    paths.append(save_figure(fig, out, "overflow_loss.png"))
    return paths


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} overflow",
        description="Loss scaling with a scale that is too large: the scaled gradients overflow "
        "to inf, GradScaler skips the step and halves the scale, then grows it again (the "
        "sawtooth); a static scale that is too large skips every step.",
    )
    parser.add_argument("--init-scale", type=scale_value, default=2.0**40, metavar="S",
                        help="the starting (and the static) scale (default: 2**40)")  # fmt: skip
    parser.add_argument("--growth-interval", type=positive_int, default=50, metavar="N",
                        help="double the scale after N clean steps (default: %(default)s; "
                        "PyTorch's is 2000)")  # fmt: skip
    parser.add_argument("--steps", type=positive_int, default=300,
                        help="optimizer steps per recipe (default: %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    add_output_args(parser)
    args = parser.parse_args(argv)

    from fpsim.stats import suggest_scale

    quiet_numba()
    S, gi = args.init_scale, args.growth_interval
    intro = (
        f"The underflow demo's model and task (python -m fpsim.demo underflow) in fp16, "
        f"{args.steps} steps, with the loss scale started at {log2_text(S)}: far more than the "
        f"gradients (about 2^-40 .. 2^-10) can take before the largest reach fp16's max 65504."
    )
    print(textwrap.fill(intro, 96) + "\n")
    r = run(S, gi, args.steps, args.seed)
    print(f"Dynamic loss scaling from {log2_text(S)}, growth every {gi} clean steps:")
    print(step_log(r))
    print()
    print(table(r, S, gi))
    sug = suggest_scale(r.recorder.total().reference, "fp16")
    hi_bin = r.recorder.total().reference.bins()[0]
    note = (
        f"The true gradients of the {len(r.recorder.steps)} steps (recorded in fp32 next to the "
        f"dynamic run) span 2^{int(hi_bin[0])} .. 2^{int(hi_bin[-1]) + 1}; suggest_scale: any "
        f"scale from 2^{sug.lo} to 2^{sug.hi} keeps them all below fp16's overflow threshold "
        f"and loses {100 * sug.underflow_fraction:.2g}% to zero. The static "
        f"{log2_text(S)} never takes a step (each one overflows and is skipped); the dynamic "
        f"scaler finds a safe scale by halving, and keeps probing upward."
    )
    print("\n" + textwrap.fill(note, 96))
    if not args.no_plots:
        paths = figures(r, args.out, S, gi)
        print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0
