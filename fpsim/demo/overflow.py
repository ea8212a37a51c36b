"""``python -m fpsim.demo overflow``: a loss scale that is too large.

The underflow demo's model and task in fp16 (``--format``), with dynamic loss scaling started far
too high (2^40) and a short growth interval: the scaled gradients overflow to inf, the step is
skipped and the scale halved, until they fit; then the scale grows again every
``--growth-interval`` clean steps, overflows, backs off -- the sawtooth. Next to it, a *static*
scale of the same size: every step that overflows is skipped, so when all do the model never
trains. A :class:`~fpsim.stats.GradientRecorder` on the dynamic run collects the true gradients,
and :func:`~fpsim.stats.suggest_scale` says which scales would have been safe. Every sentence
printed is computed from the run (a scale that fits prints that it fits).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ._common import (
    PROG,
    SCALE_HELP,
    ScaleHistory,
    add_output_args,
    add_training_args,
    autocast_format_arg,
    fit_title,
    log2_text,
    parse_args,
    power_of_two_scale,
    quiet_numba,
    save_figure,
    show_progress,
    style_reference,
    tex_pow2,
    times,
    whole_number,
)

DEFAULTS = dict(fmt="fp16", init_scale=2.0**40, growth_interval=50, steps=300, seed=0, lr=3e-3,
                samples=4096)  # fmt: skip
FINAL_WINDOW = 10  # steps averaged into the final loss


@dataclasses.dataclass
class Runs:
    reference: Any  # fp32 TrainResult
    dynamic: Any
    static: Any
    nonfinite: list[int]  # per step of the dynamic run: inf/NaN values among the gradients
    values: int  # gradients per step
    recorder: Any
    fmt: Any = None  # the low-precision Format


def run(init_scale=2.0**40, growth_interval=50, steps=300, seed=0, lr=3e-3, samples=4096,
        progress=None, fmt="fp16") -> Runs:  # fmt: skip
    """fp32, then ``fmt`` autocast with dynamic scaling from ``init_scale`` (a GradientRecorder
    and an inf/NaN count on every step), then ``fmt`` with the static scale ``init_scale``."""
    from fpsim import amp, nn
    from fpsim.formats import get_format
    from fpsim.stats import DEFAULT_FORMATS, GradientRecorder

    f = get_format(fmt)
    X, Y = amp.underflow_task(samples, seed=seed)
    kw = dict(steps=steps, lr=lr, seed=seed, progress=progress)
    ref = amp.train(amp.underflow_model(seed=seed), (X, Y), "fp32", **kw)
    replace = dataclasses.replace
    dyn_recipe = replace(amp.recipe("fp16_dynamic"), name=f"{f.name}_dynamic", autocast=f,
                         init_scale=float(init_scale),
                         growth_interval=int(growth_interval))  # fmt: skip
    model = amp.underflow_model(seed=seed)
    # the Linear layers and the final Scale: its output gradient (the loss's input) is the
    # largest of the model, 2^8 times the last Linear's, and the first to overflow
    recorder = GradientRecorder(model, layers=(nn.Linear, amp.Scale),
                                formats=(*DEFAULT_FORMATS, f))  # fmt: skip
    nonfinite: list[int] = []
    sizes: list[int] = []

    def on_backward(state) -> None:
        grads = state.named_grads(unscaled=False).values()  # as stored: scaled
        nonfinite.append(sum(int(np.count_nonzero(~np.isfinite(g))) for g in grads))
        sizes.append(sum(g.size for g in grads))
        recorder.on_backward(state)

    dyn = amp.train(model, (X, Y), dyn_recipe, on_backward=on_backward, **kw)
    recorder.remove()
    static_recipe = replace(amp.recipe("fp16_static", scale=init_scale),
                            name=f"{f.name}_static", autocast=f)  # fmt: skip
    static = amp.train(amp.underflow_model(seed=seed), (X, Y), static_recipe, **kw)
    return Runs(ref, dyn, static, nonfinite, sizes[0] if sizes else 0, recorder, f)


def leading_skips(res) -> int:
    """How many steps were skipped before the first one taken."""
    taken = np.flatnonzero(~res.skipped)
    return int(taken[0]) if taken.size else int(res.skipped.size)


def step_log(r: Runs, head: int = 14) -> str:
    """The first steps of the dynamic run, one line each, then the later overflows."""
    res = r.dynamic
    lines = [f"{'step':>5}  {'scale':>6}  {'inf/NaN gradients':>18}  {'skipped':>7}  loss"]
    shown = range(min(len(res.scales), max(head, leading_skips(res) + 2)))
    for i in shown:
        lines.append(
            f"{i:>5}  {log2_text(res.scales[i]):>6}  {r.nonfinite[i]:>8,} of {r.values:<7,}"
            f"  {'yes' if res.skipped[i] else 'no':>7}  {res.losses[i]:.4g}"
        )
    later = [i for i in np.flatnonzero(res.skipped) if i >= len(shown)]
    if len(shown) < len(res.scales):
        lines.append("  ...")
    if later:
        lines.append(
            "later overflows (step: scale): "
            + ", ".join(f"{i}: {log2_text(res.scales[i])}" for i in later)
        )
    return "\n".join(lines)


def _ratio(loss: float, ref: float) -> str:
    return f"{loss / ref:.2f}x" if ref and math.isfinite(ref) and math.isfinite(loss) else "-"


def table(r: Runs, init_scale: float, growth_interval: int) -> str:
    ref = r.reference.final_loss(FINAL_WINDOW)
    name = r.fmt.name
    rows = [
        ("fp32", r.reference, "-"),
        (f"{name}, dynamic from {log2_text(init_scale)} (growth every {growth_interval})",
         r.dynamic, log2_text(float(r.dynamic.scales[-1]))),
        (f"{name}, static {log2_text(init_scale)}", r.static,
         log2_text(float(r.static.scales[-1]))),
    ]  # fmt: skip
    w = max(len(name) for name, _, _ in rows)
    out = [f"{'recipe':{w}}  {'skipped':>7}  {'final scale':>11}  final loss"]
    for label, res, scale in rows:
        loss = res.final_loss(FINAL_WINDOW)
        out.append(
            f"{label:{w}}  {f'{int(res.skipped.sum())}/{res.skipped.size}':>7}  {scale:>11}  "
            f"{loss:.4g} ({_ratio(loss, ref)} fp32)"
        )
    return "\n".join(out)


def _s(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def static_story(res, S: float) -> str:
    """What the static scale did, from its skipped steps."""
    k, n = int(res.skipped.sum()), int(res.skipped.size)
    if k == n:
        return f"The static {log2_text(S)} never takes a step: all {n} overflow and are skipped."
    if k == 0:
        return f"The static {log2_text(S)} never overflows: it takes all {n} steps."
    return (f"The static {log2_text(S)} skips {k} of {n} steps (those that overflow) and takes "
            f"the other {n - k}.")  # fmt: skip


def dynamic_story(r: Runs) -> str:
    """What the dynamic scaler did, from its scales and skipped steps."""
    res = r.dynamic
    h = ScaleHistory.of(res)
    first = leading_skips(res)
    n = int(res.skipped.size)
    if first == n:
        return (f"The dynamic scaler halves from {log2_text(h.first)} at every step and finds "
                f"no scale that fits in {n} steps.")  # fmt: skip
    if first:
        text = (f"The dynamic scaler halves its way down from {log2_text(h.first)} to "
                f"{log2_text(res.scales[first])} in {_s(first, 'skipped step')}")  # fmt: skip
    else:
        text = f"The dynamic scaler's first scale, {log2_text(h.first)}, fits at once"
    later = int(res.skipped[first:].sum())
    grew = int(np.count_nonzero(np.diff(res.scales[first:]) > 0))
    if grew:
        text += f"; it then doubles {times(grew)} after {h.growth_interval} clean steps"
    if later:
        text += f" and overflows {times(later)} more, halving each time"
    elif n - first > h.growth_interval:
        text += " and never overflows" + (" again" if first else "")
    return text + f"; its last scale is {log2_text(h.final)}."


def gradient_note(r: Runs, S: float) -> str:
    """The true gradients' range, the scales suggest_scale finds safe, and where S lies."""
    from fpsim.stats import suggest_scale

    f = r.fmt
    ref = r.recorder.total().reference
    exps, _ = ref.bins()
    n = len(r.recorder.steps)
    if not exps.size:
        return f"The true gradients of the {n} steps are all zero."
    text = (
        f"The true gradients of the {n} steps (recorded in fp32 next to the dynamic run) span "
        f"2^{int(exps[0])} .. 2^{int(exps[-1]) + 1}"
    )
    try:
        sug = suggest_scale(ref, f)
    except ValueError:
        return text + f"; no power-of-two scale keeps them all below {f.name}'s overflow."
    k = int(math.log2(S))
    which = (f"the scale 2^{sug.lo} keeps" if sug.lo == sug.hi
             else f"any scale from 2^{sug.lo} to 2^{sug.hi} keeps")  # fmt: skip
    text += (
        f"; suggest_scale: {which} them all below {f.name}'s overflow threshold and loses "
        f"{100 * sug.underflow_fraction:.2g}% to zero (the fewest). "
    )
    if k > sug.hi:
        text += (f"The starting scale 2^{k} is 2^{k - sug.hi} times the largest of those: the "
                 "largest gradients overflow.")  # fmt: skip
    elif k >= sug.lo:
        text += f"The starting scale 2^{k} is one of those."
    else:
        text += (f"The starting scale 2^{k} is below them: nothing overflows, but more "
                 "underflows than need be.")  # fmt: skip
    return text


