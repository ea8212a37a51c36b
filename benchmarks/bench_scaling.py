"""Block quantization throughput: fpsim against the memory floor, torchao and gfloat.

10,000,000 float32 values (normal, magnitudes spread by exp(2·normal)) quantized to MXFP8-E4M3,
MXFP4 (FLOOR scales) and NVFP4 (two-level). For each: seconds (best of several runs), the ratio
to ``x.copy()`` of the same array (the memory floor; target <= 3x on 2 cores), and the ratios of
torchao's CPU reference (``to_mx``, ``nvfp4_quantize``, torch 2.13) and of gfloat's vectorized
``round_ndarray`` + ``encode_ndarray`` with numpy scales (MX only: gfloat has no NVFP4 format)
to fpsim, all in one process. torchao and gfloat are optional: their columns are blank without
them (they come with fpsim's ``bench`` extra). A last row: NVFP4 with stochastic rounding (the
NVFP4 recipe's gradients), fpsim alone.

    python benchmarks/bench_scaling.py [--n 10000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import time
import warnings

import numpy as np

from fpsim import scaling


def best(fn, repeat: int) -> float:
    fn()  # warm up (compiles, or loads the numba cache)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def _torchao():
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    try:
        # torchao prints "Failed to load ..._C_mxfp8.so" for its CUDA extensions on CPU
        with contextlib.redirect_stderr(io.StringIO()), open(os.devnull, "w") as devnull:
            old = os.dup(2)
            os.dup2(devnull.fileno(), 2)
            try:
                import torch
                from torchao.prototype.mx_formats import mx_tensor, nvfp4_tensor
            finally:
                os.dup2(old, 2)
        return torch, mx_tensor, nvfp4_tensor
    except Exception:  # noqa: BLE001 - absent or broken: no column
        return None


def _gfloat_mx(x, fi):
    import gfloat

    b = x.reshape(-1, fi.k)
    amax = np.max(np.abs(b), axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        e = np.where(amax == 0, -127.0, np.clip(np.floor(np.log2(amax)) - fi.etype.emax, -127, 127))
        q = gfloat.round_ndarray(fi.etype, b / np.exp2(e).astype(x.dtype), sat=True)
        return gfloat.encode_ndarray(fi.etype, q), e


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.n - args.n % 32
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * np.exp(2 * rng.standard_normal(n))).astype(np.float32)
    t_copy = best(lambda: x.copy(), args.repeat)
    ao = _torchao()
    try:
        import gfloat.formats as gff
    except ImportError:
        gff = None
    print(f"{n:,} float32 values; best of {args.repeat} runs; x.copy(): {t_copy * 1e3:.1f} ms")
    have = {True: "yes", False: "not installed"}
    print(f"torchao: {have[ao is not None]}; gfloat: {have[gff is not None]}")
    hdr = (
        f"{'scheme':<11} {'fpsim ms':>9} {'fpsim/copy':>10} {'torchao/fpsim':>13} "
        f"{'gfloat/fpsim':>12}"
    )
    print(hdr)
    print("-" * len(hdr))
    for name in ("mxfp8_e4m3", "mxfp4", "nvfp4"):
        t = best(lambda name=name: scaling.quantize(x, name), args.repeat)
        t_ao = t_gf = float("nan")
        if ao is not None:
            torch, mx_tensor, nvfp4_tensor = ao
            xt = torch.from_numpy(x)
            if name == "nvfp4":
                x16 = xt.reshape(-1, 16)

                def run_ao(nv=nvfp4_tensor, x16=x16):
                    pts = nv.per_tensor_amax_to_scale(x16.abs().max())
                    nv.nvfp4_quantize(x16, 16, pts)
            else:
                dt = torch.float8_e4m3fn if name == "mxfp8_e4m3" else torch.float4_e2m1fn_x2
                x32 = xt.reshape(-1, 32)

                def run_ao(dt=dt, x32=x32, mx=mx_tensor):
                    mx.to_mx(x32, dt, 32)

            t_ao = best(run_ao, args.repeat)
        if gff is not None and name != "nvfp4":
            fi = gff.format_info_mxfp8_e4m3 if name == "mxfp8_e4m3" else gff.format_info_mxfp4_e2m1
            t_gf = best(lambda fi=fi: _gfloat_mx(x, fi), 1)
        print(f"{name:<11} {t * 1e3:>9.1f} {t / t_copy:>10.2f} {t_ao / t:>13.1f} {t_gf / t:>12.1f}")
    # NVFP4 with stochastic rounding, as its recipe rounds gradients (TransformerEngine's
    # NVFP4BlockScaling); torchao's CPU reference rounds to nearest only: no comparison
    t = best(lambda: scaling.quantize(x, "nvfp4", rounding="stochastic", seed=1), args.repeat)
    print(f"{'nvfp4 (SR)':<11} {t * 1e3:>9.1f} {t / t_copy:>10.2f} {'':>13} {'':>12}")
    print("\ntarget: fpsim <= 3x copy on 2 cores, faster than torchao and gfloat")


if __name__ == "__main__":
    sys.exit(main())
