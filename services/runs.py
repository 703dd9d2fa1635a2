"""Agent runs and their events (SPEC §5.2, §5.4).

Appending an event takes its `seq` from the run row with one UPDATE … RETURNING, so
concurrent writers (a tool thread, the watcher) never hand out the same number; every
body and metadata passes the redactor and is capped before it is stored.
"""
from __future__ import annotations

import json
import uuid

import sqlalchemy as sa
from flask import current_app

from models import AgentRun, RunEvent, db
from services import registry
from services.clock import utcnow
from services.errors import NotFound, ValidationError
from services.redact import redact, redact_data


def get_run(run_id) -> AgentRun:
    try:
        run = db.session.get(AgentRun, uuid.UUID(str(run_id)))
    except ValueError:
        run = None
    if run is None:
        raise NotFound("No such run.")
    return run


def _cap(body: str | None, limit: int) -> tuple[str | None, int | None]:
    if body is None:
        return None, None
    encoded = body.encode()
    if len(encoded) <= limit:
        return body, None
    cut = encoded[:limit].decode(errors="ignore")
    return cut + f"\n… [truncated: {len(encoded):,} bytes in all]", len(encoded)


def append_event(run_id, event_type: str, body: str | None = None, metadata: dict | None = None) -> RunEvent:
    """Add one event to a run's log with the next seq; the caller commits."""
    if event_type not in registry.RUN_EVENT_TYPES:
        raise ValidationError(f"Unknown run event type {event_type!r}.", field="event_type")
    seq = db.session.execute(
        sa.update(AgentRun).where(AgentRun.id == run_id).values(last_seq=AgentRun.last_seq + 1)
        .returning(AgentRun.last_seq).execution_options(synchronize_session=False)).scalar()
    if seq is None:
        raise NotFound("No such run.")
    limit = current_app.config["EVENT_BODY_MAX"]
    body, original = _cap(redact(body), limit)
    metadata = redact_data(metadata) if metadata else None
    if metadata is not None and len(json.dumps(metadata)) > limit:
        metadata = {"truncated_from": len(json.dumps(metadata)), "note": "metadata too large to keep"}
    if original:
        metadata = {**(metadata or {}), "truncated_from": original}
    now = utcnow()
    event = RunEvent(id=uuid.uuid4(), run_id=run_id, seq=seq, event_type=event_type, body=body,
                     metadata_=metadata, created_at=now, updated_at=now)
    db.session.add(event)
    return event
