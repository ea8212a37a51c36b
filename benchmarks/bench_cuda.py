"""fpsim's CUDA kernels on a GPU: ``round_to`` of 50M float32 values and exact-order matmuls
(sequential and pairwise fp16/fp32 accumulation, the ``h100_fp16`` block-FMA model), medians
of 5 timed calls after a warm-up, each result checked against the CPU's on a slice.

    NUMBA_ENABLE_CUDASIM=0 python benchmarks/bench_cuda.py

Needs a CUDA GPU (numba-cuda); the README's numbers for an H100 come from this script.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np


def main() -> None:
    from numba import cuda

    if not cuda.is_available():
        sys.exit("bench_cuda: no CUDA GPU (numba.cuda.is_available() is False)")
    import fpsim
    from fpsim import arith

    def med(fn, k=5):
        fn()
        cuda.synchronize()
        ts = []
        for _ in range(k):
            t = time.perf_counter()
            r = fn()
            cuda.synchronize()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts), r

    rng = np.random.default_rng(0)
    x = rng.standard_normal(50_000_000).astype(np.float32)
    d = cuda.to_device(x)
    for fmt in ("fp16", "fp8_e4m3"):
        dt, r = med(lambda fmt=fmt: fpsim.round_to(d, fmt))
        same = np.array_equal(r.copy_to_host()[:2_000_000].view(np.uint32),
                              np.asarray(fpsim.round_to(x[:2_000_000], fmt)).view(np.uint32))
        print(f"round_to {fmt}, 50M float32 values: {dt * 1e3:.2f} ms "
              f"(first 2M equal to the CPU's: {same})")
    for n in (256, 1024):
        a = np.asarray(fpsim.round_to(rng.standard_normal((n, n)).astype(np.float32), "fp16"))
        b = np.asarray(fpsim.round_to(rng.standard_normal((n, n)).astype(np.float32), "fp16"))
        da, db = cuda.to_device(a), cuda.to_device(b)
        cases = [(f"acc={acc}, {order}", dict(acc=acc, order=order))
                 for acc in ("fp16", "fp32") for order in ("sequential", "pairwise")]
        cases.append(("h100_fp16 block FMA", dict(accumulation="h100_fp16")))
        for label, kw in cases:
            dt, r = med(lambda kw=kw, da=da, db=db: arith.matmul(da, db, "fp16", **kw))
            got = r.copy_to_host() if hasattr(r, "copy_to_host") else np.asarray(r)
            want = np.asarray(arith.matmul(a[:8], b, "fp16", **kw))
            same = np.array_equal(got[:8].view(np.uint8), want.view(np.uint8))
            print(f"matmul {n}^3 {label}: {dt * 1e3:.2f} ms = {2 * n**3 / dt / 1e9:.1f} GFLOP/s "
                  f"(rows 0-7 equal to the CPU's: {same})")


if __name__ == "__main__":
    main()
