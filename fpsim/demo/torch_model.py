"""``python -m fpsim.demo torch``: a real PyTorch model, watched by fpsim.

A tiny character-level GPT (:class:`fpsim.torch.TinyGPT`) learns the sonnets shipped with
fpsim, twice:

1. in fp32, under :func:`fpsim.torch.watch`: every activation, activation gradient, weight,
   weight gradient and optimizer moment of every step is counted against fp16, bf16, fp8 E4M3 /
   E5M2 and MXFP4 -- what would be lost to zero or overflow in each, as the tensors are and
   with a scale per tensor or per block; the loss-scale window of each format; the updates that
   would vanish if the weights were held in 16 bits;
2. in fp16 (``torch.autocast``) with ``torch.amp.GradScaler`` starting at a scale chosen too
   large (2^24 by default), so that its first steps are skipped: each skip is explained (the
   first gradient that overflowed, in the order of the backward pass).

Every sentence printed is computed from the two runs. Figures: the activation gradients of
every layer against fp16's range, before and after the suggested scale
(``torch_layers.png``), and every gradient tensor's own fp16 loss-scale window
(``torch_windows.png``).
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
    counted,
    parse_args,
    power_of_two_scale,
    quiet_numba,
    save_figure,
    show_progress,
    whole_number,
)

FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "mxfp4")
WIDTH = 96
FIGURES = ("torch_layers.png", "torch_windows.png")


def _k(s: float) -> int:
    return round(math.log2(s))


def train(steps: int, seed: int, lr: float, batch: int, watch_opts: dict, fp16: bool = False,
          init_scale: float = 2.0**24, progress: bool = False):  # fmt: skip
    """Train a fresh TinyGPT under watch; returns (watch, losses, scaler or None, model)."""
    import torch

    from fpsim.torch import TinyGPT, sonnet_batches, watch
    from fpsim.torch.models import sonnet_vocab_size

    torch.manual_seed(seed)
    model = TinyGPT(sonnet_vocab_size(), seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale) if fp16 else None
    data = sonnet_batches(batch, model.block_size, seed=seed)
    losses = []
    w = watch(model, optimizer=opt, scaler=scaler, **watch_opts)
    desc = "fp16 + GradScaler" if fp16 else "fp32, watched"
    for _ in counted(range(steps), steps, desc, progress):
        x, y = next(data)
        with torch.autocast("cpu", dtype=torch.float16, enabled=fp16):
            loss = model.loss(x, y)
        loss_value = loss.detach()
        opt.zero_grad()
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        losses.append(float(loss_value))
    w.stop()
    return w, losses, scaler, model


def fits_note(rep) -> str:
    """What each format does to the run's tensors, from the report's numbers (printed as its
    tables print them)."""
    from fpsim.torch.report import percent

    kinds = rep.by_kind()
    ag = kinds["activation_grad"]
    act = kinds["activation"]
    f16 = ag.fractions("fp16")
    e4 = ag.fractions("fp8_e4m3")
    e4t = ag.fractions("fp8_e4m3", "per_tensor")
    b = ag.block_fractions("mxfp4")
    p = percent
    text = (f"As stored, fp16 would lose {p(f16['underflow'])} of the non-zero activation "
            f"gradients to zero and bf16 {p(ag.fractions('bf16')['underflow'])}; fp8 E4M3 "
            f"would lose {p(e4['underflow'])} of them, but with one power-of-two scale per "
            f"tensor only {p(e4t['underflow'])}. MXFP4, one scale per 32 values, "
            f"flushes {p(b['zero'])} of the activation gradients and saturates "
            f"{p(b['saturated'])}; of the activations it flushes "
            f"{p(act.block_fractions('mxfp4')['zero'])}.")  # fmt: skip
    return text


def _inside(w, k: int) -> bool:
    return w.feasible and (w.lo is None or w.lo <= k) and (w.hi is None or k <= w.hi)


def window_note(rep, scaler) -> str:
    w16 = rep.scale_window("fp16")
    wbf = rep.scale_window("bf16")
    eps = f"{100 * rep.eps:g}%"
    parts = []
    ref = None  # the fp16 window the scaler's scale is compared with
    if w16.no_scaling_needed:
        parts.append("In fp16 the gradients of the fp32 run need no loss scale at all.")
        ref = w16
    elif w16.feasible and w16.lo is not None and w16.hi is not None:
        parts.append(f"In fp16 the gradients of the fp32 run need a loss scale between "
                     f"2^{w16.lo} and 2^{w16.hi} (at most {eps} of any tensor lost to zero, "
                     f"nothing overflowing).")  # fmt: skip
        ref = w16
    else:
        w1 = rep.scale_window("fp16", eps=0.01)
        culprit = w16.culprits[0].label if w16.culprits else "?"
        text = (f"No single fp16 loss scale keeps every gradient tensor of the fp32 run within "
                f"{eps} of underflow without an overflow somewhere ({culprit} among the "
                f"culprits)")  # fmt: skip
        if w1.feasible and w1.lo is not None and w1.hi is not None:
            text += f"; allowing 1% per tensor, the scales 2^{w1.lo} .. 2^{w1.hi} would do."
            ref = w1
        else:
            text += "; not even when 1% per tensor may be lost."
        parts.append(text)
    if wbf.no_scaling_needed:
        parts.append("bf16, with fp32's exponent range, needs none: scale 1 lies inside its "
                     "window.")  # fmt: skip
    if scaler is not None:
        k = _k(scaler.get_scale())
        text = f"The GradScaler of the fp16 run ended at 2^{k}"
        if ref is None:
            parts.append(text + ".")
        elif _inside(ref, k):
            parts.append(text + f", inside the {100 * ref.eps:g}% window.")
        else:
            parts.append(text + f", outside the {100 * ref.eps:g}% window (the fp16 run's own "
                         "gradients differ from the fp32 run's, and the scaler only backs off "
                         "after an overflow and grows every growth interval).")  # fmt: skip
    return " ".join(parts)


def skips_note(rep2, scaler, init_scale: float, steps: int) -> str:
    skips = rep2.skips
    if not skips:
        return (f"The GradScaler, starting at 2^{_k(init_scale)}, skipped no step in {steps}; "
                f"it ended at 2^{_k(scaler.get_scale())}.")  # fmt: skip
    first = skips[0].first
    where = f"{first.label} ({first.dtype})" if first is not None else "no watched tensor"
    return (f"The GradScaler, starting at 2^{_k(init_scale)}, skipped {len(skips)} of {steps} "
            f"steps, halving its scale each time, and ended at 2^{_k(scaler.get_scale())}. The "
            f"first skip started at {where}: the gradient that overflowed first in the backward "
            f"pass.")  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} torch",
        description="A tiny PyTorch GPT trained on the sonnets under fpsim.torch.watch: what "
        "fits fp16, bf16, fp8 and MXFP4, the loss-scale windows, and a GradScaler run whose "
        "skipped steps are explained.",
    )
    add_training_args(parser, steps=30, seed=0, lr=3e-3, optimizer="AdamW", what="run")
    parser.add_argument("--batch", type=whole_number(1, 4096, "a batch of sequences"),
                        default=16, help="sequences of 32 characters per batch (default: "
                        "%(default)s)")  # fmt: skip
    parser.add_argument("--init-scale", type=power_of_two_scale, default=2.0**24,
                        help="the fp16 run's initial loss scale, a power of two (default: 2^24, "
                        "too large on purpose: its first steps overflow)")  # fmt: skip
    add_output_args(parser)
    args = parse_args(parser, argv)
    try:
        import torch
    except ImportError:
        print(f"{PROG} torch needs PyTorch: pip install 'fpsim-bits[torch]'")
        return 1

    quiet_numba()
    bar = show_progress(args.quiet)
    w1, l1, _, model = train(args.steps, args.seed, args.lr, args.batch,
                             {"formats": FORMATS}, progress=bar)  # fmt: skip
    rep = w1.report()
    n_params = sum(p.numel() for p in model.parameters())
    head = (f"A tiny GPT ({len(model.blocks)} blocks, d_model {model.tok.embedding_dim}, "
            f"{model.blocks[0].attn.n_head} heads, {n_params:,} parameters; "
            f"torch {torch.__version__}) learns the sonnets' characters: {args.steps} steps of "
            f"AdamW (lr {args.lr:g}), batches of {args.batch} x {model.block_size} characters, "
            f"seed {args.seed}.")  # fmt: skip
    print(textwrap.fill(head, WIDTH))
    print(f"\n1. In fp32, watched: loss {l1[0]:.3f} -> {l1[-1]:.3f}\n")
    print(rep.table())
    print("\n" + textwrap.fill(fits_note(rep), WIDTH))

    w2, l2, scaler, _ = train(args.steps, args.seed, args.lr, args.batch,
                              {"formats": ("fp16",), "kinds": ("activation_grad", "weight_grad")},
                              fp16=True, init_scale=args.init_scale, progress=bar)  # fmt: skip
    print(f"\n2. In fp16 (torch.autocast) with torch.amp.GradScaler(init_scale=2^"
          f"{_k(args.init_scale)}): loss {l2[0]:.3f} -> {l2[-1]:.3f}\n")
    rep2 = w2.report()
    for s in rep2.skips:
        print(textwrap.fill(str(s), WIDTH, subsequent_indent="  "))
    print("\n" + textwrap.fill(skips_note(rep2, scaler, args.init_scale, args.steps), WIDTH))
    print("\n" + textwrap.fill(window_note(rep, scaler), WIDTH))

    if not args.no_plots:
        out = Path(args.out)
        # before and after the suggested scale (of the 1% window when the 0.1% one is empty)
        scale = rep.scale_window("fp16").suggested or rep.scale_window("fp16", 0.01).suggested
        paths = [save_figure(rep.plot_layers("activation_grad", "fp16", scale=scale), out,
                             FIGURES[0]),
                 save_figure(rep.plot_windows("fp16"), out, FIGURES[1])]  # fmt: skip
        print(f"\nwrote {', '.join(str(p) for p in paths)}")
    return 0
