"""The demos never lie: every number a demo's sentences give about its run is the number its own
table (or step log) printed, for settings other than the defaults too (other formats, scales,
seeds, growth intervals, short runs).

Each test runs a demo in-process, parses the printed table and the sentences separately, and
compares them; where a sentence branches (a static scale that never / sometimes / always
overflows, an accumulator that stalls or not) the branch taken is checked against the table.
Step counts are small, so the whole file runs in seconds.
"""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

from fpsim.demo.__main__ import main
from fpsim.demo.rounding import VALUES
from fpsim.formats import get_format

FLOAT = r"[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|inf|nan)|<0\.01"  # "<0.01": a non-zero share below 0.005%


def run_demo(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    out = capsys.readouterr().out
    return out


def prose(out: str) -> str:
    """The text with its line breaks undone (sentences are wrapped at 96 columns)."""
    return re.sub(r"\s*\n\s*", " ", out)


def row(out: str, label: str) -> list[str]:
    """The cells after ``label`` of the table row that starts with it."""
    (line,) = [ln for ln in out.splitlines() if ln.startswith(label + "  ")]
    return line[len(label) :].split()


def pct_cells(cells: list[str]) -> list[str]:
    return [c.rstrip("%") for c in cells if c.endswith("%")]


def pow2_value(text: str) -> float:
    """``2^-3`` or ``65536 (2^16)`` or ``0.25 (2^-2)`` -> the number."""
    m = re.search(r"2\^(-?\d+)", text)
    return 2.0 ** int(m.group(1))


# ---- underflow -------------------------------------------------------------------------------
UNDERFLOW = [
    ["--format", "e5m2", "--steps", "12", "--seed", "3", "--lr", "1e-2", "--growth-interval", "4"],
    ["--format", "bf16", "--scale", "2^-2", "--steps", "8"],
    ["--format", "Format(4, 3)", "--steps", "10", "--scale", "2**20", "--seed", "5"],
    ["--steps", "6", "--growth-interval", "2", "--seed", "11"],
    ["--format", "half", "--steps", "5", "--scale", "0x1p30"],
]


@pytest.mark.parametrize("args", UNDERFLOW, ids=lambda a: " ".join(a))
def test_underflow_prose_agrees_with_table(capsys, tmp_path, args):
    plots = ["--out", str(tmp_path)] if "--seed" in args else ["--no-plots"]
    out = run_demo(capsys, "underflow", *args, *plots)
    text = prose(out)
    f = get_format(args[args.index("--format") + 1]) if "--format" in args else get_format("fp16")
    steps = int(args[args.index("--steps") + 1])
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 0
    assert f"for {steps} steps of Adam" in text and f"seed {seed})" in text
    assert f"the mean of the last {min(10, steps)} steps" in text

    plain = row(out, f"{f.name}, no scaling")
    (scaled_label,) = [ln.split("  ")[0] for ln in out.splitlines()
                       if ln.startswith(f"{f.name} + ")]  # fmt: skip
    scaled = row(out, scaled_label)
    # the cells: 4 percentages, loss, (ratio), skipped k/n, final scale
    skipped = next(c for c in scaled if "/" in c)
    k, n = map(int, skipped.split("/"))
    assert n == steps and next(c for c in plain if "/" in c) == f"0/{steps}"
    final = " ".join(scaled[scaled.index(skipped) + 1 :])

    m = re.search(rf"Without scaling, ({FLOAT})% of the non-zero true activation gradients "
                  rf"became 0 in (\S+); with (.*?), ({FLOAT})% did\.", text)  # fmt: skip
    assert m, text
    assert m.group(1) == pct_cells(plain)[0] and m.group(2) == f.name
    assert m.group(4) == pct_cells(scaled)[0]
    how = m.group(3)
    if "--scale" in args:
        assert how == f"the static loss scale {final}"
        assert final.endswith(f"(2^{int(math.log2(pow2_value(final)))})")
    elif "went from" in how:
        assert how.endswith(f"to {final})")
    else:
        assert how.endswith(f"stayed at {final})")
    # the scale's effect on the exponents: the final scale when it never changed
    lo_hi = re.search(r"The scale, 2\^(-?\d+) to 2\^(-?\d+), adds", text)
    single = re.search(r"Multiplying by 2\^(-?\d+) adds (-?\d+) to every", text)
    none = re.search(r"A scale of 2\^(-?\d+) or less lifts", text)
    assert sum(x is not None for x in (lo_hi, single, none)) == 1
    if single:
        assert 2.0 ** int(single.group(1)) == pow2_value(final) and single.group(1) == single[2]
    if lo_hi:
        assert 2.0 ** int(lo_hi.group(2)) >= pow2_value(final) >= 2.0 ** int(lo_hi.group(1))
    # "did not lower" exactly when the scaled run lost no smaller a share
    lowered = share(pct_cells(scaled)[0]) < share(pct_cells(plain)[0])
    assert ("Scaling did not lower the share lost." in text) == (not lowered) or (
        pct_cells(scaled)[0] == pct_cells(plain)[0]  # equal when printed: either may hold
    )
    sk = re.search(r"(\d+) of its (\d+) steps overflowed and were skipped", text)
    assert (sk is not None) == (k > 0)
    if sk:
        assert (int(sk[1]), int(sk[2])) == (k, n)
    if "--out" in plots:  # the figure note's scale is the table's final scale
        note = re.search(r"after x (.+?), ({FLOAT})%\.".replace("{FLOAT}", FLOAT), text)
        assert note and note.group(1) == final


def share(cell: str) -> float:
    """A printed percentage as a number; "<0.01" (non-zero, below 0.005%) as 0.005, which orders
    it correctly against every other printed value."""
    return 0.005 if cell == "<0.01" else float(cell)


# ---- overflow --------------------------------------------------------------------------------
OVERFLOW = [
    ["--steps", "25", "--growth-interval", "5", "--init-scale", "2**32"],
    ["--init-scale", "8", "--steps", "12"],
    ["--format", "bf16", "--steps", "10"],
    ["--format", "e5m2", "--steps", "15", "--init-scale", "2^24", "--growth-interval", "3",
     "--seed", "2"],
    ["--format", "e4m3", "--steps", "8", "--init-scale", "2^30", "--lr", "0.01"],
]  # fmt: skip


def step_log(out: str) -> list[tuple[int, int, int, bool]]:
    """(step, log2 scale, inf/NaN count, skipped) of the printed step log."""
    rows = []
    for m in re.finditer(r"^\s+(\d+)\s+2\^(-?\d+)\s+([\d,]+) of [\d,]+\s+(yes|no)\s", out, re.M):
        rows.append((int(m[1]), int(m[2]), int(m[3].replace(",", "")), m[4] == "yes"))
    return rows


@pytest.mark.parametrize("args", OVERFLOW, ids=lambda a: " ".join(a))
def test_overflow_prose_agrees_with_table(capsys, tmp_path, args):
    plots = ["--out", str(tmp_path)] if "--seed" in args else ["--no-plots"]
    out = run_demo(capsys, "overflow", *args, *plots)
    text = prose(out)
    f = get_format(args[args.index("--format") + 1]) if "--format" in args else get_format("fp16")
    steps = int(args[args.index("--steps") + 1])
    init = "2^40"
    if "--init-scale" in args:
        v = float(eval(args[args.index("--init-scale") + 1].replace("^", "**")))
        init = f"2^{int(math.log2(v))}"
    assert f"in {f.name}, {steps} steps of Adam" in text and f"started at {init}." in text
    assert f"largest value {f.max:g} becomes {'inf' if f.has_inf else 'NaN'}" in text

    static = row(out, f"{f.name}, static {init}")
    (dyn_label,) = [ln.split("  ")[0] for ln in out.splitlines()
                    if ln.startswith(f"{f.name}, dynamic from {init} ")]  # fmt: skip
    dyn = row(out, dyn_label)
    ks, ns = map(int, static[0].split("/"))
    kd, nd = map(int, dyn[0].split("/"))
    assert ns == nd == steps and static[1] == init

    # the static scale's sentence: one branch, and its numbers are the table's
    if ks == ns:
        assert f"The static {init} never takes a step: all {ns} overflow and are skipped." in text
    elif ks == 0:
        assert f"The static {init} never overflows: it takes all {ns} steps." in text
    else:
        assert (f"The static {init} skips {ks} of {ns} steps (those that overflow) and takes "
                f"the other {ns - ks}.") in text  # fmt: skip
    assert text.count(f"The static {init} ") == 1

    # the dynamic scaler's sentence against the step log
    log = step_log(out)
    assert [r[0] for r in log] == list(range(len(log))) and log[0][1] == int(init[2:])
    for step, _, infs, skipped in log:
        assert skipped == (infs > 0), step
    lead = next((i for i, r in enumerate(log) if not r[3]), len(log))
    if lead == steps:
        assert (f"The dynamic scaler halves from {init} at every step and finds no scale that "
                f"fits in {steps} steps.") in text and kd == steps  # fmt: skip
        return
    if lead:
        m = re.search(r"halves its way down from 2\^(-?\d+) to 2\^(-?\d+) in (\d+) skipped step",
                      text)  # fmt: skip
        assert m and int(m[1]) == log[0][1] and int(m[2]) == log[lead][1] and int(m[3]) == lead
    else:
        assert f"first scale, {init}, fits at once" in text
    more = re.search(r"overflows (once|twice|\d+ times) more", text)
    words = {"once": "1", "twice": "2"}
    later = int(words.get(more[1], more[1].split()[0])) if more else 0
    assert lead + later == kd
    assert text.endswith(f"its last scale is {dyn[1]}.") or f"its last scale is {dyn[1]}." in text
    later_log = re.search(r"later overflows \(step: scale\): (.*)", out)
    if later_log:
        assert len(later_log[1].split(", ")) == later - sum(r[3] for r in log[lead:])

    # the true gradients and the starting scale
    m = re.search(r"suggest_scale: (?:any scale from 2\^(-?\d+) to 2\^(-?\d+)|the scale "
                  r"2\^(-?\d+)) keeps", text)  # fmt: skip
    lo, hi = (int(m[1]), int(m[2])) if m[1] else (int(m[3]), int(m[3]))
    k = int(init[2:])
    if k > hi:
        assert f"The starting scale {init} is 2^{k - hi} times the largest of those" in text
    elif k >= lo:
        assert f"The starting scale {init} is one of those." in text
    else:
        assert f"The starting scale {init} is below them" in text


# ---- swamping --------------------------------------------------------------------------------
SWAMPING = [
    ["--format", "bf16", "--steps", "30", "--lr", "0.01", "--seed", "4"],
    ["--format", "e5m2", "--steps", "15"],
    ["--steps", "25", "--lr", "3e-3"],
]
NUMPY_TYPE = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e5m2": ml_dtypes.float8_e5m2}


@pytest.mark.parametrize("args", SWAMPING, ids=lambda a: " ".join(a))
def test_swamping_prose_agrees_with_table(capsys, tmp_path, args):
    plots = ["--out", str(tmp_path)] if "--seed" in args else ["--no-plots"]
    out = run_demo(capsys, "swamping", *args, *plots)
    text = prose(out)
    f = get_format(args[args.index("--format") + 1]) if "--format" in args else get_format("fp16")
    steps = int(args[args.index("--steps") + 1])
    m = f.man_bits
    # part 1: the neighbours of 1.0 and the tie follow the format's mantissa width
    assert (f"One {f.name} weight w = 1.0. Its neighbours are 1 + 2^-{m} above and 1 - "
            f"2^-{m + 1} below, so w - 2^-{m + 2} lands exactly halfway down: a tie, which goes "
            "to the even neighbour, 1.0.") in text  # fmt: skip
    u = 2.0 ** -(m + 2)
    dtype = NUMPY_TYPE[f.name]
    w = dtype(1.0)
    for _ in range(16):  # the oracle: numpy / ml_dtypes, float32 arithmetic then one rounding
        w = dtype(np.float32(w) - np.float32(u))
    master = 1.0 - 16 * u
    plain_w = float(re.search(rf"{f.name} weight, no master:\s+({FLOAT})", out)[1])
    assert plain_w == float(w)
    assert ("(every update swamped)" in out) == (plain_w == 1.0)
    assert float(re.search(rf"fp32 master:\s+({FLOAT})", out)[1]) == master
    with_m = float(re.search(rf"{f.name} weight with a master:\s+({FLOAT})", out)[1])
    assert with_m == float(dtype(master))
    assert f"(the master rounded once to {f.name})" in out

    # part 2: the summary's numbers are the table's
    ref, plain, mast = (row(out, lab) for lab in ("fp32 weights", f"{f.name} weights",
                                                  f"{f.name} weights + fp32 master"))  # fmt: skip
    kept = re.search(rf"With {f.name} weights, ({FLOAT})% of the updates were kept; with fp32 "
                     rf"master weights, ({FLOAT})% were \(fp32 weights: ({FLOAT})%\)\.", text)
    assert kept, text
    assert kept.groups() == (plain[0].rstrip("%"), mast[0].rstrip("%"), ref[0].rstrip("%"))
    copy = re.search(rf"The {f.name} copy changed in only ({FLOAT})% of them", text)
    assert (copy is not None) == (float(mast[1].rstrip("%")) < float(mast[0].rstrip("%")))
    if copy:
        assert copy[1] == mast[1].rstrip("%")
    loss = re.search(rf"Final loss: ({FLOAT}) with {f.name} weights, ({FLOAT}) with masters, "
                     rf"({FLOAT}) in fp32\.", text)  # fmt: skip
    assert loss.groups() == (plain[2], mast[2], ref[2])
    assert f"mean of the last {min(20, steps)} steps" in text
    assert f"(first {min(10, steps)} steps' mean - final)" in text
    # the spacing quoted for the weights' median is the format's in that binade
    sp = re.search(r"median \|w\| is (\S+), in \[2\^(-?\d+), 2\^(-?\d+)\), where \S+ values are "
                   r"2\^(-?\d+) apart", text)  # fmt: skip
    k = int(sp[2])
    assert int(sp[3]) == k + 1 and 2.0**k <= float(sp[1]) * (1 + 1e-3) < 2.0 ** (k + 1) * 1.001
    assert int(sp[4]) == max(k, f.emin) - m


# ---- accumulate ------------------------------------------------------------------------------
ACCUMULATE = [
    ["-n", "500", "--seed", "3", "--acc", "fp16,e5m2,fp32"],
    ["-n", "200", "--acc", "bf16,half,e4m3_ieee"],
    ["-n", "1e2", "--acc", "fp32"],
]


@pytest.mark.parametrize("args", ACCUMULATE, ids=lambda a: " ".join(a))
def test_accumulate_prose_agrees_with_table(capsys, tmp_path, args):
    plots = ["--out", str(tmp_path)] if "--seed" in args else ["--no-plots"]
    out = run_demo(capsys, "accumulate", *args, *plots)
    text = prose(out)
    accs = [get_format(a).name for a in args[args.index("--acc") + 1].split(",")]
    n = int(float(args[args.index("-n") + 1]))
    _, part1, part2, part3 = re.split(r"^\d\. ", out, flags=re.M)
    ones = {a: row(part1, a) for a in accs}
    stopped = [a for a in accs if float(ones[a][0]) < 4096]
    for a in accs:
        said = re.search(rf"the {a} accumulator stops at ({FLOAT})", text)
        assert (said is not None) == (a in stopped), a
        if said:
            assert said[1] == ones[a][0]
    if stopped:
        first = stopped[0]
        v = ones[first][0]
        assert f"at {v} the spacing of {first} values is" in text
        assert f"The {first} accumulator at the stall:" in out
    exact = [a for a in accs if float(ones[a][0]) == 4096]
    if exact:
        assert f"The {', '.join(exact)} accumulator" in text and "4096 exactly" in text

    # part 2: which order was more accurate, with the table's own errors
    assert f"{n} fp16 values uniform in [0, 1)" in part2
    for a in accs:
        seq, seq_err, pair, pair_err = row(part2, a)
        said = re.search(rf"{a} \(({FLOAT}) against ({FLOAT})\)", text)
        assert said and said.groups() == (pair_err, seq_err)
        verdict = text[: said.start()].rsplit(";", 1)[-1].lower()
        if float(pair_err) < float(seq_err):
            assert "more accurate" in verdict
        elif float(pair_err) == float(seq_err):
            assert "as accurate" in verdict
        else:
            assert "less accurate" in verdict
    from fpsim.autograd.precision import get_matmul_accumulation

    assert f"fpsim's autograd accumulates in {get_matmul_accumulation().name}" in text
    assert [row(part3, a) for a in accs]  # one matmul row per accumulator


# ---- rounding --------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["-n", "300", "--draws", "200", "--seed", "9"],
                                  ["-n", "1500", "--draws", "20"]],
                         ids=lambda a: " ".join(a))  # fmt: skip
