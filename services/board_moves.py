"""What moving a card on the pipeline board means (SPEC §2.4).

The board asks for a target status; this module turns it into a transition with the
board's note. Later issues give moves their full meaning (starting the planner,
approving a pending plan) through the side-effect hooks of services.lifecycle.
"""
from __future__ import annotations

from models import Experiment
from services import lifecycle
from services.actors import Actor


def board_note(to: str, owner_note: str | None) -> str:
    note = f"Moved on Pipeline board to {to}."
    if owner_note:
        note = f"{note} {owner_note.strip()}"
    return note


def move(experiment: Experiment, to: str, actor: Actor, *, note: str | None = None,
         expected_status: str | None = None) -> list[lifecycle.SideEffect]:
    """Apply a board move; raises the transition's error when the move is refused.

    The owner's own note is required for moves the table marks (blocked, archived,
    cancelled, …); it is checked before the board's note is added to it.
    """
    owner_note = (note or "").strip() or None
    rule_needs_note = any(m.to == to and m.rule.note_required
                          for m in lifecycle.allowed_moves(experiment, actor.transition_role))
    if rule_needs_note and not owner_note:
        return lifecycle.transition(experiment, to, actor, note=None, expected_status=expected_status)
    return lifecycle.transition(experiment, to, actor, note=board_note(to, owner_note),
                                expected_status=expected_status, metadata={"source": "board"})
