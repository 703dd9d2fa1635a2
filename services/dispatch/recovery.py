"""Failures and automatic recovery (SPEC §7).

When a run fails, either one recovery run is queued — if the reason is recoverable and
the budget allows — or the experiment is blocked with the reason. The budget is counted
across chains (recoveries of recoveries count) so the old system's r1 → r6 chains, four
running in parallel, cannot happen: at most RECOVERY_MAX_PER_DAY per experiment per 24 h,
with back-off, none during a fleet incident, none for a partial dispatch (the owner
re-approves) and none once the spend cap is reached.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from flask import current_app

from models import AgentRun, Experiment, FleetIncident, RunEvent, db
from services.claude import model_api
from services.core import events, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.redact import redact
from services.dispatch import spend
from services.workflow import lifecycle, runs

# Reasons a retry cannot fix, or that need the owner (SPEC §7).
# A refusal, a reply that cannot fit the model's output, and a run that ended without doing
# its job would only repeat: the owner rephrases or splits the work (docs/agent-loop.md).
UNRECOVERABLE = frozenset({"spec_invalid", "provider_auth", "provider_balance", "cancelled_by_owner", "partial_dispatch",
                           "model_refusal", "output_limit", "run_incomplete", "preflight_failed"})
RECOVERY_MARKER = "[auto-recovery-for:"
TRANSCRIPT_EVENTS = 60
TRANSCRIPT_LINE = 300

TEMPLATE = """[auto-recovery-for:{failed_id}]

The previous run failed or crashed.

First diagnose why it stopped using the transcript below. Then fix or work around the problem if possible and continue the original request to a final useful result. Do not repeat completed work. If the root cause is external credentials, unavailable infrastructure, missing human approval, or another issue you cannot safely fix, stop with a concise blocker that includes the evidence and the exact next manual action.

Original request:
{original}

Failure or crash reason:
{reason}: {message}

