"""``fpsim explore``: a bit explorer in the browser, for every format, computed by fpsim.

A local web page in the spirit of Float Toy and float.exposed, for every format fpsim models:
click the bits of a value, type a number and see where it lands in every rounding mode (and
with which probability under stochastic rounding), list all values of a small format on a number
line, compute ``a op b`` with :func:`fpsim.explain_op`'s account, and move a loss scale over a
distribution of gradient magnitudes against the format's zones.

Every number on the page is computed by the server's fpsim calls (:mod:`fpsim.explore.api`,
a small JSON API; see the README), so the page and the library cannot disagree. The server
(:mod:`fpsim.explore.server`, standard library only) binds to 127.0.0.1.

    fpsim explore                 # a free port, printed; opens the page in a browser
    python -m fpsim.explore --port 8765 --no-browser

>>> from fpsim.explore import api
>>> api.call("code", {"format": "fp16", "code": "0x3c00"})["decimal"]
'1'
"""

from __future__ import annotations

from .api import ApiError, call
from .server import ExplorerServer, make_server

__all__ = ["ApiError", "call", "ExplorerServer", "make_server", "serve"]


def serve(port: int = 0, open_browser: bool = True, verbose: bool = False) -> None:
    """Serve the explorer on 127.0.0.1:``port`` (0: a free one) until interrupted; print its
    address and open it in the default browser unless ``open_browser`` is False."""
    import threading
    import webbrowser

    from .__main__ import warm_up

    server = make_server(port, verbose)
    print(f"fpsim explore: serving on {server.url}  (Ctrl-C to stop)", flush=True)
    # Compile (or load from numba's cache) the kernels the first request needs, off the
    # request path, while the browser starts.
    threading.Thread(target=warm_up, daemon=True).start()
    if open_browser:
        threading.Timer(0.3, webbrowser.open, args=(server.url,)).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nfpsim explore: stopped", flush=True)
    finally:
        server.server_close()
