"""The loss-scaling kernels on the CUDA back end (``fpsim.kernels.amp_cuda``), in numba's CUDA
simulator (own process, see conftest.py): the same results as the CPU kernels, bit for bit.
"""

import numpy as np
import pytest
from numba import cuda

from fpsim.amp.functional import amp_foreach_non_finite_check_and_unscale_, amp_update_scale_
from fpsim.kernels import amp_cpu

pytestmark = pytest.mark.cudasim


def grads(seed, n, dtype, special):
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(dtype)
    if special:
        g[rng.integers(0, n, 4)] = [np.inf, -np.inf, np.nan, -0.0]
    return g


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("inv", [2.0**-16, 1.0, 3.0e-5, 2.0**20])
def test_unscale_on_device_equals_cpu(dtype, special, inv):
    hosts = [grads(s, n, dtype, special and s == 1) for s, n in ((0, 300), (1, 77), (2, 1))]
    inv_h = np.array([inv], np.float32)
    found_h = np.zeros(1, np.float32)
    cpu = [h.copy() for h in hosts]
    amp_foreach_non_finite_check_and_unscale_(cpu, found_h, inv_h)
    devs = [cuda.to_device(h) for h in hosts]
    found_d = cuda.to_device(np.zeros(1, np.float32))
    amp_foreach_non_finite_check_and_unscale_(devs, found_d, cuda.to_device(inv_h))
    assert found_d.copy_to_host()[0] == found_h[0] == float(special)
    for d, c in zip(devs, cpu, strict=True):
        got = d.copy_to_host()
        assert got.dtype == dtype
        # bit for bit, except a NaN's payload: NaN * inv_scale keeps the payload on x86 but is
        # the canonical NaN (0x7fffffff) in an NVIDIA GPU's float32 multiply -- as for
        # PyTorch's own CPU and CUDA kernels. Where the NaNs are is exact.
        nan = np.isnan(c)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint8), c[~nan].view(np.uint8))


def test_unscale_on_device_checks_arguments():
    d = cuda.to_device(np.ones(4, np.float32))
    with pytest.raises(TypeError, match="found_inf"):
        amp_foreach_non_finite_check_and_unscale_(
            [d], cuda.to_device(np.zeros(1, np.float64)), cuda.to_device(np.ones(1, np.float32))
        )
    with pytest.raises(TypeError, match=r"grads\[0\]"):
        amp_foreach_non_finite_check_and_unscale_(
            [cuda.to_device(np.ones(4, np.int32))],
            cuda.to_device(np.zeros(1, np.float32)),
            cuda.to_device(np.ones(1, np.float32)),
        )


def test_update_scale_on_device_equals_cpu():
    rng = np.random.default_rng(3)
    cases = [
        (65536.0, 0, 1.0, 2.0, 0.5, 2000),  # back off
        (1024.0, 2, 0.0, 3.0, 0.25, 3),  # grow
        (2.0**126, 0, 0.0, 4.0, 0.5, 1),  # growth blocked: 2^128 is inf
        (0.1, 5, 0.0, 2.0, 0.5, 7),  # count
        (2.0**-149, 0, 2.0, 2.0, 0.5, 7),  # back off to 0
    ]
    for _ in range(20):
        cases.append((float(2.0 ** rng.uniform(-100, 100)), int(rng.integers(0, 3)),
                      float(rng.integers(0, 2)), 2.0, 0.3, int(rng.integers(1, 4))))  # fmt: skip
    for scale, tracker, found, growth, backoff, interval in cases:
        s_h = np.array([scale], np.float32)
        t_h = np.array([tracker], np.int32)
        f_h = np.array([found], np.float32)
        amp_cpu.update_scale(s_h.copy(), t_h.copy(), f_h, growth, backoff, interval)
        s_c, t_c = s_h.copy(), t_h.copy()
        amp_update_scale_(s_c, t_c, f_h, growth, backoff, interval)
        s_d, t_d = cuda.to_device(s_h), cuda.to_device(t_h)
        out = amp_update_scale_(s_d, t_d, cuda.to_device(f_h), growth, backoff, interval)
        assert out is s_d
        assert s_d.copy_to_host().view(np.uint32)[0] == s_c.view(np.uint32)[0]
        assert t_d.copy_to_host()[0] == t_c[0]
