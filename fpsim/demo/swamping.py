"""``python -m fpsim.demo swamping``: fp16 weights lose small updates; fp32 master weights keep
them.

Part 1, one weight: ``w = 1.0`` in fp16 (``--format``) has the neighbours 1 + 2^-10 and
1 - 2^-11, so an update of at most half that spacing rounds straight back to ``w`` (it is
*swamped*); sixteen updates of -2^-12 leave the fp16 weight at 1.0, while an fp32 master copy
moves by 16 x 2^-12 and rounds to a new fp16 value (for another format the numbers follow its
mantissa width). Part 2, training: the underflow demo's MLP in *standardised* units (no gradient
underflows here, so only the weight update matters), held in fp16 and trained with plain SGD,
with and without fp32 master weights (``optim.SGD(..., master_weights=True)``), next to fp32.
Every sentence printed is computed from the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import textwrap
from pathlib import Path

import numpy as np

from ._common import (
    PROG,
    add_output_args,
    add_training_args,
    counted,
    exact_text,
    fit_title,
    log2_text,
    low_format,
    new_figure,
    parse_args,
    quiet_numba,
    save_figure,
    show_progress,
    style_reference,
)

DEFAULTS = dict(fmt="fp16", steps=400, lr=1e-3, seed=0, samples=4096)
BATCH = 64
START_WINDOW, FINAL_WINDOW = 10, 20  # steps averaged into the first and the final loss
ONE_WEIGHT_STEPS = 16


@dataclasses.dataclass
class Run:
    label: str
    losses: np.ndarray
    updates: int  # (element, step) pairs with a non-zero gradient
    kept: int  # ... whose weight (the master, when there is one) changed
    copy_changed: int  # ... whose model weight (the low-precision copy) changed
    kept_per_step: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))


def train(fmt, master: bool, steps: int, lr: float, seed: int, samples: int = 4096,
          progress: bool = False) -> Run:  # fmt: skip
    """SGD on the standardised underflow task with the model held in ``fmt``; counts, for every
    (weight element, step) with a non-zero gradient, whether the weight moved."""
    import fpsim
    from fpsim import amp, data, optim
    from fpsim.formats import get_format
    from fpsim.nn import functional as F

    f = get_format(fmt)
    X, Y = amp.underflow_task(samples, seed=seed, unit=1.0)
    model = amp.underflow_model(seed=seed, unit=1.0, format=f)
    params = list(model.parameters())
    opt = optim.SGD(params, lr=lr, master_weights=master)
    losses = np.empty(steps)
    kept_per_step = np.empty(steps)
    updates = kept = copy_changed = 0
    epoch, it = 0, iter(data.batches(X, Y, batch_size=BATCH, seed=seed))
    label = f"{f.name} weights" + (" + fp32 master" if master else "")
    for step in counted(range(steps), steps, label, progress):
        batch = next(it, None)
        if batch is None:
            epoch += 1
            it = iter(data.batches(X, Y, batch_size=BATCH, seed=seed + epoch))
            batch = next(it)
        xb, yb = fpsim.tensor(batch[0]).to(f), fpsim.tensor(batch[1])
        loss = F.mse_loss(model(xb).float(), yb)  # the loss in fp32
        opt.zero_grad()
        loss.backward()

        def held(p):  # the weight the optimizer updates: the master if there is one
            st = opt.state.get(p, {})
            return st["master"] if "master" in st else p.data

        before = [(held(p).copy(), p.data.copy()) for p in params]
        opt.step()
        step_updates = step_kept = 0
        for p, (w_held, w_copy) in zip(params, before, strict=True):
            moved = p.grad.data != 0
            step_updates += int(np.count_nonzero(moved))
            step_kept += int(np.count_nonzero(moved & (held(p) != w_held)))
            copy_changed += int(np.count_nonzero(moved & (p.data != w_copy)))
        updates += step_updates
        kept += step_kept
        kept_per_step[step] = step_kept / step_updates if step_updates else np.nan
        losses[step] = loss.item()
    return Run(label, losses, updates, kept, copy_changed, kept_per_step)


@dataclasses.dataclass
class OneWeight:
    """Part 1's numbers: ``w = 1.0`` in ``fmt`` and SGD updates of ``u`` (a quarter of the
    spacing above 1, half of the spacing below)."""

    fmt: object
    u: float  # the update lr x grad
    below: float  # the neighbour of 1.0 below
    above: float  # ... and above
    one_step: float  # 1.0 - u, rounded to fmt
    plain: float  # the weight after ONE_WEIGHT_STEPS updates, no master
    master: float  # the fp32 master after them
    with_master: float  # the fmt weight with a master after them


def one_weight(fmt="fp16") -> tuple[str, OneWeight]:
    """Part 1 as text, and its numbers: one weight, ``ONE_WEIGHT_STEPS`` updates of u."""
    import fpsim
    from fpsim import nn, optim
    from fpsim.formats import get_format

    f = get_format(fmt)
    u = 2.0 ** -(f.man_bits + 2)
    w16 = nn.Parameter([1.0], format=f)
    wm = nn.Parameter([1.0], format=f)
    plain = optim.SGD([w16], lr=u)
    master = optim.SGD([wm], lr=u, master_weights=True)
    for _ in range(ONE_WEIGHT_STEPS):
        for w in (w16, wm):
            w.grad = fpsim.tensor([1.0], format=f)
        plain.step()
        master.step()
    nums = OneWeight(f, u, 1 - 2.0 ** -(f.man_bits + 1), 1 + 2.0**-f.man_bits,
                     float(fpsim.round_to(1.0 - u, f)), w16.item(),
                     float(master.state[wm]["master"][0]), wm.item())  # fmt: skip
    total = ONE_WEIGHT_STEPS * u
    if nums.plain == 1.0:
        plain_note = "every update swamped"
    else:
        plain_note = f"moved by {exact_text(nums.plain - 1.0)} of {exact_text(-total)}"
    rounded = float(fpsim.round_to(nums.master, f))
    with_note = (f"the master rounded once to {f.name}" if nums.with_master == rounded
                 else f"not the master rounded to {f.name} ({exact_text(rounded)})")  # fmt: skip
    name = f"{f.name} weight"
    w = len(name) + 20
    lines = [
        fpsim.explain_op(1.0, "-", u, f),
        "",
        f"{ONE_WEIGHT_STEPS} SGD steps of lr x grad = {_p2(u)} each (they should add up "
        f"to -{_p2(total)} = {-total!r}):",
        f"  {f'{name}, no master:':{w}}{nums.plain!r}   ({plain_note})",
        f"  {'fp32 master:':{w}}{nums.master!r}",
        f"  {f'{name} with a master:':{w}}{nums.with_master!r}   ({with_note})",
    ]
    return "\n".join(lines), nums


def _p2(v: float) -> str:
    """``2^-12`` for a power of two, else the exact decimal."""
    text = log2_text(v)
    return text if text.startswith("2^") else exact_text(v)


def part1_intro(n: OneWeight) -> str:
    """The sentence before part 1: w = 1.0, its neighbours, what 1 - u rounds to."""
    f = n.fmt
    below, above = 1.0 - n.below, n.above - 1.0
    text = (
        f"1. One {f.name} weight w = 1.0. Its neighbours are 1 + {_p2(above)} above and "
        f"1 - {_p2(below)} below, so w - {_p2(n.u)} lands "
    )
    if n.u == below / 2:
        tie = "1.0" if n.one_step == 1.0 else exact_text(n.one_step)
        text += f"exactly halfway down: a tie, which goes to the even neighbour, {tie}."
    else:  # pragma: no cover - u is chosen as half the spacing below
        text += f"at {exact_text(1 - n.u)}, which rounds to {exact_text(n.one_step)}."
    return text


def weights_spacing(fmt, seed: int) -> str:
    """Where the model's initial weights lie in ``fmt`` and what update that loses there."""
    from fpsim import amp
    from fpsim.formats import get_format

    f = get_format(fmt)
    model = amp.underflow_model(seed=seed, unit=1.0, format=f)
    w = np.concatenate([np.abs(p.data.astype(np.float64)).ravel() for p in model.parameters()])
    med = float(np.median(w[w > 0]))
    k = math.floor(math.log2(med))
    spacing = 2.0 ** (max(k, f.emin) - f.man_bits)
    return (
        f"The initial weights' median |w| is {med:.3g}, in [2^{k}, 2^{k + 1}), where {f.name}'s "
        f"values are {_p2(spacing)} apart: an update lr x g smaller than half that, "
        f"{_p2(spacing / 2)}, is lost there (a tie goes to the even neighbour)."
    )


