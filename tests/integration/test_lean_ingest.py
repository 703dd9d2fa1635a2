"""The lean ingest layer (front/lean_ingest.py): an ordinary progress post answered in
front of Flask with the view's own answer and one statement; everything else reaches the
view unchanged."""
from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa
from flask import Flask
from werkzeug.test import Client

from front import lean_ingest
from models import Pod, PodProgressPost, db
from services.core import redis_store
from tests.integration.queries import counting_queries

SECURITY_HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy", "X-Frame-Options")


@pytest.fixture
def pod(make_live_pod):
    live = make_live_pod("Lean ingest")
    return live.id, live.secret


def _layer(app) -> lean_ingest.LeanIngest:
    """The LeanIngest inside the app's middleware chain."""
    layer = app.wsgi_app
    while not isinstance(layer, lean_ingest.LeanIngest):
        layer = layer.wsgi_app
    return layer


@pytest.fixture
def reached_flask(app, monkeypatch):
    """The requests the layer passed on to Flask (their paths)."""
    layer = _layer(app)
    inner = layer.wsgi_app
    passed: list[str] = []

    def counting(environ, start_response):
        passed.append(environ["PATH_INFO"])
        return inner(environ, start_response)

    monkeypatch.setattr(layer, "wsgi_app", counting)
    return passed


def send(client, secret, body, content_type="application/json"):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post("/api/progress", data=data, headers={"Authorization": f"Bearer {secret}",
                                                             "Content-Type": content_type})


def flask_only(app) -> Client:
    """A client of the Flask app itself, without any middleware in front of it."""
    return Client(lambda environ, start_response: Flask.wsgi_app(app, environ, start_response))


def test_an_ordinary_post_gets_the_views_exact_answer_in_one_statement(app, client, pod, reached_flask):
    """Does the layer answer an ordinary post itself, with one SQL statement once it knows
    the token (the first post of a pod looks the token up first), and with the same status,
    headers and body as the view answers the same kind of post?"""
    pod_id, secret = pod
    with counting_queries() as statements:
        first = send(client, secret, {"progressPct": 30, "message": "epoch 3", "seq": 3})
    assert first.status_code == 200 and reached_flask == [] and len(statements) == 2
    with counting_queries() as statements:
        lean = send(client, secret, {"progressPct": 40, "message": "epoch 4", "seq": 4, "metrics": {"loss": 0.3}})
    assert reached_flask == [] and len(statements) == 1
    viewed = send(flask_only(app), secret, {"progressPct": 50, "message": "epoch 5", "seq": 5})
    assert lean.status_code == viewed.status_code == 200
    assert dict(lean.headers) == dict(viewed.headers)
    for name in SECURITY_HEADERS:
        assert lean.headers[name]
    body = lean.get_json()
    assert body["ok"] is True and body["duplicate"] is False and uuid.UUID(body["id"])
    assert set(body) == set(viewed.get_json())
    # A repeated (pod, seq): a duplicate, byte for byte the view's answer to one.
    again = send(client, secret, {"progressPct": 40, "message": "epoch 4", "seq": 4})
    viewed_again = send(flask_only(app), secret, {"progressPct": 40, "message": "epoch 4", "seq": 4})
    assert again.get_data() == viewed_again.get_data() == b'{"duplicate":true,"id":null,"ok":true}\n'
    assert reached_flask == []
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(PodProgressPost.id))) == 3  # seq 3, 4 and 5
        row = db.session.get(Pod, pod_id)
        assert row.progress_pct == 50 and row.progress_message == "epoch 5" and row.progress_seq == 5


def test_the_layer_redacts_and_keeps_the_newest_seq(app, client, pod, reached_flask):
    """The same parser and redactor as the view: a key in the message is not stored, and an
    older seq arriving late does not replace the progress shown."""
    pod_id, secret = pod
    assert send(client, secret, {"progressPct": 70, "message": "using sk-ant-abcdefgh12345678", "seq": 9}).status_code == 200
    assert send(client, secret, {"progressPct": 10, "message": "late", "seq": 2}).status_code == 200
    assert reached_flask == []
    with app.app_context():
        row = db.session.get(Pod, pod_id)
        assert row.progress_pct == 70 and "sk-ant-" not in row.progress_message and "[REDACTED]" in row.progress_message


