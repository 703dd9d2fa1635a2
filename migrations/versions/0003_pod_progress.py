"""pod progress posts (idempotent by pod and seq); one live dispatch per experiment

Revision ID: 0003_pod_progress
Revises: 0002_run_conversation
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_pod_progress"
down_revision = "0002_run_conversation"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
LIVE_DISPATCH = "kind = 'experiment' AND status IN ('queued', 'running', 'waiting')"


def upgrade():
    op.create_table(
        "pod_progress_posts",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("pod_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("progress_pct", sa.Float(), nullable=False),
        sa.Column("message", sa.String(length=2000), nullable=False),
        sa.Column("milestone", sa.String(length=80), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("metrics", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["pod_id"], ["pods.id"], name=op.f("fk_pod_progress_posts_pod_id_pods"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pod_progress_posts")),
        sa.UniqueConstraint("pod_id", "seq", name="uq_pod_progress_posts_pod_seq"),
    )
    op.create_index("ix_pod_progress_posts_pod_created", "pod_progress_posts", ["pod_id", "created_at"])
    op.create_index("uq_agent_runs_one_live_dispatch", "agent_runs", ["scope_id"], unique=True,
                    postgresql_where=sa.text(LIVE_DISPATCH), sqlite_where=sa.text(LIVE_DISPATCH))


def downgrade():
    op.drop_index("uq_agent_runs_one_live_dispatch", table_name="agent_runs")
    op.drop_index("ix_pod_progress_posts_pod_created", table_name="pod_progress_posts")
    op.drop_table("pod_progress_posts")
