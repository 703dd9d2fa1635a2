"""Agent runs and their events (SPEC §5.2, §5.4).

Appending an event takes its `seq` from the run row with one UPDATE … RETURNING, so
concurrent writers (a tool thread, the watcher) never hand out the same number; every
body and metadata passes the redactor and is capped before it is stored.
"""
from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from flask import current_app

from models import AgentRun, Experiment, Pod, RunEvent, User, db
from services.core import events, lean_reads, registry
from services.core.clock import utcnow
from services.core.errors import Conflict, NotFound, ValidationError
from services.core.records import get_by_id
from services.core.redact import redact, redact_data
from services.workflow import experiments, lifecycle


def get_run(run_id) -> AgentRun:
    return get_by_id(AgentRun, run_id, "No such run.")


def _cap(body: str | None, limit: int) -> tuple[str | None, int | None]:
    if body is None:
        return None, None
    encoded = body.encode()
    if len(encoded) <= limit:
        return body, None
    cut = encoded[:limit].decode(errors="ignore")
    return cut + f"\n… [truncated: {len(encoded):,} bytes in all]", len(encoded)


def append_event(run_id, event_type: str, body: str | None = None, metadata: dict | None = None) -> RunEvent:
    """Add one event to a run's log with the next seq; the caller commits."""
    if event_type not in registry.RUN_EVENT_TYPES:
        raise ValidationError(f"Unknown run event type {event_type!r}.", field="event_type")
    seq = db.session.execute(
        sa.update(AgentRun).where(AgentRun.id == run_id).values(last_seq=AgentRun.last_seq + 1)
        .returning(AgentRun.last_seq).execution_options(synchronize_session=False)).scalar()
    if seq is None:
        raise NotFound("No such run.")
    limit = current_app.config["EVENT_BODY_MAX"]
    body, original = _cap(redact(body), limit)
    metadata = redact_data(metadata) if metadata else None
    if metadata is not None and len(json.dumps(metadata)) > limit:
        metadata = {"truncated_from": len(json.dumps(metadata)), "note": "metadata too large to keep"}
    if original:
        metadata = {**(metadata or {}), "truncated_from": original}
    now = utcnow()
    event = RunEvent(id=uuid.uuid4(), run_id=run_id, seq=seq, event_type=event_type, body=body,
                     metadata_=metadata, created_at=now, updated_at=now)
    db.session.add(event)
    return event


# --- lifecycle -------------------------------------------------------------------------

def create_run(*, kind: str, agent: str, request: str, scope_id=None, scope_kind: str = "experiment",
               parent_run_id=None, resumes_run_id=None, model: str | None = None,
               pod_account: str | None = None, status: str = "queued", wake_at=None) -> AgentRun:
    """A new run row (queued unless told otherwise); the caller commits and enqueues."""
    if kind not in registry.RUN_KINDS:
        raise ValidationError(f"Unknown run kind {kind!r}.", field="kind")
    run = AgentRun(id=uuid.uuid4(), kind=kind, agent=agent, request=redact(request) or "",
                   scope_kind=scope_kind, scope_id=scope_id, parent_run_id=parent_run_id,
                   resumes_run_id=resumes_run_id, model=model, pod_account=pod_account,
                   status=status, wake_at=wake_at, conversation=None)
    db.session.add(run)
    db.session.flush()
    return run


def claim(run_id, from_statuses, to: str, *, stale_before=None) -> bool:
    """Compare-and-set a run's status: True when this caller moved it from one of
    `from_statuses` to `to` — of two workers or schedulers racing, exactly one wins. Claiming
    a run to `running` stamps its heartbeat and first start. With `stale_before`, only a run
    whose heartbeat is older (or missing) can be claimed: a worker that died, not a slow one.
    On False the caller rolls back."""
    now = utcnow()
    query = sa.update(AgentRun).where(AgentRun.id == run_id, AgentRun.status.in_(tuple(from_statuses)))
    if stale_before is not None:
        query = query.where(sa.or_(AgentRun.heartbeat_at < stale_before, AgentRun.heartbeat_at.is_(None)))
    values = {"status": to}
    if to == "running":
        values.update(heartbeat_at=now, started_at=sa.func.coalesce(AgentRun.started_at, now))
    return db.session.execute(query.values(**values).execution_options(synchronize_session=False)).rowcount == 1