def test_an_unknown_token_reaches_the_view_which_answers_401_and_counts_it(app, client, pod, reached_flask):
    unknown = "spt_" + "u" * 43
    response = send(client, unknown, {"progressPct": 1, "seq": 1})
    assert response.status_code == 401 and response.get_json()["error"] == "invalid_pod_token"
    assert reached_flask == ["/api/progress"]
    with app.app_context():
        assert int(redis_store.connection().get("sagan:bearer-failures:127.0.0.1") or 0) == 1
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(PodProgressPost.id))) == 0


@pytest.mark.parametrize("body,content_type,status", [
    (b"{nope", "application/json", 400),
    (json.dumps({"progressPct": 500}), "application/json", 400),
    (json.dumps({"progressPct": 5, "colour": "red"}), "application/json", 400),
    (json.dumps({"progressPct": 5, "seq": 1}), "text/plain", 200),  # the view takes any type
])
def test_other_bodies_reach_the_view_unchanged(app, client, pod, reached_flask, body, content_type, status):
    """A body the layer does not take is read by the view as it was sent."""
    _, secret = pod
    response = send(client, secret, body, content_type)
    assert response.status_code == status, response.get_data()
    assert reached_flask == ["/api/progress"]


def test_an_oversized_body_reaches_the_view_and_is_413(app, client, pod, reached_flask):
    _, secret = pod
    big = json.dumps({"progressPct": 5, "message": "x" * (app.config["MAX_CONTENT_LENGTH"] + 10)})
    response = send(client, secret, big)
    assert response.status_code == 413 and reached_flask == ["/api/progress"]


def test_a_large_but_allowed_body_reaches_the_view(app, client, pod, reached_flask):
    """Past the layer's small-body cap (not the request limit): the view's path, still stored."""
    _, secret = pod
    body = {"progressPct": 5, "message": "m" * 1500, "seq": 3,
            "metrics": {f"metric-{i}-" + "n" * 60: i for i in range(50)}}
    padded = json.dumps(body) + " " * lean_ingest.LEAN_BODY_MAX
    assert send(client, secret, padded).status_code == 200 and reached_flask == ["/api/progress"]


def test_an_exit_post_and_a_bootstrap_post_reach_the_view_and_its_watcher(app, client, pod, reached_flask):
    pod_id, secret = pod
    assert send(client, secret, {"progressPct": 30, "message": "bootstrap complete", "seq": 1}).status_code == 200
    assert send(client, secret, {"progressPct": 100, "message": "finished", "seq": 2, "exitCode": 0}).status_code == 200
    assert reached_flask == ["/api/progress", "/api/progress"]
    with app.app_context():
        row = db.session.get(Pod, pod_id)
        assert row.bootstrap_count == 1 and row.exit_code == 0
        assert row.status == "exited"  # watcher.after_progress ran for the exit post


def test_a_query_string_or_a_missing_token_reaches_the_view(app, client, pod, reached_flask):
    _, secret = pod
    assert client.post("/api/progress?x=1", json={"progressPct": 1}, headers={
        "Authorization": f"Bearer {secret}"}).status_code == 200
    assert client.post("/api/progress", json={"progressPct": 1}).status_code == 401
    assert reached_flask == ["/api/progress", "/api/progress"]


def test_a_failed_statement_reaches_the_view(app, client, pod, reached_flask, monkeypatch):
    """A database error in the layer is not its answer: the view runs the post itself."""
    from services.dispatch import progress

    def broken(*_args, **_kwargs):
        raise sa.exc.OperationalError("SELECT", {}, Exception("connection lost"))

    monkeypatch.setattr(progress, "lean_connection", broken)
    _, secret = pod
    assert send(client, secret, {"progressPct": 1, "seq": 1}).get_json()["duplicate"] is False
    assert reached_flask == ["/api/progress"]


def test_the_layer_refuses_to_start_when_the_route_loses_its_rule(app, monkeypatch):
    view = app.view_functions["progress.post_progress"]
    monkeypatch.setattr(view, "access_rule", ("public", None))
    with pytest.raises(RuntimeError, match="lean_ingest"):
        lean_ingest.LeanIngest(app, app.wsgi_app)
    monkeypatch.setattr(view, "access_rule", ("pod", None))
    monkeypatch.setattr(view, "pod_token_in_write", False)
    with pytest.raises(RuntimeError, match="lean_ingest"):
        lean_ingest.LeanIngest(app, app.wsgi_app)
