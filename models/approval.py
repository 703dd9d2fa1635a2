"""Plan versions and the approval requests made from them."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry


class PlanVersion(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "plan_versions"
    __table_args__ = (
        sa.UniqueConstraint("experiment_id", "version", name="uq_plan_versions_experiment_version"),
        one_of("source", registry.PLAN_SOURCES),
    )

    experiment_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    version: Mapped[int]
    markdown: Mapped[str] = mapped_column(sa.Text)
    plan_json: Mapped[dict | None] = mapped_column(JSONType)
    problems: Mapped[list | None] = mapped_column(JSONType)
    estimate: Mapped[dict | None] = mapped_column(JSONType)
    source: Mapped[str] = mapped_column(sa.String(16))
    agent_run_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("agent_runs.id", ondelete="SET NULL"))


class ApprovalRequest(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "approval_requests"
    __table_args__ = (
        newest_change_index("approval_requests"),
        one_of("kind", registry.APPROVAL_KINDS),
        one_of("status", registry.APPROVAL_STATUSES),
        sa.Index("ix_approval_requests_experiment_status", "experiment_id", "status"),
    )

    experiment_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    plan_version_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("plan_versions.id", ondelete="SET NULL"))
    agent_run_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("agent_runs.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(sa.String(32), default="experiment_plan")
    title: Mapped[str] = mapped_column(sa.String(400))
    status: Mapped[str] = mapped_column(sa.String(16), default="pending")
    requested_state: Mapped[str] = mapped_column(sa.String(32), default="plan_pending")
    approved_state: Mapped[str] = mapped_column(sa.String(32), default="approved")
    rejected_state: Mapped[str] = mapped_column(sa.String(32), default="planning")
    checklist: Mapped[dict] = mapped_column(JSONType, default=dict)
    answers: Mapped[dict] = mapped_column(JSONType, default=dict)
    estimated_cost_usd: Mapped[float | None] = mapped_column(sa.Numeric(12, 2, asdecimal=False))
    # The terms the owner approves: the account the plan was estimated for,
    # fixed when the request opens, and the cost cap, fixed when it is approved. Dispatch
    # uses these; changing either needs a new plan and a new approval.
    pod_account: Mapped[str | None] = mapped_column(sa.String(16))
    cost_cap_usd: Mapped[float | None] = mapped_column(sa.Numeric(12, 2, asdecimal=False))
    requested_by: Mapped[str | None] = mapped_column(sa.String(64))
    resolved_by: Mapped[str | None] = mapped_column(sa.String(64))
    resolved_at: Mapped[datetime | None]
    resolved_note: Mapped[str | None] = mapped_column(sa.String(2000))
    deferred_at: Mapped[datetime | None]
    defer_note: Mapped[str | None] = mapped_column(sa.String(2000))
