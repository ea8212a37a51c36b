"""The demos' command lines: every argument is checked before any work starts, and a bad one
ends in argparse's usage error (exit status 2, one clear line on stderr, no traceback). Every
format spelling fpsim.get_format reads is accepted; loss scales follow one rule (powers of two)
for ``--scale`` and ``--init-scale``; progress bars appear on a terminal only, and never with
``--quiet``."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading

import pytest

from fpsim.demo import _common
from fpsim.demo.__main__ import main
from fpsim.formats import get_format

BAD = [
    # (arguments, words the error must contain)
    (["underflow", "--lr", "nan"], ["--lr", "positive finite"]),
    (["underflow", "--lr", "-1"], ["--lr", "positive finite"]),
    (["underflow", "--lr", "0"], ["--lr", "positive finite"]),
    (["underflow", "--lr", "fast"], ["--lr", "not a number"]),
    (["underflow", "--seed", "-1"], ["--seed", "from 0 to 4,294,967,295"]),
    (["underflow", "--seed", "1.5"], ["--seed", "not a whole number"]),
    (["underflow", "--seed", "99999999999"], ["--seed", "from 0 to"]),
    (["underflow", "--steps", "0"], ["--steps", "from 1 to 100,000"]),
    (["underflow", "--steps", "1e7"], ["--steps", "100,000", "tens of minutes"]),
    (["underflow", "--steps", "ten"], ["--steps", "not a whole number"]),
    (["underflow", "--format", "fp17"], ["--format", "unknown format 'fp17'"]),
    (["underflow", "--format", "fp64"], ["--format", "fp64", "narrower than fp32", "autocast"]),
    (["underflow", "--format", "fp32"], ["--format", "fp32 itself"]),
    (["underflow", "--format", "e9m2"], ["--format", "fp32 does not hold"]),
    (["underflow", "--format", "e8m0"], ["--format", "scale format", "unsigned, no zero"]),
    (["underflow", "--format", "Format(5, 53)"], ["--format", "man_bits"]),
    (["underflow", "--scale", "1000"], ["--scale", "not a power of two", "exact"]),
    (["underflow", "--scale", "0"], ["--scale", "positive and finite"]),
    (["underflow", "--scale", "-4"], ["--scale", "positive and finite"]),
    (["underflow", "--scale", "inf"], ["--scale", "positive and finite"]),
    (["underflow", "--scale", "2^200"], ["--scale", "from 2^-126 to 2^127"]),
    (["underflow", "--scale", "big"], ["--scale", "not a number"]),
    (["underflow", "--growth-interval", "0"], ["--growth-interval", "from 1"]),
    (["underflow", "--scale", "1024", "--growth-interval", "5"], ["--growth-interval",
                                                                  "static"]),
    (["overflow", "--init-scale", "3"], ["--init-scale", "not a power of two", "exact"]),
    (["overflow", "--init-scale", "nan"], ["--init-scale", "positive and finite"]),
    (["overflow", "--growth-interval", "-1"], ["--growth-interval", "from 1"]),
    (["overflow", "--steps", "1000001"], ["--steps", "100,000"]),
    (["overflow", "--lr", "inf"], ["--lr", "positive finite"]),
    (["overflow", "--format", "bf17"], ["--format", "unknown format"]),
    (["swamping", "--format", "fp64"], ["--format", "fp32 masters"]),
    (["swamping", "--lr", "-1e-3"], ["--lr", "positive finite"]),
    (["swamping", "--steps", "0"], ["--steps", "from 1"]),
    (["swamping", "--seed", "x"], ["--seed", "not a whole number"]),
    (["accumulate", "-n", "1e12"], ["-n", "1,000,000", "one term at a time"]),
    (["accumulate", "-n", "0"], ["-n", "from 1"]),
    (["accumulate", "-n", "2.5"], ["-n", "not a whole number"]),
    (["accumulate", "-n", "nan"], ["-n", "not a whole number"]),
    (["accumulate", "--acc", "fp16,fp17"], ["--acc", "unknown format 'fp17'"]),
    (["accumulate", "--acc", ","], ["--acc", "at least one"]),
    (["accumulate", "--acc", "fp16,bf16,fp32,fp64,e5m2,e4m3,tf32"], ["--acc", "at most 6"]),
    (["accumulate", "--seed", "-3"], ["--seed", "from 0"]),
    (["rounding", "--draws", "1e8"], ["--draws", "10,000,000", "80 MB"]),
    (["rounding", "-n", "1e7"], ["-n", "1,000,000", "one at a time"]),
    (["rounding", "--seed", "-1"], ["--seed", "from 0"]),
    (["bf16", "--steps", "1e6"], ["--steps", "100,000"]),
    (["bf16", "--lr", "nan"], ["--lr", "positive finite"]),
    (["autocast", "--dtype", "fp64"], ["--dtype", "narrower than fp32"]),
    (["autocast", "--dtype", "fp17"], ["--dtype", "unknown format"]),
    (["blocks", "--outliers", "65"], ["--outliers", "from 0 to 64"]),
    (["blocks", "--outliers", "-1"], ["--outliers", "from 0"]),
    (["blocks", "--outliers", "two"], ["--outliers", "not a whole number"]),
    (["blocks", "--seed", "2.5"], ["--seed", "not a whole number"]),
    (["figures", "--bogus"], ["unrecognized arguments: --bogus"]),
    (["tensorcore", "--ks", "0"], ["--ks", "from 1"]),
    (["tensorcore", "--ks", "64,70000"], ["--ks", "65,536", "exact dot products"]),
    (["tensorcore", "--ks", ","], ["--ks", "at least one"]),
    (["tensorcore", "--ks", "64,2.5"], ["--ks", "not a whole number"]),
    (["tensorcore", "--size", "300"], ["--size", "256"]),
]


@pytest.mark.parametrize("args, words", BAD, ids=lambda a: " ".join(a) if a and
                         isinstance(a[0], str) and a[0].isidentifier() else "")  # fmt: skip
def test_bad_argument_is_a_usage_error(capsys, args, words):
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before any work
    err = captured.err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"python -m fpsim.demo {args[0]}: error: "), err
    for w in words:
        assert w in last, (w, last)


@pytest.mark.parametrize("args", [["underflow", "--lr", "nan"], ["accumulate", "-n", "1e12"],
                                  ["overflow", "--init-scale", "3"]])  # fmt: skip
def test_usage_error_as_a_user_sees_it(args):
    """A fresh interpreter: exit status 2, the message on stderr, nothing on stdout, no
    traceback."""
    r = subprocess.run([sys.executable, "-m", "fpsim.demo", *args], capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert r.returncode == 2
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert "error: argument" in r.stderr


# ---- formats: the library's own parser -------------------------------------------------------
SPELLINGS = ["e5m2", "e4m3", "half", "bfloat16", "e4m3_ieee", "Format(4, 3)",
             "Format(4, 3, bias=5, style='fn')", "e3m4", "float8_e5m2", "tf32"]  # fmt: skip


@pytest.mark.parametrize("text", SPELLINGS)
def test_every_get_format_spelling_is_accepted(text):
    """The demos' format options read a format exactly as fpsim.get_format does."""
    f = get_format(text)
    assert _common.format_arg(text) == f
    assert _common.autocast_format_arg(text) == f  # all narrower than fp32, held by it


