"""Integration fixtures: a live HTTP server for clients that speak real HTTP (the CLI)."""
from __future__ import annotations

import threading

import pytest
from werkzeug.serving import make_server


@pytest.fixture
def live_server(app):
    """The app served over real HTTP on a free loopback port for the test's duration."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_port}"
    yield server
    server.shutdown()
    thread.join(timeout=5)
