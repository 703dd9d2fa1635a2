"""Starting agents for an experiment: the planner on board moves, the orchestrator on
approval. Side-effect hooks of services.workflow.lifecycle call these after the move committed;
approval calls `begin_orchestrator` inside its own transaction (SPEC §2.3 lesson: the
approval and the orchestrator's start land together, ending at `implementing`).
"""
from __future__ import annotations

import sqlalchemy as sa
from flask import current_app

from models import AgentRun, Experiment, RunEvent, db
from services.claude import loader
from services.core import events, registry
from services.core.actors import Actor
from services.workflow import jobs, lifecycle, runs

PLANNER = "experiment-planner"
ORCHESTRATOR = "experiment-orchestrator"
NO_KEY_NOTE = ("No ANTHROPIC_API_KEY is configured, so {agent} cannot start. Set the key and move the "
               "card again, or continue by hand.")

PLANNER_REQUESTS = {
    "clarify": "Clarify the scope of this idea. Ask the owner only the questions that change the plan "
               "(ask_questions); if the idea is already clear, write the plan (submit_plan).",
    "plan": "Draft the plan now (submit_plan). Ask questions only if the plan cannot be written without them.",
    "answers": "The owner answered your questions (see the epm:clarify-answers event). Continue: write the "
               "plan, or ask what is still unclear.",
    "rejected": "The owner rejected the previous plan with this note:\n{note}\n\nRevise the plan accordingly "
                "and submit it again.",
}


def agents_enabled() -> bool:
    return bool(current_app.config.get("ANTHROPIC_API_KEY"))


def active_run(experiment_id, kind: str, *, lock: bool = False) -> AgentRun | None:
    """The experiment's active top-level run of this kind. With `lock`, its row stays locked
    to the end of the transaction, so the run cannot finish in between (see start_planner)."""
    query = sa.select(AgentRun).where(
        AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment_id, AgentRun.kind == kind,
        AgentRun.parent_run_id.is_(None), AgentRun.status.in_(registry.RUN_ACTIVE_STATUSES)).limit(1)
    return db.session.scalar(query.with_for_update() if lock else query)


# A planning request that arrived while the previous planner was still on its last turn.
QUEUED_PLANNING_EVENT = registry.QUEUED_PLANNING_EVENT
# Where a planner works; a queued request for an experiment moved elsewhere since is moot.
PLANNING_STATUSES = ("clarifying", "planning")


def start_planner(experiment_id, actor: Actor, metadata: dict, *, mode: str) -> AgentRun | None:
    """Create and enqueue a planning run (after a committed move). One active planner at a time."""
    experiment = db.session.get(Experiment, experiment_id)
    if experiment is None:
        return None
    if not agents_enabled():
        events.record(experiment, "note", Actor.system(), note=NO_KEY_NOTE.format(agent="the planner"))
        db.session.commit()
        return None
    request = PLANNER_REQUESTS[mode].format(note=(metadata or {}).get("note") or "")
    active = active_run(experiment.id, "plan", lock=True)
    if active is not None:
        if actor.kind != "agent":
            _queue_after(active, experiment, mode, metadata)
        # else the planner moved its own experiment on (clarifying → planning) and goes on.
        return None
    definition = loader.get(PLANNER)
    run = runs.create_run(kind="plan", agent=PLANNER, request=request, scope_id=experiment.id,
                          model=loader.model_for(definition), pod_account=experiment.pod_account)
    events.record(experiment, "note", Actor.system(), note=f"Planner {run.short_id} queued ({mode}).",
                  metadata={"run_id": str(run.id)})
    db.session.commit()
    jobs.enqueue_run(run.id)
    return run


def _queue_after(active: AgentRun, experiment: Experiment, mode: str, metadata: dict | None) -> None:
    """The owner decided (rejected a plan, answered questions) while the planner is still
    finishing its last turn: the request waits on that run and starts as it ends
    (start_queued_planning), instead of being dropped and leaving the experiment in Sagan's
    turn with nothing running. The run's row is locked (active_run), so it cannot end
    between this check and the commit without seeing the request."""
    runs.append_event(active.id, QUEUED_PLANNING_EVENT, f"Planning request queued ({mode}).",
                      {"mode": mode, "metadata": metadata or {}})
    events.record(experiment, "note", Actor.system(),
                  note=f"Planner {active.short_id} is finishing its last turn; a new planning run ({mode}) "
                       "starts when it ends.", metadata={"run_id": str(active.id)})
    db.session.commit()


