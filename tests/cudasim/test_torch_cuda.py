"""fpsim.torch on CUDA tensors against the same calls on CPU tensors, bit for bit: round_to,
quantize (casts, per-tensor and block scaling), RangeHistogram.add_bits on device memory, and a
watched model whose arithmetic is exact (small-integer weights and data, no updates: the CPU
and the GPU compute the same numbers), report for report.

These need PyTorch with a CUDA GPU, so they run only on a GPU machine with the simulator off
(``NUMBA_ENABLE_CUDASIM=0 python -m pytest tests/cudasim``); in the simulator (CI) they skip.
The first run on an H100 found the NaN bits of narrow results differing (fixed:
``fpsim.containers.host_nans``).
"""

import math

import numpy as np
import pytest

import fpsim

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.cudasim,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU for torch (NUMBA_ENABLE_CUDASIM=0 on a GPU machine)"),
]  # fmt: skip


def bits(t):
    t = t.detach().cpu().contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def probes(n=1 << 14):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-30, 30, (n,), generator=g).float())
    x[:5] = torch.tensor([math.inf, -math.inf, math.nan, -0.0, 0.0])
    x[5:9] = -x[5:9].abs()
    return x


def test_round_to_cuda_tensor_equals_cpu():
    """Every container dtype, format (NaN/inf styles, fp4 to tf32, e8m0), mode, saturation."""
    bad = []
    for dt in ("float32", "float16", "bfloat16"):
        x = probes().to(getattr(torch, dt))
        for fmt in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp4_e2m1", "e8m0",
                    "tf32"):  # fmt: skip
            for mode in ("nearest_even", "toward_zero", "up", "stochastic"):
                kw = dict(rounding=mode, seed=3) if mode == "stochastic" else dict(rounding=mode)
                for sat in (False, True):
                    got = fpsim.round_to(x.cuda(), fmt, saturate=sat, **kw)
                    assert got.device.type == "cuda"
                    if not same(got, fpsim.round_to(x, fmt, saturate=sat, **kw)):
                        bad.append((dt, fmt, mode, sat))
    assert bad == []


def test_quantize_cuda_tensor_equals_cpu():
    import fpsim.torch as ft

    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(1)) * 3
    for spec in (dict(fmt="fp8_e4m3"), dict(fmt="fp8_e5m2", rounding="stochastic", seed=5),
                 dict(scheme="mxfp8"), dict(scheme="mxfp4"), dict(scheme="nvfp4"),
                 dict(fmt="fp8_e4m3", scheme="current")):  # fmt: skip
        got = ft.quantize(w.cuda(), **spec)
        assert got.device.type == "cuda"
        assert same(got, ft.quantize(w, **spec)), spec


def test_add_bits_on_device_memory_equals_host():
    from fpsim.stats.range_histogram import RangeHistogram
    from fpsim.torch._tensors import bits_of

    fm = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
    for dt in ("float32", "float16", "bfloat16"):
        for scale in (1.0, 2.0**-10, 2.0**12):
            t = (probes()[8:] * 2.0**-20).to(getattr(torch, dt))
            out = []
            for d in ("cpu", "cuda"):
                h = RangeHistogram(formats=fm)
                pt = np.zeros((len(fm), 6), np.int64)
                amax = h.add_bits(*bits_of(t.to(d)), scale, tensor_formats=fm, tensor_zones=pt)
                out.append((h.counts, h.exact_powers, amax, pt))
            for a, b in zip(*out, strict=True):
                assert np.array_equal(a, b), (dt, scale)


def _watched_report(device):
    import fpsim.torch as ft

    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randint(-4, 5, p.shape).float() * 2.0**-6)
    m = m.to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.0)  # (updates would make the arithmetic inexact)
    gen = torch.Generator().manual_seed(2)
    with ft.watch(m, ("fp16", "bf16", "fp8_e4m3", "mxfp8"), optimizer=opt) as w:
        for _ in range(3):
            xb = torch.randint(-8, 9, (16, 32), generator=gen).float().to(device)
            loss = (m(xb) * 2.0**-12).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        rep = w.report()
    return {k: rep[k].to_dict(rep.formats) for k in rep.records}


def test_watch_on_cuda_reports_what_it_reports_on_cpu():
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu, cpu = _watched_report("cuda"), _watched_report("cpu")
    assert len(cpu) == 8
    assert gpu == cpu
