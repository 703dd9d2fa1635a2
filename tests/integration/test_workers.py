"""The RQ side: queue limits, jobs in an app context, fork hygiene, the scheduler lease."""
from __future__ import annotations

import importlib.util
import logging
import os
import signal
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from rq import Queue, SimpleWorker

from models import db
from services.core import redis_store
from services.workflow import jobs
from workers import queues, runtime, scheduler
from workers.launcher import build_worker, parse_args, queue_names

_spec = importlib.util.spec_from_file_location("run_embedded", Path(__file__).resolve().parents[2] / "scripts"
                                               / "run_embedded.py")
run_embedded = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_embedded)


def backend_pid() -> int:
    """A job: the PostgreSQL backend serving this process's session (needs an app context)."""
    return db.session.execute(sa.text("SELECT pg_backend_pid()")).scalar()


# The test's own jobs, allowed beside Sagan's for these tests only.
TEST_JOBS = {"services.core.auth.owner_exists", "tests.integration.test_workers.backend_pid",
             "tests.integration.test_workers.take_the_probe_lock"}


@pytest.fixture
def job_app(app, monkeypatch):
    """Jobs run in the test app (the test's own jobs allowed); signal handlers a worker installs
    are put back afterwards."""
    monkeypatch.setattr(jobs, "JOB_FUNCTIONS", jobs.JOB_FUNCTIONS | TEST_JOBS)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    runtime.set_app(app)
    yield app
    runtime.set_app(None)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def test_each_queue_enqueues_with_its_configured_timeout(app_ctx, app):
    """Do jobs get their queue's timeout from config, and Sagan's failure TTL?"""
    expected = {"agents": app.config["JOB_TIMEOUT_AGENTS"], "dispatch": app.config["JOB_TIMEOUT_DISPATCH"],
                "default": app.config["JOB_TIMEOUT_DEFAULT"], "local": app.config["JOB_TIMEOUT_LOCAL"],
                "artifacts": app.config["JOB_TIMEOUT_ARTIFACTS"]}
    for name, timeout in expected.items():
        # `local` takes local work only (jobs.LOCAL_JOB_FUNCTIONS); only enqueued here, never run.
        func = "workers.code.remove_workspace" if name == "local" else "services.core.auth.owner_exists"
        job = queues.enqueue(name, func)
        assert (job.origin, job.timeout, job.failure_ttl) == (name, timeout, queues.FAILURE_TTL)
    with pytest.raises(ValueError, match="Unknown queue 'gpu'"):
        queues.get_queue("gpu")


def test_job_runs_inside_an_app_context(app, job_app, auth):
    """Does a job that needs the database work when the worker has no app context of its own?"""
    auth.create_owner()
    with app.app_context():
        job = queues.enqueue("default", "services.core.auth.owner_exists")
        connection = redis_store.connection()
    worker = SimpleWorker([queues.DEFAULT], connection=connection, job_class=runtime.AppContextJob)
    worker.work(burst=True)
    assert job.get_status(refresh=True) == "finished"
    assert job.return_value() is True


def test_work_horse_opens_its_own_database_connection(app, job_app):
    """Does a forked work horse leave the parent's pooled connection alone and open its own?"""
    with app.app_context():
        db.engine.dispose()  # exactly one pooled connection below, so the checks are exact
        parent_backend = backend_pid()  # now pooled in the parent, as a scheduler tick would leave it
        db.session.remove()
        job = queues.enqueue("default", "tests.integration.test_workers.backend_pid")
        worker = runtime.SaganWorker([queues.get_queue(queues.DEFAULT)], connection=redis_store.connection())
    worker.work(burst=True)
    assert job.get_status(refresh=True) == "finished", job.latest_result()
    assert job.return_value() != parent_backend
    with app.app_context():
        assert backend_pid() == parent_backend  # the parent's connection still works


PROBE_LOCK = threading.Lock()


