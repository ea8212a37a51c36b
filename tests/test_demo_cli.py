"""``python -m fpsim.demo``: the command line, run as users run it (a subprocess) and in-process.

The bit patterns checked are the well-known encodings of 0.1: fp16 0x2E66, bf16 0x3DCD, fp32
0x3DCCCCCD.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fpsim.demo.__main__ import DEMOS, main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "fpsim.demo", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=600,  # a cold numba cache compiles the kernels first
    )


def row(text: str, name: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.split()[:1] == [name]]
    return line


def test_bits_point_one_subprocess():
    r = run_cli("bits", "0.1")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # the typed decimal is rounded from its exact value (one tenth), not through float64
    assert out.startswith("x = 0.1  (rounded from its exact value, not through float64)\n")
    assert "float64 would hold 0.1000000000000000055511151231257827021181583404541015625" in out
    assert "0 01011 1001100110" in row(out, "fp16")
    assert "0x2e66" in row(out, "fp16") and "0.0999755859375" in row(out, "fp16")
    assert "0 01111011 1001101" in row(out, "bf16") and "0x3dcd" in row(out, "bf16")
    assert "0 01111011 10011001100110011001101" in row(out, "fp32")
    assert "0x3dcccccd" in row(out, "fp32")
    for name in ("fp8_e4m3", "fp8_e5m2"):
        row(out, name)
    assert "not in scope" not in r.stderr  # numba's compile-time chatter is kept out


def test_list_subprocess():
    r = run_cli("--list")
    assert r.returncode == 0
    assert r.stdout.split()[0] == "bits"
    assert DEMOS["bits"][0] in r.stdout


def test_help_subprocess():
    r = run_cli("--help")
    assert r.returncode == 0
    assert "usage: python -m fpsim.demo" in r.stdout and "bits" in r.stdout


def test_unknown_demo_subprocess():
    r = run_cli("nosuchdemo")
    assert r.returncode == 2
    assert "unknown demo 'nosuchdemo'" in r.stderr and "bits" in r.stderr
    assert r.stdout == ""


def test_bits_light_import():
    """Listing demos and the bits demo import no plotting library."""
    code = (
        "import sys; from fpsim.demo.__main__ import main; main(['--list']); "
        "main(['bits', '1', '--formats', 'fp16']); print('matplotlib' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("False")


# ---- in-process (fast) ----------------------------------------------------------------------
def test_default_value_is_point_one(capsys):
    assert main(["bits"]) == 0
    assert capsys.readouterr().out.startswith("x = 0.1  (rounded from its exact value")


def test_formats_option_and_negative_values(capsys):
    assert main(["bits", "-0.0", "-1e-5", "2", "--formats", "fp16,bf16"]) == 0
    out = capsys.readouterr().out
    assert out.count("x = ") == 3
    assert "x = -0.0\n" in out and "x = -1e-5  (rounded from its exact value" in out
    assert "x = 2.0\n" in out
    assert "1 00000 0000000000" in out  # -0.0 in fp16
    assert "1 00000000 0000000" in out  # -0.0 in bf16
    assert "0 10000 0000000000" in out  # 2.0 in fp16
    assert "fp32" not in out


def test_formats_equals_syntax_and_aliases(capsys):
    assert main(["bits", "1.5", "--formats=half,e4m3"]) == 0
    out = capsys.readouterr().out
    assert "0 01111 1000000000" in row(out, "fp16")
    assert "0 0111 100" in row(out, "fp8_e4m3")


def test_explain_flag(capsys):
    assert main(["bits", "0.1", "--formats", "fp16", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "significand  1.1001100110₂" in out and "next up" in out


def test_hex_float_value(capsys):
    assert main(["bits", "0x1.8p-3", "--formats", "fp16"]) == 0
    assert "0 01100 1000000000" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [(["bits", "abc"], "not a number"), (["bits", "1", "--formats", "fp17"], "unknown format"),
     (["bits", "--formats", ","], "at least one format"), (["bits", "--bogus"], "unrecognized")],
)  # fmt: skip
def test_usage_errors_exit_2(capsys, args, message):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_unknown_demo_exit_2(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown demo 'frobnicate'" in capsys.readouterr().err


def test_demo_help_exits_0(capsys):
    assert main(["bits", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--formats" in out and "VALUE" in out


def test_no_arguments_prints_help(capsys):
    assert main([]) == 0
    assert "demos:" in capsys.readouterr().out


def test_registry_shape():
    for name, (description, func) in DEMOS.items():
        assert name and name.isidentifier()
        assert isinstance(description, str) and "\n" not in description and description
        assert callable(func)
