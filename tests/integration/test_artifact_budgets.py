"""Artifact budgets per pod and per experiment: a clear 413 naming the budget and its numbers,
answered from the declared length before the body is read, and race-safe at the limit
(the counters are checked by a conditional UPDATE under the row's lock)."""
from __future__ import annotations

import io
import json
import threading
import time
import urllib.error
import urllib.request
import uuid

import httpx
import pytest
import sqlalchemy as sa
from werkzeug.test import EnvironBuilder, run_wsgi_app

from models import Artifact, ArtifactUsage, Pod, db
from services.core.actors import Actor
from services.core.errors import TooLarge
from services.dispatch import artifacts, tokens
from services.results import results
from services.workflow import experiments
from tests.integration.test_hardening_sqlite import lite  # noqa: F401
from tests.integration.test_progress_ingest import upload
from tests.integration.test_research_tools import png


@pytest.fixture
def budgets(app, monkeypatch):
    """Small budgets for the test: set only the ones given."""
    def set_budgets(**settings):
        for name, value in settings.items():
            monkeypatch.setitem(app.config, name, value)
    return set_budgets


def second_pod(app, number: int, tag: str = "b") -> tuple[uuid.UUID, str]:
    """Another running pod of experiment `number`, with its own token: (id, secret)."""
    with app.app_context():
        experiment = experiments.get_experiment(number)
        secret, digest = tokens.new_token()
        pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="local", status="running",
                  name=f"sagan-{number}-{tag}-1-1", progress_token_hash=digest, run_index=1)
        db.session.add(pod)
        db.session.commit()
        return pod.id, secret


def stored(app) -> list[tuple[str, int]]:
    with app.app_context():
        return [tuple(r) for r in db.session.execute(sa.select(Artifact.name, Artifact.size).order_by(Artifact.name))]


def usage(app, scope_id) -> tuple[int, int]:
    with app.app_context():
        row = db.session.get(ArtifactUsage, scope_id)
        return (row.files, row.bytes) if row else (0, 0)


def test_a_pod_past_its_file_count_gets_a_413_naming_the_budget(app, client, make_live_pod, budgets):
    """With room for two files per pod, is the third a 413 `pod_count` with the numbers, nothing
    stored, while replacing one of the two still works?"""
    budgets(ARTIFACT_POD_MAX_COUNT=2)
    pod = make_live_pod("Count budget")
    assert upload(client, pod.secret, "a.txt", b"one", "text/plain").status_code == 201
    assert upload(client, pod.secret, "b.txt", b"two", "text/plain").status_code == 201
    refused = upload(client, pod.secret, "c.txt", b"three", "text/plain")
    assert refused.status_code == 413
    body = refused.get_json()
    assert (body["error"], body["budget"], body["limit"], body["used"]) == ("artifact_budget", "pod_count", 2, 2)
    assert "SAGAN_ARTIFACT_POD_MAX_COUNT=2" in body["message"] and "c.txt" in body["message"]
    assert upload(client, pod.secret, "b.txt", b"two again", "text/plain").status_code == 201  # a replacement
    assert stored(app) == [("a.txt", 3), ("b.txt", 9)]
    assert usage(app, pod.id) == (2, 12)


def test_a_pod_past_its_size_budget_gets_a_413_with_what_is_stored(app, client, make_live_pod, budgets):
    """Does a file that would take the pod past its bytes get a 413 `pod_bytes` saying what is
    stored, what the upload adds and the limit; and does a smaller file still fit after?"""
    budgets(ARTIFACT_POD_MAX_BYTES=1000)
    pod = make_live_pod("Pod bytes")
    assert upload(client, pod.secret, "a.txt", b"x" * 600, "text/plain").status_code == 201
    refused = upload(client, pod.secret, "b.txt", b"x" * 500, "text/plain")
    assert refused.status_code == 413
    body = refused.get_json()
    assert (body["budget"], body["limit"], body["used"], body["size"]) == ("pod_bytes", 1000, 600, 500)
    assert "600 bytes are stored and the upload adds 500" in body["message"]
    assert "SAGAN_ARTIFACT_POD_MAX_BYTES" in body["message"]
    assert upload(client, pod.secret, "c.txt", b"x" * 400, "text/plain").status_code == 201  # exactly full
    assert upload(client, pod.secret, "a.txt", b"x" * 100, "text/plain").status_code == 201  # shrinking
    assert stored(app) == [("a.txt", 100), ("c.txt", 400)]
    assert usage(app, pod.id) == (2, 500)