def test_rounding_prose_agrees_with_table(capsys, args):
    out = run_demo(capsys, "rounding", *args)
    text = prose(out)
    n = int(args[args.index("-n") + 1])
    draws = int(args[args.index("--draws") + 1])
    # the stochastic means' largest distance from x, in ulps, read off the table
    devs, inf_rows = [], []
    for label, x, _ in VALUES:
        cells = row(out, label)
        down, up, mean = (float(c) if not c.startswith("2^") else 2.0 ** int(c[2:])
                          for c in (cells[4], cells[3], cells[5]))  # fmt: skip
        if not math.isfinite(mean):
            inf_rows.append(label)
        elif math.isfinite(up) and up > down:
            devs.append(abs(mean - x) / (up - down))
    m = re.search(rf"Over {draws} draws the stochastic means lie within ({FLOAT}) ulp", text)
    assert m and m[1] == f"{max(devs):.2g}"
    assert all(f"{lab} (inf)" in text for lab in inf_rows)
    # the drift: every number in the sentences is the table's
    drift = {mode: row(out, mode) for mode in ("nearest_even", "toward_zero", "up", "stochastic")}
    assert f"1 + {n} x 2^-12 = {1 + n * 2.0**-12!r}" in out
    for mode, name in (("nearest_even", "round-to-nearest"), ("toward_zero", "rounding toward "
                                                                         "zero")):  # fmt: skip
        kept_none = f"{name} kept none of the {n} updates" in text.lower()
        assert kept_none == (float(drift[mode][0]) == 1.0)
    up = re.search(rf"rounding up ended at ({FLOAT}), ({FLOAT}) from the exact sum", text)
    assert up.groups() == tuple(drift["up"])
    sr = re.search(rf"Stochastic rounding ended at ({FLOAT}), ({FLOAT}) from the exact sum", text)
    assert sr.groups() == tuple(drift["stochastic"])
    smallest = min(drift, key=lambda mode: abs(float(drift[mode][1])))
    assert ("the smallest error of the four" in text) == (smallest == "stochastic")


