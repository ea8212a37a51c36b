"""The ``fpsim`` console command, as installed by pip (next to this interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fpsim.cli import main

SCRIPT = Path(sys.executable).with_name("fpsim")


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          encoding="utf-8", timeout=600)  # fmt: skip


@pytest.mark.skipif(not SCRIPT.exists(), reason="package not installed with its scripts")
def test_console_script_bits():
    r = run("bits", "0.1", "--formats", "fp16")
    assert r.returncode == 0, r.stderr
    # 0.1 in fp16 is 0x2e66 (sign 0, exponent 01011, mantissa 1001100110): a well-known encoding
    assert "0 01011 1001100110" in r.stdout and "0x2e66" in r.stdout


@pytest.mark.skipif(not SCRIPT.exists(), reason="package not installed with its scripts")
def test_console_script_demo_subcommand_and_errors():
    r = run("demo", "--list")
    assert r.returncode == 0 and "underflow" in r.stdout and "bits" in r.stdout
    r = run("demo", "nosuchdemo")
    assert r.returncode == 2 and "unknown demo 'nosuchdemo'" in r.stderr
    assert "Traceback" not in r.stderr


def test_demo_word_is_optional(capsys):
    assert main(["demo", "bits", "1", "--formats", "fp16"]) == 0
    a = capsys.readouterr().out
    assert main(["bits", "1", "--formats", "fp16"]) == 0
    assert capsys.readouterr().out == a and "0 01111 0000000000" in a  # 1.0 in fp16, by hand