def figures(r: Runs, out: str | Path, init_scale: float, growth_interval: int,
            stem: str = "overflow") -> list[Path]:  # fmt: skip
    from fpsim.plot import plot_loss_curves, plot_scale_trajectory

    res, name = r.dynamic, r.fmt.name
    S = tex_pow2(init_scale)
    fig = plot_scale_trajectory(res.scales, skipped=res.skipped)
    fit_title(fig.axes[0], f"Loss scale per step, {name}: GradScaler from {S}, ×2 after "
              f"{growth_interval} clean steps, ×½ at an overflow\n"
              f"{ScaleHistory.of(res).story(tex=True)}")  # fmt: skip
    paths = [save_figure(fig, out, f"{stem}_scale.png")]
    k, n = int(r.static.skipped.sum()), int(r.static.skipped.size)
    skipped = ("every step skipped" if k == n else "no step skipped" if k == 0
               else f"{k} of {n} steps skipped")  # fmt: skip
    fig = plot_loss_curves({
        "fp32": r.reference.losses,
        f"{name}, dynamic from {S}": res.losses,
        f"{name}, static {S}: {skipped}": r.static.losses,
    })  # fmt: skip
    ax = fig.axes[0]
    style_reference(ax)
    if k == n:
        title = f"Training loss: the static {S} overflows at every step, so it never trains"
    elif k == 0:
        title = f"Training loss: the static {S} never overflows"
    else:
        title = f"Training loss: the static {S} skips {k} of {n} steps"
    fit_title(ax, title, fontsize=11)
    paths.append(save_figure(fig, out, f"{stem}_loss.png"))
    return paths


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} overflow",
        description="Loss scaling with a scale that is too large: the scaled gradients overflow "
        "to inf, GradScaler skips the step and halves the scale, then grows it again (the "
        "sawtooth); a static scale that is too large skips every step.",
    )
    parser.add_argument("--format", default="fp16", type=autocast_format_arg, dest="fmt",
                        help="the low-precision (autocast) format, any name fpsim.get_format "
                        "reads (fp16, bf16, e5m2, e4m3, 'Format(4, 3)', ...); narrower than fp32 "
                        "and held by it (default: %(default)s)")  # fmt: skip
    parser.add_argument("--init-scale", type=power_of_two_scale, default=DEFAULTS["init_scale"],
                        metavar="S", help=f"the starting (and the static) scale: {SCALE_HELP} "
                        "(default: 2**40)")  # fmt: skip
    parser.add_argument("--growth-interval", type=whole_number(1, 10**6),
                        default=DEFAULTS["growth_interval"], metavar="N",
                        help="double the scale after N clean steps (default: %(default)s; "
                        "PyTorch's is 2000)")  # fmt: skip
    add_training_args(parser, DEFAULTS["steps"], DEFAULTS["seed"], DEFAULTS["lr"])
    add_output_args(parser)
    args = parse_args(parser, argv)

    quiet_numba()
    f, S, gi = args.fmt, args.init_scale, args.growth_interval
    over = "inf" if f.has_inf else "NaN (it has no inf)"
    intro = (
        f"The underflow demo's model and task (python -m fpsim.demo underflow) in {f.name}, "
        f"{args.steps} steps of Adam (lr {args.lr:g}, seed {args.seed}), with the loss scale "
        f"started at {log2_text(S)}. A scaled gradient that rounds beyond {f.name}'s largest "
        f"value {f.max:g} becomes {over}, and the step is skipped."
    )
    print(textwrap.fill(intro, 96) + "\n")
    r = run(S, gi, args.steps, args.seed, args.lr, DEFAULTS["samples"],
            progress=show_progress(args.quiet), fmt=f)  # fmt: skip
    print(f"Dynamic loss scaling from {log2_text(S)}, growth every {gi} clean steps:")
    print(step_log(r))
    print()
    print(table(r, S, gi))
    print(f"\nfinal scale: the scale of the last step; final loss: the mean of the last "
          f"{min(FINAL_WINDOW, args.steps)} steps.")  # fmt: skip
    print("\n" + textwrap.fill(gradient_note(r, S), 96))
    print("\n" + textwrap.fill(f"{static_story(r.static, S)} {dynamic_story(r)}", 96))
    if not args.no_plots:
        stem = "overflow" if f.name == "fp16" else f"overflow_{f.name}"
        paths = figures(r, args.out, S, gi, stem)
        print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0
