"""The owner's day (SPEC §12): todos."""
from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import TimestampMixin, UUIDPrimaryKey, db, one_of
from services.core import registry


class Todo(UUIDPrimaryKey, TimestampMixin, db.Model):
    """Something the owner means to do, read as "T<number>". It starts in the inbox (a title is
    enough) and may become an experiment in one action; `experiment_id` is that experiment, so
    a second press answers the same one (the record also carries the link "experiment
    derives_from todo")."""

    __tablename__ = "todos"
    __table_args__ = (one_of("status", registry.TODO_STATUSES),
                      one_of("intent", registry.TODO_INTENTS),
                      one_of("priority", registry.PRIORITIES),
                      one_of("assignee_kind", registry.ASSIGNEE_KINDS))

    number: Mapped[int] = mapped_column(unique=True)
    title: Mapped[str] = mapped_column(sa.String(300))
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[str] = mapped_column(sa.String(24), default="inbox", index=True)
    intent: Mapped[str] = mapped_column(sa.String(16), default="exploratory")
    priority: Mapped[str] = mapped_column(sa.String(16), default="normal")
    assignee_kind: Mapped[str] = mapped_column(sa.String(16), default="human")
    project_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("projects.id", ondelete="SET NULL"),
                                                         index=True)
    experiment_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="SET NULL"), unique=True)
