"""Exhaustive verification: all 2^32 float32 bit patterns rounded by fpsim's CPU kernel to every
format that numpy / ml_dtypes has a dtype for (fp16, bf16, the eight fp8s, both fp6s, fp4 and
e8m0), compared bit for bit with the dtype's own cast (NaN compared as NaN: payloads are not
part of the contract); and encoded by ``to_bits``, compared with the dtype's codes (every
non-NaN code equal, every NaN a NaN code).

    python benchmarks/verify_exhaustive.py [--formats fp16,e8m0] [--chunk-log2 24]
                                           [--limit-log2 32] [--step 1]

``--limit-log2 N`` checks the patterns below 2^N only; ``--step K`` every K-th pattern of the
range (``--step 4099`` samples all of 2^32 in about a million patterns per format).

fpsim differs from ml_dtypes by design in a few places (fpsim/formats.py, tests/oracle.py);
those inputs are counted separately, by kind, and are not mismatches:

* ``nan->0`` (fp4, fp6: no NaN): fpsim's ``round_to`` keeps NaN; ml_dtypes writes a zero of the
  opposite sign (``to_bits`` refuses NaN for these formats, so no code is compared);
* ``tie`` (e8m0): a tie 1.5 * 2^k whose lower neighbour 2^k has an even code (k + 127) goes to
  2^k in fpsim (ties to the even code), to 2^(k+1) in ml_dtypes (every tie up; NaN for k = 127);
* ``f32sub`` (e8m0): a float32 subnormal in (2^-127, 1.5 * 2^-127) is 2^-127 in fpsim (nearest),
  2^-126 in ml_dtypes.

Prints a table (mismatches, each documented kind, time) and exits 1 on any mismatch.
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
    "fp8_e4m3_ieee": ml_dtypes.float8_e4m3,
    "fp8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "fp8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "fp8_e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz,
    "fp8_e3m4": ml_dtypes.float8_e3m4,
    "fp6_e2m3": ml_dtypes.float6_e2m3fn,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
    "e8m0": ml_dtypes.float8_e8m0fnu,
}
KINDS = ("nan->0", "tie", "f32sub")


def documented(name: str, x: np.ndarray, got: np.ndarray, want: np.ndarray) -> dict:
    """Boolean masks of the documented differences (each checks both libraries' results)."""
    f = fpsim.get_format(name)
    out = {}
    if not f.has_nan:
        out["nan->0"] = (
            np.isnan(x) & np.isnan(got) & (want == 0) & (np.signbit(want) != np.signbit(x))
        )
    if name == "e8m0":
        m, e = np.frexp(np.where(np.isfinite(x), x, 0).astype(np.float64))  # x = m 2^e
        k = e.astype(np.int64) - 1  # 0.5 <= m < 1: at a tie x = 1.5 * 2^k
        lo = np.ldexp(1.0, k)
        hi = np.ldexp(1.0, k + 1)
        up_ml = np.where(k == 127, np.isnan(want), want == hi)
        out["tie"] = (x > 0) & (m == 0.75) & ((k + 127) % 2 == 0) & (got == lo) & up_ml
        sub = (x > 2.0**-127) & (x < 1.5 * 2.0**-127)
        out["f32sub"] = sub & (got == 2.0**-127) & (want == 2.0**-126)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default=",".join(ORACLES))
    ap.add_argument("--chunk-log2", type=int, default=24)
    ap.add_argument("--limit-log2", type=int, default=32, help="check only 2^N patterns")
    ap.add_argument("--step", type=int, default=1, help="check every K-th pattern only")
    args = ap.parse_args(argv)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover

        def tqdm(it, **kw):
            return it

    names = args.formats.split(",")
    unknown = [n for n in names if n not in ORACLES]
    if unknown:
        ap.error(f"no oracle dtype for {unknown}; choose from {', '.join(ORACLES)}")
    chunk = 1 << args.chunk_log2
    total = 1 << args.limit_log2
    step = args.step
    span = chunk * step  # patterns of the range one chunk covers
    mismatches = dict.fromkeys(names, 0)
    kinds = {n: dict.fromkeys(KINDS, 0) for n in names}
    examples: dict[str, list] = {n: [] for n in names}
    kind_example: dict[tuple, tuple] = {}
    checked = 0
    t_fpsim = dict.fromkeys(names, 0.0)
    t0 = time.perf_counter()
    for start in tqdm(range(0, total, span), desc="float32 patterns", unit="chunk"):
        x = np.arange(start, min(start + span, total), step, dtype=np.uint64).astype(np.uint32)
        x = x.view(np.float32)
        checked += x.size
        for name in names:
            f = fpsim.get_format(name)
            t = time.perf_counter()
            got = fpsim.round_to(x, f)
            t_fpsim[name] += time.perf_counter() - t
            with np.errstate(all="ignore"):
                native = x.astype(ORACLES[name])
            want = native.astype(np.float32)
            same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
            # the codes: to_bits (its own branch-free encoder) against the native dtype's bits;
            # a format without NaN has no code for a NaN input (to_bits refuses it)
            enc = np.ones(x.size, bool) if f.has_nan else ~np.isnan(x)
            xe = x if enc.all() else x[enc]
            t = time.perf_counter()
            codes = fpsim.to_bits(xe, f)
            t_fpsim[name] += time.perf_counter() - t
            nat_codes = native[enc].view(codes.dtype)
            nan = np.isnan(want[enc])
            same[enc] &= np.where(nan, np.isnan(fpsim.from_bits(codes, f)), codes == nat_codes)
            bad = ~same
            for kind, mask in documented(name, x, got, want).items():
                n_kind = int(np.count_nonzero(mask))
                kinds[name][kind] += n_kind
                if n_kind and (name, kind) not in kind_example:
                    i = int(np.flatnonzero(mask)[0])
                    kind_example[(name, kind)] = (x[i], want[i], got[i])
                bad &= ~mask
            idx = np.flatnonzero(bad)
            mismatches[name] += idx.size
            for i in idx[: 3 - len(examples[name])]:
                examples[name].append((hex(int(x.view(np.uint32)[i])), got[i], want[i]))
    elapsed = time.perf_counter() - t0
    what = f"every {step}-th of " if step > 1 else ""
    print(f"\nchecked {checked:,} float32 bit patterns ({what}[0, 2^{args.limit_log2})) per "
          f"format in {elapsed:.0f} s")  # fmt: skip
    print(f"| {'format':<16}| {'mismatches':>10} | {'nan->0':>10} | {'tie':>6} | {'f32sub':>9} "
          f"| {'fpsim time (s)':>14} |")  # fmt: skip
    print(f"|{'-' * 17}|{'-' * 12}|{'-' * 12}|{'-' * 8}|{'-' * 11}|{'-' * 16}|")
    for name in names:
        k = kinds[name]
        print(f"| {name:<16}| {mismatches[name]:>10} | {k['nan->0']:>10} | {k['tie']:>6} | "
              f"{k['f32sub']:>9} | {t_fpsim[name]:>14.1f} |")  # fmt: skip
        for ex in examples[name]:
            print("   mismatch, e.g. input", *ex)
    if kind_example:
        print(
            "\ndocumented differences (first input of each kind): format, kind, input, "
            "ml_dtypes, fpsim"
        )
        for (name, kind), (xi, w, g) in kind_example.items():
            print(f"  {name:<10} {kind:<7} {float(xi)!r:<24} {float(w)!r:<24} {float(g)!r}")
    return 1 if any(mismatches.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