def test_the_experiment_budgets_count_every_pod(app, client, make_live_pod, budgets):
    """Two pods of one experiment share its budgets: is the second pod refused `experiment_bytes`
    (then `experiment_count`) by what the first stored, though its own budget has room?"""
    budgets(ARTIFACT_EXPERIMENT_MAX_BYTES=1000, ARTIFACT_EXPERIMENT_MAX_COUNT=3)
    first = make_live_pod("Experiment budgets")
    other_id, other_secret = second_pod(app, first.number)
    assert upload(client, first.secret, "a.txt", b"x" * 700, "text/plain").status_code == 201
    refused = upload(client, other_secret, "b.txt", b"x" * 400, "text/plain")
    assert refused.status_code == 413
    body = refused.get_json()
    assert (body["budget"], body["limit"], body["used"], body["size"]) == ("experiment_bytes", 1000, 700, 400)
    assert "this experiment's artifacts" in body["message"]
    assert upload(client, other_secret, "b.txt", b"x" * 100, "text/plain").status_code == 201
    assert upload(client, other_secret, "c.txt", b"x" * 100, "text/plain").status_code == 201
    counted = upload(client, first.secret, "d.txt", b"x", "text/plain")
    assert counted.status_code == 413 and counted.get_json()["budget"] == "experiment_count"
    with app.app_context():
        experiment_id = experiments.get_experiment(first.number).id
    assert usage(app, experiment_id) == (3, 900)
    assert usage(app, first.id) == (1, 700) and usage(app, other_id) == (2, 200)


class WatchedStream(io.BytesIO):
    """A request body that says how much of it the app read (however it reads)."""

    @property
    def taken(self) -> int:
        return self.tell()


def test_a_declared_length_that_cannot_fit_is_refused_unread(app, client, make_live_pod, budgets):
    """With 100 bytes left in the pod's budget, is a 5,000-byte upload refused from its
    Content-Length before a single byte of its body is read?"""
    budgets(ARTIFACT_POD_MAX_BYTES=1000)
    pod = make_live_pod("Unread body")
    upload(client, pod.secret, "a.txt", b"x" * 900, "text/plain")
    body = WatchedStream(b"y" * 5000)
    response = client.post("/api/artifacts", input_stream=body, headers={
        "Authorization": f"Bearer {pod.secret}", "X-Sagan-Artifact-Name": "big.txt", "Content-Type": "text/plain",
        "Content-Length": "5000"})
    assert response.status_code == 413 and response.get_json()["budget"] == "pod_bytes"
    assert body.taken == 0
    assert stored(app) == [("a.txt", 900)]


def chunked(client, secret: str, name: str, stream) -> object:
    """A body sent without a length (Transfer-Encoding: chunked), as granian hands it over:
    the server ends the stream itself (wsgi.input_terminated)."""
    return client.post("/api/artifacts", input_stream=stream, headers={
        "Authorization": f"Bearer {secret}", "X-Sagan-Artifact-Name": name, "Content-Type": "text/plain",
        "Transfer-Encoding": "chunked"}, environ_overrides={"wsgi.input_terminated": True})


def test_a_chunked_body_past_the_budget_is_cut_off_and_refused(app, client, make_live_pod, budgets):
    """Is a chunked body refused as soon as it passes the room left (read no further than
    that), saying the upload adds at least that much; and one that fits stored whole?"""
    budgets(ARTIFACT_POD_MAX_BYTES=10_000)
    pod = make_live_pod("Chunked")
    body = WatchedStream(b"z" * 3_000_000)
    refused = chunked(client, pod.secret, "stream.txt", body)
    assert refused.status_code == 413
    answer = refused.get_json()
    assert answer["budget"] == "pod_bytes" and answer["size"] == 10_001
    assert "adds at least 10,001" in answer["message"]
    assert body.taken == 10_001
    fits = chunked(client, pod.secret, "small.txt", WatchedStream(b"z" * 9_000))
    assert fits.status_code == 201 and fits.get_json()["size"] == 9_000
    assert stored(app) == [("small.txt", 9_000)]


def test_a_chunked_body_past_the_per_file_cap_is_refused(app, client, make_live_pod, budgets):
    """With the budgets roomy, is a chunked body over SAGAN_ARTIFACT_MAX_BYTES a 413 naming the per-file cap?"""
    budgets(ARTIFACT_MAX_BYTES=5_000)
    pod = make_live_pod("Chunked cap")
    refused = chunked(client, pod.secret, "stream.txt", WatchedStream(b"z" * 50_000))
    assert refused.status_code == 413
    assert "more than 5,000 bytes, the limit per file" in refused.get_json()["message"]
    assert stored(app) == []


