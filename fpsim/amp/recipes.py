"""Low-precision GEMM recipes: how each operand of a matrix multiply is quantized (FP8, MX, NVFP4).

A GEMM in a training step has three operand roles: the layer's ``"input"`` (activations) and
``"weight"`` in the forward pass, and the ``"grad_output"`` (the gradient arriving at the
layer's output) in the two backward GEMMs. A :class:`Recipe` gives one :class:`QuantizerSpec`
per role and the accumulation the GEMMs use; :meth:`Recipe.make_quantizer` turns a spec into a
stateful :class:`Quantizer` (one per layer and role, as TransformerEngine keeps one set of FP8
meta-data per module). The same objects drive the PyTorch emulation (:func:`fpsim.torch.emulate`)
and fpsim's own engine.

A spec's ``scaling``:

* ``"current"``: one float32 scale per tensor from the tensor's own amax (TransformerEngine
  ``Float8CurrentScaling``; torchao's dynamic tensorwise scaling):
  :class:`fpsim.scaling.CurrentScaling`;
* ``"delayed"``: the scale comes from the amax *history* of earlier steps (TE
  ``DelayedScaling``); :meth:`Quantizer.update` rolls the history once per step --
  :class:`fpsim.scaling.DelayedScaling`;
* ``"block"``: a block scheme of :mod:`fpsim.scaling` (``mxfp8_e4m3``, ``mxfp4``, ``nvfp4``, ...),
  blocks running along the GEMM's *reduction* dimension (the quantizer takes the ``axis``);
* ``"none"``: a plain cast to the element format, no scale (the loss scale, if any, is the only
  one: "FP8 with one global loss scale").

The named :data:`RECIPES` (see :func:`get_recipe`):

==================  ===============================================================================
``fp8_delayed``     TE ``DelayedScaling()``: HYBRID (E4M3 forward, E5M2 backward), margin 0, amax
                    history 1024, ``amax_compute_algo="max"``
``fp8_current``     TE ``Float8CurrentScaling()``: HYBRID, amax_epsilon 0, no power-of-two scales
``fp8_tensorwise``  torchao ``Float8LinearConfig`` tensorwise dynamic: E4M3 input and weight, E5M2
                    grad_output, amax clamped below at 1e-12
``mxfp8``           TE ``MXFP8BlockScaling()``: E4M3 elements (all roles), blocks of 32 along the
                    reduction dimension, E8M0 scales rounded up (``rceil``, ``cvt.rp``)
``nvfp4``           TE ``NVFP4BlockScaling()``: E2M1 in blocks of 16 with E4M3 block scales and an
                    fp32 tensor scale; stochastic rounding of grad_output (1-D blocks for every
                    role: TE's 16x16 weight blocks and random Hadamard transform are left out)
``fp8_cast``        a plain cast: E4M3 forward, E5M2 backward, no per-tensor scale, overflow to
                    inf/NaN (so a GradScaler sees it)
==================  ===============================================================================

>>> import numpy as np
>>> r = get_recipe("fp8_current")
>>> q = r.make_quantizer("input")
>>> q.quantize(np.array([3.5, -1.0, 0.1], np.float32)).tolist(), q.scale
([3.5, -1.0, 0.1015625], 128.0)
>>> r.make_quantizer("grad_output").spec.format
'fp8_e5m2'
>>> m = get_recipe("mxfp8").make_quantizer("weight")
>>> m.quantize(np.array([[1000.0, 300.0, -2.5, 0.01] + [0.0] * 28]), axis=1)[0, :4].tolist()
[1024.0, 288.0, -2.5, 0.0078125]
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arith.accumulation import PRESETS, BlockFMA
from ..core import ROUNDING_MODES, round_to
from ..formats import Format, get_format
from ..scaling import (
    BlockScheme,
    CurrentScaling,
    DelayedScaling,
    get_scheme,
    quantize,
    quantize_per_tensor,
)
from .fp8_gemm import resolve_model

__all__ = ["ROLES", "SCALINGS", "QuantizerSpec", "Quantizer", "Recipe", "RECIPES", "get_recipe",
           "LayerQuantizers"]

#: The operand roles of a layer's GEMMs: forward ``input @ weight^T``; backward
#: ``grad_output @ weight`` (the input's gradient) and ``grad_output^T @ input`` (the weight's).
ROLES = ("input", "weight", "grad_output")
#: The kinds of scaling a :class:`QuantizerSpec` can ask for.
SCALINGS = ("current", "delayed", "block", "none")

_DELAYED_ONLY = ("amax_history_len", "amax_compute_algo")
_CURRENT_ONLY = ("power_of_2", "amax_epsilon")


def _int_option(value: Any, name: str, low: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or (
        value < low
    ):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class QuantizerSpec:
    """How one GEMM operand is quantized.

    ``format``: the element format (``"fp8_e4m3"``, ``"fp8_e5m2"``, any name
    :func:`fpsim.get_format` reads) for ``"current"``, ``"delayed"`` and ``"none"`` scaling; the
    block scheme (``"mxfp8_e4m3"``, ``"mxfp4"``, ``"nvfp4"``, a name of
    :data:`fpsim.scaling.SCHEMES`) for ``"block"``. ``scaling``: one of :data:`SCALINGS`.
    ``margin``: the scale is divided by 2^margin (per-tensor kinds). ``power_of_2`` and
    ``amax_epsilon`` (current scaling only): TE's ``NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES``
    and ``amax_epsilon``. ``amax_history_len`` (default 1024) and ``amax_compute_algo``
    (``"max"`` or ``"most_recent"``) for delayed scaling. ``scale_rounding`` (block only): the
    scheme's scale rule (MX ``"floor"``, ``"ceil"``, ``"even"``, ``"rceil"``; NVFP4
    ``"nearest_even"``, ``"up"``). ``rounding``: the elements' rounding mode (any of
    :data:`fpsim.ROUNDING_MODES`). ``saturate``: what a cast does past the format's max --
    scaled kinds always saturate (TE's SATFINITE, torchao's clamp); ``"none"`` overflows to
    inf/NaN unless ``saturate=True``.

    Options that mean nothing for the kind are refused (``amax_history_len`` with current
    scaling, ``scale_rounding`` without blocks, ...).

    >>> QuantizerSpec("e4m3", "delayed").amax_history_len
    1024
    >>> QuantizerSpec("mxfp4", "block").element.name
    'fp4_e2m1'
    """

    format: str
    scaling: str = "current"
    margin: int = 0
    power_of_2: bool | None = None
    amax_epsilon: float | None = None
    amax_history_len: int | None = None
    amax_compute_algo: str | None = None
    scale_rounding: str | None = None
    rounding: str = "nearest_even"
    saturate: bool | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, got {self.scaling!r}")
        kind = self.scaling
        if kind == "block":
            set_(self, "format", get_scheme(self.format).name)
            sch = get_scheme(self.format)
            sr = sch.scale_roundings[0] if self.scale_rounding is None else self.scale_rounding
            if sr not in sch.scale_roundings:
                raise ValueError(
                    f"scale_rounding for {sch.name} must be one of {sch.scale_roundings}, "
                    f"got {sr!r}"
                )
            set_(self, "scale_rounding", sr)
        else:
            if isinstance(self.format, BlockScheme) or _is_scheme_name(self.format):
                raise ValueError(
                    f"{self.format!r} is a block scheme: use scaling='block' for it"
                )
            f = get_format(self.format)
            if not (f.signed and f.has_zero) or f.container_dtype != np.float32:
                raise ValueError(f"{f.name} is not a format for GEMM operands")
            set_(self, "format", f.name)
            if self.scale_rounding is not None:
                raise ValueError("scale_rounding is for block scaling (scaling='block')")
        if kind in ("block", "none") and self.margin:
            raise ValueError(f"margin is for per-tensor scaling, not scaling={kind!r}")
        set_(self, "margin", _int_option(self.margin, "margin", 0))
        if kind != "delayed":
            for name in _DELAYED_ONLY:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is for delayed scaling, not scaling={kind!r}")
        else:
            n = 1024 if self.amax_history_len is None else self.amax_history_len
            set_(self, "amax_history_len", _int_option(n, "amax_history_len", 1))
            algo = "max" if self.amax_compute_algo is None else self.amax_compute_algo
            if algo not in ("max", "most_recent"):
                raise ValueError(f"amax_compute_algo must be 'max' or 'most_recent', got {algo!r}")
            set_(self, "amax_compute_algo", algo)
        if kind != "current":
            for name in _CURRENT_ONLY:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is for current scaling, not scaling={kind!r}")
        else:
            p2 = False if self.power_of_2 is None else self.power_of_2
            if not isinstance(p2, (bool, np.bool_)):
                raise TypeError(f"power_of_2 must be True or False, got {p2!r}")
            set_(self, "power_of_2", bool(p2))
            eps = 0.0 if self.amax_epsilon is None else self.amax_epsilon
            if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (
                0 <= eps < math.inf
            ):
                raise ValueError(f"amax_epsilon must be a finite number >= 0, got {eps!r}")
            set_(self, "amax_epsilon", float(eps))
        if self.rounding not in ROUNDING_MODES:
            modes = ", ".join(ROUNDING_MODES)
            raise ValueError(f"unknown rounding mode {self.rounding!r}; choose one of {modes}")
        sat = (kind != "none") if self.saturate is None else self.saturate
        if not isinstance(sat, (bool, np.bool_)):
            raise TypeError(f"saturate must be True or False, got {sat!r}")
        if kind != "none" and not sat:
            raise ValueError("scaled casts saturate (TE's SATFINITE); saturate=False is for 'none'")
        set_(self, "saturate", bool(sat))

    @property
    def element(self) -> Format:
        """The format the elements are stored in."""
        if self.scaling == "block":
            return get_scheme(self.format).element
        return get_format(self.format)

    @property
    def scheme(self) -> BlockScheme | None:
        """The block scheme (None unless ``scaling == "block"``)."""
        return get_scheme(self.format) if self.scaling == "block" else None

    @property
    def axis_matters(self) -> bool:
        """True when the result depends on the axis blocks run along (block scaling)."""
        return self.scaling == "block"

    def describe(self) -> str:
        """One line: ``fp8_e4m3, delayed scaling (history 1024, max)``."""
        k = self.scaling
        extra = []
        if k == "delayed":
            extra.append(f"history {self.amax_history_len}, {self.amax_compute_algo}")
        if k == "current" and self.power_of_2:
            extra.append("power-of-two scales")
        if k == "current" and self.amax_epsilon:
            extra.append(f"amax >= {self.amax_epsilon:g}")
        if self.margin:
            extra.append(f"margin {self.margin}")
        if k == "block":
            extra.append(f"{self.scheme.block_size}-element blocks, {self.scale_rounding} scales")
        if self.rounding != "nearest_even":
            extra.append(f"{self.rounding} rounding")
        if k == "none":
            what = f"{self.format}, cast without a scale"
            extra.append("saturating" if self.saturate else "overflow to inf/NaN")
        else:
            what = f"{self.format}, {k} scaling"
        return what + (f" ({', '.join(extra)})" if extra else "")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> QuantizerSpec:
        return cls(**d)


def _is_scheme_name(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    try:
        get_scheme(name)
    except ValueError:
        return False
    return True


class Quantizer:
    """A stateful quantizer for one operand of one layer, made by :meth:`Recipe.make_quantizer`.

    :meth:`quantize` returns the dequantized values (what the GEMM multiplies) as a float32
    array of ``x``'s shape. Each element is the format's value times its scale, rounded once to
    float32: exactly the represented value whenever the scale is a power of two (every MX
    scheme, ``"none"``, current scaling with ``power_of_2``), otherwise within half a float32
    ulp of it (the product of an FP8 value and a 24-bit ``scale_inv`` needs up to 28 bits; TE
    applies it to the fp32 accumulator the same way). ``dtype=np.float64`` returns the exact
    values. The full result of the last call (:class:`~fpsim.scaling.PerTensorScaled`,
    :class:`~fpsim.scaling.ScaledTensor` or the rounded array) is :attr:`last`.

    State: :attr:`scale` / :attr:`scale_inv` (per-tensor kinds: the float32 scale of the last
    cast; delayed: the scale the next cast uses), :attr:`amax` (the last tensor's largest
    magnitude), :attr:`amax_history` (delayed), :attr:`calls`. :meth:`update` ends a step
    (delayed scaling: TE's history roll and scale update; nothing for the other kinds).
    Stochastic rounding draws from ``seed`` and the call count, so a run is reproducible.
    """

    def __init__(self, spec: QuantizerSpec, role: str = "input", seed: int = 0) -> None:
        if not isinstance(spec, QuantizerSpec):
            raise TypeError(f"spec must be a QuantizerSpec, got {type(spec).__name__}")
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self.spec = spec
        self.role = role
        self.seed = _int_option(seed, "seed", 0)
        self.calls = 0
        self.amax: float | None = None
        self.last: Any = None
        self._impl: CurrentScaling | DelayedScaling | None = None
        self._scale: float | None = None
        if spec.scaling == "current":
            self._impl = CurrentScaling(spec.format, margin=spec.margin,
                                        power_of_2=spec.power_of_2,
                                        amax_epsilon=spec.amax_epsilon)  # fmt: skip
        elif spec.scaling == "delayed":
            self._impl = DelayedScaling(spec.format, margin=spec.margin,
                                        amax_history_len=spec.amax_history_len,
                                        amax_compute_algo=spec.amax_compute_algo)  # fmt: skip

    # ---- state -------------------------------------------------------------------------------
    @property
    def per_tensor(self) -> bool:
        """True for the kinds with one float32 scale per tensor (current, delayed)."""
        return self._impl is not None

    @property
    def scale(self) -> float | None:
        """The float32 scale (delayed: the one the next cast uses; current: the last cast's;
        None before the first cast, and for block and plain casts)."""
        if isinstance(self._impl, DelayedScaling):
            return self._impl.scale
        return self._scale

    @property
    def scale_inv(self) -> float | None:
        """``fl32(1 / scale)``: what a cast value is multiplied by (TE's ``scale_inv``)."""
        s = self.scale
        return None if s is None else float(np.float32(1.0) / np.float32(s))

    @property
    def amax_history(self) -> np.ndarray | None:
        """Delayed scaling's amax history (slot 0: this step's); None for the other kinds."""
        return self._impl.amax_history if isinstance(self._impl, DelayedScaling) else None

    def _seed(self) -> int | None:
        if self.spec.rounding != "stochastic":
            return None
        return (self.seed * 1_000_003 + self.calls) % (1 << 62)

    def tensor_scale(self, amax: float) -> float:
        """The float32 scale a tensor with largest magnitude ``amax`` is cast with, recording
        the cast as :meth:`quantize` does (current: computed from amax; delayed: the scale in
        force, amax goes into the history). For callers that do the cast themselves (the
        PyTorch bridge on a GPU)."""
        if self._impl is None:
            raise ValueError(f"scaling={self.spec.scaling!r} has no per-tensor scale")
        self.amax = float(amax)
        if isinstance(self._impl, CurrentScaling):
            self._scale = self._impl.compute_scale(amax)
            return self._scale
        self._impl.record_amax(amax)
        return self._impl.scale

    def next_seed(self) -> int | None:
        """The stochastic-rounding seed of the next cast (None unless rounding is stochastic);
        counts the call. For callers that do the cast themselves."""
        s = self._seed()
        self.calls += 1
        return s

    # ---- quantizing --------------------------------------------------------------------------
    def quantize(self, x: Any, axis: int = -1, dtype: Any = np.float32) -> np.ndarray:
        """Quantize ``x`` (any real array) and return the dequantized values in ``dtype``
        (float32, or float64 for the exact values). ``axis``: the dimension blocks run along
        (the GEMM's reduction dimension); per-tensor kinds ignore it."""
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"dtype must be float32 or float64, got {dt}")
        spec = self.spec
        a = np.asarray(x)
        if spec.scaling == "block":
            res = quantize(a, spec.format, axis=axis, scale_rounding=spec.scale_rounding,
                           rounding=spec.rounding, seed=self._seed())  # fmt: skip
            out = res.dequantize(dt)
            self.amax = _amax(a)
        elif spec.scaling == "none":
            res = np.asarray(round_to(a.astype(np.float64) if a.dtype.kind != "f" else a,
                                      spec.format, spec.rounding, saturate=spec.saturate,
                                      seed=self._seed()))  # fmt: skip
            out = res
            self.amax = _amax(a)
        else:
            s = self.tensor_scale(_amax(a))
            res = quantize_per_tensor(a, spec.format, s, rounding=spec.rounding, seed=self._seed())
            out = res.dequantize(dt)
        self.calls += 1
        self.last = res
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(out).astype(dt, copy=False)

    def update(self) -> None:
        """End of a step: delayed scaling rolls its amax history and computes the next scale
        (TransformerEngine's ``_default_get_amax_and_update_history`` and ``_default_sf_compute``);
        the other kinds keep no history."""
        if isinstance(self._impl, DelayedScaling):
            self._impl.update()

    def state_dict(self) -> dict:
        """The spec, role, seed, call count and the scaling state (JSON-friendly)."""
        d = {"spec": self.spec.to_dict(), "role": self.role, "seed": self.seed,
             "calls": self.calls, "scale": self._scale, "amax": self.amax}  # fmt: skip
        if self._impl is not None:
            d["scaling_state"] = self._impl.state_dict()
        return d

    def load_state_dict(self, state: dict) -> None:
        spec = QuantizerSpec.from_dict(state["spec"])
        if spec != self.spec:
            raise ValueError(f"the state is of a quantizer for {spec}, this one is {self.spec}")
        self.role = state["role"]
        self.seed = int(state["seed"])
        self.calls = int(state["calls"])
        self._scale = state.get("scale")
        self.amax = state.get("amax")
        if self._impl is not None:
            self._impl.load_state_dict(state["scaling_state"])

    def __repr__(self) -> str:
        s = "" if self.scale is None else f", scale={self.scale!r}"
        return f"Quantizer({self.role}: {self.spec.describe()}{s}, calls={self.calls})"


def _amax(a: np.ndarray) -> float:
    if a.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        if a.dtype in (np.float32, np.float64):  # |x| is exact in its own dtype
            return float(np.max(np.abs(a)))  # NaN propagates
        return float(np.max(np.abs(a.astype(np.float64, copy=False))))


@dataclass(frozen=True)
class Recipe:
    """A low-precision GEMM recipe: one :class:`QuantizerSpec` per operand role and the
    accumulation the GEMMs use: ``"fp32"`` (products of the dequantized operands summed in
    float32, as PyTorch's emulation does), or a hardware accumulation model -- a preset name of
    :func:`fpsim.arith.list_accumulations` (``"h100_fp8"``, ...) or a
    :class:`fpsim.arith.BlockFMA` -- with which fpsim's engine runs the block FMA on the FP8
    elements and applies the scales to the result (:mod:`fpsim.amp.fp8_gemm`). A BlockFMA equal
    to a preset is kept as the preset's name.

    >>> r = get_recipe("fp8_delayed")
    >>> print(r)
    fp8_delayed: TransformerEngine DelayedScaling (HYBRID, history 1024, max); accumulate in fp32
      input        fp8_e4m3, delayed scaling (history 1024, max)
      weight       fp8_e4m3, delayed scaling (history 1024, max)
      grad_output  fp8_e5m2, delayed scaling (history 1024, max)
    """

    name: str
    input: QuantizerSpec
    weight: QuantizerSpec
    grad_output: QuantizerSpec
    accumulation: str | BlockFMA = "fp32"
    description: str = ""

    def __post_init__(self) -> None:
        for role in ROLES:
            if not isinstance(getattr(self, role), QuantizerSpec):
                raise TypeError(f"{role} must be a QuantizerSpec, got {getattr(self, role)!r}")
        acc = self.accumulation
        resolve_model(acc)  # "fp32", a preset name or a BlockFMA; else ValueError
        if isinstance(acc, BlockFMA) and PRESETS.get(acc.name) == acc:
            object.__setattr__(self, "accumulation", acc.name)

    @property
    def accumulation_name(self) -> str:
        """``"fp32"`` or the model's name."""
        acc = self.accumulation
        return acc.name if isinstance(acc, BlockFMA) else acc

    def spec(self, role: str) -> QuantizerSpec:
        """The spec of ``role`` (one of :data:`ROLES`)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        return getattr(self, role)

    def make_quantizer(self, role: str, seed: int = 0) -> Quantizer:
        """A fresh stateful quantizer for ``role``."""
        return Quantizer(self.spec(role), role, seed)

    def replace(self, **changes: Any) -> Recipe:
        """A copy with some fields changed (``name``, a role's spec, ``accumulation``, ...)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = {"name": self.name, "accumulation": _accumulation_to_json(self.accumulation),
             "description": self.description}  # fmt: skip
        d.update({role: self.spec(role).to_dict() for role in ROLES})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Recipe:
        return cls(d["name"], *(QuantizerSpec.from_dict(d[r]) for r in ROLES),
                   accumulation=_accumulation_from_json(d.get("accumulation", "fp32")),
                   description=d.get("description", ""))  # fmt: skip

    def __str__(self) -> str:
        head = f"{self.name}: {self.description}; " if self.description else f"{self.name}: "
        lines = [head + f"accumulate in {self.accumulation_name}"]
        lines += [f"  {role:11}  {self.spec(role).describe()}" for role in ROLES]
        return "\n".join(lines)


def _accumulation_to_json(acc: str | BlockFMA) -> str | dict:
    """A preset or "fp32" by name; a custom BlockFMA as its fields (formats as their
    parameters)."""
    if not isinstance(acc, BlockFMA):
        return acc
    d = dataclasses.asdict(acc)
    for k in ("acc", "promote_to"):
        f = getattr(acc, k)
        d[k] = dict(f._kwargs(), name=f.name)
    d["inputs"] = None if acc.inputs is None else list(acc.inputs)
    return {"block_fma": d}


def _accumulation_from_json(d: str | dict) -> str | BlockFMA:
    if not isinstance(d, dict):
        return d
    kw = dict(d["block_fma"])
    for k in ("acc", "promote_to"):
        kw[k] = Format(**kw[k])
    if kw["inputs"] is not None:
        kw["inputs"] = tuple(kw["inputs"])
    return BlockFMA(**kw)


def _hybrid(**options: Any) -> dict:
    """E4M3 for the forward operands, E5M2 for the gradient (TE's Format.HYBRID)."""
    return {
        "input": QuantizerSpec("fp8_e4m3", **options),
        "weight": QuantizerSpec("fp8_e4m3", **options),
        "grad_output": QuantizerSpec("fp8_e5m2", **options),
    }


def _same(spec: QuantizerSpec, **grad_changes: Any) -> dict:
    return {"input": spec, "weight": spec,
            "grad_output": dataclasses.replace(spec, **grad_changes)}  # fmt: skip


#: The named recipes (see the module docstring for their sources).
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("fp8_delayed", **_hybrid(scaling="delayed", amax_history_len=1024,
                                        amax_compute_algo="max"),
               description="TransformerEngine DelayedScaling (HYBRID, history 1024, max)"),
        Recipe("fp8_current", **_hybrid(scaling="current"),
               description="TransformerEngine Float8CurrentScaling (HYBRID)"),
        Recipe("fp8_tensorwise", **_hybrid(scaling="current", amax_epsilon=1e-12),
               description="torchao float8 tensorwise dynamic scaling (e4m3, e4m3, e5m2)"),
        Recipe("mxfp8", **_same(QuantizerSpec("mxfp8_e4m3", "block", scale_rounding="rceil")),
               description="TransformerEngine MXFP8BlockScaling (E4M3, blocks of 32, rceil)"),
        Recipe("nvfp4", **_same(QuantizerSpec("nvfp4", "block"), rounding="stochastic"),
               description="NVFP4 (E2M1, blocks of 16, E4M3 block and fp32 tensor scales; "
                           "stochastic rounding of grad_output)"),
        Recipe("fp8_cast", **_hybrid(scaling="none"),
               description="FP8 cast without per-tensor scales (one global loss scale)"),
    )
}  # fmt: skip


