"""Exhaustive verification: all 2^32 float32 bit patterns rounded to fp16, bf16, fp8_e4m3 and
fp8_e5m2 by fpsim's CPU kernel, compared bit for bit with numpy float16 / ml_dtypes (NaN
compared as NaN: payloads are not part of the contract); and encoded by ``to_bits``, compared
with the native dtype's codes (every non-NaN code equal, every NaN a NaN code).

    python benchmarks/verify_exhaustive.py [--formats fp16,bf16] [--chunk-log2 24]

Prints the mismatch count per format and the time taken; exits 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import sys
import time

import ml_dtypes
import numpy as np

import fpsim

ORACLES = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default=",".join(ORACLES))
    ap.add_argument("--chunk-log2", type=int, default=24)
    ap.add_argument("--limit-log2", type=int, default=32, help="check only 2^N patterns")
    args = ap.parse_args(argv)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover

        def tqdm(it, **kw):
            return it

    names = args.formats.split(",")
    chunk = 1 << args.chunk_log2
    total = 1 << args.limit_log2
    mismatches = dict.fromkeys(names, 0)
    examples: dict[str, list] = {n: [] for n in names}
    t_fpsim = dict.fromkeys(names, 0.0)
    t0 = time.perf_counter()
    for start in tqdm(range(0, total, chunk), desc="float32 patterns", unit="chunk"):
        x = np.arange(start, min(start + chunk, total), dtype=np.uint64).astype(np.uint32)
        x = x.view(np.float32)
        for name in names:
            t = time.perf_counter()
            got = fpsim.round_to(x, name)
            t_fpsim[name] += time.perf_counter() - t
            with np.errstate(all="ignore"):
                want = x.astype(ORACLES[name]).astype(np.float32)
            same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
            # the codes: to_bits (its own branch-free encoder) against the native dtype's bits
            t = time.perf_counter()
            codes = fpsim.to_bits(x, name)
            t_fpsim[name] += time.perf_counter() - t
            with np.errstate(all="ignore"):
                native = x.astype(ORACLES[name])
            nat_codes = native.view(codes.dtype)
            nan = np.isnan(want)
            same &= np.where(nan, np.isnan(fpsim.from_bits(codes, name)), codes == nat_codes)
            bad = np.flatnonzero(~same)
            mismatches[name] += bad.size
            for i in bad[: 3 - len(examples[name])]:
                examples[name].append((hex(int(x.view(np.uint32)[i])), got[i], want[i]))
    elapsed = time.perf_counter() - t0
    print(f"\nchecked {total:,} float32 bit patterns per format in {elapsed:.0f} s")
    print(f"{'format':<10} {'mismatches':>10} {'fpsim time (s)':>15}")
    for name in names:
        print(f"{name:<10} {mismatches[name]:>10} {t_fpsim[name]:>15.1f}")
        for ex in examples[name]:
            print("   e.g. input", *ex)
    return 1 if any(mismatches.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