@pytest.mark.parametrize("length", ["-5", "12abc", " ", "1e3"])
def test_a_malformed_content_length_is_a_400_that_stores_nothing(app, client, make_live_pod, length):
    """Is a negative or non-numeric Content-Length refused with a 400 naming it (werkzeug would
    read it as 0 and store an empty file)?"""
    pod = make_live_pod("Bad length")
    response = client.post("/api/artifacts", input_stream=io.BytesIO(b"data"), headers={
        "Authorization": f"Bearer {pod.secret}", "X-Sagan-Artifact-Name": "a.txt", "Content-Type": "text/plain"},
        environ_overrides={"CONTENT_LENGTH": length})
    assert response.status_code == 400
    assert response.get_json()["field"] == "Content-Length"
    assert stored(app) == []


def test_a_body_without_length_on_a_server_that_does_not_end_it_is_a_411(app, make_live_pod):
    """Without Content-Length, a server that does not end the body itself hands the app an empty
    stream: is that a 411 instead of an empty file stored in the artifact's place?"""
    pod = make_live_pod("No length")
    environ = EnvironBuilder(path="/api/artifacts", method="POST", input_stream=io.BytesIO(b"data"), headers={
        "Authorization": f"Bearer {pod.secret}", "X-Sagan-Artifact-Name": "a.txt", "Content-Type": "text/plain"},
    ).get_environ()
    del environ["CONTENT_LENGTH"]  # straight to the app: the test client would count the stream again
    body, status, _headers = run_wsgi_app(app, environ, buffered=True)
    assert status.startswith("411") and json.loads(b"".join(body))["error"] == "length_required"
    assert stored(app) == []


def test_a_bad_token_is_refused_before_any_budget(client, make_live_pod, budgets):
    """A request with an unknown pod token is a 401, never a 413 that would tell it about the budgets."""
    budgets(ARTIFACT_POD_MAX_COUNT=0)
    make_live_pod("Token first")
    response = upload(client, "spt_" + "0" * 40, "a.txt", b"x", "text/plain")
    assert response.status_code == 401


# --- racing at the limit -----------------------------------------------------------------------

def _waiting_on_locks(app) -> int:
    with app.app_context():
        return db.session.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )).scalar()


def test_two_uploads_racing_at_the_budget_cannot_both_pass(app, make_live_pod, budgets):
    """Two pods of one experiment each upload 600 bytes with 1,000 left in the experiment's budget;
    both pass the check made before reading and store their file, then meet at the counter. The
    test holds the counter's row until both wait on it: does exactly one get in (201) and the
    other get the 413, with the counters matching what is stored?"""
    budgets(ARTIFACT_EXPERIMENT_MAX_BYTES=1000)
    first = make_live_pod("Race")
    _other_id, other_secret = second_pod(app, first.number)
    with app.app_context():
        experiment_id = experiments.get_experiment(first.number).id
        artifacts.ensure_usage_rows(experiment_id, None)
        db.session.commit()
        holder = db.engine.connect()
    answers: dict[str, object] = {}

    def send(secret: str, name: str) -> None:
        answers[name] = upload(app.test_client(), secret, name, b"x" * 600, "text/plain")

    try:
        holding = holder.begin()
        holder.execute(sa.select(ArtifactUsage).where(ArtifactUsage.scope_id == experiment_id).with_for_update())
        threads = [threading.Thread(target=send, args=(first.secret, "a.txt")),
                   threading.Thread(target=send, args=(other_secret, "b.txt"))]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while _waiting_on_locks(app) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _waiting_on_locks(app) == 2, "both uploads should be waiting at the counter"
        holding.commit()
        for thread in threads:
            thread.join(30)
    finally:
        holder.close()
    statuses = sorted(response.status_code for response in answers.values())
    assert statuses == [201, 413]
    refused = next(r for r in answers.values() if r.status_code == 413).get_json()
    assert (refused["budget"], refused["used"], refused["size"]) == ("experiment_bytes", 600, 600)
    assert len(stored(app)) == 1
    assert usage(app, experiment_id) == (1, 600)


def test_many_concurrent_uploads_store_exactly_what_the_budget_holds(app, make_live_pod, budgets):
    """Eight uploads at once from one pod with room for five files: are exactly five stored,
    three refused `pod_count`, and no 500?"""
    budgets(ARTIFACT_POD_MAX_COUNT=5)
    pod = make_live_pod("Crowd")
    start = threading.Barrier(8)
    answers = []

    def send(index: int) -> None:
        start.wait(10)
        answers.append(upload(app.test_client(), pod.secret, f"f{index}.txt", b"x" * 100, "text/plain").status_code)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(answers) == [201] * 5 + [413] * 3
    assert len(stored(app)) == 5 and usage(app, pod.id) == (5, 500)


