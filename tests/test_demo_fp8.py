"""``python -m fpsim.demo fp8``: its table agrees with the runs (recomputed here from
fpsim.demo.fp8.run_one), every number in its sentences is a number of its table, the branch a
sentence takes is the one the table implies, and it writes its two figures. A few steps only."""

from __future__ import annotations

import math
import re
import struct

import numpy as np
import pytest

from fpsim.demo import fp8
from fpsim.demo.__main__ import main


def png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def cells(out: str, name: str) -> list[str]:
    (line,) = [ln for ln in out.splitlines() if ln.startswith(f"{name:12}  ")]
    return line.split()[1:]


def pct_value(text: str) -> float:
    return 0.0 if text == "0" else (2.5e-5 if text == "<0.01%" else float(text.rstrip("%")) / 100)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("fp8")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main(["fp8", "--steps", "3", "--recipes", "fp8_cast,fp8_delayed,mxfp8",
                       "--out", str(out_dir)])  # fmt: skip
    assert status == 0
    return buf.getvalue(), out_dir


def test_table_rows_are_the_runs(demo_run):
    out, _ = demo_run
    assert "3 steps of Adam" in out and "the mean of the last 3 steps" in out
    ref = fp8.run_one("fp32", 3, 0)
    ref_loss = float(np.mean(ref["losses"]))
    assert cells(out, "fp32")[0] == f"{ref_loss:.4f}"
    for name in ("fp8_cast", "fp8_delayed", "mxfp8"):
        r = fp8.run_one(name, 3, 0)
        c = cells(out, name)
        loss = float(np.mean(r["losses"]))
        assert c[0] == f"{loss:.4f}"
        d = loss - ref_loss
        assert c[1] == (f"{d:+.4f}" if abs(d) >= 5e-5 else "0")
        assert c[2] == (f"{int(r['skipped'].sum())}/3" if name == "fp8_cast" else "-")
        lost = [pct_value(v) for v in c[3:]]
        for i, role in enumerate(fp8.KINDS):
            for j, kind in enumerate(("zero", "saturated")):
                assert fp8.pct(r["lost"][role][kind]) == c[3 + 2 * i + j]
        assert all(0 <= v <= 1 for v in lost)
    assert cells(out, "fp32")[1:] == ["0", "-"] + ["-"] * 6


def test_sentences_are_read_off_the_table(demo_run):
    out, _ = demo_run
    text = re.sub(r"\s*\n\s*", " ", out)
    losses = {n: float(cells(out, n)[0]) for n in ("fp32", "fp8_cast", "fp8_delayed", "mxfp8")}
    gaps = {n: cells(out, n)[1] for n in losses if n != "fp32"}
    m = re.search(r"Closest to it: (\w+) \(([^)]*)\); furthest: (\w+) \(([^)]*)\)", text)
    assert m
    best, bgap, worst, wgap = m.groups()
    diffs = {n: abs(v - losses["fp32"]) for n, v in losses.items() if n != "fp32"}
    assert diffs[best] == pytest.approx(min(diffs.values()), abs=1.1e-4)
    assert diffs[worst] == pytest.approx(max(diffs.values()), abs=1.1e-4)
    for name, g in ((best, bgap), (worst, wgap)):
        assert g == (gaps[name] if gaps[name] != "0" else "the same to 4 decimals")
    # gradient underflow: the named recipe has the largest share in the table's column
    grad_zero = {n: cells(out, n)[7] for n in gaps}
    m = re.search(r"(\w+) flushed the most, (\S+) of the", text)
    assert m and m.group(2) == grad_zero[m.group(1)]
    assert pct_value(m.group(2)) == max(pct_value(v) for v in grad_zero.values())
    for n, v in grad_zero.items():
        if n != m.group(1):
            assert f"{n} {v}" in text
    sat = {n: pct_value(cells(out, n)[4]) for n in gaps}
    if max(sat.values()) == 0:
        assert "No recipe clipped or overflowed an activation." in text
    else:
        m = re.search(r"Activations beyond the format's range: (\w+) clipped or overflowed (\S+)",
                      text)
        assert m and pct_value(m.group(2)) == max(sat.values())
    m = re.search(r"the scale starts at (\S+) \(before any history\) and changes (\d+) time\(s\) "
                  r"in (\d+) steps", text)  # fmt: skip
    assert m and float(m.group(1)) == 1.0 and m.group(3) == "3"


def test_delayed_track_follows_the_history_rule():
    r = fp8.run_one("fp8_delayed", 4, 0)
    t = r["track"]
    # the scale in force after step k is 57344 / (largest amax recorded so far) (history 1024)
    amax = np.array(t["amax"])
    hmax = np.maximum.accumulate(amax)
    assert np.array_equal(np.array(t["history_max"]), hmax.astype(np.float32).astype(float))
    for k in range(1, len(amax)):
        want = float(np.float32(57344.0) / np.float32(hmax[k - 1]))
        assert t["scale"][k] == want
    assert t["scale"][0] == 1.0 and math.isfinite(r["losses"][-1])


def test_figures(demo_run):
    _, out_dir = demo_run
    assert png_size(out_dir / "fp8_loss.png") == (1200, 480)
    assert png_size(out_dir / "fp8_scales.png") == (1200, 480)


@pytest.mark.parametrize("args, message", [
    (["--recipes", "fp7"], "unknown recipe"),
    (["--steps", "0"], "--steps"),
])  # fmt: skip
def test_bad_arguments(capsys, args, message):
    assert main(["fp8", *args, "--no-plots"]) == 2
    assert message in capsys.readouterr().err


def test_lost_fractions_count_an_overflow_once():
    """fp8_cast: 1000 overflows E4M3 (to NaN, ml_dtypes' cast) and is one lost element of eight,
    not two (it is both "saturated" and "nonfinite" in the layer's counts); fp8_current: the
    same input is clipped, never non-finite."""
    import ml_dtypes

    import fpsim
    from fpsim import amp, nn

    x = np.array([[1000.0, 1e-4, 0.3, -2.0, 1.0, 0.5, 0.25, 3.0]], np.float32)
    cast = x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    want_over = np.count_nonzero(~np.isfinite(cast)) / x.size
    want_zero = np.count_nonzero((cast == 0) & (x != 0)) / x.size
    for name, over in (("fp8_cast", want_over), ("fp8_current", 0.0)):
        lin = nn.Linear(8, 4)
        layers = amp.convert_to_fp8(lin, name, record=True)
        lin(fpsim.tensor(x))
        lost = fp8.lost_fractions(layers.stats(), name)["input"]
        assert lost["saturated"] == over
        if name == "fp8_cast":
            assert lost["zero"] == want_zero == 1 / 8 and over == 1 / 8
