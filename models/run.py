"""Agent runs: one LLM conversation (or a dispatch) started by the dashboard."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, newest_change_index, one_of
from services.core import registry


class AgentRun(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "agent_runs"
    __table_args__ = (
        newest_change_index("agent_runs"),
        one_of("kind", registry.RUN_KINDS),
        one_of("status", registry.RUN_STATUSES),
        one_of("classification", registry.RUN_CLASSIFICATIONS),
        sa.CheckConstraint("classification_by IS NULL OR classification_by IN ("
                           + ", ".join(f"'{k}'" for k in registry.RUN_CLASSIFIERS) + ")", name="classification_by"),
        sa.CheckConstraint(
            "failure_reason IS NULL OR failure_reason IN ("
            + ", ".join(f"'{r}'" for r in registry.FAILURE_REASONS) + ")",
            name="failure_reason"),
        sa.Index("ix_agent_runs_scope", "scope_kind", "scope_id"),
        sa.Index("ix_agent_runs_status", "status"),
        sa.Index("ix_agent_runs_wake_at", "wake_at"),
        # One live dispatch per experiment, enforced by the database (SPEC §6.4 lesson: a
        # manual re-dispatch and an automatic recovery each launched four pods).
        sa.Index("uq_agent_runs_one_live_dispatch", "scope_id", unique=True,
                 postgresql_where=sa.text("kind = 'experiment' AND status IN ('queued', 'running', 'waiting')"),
                 sqlite_where=sa.text("kind = 'experiment' AND status IN ('queued', 'running', 'waiting')")),
    )

    kind: Mapped[str] = mapped_column(sa.String(16))
    agent: Mapped[str] = mapped_column(sa.String(80))
    provider: Mapped[str] = mapped_column(sa.String(32), default="anthropic")
    model: Mapped[str | None] = mapped_column(sa.String(80))
    status: Mapped[str] = mapped_column(sa.String(24), default="queued")
    request: Mapped[str] = mapped_column(sa.Text, default="")
    plan_md: Mapped[str | None] = mapped_column(sa.Text)
    plan_json: Mapped[dict | None] = mapped_column(JSONType)
    scope_kind: Mapped[str] = mapped_column(sa.String(32), default="experiment")
    scope_id: Mapped[uuid.UUID | None]
    parent_run_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("agent_runs.id", ondelete="SET NULL"), index=True)
    resumes_run_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("agent_runs.id", ondelete="SET NULL"), index=True)
    approval_required: Mapped[bool] = mapped_column(default=False)
    approved_by: Mapped[str | None] = mapped_column(sa.String(64))
    approved_at: Mapped[datetime | None]
    pod_account: Mapped[str | None] = mapped_column(sa.String(16))
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    failure_reason: Mapped[str | None] = mapped_column(sa.String(32))
    input_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    # Prompt-cache tokens, apart from input_tokens (the API reports them apart and prices
    # them apart: a cache write costs more than input, a read a tenth of it).
    cache_creation_input_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    cache_read_input_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    # USD at the model's published price; NULL when the model has no price ("price unknown").
    cost_usd: Mapped[float | None] = mapped_column(sa.Numeric(14, 6, asdecimal=False), default=0)
    turns: Mapped[int] = mapped_column(default=0)
    # The last seq handed out, so appending an event is one UPDATE … RETURNING.
    last_seq: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    heartbeat_at: Mapped[datetime | None]
    wake_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]
    rq_job_id: Mapped[str | None] = mapped_column(sa.String(64))
    # The model conversation so far (redacted), so a parked run resumes from the database.
    conversation: Mapped[list | None] = mapped_column(JSONType)
    # What a `waiting` run waits for: {"children": [ids]} / {"pods": run id} / {"until": iso}.
    waiting_for: Mapped[dict | None] = mapped_column(JSONType)
    cancel_requested_at: Mapped[datetime | None]
    # Whether the run was worth its cost (SPEC §12.3): suggested by the weekly-review agent
    # (`classification_by` "agent") or set by the owner ("owner"), whose choice the agent never overrides.
    classification: Mapped[str] = mapped_column(sa.String(16), default="pending", server_default="pending")
    classification_by: Mapped[str | None] = mapped_column(sa.String(16))

    @property
    def short_id(self) -> str:
        return self.id.hex[:8]

    @property
    def terminal(self) -> bool:
        return self.status in registry.RUN_TERMINAL_STATUSES