@pytest.mark.parametrize("text", ["e4m3_ieee", "Format(4, 3, bias=5, style='fn')", "half"])
def test_underflow_runs_with_any_spelling(capsys, text):
    out = main(["underflow", "--format", text, "--steps", "2", "--no-plots"])
    assert out == 0
    assert f"{get_format(text).name}, no scaling" in capsys.readouterr().out


def test_accumulate_reads_accumulator_spellings(capsys):
    assert main(["accumulate", "-n", "20", "--acc", "half,bfloat16,Format(8, 23)",
                 "--no-plots"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    for name in ("fp16", "bf16", "fp32"):  # Format(8, 23) is fp32
        assert any(line.startswith(name + " ") for line in out.splitlines())


# ---- one rule for loss scales ----------------------------------------------------------------
@pytest.mark.parametrize("text, value", [("1024", 1024.0), ("2**15", 2.0**15), ("2^-3", 0.125),
                                         ("65536.0", 65536.0), ("0x1p20", 2.0**20)])  # fmt: skip
def test_scales_are_powers_of_two_written_any_way(text, value):
    assert _common.power_of_two_scale(text) == value


def test_scale_and_init_scale_follow_one_rule(capsys):
    messages = []
    for args in (["underflow", "--scale", "3"], ["overflow", "--init-scale", "3"]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        messages.append(err.split("error: argument ")[1].split(": ", 1)[1])
    assert messages[0] == messages[1]  # the same words for both options
    assert _common.SCALE_WHY in messages[0]
    for demo, option in (("underflow", "--scale"), ("overflow", "--init-scale")):
        assert main([demo, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        help_text = text.rsplit(option + " S", 1)[1]
        assert "a power of two" in help_text[:200]
        assert "only then are scaling and unscaling exact" in help_text


def test_limits_are_explained_in_the_help(capsys):
    for demo, words in (("underflow", ["at most 100000"]), ("accumulate", ["at most 10^6",
                        "one term at a time"]), ("rounding", ["at most 10^7", "at most 10^6"]),
                        ("swamping", ["narrower than fp32"])):  # fmt: skip
        assert main([demo, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        for w in words:
            assert w in text, (demo, w)
        assert "--quiet" in text


# ---- progress --------------------------------------------------------------------------------
def run_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Run a demo with stderr on a pseudo-terminal; (status, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    # a terminal 100 columns wide (a new pty is 0 x 0, and tqdm draws nothing into 0 columns)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    got: list[bytes] = []

    def drain() -> None:  # read while it runs: a full terminal buffer would block the demo
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            got.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        r = subprocess.run([sys.executable, "-m", "fpsim.demo", *args], stdout=subprocess.PIPE,
                           stderr=slave, text=True, timeout=600)  # fmt: skip
    finally:
        os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    return r.returncode, r.stdout, b"".join(got).decode("utf-8", "replace")


def test_progress_on_a_terminal_and_not_with_quiet():
    args = ("rounding", "-n", "30000", "--draws", "10")
    status, out, tty = run_on_a_terminal(*args)
    assert status == 0 and "stochastic" in out
    assert "it/s" in tty and "nearest_even" in tty  # a tqdm bar per mode
    status, out, tty = run_on_a_terminal(*args, "--quiet")
    assert status == 0 and "it/s" not in tty


def test_no_progress_when_stderr_is_not_a_terminal():
    r = subprocess.run([sys.executable, "-m", "fpsim.demo", "rounding", "-n", "30000", "--draws",
                        "10"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0 and r.stderr == ""


def test_out_is_checked_before_any_work(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    for out, words in ((afile, "exists and is not a directory"),
                       (afile / "figures", "cannot write figures to")):  # fmt: skip
        assert main(["accumulate", "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and "Traceback" not in captured.err
        assert words in captured.err
    # --no-plots writes nothing, so --out is not tried
    assert main(["accumulate", "-n", "10", "--no-plots", "--out", str(afile / "x")]) == 0
    capsys.readouterr()
