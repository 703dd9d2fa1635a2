"""Database models. `db` lives here so nothing has to import app.py to reach it.

Models hold columns, relationships and small derived properties only; workflows live in
services/. Column types are chosen to behave the same on PostgreSQL and SQLite: UUIDs via
`sa.Uuid`, JSON via `JSON` (JSONB on PostgreSQL), timestamps always timezone-aware UTC.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

import sqlalchemy as sa
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, registry

from services.core.clock import utcnow

# Stable constraint names so Alembic migrations can address them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(sa.TypeDecorator):
    """A timezone-aware UTC datetime on every backend.

    SQLite drops tzinfo on the way back; without this, comparing a stored time with
    the clock would raise "can't compare offset-naive and offset-aware datetimes".
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use services.core.clock.utcnow()")
        return value.astimezone(timezone.utc)

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


JSONType = sa.JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    registry = registry(
        metadata=sa.MetaData(naming_convention=NAMING_CONVENTION),
        type_annotation_map={datetime: UTCDateTime(), uuid.UUID: sa.Uuid(), dict: JSONType},
    )


db = SQLAlchemy(model_class=Base)


class TimestampMixin:
    """`created_at` / `updated_at` on every table, always UTC."""

    created_at: Mapped[datetime] = mapped_column(default=utcnow, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow, nullable=False)


class UUIDPrimaryKey:
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)


def one_of(column: str, values) -> sa.CheckConstraint:
    """A CHECK constraint limiting `column` to a registry's values.

    The constraint's name is the column's, so a later registry change is one migration
    that drops and re-creates `ck_<table>_<column>`.
    """
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({quoted})", name=column)


def newest_change_index(table: str) -> sa.Index:
    """An index on `updated_at`, for a table Today's poll watches: the table's newest change
    is then one probe of the index, whatever the table's size (services/planning/today.py)."""
    return sa.Index(f"ix_{table}_updated_at", "updated_at")


from models.approval import ApprovalRequest, PlanVersion  # noqa: E402,F401
from models.code import CodeCommit  # noqa: E402,F401
from models.day import DailyLogEntry, Todo, WeeklyReview, WeeklyReviewVersion  # noqa: E402,F401
from models.event import RunEvent, WorkflowEvent  # noqa: E402,F401
from models.experiment import Counter, Experiment  # noqa: E402,F401
from models.ideation import IdeaCard, IdeationSession  # noqa: E402,F401
from models.literature import LiteratureFeed, LiteratureItem  # noqa: E402,F401
from models.metric import MetricBatch, MetricChunk, MetricSeries  # noqa: E402,F401
from models.notification import Notification, NotificationEmail  # noqa: E402,F401
from models.pod import Artifact, ArtifactUsage, FleetIncident, Pod, PodProgressPost  # noqa: E402,F401
from models.research import Belief, BeliefProposal, BeliefVersion, Project, ProjectNarrative, RecordLink  # noqa: E402,F401,E501
from models.result import CleanResultVersion, Comment, Figure, PromotedResult  # noqa: E402,F401
from models.run import AgentRun  # noqa: E402,F401
from models.setting import Setting  # noqa: E402,F401
from models.share import ShareLink  # noqa: E402,F401
from models.user import ApiToken, Invitation, MemberProject, User  # noqa: E402,F401