def set_status(run: AgentRun, status: str, *, reason: str | None = None, error: str | None = None) -> None:
    """Move a run's status; terminal statuses stamp completion. The caller commits."""
    if status not in registry.RUN_STATUSES:
        raise ValidationError(f"Unknown run status {status!r}.")
    now = utcnow()
    run.status = status
    if status == "running" and run.started_at is None:
        run.started_at = now
    if status in registry.RUN_TERMINAL_STATUSES:
        run.completed_at = now
        run.wake_at = None
        run.waiting_for = None
    if reason is not None:
        if reason not in registry.FAILURE_REASONS:
            raise ValidationError(f"Unknown failure reason {reason!r}.")
        run.failure_reason = reason
    if error is not None:
        run.last_error = redact(error)[:8000]


def heartbeat(run_id) -> None:
    """Record that the worker running this run is alive (its own short transaction)."""
    with db.engine.begin() as conn:
        conn.execute(sa.update(AgentRun.__table__).where(AgentRun.__table__.c.id == run_id)
                     .values(heartbeat_at=utcnow()))


def request_cancel(run: AgentRun) -> None:
    """Ask a run to stop: checked between steps; queued or waiting runs stop at once."""
    if run.terminal:
        raise ValidationError(f"Run {run.short_id} already ended ({run.status}).")
    run.cancel_requested_at = utcnow()


def events_after(run_id, after: int = 0, limit: int = 500) -> list[RunEvent]:
    """Events with seq > after, oldest first (the polling cursor)."""
    return list(db.session.scalars(
        sa.select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.seq > after)
        .order_by(RunEvent.seq).limit(limit)))


def latest_events(run_id, limit: int = 200) -> list[RunEvent]:
    """The last `limit` events, oldest first (a run page's first render)."""
    rows = list(db.session.scalars(
        sa.select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq.desc()).limit(limit)))
    return rows[::-1]


def latest_events_of(run_ids, limit: int) -> dict:
    """run id → its last `limit` events, oldest first, for many runs in one query (the run
    page's sub-agents: a window per run, not a query per run)."""
    ids = list(run_ids)
    if not ids:
        return {}
    ranked = sa.select(RunEvent.id, sa.func.row_number().over(
        partition_by=RunEvent.run_id, order_by=RunEvent.seq.desc()).label("rank")).where(
        RunEvent.run_id.in_(ids)).subquery()
    found: dict = {run_id: [] for run_id in ids}
    for event in db.session.scalars(sa.select(RunEvent).join(ranked, RunEvent.id == ranked.c.id)
                                    .where(ranked.c.rank <= limit).order_by(RunEvent.run_id, RunEvent.seq)):
        found[event.run_id].append(event)
    return found


def events_before(run_id, before: int, limit: int = 200) -> list[RunEvent]:
    """Older events for "show earlier", oldest first."""
    rows = list(db.session.scalars(
        sa.select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.seq < before)
        .order_by(RunEvent.seq.desc()).limit(limit)))
    return rows[::-1]


def runs_for_experiment(experiment_id) -> list[AgentRun]:
    return list(db.session.scalars(
        sa.select(AgentRun).where(AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment_id)
        .order_by(AgentRun.created_at.desc())))


def list_runs(*, experiment_id=None, status: str | None = None, kind: str | None = None,
              classification: str | None = None, limit: int = 100) -> list[AgentRun]:
    """Runs newest first, filtered; the growing conversation column is not loaded. A
    classification outside registry.RUN_CLASSIFICATIONS is a ValidationError ("pending" is
    the unclassified runs)."""
    from sqlalchemy.orm import defer
    query = (sa.select(AgentRun).options(defer(AgentRun.conversation))
             .order_by(AgentRun.created_at.desc()).limit(limit))
    if experiment_id is not None:
        query = query.where(AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment_id)
    if status:
        if status not in registry.RUN_STATUSES:
            raise ValidationError(f"Unknown run status {status!r}.", field="status")
        query = query.where(AgentRun.status == status)
    if kind:
        if kind not in registry.RUN_KINDS:
            raise ValidationError(f"Unknown run kind {kind!r}.", field="kind")
        query = query.where(AgentRun.kind == kind)
    if classification:
        if classification not in registry.RUN_CLASSIFICATIONS:
            raise ValidationError("Filter runs by a classification among: "
                                  + ", ".join(registry.RUN_CLASSIFICATIONS) + ".", field="classification")
        query = query.where(AgentRun.classification == classification)
    return list(db.session.scalars(query))


