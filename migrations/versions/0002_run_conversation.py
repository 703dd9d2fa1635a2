"""agent runs keep their conversation, what they wait for, and a cancel request

Revision ID: 0002_run_conversation
Revises: 0001_initial
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_run_conversation"
down_revision = "0001_initial"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade():
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("conversation", JSON, nullable=True))
        batch.add_column(sa.Column("waiting_for", JSON, nullable=True))
        batch.add_column(sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_agent_runs_wake_at", ["wake_at"])


def downgrade():
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_index("ix_agent_runs_wake_at")
        batch.drop_column("cancel_requested_at")
        batch.drop_column("waiting_for")
        batch.drop_column("conversation")
