"""The web server as deployed (serve.py: granian), started for real on a loopback port.

What granian does differently from the test suite's werkzeug server, checked where it
matters: each WSGI environ is built from a copy of the process environment (serve.py drops
it), connections are kept alive between requests, and an oversized upload is refused from
its declared length without being read.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

import serve
from models import db
from tests.processes import stop_process_group

ROOT = Path(__file__).resolve().parents[2]
SECRET = "process-secret-0123456789"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def start_server(tmp_path):
    """Factory: serve `target` with `env` added to this process's environment; its base URL."""
    processes = []

    def start(target: str, **env) -> str:
        port = _free_port()
        argv = serve.command(host="127.0.0.1", port=port, workers=1, threads=2, log_level="warning", target=target)
        process = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "SAGAN_INSTANCE_DIR": str(tmp_path), **env},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        processes.append(process)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail("the web server exited at start: " + process.stderr.read().decode()[-2000:])
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                return base
            except httpx.HTTPError:
                time.sleep(0.2)
        pytest.fail("the web server did not answer within 60 s")

    yield start
    for process in processes:
        stop_process_group(process)


def test_requests_do_not_carry_the_process_environment(start_server):
    base = start_server("tests.fixtures.granian_probe:probe", SECRET_KEY=SECRET, SAGAN_PROBE_TOKEN=SECRET,
                        HTTP_PROXY="http://proxy.internal:3128")
    seen = httpx.get(f"{base}/", headers={"X-Probe": "yes"}, timeout=10).json()
    assert "SECRET_KEY" not in seen["keys"] and "SAGAN_PROBE_TOKEN" not in seen["keys"]
    assert "PATH" not in seen["keys"] and seen["proxy"] is None  # no variable reads as a `Proxy:` header
    assert seen["probe"] == "yes" and "REQUEST_METHOD" in seen["keys"] and "wsgi.input" in seen["keys"]


def test_the_app_keeps_connections_alive_and_refuses_an_oversized_body(app, start_server):
    with app.app_context():
        database_url = db.engine.url.render_as_string(hide_password=False)
    base = start_server("serve:wsgi_app", DATABASE_URL=database_url, REDIS_URL=app.config["REDIS_URL"],
                        SECRET_KEY="web-server-test")
    # Two requests on one connection: both answered (the old sync workers closed it after one).
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        answers = []
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: sagan.test\r\n\r\n")
            answers.append(_read_response(sock))
    assert [status for status, _body in answers] == [200, 200]
    assert all(b'"db":"ok"' in body.replace(b" ", b"") for _status, body in answers)
    with httpx.Client(base_url=base, timeout=10) as client:
        login = client.get("/login")
        assert login.status_code == 200 and 'name="csrf_token"' in login.text
        # A body over the request limit (2 MB) gets a clear refusal, not a 500.
        refused = client.post("/api/progress", content=b"{" + b" " * app.config["MAX_CONTENT_LENGTH"] + b"}",
                              headers={"Authorization": "Bearer spt_" + "a" * 40, "Content-Type": "application/json"})
        assert refused.status_code in (401, 413) and "Traceback" not in refused.text


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length from `sock`: (status, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(":", 1) for line in lines[1:])
    length = int(next(v for k, v in headers.items() if k.strip().lower() == "content-length"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    return int(lines[0].split()[1]), body[:length]