@dataclass(frozen=True)
class PollState:
    """What the run page's poll reads: the run's status and last seq, and the session
    version of the user the poll asked about (None: no such user, or none asked)."""
    status: str
    last_seq: int
    session_version: int | None


@functools.cache
def _poll_query():
    """Built once: the run's two narrow columns (a poll must not load the conversation) and,
    beside them, the session user's session version, so the session check shares the round trip."""
    # Only the owner's session: a member's cookie finds no version here, so the poll goes on
    # to Flask, whose access rule answers it (services/core/permissions.py).
    session_version = sa.select(User.session_version) \
        .where(User.id == sa.bindparam("user_id"), User.role == "owner").scalar_subquery()
    return sa.select(session_version, AgentRun.status, AgentRun.last_seq) \
        .where(AgentRun.id == sa.bindparam("run_id"))


def poll_state(run_id: uuid.UUID, user_id: uuid.UUID | None = None) -> PollState | None:
    """The poll's one read (services/core/lean_reads.py), afresh on every call; None for no such run."""
    row = lean_reads.first_row(_poll_query(), {"run_id": run_id, "user_id": user_id})
    if row is None:
        return None
    return PollState(status=row[1], last_seq=row[2], session_version=row[0])


def experiment_numbers(run_list) -> dict:
    """scope_id → experiment number for a list of runs, in one query."""
    return experiments.numbers_by_id(r.scope_id for r in run_list if r.scope_kind == "experiment")


def latest_event_at(run_id):
    return db.session.scalar(sa.select(RunEvent.created_at).where(RunEvent.run_id == run_id)
                             .order_by(RunEvent.seq.desc()).limit(1))


def recoveries_of(run: AgentRun) -> list[AgentRun]:
    """Runs queued to recover this one ("Resume history")."""
    from sqlalchemy.orm import defer
    return list(db.session.scalars(sa.select(AgentRun).options(defer(AgentRun.conversation))
                                   .where(AgentRun.resumes_run_id == run.id).order_by(AgentRun.created_at)))


def pods_of(run: AgentRun) -> list:
    return list(db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run.id).order_by(Pod.created_at)))


def children(run: AgentRun) -> list[AgentRun]:
    return list(db.session.scalars(sa.select(AgentRun).where(AgentRun.parent_run_id == run.id)
                                   .order_by(AgentRun.created_at)))


CANCEL_NOTE = "Run cancelled by owner"


def cancel_run(run: AgentRun, actor) -> list:
    """The owner cancels a run (SPEC §5.3); returns side effects to run after commit.

    A queued or waiting run stops at once. A running one is asked to stop: the loop checks
    between steps (cooperative), and the scheduler hard-stops it after a grace period.
    Either way the experiment goes to `blocked` ("Run cancelled by owner"), not `cancelled`,
    and the run's pods are stopped with their volumes kept. A run that already ended is a
    Conflict: there is nothing to cancel.
    """
    if run.terminal:
        raise Conflict(f"Run {run.short_id} already ended ({run.status}); there is nothing to cancel.",
                       code="run_ended", status=run.status)
    request_cancel(run)
    if run.status == "running":
        append_event(run.id, "cancelled", "Cancel requested by the owner; stopping after the current step.",
                     {"requested_by": actor.kind, "cooperative": True})
        return []
    return finish_cancel(run, actor)


