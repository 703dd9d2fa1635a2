"""Experiment status changes: the transition table and `transition()`, the only writer
of `experiments.status` (SPEC §2.3).

Each move is checked against the table (who may make it), written as a compare-and-set
UPDATE so two writers cannot both win, logged as a `state_changed` event, and its side
effects are returned for the caller to run after commit — never before.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

import sqlalchemy as sa
from sqlalchemy.orm.attributes import set_committed_value

from models import ApprovalRequest, Experiment, db
from services.core import events, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, Forbidden, ValidationError

OWNER, AGENT, SYSTEM = "owner", "agent", "system"
ANY_NON_TERMINAL = registry.NON_TERMINAL_STATUSES
TERMINAL = registry.TERMINAL_STATUSES
RETURN_FROM_BLOCK = "<status_before_block>"


@dataclass(frozen=True)
class Rule:
    sources: frozenset[str]
    targets: frozenset[str]
    who: frozenset[str]
    side_effect: str | None = None
    note_required: bool = False
    # The experiment kinds the rule applies to (None: every kind). Only agent and system
    # moves are kind-specific, so the owner's move menu still depends on the status alone
    # (the board computes it once per status).
    kinds: frozenset[str] | None = None
    guard: str | None = None  # a check the move must pass (GUARDS), besides its side effect's

    def applies_to(self, experiment: Experiment) -> bool:
        return self.kinds is None or (experiment.kind or "experiment") in self.kinds


def _rule(sources: Iterable[str], targets: Iterable[str], who: Iterable[str],
          side_effect: str | None = None, note_required: bool = False,
          kinds: Iterable[str] | None = None, guard: str | None = None) -> Rule:
    return Rule(frozenset(sources), frozenset(targets), frozenset(who), side_effect, note_required,
                frozenset(kinds) if kinds is not None else None, guard)


DISPATCHING_KINDS = [k for k in registry.EXPERIMENT_KINDS if k not in registry.POD_FREE_KINDS]


# SPEC §2.3, row by row. `awaiting_approval` (imported data) behaves like `plan_pending`.
TRANSITIONS: list[Rule] = [
    _rule(["proposed"], ["clarifying"], [OWNER, AGENT], "start_planner_clarify"),
    _rule(["proposed", "clarifying"], ["planning"], [OWNER, AGENT], "start_planner_plan"),
    _rule(["clarifying", "planning"], ["awaiting_clarifications"], [AGENT]),
    _rule(["awaiting_clarifications"], ["clarifying"], [OWNER], "redispatch_planner_with_answers"),
    # A valid plan: services.planning.approvals opens the approval request in the move's transaction.
    _rule(["clarifying", "planning"], ["plan_pending"], [SYSTEM]),
    # Approving starts the orchestrator in the same transaction (services.planning.approvals), so the
    # move itself carries no after-commit effect. Only a plan's approval request makes it:
    # the board, the status form and the API all meet the guard.
    _rule(["plan_pending", "awaiting_approval"], ["approved"], [OWNER, SYSTEM], guard="approve_plan"),
    _rule(["plan_pending", "awaiting_approval"], ["planning"], [OWNER], "redispatch_planner_with_note",
          note_required=True),
    # The orchestrator starting. Agents may make this move too: an orchestrator running
    # outside Sagan reports it through its token, as the old system's agents did.
    _rule(["approved"], ["implementing"], [SYSTEM, AGENT]),
    _rule(["approved", "testing", "implementing"], ["gate_pending"], [SYSTEM]),
    _rule(["gate_pending"], ["approved"], [OWNER], "wake_orchestrator"),
    _rule(["implementing"], ["code_reviewing"], [AGENT]),
    _rule(["code_reviewing"], ["implementing"], [AGENT]),
    _rule(["code_reviewing"], ["testing"], [AGENT]),
    _rule(["testing"], ["implementing"], [AGENT]),
    _rule(["testing", "implementing"], ["queued"], [SYSTEM], kinds=DISPATCHING_KINDS),
    # The pod-free path (surveys, infra): the orchestrator goes from the work (research, or
    # code that passed review and tests) straight to the write-up, with no dispatch.
    _rule(["implementing", "testing"], ["clean_result_drafting"], [AGENT], kinds=registry.POD_FREE_KINDS),
    _rule(["queued"], ["running"], [SYSTEM]),
    # Pods upload their own artifacts before they exit; the watcher moves on to verifying and
    # checks the uploads (services.dispatch.verify) in the same transaction as these moves.
    _rule(["running"], ["uploading"], [SYSTEM, AGENT]),
    _rule(["uploading"], ["verifying"], [AGENT, SYSTEM]),
    # Back to the code after a run-time crash: only the orchestrator's
    # send_crash_to_code makes this move, with the crash as evidence (guard below).
    _rule(["queued", "running"], ["implementing"], [AGENT], "back_to_code", kinds=DISPATCHING_KINDS),
    _rule(["verifying"], ["interpreting"], [AGENT]),
    _rule(["interpreting"], ["reviewing"], [AGENT, SYSTEM]),
    _rule(["interpreting", "reviewing"], ["clean_result_drafting"], [AGENT, OWNER]),
    _rule(["clean_result_drafting"], ["awaiting_promotion"], [AGENT], "request_promotion"),
    _rule(["awaiting_promotion", "reviewing"], ["followups_running"], [OWNER, AGENT], "propose_follow_ups"),
    _rule(["followups_running"], ["awaiting_promotion", "reviewing"], [SYSTEM]),
    _rule(["awaiting_promotion"], ["shared", "completed"], [OWNER], "promote"),
    _rule(["awaiting_promotion", "reviewing"], ["clean_result_drafting", "planning"], [OWNER],
          note_required=True),
    _rule(ANY_NON_TERMINAL - {"blocked"}, ["blocked"], [OWNER, AGENT, SYSTEM], note_required=True),
    _rule(["blocked"], [RETURN_FROM_BLOCK, "planning", "plan_pending", "approved"], [OWNER]),
    _rule(ANY_NON_TERMINAL, ["cancelled", "archived", "done_experiment", "done_impl"], [OWNER],
          "stop_active_work", note_required=True),
    _rule(TERMINAL, ["proposed", "planning", "plan_pending"], [OWNER], note_required=True),
]


@dataclass(frozen=True)
class Move:
    """One allowed move from a status, as offered to an actor."""

    to: str
    rule: Rule


def allowed_moves(experiment: Experiment, role: str) -> list[Move]:
    """Every move `role` may make from the experiment's current status, in status order."""
    moves: dict[str, Move] = {}
    for rule in TRANSITIONS:
        if experiment.status not in rule.sources or role not in rule.who or not rule.applies_to(experiment):
            continue
        for target in rule.targets:
            if target == RETURN_FROM_BLOCK:
                target = experiment.status_before_block
                if not target:
                    continue
            if target != experiment.status:
                moves.setdefault(target, Move(target, rule))
    order = {name: i for i, name in enumerate(registry.STATUS_NAMES)}
    return sorted(moves.values(), key=lambda m: order[m.to])


