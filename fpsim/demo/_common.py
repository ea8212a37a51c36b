"""Helpers shared by the demos: output options, saving figures reproducibly, small formatting."""

from __future__ import annotations

import argparse
import math
import warnings
from pathlib import Path

PROG = "python -m fpsim.demo"
DEFAULT_OUT = "figures"


def quiet_numba() -> None:
    """Hide numba's internal "variable ... is not in scope" notes printed while compiling.

    They are pedantic checks inside numba (NumbaIRAssumptionWarning), not about the numbers; a
    demo prints for people, so keep them out of the way. Only those messages are silenced.
    """
    warnings.filterwarnings("ignore", message=r"variable '.*' is not in scope")


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """``--no-plots`` and ``--out DIR`` (default ``figures/``)."""
    parser.add_argument("--no-plots", action="store_true", help="print only; write no figures")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help="where to write the figures (default: %(default)s/)")  # fmt: skip


def save_figure(fig, out: str | Path, name: str) -> Path:
    """Write ``fig`` to ``out/name`` (PNG) byte-reproducibly: no "Software" (matplotlib
    version) metadata, so the same figure gives the same file with the same matplotlib."""
    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    return path


def pow2(v: float) -> str:
    """``65536 (2^16)`` for a power of two, else ``1000``."""
    if v > 0 and math.isfinite(v):
        m, e = math.frexp(v)
        if m == 0.5:
            s = f"{v:g}" if abs(e - 1) < 20 else f"{v:.3g}"
            return f"{s} (2^{e - 1})"
    return f"{v:g}"


def positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return v


def scale_value(text: str) -> float:
    """A loss scale: a number (``1024``, ``2**15``, ``65536.0``), positive and finite."""
    t = text.strip().replace("^", "**")
    try:
        if "**" in t:
            base, exp = t.split("**", 1)
            v = float(base) ** float(exp)
        else:
            v = float(t)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"a scale must be positive and finite, got {text!r}")
    return v


def new_figure(figsize: tuple[float, float]):
    """A matplotlib Figure with an Agg canvas (headless, no pyplot state), as fpsim.plot's."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from fpsim.plot import DPI

    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def log2_text(v: float) -> str:
    """``2^40`` for a power of two, else ``%g``."""
    if v > 0 and math.isfinite(v) and math.frexp(v)[0] == 0.5:
        return f"2^{math.frexp(v)[1] - 1}"
    return f"{v:g}"


def exact_text(v: float, width: int = 14) -> str:
    """A value written exactly when it fits: ``1.001953125``, ``2^-30`` for a power of two
    whose decimal is long, ``inf``; else 12 significant digits."""
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    text = repr(v).removesuffix(".0")
    if len(text) <= width:
        return text
    m, e = math.frexp(abs(v))
    if m == 0.5:
        return f"{'-' if v < 0 else ''}2^{e - 1}"
    return f"{v:.12g}"
