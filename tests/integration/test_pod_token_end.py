"""A pod's token dies a grace period after the pod ends, counted from the status change.

The attack: the grace used to count from `stopped_at`, else the row's `updated_at`. A pod
whose row reached an ended status without `stopped_at` (the watcher's "the provider
finished our stop" path, a failed create, an `exited` pod, which was not even an ended
status) touched `updated_at` with every post, so it kept a valid token for as long as it
kept posting. Now `Pod.ended_at` is stamped by the status change itself and only by Sagan;
the tests post every few minutes across the grace and expect the 401 right on time, on
every way a token is checked: the lean ingest layer, the progress view, artifacts and
metrics, on PostgreSQL and on the SQLite embedded default.
"""
from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import flask_migrate
import pytest
import sqlalchemy as sa

import config as sagan_config
from app import create_app
from models import Experiment, Pod, db
from services.core import clock
from services.core.actors import Actor
from services.dispatch import tokens, watcher
from services.workflow import experiments, runs
from tests.integration import test_dispatch as base
from tests.integration.databases import scratch_postgres_url
from tests.integration.old_rows import old_experiment
from tests.integration.test_dispatch import pod_spec
from tests.integration.test_dispatch_money import pods_of, running_dispatch
from tests.integration.test_lean_ingest import flask_only

runpod = base.runpod
approved = base.approved
MIGRATIONS = str(Path(__file__).resolve().parents[2] / "migrations")


def _lite_app(tmp_path):
    """The embedded default's database: SQLite, schema from the same migrations."""
    class LiteConfig(sagan_config.TestConfig):
        SQLALCHEMY_DATABASE_URI = f"sqlite:///{tmp_path / 'sagan.db'}"
        SQLALCHEMY_ENGINE_OPTIONS: dict = {}
    lite = create_app(LiteConfig)
    with lite.app_context():
        flask_migrate.upgrade(directory=MIGRATIONS)
    return lite


def _running_pod(app) -> tuple[uuid.UUID, str]:
    """A running pod of a waiting dispatch, made with the models: (pod id, token)."""
    with app.app_context():
        experiment = experiments.create_experiment({"title": "Token end"}, Actor("owner"))
        db.session.flush()
        db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(status="running"))
        run = runs.create_run(kind="experiment", agent="provisioner", request="d", scope_id=experiment.id,
                              status="waiting")
        secret, digest = tokens.new_token()
        pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                  name=f"sagan-token-end-{uuid.uuid4().hex[:8]}", status="running", progress_token_hash=digest)
        db.session.add(pod)
        db.session.commit()
        return pod.id, secret


@pytest.fixture(params=["postgresql-lean", "postgresql-view", "sqlite"])
def ingest(request, tmp_path):
    """(app, client) for each way a progress post is checked: the lean layer in front of Flask
    and the Flask view on PostgreSQL, and the view on SQLite."""
    if request.param == "sqlite":
        lite = _lite_app(tmp_path)
        try:
            yield lite, lite.test_client()
        finally:
            with lite.app_context():
                db.session.remove()
                db.engine.dispose()
        return
    app = request.getfixturevalue("app")
    yield app, (app.test_client() if request.param == "postgresql-lean" else flask_only(app))


def _progress(client, secret, seq, **extra):
    return client.post("/api/progress", headers={"Authorization": f"Bearer {secret}"},
                       json={"progressPct": 50, "message": f"still here {seq}", "seq": seq, **extra})


def _artifact(client, secret):
    return client.post("/api/artifacts", data=b"a,b\n1,2\n", headers={
        "Authorization": f"Bearer {secret}", "X-Sagan-Artifact-Name": f"late-{uuid.uuid4().hex[:6]}.csv",
        "Content-Type": "text/csv"})


def _metrics(client, secret, seq):
    return client.post("/api/metrics", headers={"Authorization": f"Bearer {secret}"},
                       json={"seq": seq, "points": [{"step": seq, "name": "loss", "value": 0.5}]})


def _end(app, pod_id, status):
    """Give the pod an ended status the way a service does (the ORM), setting no stopped_at."""
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        pod.status = status
        db.session.commit()
        assert pod.stopped_at is None and pod.ended_at is not None


