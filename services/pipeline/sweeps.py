"""The scheduler's sweeps over runs: re-enqueue a queued run whose job vanished, fail (or,
for a dispatch, resume) a running run whose heartbeat stopped, and enforce a cancel the
run did not honour in time. Each is safe to run from several schedulers at once.
"""
from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from flask import current_app
from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError

from models import AgentRun, db
from services.core import redis_store
from services.core.actors import Actor
from services.core.clock import utcnow
from services.dispatch import provisioner, recovery
from services.workflow import jobs, lifecycle, runs


def reconcile_runs(limit: int = 200) -> dict:
    """Scheduler: re-enqueue queued runs whose job vanished; fail running runs gone stale
    (a dispatch whose worker died resumes its saga once instead: provisioner.recover_lost)."""
    cfg = current_app.config
    requeued, lost, resumed = [], [], []
    # A list, not a streaming result: enqueueing commits the session as it goes.
    queued = list(db.session.scalars(sa.select(AgentRun).where(AgentRun.status == "queued").limit(limit)))
    for run in queued:
        if provisioner.is_dispatch(run):
            # A dispatch's job has a fixed id on the dispatch queue, never an agent-run job.
            if not jobs.job_is_live(provisioner.dispatch_job_id(run.id)):
                provisioner.enqueue_dispatch(run.id)
                requeued.append(run.id)
        elif not jobs.job_is_live(run.rq_job_id):
            jobs.enqueue_run(run.id)
            requeued.append(run.id)
    stale_before = utcnow() - timedelta(seconds=cfg["RUN_STALE_SECONDS"])
    stale = list(db.session.scalars(sa.select(AgentRun).where(
        AgentRun.status == "running",
        sa.or_(AgentRun.heartbeat_at < stale_before, AgentRun.heartbeat_at.is_(None))).limit(limit)))
    for run in stale:
        if provisioner.is_dispatch(run):
            outcome = provisioner.recover_lost(run, stale_before)
            if outcome == "resumed":
                resumed.append(run.id)
            elif outcome == "failed":
                lost.append(run.id)
            continue
        # Claim it with a compare-and-set so two schedulers cannot both fail it.
        if not runs.claim(run.id, ("running",), "failed", stale_before=stale_before):
            continue
        db.session.refresh(run)
        outcome = recovery.fail(run, "worker_lost",
                                f"No heartbeat since {run.heartbeat_at.isoformat() if run.heartbeat_at else 'start'}; "
                                "the worker died or stopped.")
        db.session.commit()
        lifecycle.run_side_effects(outcome.effects)
        lost.append(run.id)
    return {"requeued": requeued, "lost": lost, "resumed": resumed}


def hard_stop_cancelled() -> list:
    """Scheduler: a cancel the loop has not honoured within the grace period is enforced.

    The job is stopped through RQ (the work horse is killed) and the run is marked
    cancelled; the experiment is blocked as for any cancel.
    """
    grace = timedelta(seconds=current_app.config["CANCEL_GRACE_SECONDS"])
    overdue = list(db.session.scalars(sa.select(AgentRun).where(
        AgentRun.status == "running", AgentRun.cancel_requested_at < utcnow() - grace)))
    stopped = []
    for run in overdue:
        try:
            if run.rq_job_id:
                send_stop_job_command(redis_store.connection(), run.rq_job_id, serializer=jobs.SERIALIZER)
        except (InvalidJobOperation, NoSuchJobError):
            pass  # the job already ended or vanished; the row is what matters
        effects = runs.finish_cancel(run, Actor.owner_like())
        runs.append_event(run.id, "cancelled", "Hard stop: the run did not stop within the grace period.")
        db.session.commit()
        lifecycle.run_side_effects(effects)
        stopped.append(run.id)
    return stopped
