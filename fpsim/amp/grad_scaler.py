"""``GradScaler``: dynamic loss scaling with PyTorch's semantics, and a static variant.

>>> import fpsim
>>> from fpsim import nn, optim
>>> from fpsim.amp import GradScaler, autocast
>>> model = nn.Linear(4, 2, seed=0)
>>> opt = optim.SGD(model.parameters(), lr=0.1)
>>> scaler = GradScaler(init_scale=1024.0, growth_interval=2)
>>> x, y = fpsim.randn(8, 4, generator=0), fpsim.tensor([0, 1] * 4)
>>> for step in range(3):
...     with autocast("cuda"):
...         loss = nn.functional.cross_entropy(model(x), y)
...     opt.zero_grad()
...     scaler.scale(loss).backward()     # gradients of loss * 1024
...     scaler.step(opt)                  # unscale (fp32), check inf/NaN, step or skip
...     scaler.update()                   # grow every 2 clean steps, back off on inf/NaN
...     print(step, scaler.get_scale())
0 1024.0
1 2048.0
2 2048.0

Semantics (PyTorch 2.13, see the module docstring of :mod:`fpsim.amp`):

* the scale is a float32 scalar made at the first :meth:`~GradScaler.scale` (``get_scale()``
  returns ``init_scale`` as given before that); the growth tracker an int32 counter;
* :meth:`~GradScaler.unscale_` multiplies the gradients in place by
  ``inv = float32(1 / float64(scale))`` after checking the *scaled* values for inf/NaN (per
  optimizer; ``found_inf`` is recorded also when the unscaled values are then non-finite);
* :meth:`~GradScaler.step` unscales first unless already done, and skips ``optimizer.step()``
  when that optimizer's gradients held inf/NaN;
* :meth:`~GradScaler.update` sums the found_inf flags of every optimizer seen this iteration and
  runs the update rule (back off, or grow every ``growth_interval`` clean steps if the grown
  scale is finite), with float64 arithmetic and a float32 result;
* the per-optimizer state machine READY -> UNSCALED -> STEPPED and its errors, word for word.

The two core steps are the kernels of :mod:`fpsim.amp.functional` (numba CPU, and numba CUDA
for CUDA arrays).

Where fpsim differs: ``device`` is a label (there is one simulated device; no CUDA availability
check); ``update(new_scale)`` also accepts Python ints; gradients of any format except fp16 are
accepted (bf16 as in PyTorch; fp8 etc. beyond PyTorch: unscaled in float32 and rounded once to
their format).
"""

from __future__ import annotations

import numbers
from collections import abc, defaultdict
from enum import Enum
from typing import Any

import numpy as np

from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from ..formats import fp16, fp32
from .functional import amp_foreach_non_finite_check_and_unscale_, amp_update_scale_

__all__ = ["GradScaler", "StaticGradScaler", "OptState", "register_scale_check"]

# Checks GradScaler.scale runs on the outputs it scales (a layer above may refuse a loss scale
# where it is meaningless: fpsim.amp.fp8 refuses FP8 layers with delayed gradient scaling).
_scale_checks: list = []


def register_scale_check(fn) -> None:
    """Have :meth:`GradScaler.scale` call ``fn(outputs)`` before scaling (it may raise)."""
    if fn not in _scale_checks:
        _scale_checks.append(fn)


class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state() -> dict[str, Any]:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


_FIX = (
    "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the "
    "iteration."
)


