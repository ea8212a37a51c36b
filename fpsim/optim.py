"""Optimizers with PyTorch's update formulas, for parameters of any format.

``SGD`` (momentum, dampening, weight decay, nesterov), ``Adam`` and ``AdamW`` (bias correction,
eps added after the square root, AdamW's decoupled decay, amsgrad), ``param_groups``,
``zero_grad(set_to_none=True)``, ``state_dict``/``load_state_dict``, and ``clip_grad_norm_``.

Where the arithmetic happens:

* **fp32 parameters** (and fp64): the update is the sequence of PyTorch's elementwise ops in
  float32 (float64) numpy, each rounding to fp32 -- as PyTorch's fp32 optimizers do.
* **low-precision parameters, ``master_weights=False``** (the default): pure low-precision
  training. Optimizer state (momentum, exp_avg, ...) is kept in the parameter's format, as
  PyTorch keeps fp16 state for fp16 parameters; each state tensor and the parameter are computed
  in float64 from the stored values and rounded once to the format per step. Small updates are
  *lost*: an fp16 weight 1.0 does not move with an update of 2^-12 (half its spacing 2^-11 below
  1.0, a tie that rounds back to 1.0 -- and above 1.0 the spacing is 2^-10).
* **low-precision parameters, ``master_weights=True``** (mixed-precision training, Micikevicius
  et al. 2018): the optimizer holds an fp32 *master copy* of each parameter (made at its first
  step), applies the fp32 update to it, and writes the master rounded once to the parameter's
  format back into the parameter. The master accumulates the small updates that the
  low-precision weight cannot represent.

>>> import numpy as np
>>> from fpsim import nn, optim
>>> w = nn.Parameter([1.0], format="fp16")
>>> opt = optim.SGD([w], lr=2.0**-12)
>>> for _ in range(8):
...     w.grad = nn.Parameter([1.0], format="fp16")  # an update of 2^-12 per step
...     opt.step()
>>> w.item()                                          # lost: fp16 cannot take 1 - 2^-12
1.0
>>> w2 = nn.Parameter([1.0], format="fp16")
>>> opt2 = optim.SGD([w2], lr=2.0**-12, master_weights=True)
>>> for _ in range(8):
...     w2.grad = nn.Parameter([1.0], format="fp16")
...     opt2.step()
>>> float(opt2.state[w2]["master"][0]), w2.item()     # master moved by 8 x 2^-12
(0.998046875, 0.998046875)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .autograd.grad_mode import no_grad
from .autograd.precision import _info, contains, promote_formats, to_format
from .autograd.tensor import Tensor
from .formats import Format, fp32

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "clip_grad_norm_"]


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Base class: parameter groups, per-parameter state, master copies, state_dict.

    ``params``: an iterable of Tensors, or of dicts ``{"params": [...], "lr": ..., ...}``
    (per-group options). ``optimizer.param_groups[i]["params"]`` lists the tensors (their
    ``.grad`` is what ``step`` reads -- and what a GradScaler unscales in place).
    """

    def __init__(self, params: Iterable, defaults: dict, master_weights: bool = False) -> None:
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts"
            )
        self.defaults = dict(defaults)
        self.master_weights = bool(master_weights)
        self.param_groups: list[dict] = []
        self.state: dict[Tensor, dict] = {}
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict) -> None:
        group = dict(group)
        ps = group["params"]
        group["params"] = [ps] if isinstance(ps, Tensor) else list(ps)
        for p in group["params"]:
            if not isinstance(p, Tensor) or p.format is None:
                raise TypeError("optimizer can only optimize floating-point Tensors")
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError(f"parameter group didn't specify a value of required option {k}")
            group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.data[...] = 0
                    p.grad._bump_version()  # PyTorch's grad.zero_() counts a version

    # ---- where each parameter's arithmetic happens -------------------------------------------
    def _uses_master(self, p: Tensor) -> bool:
        return self.master_weights and p.format != fp32 and contains(fp32, p.format)

    def _state_format(self, p: Tensor) -> Format:
        return fp32 if self._uses_master(p) else p.format

    def _load(self, p: Tensor, state: dict) -> tuple[np.ndarray, np.ndarray, Format]:
        """(weights, gradient, state format) as arrays in the update's math dtype."""
        # The updates below never write into these arrays (no copies needed).
        if self._uses_master(p):
            if "master" not in state:
                state["master"] = p.data.astype(np.float32)  # exact: fp32 holds the format
            return state["master"], p.grad.data.astype(np.float32, copy=False), fp32
        dt = _info(p.format).math
        return p.data.astype(dt, copy=False), p.grad.data.astype(dt, copy=False), p.format

    def _store(self, p: Tensor, state: dict, w: np.ndarray, writes: int = 1) -> None:
        """Write the new weights into ``p`` and count ``writes`` versions: PyTorch updates a
        parameter with in-place ops (``add_``; AdamW's decay ``mul_`` and then ``addcdiv_``),
        so a graph that kept the old weights refuses a backward after the step."""
        if self._uses_master(p):
            state["master"][...] = w
        p.data[...] = to_format(w, p.format)
        for _ in range(writes):
            p._bump_version()

    def _param_writes(self, group: dict) -> int:
        """How many in-place ops PyTorch's step applies to each parameter of ``group``."""
        return 1

    # ---- step --------------------------------------------------------------------------------
    @no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            from .autograd.grad_mode import enable_grad

            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.setdefault(p, {})
                w, g, sfmt = self._load(p, state)
                with np.errstate(all="ignore"):
                    w = self._update(w, g, state, group, sfmt)
                self._store(p, state, w, self._param_writes(group))
        return loss

    def _update(self, w, g, state, group, sfmt):  # pragma: no cover - abstract
        raise NotImplementedError

    # ---- state_dict --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}`` with
        copies of every array (master copies included), as PyTorch's layout."""
        index: dict[int, int] = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state:
                    state[index[id(p)]] = {
                        k: (v.copy() if isinstance(v, np.ndarray) else v)
                        for k, v in self.state[p].items()
                    }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, theirs in zip(self.param_groups, groups, strict=True):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't match the size "
                    "of optimizer's group"
                )
        self.state = {}
        for mine, theirs in zip(self.param_groups, groups, strict=True):
            for p, i in zip(mine["params"], theirs["params"], strict=True):
                if i in state_dict["state"]:
                    self.state[p] = {
                        k: (v.copy() if isinstance(v, np.ndarray) else v)
                        for k, v in state_dict["state"][i].items()
                    }
            mine.update({k: v for k, v in theirs.items() if k != "params"})

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(f"    master_weights: {self.master_weights}")
        return "\n".join(lines) + "\n)"