@pytest.mark.parametrize("status", ["exited", "stopped", "failed", "vanished", "terminated"])
def test_an_ended_pod_that_keeps_posting_loses_its_token_on_time(ingest, status):
    """Does a pod that ended without stopped_at, posting every 7 minutes (each post touching its
    row), still lose its token for progress, artifacts and metrics once the grace has passed
    since it ended?"""
    app, client = ingest
    pod_id, secret = _running_pod(app)
    grace = timedelta(seconds=app.config["POD_TOKEN_GRACE_SECONDS"])
    _end(app, pod_id, status)
    assert _progress(client, secret, 1).status_code == 200  # a last post in flight is still taken
    clock.advance(grace / 2)
    assert _progress(client, secret, 2).status_code == 200
    assert _artifact(client, secret).status_code == 201
    clock.advance(grace / 2 + timedelta(seconds=1))
    assert _progress(client, secret, 3).status_code == 401  # the old rule: 200, the last post was 7 min ago
    assert _artifact(client, secret).status_code == 401
    assert _metrics(client, secret, 3).status_code == 401
    with app.app_context():
        assert db.session.get(Pod, pod_id).progress_message == "still here 2"


def test_exit_posts_do_not_extend_the_grace(app, client):
    """An exited pod could once post for ever (`exited` was not an ended status) and each exit post
    moves exited_at: is the token still dead a grace period after the first exit?"""
    pod_id, secret = _running_pod(app)
    grace = timedelta(seconds=app.config["POD_TOKEN_GRACE_SECONDS"])
    assert _progress(client, secret, 10, exitCode=0).status_code == 200
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        assert pod.status == "exited" and pod.ended_at is not None
    for seq in (11, 12):
        clock.advance(grace / 3)
        assert _progress(client, secret, seq, exitCode=0).status_code == 200
    clock.advance(grace / 3 + timedelta(seconds=1))
    assert _progress(client, secret, 13, exitCode=0).status_code == 401
    assert _progress(client, secret, 14).status_code == 401


def test_a_live_pod_keeps_its_token_and_a_restarted_container_gets_it_back(app, client):
    """Is a running pod's token valid however long it runs, and does a pod the watcher sees running
    again after an exit (a container the provider restarted) post again, while asking an exited
    pod to stop does not revive its token?"""
    pod_id, secret = _running_pod(app)
    clock.advance(timedelta(days=3))
    assert _progress(client, secret, 1).status_code == 200
    _end(app, pod_id, "exited")
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        pod.status = "running"
        db.session.commit()
        assert pod.ended_at is None
    clock.advance(timedelta(hours=2))
    assert _progress(client, secret, 2).status_code == 200
    _end(app, pod_id, "exited")
    with app.app_context():
        pod = db.session.get(Pod, pod_id)
        ended = pod.ended_at
        pod.status = "stop_requested"  # a stop the provider has not confirmed yet
        db.session.commit()
        assert pod.ended_at == ended
    clock.advance(timedelta(seconds=app.config["POD_TOKEN_GRACE_SECONDS"] + 1))
    assert _progress(client, secret, 3).status_code == 401


def test_an_ended_status_written_without_ended_at_is_refused(ingest):
    """A row put in an ended status behind the models' back (no ended_at at all) is refused at
    once rather than trusted, on every path."""
    app, client = ingest
    pod_id, secret = _running_pod(app)
    with app.app_context():
        db.session.execute(sa.update(Pod).where(Pod.id == pod_id).values(status="stopped"))
        db.session.commit()
    assert _progress(client, secret, 1).status_code == 401
    assert _artifact(client, secret).status_code == 401


