"""What :func:`fpsim.torch.watch` found: the :class:`Report` and its parts.

Nothing here needs PyTorch: a report is histograms and counts, and reads back from its dict.

Zones (``zero``, ``underflow``, ``subnormal``, ``normal``, ``overflow``, ``nonfinite``) are
those of :class:`fpsim.stats.RangeHistogram`: what rounding each value to nearest-even in the
format does, exactly. Three views per tensor and format:

* **as stored**: the values as recorded (a gradient recorded under a GradScaler with its loss
  scale divided out, exactly, the scale being a power of two);
* **per-tensor scaled**: each recorded tensor multiplied by its own power-of-two scale
  ``2^floor(log2(max / amax))`` first (TransformerEngine's current scaling with
  ``power_of_2`` scales: the tensor's amax lands in the format's top binade; amax is its
  largest *finite* magnitude, so a tensor holding inf/NaN is scaled as its finite values
  would be, where TE would fall back to the scale 1);
* **per-block** (block schemes): every tensor quantized by the scheme (blocks along its last
  dimension), counting the elements flushed to zero, kept as subnormals, saturated.

The **loss-scale window** for a format: the power-of-two scales ``2^k`` under which no
gradient tensor overflows and each loses at most ``eps`` of its non-zero values to zero
(:meth:`Report.scale_window`), computed per tensor and intersected.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..formats import get_format
from ..stats import RangeHistogram

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Report", "TensorStats", "ScaleWindow", "TensorWindow", "SkipReport",
           "OverflowEvent", "SwampStats", "GRAD_KINDS", "KINDS"]  # fmt: skip

#: The tensor kinds a watch records, in report order.
KINDS = ("activation", "activation_grad", "weight", "weight_grad", "optimizer_state")
#: The kinds a loss scale multiplies.
GRAD_KINDS = ("activation_grad", "weight_grad")
#: What a block scheme did to the elements (as :data:`fpsim.stats.OUTCOMES`, plus totals).
BLOCK_COUNTS = ("values", "nonzero", "zero", "subnormal", "saturated", "nonfinite")
# The scales 2^k searched: float64's exponent range (a window edge beyond it, possible only for
# float64 tensors near float64's own limits, is clipped to it).
_K_LO, _K_HI = -1074, 1023


@dataclass
class TensorStats:
    """Everything recorded for one (module, kind): ``hist`` (a RangeHistogram of the values
    counted, loss scale divided out), ``per_tensor`` (format -> zones after each tensor's own
    power-of-two scale), ``blocks`` (scheme -> counts of :data:`BLOCK_COUNTS`), ``tensors``
    (tensors recorded), ``seen`` (their elements), ``counted`` (the elements counted: fewer
    when sampling), ``amax`` (the largest finite magnitude seen, over every element even when
    sampling, loss scale divided out), ``dtypes`` (the torch dtypes seen)."""

    module: str
    kind: str
    hist: RangeHistogram
    per_tensor: dict[str, dict[str, int]] = field(default_factory=dict)
    blocks: dict[str, dict[str, int]] = field(default_factory=dict)
    tensors: int = 0
    seen: int = 0
    counted: int = 0
    amax: float = 0.0
    dtypes: list[str] = field(default_factory=list)

    @property
    def nonzero(self) -> int:
        """Non-zero finite values counted."""
        h = self.hist
        return h.count - h.zero - h.nonfinite

    def zones(self, fmt: str, scaling: str = "none") -> dict[str, int]:
        """Zone counts in ``fmt``: ``scaling="none"`` (as stored) or ``"per_tensor"``."""
        if scaling == "none":
            return self.hist.zones(fmt)
        if scaling == "per_tensor":
            return dict(self.per_tensor[get_format(fmt).name])
        raise ValueError(f"scaling must be 'none' or 'per_tensor', got {scaling!r}")

    def fractions(self, fmt: str, scaling: str = "none") -> dict[str, float]:
        """:meth:`zones` as shares of the non-zero finite values (``zero`` and ``nonfinite``
        as shares of all values)."""
        z = self.zones(fmt, scaling)
        n = self.hist.count
        nz = n - z["zero"] - z["nonfinite"]
        out = {}
        for k, v in z.items():
            d = n if k in ("zero", "nonfinite") else nz
            out[k] = v / d if d else 0.0
        return out

    def block_fractions(self, scheme: str) -> dict[str, float]:
        """A block scheme's counts as shares of the non-zero finite elements."""
        c = self.blocks[scheme]
        nz = c["nonzero"]
        return {k: (c[k] / nz if nz else 0.0) for k in ("zero", "subnormal", "saturated")}

    def to_dict(self, formats: tuple[str, ...]) -> dict:
        exps, counts = self.hist.bins()
        return {
            "module": self.module, "kind": self.kind, "tensors": self.tensors,
            "seen": self.seen, "counted": self.counted, "amax": self.amax,
            "dtypes": list(self.dtypes),
            "zones": {f: self.hist.zones(f) for f in formats},
            "per_tensor": {f: dict(z) for f, z in self.per_tensor.items()},
            "blocks": {s: dict(c) for s, c in self.blocks.items()},
            "histogram": {"exponents": exps.tolist(), "counts": counts.tolist(),
                          "zero": self.hist.zero, "nonfinite": self.hist.nonfinite},
        }  # fmt: skip


