"""Learning-rate schedulers with PyTorch's semantics, as ``fpsim.optim.lr_scheduler``.

``StepLR``, ``CosineAnnealingLR``, ``LambdaLR``, ``LinearLR`` and ``SequentialLR`` as
``torch.optim.lr_scheduler`` in PyTorch 2.13: the same formulas, evaluated in the same order on
Python floats, so every learning rate is PyTorch's bit for bit. That includes the *recursive*
forms PyTorch uses on ``step()`` (each lr computed from the previous one: a cosine schedule
built this way drifts from its closed form in the last bits, in both) and the *closed* forms it
uses when an epoch is given (``step(epoch)``, deprecated) or when ``SequentialLR`` reaches a
milestone. Also as PyTorch: building a scheduler writes ``initial_lr`` into each param group and
takes one step (``last_epoch`` becomes 0); ``get_last_lr()`` is what the last step set;
``state_dict()`` holds every attribute but the optimizer (``LambdaLR``: not its functions);
``last_epoch=k`` resumes (the groups must hold ``initial_lr``); a warning when
``scheduler.step()`` comes before the first ``optimizer.step()`` (which skips the schedule's
first value).

>>> from fpsim import nn, optim
>>> opt = optim.SGD([nn.Parameter([1.0])], lr=0.1)
>>> sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for epoch in range(5):
...     opt.step()                  # the training step(s) of this epoch
...     lrs.append(sched.get_last_lr()[0])
...     sched.step()
>>> lrs
[0.1, 0.1, 0.05, 0.05, 0.025]

Warm-up then cosine decay, the usual recipe (``lr = 0.1 * (0.25, 0.5, 0.75)``, then cosine
from 0.1 to 0 over 4 steps):

>>> opt = optim.SGD([nn.Parameter([1.0])], lr=0.1)
>>> warm = optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=3)
>>> cos = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
>>> sched = optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[3])
>>> lrs = []
>>> for epoch in range(8):
...     opt.step()
...     lrs.append(round(sched.get_last_lr()[0], 6))
...     sched.step()
>>> lrs
[0.025, 0.05, 0.075, 0.1, 0.085355, 0.05, 0.014645, 0.0]

The schedulers only write ``group["lr"]``: the optimizer's arithmetic in the parameters'
formats is unchanged (the lr itself is a Python float, as in PyTorch).
"""

from __future__ import annotations

import math
import sys
import types
import warnings
from bisect import bisect_right
from collections.abc import Callable
from functools import wraps
from typing import Any
from weakref import ref

__all__ = [
    "LRScheduler",
    "LambdaLR",
    "StepLR",
    "LinearLR",
    "CosineAnnealingLR",
    "SequentialLR",
]

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being "
    "deprecated where possible. Please use `scheduler.step()` to step the "
    "scheduler. During the deprecation, if epoch is different from None, the "
    "closed form is used instead of the new chainable form, where available. "
    "Please open an issue if you are unable to replicate your use case: "
    "https://github.com/pytorch/pytorch/issues/new/choose."
)


def _lrs(optimizer) -> list:
    return [group["lr"] for group in optimizer.param_groups]


def _warn_get_lr_called_within_step(scheduler: LRScheduler) -> None:
    if not scheduler._get_lr_called_within_step:
        warnings.warn(
            "To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
            UserWarning,
            stacklevel=3,
        )


class _enable_get_lr_call:
    def __init__(self, o: LRScheduler) -> None:
        self.o = o

    def __enter__(self):
        self.o._get_lr_called_within_step = True
        return self

    def __exit__(self, *exc) -> None:
        self.o._get_lr_called_within_step = False


class _initial_mode:
    def __init__(self, o: LRScheduler) -> None:
        self.o = o

    def __enter__(self):
        self.o._is_initial = True

    def __exit__(self, *exc) -> None:
        self.o._is_initial = False


