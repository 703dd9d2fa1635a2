"""A real worker process killed mid-run: the run is failed worker_lost once and recovered once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from config import TestConfig
from models import AgentRun, RunEvent, db
from services import clock, experiments, jobs, runs
from services.agents import loop
from tests.fakes.anthropic_server import reply, slow, text

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_killed_worker_is_detected_and_recovered_once(app, fake_anthropic, make_experiment, tmp_path):
    """SIGKILL the worker while a model call is in flight → worker_lost → exactly one recovery."""
    number = make_experiment("Killed mid-run", status="planning")
    fake_anthropic.script(slow(30, reply(text("too late"))))
    with app.app_context():
        run = runs.create_run(kind="plan", agent="experiment-planner", request="Plan it.",
                              scope_id=experiments.get_experiment(number).id)
        db.session.commit()
        run_id = run.id
        jobs.enqueue_run(run_id)
    env = {**os.environ, "DATABASE_URL": TestConfig.SQLALCHEMY_DATABASE_URI, "REDIS_URL": TestConfig.REDIS_URL,
           "SECRET_KEY": "test", "ANTHROPIC_API_KEY": "sk-ant-test-0000000000000000",
           "ANTHROPIC_BASE_URL": fake_anthropic.url, "SAGAN_INSTANCE_DIR": str(tmp_path)}
    worker = subprocess.Popen([sys.executable, "-m", "workers.launcher", "--no-scheduler", "--queues", "agents"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(fake_anthropic.requests) == 0:
            time.sleep(0.2)
        assert fake_anthropic.requests, "the worker never called the model"
        with app.app_context():
            assert db.session.get(AgentRun, run_id).status == "running"
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its work horse, no goodbye
        worker.wait(timeout=10)
    with app.app_context():
        db.session.expire_all()
        assert db.session.get(AgentRun, run_id).status == "running"  # nobody knows yet
        clock.advance(timedelta(seconds=app.config["RUN_STALE_SECONDS"] + 60))
        first, second = loop.reconcile_runs(), loop.reconcile_runs()
        assert first["lost"] == [run_id] and second["lost"] == []
        failed = db.session.get(AgentRun, run_id)
        assert failed.status == "failed" and failed.failure_reason == "worker_lost"
        recoveries = list(db.session.scalars(sa.select(AgentRun).where(AgentRun.resumes_run_id == run_id)))
        assert len(recoveries) == 1
        started = db.session.scalar(sa.select(sa.func.count(RunEvent.id)).where(
            RunEvent.run_id == run_id, RunEvent.event_type == "started"))
        assert started == 1  # the events written before the kill are all still there


@pytest.mark.slow
def test_warm_shutdown_parks_the_run_for_another_worker(app, fake_anthropic, worker, make_experiment, tmp_path):
    """SIGTERM mid-step: the step finishes, the run goes back to queued, another worker completes it."""
    from tests.fakes.anthropic_server import tool_use
    number = make_experiment("Deploy day", status="planning")
    fake_anthropic.script(slow(3, reply(tool_use("get_experiment", {}))), reply(text("Finished elsewhere.")))
    with app.app_context():
        run = runs.create_run(kind="plan", agent="experiment-planner", request="Plan it.",
                              scope_id=experiments.get_experiment(number).id)
        db.session.commit()
        run_id = run.id
        jobs.enqueue_run(run_id)
    env = {**os.environ, "DATABASE_URL": TestConfig.SQLALCHEMY_DATABASE_URI, "REDIS_URL": TestConfig.REDIS_URL,
           "SECRET_KEY": "test", "ANTHROPIC_API_KEY": "sk-ant-test-0000000000000000",
           "ANTHROPIC_BASE_URL": fake_anthropic.url, "SAGAN_INSTANCE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "workers.launcher", "--no-scheduler", "--queues", "agents"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(fake_anthropic.requests) == 0:
            time.sleep(0.1)
        assert fake_anthropic.requests, "the worker never called the model"
        proc.send_signal(signal.SIGTERM)  # the worker only: its work horse finishes the step
        assert proc.wait(timeout=30) is not None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    with app.app_context():
        db.session.expire_all()
        parked = db.session.get(AgentRun, run_id)
        assert parked.status == "queued" and parked.turns == 1
        assert jobs.job_is_live(parked.rq_job_id)
    worker()
    with app.app_context():
        db.session.expire_all()
        done = db.session.get(AgentRun, run_id)
        assert done.status == "completed" and done.turns == 2
        kinds = [e.event_type for e in db.session.scalars(
            sa.select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq))]
        assert kinds.count("started") == 1 and "waiting" in kinds
