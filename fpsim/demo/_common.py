"""Helpers shared by the demos: argument types that refuse bad input before any work starts,
output and progress options, saving figures reproducibly, small formatting."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

PROG = "python -m fpsim.demo"
DEFAULT_OUT = "figures"

#: The most optimizer steps a training demo takes. A step of the small model costs a few
#: milliseconds per recipe (plus the fp32 reference the gradient recorder computes), so 10^5
#: steps already take tens of minutes; the demos' points show within a few hundred.
MAX_STEPS = 100_000
STEPS_WHY = "a step costs a few ms per recipe: 10^5 steps already take tens of minutes"
#: Seeds are numpy seeds; the demos derive further seeds from them, so keep them to 32 bits.
MAX_SEED = 2**32 - 1
#: Loss scales: powers of two that fp32 (where GradScaler keeps the scale) holds as normals.
SCALE_EXPONENTS = (-126, 127)
SCALE_HELP = (
    "a power of two (1024, 2**15, 2^-3, from 2^-126 to 2^127), because only then are scaling "
    "and unscaling exact: the demo divides each scaled gradient by S to compare it with the "
    "true one"
)
SCALE_WHY = (
    "only a power of two makes multiplying and dividing by the scale exact: the demo divides "
    "every scaled gradient by S to compare it with the true one, and a scale such as 1000 would "
    "add rounding errors of its own that the tables would blame on the format (GradScaler's "
    "scales are powers of two too)"
)


def quiet_numba() -> None:
    """Hide numba's internal "variable ... is not in scope" notes printed while compiling.

    They are pedantic checks inside numba (NumbaIRAssumptionWarning), not about the numbers; a
    demo prints for people, so keep them out of the way. Only those messages are silenced.
    """
    warnings.filterwarnings("ignore", message=r"variable '.*' is not in scope")


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """``--no-plots``, ``--out DIR`` (default ``figures/``) and ``--quiet``."""
    parser.add_argument("--no-plots", action="store_true", help="print only; write no figures")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", type=out_dir,
                        help="where to write the figures (default: %(default)s/)")  # fmt: skip
    add_quiet_arg(parser)


def out_dir(text: str) -> str:
    """``--out``: not an existing file (:func:`parse_args` then makes the directory and tries
    a write, before any work starts)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    return text


def _check_writable(parser: argparse.ArgumentParser, out: str) -> None:
    """Make ``out`` and write a file into it now, not after minutes of training."""
    import tempfile

    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        parser.error(f"argument --out: cannot write figures to {out!r}: "
                     f"{exc.strerror or exc}")  # fmt: skip


def add_quiet_arg(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: no progress bars."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bars (they go to stderr, and only when stderr is a "
                        "terminal)")  # fmt: skip


def show_progress(quiet: bool) -> bool:
    """Whether to draw progress bars: on a terminal (stderr) and not ``--quiet``; never into a
    file or a pipe, where they would only be noise."""
    return not quiet and sys.stderr.isatty()


def progress(total: int, desc: str, enabled: bool):
    """A tqdm bar on stderr (imported only when one is drawn), or a stand-in that does nothing.
    Use as a context manager and call ``.update(n)``."""
    if enabled:
        try:
            from tqdm import tqdm
        except ImportError:  # tqdm missing: run without a bar
            return _NoBar()
        return tqdm(total=total, desc=desc, leave=False, file=sys.stderr)
    return _NoBar()


class _NoBar(contextlib.AbstractContextManager):
    def __exit__(self, *exc) -> None:
        return None

    def update(self, n: int = 1) -> None:
        pass


def counted(items: Iterable, total: int, desc: str, enabled: bool) -> Iterator:
    """``items``, advancing a progress bar (see :func:`progress`) by one per item."""
    with progress(total, desc, enabled) as bar:
        for item in items:
            yield item
            bar.update(1)


# A token that is a negative number ("-1", "-1e-3", "-inf", "-0x1p-3"), not an option.
NEGATIVE_NUMBER = re.compile(r"^-(\d|\.\d|inf|infinity|nan|0x)", re.IGNORECASE)


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with negative numbers read as values: argparse takes
    ``--lr -1e-3`` for a missing value followed by an unknown option, where the user meant a
    (bad) number. A leading space keeps such a token a value, which the argument types strip, so
    the error names what is wrong with the number. Then, when figures will be written, ``--out``
    is made and tried."""
    args = parser.parse_args([" " + a if NEGATIVE_NUMBER.match(a) else a for a in argv])
    if getattr(args, "out", None) is not None and not getattr(args, "no_plots", False):
        _check_writable(parser, args.out)
    return args


def split_list(text: str) -> list[str]:
    """``"fp16,Format(4, 3),bf16"`` -> ``["fp16", "Format(4, 3)", "bf16"]``: commas inside
    parentheses belong to a ``Format(...)``."""
    items, depth, cur = [], 0, []
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [t.strip() for t in items if t.strip()]


# ---- argument types: each raises argparse.ArgumentTypeError (exit 2, one line on stderr) ------
def _whole_number(text: str) -> int:
    """``500``, ``10_000``, ``1e4`` (a float that is a whole number) as an int."""
    t = text.strip()
    try:
        return int(t)
    except ValueError:
        pass
    try:
        v = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not math.isfinite(v) or v != math.floor(v):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(v)


def whole_number(lo: int, hi: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number in [lo, hi]; ``why`` explains the upper limit."""

    def parse(text: str) -> int:
        v = _whole_number(text)
        if not lo <= v <= hi:
            reason = f" ({why})" if why and v > hi else ""
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {lo:,} to {hi:,}{reason}; got {text.strip()}"
            )
        return v

    parse.__name__ = "whole number"
    return parse


