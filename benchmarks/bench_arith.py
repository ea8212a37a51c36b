"""Simulated-arithmetic throughput, all in one process (the first-call row in a fresh one),
medians of several runs, fpsim and its references timed alternately.

1. Elementwise fp16 add and mul: ``fpsim.arith.add/mul(a, b, "fp16")`` on float32 arrays
   holding fp16 values (input checks, allocation and the correctly rounded kernel) against
   numpy's own float16 arithmetic ``a16 + b16`` (target: fpsim faster).
2. Matrix products with fp32 accumulation in the BLAS's order, 256^3 and 1024^3:
   ``fpsim.arith.matmul(a, b, "fp16")`` (the default order: input checks, numpy's float32
   BLAS, one rounding to fp16) against numpy's float32 ``a @ b`` (target: <= 2x), and numpy's
   float32 and float16 matmul in GFLOP/s for scale.
3. The exact-order kernels (every partial sum rounded in a fixed order, products exact), in
   GFLOP/s (2 n^3 flops): sequential with fp16, bf16 and fp32 accumulators in round to nearest
   even (target >= 5), in the directed modes and stochastic rounding (target >= 1), pairwise;
   and the tensor-core block-FMA models (target >= 2).
4. The first 1024^2 fp16-accumulate matmul in a fresh interpreter with an empty numba cache:
   compilation included (target <= 5 s).

    python benchmarks/bench_arith.py [--n 10000000] [--size 256] [--repeat 7] [--no-cold]

Throughput depends on the machine and on what else runs on it: the header prints the cores
and the load average, and the ratio columns (fpsim against numpy in the same process) are the
numbers to compare across machines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import numba
import numpy as np

import fpsim
from fpsim import arith

PAUSE_S = 0.5  # idle time before each exact-order case (see the loop over them)


def median_s(fn, repeat: int, warm_s: float = 0.3, min_s: float = 0.3) -> float:
    """Median time of ``fn()`` over at least ``repeat`` runs and ``min_s`` seconds, after
    ``warm_s`` seconds of warm-up runs (the first compiles or loads the numba cache; on a
    small virtual machine the next ones, on the thread pool, can run at half speed while the
    host brings the second core back: seen as a 6 ms kernel timed at 11 ms when it came first
    in this script, and at 6 ms when repeated at its end)."""
    t_end = time.perf_counter() + warm_s
    fn()
    while time.perf_counter() < t_end:
        fn()
    times = []
    t_end = time.perf_counter() + min_s
    while len(times) < repeat or time.perf_counter() < t_end:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def paired_median_s(fn_a, fn_b, repeat: int, warm_s: float = 0.3) -> tuple[float, float]:
    """Medians of two functions timed alternately, so that both see the same machine state
    (on a small, shared machine the thread pools of numba and of the BLAS disturb each other),
    after ``warm_s`` seconds of warm-up calls of both (see :func:`median_s`)."""
    t_end = time.perf_counter() + warm_s
    fn_a()
    fn_b()
    while time.perf_counter() < t_end:
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


COLD_SCRIPT = """
import time
t0 = time.perf_counter()
import numpy as np
import fpsim
from fpsim import arith
rng = np.random.default_rng(0)
a = np.asarray(fpsim.round_to(rng.standard_normal((1024, 1024)).astype(np.float32), "fp16"))
b = np.asarray(fpsim.round_to(rng.standard_normal((1024, 1024)).astype(np.float32), "fp16"))
t1 = time.perf_counter()
arith.matmul(a, b, "fp16", acc="fp16")
t2 = time.perf_counter()
arith.matmul(a, b, "fp16", acc="fp16")
t3 = time.perf_counter()
print(t2 - t1, t3 - t2, t1 - t0)
"""


def cold_first_call() -> tuple[float, float, float]:
    """(first call, second call, import + data) seconds of a 1024^2 fp16-accumulate matmul in
    a fresh interpreter whose numba cache directory is empty: the first call compiles."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(COLD_SCRIPT)], env=env,
                             capture_output=True, text=True, check=True)  # fmt: skip
    first, second, setup = (float(v) for v in out.stdout.split())
    return first, second, setup


