"""A non-editable install carries the explorer's page: the wheel built from the source tree
holds fpsim/explore/static/*, and the installed copy serves it.

The wheel is built offline (``pip wheel --no-build-isolation``, with the setuptools of the test
extra) from a copy of the tree, so nothing is written into the checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STATIC = sorted(p.name for p in (ROOT / "fpsim" / "explore" / "static").iterdir() if p.is_file())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed (it comes with the test extra)")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "fpsim", src / "fpsim",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc"))  # fmt: skip
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("fpsim_bits-*.whl")
    return whl


def test_wheel_holds_the_page(wheel):
    assert STATIC == ["explore.css", "explore.js", "index.html"]
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in STATIC:
        assert f"fpsim/explore/static/{name}" in names
    assert "fpsim/explore/api.py" in names and "fpsim/explore/server.py" in names


def test_installed_copy_serves_the_page(wheel, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    code = (
        "import json, urllib.request, fpsim, fpsim.explore as e\n"
        "s = e.make_server(0); s.start_background()\n"
        "page = urllib.request.urlopen(s.url).read()\n"
        "js = urllib.request.urlopen(s.url + 'static/explore.js').read()\n"
        "print(json.dumps([fpsim.__file__, len(page), len(js)]))\n"
        "s.shutdown()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    where, n_page, n_js = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(where).is_relative_to(target)  # the installed copy, not the checkout
    assert n_page == (ROOT / "fpsim/explore/static/index.html").stat().st_size
    assert n_js == (ROOT / "fpsim/explore/static/explore.js").stat().st_size
