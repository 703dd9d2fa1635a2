"""Commits that code-writing agents made on an experiment's branch (SPEC §5.7).

The worktree lives on one host; these rows are what every other process (the web, the
orchestrator) knows about the code: which commits exist, what they change (the branch's
diff against the default branch, kept with each commit), and whether they were pushed.
"""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import TimestampMixin, UUIDPrimaryKey, db


class CodeCommit(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "code_commits"
    __table_args__ = (
        sa.UniqueConstraint("experiment_id", "sha", name="uq_code_commits_experiment_sha"),
        sa.Index("ix_code_commits_experiment_created", "experiment_id", "created_at"),
    )

    experiment_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    agent_run_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("agent_runs.id", ondelete="SET NULL"))
    agent: Mapped[str | None] = mapped_column(sa.String(80))
    branch: Mapped[str] = mapped_column(sa.String(255))
    sha: Mapped[str] = mapped_column(sa.String(64))
    parent_sha: Mapped[str | None] = mapped_column(sa.String(64))
    base_sha: Mapped[str | None] = mapped_column(sa.String(64))  # where the branch left the default branch
    message: Mapped[str] = mapped_column(sa.Text, default="")
    round: Mapped[int | None] = mapped_column(sa.Integer)
    files_changed: Mapped[int] = mapped_column(sa.Integer, default=0)
    insertions: Mapped[int] = mapped_column(sa.Integer, default=0)
    deletions: Mapped[int] = mapped_column(sa.Integer, default=0)
    diff: Mapped[str] = mapped_column(sa.Text, default="")  # base..sha, capped
    diff_truncated_from: Mapped[int | None] = mapped_column(sa.Integer)  # original size when capped
    pushed_at: Mapped[datetime | None]

    @property
    def short_sha(self) -> str:
        return self.sha[:12]