def main() -> None:
    ap = argparse.ArgumentParser(description="fpsim.arith throughput")
    ap.add_argument("--n", type=int, default=10_000_000, help="elements for add/mul")
    ap.add_argument("--size", type=int, default=256, help="exact-order matmul size (size^3)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-cold", action="store_true", help="skip the cold first-call run")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, s, rep = args.n, args.size, args.repeat
    rows = []

    def row(case, t1, t2, unit, ratio, meaning):
        rows.append((case, t1, t2, unit, ratio, meaning))

    # 1. elementwise
    a16 = rng.standard_normal(n).astype(np.float16)
    b16 = (rng.standard_normal(n) * 4).astype(np.float16)
    a32, b32 = a16.astype(np.float32), b16.astype(np.float32)
    for name, fn, npfn in [("add", arith.add, np.add), ("mul", arith.mul, np.multiply)]:
        t_fp, t_np = paired_median_s(
            lambda fn=fn: fn(a32, b32, "fp16"), lambda npfn=npfn: npfn(a16, b16), rep
        )
        row(f"fp16 {name}, {n:,} elements", t_fp / n * 1e9, t_np / n * 1e9, "ns/elem",
            t_np / t_fp, "numpy float16 / fpsim (>1: fpsim faster)")  # fmt: skip

    def fp16_matrix(shape):
        return np.asarray(fpsim.round_to(rng.standard_normal(shape).astype(np.float32), "fp16"))

    # 2. BLAS order, and numpy's own matmuls
    for size in (256, 1024):
        A, B = fp16_matrix((size, size)), fp16_matrix((size, size))
        reps = 5 * rep if size <= 256 else rep
        t_fp, t_np = paired_median_s(lambda A=A, B=B: arith.matmul(A, B, "fp16"),
                                     lambda A=A, B=B: A @ B, reps)  # fmt: skip
        row(f"matmul {size}^3 fp16 in, fp32 acc, BLAS order", t_fp * 1e3, t_np * 1e3, "ms",
            t_fp / t_np, "fpsim / numpy float32 (target <= 2)")  # fmt: skip
        flops = 2.0 * size**3
        row(f"numpy float32 matmul {size}^3", flops / t_np / 1e9, float("nan"), "GFLOP/s",
            float("nan"), "for scale")  # fmt: skip
    A, B = fp16_matrix((s, s)), fp16_matrix((s, s))
    A16, B16 = A.astype(np.float16), B.astype(np.float16)
    t = median_s(lambda: A16 @ B16, max(3, rep // 2))
    flops = 2.0 * s**3
    row(f"numpy float16 matmul {s}^3", flops / t / 1e9, float("nan"), "GFLOP/s", float("nan"),
        "for scale (no BLAS: numpy's own loop)")  # fmt: skip

    # 3. exact-order kernels and the block-FMA models
    A8, B8 = (np.asarray(fpsim.round_to(x, "fp8_e4m3")) for x in (A, B))
    cases = [
        ("fp16 acc, sequential, nearest even", "fp16", dict(acc="fp16", order="sequential"), 5),
        ("bf16 acc, sequential, nearest even", "fp16", dict(acc="bf16", order="sequential"), 5),
        ("fp32 acc, sequential, nearest even", "fp16", dict(acc="fp32", order="sequential"), 5),
        ("fp16 acc, sequential, toward zero", "fp16",
         dict(acc="fp16", order="sequential", rounding="toward_zero"), 1),
        ("fp16 acc, sequential, up", "fp16",
         dict(acc="fp16", order="sequential", rounding="up"), 1),
        ("bf16 acc, sequential, down", "fp16",
         dict(acc="bf16", order="sequential", rounding="down"), 1),
        ("fp16 acc, sequential, stochastic", "fp16",
         dict(acc="fp16", order="sequential", rounding="stochastic", seed=1), 1),
        ("fp16 acc, pairwise, nearest even", "fp16", dict(acc="fp16", order="pairwise"), None),
        ("block FMA v100_fp16", "fp16", dict(accumulation="v100_fp16", out_fmt="fp32"), 2),
        ("block FMA h100_fp16", "fp16", dict(accumulation="h100_fp16", out_fmt="fp32"), 2),
        ("block FMA h100_fp8 (e4m3)", "fp8_e4m3",
         dict(accumulation="h100_fp8", out_fmt="fp32"), 2),
        ("block FMA h100_fp8_promote128 (e4m3)", "fp8_e4m3",
         dict(accumulation="h100_fp8_promote128", out_fmt="fp32"), 2),
    ]  # fmt: skip
    for label, fmt, kw, target in cases:
        x, y = (A8, B8) if fmt == "fp8_e4m3" else (A, B)
        # A pause first: after a call, OpenBLAS's worker threads (the matmuls above) and
        # OpenMP's (round_to's parallel kernels) spin on the cores for a while, and fpsim's
        # two threads then run at about half speed (seen: the 256^3 fp16 kernel at 10.9 ms
        # for 0.3 s after a numpy matmul, 6.1 ms after a pause). The cases measure fpsim, not
        # that; the README says what a user mixing the two sees.
        time.sleep(PAUSE_S)
        t = median_s(lambda x=x, y=y, fmt=fmt, kw=kw: arith.matmul(x, y, fmt, **kw),
                     max(3, rep // 2))  # fmt: skip
        goal = f"GFLOP/s (target >= {target})" if target else "GFLOP/s"
        row(f"matmul {s}^3 {label}", t * 1e3, float("nan"), "ms", flops / t / 1e9, goal)

    cold = None if args.no_cold else cold_first_call()

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"fpsim.arith benchmark: {cpus} CPU core(s), load average {load:.2f} at the end, numba "
        f"{numba.__version__} (threading layer {numba.threading_layer()}); medians of {rep} "
        "runs (fpsim and numpy timed alternately)"
    )
    head = f"{'case':<56} {'fpsim':>10} {'numpy':>9} {'unit':<8} {'ratio':>8}  meaning"
    print(head)
    print("-" * len(head))
    for case, t1, t2, unit, ratio, meaning in rows:
        t2s = f"{t2:9.3f}" if t2 == t2 else f"{'-':>9}"
        rs = f"{ratio:8.2f}" if ratio == ratio else f"{'-':>8}"
        print(f"{case:<56} {t1:10.3f} {t2s} {unit:<8} {rs}  {meaning}")
    if cold is not None:
        first, second, setup = cold
        print(
            f"\nfirst 1024^2 fp16-accumulate matmul in a fresh interpreter, empty numba cache: "
            f"{first:.2f} s (target <= 5; compilation about {first - second:.2f} s, the second "
            f"call {second:.2f} s; import and data {setup:.2f} s before it)"
        )


if __name__ == "__main__":
    main()
