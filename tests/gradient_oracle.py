"""Gradients of the underflow model computed without fpsim.stats: the true (fp32) ones for a
training step's weights and batch, and the run's own, for checking GradientRecorder and the
underflow demo."""

import numpy as np

from fpsim import amp, nn
from fpsim.nn import functional as F
from fpsim.stats import RangeHistogram

LINEARS = ("0.0", "0.2", "0.4")


def hist_of(arrays) -> RangeHistogram:
    h = RangeHistogram()
    for a in arrays:
        h.add(np.asarray(a, dtype=np.float64))
    return h


def same_hist(a: RangeHistogram, b: RangeHistogram) -> bool:
    return (
        np.array_equal(a.counts, b.counts)
        and np.array_equal(a.exact_powers, b.exact_powers)
        and a.zero == b.zero
        and a.nonfinite == b.nonfinite
        and all(a.zones(f) == b.zones(f) for f in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"))
    )


def _layer_grads(mods, outs) -> dict:
    g = {}
    for name in LINEARS:
        g[(name, "activation")] = outs[name].grad.data.ravel().astype(np.float64)
        m = mods[name]
        g[(name, "weight")] = np.concatenate(
            [m.weight.grad.data.ravel(), m.bias.grad.data.ravel()]
        ).astype(np.float64)
    return g


def true_gradients(state) -> dict:
    """``{(layer, kind): float64 array}``: the fp32 gradients for the run's current weights
    (the fp32 masters if any) and batch: a fresh underflow_model with the weights loaded, and
    ``retain_grad`` on each Linear output, the layers called one by one."""
    ref = amp.underflow_model(seed=123)  # other initial values; overwritten just below
    src = state.master if state.master is not None else state.model
    ref.load_state_dict({n: p.data.astype(np.float32) for n, p in src.named_parameters()})
    x, y = state.batch
    h = x.float()
    outs = {}
    for i, layer in enumerate(ref[0]):
        h = layer(h)
        if isinstance(layer, nn.Linear):
            h.retain_grad()
            outs[f"0.{i}"] = h
    F.mse_loss(ref[1](h), y).backward()
    return _layer_grads(dict(ref.named_modules()), outs)


class RunGradients:
    """Keeps the run's activation gradients: ``retain_grad`` on each Linear output (a forward
    hook); :meth:`stored` returns them and the parameter gradients, as stored (scaled)."""

    def __init__(self, model) -> None:
        self.mods = dict(model.named_modules())
        self.outs = {}
        self.handles = [self.mods[n].register_forward_hook(self._keep(n)) for n in LINEARS]

    def _keep(self, name):
        def hook(module, inputs, output):
            output.retain_grad()
            self.outs[name] = output

        return hook

    def stored(self) -> dict:
        return _layer_grads(self.mods, self.outs)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