def rule_for_move(experiment: Experiment, to: str, role: str) -> Rule | None:
    for move in allowed_moves(experiment, role):
        if move.to == to:
            return move.rule
    return None


# Side-effect handlers by name, filled from the one table in services/pipeline/side_effects.py by
# create_app. A handler receives (experiment_id, actor, metadata) after the move committed.
SIDE_EFFECT_HOOKS: dict[str, list[Callable]] = {}

# Guards: checks a rule's owner makes *before* the move, keyed like side effects (e.g. the
# promotion rule's lint confirmation), so every way of making that move — the board, the
# status form, the API — meets the same check. A guard receives (experiment, to, actor,
# metadata) and raises a SaganError to refuse; nothing has changed then. Filled like the hooks.
GUARDS: dict[str, list[Callable]] = {}

# Writes a move makes in its own transaction once it is made, keyed like side effects: what
# has to be true the moment the new status is (a promotion freezes the result that share
# links show, so no later save slips in between). A writer receives (experiment, to, actor,
# metadata); filled like the hooks. An owner's override runs none: it is not that move.
IN_MOVE: dict[str, list[Callable]] = {}

# Writes every move makes in its own transaction, overrides included: what else follows the
# experiment's status (a todo that became it: services.day.todos.follow_experiment). A writer
# receives (experiment, to); filled like the hooks.
ON_EVERY_MOVE: list[Callable] = []


