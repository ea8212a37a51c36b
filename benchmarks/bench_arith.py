"""Simulated-arithmetic throughput, all in one process, median of several runs.

1. Elementwise fp16 add and mul: ``fpsim.arith.add/mul(a, b, "fp16")`` on float32 arrays holding
   fp16 values (the public API: input checks, allocation and the correctly rounded kernel)
   against numpy's own float16 arithmetic ``a16 + b16`` (target: fpsim faster).
2. 256x256x256 matmul with fp32 accumulation: ``fpsim.arith.matmul(a, b, "fp16", acc="fp32")``
   (default order: the BLAS order, plus input checks and the final rounding to fp16) against
   numpy's float32 ``a @ b`` (target: within 3x).
3. The exact-order kernels: sequential fp16-accumulate matmul (every partial sum rounded to fp16
   in a fixed order, products exact) in GFLOP/s (2 n^3 flops), and the same with fp32
   accumulation and with pairwise order.

    python benchmarks/bench_arith.py [--n 10000000] [--size 256] [--repeat 7]

On a small machine numba's OpenMP workers and OpenBLAS's threads can slow each other down
badly (a BLAS call right after a numba parallel region may take 50x longer); the numba
threading layer in use is printed, and NUMBA_THREADING_LAYER=workqueue avoids the effect.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numba
import numpy as np

import fpsim
from fpsim import arith


def median_s(fn, repeat: int) -> float:
    fn()  # warm up (compiles, or loads the numba cache)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def paired_median_s(fn_a, fn_b, repeat: int) -> tuple[float, float]:
    """Medians of two functions timed alternately, so that both see the same machine state
    (on a small, shared machine the thread pools of numba and of the BLAS disturb each other)."""
    fn_a()
    fn_b()
    ta, tb = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        fn_a()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        fn_b()
        tb.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description="fpsim.arith throughput")
    ap.add_argument("--n", type=int, default=10_000_000, help="elements for add/mul")
    ap.add_argument("--size", type=int, default=256, help="matmul size (size^3)")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, s, rep = args.n, args.size, args.repeat

    a16 = rng.standard_normal(n).astype(np.float16)
    b16 = (rng.standard_normal(n) * 4).astype(np.float16)
    a32, b32 = a16.astype(np.float32), b16.astype(np.float32)
    rows = []
    for name, fn, npfn in [("add", arith.add, np.add), ("mul", arith.mul, np.multiply)]:
        t_fp, t_np = paired_median_s(
            lambda fn=fn: fn(a32, b32, "fp16"), lambda npfn=npfn: npfn(a16, b16), rep
        )
        rows.append((f"fp16 {name}, {n:,} elements", t_fp / n * 1e9, t_np / n * 1e9, "ns/elem",
                     t_np / t_fp, "numpy float16 / fpsim (>1: fpsim faster)"))  # fmt: skip

    A = np.asarray(fpsim.round_to(rng.standard_normal((s, s)).astype(np.float32), "fp16"))
    B = np.asarray(fpsim.round_to(rng.standard_normal((s, s)).astype(np.float32), "fp16"))
    t_fp, t_np = paired_median_s(
        lambda: arith.matmul(A, B, "fp16", acc="fp32"), lambda: A @ B, 5 * rep
    )
    rows.append((f"matmul {s}^3 fp16 in, fp32 acc (BLAS order)", t_fp * 1e3, t_np * 1e3, "ms",
                 t_fp / t_np, "fpsim / numpy float32 (target <= 3)"))  # fmt: skip
    flops = 2.0 * s**3
    for label, kw in [
        ("fp16 acc, sequential", dict(acc="fp16", order="sequential")),
        ("fp32 acc, sequential", dict(acc="fp32", order="sequential")),
        ("fp16 acc, pairwise", dict(acc="fp16", order="pairwise")),
        ("fp16 acc, sequential, round toward zero",
         dict(acc="fp16", order="sequential", rounding="toward_zero")),
    ]:  # fmt: skip
        t = median_s(lambda kw=kw: arith.matmul(A, B, "fp16", **kw), max(3, rep // 2))
        rows.append((f"matmul {s}^3 {label}", t * 1e3, float("nan"), "ms", flops / t / 1e9,
                     "GFLOP/s"))  # fmt: skip

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"fpsim.arith benchmark: {cpus} CPU core(s), load average {load:.2f} at the end, numba "
        f"threading layer {numba.threading_layer()}; medians of {rep} runs (fpsim and numpy "
        "timed alternately)"
    )
    head = f"{'case':<52} {'fpsim':>9} {'numpy':>9} {'unit':<8} {'ratio':>8}  meaning"
    print(head)
    print("-" * len(head))
    for case, t1, t2, unit, ratio, meaning in rows:
        t2s = f"{t2:9.3f}" if t2 == t2 else f"{'-':>9}"
        print(f"{case:<52} {t1:9.3f} {t2s} {unit:<8} {ratio:8.2f}  {meaning}")


if __name__ == "__main__":
    main()
