"""Where an experiment's code loop stands, read from the database (services.agents.implementation
drives the loop; code_tools stamps each commit with its round): the events since the plan
was last approved, the code round, the current phase and the latest commit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from models import CodeCommit, Experiment, WorkflowEvent, db


@dataclass
class CodeState:
    experiment: Experiment
    round: int
    reconciled: bool                  # round 3's reconciler fix: no further review
    phase_start: WorkflowEvent | None  # the status change into the current status
    since_phase: list[WorkflowEvent] = field(default_factory=list)

    def markers(self, name: str) -> list[WorkflowEvent]:
        return [e for e in self.since_phase if e.marker == name]

    def review(self, marker: str, round_: int) -> WorkflowEvent | None:
        found = [e for e in self.markers(marker) if review_of(e).get("review_pair") == "code_review"
                 and int(review_of(e).get("round") or 0) == round_]
        return found[-1] if found else None


def review_of(event: WorkflowEvent) -> dict:
    return (event.metadata_ or {}).get("review") or {}


def cycle_of(experiment: Experiment) -> list[WorkflowEvent]:
    """The experiment's events since its plan was last approved, oldest first.

    Approving a (new) plan starts the code loop over; coming back to `approved` from a
    dispatch gate or a block does not: the reviewed, tested code is still the code.
    """
    approved_at = db.session.scalar(sa.select(sa.func.max(WorkflowEvent.created_at)).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed",
        WorkflowEvent.to_status == "approved",
        WorkflowEvent.from_status.in_(("plan_pending", "awaiting_approval"))))
    query = sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment.id,
                                           WorkflowEvent.event_type.in_(("state_changed", "marker")))
    if approved_at is not None:
        query = query.where(WorkflowEvent.created_at >= approved_at)
    return list(db.session.scalars(query.order_by(WorkflowEvent.created_at, WorkflowEvent.id)))


def _round_of(cycle: list[WorkflowEvent]) -> int:
    for event in reversed(cycle):
        if event.event_type == "state_changed" and (event.metadata_ or {}).get("code_round"):
            return int(event.metadata_["code_round"])
    return 1


def current_round(experiment: Experiment) -> int:
    """The code round the experiment is in (1 until the loop starts a later one)."""
    return _round_of(cycle_of(experiment))


def read_state(experiment: Experiment) -> CodeState:
    cycle = cycle_of(experiment)
    phase_start = next((e for e in reversed(cycle) if e.event_type == "state_changed"
                        and e.to_status == experiment.status), None)
    since = cycle
    if phase_start is not None:
        since = [e for e in cycle if e.created_at >= phase_start.created_at and e.id != phase_start.id]
    reconciled = bool(((phase_start.metadata_ if phase_start else None) or {}).get("reconciled"))
    return CodeState(experiment, _round_of(cycle), reconciled, phase_start, since)


def latest_commit(experiment: Experiment, *, since=None) -> CodeCommit | None:
    query = sa.select(CodeCommit).where(CodeCommit.experiment_id == experiment.id)
    if since is not None:
        query = query.where(CodeCommit.created_at >= since)
    return db.session.scalar(query.order_by(CodeCommit.created_at.desc()).limit(1))