class LRScheduler:
    """Base class: ``LRScheduler(optimizer, last_epoch=-1)``; subclasses define ``get_lr``.

    ``step()`` advances ``last_epoch`` and writes the new lrs into ``optimizer.param_groups``
    (call it after ``optimizer.step()``); ``get_last_lr()`` returns them. Building a scheduler
    overwrites the groups' ``lr``: when restoring a checkpoint, build it *before*
    ``optimizer.load_state_dict``.
    """

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer, last_epoch: int = -1) -> None:
        from .optim import Optimizer  # here: optim imports this module at its end

        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                        "scheduler with last_epoch >= 0.\n"
                        "This typically happens when:\n"
                        "1. You're trying to resume training from a checkpoint but haven't "
                        "properly loaded the optimizer state\n"
                        "2. You're using last_epoch >= 0 for a fresh training run (not "
                        "recommended)"
                    )
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        _patch_track_step_called(optimizer)
        self._initial_step()

    def _initial_step(self) -> None:
        """Initialize step counts and perform a step."""
        self._step_count = 0
        with _initial_mode(self):
            self.step()

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer (plain numbers and lists: ``fpsim.save`` stores
        it)."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step()`` (or the constructor) set, one per group."""
        return self._last_lr

    def get_lr(self) -> list[float]:
        """The next learning rates (called by ``step``; read ``get_last_lr()`` instead)."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch and set the groups' lrs. ``epoch`` (deprecated, as in PyTorch):
        jump to that epoch with the closed form where the scheduler has one."""
        # The order check of pytorch/pytorch#20124: the optimizer must step first.
        if self._step_count == 1:
            if not hasattr(self.optimizer.step, "_wrapped_by_lr_sched"):
                warnings.warn(
                    "Seems like `optimizer.step()` has been overridden after learning rate "
                    "scheduler initialization. Please, make sure to call `optimizer.step()` "
                    "before `lr_scheduler.step()`. See more details at "
                    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                    UserWarning,
                    stacklevel=2,
                )
            elif not getattr(self.optimizer, "_opt_called", False):
                warnings.warn(
                    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. "
                    "In PyTorch 1.1.0 and later, you should call them in the opposite order: "
                    "`optimizer.step()` before `lr_scheduler.step()`.  Failure to do this "
                    "will result in PyTorch skipping the first value of the learning rate "
                    "schedule. See more details at "
                    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                    UserWarning,
                    stacklevel=2,
                )
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        with _enable_get_lr_call(self):
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                if hasattr(self, "_get_closed_form_lr"):
                    values = self._get_closed_form_lr()
                else:
                    values = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr: list[float] = _lrs(self.optimizer)


