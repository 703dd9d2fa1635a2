"""Idle and slow clients against the web server as deployed (serve.py: granian, two workers).

A browser keeps up to six connections open per host, so an owner with a laptop and a
phone holds a dozen idle ones; and anyone who can reach the port can start a request body
and never finish it. Neither may stall a request that has nothing to do with them. The
same is checked on `make run` in tests/integration/test_embedded_default.py.
"""
from __future__ import annotations

import json
import time

import pytest

from models import db
from tests.slow_clients import HeldConnections, timed_request

STRANGER = "spt_" + "s" * 43  # the shape of a pod token, and no pod's
# A prompt answer, with room for a loaded 2-core CI machine; the failures these tests
# guard against took 20-30 s or never answered. bench/bench_idle_connections.py measures
# how prompt (under 100 ms with fifty idle connections).
LOADED_MACHINE_SECONDS = 5


def _serve(app, start_server, **env) -> int:
    with app.app_context():
        database_url = db.engine.url.render_as_string(hide_password=False)
    base = start_server("serve:wsgi_app", workers=env.pop("workers", 2), DATABASE_URL=database_url,
                        REDIS_URL=app.config["REDIS_URL"], SECRET_KEY="slow-clients-test", **env)
    return int(base.rsplit(":", 1)[1])


def _progress(secret: str, seq: int) -> tuple[dict, bytes]:
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    return headers, json.dumps({"progressPct": seq, "message": f"step {seq}", "seq": seq}).encode()


@pytest.mark.slow
def test_fifty_idle_connections_leave_room_for_a_new_request(app, start_server):
    """With fifty connections kept alive and idle (eight browsers' worth), does a request on
    a new connection answer at once, and do the idle ones still serve when used again?
    (granian took one of four permits per worker for each connection's whole life: the
    seventh idle connection made every new request wait 20-30 s.)"""
    port = _serve(app, start_server)
    with HeldConnections(port) as held:
        held.idle(50, "/login")
        for path in ("/healthz", "/login"):
            status, seconds, _headers, _body = timed_request(port, "GET", path)
            assert status == 200 and seconds < LOADED_MACHINE_SECONDS, (path, seconds)
        reused = held.sockets[0]
        reused.sendall(b"GET /healthz HTTP/1.1\r\nHost: sagan.test\r\n\r\n")
        assert reused.recv(12) == b"HTTP/1.1 200"


@pytest.mark.slow
def test_half_sent_bodies_leave_pages_polls_and_pods_served(app, start_server, make_live_pod):
    """Thirty requests that promise 15,000 bytes of body and send one, to the login form, the
    progress post and the metric batch, held open: do /healthz, a page, a pod's progress post
    and another client's login still answer promptly? (Eight of them stopped every request,
    /healthz included, for as long as they were held.)"""
    pod = make_live_pod("Slow bodies")
    port = _serve(app, start_server)
    stranger = {"Authorization": f"Bearer {STRANGER}", "Content-Type": "application/json"}
    with HeldConnections(port) as held:
        held.half_sent(10, "POST", "/login", headers={"Content-Type": "application/x-www-form-urlencoded"},
                       source="127.0.0.2")
        held.half_sent(10, "POST", "/api/progress", headers=stranger, source="127.0.0.3")
        held.half_sent(10, "POST", "/api/metrics", headers=stranger, source="127.0.0.4")
        time.sleep(0.5)  # every one of them is in
        for path in ("/healthz", "/login"):
            status, seconds, _headers, _body = timed_request(port, "GET", path)
            assert status == 200 and seconds < LOADED_MACHINE_SECONDS, (path, seconds)
        for seq in (1, 2):
            headers, body = _progress(pod.secret, seq)
            status, seconds, _headers, answer = timed_request(port, "POST", "/api/progress", headers=headers, body=body)
            assert status == 200 and json.loads(answer)["ok"] and seconds < LOADED_MACHINE_SECONDS, (status, answer, seconds)
        form = b"email=someone%40example.com&password=wrong-password&csrf_token=missing"
        status, seconds, _headers, _answer = timed_request(
            port, "POST", "/login", headers={"Content-Type": "application/x-www-form-urlencoded"}, body=form)
        assert status in (200, 400) and seconds < LOADED_MACHINE_SECONDS, (status, seconds)  # an answer, whatever it says


@pytest.mark.slow
def test_a_stranger_token_is_refused_before_its_body(app, start_server):
    """Is a pod post with an unknown token answered 401 without waiting for the body it
    promised — on the lean path (progress), the view's path (metrics) and the artifact upload?"""
    port = _serve(app, start_server, workers=1)
    stranger = {"Authorization": f"Bearer {STRANGER}", "Content-Type": "application/json"}
    artifact = {"Authorization": f"Bearer {STRANGER}", "Content-Type": "text/csv", "X-Sagan-Artifact-Name": "a.csv"}
    with HeldConnections(port) as held:
        for path, headers in (("/api/progress", stranger), ("/api/metrics", stranger), ("/api/artifacts", artifact)):
            [sock] = held.half_sent(1, "POST", path, headers=headers, source="127.0.0.5")
            sock.settimeout(5)
            started = time.perf_counter()
            assert sock.recv(12) == b"HTTP/1.1 401", path
            assert time.perf_counter() - started < 3, path


@pytest.mark.slow
def test_one_client_holds_at_most_its_share_of_body_readers(app, start_server, make_live_pod):
    """Past SAGAN_WEB_BODY_READERS_PER_CLIENT unfinished bodies from one address, is the next
    body from that address refused with 503 (not queued for ever), while another address's
    post is read at once?"""
    pod = make_live_pod("Body reader share")
    port = _serve(app, start_server, workers=1, SAGAN_WEB_BODY_READERS_PER_CLIENT="3")
    with HeldConnections(port) as held:
        held.half_sent(3, "POST", "/login", headers={"Content-Type": "application/x-www-form-urlencoded"},
                       source="127.0.0.6")
        time.sleep(0.5)
        status, seconds, headers, body = timed_request(
            port, "POST", "/login", headers={"Content-Type": "application/x-www-form-urlencoded"},
            body=b"email=x%40example.com&password=y", source="127.0.0.6")
        assert status == 503 and headers.get("retry-after") and 1.5 < seconds < 10, (status, seconds)
        assert b"slow uploads" in body
        headers, body = _progress(pod.secret, 1)
        status, seconds, _headers, _answer = timed_request(port, "POST", "/api/progress", headers=headers, body=body)
        assert status == 200 and seconds < LOADED_MACHINE_SECONDS