def take_the_probe_lock() -> str:
    """A job: take the lock the test's scheduler tick holds. A horse forked mid-tick has a copy
    of it that is held for ever (nothing in the horse will release it)."""
    if not PROBE_LOCK.acquire(timeout=5):
        return "inherited a held lock"
    PROBE_LOCK.release()
    return "ok"


def test_a_horse_never_inherits_a_lock_the_scheduler_holds(app, job_app, monkeypatch, fork_wait_seen):
    """With the scheduler thread mid-tick, holding a lock, when a job is due, does the worker
    fork only after the tick (as when the first tick configured SQLAlchemy's mappers under
    their mutex and the horse waited on it for ever)?"""
    holding = threading.Event()

    def tick_holding_a_lock(app):
        with PROBE_LOCK:
            holding.set()
            fork_wait_seen.wait(timeout=10)  # without the guard, nothing waits: let go later

    monkeypatch.setattr(scheduler, "tick", tick_holding_a_lock)
    thread = threading.Thread(target=scheduler.Scheduler(app, interval=30).run_once)
    thread.start()
    try:
        assert holding.wait(10)
        with app.app_context():
            job = queues.enqueue("default", "tests.integration.test_workers.take_the_probe_lock")
            worker = runtime.SaganWorker([queues.get_queue(queues.DEFAULT)], connection=redis_store.connection())
        worker.work(burst=True)
    finally:
        thread.join(15)
    assert job.get_status(refresh=True) == "finished", job.latest_result()
    assert job.return_value() == "ok"
    assert fork_wait_seen.is_set()


def test_only_one_scheduler_ticks_at_a_time(app, monkeypatch):
    """With two launchers, does only the lease holder tick, and does the other take over after?"""
    ticks = []
    monkeypatch.setattr(scheduler, "tick", lambda app: ticks.append(app))
    first, second = scheduler.Scheduler(app, interval=1), scheduler.Scheduler(app, interval=1)
    assert first.run_once() is True
    assert second.run_once() is False
    assert first.run_once() is True  # the holder extends its lease
    first.release_lease()
    assert second.run_once() is True
    assert len(ticks) == 3


def test_a_failing_tick_does_not_stop_the_scheduler(app, monkeypatch, caplog):
    """Is an exception in a tick logged and the loop kept alive?"""
    def broken(app):
        raise RuntimeError("tick exploded")
    monkeypatch.setattr(scheduler, "tick", broken)
    assert scheduler.Scheduler(app, interval=1).run_once() is False
    assert "scheduler tick failed" in caplog.text


def test_scheduler_loop_stops_and_releases_its_lease(app):
    """Does stop() end the thread promptly and free the lease for another launcher?"""
    loop = scheduler.Scheduler(app, interval=30)
    thread = loop.start()
    loop.stop(timeout=5)
    assert not thread.is_alive()
    with app.app_context():
        assert redis_store.connection().get(scheduler.LEASE_KEY) is None


def test_launcher_serves_local_only_when_asked(app):
    """Does the launcher add the `local` queue only with --local (or SAGAN_LOCAL_PODS)?"""
    assert queue_names(parse_args([]), {"SAGAN_LOCAL_PODS": False}) == ["agents", "dispatch", "default"]
    assert queue_names(parse_args([]), {"SAGAN_LOCAL_PODS": True})[-1] == "local"
    assert queue_names(parse_args(["--local"]), {"SAGAN_LOCAL_PODS": False})[-1] == "local"
    with pytest.raises(SystemExit, match="Unknown queue"):
        queue_names(parse_args(["--queues", "agents,gpu"]), {"SAGAN_LOCAL_PODS": False})


