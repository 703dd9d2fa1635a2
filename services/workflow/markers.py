"""Markers: named workflow events that record progress (SPEC §3), and review loops.

An agent (or a script with a token) posts a marker; review metadata is validated; a
`next_status` is applied through transition() in the same transaction, so a marker and
the move it implies land together or not at all.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from models import Experiment, WorkflowEvent, db
from services.core import events, registry
from services.core.actors import Actor
from services.core.errors import Unprocessable, ValidationError
from services.workflow import lifecycle

REVIEW_FIELDS = ("review_pair", "round", "reviewer", "verdict", "required_fix", "reconciler_decision")
# Everything a workflow-event post reads (the API maps camelCase spellings onto these).
WORKFLOW_EVENT_FIELDS = ("event_type", "marker", "note", "metadata", "to_status", "from_status", "next_status",
                         "actor_kind", *REVIEW_FIELDS)


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


def _review_in_metadata(metadata: dict) -> tuple[dict, dict]:
    """Split the review an older client sent inside `metadata` from the rest of it.

    A review there is a `review` object (the shape the API answers with) or review fields
    beside a `review_pair`. Without a pair, fields such as `round` and `verdict` are the
    marker's own data (epm:test-verdict's round and pass/fail) and stay in the metadata.
    """
    rest = dict(metadata)
    carried: dict = {}
    nested = rest.pop("review", None)
    if nested is not None:
        if not isinstance(nested, dict):
            raise ValidationError("metadata.review must be a JSON object of review fields.", field="metadata.review")
        unknown = set(nested) - set(REVIEW_FIELDS)
        if unknown:
            raise ValidationError(f"Unknown review field(s) in metadata.review: {', '.join(sorted(map(str, unknown)))}"
                                  f"; review fields are {', '.join(REVIEW_FIELDS)}.", field="metadata.review")
        carried.update({k: v for k, v in nested.items() if v is not None})
    if rest.get("review_pair") is not None:
        for name in REVIEW_FIELDS:
            value = rest.pop(name, None)
            if value is not None:
                _add_review_field(carried, name, value, "metadata")
    return rest, carried


def _add_review_field(review: dict, name: str, value, where: str) -> None:
    if review.get(name) is not None and not (type(review[name]) is type(value) and review[name] == value):
        raise ValidationError(f"{name} is given twice with different values ({review[name]!r} and {value!r} in "
                              f"{where}); send it once.", field=name)
    review[name] = value


def post_marker(experiment: Experiment, marker: str, actor: Actor, *, note: str | None = None,
                metadata: dict | None = None, review: dict | None = None,
                next_status: str | None = None,
                actor_label: str | None = None) -> tuple[WorkflowEvent, list[lifecycle.SideEffect]]:
    """Record a marker (and apply `next_status`); the caller commits, then runs the effects.

    Review fields given inside `metadata` are validated and stored with the top-level ones,
    so the review table shows them; the same field given both ways must agree.
    """
    check_marker(marker)
    if metadata is not None and not isinstance(metadata, dict):
        raise ValidationError("metadata must be a JSON object.", field="metadata")
    data, carried = _review_in_metadata(metadata or {})
    given = dict(review or {})
    for name, value in carried.items():
        _add_review_field(given, name, value, "metadata")
    review = clean_review(given)
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
class WorkflowPost:
    """What a workflow-event post did: the marker's event (None for a status change) and the
    side effects to run after commit."""

    event: WorkflowEvent | None
    effects: list[lifecycle.SideEffect]


def post_workflow_event(experiment: Experiment, data: dict, actor: Actor) -> WorkflowPost:
    """One post to an experiment's workflow: a status change or a marker; the caller commits.

    A status change is `event_type: state_changed`, or a bare `to_status` (`next_status`
    also names the target there, as older clients send it); `from_status` is the status the
    client saw. A marker is `event_type: marker` or just `marker`, with optional review fields
    and `next_status`. `data` uses the snake_case names of WORKFLOW_EVENT_FIELDS.
    """
    note = data.get("note")
    if note is not None and not isinstance(note, str):
        raise ValidationError("note must be text.", field="note")
    event_type = data.get("event_type") or ("marker" if data.get("marker") else None)
    if event_type == "state_changed" or (event_type is None and data.get("to_status")):
        to = data.get("to_status") or data.get("next_status")
        if not to:
            raise ValidationError("A status change needs to_status.", field="to_status")
        effects = lifecycle.transition(experiment, to, actor, note=note, expected_status=data.get("from_status"))
        return WorkflowPost(None, effects)
    if event_type != "marker":
        raise ValidationError("Post a marker (`marker`) or a status change (`to_status`).", field="event_type")
    if not isinstance(data.get("marker"), str):
        raise ValidationError("marker is required.", field="marker")
    review = {k: data[k] for k in REVIEW_FIELDS if data.get(k) is not None}
    event, effects = post_marker(experiment, data["marker"], actor, note=note, metadata=data.get("metadata"),
                                 review=review, next_status=data.get("next_status") or None,
                                 actor_label=data.get("actor_kind"))
    return WorkflowPost(event, effects)


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
    rows = db.session.scalars(sa.select(WorkflowEvent).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "marker",
        WorkflowEvent.marker.in_(REVIEW_MARKERS)))
    return review_loops(list(rows))


# Markers that carry review verdicts; review_loops() still skips any without a review_pair.
REVIEW_MARKERS = [m for m in registry.MARKERS if any(
    word in m for word in ("review", "critique", "verdict", "reconcile"))]
