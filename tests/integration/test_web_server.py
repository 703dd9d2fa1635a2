"""The web server as deployed (serve.py: granian), started for real on a loopback port.

What granian does differently from the test suite's werkzeug server, checked where it
matters: each WSGI environ is built from a copy of the process environment (serve.py drops
it), connections are kept alive between requests, and an oversized upload is refused from
its declared length without being read.
"""
from __future__ import annotations

import socket

import httpx

from models import db
from tests.slow_clients import read_response

SECRET = "process-secret-0123456789"


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
            status, _headers, body = read_response(sock)
            answers.append((status, body))
    assert [status for status, _body in answers] == [200, 200]
    assert all(b'"db":"ok"' in body.replace(b" ", b"") for _status, body in answers)
    with httpx.Client(base_url=base, timeout=10) as client:
        login = client.get("/login")
        assert login.status_code == 200 and 'name="csrf_token"' in login.text
        # A body over the request limit (2 MB) gets a clear refusal, not a 500.
        refused = client.post("/api/progress", content=b"{" + b" " * app.config["MAX_CONTENT_LENGTH"] + b"}",
                              headers={"Authorization": "Bearer spt_" + "a" * 40, "Content-Type": "application/json"})
        assert refused.status_code in (401, 413) and "Traceback" not in refused.text
