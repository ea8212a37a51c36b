"""Test collection for the whole repository: without PyTorch (an optional extra), the modules
that import it are not collected for their doctests (their tests skip on their own)."""

import importlib.util


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


collect_ignore_glob = [] if _installed("torch") else ["fpsim/torch/*", "fpsim/demo/torch_model.py"]
