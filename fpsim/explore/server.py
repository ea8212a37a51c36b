"""The explorer's HTTP server: the page's static files and the JSON API, on the loopback only.

Standard library only (``http.server.ThreadingHTTPServer``): nothing to install, nothing to
build. The server binds to 127.0.0.1, answers only requests addressed to it by that name (or
``localhost``: a check against DNS rebinding), caps what it reads (the request line and headers
by http.server, a POST body at :data:`MAX_BODY` bytes) and answers every bad request with a 4xx
status and a JSON ``{"error": message}``.

``GET /`` is the page, ``GET /static/NAME`` its files, ``GET /api/ENDPOINT?name=value&...`` or
``POST /api/ENDPOINT`` with a JSON object of the same parameters calls
:func:`fpsim.explore.api.call`.
"""

from __future__ import annotations

import json
import mimetypes
import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from . import api

__all__ = ["ExplorerServer", "make_server", "STATIC_FILES", "MAX_BODY", "MAX_URL"]

MAX_BODY = 16 * 1024  # bytes of a POST body (parameters are a few short strings)
MAX_URL = 4096  # characters of a request path with its query
HOST = "127.0.0.1"


def _static_files() -> dict[str, bytes]:
    """The page's files, shipped as package data (fpsim/explore/static), by name."""
    root = resources.files("fpsim.explore") / "static"
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}


STATIC_FILES = _static_files()
_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}

# The page runs only its own files: no inline script, nothing from elsewhere.
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class _Handler(BaseHTTPRequestHandler):
    server: ExplorerServer
    server_version = "fpsim-explore"
    protocol_version = "HTTP/1.1"
    timeout = 30  # seconds to wait for a slow client

    # ---- plumbing ---------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in _SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message, "status": status})

    def _host_ok(self) -> bool:
        """Only requests addressed to this server by its loopback name: a page elsewhere
        that makes a browser resolve its own name to 127.0.0.1 (DNS rebinding) is refused."""
        host = (self.headers.get("Host") or "").strip().lower()
        port = self.server.server_address[1]
        return host in {f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.1", "localhost"}

    # ---- requests -----------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "unexpected Host header; use 127.0.0.1")
        if len(self.path) > MAX_URL:
            return self._error(HTTPStatus.REQUEST_URI_TOO_LONG,
                               f"request too long (at most {MAX_URL} characters)")  # fmt: skip
        url = urlsplit(self.path)
        path = url.path
        if path in ("/", "/index.html"):
            return self._send(HTTPStatus.OK, STATIC_FILES["index.html"], _TYPES[".html"])
        if path.startswith("/static/"):
            name = path[len("/static/") :]
            body = STATIC_FILES.get(name)  # only the shipped files, by exact name
            if body is None:
                return self._error(HTTPStatus.NOT_FOUND, f"no file {name!r}")
            ext = name[name.rfind(".") :]
            ctype = _TYPES.get(ext) or mimetypes.guess_type(name)[0] or "application/octet-stream"
            return self._send(HTTPStatus.OK, body, ctype)
        if path.startswith("/api/"):
            pairs = parse_qsl(url.query, keep_blank_values=True, max_num_fields=32)
            params: dict[str, str] = {}
            for k, v in pairs:
                if k in params:
                    return self._error(HTTPStatus.BAD_REQUEST, f"parameter {k!r} given twice")
                params[k] = v
            return self._api(path[len("/api/") :], params)
        if path == "/favicon.ico":
            return self._send(HTTPStatus.NO_CONTENT, b"", "text/plain")
        return self._error(HTTPStatus.NOT_FOUND, f"no page {path!r}")

    def do_POST(self) -> None:
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "unexpected Host header; use 127.0.0.1")
        path = urlsplit(self.path).path
        if not path.startswith("/api/"):
            return self._error(HTTPStatus.METHOD_NOT_ALLOWED, "POST goes to /api/ENDPOINT")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self._error(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
        if length < 0 or length > MAX_BODY:
            self.close_connection = True  # the unread body must not be read as a request
            why = f"request body too large ({length} bytes; at most {MAX_BODY})"
            return self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, why)
        raw = self.rfile.read(length)
        try:
            params = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return self._error(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}")
        return self._api(path[len("/api/") :], params)

    def _api(self, endpoint: str, params: Any) -> None:
        try:
            answer = api.call(endpoint, params)
        except api.ApiError as exc:
            return self._error(exc.status, exc.message)
        except Exception as exc:  # a bug: say so, keep serving
            if self.server.verbose:
                traceback.print_exc(file=sys.stderr)
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR,
                               f"internal error: {type(exc).__name__}: {exc}")  # fmt: skip
        return self._json(HTTPStatus.OK, answer)


class ExplorerServer(ThreadingHTTPServer):
    """The explorer's server (one thread per request; daemon threads end with the process)."""

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, port: int = 0, verbose: bool = False) -> None:
        self.verbose = verbose
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"

    def start_background(self) -> threading.Thread:
        """Serve in a daemon thread (for tests and notebooks); stop with :meth:`shutdown` and
        :meth:`server_close`."""
        t = threading.Thread(target=self.serve_forever, name="fpsim-explore", daemon=True)
        t.start()
        return t


def make_server(port: int = 0, verbose: bool = False) -> ExplorerServer:
    """A server bound to 127.0.0.1:``port`` (0: a free port, see ``.url``), not yet serving."""
    return ExplorerServer(port, verbose)
