"""``FormatTrace``: record the format of every op's inputs and outputs, forward and backward.

>>> import fpsim
>>> from fpsim.amp import FormatTrace, autocast
>>> from fpsim.nn import functional as F
>>> x, w = fpsim.ones(4, 3), fpsim.ones(2, 3, requires_grad=True)
>>> with FormatTrace() as tr:
...     with autocast("cuda"):
...         y = F.linear(x, w).sum()
...     y.backward()
>>> print(tr)
phase     op     inputs                 outputs
forward   cast   fp32[4x3]              fp16[4x3]
forward   cast   fp32[2x3]              fp16[2x3]
forward   linear fp16[4x3], fp16[2x3]   fp16[4x2]
forward   cast   fp16[4x2]              fp32[4x2]
forward   sum    fp32[4x2]              fp32[]
backward  sum    fp32[]                 fp32[4x2]
backward  cast   fp32[4x2]              fp16[4x2]
backward  linear fp16[4x2]              -, fp16[2x3]
backward  cast   fp16[2x3]              fp32[2x3]

Forward rows show an op's tensor arguments *after* autocast's casts (the casts are rows of their
own) and its result; backward rows the gradient arriving at the op's output and the gradients it
passes to its inputs, in the formats they are passed on in (``-`` where an input needs none).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..autograd.function import register_op_observer

__all__ = ["FormatTrace", "TraceEvent"]


def _describe(t) -> str:
    if t is None:
        return "-"
    name = t.format.name if t.format is not None else str(t.data.dtype)
    return f"{name}[{'x'.join(str(n) for n in t.shape)}]"


@dataclass(frozen=True)
class TraceEvent:
    """One op seen by :class:`FormatTrace`: ``phase`` ("forward"/"backward"), ``op`` (registry
    name), ``inputs`` and ``outputs`` as ``"fp16[4x3]"`` strings (``"-"`` for no tensor)."""

    phase: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


class FormatTrace:
    """Context manager recording one :class:`TraceEvent` per op run inside it (through
    :func:`fpsim.autograd.register_op_observer`). ``events`` is the list; ``str(trace)`` a
    table; ``ops(phase)`` the op names in order."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self._handle = None

    def _observe(self, phase, name, inputs, outputs) -> None:
        outs = [_describe(t) for t in outputs]
        while len(outs) > 1 and outs[-1] == "-":  # trailing non-tensor arguments (dims, ...)
            outs.pop()
        self.events.append(TraceEvent(phase, name, tuple(map(_describe, inputs)), tuple(outs)))

    def __enter__(self) -> FormatTrace:
        self._handle = register_op_observer(self._observe)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def ops(self, phase: str | None = None) -> list[str]:
        return [e.op for e in self.events if phase is None or e.phase == phase]

    def table(self) -> str:
        rows = [("phase", "op", "inputs", "outputs")]
        rows += [(e.phase, e.op, ", ".join(e.inputs), ", ".join(e.outputs)) for e in self.events]
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join(
            f"{r[0]:<{w[0] + 1}} {r[1]:<{w[1]}} {r[2]:<{w[2] + 2}} {r[3]}".rstrip() for r in rows
        )

    def __str__(self) -> str:
        return self.table()