Previous run transcript:
{transcript}"""


def original_request(run: AgentRun) -> str:
    """The request a chain started from (a recovery's request embeds it)."""
    text = run.request or ""
    parts = split_recovery_request(text)
    return parts["original"] if parts and "\nOriginal request:\n" in text else text


def split_recovery_request(text: str) -> dict | None:
    """The parts of a recovery request, for the run page; None for ordinary requests."""
    if not (text or "").startswith(RECOVERY_MARKER):
        return None
    parts = {"original": "", "reason": "", "transcript": ""}
    if "\nOriginal request:\n" in text:
        rest = text.split("\nOriginal request:\n", 1)[1]
        parts["original"], _, rest = rest.partition("\n\nFailure or crash reason:\n")
        parts["reason"], _, parts["transcript"] = rest.partition("\n\nPrevious run transcript:\n")
    return parts


def transcript(run: AgentRun) -> str:
    rows = list(db.session.scalars(sa.select(RunEvent).where(RunEvent.run_id == run.id)
                                   .order_by(RunEvent.seq.desc()).limit(TRANSCRIPT_EVENTS)))[::-1]
    lines = []
    for event in rows:
        body = " ".join((event.body or "").split())
        if len(body) > TRANSCRIPT_LINE:
            body = body[:TRANSCRIPT_LINE] + "…"
        lines.append(f"- {event.created_at.isoformat()} {event.event_type}: {body}")
    return "\n".join(lines) or "- (no events were recorded)"


def recovery_request(run: AgentRun) -> str:
    return TEMPLATE.format(failed_id=run.id, original=original_request(run),
                           reason=run.failure_reason or "agent_error",
                           message=(run.last_error or registry.FAILURE_REASONS.get(run.failure_reason or "", ""))[:2000],
                           transcript=transcript(run))


def fleet_incident_open() -> bool:
    return db.session.scalar(sa.select(sa.func.count(FleetIncident.id)).where(
        FleetIncident.resolved_at.is_(None))) > 0


def spend_cap_reached(experiment: Experiment) -> bool:
    """True once the experiment's actual spend reached its cap (pods bring actual spend)."""
    if experiment.cost_cap_usd is None:
        return False
    return spend.experiment_spend(experiment.id) >= experiment.cost_cap_usd


def recent_recoveries(experiment_id) -> list[AgentRun]:
    """Recovery runs for the experiment in the last 24 h, across every chain."""
    since = utcnow() - timedelta(hours=24)
    return list(db.session.scalars(
        sa.select(AgentRun).where(AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment_id,
                                  AgentRun.resumes_run_id.is_not(None), AgentRun.created_at >= since)
        .order_by(AgentRun.created_at)))


@dataclass
class Decision:
    recover: bool
    why: str
    delay_minutes: int = 0
    budget_spent: bool = False  # no recovery because the 24 h budget is used up


def decide(run: AgentRun, experiment: Experiment | None) -> Decision:
    reason = run.failure_reason or "agent_error"
    if reason in UNRECOVERABLE:
        return Decision(False, f"{reason} is not recoverable automatically")
    if run.kind == "experiment":
        # A dispatch is never re-run by itself: its orchestrator decides, or the owner re-approves.
        return Decision(False, "a dispatch is not retried automatically")
    if experiment is None:
        return Decision(False, "the run has no experiment")
    refusal, done = _paused_or_spent(experiment)
    if refusal is not None:
        return refusal
    backoff = current_app.config["RECOVERY_BACKOFF_MINUTES"]
    delay = backoff[min(len(done), len(backoff) - 1)]
    if reason == "pod_vanished":
        # Wait until the fleet-incident window has closed, so an incident is seen first.
        delay = max(delay, 5)
    return Decision(True, "recoverable", delay)


# Dispatch failures that may be the research code's: a pod's command exited non-zero. Never
# capacity, a vanished pod, a failed setup (clone, environment), a partial dispatch, a stuck
# bootstrap or a start deadline: those are not the code's, so they never go to the implementer.
CODE_FAILURE_REASONS = frozenset({"pod_exit_nonzero"})


def code_fix_decision(experiment: Experiment) -> Decision:
    """May a crash go back to the implementer now? It is a recovery: same budget, same pauses."""
    refusal, done = _paused_or_spent(experiment)
    if refusal is not None:
        return refusal
    return Decision(True, f"recovery {len(done) + 1} of {current_app.config['RECOVERY_MAX_PER_DAY']} in 24 h")


def _paused_or_spent(experiment: Experiment) -> tuple[Decision | None, list]:
    """The refusal every recovery meets (fleet incident, spend cap, budget), or None, and
    the recoveries of the last 24 h."""
    if fleet_incident_open():
        return Decision(False, "a fleet incident is open; automatic recovery is paused"), []
    if spend_cap_reached(experiment):
        return Decision(False, "the experiment's spend cap is reached"), []
    done = recent_recoveries(experiment.id)
    budget = current_app.config["RECOVERY_MAX_PER_DAY"]
    if len(done) >= budget:
        return Decision(False, f"the recovery budget is spent ({len(done)} of {budget} in 24 h)",
                        budget_spent=True), done
    return None, done


def chain_of(run: AgentRun) -> list[AgentRun]:
    """The run and the runs it resumes, oldest first."""
    chain, current = [run], run
    while current.resumes_run_id is not None and len(chain) < 20:
        current = db.session.get(AgentRun, current.resumes_run_id)
        if current is None:
            break
        chain.append(current)
    return chain[::-1]


@dataclass
class FailureOutcome:
    recovery: AgentRun | None = None
    effects: list = None  # side effects of blocking the experiment, to run after commit

    def __post_init__(self):
        self.effects = self.effects or []


def fail(run: AgentRun, reason: str, message: str, *, block_note: str | None = None) -> FailureOutcome:
    """Fail a run and cascade (SPEC §7): queue one recovery, or block the experiment.

    The caller commits, then runs the effects. A recovery waits out its back-off as a
    `waiting` run; the scheduler enqueues it when its `wake_at` passes.
    """
    runs.set_status(run, "failed", reason=reason, error=message)
    # The block note travels with the failure: a dispatch run's parent reads it back when woken.
    runs.append_event(run.id, "failed", f"{reason}: {message}",
                      {"failure_reason": reason, **({"block_note": block_note} if block_note else {})})
    experiment = db.session.get(Experiment, run.scope_id) if run.scope_kind == "experiment" and run.scope_id else None
    if run.parent_run_id is not None:
        return FailureOutcome()  # a sub-agent's failure goes back to its parent as a tool result
    decision = decide(run, experiment)
    if decision.recover:
        follow = runs.create_run(
            kind=run.kind, agent=run.agent, request=recovery_request(run), scope_id=run.scope_id,
            scope_kind=run.scope_kind, resumes_run_id=run.id, model=run.model,
            pod_account=run.pod_account, status="waiting",
            wake_at=utcnow() + timedelta(minutes=decision.delay_minutes))
        follow.waiting_for = {"until": follow.wake_at.isoformat(), "why": "recovery back-off"}
        if reason == "worker_lost" and run.conversation:
            # The worker died, not the conversation: the recovery continues the exact same
            # conversation (thinking blocks and all), told what happened.
            follow.conversation = model_api.resumable(run.conversation, redact(
                f"The worker running this conversation stopped ({message}). Continue the task from here; "
                "check the state of anything the last tool call may have changed."))
        runs.append_event(run.id, "recovery_queued", str(follow.id), {"recovery_run_id": str(follow.id),
                                                                       "delay_minutes": decision.delay_minutes})
        events.record(experiment, "note", Actor.system(),
                      note=f"Automatic recovery queued after agent run {run.short_id} failed.",
                      metadata={"mode": "recovery", "sourceAgentRunId": str(run.id),
                                "followupAgentRunId": str(follow.id), "reason": reason})
        return FailureOutcome(recovery=follow)
    if experiment is not None and not experiment.terminal and experiment.status != "blocked":
        note = block_note or f"Cascaded from agent_run {run.short_id} failed ({reason}: {message})"[:1900]
        metadata = {"reason": reason, "agentRunId": str(run.id), "no_recovery_because": decision.why}
        if decision.budget_spent:
            chain = chain_of(run)
            note = (f"Cascaded from agent_run {run.short_id} failed ({reason}); automatic recovery budget "
                    f"spent. Attempts: " + " → ".join(f"{r.short_id} ({r.failure_reason or r.status})"
                                                      for r in chain))[:1900]
            metadata["chain"] = [str(r.id) for r in chain]
        return FailureOutcome(effects=lifecycle.transition(experiment, "blocked", Actor.system(),
                                                           note=note, metadata=metadata))
    return FailureOutcome()
