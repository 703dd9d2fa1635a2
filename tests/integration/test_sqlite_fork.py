"""The embedded default (SQLite) with a forking worker and its scheduler thread: a work horse
is never forked in the middle of a tick, so it never inherits the tick's transaction
(workers/fork_guard.py).

SQLite keeps the bookkeeping of its locks in process memory; a horse forked while the
scheduler thread is inside a transaction inherits "this process holds the write lock" and no
thread to release it, so its first BEGIN IMMEDIATE waits busy_timeout (30 s) and fails with
"database is locked" however fresh its connection. These tests run real forking workers on a
real SQLite file beside a scheduler whose tick holds a transaction, as the pod watcher does
while it asks the provider about each pod; each fails without the guard.
"""
from __future__ import annotations

import signal
import threading
import time

import flask_migrate
import pytest
import sqlalchemy as sa
from rq.job import Job
from rq.registry import FailedJobRegistry

import config as sagan_config
from app import create_app
from models import AgentRun, Setting, db
from services.core import redis_store
from services.core.actors import Actor
from services.dispatch import provisioner, watcher
from services.pipeline import sweeps
from services.workflow import runs
from services.workflow.experiments import create_experiment
from services.workflow.jobs import SERIALIZER
from tests.conftest import ROOT
from workers import queues, runtime, scheduler

JOBS = 6


@pytest.fixture
def sqlite_app(app, tmp_path):
    """A second app on a fresh SQLite file (schema by the migrations), jobs run in it; the
    session `app` is requested so the per-test cleanup empties the test Redis database."""
    class SQLiteConfig(sagan_config.TestConfig):
        SQLALCHEMY_DATABASE_URI = f"sqlite:///{tmp_path / 'sagan.db'}"
        SQLALCHEMY_ENGINE_OPTIONS: dict = {}
    lite = create_app(SQLiteConfig)
    with lite.app_context():
        flask_migrate.upgrade(directory=str(ROOT / "migrations"))
        db.session.remove()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    runtime.set_app(lite)
    yield lite
    runtime.set_app(None)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    with lite.app_context():
        db.session.remove()
        db.engine.dispose()


def _queued_dispatches(app, count: int) -> list:
    """`count` dispatch runs, queued (each on its own experiment: one live dispatch each)."""
    ids = []
    with app.app_context():
        for index in range(count):
            experiment = create_experiment({"title": f"Fork probe {index}"}, Actor("owner"))
            db.session.flush()
            run = runs.create_run(kind="experiment", agent=provisioner.PROVISIONER, scope_id=experiment.id,
                                  request="Dispatch the approved spec.")
            ids.append(run.id)
        db.session.commit()
        for run_id in ids:
            provisioner.enqueue_dispatch(run_id)
    return ids


def _hold_a_write(note: str) -> None:
    """Open a write transaction on the app's session (BEGIN IMMEDIATE takes the lock)."""
    db.session.merge(Setting(key="fork-probe", value=note))
    db.session.flush()


def _dispatch_outcomes(app, ids) -> dict:
    with app.app_context():
        rows = db.session.execute(sa.select(AgentRun.id, AgentRun.status, AgentRun.failure_reason)
                                  .where(AgentRun.id.in_(ids))).all()
        db.session.remove()
    return {row.id: (row.status, row.failure_reason) for row in rows}


def _failed_jobs(app) -> list[str]:
    """Why each failed dispatch job failed (the exception's own line of its traceback)."""
    with app.app_context():
        registry = FailedJobRegistry(queue=queues.get_queue(queues.DISPATCH))
        jobs = [Job.fetch(job_id, connection=redis_store.connection(), serializer=SERIALIZER) for job_id in registry.get_job_ids()]
    return [next((line for line in reversed((job.exc_info or "").splitlines()) if "Error" in line), job.id)
            for job in jobs]


def test_a_horse_is_not_forked_inside_the_schedulers_transaction(sqlite_app, monkeypatch, fork_wait_seen):
    """With the scheduler's tick inside a write transaction when a dispatch job is due, does
    the worker wait for the tick to end before forking, so the job claims its run at once?"""
    [run_id] = _queued_dispatches(sqlite_app, 1)
    holding, fork_waiting = threading.Event(), fork_wait_seen

    def watch_until_the_fork_waits():
        _hold_a_write("held while the worker wants to fork")
        holding.set()
        # Without the guard there is no wait to see: the tick lets go after a while and the
        # horse, forked meanwhile, fails on the lock it inherited.
        fork_waiting.wait(timeout=10)
        db.session.commit()

    monkeypatch.setattr(watcher, "watch", watch_until_the_fork_waits)
    monkeypatch.setattr(sweeps, "reconcile_runs", lambda: None)  # it would hide a failed job
    ticking = scheduler.Scheduler(sqlite_app, interval=30)
    thread = threading.Thread(target=ticking.run_once)
    try:
        thread.start()
        assert holding.wait(10), "the tick never took the write lock"
        with sqlite_app.app_context():
            worker = runtime.SaganWorker([queues.get_queue(queues.DISPATCH)], connection=redis_store.connection())
        started = time.monotonic()
        worker.work(burst=True)
        elapsed = time.monotonic() - started
    finally:
        thread.join(15)
    assert _failed_jobs(sqlite_app) == []
    # The saga ran: no approved spec, so it fails for that reason, not for a locked database.
    assert _dispatch_outcomes(sqlite_app, [run_id]) == {run_id: ("failed", "spec_invalid")}
    assert elapsed < 25, f"the job waited {elapsed:.1f}s: it met SQLite's busy timeout"
    assert fork_waiting.is_set()


def test_many_dispatch_jobs_beside_a_ticking_scheduler(sqlite_app, monkeypatch):
    """Do half a dozen dispatch jobs all claim their runs while the scheduler ticks every few
    milliseconds and spends most of each tick inside a transaction (as the pod watcher does
    while it asks the provider about each pod)?"""
    ids = _queued_dispatches(sqlite_app, JOBS)

    def watch_slowly():
        _hold_a_write("watching")
        time.sleep(0.03)  # the provider's answer, inside the watcher's transaction
        db.session.commit()

    monkeypatch.setattr(watcher, "watch", watch_slowly)
    # The reconciler would re-enqueue a job that failed on the lock and hide the failure.
    monkeypatch.setattr(sweeps, "reconcile_runs", lambda: None)
    ticking = scheduler.Scheduler(sqlite_app, interval=0.02)
    ticking.start()
    try:
        with sqlite_app.app_context():
            worker = runtime.SaganWorker([queues.get_queue(queues.DISPATCH)], connection=redis_store.connection())
        worker.work(burst=True)
    finally:
        ticking.stop(timeout=10)
    # A horse that inherited the scheduler's lock fails its claim ("database is locked").
    assert _failed_jobs(sqlite_app) == []
    # Every saga here ends on the missing spec.
    assert _dispatch_outcomes(sqlite_app, ids) == {run_id: ("failed", "spec_invalid") for run_id in ids}
