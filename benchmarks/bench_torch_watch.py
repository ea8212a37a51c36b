"""Time per CPU training step of the tiny GPT (fpsim.torch.TinyGPT on the sonnets, batch 16 x
32 characters, AdamW), unwatched and under fpsim.torch.watch, in one process.

Rows:

* ``unwatched``: the plain PyTorch step (forward, backward, AdamW);
* ``watch(fp16, bf16, fp8 x2)``: every activation, activation gradient, weight and weight
  gradient of every step counted against four element formats (exact zone histograms, per-tensor
  scaled zones). Target: at most 1.5x the unwatched step;
* ``+ optimizer``: the same with ``optimizer=``: AdamW's moments recorded and update swamping
  counted in fp16 and bf16 at every step;
* ``+ mxfp4 (every=1 / 10)``: with the block scheme MXFP4 too, which quantizes every tensor
  element by element, at every step and at every 10th;
* ``sample=4096``: the first watch, counting a seeded sample of 4096 elements per tensor (for
  tensors this small, drawing the sample costs more than counting them all).

The rows take turns in blocks of ``--block`` steps for ``--rounds`` rounds (a busy machine slows
them alike); each watch is started and stopped around its block. One thread for torch, numpy
and numba (``--threads``), as in bench_train.py. Steps are timed in CPU time of this process
(``time.process_time``: on a shared machine the wall clock also counts the time other
processes hold the cores); ``--wall`` times wall-clock instead. The table gives the median time
per step and its ratio to the unwatched step.

    python benchmarks/bench_torch_watch.py [--rounds 5] [--block 6] [--threads 1] [--wall]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

# bench_train pins the thread pools (--threads, OpenMP spinning) when imported: before torch
from bench_train import _THREADS  # noqa: E402  (run from benchmarks/, as make bench does)

ELEMENT = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
KINDS = ("activation", "activation_grad", "weight", "weight_grad")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=6)
    parser.add_argument("--threads", default="1")
    parser.add_argument("--wall", action="store_true", help="time wall-clock, not CPU time")
    args = parser.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    try:
        import torch
    except ImportError:
        print("bench_torch_watch needs PyTorch (pip install 'fpsim-bits[torch]'): skipped")
        return 0
    if _THREADS != "0":
        torch.set_num_threads(int(_THREADS))
    import fpsim.torch as ft
    from fpsim.torch.models import sonnet_vocab_size

    torch.manual_seed(0)
    model = ft.TinyGPT(sonnet_vocab_size(), seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = ft.sonnet_batches(16, model.block_size, seed=0)

    def step() -> None:
        x, y = next(data)
        loss = model.loss(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    rows = {
        "unwatched": None,
        "watch(fp16, bf16, fp8 x2)": dict(formats=ELEMENT, kinds=KINDS),
        "+ optimizer (state, swamping)": dict(formats=ELEMENT, optimizer=opt),
        "+ mxfp4, every=1": dict(formats=ELEMENT + ("mxfp4",), optimizer=opt),
        "+ mxfp4, every=10": dict(formats=ELEMENT + ("mxfp4",), optimizer=opt, every=10),
        "the same, sample=4096": dict(formats=ELEMENT, kinds=KINDS, sample=4096),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for opts in rows.values():  # warm up: numba compiles (or loads its cache)
        w = ft.watch(model, **opts) if opts is not None else None
        step()
        step()
        if w is not None:
            w.stop()
    for _ in range(args.rounds):
        for name, opts in rows.items():
            w = ft.watch(model, **opts) if opts is not None else None
            step()  # not timed: the first step of a block
            for _ in range(args.block):
                t0 = clock()
                step()
                times[name].append(clock() - t0)
            if w is not None:
                w.stop()
    base = statistics.median(times["unwatched"])
    print(f"tiny GPT ({sum(p.numel() for p in model.parameters()):,} parameters), batch 16 x "
          f"{model.block_size}, torch {torch.__version__}, {_THREADS} thread(s); median of "
          f"{args.rounds * args.block} steps per row, {'wall-clock' if args.wall else 'CPU'} "
          "time")
    print(f"{'':32} {'ms / step':>10} {'x unwatched':>12}")
    for name, ts in times.items():
        m = statistics.median(ts)
        target = "   (target <= 1.5x)" if name.startswith("watch(") else ""
        print(f"{name:32} {1e3 * m:10.1f} {m / base:12.2f}{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
