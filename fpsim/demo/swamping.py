"""``python -m fpsim.demo swamping``: fp16 weights lose small updates; fp32 master weights keep
them.

Part 1, one weight: ``w = 1.0`` in fp16 has the neighbours 1 + 2^-10 and 1 - 2^-11, so an update
of at most half that spacing rounds straight back to ``w`` (it is *swamped*); sixteen updates of
-2^-12 leave the fp16 weight at 1.0, while an fp32 master copy moves by 16 x 2^-12 and rounds to
a new fp16 value. Part 2, training: the underflow demo's MLP in *standardised* units (no gradient
underflows here, so only the weight update matters), held in fp16 and trained with plain SGD,
with and without fp32 master weights (``optim.SGD(..., master_weights=True)``), next to fp32.
"""

from __future__ import annotations

import argparse
import dataclasses
import textwrap
from pathlib import Path

import numpy as np

from ._common import PROG, add_output_args, positive_int, quiet_numba, save_figure


@dataclasses.dataclass
class Run:
    label: str
    losses: np.ndarray
    updates: int  # (element, step) pairs with a non-zero gradient
    kept: int  # ... whose weight (the master, when there is one) changed
    copy_changed: int  # ... whose model weight (the fp16 copy) changed


def train(fmt: str, master: bool, steps: int, lr: float, seed: int, samples: int = 4096) -> Run:
    """SGD on the standardised underflow task with the model held in ``fmt``; counts, for every
    (weight element, step) with a non-zero gradient, whether the weight moved."""
    import fpsim
    from fpsim import amp, data, optim
    from fpsim.nn import functional as F

    X, Y = amp.underflow_task(samples, seed=seed, unit=1.0)
    model = amp.underflow_model(seed=seed, unit=1.0, format=fmt)
    params = list(model.parameters())
    opt = optim.SGD(params, lr=lr, master_weights=master)
    losses = np.empty(steps)
    updates = kept = copy_changed = 0
    epoch, it = 0, iter(data.batches(X, Y, batch_size=64, seed=seed))
    for step in range(steps):
        batch = next(it, None)
        if batch is None:
            epoch += 1
            it = iter(data.batches(X, Y, batch_size=64, seed=seed + epoch))
            batch = next(it)
        xb, yb = fpsim.tensor(batch[0]).to(fmt), fpsim.tensor(batch[1])
        loss = F.mse_loss(model(xb).float(), yb)  # the loss in fp32
        opt.zero_grad()
        loss.backward()

        def held(p):  # the weight the optimizer updates: the master if there is one
            st = opt.state.get(p, {})
            return st["master"] if "master" in st else p.data

        before = [(held(p).copy(), p.data.copy()) for p in params]
        opt.step()
        for p, (w_held, w_copy) in zip(params, before, strict=True):
            moved = p.grad.data != 0
            updates += int(np.count_nonzero(moved))
            kept += int(np.count_nonzero(moved & (held(p) != w_held)))
            copy_changed += int(np.count_nonzero(moved & (p.data != w_copy)))
        losses[step] = loss.item()
    label = f"{fmt} weights" + (" + fp32 master" if master else "")
    return Run(label, losses, updates, kept, copy_changed)


def one_weight() -> str:
    """Part 1 as text: one fp16 weight, updates of 2^-12."""
    import fpsim
    from fpsim import nn, optim

    lines = [fpsim.explain_op(1.0, "-", 2.0**-12, "fp16"), ""]
    w16 = nn.Parameter([1.0], format="fp16")
    wm = nn.Parameter([1.0], format="fp16")
    plain = optim.SGD([w16], lr=2.0**-12)
    master = optim.SGD([wm], lr=2.0**-12, master_weights=True)
    for _ in range(16):
        for w in (w16, wm):
            w.grad = fpsim.tensor([1.0], format="fp16")
        plain.step()
        master.step()
    lines.append(
        f"16 SGD steps of lr x grad = 2^-12 each (they should add up to -2^-8 = -0.00390625):\n"
        f"  fp16 weight, no master:     {w16.item()!r}   (every update swamped)\n"
        f"  fp32 master:                {float(master.state[wm]['master'][0])!r}\n"
        f"  fp16 weight with a master:  {wm.item()!r}   (the master rounded once to fp16)"
    )
    return "\n".join(lines)


