"""fpsim for your own PyTorch model: range reports, loss-scale windows, skip forensics, update
swamping, and low-precision emulation inside torch.

* :func:`watch` -- hooks on a ``torch.nn.Module`` that record, per module and tensor kind
  (activation, activation gradient, weight, weight gradient, optimizer state), range histograms
  exact against each format's boundaries; with ``torch.autocast`` and ``torch.amp.GradScaler``
  on or off, on CPU or CUDA tensors. ``w.report()`` gives a :class:`Report`: what fits each
  format with and without scaling (per-tensor and per-block), the feasible loss-scale window
  (or "no feasible scale" and why), skipped steps explained, updates that vanish.
* :func:`quantize` -- round a tensor to any format or block scheme inside autograd
  (straight-through gradient by default).
* :func:`emulate` / :func:`unemulate` / :func:`emulating` -- run a model's Linear, Conv and
  matmul layers as an FP8 / MX / NVFP4 recipe (:mod:`fpsim.amp.recipes`) would, on any
  hardware.
* :class:`TinyGPT` and :func:`sonnet_batches` -- the small transformer and data of the demo
  (``python -m fpsim.demo torch``) and the benchmark.

This package is the only part of fpsim that imports PyTorch (``import fpsim`` never does);
install it with ``pip install 'fpsim-bits[torch]'``.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without torch
    raise ImportError(
        "fpsim.torch needs PyTorch, which is not installed: pip install 'fpsim-bits[torch]' "
        f"(importing torch failed: {exc})"
    ) from exc

from .emulate import EmulatedLayer, emulate, emulating, unemulate
from .models import TinyGPT, sonnet_batches
from .quantize import quantize
from .report import Report, ScaleWindow, SkipReport
from .watch import DEFAULT_FORMATS, KINDS, Watch, watch

__all__ = [
    "watch",
    "Watch",
    "KINDS",
    "DEFAULT_FORMATS",
    "Report",
    "ScaleWindow",
    "SkipReport",
    "quantize",
    "emulate",
    "unemulate",
    "emulating",
    "EmulatedLayer",
    "TinyGPT",
    "sonnet_batches",
]
