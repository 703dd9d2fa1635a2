"""Follow-up experiments (SPEC §8.6): children created from a result, by the owner or by
the follow-up proposer, linked to their parent both ways."""
from __future__ import annotations

import sqlalchemy as sa

from models import Experiment, db
from services import events, experiments
from services.actors import Actor
from services.errors import Forbidden, ValidationError

MAX_PER_PROPOSAL = 3


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
    child.runpod_account = parent.runpod_account
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
