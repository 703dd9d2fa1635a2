"""POST /api/progress and /api/artifacts: the pod token, idempotency, caps, every bad form."""
from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import AgentRun, Artifact, Pod, PodProgressPost, RunEvent, WorkflowEvent, db
from services.core import clock
from services.dispatch import tokens
from services.workflow import runs


@pytest.fixture
def pod(make_live_pod):
    """A running pod with its token: returns (pod id, secret, experiment number)."""
    live = make_live_pod("Ingest")
    return live.id, live.secret, live.number


def post(client, secret, body=None, **kwargs):
    return client.post("/api/progress", headers={"Authorization": f"Bearer {secret}"}, json=body, **kwargs)


def test_progress_updates_pod_timeline_and_run(app, client, pod):
    """A post updates the pod, appears as "<pct>% · <message>" and as a pod_progress run event."""
    pod_id, secret, number = pod
    response = post(client, secret, {"progressPct": 42.5, "message": "epoch 4/10", "seq": 1,
                                     "metrics": {"loss": 0.31}})
    assert response.status_code == 200 and response.get_json()["ok"] is True
    with app.app_context():
        row = db.session.get(Pod, pod_id)
        assert row.progress_pct == 42.5 and row.progress_message == "epoch 4/10" and row.last_heartbeat_at
        event = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.event_type == "progress"))
        assert event.note == "42.5% · epoch 4/10" and event.actor_kind == "pod"
        assert runs.events_after(row.agent_run_id)[-1].event_type == "pod_progress"


def test_same_seq_is_stored_once(app, client, pod):
    """Retries with the same (pod, seq) store one post; a post without seq is always kept."""
    pod_id, secret, _ = pod
    for _ in range(3):
        assert post(client, secret, {"progressPct": 10, "message": "x", "seq": 7}).status_code == 200
    assert post(client, secret, {"progressPct": 10, "message": "x", "seq": 7}).get_json()["duplicate"] is True
    post(client, secret, {"progressPct": 11, "message": "no seq"})
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(PodProgressPost.id))) == 2
        assert db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id)).where(
            WorkflowEvent.event_type == "progress")) == 2


@pytest.mark.parametrize("body,field", [
    ({"message": "no pct"}, "progressPct"), ({"progressPct": 101}, "progressPct"),
    ({"progressPct": -1}, "progressPct"), ({"progressPct": "50"}, "progressPct"),
    ({"progressPct": True}, "progressPct"), ({"progressPct": 5, "message": "x" * 2001}, "message"),
    ({"progressPct": 5, "seq": -1}, "seq"), ({"progressPct": 5, "seq": "1"}, "seq"),
    ({"progressPct": 5, "exitCode": 1.5}, "exitCode"),
    ({"progressPct": 5, "metrics": {f"m{i}": i for i in range(51)}}, "metrics"),
    ({"progressPct": 5, "metrics": {"loss": "low"}}, "metrics"), ({"progressPct": 5, "colour": "red"}, "colour"),
])
def test_bad_progress_bodies_are_400_and_change_nothing(app, client, pod, body, field):
    """Each malformed post gets a 400 naming the field; nothing is stored."""
    _, secret, _ = pod
    response = post(client, secret, body)
    assert response.status_code == 400
    assert response.get_json()["field"] == field
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(PodProgressPost.id))) == 0


