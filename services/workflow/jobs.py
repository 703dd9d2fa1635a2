"""Putting work on the queues. Services enqueue by the job's dotted name, so the domain
never imports the worker package; jobs carry ids, never objects (ARCHITECTURE §1).

Postgres stays the source of truth: if an enqueue is lost (Redis flushed, a crash right
after commit), the scheduler's reconciler finds `queued` runs without a live job and
enqueues them again.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import uuid as uuid_lib

import sqlalchemy as sa
from flask import current_app
from rq import Queue, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer

from models import AgentRun, db
from services.claude import loader
from services.core import redis_store
from services.core.errors import SaganError

AGENTS, DISPATCH, DEFAULT, LOCAL, ARTIFACTS = "agents", "dispatch", "default", "local", "artifacts"
SHARED_QUEUES = (AGENTS, DISPATCH, DEFAULT)
# `artifacts` (redacting and sanitizing large uploads) is served by worker processes of its
# own, never beside another queue: an agent job must not wait behind a slow artifact.
ALL_QUEUES = SHARED_QUEUES + (LOCAL, ARTIFACTS)
# Each queue's timeout setting; it must exceed the job's own client retries (STYLE §12).
TIMEOUT_SETTINGS = {AGENTS: "JOB_TIMEOUT_AGENTS", DISPATCH: "JOB_TIMEOUT_DISPATCH",
                    DEFAULT: "JOB_TIMEOUT_DEFAULT", LOCAL: "JOB_TIMEOUT_LOCAL", ARTIFACTS: "JOB_TIMEOUT_ARTIFACTS"}
FAILURE_TTL = 7 * 24 * 3600
RESULT_TTL = 24 * 3600
LIVE_JOB_STATES = {"queued", "started", "deferred", "scheduled"}
# The only functions a worker runs (workers/runtime.py refuses any other name before importing
# it): whoever can write to Redis must not be able to name one of their own, such as os.system.
JOB_FUNCTIONS = frozenset({
    "workers.agents.run_agent", "workers.artifacts.process", "workers.code.run_test_step",
    "workers.code.remove_workspace", "workers.dispatch.run_dispatch", "workers.dispatch.settle_local_pod",
    "workers.dispatch.sweep_local_orphans", "workers.notify.deliver", "workers.notify.send_email",
    "workers.literature.poll_feed", "workers.day.draft_weekly_review",
})
# The only functions a job on the `local` queue may name. Its worker runs as root where local
# pods run (it starts pods and code sandboxes as their own users behind the packet filter), so
# anything else found there — however it got there, signed or not — fails without running:
# notification, feed or artifact work never runs as root. Stopping a pod on this host is here
# too: the pod runs as the pod user, so a scheduler or web process of the worker account hands
# its stop, and the sweep for orphans it cannot list, to this worker (services.dispatch.watcher).
LOCAL_JOB_FUNCTIONS = frozenset({
    "workers.agents.run_agent", "workers.code.run_test_step", "workers.code.remove_workspace",
    "workers.dispatch.run_dispatch", "workers.dispatch.settle_local_pod", "workers.dispatch.sweep_local_orphans",
})
# Jobs are written and read as JSON, never pickle: unpickling what is in Redis would run
# whatever code a writer put there before any check. Jobs carry ids only, so JSON holds them.
SERIALIZER = JSONSerializer
# The code loop's test step: a run with no agent definition, whose job is code (no model).
TEST_STEP = "code-tests"


def job_timeout(name: str, config=None) -> int:
    if name not in TIMEOUT_SETTINGS:
        raise ValueError(f"Unknown queue {name!r}; Sagan's queues are {', '.join(ALL_QUEUES)}.")
    config = current_app.config if config is None else config
    return int(config[TIMEOUT_SETTINGS[name]])


def signature(func: str, args, job_id: str, secret: str) -> str:
    """What proves a job was put on a queue by Sagan: an HMAC, under the instance's SECRET_KEY,
    of its function, arguments and id. A writer to Redis without the key cannot make one, so
    a job it enqueues — even naming one of Sagan's functions — is refused (workers/runtime.py)."""
    message = json.dumps([func, list(args or ()), job_id], separators=(",", ":")).encode()
    return hmac.new(secret.encode(), b"sagan-job\0" + message, hashlib.sha256).hexdigest()