def _patch_track_step_called(opt) -> None:
    """Wrap ``opt.step`` (once) so that it records that it ran: the order check in
    ``LRScheduler.step`` reads ``opt._opt_called``, as PyTorch's."""
    if hasattr(opt.step, "_wrapped_by_lr_sched"):
        return
    opt_ref = ref(opt)  # no cycle optimizer -> wrapper -> optimizer
    func = opt.step.__func__

    @wraps(func)
    def wrapper(*args, **kwargs):
        o = opt_ref()
        o._opt_called = True
        return func.__get__(o, o.__class__)(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True
    opt.step = wrapper


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)``; ``lr_lambda``: one function, or one per group.

    >>> from fpsim import nn, optim
    >>> opt = optim.SGD([nn.Parameter([1.0])], lr=0.5)
    >>> sched = LambdaLR(opt, lambda epoch: 1 / (epoch + 1))
    >>> for _ in range(3):
    ...     opt.step()
    ...     sched.step()
    >>> sched.get_last_lr(), opt.param_groups[0]["lr"]
    ([0.125], 0.125)
    """

    def __init__(
        self,
        optimizer,
        lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        self.optimizer = optimizer
        self.lr_lambdas: list[Callable[[int], float]]
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups)
        else:
            if len(lr_lambda) != len(optimizer.param_groups):
                raise ValueError(
                    f"Expected {len(optimizer.param_groups)} lr_lambdas, but got {len(lr_lambda)}"
                )
            self.lr_lambdas = list(lr_lambda)
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        """As the base class, but the functions are not saved: ``lr_lambdas`` holds None for
        each function or lambda, and the ``__dict__`` of each callable object."""
        state_dict = {
            key: value
            for key, value in self.__dict__.items()
            if key not in ("optimizer", "lr_lambdas")
        }
        state_dict["lr_lambdas"] = [None] * len(self.lr_lambdas)
        for idx, fn in enumerate(self.lr_lambdas):
            if not isinstance(fn, types.FunctionType):
                state_dict["lr_lambdas"][idx] = fn.__dict__.copy()
        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        lr_lambdas = state_dict.pop("lr_lambdas")
        self.__dict__.update(state_dict)
        state_dict["lr_lambdas"] = lr_lambdas  # leave the caller's dict as it was
        for idx, fn in enumerate(lr_lambdas):
            if fn is not None:
                self.lr_lambdas[idx].__dict__.update(fn)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        return [
            base_lr * lmbda(self.last_epoch)
            for lmbda, base_lr in zip(self.lr_lambdas, self.base_lrs, strict=True)
        ]


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs: ``lr = initial_lr *
    gamma^(epoch // step_size)`` (by one multiplication per decay on ``step()``)."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if (self.last_epoch == 0) or (self.last_epoch % self.step_size != 0):
            return _lrs(self.optimizer)
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        k = self.last_epoch // self.step_size
        return [base_lr * self.gamma**k for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the lr by a factor going linearly from ``start_factor`` (epoch 0) to
    ``end_factor`` (epoch ``total_iters`` and after); ``0 < start_factor <= 1``,
    ``0 <= end_factor <= 1``. The usual warm-up."""

    def __init__(
        self,
        optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError(
                "Starting multiplicative factor expected to be greater than 0 and less or "
                "equal to 1."
            )
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        # PyTorch's recursive form: the ratio of this epoch's factor to the previous one
        return [
            group["lr"]
            * (
                1.0
                + (self.end_factor - self.start_factor)
                / (
                    self.total_iters * self.start_factor
                    + (self.last_epoch - 1) * (self.end_factor - self.start_factor)
                )
            )
            for group in self.optimizer.param_groups
        ]

    def _get_closed_form_lr(self) -> list[float]:
        return [
            base_lr
            * (
                self.start_factor
                + (self.end_factor - self.start_factor)
                * min(self.total_iters, self.last_epoch)
                / self.total_iters
            )
            for base_lr in self.base_lrs
        ]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from ``initial_lr`` to ``eta_min`` over ``T_max`` epochs (then back up:
    no restarts), by PyTorch's recursion ``lr_t = eta_min + (lr_{t-1} - eta_min) * (1 +
    cos(pi t / T_max)) / (1 + cos(pi (t - 1) / T_max))`` -- an approximation of the closed
    form ``eta_min + (initial_lr - eta_min) * (1 + cos(pi t / T_max)) / 2`` that ``step(epoch)``
    uses."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        _warn_get_lr_called_within_step(self)
        if self._is_initial:
            return _lrs(self.optimizer)
        elif self._step_count == 1 and self.last_epoch > 0:
            # the first step of a resumed scheduler: the closed form
            return [
                self.eta_min
                + (base_lr - self.eta_min)
                * (1 + math.cos((self.last_epoch) * math.pi / self.T_max))
                / 2
                for base_lr in self.base_lrs
            ]
        elif (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            # leaving the minimum, where the recursion's denominator would be 0
            return [
                group["lr"] + (base_lr - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
                for base_lr, group in zip(self.base_lrs, self.optimizer.param_groups, strict=True)
            ]
        return [
            (1 + math.cos(math.pi * self.last_epoch / self.T_max))
            / (1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max))
            * (group["lr"] - self.eta_min)
            + self.eta_min
            for group in self.optimizer.param_groups
        ]

    def _get_closed_form_lr(self) -> list[float]:
        return [
            self.eta_min
            + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
            for base_lr in self.base_lrs
        ]


class SequentialLR(LRScheduler):
    """Run ``schedulers[i]`` from ``milestones[i-1]`` on (``len(milestones) ==
    len(schedulers) - 1``); at each milestone the next scheduler restarts at its epoch 0 (its
    closed form where it has one), from the groups' current lrs. The schedulers must share
    ``optimizer``; building this one undoes the initial step they took."""

    def __init__(self, optimizer, schedulers: list, milestones: list[int], last_epoch: int = -1):
        if len(schedulers) < 1:
            raise ValueError(
                f"{self.__class__.__name__} expects at least one scheduler, but got no scheduler."
            )
        for scheduler_idx, scheduler in enumerate(schedulers):
            if not hasattr(scheduler, "optimizer"):
                raise TypeError(
                    f"{self.__class__.__name__} at index {scheduler_idx} should have "
                    "`optimizer` as its attribute."
                )
            if optimizer is not scheduler.optimizer:
                raise ValueError(
                    f"{self.__class__.__name__} expects all schedulers to belong to the same "
                    f"optimizer, but got scheduler {scheduler.__class__.__name__} at index "
                    f"{scheduler_idx} has {scheduler.optimizer}, which is different from "
                    f"{optimizer.__class__.__name__}."
                )
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                "Sequential Schedulers expects number of schedulers provided to be one more "
                f"than the number of milestone points, but got number of schedulers "
                f"{len(schedulers)} and the number of milestones to be equal to "
                f"{len(milestones)}"
            )
        # As PyTorch, no LRScheduler.__init__ here: the wrapped schedulers did that work.
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in self.optimizer.param_groups:  # back to the initial lrs
            group["lr"] = group["initial_lr"]
        self.recursive_undo()  # "undo" the initial step of every wrapped scheduler
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()  # ... and redo it for the one that runs first
        self._last_lr = schedulers[idx].get_last_lr()

    def recursive_undo(self, sched=None) -> None:
        """Undo the step each (nested) scheduler took when it was built."""
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self.recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """As the base class, with each wrapped scheduler's state dict in ``_schedulers``."""
        state_dict = {
            key: value
            for key, value in self.__dict__.items()
            if key not in ("optimizer", "_schedulers")
        }
        state_dict["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _schedulers = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        state_dict["_schedulers"] = _schedulers  # leave the caller's dict as it was
        for idx, s in enumerate(_schedulers):
            self._schedulers[idx].load_state_dict(s)


# `import fpsim.optim.lr_scheduler` and `from fpsim.optim.lr_scheduler import StepLR` work as
# with torch although fpsim.optim is a module, not a package (the way os.path is registered).
sys.modules.setdefault("fpsim.optim.lr_scheduler", sys.modules[__name__])
