"""Markers: named workflow events that record progress (SPEC §3), and review loops.

An agent (or a script with a token) posts a marker; review metadata is validated; a
`next_status` is applied through transition() in the same transaction, so a marker and
the move it implies land together or not at all.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from models import Experiment, WorkflowEvent, db
from services import events, lifecycle, registry
from services.actors import Actor
from services.errors import Unprocessable, ValidationError

REVIEW_FIELDS = ("review_pair", "round", "reviewer", "verdict", "required_fix", "reconciler_decision")


def check_marker(marker: str) -> None:
    if marker not in registry.MARKERS:
        raise Unprocessable(f'Marker "{marker}" is not a known marker.', code="unknown_marker_type",
                            known=registry.MARKERS)


def clean_review(fields: dict) -> dict:
    """Validate review metadata when present; returns only the review keys given."""
    review: dict = {}
    pair = fields.get("review_pair")
    if pair is not None:
        if pair not in registry.REVIEW_PAIRS:
            raise ValidationError(f"review_pair must be one of: {', '.join(registry.REVIEW_PAIRS)}.",
                                  field="review_pair")
        review["review_pair"] = pair
    if fields.get("round") is not None:
        raw = fields["round"]
        if isinstance(raw, bool) or not str(raw).strip().isdigit():
            raise ValidationError("round must be 1, 2 or 3.", field="round")
        number = int(str(raw).strip())
        if not 1 <= number <= registry.REVIEW_MAX_ROUNDS:
            raise ValidationError("round must be 1, 2 or 3.", field="round")
        review["round"] = number
    verdict = fields.get("verdict")
    if verdict is not None:
        if verdict not in registry.REVIEW_VERDICTS:
            raise ValidationError(f"verdict must be one of: {', '.join(registry.REVIEW_VERDICTS)}.",
                                  field="verdict")
        review["verdict"] = verdict
    for name, limit in (("reviewer", 120), ("required_fix", 4000), ("reconciler_decision", 4000)):
        value = fields.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or len(value) > limit:
            raise ValidationError(f"{name} must be text of at most {limit} characters.", field=name)
        review[name] = value.strip()
    if review and "review_pair" not in review:
        raise ValidationError("Review fields need a review_pair.", field="review_pair")
    return review


def post_marker(experiment: Experiment, marker: str, actor: Actor, *, note: str | None = None,
                metadata: dict | None = None, review: dict | None = None,
                next_status: str | None = None,
                actor_label: str | None = None) -> tuple[WorkflowEvent, list[lifecycle.SideEffect]]:
    """Record a marker (and apply `next_status`); the caller commits, then runs the effects."""
    check_marker(marker)
    if metadata is not None and not isinstance(metadata, dict):
        raise ValidationError("metadata must be a JSON object.", field="metadata")
    review = clean_review(review or {})
    data = dict(metadata or {})
    if review:
        data["review"] = review
    if actor_label:
        # Old clients send --actor-kind; kept as a label only — the credential decides the actor.
        data["claimed_actor"] = str(actor_label)[:40]
    effects: list[lifecycle.SideEffect] = []
    if next_status:
        effects = lifecycle.transition(experiment, next_status, actor, note=note,
                                       metadata={"marker": marker})
        data["next_status"] = next_status
    event = events.record(experiment, "marker", actor, note=note, metadata=data or None, marker=marker)
    return event, effects


@dataclass
class ReviewLoop:
    """One review pair's rounds: round → reviewer → verdict and required fix."""

    pair: str
    rounds: dict[int, dict[str, dict]] = field(default_factory=dict)
    reviewers: list[str] = field(default_factory=list)


def review_loops(marker_events: list[WorkflowEvent]) -> list[ReviewLoop]:
    """Group review markers (oldest first) into per-pair round × reviewer tables."""
    loops: dict[str, ReviewLoop] = {}
    for event in sorted(marker_events, key=lambda e: e.created_at):
        review = (event.metadata_ or {}).get("review") or {}
        pair = review.get("review_pair")
        if not pair:
            continue
        loop = loops.setdefault(pair, ReviewLoop(pair))
        reviewer = review.get("reviewer") or event.marker
        if reviewer not in loop.reviewers:
            loop.reviewers.append(reviewer)
        loop.rounds.setdefault(review.get("round") or 1, {})[reviewer] = {
            "verdict": review.get("verdict"), "required_fix": review.get("required_fix"),
            "reconciler_decision": review.get("reconciler_decision"), "marker": event.marker,
        }
    order = {p: i for i, p in enumerate(registry.REVIEW_PAIRS)}
    return sorted(loops.values(), key=lambda loop: order.get(loop.pair, 99))


def review_loops_for(experiment: Experiment) -> list[ReviewLoop]:
    """The experiment's review loops, from its review markers (one query)."""
    import sqlalchemy as sa

    rows = db.session.scalars(sa.select(WorkflowEvent).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "marker",
        WorkflowEvent.marker.in_(REVIEW_MARKERS)))
    return review_loops(list(rows))


# Markers that carry review verdicts; review_loops() still skips any without a review_pair.
REVIEW_MARKERS = [m for m in registry.MARKERS if any(
    word in m for word in ("review", "critique", "verdict", "reconcile"))]
