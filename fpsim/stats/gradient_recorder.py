"""Gradients of a model, true and as produced: a :class:`GradientRecorder` fills range histograms
from a model during training: per layer, its activation and weight gradients as a low-precision
run produced them, next to the true (fp32) gradients for the same weights and batch, with
element-by-element counts of what was lost."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..formats import Format, FormatLike, get_format
from .range_histogram import DEFAULT_FORMATS, RangeHistogram

__all__ = ["GradientRecorder", "GradientRecord", "KINDS"]

KINDS = ("activation", "weight")


@dataclass
class GradientRecord:
    """What a :class:`GradientRecorder` keeps for one layer and one kind of gradient.

    ``reference``: a :class:`RangeHistogram` of the *true* gradients (fp32, no loss scale).
    ``produced``: one of the gradients the simulated run produced, divided by the loss scale of
    that backward pass (float64; exact for a power-of-two scale). ``error``: one of the relative
    errors ``|produced - reference| / |reference|`` of the elements non-zero and finite in both.
    The counters compare the two element by element: ``values`` compared; ``reference_nonzero``;
    ``lost`` (reference non-zero, produced exactly zero); ``subnormal`` (reference non-zero,
    produced value *as stored*, i.e. still scaled, in the format's subnormal range);
    ``appeared`` (reference zero, produced non-zero); ``nonfinite`` (produced inf or NaN).
    """

    reference: RangeHistogram
    produced: RangeHistogram
    error: RangeHistogram
    values: int = 0
    reference_nonzero: int = 0
    lost: int = 0
    subnormal: int = 0
    appeared: int = 0
    nonfinite: int = 0

    @property
    def lost_fraction(self) -> float:
        """``lost / reference_nonzero``: the share of the non-zero true gradients that became 0."""
        return self.lost / self.reference_nonzero if self.reference_nonzero else 0.0

    @property
    def subnormal_fraction(self) -> float:
        """``subnormal / reference_nonzero``: the share kept only as subnormals (fewer bits)."""
        return self.subnormal / self.reference_nonzero if self.reference_nonzero else 0.0

    def median_error(self) -> float:
        """The binade ``2^k`` holding the median relative error of the elements kept (0.0 when
        all were exact, NaN when none were compared)."""
        h = self.error
        n = h.count - h.nonfinite
        if n == 0:
            return math.nan
        if h.zero * 2 >= n:
            return 0.0
        exps, counts = h.bins()
        i = int(np.searchsorted(np.cumsum(counts) + h.zero, n / 2))
        return 2.0 ** int(exps[min(i, exps.size - 1)])

    def merge(self, other: GradientRecord) -> None:
        self.reference.merge(other.reference)
        self.produced.merge(other.produced)
        self.error.merge(other.error)
        for name in ("values", "reference_nonzero", "lost", "subnormal", "appeared", "nonfinite"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class GradientRecorder:
    """Record a model's gradients during low-precision training next to the true ones.

    ``GradientRecorder(model)`` puts forward hooks on the layers (default: every module that
    owns parameters, e.g. each ``Linear``; modules without parameters, such as a final fixed
    scaling, are recorded only when named in ``layers=`` -- and the gradient of the loss with
    respect to the model's output, often the largest and so the first to overflow under a loss
    scale, is seen only when the module producing it is listed). A layer's forward hook
    registers a tensor hook on its output, so the backward pass hands over the *activation
    gradient* (the gradient of the loss with respect to the layer's output, summed over its
    uses, in the output's format). After backward, :meth:`record` (or :meth:`on_backward`, the
    callback for :func:`fpsim.amp.train`) reads the *weight gradients* (``.grad`` of the layer's
    own parameters: weight and bias), then computes the **reference**: the same batch and loss
    through a private copy of the model in fp32 (autocast off, no loss scale), with the weights
    the optimizer holds (the fp32 masters for master-weight recipes, else the model's
    parameters) -- so the run's ``.grad`` is left untouched. Per layer and kind
    (``"activation"``, ``"weight"``) it keeps a :class:`GradientRecord`: histograms of the
    reference and of the produced gradients divided by the loss scale, and element-by-element
    counts of what was lost to zero or kept as a subnormal.

    Precisely: ``produced = stored / S`` in float64, where ``stored`` is the gradient as the run
    holds it after backward (fp16 values, scaled by the loss scale ``S`` of that backward pass;
    for an autocast run the weight gradient is the fp16 gradient of the weight's fp16 copy,
    passed exactly to the fp32 parameter). "Lost" and "subnormal" are judged on ``stored``, the
    value the format actually held, subnormal meaning ``0 < |stored| < fmt.min_normal`` for the
    run's low-precision format ``fmt`` (the recipe's autocast dtype or model format; fp32 for
    the fp32 recipe). Note the trap this avoids: in :func:`~fpsim.amp.train`'s ``on_backward``
    the gradients are still scaled, and a reference backward on the model itself would add
    into its ``.grad``.

    ``every``: record every k-th step (:meth:`on_backward` reads the step number; the reference
    costs about one fp32 training step). ``formats``: the formats the histograms answer zone
    questions for. The model must compute the same thing twice (no dropout); one forward and
    one backward per step.

    >>> from fpsim import amp
    >>> X, Y = amp.underflow_task(256, seed=0)
    >>> model = amp.underflow_model(seed=0)
    >>> rec = GradientRecorder(model)
    >>> res = amp.train(model, (X, Y), "fp16", steps=4, on_backward=rec.on_backward)
    >>> rec.layers, rec.steps
    (['0.0', '0.2', '0.4'], [0, 1, 2, 3])
    >>> f"{rec.total('activation').lost_fraction:.0%} of the non-zero activation gradients lost"
    '96% of the non-zero activation gradients lost'
    """

    def __init__(
        self,
        model,
        fmt: FormatLike | None = None,
        layers=None,
        every: int = 1,
        formats: tuple[FormatLike, ...] = DEFAULT_FORMATS,
    ) -> None:
        import copy

        from .. import nn

        if not isinstance(model, nn.Module):
            # Refused here: a torch module has named_modules() too and would fail much later.
            # Recognised by its classes' modules, without importing torch.
            kind = f"{type(model).__module__}.{type(model).__qualname__}"
            msg = f"GradientRecorder records fpsim models (fpsim.nn.Module), got {kind}"
            if any(c.__module__.split(".")[0] == "torch" for c in type(model).__mro__):
                msg += (
                    ", a PyTorch model: watch it with fpsim.torch.watch(model) (range "
                    "histograms of its activations and gradients, loss-scale windows), or build "
                    "the model with fpsim.nn"
                )
            raise TypeError(msg)
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every!r}")
        self.model = model
        self.fmt: Format | None = None if fmt is None else get_format(fmt)
        self._fmt_given = fmt is not None
        self.every = int(every)
        self._formats = tuple(formats)
        named = dict(model.named_modules())
        if layers is None:
            chosen = [n for n, m in named.items() if any(p is not None for p in
                      m._parameters.values())]  # fmt: skip
        elif isinstance(layers, type) or (
            isinstance(layers, tuple) and all(isinstance(t, type) for t in layers)
        ):
            chosen = [n for n, m in named.items() if isinstance(m, layers)]
        else:
            chosen = list(layers)
            unknown = [n for n in chosen if n not in named]
            if unknown:
                raise ValueError(f"no such layers: {unknown}; the model has {list(named)}")
        if not chosen:
            raise ValueError("no layers to record (no module owns parameters?)")
        self.layers: list[str] = chosen
        # the reference: an fp32 copy, made before any hook of ours is on the model
        self._ref = copy.deepcopy(model)
        if isinstance(self._ref, nn.Module):
            self._ref.float()
        ref_named = dict(self._ref.named_modules())
        self._captured: dict[str, dict[str, list[np.ndarray]]] = {"run": {}, "ref": {}}
        self._handles = []
        for side, mods in (("run", named), ("ref", ref_named)):
            for name in chosen:
                hook = self._forward_hook(side, name)
                self._handles.append(mods[name].register_forward_hook(hook))
            root = model if side == "run" else self._ref
            self._handles.append(root.register_forward_pre_hook(self._clear_hook(side)))
        self.records: dict[tuple[str, str], GradientRecord] = {
            (name, kind): self._new_record() for name in chosen for kind in KINDS
        }
        self.steps: list[int] = []
        self.scales: list[float] = []
        self._calls = 0

    # ---- hooks ---------------------------------------------------------------------------------
    def _new_record(self) -> GradientRecord:
        fmts = self._formats + ((self.fmt.name,) if self.fmt is not None else ())
        fmts = tuple(dict.fromkeys(get_format(f).name for f in fmts))
        return GradientRecord(RangeHistogram(fmts), RangeHistogram(fmts), RangeHistogram(fmts))

    def _forward_hook(self, side: str, name: str):
        from ..autograd.tensor import Tensor

        store = self._captured[side]

        def capture(grad) -> None:
            store.setdefault(name, []).append(np.array(grad.data, dtype=np.float32))

        def hook(module, inputs, output) -> None:
            if isinstance(output, Tensor) and output.requires_grad:
                output.register_hook(capture)

        return hook

    def _clear_hook(self, side: str):
        def hook(module, inputs) -> None:  # a new forward pass of the whole model
            self._captured[side].clear()

        return hook

    def remove(self) -> None:
        """Take the hooks off the model (the records stay)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> GradientRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    # ---- recording -----------------------------------------------------------------------------
    def on_backward(self, state) -> None:
        """The ``on_backward`` callback of :func:`fpsim.amp.train`: record every ``every``-th
        step, dividing by ``state.scale``; the run's format is taken from ``state.recipe`` when
        the recorder was made without one."""
        r = state.recipe
        run_fmt = get_format(r.autocast or (r.model_format if r.master_weights else "fp32"))
        if self.fmt is None:
            self._set_format(run_fmt)
        elif run_fmt != self.fmt and not self._fmt_given:
            raise ValueError(
                f"this recorder holds a {self.fmt.name} run; make one GradientRecorder per run "
                f"(this one is {run_fmt.name})"
            )
        if state.step % self.every:
            self._captured["run"].clear()
            return
        self.record(state.batch, state.loss_fn, state.scale, master=state.master,
                    step=state.step)  # fmt: skip

    def _set_format(self, fmt: FormatLike) -> None:
        """Set the run's format; the (still empty) records are remade to answer for it."""
        f = get_format(fmt)
        if any(rec.values for rec in self.records.values()):
            raise ValueError("the recorder already holds gradients of another run")
        self.fmt = f
        self.records = {key: self._new_record() for key in self.records}

    def record(self, batch, loss_fn, scale: float = 1.0, master=None, step: int | None = None):
        """Record one step, after the run's backward of ``loss_fn(model(x), y) * scale``.

        ``batch``: the ``(x, y)`` the model was called with; ``master``: the
        :class:`~fpsim.amp.MasterWeights` whose fp32 parameters are the weights (if any).
        """
        from ..amp.autocast_mode import autocast
        from ..autograd.grad_mode import enable_grad
        from ..autograd.tensor import Tensor, tensor
        from ..formats import fp32

        if self.fmt is None:
            raise ValueError("give the run's format: GradientRecorder(model, fmt='fp16')")
        run = self._captured["run"]
        missing = [n for n in self.layers if n not in run]
        if missing:
            raise RuntimeError(
                f"no activation gradient was seen for layers {missing}: call record() after "
                "the backward pass of a forward pass made with the hooks on"
            )
        named = dict(self.model.named_modules())
        stored = {
            (name, "activation"): np.concatenate([g.ravel() for g in run[name]])
            for name in self.layers
        }
        for name in self.layers:
            grads = [p.grad.data.ravel() for p in named[name]._parameters.values()
                     if p is not None and p.grad is not None]  # fmt: skip
            stored[(name, "weight")] = np.concatenate(grads) if grads else np.zeros(0, np.float32)
        run.clear()

        # the reference: same weights (the optimizer's), same batch, fp32, no scale
        source = (
            dict(master.named_parameters())
            if master is not None
            else dict(self.model.named_parameters())
        )
        for pname, p in self._ref.named_parameters():
            p.data[...] = source[pname].data
            p._bump_version()  # PyTorch's p.copy_(...): a graph that kept the old ones refuses
            p.grad = None
        x, y = batch
        x = x if isinstance(x, Tensor) else tensor(x)
        y = y if isinstance(y, Tensor) else tensor(y)
        if x.format is not None and x.format != fp32:
            x = x.to(fp32)
        with autocast("cuda", enabled=False), autocast("cpu", enabled=False), enable_grad():
            out = self._ref(x)
            loss_fn(out, y).backward()
        ref_run = self._captured["ref"]
        ref_named = dict(self._ref.named_modules())
        for name in self.layers:
            ref = np.concatenate([g.ravel() for g in ref_run[name]])
            grads = [p.grad.data.ravel() for p in ref_named[name]._parameters.values()
                     if p is not None and p.grad is not None]  # fmt: skip
            refw = np.concatenate(grads) if grads else np.zeros(0, np.float32)
            self._add((name, "activation"), ref, stored[(name, "activation")], scale)
            self._add((name, "weight"), refw, stored[(name, "weight")], scale)
        ref_run.clear()
        for p in self._ref.parameters():
            p.grad = None
        self.steps.append(self._calls if step is None else int(step))
        self.scales.append(float(scale))
        self._calls += 1

    def _add(self, key: tuple[str, str], ref: np.ndarray, stored: np.ndarray, scale: float):
        if ref.shape != stored.shape:
            raise RuntimeError(
                f"{key}: the run's gradient has {stored.size} values, the reference's "
                f"{ref.size}: did the model compute something different the second time?"
            )
        rec = self.records[key]
        produced = stored.astype(np.float64) / float(scale)
        rec.reference.add(ref)
        rec.produced.add(produced)
        r = ref.astype(np.float64)
        rnz = r != 0
        s = np.abs(stored.astype(np.float64))
        finite = np.isfinite(s)
        rec.values += ref.size
        rec.reference_nonzero += int(np.count_nonzero(rnz))
        rec.lost += int(np.count_nonzero(rnz & (s == 0)))
        rec.subnormal += int(np.count_nonzero(rnz & (s > 0) & (s < self.fmt.min_normal)))
        rec.appeared += int(np.count_nonzero(~rnz & (s != 0)))
        rec.nonfinite += int(np.count_nonzero(~finite))
        both = rnz & finite & (s != 0) & np.isfinite(r)
        rec.error.add(np.abs(produced[both] - r[both]) / np.abs(r[both]))

    # ---- reading ---------------------------------------------------------------------------
    def total(self, kind: str | None = None, layer: str | None = None) -> GradientRecord:
        """The records of one kind and/or layer (None: all) merged into one."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if layer is not None and layer not in self.layers:
            raise ValueError(f"unknown layer {layer!r}; recorded: {self.layers}")
        out = self._new_record()
        for (name, k), rec in self.records.items():
            if (kind is None or k == kind) and (layer is None or name == layer):
                out.merge(rec)
        return out

    def histograms(self, kind: str = "activation", which: str = "reference") -> dict:
        """``{layer: RangeHistogram}`` of one kind, ``which`` = "reference" or "produced" (for
        :func:`fpsim.plot.plot_layer_histograms`)."""
        if which not in ("reference", "produced"):
            raise ValueError(f"which must be 'reference' or 'produced', got {which!r}")
        return {name: getattr(self.records[(name, kind)], which) for name in self.layers}

    def table(self) -> str:
        """One line per layer and kind: values, % lost to zero, % subnormal, median error."""
        fmt = self.fmt.name if self.fmt is not None else "?"
        rows = [
            f"{'layer':8} {'kind':10} {'values':>10} {'lost to 0':>9} {'subnormal':>9} "
            f"{'median rel. error':>17}   ({fmt}, {len(self.steps)} recorded steps)"
        ]
        keys = list(self.records) + [("all", k) for k in KINDS]
        for name, kind in keys:
            rec = self.records[(name, kind)] if name != "all" else self.total(kind)
            err = rec.median_error()
            e = "-" if math.isnan(err) else ("0" if err == 0 else f"2^{int(math.log2(err))}")
            rows.append(f"{name:8} {kind:10} {rec.values:>10,} {100 * rec.lost_fraction:>8.2f}% "
                        f"{100 * rec.subnormal_fraction:>8.2f}% {e:>17}")  # fmt: skip
        return "\n".join(rows)

    def __repr__(self) -> str:
        fmt = self.fmt.name if self.fmt is not None else None
        n = len(self.steps)
        return f"GradientRecorder(layers={self.layers}, fmt={fmt}, recorded_steps={n})"
