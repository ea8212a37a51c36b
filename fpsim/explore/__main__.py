"""``python -m fpsim.explore [--port N] [--no-browser]`` (also ``fpsim explore``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def warm_up() -> None:
    """One small call of each kind, so that numba's kernels are compiled (or loaded from its
    cache) before the first click: codes of every width (uint8 .. uint64) and each endpoint."""
    from . import api

    for fmt in ("fp16", "fp8_e4m3", "fp32", "fp64"):
        api.call("round", {"format": fmt, "x": "1/3"})
        api.call("neighbours", {"format": fmt, "code": "1"})
    api.call("values", {"format": "fp8_e4m3"})
    api.call("arith", {"format": "fp16", "a": "1", "op": "+", "b": "2**-11"})
    api.call("lossscale", {"format": "fp16"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fpsim explore",
        description="A bit explorer in the browser for every fpsim format. The server listens "
        "on 127.0.0.1 only.",
    )
    parser.add_argument("--port", type=int, default=0,
                        help="port on 127.0.0.1 (default: a free one, printed)")  # fmt: skip
    parser.add_argument("--no-browser", action="store_true",
                        help="do not open the page in a browser")  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="log every request")
    ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not 0 <= ns.port <= 65535:
        parser.error(f"--port must be in 0..65535, got {ns.port}")
    from . import serve

    try:
        serve(ns.port, open_browser=not ns.no_browser, verbose=ns.verbose)
    except OSError as exc:  # the port is taken, ...
        print(f"fpsim explore: cannot serve on port {ns.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
