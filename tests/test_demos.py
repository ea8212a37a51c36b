"""The demos: each runs to completion on short settings, prints what it should, and what it
prints is checked against numbers computed here independently (numpy float16 / ml_dtypes
oracles, gradients computed by tests/gradient_oracle.py). Figures render headless (Agg) at
their documented pixel sizes."""

import math
import re
import struct
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from gradient_oracle import RunGradients, true_gradients  # noqa: E402

from fpsim import amp  # noqa: E402
from fpsim.demo import figures as figures_demo  # noqa: E402
from fpsim.demo.__main__ import DEMOS, main  # noqa: E402
from fpsim.demo.rounding import VALUES  # noqa: E402


def png_size(path) -> tuple[int, int]:
    """(width, height) from the PNG header."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def run_demo(capsys, *args) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def table_row(out: str, label: str) -> str:
    (line,) = [ln for ln in out.splitlines() if ln.startswith(label + "  ")]
    return line


def value_of(text: str) -> float:
    """A printed value: ``1.5``, ``2^-30``, ``inf``."""
    return 2.0 ** int(text[2:]) if text.startswith("2^") else float(text)


def percentages(line: str) -> list[float]:
    return [float(v) for v in re.findall(r"(-?\d+\.\d+)%", line)]


# ---- underflow ----------------------------------------------------------------------------------
def independent_run(recipe: str, steps: int):
    """amp.train on the demo's task and model, with the lost / subnormal fractions counted here
    from the true gradients (gradient_oracle) and the run's own gradients."""
    X, Y = amp.underflow_task(4096, seed=0)
    model = amp.underflow_model(seed=0)
    run = RunGradients(model)
    tally = {k: np.zeros(3, np.int64) for k in ("activation", "weight")}  # nonzero, lost, subn
    tiny = 2.0**-126 if recipe == "fp32" else 2.0**-14  # the smallest normal of fp32 / fp16

    def on_backward(state):
        truth, stored = true_gradients(state), run.stored()
        for (_, kind), t in truth.items():
            g = stored[(_, kind)]
            nz = t != 0
            tally[kind] += [nz.sum(), (nz & (g == 0)).sum(),
                            (nz & (g != 0) & (np.abs(g) < tiny)).sum()]  # fmt: skip

    res = amp.train(model, (X, Y), recipe, steps=steps, lr=3e-3, seed=0, on_backward=on_backward)
    fr = {k: (v[1] / v[0], v[2] / v[0]) for k, v in tally.items()}
    return fr, res


def test_underflow_table_agrees_with_an_independent_count(capsys):
    steps = 20
    out = run_demo(capsys, "underflow", "--steps", str(steps), "--no-plots")
    ref_loss = None
    for label, recipe in (("fp32", "fp32"), ("fp16, no scaling", "fp16"),
                          ("fp16 + dynamic scaling", "fp16_dynamic")):  # fmt: skip
        line = table_row(out, label)
        fr, res = independent_run(recipe, steps)
        expected = [fr["activation"][0], fr["weight"][0], fr["activation"][1], fr["weight"][1]]
        for printed, value in zip(percentages(line), expected, strict=True):
            assert abs(printed - 100 * value) <= 0.005 + 1e-9, (label, printed, value)
        loss = float(re.search(r"%\s+(\S+) \(", line).group(1))
        assert loss == pytest.approx(res.final_loss(), rel=1e-3)
        ref_loss = ref_loss or res.final_loss()
        ratio = float(re.search(r"\(\s*([\d.]+)x\)", line).group(1))
        assert ratio == pytest.approx(res.final_loss() / ref_loss, abs=0.006)
        assert f"{int(res.skipped.sum())}/{steps}" in line
        if recipe == "fp16_dynamic":
            assert line.endswith("65536 (2^16)") and res.scaler.get_scale() == 65536.0
        else:
            assert line.endswith("-")
    # what the demo is for: most fp16 gradients lost without scaling, almost none with it
    assert percentages(table_row(out, "fp16, no scaling"))[0] > 10
    assert percentages(table_row(out, "fp16 + dynamic scaling"))[0] < 1


def test_underflow_figures(tmp_path, capsys):
    out = run_demo(capsys, "underflow", "--steps", "6", "--out", str(tmp_path))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(figures_demo.DEMO_FIGURES["underflow"])
    sizes = {  # figsize x DPI of fpsim.plot: side by side (2 panels), 2 x 3 panels, loss, scale
        "underflow_histogram.png": (1150, 520),
        "underflow_layers.png": (1260, 680),
        "underflow_loss.png": (800, 450),
        "underflow_scale.png": (800, 400),
    }
    for name, size in sizes.items():
        assert png_size(tmp_path / name) == size, name
        assert (tmp_path / name).stat().st_size < 300_000
    assert "wrote" in out