def test_the_same_new_name_uploaded_twice_at_once_is_stored_once(app, make_live_pod):
    """A retried upload racing its first attempt: the second insert meets the unique (pod, name);
    is it stored as a replacement (both 201, one row, counted once) instead of a 500?"""
    pod = make_live_pod("Twice")
    with app.app_context():
        experiment_id = experiments.get_experiment(pod.number).id
        artifacts.ensure_usage_rows(experiment_id, pod.id)
        db.session.commit()
        holder = db.engine.connect()
    answers = []

    def send() -> None:
        answers.append(upload(app.test_client(), pod.secret, "same.txt", b"x" * 100, "text/plain").status_code)

    try:
        holding = holder.begin()  # hold the pod's counter so both have inserted before either commits
        holder.execute(sa.select(ArtifactUsage).where(ArtifactUsage.scope_id == experiment_id).with_for_update())
        threads = [threading.Thread(target=send) for _ in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while _waiting_on_locks(app) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        holding.commit()
        for thread in threads:
            thread.join(30)
    finally:
        holder.close()
    assert answers == [201, 201]
    assert stored(app) == [("same.txt", 100)]
    assert usage(app, pod.id) == (1, 100)


# --- through the web server as deployed -------------------------------------------------------

def test_the_pods_own_client_reads_the_413_from_granian(app, make_live_pod, start_server):
    """Through granian (serve.py), with the bootstrap's own client (urllib, a declared length):
    is a 3 MB upload past the pod's budget answered 413 with the JSON message, not a reset
    connection; and is a chunked body past it cut off with the same 413?"""
    pod = make_live_pod("Through granian")
    with app.app_context():
        database_url = db.engine.url.render_as_string(hide_password=False)
    base = start_server("serve:wsgi_app", DATABASE_URL=database_url, REDIS_URL=app.config["REDIS_URL"],
                        SECRET_KEY="web-server-test", SAGAN_ARTIFACT_POD_MAX_BYTES="1000000")
    headers = {"Authorization": f"Bearer {pod.secret}", "X-Sagan-Artifact-Name": "big.txt",
               "Content-Type": "text/plain"}
    request = urllib.request.Request(f"{base}/api/artifacts", data=b"x" * 3_000_000, headers=headers,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413
    body = json.loads(refused.value.read())
    assert body["budget"] == "pod_bytes" and "budget of 1,000,000 bytes" in body["message"]

    def pieces():
        for _ in range(30):
            yield b"y" * 100_000

    answer = httpx.post(f"{base}/api/artifacts", content=pieces(), headers=headers, timeout=30)
    assert answer.status_code == 413 and answer.json()["budget"] == "pod_bytes"
    assert "adds at least" in answer.json()["message"]
    fits = httpx.post(f"{base}/api/artifacts", content=iter([b"z" * 1000] * 5), headers=headers, timeout=30)
    assert fits.status_code == 201 and fits.json()["size"] == 5000
    assert stored(app) == [("big.txt", 5000)]


def test_an_owners_figure_upload_counts_against_the_experiment(app, make_experiment, budgets):
    """A PNG the owner attaches is an artifact of the experiment: is it counted, and refused
    with the experiment's 413 once the count budget is full?"""
    budgets(ARTIFACT_EXPERIMENT_MAX_COUNT=1)
    number = make_experiment("Owner figures")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        results.attach_upload(experiment, "loss.png", png(), Actor("owner"))
        db.session.commit()
        with pytest.raises(TooLarge) as refused:
            results.attach_upload(experiment, "acc.png", png(3, 1), Actor("owner"))
        db.session.rollback()
        assert refused.value.details["budget"] == "experiment_count"
        assert db.session.get(ArtifactUsage, experiment.id).files == 1


def test_budgets_hold_on_sqlite_too(lite, monkeypatch):  # noqa: F811
    """On the embedded default's SQLite (migrated by the same migrations), do six uploads at once,
    each 300 bytes, with 1,000 bytes of budget, store exactly three?"""
    monkeypatch.setitem(lite.config, "ARTIFACT_POD_MAX_BYTES", 1000)
    with lite.app_context():
        experiment = experiments.create_experiment({"title": "Lite budgets"}, Actor("owner"))
        secret, digest = tokens.new_token()
        pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="local", status="running",
                  name=f"sagan-{experiment.number}-lite-0-1", progress_token_hash=digest)
        db.session.add(pod)
        db.session.commit()
        pod_id = pod.id
    start = threading.Barrier(6)
    answers = []

    def send(index: int) -> None:
        start.wait(10)
        answers.append(upload(lite.test_client(), secret, f"f{index}.txt", b"x" * 300, "text/plain").status_code)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(answers) == [201] * 3 + [413] * 3
    with lite.app_context():
        assert db.session.scalar(sa.select(sa.func.count(Artifact.id))) == 3
        usage_row = db.session.get(ArtifactUsage, pod_id)
        assert (usage_row.files, usage_row.bytes) == (3, 900)