def start_loss(run: Run) -> float:
    return float(np.mean(run.losses[:START_WINDOW]))


def final_loss(run: Run) -> float:
    return float(np.mean(run.losses[-FINAL_WINDOW:]))


def _share(a: int, b: int) -> float:
    return 100 * a / b if b else math.nan


def table(runs: list[Run]) -> str:
    ref = runs[0]
    start = start_loss(ref)
    ref_drop = start - final_loss(ref)
    w = max(len(r.label) for r in runs)
    out = [f"{'model':{w}}  {'updates kept':>12}  {'model weight changed':>20}  "
           f"{'final loss':>10}  {'loss drop vs fp32':>17}"]  # fmt: skip
    for r in runs:
        final = final_loss(r)
        drop = 100 * (start - final) / ref_drop if ref_drop else math.nan
        out.append(
            f"{r.label:{w}}  {_share(r.kept, r.updates):11.1f}%  "
            f"{_share(r.copy_changed, r.updates):19.1f}%  {final:10.4f}  {drop:16.1f}%"
        )
    return "\n".join(out)


NOTES = """\
updates kept: of the (weight, step) pairs with a non-zero gradient, the share where the weight
  the optimizer holds (the fp32 master, when there is one) changed; model weight changed: the
  same for the weight the model computes with. final loss: mean of the last {final} steps; loss
  drop: (first {start} steps' mean - final) as a share of fp32's."""


