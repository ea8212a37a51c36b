"""Test collection for the whole repository: without PyTorch (an optional extra), the modules
that import it are not collected for their doctests (their tests skip on their own)."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else [
    "fpsim/torch/*",
    "fpsim/demo/torch_model.py",
]