def test_invalid_json_and_missing_or_wrong_tokens(app, client, pod):
    """Invalid JSON is 400; no token, an API token, an unknown token are 401."""
    _, secret, _ = pod
    bad = client.post("/api/progress", data="{nope", headers={"Authorization": f"Bearer {secret}",
                                                               "Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.get_json()["error"] == "invalid_json"
    assert client.post("/api/progress", json={"progressPct": 1}).status_code == 401
    assert post(client, "spt_unknown0000000000000000", {"progressPct": 1}).status_code == 401
    assert post(client, "sk_not_a_pod_token_000000000", {"progressPct": 1}).status_code == 401


def test_token_expires_fifteen_minutes_after_the_pod_stops(app, client, pod):
    """A stopped pod's token works within the grace period and is refused after it."""
    pod_id, secret, _ = pod
    with app.app_context():
        row = db.session.get(Pod, pod_id)
        row.status, row.stopped_at = "stopped", clock.utcnow()
        db.session.commit()
    assert post(client, secret, {"progressPct": 100, "message": "late", "seq": 1}).status_code == 200
    clock.advance(timedelta(minutes=16))
    response = post(client, secret, {"progressPct": 100, "message": "too late", "seq": 2})
    assert response.status_code == 401 and response.get_json()["error"] == "invalid_pod_token"


def test_a_pod_token_reaches_nothing_else(client, pod):
    """A pod token opens only its progress and artifact posts."""
    _, secret, number = pod
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.get(f"/api/experiments/{number}", headers=auth).status_code == 401
    assert client.get("/api/runs", headers=auth).status_code == 401
    assert client.get("/", headers=auth).status_code == 302


def upload(client, secret, name, data, content_type="application/json"):
    return client.post("/api/artifacts", data=data, headers={
        "Authorization": f"Bearer {secret}", "X-Sagan-Artifact-Name": name, "Content-Type": content_type})


def test_artifact_upload_stored_and_replaced(app, client, pod):
    """An upload is stored with size and hash; the same name again replaces it."""
    _, secret, _ = pod
    first = upload(client, secret, "results/metrics.json", b'{"a": 1}')
    assert first.status_code == 201 and first.get_json()["size"] == 8
    upload(client, secret, "results/metrics.json", b'{"a": 2}')
    with app.app_context():
        rows = list(db.session.scalars(sa.select(Artifact)))
        assert len(rows) == 1 and rows[0].content == b'{"a": 2}'


@pytest.mark.parametrize("name,status", [
    ("../etc/passwd.txt", 400), ("/abs/path.json", 400), ("a//b.json", 400), ("", 400),
    ("model.bin", 400), ("noextension", 400), ("x" * 501 + ".txt", 400),
])
def test_bad_artifact_names_and_types(app, client, pod, name, status):
    """Traversal, absolute paths, unknown types and over-long names are refused, nothing stored."""
    _, secret, _ = pod
    assert upload(client, secret, name, b"data", "text/plain").status_code == status
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Artifact.id))) == 0


def test_artifact_size_caps(app, client, pod, monkeypatch):
    """A file over the per-file cap, or over the pod's total, is a 413; others still upload."""
    _, secret, _ = pod
    monkeypatch.setitem(app.config, "ARTIFACT_MAX_BYTES", 1000)
    monkeypatch.setitem(app.config, "ARTIFACT_POD_MAX_BYTES", 1500)
    too_big = upload(client, secret, "big.txt", b"x" * 1001, "text/plain")
    assert too_big.status_code == 413 and "1,001 bytes; the limit here is 1,000" in too_big.get_json()["message"]
    assert upload(client, secret, "a.txt", b"x" * 900, "text/plain").status_code == 201
    assert upload(client, secret, "b.txt", b"x" * 900, "text/plain").status_code == 413
    assert upload(client, secret, "a.txt", b"x" * 950, "text/plain").status_code == 201  # replacing fits


def test_secrets_in_uploaded_text_are_redacted(app, client, pod):
    """A log that echoes a token is stored without it."""
    _, secret, _ = pod
    upload(client, secret, "train.log", b"starting\nRUNPOD_API_KEY=rpa_ABCDEFGHIJKLMNOPQRSTUV\n", "text/plain")
    with app.app_context():
        stored = db.session.scalar(sa.select(Artifact.content))
        assert b"rpa_ABCDEFGHIJKLMNOPQRSTUV" not in stored and b"[REDACTED]" in stored


def test_secrets_in_progress_text_and_metric_names_are_redacted(app, client, pod):
    """A message or a metric name that carries a token is stored without it; plain names stay."""
    _, secret, _ = pod
    leaked = "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    response = post(client, secret, {"progressPct": 10, "message": f"login with {leaked}", "seq": 1,
                                     "metrics": {"loss": 0.5, leaked: 0.9}})
    assert response.status_code == 200
    with app.app_context():
        event = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.event_type == "progress"))
        posted = db.session.scalar(sa.select(PodProgressPost.metrics))
        stored = json.dumps(event.metadata_) + event.note + json.dumps(posted)
        assert leaked not in stored and "[REDACTED]" in stored
        assert event.metadata_["metrics"]["loss"] == 0.5