def summary(runs: list[Run]) -> str:
    """The table in words; every number is one of the table's."""
    ref, plain, master = runs
    name = plain.label.removesuffix(" weights")
    text = (
        f"With {name} weights, {_share(plain.kept, plain.updates):.1f}% of the updates were "
        f"kept; with fp32 master weights, {_share(master.kept, master.updates):.1f}% were "
        f"(fp32 weights: {_share(ref.kept, ref.updates):.1f}%)."
    )
    if master.copy_changed < master.kept:
        text += (
            f" The {name} copy changed in only {_share(master.copy_changed, master.updates):.1f}%"
            f" of them: the master collects the small updates until they add up to a step of "
            f"{name}'s spacing."
        )
    lp, lm, lr = final_loss(plain), final_loss(master), final_loss(ref)
    text += (
        f" Final loss: {lp:.4f} with {name} weights, {lm:.4f} with masters, {lr:.4f} in fp32."
    )
    return text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} swamping",
        description="fp16 weights lose small updates (w + u == w when |u| is below half the "
        "spacing of fp16 values near w); fp32 master weights keep them. One weight, then a "
        "small model trained with SGD in fp32, in fp16, and in fp16 with fp32 master weights.",
    )
    parser.add_argument("--format", default=DEFAULTS["fmt"], dest="fmt",
                        type=low_format("the weights are held in it, under fp32 masters that "
                                        "must hold them exactly"),
                        help="the format the model's weights are held in, any name "
                        "fpsim.get_format reads (fp16, bf16, e4m3, 'Format(4, 3)', ...); "
                        "narrower than fp32 and held by it (default: %(default)s)")  # fmt: skip
    add_training_args(parser, DEFAULTS["steps"], DEFAULTS["seed"], DEFAULTS["lr"],
                      optimizer="SGD", what="model")  # fmt: skip
    add_output_args(parser)
    args = parse_args(parser, argv)
    quiet_numba()
    f = args.fmt

    text, nums = one_weight(f)
    print(textwrap.fill(part1_intro(nums), 96, subsequent_indent="   ") + "\n")
    print(text)
    from fpsim import amp

    from .underflow import mlp_shape

    intro = (
        f"2. Training: the underflow demo's {mlp_shape(amp.underflow_model(unit=1.0))} on the "
        f"same task in standardised units (gradients 2^16 times the underflow demo's, so that "
        f"the weight update, not underflow, is what matters), SGD with lr "
        f"{args.lr:g}, {args.steps} steps, batch {BATCH}, seed {args.seed}, the model held in "
        f"fp32, in {f.name}, and in {f.name} with fp32 master weights. "
        f"{weights_spacing(f, args.seed)}"
    )
    print("\n" + textwrap.fill(intro, 96, subsequent_indent="   ") + "\n")
    bar = show_progress(args.quiet)
    runs = [train(fmt, master, args.steps, args.lr, args.seed, DEFAULTS["samples"], bar)
            for fmt, master in (("fp32", False), (f, False), (f, True))]  # fmt: skip
    print(table(runs))
    print("\n" + NOTES.format(final=min(FINAL_WINDOW, args.steps),
                              start=min(START_WINDOW, args.steps)))  # fmt: skip
    print("\n" + textwrap.fill(summary(runs), 96))
    if not args.no_plots:
        stem = "swamping" if f.name == "fp16" else f"swamping_{f.name}"
        paths = figures(runs, args.out, stem)
        print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


