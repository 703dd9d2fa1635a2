"""The owner's day (SPEC §12): todos and the daily log."""
from __future__ import annotations

import uuid
from datetime import date, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry

DAILY_LOG_WRITERS = ["scheduler", "owner", "token"]
WEEKLY_REVIEW_DRAFTERS = ["scheduler", "owner", "token", "demo"]


class Todo(UUIDPrimaryKey, TimestampMixin, db.Model):
    """Something the owner means to do, read as "T<number>". It starts in the inbox (a title is
    enough) and may become an experiment in one action; `experiment_id` is that experiment, so
    a second press answers the same one (the record also carries the link "experiment
    derives_from todo")."""

    __tablename__ = "todos"
    __table_args__ = (newest_change_index("todos"),
                      one_of("status", registry.TODO_STATUSES),
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
    # The invited collaborator who proposed it (SPEC §13); the owner's own have none.
    proposed_by_member_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("users.id", ondelete="SET NULL"))
    # The collaborator of its project the owner assigned it to: it waits on them (their /welcome).
    assigned_member_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("users.id", ondelete="SET NULL"), index=True)
    experiment_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="SET NULL"), unique=True)


class DailyLogEntry(UUIDPrimaryKey, TimestampMixin, db.Model):
    """One day of the record, in the owner's time zone, written from the record without a
    model: `summary` is the structured form a page and a weekly review read, `body_md` the
    same as markdown. The unique `day` makes two schedulers writing the same day harmless."""

    __tablename__ = "daily_log_entries"
    __table_args__ = (newest_change_index("daily_log_entries"),
                      one_of("written_by", DAILY_LOG_WRITERS),)

    day: Mapped[date] = mapped_column(sa.Date, unique=True)
    time_zone: Mapped[str] = mapped_column(sa.String(64))
    summary: Mapped[dict] = mapped_column(JSONType)
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    # Written before the day ended ("Write today so far"): the scheduler rewrites it once the day is over.
    partial: Mapped[bool] = mapped_column(default=False)
    written_at: Mapped[datetime]
    written_by: Mapped[str] = mapped_column(sa.String(16))


class WeeklyReview(UUIDPrimaryKey, TimestampMixin, db.Model):
    """One week of the record, told for the owner and their mentor (SPEC §12.3). A week is the
    seven owner-days ending on `week_end` (the configured review day); the unique `week_end`
    makes a drafting job that runs twice, or two racing, leave one review. `summary` is the
    structured week the draft was written from; the text lives in its versions."""

    __tablename__ = "weekly_reviews"
    __table_args__ = (newest_change_index("weekly_reviews"),
                      one_of("drafted_by", WEEKLY_REVIEW_DRAFTERS),)

    week_end: Mapped[date] = mapped_column(sa.Date, unique=True)
    time_zone: Mapped[str] = mapped_column(sa.String(64))
    summary: Mapped[dict] = mapped_column(JSONType)
    drafted_at: Mapped[datetime]
    drafted_by: Mapped[str] = mapped_column(sa.String(16))
    # The owner showed its published version to mentor accounts (off by default: a review spans every project).
    shown_to_mentors: Mapped[bool] = mapped_column(default=False, server_default=sa.false())


class WeeklyReviewVersion(UUIDPrimaryKey, TimestampMixin, db.Model):
    """One version of a review's text. Each save is a new draft; publishing one archives the
    version published before it. `questions` is the mentor update's research questions as they
    stood when the version was published (frozen, so a mentor reads what was published)."""

    __tablename__ = "weekly_review_versions"
    __table_args__ = (newest_change_index("weekly_review_versions"),
                      one_of("status", registry.WEEKLY_REVIEW_VERSION_STATUSES),
                      sa.UniqueConstraint("review_id", "version"))

    review_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("weekly_reviews.id", ondelete="CASCADE"), index=True)
    version: Mapped[int]
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[str] = mapped_column(sa.String(16), default="draft")
    author_kind: Mapped[str] = mapped_column(sa.String(16))
    author_label: Mapped[str] = mapped_column(sa.String(120), default="")
    questions: Mapped[list | None] = mapped_column(JSONType)
    published_at: Mapped[datetime | None]