def test_run_record_still_has_no_dispatch_duplicates(app, pod):
    """The partial unique index refuses a second live dispatch run for one experiment."""
    from sqlalchemy.exc import IntegrityError
    with app.app_context():
        run = db.session.scalar(sa.select(AgentRun))
        with pytest.raises(IntegrityError):
            runs.create_run(kind="experiment", agent="provisioner", request="again", scope_id=run.scope_id)
        db.session.rollback()


def test_svg_upload_becomes_a_sanitized_figure(app, client, pod, owner):
    """An uploaded SVG is stored as a figure with scripts and handlers removed, shown on the page."""
    from models import Figure
    _, secret, number = pod
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10" onload="alert(1)">'
           b'<script>alert(2)</script><circle cx="5" cy="5" r="4"><title>acc 0.93</title></circle></svg>')
    assert upload(client, secret, "figures/acc.svg", svg, "image/svg+xml").status_code == 201
    with app.app_context():
        figure = db.session.scalar(sa.select(Figure))
        assert figure.kind == "svg" and "<circle" in figure.content and "<title>acc 0.93</title>" in figure.content
        assert "script" not in figure.content and "onload" not in figure.content
    page = client.get(f"/experiments/{number}").text
    assert "alert(" not in page


def test_the_bootstraps_exit_post_is_shown_though_the_script_numbered_higher(app, client, pod):
    """The training script posts its own seqs (101…108, up to 90 %); the bootstrap's exit post
    comes last with its own lower seq (2): is the pod shown at 100 % · finished, not stuck at 90 %,
    while a late retry of an older script post still changes nothing shown?"""
    pod_id, secret, _ = pod
    assert post(client, secret, {"progressPct": 5, "message": "bootstrap complete", "milestone": "bootstrap",
                                 "seq": 1}).status_code == 200
    for epoch in range(1, 9):
        post(client, secret, {"progressPct": 10 + epoch * 10, "message": f"epoch {epoch}/8", "seq": 100 + epoch})
    post(client, secret, {"progressPct": 60, "message": "epoch 5/8 (late retry)", "seq": 105})
    with app.app_context():
        assert db.session.get(Pod, pod_id).progress_pct == 90
    final = post(client, secret, {"progressPct": 100, "message": "experiment finished", "milestone": "exit",
                                  "seq": 2, "exitCode": 0})
    assert final.status_code == 200 and final.get_json()["duplicate"] is False
    with app.app_context():
        row = db.session.get(Pod, pod_id)
        assert (row.progress_pct, row.progress_message, row.exit_code) == (100, "experiment finished", 0)


# --- the token checked inside the write (one statement per post) ------------------------

def test_a_bad_token_is_401_before_a_bad_body_and_counts_towards_the_limit(app, client, pod, monkeypatch):
    """The write statement checks the token, so a body refused before it is written must
    still answer 401 for an unknown token (not tell a guesser the body was wrong) and count
    as a bad token: past the limit, the address gets 429."""
    monkeypatch.setitem(app.config, "BEARER_MAX_FAILURES", 4)
    unknown = "spt_" + "x" * 43
    for body in ({"progressPct": 500}, {"nope": 1}, [1, 2]):
        response = post(client, unknown, body)
        assert response.status_code == 401 and response.get_json()["error"] == "invalid_pod_token", body
    assert post(client, unknown, {"progressPct": 1, "seq": 1}).status_code == 401  # a good body: the statement's 401
    _, secret, _ = pod
    assert post(client, secret, {"progressPct": 1, "seq": 1}).status_code == 429  # the address is limited now
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(PodProgressPost)) == 0


def test_a_good_token_with_a_bad_body_is_still_the_400(client, pod):
    """A valid token and a refused body: the 400 naming the field, as before."""
    _, secret, _ = pod
    response = post(client, secret, {"progressPct": 500})
    assert response.status_code == 400 and "progressPct" in response.get_json()["message"]


