"""The ``fpsim`` command (installed with the package): ``fpsim demo NAME [ARGS]``, or
``fpsim NAME [ARGS]`` for short -- the same demos as ``python -m fpsim.demo``.

    fpsim demo underflow        # what `make demo` runs
    fpsim bits 0.1 1/3          # a value's bits in several formats
    fpsim explore               # the bit explorer in the browser (fpsim.explore)
    fpsim --list                # the demos
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fpsim [demo] NAME [ARGS]`` or ``fpsim explore [--port N] [--no-browser]``; return
    the exit status (2 for usage errors)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["explore"]:
        from .explore.__main__ import main as explore_main

        return explore_main(args[1:])
    if args[:1] == ["demo"]:
        args = args[1:]
    from .demo.__main__ import main as demo_main

    return demo_main(args)


if __name__ == "__main__":
    sys.exit(main())
