"""Teaching helpers: :func:`explain_op` explains one rounded operation step by step, and
:func:`trace_sum` runs a sum step by step, recording every rounding of the accumulator.

Both compute with fpsim's own kernels -- ``explain_op`` calls :mod:`fpsim.arith`'s operation,
``trace_sum`` runs the reduction of :mod:`fpsim.kernels.reduce` as plain Python -- and explain
the result with exact rational arithmetic (``fractions.Fraction``).
"""

from __future__ import annotations

import builtins
import decimal
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..core import _mode_code, _seed_value
from ..formats import Format, FormatLike, get_format
from ..inspect import exact_decimal
from ..kernels import reduce
from ..kernels.operands import binade, check_values, require_add
from . import elementwise as ew

__all__ = ["explain_op", "trace_sum", "SumStep", "SumTrace"]


def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def _quantum(q: Fraction, f: Format) -> Fraction:
    """The spacing of ``f`` at |q| (the subnormal spacing below the normal range)."""
    e = binade(builtins.abs(q)) if q != 0 else f.emin
    return _pow2(max(e, f.emin) - f.man_bits)


def _decimal(q: Fraction, digits: int = 40) -> str:
    """Every digit of a dyadic rational when there are at most ``digits``; else ~30 digits."""
    d = q.denominator
    if d & (d - 1) == 0:  # a power of two: the expansion is finite
        text = exact_decimal(q)
        if len(text.lstrip("-0.")) <= digits:
            return text
    with decimal.localcontext() as ctx:
        ctx.prec = 30
        return f"{decimal.Decimal(q.numerator) / decimal.Decimal(d)}..."


def _sqrt_approx(a: Fraction, bits: int = 200) -> tuple[Fraction, bool]:
    """(sqrt(a) or a 200-bit-accurate stand-in that is never a dyadic midpoint, exact?)."""
    scale = 4**bits
    n = a.numerator * scale // a.denominator
    r = math.isqrt(n)
    lo = Fraction(r, 2**bits)
    if lo * lo == a:
        return lo, True
    return lo + Fraction(1, 2 ** (bits + 1)), False


_OP_ALIASES = {
    "add": "add", "+": "add", "sub": "sub", "-": "sub", "mul": "mul", "*": "mul",
    "div": "div", "/": "div", "sqrt": "sqrt", "fma": "fma",
}  # fmt: skip
_MODE_TEXT = {
    "nearest_even": "round to nearest, ties to even",
    "nearest_away": "round to nearest, ties away from zero",
    "toward_zero": "round toward zero (truncate)",
    "up": "round up (toward +inf)",
    "down": "round down (toward -inf)",
    "stochastic": "stochastic rounding",
}


def _num(v: float) -> str:
    return repr(float(v))


