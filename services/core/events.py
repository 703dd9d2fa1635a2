"""Appending to and reading an experiment's workflow log."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from flask import current_app

from models import Experiment, WorkflowEvent, db
from services.core import input_shape, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import ValidationError
from services.core.redact import redact, redact_data


def record(experiment: Experiment, event_type: str, actor: Actor, *, note: str | None = None,
           metadata: dict | None = None, marker: str | None = None,
           from_status: str | None = None, to_status: str | None = None) -> WorkflowEvent:
    """Add one event to the experiment's log (redacted, capped); the caller commits."""
    if event_type not in registry.WORKFLOW_EVENT_TYPES:
        raise ValidationError(f"Unknown event type {event_type!r}.", field="event_type")
    input_shape.check_metadata_size(metadata)
    note = redact(note)
    if note and len(note) > current_app.config["NOTE_MAX"]:
        raise ValidationError(
            f"Note is {len(note)} characters; the limit is {current_app.config['NOTE_MAX']}.",
            field="note")
    now = utcnow()
    event = WorkflowEvent(
        id=uuid.uuid4(), entity_kind="experiment", entity_id=experiment.id,
        experiment_id=experiment.id, event_type=event_type, marker=marker,
        from_status=from_status, to_status=to_status, actor_kind=actor.kind,
        actor_id=actor.id, note=note, metadata_=redact_data(metadata) if metadata else None,
        created_at=now, updated_at=now,
    )
    db.session.add(event)
    experiment.last_event_at = now
    return event


@dataclass
class TimelinePage:
    events: list[WorkflowEvent]
    next_cursor: str | None


def _encode_cursor(event: WorkflowEvent) -> str:
    return f"{event.created_at.isoformat()}|{event.id}"


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        stamp, raw_id = cursor.split("|", 1)
        return datetime.fromisoformat(stamp), uuid.UUID(raw_id)
    except ValueError as exc:
        raise ValidationError("That page link is not valid.", field="before") from exc


def timeline(experiment: Experiment, *, before: str | None = None, limit: int = 50,
             event_type: str | None = None, marker: str | None = None,
             since: datetime | None = None) -> TimelinePage:
    """Newest-first page of an experiment's events, keyset-paged by (created_at, id)."""
    query = sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment.id)
    if since is not None:
        query = query.where(WorkflowEvent.created_at >= since)
    if event_type:
        if event_type not in registry.WORKFLOW_EVENT_TYPES:
            raise ValidationError(f"Unknown event type {event_type!r}.", field="event_type")
        query = query.where(WorkflowEvent.event_type == event_type)
    if marker:
        markers = registry.markers_matching(marker)
        if not markers:
            raise ValidationError(f"Unknown marker or marker group {marker!r}.", field="marker")
        query = query.where(WorkflowEvent.marker.in_(markers))
    if before:
        stamp, event_id = _decode_cursor(before)
        query = query.where(sa.tuple_(WorkflowEvent.created_at, WorkflowEvent.id) < (stamp, event_id))
    query = query.order_by(WorkflowEvent.created_at.desc(), WorkflowEvent.id.desc()).limit(limit + 1)
    rows = list(db.session.scalars(query))
    next_cursor = _encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return TimelinePage(rows[:limit], next_cursor)


def parse_since(raw: str | None) -> datetime | None:
    """An ISO-8601 time (with offset or Z) for `since` filters; naive times are UTC."""
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValidationError("since must be an ISO-8601 time, e.g. 2026-05-14T09:00:00Z.",
                              field="since") from exc
    if moment.tzinfo is None:
        from datetime import timezone
        moment = moment.replace(tzinfo=timezone.utc)
    return moment


def event_json(event: WorkflowEvent) -> dict:
    return {
        "id": str(event.id), "entityKind": event.entity_kind, "entityId": str(event.entity_id),
        "eventType": event.event_type, "fromStatus": event.from_status, "toStatus": event.to_status,
        "marker": event.marker, "actorKind": event.actor_kind, "actorId": event.actor_id,
        "note": event.note, "metadata": event.metadata_, "createdAt": event.created_at.isoformat(),
    }


def entered_status_at(experiment: Experiment) -> datetime | None:
    """When the experiment last moved into its current status (None before its first move)."""
    return db.session.scalar(
        sa.select(WorkflowEvent.created_at).where(
            WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed",
            WorkflowEvent.to_status == experiment.status)
        .order_by(WorkflowEvent.created_at.desc()).limit(1))


@dataclass
class FoldedProgress:
    """Consecutive progress posts of one pod, shown as one timeline row ("pod 0: epochs 1–8")."""
    pod: str
    events: list[WorkflowEvent]  # newest first, as the timeline lists them

    event_type = "progress_folded"

    @property
    def newest(self) -> WorkflowEvent:
        return self.events[0]

    @property
    def summary(self) -> str:
        # The bootstrap's first and last posts name no epoch; the script's own posts do.
        epochs = [int(m.group(1)) for e in self.events if (m := _EPOCH.search(e.note or ""))]
        if epochs:
            return f"{self.pod}: epochs {min(epochs)}–{max(epochs)}"
        return f"{self.pod}: {len(self.events)} progress updates"


_EPOCH = re.compile(r"\bepoch\s+(\d+)", re.IGNORECASE)


def fold_progress(rows: list[WorkflowEvent], least: int = 3) -> list:
    """The timeline's rows with every stretch of consecutive progress posts folded: one
    FoldedProgress per pod that posted at least `least` times in the stretch (pods running
    side by side interleave their posts), the pod's other posts as they were."""
    out, stretch = [], []

    def flush():
        by_pod: dict = {}
        for event in stretch:
            by_pod.setdefault(event.actor_id, []).append(event)
        for posts in by_pod.values():
            if len(posts) >= least:
                out.append(FoldedProgress(_pod_name(posts[0]), posts))
            else:
                out.extend(posts)
        stretch.clear()

    for event in rows:
        if event.event_type == "progress":
            stretch.append(event)
            continue
        flush()
        out.append(event)
    flush()
    return out


def _pod_name(event: WorkflowEvent) -> str:
    meta = event.metadata_ or {}
    return f"pod {meta['run_index']}" if meta.get("run_index") is not None else (meta.get("pod") or "pod")