def guard_back_to_code(experiment: Experiment, to: str, actor: Actor, metadata: dict) -> None:
    """A dispatched experiment goes back to the implementer only with a crash to fix."""
    if not (metadata or {}).get("crash"):
        raise Conflict(f"#{experiment.number} goes back to the code only after a pod crashed in the research code: "
                       "use send_crash_to_code with the crashed pod.", code="no_crash")


def guard_plan_approval(experiment: Experiment, to: str, actor: Actor, metadata: dict) -> None:
    """Approving needs the approval request being approved, with its plan: a card "plan
    pending" with no plan cannot be moved to approved and start the code agents."""
    try:
        request_id = uuid.UUID(str(metadata.get("approval_request_id")))
    except ValueError:
        request_id = None
    found = request_id and db.session.scalar(sa.select(sa.func.count(ApprovalRequest.id)).where(
        ApprovalRequest.id == request_id, ApprovalRequest.experiment_id == experiment.id,
        ApprovalRequest.plan_version_id.is_not(None)))
    if not found:
        raise Conflict(f"#{experiment.number} has no plan waiting for approval: approve a plan on its "
                       "approval page once the planner (or you) has written one.", code="no_plan_to_approve")




@dataclass
class SideEffect:
    name: str
    experiment_id: object
    actor: Actor
    metadata: dict = field(default_factory=dict)

    def run(self) -> None:
        for hook in SIDE_EFFECT_HOOKS.get(self.name, []):
            hook(self.experiment_id, self.actor, self.metadata)


def run_side_effects(effects: Iterable[SideEffect]) -> None:
    """Run side effects; call only after the transaction that made them has committed."""
    for effect in effects:
        effect.run()


# Owner-only moves that a token holding a scope may make too (SPEC §9.2: promote is
# "owner session, or write + promote scope"): scope → the side effect naming the move.
SCOPE_GRANTS = {"promote": "promote"}


def check_expected(experiment: Experiment, expected_status: str | None) -> None:
    """The caller saw `expected_status` (a form's hidden field, an API client's view); if the
    experiment has moved on since, a Conflict instead of overwriting someone else's move."""
    if expected_status and expected_status != experiment.status:
        raise Conflict(
            f"#{experiment.number} is now {experiment.status}, not {expected_status}; "
            "reload to see the latest state.", code="stale_status", current=experiment.status)


def describe_refusal(experiment: Experiment, to: str, role: str) -> str:
    """The sentence a person reads (a board toast, a page, an API message): statuses by their
    labels ("done impl", not done_impl); API clients read the machine fields beside it."""
    options = [_label(m.to) for m in allowed_moves(experiment, role)]
    allowed = ", ".join(options) if options else "none"
    here = _label(experiment.status)
    return f"#{experiment.number} cannot move from {here} to {_label(to)} as {role}. Allowed from {here}: {allowed}."


def _label(status: str) -> str:
    known = registry.STATUS_BY_NAME.get(status)
    return known.label if known else status


def transition(experiment: Experiment, to: str, actor: Actor, *, note: str | None = None,
               metadata: dict | None = None, override: bool = False,
               expected_status: str | None = None, scope_grant: str | None = None) -> list[SideEffect]:
    """Move `experiment` to `to` as `actor`; returns side effects to run after commit.

    `expected_status` is the status the caller saw (a form's hidden field, an API
    client's view); if the row has moved on since, the caller gets a Conflict instead
    of silently overwriting someone else's move. `scope_grant` is a scope the caller
    checked on the acting token (SCOPE_GRANTS): it opens that one owner move to it.
    """
    if to not in registry.STATUS_BY_NAME:
        raise ValidationError(
            f"Unknown status {to!r}. Known statuses: {', '.join(registry.STATUS_NAMES)}.",
            field="status")
    note = (note or "").strip() or None
    current = expected_status or experiment.status
    check_expected(experiment, expected_status)
    if to == current:
        raise ValidationError(f"#{experiment.number} is already {to}.", field="status")

    rule = _check_move(experiment, to, actor, note=note, metadata=metadata or {}, override=override,
                       scope_grant=scope_grant)
    values = status_values(to, current)
    _compare_and_set(experiment, current, values)
    event_metadata = dict(metadata or {})
    if override:
        event_metadata["override"] = True
    events.record(experiment, "state_changed", actor, note=note, metadata=event_metadata or None,
                  from_status=current, to_status=to)
    for write in IN_MOVE.get(rule.side_effect if rule else "", []):
        write(experiment, to, actor, event_metadata)
    for follow in ON_EVERY_MOVE:
        follow(experiment, to)
    return effects_of_move(rule, to, experiment.id, actor, event_metadata, note)


