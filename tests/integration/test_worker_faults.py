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
from services.core import clock
from services.pipeline import sweeps
from services.workflow import experiments, jobs, runs
from tests.fakes.anthropic_server import reply, slow, text, tool_use

ROOT = Path(__file__).resolve().parents[2]


def worker_env(tmp_path, **extra: str) -> dict:
    """The environment of a real worker process on the test database, plus `extra` (the
    fake provider it talks to)."""
    return {**os.environ, "DATABASE_URL": TestConfig.SQLALCHEMY_DATABASE_URI, "REDIS_URL": TestConfig.REDIS_URL,
            # The test's app enqueues, the worker runs: one key, as deployed (jobs are signed with it).
            "SECRET_KEY": TestConfig().SECRET_KEY, "SAGAN_INSTANCE_DIR": str(tmp_path), **extra}


def model_env(fake_anthropic) -> dict:
    return {"ANTHROPIC_API_KEY": "sk-ant-test-0000000000000000", "ANTHROPIC_BASE_URL": fake_anthropic.url}


def start_worker(env: dict, queue: str) -> subprocess.Popen:
    """A real worker process (no scheduler) on one queue, in a session of its own."""
    return subprocess.Popen([sys.executable, "-m", "workers.launcher", "--no-scheduler", "--queues", queue],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def wait_until(condition, failure: str, timeout: float = 30, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        time.sleep(every)
    assert condition(), failure


def queued_plan_run(app, number: int):
    """A planner run for the experiment, created and its job enqueued; returns its id."""
    with app.app_context():
        run = runs.create_run(kind="plan", agent="experiment-planner", request="Plan it.",
                              scope_id=experiments.get_experiment(number).id)
        db.session.commit()
        jobs.enqueue_run(run.id)
        return run.id


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL a worker and its work horse. RQ's horse runs in a session of its own, so
    killing the worker's process group alone would leave it finishing the job — writing to
    the test database while later tests run."""
    import psutil
    try:
        horses = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        horses = []
    for child in horses:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)
    psutil.wait_procs(horses, timeout=10)


@pytest.mark.slow
def test_killed_worker_is_detected_and_recovered_once(app, fake_anthropic, make_experiment, tmp_path):
    """SIGKILL the worker while a model call is in flight → worker_lost → exactly one recovery."""
    number = make_experiment("Killed mid-run", status="planning")
    fake_anthropic.script(slow(30, reply(text("too late"))))
    run_id = queued_plan_run(app, number)
    worker = start_worker(worker_env(tmp_path, **model_env(fake_anthropic)), "agents")
    try:
        wait_until(lambda: fake_anthropic.requests, "the worker never called the model", every=0.2)
        with app.app_context():
            assert db.session.get(AgentRun, run_id).status == "running"
    finally:
        kill_tree(worker)  # the worker and its work horse, no goodbye
        worker.wait(timeout=10)
    with app.app_context():
        db.session.expire_all()
        assert db.session.get(AgentRun, run_id).status == "running"  # nobody knows yet
        clock.advance(timedelta(seconds=app.config["RUN_STALE_SECONDS"] + 60))
        first, second = sweeps.reconcile_runs(), sweeps.reconcile_runs()
        assert first["lost"] == [run_id] and second["lost"] == []
        failed = db.session.get(AgentRun, run_id)
        assert failed.status == "failed" and failed.failure_reason == "worker_lost"
        recoveries = list(db.session.scalars(sa.select(AgentRun).where(AgentRun.resumes_run_id == run_id)))
        assert len(recoveries) == 1
        started = db.session.scalar(sa.select(sa.func.count(RunEvent.id)).where(
            RunEvent.run_id == run_id, RunEvent.event_type == "started"))
        assert started == 1  # the events written before the kill are all still there
        # The recovery continues the same conversation, told that the worker stopped.
        resumed = recoveries[0].conversation
        assert resumed[0]["content"][0]["text"] == failed.conversation[0]["content"]  # the same brief
        assert resumed[-1]["content"][-1]["text"].startswith("The worker running this conversation stopped")


@pytest.mark.slow
def test_warm_shutdown_parks_the_run_for_another_worker(app, fake_anthropic, worker, make_experiment, tmp_path):
    """SIGTERM mid-step: the step finishes, the run goes back to queued, another worker completes it."""
    number = make_experiment("Deploy day", status="planning")
    fake_anthropic.script(slow(3, reply(tool_use("get_experiment", {}))),
                          reply(text("Finished elsewhere with questions."), tool_use("ask_questions", {"questions": [
                              {"key": "seeds", "text": "How many seeds?"}]})))
    run_id = queued_plan_run(app, number)
    proc = start_worker(worker_env(tmp_path, **model_env(fake_anthropic)), "agents")
    try:
        wait_until(lambda: fake_anthropic.requests, "the worker never called the model")
        proc.send_signal(signal.SIGTERM)  # the worker only: its work horse finishes the step
        assert proc.wait(timeout=30) is not None
    finally:
        if proc.poll() is None:
            kill_tree(proc)
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
    # The other worker continued the same conversation: the first reply went back unchanged.
    second = fake_anthropic.requests[-1].body["messages"]
    assert second[1]["content"] == fake_anthropic.responses[0]["content"]
    assert second[1]["content"][0]["type"] == "thinking"


# --- a dispatch interrupted by a dead worker ---------------------------------------------

def _approved_dispatch(app, make_approved, specs: list[dict], title: str) -> tuple[int, object]:
    """An experiment at `implementing` with an approved two-pod spec, and its dispatch launched
    (the run queued, its job enqueued); returns (number, run id)."""
    from services.core.actors import Actor
    from services.dispatch import provisioner
    from services.workflow import lifecycle
    from tests.integration.test_dispatch import plan_with
    owner = Actor("owner", "owner-1", "Owner")
    number = make_approved(plan_with(specs), title=title, owner=owner)
    with app.app_context():
        run, effects = provisioner.launch(experiments.get_experiment(number), owner)
        db.session.commit()
        lifecycle.run_side_effects(effects)  # enqueues the dispatch job
        return number, run.id


def _run_events(run_id) -> list[str]:
    return [e.event_type for e in db.session.scalars(
        sa.select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq))]


@pytest.mark.slow
def test_worker_killed_mid_dispatch_resumes_once_without_duplicate_pods(
        app, fake_runpod, worker, make_approved, monkeypatch, tmp_path):
    """SIGKILL the worker while pod 2's create call is in flight (the provider made it): the
    reconciler resumes the saga once; it keeps pod 1, finds pod 2 by name, creates nothing twice,
    and every event written before the kill is still there."""
    from models import Experiment, Pod
    from services.dispatch import provisioner
    from tests.integration.test_dispatch import pod_spec
    monkeypatch.setattr(provisioner, "sleep", fake_runpod.advance)
    fake_runpod.hold_after_create(60, skip=1)  # the second create makes its pod, then hangs
    number, run_id = _approved_dispatch(app, make_approved, [pod_spec("a"), pod_spec("b")], "Killed mid-dispatch")
    env = worker_env(tmp_path, RUNPOD_API_URL=fake_runpod.url, RUNPOD_API_KEY_TEAM=fake_runpod.team_key,
                     RUNPOD_TEAM_ID=fake_runpod.team_id, RUNPOD_API_KEY_PERSONAL=fake_runpod.personal_key,
                     SAGAN_POD_LISTING_LAG_SECONDS="0")
    proc = start_worker(env, "dispatch")
    try:
        wait_until(lambda: len(fake_runpod.pods) >= 2, "the worker never made the second create call")
        assert len(fake_runpod.pods) == 2
    finally:
        kill_tree(proc)  # the worker and its work horse: the host died
    with app.app_context():
        db.session.expire_all()
        assert db.session.get(AgentRun, run_id).status == "running"  # nobody knows yet
        pods = list(db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id).order_by(Pod.run_index)))
        assert [(p.run_index, p.status, bool(p.provider_pod_id)) for p in pods] == \
            [(0, "deploying", True), (1, "deploying", False)]
        before_kill = _run_events(run_id)
        assert before_kill == ["preflight", "deploy_started", "deploy_pod_started"]

        clock.advance(timedelta(seconds=app.config["RUN_STALE_SECONDS"] + 60))
        first, second = sweeps.reconcile_runs(), sweeps.reconcile_runs()
        assert first["resumed"] == [run_id] and first["lost"] == []
        assert second["resumed"] == [] and second["requeued"] == []  # its job is queued: nothing twice
    worker()
    with app.app_context():
        db.session.expire_all()
        run = db.session.get(AgentRun, run_id)
        assert run.status == "waiting"
        assert db.session.scalar(sa.select(Experiment.status).where(Experiment.number == number)) == "queued"
        pods = list(db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id).order_by(Pod.run_index)))
        assert sorted(p.provider_pod_id for p in pods) == sorted(fake_runpod.pods)  # the two, each once
        assert [p.attempt for p in pods] == [1, 1]
        assert len(fake_runpod.requests_to("POST", "/v2/pods")) == 2  # no create was repeated
        kinds = _run_events(run_id)
        assert kinds[:3] == before_kill  # nothing written before the kill was lost
        assert kinds.count("deploy_started") == 1 and kinds.count("deploy_pod_started") == 2
        assert kinds.count("preflight") == 1  # the resumed saga does not check again
        assert kinds.count("woken") == 1 and kinds[-1] == "deploy_completed"
        assert sweeps.reconcile_runs() == {"requeued": [], "lost": [], "resumed": []}


def test_dispatch_lost_twice_fails_worker_lost_and_stops_its_pods(app, fake_runpod, worker, make_approved,
                                                                   monkeypatch):
    """A saga that dies again after its one resume is failed worker_lost: its pods are stopped
    (all or nothing), the experiment is blocked, and no third attempt is made."""
    from models import Experiment, Pod
    from services.dispatch import provisioner
    from tests.integration.test_dispatch import pod_spec
    monkeypatch.setattr(provisioner, "sleep", fake_runpod.advance)
    number, run_id = _approved_dispatch(app, make_approved, [pod_spec("a"), pod_spec("b")], "Lost twice")
    stale = app.config["RUN_STALE_SECONDS"] + 60
    with app.app_context():
        # The first worker dies right after claiming the run.
        db.session.execute(sa.update(AgentRun).where(AgentRun.id == run_id).values(status="running"))
        db.session.commit()
        clock.advance(timedelta(seconds=stale))
        assert sweeps.reconcile_runs()["resumed"] == [run_id]
    worker()  # the resumed saga makes both pods
    with app.app_context():
        db.session.execute(sa.update(AgentRun).where(AgentRun.id == run_id).values(status="running"))
        db.session.commit()  # …and say its worker died before it could finish
        clock.advance(timedelta(seconds=stale))
        outcome = sweeps.reconcile_runs()
        assert outcome["lost"] == [run_id] and outcome["resumed"] == []
        db.session.expire_all()
        run = db.session.get(AgentRun, run_id)
        assert run.status == "failed" and run.failure_reason == "worker_lost"
        assert {p.status for p in db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id))} == {"stopped"}
        assert db.session.scalar(sa.select(Experiment.status).where(Experiment.number == number)) == "blocked"
        assert sweeps.reconcile_runs() == {"requeued": [], "lost": [], "resumed": []}


# --- Redis flushed while runs are queued -------------------------------------------------

def test_redis_flush_loses_no_queued_agent_run_or_dispatch(app, fake_anthropic, fake_runpod, worker,
                                                           make_experiment, make_approved, monkeypatch):
    """FLUSHDB (our own test database) while a planner run and a dispatch are queued: the
    reconciler puts each back on its own queue, once, and both then run to their end."""
    from services.dispatch import provisioner
    from tests.integration.test_dispatch import pod_spec
    monkeypatch.setattr(provisioner, "sleep", fake_runpod.advance)
    fake_anthropic.script(reply(text("Questions first."), tool_use("ask_questions", {"questions": [
        {"key": "seeds", "text": "How many seeds?"}]})))
    planned = make_experiment("Queued planner", status="planning")
    with monkeypatch.context() as agents_off:  # approving would start an orchestrator otherwise
        agents_off.setitem(app.config, "ANTHROPIC_API_KEY", "")
        _number, dispatch_id = _approved_dispatch(app, make_approved, [pod_spec("a")], "Queued dispatch")
    plan_id = queued_plan_run(app, planned)
    with app.app_context():
        from services.core import redis_store
        redis_store.connection().flushdb()  # the test Redis database only
        outcome = sweeps.reconcile_runs()
        assert sorted(outcome["requeued"]) == sorted([plan_id, dispatch_id])
        db.session.expire_all()  # the next scheduler tick reads the rows afresh
        assert sweeps.reconcile_runs()["requeued"] == []  # one job each, not two
    worker()
    with app.app_context():
        db.session.expire_all()
        assert db.session.get(AgentRun, plan_id).status == "completed"
        assert db.session.get(AgentRun, dispatch_id).status == "waiting"
        assert len(fake_runpod.pods) == 1