def test_the_artifacts_queue_is_served_only_by_a_worker_of_its_own(app):
    """Is `artifacts` never beside another queue in one worker (a job there would make an agent
    job wait): off the default list, alone with --queues artifacts (no `local` added even where
    local pods run), refused next to another queue; and does `make run` start such a worker?"""
    assert "artifacts" not in queue_names(parse_args([]), {"SAGAN_LOCAL_PODS": True})
    assert queue_names(parse_args(["--queues", "artifacts"]), {"SAGAN_LOCAL_PODS": True}) == ["artifacts"]
    for argv in (["--queues", "agents,artifacts"], ["--queues", "artifacts", "--local"]):
        with pytest.raises(SystemExit, match="runs in a worker of its own"):
            queue_names(parse_args(argv), {"SAGAN_LOCAL_PODS": False})
    served = [queue_names(parse_args(argv[3:]), {"SAGAN_LOCAL_PODS": True}) for argv in run_embedded.WORKERS.values()]
    assert ["artifacts"] in served and any("agents" in names for names in served)


def test_make_run_as_root_keeps_root_for_the_local_queue_alone(app):
    """Started as root, `make run` splits its workers: the one left as root serves `local` and
    nothing else, the ones run as the worker account never `local` (even with local pods on)."""
    served = {name: queue_names(parse_args(argv[3:]), {"SAGAN_LOCAL_PODS": True})
              for name, argv in run_embedded.ROOT_WORKERS.items()}
    assert [served[name] for name in run_embedded.ROOT_ONLY] == [["local"]]
    unprivileged = [names for name, names in served.items() if name not in run_embedded.ROOT_ONLY]
    assert sorted(sum(unprivileged, [])) == sorted(["agents", "dispatch", "default", "artifacts"])


def test_sagan_worker_always_runs_jobs_in_the_app(app, job_app):
    """Does `rq worker -w workers.runtime.SaganWorker` (which passes rq's own Job class) still
    give every job an app context?"""
    from rq.job import Job
    with app.app_context():
        worker = runtime.SaganWorker([queues.DEFAULT], connection=redis_store.connection(), job_class=Job)
    assert worker.job_class is runtime.AppContextJob


def test_the_worker_waits_for_jobs_without_redis_timeouts_after_start(app, caplog):
    """The worker's blocking dequeue must not time out on connections the app's Redis
    client opened before the worker set its socket timeout (it used to log "could not
    connect to Redis instance" and back off for a minute after every start)."""
    with app.app_context():
        shared = redis_store.connection()
        # What start-up does on the shared client before the worker exists: several
        # connections opened at once (the ping, the queues, the scheduler thread's lease).
        held = [shared.connection_pool.get_connection() for _ in range(3)]
        for conn in held:
            conn.send_command("PING")
            conn.read_response()
            shared.connection_pool.release(conn)
        worker_queues = [queues.get_queue("default")]
    # worker_ttl 22: the dequeue blocks 7 s, past the shared client's 5 s socket timeout.
    worker = build_worker(worker_queues, app, worker_ttl=22)
    assert worker.dequeue_timeout == 7
    caplog.set_level(logging.ERROR, logger="rq.worker")
    dequeued = []
    # In a thread with a bound: on a timed-out connection RQ logs, backs off and retries.
    waiting = threading.Thread(target=lambda: dequeued.append(worker.dequeue_job_and_maintain_ttl(
        worker.dequeue_timeout, max_idle_time=worker.dequeue_timeout)), daemon=True)
    waiting.start()
    waiting.join(timeout=20)
    assert not [r.getMessage() for r in caplog.records if "could not connect to Redis" in r.getMessage()]
    assert dequeued == [None], "the dequeue did not come back after its 7 s wait"
    # The worker's long socket timeout is set on a pool of its own, not the app's shared one.
    assert worker.connection.connection_pool is not shared.connection_pool


class Loot:
    """Pickled, it calls os.system when unpickled: what a writer to Redis could put in a job."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def run_one_job(app, queue_name: str) -> None:
    """Work `queue_name` once, in-process, as the deployed worker's class would."""
    with app.app_context():
        worker = SimpleWorker([queues.get_queue(queue_name)], connection=redis_store.connection(),
                              job_class=runtime.AppContextJob, serializer=jobs.SERIALIZER)
    worker.work(burst=True, with_scheduler=False)


