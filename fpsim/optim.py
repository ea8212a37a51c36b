"""Optimizers with PyTorch's update formulas, for parameters of any format.

``SGD`` (momentum, dampening, weight decay, nesterov), ``Adam`` and ``AdamW`` (bias correction,
eps added after the square root, AdamW's decoupled decay, amsgrad), ``param_groups``,
``zero_grad(set_to_none=True)``, ``state_dict``/``load_state_dict``, and ``clip_grad_norm_``.

Where the arithmetic happens -- as ``torch.optim`` on a CPU (its default single-tensor path):

* **fp32 and fp16/bf16 parameters**: every update is the sequence of ATen ops
  ``torch.optim``'s ``_single_tensor_sgd``/``_single_tensor_adam`` run (``add_`` with
  ``alpha``, ``mul_``, ``lerp_``, ``addcmul_``, ``sqrt``, ``div``, ``addcdiv_``, ...), each
  rounded exactly as ATen's CPU kernel rounds it (:mod:`fpsim.aten_cpu`: fused multiply-adds,
  fp16/bf16 computed in fp32 and rounded to the format after every op, scalars converted as
  ATen converts them). Given the same gradients the parameters and the state are bit-identical
  to PyTorch's, step after step (the README's "Bit-identical to torch.optim" says where this
  holds: the CPU capability, and fp32 ``sqrt`` in MKL builds).
* **low-precision parameters, ``master_weights=False``** (the default): pure low-precision
  training. Optimizer state (momentum, exp_avg, ...) is kept in the parameter's format, as
  PyTorch keeps fp16 state for fp16 parameters. Small updates are *lost*: an fp16 weight 1.0
  does not move with an update of 2^-12 (half its spacing 2^-11 below 1.0, a tie that rounds
  back to 1.0 -- and above 1.0 the spacing is 2^-10). Formats PyTorch cannot compute in (fp8,
  tf32, ...) follow fp16's rules; fp64 and wider formats compute in float64 without fused
  multiply-adds (not bit-identical to PyTorch's fp64 kernels).
* **low-precision parameters, ``master_weights=True``** (mixed-precision training, Micikevicius
  et al. 2018): the optimizer holds an fp32 *master copy* of each parameter (made at its first
  step) and fp32 state, updates the master exactly as ``torch.optim`` updates an fp32
  parameter whose gradient is the low-precision gradient converted to fp32, and writes the
  master rounded once to the parameter's format back into the parameter (``param.copy_
  (master)``). The master accumulates the small updates that the low-precision weight cannot
  represent. Formats fp32 does not hold (fp64) have no master: they update in place.

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

import functools
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from . import aten_cpu
from .autograd.grad_mode import no_grad
from .autograd.precision import _info, contains, promote_formats, to_format
from .autograd.tensor import Tensor
from .formats import Format, fp32

# Format.contains is not cheap and every step asks it for every parameter
_contains = functools.lru_cache(maxsize=256)(contains)

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
        return self.master_weights and p.format != fp32 and _contains(fp32, p.format)

    def _state_format(self, p: Tensor) -> Format:
        return fp32 if self._uses_master(p) else p.format

    def _load(self, p: Tensor, state: dict) -> tuple[np.ndarray, np.ndarray, Format]:
        """(weights, gradient, the format the update computes in), both arrays in that format's
        container. The updates never write into them (every op returns a new array)."""
        sfmt = self._state_format(p)
        g = p.grad.data
        if not _contains(sfmt, p.grad.format):
            # PyTorch refuses a grad of another dtype; fpsim takes one whose values all are
            # values of the update's format (exact), and refuses to round one silently
            r = to_format(g, sfmt)
            with np.errstate(invalid="ignore"):
                lossy = ~((r == g) | (np.isnan(r) & np.isnan(g)))
            if lossy.any():
                raise TypeError(
                    f"the gradient of a {p.format.name} parameter is {p.grad.format.name} and "
                    f"holds values that are not {sfmt.name} values (e.g. {g[lossy].flat[0]!r}); "
                    "PyTorch requires a parameter's grad to have the parameter's dtype"
                )
            g = r
        container = aten_cpu.ops(sfmt).container
        g = g.astype(container, copy=False)  # exact
        if self._uses_master(p):
            if "master" not in state:
                state["master"] = p.data.astype(np.float32)  # exact: fp32 holds the format
            return state["master"], g, fp32
        return p.data.astype(container, copy=False), g, sfmt

    def _store(self, p: Tensor, state: dict, w: np.ndarray, writes: int = 1) -> None:
        """Write the new weights into ``p`` and count ``writes`` versions: PyTorch updates a
        parameter with in-place ops (``add_``; AdamW's decay ``mul_`` and then ``addcdiv_``),
        so a graph that kept the old weights refuses a backward after the step."""
        if self._uses_master(p):
            state["master"][...] = w
            w = aten_cpu.ops(p.format).round(w)  # param.copy_(master): one rounding
        p.data[...] = w
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
                    w = self._update(w, g, state, group, aten_cpu.ops(sfmt))
                self._store(p, state, w, self._param_writes(group))
        return loss

    def _update(self, w, g, state, group, A):  # pragma: no cover - abstract
        """The new weights, from weights ``w`` and gradient ``g`` (arrays in the update's
        format), updating ``state``; ``A`` is :func:`fpsim.aten_cpu.ops` of that format."""
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
    """Stochastic gradient descent, PyTorch's formula, computed as ``torch.optim.SGD`` computes
    it on a CPU (each line one ATen op of :mod:`fpsim.aten_cpu`; an ``add`` with ``alpha`` is
    one fused multiply-add)::

    g = -grad if maximize else grad
    g = g.add(w, alpha=weight_decay)              # if weight_decay
    buf = g                                        (first step)
    buf = buf.mul(momentum).add(g, alpha=1 - dampening)
    g = g.add(buf, alpha=momentum) if nesterov else buf
    w = w.add(g, alpha=-lr)
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

    def _update(self, w, g, state, group, A):
        # torch.optim.sgd._single_tensor_sgd, op for op (each rounded as ATen's CPU kernel)
        lr, mom, damp = group["lr"], group["momentum"], group["dampening"]
        wd, nesterov = group["weight_decay"], group["nesterov"]
        if group["maximize"]:
            g = A.neg(g)
        if wd != 0:
            g = A.add(g, w, wd)  # grad.add(param, alpha=weight_decay)
        if mom != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = np.array(g, copy=True)  # grad.detach().clone()
            else:  # buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                buf = A.add(A.mul_scalar(buf, mom), g, 1 - damp)
            state["momentum_buffer"] = buf
            g = A.add(g, buf, mom) if nesterov else buf
        return A.add(w, g, -lr)  # param.add_(grad, alpha=-lr)


class Adam(Optimizer):
    """Adam (Kingma & Ba), PyTorch's formula, computed as ``torch.optim.Adam`` computes it on a
    CPU (each tensor line one or two ATen ops of :mod:`fpsim.aten_cpu`; the scalars are Python
    floats, as in PyTorch)::

    g = g.add(w, alpha=weight_decay)               # Adam: L2 penalty in the gradient
    w = w.mul(1 - lr * weight_decay)               # AdamW instead: decoupled decay
    m = m.lerp(g, 1 - beta1)                       # m + (1 - beta1) * (g - m)
    v = v.mul(beta2).addcmul(g, g, value=1 - beta2)
    step_size = lr / (1 - beta1**t)
    denom = (v.sqrt() / (1 - beta2**t) ** 0.5).add(eps)   # eps after the square root
    w = w.addcdiv(m, denom, value=-step_size)
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

    def _update(self, w, g, state, group, A):
        # torch.optim.adam._single_tensor_adam (capturable=False, differentiable=False), op for
        # op; the scalars are Python floats computed as PyTorch computes them
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        wd = group["weight_decay"]
        if group["maximize"]:
            g = A.neg(g)
        if not state.get("step"):
            state["step"] = 0
            zero = np.zeros_like(w, dtype=A.container)
            state["exp_avg"], state["exp_avg_sq"] = zero, zero.copy()
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = zero.copy()
        state["step"] += 1
        if wd != 0:
            if self._decoupled:
                w = A.mul_scalar(w, 1 - lr * wd)  # param.mul_(1 - lr * weight_decay)
            else:
                g = A.add(g, w, wd)  # grad.add(param, alpha=weight_decay)
        state["exp_avg"] = A.lerp(state["exp_avg"], g, 1 - beta1)
        v = A.mul_scalar(state["exp_avg_sq"], beta2)  # exp_avg_sq.mul_(beta2)
        state["exp_avg_sq"] = A.addcmul(v, g, g, 1 - beta2)  # .addcmul_(grad, grad, 1 - b2)
        step = float(state["step"])  # step_t.item(): PyTorch's step is a float tensor
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2**0.5
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = A.maximum(state["max_exp_avg_sq"], state["exp_avg_sq"])
            v = state["max_exp_avg_sq"]
        else:
            v = state["exp_avg_sq"]
        # denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)
        denom = A.add_scalar(A.div_scalar(A.sqrt(v), bias_correction2_sqrt), eps)
        return A.addcdiv(w, state["exp_avg"], denom, -step_size)


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
