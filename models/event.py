"""Append-only logs: an experiment's workflow events and a run's events."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, one_of
from services.core import registry


class WorkflowEvent(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "workflow_events"
    __table_args__ = (
        one_of("event_type", registry.WORKFLOW_EVENT_TYPES),
        one_of("actor_kind", registry.ACTOR_KINDS),
        sa.Index("ix_workflow_events_entity_created", "entity_id", "created_at"),
        sa.Index("ix_workflow_events_marker", "marker"),
    )

    entity_kind: Mapped[str] = mapped_column(sa.String(32), default="experiment")
    entity_id: Mapped[uuid.UUID]
    experiment_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    event_type: Mapped[str] = mapped_column(sa.String(32))
    from_status: Mapped[str | None] = mapped_column(sa.String(32))
    to_status: Mapped[str | None] = mapped_column(sa.String(32))
    marker: Mapped[str | None] = mapped_column(sa.String(64))
    actor_kind: Mapped[str] = mapped_column(sa.String(16))
    actor_id: Mapped[str | None] = mapped_column(sa.String(64))
    note: Mapped[str | None] = mapped_column(sa.String(2000))
    metadata_: Mapped[dict | None] = mapped_column("metadata", JSONType)


class RunEvent(db.Model):
    __tablename__ = "run_events"
    __table_args__ = (
        sa.UniqueConstraint("run_id", "seq", name="uq_run_events_run_id_seq"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    run_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("agent_runs.id", ondelete="CASCADE"))
    seq: Mapped[int]
    event_type: Mapped[str] = mapped_column(sa.String(32))
    body: Mapped[str | None] = mapped_column(sa.Text)
    metadata_: Mapped[dict | None] = mapped_column("metadata", JSONType)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