def put(queue_name: str, func: str, args: tuple = (), *, job_id: str | None = None, **options) -> Job:
    """Every job Sagan enqueues goes through here: signed, with Sagan's TTLs (`options` for the
    rest, e.g. retry=)."""
    if queue_name == LOCAL and func not in LOCAL_JOB_FUNCTIONS:
        raise ValueError(f"{func} does not run on the {LOCAL} queue (LOCAL_JOB_FUNCTIONS): its worker would refuse it.")
    job_id = job_id or uuid_lib.uuid4().hex
    args = tuple(args)
    meta = {"signature": signature(func, args, job_id, current_app.config["SECRET_KEY"])}
    return queue(queue_name).enqueue(func, args=args, job_id=job_id, meta=meta, failure_ttl=FAILURE_TTL,
                                     result_ttl=RESULT_TTL, **options)


def queue(name: str) -> Queue:
    return Queue(name, connection=redis_store.connection(), default_timeout=job_timeout(name), serializer=SERIALIZER)


def job_is_live(job_id: str | None) -> bool:
    """True when the job exists in Redis and is waiting or running."""
    if not job_id:
        return False
    try:
        job = Job.fetch(job_id, connection=redis_store.connection(), serializer=SERIALIZER)
    except NoSuchJobError:
        return False
    return job.get_status(refresh=False) in LIVE_JOB_STATES


def forget(job_id: str) -> None:
    """Delete a job whatever its state: for one whose worker is known dead, which RQ still
    reports `started` until its own cleanup runs."""
    try:
        Job.fetch(job_id, connection=redis_store.connection(), serializer=SERIALIZER).delete()
    except NoSuchJobError:
        pass


def enqueue_unique(name: str, func: str, *args, job_id: str) -> str:
    """Enqueue `func(*args)` under a fixed job id unless that job is already live.

    A fixed id per piece of work is the lock against duplicate jobs: two hooks, a retry
    and the reconciler asking for the same run get one job.
    """
    if job_is_live(job_id):
        return job_id
    conn = redis_store.connection()
    try:
        Job.fetch(job_id, connection=conn, serializer=SERIALIZER).delete()
    except NoSuchJobError:
        pass
    put(name, func, args, job_id=job_id)
    return job_id


def enqueue_run(run_id) -> str:
    """Queue an agent run's next step on `agents` (code agents and the test step: `local`); the job id.

    Call it after committing your own transaction: it commits the session. Skips when the
    run already has a live job (other than the one calling). Each
    enqueue gets a fresh job id recorded on the run, so a run can re-queue itself when
    its worker shuts down. Two jobs for one run are harmless: the loop claims the run
    with a compare-and-set, and the second job finds nothing to do.
    """
    run_id = uuid_lib.UUID(str(run_id))
    current = get_current_job()
    existing, agent = db.session.execute(sa.select(AgentRun.rq_job_id, AgentRun.agent)
                                         .where(AgentRun.id == run_id)).one_or_none() or (None, "")
    if existing and job_is_live(existing) and not (current and current.id == existing):
        return existing
    job_id = f"agent-run-{run_id}-{uuid_lib.uuid4().hex[:8]}"
    # Agents with code tools, and the test step, run where the worktrees are (the `local` queue).
    queue_name, func = job_for(agent)
    put(queue_name, func, (str(run_id),), job_id=job_id)
    # Recorded and committed at once. Callers enqueue after their own commit (jobs run after
    # the transaction that made them), so this commit never cuts a caller's work in half. It
    # goes through the session, not a second connection: on SQLite a second connection would
    # wait for the write lock the session itself holds.
    db.session.execute(sa.update(AgentRun).where(AgentRun.id == run_id).values(rq_job_id=job_id)
                       .execution_options(synchronize_session=False))
    db.session.commit()
    return job_id


def job_for(agent: str) -> tuple[str, str]:
    """(queue, job) for a run of `agent`: code agents and the test step go to the worktree host."""
    if agent == TEST_STEP:
        return LOCAL, "workers.code.run_test_step"
    try:
        definition = loader.get(agent)
    except SaganError:
        return AGENTS, "workers.agents.run_agent"
    if loader.is_code_agent(definition.tools):
        return LOCAL, "workers.agents.run_agent"
    return AGENTS, "workers.agents.run_agent"