def get_recipe(recipe: Recipe | str) -> Recipe:
    """A recipe by object or name (one of :data:`RECIPES`)."""
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, str) and recipe.strip().lower() in RECIPES:
        return RECIPES[recipe.strip().lower()]
    raise ValueError(f"unknown recipe {recipe!r}; known: {', '.join(RECIPES)}, or a Recipe(...)")


class LayerQuantizers:
    """The recipe state of one layer: ``recipe`` and one :class:`Quantizer` per role in
    ``quantizers`` (seeds ``seed``, ``seed + 1``, ``seed + 2`` in :data:`ROLES` order), and
    ``calls``, the forward calls so far. :meth:`begin_forward` starts a step: after a first
    call, delayed scaling rolls its histories (one step = one forward call). The layers of
    :func:`fpsim.torch.emulate` and :func:`fpsim.amp.convert_to_fp8` are these."""

    def __init__(self, recipe: Recipe, seed: int = 0) -> None:
        self.recipe = recipe
        self.quantizers: dict[str, Quantizer] = {
            role: recipe.make_quantizer(role, seed=seed + i) for i, role in enumerate(ROLES)
        }
        self.calls = 0

    def begin_forward(self) -> None:
        """A new step for this layer: delayed scaling rolls its histories (after a first call)."""
        if self.calls:
            for q in self.quantizers.values():
                q.update()
        self.calls += 1

    def state_dict(self) -> dict:
        """The recipe, the call count and every quantizer's state (JSON-friendly)."""
        return {"recipe": self.recipe.to_dict(), "calls": self.calls,
                "quantizers": {r: q.state_dict() for r, q in self.quantizers.items()}}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        if "recipe" in state and Recipe.from_dict(state["recipe"]) != self.recipe:
            raise ValueError(
                f"the state is of a layer with recipe {state['recipe']['name']!r}, "
                f"this one uses {self.recipe.name!r}"
            )
        self.calls = int(state["calls"])
        for r, q in self.quantizers.items():
            q.load_state_dict(state["quantizers"][r])


def select_layers(named: list, layers: Any, default_types: tuple, what: str) -> list:
    """The ``(name, module)`` pairs of ``named`` (a model's ``named_modules()``) that a
    conversion applies to: those of ``default_types`` when ``layers`` is None, else the ones
    ``layers`` names (a name, a list of names, a type or a tuple of types); each must be one of
    ``default_types`` (``what`` names them in the error)."""
    if layers is None:
        layers = default_types
    if isinstance(layers, str):
        layers = [layers]
    if isinstance(layers, type) or (isinstance(layers, tuple) and layers and
                                    all(isinstance(t, type) for t in layers)):  # fmt: skip
        chosen = [(n, m) for n, m in named if isinstance(m, layers)]
    else:
        names = dict(named)
        unknown = [n for n in layers if n not in names]
        if unknown:
            raise ValueError(f"no such modules: {unknown}; the model has {list(names)}")
        chosen = [(n, names[n]) for n in layers]
    for n, m in chosen:
        if not isinstance(m, default_types):
            raise TypeError(f"{n or '<model>'} is a {type(m).__name__}; {what}")
    return chosen