def test_a_stop_the_provider_finished_itself_is_stamped_and_the_volume_later_terminated(app, runpod, approved,
                                                                                       monkeypatch):
    """The root cause: a pod `stop_requested` that the provider reports EXITED became `stopped`
    with no stopped_at — so its token never died and its volume was never terminated. Is
    stopped_at (and ended_at) set, and is the pod terminated after the retention period?"""
    monkeypatch.setitem(app.config, "POD_RETENTION_DAYS", 2)
    number = approved(pod_spec())
    run_id = running_dispatch(app, runpod, number)
    with app.app_context():
        (pod,) = pods_of(run_id)
        pod.status = "stop_requested"  # our stop call timed out; the provider did it anyway
        db.session.commit()
        runpod.exit_pod(pod.provider_pod_id)
        watcher.watch()
        db.session.refresh(pod)
        assert pod.status == "stopped" and pod.stopped_at is not None and pod.ended_at is not None
        clock.advance(timedelta(days=2, minutes=1))
        watcher.watch()
        db.session.refresh(pod)
        assert pod.status == "terminated" and pod.terminated_at is not None


@pytest.fixture(params=["postgresql", "sqlite"])
def scratch_app(request, tmp_path):
    """An app on an empty database of its own, for running the migrations step by step."""
    def make(url):
        class ScratchConfig(sagan_config.TestConfig):
            SQLALCHEMY_DATABASE_URI = url
            SQLALCHEMY_ENGINE_OPTIONS: dict = {}
        return create_app(ScratchConfig)
    if request.param == "sqlite":
        scratch = make(f"sqlite:///{tmp_path / 'sagan.db'}")
        yield scratch
    else:
        with scratch_postgres_url("sagan_ended") as url:
            scratch = make(url)
            yield scratch
    with scratch.app_context():
        db.session.remove()
        db.engine.dispose()


def test_the_migration_dates_pods_that_had_already_ended_and_downgrades_without_loss(scratch_app):
    """Does 0013 give pods that ended before it the time the old columns knew (stopped, else last
    updated), leave live pods without one, and come back down keeping every progress post?"""
    stopped_at, touched = clock.utcnow() - timedelta(hours=3), clock.utcnow() - timedelta(minutes=2)
    pods = sa.table("pods", sa.column("id", sa.Uuid()), sa.column("experiment_id", sa.Uuid()),
                    *(sa.column(c) for c in ("account", "name", "status", "run_index", "attempt", "gpu_count",
                                             "retry_count", "max_retries", "bootstrap_count", "uptime_seconds")),
                    *(sa.column(c, sa.DateTime(timezone=True)) for c in ("stopped_at", "created_at", "updated_at")))
    posts = sa.table("pod_progress_posts", sa.column("id", sa.Uuid()), sa.column("pod_id", sa.Uuid()),
                     sa.column("progress_pct"), sa.column("message"), sa.column("created_at", sa.DateTime(timezone=True)))
    rows = {"stopped": stopped_at, "exited": None, "running": None}
    ids = {status: uuid.uuid4() for status in rows}
    with scratch_app.app_context():
        flask_migrate.upgrade(directory=MIGRATIONS, revision="0012_pod_ssh_user_and_balance")
        # The experiment as 0012 knew it: a Core insert of its columns then, not today's model.
        experiment_id = old_experiment(1, "Before 0013")
        db.session.execute(sa.insert(pods), [
            {"id": ids[status], "experiment_id": experiment_id, "account": "local", "name": f"old-{status}",
             "status": status, "run_index": 0, "attempt": 1, "gpu_count": 1, "retry_count": 0, "max_retries": 3,
             "bootstrap_count": 0, "uptime_seconds": 0, "stopped_at": stopped, "created_at": touched,
             "updated_at": touched} for status, stopped in rows.items()])
        db.session.execute(sa.insert(posts), [{"id": uuid.uuid4(), "pod_id": pod_id, "progress_pct": 5.0,
                                               "message": "hello", "created_at": touched} for pod_id in ids.values()])
        db.session.commit()
        db.session.remove()
        flask_migrate.upgrade(directory=MIGRATIONS)
        ended = {status: db.session.get(Pod, ids[status]).ended_at for status in rows}
        assert ended == {"stopped": stopped_at, "exited": touched, "running": None}
        db.session.remove()
        flask_migrate.downgrade(directory=MIGRATIONS, revision="0012_pod_ssh_user_and_balance")
        assert db.session.scalar(sa.text("SELECT count(*) FROM pod_progress_posts")) == 3
