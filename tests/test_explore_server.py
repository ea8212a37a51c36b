"""The explorer's HTTP server: loopback only, the page and its files, the JSON API through
HTTP (GET and POST), 4xx with a JSON message for every bad request, request-size caps, and
the commands that start it (``python -m fpsim.explore``, ``fpsim explore``)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.parse
from fractions import Fraction

import numpy as np
import pytest

import fpsim
from fpsim import explore
from fpsim.explore import server as srv


@pytest.fixture(scope="module")
def live():
    s = explore.make_server(0)
    s.start_background()
    yield s
    s.shutdown()
    s.server_close()


def request(s, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", s.server_address[1], timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def get_json(s, endpoint: str, **params):
    status, headers, body = request(s, "GET", f"/api/{endpoint}?{urllib.parse.urlencode(params)}")
    assert headers["Content-Type"].startswith("application/json")
    return status, json.loads(body)


def test_binds_to_loopback_on_a_free_port(live):
    host, port = live.server_address
    assert host == "127.0.0.1" and port > 0
    assert live.url == f"http://127.0.0.1:{port}/"


def test_page_and_static_files(live):
    status, headers, body = request(live, "GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="/static/explore.js"' in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    for name, ctype in (("explore.js", "text/javascript"), ("explore.css", "text/css")):
        status, headers, body = request(live, "GET", f"/static/{name}")
        assert status == 200 and headers["Content-Type"].startswith(ctype) and len(body) > 1000
    # nothing but the shipped files, by exact name
    for path in ("/static/../api.py", "/static/%2e%2e/api.py", "/static/nope.js", "/api.py"):
        status, _, body = request(live, "GET", path)
        assert status == 404 and "error" in json.loads(body)


def test_api_by_get_and_post_agree_with_round_to(live):
    status, r = get_json(live, "round", format="fp16", x="1/3", rounding="up")
    assert status == 200
    want = fpsim.round_to(Fraction(1, 3), "fp16", "up")
    assert float(r["result"]["stored"]) == want == float(np.float16(0.33349609375))
    body = json.dumps({"format": "fp16", "x": "1/3", "rounding": "up"}).encode()
    status, headers, raw = request(live, "POST", "/api/round", body, {"Content-Type": "application/json"})
    assert status == 200 and json.loads(raw) == r
    # a JSON number is read as the text it was written as: 0.1 is one tenth, not its float64
    # (which lies above one tenth: rounding one tenth down gives the float64 below it)
    body = json.dumps({"format": "fp64", "x": 0.1, "rounding": "down"}).encode()
    status, _, raw = request(live, "POST", "/api/round", body)
    assert float(json.loads(raw)["result"]["stored"]) == float(np.nextafter(0.1, 0.0))


BAD_HTTP = [
    ("/api/round?format=fp16&x=0.1.2", 400, "not a number"),
    ("/api/round?" + urllib.parse.urlencode({"format": "Format(40, 3)", "x": "1"}), 400, "exp_bits must be in 1..11"),
    ("/api/values?format=fp16", 400, "at most 8 bits"),
    ("/api/round?format=fp16&x=2**-99999", 400, "too large or too small"),
    ("/api/round?format=fp16&x=1&x=2", 400, "given twice"),
    ("/api/nosuch", 404, "unknown endpoint"),
    ("/nosuch", 404, "no page"),
    ("/api/round?format=fp16&x=" + "1" * 5000, 414, "request too long"),
]


@pytest.mark.parametrize("path,status,message", BAD_HTTP)
def test_bad_requests_get_4xx_and_a_json_message(live, path, status, message):
    got, headers, body = request(live, "GET", path)
    assert got == status
    r = json.loads(body)
    assert message in r["error"] and r["status"] == status


def test_post_caps_and_malformed_bodies(live):
    big = json.dumps({"format": "fp16", "x": "1" * (srv.MAX_BODY + 10)}).encode()
    status, _, body = request(live, "POST", "/api/round", big)
    assert status == 413 and "too large" in json.loads(body)["error"]
    status, _, body = request(live, "POST", "/api/round", b"{not json")
    assert status == 400 and "not JSON" in json.loads(body)["error"]
    status, _, body = request(live, "POST", "/api/round", b"[1, 2]")
    assert status == 400 and "JSON object" in json.loads(body)["error"]
    status, _, body = request(live, "POST", "/", b"{}")
    assert status == 405


def test_foreign_host_header_is_refused(live):
    """A page elsewhere that points its own name at 127.0.0.1 (DNS rebinding) gets nothing."""
    status, _, body = request(live, "GET", "/api/formats", headers={"Host": "evil.example:80"})
    assert status == 403 and "Host" in json.loads(body)["error"]
    status, _, _ = request(live, "GET", "/api/formats", headers={"Host": f"localhost:{live.server_address[1]}"})
    assert status == 200


def test_a_bug_is_a_500_with_a_message_and_the_server_keeps_serving(live, monkeypatch):
    def broken(params):
        raise RuntimeError("boom")

    monkeypatch.setitem(srv.api.ENDPOINTS, "formats", broken)
    status, r = get_json(live, "formats")
    assert status == 500 and "RuntimeError: boom" in r["error"]
    monkeypatch.undo()
    assert get_json(live, "formats")[0] == 200


def test_concurrent_requests(live):
    results = []

    def one(i):
        results.append(get_json(live, "code", format="fp16", code=str(i))[1]["stored"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(0x3C00, 0x3C10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = {repr(float(v)) for v in np.arange(0x3C00, 0x3C10, dtype=np.uint16).view(np.float16)}
    assert set(results) == want


def test_serve_prints_the_address_and_opens_the_browser(monkeypatch, capsys):
    opened, made = [], []
    real = explore.make_server

    def recording(port=0, verbose=False):
        s = real(port, verbose)
        made.append(s)
        return s

    monkeypatch.setattr("fpsim.explore.make_server", recording)
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url))
    monkeypatch.setattr("fpsim.explore.__main__.warm_up", lambda: None)
    t = threading.Thread(target=explore.serve, kwargs={"port": 0}, daemon=True)
    t.start()
    for _ in range(200):
        if made and opened:
            break
        threading.Event().wait(0.05)
    made[0].shutdown()
    t.join(10)
    assert opened == [made[0].url]
    assert f"serving on {made[0].url}" in capsys.readouterr().out


def _start(cmd: list[str]):
    env = dict(os.environ, PYTHONIOENCODING="utf-8", PYTHONUNBUFFERED="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()
    return p, line


@pytest.mark.parametrize("how", ["module", "console"])
def test_command_line_starts_a_server(how):
    script = os.path.join(os.path.dirname(sys.executable), "fpsim")
    if how == "console" and not os.path.exists(script):
        pytest.skip("package not installed with its scripts")
    cmd = ([sys.executable, "-m", "fpsim.explore"] if how == "module" else [script, "explore"])
    p, line = _start([*cmd, "--no-browser"])
    try:
        assert line.startswith("fpsim explore: serving on http://127.0.0.1:"), line
        url = urllib.parse.urlsplit(line.split("serving on ")[1].split()[0])
        conn = http.client.HTTPConnection("127.0.0.1", url.port, timeout=120)
        conn.request("GET", "/api/code?format=fp16&code=15360")
        r = json.loads(conn.getresponse().read())
        assert r["decimal"] == "1"  # 0x3c00 is fp16's 1.0
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "stopped" in out


def test_command_line_usage_errors():
    r = subprocess.run([sys.executable, "-m", "fpsim.explore", "--port", "99999"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "--port must be in 0..65535" in r.stderr
    r = subprocess.run([sys.executable, "-m", "fpsim.explore", "--help"], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and "--no-browser" in r.stdout and "127.0.0.1" in r.stdout


def test_a_taken_port_is_reported():
    s = explore.make_server(0)
    try:
        r = subprocess.run([sys.executable, "-m", "fpsim.explore", "--no-browser", "--port",
                            str(s.server_address[1])], capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    finally:
        s.server_close()
    assert r.returncode == 1 and "cannot serve on port" in r.stderr