steps_arg = whole_number(1, MAX_STEPS, STEPS_WHY)
seed_arg = whole_number(0, MAX_SEED, "numpy seeds; the demo derives more seeds from it")


def lr_arg(text: str) -> float:
    """A learning rate: a positive finite number."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(
            f"the learning rate must be a positive finite number; got {text.strip()}"
        )
    return v


def power_of_two_scale(text: str) -> float:
    """A loss scale: a power of two 2^k, k in :data:`SCALE_EXPONENTS` (why: :data:`SCALE_WHY`),
    written ``1024``, ``2**15``, ``2^-3``, ``65536.0`` or ``0x1p20``."""
    v = scale_value(text)
    m, e = math.frexp(v)
    lo, hi = SCALE_EXPONENTS
    if m != 0.5:
        raise argparse.ArgumentTypeError(
            f"{text.strip()} is not a power of two; the scale must be one (1024, 2**15, 2^-3, "
            f"...) because {SCALE_WHY}"
        )
    if not lo <= e - 1 <= hi:
        raise argparse.ArgumentTypeError(
            f"the scale must be from 2^{lo} to 2^{hi} (GradScaler keeps it in fp32, as a normal "
            f"number); got {text.strip()} = 2^{e - 1}"
        )
    return v


def format_arg(text: str):
    """A format, spelt any way :func:`fpsim.get_format` reads: ``fp16``, ``half``, ``e4m3``,
    ``e4m3_ieee``, ``Format(4, 3, bias=5, style='fn')``."""
    from fpsim.formats import get_format

    try:
        return get_format(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def low_format(purpose: str) -> Callable[[str], object]:
    """An argparse type: a format (as :func:`format_arg`) narrower than fp32 and held exactly by
    it, the formats autocast computes in and fp32 master weights can hold. ``purpose`` says,
    in the error, why the demo needs one."""

    def parse(text: str):
        from fpsim.autograd.precision import contains
        from fpsim.formats import fp32

        f = format_arg(text)
        if not (f.signed and f.has_zero):
            raise argparse.ArgumentTypeError(
                f"{f.name} is a scale format (unsigned, no zero), not one for values; this demo "
                f"needs a signed format narrower than fp32 (fp16, bf16, fp8_e4m3, ...): {purpose}"
            )
        if f == fp32 or not contains(fp32, f):
            why = "it is fp32 itself" if f == fp32 else "fp32 does not hold all its values"
            raise argparse.ArgumentTypeError(
                f"{f.name}: {why}; this demo needs a format narrower than fp32 that fp32 holds "
                f"exactly (fp16, bf16, tf32, fp8_e4m3, fp8_e5m2, Format(4, 3), ...): {purpose}"
            )
        return f

    parse.__name__ = "format"
    return parse


#: ``--format`` of the training demos: anything else would make autocast warn and switch
#: itself off, and every "low-precision" run would silently be fp32.
autocast_format_arg = low_format(
    "autocast runs in such a format, and with any other it switches itself off, leaving every "
    "run fp32"
)


def save_figure(fig, out: str | Path, name: str) -> Path:
    """Write ``fig`` to ``out/name`` (PNG) byte-reproducibly: no "Software" (matplotlib
    version) metadata, so the same figure gives the same file with the same matplotlib."""
    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    return path


def add_training_args(
    parser: argparse.ArgumentParser, steps: int, seed: int, lr: float, optimizer: str = "Adam",
    what: str = "recipe",
) -> None:  # fmt: skip
    """``--steps``, ``--seed`` and ``--lr``, the same rules and help in every training demo."""
    parser.add_argument("--steps", type=steps_arg, default=steps,
                        help=f"optimizer steps per {what}, at most 100000 (default: "
                        "%(default)s)")  # fmt: skip
    parser.add_argument("--seed", type=seed_arg, default=seed,
                        help="data, initial weights and batch order: 0 .. 2^32-1 "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("--lr", type=lr_arg, default=lr,
                        help=f"{optimizer}'s learning rate, positive (default: %(default)s)")


def pct(x: float, digits: int = 2) -> str:
    """The share ``x`` (0..1) as a percentage with ``digits`` decimals; a non-zero share too small
    to show is "<0.01%" (for 2 digits), never "0.00%", which would read as none at all."""
    smallest = 10.0**-digits
    if 0 < 100 * x < smallest / 2:
        return f"<{smallest:.{digits}f}%"
    return f"{100 * x:.{digits}f}%"


def pow2(v: float) -> str:
    """``65536 (2^16)`` for a power of two (``9.54e-07 (2^-20)`` for a small one), else
    ``1000``."""
    if v > 0 and math.isfinite(v):
        m, e = math.frexp(v)
        if m == 0.5:
            if v.is_integer() and v < 2**40:
                s = str(int(v))
            else:
                s = f"{v:g}" if abs(e - 1) < 20 else f"{v:.3g}"
            return f"{s} (2^{e - 1})"
    return f"{v:g}"


def scale_value(text: str) -> float:
    """A loss scale: a number (``1024``, ``2**15``, ``2^-3``, ``65536.0``, ``0x1p20``), positive
    and finite."""
    t = text.strip().replace("^", "**")
    try:
        if "**" in t:
            base, exp = t.split("**", 1)
            v = float(base) ** float(exp)
        elif t.lower().lstrip("+-").startswith("0x"):
            v = float.fromhex(t)
        else:
            v = float(t)
    except (ValueError, OverflowError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"a scale must be positive and finite, got {text!r}")
    return v


def tex_pow2(v: float) -> str:
    """``$2^{16}$`` for a power of two, else ``%g``: the one way the figures write powers of two
    (matplotlib's mathtext, so every superscript renders the same)."""
    if v > 0 and math.isfinite(v) and math.frexp(v)[0] == 0.5:
        return f"$2^{{{math.frexp(v)[1] - 1}}}$"
    return f"{v:g}"


def style_reference(ax, label: str = "fp32") -> None:
    """Draw the reference curve (the one labelled ``label``) thin, dashed and black on top, and
    the other curves wide and half transparent under it: a curve that follows the reference
    step for step then stays visible as a coloured band around the dashes."""
    for line in ax.get_lines():
        gid = line.get_gid() or ""
        if not gid.startswith("loss:"):
            continue
        if gid == f"loss:{label}":
            line.set(color="black", linestyle=(0, (4, 3)), linewidth=1.1, zorder=4)
        else:
            line.set(linewidth=3.2, alpha=0.75, solid_capstyle="butt")
    ax.legend(fontsize=9)


@dataclasses.dataclass
class ScaleHistory:
    """What a run's loss scale did over the steps: the first and last scale used, the lowest
    and highest, how often it grew and backed off, how many steps were skipped."""

    scaling: str
    first: float
    final: float
    lowest: float
    highest: float
    grew: int
    backed_off: int
    skipped: int
    steps: int
    growth_interval: int

    @classmethod
    def of(cls, result) -> ScaleHistory:
        """From a :class:`~fpsim.amp.TrainResult`: the scales its steps used."""
        import numpy as np

        s = np.asarray(result.scales, dtype=np.float64)
        d = np.diff(s)
        rec = result.recipe
        return cls(rec.scaling, float(s[0]), float(s[-1]), float(s.min()), float(s.max()),
                   int(np.count_nonzero(d > 0)), int(np.count_nonzero(d < 0)),
                   int(result.skipped.sum()), int(result.skipped.size),
                   int(rec.growth_interval))  # fmt: skip

    def story(self, tex: bool = False) -> str:
        """One line (no final period) of what happened to the scale."""
        p = tex_pow2 if tex else pow2
        skip = f"{self.skipped} of {self.steps} steps skipped"
        if self.scaling == "static":
            return f"static {p(self.first)}, never changes; {skip}"
        if not self.grew and not self.backed_off:
            why = (
                f"growth needs {self.growth_interval} clean steps and the run had {self.steps}"
                if self.steps <= self.growth_interval
                else "no overflow and no growth"
            )
            return f"stayed at {p(self.first)} ({why}); {skip}"
        parts = []
        if self.grew:
            parts.append(f"doubled {times(self.grew)}")
        if self.backed_off:
            parts.append(f"halved {times(self.backed_off)}")
        return f"from {p(self.first)}: {' and '.join(parts)}, last {p(self.final)}; {skip}"


def times(n: int) -> str:
    """``once``, ``twice``, ``3 times``."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def fit_title(ax, text: str, fontsize: float = 10) -> None:
    """Set ``text`` as the Axes' left-aligned title, its lines wrapped at spaces so that the
    title stays inside the figure (measured with the renderer, mathtext included)."""
    import textwrap

    fig = ax.get_figure(root=True) if _has_root_kw(ax) else ax.figure
    renderer = fig.canvas.get_renderer()
    # the title starts at the Axes' left edge: what is right of it is the room there is
    room = fig.bbox.width * (1 - ax.get_position().x0) - 12
    for width in range(140, 20, -4):
        lines = [textwrap.fill(line, width) for line in text.split("\n")]
        title = ax.set_title("\n".join(lines), loc="left", fontsize=fontsize)
        if title.get_window_extent(renderer).width <= room:
            return


def _has_root_kw(ax) -> bool:
    try:
        ax.get_figure(root=True)
    except TypeError:  # matplotlib < 3.10
        return False
    return True


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
