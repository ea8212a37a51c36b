"""``fpsim.torch.watch``: record a real PyTorch model's tensors against low-precision formats.

Hooks go on the model (forward hooks, backward hooks, parameter post-accumulate-grad hooks,
optimizer step hooks); every recorded tensor is counted into a
:class:`fpsim.stats.RangeHistogram` straight from its bits -- on the CPU through a zero-copy
numpy view, on a GPU by fpsim's numba CUDA kernel through ``__cuda_array_interface__`` (only
the histogram's counters come back) -- so the zone counts are exact against each format's
boundaries. :meth:`Watch.report` turns the records into a :class:`~fpsim.torch.Report`.

Per module and tensor kind:

==================  ===============================================================================
``activation``      the module's output, in the forward pass
``activation_grad`` the gradient of the loss with respect to that output (see below)
``weight``          the module's own parameters, when the forward pass uses them
``weight_grad``     their ``.grad`` once accumulated (post-accumulate-grad hook)
``optimizer_state`` the optimizer's per-parameter tensors (``exp_avg``, ``momentum_buffer``, ...)
                    after each step (give ``optimizer=``)
==================  ===============================================================================

The activation gradients come, by default (``backward_hooks="tensor"``), from a hook the
forward hook puts on each output tensor: it fires when the backward pass produces that tensor's
gradient, also when a later in-place op (``ReLU(inplace=True)``) changed the tensor, and costs
no extra autograd node. ``backward_hooks="module"`` uses ``register_full_backward_pre_hook``
instead (the same gradient, at the same moment), which PyTorch refuses when a module's output
is modified in place ("Output 0 of BackwardHookFunction is a view and is being modified
inplace").

A *step* is one forward call of the model with gradients enabled (forward calls under
``torch.no_grad()`` record nothing). With ``scaler=`` (a ``torch.amp.GradScaler``) the
gradients are recorded with the loss scale divided out (exactly: the scale is a power of two),
every backward pass is checked for overflow, and a skipped step is explained
(:meth:`Watch.skip_report`, right after ``scaler.update()``). With ``optimizer=`` the updates
are checked for swamping.

**Sampling.** ``every=k`` records every k-th step (the overflow checks run at every step);
``sample=p`` (a share) or ``sample=n`` (a number of elements) counts a seeded random sample of
each recorded tensor's elements (drawn with replacement; block schemes get whole rows). A
share p estimated from n sampled values has a standard error of ``sqrt(p(1-p)/n)``: with n =
10,000, a 1% underflow share is known to ±0.2 percentage points (95%). The largest magnitude
(amax) is always computed over every element, so overflow, per-tensor scales and the upper
edges of the loss-scale windows stay exact.

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
>>> with watch(model, formats=["fp16", "fp8_e4m3"]) as w:
...     model(torch.randn(32, 8)).pow(2).mean().backward()
>>> r = w.report()
>>> sorted({k for _, k in r.records})
['activation', 'activation_grad', 'weight', 'weight_grad']
>>> r["0", "activation"].counted
256
"""

from __future__ import annotations

import math
import numbers
import warnings
import zlib
from typing import Any

import numpy as np
import torch
from torch import nn

from ..core import round_to
from ..formats import get_format
from ..kernels.histogram import current_scale_exponent
from ..scaling import get_scheme
from ..stats import ZONES, RangeHistogram, scaling_report
from ._tensors import FORMAT_OF, bits_of, is_float, values_of
from .report import KINDS, OverflowEvent, Report, SkipReport, SwampStats, TensorStats

__all__ = ["watch", "Watch", "DEFAULT_FORMATS", "KINDS"]

#: torch float dtypes -> their names as a report gives them ("float32", "bfloat16", ...)
_DTYPE_NAME = {dt: str(dt).replace("torch.", "") for dt in FORMAT_OF}

#: the dtypes whose CPU tensors a watch counts straight from their memory (data_ptr)
_AT_ADDRESS = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
_PLAIN = (torch.Tensor, nn.Parameter)  # (a subclass's memory need not hold its values)

_BACKWARD_HOOK_WARNING = "Full backward hook is firing when gradients are computed with respect"

