"""Ideation (SPEC §12.4): a session of questions about one source, and the idea cards that
come out of it. Answers and cards are rough work, kept apart from the record: only a card the
owner promotes becomes something the record holds (an experiment, a belief update proposal, a
todo, a question on a clean result)."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry


class IdeationSession(UUIDPrimaryKey, TimestampMixin, db.Model):
    """A deck of questions about one source, read as "I<number>". The deck's texts are fixed
    when the session starts (with the nearest literature item and belief of that moment), so
    answers stay beside the questions they answered even as the library grows. `answers` maps
    a question's position ("1" … "7") to the owner's text."""

    __tablename__ = "ideation_sessions"
    __table_args__ = (one_of("source_kind", registry.IDEATION_SOURCE_KINDS),
                      sa.Index("ix_ideation_sessions_source", "source_kind", "source_id"))

    number: Mapped[int] = mapped_column(unique=True)
    source_kind: Mapped[str] = mapped_column(sa.String(16))
    source_id: Mapped[uuid.UUID]
    title: Mapped[str] = mapped_column(sa.String(300))
    deck: Mapped[list] = mapped_column(JSONType)
    answers: Mapped[dict] = mapped_column(JSONType, default=dict)
    nearest_literature_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("literature_items.id", ondelete="SET NULL"))
    nearest_belief_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("beliefs.id", ondelete="SET NULL"))
    project_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("projects.id", ondelete="SET NULL"))


class IdeaCard(UUIDPrimaryKey, TimestampMixin, db.Model):
    """One idea from a session, proposed by Claude (`origin` "claude", with the run that wrote
    it) or written by the owner. A card is promoted once: `promoted_kind` and `promoted_id`
    name what it became, and the label and page are kept so the card still says so if that
    record is later deleted."""

    __tablename__ = "idea_cards"
    __table_args__ = (newest_change_index("idea_cards"),
                      one_of("origin", registry.IDEA_CARD_ORIGINS),
                      one_of("status", registry.IDEA_CARD_STATUSES),
                      one_of("promoted_kind", registry.IDEA_PROMOTION_TARGETS))

    session_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("ideation_sessions.id", ondelete="CASCADE"),
                                                  index=True)
    origin: Mapped[str] = mapped_column(sa.String(16))
    title: Mapped[str] = mapped_column(sa.String(300))
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[str] = mapped_column(sa.String(16), default="open")
    agent_run_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("agent_runs.id", ondelete="SET NULL"))
    promoted_kind: Mapped[str | None] = mapped_column(sa.String(24))
    promoted_id: Mapped[uuid.UUID | None]
    promoted_label: Mapped[str] = mapped_column(sa.String(400), default="")
    promoted_url: Mapped[str] = mapped_column(sa.String(400), default="")
    promoted_at: Mapped[datetime | None]
