"""The range-histogram count on the CUDA back end (fpsim.kernels.histogram_cuda), in numba's
CUDA simulator (own process, see conftest.py): counting device arrays of bit patterns gives the
same histogram as the CPU kernel, and the zone counts equal an ml_dtypes cast of the values.

This is the device path of ``fpsim.torch.watch``: a CUDA tensor is viewed as integers of its
width and handed over through ``__cuda_array_interface__``; here numba device arrays stand in
for the tensors (the simulator has no torch CUDA tensors), through the very same calls.
"""

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

from fpsim.stats import RangeHistogram

pytestmark = pytest.mark.cudasim

FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


def values(seed, n, dtype):
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        x = (rng.standard_normal(n) * 2.0 ** rng.integers(-40, 30, n)).astype(np.float32)
        x[:6] = [0.0, -0.0, np.inf, np.nan, 2.0**-149, 65520.0]
        return x.astype(dtype)


@pytest.mark.parametrize("name, dtype, idt", [
    ("fp32", np.float32, np.int32),
    ("fp16", np.float16, np.int16),
    ("bf16", ml_dtypes.bfloat16, np.int16),
])  # fmt: skip
def test_device_count_equals_the_cpu_count(name, dtype, idt):
    x = values(1, 700, dtype)
    bits = x.view(idt)
    cpu = RangeHistogram(FORMATS)
    amax_cpu = cpu.add_bits(bits, name)
    dev = RangeHistogram(FORMATS)
    amax_dev = dev.add_bits(cuda.to_device(bits), name)
    assert amax_dev == amax_cpu
    assert np.array_equal(dev.counts, cpu.counts) and np.array_equal(dev._past, cpu._past)
    assert np.array_equal(dev.exact_powers, cpu.exact_powers)
    assert (dev.zero, dev.nonfinite) == (cpu.zero, cpu.nonfinite)


def test_device_zones_equal_ml_dtypes_casts():
    x = values(2, 900, np.float32)
    h = RangeHistogram(FORMATS)
    h.add_bits(cuda.to_device(x.view(np.int32)), "fp32")
    for name, dt in (("fp16", np.float16), ("bf16", ml_dtypes.bfloat16),
                     ("fp8_e4m3", ml_dtypes.float8_e4m3fn), ("fp8_e5m2", ml_dtypes.float8_e5m2)):  # fmt: skip
        with np.errstate(all="ignore"):
            r = x.astype(dt).astype(np.float64)
        tiny = float(ml_dtypes.finfo(dt).smallest_normal)
        fin = np.isfinite(x)
        nz = fin & (x != 0)
        z = h.zones(name)
        assert z["underflow"] == np.count_nonzero(nz & (r == 0))
        assert z["subnormal"] == np.count_nonzero(nz & (r != 0) & (np.abs(r) < tiny))
        assert z["overflow"] == np.count_nonzero(nz & ~np.isfinite(r))
        assert z["nonfinite"] == np.count_nonzero(~fin)


def test_device_count_of_a_sliced_watch_style_view():
    """What watch hands over for a (contiguous) CUDA tensor: a flat integer view."""
    x = values(3, 512, np.float32).reshape(16, 32)
    d = cuda.to_device(x.view(np.int32))
    h = RangeHistogram(FORMATS)
    c = h.count_bits(d.reshape(512), "fp32")
    ref = RangeHistogram(FORMATS)
    ref_c = ref.count_bits(x.view(np.int32), "fp32")
    assert np.array_equal(c.by, ref_c.by) and c.amax == ref_c.amax
    for f in FORMATS:
        assert h.zones_of(c, f, 2.0**7) == ref.zones_of(ref_c, f, 2.0**7)
    with pytest.raises(TypeError, match="integers"):
        h.add_bits(cuda.to_device(x), "fp32")


def test_device_add_bits_with_per_tensor_zones_equals_the_host():
    """The call fpsim.torch.watch makes for a CUDA tensor: count on the device, add the counts
    with the loss scale divided out, and the tensor's per-tensor-scaled zones."""
    x = values(4, 800, np.float32)
    dev, cpu = RangeHistogram(FORMATS), RangeHistogram(FORMATS)
    z_dev = np.zeros((len(FORMATS), 6), np.int64)
    z_cpu = np.zeros((len(FORMATS), 6), np.int64)
    a_dev = dev.add_bits(cuda.to_device(x.view(np.int32)), "fp32", 2.0**-12,
                         tensor_formats=FORMATS, tensor_zones=z_dev)  # fmt: skip
    a_cpu = cpu.add_bits(x.view(np.int32), "fp32", 2.0**-12, tensor_formats=FORMATS,
                         tensor_zones=z_cpu)  # fmt: skip
    assert a_dev == a_cpu and np.array_equal(z_dev, z_cpu)
    assert np.array_equal(dev.counts, cpu.counts) and np.array_equal(dev._past, cpu._past)
