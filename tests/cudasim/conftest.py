"""Setup for the CUDA kernel tests: numba's CUDA simulator unless told otherwise.

numba decides once, when ``numba.cuda`` is first imported, whether ``numba.cuda`` is the real
GPU target or the simulator (which runs kernels as plain Python on the CPU). So this directory is
run in its own pytest process, and this file sets ``NUMBA_ENABLE_CUDASIM=1`` before anything
imports ``numba.cuda`` -- unless the variable is already set, so that on a GPU machine

    NUMBA_ENABLE_CUDASIM=0 python -m pytest tests/cudasim

runs the very same tests on the real GPU. The main suite runs with ``--ignore=tests/cudasim``.
"""

import os
import sys

import pytest

if not os.environ.get("NUMBA_ENABLE_CUDASIM"):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

_WANT_SIM = os.environ["NUMBA_ENABLE_CUDASIM"] not in ("0", "")

if "numba.cuda" in sys.modules:  # imported before this file ran: the choice is already made
    _cfg = getattr(sys.modules["numba.cuda"], "config", None)
    if _cfg is not None and bool(getattr(_cfg, "ENABLE_CUDASIM", 0)) != _WANT_SIM:
        pytest.exit(
            "numba.cuda was imported before tests/cudasim/conftest.py could set "
            "NUMBA_ENABLE_CUDASIM; run tests/cudasim in its own pytest process",
            returncode=4,
        )


def pytest_collection_modifyitems(config, items):
    """Without the simulator and without a usable GPU, skip (rather than fail) every test."""
    if _WANT_SIM:
        return
    try:
        from numba import cuda

        ok, why = cuda.is_available(), "no usable CUDA GPU (NUMBA_ENABLE_CUDASIM=0)"
    except ImportError as exc:
        ok, why = False, f"numba.cuda unavailable: {exc}"
    if not ok:
        skip = pytest.mark.skip(reason=why)
        for item in items:
            if "cudasim" in str(item.fspath):
                item.add_marker(skip)
