"""The owner's day (SPEC §12): the daily log."""
from __future__ import annotations

from datetime import date, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, one_of

DAILY_LOG_WRITERS = ["scheduler", "owner", "token"]


class DailyLogEntry(UUIDPrimaryKey, TimestampMixin, db.Model):
    """One day of the record, in the owner's time zone, written from the record without a
    model: `summary` is the structured form a page and a weekly review read, `body_md` the
    same as markdown. The unique `day` makes two schedulers writing the same day harmless."""

    __tablename__ = "daily_log_entries"
    __table_args__ = (one_of("written_by", DAILY_LOG_WRITERS),)

    day: Mapped[date] = mapped_column(sa.Date, unique=True)
    time_zone: Mapped[str] = mapped_column(sa.String(64))
    summary: Mapped[dict] = mapped_column(JSONType)
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    # Written before the day ended ("Write today so far"): the scheduler rewrites it once the day is over.
    partial: Mapped[bool] = mapped_column(default=False)
    written_at: Mapped[datetime]
    written_by: Mapped[str] = mapped_column(sa.String(16))