def _check_move(experiment: Experiment, to: str, actor: Actor, *, note: str | None, metadata: dict,
                override: bool, scope_grant: str | None) -> Rule | None:
    """May `actor` make this move? The rule that allows it (None for an owner's override), or
    a refusal; the rule's guards run last."""
    if override:
        check_override(experiment, actor.transition_role, note)
        return None
    rule = rule_allowing(experiment, to, actor, scope_grant)
    if rule.note_required and not note:
        raise ValidationError(f"Moving to {to} needs a note saying why.", field="note")
    for key in (rule.side_effect, rule.guard):
        for guard in GUARDS.get(key or "", []):
            guard(experiment, to, actor, metadata)
    return rule


def check_override(experiment: Experiment, role: str, note: str | None) -> None:
    """Only the owner overrides, never a finished experiment, and always with a note."""
    if role != OWNER:
        raise Forbidden("Only the owner can override a status.", code="override_forbidden")
    if experiment.terminal:
        raise ValidationError("A finished experiment is reopened, not overridden.", field="status")
    if not note:
        raise ValidationError("An override needs a note saying why.", field="note")


def rule_allowing(experiment: Experiment, to: str, actor: Actor, scope_grant: str | None = None) -> Rule:
    """The table's rule for this move by this actor — or, for a token holding a granted scope,
    the owner's rule it opens (SCOPE_GRANTS); a Conflict listing the allowed moves otherwise."""
    role = actor.transition_role
    rule = rule_for_move(experiment, to, role)
    if rule is None and scope_grant in SCOPE_GRANTS and actor.kind == "token":
        owner_rule = rule_for_move(experiment, to, OWNER)
        if owner_rule is not None and owner_rule.side_effect == SCOPE_GRANTS[scope_grant]:
            rule = owner_rule
    if rule is None:
        raise Conflict(describe_refusal(experiment, to, role), code="transition_not_allowed",
                       allowed=[m.to for m in allowed_moves(experiment, role)])
    return rule


def status_values(to: str, current: str) -> dict:
    """The columns a move writes: the status, and where a block returns to."""
    values = {"status": to, "updated_at": utcnow()}
    if to == "blocked":
        values["status_before_block"] = current
    elif current == "blocked":
        values["status_before_block"] = None
    return values


def _compare_and_set(experiment: Experiment, current: str, values: dict) -> None:
    """Write the move only if the row is still at `current`: of two writers, one wins."""
    result = db.session.execute(
        sa.update(Experiment)
        .where(Experiment.id == experiment.id, Experiment.status == current)
        .values(**values)
        .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        db.session.refresh(experiment, ["status"])
        raise Conflict(
            f"#{experiment.number} changed to {experiment.status} while you were moving it; "
            "nothing was changed.", code="stale_status", current=experiment.status)
    # Reflect the committed row in the loaded object without marking it dirty again.
    for key, value in values.items():
        set_committed_value(experiment, key, value)


def effects_of_move(rule: Rule | None, to: str, experiment_id, actor: Actor, metadata: dict,
                    note: str | None) -> list[SideEffect]:
    """What runs after the move commits: the rule's side effect, and the owner's notification
    whenever the move enters an owner turn, whatever made it (SPEC §8.7)."""
    effects = []
    if rule and rule.side_effect:
        effects.append(SideEffect(rule.side_effect, experiment_id, actor, {**metadata, "note": note}))
    if to in registry.OWNER_TURN_STATUSES:
        effects.append(SideEffect("notify_owner", experiment_id, actor, {"status": to}))
    elif to == "failed":  # not an owner turn, but the owner is told by email (SPEC §12.5)
        effects.append(SideEffect("notify_failure", experiment_id, actor, {"status": to}))
    return effects
