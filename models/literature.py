"""The literature library (SPEC §11.3): papers, posts and other reading, and the feeds that
bring new items in. Identifiers are stored normalized (DOI lower-case without a resolver
prefix, arXiv id without its version), so the unique constraints are what stop a second row
for the same work; `match_key` (normalized title + first author's surname) catches the same
work arriving without identifiers."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, one_of
from services.core import registry


# The text PostgreSQL's full-text search covers. Migration 0023_literature_search keeps it
# as a generated, stored tsvector column (`search_vector`, GIN-indexed) that exists only on
# PostgreSQL, so the model does not declare it: queries name it through SEARCH_VECTOR_SQL.
# Stored, not an expression index, because ranking reads every match's vector, and rebuilding
# it from the text per row made a common word cost seconds over 50,000 items.
SEARCH_DOCUMENT_SQL = ("to_tsvector('english'::regconfig, title || ' ' || authors::text || ' ' || abstract || ' ' "
                       "|| summary_md || ' ' || notes)")
SEARCH_VECTOR_SQL = "literature_items.search_vector"


class LiteratureItem(UUIDPrimaryKey, TimestampMixin, db.Model):
    """One work in the library. Full-text search covers title, authors, abstract, summary and
    notes: a stored tsvector column with a GIN index on PostgreSQL, an FTS5 table kept by
    triggers on SQLite (migrations 0020_literature and 0023_literature_search;
    services/research/literature.py queries both)."""

    __tablename__ = "literature_items"
    __table_args__ = (one_of("type", registry.LITERATURE_TYPES),
                      one_of("read_state", registry.LITERATURE_READ_STATES),
                      one_of("source", registry.LITERATURE_SOURCES))

    type: Mapped[str] = mapped_column(sa.String(16), default="paper")
    title: Mapped[str] = mapped_column(sa.String(1000))
    authors: Mapped[list] = mapped_column(JSONType, default=list)
    year: Mapped[int | None]
    venue: Mapped[str] = mapped_column(sa.String(500), default="")
    url: Mapped[str] = mapped_column(sa.String(2000), default="")
    arxiv_id: Mapped[str | None] = mapped_column(sa.String(40), unique=True)
    doi: Mapped[str | None] = mapped_column(sa.String(255), unique=True)
    openreview_id: Mapped[str | None] = mapped_column(sa.String(80))
    s2_id: Mapped[str | None] = mapped_column(sa.String(80))
    abstract: Mapped[str] = mapped_column(sa.Text, default="")
    summary_md: Mapped[str] = mapped_column(sa.Text, default="")
    relevance_reason_md: Mapped[str] = mapped_column(sa.Text, default="")
    threat_reason_md: Mapped[str] = mapped_column(sa.Text, default="")
    read_state: Mapped[str] = mapped_column(sa.String(16), default="unread", index=True)
    score: Mapped[float | None]
    tags: Mapped[list] = mapped_column(JSONType, default=list)
    source: Mapped[str] = mapped_column(sa.String(24), default="manual")
    notes: Mapped[str] = mapped_column(sa.Text, default="")
    match_key: Mapped[str] = mapped_column(sa.String(400), index=True)
    project_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("projects.id", ondelete="SET NULL"),
                                                         index=True)
    # The invited collaborator who suggested it (SPEC §13). No foreign key: adding one on
    # SQLite rebuilds the table and drops its search triggers; a removed member's row stays.
    proposed_by_member_id: Mapped[uuid.UUID | None]
    feed_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("literature_feeds.id", ondelete="SET NULL"))

    @property
    def first_author(self) -> str:
        return self.authors[0] if self.authors else ""


# The unread queue's order, which search lists in too: the database reads a page from it and
# stops (services/research/literature.py search). SQLite sorts NULLs first, so its DESC is this.
# The search filters follow, so a walk checks them from the index without reading each row.
sa.Index("ix_literature_items_queue", LiteratureItem.score.desc().nulls_last(), LiteratureItem.created_at.desc(),
         LiteratureItem.id, LiteratureItem.project_id, LiteratureItem.read_state, LiteratureItem.type)


class LiteratureFeed(UUIDPrimaryKey, TimestampMixin, db.Model):
    """A subscription polled by the scheduler: an arXiv query or category, or an RSS/Atom
    URL. `last_error` holds why the last poll failed (shown on the library page); a poll that
    fails writes no item."""

    __tablename__ = "literature_feeds"
    __table_args__ = (one_of("kind", registry.LITERATURE_FEED_KINDS),)

    kind: Mapped[str] = mapped_column(sa.String(16))
    query: Mapped[str] = mapped_column(sa.String(2000))
    label: Mapped[str] = mapped_column(sa.String(200), default="")
    project_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("projects.id", ondelete="SET NULL"))
    last_polled_at: Mapped[datetime | None]
    last_error: Mapped[str] = mapped_column(sa.Text, default="")
    items_added: Mapped[int] = mapped_column(default=0)
