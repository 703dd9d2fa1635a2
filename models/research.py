"""The research record (SPEC §11): projects and their narratives, beliefs with their versions
and the updates proposed to them, and typed links between any two records."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry


class Project(UUIDPrimaryKey, TimestampMixin, db.Model):
    """A body of research: its overarching question and everything that belongs to it
    (experiments, beliefs, literature, todos carry `project_id`). Projects are archived,
    never deleted, so a record's `project_id` always names one."""

    __tablename__ = "projects"
    __table_args__ = (one_of("status", registry.PROJECT_STATUSES),)

    slug: Mapped[str] = mapped_column(sa.String(80), unique=True)
    title: Mapped[str] = mapped_column(sa.String(300))
    question: Mapped[str] = mapped_column(sa.Text, default="")
    summary_md: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[str] = mapped_column(sa.String(16), default="active")


class ProjectNarrative(UUIDPrimaryKey, TimestampMixin, db.Model):
    """One version of a project's story. Editing makes a new draft version; publishing one
    archives the version published before it, so a project has at most one published."""

    __tablename__ = "project_narratives"
    __table_args__ = (one_of("status", registry.NARRATIVE_STATUSES),
                      sa.UniqueConstraint("project_id", "version"))

    project_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    version: Mapped[int]
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[str] = mapped_column(sa.String(16), default="draft")
    author_kind: Mapped[str] = mapped_column(sa.String(16))
    author_label: Mapped[str] = mapped_column(sa.String(120), default="")
    published_at: Mapped[datetime | None]


class Belief(UUIDPrimaryKey, TimestampMixin, db.Model):
    """What is believed now, on what evidence. The fields are the current version's; every
    change is a BeliefVersion, so the page can show the history as a timeline of evidence."""

    __tablename__ = "beliefs"
    __table_args__ = (newest_change_index("beliefs"),
                      one_of("status", registry.BELIEF_STATUSES), one_of("confidence", registry.CONFIDENCES))

    number: Mapped[int] = mapped_column(unique=True)
    project_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("projects.id", ondelete="SET NULL"),
                                                         index=True)
    title: Mapped[str] = mapped_column(sa.String(300))
    current_belief: Mapped[str] = mapped_column(sa.Text, default="")
    evidence: Mapped[str] = mapped_column(sa.Text, default="")
    counterevidence: Mapped[str] = mapped_column(sa.Text, default="")
    next_test: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[str] = mapped_column(sa.String(16), default="draft")
    confidence: Mapped[str] = mapped_column(sa.String(16), default="LOW")
    version: Mapped[int] = mapped_column(default=1)


class BeliefVersion(UUIDPrimaryKey, TimestampMixin, db.Model):
    """A belief as it stood after one change: who made it, why, and on which experiment's evidence."""

    __tablename__ = "belief_versions"
    __table_args__ = (one_of("status", registry.BELIEF_STATUSES), one_of("confidence", registry.CONFIDENCES),
                      sa.UniqueConstraint("belief_id", "version"))

    belief_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("beliefs.id", ondelete="CASCADE"), index=True)
    version: Mapped[int]
    title: Mapped[str] = mapped_column(sa.String(300))
    current_belief: Mapped[str] = mapped_column(sa.Text, default="")
    evidence: Mapped[str] = mapped_column(sa.Text, default="")
    counterevidence: Mapped[str] = mapped_column(sa.Text, default="")
    next_test: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[str] = mapped_column(sa.String(16))
    confidence: Mapped[str] = mapped_column(sa.String(16))
    reasoning_md: Mapped[str] = mapped_column(sa.Text, default="")
    author_kind: Mapped[str] = mapped_column(sa.String(16))
    author_label: Mapped[str] = mapped_column(sa.String(120), default="")
    experiment_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("experiments.id", ondelete="SET NULL"))
    proposal_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("belief_proposals.id", ondelete="SET NULL"))


class BeliefProposal(UUIDPrimaryKey, TimestampMixin, db.Model):
    """An update an agent proposed to a belief (after a clean result lands on an experiment
    that tests it). It waits for the owner, who accepts it as is, edits then accepts, or
    rejects it; an agent never changes a belief alone. `based_on_version` is the version the
    agent read, so accepting a proposal made against an older version is refused."""

    __tablename__ = "belief_proposals"
    __table_args__ = (newest_change_index("belief_proposals"),
                      one_of("status", registry.BELIEF_PROPOSAL_STATUSES),
                      one_of("proposed_status", registry.BELIEF_STATUSES),
                      one_of("proposed_confidence", registry.CONFIDENCES))

    belief_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("beliefs.id", ondelete="CASCADE"), index=True)
    experiment_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("experiments.id", ondelete="SET NULL"),
                                                            index=True)
    agent_run_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("agent_runs.id", ondelete="SET NULL"))
    based_on_version: Mapped[int]
    proposed_status: Mapped[str] = mapped_column(sa.String(16))
    proposed_confidence: Mapped[str] = mapped_column(sa.String(16))
    proposed_text: Mapped[str] = mapped_column(sa.Text)
    evidence_md: Mapped[str] = mapped_column(sa.Text, default="")
    reasoning_md: Mapped[str] = mapped_column(sa.Text, default="")
    status: Mapped[str] = mapped_column(sa.String(16), default="pending", index=True)
    resolution_note: Mapped[str] = mapped_column(sa.Text, default="")
    resolved_at: Mapped[datetime | None]


class RecordLink(UUIDPrimaryKey, TimestampMixin, db.Model):
    """A typed edge between two records, read both ways: "#12 tests belief 3" is shown on the
    experiment (outgoing) and on the belief (incoming). Records are named by kind and id, so
    any record kind can be linked without a table per pair; the services check that both ends
    exist before a link is made."""

    __tablename__ = "record_links"
    __table_args__ = (one_of("kind", registry.LINK_KINDS),
                      one_of("source_kind", registry.RECORD_KINDS),
                      one_of("target_kind", registry.RECORD_KINDS),
                      sa.UniqueConstraint("source_kind", "source_id", "target_kind", "target_id", "kind"),
                      sa.CheckConstraint("NOT (source_kind = target_kind AND source_id = target_id)",
                                         name="not_to_itself"),
                      sa.Index("ix_record_links_target", "target_kind", "target_id"))

    source_kind: Mapped[str] = mapped_column(sa.String(16))
    source_id: Mapped[uuid.UUID]
    target_kind: Mapped[str] = mapped_column(sa.String(16))
    target_id: Mapped[uuid.UUID]
    kind: Mapped[str] = mapped_column(sa.String(32))
    note: Mapped[str] = mapped_column(sa.String(2000), default="")
    actor_kind: Mapped[str] = mapped_column(sa.String(16))
    actor_label: Mapped[str] = mapped_column(sa.String(120), default="")