def explain_op(
    a,
    op: str,
    b,
    fmt: FormatLike,
    rounding: str = "nearest_even",
    *,
    subnormals: bool = True,
    saturate: bool = False,
    seed: int | None = None,
) -> str:
    """Explain one operation step by step: the exact result, its two neighbours in ``fmt``, the
    rounding decision and the error in ulps. ``op``: ``add``/``+``, ``sub``/``-``,
    ``mul``/``*``, ``div``/``/``, ``sqrt`` (``b`` is None) or ``fma`` (``b = (b, c)``, computing
    ``a * b + c``). The result shown is the one :mod:`fpsim.arith` computes.

    >>> print(explain_op(1.0, "+", 2.0**-11, "fp16"))
    fp16: 1.0 + 0.00048828125  (round to nearest, ties to even)
      exact result   1.00048828125
      neighbours     1.0 < exact < 1.0009765625   (spacing 1 ulp = 2^-10 = 0.0009765625)
      position       0.5 ulp above 1.0: exactly halfway (a tie)
      decision       tie -> the neighbour with an even last bit: 1.0
      result         1.0   (error -0.00048828125 = -0.5 ulp)
    """
    f = get_format(fmt)
    name = _OP_ALIASES.get(op) if isinstance(op, str) else None
    if name is None:
        raise ValueError(f"unknown op {op!r}; choose one of {', '.join(_OP_ALIASES)}")
    if name == "sqrt":
        operands = (a,)
    elif name == "fma":
        if not (isinstance(b, (tuple, list)) and len(b) == 2):
            raise ValueError("for op='fma' pass b=(b, c): explain_op(a, 'fma', (b, c), fmt)")
        operands = (a, b[0], b[1])
    else:
        operands = (a, b)
    vals = [float(v) for v in operands]
    fn = {"add": ew.add, "sub": ew.sub, "mul": ew.mul, "div": ew.div, "sqrt": ew.sqrt,
          "fma": ew.fma}[name]
    result = fn(*vals, f, rounding, subnormals, saturate, seed)
    shown = {
        "add": lambda v: f"{_num(v[0])} + {_num(v[1])}",
        "sub": lambda v: f"{_num(v[0])} - {_num(v[1])}",
        "mul": lambda v: f"{_num(v[0])} * {_num(v[1])}",
        "div": lambda v: f"{_num(v[0])} / {_num(v[1])}",
        "sqrt": lambda v: f"sqrt({_num(v[0])})",
        "fma": lambda v: f"{_num(v[0])} * {_num(v[1])} + {_num(v[2])}  (fused: one rounding)",
    }[name](vals)
    lines = [f"{f.name}: {shown}  ({_MODE_TEXT[rounding]})"]
    if (
        not all(math.isfinite(v) for v in vals)
        or (name == "div" and vals[1] == 0)
        or (name == "sqrt" and vals[0] < 0)
    ):
        lines.append(f"  special case   no rounding: IEEE 754 defines the result, {_num(result)}")
        return "\n".join(lines)
    x = [Fraction(v) for v in vals]
    exact_known = True
    if name == "add":
        q = x[0] + x[1]
    elif name == "sub":
        q = x[0] - x[1]
    elif name == "mul":
        q = x[0] * x[1]
    elif name == "div":
        q = x[0] / x[1]
    elif name == "fma":
        q = x[0] * x[1] + x[2]
    else:
        q, exact_known = _sqrt_approx(x[0])
    if exact_known:
        lines.append(f"  exact result   {_decimal(q)}")
    else:
        lines.append(f"  exact result   {_decimal(q)}  (irrational)")
    fmax = Fraction(f.max)
    if builtins.abs(q) > fmax:
        # Beyond the largest finite value: the rounding mode decides between +-max and overflow.
        top = _quantum(fmax, f)
        sgn = "-" if q < 0 else ""
        lines.append(
            f"  out of range   |exact| > max = {_num(f.max)} (the next step would be "
            f"{_num(float(fmax + top))}, which {f.name} cannot hold)"
        )
        if math.isinf(result) or math.isnan(result):
            what = f"{sgn}inf" if f.has_inf else "NaN (a finite-only format has no infinity)"
            why = f"overflow -> {what}"
        else:
            why = f"stays at {sgn}max"
            if saturate:
                why += " (saturate=True)"
            elif rounding.startswith("nearest"):
                why += f" (less than half an ulp, {_decimal(top / 2)}, beyond it)"
            else:
                why += " (the rounding direction points back toward zero)"
        lines.append(f"  decision       {why}")
        lines.append(f"  result         {_num(result)}")
        return "\n".join(lines)
    quantum = _quantum(q, f)
    lo_mag = (builtins.abs(q) // quantum) * quantum
    if lo_mag == builtins.abs(q):
        lines.append(f"  representable  the exact result is a value of {f.name}: no rounding")
        note = ""
        if result == 0 and q != 0:
            note = "  (flushed to zero: subnormals=False)"
        lines.append(f"  result         {_num(result)}{note}")
        return "\n".join(lines)
    sign = -1 if q < 0 else 1
    lo, hi = sorted((sign * lo_mag, sign * (lo_mag + quantum)))
    k = binade(quantum)
    lines.append(
        f"  neighbours     {_num(float(lo))} < exact < {_num(float(hi))}   "
        f"(spacing 1 ulp = 2^{k} = {_decimal(quantum)})"
    )
    pos = (q - lo) / quantum  # in (0, 1)
    half = Fraction(1, 2)
    if pos == half:
        where = "exactly halfway (a tie)"
    elif pos < half:
        where = "below the midpoint"
    else:
        where = "above the midpoint"
    lines.append(f"  position       {float(pos):.6g} ulp above {_num(float(lo))}: {where}")
    toward = {True: _num(float(hi)), False: _num(float(lo))}
    if rounding == "nearest_even":
        if pos == half:
            even_hi = ((hi / quantum) % 2) == 0
            why = f"tie -> the neighbour with an even last bit: {toward[even_hi]}"
        else:
            why = f"nearest neighbour: {toward[pos > half]}"
    elif rounding == "nearest_away":
        if pos == half:
            why = f"tie -> away from zero: {toward[sign > 0]}"
        else:
            why = f"nearest neighbour: {toward[pos > half]}"
    elif rounding == "toward_zero":
        why = f"toward zero: {toward[sign < 0]}"
    elif rounding == "up":
        why = f"toward +inf: {toward[True]}"
    elif rounding == "down":
        why = f"toward -inf: {toward[False]}"
    else:
        p_away = pos if sign > 0 else 1 - pos
        away = toward[sign > 0]
        why = f"away from zero ({away}) with probability {float(p_away):.6g}"
    lines.append(f"  decision       {why}")
    extra = ""
    if math.isinf(result) or math.isnan(result):
        extra = "  (overflow)"
    elif result == 0 and not subnormals and lo_mag != 0:
        extra = "  (flushed to zero: subnormals=False)"
    if math.isfinite(result):
        err = Fraction(result) - q
        lines.append(
            f"  result         {_num(result)}   (error {_decimal(err, 20)} = "
            f"{float(err / quantum):.6g} ulp){extra}"
        )
    else:
        lines.append(f"  result         {_num(result)}{extra}")
    return "\n".join(lines)


@dataclass(frozen=True)
class SumStep:
    """One addition of a traced sum: ``rounded = acc(partial + addend)``.

    ``partial`` is None for the first term (the sum starts as that term, rounded to acc).
    ``lost_bits``: when the sum had to be rounded, how many of the addend's significant bits lie
    below the accumulator's last place at the exact sum -- bits that could not be kept
    (``addend_bits`` of them: the addend was swamped when the sum did not change at all); 0 when
    the sum is exact. Where ``partial`` or ``addend`` is inf or NaN (an input, or a partial sum
    that overflowed) ``exact`` is their IEEE float sum, and ``error``, ``ulp`` and the bit
    counts are 0.
    """

    step: int
    partial: float | None
    addend: float
    exact: Fraction | float
    rounded: float
    error: Fraction
    ulp: Fraction
    lost_bits: int
    addend_bits: int

    @property
    def error_ulps(self) -> float:
        return float(self.error / self.ulp) if self.ulp else 0.0

    @property
    def note(self) -> str:
        if not isinstance(self.exact, Fraction):
            return "inf/nan"  # an infinite or NaN operand: IEEE arithmetic, no rounding
        if not math.isfinite(self.rounded):
            return "overflow"  # a finite sum beyond the accumulator's range
        if self.error == 0:
            return "exact"
        if self.partial is not None and self.rounded == self.partial and self.addend != 0:
            return "swamped"
        return "rounded"


class SumTrace(list):
    """The steps of :func:`trace_sum` (a list of :class:`SumStep`), with ``result`` (the sum
    rounded to the output format), ``acc``, ``order``, and ``table()`` / ``str()``."""

    def __init__(self, steps, result: float, acc: Format, out: Format, order: str):
        super().__init__(steps)
        self.result = result
        self.acc = acc
        self.out = out
        self.order = order

    def table(self, max_rows: int | None = 40) -> str:
        """The steps as a text table (the middle elided past ``max_rows`` rows)."""
        steps = list(self)
        cut = max_rows is not None and len(steps) > max_rows
        shown = steps[: max_rows - 5] + [None] + steps[-5:] if cut else steps
        head = [
            "step",
            "partial",
            "+ addend",
            "= exact",
            f"-> {self.acc.name}",
            "lost bits",
            "note",
        ]
        body = []
        for s in shown:
            if s is None:
                body.append(["...", "", "", "", "", "", f"({len(steps) - max_rows + 1} steps)"])
                continue
            body.append(
                [
                    str(s.step),
                    "" if s.partial is None else _num(s.partial),
                    _num(s.addend),
                    _decimal(s.exact, 20) if isinstance(s.exact, Fraction) else _num(s.exact),
                    _num(s.rounded),
                    f"{s.lost_bits} of {s.addend_bits}" if s.addend_bits else "-",
                    s.note,
                ]
            )
        widths = [max(len(r[c]) for r in [head] + body) for c in range(len(head))]
        rows = [f"{self.order} sum, accumulator {self.acc.name}"]
        for r in [head] + body:
            cells = [r[c].rjust(widths[c]) for c in range(len(head) - 1)] + [r[-1]]
            rows.append("  ".join(cells).rstrip())
        rows.append(f"result ({self.out.name}): {_num(self.result)}")
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table()

    __repr__ = list.__repr__


def _significant_bits(v: float) -> tuple[int, int]:
    """(lowest, highest) exponent of the set bits of |v| (v finite, non-zero)."""
    q = Fraction(builtins.abs(v))
    hi = binade(q)
    low = hi
    while q / _pow2(low) != int(q / _pow2(low)):
        low -= 1
    while (q / _pow2(low + 1)).denominator == 1:
        low += 1
    return low, hi


def trace_sum(
    x,
    acc: FormatLike = "fp16",
    fmt: FormatLike | None = None,
    *,
    order: str = "sequential",
    out_fmt: FormatLike | None = None,
    rounding: str = "nearest_even",
    subnormals: bool = True,
    saturate: bool = False,
    seed: int | None = None,
) -> SumTrace:
    """Run a sum step by step with accumulator ``acc`` and record every addition.

    ``x``: a short 1-D sequence (the trace is computed in pure Python with the same scalar code
    the kernels compile). ``fmt``: the inputs' format, checked when given (default: none, any
    float64 values). The result is rounded to ``out_fmt`` (default ``fmt``, else ``acc``) and
    equals :func:`sum` with the same arguments. Returns a :class:`SumTrace`; print it for a
    table.

    >>> t = trace_sum([2048.0, 1.0, 1.0, 2.0], acc="fp16")
    >>> [s.rounded for s in t], [s.note for s in t]
    ([2048.0, 2048.0, 2048.0, 2050.0], ['exact', 'swamped', 'swamped', 'exact'])
    >>> print(t)
    sequential sum, accumulator fp16
    step  partial  + addend  = exact  -> fp16  lost bits  note
       0             2048.0     2048   2048.0     0 of 1  exact
       1   2048.0       1.0     2049   2048.0     1 of 1  swamped
       2   2048.0       1.0     2049   2048.0     1 of 1  swamped
       3   2048.0       2.0     2050   2050.0     0 of 1  exact
    result (fp16): 2050.0
    """
    a_fmt = get_format(acc)
    mode = _mode_code(rounding)
    require_add(a_fmt, "accumulation in")
    in_f = get_format(fmt) if fmt is not None else None
    out_f = get_format(out_fmt) if out_fmt is not None else (in_f or a_fmt)
    if order not in ("sequential", "pairwise"):
        raise ValueError(f"unknown order {order!r}; choose one of sequential, pairwise")
    order_code = reduce.PAIRWISE if order == "pairwise" else reduce.SEQUENTIAL
    seed_v = _seed_value(seed, mode)
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"trace_sum takes a 1-D sequence, got shape {arr.shape}")
    if in_f is not None:
        check_values(arr, in_f, "x")
    n = arr.size
    # The kernels' own reduction, run as plain Python on one lane, logging every accumulator
    # rounding (kind 0: a term rounded alone; 1: partial + addend).
    P = reduce.pack_params(a_fmt.record, out_f.record, mode, int(subnormals), int(saturate),
                           seed_v, order_code, 0, 1, record=True)  # fmt: skip
    A = arr.reshape(1, 1, n)
    out = np.empty((1, 1, 1))
    W = np.empty((reduce.NW, 1))
    ST = np.empty((reduce.STACK, 1))
    LOG = np.full((max(n, 1), reduce.NLOG), np.nan)
    dummy = np.zeros((1, 1, 1))
    reduce.reduce_row(A, dummy, dummy, out, 0, 0, 0, 1, W, ST, LOG, P)
    steps: list[SumStep] = []
    for kind, partial, addend, rounded in LOG:
        if math.isnan(kind):
            break
        steps.append(
            _step(len(steps), None if kind == 0 else float(partial), float(addend),
                  float(rounded), a_fmt)  # fmt: skip
        )
    return SumTrace(steps, float(out[0, 0, 0]), a_fmt, out_f, order)


def _step(i: int, partial: float | None, addend: float, rounded: float, a_fmt: Format) -> SumStep:
    """One SumStep: the exact sum, the error and the bits of the addend that were lost."""
    if not (math.isfinite(addend) and (partial is None or math.isfinite(partial))):
        # inf or NaN (an input, or a partial sum that overflowed): IEEE arithmetic
        exact = addend + (partial if partial is not None else 0.0)
        zero = Fraction(0)
        return SumStep(i, partial, addend, exact, rounded, zero, zero, 0, 0)
    exact = Fraction(addend) + (Fraction(partial) if partial is not None else 0)
    finite = math.isfinite(rounded)
    quantum = _quantum(exact, a_fmt) if finite else Fraction(0)
    if addend != 0:
        low, high = _significant_bits(addend)
        nbits = high - low + 1
        lost = min(max(binade(quantum) - low, 0), nbits) if quantum else 0
    else:
        nbits, lost = 0, 0
    err = Fraction(rounded) - exact if finite else Fraction(0)
    if finite and err == 0:
        lost = 0  # the sum is exact: the low bits combined with the partial sum's (2047 + 1)
    return SumStep(i, partial, addend, exact, rounded, err, quantum, lost, nbits)