# ---- bf16 ------------------------------------------------------------------------------------
def test_bf16_prose_agrees_with_table(capsys, tmp_path):
    out = run_demo(capsys, "bf16", "--steps", "5", "--seed", "2", "--lr", "1e-2", "--out",
                   str(tmp_path))  # fmt: skip
    text = prose(out)
    b, plain, scaled = (row(out, lab) for lab in ("bf16, no scaler", "fp16, no scaling",
                                                  "fp16 + dynamic scaling"))  # fmt: skip
    m = re.search(rf"bf16 lost ({FLOAT})% of the activation gradients to zero, fp16 without a "
                  rf"scale ({FLOAT})%, fp16 with one ({FLOAT})%\.", text)  # fmt: skip
    assert m.groups() == (b[0].rstrip("%"), plain[0].rstrip("%"), scaled[0].rstrip("%"))
    e = re.search(r"bf16's activation gradients, (2\^-?\d+), is (\d+)x (larger|smaller) than "
                  r"fp16's with a scale, (2\^-?\d+)", text)  # fmt: skip
    assert e and (e[1], e[4]) == (b[2], scaled[2])
    ratio = 2 ** (int(e[1][2:]) - int(e[4][2:]))
    assert int(e[2]) == (ratio if e[3] == "larger" else 1 / ratio)
    numbers = {lab: row(out, lab) for lab in ("2^-30", "70000", "1 + 2^-9")}
    assert numbers["2^-30"][0] == "0" and numbers["70000"][0] == "inf"
    assert "bf16 keeps 2^-30 and 70000 (fp16: 0 and inf)" in text
    assert "1 + 2^-9 to 1" in text and numbers["1 + 2^-9"][2] == "1"
    assert "2^-8 = 0.39% in bf16, 2^-11 = 0.049% in fp16" in text