def table(runs: list[Run]) -> str:
    ref = runs[0]
    start = float(np.mean(ref.losses[:10]))
    ref_drop = start - float(np.mean(ref.losses[-20:]))
    w = max(len(r.label) for r in runs)
    out = [f"{'model':{w}}  {'updates kept':>12}  {'model weight changed':>20}  "
           f"{'final loss':>10}  {'loss drop vs fp32':>17}"]  # fmt: skip
    for r in runs:
        final = float(np.mean(r.losses[-20:]))
        out.append(
            f"{r.label:{w}}  {100 * r.kept / r.updates:11.1f}%  "
            f"{100 * r.copy_changed / r.updates:19.1f}%  {final:10.4f}  "
            f"{100 * (start - final) / ref_drop:16.1f}%"
        )
    return "\n".join(out)


NOTES = """\
updates kept: of the (weight, step) pairs with a non-zero gradient, the share where the weight
  the optimizer holds (the fp32 master, when there is one) changed; model weight changed: the
  same for the weight the model computes with. final loss: mean of the last 20 steps; loss
  drop: (first 10 steps' mean - final) as a share of fp32's."""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} swamping",
        description="fp16 weights lose small updates (w + u == w when |u| is below half the "
        "spacing of fp16 values near w); fp32 master weights keep them. One weight, then a "
        "small model trained with SGD in fp32, in fp16, and in fp16 with fp32 master weights.",
    )
    parser.add_argument("--steps", type=positive_int, default=400,
                        help="SGD steps per model (default: %(default)s)")  # fmt: skip
    parser.add_argument("--lr", type=float, default=1e-3,
                        help="SGD's learning rate (default: %(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    add_output_args(parser)
    args = parser.parse_args(argv)
    quiet_numba()

    print(
        "1. One fp16 weight w = 1.0. Its neighbours are 1 + 2^-10 above and 1 - 2^-11 below, so\n"
        "   w - 2^-12 lands exactly halfway down: a tie, which goes to the even neighbour, 1.0.\n"
    )
    print(one_weight())
    intro = (
        f"2. Training: the underflow demo's 16-64-64-4 MLP on the same task in standardised "
        f"units (gradients do not underflow here), SGD with lr {args.lr:g}, {args.steps} steps, "
        f"batch 64, seed {args.seed}. An update lr x g is lost when it is below half the spacing "
        f"of the fp16 values around the weight: for |w| in [0.25, 0.5) that spacing is 2^-12."
    )
    print("\n" + textwrap.fill(intro, 96) + "\n")
    runs = [train(fmt, master, args.steps, args.lr, args.seed)
            for fmt, master in (("fp32", False), ("fp16", False), ("fp16", True))]  # fmt: skip
    print(table(runs))
    print("\n" + NOTES)
    if not args.no_plots:
        paths = figures(runs, args.out)
        print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


def figures(runs: list[Run], out: str | Path) -> list[Path]:
    from fpsim.plot import plot_loss_curves

    window = 20  # per-batch losses are noisy; their running mean shows the gap

    def smooth(y: np.ndarray) -> np.ndarray:
        c = np.cumsum(np.concatenate([[0.0], y]))
        return (c[window:] - c[:-window]) / window

    fig = plot_loss_curves({r.label: smooth(r.losses) for r in runs}, log=False)
    ax = fig.axes[0]
    ax.get_lines()[0].set(color="black", linestyle="--", linewidth=1.3, zorder=3)
    ax.legend(fontsize=9)
    ax.set_xlabel(f"step (loss averaged over a window of {window} steps)")
    ax.set_title("SGD with fp16 weights: small updates are swamped and training lags; with "
                 "fp32 masters it follows fp32", loc="left", fontsize=9.5)  # fmt: skip
    return [save_figure(fig, out, "swamping_loss.png")]