class SGD(Optimizer):
    """Stochastic gradient descent, PyTorch's formula::

    g = grad (+ weight_decay * w)
    buf = g                        (first step)
    buf = momentum * buf + (1 - dampening) * g
    g = g + momentum * buf  if nesterov  else  buf
    w = w - lr * g
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
        master_weights: bool = False,
    ):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
        )
        super().__init__(params, defaults, master_weights)

    def _update(self, w, g, state, group, sfmt):
        lr, mom, damp = group["lr"], group["momentum"], group["dampening"]
        wd, nesterov = group["weight_decay"], group["nesterov"]
        if group["maximize"]:
            g = -g
        if wd != 0:
            g = g + wd * w
        if mom != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = np.array(g, copy=True)
            else:
                buf = buf.astype(w.dtype, copy=False) * mom + (g if damp == 0 else (1 - damp) * g)
            state["momentum_buffer"] = to_format(buf, sfmt)  # kept in the state format
            buf = state["momentum_buffer"].astype(w.dtype, copy=False)
            g = g + mom * buf if nesterov else buf
        return w - lr * g


class Adam(Optimizer):
    """Adam (Kingma & Ba), PyTorch's formula::

    g = grad (+ weight_decay * w)                  # Adam: L2 penalty in the gradient
    w = w * (1 - lr * weight_decay)                # AdamW instead: decoupled decay
    m = m + (1 - beta1) * (g - m)                  # lerp
    v = beta2 * v + (1 - beta2) * g * g
    step_size = lr / (1 - beta1^t)
    denom = sqrt(v) / sqrt(1 - beta2^t) + eps      # eps after the square root
    w = w - step_size * m / denom
    """

    _decoupled = False

    def _param_writes(self, group: dict) -> int:
        return 2 if self._decoupled and group["weight_decay"] != 0 else 1

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        maximize: bool = False,
        master_weights: bool = False,
    ):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameters: {betas}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
        )
        super().__init__(params, defaults, master_weights)

    def _update(self, w, g, state, group, sfmt):
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        wd = group["weight_decay"]
        if group["maximize"]:
            g = -g
        if not state.get("step"):
            state["step"] = 0
            zero = to_format(np.zeros_like(w), sfmt)
            state["exp_avg"], state["exp_avg_sq"] = zero, zero.copy()
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = zero.copy()
        state["step"] += 1
        t = state["step"]
        if wd != 0:
            if self._decoupled:
                w = w * (1 - lr * wd)
            else:
                g = g + wd * w
        m = state["exp_avg"].astype(w.dtype, copy=False)
        v = state["exp_avg_sq"].astype(w.dtype, copy=False)
        state["exp_avg"] = to_format(m + (g - m) * (1 - b1), sfmt)  # kept in the state format
        state["exp_avg_sq"] = to_format(v * b2 + (1 - b2) * g * g, sfmt)
        m = state["exp_avg"].astype(w.dtype, copy=False)
        v = state["exp_avg_sq"].astype(w.dtype, copy=False)
        step_size = lr / (1 - b1**t)
        bc2_sqrt = math.sqrt(1 - b2**t)
        if group["amsgrad"]:
            vmax = np.maximum(state["max_exp_avg_sq"].astype(w.dtype), v)
            state["max_exp_avg_sq"] = to_format(vmax, sfmt)
            denom = np.sqrt(vmax) / bc2_sqrt + eps
        else:
            denom = np.sqrt(v) / bc2_sqrt + eps
        return w - step_size * (m / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``w *= 1 - lr * weight_decay``
    before the Adam update; default ``weight_decay=1e-2`` as PyTorch."""

    _decoupled = True

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        maximize: bool = False,
        master_weights: bool = False,
    ):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, master_weights)


