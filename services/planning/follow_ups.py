"""Follow-up experiments (SPEC §8.6): children created from a result, by the owner or by
the follow-up proposer, linked to their parent both ways.

Asking Claude for follow-ups is a status (SPEC §2.3): moving a result (awaiting_promotion
or reviewing) to `followups_running` queues the `follow-up-proposer`, and when that run
has ended — however it ended — the scheduler moves the experiment back to where it was,
with a note saying what was proposed. The way back is read from the database each tick,
never remembered in a process, so a worker that dies mid-run cannot strand the result.
"""
from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from models import AgentRun, Experiment, WorkflowEvent, db
from services.claude import loader
from services.core import events, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, Forbidden, ValidationError
from services.workflow import experiments, jobs, lifecycle, orchestration, runs

MAX_PER_PROPOSAL = 3
PROPOSER = "follow-up-proposer"
PROPOSER_REQUEST = ("Propose the follow-up experiments this result suggests (at most three) with "
                    "propose_follow_ups, then post epm:follow-ups listing them.")
# How long an entry into followups_running may go without a proposer run before the scheduler
# takes it back (the hook that queues the run runs just after the move commits).
START_GRACE = timedelta(seconds=60)
ACTIVE = registry.RUN_ACTIVE_STATUSES


def create_follow_up(parent: Experiment, data: dict, actor: Actor, *, auto_approve: bool = False) -> Experiment:
    """A child experiment in `proposed`; an agent's is labelled "proposed by Claude".

    Only the owner may turn on `auto_approve_plan` (SPEC §9.2: no token or agent can).
    The caller commits.
    """
    if not isinstance(data, dict):
        raise ValidationError("A follow-up is an object with a title and a hypothesis.")
    if auto_approve and actor.kind != "owner":
        raise Forbidden("Only the owner can let a follow-up's plan be approved automatically.",
                        code="owner_session_required")
    by_agent = actor.kind in ("agent", "token")
    fields = {"title": data.get("title"), "kind": parent.kind, "tags": _tags(parent)}
    if data.get("hypothesis") not in (None, ""):
        fields["hypothesis"] = data["hypothesis"]
    who = "Claude" if by_agent else "the owner"
    child = experiments.create_experiment(fields, actor, note=f"Follow-up of #{parent.number}, proposed by {who}.")
    child.parent_experiment_id = parent.id
    child.proposed_by_agent = by_agent
    child.auto_approve_plan = bool(auto_approve)
    child.pod_account = parent.pod_account
    events.record(parent, "note", actor, note=f"Follow-up #{child.number} proposed by {who}: {child.title}"[:1900],
                  metadata={"follow_up": child.number, "by_agent": by_agent})
    return child


def _tags(parent: Experiment) -> list[str]:
    return [t for t in (parent.tags or []) if t not in ("follow-up", "demo")][:10] + ["follow-up"]


def propose(parent: Experiment, items, actor: Actor) -> list[Experiment]:
    """One to three follow-ups at once (the proposer's tool)."""
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_PER_PROPOSAL:
        raise ValidationError(f"Propose one to {MAX_PER_PROPOSAL} follow-ups.")
    return [create_follow_up(parent, item, actor) for item in items]


def children(experiment: Experiment) -> list[Experiment]:
    return list(db.session.scalars(sa.select(Experiment).where(Experiment.parent_experiment_id == experiment.id)
                                   .order_by(Experiment.number)))


# --- asking the follow-up proposer (the followups_running round trip) -----------------------------

def _entry(experiment: Experiment) -> WorkflowEvent | None:
    """The state change that put the experiment into followups_running."""
    return db.session.scalar(sa.select(WorkflowEvent).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed",
        WorkflowEvent.to_status == "followups_running").order_by(WorkflowEvent.created_at.desc()).limit(1))


def _proposer_runs(experiment: Experiment, since) -> list[AgentRun]:
    query = sa.select(AgentRun).where(AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment.id,
                                      AgentRun.agent == PROPOSER)
    if since is not None:
        query = query.where(AgentRun.created_at >= since)
    return list(db.session.scalars(query.order_by(AgentRun.created_at)))


def start_proposer(experiment_id, actor: Actor, metadata: dict) -> AgentRun | None:
    """After the move into followups_running: queue the proposer (one at a time). Without an
    API key nobody can propose, so the experiment goes straight back, saying why."""
    experiment = db.session.get(Experiment, experiment_id)
    if experiment is None or experiment.status != "followups_running":
        return None
    if not orchestration.agents_enabled():
        effects = _go_back(experiment, "No ANTHROPIC_API_KEY is configured, so Claude cannot propose follow-ups; "
                                       "add them by hand under Follow-ups.")
        db.session.commit()
        lifecycle.run_side_effects(effects)
        return None
    entry = _entry(experiment)
    if any(r.status in ACTIVE for r in _proposer_runs(experiment, entry.created_at if entry else None)):
        return None
    run = runs.create_run(kind="qa", agent=PROPOSER, request=PROPOSER_REQUEST, scope_id=experiment.id,
                          model=loader.model_for(loader.get(PROPOSER)), pod_account=experiment.pod_account)
    events.record(experiment, "note", Actor.system(), note=f"Follow-up proposer {run.short_id} queued.",
                  metadata={"run_id": str(run.id)})
    db.session.commit()
    jobs.enqueue_run(run.id)
    return run


RESULT_STATUSES = ("awaiting_promotion", "reviewing")


def _go_back(experiment: Experiment, note: str) -> list:
    """Back to the result status the experiment asked from (compare-and-set). The latest entry
    may be an unblock (blocked → followups_running), so look for the move that asked."""
    came_from = db.session.scalar(sa.select(WorkflowEvent.from_status).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed",
        WorkflowEvent.to_status == "followups_running", WorkflowEvent.from_status.in_(RESULT_STATUSES))
        .order_by(WorkflowEvent.created_at.desc()).limit(1))
    return lifecycle.transition(experiment, came_from or "awaiting_promotion", Actor.system("Sagan"),
                                note=note[:1900], expected_status="followups_running")


def _summary(experiment: Experiment, ended: list[AgentRun], since) -> str:
    new = [c for c in children(experiment) if since is None or c.created_at >= since]
    proposed = (f"proposed {', '.join(f'#{c.number}' for c in new)}" if new
                else "nothing was proposed; add follow-ups by hand under Follow-ups")
    if not ended:
        return f"No follow-up proposer started; {proposed}."
    last = ended[-1]
    how = last.status if last.status == "completed" else f"{last.status} ({last.failure_reason or 'no reason'})"
    return f"Follow-up proposer {last.short_id} {how}; {proposed}."


def return_when_done(limit: int = 50) -> int:
    """Scheduler: move experiments whose proposer has ended back to where they were."""
    moved = 0
    now = utcnow()
    waiting = list(db.session.scalars(sa.select(Experiment).where(Experiment.status == "followups_running")
                                      .order_by(Experiment.updated_at).limit(limit)))
    for experiment in waiting:
        entry = _entry(experiment)
        since = entry.created_at if entry else None
        proposers = _proposer_runs(experiment, since)
        if any(r.status in ACTIVE for r in proposers):
            continue
        if not proposers and since is not None and now - since < START_GRACE:
            continue  # the hook that queues the proposer may not have run yet
        try:
            effects = _go_back(experiment, _summary(experiment, proposers, since))
        except Conflict:
            db.session.rollback()  # moved by someone else meanwhile: theirs stands
            continue
        db.session.commit()
        lifecycle.run_side_effects(effects)
        moved += 1
    return moved
