"""Training with a precision *recipe*: one loop, the same shape as PyTorch's AMP loop.

>>> from fpsim import amp, nn
>>> X, Y = amp.underflow_task(256, seed=0)
>>> res = amp.train(amp.underflow_model(seed=0), (X, Y), "fp16_dynamic", steps=5, lr=1e-3)
>>> res.recipe.name, len(res.losses), float(res.scales[0]), bool(res.skipped.any())
('fp16_dynamic', 5, 65536.0, False)

Recipes (:data:`RECIPES`, or a :class:`Recipe` of your own, or ``recipe(name, **changes)``):

============== ============================================================================
``fp32``        no autocast, no scaling: the reference
``fp16``        fp16 autocast ("cuda" table), no loss scaling: small gradients underflow
``fp16_static`` fp16 autocast, a fixed loss scale S (``scale=S``, default 1024; a
                :class:`~fpsim.amp.StaticGradScaler`)
``fp16_dynamic`` fp16 autocast + :class:`~fpsim.amp.GradScaler` with PyTorch's defaults
``bf16``        bf16 autocast, no scaler (bf16 has fp32's exponent range)
``fp16_master`` the paper's scheme without autocast: the model held in fp16, fp32 master
                weights in the optimizer (:class:`MasterWeights`), the loss in fp32, dynamic
                loss scaling (unscaled in fp32 on the masters)
``fp8_e4m3``,   beyond PyTorch: autocast with an fp8 dtype (LOW ops *and their backward* in
``fp8_e5m2``    fp8) + dynamic loss scaling; real fp8 training also scales each tensor
============== ============================================================================

The loop :func:`train` runs for every recipe (``scaler`` is disabled for the unscaled ones, so
its calls pass through, exactly like ``GradScaler(enabled=False)`` in PyTorch)::

    with autocast(recipe.device_type, recipe.autocast, enabled=recipe.autocast is not None):
        loss = loss_fn(model(x), y)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    # (master weights: fp16 gradients copied to the fp32 masters here)
    on_backward(state)                      # gradients are still *scaled* here
    scaler.unscale_(optimizer)              # only when clipping or recording gradients
    clip_grad_norm_(params, max_norm)       # optional
    scaler.step(optimizer)
    scaler.update()
    # (master weights: masters rounded to the fp16 model here)
    on_step(state)

Master weights and loss scaling: ``GradScaler`` refuses fp16 gradients (``ValueError:
Attempting to unscale FP16 gradients.``, as PyTorch), and unscaling in fp16 would underflow again.
So in the ``fp16_master`` recipe the optimizer optimizes the fp32 *master* parameters of a
:class:`MasterWeights`: after backward, the fp16 gradients of the model are copied (exactly) to
the masters' fp32 ``.grad``, the scaler unscales and checks *those* in fp32, the optimizer updates
the masters in fp32, and the masters are rounded once to fp16 into the model.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .. import nn, optim
from ..autograd.grad_mode import no_grad
from ..autograd.precision import to_format
from ..autograd.tensor import Tensor, as_generator, infer_format, tensor
from ..data import BatchIterator
from ..formats import Format, FormatLike, bf16, fp8_e4m3, fp8_e5m2, fp16, fp32, get_format
from ..nn import functional as F
from .autocast_mode import autocast
from .grad_scaler import GradScaler, StaticGradScaler

__all__ = [
    "Recipe",
    "RECIPES",
    "recipe",
    "MasterWeights",
    "StepState",
    "TrainResult",
    "train",
    "underflow_task",
    "underflow_model",
    "Scale",
]


# ---- recipes ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Recipe:
    """A precision recipe for :func:`train`.

    ``autocast``: the autocast dtype (None: no autocast) with ``device_type``'s policy table.
    ``scaling``: ``"none"``, ``"static"`` (fixed scale ``init_scale``) or ``"dynamic"``
    (GradScaler with ``init_scale``, ``growth_factor``, ``backoff_factor``,
    ``growth_interval``). ``master_weights``: hold the model in ``model_format`` with fp32
    master weights in the optimizer (no autocast). ``beyond_pytorch``: the recipe has no
    PyTorch counterpart (fp8 autocast).
    """

    name: str
    autocast: Format | None = None
    device_type: str = "cuda"
    scaling: str = "none"
    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    master_weights: bool = False
    model_format: Format = fp16
    beyond_pytorch: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if self.scaling not in ("none", "static", "dynamic"):
            raise ValueError(f"scaling must be 'none', 'static' or 'dynamic', got {self.scaling!r}")
        if self.master_weights and self.autocast is not None:
            raise ValueError("master_weights replaces autocast: give one of them")

    def make_scaler(self) -> GradScaler:
        """The scaler of this recipe (a disabled GradScaler for ``scaling="none"``)."""
        if self.scaling == "dynamic":
            return GradScaler(
                self.device_type,
                init_scale=self.init_scale,
                growth_factor=self.growth_factor,
                backoff_factor=self.backoff_factor,
                growth_interval=self.growth_interval,
            )
        if self.scaling == "static":
            return StaticGradScaler(self.init_scale, self.device_type)
        return GradScaler(self.device_type, enabled=False)


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("fp32", description="fp32 everywhere: the reference"),
        Recipe("fp16", autocast=fp16, description="fp16 autocast, no loss scaling"),
        Recipe(
            "fp16_static",
            autocast=fp16,
            scaling="static",
            init_scale=2.0**10,
            description="fp16 autocast, static loss scale S",
        ),
        Recipe(
            "fp16_dynamic",
            autocast=fp16,
            scaling="dynamic",
            description="fp16 autocast + dynamic loss scaling (GradScaler)",
        ),
        Recipe("bf16", autocast=bf16, description="bf16 autocast, no scaler needed"),
        Recipe(
            "fp16_master",
            scaling="dynamic",
            master_weights=True,
            description="fp16 model, fp32 master weights, dynamic loss scaling",
        ),
        Recipe(
            "fp8_e4m3",
            autocast=fp8_e4m3,
            scaling="dynamic",
            beyond_pytorch=True,
            description="fp8 E4M3 autocast + dynamic loss scaling (beyond PyTorch)",
        ),
        Recipe(
            "fp8_e5m2",
            autocast=fp8_e5m2,
            scaling="dynamic",
            beyond_pytorch=True,
            description="fp8 E5M2 autocast + dynamic loss scaling (beyond PyTorch)",
        ),
    )
}


def recipe(name: str | Recipe, **changes) -> Recipe:
    """A built-in recipe by name (or a Recipe), with fields changed: ``recipe("fp16_static",
    init_scale=2.0**8)``; ``scale=S`` is short for ``init_scale=S``.

    >>> recipe("fp16_static", scale=256).init_scale
    256.0
    """
    if isinstance(name, Recipe):
        r = name
    else:
        if name not in RECIPES:
            raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
        r = RECIPES[name]
    if "scale" in changes:
        changes["init_scale"] = float(changes.pop("scale"))
    for key in ("autocast", "model_format"):
        if changes.get(key) is not None:
            changes[key] = get_format(changes[key])
    return dataclasses.replace(r, **changes) if changes else r


_recipe = recipe  # train() has a parameter of that name


# ---- master weights --------------------------------------------------------------------------
class MasterWeights:
    """fp32 master copies of a model's parameters, for the mixed-precision scheme of
    Micikevicius et al. (2018): the model computes in ``model_format`` (fp16), the optimizer
    updates fp32 masters.

    ``MasterWeights(model, model_format="fp16")`` copies every floating parameter into a new
    fp32 :class:`~fpsim.nn.Parameter` (exactly), *then* converts the model's parameters to
    ``model_format`` in place (one rounding). Give :meth:`parameters` to the optimizer. Each
    step: :meth:`copy_grads_` after backward (the model's gradients into the masters' fp32
    ``.grad``, exact), the optimizer / GradScaler work on the masters, :meth:`copy_weights_`
    after the step (masters rounded once into the model).

    >>> from fpsim import nn, optim
    >>> model = nn.Linear(2, 1, seed=0)
    >>> mw = MasterWeights(model)
    >>> model.weight.format.name, [p.format.name for p in mw.parameters()]
    ('fp16', ['fp32', 'fp32'])
    """

    def __init__(self, model, model_format: FormatLike = fp16) -> None:
        params = model.named_parameters() if hasattr(model, "named_parameters") else None
        pairs = list(params) if params is not None else [(str(i), p) for i, p in enumerate(model)]
        self.model_format = get_format(model_format)
        self.names: list[str] = []
        self.model_params: list[Tensor] = []
        self.masters: list[nn.Parameter] = []
        for name, p in pairs:
            if p.format is None:
                continue
            self.names.append(name)
            self.model_params.append(p)
            self.masters.append(nn.Parameter(Tensor._make(p.data.astype(np.float32), fp32)))
        with no_grad():
            for p in self.model_params:
                if p.format != self.model_format:
                    p.data = to_format(p.data, self.model_format)
                    p.format = self.model_format
                    p.grad = None

    def parameters(self) -> list[nn.Parameter]:
        """The fp32 master parameters (what the optimizer optimizes)."""
        return list(self.masters)

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        yield from zip(self.names, self.masters, strict=True)

    def copy_grads_(self) -> None:
        """``master.grad = fp32(model_param.grad)`` for every pair (exact: fp32 holds fp16)."""
        for p, m in zip(self.model_params, self.masters, strict=True):
            if p.grad is None:
                m.grad = None
            else:
                m.grad = Tensor._make(p.grad.data.astype(np.float32, copy=True), fp32)

    def copy_weights_(self) -> None:
        """``model_param = round(master, model_format)`` for every pair (one rounding), counted
        as one in-place write of each model parameter (PyTorch's ``param.copy_(master)``)."""
        for p, m in zip(self.model_params, self.masters, strict=True):
            p.data[...] = to_format(m.data, p.format)
            p._bump_version()

    def zero_grad(self) -> None:
        """Drop the gradients of the model's parameters and of the masters."""
        for p, m in zip(self.model_params, self.masters, strict=True):
            p.grad = None
            m.grad = None


def _batch_tensor(a: Any) -> Tensor:
    """A batch array as a tensor: floating data in fp32 (a float64 numpy batch is not an fp64
    input: the recipes' models are fp32), integer targets as int64. Tensors pass."""
    if isinstance(a, Tensor):
        return a
    return tensor(a, None if infer_format(a) is None else fp32)


# ---- the loop --------------------------------------------------------------------------------
@dataclasses.dataclass
class StepState:
    """What the callbacks of :func:`train` see.

    ``on_backward`` is called after backward, before unscaling: the parameters' ``.grad`` hold
    gradients of ``loss * scale`` (``scale`` = the scale used for this backward; 1.0 without
    scaling). ``on_step`` after ``scaler.update()``: ``skipped`` tells whether the optimizer
    step was skipped, ``new_scale`` the scale for the next step.
    """

    step: int
    model: Any
    optimizer: Any
    scaler: GradScaler
    recipe: Recipe
    batch: tuple
    loss_fn: Callable
    loss: float
    scale: float
    skipped: bool = False
    new_scale: float = 1.0
    master: MasterWeights | None = None

    def named_grads(self, unscaled: bool = True) -> dict[str, np.ndarray]:
        """The gradients of the parameters the optimizer steps (the masters for master-weight
        recipes, else the model's), as float64 arrays; ``unscaled`` divides by ``scale``
        (exact for a power-of-two scale, in float64)."""
        pairs = (
            self.master.named_parameters()
            if self.master is not None
            else self.model.named_parameters()
        )
        out = {}
        for name, p in pairs:
            if p.grad is None:
                continue
            g = p.grad.data.astype(np.float64)
            out[name] = g / self.scale if unscaled and self.scale != 1.0 else g
        return out


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns: per-step ``losses`` (float64; the unscaled loss of the
    forward pass, recorded also for skipped steps), ``scales`` (the scale used for each step's
    backward), ``skipped`` (bool), ``grads`` (per recorded step, a dict name -> unscaled
    gradient array, or None), plus the trained objects and the wall time."""

    recipe: Recipe
    losses: np.ndarray
    scales: np.ndarray
    skipped: np.ndarray
    grads: list[dict[str, np.ndarray]] | None
    model: Any
    optimizer: Any
    scaler: GradScaler
    master: MasterWeights | None
    seconds: float

    def final_loss(self, window: int = 10) -> float:
        """Mean loss of the last ``window`` steps (finite ones only; NaN if none)."""
        tail = self.losses[-window:]
        tail = tail[np.isfinite(tail)]
        return float(tail.mean()) if tail.size else float("nan")

    def summary(self) -> str:
        return (
            f"{self.recipe.name}: final loss {self.final_loss():.6g}, skipped "
            f"{int(self.skipped.sum())}/{len(self.skipped)}, final scale {self.scales[-1]:g}"
        )


def _make_optimizer(optimizer: Any, params: list, lr: float, **kw):
    if callable(optimizer) and not isinstance(optimizer, str):
        return optimizer(params)
    name = str(optimizer).lower()
    if name == "sgd":
        return optim.SGD(params, lr=lr, **kw)
    if name == "adam":
        return optim.Adam(params, lr=lr, **kw)
    if name == "adamw":
        return optim.AdamW(params, lr=lr, **kw)
    raise ValueError(f"optimizer must be 'sgd', 'adam', 'adamw' or a callable, got {optimizer!r}")


def _batches(data: Any, batch_size: int, seed: Any) -> Callable[[], Iterator]:
    """A function returning a fresh iterator over one epoch of batches."""
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], np.ndarray):
        it = BatchIterator(*data, batch_size=batch_size, seed=seed)
        return lambda: iter(it)
    if isinstance(data, Iterable):
        return lambda: iter(data)
    if callable(data):
        return lambda: iter(data())
    raise TypeError("data must be (X, Y) arrays, an iterable of batches or a callable")


def _default_loss(out: Tensor, y: Tensor) -> Tensor:
    if y.format is None:
        return F.cross_entropy(out, y)
    return F.mse_loss(out, y)


def _found_inf(scaler: GradScaler, optimizer) -> bool:
    if not scaler.is_enabled():
        return False
    st = scaler._per_optimizer_states.get(id(optimizer))
    if st is None:
        return False
    return bool(sum(float(v[0]) for v in st["found_inf_per_device"].values()))


def _progress(total: int, desc: str, progress: bool | None):
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is optional
        return None
    return tqdm(total=total, desc=desc, leave=False)


def train(
    model,
    data,
    recipe: str | Recipe = "fp32",
    steps: int | None = None,
    lr: float = 1e-3,
    *,
    optimizer: str | Callable = "adam",
    optimizer_kwargs: dict | None = None,
    loss_fn: Callable | None = None,
    batch_size: int = 64,
    seed: Any = 0,
    scale: float | None = None,
    max_grad_norm: float | None = None,
    record_grads: bool | int = False,
    on_backward: Callable[[StepState], None] | None = None,
    on_step: Callable[[StepState], None] | None = None,
    progress: bool | None = None,
) -> TrainResult:
    """Train ``model`` in place with a precision ``recipe``; return a :class:`TrainResult`.

    ``data``: ``(X, Y)`` numpy arrays (shuffled mini-batches of ``batch_size``, a new order
    each epoch from ``seed``), or an iterable of ``(x, y)`` batches (re-iterated each epoch), or
    a callable returning such an iterable. ``steps``: optimizer steps (default: one epoch).
    ``optimizer``: ``"adam"`` (default), ``"adamw"``, ``"sgd"`` (``optimizer_kwargs`` such as
    ``momentum``), or ``callable(params) -> optimizer``. ``loss_fn(output, y)``: default cross
    entropy for integer targets, else MSE. ``scale``: the loss scale (static S, or the dynamic
    initial scale). ``max_grad_norm``: clip the unscaled gradients (``unscale_`` +
    ``clip_grad_norm_``). ``record_grads``: True (every step) or k (every k-th step) keeps the
    unscaled gradients in ``result.grads``. ``on_backward`` / ``on_step``: callbacks receiving
    a :class:`StepState`. ``progress``: a tqdm bar (default: only when stderr is a terminal).

    The master-weight recipe converts the model's parameters to fp16 in place (keeping fp32
    masters), so pass a fresh model per recipe when comparing.
    """
    rec = _recipe(recipe, **({"scale": scale} if scale is not None else {}))
    loss_fn = _default_loss if loss_fn is None else loss_fn
    epoch = _batches(data, batch_size, seed)
    if steps is None:
        steps = sum(1 for _ in epoch())
    master = MasterWeights(model, rec.model_format) if rec.master_weights else None
    params = master.parameters() if master is not None else list(model.parameters())
    opt = _make_optimizer(optimizer, params, lr, **(optimizer_kwargs or {}))
    scaler = rec.make_scaler()
    use_autocast = rec.autocast is not None
    ac = autocast(rec.device_type, rec.autocast if use_autocast else None, enabled=use_autocast)
    every = int(record_grads) if not isinstance(record_grads, bool) else (1 if record_grads else 0)

    losses = np.full(steps, np.nan)
    scales = np.ones(steps)
    skipped = np.zeros(steps, bool)
    grads: list[dict[str, np.ndarray]] | None = [] if every else None
    bar = _progress(steps, rec.name, progress)
    t0 = time.perf_counter()
    it = epoch()
    step = 0
    while step < steps:
        try:
            xb, yb = next(it)
        except StopIteration:
            it = epoch()
            try:
                xb, yb = next(it)
            except StopIteration:
                raise ValueError(
                    "data yielded no batches (an exhausted iterator? pass a list of batches, "
                    "(X, Y) arrays, or a callable returning an iterable)"
                ) from None
        xb, yb = _batch_tensor(xb), _batch_tensor(yb)
        if master is not None and xb.format is not None:
            xb = xb.to(rec.model_format)
        with ac:
            out = model(xb)
            if master is not None:
                out = out.float()  # the loss in fp32 (the paper keeps reductions in fp32)
            loss = loss_fn(out, yb)
        opt.zero_grad()
        if master is not None:
            master.zero_grad()
        scaler.scale(loss).backward()
        used_scale = scaler.get_scale()
        if master is not None:
            master.copy_grads_()
        state = StepState(step, model, opt, scaler, rec, (xb, yb), loss_fn, loss.item(),
                          used_scale, master=master)  # fmt: skip
        if on_backward is not None:
            on_backward(state)
        record = every and step % every == 0
        if max_grad_norm is not None or record:
            scaler.unscale_(opt)
        if record:
            grads.append(state.named_grads(unscaled=False))
        if max_grad_norm is not None:
            optim.clip_grad_norm_(params, max_grad_norm)
        scaler.step(opt)
        state.skipped = _found_inf(scaler, opt)
        scaler.update()
        state.new_scale = scaler.get_scale()
        if master is not None:
            master.copy_weights_()
        losses[step], scales[step], skipped[step] = state.loss, used_scale, state.skipped
        if on_step is not None:
            on_step(state)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{state.loss:.4g}", scale=f"{state.new_scale:g}")
        step += 1
    if bar is not None:
        bar.close()
    return TrainResult(rec, losses, scales, skipped, grads, model, opt, scaler, master,
                       time.perf_counter() - t0)  # fmt: skip


# ---- a task whose fp16 gradients underflow ---------------------------------------------------
class Scale(nn.Module):
    """Multiply by a constant: ``Scale(c)(x) = x * c`` (``c`` enters as a Python number, so the
    output keeps the input's format). The last layer of :func:`underflow_model`."""

    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = float(c)

    def forward(self, x: Tensor) -> Tensor:
        return x * self.c

    def extra_repr(self) -> str:
        return f"c={self.c!r}"


def underflow_task(
    n_samples: int = 4096,
    seed: Any = 0,
    in_features: int = 16,
    out_features: int = 4,
    hidden: int = 32,
    unit: float = 2.0**-8,
):
    """A regression task in "physical units" whose fp16 gradients underflow.

    ``X ~ N(0, 1)`` of shape ``(n, in_features)`` and ``Y = unit * tanh(X W1) W2`` from a
    random teacher (``W1 ~ N(0, 4/in)``, ``W2 ~ N(0, 1/hidden)``), float32. The targets are
    small (standard deviation about ``unit``, 2^-8 by default), as quantities measured in
    natural units often are; :func:`underflow_model` predicts a standardised value and
    multiplies it by ``unit``. With the MSE loss, every gradient is then ``unit**2 = 2^-16``
    times the gradient of the same problem in standardised units: fp32 Adam does not care
    (its steps are invariant to the gradient's scale, up to ``eps``), but most activation
    gradients fall below fp16's smallest subnormal 2^-24 and become zero -- unless the loss is
    scaled by about ``1 / unit**2`` (GradScaler's initial 2^16 is exactly that).

    >>> X, Y = underflow_task(8, seed=0)
    >>> X.shape, Y.shape, X.dtype, bool(abs(Y).max() < 2.0**-5)
    ((8, 16), (8, 4), dtype('float32'), True)
    """
    rng = as_generator(0 if seed is None else seed)
    W1 = rng.standard_normal((in_features, hidden)) * (2.0 / np.sqrt(in_features))
    W2 = rng.standard_normal((hidden, out_features)) / np.sqrt(hidden)
    X = rng.standard_normal((n_samples, in_features))
    Y = unit * (np.tanh(X @ W1) @ W2)
    return X.astype(np.float32), Y.astype(np.float32)


def underflow_model(
    seed: Any = 0,
    sizes=(16, 64, 64, 4),
    unit: float = 2.0**-8,
    activation: str = "tanh",
    format: FormatLike = "fp32",
):
    """The model for :func:`underflow_task`: ``Sequential(MLP(sizes, activation), Scale(unit))``
    (PyTorch's default initialisation, seeded).

    >>> underflow_model()
    Sequential(
      (0): MLP(
        (0): Linear(in_features=16, out_features=64, bias=True, format=fp32)
        (1): Tanh()
        (2): Linear(in_features=64, out_features=64, bias=True, format=fp32)
        (3): Tanh()
        (4): Linear(in_features=64, out_features=4, bias=True, format=fp32)
      )
      (1): Scale(c=0.00390625)
    )
    """
    return nn.Sequential(nn.MLP(list(sizes), activation=activation, seed=seed, format=format),
                         Scale(unit))  # fmt: skip
