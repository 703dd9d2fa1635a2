"""Experiments and the counter that numbers them."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry


class StatusFacts:
    """What follows from an experiment's status and kind alone: shared by the model and by
    the board's plain card rows (services/workflow/experiments.py::BoardCard)."""
    __slots__ = ()

    @property
    def turn(self) -> str:
        return registry.turn_for(self.status)

    @property
    def status_info(self) -> registry.Status:
        return registry.STATUS_BY_NAME[self.status]

    @property
    def owner_turn(self) -> bool:
        return self.status in registry.OWNER_TURN_STATUSES

    @property
    def pod_free(self) -> bool:
        """A survey or infra task: its result is a write-up, and nothing is dispatched."""
        return self.kind in registry.POD_FREE_KINDS

    @property
    def terminal(self) -> bool:
        return self.status in registry.TERMINAL_STATUSES


class Experiment(StatusFacts, UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "experiments"
    __table_args__ = (
        one_of("status", registry.STATUS_NAMES),
        one_of("kind", registry.EXPERIMENT_KINDS),
        one_of("priority", registry.PRIORITIES),
        one_of("assignee_kind", registry.ASSIGNEE_KINDS),
        sa.CheckConstraint(
            "compute_size IS NULL OR compute_size IN ("
            + ", ".join(f"'{c}'" for c in registry.COMPUTE_SIZES) + ")",
            name="compute_size"),
        sa.CheckConstraint(
            "status_before_block IS NULL OR status_before_block IN ("
            + ", ".join(f"'{s}'" for s in registry.STATUS_NAMES) + ")",
            name="status_before_block"),
        sa.CheckConstraint("length(title) BETWEEN 1 AND 300", name="title_length"),
        sa.Index("ix_experiments_status", "status"),
        newest_change_index("experiments"),
    )

    number: Mapped[int] = mapped_column(unique=True)
    title: Mapped[str] = mapped_column(sa.String(300))
    # The title as the owner asked it, kept when a clean result's title (its finding) takes
    # the title's place; NULL while the title is still the question.
    question: Mapped[str | None] = mapped_column(sa.String(300))
    hypothesis: Mapped[str | None] = mapped_column(sa.Text)
    body: Mapped[str | None] = mapped_column(sa.Text)
    plan_md: Mapped[str | None] = mapped_column(sa.Text)
    plan_json: Mapped[dict | None] = mapped_column(JSONType)
    pod_spec: Mapped[dict | list | None] = mapped_column(JSONType)
    config_yaml: Mapped[str | None] = mapped_column(sa.Text)
    status: Mapped[str] = mapped_column(sa.String(32), default="proposed")
    kind: Mapped[str] = mapped_column(sa.String(16), default="experiment")
    compute_size: Mapped[str | None] = mapped_column(sa.String(16))
    priority: Mapped[str] = mapped_column(sa.String(16), default="normal")
    assignee_kind: Mapped[str] = mapped_column(sa.String(16), default="agent")
    tags: Mapped[list] = mapped_column(JSONType, default=list)
    has_clean_result: Mapped[bool] = mapped_column(default=False)
    auto_approve_plan: Mapped[bool] = mapped_column(default=False)
    # A follow-up an agent proposed ("proposed by Claude", SPEC §8.6).
    proposed_by_agent: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    parent_experiment_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="SET NULL"), index=True)
    pod_account: Mapped[str] = mapped_column(sa.String(16), default="local")
    # No foreign key: projects are archived, never deleted, and adding one on SQLite would
    # rebuild the experiments table; the services check the project exists.
    project_id: Mapped[uuid.UUID | None] = mapped_column(index=True)
    # The invited collaborator who proposed it (SPEC §13); the owner's own and Claude's have none.
    proposed_by_member_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("users.id", ondelete="SET NULL"))
    # The owner shared this experiment's agent runs with its project's collaborators (read-only).
    agent_logs_shared: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    cost_cap_usd: Mapped[float | None] = mapped_column(sa.Numeric(12, 2, asdecimal=False))
    git_branch: Mapped[str | None] = mapped_column(sa.String(255))
    git_commit: Mapped[str | None] = mapped_column(sa.String(64))
    status_before_block: Mapped[str | None] = mapped_column(sa.String(32))
    # Denormalised so the board shows "age of last event" without a query per card.
    last_event_at: Mapped[datetime | None]

    parent = relationship("Experiment", remote_side="Experiment.id", lazy="raise_on_sql")


class Counter(db.Model):
    """Named monotonic counters, bumped with a single UPDATE … RETURNING.

    Experiment numbers come from here rather than max(number)+1: the row lock taken by
    the UPDATE serialises concurrent creators, on PostgreSQL and SQLite alike.
    """

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    value: Mapped[int] = mapped_column(sa.BigInteger, default=0)