def test_a_job_naming_a_foreign_function_is_refused_without_running(app, tmp_path):
    """A job put on Redis by someone else, naming os.system: does it fail, saying why, without running?"""
    marker = tmp_path / "ran"
    with app.app_context():
        job = queues.get_queue(queues.DEFAULT).enqueue("os.system", args=(f"touch {marker}",))
    run_one_job(app, queues.DEFAULT)
    assert not marker.exists()
    assert job.get_status(refresh=True) == "failed"
    assert "'os.system' is not one of Sagan's job functions" in job.latest_result().exc_string


def test_a_job_without_sagans_signature_is_refused_even_naming_sagans_function(app, job_app, tmp_path):
    """A job put on Redis by someone without SECRET_KEY, naming one of Sagan's own functions (or
    carrying a signature for other arguments): is it refused without running, while a job Sagan
    signed runs?"""
    with app.app_context():
        unsigned = queues.get_queue(queues.DEFAULT).enqueue("services.core.auth.owner_exists")
        signed = queues.enqueue(queues.DEFAULT, "services.core.auth.owner_exists")
        borrowed = queues.get_queue(queues.DEFAULT).enqueue(
            "services.core.auth.owner_exists", args=("other",), meta={"signature": signed.meta["signature"]})
    run_one_job(app, queues.DEFAULT)
    with app.app_context():
        assert signed.get_status(refresh=True) == "finished"
        for job in (unsigned, borrowed):
            assert job.get_status(refresh=True) == "failed"
            assert "does not carry Sagan's signature" in job.latest_result().exc_string


def test_a_pickled_job_is_never_unpickled(app, job_app, tmp_path):
    """A job written with RQ's default (pickle) serializer, whose arguments run a command when
    unpickled: does the worker fail it without unpickling anything, and go on to the next job?"""
    marker = tmp_path / "unpickled"
    with app.app_context():
        plain = Queue(queues.DEFAULT, connection=redis_store.connection())  # RQ's default serializer: pickle
        job = plain.enqueue("workers.notify.deliver", Loot(marker))
        after = queues.enqueue(queues.DEFAULT, "services.core.auth.owner_exists")
    run_one_job(app, queues.DEFAULT)
    assert not marker.exists()
    with app.app_context():
        assert redis_store.connection().hget(job.key, "status") == b"failed"
        assert after.get_status(refresh=True) == "finished"


def test_the_local_queue_runs_only_local_work_even_when_signed(app, job_app, tmp_path):
    """The `local` queue's worker may be root. A job there naming one of Sagan's other functions
    (here a notification delivery) — put on Redis by whoever could write to it, or signed by
    mistake — must fail without running; and Sagan itself refuses to enqueue one there."""
    with app.app_context():
        func, args, job_id = "workers.notify.deliver", ("00000000-0000-0000-0000-000000000000",), "stray-on-local"
        signature = jobs.signature(func, args, job_id, app.config["SECRET_KEY"])
        stray = queues.get_queue(queues.LOCAL).enqueue(func, args=args, job_id=job_id, meta={"signature": signature})
        with pytest.raises(ValueError, match="does not run on the local queue"):
            queues.enqueue(queues.LOCAL, "workers.notify.deliver", "00000000-0000-0000-0000-000000000000")
    run_one_job(app, queues.LOCAL)
    with app.app_context():
        assert stray.get_status(refresh=True) == "failed"
        assert "does not run on the local queue" in stray.latest_result().exc_string


def test_a_dispatch_of_pods_on_this_host_goes_to_the_local_queue(app, app_ctx):
    """Only the `local` queue's worker may start pods on this host (it is the one that can be
    root); a dispatch to a remote account goes to `dispatch`, which never needs root."""
    from services.dispatch import provisioner
    from services.workflow import runs
    made = {}
    for account in ("local", "team"):
        made[account] = runs.create_run(kind="experiment", agent=provisioner.PROVISIONER, pod_account=account,
                                        request="Dispatch the approved spec.").id
    db.session.commit()
    assert provisioner.dispatch_queue(made["local"]) == queues.LOCAL
    assert provisioner.dispatch_queue(made["team"]) == queues.DISPATCH
