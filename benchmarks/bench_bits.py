"""Encoding and decoding throughput: ``to_bits`` and ``from_bits`` against ``round_to``.

Issue 11's target: each at most 2x the time of ``round_to`` on the same data, with no
intermediate array larger than its result. N float32 values with magnitudes spread
log-uniformly over 2^-30..2^20 (random signs). For each format: ns per element of ``round_to``,
``to_bits`` (float32 -> codes) and ``from_bits`` (codes -> float32/float64), the two ratios, and
the peak memory numpy allocated during each call over the result's size (tracemalloc). Median of
several runs, all in one process.

    python benchmarks/bench_bits.py [--n 20000000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import tracemalloc

import numpy as np
from bench_round import median_ns  # the same timing rule (warm-up, median); run from benchmarks/

import fpsim


def peak_over_result(fn) -> float:
    tracemalloc.start()
    res = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / res.nbytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000_000)
    p.add_argument("--repeat", type=int, default=7)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.choice([-1.0, 1.0], a.n) * 2.0 ** rng.uniform(-30, 20, a.n)).astype(np.float32)
    print(f"{a.n:,} float32 values; ns per element, median of {a.repeat}")
    print(f"{'format':<10}{'round_to':>9}{'to_bits':>9}{'ratio':>7}{'from_bits':>10}{'ratio':>7}"
          f"{'peak/out enc':>14}{'peak/out dec':>14}")  # fmt: skip
    for fmt in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "tf32"):
        codes = fpsim.to_bits(x, fmt)
        r = median_ns(lambda f=fmt: fpsim.round_to(x, f), a.n, a.repeat)
        e = median_ns(lambda f=fmt: fpsim.to_bits(x, f), a.n, a.repeat)
        d = median_ns(lambda f=fmt, c=codes: fpsim.from_bits(c, f), a.n, a.repeat)
        pe = peak_over_result(lambda f=fmt: fpsim.to_bits(x, f))
        pd = peak_over_result(lambda f=fmt, c=codes: fpsim.from_bits(c, f))
        print(f"{fmt:<10}{r:>9.2f}{e:>9.2f}{e / r:>7.2f}{d:>10.2f}{d / r:>7.2f}"
              f"{pe:>14.3f}{pd:>14.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
