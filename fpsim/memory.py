"""Memory budget of training: how many bytes each parameter costs under a precision recipe.

A *recipe* says in which format each per-parameter buffer is kept: the weights, their gradients,
the optimizer's fp32 *master copy* (mixed-precision training) and the optimizer's state (Adam's
two moments ``exp_avg`` and ``exp_avg_sq``). Every size is computed from
:attr:`fpsim.formats.Format.bits`: a value of a ``b``-bit format takes ``b / 8`` bytes.

Only this *model state* is counted. Activations kept for the backward pass, temporary buffers
and framework overhead come on top and depend on the batch, not just on the parameter count.

Units: ``GB`` is 10^9 bytes (what disk and GPU vendors print), ``GiB`` is 2^30 bytes (a binary
unit, like the MiB that ``nvidia-smi`` prints; many tools label it "GB"). 0.5 billion fp32
weights take 2.0 GB, which is 1.86 GiB:

>>> b = memory_budget(0.5e9, "fp32_weights")
>>> b.total, b.total / GB, round(b.total / GiB, 2)
(2000000000, 2.0, 1.86)
>>> bytes_per_parameter("fp16_weights"), bytes_per_parameter("mixed_adam")
(2.0, 16.0)
>>> print(memory_budget(0.5e9, "mixed_adam"))
500,000,000 parameters, recipe mixed_adam: 16 bytes per parameter
part        format  bytes/param          bytes     GB    GiB
weights     fp16              2  1,000,000,000  1.000  0.931
gradients   fp16              2  1,000,000,000  1.000  0.931
master      fp32              4  2,000,000,000  2.000  1.863
exp_avg     fp32              4  2,000,000,000  2.000  1.863
exp_avg_sq  fp32              4  2,000,000,000  2.000  1.863
total                        16  8,000,000,000  8.000  7.451
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from .formats import Format, FormatLike, get_format

__all__ = [
    "GB",
    "GiB",
    "Recipe",
    "RECIPES",
    "get_recipe",
    "bytes_per_parameter",
    "memory_budget",
    "optimizer_budget",
    "MemoryBudget",
]

#: One gigabyte, 10^9 bytes (SI).
GB = 10**9
#: One gibibyte, 2^30 bytes (binary).
GiB = 2**30

_ADAM = ("exp_avg", "exp_avg_sq")  # the names PyTorch (and fpsim.optim) give Adam's moments


@dataclass(frozen=True)
class Recipe:
    """Which format each per-parameter buffer is kept in (None: the buffer is not kept).

    ``states`` names the optimizer's per-parameter buffers, each with its format, e.g.
    ``(("exp_avg", fp32), ("exp_avg_sq", fp32))`` for Adam with fp32 state.

    >>> r = Recipe("tf32_weights", weights="tf32")
    >>> r.weights.bits, r.bits_per_parameter
    (19, 19)
    """

    name: str
    weights: Format
    gradients: Format | None = None
    master: Format | None = None
    states: tuple[tuple[str, Format], ...] = ()
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", get_format(self.weights))
        for name in ("gradients", "master"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, get_format(value))
        states = tuple((str(k), get_format(f)) for k, f in self.states)
        object.__setattr__(self, "states", states)

    @property
    def parts(self) -> dict[str, Format]:
        """The buffers kept per parameter, in order: weights, gradients, master, states."""
        out = {"weights": self.weights}
        if self.gradients is not None:
            out["gradients"] = self.gradients
        if self.master is not None:
            out["master"] = self.master
        out.update(self.states)
        return out

    @property
    def bits_per_parameter(self) -> int:
        return sum(f.bits for f in self.parts.values())


def _adam(fmt: FormatLike) -> tuple[tuple[str, FormatLike], ...]:
    return tuple((name, fmt) for name in _ADAM)


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("fp32_weights", "fp32", description="fp32 weights alone (inference)"),
        Recipe("fp16_weights", "fp16", description="fp16 weights alone (inference)"),
        Recipe("bf16_weights", "bf16", description="bf16 weights alone (inference)"),
        Recipe("fp8_weights", "fp8_e4m3", description="fp8 E4M3 weights alone (inference)"),
        Recipe("fp32_sgd", "fp32", "fp32", description="fp32 training, SGD without momentum"),
        Recipe("fp32_adam", "fp32", "fp32", states=_adam("fp32"),
               description="fp32 training with Adam"),
        Recipe("fp16_adam", "fp16", "fp16", states=_adam("fp16"),
               description="pure fp16 training with Adam: no master copy, fp16 moments"),
        Recipe("bf16_adam", "bf16", "bf16", states=_adam("bf16"),
               description="pure bf16 training with Adam: no master copy, bf16 moments"),
        Recipe("mixed_sgd", "fp16", "fp16", "fp32",
               description="mixed precision, SGD: fp16 weights and gradients, fp32 master copy"),
        Recipe("mixed_adam", "fp16", "fp16", "fp32", _adam("fp32"),
               description="mixed precision, Adam: fp16 weights and gradients, fp32 master "
               "copy and moments"),
        Recipe("mixed_bf16_adam", "bf16", "bf16", "fp32", _adam("fp32"),
               description="mixed precision with bf16, Adam: bf16 weights and gradients, fp32 "
               "master copy and moments"),
    )
}  # fmt: skip


def get_recipe(recipe: str | Recipe) -> Recipe:
    """A recipe by name (one of :data:`RECIPES`), or the :class:`Recipe` given.

    >>> get_recipe("mixed_adam").parts["master"].name
    'fp32'
    >>> get_recipe("fp17_adam")
    Traceback (most recent call last):
    ...
    ValueError: unknown recipe 'fp17_adam'; known: fp32_weights, fp16_weights, bf16_weights, \
