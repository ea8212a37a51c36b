"""Extract the GPU test vectors that tests/test_tensorcore.py checks the tensor-core presets
against (run by hand; the result, tensorcore_vectors.npz, is committed).

Source: github.com/north-numerical-computing/MATLAB-tensor-core at commit b12b5a700957
(Khattak & Mikaitis, "Accurate models of NVIDIA tensor cores", arXiv 2512.07004), directory
model_validation/: for each GPU and input format, 5000 dot products D = A B + C computed *on the
GPU* (a: K inputs per line as binary32 hex patterns, b likewise, c and d one binary32 pattern
per line as a 32-character bit string). Their validation script (Validate_TC_models.m) zeroes C
for H100 FP8 (WGMMA computes D = A B + D from D = 0); so do we. Inputs are stored as the codes of
their own format (binary16, bfloat16: uint16; FP8: uint8 of ml_dtypes' float8_e4m3fn /
float8_e5m2; TF32: its binary32 pattern), c and d as binary32 patterns (a binary16 result is
the binary32 pattern of its value). Licence: BSD 2-Clause, Copyright (c) 2025, Faizan A. Khattak
and Mantas Mikaitis (the notice is in tensorcore_vectors_LICENSE.txt).

    python tests/data/extract_tensorcore_vectors.py /path/to/MATLAB-tensor-core [N]
"""

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

# (GPU, input format directory, output format)
SETS = [
    ("V100", "fp16", "fp32"), ("V100", "fp16", "fp16"),
    ("A100", "fp16", "fp32"), ("A100", "fp16", "fp16"), ("A100", "bf16", "fp32"),
    ("A100", "tf32", "fp32"),
    ("H100", "fp16", "fp32"), ("H100", "fp16", "fp16"), ("H100", "bf16", "fp32"),
    ("H100", "tf32", "fp32"), ("H100", "E4M3", "fp32"), ("H100", "E5M2", "fp32"),
    ("B200", "fp16", "fp32"), ("B200", "fp16", "fp16"), ("B200", "bf16", "fp32"),
    ("B200", "tf32", "fp32"), ("B200", "E4M3", "fp32"), ("B200", "E5M2", "fp32"),
]  # fmt: skip
COMMIT = "b12b5a700957"


def show(repo: str, path: str) -> str:
    cmd = ["git", "-C", repo, "show", f"{COMMIT}:{path}"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def hex_rows(text: str) -> np.ndarray:
    rows = [[int(t, 16) for t in line.split()] for line in text.splitlines() if line.strip()]
    return np.array(rows, dtype=np.uint32)


def bit_strings(text: str) -> np.ndarray:
    return np.array([int(t, 2) for t in text.split()], dtype=np.uint32)


def native_codes(bits32: np.ndarray, fin: str) -> np.ndarray:
    """The inputs' codes in their own format (every value is one: checked by the round trip)."""
    x = bits32.view(np.float32)
    dtype = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "E4M3": ml_dtypes.float8_e4m3fn,
             "E5M2": ml_dtypes.float8_e5m2, "tf32": np.float32}[fin]  # fmt: skip
    y = x.astype(dtype)
    assert (y.astype(np.float32).view(np.uint32) == bits32).all(), fin
    return y.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[y.dtype.itemsize])


def main() -> None:
    repo = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    out = {}
    for gpu, fin, fout in SETS:
        base = f"model_validation/{gpu}/{fin}/"
        a = native_codes(hex_rows(show(repo, base + f"a_{gpu}_{fin}.txt"))[:n], fin)
        b = native_codes(hex_rows(show(repo, base + f"b_{gpu}_{fin}.txt"))[:n], fin)
        c = bit_strings(show(repo, base + f"c_{gpu}_fp32.txt"))[:n]
        d = bit_strings(show(repo, base + f"d_{gpu}_{fout}.txt"))[:n]
        if gpu == "H100" and fin in ("E4M3", "E5M2"):
            c = np.zeros_like(c)
        key = f"{gpu}_{fin}_{fout}"
        for name, arr in (("a", a), ("b", b), ("c", c), ("d", d)):
            out[f"{key}_{name}"] = arr
    dest = Path(__file__).with_name("tensorcore_vectors.npz")
    np.savez_compressed(dest, **out)
    print(f"wrote {dest} ({dest.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