def start_queued_planning(run: AgentRun) -> AgentRun | None:
    """After a top-level planner run ended: start the planning request that waited on it."""
    queued = db.session.scalar(sa.select(RunEvent.metadata_).where(
        RunEvent.run_id == run.id, RunEvent.event_type == QUEUED_PLANNING_EVENT).order_by(RunEvent.seq.desc()).limit(1))
    if not queued or run.scope_id is None:
        return None
    experiment = db.session.get(Experiment, run.scope_id)
    if experiment is None or experiment.status not in PLANNING_STATUSES:
        return None  # the owner has moved it on since (cancelled, approved another way)
    return start_planner(experiment.id, Actor.system(), queued.get("metadata") or {}, mode=queued.get("mode") or "plan")


def begin_orchestrator(experiment: Experiment, actor: Actor, *, plan_run_id=None) -> list:
    """Inside the approving transaction: create the orchestrator run and move to implementing.

    Returns the after-commit effect that enqueues it. Without an API key the experiment
    stays `approved` with a note saying why.
    """
    if not agents_enabled():
        events.record(experiment, "note", Actor.system(), note=NO_KEY_NOTE.format(agent="the orchestrator"))
        return []
    if active_run(experiment.id, "apply") is not None:
        return []
    definition = loader.get(ORCHESTRATOR)
    run = runs.create_run(kind="apply", agent=ORCHESTRATOR, scope_id=experiment.id,
                          request="Carry this approved experiment to a clean result, following the approved plan.",
                          model=loader.model_for(definition), pod_account=experiment.pod_account)
    if plan_run_id:
        runs.append_event(plan_run_id, "orchestrator_queued", str(run.id))
    effects = lifecycle.transition(experiment, "implementing", Actor.system(),
                                   note=f"Orchestrator {run.short_id} queued to implement and dispatch.",
                                   metadata={"run_id": str(run.id)})
    return effects + [lifecycle.SideEffect("enqueue_run", experiment.id, actor, {"run_id": str(run.id)})]


# --- after-move handlers (wired in services/pipeline/side_effects.py) -----------------------------

def _planner(mode: str):
    def hook(experiment_id, actor, metadata):
        start_planner(experiment_id, actor, metadata, mode=mode)
    hook.__name__ = f"start_planner_{mode}"
    return hook


on_start_planner_clarify = _planner("clarify")
on_start_planner_plan = _planner("plan")
on_redispatch_planner_with_answers = _planner("answers")
on_redispatch_planner_with_note = _planner("rejected")


def on_enqueue_run(experiment_id, actor, metadata):
    jobs.enqueue_run(metadata["run_id"])


def on_start_orchestrator(experiment_id, actor, metadata):
    """A board move re-used an approved plan: start the orchestrator in its own transaction."""
    experiment = db.session.get(Experiment, experiment_id)
    if experiment is None or experiment.status != "approved":
        return
    effects = begin_orchestrator(experiment, actor)
    db.session.commit()
    lifecycle.run_side_effects(effects)


def on_wake_orchestrator(experiment_id, actor, metadata):
    """A gate was resolved (gate_pending → approved): the orchestrator carries on."""
    parked = db.session.scalar(sa.select(AgentRun).where(
        AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment_id, AgentRun.kind == "apply",
        AgentRun.parent_run_id.is_(None), AgentRun.status.in_(("waiting", "queued"))).limit(1))
    if parked is not None:
        jobs.enqueue_run(parked.id)
        return
    experiment = db.session.get(Experiment, experiment_id)
    if experiment is not None and experiment.status == "approved":
        effects = begin_orchestrator(experiment, actor)
        db.session.commit()
        lifecycle.run_side_effects(effects)