def finish_cancel(run: AgentRun, actor) -> list:
    """Mark a run cancelled and block its experiment; the caller commits."""
    set_status(run, "cancelled", reason="cancelled_by_owner", error=CANCEL_NOTE)
    append_event(run.id, "cancelled", CANCEL_NOTE, {"by": actor.kind})
    effects = [lifecycle.SideEffect("stop_run_pods", run.scope_id, actor, {"run_id": str(run.id)})]
    for child in children(run):
        if child.terminal:
            continue
        # Stamped on every child, so one a worker claims meanwhile still sees it between steps.
        child.cancel_requested_at = child.cancel_requested_at or utcnow()
        if child.status == "running":
            # Its worker is mid-step: it stops cooperatively, as an owner's cancel does, and
            # ends itself cancelled (never completed on top of the cancel).
            append_event(child.id, "cancelled", "Parent run cancelled by owner; stopping after the current step.",
                         {"cooperative": True})
        else:
            set_status(child, "cancelled", reason="cancelled_by_owner", error="Parent run cancelled")
            append_event(child.id, "cancelled", "Parent run cancelled by owner")
    experiment = db.session.get(Experiment, run.scope_id) if run.scope_kind == "experiment" and run.scope_id else None
    if experiment is not None and not experiment.terminal and experiment.status != "blocked" \
            and run.parent_run_id is None:
        effects += lifecycle.transition(experiment, "blocked", actor, note=CANCEL_NOTE,
                                        metadata={"run_id": str(run.id)})
    if experiment is not None and _planning_waited_on(run):
        # The timeline promised that a new planning run starts as this one ends; it will not.
        events.record(experiment, "note", actor,
                      note=f"The planning request that waited on run {run.short_id} is dropped with the cancel; "
                           "move the experiment back to planning to plan again.", metadata={"run_id": str(run.id)})
    return effects


def _planning_waited_on(run: AgentRun) -> bool:
    return bool(db.session.scalar(sa.select(sa.func.count(RunEvent.id)).where(
        RunEvent.run_id == run.id, RunEvent.event_type == registry.QUEUED_PLANNING_EVENT)))


# Run events that record a gate the run passed or failed: the dispatch's preflight, the
# completion audit an agent's request for awaiting_promotion met.
CHECK_EVENTS = {"preflight": "preflight", "completion_audit": "completion audit"}


@dataclass(frozen=True)
class RunCheck:
    label: str
    passed: bool
    summary: str


def checks_of(run_ids) -> dict:
    """Each run's latest preflight / completion-audit verdict (run id → [RunCheck]), one query,
    for the run tree."""
    ids = list(run_ids)
    if not ids:
        return {}
    rows = db.session.execute(sa.select(RunEvent.run_id, RunEvent.event_type, RunEvent.body, RunEvent.metadata_)
                              .where(RunEvent.run_id.in_(ids), RunEvent.event_type.in_(tuple(CHECK_EVENTS)))
                              .order_by(RunEvent.seq))
    latest: dict = {}
    for run_id, event_type, body, metadata in rows:
        latest[(run_id, event_type)] = RunCheck(CHECK_EVENTS[event_type], (metadata or {}).get("verdict") == "pass",
                                                body or "")
    found: dict = {}
    for (run_id, _), check in latest.items():
        found.setdefault(run_id, []).append(check)
    return found


def as_tree(rows: list[AgentRun]) -> list[tuple[AgentRun, int]]:
    """Runs as a tree, depth first: each top-level run (newest first) followed by the runs it
    started (oldest first: the order they ran in), each with its depth. A run whose parent is
    not among `rows` is top level."""
    ids = {run.id for run in rows}
    children: dict = {}
    for run in rows:
        children.setdefault(run.parent_run_id if run.parent_run_id in ids else None, []).append(run)
    ordered: list[tuple[AgentRun, int]] = []

    def walk(run: AgentRun, depth: int) -> None:
        ordered.append((run, depth))
        for child in sorted(children.get(run.id, []), key=lambda r: r.created_at):
            walk(child, depth + 1)

    for top in children.get(None, []):
        walk(top, 0)
    return ordered


# --- classification (SPEC §12.3): was the run worth its cost? --------------------------------

def clean_classification(raw) -> str:
    value = str(raw or "").strip().lower().replace(" ", "_").replace("-", "_")
    if value not in registry.RUN_CLASSIFICATIONS:
        raise ValidationError("A run's classification is one of: " + ", ".join(registry.RUN_CLASSIFICATIONS) + ".",
                              field="classification")
    return value


def classify(run: AgentRun, raw, by: str) -> bool:
    """Set the run's classification; `by` is "owner" (always wins) or "agent" (a suggestion,
    never over the owner's choice). True when the value was applied. The caller commits."""
    if by not in registry.RUN_CLASSIFIERS:
        raise ValueError(f"unknown classifier {by!r}")
    value = clean_classification(raw)
    if by == "agent" and run.classification_by == "owner":
        return False
    run.classification = value
    run.classification_by = by
    return True
