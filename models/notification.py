"""Email notifications to the owner (SPEC §12.5): what happened, and the emails that told of it."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry


class NotificationEmail(UUIDPrimaryKey, TimestampMixin, db.Model):
    """One email to the owner's address, carrying one or more notifications of one kind.
    Its text is rendered once, when it is queued, so every retry sends the same message;
    `failed` after the last try, with the SMTP server's answer in `last_error` (Settings lists it)."""

    __tablename__ = "notification_emails"
    __table_args__ = (newest_change_index("notification_emails"),
                      one_of("kind", registry.NOTIFICATION_KINDS),
                      one_of("status", registry.NOTIFICATION_EMAIL_STATUSES))

    kind: Mapped[str] = mapped_column(sa.String(24), index=True)
    subject: Mapped[str] = mapped_column(sa.String(300))
    body_text: Mapped[str] = mapped_column(sa.Text)
    body_html: Mapped[str] = mapped_column(sa.Text)
    status: Mapped[str] = mapped_column(sa.String(16), default="queued", index=True)
    attempts: Mapped[int] = mapped_column(default=0)
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    sent_at: Mapped[datetime | None]


class Notification(UUIDPrimaryKey, TimestampMixin, db.Model):
    """Something the owner is told of by email. It waits (no `email_id`) until an email may
    carry it: outside quiet hours and, for owner turns, once the batching interval has passed."""

    __tablename__ = "notifications"
    __table_args__ = (one_of("kind", registry.NOTIFICATION_KINDS),)

    kind: Mapped[str] = mapped_column(sa.String(24))
    title: Mapped[str] = mapped_column(sa.String(300))
    url: Mapped[str] = mapped_column(sa.String(500))
    experiment_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("experiments.id", ondelete="SET NULL"))
    email_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("notification_emails.id", ondelete="CASCADE"), index=True)