fp8_weights, fp32_sgd, fp32_adam, fp16_adam, bf16_adam, mixed_sgd, mixed_adam, mixed_bf16_adam \
(or a Recipe(...))
    """
    if isinstance(recipe, Recipe):
        return recipe
    try:
        return RECIPES[recipe]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown recipe {recipe!r}; known: {', '.join(RECIPES)} (or a Recipe(...))"
        ) from None


def bytes_per_parameter(recipe: str | Recipe = "mixed_adam") -> float:
    """Bytes of model state per parameter: the sum of the recipe's format widths over 8.

    >>> [bytes_per_parameter(r) for r in ("fp32_weights", "fp32_adam", "mixed_sgd", "bf16_adam")]
    [4.0, 16.0, 8.0, 8.0]
    """
    return get_recipe(recipe).bits_per_parameter / 8


def _count(n_params: Any) -> int:
    """A parameter count as an int (0.5e9 is fine; 0.5 parameters is not)."""
    if isinstance(n_params, bool) or not isinstance(n_params, numbers.Real):
        raise TypeError(f"n_params must be a number, got {n_params!r}")
    if not math.isfinite(n_params) or n_params < 0 or n_params != int(n_params):
        raise ValueError(f"n_params must be a non-negative whole number, got {n_params!r}")
    return int(n_params)


def _bytes(bits: int) -> int:
    return -(-bits // 8)  # whole bytes, rounded up (formats whose width is not a multiple of 8)


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes of model state, per buffer (``parts``) and in all (``total``).

    ``formats`` gives each part's format name; ``recipe`` the recipe's name (``"measured"`` for
    :func:`optimizer_budget`).
    """

    n_params: int
    recipe: str
    parts: dict[str, int]
    formats: dict[str, str]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def bytes_per_parameter(self) -> float:
        return self.total / self.n_params if self.n_params else 0.0

    def in_units(self, unit: int = GB) -> dict[str, float]:
        """Each part and the total in ``unit`` (:data:`GB` or :data:`GiB`)."""
        return {k: v / unit for k, v in {**self.parts, "total": self.total}.items()}

    def table(self) -> str:
        """A text table: each part's format, bytes per parameter, bytes, GB and GiB."""
        n = max(self.n_params, 1)
        bpp = self.bytes_per_parameter
        head = f"{self.n_params:,} parameters, recipe {self.recipe}: {bpp:g} bytes per parameter"
        rows = [("part", "format", "bytes/param", "bytes", "GB", "GiB")]
        for k, v in self.parts.items():
            rows.append((k, self.formats[k], f"{v / n:g}", f"{v:,}", f"{v / GB:.3f}",
                         f"{v / GiB:.3f}"))  # fmt: skip
        t = self.total
        rows.append(("total", "", f"{bpp:g}", f"{t:,}", f"{t / GB:.3f}", f"{t / GiB:.3f}"))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines = []
        for r in rows:
            left = [r[i].ljust(widths[i]) for i in range(2)]
            right = [r[i].rjust(widths[i]) for i in range(2, 6)]
            lines.append("  ".join(left + right).rstrip())
        return "\n".join([head] + lines)

    def __str__(self) -> str:
        return self.table()


def memory_budget(n_params: Any, recipe: str | Recipe = "mixed_adam") -> MemoryBudget:
    """The model-state memory of ``n_params`` parameters trained (or stored) by ``recipe``.

    >>> b = memory_budget(1000, "mixed_adam")
    >>> b.parts
    {'weights': 2000, 'gradients': 2000, 'master': 4000, 'exp_avg': 4000, 'exp_avg_sq': 4000}
    >>> b.total, b.bytes_per_parameter
    (16000, 16.0)
    """
    r = get_recipe(recipe)
    n = _count(n_params)
    parts = {k: _bytes(n * f.bits) for k, f in r.parts.items()}
    return MemoryBudget(n, r.name, parts, {k: f.name for k, f in r.parts.items()})


def optimizer_budget(optimizer: Any) -> MemoryBudget:
    """The model-state memory an fpsim optimizer actually holds, counted buffer by buffer.

    Weights and gradients are counted in their tensors' formats (a gradient not yet computed
    counts nothing), the master copy in fp32, and each optimizer state buffer in the format the
    optimizer keeps it in (fp32 with master weights, else the parameter's). A measured check of
    :func:`memory_budget`:

    >>> from fpsim import nn, optim, tensor
    >>> layer = nn.Linear(3, 2, format="fp16")
    >>> opt = optim.Adam(layer.parameters(), master_weights=True)
    >>> layer(tensor([[1.0, 2.0, 3.0]], format="fp16")).sum().backward()
    >>> opt.step()
    >>> optimizer_budget(opt).parts == memory_budget(8, "mixed_adam").parts
    True
    """
    bits: dict[str, int] = {}
    fmts: dict[str, set[str]] = {}

    def add(part: str, n: int, f: Format) -> None:
        bits[part] = bits.get(part, 0) + n * f.bits
        fmts.setdefault(part, set()).add(f.name)

    n_params = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            n_params += p.numel()
            add("weights", p.numel(), p.format)
            if p.grad is not None:
                add("gradients", p.grad.numel(), p.grad.format)
            state = optimizer.state.get(p, {})
            state_fmt = optimizer._state_format(p)
            if "master" in state:
                add("master", state["master"].size, get_format("fp32"))
            for key, value in state.items():
                if key not in ("step", "master") and hasattr(value, "size"):
                    add(key, int(value.size), state_fmt)
    return MemoryBudget(
        n_params,
        "measured",
        {k: _bytes(v) for k, v in bits.items()},
        {k: "/".join(sorted(v)) for k, v in fmts.items()},
    )
