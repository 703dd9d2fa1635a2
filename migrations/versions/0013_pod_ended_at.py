"""pods record when they ended (`ended_at`): a pod token's grace counts from the status
change, not from `stopped_at` or `updated_at`, which a posting pod kept moving

Revision ID: 0013_pod_ended_at
Revises: 0012_pod_ssh_user_and_balance
Create Date: 2026-12-02

Pods that have already ended get the best time the old columns know (stopped, terminated,
exited, else last updated); their tokens then run out within the grace as before.
"""
import sqlalchemy as sa
from alembic import op

revision = "0013_pod_ended_at"
down_revision = "0012_pod_ssh_user_and_balance"
branch_labels = None
depends_on = None

ENDED = ("exited", "stopped", "terminated", "vanished", "failed")  # registry.POD_ENDED_STATUSES today


# Plain ALTER TABLE on both backends (SQLite has DROP COLUMN since 3.35), not batch mode: on
# SQLite that copies the table and drops the old one, and with foreign keys on, dropping
# `pods` deletes every row that cascades from a pod (progress posts, metric chunks…).


def upgrade():
    op.add_column("pods", sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True))
    statuses = ", ".join(f"'{status}'" for status in ENDED)
    op.execute(f"UPDATE pods SET ended_at = COALESCE(stopped_at, terminated_at, exited_at, updated_at) "
               f"WHERE status IN ({statuses})")


def downgrade():
    op.drop_column("pods", "ended_at")