class GradScaler:
    """``GradScaler(device="cuda", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True)``, as ``torch.amp.GradScaler``.

    ``growth_factor`` must be > 1 and ``backoff_factor`` < 1 (AssertionError otherwise).
    ``enabled=False`` makes every method a pass-through (``scale`` returns its input,
    ``get_scale()`` is 1.0, ``step`` always steps): the "no scaling" recipe with the same loop.
    """

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        self._device = device
        self._enabled = bool(enabled)
        if self._enabled:
            if not growth_factor > 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if not backoff_factor < 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale: np.ndarray | None = None  # float32, shape (1,), made lazily
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker: np.ndarray | None = None  # int32, shape (1,)
            self._per_optimizer_states: defaultdict = defaultdict(_refresh_per_optimizer_state)

    # ---- helpers -----------------------------------------------------------------------------
    def _check_scale_growth_tracker(self, funcname: str) -> tuple[np.ndarray, np.ndarray]:
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + _FIX)
        if self._growth_tracker is None:
            raise AssertionError(f"Attempted {funcname} but _growth_tracker is None.  " + _FIX)
        return self._scale, self._growth_tracker

    def _lazy_init_scale_growth_tracker(self) -> None:
        assert self._growth_tracker is None, "_growth_tracker initialized before _scale"
        self._scale = np.full(1, self._init_scale, dtype=np.float32)
        self._growth_tracker = np.full(1, self._init_growth_tracker, dtype=np.int32)

    # ---- scale -------------------------------------------------------------------------------
    def _scale_operand(self) -> Tensor:
        """The factor as PyTorch multiplies by it: a 0-dim float32 tensor (a copy of the scale,
        so that a later ``update()`` cannot change what a graph kept)."""
        if self._scale is None:
            self._lazy_init_scale_growth_tracker()
        return Tensor._make(np.array(self._scale[0], dtype=np.float32), fp32)

    def scale(self, outputs):
        """Multiply ``outputs`` (a Tensor, or a nested list/tuple of Tensors; other iterables
        give a lazy ``map``) by the scale factor, a 0-dim float32 tensor as PyTorch's. By the
        promotion rule (a dimensioned tensor outranks a 0-dim one) an fp16/bf16 output with
        dimensions keeps its format, while a 0-dim one -- a loss -- becomes fp32: an fp16 loss
        2.0 scales to 131072.0, not to fp16's inf."""
        if not self._enabled:
            return outputs
        for check in _scale_checks:
            check(outputs)
        if isinstance(outputs, Tensor):
            return outputs * self._scale_operand()

        stash: list[Tensor] = []

        def apply_scale(val):
            if isinstance(val, Tensor):
                if not stash:
                    stash.append(self._scale_operand())
                return val * stash[0]
            if isinstance(val, abc.Iterable):
                iterable = map(apply_scale, val)
                if isinstance(val, (list, tuple)):
                    return type(val)(iterable)
                return iterable
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply_scale(outputs)

    # ---- unscale_ ----------------------------------------------------------------------------
    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16: bool) -> dict:
        per_format: dict = defaultdict(list)
        with no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    assert isinstance(param, Tensor)
                    if param.grad is None:
                        continue
                    if (not allow_fp16) and param.grad.format == fp16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    per_format[param.grad.format].append(param.grad)
            for grads in per_format.values():
                amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        # one simulated device: at most one entry, absent when no gradient was seen
        return {self._device: found_inf} if per_format else {}

    def unscale_(self, optimizer) -> None:
        """Divide ("unscale") ``optimizer``'s gradients by the scale, in place, after checking
        the scaled gradients for inf/NaN. Call it before gradient clipping; ``step`` then does
        not unscale again. At most once per optimizer per iteration."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        elif optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # the reciprocal in float64, rounded once to float32 (as PyTorch)
        # a scale of 0 gives inf, and one below 2^-128 an inverse beyond float32 (see the pitfall)
        with np.errstate(divide="ignore", over="ignore"):
            inv_scale = np.array([1.0 / np.float64(self._scale[0])], dtype=np.float32)
        found_inf = np.zeros(1, dtype=np.float32)
        optimizer_state["found_inf_per_device"] = self._unscale_grads_(
            optimizer, inv_scale, found_inf, False
        )
        optimizer_state["stage"] = OptState.UNSCALED

    # ---- step --------------------------------------------------------------------------------
    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        retval = None
        if not sum(float(v[0]) for v in optimizer_state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        return retval

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless ``unscale_`` was called), then run ``optimizer.step(*args,
        **kwargs)`` unless the gradients held inf/NaN. Returns what ``optimizer.step``
        returned, or None when the step was skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if optimizer_state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if len(optimizer_state["found_inf_per_device"]) == 0:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = self._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)
        optimizer_state["stage"] = OptState.STEPPED
        return retval

    # ---- update ------------------------------------------------------------------------------
    def _set_scale(self, new_scale) -> None:
        if isinstance(new_scale, numbers.Real) and not isinstance(new_scale, bool):
            self._scale[0] = new_scale  # rounded to float32
            return
        reason = "new_scale should be a float or a 1-element fpsim Tensor with requires_grad=False."
        if not isinstance(new_scale, Tensor):
            raise AssertionError(reason)
        if new_scale.numel() != 1 or new_scale.requires_grad:
            raise AssertionError(reason)
        self._scale[0] = float(new_scale.item())

    def _combined_found_inf(self) -> np.ndarray:
        found_infs = [
            found_inf
            for state in self._per_optimizer_states.values()
            for found_inf in state["found_inf_per_device"].values()
        ]
        if len(found_infs) == 0:
            raise AssertionError("No inf checks were recorded prior to update.")
        combined = found_infs[0].copy()
        for f in found_infs[1:]:
            combined += f
        return combined

    def update(self, new_scale=None) -> None:
        """Update the scale: set it to ``new_scale`` when given (the tracker is left alone);
        otherwise back off if any optimizer found inf/NaN this iteration, else count a clean
        step and grow every ``growth_interval`` of them. Resets the per-optimizer states."""
        if not self._enabled:
            return
        _scale, _growth_tracker = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            self._set_scale(new_scale)
        else:
            found_inf_combined = self._combined_found_inf()
            amp_update_scale_(
                _scale,
                _growth_tracker,
                found_inf_combined,
                self._growth_factor,
                self._backoff_factor,
                self._growth_interval,
            )
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    # ---- getters / setters -------------------------------------------------------------------
    def get_scale(self) -> float:
        """The current scale as a Python float (``init_scale`` before the first ``scale``;
        1.0 when disabled)."""
        if self._enabled:
            return self._init_scale if self._scale is None else float(self._scale[0])
        return 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if self._enabled:
            if self._growth_tracker is None:
                return self._init_growth_tracker
            return int(self._growth_tracker[0])
        return 0

    def is_enabled(self) -> bool:
        return self._enabled

    # ---- state_dict --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{scale, growth_factor, backoff_factor, growth_interval, _growth_tracker}`` (empty
        when disabled)."""
        if self._enabled:
            return {
                "scale": self.get_scale(),
                "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker(),
            }
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled "
                "instance of GradScaler."
            )
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale[0] = state_dict["scale"]
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker[0] = state_dict["_growth_tracker"]

    def __repr__(self) -> str:
        if not self._enabled:
            return f"{type(self).__name__}(enabled=False)"
        return (
            f"{type(self).__name__}(scale={self.get_scale()}, growth_factor="
            f"{self._growth_factor}, backoff_factor={self._backoff_factor}, growth_interval="
            f"{self._growth_interval}, growth_tracker={self._get_growth_tracker()})"
        )


