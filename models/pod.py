"""GPU pods, the files they upload, and fleet incidents."""
from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, validates

from models import JSONType, TimestampMixin, UUIDPrimaryKey, db, one_of
from services.core import registry
from services.core.clock import utcnow


class Pod(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "pods"
    __table_args__ = (
        one_of("status", registry.POD_STATUSES),
        sa.CheckConstraint(
            "stop_reason IS NULL OR stop_reason IN ("
            + ", ".join(f"'{r}'" for r in registry.POD_STOP_REASONS) + ")",
            name="stop_reason"),
        sa.Index("ix_pods_status", "status"),
        sa.Index("ix_pods_experiment_id", "experiment_id"),
    )

    agent_run_id: Mapped[uuid.UUID | None] = mapped_column(
        sa.ForeignKey("agent_runs.id", ondelete="SET NULL"), index=True)
    experiment_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    progress_token_hash: Mapped[str | None] = mapped_column(sa.String(64), unique=True)
    run_index: Mapped[int] = mapped_column(default=0)
    attempt: Mapped[int] = mapped_column(default=1)
    provider_pod_id: Mapped[str | None] = mapped_column(sa.String(128), unique=True)
    account: Mapped[str] = mapped_column(sa.String(16))
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    gpu_type_id: Mapped[str | None] = mapped_column(sa.String(120))
    gpu_count: Mapped[int] = mapped_column(default=1)
    cloud_type: Mapped[str | None] = mapped_column(sa.String(16))
    data_center_id: Mapped[str | None] = mapped_column(sa.String(64))
    status: Mapped[str] = mapped_column(sa.String(24), default="deploying")
    exit_code: Mapped[int | None]
    exited_at: Mapped[datetime | None]
    desired_status: Mapped[str | None] = mapped_column(sa.String(24))
    ssh_host: Mapped[str | None] = mapped_column(sa.String(255))
    ssh_user: Mapped[str | None] = mapped_column(sa.String(255))  # RunPod's ssh.*.username
    ssh_port: Mapped[int | None]
    retry_count: Mapped[int] = mapped_column(default=0)
    max_retries: Mapped[int] = mapped_column(default=3)
    blocked_reason: Mapped[str | None] = mapped_column(sa.Text)
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    last_checked_at: Mapped[datetime | None]
    last_heartbeat_at: Mapped[datetime | None]
    last_progress_at: Mapped[datetime | None]
    bootstrap_count: Mapped[int] = mapped_column(default=0)
    progress_pct: Mapped[float | None]
    progress_message: Mapped[str | None] = mapped_column(sa.String(2000))
    # The seq of the post that progress_pct/message come from: an older post arriving late
    # (a pod's retry) updates the heartbeat but not the progress shown.
    progress_seq: Mapped[int | None] = mapped_column(sa.BigInteger)
    stopped_at: Mapped[datetime | None]
    terminated_at: Mapped[datetime | None]
    # When the pod first reached an ended status (registry.POD_ENDED_STATUSES); None while it
    # is live. Its token's grace counts from here. Only Sagan's status changes write it (the
    # validator below), never a pod's own post, so posting cannot keep a token alive.
    ended_at: Mapped[datetime | None]
    stop_reason: Mapped[str | None] = mapped_column(sa.String(16))
    cost_per_hr: Mapped[float | None] = mapped_column(sa.Numeric(10, 4, asdecimal=False))
    adjusted_cost_per_hr: Mapped[float | None] = mapped_column(sa.Numeric(10, 4, asdecimal=False))
    uptime_seconds: Mapped[int] = mapped_column(default=0)
    last_started_at: Mapped[datetime | None]
    metadata_: Mapped[dict | None] = mapped_column("metadata", JSONType)

    @property
    def active(self) -> bool:
        return self.status in registry.POD_ACTIVE_STATUSES

    @validates("status")
    def _record_when_ended(self, _key, status: str) -> str:
        """Stamp ended_at as the status changes, so that no path can end a pod without it.

        The first ended status counts (exited, then stopped 10 minutes later, keeps the exit's
        time); back to live (a restarted container) clears it; stop_requested leaves it as it
        was, since a stop asked of a pod that already exited does not revive its token."""
        if status in registry.POD_ENDED_STATUSES:
            if self.ended_at is None:
                self.ended_at = utcnow()
        elif status in registry.POD_LIVE_STATUSES:
            self.ended_at = None
        return status


class Artifact(UUIDPrimaryKey, TimestampMixin, db.Model):
    __tablename__ = "artifacts"
    __table_args__ = (
        sa.UniqueConstraint("pod_id", "name", name="uq_artifacts_pod_name"),
        sa.Index("ix_artifacts_experiment_id", "experiment_id"),
        one_of("status", registry.ARTIFACT_STATUSES),
        sa.Index("ix_artifacts_processing", "status", postgresql_where=sa.text("status = 'processing'"),
                 sqlite_where=sa.text("status = 'processing'")),
    )

    pod_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("pods.id", ondelete="SET NULL"))
    experiment_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("experiments.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(500))
    content_type: Mapped[str] = mapped_column(sa.String(120))
    # While `processing`: the upload's size and digest (the job's key); after, the stored content's.
    size: Mapped[int] = mapped_column(sa.BigInteger)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    # Empty while `processing`: the upload waits in `pending_content` until the job has
    # redacted it, so a reader that forgets to check the status still reads no secret.
    content: Mapped[bytes] = mapped_column(sa.LargeBinary)
    pending_content: Mapped[bytes | None] = mapped_column(sa.LargeBinary, deferred=True)
    status: Mapped[str] = mapped_column(sa.String(16), default="ready", server_default="ready")
    # Why a `failed` artifact could not be processed, or why a `ready` one is not a figure.
    status_note: Mapped[str | None] = mapped_column(sa.String(500))

    @property
    def readable(self) -> bool:
        return self.status == "ready"


class ArtifactUsage(db.Model):
    """What one pod, or one experiment in all (its pods, analyses and figure uploads), has
    stored as artifacts: the counters the upload budgets are checked against. Each upload
    adds to both rows with a conditional update in its own transaction, so two uploads
    racing at a budget cannot both pass it (services/dispatch/artifacts.py)."""

    __tablename__ = "artifact_usage"
    __table_args__ = (one_of("scope", registry.ARTIFACT_USAGE_SCOPES),)

    scope_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)  # the pod's or the experiment's id
    scope: Mapped[str] = mapped_column(sa.String(16))
    experiment_id: Mapped[uuid.UUID] = mapped_column(
        sa.ForeignKey("experiments.id", ondelete="CASCADE"), index=True)
    files: Mapped[int] = mapped_column(default=0)
    bytes: Mapped[int] = mapped_column(sa.BigInteger, default=0)