@pytest.mark.parametrize(
    "args, label",
    [(["--format", "bf16"], "bf16 + dynamic scaling"),
     (["--format", "fp8_e5m2"], "fp8_e5m2 + dynamic scaling"),
     (["--format", "fp8_e4m3"], "fp8_e4m3 + dynamic scaling"),
     (["--scale", "1024"], "fp16 + static scale 2^10")],
)  # fmt: skip
def test_underflow_options(capsys, args, label):
    out = run_demo(capsys, "underflow", "--steps", "3", "--seed", "1", "--no-plots", *args)
    line = table_row(out, label)
    if "--scale" in args:
        assert line.endswith("1024 (2^10)")
    if "bf16" in args:  # bf16 has fp32's range: nothing lost, with or without a scale
        assert percentages(table_row(out, "bf16, no scaling"))[:2] == [0.0, 0.0]


def test_underflow_usage_errors(capsys):
    assert main(["underflow", "--scale", "1000"]) == 2
    assert "power of two" in capsys.readouterr().err
    assert main(["underflow", "--format", "fp17"]) == 2


# ---- overflow -----------------------------------------------------------------------------------
def test_overflow(tmp_path, capsys):
    steps = 30
    out = run_demo(capsys, "overflow", "--steps", str(steps), "--out", str(tmp_path))
    assert table_row(out, "fp16, static 2^40").split()[3] == f"{steps}/{steps}"
    log = [ln.split() for ln in out.splitlines() if re.match(r"^\s+\d+\s+2\^", ln)]
    scales = [int(r[1][2:]) for r in log]
    infs = [int(r[2].replace(",", "")) for r in log]
    skipped = [r[5] == "yes" for r in log]
    assert scales[0] == 40 and skipped[0] and infs[0] > 0
    for i in range(len(log) - 1):  # GradScaler: halve after an overflow, else keep (no growth yet)
        assert skipped[i] == (infs[i] > 0)
        assert scales[i + 1] == scales[i] - (1 if skipped[i] else 0)
    assert not skipped[-1]
    # the first scale that fits: the largest true gradient times it stays below fp16's 65520
    first_good = 2.0 ** scales[skipped.index(False)]
    assert "suggest_scale" in out
    hi = int(re.search(r"to 2\^(\d+) keeps", out).group(1))
    assert 2.0**hi >= first_good and 2.0 ** (hi + 1) < 2.0**40
    assert png_size(tmp_path / "overflow_scale.png") == (800, 400)
    assert png_size(tmp_path / "overflow_loss.png") == (800, 450)


# ---- swamping -----------------------------------------------------------------------------------
def test_swamping(capsys, tmp_path):
    out = run_demo(capsys, "swamping", "--steps", "40", "--out", str(tmp_path))
    assert png_size(tmp_path / "swamping_loss.png") == (1200, 460)  # two panels: 12 x 4.6
    # one fp16 weight, 16 updates of -2^-12: numpy float16 and float32 as the oracles
    w16, m32 = np.float16(1.0), np.float32(1.0)
    for _ in range(16):
        w16 = np.float16(np.float32(w16) - np.float32(2.0**-12))
        m32 = np.float32(m32 - np.float32(2.0**-12))
    assert re.search(rf"fp16 weight, no master:\s+{float(w16)!r}", out)
    assert re.search(rf"fp32 master:\s+{float(m32)!r}", out)
    assert re.search(rf"fp16 weight with a master:\s+{float(np.float16(m32))!r}", out)
    kept = {lab: percentages(table_row(out, lab))[0]
            for lab in ("fp32 weights", "fp16 weights", "fp16 weights + fp32 master")}  # fmt: skip
    assert kept["fp32 weights"] > 99.5 and kept["fp16 weights + fp32 master"] > 99.5
    assert kept["fp16 weights"] < 50


# ---- accumulate ---------------------------------------------------------------------------------
def sequential(values, dtype) -> float:
    s = dtype(0)
    for v in values:
        s = dtype(np.float64(s) + np.float64(v))  # float64 sum exact, then one rounding
    return float(s)


def test_accumulate(tmp_path, capsys):
    n = 3000
    out = run_demo(capsys, "accumulate", "-n", str(n), "--out", str(tmp_path))
    ones = np.ones(4096)
    oracle = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32}
    for acc, dtype in oracle.items():
        first = [ln for ln in out.splitlines() if ln.startswith(acc + "  ")][0]  # the ones
        seq, pair = (float(v) for v in first.split()[1:3])
        assert seq == sequential(ones, dtype) and pair == 4096.0
    values = np.random.default_rng(0).uniform(0, 1, n).astype(np.float16)  # demo's seed 0
    assert f"(exact: {math.fsum(values.astype(np.float64)):.6f})" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("fp16  ")]
    assert float(lines[1].split()[1]) == sequential(values, np.float16)
    assert png_size(tmp_path / "accumulate.png") == (800, 450)