class StaticGradScaler(GradScaler):
    """Static loss scaling (beyond PyTorch's API): a fixed scale ``S`` with GradScaler's loop and
    state machine; ``update()`` never changes the scale (``update(new_scale)`` still sets it).

    ``skip_non_finite=True`` (default) skips steps whose gradients hold inf/NaN, as a GradScaler
    does; ``False`` steps anyway -- the plain static scaling of Micikevicius et al. (2018), where
    an overflow writes inf/NaN into the weights. In PyTorch the nearest equivalent is
    ``GradScaler(init_scale=S, growth_interval=2**31 - 1)``, which also backs off after an
    overflow.

    >>> s = StaticGradScaler(1024.0)
    >>> s.get_scale(), s.get_growth_interval()
    (1024.0, 2147483647)
    """

    def __init__(
        self,
        scale: float = 2.0**10,
        device: str = "cuda",
        enabled: bool = True,
        skip_non_finite: bool = True,
    ) -> None:
        super().__init__(device, init_scale=scale, growth_interval=2**31 - 1, enabled=enabled)
        self.skip_non_finite = skip_non_finite

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        if self.skip_non_finite:
            return super()._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        if not self._enabled:
            return
        self._check_scale_growth_tracker("update")
        if new_scale is not None:
            self._set_scale(new_scale)
        else:
            self._combined_found_inf()  # the same "No inf checks were recorded" check
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)