def test_the_statement_writes_every_row_of_the_post_with_the_pods_own_details(app, client, pod):
    """The one statement, finding the pod by its token, writes the post, the pod's progress,
    the timeline event (the pod's name and run index in it) and the run event (the pod's id)."""
    pod_id, secret, _ = pod
    answer = post(client, secret, {"progressPct": 40, "message": "epoch 4", "seq": 9, "metrics": {"loss": 0.25}})
    assert answer.status_code == 200 and answer.get_json()["duplicate"] is False
    with app.app_context():
        row = db.session.get(Pod, pod_id)
        assert (row.progress_pct, row.progress_message, row.progress_seq) == (40, "epoch 4", 9)
        event = db.session.scalar(sa.select(WorkflowEvent).where(WorkflowEvent.event_type == "progress"))
        assert str(event.id) == answer.get_json()["id"] and event.actor_id == str(pod_id)
        assert event.metadata_["pod"] == row.name and event.metadata_["run_index"] == row.run_index
        assert event.metadata_["metrics"] == {"loss": 0.25} and event.metadata_["seq"] == 9
        run = db.session.get(AgentRun, row.agent_run_id)
        run_event = db.session.scalar(sa.select(RunEvent).where(RunEvent.run_id == run.id,
                                                                RunEvent.event_type == "pod_progress"))
        assert run_event.metadata_ == {"pod_id": str(pod_id), "seq": 9, "exitCode": None}
        assert run_event.seq == run.last_seq


def test_on_sqlite_the_pod_token_is_checked_and_posts_stored_over_http(tmp_path):
    """The embedded default (SQLite) has no one-statement path: the view's token check and
    writes run statement by statement — progress and metrics stored once per seq, an
    unknown token refused with 401, a stopped pod's token refused after its grace period."""
    import flask_migrate

    import config as sagan_config
    from app import create_app
    from models import MetricChunk
    from services.core.actors import Actor
    from services.workflow import experiments

    class LiteConfig(sagan_config.TestConfig):
        SQLALCHEMY_DATABASE_URI = f"sqlite:///{tmp_path / 'sagan.db'}"
        SQLALCHEMY_ENGINE_OPTIONS: dict = {}
    lite = create_app(LiteConfig)
    try:
        with lite.app_context():
            flask_migrate.upgrade(directory=str(Path(__file__).resolve().parents[2] / "migrations"))
            experiment = experiments.create_experiment({"title": "Lite ingest"}, Actor("owner"))
            db.session.flush()
            run = runs.create_run(kind="experiment", agent="provisioner", request="d", scope_id=experiment.id,
                                  status="waiting")
            secret, digest = tokens.new_token()
            row = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                      name="lite-pod-0", status="running", progress_token_hash=digest)
            db.session.add(row)
            db.session.commit()
            pod_id = row.id
        client = lite.test_client()
        first = post(client, secret, {"progressPct": 30, "message": "epoch 3", "seq": 3})
        assert first.status_code == 200 and first.get_json()["duplicate"] is False
        assert post(client, secret, {"progressPct": 30, "message": "epoch 3", "seq": 3}).get_json()["duplicate"]
        batch = {"seq": 1, "points": [{"step": i, "name": "loss", "value": 1.0 / (1 + i)} for i in range(5)]}
        headers = {"Authorization": f"Bearer {secret}"}
        assert client.post("/api/metrics", json=batch, headers=headers).get_json() == {
            "ok": True, "points": 5, "duplicate": False}
        assert client.post("/api/metrics", json=batch, headers=headers).get_json()["duplicate"] is True
        unknown = "spt_" + "z" * 43
        assert post(client, unknown, {"progressPct": 1, "seq": 1}).status_code == 401
        assert client.post("/api/metrics", json=batch, headers={"Authorization": f"Bearer {unknown}"}
                           ).status_code == 401
        with lite.app_context():
            assert db.session.get(Pod, pod_id).progress_pct == 30
            assert db.session.scalar(sa.select(sa.func.count()).select_from(PodProgressPost)) == 1
            assert db.session.scalar(sa.select(MetricChunk.steps)) == [0, 1, 2, 3, 4]
            stopped = db.session.get(Pod, pod_id)
            stopped.status, stopped.stopped_at = "stopped", clock.utcnow()
            db.session.commit()
        clock.advance(timedelta(seconds=lite.config["POD_TOKEN_GRACE_SECONDS"] + 1))
        assert post(client, secret, {"progressPct": 99, "seq": 4}).status_code == 401
    finally:
        with lite.app_context():
            db.session.remove()
            db.engine.dispose()