# ---- rounding -----------------------------------------------------------------------------------
def test_rounding(capsys):
    n = 200
    out = run_demo(capsys, "rounding", "-n", str(n), "--draws", "2000")
    for label, x, _ in VALUES:
        row = table_row(out, label)[len(label) :].split()
        nearest = float(np.float16(x))  # numpy: float64 -> float16, nearest even
        assert value_of(row[0]) == nearest, label
    assert table_row(out, "2049").split()[1:6] == ["2048", "2050", "2048", "2050", "2048"]
    assert table_row(out, "65520").split()[1:6] == ["inf", "inf", "65504", "inf", "65504"]
    # 1 + n * 2^-12: nearest and toward zero stay at 1; up adds one fp16 ulp (2^-10) each time
    assert float(table_row(out, "nearest_even").split()[1]) == 1.0
    assert float(table_row(out, "up").split()[1]) == 1 + n * 2.0**-10
    sr = float(table_row(out, "stochastic").split()[1])
    assert abs(sr - (1 + n * 2.0**-12)) < 0.02


# ---- bf16 ---------------------------------------------------------------------------------------
def test_bf16(tmp_path, capsys):
    out = run_demo(capsys, "bf16", "--steps", "6", "--out", str(tmp_path))
    assert percentages(table_row(out, "bf16, no scaler"))[:2] == [0.0, 0.0]
    assert percentages(table_row(out, "fp16, no scaling"))[0] > 50
    for label, x in (("1 + 2^-9", 1 + 2.0**-9), ("70000", 70000.0), ("2^-30", 2.0**-30)):
        cells = table_row(out, label).split()
        assert value_of(cells[-2]) == float(ml_dtypes.bfloat16(np.float32(x)))  # x: exact in fp32
        assert value_of(cells[-4]) == float(np.float16(x))
    assert png_size(tmp_path / "bf16_histogram.png") == (1200, 500)


# ---- figures, listing, the command line ---------------------------------------------------------
def test_static_figures(tmp_path):
    paths = figures_demo.static_figures(tmp_path)
    assert [p.name for p in paths] == list(figures_demo.STATIC_FIGURES)
    assert png_size(paths[0]) == (1200, 610)  # format ranges: 12 x (0.9 x 5 + 1.6)
    assert png_size(paths[1]) == (800, 360)  # bit fields of a 16-bit format: 8 x 3.6
    assert png_size(paths[2]) == (1200, 750)  # number line of an 8-bit format: 12 x 7.5


def test_figures_are_byte_reproducible(tmp_path, capsys):
    for d in ("a", "b"):
        run_demo(capsys, "accumulate", "-n", "300", "--out", str(tmp_path / d))
    assert (tmp_path / "a" / "accumulate.png").read_bytes() == (
        tmp_path / "b" / "accumulate.png"
    ).read_bytes()
    assert b"Software" not in (tmp_path / "a" / "accumulate.png").read_bytes()


def test_every_demo_is_listed(capsys):
    out = run_demo(capsys, "--list")
    for name, (desc, _) in DEMOS.items():
        assert f"  {name}  " in out and desc in out
    assert set(figures_demo.DEMO_FIGURES) <= set(DEMOS)
    for name in DEMOS:
        assert main([name, "--help"]) == 0
    capsys.readouterr()


def test_underflow_subprocess():
    """As a user runs it: a fresh interpreter, the module entry point."""
    r = subprocess.run(
        [sys.executable, "-m", "fpsim.demo", "underflow", "--steps", "3", "--no-plots"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "fp16 + dynamic scaling" in r.stdout and "not in scope" not in r.stderr
    assert "it/s" not in r.stderr  # no progress bar when stderr is not a terminal


# ---- tensorcore ---------------------------------------------------------------------------------
def test_tensorcore(tmp_path, capsys):
    """The printed errors against dot products computed by the exact rational definition of
    each model (tests/arith_oracle.py), on the demo's own random matrices."""
    from arith_oracle import block_fma_reference

    from fpsim import arith
    from fpsim.demo import tensorcore

    ks = (64, 256, 2048)
    out = run_demo(capsys, "tensorcore", "--ks", ",".join(map(str, ks)), "--size", "2",
                   "--out", str(tmp_path))  # fmt: skip
    blocks = out.split("2. Zero-mean")
    for dist, measure, text in (("positive", "max", blocks[0]), ("zero-mean", "norm", blocks[1])):
        for k in ks:
            a, b = tensorcore.matrices(dist, 2, k, 0)
            exact = a @ b
            want = []
            for name in tensorcore.MODELS:
                m = arith.get_accumulation(name)
                c = np.array([[block_fma_reference(a[i], b[:, j], "fp8_e4m3", m, out="fp32")
                               for j in range(2)] for i in range(2)])  # fmt: skip
                rel = np.abs(c - exact) / np.abs(exact)
                v = rel.max() if measure == "max" else np.linalg.norm(c - exact) / np.linalg.norm(
                    exact)  # fmt: skip
                want.append(f"{v:.2e}" if v else "0")
            row = [ln.split() for ln in text.splitlines() if ln.split()[:1] == [str(k)]][0]
            assert row[1:] == want, (dist, k, row, want)
    # the prose quotes the table
    first = [ln.split() for ln in blocks[0].splitlines() if ln.split()[:1] == ["64"]][0]
    assert f"grows from {100 * float(first[2]):.3g}% at K = 64" in out.replace("\n", " ")
    assert png_size(tmp_path / "tensorcore.png") == (1200, 480)
