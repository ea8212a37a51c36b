"""``python -m fpsim.demo figures`` (``make figures``): regenerate every figure in ``figures/``.

Runs the demos that draw (underflow, overflow, swamping, accumulate, bf16, blocks,
tensorcore, fp8) on their default settings (their printed output hidden; their progress bars shown
on a terminal unless ``--quiet``), and draws the static teaching figures: the range of each
format, the bit fields of 0.1 in fp16, and the number line of the textbook 8-bit format
``Format(4, 3)``.
Seeds are fixed and the PNGs carry no matplotlib version, so with the same numpy, matplotlib
and BLAS the files come out byte for byte the same.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
from pathlib import Path

from ._common import DEFAULT_OUT, PROG, add_quiet_arg, out_dir, parse_args, quiet_numba, save_figure

#: demo module -> the files it writes on its default settings
DEMO_FIGURES = {
    "underflow": ("underflow_histogram.png", "underflow_layers.png", "underflow_loss.png",
                  "underflow_scale.png"),
    "overflow": ("overflow_scale.png", "overflow_loss.png"),
    "swamping": ("swamping_loss.png",),
    "accumulate": ("accumulate.png",),
    "bf16": ("bf16_histogram.png",),
    "blocks": ("blocks.png",),
    "tensorcore": ("tensorcore.png",),
    "fp8": ("fp8_loss.png", "fp8_scales.png"),
}  # fmt: skip
STATIC_FIGURES = ("format_ranges.png", "bits_0.1_fp16.png", "number_line_8bit.png")


def static_figures(out: str | Path) -> list[Path]:
    from fpsim.formats import Format
    from fpsim.plot import plot_bit_fields, plot_format_ranges, plot_number_line

    return [
        save_figure(plot_format_ranges(), out, "format_ranges.png"),
        save_figure(plot_bit_fields(0.1, "fp16"), out, "bits_0.1_fp16.png"),
        save_figure(plot_number_line(Format(4, 3)), out, "number_line_8bit.png"),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} figures",
        description="Regenerate every figure the README and the lessons use (what `make "
        "figures` runs): the drawing demos on their default settings, and the static figures.",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", type=out_dir,
                        help="where to write them (default: %(default)s/)")  # fmt: skip
    add_quiet_arg(parser)
    args = parse_args(parser, argv)

    import importlib

    quiet_numba()
    written: list[Path] = []
    for name, files in DEMO_FIGURES.items():
        t0 = time.perf_counter()
        demo = importlib.import_module(f"fpsim.demo.{name}")
        with contextlib.redirect_stdout(io.StringIO()):
            status = demo.main(["--out", args.out] + (["--quiet"] if args.quiet else []))
        if status:
            print(f"{PROG} {name} failed with status {status}")
            return status
        written += [Path(args.out) / f for f in files]
        print(f"{name:10} {time.perf_counter() - t0:5.1f} s  {', '.join(files)}")
    written += static_figures(args.out)
    print(f"{'static':10}          {', '.join(STATIC_FIGURES)}")
    missing = [str(p) for p in written if not p.is_file()]
    if missing:
        print(f"missing: {', '.join(missing)}")
        return 1
    total = sum(p.stat().st_size for p in written)
    print(f"\n{len(written)} figures in {args.out}/ ({total / 1024:.0f} KiB)")
    return 0