@no_grad()
def clip_grad_norm_(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
) -> Tensor:
    """Scale the gradients in place so that their total ``norm_type``-norm is at most
    ``max_norm``; return the total norm (before clipping), PyTorch's semantics::

        total = norm([norm(g) for g in grads])      # each norm in its gradient's format
        coef = min(max_norm * (1 / (total + 1e-6)), 1)   # in the total's format
        g *= coef                                   # every gradient, rounded to its format

    Norms accumulate in fp32 (float64 for fp64 gradients) and round once to the format.
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return Tensor._make(np.zeros((), np.float32), fp32)
    norm_type = float(norm_type)

    def vnorm(x: np.ndarray, acc) -> Any:
        x = np.abs(x.astype(acc, copy=False))
        if norm_type == math.inf:
            return x.max() if x.size else acc.type(0)
        if norm_type == 2.0:
            return np.sqrt(np.sum(x * x, dtype=acc))
        return np.sum(x**norm_type, dtype=acc) ** (1.0 / norm_type)

    norms = []
    for g in grads:
        acc = _info(g.format).acc
        norms.append(to_format(vnorm(g.data, acc), g.format))
    tfmt = promote_formats([g.format for g in grads])
    tacc = _info(tfmt).acc
    stacked = np.array([to_format(n, tfmt) for n in norms], dtype=tacc)
    total = to_format(vnorm(stacked, tacc), tfmt)
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
            "so it cannot be clipped. To disable this error and scale the gradients by the "
            "non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    m = _info(tfmt).math
    # PyTorch computes max_norm / (total + 1e-6) as reciprocal(total + 1e-6) * max_norm: two
    # roundings, which differ from one division in the last bit (grads [6, 8], max_norm 5).
    recip = to_format(m.type(1) / to_format(total.astype(m) + m.type(1e-6), tfmt), tfmt)
    coef = to_format(recip.astype(m) * m.type(max_norm), tfmt)
    coef = np.minimum(coef, np.ones((), coef.dtype))
    for g in grads:
        gm = _info(g.format).math
        g.data[...] = to_format(g.data.astype(gm) * coef.astype(gm), g.format)
        g._bump_version()  # PyTorch's _foreach_mul_ counts one, also when coef is 1
    return Tensor._make(np.asarray(total), tfmt)


from . import lr_scheduler  # noqa: E402,F401  (fpsim.optim.lr_scheduler, as in torch.optim)
