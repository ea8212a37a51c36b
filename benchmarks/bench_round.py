"""Rounding throughput: fpsim's CPU kernel against the memory floor and the oracles.

10,000,000 float32 values with magnitudes spread log-uniformly over 2^-30..2^20 (random signs),
so overflow, subnormal and underflow cases are common. For each format: ns per element and the
ratio to ``np.copyto`` of the same array (the memory-bandwidth floor), to ml_dtypes' astype round
trip (float32 -> format -> float32) and to numpy's float16 round trip. Median of several runs, all
in one process.

    python benchmarks/bench_round.py [--n 10000000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import ml_dtypes
import numpy as np

import fpsim
from fpsim.kernels import cpu

ML_DTYPES = {
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}


def median_ns(fn, n: int, repeat: int) -> float:
    fn()  # warm up (compiles, or loads the numba cache)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) / n * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description="fpsim rounding throughput")
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    x = (rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-30, 20, n))).astype(np.float32)
    out = np.empty_like(x)
    src = x.view(np.int32)
    dst = out.view(np.int32)

    copy = median_ns(lambda: np.copyto(out, x), n, args.repeat)
    print(f"{n:,} float32 values, |x| in 2^-30..2^20; median of {args.repeat} runs; ns/element")
    print(f"np.copyto (memory floor): {copy:.2f} ns\n")
    header = (
        f"{'format':<9} {'fpsim':>7} {'fpsim+alloc':>11} {'ml_dtypes':>10} {'numpy f16':>10}"
        f" {'fpsim/copy':>10} {'ml_dtypes/fpsim':>15} {'numpy/fpsim':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, dt in ML_DTYPES.items():
        f = fpsim.get_format(name)
        lay = fpsim.fp32.record
        params = (lay, f.record, lay, 0, 1, 0, 0)
        # the kernel into a preallocated output (what copyto is compared with) ...
        t_kernel = median_ns(
            lambda params=params: cpu.convert_array(src, dst, params), n, args.repeat
        )
        # ... and the public API, which allocates its result
        t_api = median_ns(lambda name=name: fpsim.round_to(x, name), n, args.repeat)
        with np.errstate(all="ignore"):
            t_ml = median_ns(lambda dt=dt: x.astype(dt).astype(np.float32), n, args.repeat)
        t_np = float("nan")
        if name == "fp16":
            with np.errstate(all="ignore"):
                t_np = median_ns(lambda: x.astype(np.float16).astype(np.float32), n, args.repeat)
        ml_label = t_ml if name != "fp16" else float("nan")  # fp16's oracle is numpy itself
        print(
            f"{name:<9} {t_kernel:>7.2f} {t_api:>11.2f} {ml_label:>10.2f} {t_np:>10.2f}"
            f" {t_kernel / copy:>10.2f} {ml_label / t_kernel:>15.2f} {t_np / t_kernel:>11.2f}"
        )
    print("\ntargets: bf16 <= 1.5x copy; fp16, fp8 <= 3x copy; faster than ml_dtypes' round trip")


if __name__ == "__main__":
    main()