# ---- the loss-scale window -------------------------------------------------------------------
@dataclass(frozen=True)
class TensorWindow:
    """One tensor's own window: scales ``2^lo .. 2^hi`` (``lo`` None: no lower limit, the
    tensor holds no non-zero value; ``hi`` None: no upper limit, it is all zeros).
    ``underflow_at_lo``: the share of its non-zero values lost at ``2^lo``."""

    module: str
    kind: str
    lo: int | None
    hi: int | None
    underflow_at_lo: float
    nonzero: int
    nonfinite: int

    @property
    def feasible(self) -> bool:
        return self.lo is None or self.hi is None or self.lo <= self.hi

    @property
    def label(self) -> str:
        return f"{self.module or '<model>'} {self.kind}"


def _pow2(k: int | None, none: str) -> str:
    return none if k is None else f"2^{k}"


@dataclass(frozen=True)
class ScaleWindow:
    """The feasible loss-scale window of a format over the model's gradients.

    ``lo``, ``hi``: the window ``2^lo .. 2^hi`` (None: unbounded on that side); ``feasible``;
    ``tensors``: every gradient tensor's own :class:`TensorWindow`; ``culprits``: when there is
    no feasible scale, the tensors whose windows exclude each other (those needing a scale
    above the others' upper limit, and those overflowing below the others' lower limit).
    ``no_scaling_needed``: 1 lies in the window (bf16's case). ``suggested``: 1 when no
    scaling is needed, else the middle of the window (a power of two), None when infeasible.
    """

    fmt: str
    eps: float
    lo: int | None
    hi: int | None
    feasible: bool
    tensors: tuple[TensorWindow, ...]
    culprits: tuple[TensorWindow, ...]

    @property
    def no_scaling_needed(self) -> bool:
        return self.feasible and (self.lo is None or self.lo <= 0) and (
            self.hi is None or self.hi >= 0)  # fmt: skip

    @property
    def suggested(self) -> float | None:
        if not self.feasible:
            return None
        if self.no_scaling_needed:
            return 1.0
        if self.lo is None or self.hi is None:
            return 2.0 ** (self.hi if self.lo is None else self.lo)
        return 2.0 ** ((self.lo + self.hi) // 2)

    @property
    def verdict(self) -> str:
        """One sentence: the window, "no scaling needed", or "no feasible scale" and why."""
        eps = f"{100 * self.eps:g}%"
        if not self.tensors:
            return f"{self.fmt}: no gradients recorded"
        if self.feasible:
            span = f"{_pow2(self.lo, '0')} .. {_pow2(self.hi, 'inf')}"
            if self.no_scaling_needed:
                return (f"{self.fmt}: no scaling needed (1 lies in the window {span} where no "
                        f"gradient overflows and none loses more than {eps} to zero)")  # fmt: skip
            k = int(round(math.log2(self.suggested)))
            return (f"{self.fmt}: loss scales {span} keep every gradient tensor from overflowing "
                    f"with at most {eps} of it lost to zero (suggested: 2^{k})")  # fmt: skip
        alone = [t for t in self.culprits if not t.feasible]
        need = sorted((t for t in self.culprits if t.feasible and t.lo is not None
                       and self.hi is not None and t.lo > self.hi),
                      key=lambda t: -t.lo)  # fmt: skip
        over = sorted((t for t in self.culprits if t.feasible and t not in need),
                      key=lambda t: t.hi)  # fmt: skip

        def some(ts: list[TensorWindow], text) -> str:
            more = f" and {len(ts) - 2} more" if len(ts) > 2 else ""
            return ", ".join(text(t) for t in ts[:2]) + more

        parts = []
        if alone:
            parts.append(some(alone, lambda t: f"{t.label} alone needs >= 2^{t.lo} to lose at "
                              f"most {eps} but overflows above 2^{t.hi}"))  # fmt: skip
        if need:
            parts.append(some(need, lambda t: f"{t.label} needs >= 2^{t.lo}"))
        if over:
            parts.append(some(over, lambda t: f"{t.label} overflows above 2^{t.hi}"))
        return f"{self.fmt}: no feasible scale: " + "; ".join(parts)

    def to_dict(self) -> dict:
        d = {"fmt": self.fmt, "eps": self.eps, "lo": self.lo, "hi": self.hi,
             "feasible": self.feasible, "no_scaling_needed": self.no_scaling_needed,
             "suggested": self.suggested, "verdict": self.verdict}  # fmt: skip
        d["tensors"] = [asdict(t) for t in self.tensors]
        d["culprits"] = [t.label for t in self.culprits]
        return d


def _search(pred, lo: int = _K_LO, hi: int = _K_HI) -> int | None:
    """The smallest k in [lo, hi] with pred(k) true, pred monotone (False... True); None if
    none is."""
    if not pred(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def tensor_window(rec: TensorStats, fmt: str, eps: float) -> TensorWindow:
    """The window of one recorded tensor (see :class:`TensorWindow`): the largest k with
    ``amax · 2^k`` not overflowing (amax exact, over every element), the smallest k with at
    most ``eps`` of the counted non-zero values underflowing."""
    f = get_format(fmt)
    hi = None
    if rec.amax > 0:
        one = RangeHistogram(formats=(f,))
        one.add(np.array([rec.amax]))
        first_over = _search(lambda k: one.zones(f, 2.0**k)["overflow"] > 0)
        hi = None if first_over is None else first_over - 1
    nz = rec.nonzero
    lo, under = None, 0.0
    if nz:
        h = rec.hist
        lo = _search(lambda k: h.zones(f, 2.0**k)["underflow"] <= eps * nz)
        under = h.zones(f, 2.0**lo)["underflow"] / nz
    return TensorWindow(rec.module, rec.kind, lo, hi, under, nz, rec.hist.nonfinite)


def scale_window(records: list[TensorStats], fmt: str, eps: float) -> ScaleWindow:
    """Intersect the tensors' windows (see :class:`ScaleWindow`)."""
    f = get_format(fmt)
    wins = tuple(tensor_window(r, f.name, eps) for r in records)
    los = [w.lo for w in wins if w.lo is not None]
    his = [w.hi for w in wins if w.hi is not None]
    lo = max(los) if los else None
    hi = min(his) if his else None
    feasible = lo is None or hi is None or lo <= hi
    culprits: tuple[TensorWindow, ...] = ()
    if not feasible:
        culprits = tuple(w for w in wins if (w.lo is not None and w.lo > hi)
                         or (w.hi is not None and w.hi < lo))  # fmt: skip
    return ScaleWindow(f.name, float(eps), lo, hi, feasible, wins, culprits)


# ---- skipped steps -----------------------------------------------------------------------------
@dataclass(frozen=True)
class OverflowEvent:
    """A gradient tensor that held inf/NaN, or values beyond the format's max, in a backward
    pass, in the order the backward pass produced it (``seq``). ``nonfinite``: its inf and NaN
    elements (``nan`` of them NaN); ``beyond``: finite values larger than the format's max (in
    a wider dtype: they overflow if cast to the format); ``amax_finite``: its largest finite
    magnitude as stored (loss scale included); ``binades_over``: ``log2(amax_finite / max)``
    when positive. ``binades_estimate``: for a tensor that overflowed to inf, where its values
    would have been: ``log2(a · scale / max)`` with ``a`` the tensor's largest magnitude
    (unscaled) at the last step it was finite (None before any)."""

    seq: int
    module: str
    kind: str
    param: str | None
    dtype: str
    numel: int
    nonfinite: int
    nan: int
    beyond: int
    amax_finite: float
    binades_over: float | None
    binades_estimate: float | None = None

    @property
    def label(self) -> str:
        """``"blocks.1.fc activation_grad"``, or for a parameter ``"blocks.1.fc.weight grad"``."""
        if self.param is not None:
            return f"{self.param} grad"
        return f"{self.module or '<model>'} {self.kind}"


@dataclass(frozen=True)
class SkipReport:
    """One step of a GradScaler run: whether its optimizer step was skipped, the loss scale
    of its backward pass and after ``update()``, and the gradient tensors that overflowed,
    first first."""

    step: int
    skipped: bool
    scale: float | None
    new_scale: float | None
    fmt: str
    events: tuple[OverflowEvent, ...]

    @property
    def first(self) -> OverflowEvent | None:
        """The first tensor that overflowed to inf/NaN (what made the scaler skip), else the
        first holding values beyond the format's max."""
        for e in self.events:
            if e.nonfinite:
                return e
        return self.events[0] if self.events else None

    def __str__(self) -> str:
        s = _scale_text(self.scale)
        if not self.skipped:
            return f"step {self.step} was not skipped (loss scale {s})"
        head = f"step {self.step} was skipped (loss scale {s}"
        head += f" -> {_scale_text(self.new_scale)})" if self.new_scale is not None else ")"
        e = self.first
        if e is None:
            return head + ": no recorded gradient overflowed (an unwatched tensor did?)"
        what = []
        fmax = f"{self.fmt}'s max {get_format(self.fmt).max:g}"
        if e.nonfinite:
            what.append(f"{e.nonfinite:,} of {e.numel:,} values inf/NaN ({e.nan:,} NaN)")
            if e.binades_estimate is not None:
                side = "above" if e.binades_estimate >= 0 else "below"
                b = abs(e.binades_estimate)
                what.append(f"its largest value at its last finite step, times this scale, "
                            f"lies {b:.1f} binades {side} {fmax}")  # fmt: skip
        if e.beyond:
            what.append(f"{e.beyond:,} finite values beyond {fmax}, the largest by "
                        f"{e.binades_over:.1f} binades")  # fmt: skip
        verb = "overflow" if e.nonfinite else "exceed the max"
        text = (f"{head}: the first gradient to {verb} in the backward pass was {e.label} "
                f"({e.dtype}): " + "; ".join(what))  # fmt: skip
        rest = sum(1 for x in self.events if x.nonfinite and x is not e)
        if rest:
            text += f"; {rest} more tensors overflowed after it"
        return text

    def to_dict(self) -> dict:
        d = asdict(self)
        d["first"] = None if self.first is None else self.first.label
        d["text"] = str(self)
        return d


def _scale_text(s: float | None) -> str:
    if s is None:
        return "?"
    m, e = math.frexp(s)
    return f"2^{e - 1}" if m == 0.5 else f"{s:g}"


# ---- update swamping ---------------------------------------------------------------------------
@dataclass
class SwampStats:
    """Optimizer updates of one parameter over the recorded steps: ``elements`` (element
    updates looked at), ``grad_nonzero`` (with a non-zero gradient), ``lost_own`` (of those,
    updates that left the parameter unchanged in its own dtype: swamped even with fp32 master
    weights when the parameters are fp32), ``updates`` (non-zero applied updates Δw),
    ``vanished`` (format -> how many of them vanish if the weight were held in that format,
    round to nearest: ``round(w + Δw) == w``), ``vanished_sr`` (format -> the expected number
    with stochastic rounding)."""

    param: str
    dtype: str
    steps: int = 0
    elements: int = 0
    grad_nonzero: int = 0
    lost_own: int = 0
    updates: int = 0
    vanished: dict[str, int] = field(default_factory=dict)
    vanished_sr: dict[str, float] = field(default_factory=dict)

    def fractions(self) -> dict[str, float]:
        out = {"own": self.lost_own / self.grad_nonzero if self.grad_nonzero else 0.0}
        for f, n in self.vanished.items():
            out[f] = n / self.updates if self.updates else 0.0
            out[f + ":stochastic"] = self.vanished_sr[f] / self.updates if self.updates else 0.0
        return out


# ---- the report --------------------------------------------------------------------------------
def percent(x: float) -> str:
    """A share as the tables print it: "0", "<0.01%" or "12.34%"."""
    if x == 0:
        return "0"
    if x < 0.0001:
        return "<0.01%"
    return f"{100 * x:.2f}%"


class Report:
    """The findings of a :class:`~fpsim.torch.Watch` (``w.report()``).

    ``records``: ``{(module, kind): TensorStats}`` in model order; ``formats``: the element
    formats; ``schemes``: the block schemes; ``skips``: a :class:`SkipReport` per skipped step;
    ``swamping``: ``{param: SwampStats}``. ``str(report)`` is the printed table;
    :meth:`to_markdown`, :meth:`to_dict` / :meth:`to_json` and the figures
    (:meth:`plot_layers`, :meth:`plot_windows`) show the same numbers.
    """

    def __init__(self, records: dict[tuple[str, str], TensorStats], formats: tuple[str, ...],
                 schemes: tuple[str, ...], info: dict, skips: list[SkipReport],
                 swamping: dict[str, SwampStats], eps: float = 1e-3) -> None:  # fmt: skip
        self.records = records
        self.formats = tuple(formats)
        self.schemes = tuple(schemes)
        self.info = dict(info)
        self.skips = list(skips)
        self.swamping = swamping
        self.eps = float(eps)

    # ---- numbers -----------------------------------------------------------------------------
    def __getitem__(self, key: tuple[str, str]) -> TensorStats:
        if key not in self.records:
            raise KeyError(f"nothing recorded for {key}; recorded: {list(self.records)}")
        return self.records[key]

    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k in KINDS if any(kind == k for _, kind in self.records))

    def total(self, kind: str) -> RangeHistogram:
        """All recorded tensors of one kind merged into one histogram."""
        recs = [r for (_, k), r in self.records.items() if k == kind]
        if not recs:
            raise KeyError(f"no {kind!r} recorded; recorded kinds: {self.kinds()}")
        out = RangeHistogram(recs[0].hist.formats)
        for r in recs:
            out.merge(r.hist)
        return out

    def scale_window(self, fmt: str = "fp16", eps: float | None = None,
                     kinds: tuple[str, ...] = GRAD_KINDS) -> ScaleWindow:  # fmt: skip
        """The loss-scale window of ``fmt`` over the gradient tensors (see
        :class:`ScaleWindow`); ``eps``: the share of a tensor's non-zero values it may lose to
        zero (default: the report's, 0.1%)."""
        e = self.eps if eps is None else float(eps)
        if not 0 <= e < 1:
            raise ValueError(f"eps must be in [0, 1), got {e!r}")
        recs = [r for (_, k), r in self.records.items() if k in kinds]
        return scale_window(recs, fmt, e)

    # ---- text --------------------------------------------------------------------------------
    def by_kind(self) -> dict[str, TensorStats]:
        """Every kind's tensors merged into one :class:`TensorStats` (module ``"(all)"``)."""
        out = {}
        for kind in self.kinds():
            recs = [r for (_, k), r in self.records.items() if k == kind]
            m = TensorStats("(all)", kind, self.total(kind))
            for r in recs:
                m.tensors += r.tensors
                m.seen += r.seen
                m.counted += r.counted
                m.amax = max(m.amax, r.amax)
                m.dtypes += [d for d in r.dtypes if d not in m.dtypes]
                for table, mine in ((r.per_tensor, m.per_tensor), (r.blocks, m.blocks)):
                    for name, counts in table.items():
                        acc = mine.setdefault(name, dict.fromkeys(counts, 0))
                        for c, n in counts.items():
                            acc[c] += n
            out[kind] = m
        return out

    def _rows(self, by: str) -> list[TensorStats]:
        if by == "tensor":
            return list(self.records.values())
        if by == "kind":
            return list(self.by_kind().values())
        raise ValueError(f"by must be 'kind' or 'tensor', got {by!r}")

    def _header(self) -> str:
        i = self.info
        samp = "every element" if not i.get("sample") else (
            f"a seeded sample of {i['sample']:g} of the elements"
            if i["sample"] < 1 else f"a seeded sample of {int(i['sample']):,} elements per tensor")
        return (f"{i.get('steps_recorded', 0)} of {i.get('steps_seen', 0)} steps recorded "
                f"(every {i.get('every', 1)}), {samp}; {len(self.records)} tensors "
                f"({', '.join(self.kinds())})")  # fmt: skip

    def _tables(self, md: bool, by: str) -> list[str]:
        rows = self._rows(by)
        out = []
        name_w = max([len(r.module or "<model>") for r in rows] + [6])

        def line(cells: list[str], widths: list[int]) -> str:
            if md:
                return "| " + " | ".join(cells) + " |"
            return "  ".join(c.ljust(w) if j < 2 else c.rjust(w)
                             for j, (c, w) in enumerate(zip(cells, widths, strict=True)))

        def table(title: str, cols: list[str], cell) -> None:
            head = ["module", "kind", "values"] + cols
            widths = [name_w, 15, 12] + [max(len(c), 17) for c in cols]
            lines = [title, line(head, widths)]
            if md:
                lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
            for r in rows:
                lines.append(line([r.module or "<model>", r.kind, f"{r.counted:,}"]
                                  + [cell(r, c) for c in cols], widths))  # fmt: skip
            out.append("\n".join(lines))

        def zone_cell(scaling):
            def cell(r, f):
                if scaling == "per_tensor" and f not in r.per_tensor:
                    return "-"
                fr = r.fractions(f, scaling)
                return f"{percent(fr['underflow'])} / {percent(fr['overflow'])}"
            return cell

        fm = list(self.formats)
        if fm:
            table("As stored: share of the non-zero values lost to zero / overflowing"
                  + (" (loss scale divided out)" if self.info.get("scaler") else ""),
                  fm, zone_cell("none"))  # fmt: skip
            table("Per-tensor scaled (each tensor times 2^floor(log2(max/amax))): lost to zero / "
                  "overflowing", fm, zone_cell("per_tensor"))  # fmt: skip
        if self.schemes:
            def bcell(r, s):
                if s not in r.blocks:
                    return "-"
                b = r.block_fractions(s)
                return f"{percent(b['zero'])} / {percent(b['saturated'])}"

            table("Per-block (blocks along the last dimension): flushed to zero / saturated",
                  list(self.schemes), bcell)  # fmt: skip
        return out

    def _nonfinite_text(self) -> str:
        bad = {k: r.hist.nonfinite for k, r in self.by_kind().items() if r.hist.nonfinite}
        if not bad:
            return ""
        return ("Non-finite values recorded (inf/NaN, left out of the shares above): "
                + ", ".join(f"{n:,} in {k}" for k, n in bad.items()))  # fmt: skip

    def _windows_text(self, md: bool) -> str:
        lines = [f"Loss-scale windows (gradients; at most {100 * self.eps:g}% of a tensor's "
                 "non-zero values lost to zero, no overflow):"]  # fmt: skip
        for f in self.formats:
            w = self.scale_window(f)
            lines.append(("- " if md else "  ") + w.verdict)
        return "\n".join(lines)

    def _skips_text(self, md: bool) -> str:
        n = self.info.get("scaler_steps", 0)
        if not self.info.get("scaler"):
            return "Skipped steps: no GradScaler was watched."
        lines = [f"Skipped steps: {len(self.skips)} of {n}"]
        lines += [("- " if md else "  ") + str(s) for s in self.skips]
        return "\n".join(lines)

    def swamping_total(self) -> SwampStats:
        """Every parameter's :class:`SwampStats` added up (param ``"(all)"``)."""
        tot = SwampStats("(all)", ",".join(sorted({s.dtype for s in self.swamping.values()})))
        for s in self.swamping.values():
            for name in ("steps", "elements", "grad_nonzero", "lost_own", "updates"):
                setattr(tot, name, getattr(tot, name) + getattr(s, name))
            for f, n in s.vanished.items():
                tot.vanished[f] = tot.vanished.get(f, 0) + n
                tot.vanished_sr[f] = tot.vanished_sr.get(f, 0.0) + s.vanished_sr[f]
        return tot

    def _swamping_text(self, md: bool, by: str) -> str:
        if not self.swamping:
            return ""
        fmts = sorted({f for s in self.swamping.values() for f in s.vanished})
        lines = ["Update swamping (share of the applied updates Δw that vanish, round(w + Δw) "
                 "== w, if the weights were held in the format; nearest / stochastic rounding "
                 "(expected); 'own': updates with a non-zero gradient lost in the parameters' "
                 "own dtype)"]  # fmt: skip
        rows = list(self.swamping.values())
        if by == "kind" and fmts:  # the total and the three parameters that lose the most
            worst = sorted(rows, key=lambda s: -s.fractions()[fmts[0]])[:3]
            rows = [self.swamping_total()] + worst
            lines[0] += f"; all parameters, then the three that lose the most in {fmts[0]}"
        w = max(len(s.param) for s in rows) + 2
        head = ["parameter".ljust(w), "updates".rjust(12), "own".rjust(8)] + [
            f"{f} near / SR".rjust(22) for f in fmts]
        lines.append(("| " + " | ".join(h.strip() for h in head) + " |") if md else "".join(head))
        if md:
            lines.append("|---|---:|---:|" + "---:|" * len(fmts))
        for st in rows:
            fr = st.fractions()
            cells = [st.param.ljust(w), f"{st.updates:,}".rjust(12), percent(fr["own"]).rjust(8)]
            cells += [f"{percent(fr[f])} / {percent(fr[f + ':stochastic'])}".rjust(22)
                      for f in fmts]  # fmt: skip
            lines.append(("| " + " | ".join(c.strip() for c in cells) + " |") if md
                         else "".join(cells))  # fmt: skip
        return "\n".join(lines)

    def _sampling_text(self) -> str:
        s = self.info.get("sample")
        if not s:
            return ""
        n = min((r.counted for r in self.records.values() if r.counted), default=0)
        err = 1.96 * math.sqrt(0.25 / n) if n else math.nan
        return (f"Sampling: a share p estimated from n counted values is within "
                f"±1.96·sqrt(p(1-p)/n) of the full count (95%); the smallest n here is "
                f"{n:,}, so within ±{100 * err:.2g} percentage points at worst (p = 1/2). amax, "
                f"and so overflow and the windows' upper edges, are exact.")  # fmt: skip

    def __str__(self) -> str:
        return self.table()

    def table(self, by: str = "kind") -> str:
        """The printed report: the zone tables with one row per tensor kind (``by="kind"``,
        every module merged; what ``str(report)`` gives) or per module and kind
        (``by="tensor"``), then the loss-scale windows, skipped steps and update swamping."""
        parts = [f"fpsim.torch report: {self._header()}", *self._tables(False, by),
                 self._nonfinite_text(), self._windows_text(False), self._skips_text(False),
                 self._swamping_text(False, by), self._sampling_text()]  # fmt: skip
        return "\n\n".join(p for p in parts if p)

    def to_markdown(self, by: str = "kind") -> str:
        """The report as Markdown: the same tables and sentences as :meth:`table`."""
        tables = []
        for t in self._tables(True, by):
            title, rest = t.split("\n", 1)
            tables.append(f"**{title}**\n\n{rest}")
        parts = [f"### fpsim.torch report\n\n{self._header()}", *tables,
                 self._nonfinite_text(), self._windows_text(True), self._skips_text(True),
                 self._swamping_text(True, by), self._sampling_text()]  # fmt: skip
        return "\n\n".join(p for p in parts if p) + "\n"

    def to_dict(self) -> dict:
        """Every number of the report, JSON-friendly."""
        return {
            "info": self.info, "formats": list(self.formats), "schemes": list(self.schemes),
            "eps": self.eps,
            "tensors": [r.to_dict(self.formats) for r in self.records.values()],
            "windows": {f: self.scale_window(f).to_dict() for f in self.formats},
            "skips": [s.to_dict() for s in self.skips],
            "swamping": {p: asdict(s) | {"fractions": s.fractions()}
                         for p, s in self.swamping.items()},
        }  # fmt: skip

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text (``kwargs`` go to :func:`json.dumps`)."""
        return json.dumps(self.to_dict(), **kwargs)

    # ---- figures -----------------------------------------------------------------------------
    def plot_layers(
        self, kind: str = "activation_grad", fmt: str = "fp16",
        scale: float | str | None = "suggested", modules: Any = None,
    ) -> Figure:  # fmt: skip
        """One range histogram per module of ``kind`` against ``fmt``'s zones
        (:func:`fpsim.plot.plot_layer_histograms`), before and after ``scale``: a power of two,
        ``"suggested"`` (the window's suggestion for fmt, when there is one) or None."""
        from ..plot import plot_layer_histograms

        hists = {r.module or "<model>": r.hist for (m, k), r in self.records.items()
                 if k == kind and (modules is None or m in modules)}  # fmt: skip
        if not hists:
            raise ValueError(f"no {kind!r} recorded for those modules")
        if scale == "suggested":
            scale = self.scale_window(fmt).suggested if kind in GRAD_KINDS else None
            scale = None if scale == 1.0 else scale
        fig = plot_layer_histograms(hists, fmt, scale=scale)
        k = None if scale is None else round(math.log2(scale))
        fig.suptitle(f"{kind} per module against {get_format(fmt).name}'s range"
                     + ("" if k is None else f", and times the scale $2^{{{k}}}$"))
        return fig

    def plot_windows(self, fmt: str = "fp16", eps: float | None = None) -> Figure:
        """Each gradient tensor's own loss-scale window (the scales 2^k under which it does not
        overflow and loses at most ``eps`` to zero) as a bar on the axis of k, and where they
        all meet shaded; when they do not meet ("no feasible scale") the culprits are drawn in
        the underflow colour, and a tensor without any window of its own as a hatched gap
        between its upper and lower limits.

        Figure: 9 × (0.32 × tensors + 2.2) inches at :data:`fpsim.plot.DPI`.
        """
        from matplotlib.patches import Patch

        from ..plot.common import PALETTE, _new_figure

        w = self.scale_window(fmt, eps)
        ts = list(w.tensors)
        if not ts:
            raise ValueError("no gradients recorded")
        fig = _new_figure((9, 0.32 * len(ts) + 2.2))
        ax = fig.subplots()
        finite = [k for t in ts for k in (t.lo, t.hi) if k is not None]
        lo_v = min(finite, default=-10) - 4
        hi_v = max(finite, default=10) + 4
        culprits = {(t.module, t.kind) for t in w.culprits}
        gap = False
        for i, t in enumerate(ts):
            a = lo_v if t.lo is None else t.lo
            b = hi_v if t.hi is None else t.hi
            colour = PALETTE["underflow"] if (t.module, t.kind) in culprits else PALETTE["data"]
            if b >= a:
                ax.barh(i, b - a + 1, left=a - 0.5, height=0.6, color=colour, alpha=0.8)
            else:  # overflows above 2^b, loses too much below 2^a: no scale of its own
                gap = True
                ax.barh(i, a - b - 1, left=b + 0.5, height=0.6, facecolor="none",
                        edgecolor=colour, hatch="////", lw=1.0)  # fmt: skip
        if w.feasible:
            a = lo_v if w.lo is None else w.lo
            b = hi_v if w.hi is None else w.hi
            ax.axvspan(a - 0.5, b + 0.5, color=PALETTE["normal"], alpha=0.15, lw=0)
        ax.axvline(0, color="#444444", lw=0.8, ls="--")
        ax.set_yticks(range(len(ts)), [t.label for t in ts], fontsize=7.5)
        ax.invert_yaxis()
        ax.set_xlim(lo_v, hi_v)
        ax.set_xlabel("the loss scale's exponent k (scale $2^k$); dashed: $2^0$, no scaling")
        if w.feasible:
            head = (f"{w.fmt}: no scaling needed" if w.no_scaling_needed else
                    f"{w.fmt}: loss scales {_tex_pow2(w.lo, '0')} .. {_tex_pow2(w.hi, 'inf')}")
        else:
            head = f"{w.fmt}: no feasible loss scale"
        ax.set_title(f"{head}\neach gradient tensor's scales: no overflow, at most "
                     f"{100 * w.eps:g}% of its non-zero values lost to zero", fontsize=9.5,
                     loc="left")  # fmt: skip
        handles = [Patch(color=PALETTE["data"], alpha=0.8, label="a tensor's scales")]
        if culprits:
            handles.append(Patch(color=PALETTE["underflow"], alpha=0.8,
                                 label="culprits: windows that exclude each other"))  # fmt: skip
        if gap:
            handles.append(Patch(facecolor="none", edgecolor=PALETTE["underflow"], hatch="////",
                                 label="no scale of its own (between its limits)"))  # fmt: skip
        if w.feasible:
            handles.append(Patch(color=PALETTE["normal"], alpha=0.15,
                                 label="every tensor's scales"))  # fmt: skip
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8,
                   frameon=False)  # fmt: skip
        return fig


def _tex_pow2(k: int | None, none: str) -> str:
    return none if k is None else f"$2^{{{k}}}$"