# ---- autocast --------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["--device", "cpu"], ["--dtype", "e5m2"], []])
def test_autocast_weight_cache_sentence(capsys, args):
    out = run_demo(capsys, "autocast", "--no-table", *args)
    m = re.search(r"first forward pass makes (\d+) casts, a second pass (\d+)", out)
    first, second = int(m[1]), int(m[2])
    assert ("made once per region and reused" in out) == (second < first)


# ---- blocks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [[], ["--outliers", "0"], ["--outliers", "1", "--seed", "5"],
                                  ["--outliers", "64", "--seed", "2"]])  # fmt: skip
def test_blocks_prose_agrees_with_table(capsys, args):
    out = run_demo(capsys, "blocks", "--no-plots", *args)
    text = prose(out)
    cells = {lab: row(out, lab) for lab in ("fp16, no scaling", "fp8_e4m3, per-tensor",
                                           "mxfp8_e4m3", "mxfp8_e4m3, rceil", "mxfp4", "nvfp4")}
    # (bits, flushed, subnormal, saturated, norm error, mean error)
    pt, mx, rc = cells["fp8_e4m3, per-tensor"], cells["mxfp8_e4m3"], cells["mxfp8_e4m3, rceil"]
    m4, nv, fp = cells["mxfp4"], cells["nvfp4"], cells["fp16, no scaling"]
    m = re.search(rf"fall into the subnormals \(({FLOAT})%\) or to zero \(({FLOAT})%\)", text)
    assert m.groups() == (pt[2].rstrip("%"), pt[1].rstrip("%"))
    m = re.search(rf"where its own values are: ({FLOAT})% flushed and ({FLOAT})% subnormal", text)
    assert m.groups() == (mx[1].rstrip("%"), mx[2].rstrip("%"))
    sat = re.search(rf"saturates, here in [\d,]+ blocks \(({FLOAT})% of the elements\)\. rceil .* "
                    rf"({FLOAT})% saturated, and the norm error goes from ({FLOAT})% to "
                    rf"({FLOAT})%", text)  # fmt: skip
    if float(mx[3].rstrip("%").lstrip("<")) > 0:
        assert sat.groups() == (mx[3].rstrip("%"), rc[3].rstrip("%"), mx[4].rstrip("%"),
                                rc[4].rstrip("%"))  # fmt: skip
    else:
        assert sat is None and "but no block did here" in text
    m = re.search(rf"MXFP4 flushes ({FLOAT})% of the elements", text)
    assert m[1] == m4[1].rstrip("%")
    m = re.search(rf"\(norm error ({FLOAT})%, MXFP4's ({FLOAT})%\)", text)
    assert m.groups() == (nv[4].rstrip("%"), m4[4].rstrip("%"))
    nv_z, m4_z = float(nv[1].rstrip("%").lstrip("<")), float(m4[1].rstrip("%").lstrip("<"))
    if "sit at that floor" in text:
        if nv_z > m4_z:
            m = re.search(rf"NVFP4 flushes ({FLOAT})% of the elements, MXFP4, whose scales reach "
                          rf"2\^-127, ({FLOAT})%", text)  # fmt: skip
        else:
            m = re.search(rf"flush fewer elements than MXFP4: ({FLOAT})% against ({FLOAT})%", text)
        assert m.groups() == (nv[1].rstrip("%"), m4[1].rstrip("%"))
    told_apart = "tells them apart" in text
    if told_apart:
        m = re.search(rf"per-tensor fp8's is ({FLOAT})%, MXFP8's ({FLOAT})%, though one flushed "
                      rf"({FLOAT})% of the elements and the other ({FLOAT})%; .* tells them apart: "
                      rf"({FLOAT})% against ({FLOAT})%", text)  # fmt: skip
        assert m.groups() == (pt[4].rstrip("%"), mx[4].rstrip("%"), pt[1].rstrip("%"),
                              mx[1].rstrip("%"), pt[5].rstrip("%"), mx[5].rstrip("%"))  # fmt: skip
        assert float(pt[4].rstrip("%")) <= float(mx[4].rstrip("%"))
        assert float(pt[5].rstrip("%")) > float(mx[5].rstrip("%"))
    else:
        m = re.search(rf"Per-tensor fp8 and MXFP8 flush ({FLOAT})% and ({FLOAT})%", text)
        assert m.groups() == (pt[1].rstrip("%"), mx[1].rstrip("%"))
    assert ("fp16 needs no scale" in text) == (fp[3] in ("0.00%",) and
                                               float(fp[1].rstrip("%").lstrip("<")) <= 0.1)
