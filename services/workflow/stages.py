"""The experiment page's stage stepper: where the experiment is in the
pipeline, how long it has been there, what it waits for and who acts next.

Pure: derived from the status registry and one timestamp, so it needs no database."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.core import registry

# The pipeline a person reads, in order: the board's columns without the two side tracks
# (blocked is shown on the stage it left; closed is an ending, not a stage).
STAGES: list[tuple[str, str]] = [(key, title) for key, title in registry.BOARD_COLUMNS
                                 if key not in ("blocked", "closed")]


@dataclass(frozen=True)
class Stage:
    key: str
    title: str
    state: str  # "done", "current", "blocked", "todo"


@dataclass(frozen=True)
class Stepper:
    stages: list[Stage]
    since: datetime | None   # when the experiment entered its status
    waits_for: str            # the turn, without its "Owner turn:" prefix
    next_actor: str           # "You", "Sagan" or "Nobody"
    ended: str | None         # "failed", "cancelled", "archived" for an experiment that stopped


def _split_turn(turn: str) -> tuple[str, str]:
    if turn.startswith("Owner turn: "):
        return "You", turn.removeprefix("Owner turn: ")
    if turn.startswith("Sagan turn: "):
        return "Sagan", turn.removeprefix("Sagan turn: ")
    return "Nobody", "nothing"


def stepper(status: str, status_before_block: str | None, since: datetime | None, *,
            agents_on: bool = True) -> Stepper:
    """The stepper for an experiment in `status` (`status_before_block`: where a blocked
    one stopped); `since`: when it entered `status`; `agents_on`: whether Sagan's turns are
    taken (without a model key they are the owner's)."""
    info = registry.STATUS_BY_NAME[status]
    blocked = status == "blocked"
    where = registry.STATUS_BY_NAME.get(status_before_block or "", info) if blocked else info
    column = where.column
    ended = status if info.column == "closed" else None
    keys = [key for key, _ in STAGES]
    current = keys.index(column) if column in keys else (len(keys) if info.column == "done" else -1)
    stages = []
    for index, (key, title) in enumerate(STAGES):
        if index < current or (info.column == "done"):
            state = "done"
        elif index == current:
            state = "blocked" if blocked else "current"
        else:
            state = "todo"
        stages.append(Stage(key, title, state))
    actor, waits_for = _split_turn(registry.turn_as_read(info.turn, agents_on))
    return Stepper(stages=stages, since=since, waits_for=waits_for, next_actor=actor, ended=ended)


@dataclass(frozen=True)
class OwnerAction:
    """The one thing the owner is asked to do now, shown first on the experiment page as a
    large button: open the pending approval, answer the planner's questions, or lift a block."""
    kind: str                  # "approve", "answer" or "unblock"
    label: str                 # the button's words
    hint: str                  # one line under it: what the button leads to
    approval_id: str | None = None   # "approve": the request to open
    resume_to: str | None = None     # "unblock": the status the block interrupted


def owner_action(status: str, status_before_block: str | None, *, pending_approval=None,
                 plan_version: int | None = None, open_questions: int = 0,
                 is_blocker: bool = False) -> OwnerAction | None:
    """The owner's action for an experiment in `status`, or None when the turn is not one of
    these (Sagan's turn, a promotion, an ended experiment). `pending_approval`: the open
    approval request (an object with `id`), `open_questions`: how many wait for an answer."""
    if status in ("plan_pending", "awaiting_approval") and pending_approval is not None:
        version = f" v{plan_version}" if plan_version else ""
        if is_blocker:
            return OwnerAction("approve", f"Review the blocker plan{version}",
                               "The planner could not plan this as asked: read why, then acknowledge or reject.",
                               approval_id=str(pending_approval.id))
        return OwnerAction("approve", f"Review plan{version} and approve",
                           "Cost, time, the checklist and your answers, then approve, defer or reject.",
                           approval_id=str(pending_approval.id))
    if status == "awaiting_clarifications" and open_questions:
        plural = "s" if open_questions != 1 else ""
        return OwnerAction("answer", f"Answer {open_questions} question{plural} from Sagan",
                           "The planner waits for your answers before it plans.")
    if status == "blocked":
        resume = registry.STATUS_BY_NAME.get(status_before_block or "")
        if resume is not None:
            return OwnerAction("unblock", f"Unblock: resume {resume.label}",
                               "Or revise: move it to planning, or elsewhere, below.", resume_to=resume.name)
        return OwnerAction("unblock", "Unblock or revise", "Choose where it goes next, below.")
    return None
