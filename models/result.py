"""Clean-result versions, figures and discussion comments."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry


class Figure(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "figures"
    __table_args__ = (one_of("kind", registry.FIGURE_KINDS),)

    experiment_id: Mapped[uuid.UUID] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(sa.String(16))
    title: Mapped[str] = mapped_column(sa.String(300), default="")
    artifact_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("artifacts.id", ondelete="SET NULL"))
    content: Mapped[str | None] = mapped_column(sa.Text)  # sanitized inline SVG/HTML
    content_type: Mapped[str | None] = mapped_column(sa.String(120))


class CleanResultVersion(UUIDPrimaryKey, TimestampMixin, db.Model):
    """Every saved clean-result body, with who wrote it."""

    __tablename__ = "clean_result_versions"

    experiment_id: Mapped[uuid.UUID] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    title: Mapped[str] = mapped_column(sa.String(300))
    body: Mapped[str] = mapped_column(sa.Text)
    author_kind: Mapped[str] = mapped_column(sa.String(16))
    author_id: Mapped[str | None] = mapped_column(sa.String(64))


class PromotedResult(UUIDPrimaryKey, TimestampMixin, db.Model):
    """What the experiment's latest promotion froze: the title, body and figures that share
    links show, whatever is saved later, until the next promotion (services/results/results.py)."""

    __tablename__ = "promoted_results"
    __table_args__ = (one_of("promoted_to", registry.PROMOTION_TARGETS),)

    experiment_id: Mapped[uuid.UUID] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="CASCADE"), unique=True)
    promoted_to: Mapped[str] = mapped_column(sa.String(16))
    promoted_at: Mapped[datetime]
    # The saved version it was, when one matched (a result imported or written before
    # versions may have none); the copy below is what is shown either way.
    version_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("clean_result_versions.id", ondelete="SET NULL"))
    title: Mapped[str] = mapped_column(sa.String(300))
    body: Mapped[str] = mapped_column(sa.Text)
    figure_ids: Mapped[list] = mapped_column(JSONType, default=list)  # the figures shown, as id strings


class Comment(UUIDPrimaryKey, TimestampMixin, db.Model):
    """A discussion post on an experiment or a run (SPEC §8.8)."""

    __tablename__ = "comments"
    __table_args__ = (
        newest_change_index("comments"),
        one_of("author_kind", registry.COMMENT_AUTHOR_KINDS),
        sa.Index("ix_comments_entity", "entity_kind", "entity_id"),
    )

    entity_kind: Mapped[str] = mapped_column(sa.String(32))
    entity_id: Mapped[uuid.UUID]
    author_kind: Mapped[str] = mapped_column(sa.String(16))
    author_name: Mapped[str] = mapped_column(sa.String(120))
    body_md: Mapped[str] = mapped_column(sa.Text)
    body_html: Mapped[str] = mapped_column(sa.Text)  # rendered and sanitized on write
    # The agent run that wrote this comment (Claude's replies).
    agent_run_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("agent_runs.id", ondelete="SET NULL"))
    # The `qa` run asked to answer this comment (an @claude question); its reply goes to
    # the same thread.
    qa_run_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("agent_runs.id", ondelete="SET NULL"), index=True)
    edited_at: Mapped[datetime | None]

    @property
    def by_agent(self) -> bool:
        return self.author_kind == "agent"
