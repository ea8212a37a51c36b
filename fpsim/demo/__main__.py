"""``python -m fpsim.demo``: run a named demo (``--list`` shows them all).

Every demo is one entry of :data:`DEMOS`: ``name -> (one-line description, function)``. The
function takes the demo's own command-line arguments (a list of strings), parses them itself
and returns an exit status. ``bits`` and ``autocast`` live here; the others are modules of this
package (``fpsim/demo/underflow.py``, ...) whose ``main(argv)`` is registered through
:func:`_lazy`, so the module is imported only when its demo runs. To add a demo, write such a
module (or function) and add it to ``DEMOS``; keep heavy imports (matplotlib, numba kernels)
inside functions so that listing demos and running the light ones stays fast.

    python -m fpsim.demo --list
    python -m fpsim.demo bits 0.1 -1e-5 65519 --formats fp16,bf16
    python -m fpsim.demo underflow --format fp16 --steps 500 --out figures
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ._common import NEGATIVE_NUMBER as _NEGATIVE_NUMBER
from ._common import autocast_format_arg, parse_args, split_list
from ._common import quiet_numba as _quiet_numba

DemoFunction = Callable[[list[str]], int]

PROG = "python -m fpsim.demo"



# ---- demos -------------------------------------------------------------------------------------
def demo_bits(argv: list[str]) -> int:
    """Show values in several formats side by side (fpsim.inspect.compare)."""
    parser = argparse.ArgumentParser(
        prog=f"{PROG} bits",
        description="Show how values are stored in several formats: sign, exponent and "
        "mantissa bits, the exact stored value, and the rounding error (nearest-even).",
        epilog="Negative values work as they are (bits -0.0 -1e-5). Values are read exactly: "
        "0.1 is one tenth, 1/3 a third; hex floats work too (0x1.8p-3). Every format works "
        "(fp4_e2m1, fp6_e3m2, e8m0, fp8_e4m3fnuz, p3109_k8p3se, ...): an unsigned format shows "
        "no sign bit, E8M0 no mantissa, and a note under the table says what a format's special "
        "rules did (saturation to the max, NaN where -0 would be, no zero, no code for NaN).",
    )
    parser.add_argument("values", nargs="*", default=["0.1"], metavar="VALUE",
                        help="numbers to show (default: 0.1)")  # fmt: skip
    parser.add_argument(
        "--formats",
        default="fp32,fp16,bf16,fp8_e4m3,fp8_e5m2",
        help="comma-separated formats, any names fpsim.get_format reads: fp16, half, e4m3, "
        "e4m3_ieee, Format(4, 3), ... (default: %(default)s)",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="also print the full explanation for each value and format",
    )
    # argparse takes "-1e-5" for an option; a leading space keeps a negative number positional
    # (float() ignores the space).
    args = parser.parse_args([" " + a if _NEGATIVE_NUMBER.match(a) else a for a in argv])

    from fpsim.formats import get_format
    from fpsim.inspect import compare, explain, parse_number

    try:
        formats = [get_format(name) for name in split_list(args.formats)]
    except ValueError as exc:
        parser.error(str(exc))
    if not formats:
        parser.error("--formats: give at least one format")
    try:
        for v in args.values:
            parse_number(v)  # compare() and explain() read the text exactly themselves
    except ValueError as exc:
        parser.error(str(exc))
    values = [v.strip() for v in args.values]

    _quiet_numba()
    blocks = []
    for v in values:
        blocks.append(compare(v, formats))
        if args.explain:
            blocks += [explain(v, f) for f in formats]
    print("\n\n".join(blocks))
    return 0


def demo_autocast(argv: list[str]) -> int:
    """Print autocast's policy tables and trace the formats of a small model's ops."""
    parser = argparse.ArgumentParser(
        prog=f"{PROG} autocast",
        description="Print autocast's per-op precision tables (PyTorch's, for 'cpu' and "
        "'cuda') and trace the format of every op of a small model's forward and backward "
        "pass under autocast with a GradScaler.",
    )
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="the policy table to use (default: %(default)s)")  # fmt: skip
    parser.add_argument(
        "--dtype",
        default=None,
        type=autocast_format_arg,
        help="the autocast format, any name fpsim.get_format reads (fp16, bf16, e4m3, "
        "'Format(4, 3)', ...) narrower than fp32 and held by it (default: fp16 for cuda, bf16 "
        "for cpu)",
    )
    parser.add_argument("--all-ops", action="store_true",
                        help="list PyTorch's ops the engine lacks too")  # fmt: skip
    parser.add_argument("--no-table", action="store_true", help="only the trace")
    parser.add_argument("--no-trace", action="store_true", help="only the table")
    args = parse_args(parser, argv)

    import fpsim
    from fpsim import amp, nn
    from fpsim.nn import functional as F

    dtype = args.dtype
    _quiet_numba()
    if not args.no_table:
        print("autocast policy per op (PyTorch 2.13's tables; LOW = the autocast dtype):")
        print(amp.policy_table("all" if args.all_ops else "engine"))
    if args.no_trace:
        return 0
    model = nn.Sequential(nn.Linear(4, 8, seed=0), nn.GELU(), nn.LayerNorm(8),
                          nn.Linear(8, 3, seed=1))  # fmt: skip
    x = fpsim.randn(5, 4, generator=0)
    y = fpsim.tensor([0, 1, 2, 1, 0])
    scaler = amp.GradScaler(args.device, init_scale=2.0**10)
    with amp.FormatTrace() as trace:
        with amp.autocast(args.device, dtype=dtype):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        scaler.scale(loss).backward()
    used = amp.get_autocast_dtype(args.device) if dtype is None else dtype
    print(f"\nmodel: {model!r}")
    print(
        f"\nforward under autocast({args.device!r}, dtype={used.name}), then "
        f"GradScaler.scale(loss).backward()\n(the mul is loss * scale; a cast's backward "
        "sends the gradient back in the source's format):"
    )
    print(trace)
    grads = ", ".join(f"{n} {p.grad.format.name}" for n, p in model.named_parameters())
    print(f"\nlogits: {logits.format.name}, loss: {loss.format.name}; parameter gradients: {grads}")
    with amp.FormatTrace() as t1, amp.autocast(args.device, dtype=dtype):
        model(x)
        first = t1.ops().count("cast")
        model(x)
        second = t1.ops().count("cast") - first
    if second < first:
        why = (f"\n(the fp32 parameters' {used.name} copies are made once per region and reused; "
               "activations are cast at every use)")  # fmt: skip
    else:
        why = "\n(the second pass made no fewer casts: no copy was reused)"
    print(f"weight cache: in one region the first forward pass makes {first} casts, a second "
          f"pass {second}{why}")  # fmt: skip
    return 0


def _lazy(module: str) -> DemoFunction:
    """The ``main(argv)`` of ``fpsim.demo.<module>``, imported only when the demo runs (so that
    ``--list`` and the light demos do not import matplotlib or train anything)."""

    def run(argv: list[str]) -> int:
        import importlib

        return importlib.import_module(f"fpsim.demo.{module}").main(argv)

    run.__name__ = run.__qualname__ = f"demo_{module}"
    return run


DEMOS: dict[str, tuple[str, DemoFunction]] = {
    "bits": ("a value's sign/exponent/mantissa bits, stored value and error in several formats",
             demo_bits),
    "underflow": ("train in fp16 with and without loss scaling: how many true gradients "
                  "become 0; histograms over fp16's range", _lazy("underflow")),
    "overflow": ("a loss scale too large: inf gradients, skipped steps, back-off, the scale's "
                 "sawtooth", _lazy("overflow")),
    "swamping": ("fp16 weights lose small updates (w + u == w); fp32 master weights keep them",
                 _lazy("swamping")),
    "accumulate": ("sums and matmuls of fp16 values with an fp16, bf16 or fp32 accumulator, "
                   "sequential and pairwise", _lazy("accumulate")),
    "rounding": ("the rounding modes side by side: ties to even, directed, stochastic; and "
                 "their drift over many updates", _lazy("rounding")),
    "bf16": ("bf16 needs no loss scaler (fp32's range) but keeps 8 significant bits to "
             "fp16's 11", _lazy("bf16")),
    "blocks": ("one tensor with outlier channels: one fp8 scale per tensor flushes its small "
               "values, per-block scales (MXFP8, MXFP4, NVFP4) follow them", _lazy("blocks")),
    "torch": ("a tiny PyTorch GPT on the sonnets under fpsim.torch.watch: what fits fp16 / "
              "bf16 / fp8 / MXFP4, loss-scale windows, skipped GradScaler steps explained "
              "(needs torch)", _lazy("torch_model")),
    "tensorcore": ("FP8 matmuls as an H100 tensor core computes them (13 bits kept) against "
                   "fp32, with DeepSeek-V3's promotion every 128: error vs K", _lazy("tensorcore")),
    "fp8": ("the tiny GPT trained in fp32, bf16, fp16 + GradScaler, FP8 (one loss scale, "
            "delayed, current), MXFP8 and NVFP4: losses, what each cast lost, scales",
            _lazy("fp8")),
    "autocast": ("autocast's per-op precision tables, and the formats of every op of a small "
                 "model's forward and backward pass", demo_autocast),
    "figures": ("regenerate every figure in figures/ (what `make figures` runs)",
                _lazy("figures")),
}  # fmt: skip


# ---- command line ------------------------------------------------------------------------------
def _listing() -> str:
    width = max(len(name) for name in DEMOS)
    return "\n".join(f"  {name:<{width}}  {desc}" for name, (desc, _) in DEMOS.items())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo named by the first argument; return the exit status (2 for usage errors)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Demonstrations of low-precision floating point, bit by bit.",
        epilog=f"demos:\n{_listing()}\n\nRun '{PROG} DEMO --help' for a demo's own options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--list", action="store_true", help="list the demos and exit")
    parser.add_argument("demo", nargs="?", help="the demo to run (see --list)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the demo")
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the demo's name belongs to the demo (its own --help included).
    split = next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))
    ns = parser.parse_args(argv[: split + 1])
    rest = argv[split + 1 :]

    if ns.list:
        print(_listing())
        return 0
    if ns.demo is None:
        parser.print_help()
        return 0
    if ns.demo not in DEMOS:
        print(
            f"{PROG}: error: unknown demo {ns.demo!r}; available: {', '.join(DEMOS)} "
            f"(see '{PROG} --list')",
            file=sys.stderr,
        )
        return 2
    _, run = DEMOS[ns.demo]
    try:
        return run(rest)
    except SystemExit as exc:  # argparse inside a demo exits on --help (0) or bad usage (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


if __name__ == "__main__":
    sys.exit(main())