class FleetIncident(UUIDPrimaryKey, TimestampMixin, db.Model):
    """Pods of several experiments vanished together; automatic work pauses until resolved."""

    __tablename__ = "fleet_incidents"

    opened_at: Mapped[datetime]
    pods: Mapped[list] = mapped_column(JSONType, default=list)
    resolved_at: Mapped[datetime | None]
    resolved_by: Mapped[str | None] = mapped_column(sa.String(64))


class PodProgressPost(db.Model):
    """One progress post from a pod. `(pod_id, seq)` is unique, so a retried post is stored
    once; posts without a `seq` cannot be deduplicated and are always kept."""

    __tablename__ = "pod_progress_posts"
    __table_args__ = (
        sa.UniqueConstraint("pod_id", "seq", name="uq_pod_progress_posts_pod_seq"),
        sa.Index("ix_pod_progress_posts_pod_created", "pod_id", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    pod_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("pods.id", ondelete="CASCADE"))
    seq: Mapped[int | None] = mapped_column(sa.BigInteger)
    progress_pct: Mapped[float]
    message: Mapped[str] = mapped_column(sa.String(2000), default="")
    milestone: Mapped[str | None] = mapped_column(sa.String(80))
    exit_code: Mapped[int | None]
    metrics: Mapped[dict | None] = mapped_column(JSONType)
    created_at: Mapped[datetime]