#: What a watch compares with unless told otherwise. Block schemes ("mxfp4", "nvfp4", ...) are
#: asked for by name: they quantize every tensor element by element, ~20x the cost of a
#: histogram (see benchmarks/bench_torch_watch.py).
DEFAULT_FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


def _split_formats(formats: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(element formats, block schemes) by name, in the order given."""
    if isinstance(formats, str):
        formats = [formats]
    elems: list[str] = []
    schemes: list[str] = []
    for f in formats:
        try:
            schemes.append(get_scheme(f).name)
            continue
        except ValueError:
            pass
        elems.append(get_format(f).name)  # raises ValueError naming the known formats
    return tuple(dict.fromkeys(elems)), tuple(dict.fromkeys(schemes))


def _log2_pow2(s: float) -> int | None:
    m, e = math.frexp(s)
    return e - 1 if (m == 0.5 and math.isfinite(s)) else None


class Watch:
    """Hooks on a model that record its tensors (see the module docstring). Made and started
    by :func:`watch`; :meth:`stop` takes the hooks off (the records stay), :meth:`start` puts
    them back; as a context manager it stops on exit."""

    def __init__(
        self,
        model: nn.Module,
        formats: Any = DEFAULT_FORMATS,
        *,
        kinds: Any = None,
        modules: Any = None,
        every: int = 1,
        sample: float | int | None = None,
        seed: int = 0,
        scaler: Any = None,
        optimizer: torch.optim.Optimizer | None = None,
        eps: float = 1e-3,
        scaler_format: str = "fp16",
        swamping: Any = None,
        backward_hooks: str = "tensor",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"watch takes a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.formats, self.schemes = _split_formats(formats)
        if kinds is None:
            kinds = tuple(k for k in KINDS if k != "optimizer_state" or optimizer is not None)
        kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise ValueError(f"unknown tensor kinds {bad}; choose from {KINDS}")
        if "optimizer_state" in kinds and optimizer is None:
            raise ValueError("the optimizer_state kind needs watch(..., optimizer=opt)")
        self.kinds = kinds
        if isinstance(every, bool) or not isinstance(every, numbers.Integral) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.every = int(every)
        if sample is not None:
            ok = (isinstance(sample, numbers.Integral) and not isinstance(sample, bool)
                  and sample >= 1) or (isinstance(sample, float) and 0 < sample < 1)  # fmt: skip
            if not ok:
                raise ValueError(
                    f"sample must be None, a share in (0, 1) or a number of elements >= 1, "
                    f"got {sample!r}"
                )
        self.sample = sample
        self.seed = int(seed)
        if not 0 <= eps < 1:
            raise ValueError(f"eps must be in [0, 1), got {eps!r}")
        self.eps = float(eps)
        if scaler is not None and not (hasattr(scaler, "get_scale") and
                                       hasattr(scaler, "is_enabled")):  # fmt: skip
            raise TypeError(f"scaler must be a torch.amp.GradScaler, got {type(scaler).__name__}")
        self.scaler = scaler
        self.scaler_format = get_format(scaler_format)
        self.optimizer = optimizer
        if backward_hooks not in ("tensor", "module"):
            raise ValueError(f"backward_hooks must be 'tensor' or 'module', got {backward_hooks!r}")
        self.backward_hooks = backward_hooks
        if swamping is None:  # the 16-bit formats asked about: where weights are held
            swamping = tuple(f for f in self.formats if get_format(f).bits == 16)
        self.swamp_formats = tuple(get_format(f).name for f in ((swamping,) if
                                   isinstance(swamping, str) else swamping))  # fmt: skip
        self._hist_formats = tuple(dict.fromkeys(self.formats + (self.scaler_format.name,)))
        self._fmax = {f: float(np.float32(get_format(f).max)) for f in self.formats}  # TE's
        self._modules = self._select(modules)
        self._owner = self._param_owners()
        self.records: dict[tuple[str, str], TensorStats] = {}
        for name, m in self._modules:
            has_params = any(True for _ in m.parameters(recurse=False))
            for kind in self.kinds:
                if kind in ("activation", "activation_grad") or has_params:
                    self.records[(name, kind)] = TensorStats(name, kind, self._new_hist())
        self._scratch = self._new_hist()
        self._adders: dict[tuple, Any] = {}  # (record key, format or dtype) -> bits_adder
        self._pt = {key: np.zeros((len(self.formats), len(ZONES)), np.int64)
                    for key in self.records}  # fmt: skip
        self._handles: list[Any] = []
        self._warning_filter: tuple | None = None
        self.skips: list[SkipReport] = []
        self.swamping: dict[str, SwampStats] = {}
        self.steps_seen = 0
        self.steps_recorded = 0
        self.scaler_steps = 0
        self._last_amax: dict[tuple, float] = {}  # unscaled, at the last finite step
        self._step = -1
        self._recording = False
        self._new_step_state()

    # ---- set-up ------------------------------------------------------------------------------
    def _new_hist(self) -> RangeHistogram:
        return RangeHistogram(self._hist_formats)

    def _select(self, modules: Any) -> list[tuple[str, nn.Module]]:
        named = list(self.model.named_modules())
        if modules is None:  # every module that owns parameters itself
            chosen = [(n, m) for n, m in named if any(True for _ in m.parameters(recurse=False))]
        elif modules == "leaves":
            chosen = [(n, m) for n, m in named if not any(True for _ in m.children())]
        elif isinstance(modules, type) or (isinstance(modules, tuple) and
                                           all(isinstance(t, type) for t in modules)):  # fmt: skip
            chosen = [(n, m) for n, m in named if isinstance(m, modules)]
        else:
            names = dict(named)
            modules = [modules] if isinstance(modules, str) else list(modules)
            unknown = [n for n in modules if n not in names]
            if unknown:
                raise ValueError(f"no such modules: {unknown}; the model has {list(names)}")
            chosen = [(n, names[n]) for n in modules]
        if not chosen:
            raise ValueError("no modules to watch (none owns parameters? pass modules=...)")
        return chosen

    def _param_owners(self) -> dict[int, tuple[str, str, nn.Parameter]]:
        """id(param) -> (owning module's name, parameter's full name, param), each parameter
        once (a tied parameter belongs to the first module holding it)."""
        owners: dict[int, tuple[str, str, nn.Parameter]] = {}
        for mname, m in self.model.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                full = f"{mname}.{pname}" if mname else pname
                owners.setdefault(id(p), (mname, full, p))
        return owners

    def start(self) -> Watch:
        """Put the hooks on (again). Returns self."""
        if self._handles:
            raise RuntimeError("this watch is already started")
        h = self._handles
        h.append(self.model.register_forward_pre_hook(self._on_model_forward))
        grads = "activation_grad" in self.kinds or self.scaler is not None
        for name, m in self._modules:
            tensor_hooks = grads and self.backward_hooks == "tensor"
            if "activation" in self.kinds or "weight" in self.kinds or tensor_hooks:
                h.append(m.register_forward_hook(self._forward_hook(name, m, tensor_hooks)))
            if grads and self.backward_hooks == "module":
                # the pre-hook sees the output's gradient when it arrives, before the module's
                # own backward: in the order the backward pass produces gradients
                h.append(m.register_full_backward_pre_hook(self._backward_hook(name)))
        watched = {n for n, _ in self._modules}
        for mname, full, p in self._owner.values():
            if p.requires_grad and ("weight_grad" in self.kinds and mname in watched
                                    or self.scaler is not None):  # fmt: skip
                h.append(p.register_post_accumulate_grad_hook(self._grad_hook(mname, full)))
        if self.optimizer is not None:
            h.append(self.optimizer.register_step_pre_hook(self._on_step_pre))
            h.append(self.optimizer.register_step_post_hook(self._on_step_post))
        if grads and self.backward_hooks == "module":
            # An Embedding's backward pre-hook fires on its output gradient (its input is an
            # index tensor, with no gradient) and torch warns about that each time: that
            # gradient is the one wanted. The filter is this watch's own, and goes with stop().
            warnings.filterwarnings("ignore", message=_BACKWARD_HOOK_WARNING,
                                    category=UserWarning)  # fmt: skip
            self._warning_filter = warnings.filters[0]
        return self

    def stop(self) -> None:
        """Take the hooks off (the records stay; :meth:`report` still works)."""
        self._finish_step_if_updated()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._warning_filter is not None:
            if self._warning_filter in warnings.filters:
                warnings.filters.remove(self._warning_filter)
                if hasattr(warnings, "_filters_mutated"):  # invalidate warn()'s caches
                    warnings._filters_mutated()
            self._warning_filter = None

    def __enter__(self) -> Watch:
        if not self._handles:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- steps -------------------------------------------------------------------------------
    def _new_step_state(self) -> None:
        self._seq = 0
        self._events: list[OverflowEvent] = []
        self._scale_bwd: float | None = None
        self._backward_seen = False
        self._opt_stepped = False
        self._finished = False
        self._snapshot: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _on_model_forward(self, module: nn.Module, args: Any) -> None:
        if not torch.is_grad_enabled():
            return
        self._finish_step()
        self._step += 1
        self.steps_seen += 1
        self._recording = self._step % self.every == 0
        if self._recording:
            self.steps_recorded += 1
        self._new_step_state()

    def _scale(self) -> float | None:
        """The loss scale of this step's backward pass (read once per step)."""
        if self.scaler is None or not self.scaler.is_enabled():
            return None
        if self._scale_bwd is None:
            self._scale_bwd = float(self.scaler.get_scale())
        return self._scale_bwd

    def _finish_step(self) -> None:
        """At the next step (or on demand): was the step that just ended skipped?"""
        if self._finished or not self._backward_seen or self._scale() is None:
            return
        rep = self._skip_state()
        self._finished = True
        self.scaler_steps += 1
        if rep.skipped:
            self.skips.append(rep)

    def _skip_state(self) -> SkipReport:
        s = self._scale()
        now = float(self.scaler.get_scale())
        skipped = now < s  # GradScaler backs off if and only if it found inf/NaN
        return SkipReport(self._step, skipped, s, now, self.scaler_format.name,
                          tuple(self._events))  # fmt: skip

    def skip_report(self) -> SkipReport:
        """The step that just ended, right after ``scaler.update()``: skipped or not, and if
        it was, the gradient tensor that overflowed first in the backward pass (module, kind,
        how many elements, by how many binades) and the ones after it."""
        if self.scaler is None:
            raise RuntimeError("skip forensics needs watch(..., scaler=scaler)")
        if not self._backward_seen:
            raise RuntimeError("no backward pass was watched since the last forward pass")
        rep = self._skip_state()
        if not self._finished:
            self._finished = True
            self.scaler_steps += 1
            if rep.skipped:
                self.skips.append(rep)
        return rep

    # ---- hooks -------------------------------------------------------------------------------
    def _forward_hook(self, name: str, module: nn.Module, tensor_hooks: bool):
        grad_hook = self._backward_hook(name)
        act_key, weight_key = (name, "activation"), (name, "weight")
        record_activation = act_key in self.records
        record_weight = weight_key in self.records

        def hook(mod: nn.Module, args: Any, output: Any) -> None:
            if not torch.is_grad_enabled():
                return
            if tensor_hooks:  # the gradient of each output, when the backward pass makes it
                for t in _tensors(output):
                    if t.requires_grad:
                        t.register_hook(lambda g: grad_hook(mod, (g,)))
            if not self._recording:
                return
            if record_activation:
                for t in _tensors(output):
                    self._record(act_key, t)
            if record_weight:
                for p in module.parameters(recurse=False):
                    if self._owner[id(p)][0] == name:
                        self._record(weight_key, p)

        return hook

    def _backward_hook(self, name: str):
        def hook(mod: nn.Module, grad_output: Any) -> None:
            self._backward_seen = True
            for g in _tensors(grad_output):
                self._check_overflow(name, "activation_grad", None, g)
                if self._recording and "activation_grad" in self.kinds:
                    self._record((name, "activation_grad"), g, self._scale())

        return hook

    def _grad_hook(self, mname: str, pname: str):
        def hook(p: torch.Tensor) -> None:
            self._backward_seen = True
            if p.grad is None:
                return
            self._check_overflow(mname, "weight_grad", pname, p.grad)
            if self._recording and (mname, "weight_grad") in self.records:
                self._record((mname, "weight_grad"), p.grad, self._scale())

        return hook

    def _on_step_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        if not (self._recording and self.swamp_formats):
            return
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None and is_float(p):
                    self._snapshot[id(p)] = (p.detach().clone(), p.grad.detach() != 0)

    def _on_step_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._opt_stepped = True  # (GradScaler.step calls it only when it does not skip)
        if not self._recording:
            return
        for group in opt.param_groups:
            for p in group["params"]:
                snap = self._snapshot.pop(id(p), None)
                if snap is not None:
                    self._swamping(p, *snap)
                if "optimizer_state" in self.kinds:
                    owner = self._owner.get(id(p))
                    key = (owner[0] if owner else "?", "optimizer_state")
                    if key not in self.records:
                        continue
                    for v in opt.state.get(p, {}).values():
                        if is_float(v) and v.shape == p.shape:
                            self._record(key, v)

    # ---- counting ----------------------------------------------------------------------------
    def _rng(self, key: tuple[str, str]) -> torch.Generator:
        h = zlib.crc32(f"{key[0]}|{key[1]}".encode())
        return torch.Generator().manual_seed((self.seed * 1_000_003 + self._step * 7919 + h)
                                             % (1 << 62))  # fmt: skip

    def _sampled(self, t: torch.Tensor, key: tuple[str, str]) -> torch.Tensor:
        """A seeded sample of t's elements (flat), or t itself when not sampling."""
        n = t.numel()
        m = self._sample_size(n)
        if m >= n:
            return t
        idx = torch.randint(0, n, (m,), generator=self._rng(key)).to(t.device)
        return t.reshape(-1)[idx]

    def _sample_size(self, n: int) -> int:
        s = self.sample
        if s is None:
            return n
        return min(n, math.ceil(s * n) if isinstance(s, float) else int(s))

    def _record(self, key: tuple[str, str], t: torch.Tensor, scale: float | None = None) -> None:
        # This runs for every recorded tensor (~90 per step of the tiny GPT): few torch calls,
        # no string work, one compiled call for the common case (benchmarks/bench_torch_watch.py)
        rec = self.records.get(key)
        dt = _DTYPE_NAME.get(t.dtype) if isinstance(t, torch.Tensor) else None
        if rec is None or dt is None:
            return
        n = t.numel()
        rec.tensors += 1
        rec.seen += n
        if dt not in rec.dtypes:
            rec.dtypes.append(dt)
        if n == 0:
            return
        if (self.sample is None and type(t) in _PLAIN and t.is_cpu and t.dtype in _AT_ADDRESS
                and t.is_contiguous()):  # fmt: skip
            # the common case: the tensor's memory read where it is (no numpy view to make)
            k = None if scale is None else _log2_pow2(scale)
            if scale is None or k is not None:
                add = self._adders.get((key, t.dtype))
                if add is None:
                    add = rec.hist.bits_adder(FORMAT_OF[t.dtype], self.formats, at_address=True)
                    self._adders[(key, t.dtype)] = add
                amax = add(t.data_ptr(), n, 0 if k is None else -k, self._pt[key])
                rec.counted += n
                rec.amax = max(rec.amax, amax if scale is None else amax / scale)
                if self.schemes:
                    self._record_blocks(rec, t.detach(), key, scale)
                return
        part = t if self.sample is None else self._sampled(t.detach(), key)
        bits = bits_of(part)
        k = None if scale is None else _log2_pow2(scale)
        pt = self._pt[key]  # per-tensor-scaled zones, one row per format
        if bits is not None and (scale is None or k is not None):
            # one pass over the bits: the record gets the values with the loss scale divided
            # out (exactly, a power of two), pt this tensor's zones after its own scale
            if isinstance(bits[0], np.ndarray):  # (bits_of: 1-D, native, the format's width)
                add = self._adders.get((key, bits[1]))
                if add is None:
                    add = rec.hist.bits_adder(bits[1], self.formats)
                    self._adders[(key, bits[1])] = add
                amax = add(bits[0], 0 if k is None else -k, pt)
            else:  # on a GPU
                amax = rec.hist.add_bits(*bits, 1.0 if k is None else 2.0**-k,
                                         tensor_formats=self.formats, tensor_zones=pt)  # fmt: skip
        else:  # fp8 E4M3 tensors, or a loss scale that is not a power of two: by the values
            v = values_of(part).astype(np.float64)
            h = self._scratch
            h.reset()
            h.add(v)
            fin = np.abs(v[np.isfinite(v)])
            amax = float(fin.max()) if fin.size else 0.0
            for j, f in enumerate(self.formats):
                k_f = current_scale_exponent(self._fmax[f], amax)
                pt[j] += list(h.zones(f, 2.0**k_f).values())
            if scale is None:
                rec.hist.merge(h)
            else:  # divided by a scale that is not a power of two: one rounding per value
                rec.hist.add(v / scale)
        if part is not t:  # sampled: the largest magnitude over every element
            a = t.detach().abs()
            amax = float(torch.where(torch.isfinite(a), a, torch.zeros_like(a)).amax())
        rec.counted += part.numel()
        rec.amax = max(rec.amax, amax if scale is None else amax / scale)
        if self.schemes:
            self._record_blocks(rec, t.detach(), key, scale)

    def _record_blocks(self, rec: TensorStats, t: torch.Tensor, key: tuple[str, str],
                       scale: float | None) -> None:  # fmt: skip
        rows = t.reshape(-1, t.shape[-1]) if t.dim() else t.reshape(1, 1)
        m = self._sample_size(rows.numel())
        if m < rows.numel():  # whole rows, so that blocks stay whole
            r = max(1, math.ceil(m / rows.shape[1]))
            idx = torch.randint(0, rows.shape[0], (r,), generator=self._rng(key)).to(t.device)
            rows = rows[idx]
        x = values_of(rows).astype(np.float64)
        if scale is not None:
            x = x / scale  # exact for a power-of-two scale
        for row in scaling_report(x, list(self.schemes), axis=-1, errors=False):
            name = get_scheme(row.label).name
            acc = rec.blocks.setdefault(name, {c: 0 for c in
                                               ("values", "nonzero", "zero", "subnormal",
                                                "saturated", "nonfinite")})  # fmt: skip
            for c in acc:
                acc[c] += getattr(row, c)

    def _check_overflow(self, module: str, kind: str, param: str | None,
                        g: torch.Tensor) -> None:  # fmt: skip
        """Skip forensics: note a gradient holding inf/NaN or values beyond the scaler's
        format's max (an amax per tensor per step; details only for such tensors)."""
        if self.scaler is None or not is_float(g) or g.numel() == 0:
            return
        self._seq += 1
        g = g.detach()
        fmax = self.scaler_format.max
        scale = self._scale()
        key = (module, kind, param)
        amax = float(torch.linalg.vector_norm(g, math.inf))  # NaN propagates
        last = self._last_amax.get(key)
        if math.isfinite(amax):
            self._last_amax[key] = amax / scale
            if amax <= fmax:
                return
        fin = torch.isfinite(g)
        nonfinite = int(g.numel() - fin.sum())
        nan = int(torch.isnan(g).sum())
        a = torch.where(fin, g.abs(), torch.zeros_like(g))
        amax_f = float(a.amax())
        beyond = int((a > fmax).sum())
        over = math.log2(amax_f / fmax) if amax_f > fmax else None
        est = math.log2(last * scale / fmax) if (nonfinite and last) else None
        self._events.append(OverflowEvent(self._seq, module, kind, param,
                                          str(g.dtype).replace("torch.", ""), g.numel(),
                                          nonfinite, nan, beyond, amax_f, over, est))  # fmt: skip

    def _swamping(self, p: torch.Tensor, old: torch.Tensor, grad_nz: torch.Tensor) -> None:
        owner = self._owner.get(id(p))
        name = owner[1] if owner else f"param{id(p)}"
        pf = get_format(FORMAT_OF[p.dtype])
        st = self.swamping.setdefault(name, SwampStats(name, str(p.dtype).replace("torch.", "")))
        w0 = values_of(old).astype(np.float64).ravel()
        w1 = values_of(p.detach()).astype(np.float64).ravel()
        gnz = values_of(grad_nz).ravel()
        d = w1 - w0  # exact: both hold values of p's dtype, float64 has room
        st.steps += 1
        st.elements += d.size
        st.grad_nonzero += int(gnz.sum())
        st.lost_own += int((gnz & (d == 0)).sum())
        upd = d != 0
        st.updates += int(upd.sum())
        for fname in self.swamp_formats:
            f = get_format(fname)
            if f.bits >= pf.bits:
                continue  # held in a format at least as wide: nothing to learn
            st.vanished.setdefault(fname, 0)
            st.vanished_sr.setdefault(fname, 0.0)
            if not upd.any():
                continue
            wf = np.asarray(round_to(w0[upd], f), np.float64)  # the weight held in f
            v = wf + d[upd]  # exact enough: see the report's SwampStats
            near = np.asarray(round_to(v, f), np.float64)
            st.vanished[fname] = st.vanished.get(fname, 0) + int((near == wf).sum())
            lo = np.asarray(round_to(v, f, "down"), np.float64)
            hi = np.asarray(round_to(v, f, "up"), np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                span = hi - lo
                p_stay = np.where(lo == wf, (hi - v) / span, np.where(hi == wf, (v - lo) / span,
                                                                      0.0))  # fmt: skip
            p_stay = np.where(span == 0, (v == wf).astype(np.float64), p_stay)
            p_stay = np.where(np.isfinite(p_stay), p_stay, 0.0)
            st.vanished_sr[fname] = st.vanished_sr.get(fname, 0.0) + float(p_stay.sum())

    # ---- results -----------------------------------------------------------------------------
    def report(self) -> Report:
        """What was recorded so far, as a :class:`~fpsim.torch.Report`."""
        self._finish_step_if_updated()
        recs = {k: r for k, r in self.records.items() if r.tensors}
        for key, rec in recs.items():
            rows = zip(self.formats, self._pt[key], strict=True)
            rec.per_tensor = {f: dict(zip(ZONES, row.tolist(), strict=True)) for f, row in rows}
        info = {"steps_seen": self.steps_seen, "steps_recorded": self.steps_recorded,
                "every": self.every, "sample": self.sample, "seed": self.seed,
                "scaler": self.scaler is not None, "scaler_steps": self.scaler_steps,
                "scaler_format": self.scaler_format.name}  # fmt: skip
        return Report(recs, self.formats, self.schemes, info, self.skips,
                      dict(self.swamping), self.eps)  # fmt: skip

    def _finish_step_if_updated(self) -> None:
        """Before a report: the last step counts once it is known to be over: its optimizer
        step ran, or the scaler's scale moved (``update()`` was called)."""
        if self.scaler is not None and self._backward_seen and not self._finished:
            s = self._scale()
            if s is not None and (self._opt_stepped or float(self.scaler.get_scale()) != s):
                self._finish_step()

    def __repr__(self) -> str:
        on = "on" if self._handles else "off"
        return (f"Watch({type(self.model).__name__}, {len(self._modules)} modules, "
                f"formats={list(self.formats + self.schemes)}, hooks {on}, "
                f"{self.steps_recorded}/{self.steps_seen} steps recorded)")  # fmt: skip


def _tensors(x: Any) -> list[torch.Tensor]:
    """The float tensors in a module's output (a tensor, or tuples / lists / dicts of them)."""
    if isinstance(x, torch.Tensor):
        return [x] if is_float(x) else []
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def watch(model: nn.Module, formats: Any = DEFAULT_FORMATS, **options: Any) -> Watch:
    """Start watching ``model``: returns a started :class:`Watch` (use it as a context
    manager to stop it at the end, or call ``stop()``).

    ``formats``: element formats (``"fp16"``, ``"bf16"``, ``"fp8_e4m3"``, any name
    :func:`fpsim.get_format` reads) and block schemes (``"mxfp4"``, ``"mxfp8"``, ``"nvfp4"``).
    Options: ``kinds`` (default all of :data:`KINDS` that apply), ``modules`` (default: every
    module owning parameters; ``"leaves"``, names or types), ``every``, ``sample``, ``seed``
    (sampling), ``scaler`` (a ``torch.amp.GradScaler``: unscaled gradients, skip forensics),
    ``optimizer`` (optimizer state and update swamping), ``eps`` (the underflow share the
    loss-scale windows allow, default 0.1%), ``scaler_format`` (the format the scaler guards,
    default fp16), ``swamping`` (the formats whose update swamping is counted; default the
    16-bit ones among ``formats``; ``()`` for none), ``backward_hooks`` (``"tensor"``, the
    default, or ``"module"``: see the module docstring).
    """
    return Watch(model, formats, **options).start()
