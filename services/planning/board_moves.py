"""What moving a card on the pipeline board means (SPEC §2.4).

The board asks for a target; this module decides what that means — which transition, with
which note, and which intent (start the planner, approve the plan and start the
orchestrator, stop active work, promote). Intents are side effects of the transition
(services.workflow.lifecycle hooks) that the agent, approval and pod issues fill in; until then
they are recorded, never faked.
"""
from __future__ import annotations

from dataclasses import dataclass

from models import Experiment
from services.core import events
from services.core.actors import Actor
from services.core.errors import ValidationError
from services.planning import approvals
from services.workflow import lifecycle

APPROVABLE = ("plan_pending", "awaiting_approval")
# Dragging an approvable plan into the implementing or running column approves it.
APPROVE_TARGETS = ("approved", "queued", "running")
# Dragging an approved experiment there re-uses its plan and (re)starts the orchestrator.
REUSE_TARGETS = ("queued", "running")


@dataclass(frozen=True)
class BoardMove:
    status: str            # the status the transition goes to
    note: str | None       # the board's note (None: the owner's own note is required)
    intent: str | None = None  # side effect to request even without a status change


def options(experiment: Experiment, role: str = "owner") -> list[lifecycle.Move]:
    """The targets the card's "Move to…" menu offers: the table's moves plus board aliases."""
    moves = lifecycle.allowed_moves(experiment, role)
    offered = {m.to for m in moves}
    extra_targets: tuple[str, ...] = ()
    if role == "owner" and experiment.status in APPROVABLE:
        extra_targets = APPROVE_TARGETS
    elif role == "owner" and experiment.status == "approved":
        extra_targets = REUSE_TARGETS
    plain = lifecycle.Rule(frozenset(), frozenset(), frozenset({role}))
    return moves + [lifecycle.Move(t, plain) for t in extra_targets if t not in offered]


def meaning(experiment: Experiment, target: str) -> BoardMove:
    """Translate a board target into a transition and its exact note (SPEC §2.4 table)."""
    current = experiment.status
    if current in APPROVABLE and target in APPROVE_TARGETS:
        return BoardMove("approved", f"Approved from Pipeline board after moving to {target}.")
    if current == "approved" and target in REUSE_TARGETS:
        return BoardMove("approved", f"Re-used existing plan after moving to {target}.",
                         intent="start_orchestrator")
    if current == "proposed" and target == "planning":
        return BoardMove("planning", "Moved from idea to planning on the Pipeline board.")
    if current == "awaiting_clarifications" and target == "clarifying":
        return BoardMove("clarifying", "Owner re-dispatched the planner from awaiting_clarifications.")
    if current == "awaiting_promotion" and target in ("shared", "completed"):
        return BoardMove(target, f"Promoted from Pipeline board as {target}.")
    return BoardMove(target, f"Moved on Pipeline board to {target}.")


def move(experiment: Experiment, target: str, actor: Actor, *, note: str | None = None,
         expected_status: str | None = None) -> list[lifecycle.SideEffect]:
    """Apply a board move; raises the transition's error when it is refused.

    The owner's own note is required for the moves the table marks (blocked, archived,
    cancelled, …) and is appended to the board's note.
    """
    lifecycle.check_expected(experiment, expected_status)
    plan = meaning(experiment, target)
    owner_note = (note or "").strip() or None
    metadata = {"source": "board", "board_target": target}
    if plan.intent and plan.status == experiment.status:
        # Nothing to move: record the intent and hand it to its hook after commit.
        events.record(experiment, "note", actor, note=plan.note, metadata={**metadata, "intent": plan.intent})
        return [lifecycle.SideEffect(plan.intent, experiment.id, actor, metadata)]
    rule = lifecycle.rule_for_move(experiment, plan.status, actor.transition_role)
    if rule is not None and rule.note_required and not owner_note:
        raise ValidationError(f"Moving to {plan.status} needs a note saying why.", field="note")
    full_note = f"{plan.note} {owner_note}" if owner_note else plan.note
    if plan.status == "approved" and experiment.status in APPROVABLE:
        effects = approvals.approve_from_board(experiment, actor, full_note)
        if effects is not None:
            return effects
        # No pending request with a plan: the transition below meets the approval guard,
        # which refuses the move and says why (nothing starts).
    return lifecycle.transition(experiment, plan.status, actor, note=full_note,
                                expected_status=expected_status, metadata=metadata)