def figures(runs: list[Run], out: str | Path, stem: str = "swamping") -> list[Path]:
    """``{stem}_loss.png``: the loss (running mean, from 0: an axis cut above 0 would make the
    gap look larger than it is) and the share of updates kept per step."""
    window = min(20, len(runs[0].losses))  # per-batch numbers are noisy; a running mean shows

    def smooth(y: np.ndarray) -> np.ndarray:
        c = np.cumsum(np.concatenate([[0.0], np.nan_to_num(y)]))
        return (c[window:] - c[:-window]) / window

    fig = new_figure((12, 4.6))
    ax, ax2 = fig.subplots(1, 2)
    steps = np.arange(window - 1, len(runs[0].losses))  # the last step of each window
    colours = ("black", "#ff7f0e", "#2ca02c")  # fp32, then matplotlib's 2nd and 3rd colours
    for r, colour in zip(runs, colours, strict=True):
        name = "fp32" if r is runs[0] else r.label
        ax.plot(steps, smooth(r.losses), color=colour, label=name, gid=f"loss:{name}")
        ax2.plot(steps, 100 * smooth(r.kept_per_step), color=colour, label=name,
                 gid=f"loss:{name}")  # fmt: skip
    for a in (ax, ax2):
        style_reference(a)
        a.set_xlabel(f"step (running mean over {window} steps)")
        a.grid(alpha=0.3, lw=0.5)
    top = max(float(np.nanmax(smooth(r.losses))) for r in runs)
    ax.set_ylim(0, top * 1.08)
    ax.set_ylabel("loss (MSE), axis from 0")
    ax.legend(fontsize=9, loc="lower left")
    plain, master = runs[1], runs[2]
    fit_title(ax, f"Training loss: final {final_loss(plain):.3f} ({plain.label}), "
                  f"{final_loss(master):.3f} (+ fp32 master), {final_loss(runs[0]):.3f} (fp32)")
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("updates kept (%)")
    ax2.legend(fontsize=9, loc="center right")
    fit_title(ax2, f"Share of the non-zero updates that changed the weight the optimizer holds: "
                   f"{_share(plain.kept, plain.updates):.1f}% with {plain.label}")
    name = plain.label.removesuffix(" weights")
    fig.suptitle(f"SGD with {name} weights: an update u is swamped (w + u rounds back to w) when "
                 f"|u| is below half the spacing of the {name} values near w", fontsize=11)
    return [save_figure(fig, out, f"{stem}_loss.png")]
